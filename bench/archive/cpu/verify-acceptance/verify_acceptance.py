# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/verify_acceptance.py up to 58d1a74; run it from there.
"""Acceptance of standard against block verification (vLLM's rejection_sample_method) on a pair, at a
temperature > 0, for both samplers (vllm: greedy drafts; rejection: sampled drafts), on the same prompts.

    .venv/bin/python bench/verify_acceptance.py [--models results/models/tiny] [--prompts 64] [--block 8]

Prints one JSON line per (sampler, method): the mean acceptance length (vLLM's token-weighted convention:
1 + accepted drafts / steps), the steps, and the standard error of the per-step mean.
"""
from __future__ import annotations

import argparse
import json
import math

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.datasets import synthetic_rows
from specsweep.dflash.engine import generate
from specsweep.dflash.model import DFlashDrafter
from specsweep.tiny import chat_ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="results/models/tiny")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(f"{args.models}/tokenizer")
    target = AutoModelForCausalLM.from_pretrained(f"{args.models}/target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(f"{args.models}/drafter").eval()
    prompts = [chat_ids(tok, r["turns"][0]) for r in synthetic_rows(args.prompts, 0)]
    eos = target.generation_config.eos_token_id
    stop = set(eos if isinstance(eos, list) else [eos] if eos is not None else []) | {tok.eos_token_id}
    for sampler in ("vllm", "rejection"):
        for method in ("standard", "block"):
            lengths = []
            for seed in range(args.seeds):
                for i in range(0, len(prompts), args.batch):
                    out = generate(target, drafter, prompts[i:i + args.batch], args.block, args.max_new_tokens, stop,
                                   temperature=args.temperature, seed=1000 * seed + i, sampler=sampler,
                                   method=method, pad_id=tok.pad_token_id or 0)
                    lengths += out.acceptance_lengths()
            mean = sum(lengths) / len(lengths)
            sd = math.sqrt(sum((x - mean) ** 2 for x in lengths) / (len(lengths) - 1))
            print(json.dumps({"sampler": sampler, "method": method, "block": args.block,
                              "temperature": args.temperature, "acceptance_length": round(mean, 4),
                              "steps": len(lengths), "se": round(sd / math.sqrt(len(lengths)), 4)}), flush=True)


if __name__ == "__main__":
    main()

"""Is the prefix model of `specsweep tune` biased? Are the drafts of a block of b' the first b' - 1 drafts of
a block of b?

A DFlash drafter is not causal inside its block: every position attends to every other, mask tokens
included, so a shorter block can draft different tokens. At the same contexts (every position of each
prompt's greedy answer, the committed text any lossless decode produces) this drafts with every block
b' <= b and reports, per b': the share of contexts whose first b' - 1 drafts equal block b's, and the mean
acceptance length (counting the bonus token) of b''s own drafts against the prefix model's (block b's
drafts cut at b' - 1). Both decode the same contexts, so the difference is the bias alone.

    .venv/bin/python bench/prefix_bias.py [--models results/models/tiny] [--prompts 16] [--block 8]
"""
from __future__ import annotations

import argparse
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.datasets import synthetic_rows
from specsweep.dflash.engine import generate
from specsweep.dflash.model import DFlashDrafter
from specsweep.tiny import chat_ids


def accepted(drafts: list[int], truth: list[int]) -> int:
    """Drafts accepted by a greedy target whose next tokens are `truth`: the matching prefix."""
    n = 0
    for d, t in zip(drafts, truth):
        if d != t:
            break
        n += 1
    return n


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="results/models/tiny")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--block", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(f"{args.models}/target")
    target = AutoModelForCausalLM.from_pretrained(f"{args.models}/target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(f"{args.models}/drafter")
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    blocks = range(2, args.block + 1)
    same = {b: 0 for b in blocks}
    own_len = {b: 0 for b in blocks}
    prefix_len = {b: 0 for b in blocks}
    contexts = 0
    for row in synthetic_rows(args.prompts, 0):
        prompt = chat_ids(tok, row["turns"][0])
        answer = generate(target, None, [prompt], 1, args.max_new_tokens, stop_ids={tok.eos_token_id}).sequences[0]
        seq = prompt + answer
        out = target(input_ids=torch.tensor([seq]), output_hidden_states=True)
        states = drafter.context_states(out.hidden_states)
        # each context: the prompt and the first i answer tokens committed, answer[i] the block's first token
        for i in range(len(answer) - 1):
            ctx = len(prompt) + i                                     # committed tokens before answer[i]
            ctx_kv = drafter.context_kv(states[:, :ctx], torch.arange(ctx)[None])
            truth = answer[i + 1:]
            drafts = {}
            for b in blocks:
                block = torch.full((1, b), drafter.mask_token_id)
                block[0, 0] = answer[i]
                hidden = drafter(embed(block), torch.arange(ctx, ctx + b)[None], ctx_kv,
                                 torch.ones(1, ctx, dtype=torch.bool))
                drafts[b] = head(hidden[:, 1:]).argmax(-1)[0].tolist()
            full = drafts[args.block]
            for b in blocks:
                same[b] += drafts[b] == full[: b - 1]
                own_len[b] += 1 + accepted(drafts[b], truth)
                prefix_len[b] += 1 + accepted(full[: b - 1], truth)
            contexts += 1
    report = {"contexts": contexts, "block": args.block, "per_block": [
        {"block": b, "k": b - 1, "drafts_equal_block_prefix": same[b] / contexts,
         "al_own_drafts": own_len[b] / contexts, "al_prefix_model": prefix_len[b] / contexts,
         "prefix_model_error": prefix_len[b] / own_len[b] - 1} for b in blocks]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

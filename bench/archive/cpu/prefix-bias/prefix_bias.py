# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/prefix_bias.py up to 58d1a74; run it from there.
"""Is the prefix model of `specsweep tune` biased, and why?

The model predicts AL at K' from the steps of a decode at K: each step would have accepted
min(accepted, K'). Two things can break it, and this separates them on the embedded pair:
- the drafts: a DFlash drafter is not causal inside its block (every position attends to every other, mask
  tokens included), so a block of b' may not draft the first b' - 1 tokens a block of b drafts;
- where steps start: a decode at K' starts its steps at other positions than one at K.

At every position of each prompt's greedy answer (the text any lossless decode commits) it drafts with
every block b' <= b, then replays greedy decoding along the answer three ways, per b':
- `al_prefix_model`: the model, from the replay at block b (1 + mean of min(accepted, b' - 1));
- `al_truncated_drafts`: a replay at b' whose drafts are block b's, cut to b' - 1 (only where steps start
  differs from the model);
- `al_own_drafts`: a replay at b' with its own drafts (what the engine and vLLM do).
`drafts_equal_block_prefix` is the share of positions whose b' drafts are block b's first b' - 1.

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
    answers, drafts = [], []          # per prompt: its greedy answer; per position, {block: drafts}
    for row in synthetic_rows(args.prompts, 0):
        prompt = chat_ids(tok, row["turns"][0])
        answer = generate(target, None, [prompt], 1, args.max_new_tokens, stop_ids={tok.eos_token_id}).sequences[0]
        out = target(input_ids=torch.tensor([prompt + answer]), output_hidden_states=True)
        states = drafter.context_states(out.hidden_states)
        at = []
        for i in range(len(answer) - 1):          # committed: the prompt and answer[:i]; answer[i] opens the block
            ctx = len(prompt) + i
            ctx_kv = drafter.context_kv(states[:, :ctx], torch.arange(ctx)[None])
            at.append({})
            for b in blocks:
                block = torch.full((1, b), drafter.mask_token_id)
                block[0, 0] = answer[i]
                hidden = drafter(embed(block), torch.arange(ctx, ctx + b)[None], ctx_kv,
                                 torch.ones(1, ctx, dtype=torch.bool))
                at[-1][b] = head(hidden[:, 1:]).argmax(-1)[0].tolist()
        answers.append(answer)
        drafts.append(at)

    def replay(pick) -> list[int]:
        """Drafts accepted per step of a greedy decode along every answer; pick(position drafts) -> drafts."""
        out = []
        for answer, at in zip(answers, drafts):
            i = 0
            while i < len(answer) - 1:
                n = accepted(pick(at[i]), answer[i + 1:])
                out.append(n)
                i += n + 1
        return out

    full = replay(lambda d: d[args.block])
    positions = [d for at in drafts for d in at]
    rows = []
    for b in blocks:
        own = replay(lambda d: d[b])
        cut = replay(lambda d: d[args.block][: b - 1])
        model = 1 + sum(min(n, b - 1) for n in full) / len(full)
        al_own = 1 + sum(own) / len(own)
        rows.append({"block": b, "k": b - 1,
                     "drafts_equal_block_prefix": sum(d[b] == d[args.block][: b - 1] for d in positions) / len(positions),
                     "al_prefix_model": model, "al_truncated_drafts": 1 + sum(cut) / len(cut), "al_own_drafts": al_own,
                     "prefix_model_error": model / al_own - 1})
    print(json.dumps({"prompts": len(answers), "positions": len(positions), "block": args.block, "per_block": rows},
                     indent=1))


if __name__ == "__main__":
    main()

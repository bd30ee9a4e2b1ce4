"""`specsweep trace`: one prompt, block by block: drafted tokens against the target's."""
from __future__ import annotations

from specsweep.core import layout


def add(sub) -> None:
    t = sub.add_parser("trace", help="one prompt, block by block: drafted tokens against the target's")
    t.add_argument("--target", default=str(layout.tiny_pair("results").target))
    t.add_argument("--drafter", default=str(layout.tiny_pair("results").drafter))
    t.add_argument("--prompt", default="Ada has 12 apples. Ada gets 3 more. How many apples does Ada have now?")
    t.add_argument("--block-size", type=int, default=None, help="default: the drafter's")
    t.add_argument("--max-new-tokens", type=int, default=48)
    t.add_argument("--thinking", action="store_true")
    t.set_defaults(fn=main)


def main(args) -> int:
    """For one prompt, every block: what the drafter proposed against what the target chose."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.models.dflash.engine import generate
    from specsweep.models.dflash.model import DFlashDrafter

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(args.target)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(args.drafter)
    text = tok.apply_chat_template([{"role": "user", "content": args.prompt}], add_generation_prompt=True,
                                   enable_thinking=args.thinking, tokenize=False)
    ids = tok(text, add_special_tokens=False).input_ids
    block = args.block_size or drafter.block_size
    out = generate(target, drafter, [list(ids)], block, args.max_new_tokens, stop_ids={tok.eos_token_id})
    show = lambda t: repr(tok.decode(t))  # noqa: E731
    for i, step in enumerate(out.steps):
        drafted, chosen, n = step.drafted[0], step.target[0], step.accepted[0]
        print(f"step {i:3d}  accepted {n}/{block - 1}")
        print(f"   drafted {show(drafted):40s} {drafted}")
        print(f"   target  {show(chosen[:-1]):40s} {chosen[:-1]}")
    lengths = out.acceptance_lengths()
    print(f"output: {show(out.sequences[0])}")
    print(f"mean acceptance length {sum(lengths) / len(lengths):.2f} over {len(lengths)} steps (block {block})")
    return 0

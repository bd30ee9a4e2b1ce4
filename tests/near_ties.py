"""Greedy decodes of different shapes (batched or alone, block b or 1, static or HF cache, ours or the authors')
sum their floats in different orders, so they are not bit-equal on every CPU: where the target's top two
logits nearly tie, its argmax, and every token after it, may differ. These helpers compare two greedy
decodes only up to the reference's first near-tie (docs/development.md, "Which equalities the suite relies
on"), and a proposer that knows the reference, so that acceptance is exact by construction.
"""
import warnings

import torch

MARGIN = 1e-2
"""Top-1 minus top-2 logit below which a step is a near-tie. Float32 logits of the same model computed
through different shapes differ by about 1e-5 here; a margin above this one has the same argmax on any CPU."""


def reference(target, prompts, max_new, stop=None):
    """transformers' own greedy decoding, one prompt at a time (no padding effects), cut after `stop`."""
    out = []
    for p in prompts:
        ids = target.generate(torch.tensor([p]), max_new_tokens=max_new, do_sample=False,
                              eos_token_id=stop, pad_token_id=0, min_new_tokens=0)[0, len(p):].tolist()
        if stop is not None and stop in ids:
            ids = ids[: ids.index(stop) + 1]
        out.append(ids)
    return out


@torch.no_grad()
def margins(target, prompt, tokens) -> list[float]:
    """Per new token, the target's top-1 minus top-2 logit where it chose it: one teacher-forced float32
    forward of prompt + tokens."""
    logits = target(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1: len(prompt) + len(tokens) - 1]
    top = logits.float().topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def clear_steps(target, prompt, tokens, bound=MARGIN) -> int:
    """How many leading tokens the target chose by more than `bound`; warns about the near-ties."""
    low = [i for i, m in enumerate(margins(target, prompt, tokens)) if m <= bound]
    if low:
        warnings.warn(f"near-tie steps {low} (margin <= {bound}) in the reference for prompt {prompt[:8]}...: "
                      f"compared up to step {low[0]} only")
    return low[0] if low else len(tokens)


def assert_same_greedy(target, prompts, got, ref, bound=MARGIN) -> list[int]:
    """Each row of `got` equals `ref` up to ref's first near-tie, and entirely (length too) where it has none.
    Returns, per row, how many tokens were compared."""
    clear = [clear_steps(target, p, r, bound) for p, r in zip(prompts, ref)]
    for row, (g, r, n) in enumerate(zip(got, ref, clear)):
        assert g[:n] == r[:n], f"row {row} differs within its first {n} clear steps"
        if n == len(r):
            assert g == r, f"row {row}"
    return clear


def oracle(ref, prompts, right=None):
    """A proposer that knows the greedy continuations `ref`; with `right` (per row), only a row's first
    right[row] drafts are true, the others wrong. Past a row's reference it drafts padding."""
    def propose(block, positions):
        t, drafts = block.shape[1], []
        for row, p in enumerate(prompts):
            start = int(positions[row, 0]) - len(p)           # index in the continuation of block slot 0
            true = (ref[row][start + 1: start + t] + [0] * t)[: t - 1]
            n = t if right is None else right[row]
            drafts.append(true[:n] + [(x + 1) % 300 for x in true[n:]])
        return torch.tensor(drafts, device=block.device)
    return propose


def assert_oracle_acceptance(out, row, right, clear):
    """With `oracle(ref, prompts, right)`: every step of `row` accepted min(right, drafts in the block) while
    its block lay within the row's `clear` steps, and the row stopped the step its last token came."""
    done, lengths = 1, []                                     # the prefill commits the first token
    for s in (s for s in out.steps if row in s.live):
        t = len(s.drafted[row]) + 1
        if done + t > clear:                                  # the target's choices here may differ
            return
        expected = t - 1 if right is None else min(right, t - 1)
        assert s.accepted[row] == expected, (row, len(lengths), s.accepted)
        lengths.append(s.committed[row])
        done += s.committed[row]
    assert done - lengths[-1] < len(out.sequences[row]) <= done, (row, lengths)     # no step after its last

"""The engine against the authors' reference `dflash_generate` (PyPI `dflash`, installed --no-deps), on
the same trained tiny weights: the same tokens and the same acceptance length at every step, the budget's
last, shrunk block included, up to the first near-tie of the target's choices or of our drafter's drafts
(near_ties.py): two implementations sum in different orders."""
import warnings

import pytest
import torch
from near_ties import MARGIN, assert_same_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.grid.datasets import synthetic_rows
from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter
from specsweep.models.tiny import chat_ids

reference = pytest.importorskip("dflash.model", reason="the reference `dflash` package is not installed")


@pytest.mark.parametrize("block_size,thinking", [(4, False), (4, True), (8, False), (8, True),
                                                  (3, False), (5, False), (16, False)])
def test_same_tokens_and_acceptance_as_dflash_generate(tiny_results, block_size, thinking):
    """Every step, the last one too: where the budget ends mid-block, both shrink the block to it."""
    models = tiny_results / "models" / "tiny"
    tok = AutoTokenizer.from_pretrained(models / "target")
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    ours = DFlashDrafter.from_pretrained(models / "drafter")
    theirs = reference.DFlashDraftModel.from_pretrained(models / "drafter", dtype=torch.float32).eval()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    draft_margins = drafter_margins(ours, target.get_output_embeddings())
    compared, shrunk = [], 0
    for row in synthetic_rows(4, seed=3):
        prompt = chat_ids(tok, row["turns"][0], thinking)
        for max_new in (96, 11, 23):                          # a stop token, then budgets that end mid-block
            ref_tokens, ref_lengths = _reference(theirs, target, prompt, max_new, eos, block_size)
            draft_margins.clear()
            got = generate(target, ours, [prompt], block_size, max_new, stop_ids={eos})
            [clear] = assert_same_greedy(target, [prompt], got.sequences, [ref_tokens])
            steps = _clear_steps(ref_lengths, clear, draft_margins)
            assert _produced_per_step(got)[:steps] == ref_lengths[:steps]
            if steps == len(ref_lengths):
                assert len(got.steps) == steps
            if max_new == 96:      # answers end far inside this budget
                assert ref_tokens[-1] == eos
            shrunk += _shrunk_steps(ref_lengths, max_new, block_size)
            compared += ref_lengths[:steps]
    assert max(compared) > 1   # a trained drafter: the comparison covers accepted drafts, not only bonus tokens
    assert shrunk > 0          # and blocks that the budget shrank


def drafter_margins(drafter, head) -> list[float]:
    """Filled as the drafter drafts (one row): per step, each draft's top-1 minus top-2 logit. Two
    implementations' drafts agree on any CPU only where it is clear (near_ties.py)."""
    found = []

    def hook(module, args, hidden):
        top = head(hidden[0, 1:]).float().topk(2, dim=-1).values
        found.append((top[:, 0] - top[:, 1]).tolist())
    drafter.register_forward_hook(hook)
    return found


def _clear_steps(ref_lengths, clear, draft_margins):
    """How many leading steps verified only tokens before the target's first near-tie, and drafted clearly
    the drafts that decided their acceptance (the accepted ones and the first refused)."""
    done = 1                                                  # the prefill's token
    for step, (n, m) in enumerate(zip(ref_lengths, draft_margins)):
        if min(m[:n]) <= MARGIN or done + n > clear:
            warnings.warn(f"step {step}: a near-tie (draft margins {m[:n]}, clear tokens {clear}): compared "
                          f"up to it only")
            return step
        done += n
    return len(ref_lengths)


def _reference(model, target, prompt, max_new, eos, block_size):
    """dflash_generate's new tokens and per-step lengths (the tokens each step produced, clipped at a stop
    token or the budget); its stats path times with torch.cuda.synchronize, a no-op here."""
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        stats = reference.dflash_generate(model, target, torch.tensor([prompt]), max_new, [eos],
                                          block_size=block_size, return_stats=True)
    finally:
        torch.cuda.synchronize = sync
    return stats.output_ids[0, len(prompt):].tolist(), stats.acceptance_lengths


def _shrunk_steps(ref_lengths, max_new, block_size):
    """Steps that began with fewer than block_size - 1 tokens of budget left: dflash_generate verified a
    shorter block there (the drafter then drafts differently, so a full block would not match)."""
    left, shrunk = max_new - 1, 0                           # the prefill's token is not a step
    for n in ref_lengths:
        shrunk += left < block_size - 1
        left -= n
    return shrunk


def _produced_per_step(out):
    """Tokens each of our steps added to row 0 (the prefill's first token is not a step)."""
    total, produced = len(out.sequences[0]) - 1, []
    for step in out.steps:
        n = min(step.committed[0], total - sum(produced))
        produced.append(n)
    return produced

"""The engine against the authors' reference `dflash_generate` (PyPI `dflash`, installed --no-deps), on
the same trained tiny weights: the same tokens and the same acceptance length at every step."""
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.datasets import synthetic_rows
from specsweep.dflash.engine import generate
from specsweep.dflash.model import DFlashDrafter
from specsweep.tiny import chat_ids

reference = pytest.importorskip("dflash.model", reason="the reference `dflash` package is not installed")


@pytest.mark.parametrize("block_size", [4, 8])
@pytest.mark.parametrize("thinking", [False, True])
def test_same_tokens_and_acceptance_as_dflash_generate(tiny_results, block_size, thinking):
    models = tiny_results / "models" / "tiny"
    tok = AutoTokenizer.from_pretrained(models / "target")
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    ours = DFlashDrafter.from_pretrained(models / "drafter")
    theirs = reference.DFlashDraftModel.from_pretrained(models / "drafter", dtype=torch.float32).eval()
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    accepted_any = False
    for row in synthetic_rows(4, seed=3):
        prompt = chat_ids(tok, row["turns"][0], thinking)
        for max_new in (96, 11):                                   # a stop token, then a cut mid-block
            ref = reference.dflash_generate(theirs, target, torch.tensor([prompt]), max_new, [eos],
                                            block_size=block_size, return_stats=False)
            got = generate(target, ours, [prompt], block_size, max_new, stop_ids={eos})
            assert got.sequences[0] == ref[0, len(prompt):].tolist()
            # the reference counts the tokens each step produced (clipped at a stop token or the budget)
            ref_lengths = _reference_lengths(theirs, target, prompt, max_new, eos, block_size)
            ours_lengths = _produced_per_step(got)
            assert ours_lengths == ref_lengths
            accepted_any |= max(ours_lengths) > 1
    assert accepted_any        # a trained drafter: the comparison covers accepted drafts, not only bonus tokens


def _reference_lengths(model, target, prompt, max_new, eos, block_size):
    """dflash_generate's per-step lengths; its stats path times with torch.cuda.synchronize, a no-op here."""
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a, **k: None
    try:
        stats = reference.dflash_generate(model, target, torch.tensor([prompt]), max_new, [eos],
                                          block_size=block_size, return_stats=True)
    finally:
        torch.cuda.synchronize = sync
    return stats.acceptance_lengths


def _produced_per_step(out):
    """Tokens each of our steps added to row 0 (the prefill's first token is not a step)."""
    total, produced = len(out.sequences[0]) - 1, []
    for step in out.steps:
        n = min(step.committed[0], total - sum(produced))
        produced.append(n)
    return produced

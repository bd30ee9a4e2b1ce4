"""The static-cache step (the one a CUDA graph replays) decodes exactly as the target would, on CPU here: up to
the target's first near-tie (near_ties.py)."""
import pytest
import torch
from near_ties import assert_oracle_acceptance, assert_same_greedy, oracle, reference
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.grid.datasets import synthetic_rows
from specsweep.models.dflash.model import DFlashDrafter
from specsweep.models.dflash.static import StaticPair
from specsweep.models.tiny import chat_ids


@pytest.fixture(scope="module")
def pair(random_results):
    """An untrained pair of the tiny pair's shapes and tokenizer: the static step must decode as the HF cache
    does for any weights. Its random target rarely writes <|im_end|>: the stop token is one it does write."""
    models = random_results / "models" / "tiny"
    tok = AutoTokenizer.from_pretrained(models / "target")
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(models / "drafter")
    prompts = [chat_ids(tok, r["turns"][0], thinking=i % 2 == 1) for i, r in enumerate(synthetic_rows(3, seed=5))]
    stop = reference(target, prompts[:1], 24)[0][20]          # a token the first row really emits, mid-answer
    return target, drafter, prompts, stop


@pytest.mark.parametrize("block_size", [1, 4, 8])
@pytest.mark.parametrize("batch", [1, 3])
def test_static_step_equals_transformers_greedy(pair, block_size, batch):
    target, drafter, prompts, stop = pair
    prompts = prompts[:batch]
    static = StaticPair(target, drafter if block_size > 1 else None, batch, max_len=128, block_size=block_size)
    for max_new in (32, 13):                                  # to the stop token (row 0); cut mid-block
        out = static.generate(prompts, max_new, stop_ids={stop})
        assert_same_greedy(target, prompts, out.sequences, reference(target, prompts, max_new, stop))


def test_rows_commit_their_own_accepted_prefix(pair):
    """Unlike the HF-cache engine, a batch row is not held back to the batch's shortest acceptance: with
    drafts whose first 7, 2 and 0 are right, the rows accept 7, 2 and 0 a step, to their stop token or budget."""
    target, drafter, prompts, stop = pair
    right = [7, 2, 0]
    ref = reference(target, prompts, 32, stop)
    static = StaticPair(target, drafter, 3, max_len=128, block_size=8)
    propose = oracle(ref, prompts, right)
    static.draft = lambda block, pos, start: propose(block, pos)     # instead of the drafter's greedy drafts
    out = static.generate(prompts, 32, stop_ids={stop})
    clear = assert_same_greedy(target, prompts, out.sequences, ref)
    for row in range(3):
        assert_oracle_acceptance(out, row, right[row], clear[row])

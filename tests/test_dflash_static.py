"""The static-cache step (the one a CUDA graph replays) decodes exactly as the target would, on CPU here."""
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specsweep.datasets import synthetic_rows
from specsweep.dflash.engine import generate
from specsweep.dflash.model import DFlashDrafter
from specsweep.dflash.static import StaticPair
from specsweep.tiny import chat_ids


@pytest.fixture(scope="module")
def pair(tiny_results):
    models = tiny_results / "models" / "tiny"
    tok = AutoTokenizer.from_pretrained(models / "target")
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(models / "drafter")
    prompts = [chat_ids(tok, r["turns"][0], thinking=i % 2 == 1) for i, r in enumerate(synthetic_rows(3, seed=5))]
    return target, drafter, prompts, tok.convert_tokens_to_ids("<|im_end|>")


def transformers_greedy(target, prompt, max_new, stop):
    ids = target.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False, eos_token_id=stop,
                          pad_token_id=0)[0, len(prompt):].tolist()
    return ids[: ids.index(stop) + 1] if stop in ids else ids


@pytest.mark.parametrize("block_size", [1, 4, 8])
@pytest.mark.parametrize("batch", [1, 3])
def test_static_step_equals_transformers_greedy(pair, block_size, batch):
    target, drafter, prompts, eos = pair
    prompts = prompts[:batch]
    static = StaticPair(target, drafter if block_size > 1 else None, batch, max_len=256, block_size=block_size)
    for max_new in (96, 13):                                  # to the stop token; cut mid-block
        out = static.generate(prompts, max_new, stop_ids={eos})
        assert out.sequences == [transformers_greedy(target, p, max_new, eos) for p in prompts]


def test_rows_commit_their_own_accepted_prefix(pair):
    """Unlike the HF-cache engine, a batch row is not held back to the batch's shortest acceptance."""
    target, drafter, prompts, eos = pair
    static = StaticPair(target, drafter, 3, max_len=256, block_size=8)
    out = static.generate(prompts, 96, stop_ids={eos})
    alone = [generate(target, drafter, [p], 8, 96, stop_ids={eos}) for p in prompts]
    for row in range(3):
        steps = [s.accepted[row] + 1 for s in out.steps if row in s.live]
        assert steps == alone[row].acceptance_lengths()        # the same drafts and acceptance as decoding alone
    assert len(out.steps) < sum(len(a.steps) for a in alone)

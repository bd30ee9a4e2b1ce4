"""The DFlash engine is lossless: greedy output equals transformers' generate, token for token up to the
target's first near-tie (near_ties.py); a proposer that knows the answer makes acceptance exact. On an untrained
pair: none of this needs trained weights."""
import re

import pytest
import torch
from near_ties import assert_oracle_acceptance, assert_same_greedy, oracle, reference
from transformers import AutoModelForCausalLM

from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter

PROMPTS = [[5, 17, 42, 99, 23, 8], [61, 7, 7, 300], [12, 250, 33, 90, 4, 71, 18, 240, 9]]
N = 24


@pytest.fixture(scope="module")
def pair(random_results):
    """An untrained pair of the tiny pair's shapes (conftest's random_results): losslessness and the commits
    hold for any weights; its drafts are mostly wrong, the oracle's are right by construction."""
    torch.manual_seed(0)
    target = AutoModelForCausalLM.from_pretrained(random_results / "models" / "tiny" / "target",
                                                  dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(random_results / "models" / "tiny" / "drafter")
    return target, drafter


@pytest.mark.parametrize("block_size", [1, 2, 4, 8])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_equals_transformers_generate(pair, block_size, batch):
    target, drafter = pair
    prompts = PROMPTS[:batch]
    out = generate(target, drafter, prompts, block_size, N)
    assert_same_greedy(target, prompts, out.sequences, reference(target, prompts, N))
    assert all(1 <= a <= block_size for a in out.acceptance_lengths())


def test_stop_tokens_and_max_new_tokens_are_exact(pair):
    target, drafter = pair
    ref = reference(target, PROMPTS, N)
    stop = ref[0][5]                                  # a token the first prompt really emits
    out = generate(target, drafter, PROMPTS, 4, N, stop_ids={stop})
    clear = assert_same_greedy(target, PROMPTS, out.sequences, reference(target, PROMPTS, N, stop=stop))
    if clear[0] > ref[0].index(stop):                 # the stop token came before any near-tie
        assert out.sequences[0][-1] == stop and len(out.sequences[0]) == ref[0].index(stop) + 1
    assert [len(s) for s in generate(target, drafter, PROMPTS, 8, 7).sequences] == [7, 7, 7]


@pytest.mark.parametrize("right", [None, 2])
def test_accepted_drafts_are_committed_and_the_cache_cropped(pair, right):
    """Every draft right (7 accepted + the bonus per step), or only the first 2 (3 per step)."""
    target, _ = pair
    prompts = [PROMPTS[0]]
    ref = reference(target, prompts, N + 16)
    out = generate(target, None, prompts, 8, N, propose=oracle(ref, prompts, None if right is None else [right]))
    [clear] = assert_same_greedy(target, prompts, out.sequences, reference(target, prompts, N))
    assert_oracle_acceptance(out, 0, right, clear)


def test_every_row_commits_its_own_accepted_prefix(pair):
    """A batch row keeps the drafts it accepted, not the batch's shortest prefix: with a proposer whose first
    7, 2 and 0 drafts are right, the rows accept 7, 2 and 0 drafts a step, and end the step their budget fills."""
    target, _ = pair
    right = [7, 2, 0]
    ref = reference(target, PROMPTS, N + 16)
    out = generate(target, None, PROMPTS, 8, N, propose=oracle(ref, PROMPTS, right))
    clear = assert_same_greedy(target, PROMPTS, out.sequences, reference(target, PROMPTS, N))
    for row in range(len(PROMPTS)):
        assert_oracle_acceptance(out, row, right[row], clear[row])
    assert any(len({s.committed[r] for r in s.live}) > 1 for s in out.steps)   # rows really differ


@pytest.fixture(scope="module")
def untrained_pair(tmp_path_factory):
    """A randomly initialised tiny Qwen3 target and drafter: their next-token distributions are near uniform,
    unlike the trained target's, which is nearly deterministic whatever the seed."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from specsweep.models.tiny import init_drafter

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                      tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("untrained") / "drafter"
    init_drafter(cfg, mask_token_id=511, out=path)
    return Qwen3ForCausalLM(cfg).eval(), DFlashDrafter.from_pretrained(path)


@pytest.mark.parametrize("block_size", [1, 4])
def test_sampling_is_reproducible_by_seed(untrained_pair, block_size):
    """At temperature > 0 every committed token is drawn with a generator seeded by `seed`: a seed gives the
    same tokens again, and on a target with entropy, different seeds give different tokens."""
    target, drafter = untrained_pair

    def sample(seed):
        return generate(target, drafter, [PROMPTS[1]], block_size, 16, temperature=0.8, seed=seed).sequences[0]

    by_seed = {seed: sample(seed) for seed in (3, 4, 5, 6)}
    assert sample(3) == by_seed[3]
    assert len({tuple(s) for s in by_seed.values()}) == len(by_seed)


def test_checkpoint_round_trip(pair, tmp_path):
    _, drafter = pair
    drafter.save_pretrained(tmp_path / "d")
    again = DFlashDrafter.from_pretrained(tmp_path / "d")
    assert again.config == drafter.config
    assert all(torch.equal(again.state_dict()[k], v) for k, v in drafter.state_dict().items())


def test_trace_prints_every_block(random_results):
    """One drafted and one target line per step, as many steps as the summary counts: how many there are
    depends on what the pair accepts and where it stops."""
    from helpers import BIN, run

    models = random_results / "models" / "tiny"
    out = run([str(BIN / "specsweep"), "trace", "--target", str(models / "target"), "--drafter",
               str(models / "drafter"), "--max-new-tokens", "10", "--block-size", "4"], timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    [steps] = re.findall(r"mean acceptance length \d+\.\d\d over (\d+) steps \(block 4\)", out.stdout)
    assert out.stdout.count("   drafted ") == out.stdout.count("   target  ") == int(steps) >= 1
    assert len(re.findall(r"accepted [0-3]/3", out.stdout)) == int(steps)

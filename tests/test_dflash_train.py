"""The training forward and the decode-time forward agree, and the drafter's training does what holds for any
pair: on an untrained pair of the tiny pair's shapes (the fast tier's `random_results`), never a training
outcome."""
import pytest
import torch
from near_ties import assert_same_greedy
from transformers import AutoModelForCausalLM

from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter
from specsweep.models.dflash.train import block_hidden, drafter_loss, slot_weights, target_pass, train_drafter
from specsweep.models.tiny import init_drafter


def load(results):
    torch.manual_seed(0)
    target = AutoModelForCausalLM.from_pretrained(results / "models" / "tiny" / "target",
                                                  dtype=torch.float32).eval()
    return target, results / "models" / "tiny" / "drafter"


@pytest.fixture(scope="module")
def pair(random_results):
    """The forwards' agreement, the loss's masking and what training does hold for any weights: an untrained
    pair."""
    return load(random_results)


def decode_time_hidden(drafter, target, ids, hidden_states, a):
    """What one decode step computes for an anchor at a: context 0..a-1, block [x_a, MASK...] at a.."""
    b = drafter.block_size
    ctx_kv = drafter.context_kv(drafter.context_states(tuple(h[:, :a] for h in hidden_states)),
                                torch.arange(a)[None])
    block = torch.full((1, b), drafter.mask_token_id)
    block[0, 0] = ids[0, a]
    return drafter(target.get_input_embeddings()(block), torch.arange(a, a + b)[None], ctx_kv,
                   torch.ones(1, a, dtype=torch.bool))


@torch.no_grad()
def test_training_forward_equals_the_decode_step(pair):
    target, path = pair
    drafter = DFlashDrafter.from_pretrained(path)
    ids = torch.randint(10, 300, (1, 40), generator=torch.Generator().manual_seed(1))
    hidden_states, _ = target_pass(target, ids)
    anchors = torch.tensor([[5, 17, 30]])
    trained = block_hidden(drafter, target.get_input_embeddings(), ids, hidden_states, anchors)
    for j, a in enumerate(anchors[0].tolist()):
        torch.testing.assert_close(trained[0, j], decode_time_hidden(drafter, target, ids, hidden_states, a)[0])
    # the test has teeth: the off-by-one (context including the anchor's own feature) is visibly different
    wrong = decode_time_hidden(drafter, target, ids, hidden_states, 18)[0]
    assert not torch.allclose(trained[0, 1], wrong, atol=1e-4)


def test_slot_weights_decay_with_position():
    w = slot_weights(8, 4.0)
    assert len(w) == 7 and w[0] == 1.0 and torch.all(w[1:] < w[:-1])


def test_labels_past_the_end_are_masked(pair):
    target, path = pair
    drafter = DFlashDrafter.from_pretrained(path)
    ids = torch.randint(10, 300, (2, 12), generator=torch.Generator().manual_seed(2))
    loss = drafter_loss(drafter, target, ids, torch.tensor([12, 6]), torch.tensor([[10], [4]]))
    assert torch.isfinite(loss)


def test_training_on_the_targets_own_outputs_lowers_the_loss_repeats_by_seed_and_saves_a_drafter_that_drafts(
        pair, tmp_path):
    """A fresh drafter trained on what the target really writes: its loss on those sequences falls; the same
    seed, on one thread, trains the same losses and weights again (the same computation, bit for bit); and the
    saved drafter loads as it was saved, drafts, and decodes losslessly with every step's acceptance length in
    [1, K + 1]. How much acceptance rises is a training outcome (it depends on the pair and on the CPU's
    kernels) and is not asserted."""
    torch.set_num_threads(1)
    target, path = pair
    mask = DFlashDrafter.from_pretrained(path).mask_token_id
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(10, 300, (6,), generator=gen).tolist() for _ in range(48)]
    outputs = generate(target, None, prompts, 1, 40).sequences          # what the target really writes
    sequences = [p + o for p, o in zip(prompts, outputs)]

    def trained(name, steps):
        init_drafter(target.config, mask, tmp_path / name, seed=0)
        drafter = DFlashDrafter.from_pretrained(tmp_path / name)
        return drafter, train_drafter(drafter, target, sequences, [len(p) for p in prompts], steps=steps, batch=8,
                                      anchors=8, lr=3e-3, seed=5, log=None)
    drafter, losses = trained("a", 60)
    assert sum(losses[-10:]) < sum(losses[:10]), losses
    again, same = trained("b", 60)
    assert same == losses
    weights = drafter.state_dict()
    assert all(torch.equal(t, weights[n]) for n, t in again.state_dict().items())

    drafter.save_pretrained(tmp_path / "saved")
    loaded = DFlashDrafter.from_pretrained(tmp_path / "saved")
    assert all(torch.equal(t, weights[n]) for n, t in loaded.state_dict().items())
    block = loaded.block_size
    out = generate(target, loaded, prompts[:8], block, 32)
    lengths = out.acceptance_lengths()
    assert lengths and all(1 <= n <= block for n in lengths)
    assert_same_greedy(target, prompts[:8], out.sequences, generate(target, None, prompts[:8], 1, 32).sequences)

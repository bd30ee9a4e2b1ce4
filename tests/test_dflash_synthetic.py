"""Synthetic acceptance (vLLM's rejection_sample_method=synthetic) in the in-process engine.

vLLM's meaning (0.26, unchanged in 0.32): `synthetic_acceptance_rates` are unconditional per-position rates,
r_i = P(at least i+1 drafts accepted), non-increasing; the rejection loop runs on the conditional ones,
c_i = r_i / r_{i-1}, one uniform per slot, and stops at the first refusal. A length L resolves to the
minimum-variance schedule. Accepted drafts stay in the output; at the refusal the target's own token follows.

The bounds: each per-position share is compared with its rate at 5 binomial standard deviations (a two-sided
false failure of 5.7e-7 per comparison, under 1e-5 over the ~20 comparisons here). The seeds are fixed, so a
pass is a pass every run; the bound says how unlikely a failure would be under any seed.
"""
import math

import pytest
import torch

from specsweep.models.dflash import sampling
from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter

VOCAB, PROMPT = 16, [1, 2, 3]
SIGMAS = 5.0


@pytest.fixture(scope="module")
def random_pair(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from specsweep.models.tiny import init_drafter

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                      tie_word_embeddings=True, initializer_range=0.2)
    path = tmp_path_factory.mktemp("random16") / "drafter"
    init_drafter(cfg, mask_token_id=VOCAB - 1, out=path)
    return Qwen3ForCausalLM(cfg).eval(), DFlashDrafter.from_pretrained(path)


def full_steps(out, k):
    """Each (step, live row) accepted count, over the steps that verified all k drafts (the budget's last
    block may be shorter)."""
    return [s.accepted[r] for s in out.steps for r in s.live if len(s.drafted[r]) == k]


def assert_within_binomial(counts, rates):
    """Share of steps that accepted at least i+1 drafts against rates[i], within SIGMAS binomial sds; a rate
    of 0 or 1 must hold exactly."""
    n = len(counts)
    for i, r in enumerate(rates):
        hits = sum(a > i for a in counts)
        if r in (0.0, 1.0):
            assert hits == r * n, (i, hits, n, r)
        else:
            sd = math.sqrt(n * r * (1 - r))
            assert abs(hits - n * r) < SIGMAS * sd, (i, hits / n, r, n)


# ---- vLLM's resolution of the setting -------------------------------------------------------------------
@pytest.mark.parametrize("length,n,rates", [
    (3.0, 4, [1.0, 1.0, 0.0, 0.0]),        # the H200 run: AL exactly 3.000 (../shared/gpu-vllm/README.md)
    (3.4, 4, [1.0, 1.0, 0.4, 0.0]),
    (1.0, 3, [0.0, 0.0, 0.0]),
    (4.0, 3, [1.0, 1.0, 1.0]),             # K+1: every draft; vLLM slices the schedule to n
    (1.5, 1, [0.5]),
])
def test_a_length_resolves_to_vllms_minimum_variance_schedule(length, n, rates):
    """vLLM 0.26/0.32 `SpeculativeConfig._acceptance_length_to_rates` (these values were checked against it)."""
    assert sampling.synthetic_rates(n, length=length) == pytest.approx(rates)
    assert 1 + sum(sampling.synthetic_rates(n, length=length)) == pytest.approx(length)


def test_rates_are_unconditional_and_run_as_a_conditional_chain():
    """vLLM's `unconditional_to_conditional_rates`: c_i = r_i / r_{i-1}, 0 after a 0."""
    assert sampling.conditional_rates([0.9, 0.7, 0.5, 0.0, 0.0]) == pytest.approx([0.9, 0.7 / 0.9, 0.5 / 0.7, 0, 0])
    assert sampling.conditional_rates([1.0, 1.0, 0.4, 0.0]) == pytest.approx([1.0, 1.0, 0.4, 0.0])


@pytest.mark.parametrize("kw", [dict(rates=[0.9, 0.7]), dict(rates=[0.5, 0.7, 0.1]), dict(rates=[1.2, 0.5, 0.1]),
                                dict(length=0.5), dict(length=4.5), dict(), dict(rates=[0.9, 0.5, 0.1], length=2.0)])
def test_what_vllm_refuses_is_refused(kw):
    with pytest.raises(ValueError):
        sampling.synthetic_rates(3, **kw)


# ---- the engine: replayed rates within binomial bounds ------------------------------------------------------
RATES = {3: [0.9, 0.6, 0.3], 7: [0.95, 0.85, 0.7, 0.55, 0.4, 0.25, 0.1]}


@pytest.mark.parametrize("k,temperature", [(3, 0.0), (7, 0.0), (7, 0.8)])
def test_replayed_rates_are_within_binomial_bounds(random_pair, k, temperature):
    """A random pair's drafts are almost never right, so what is accepted is the setting's alone; 1200 to
    3000 full steps per K."""
    target, drafter = random_pair
    rows, tokens = (200, 48) if temperature == 0 else (150, 48)
    out = generate(target, drafter, [PROMPT] * rows, k + 1, tokens, temperature=temperature, seed=3,
                   method="synthetic", synthetic_acceptance_rates=RATES[k])
    counts = full_steps(out, k)
    assert len(counts) > 1200
    assert_within_binomial(counts, RATES[k])
    # the real verifier would have kept almost nothing: the rates, not the drafts, decided
    real = full_steps(generate(target, drafter, [PROMPT] * 50, k + 1, 32), k)
    assert sum(real) / len(real) < 0.5 * sum(counts) / len(counts)


def test_the_bounds_reject_the_conditional_reading(random_pair):
    """Power: rates read as a conditional chain (P(at least i+1) = r_0 * ... * r_i) fall far outside the
    same bounds."""
    target, drafter = random_pair
    chain = [math.prod(RATES[7][:i + 1]) for i in range(7)]
    out = generate(target, drafter, [PROMPT] * 80, 8, 32, seed=3, method="synthetic",
                   synthetic_acceptance_rates=chain)
    counts = full_steps(out, 7)
    with pytest.raises(AssertionError):
        assert_within_binomial(counts, RATES[7])


@pytest.mark.parametrize("k,length", [(3, 2.4), (7, 5.5), (7, 3.0)])
def test_a_set_length_gives_that_mean_acceptance_length(random_pair, k, length):
    """Per full step: floor(L - 1) drafts always, one more with the fractional part f; the mean of n steps has
    sd sqrt(f (1 - f) / n), and an integer L is exact (vLLM: AL 3.000 at length 3.0)."""
    target, drafter = random_pair
    out = generate(target, drafter, [PROMPT] * 100, k + 1, 48, seed=5, method="synthetic",
                   synthetic_acceptance_length=length)
    counts = full_steps(out, k)
    mean = 1 + sum(counts) / len(counts)
    f = (length - 1) % 1
    assert abs(mean - length) <= SIGMAS * math.sqrt(f * (1 - f) / len(counts)) + 1e-12, (mean, length)
    assert set(counts) <= {int(length - 1), int(length - 1) + 1}


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_accepted_drafts_stay_and_the_target_supplies_the_next_token(random_pair, temperature):
    """Not lossless, as vLLM's synthetic mode: a step commits its first n drafts as drafted, then (greedy) the
    target's argmax at the refused slot, or the bonus after all of them; the cache keeps the drafts."""
    target, drafter = random_pair
    k = 3
    out = generate(target, drafter, [PROMPT] * 20, k + 1, 40, temperature=temperature, seed=11,
                   method="synthetic", synthetic_acceptance_rates=[0.8, 0.5, 0.3])
    for row, seq in enumerate(out.sequences):
        rebuilt = seq[:1]
        for s in out.steps:
            if row in s.live:
                n = s.accepted[row]
                rebuilt += s.drafted[row][:n]
                if temperature == 0:
                    assert seq[len(rebuilt):len(rebuilt) + 1] in ([s.target[row][n]], [])
                rebuilt += seq[len(rebuilt):len(rebuilt) + 1]
        assert rebuilt[:len(seq)] == seq
    everything = generate(target, drafter, [PROMPT] * 4, k + 1, 40, seed=11, method="synthetic",
                          synthetic_acceptance_length=k + 1.0)
    assert all(a == k for a in full_steps(everything, k))


def test_synthetic_settings_need_the_synthetic_method(random_pair):
    target, drafter = random_pair
    with pytest.raises(ValueError, match="method='synthetic'"):
        generate(target, drafter, [PROMPT], 4, 8, synthetic_acceptance_length=2.0)
    with pytest.raises(ValueError, match="exactly one"):
        generate(target, drafter, [PROMPT], 4, 8, method="synthetic")


# ---- the trained tiny pair ---------------------------------------------------------------------------------
@pytest.mark.trained_pair
@pytest.mark.parametrize("k", [3, 7])
def test_the_tiny_pair_replays_set_rates_within_binomial_bounds(tiny_results, k):
    """On the trained pair, whose own acceptance is high (4.87 at block 8), the set rates, lower than its own,
    are what a step accepts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    models = tiny_results / "models" / "tiny"
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(models / "drafter")
    tok = AutoTokenizer.from_pretrained(models / "tokenizer")
    texts = [tok.apply_chat_template([{"role": "user", "content": f"Ada has {i} apples. Ada gets {i % 7 + 1} more. "
                                       "How many apples does Ada have now?"}],
                                     add_generation_prompt=True, tokenize=False, enable_thinking=False)
             for i in range(2, 42)]
    prompts = [tok(t, add_special_tokens=False).input_ids for t in texts]
    rates = [r * 0.8 for r in RATES[k]]
    out = generate(target, drafter, prompts, k + 1, 64, method="synthetic", synthetic_acceptance_rates=rates, seed=1)
    counts = full_steps(out, k)
    assert len(counts) > 500
    assert_within_binomial(counts, rates)

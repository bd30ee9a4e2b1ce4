"""Block verification (vLLM's rejection_sample_method=block; Sun et al. 2024) keeps the target's distribution.

Two levels:
- `sampling.block_verify` alone, on a Markov target and drafter over 3 tokens where every probability is
  known: 200,000 rows, the first three committed tokens against the target's exact joint (a chi-square
  goodness of fit), and the expected number of kept drafts against standard verification's: higher with
  sampled drafts (the paper's theorem), equal in distribution with one-hot (greedy) drafts.
- the engine, as tests/test_dflash_sampling.py tests its other verifiers: a randomly initialised pair with a
  16-token vocabulary, 3000 rows of 4 tokens at block 4 and temperature 0.8, a chi-square test on tokens 2-4
  against block 1's (p > 0.001 at each position), and a biased block verifier rejected with p < 1e-6.
"""
import math
from collections import Counter
from pathlib import Path

import pytest
import test_dflash_sampling as sampling_harness
import torch
from scipy.stats import chisquare
from test_dflash_sampling import ALPHA, PROMPT, ROWS, B, baseline, marginal_proposer, p_values, random_pair  # noqa: F401 (fixtures)

from specsweep.models.dflash import engine, sampling
from specsweep.models.dflash.engine import generate

# ---- block_verify on known distributions ---------------------------------------------------------------------
V, G, N = 3, 3, 200_000
TARGET = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]])   # p(next | last)
DRAFT = torch.tensor([[0.3, 0.6, 0.1], [0.5, 0.2, 0.3], [0.2, 0.3, 0.5]])    # q(next | last): often wrong
START = 0                                                                     # the last committed token


def one_step(method, sampled, seed):
    """Drafts from q (sampled) or its argmax (one-hot q), verified against p; returns kept counts and the first
    G committed tokens of each row, continued from p itself where the step committed fewer."""
    gen = torch.Generator().manual_seed(seed)
    last = torch.full((N,), START)
    drafts, qs = [], []
    for _ in range(G):
        q = DRAFT[last]
        d = sampling.draw(q, gen) if sampled else q.argmax(-1)
        drafts.append(d)
        qs.append(q)
        last = d
    drafts = torch.stack(drafts, 1)                                       # [N, G]
    prefix = torch.cat([torch.full((N, 1), START), drafts], 1)
    target_probs = TARGET[prefix]                                         # [N, G + 1, V]: p at each slot
    draft_probs = torch.stack(qs, 1) if sampled else None
    verify = sampling.block_verify if method == "block" else sampling.verify
    kept, nxt = verify(drafts, target_probs, draft_probs, gen)
    out = torch.cat([drafts, torch.zeros(N, 1, dtype=torch.long)], 1)
    out[torch.arange(N), kept] = nxt
    length = kept + 1
    for i in range(1, G):                                                 # continue from the target itself
        fresh = sampling.draw(TARGET[out[:, i - 1]], gen)
        out[:, i] = torch.where(length > i, out[:, i], fresh)
    return kept, out[:, :G]


def exact_joint():
    """The target's probability of each 3-token continuation, normalised in float64 (chisquare checks the sums)."""
    probs, p = {}, TARGET.double()
    for a in range(V):
        for b in range(V):
            for c in range(V):
                probs[a, b, c] = float(p[START, a] * p[a, b] * p[b, c])
    total = sum(probs.values())
    return {k: v / total for k, v in probs.items()}


@pytest.mark.parametrize("method", ["block", "standard"])
@pytest.mark.parametrize("sampled", [True, False])
def test_block_verify_commits_the_targets_exact_joint(method, sampled):
    _, out = one_step(method, sampled, seed=1)
    seen = Counter(map(tuple, out.tolist()))
    probs = exact_joint()
    keys = sorted(probs)
    assert chisquare([seen[k] for k in keys], [probs[k] * N for k in keys]).pvalue > 1e-3


@pytest.mark.parametrize("sampled", [True, False])
def test_the_joint_test_rejects_an_early_stopping_block_verifier(monkeypatch, sampled):
    """Power: tau is the LAST slot with u_i <= h_i (the paper's backward scan, vLLM's loop over every slot);
    stopping at the first u_i > h_i, as the token-by-token verifier does, is rejected by the same test."""
    src = Path(sampling.__file__).read_text()
    code = src[src.index("def block_verify("):src.index("def length_to_rates")]
    tau = "kept = ((u <= h).long() * slots).max(dim=1).values"
    assert tau in code
    namespace = dict(vars(sampling))
    exec(code.replace(tau, "kept = (u <= h).long().cumprod(dim=1).sum(dim=1)"), namespace)
    monkeypatch.setattr(sampling, "block_verify", namespace["block_verify"])
    _, out = one_step("block", sampled, seed=1)
    seen = Counter(map(tuple, out.tolist()))
    probs = exact_joint()
    keys = sorted(probs)
    assert chisquare([seen[k] for k in keys], [probs[k] * N for k in keys]).pvalue < 1e-6


def test_block_verification_keeps_more_sampled_drafts_and_as_many_greedy_ones():
    """Sampled drafts: block's mean kept count is above standard's by more than 5 standard errors of the
    difference. One-hot drafts: block verification's kept count has standard's distribution (p_i is the
    product of p(d_j) and h_i telescopes), so the means agree within 5 standard errors."""
    for sampled in (True, False):
        block, _ = one_step("block", sampled, seed=2)
        standard, _ = one_step("standard", sampled, seed=3)
        b, s = block.double(), standard.double()
        se = math.sqrt(b.var() / N + s.var() / N)
        gain = float(b.mean() - s.mean())
        if sampled:
            assert gain > 5 * se, (gain, se)
        else:
            assert abs(gain) < 5 * se, (gain, se)


# ---- the engine at temperature 0.8, with test_dflash_sampling.py's harness ----------------------------------------
TEMPERATURE = 0.8        # baseline (the imported fixture) samples block 1 at this module's TEMPERATURE


def sample(pair, block_size, seed, **kw):
    return sampling_harness.sample(pair, block_size, seed, temperature=TEMPERATURE, **kw)


@pytest.mark.parametrize("sampler,proposer,top_k,top_p", [
    ("vllm", "drafter", 0, 1.0), ("vllm", "marginals", 0, 1.0),
    ("rejection", "drafter", 0, 1.0), ("rejection", "marginals", 0, 1.0), ("rejection", "marginals", 8, 0.9)])
def test_block_verified_tokens_keep_the_targets_distribution(random_pair, baseline, sampler, proposer, top_k, top_p):
    ref = baseline(top_k, top_p)
    propose = marginal_proposer(ref[:1000]) if proposer == "marginals" else None
    out = sample(random_pair, B, seed=7, sampler=sampler, propose=propose, top_k=top_k, top_p=top_p, method="block")
    accepted = sum(a for s in out.steps for a in s.accepted)
    assert accepted > ROWS // 20
    assert min(p_values(out.sequences, ref)) > ALPHA


def test_the_chi_square_test_rejects_a_biased_block_verifier(random_pair, baseline, monkeypatch):
    """Power: block verification's tau, then the token from p instead of the residual, favours the drafts."""
    real = sampling.block_verify

    def biased(drafts, target_probs, draft_probs, generator):
        kept, _ = real(drafts, target_probs, draft_probs, generator)
        return kept, sampling.draw(target_probs[torch.arange(len(kept)), kept], generator)

    monkeypatch.setattr(engine, "block_verify", biased)
    ref = baseline()
    out = sample(random_pair, B, seed=7, propose=marginal_proposer(ref[:1000]), method="block")
    assert min(p_values(out.sequences, ref)) < 1e-6


def test_block_at_temperature_0_is_greedy_verification(random_pair):
    """vLLM runs block verification only for sampled requests; a greedy one is verified token by token."""
    target, drafter = random_pair
    a = generate(target, drafter, [PROMPT] * 3, 4, 12, method="block")
    b = generate(target, drafter, [PROMPT] * 3, 4, 12)
    assert a.sequences == b.sequences and [s.accepted for s in a.steps] == [s.accepted for s in b.steps]

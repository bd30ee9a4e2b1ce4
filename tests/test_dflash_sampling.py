"""At temperature > 0 both verifiers keep the target's distribution: the tokens after the prefill's (tokens 2
to b, which come from verified blocks) are distributed as block 1's (plain sampling from the target).

A randomly initialised pair with a 16-token vocabulary has entropy everywhere (about 2.2-2.5 nats of the
2.77 possible), so a chi-square test on a few thousand rows has power; a deliberately biased verifier is
rejected by the same test. One batch of identical prompts gives independent samples, one per row.
"""
from collections import Counter

import pytest
import torch
from scipy.stats import chi2_contingency

from specsweep.models.dflash import engine, sampling
from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter

PROMPT, ROWS, B, VOCAB = [1, 2, 3], 3000, 4, 16
ALPHA = 1e-3          # per position; the seeds are fixed, so a pass is a pass every run


@pytest.fixture(scope="module")
def random_pair(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from specsweep.models.tiny import init_drafter

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
                      tie_word_embeddings=True, initializer_range=0.2)
    path = tmp_path_factory.mktemp("random16") / "drafter"
    init_drafter(cfg, mask_token_id=VOCAB - 1, out=path)
    return Qwen3ForCausalLM(cfg).eval(), DFlashDrafter.from_pretrained(path)


def sample(pair, block_size, seed, temperature=1.0, **kw):
    target, drafter = pair
    out = generate(target, drafter, [PROMPT] * ROWS, block_size, B, temperature=temperature, seed=seed, **kw)
    assert all(len(s) == B for s in out.sequences)
    return out


@pytest.fixture(scope="module")
def baseline(random_pair, request):
    """Block 1 (the target sampled token by token), per filter setting, at the test module's TEMPERATURE (this
    module's 1.0; test_dflash_block.py imports the harness at 0.8)."""
    cache, temperature = {}, getattr(request.module, "TEMPERATURE", 1.0)

    def get(top_k=0, top_p=1.0):
        if (top_k, top_p) not in cache:
            cache[top_k, top_p] = sample(random_pair, 1, seed=100, temperature=temperature, top_k=top_k,
                                         top_p=top_p).sequences
        return cache[top_k, top_p]
    return get


def marginal_proposer(sequences):
    """Drafts from the target's own per-position marginals (estimated from other samples): often right."""
    counts = torch.zeros(B, VOCAB)
    for seq in sequences:
        for i, tok in enumerate(seq):
            counts[i, tok] += 1
    logits = (counts + 0.5).log()

    def propose(block, positions):
        index = (positions[:, 1:] - len(PROMPT)).clamp(0, B - 1)           # output index of each draft slot
        return logits[index]
    return propose


def p_values(got, ref):
    """Chi-square on each of tokens 2..b: these rows' token frequencies against block 1's."""
    out = []
    for i in range(1, B):
        a, b = Counter(s[i] for s in got), Counter(s[i] for s in ref)
        seen = sorted(set(a) | set(b))
        out.append(chi2_contingency([[a[t] for t in seen], [b[t] for t in seen]]).pvalue)
    return out


@pytest.mark.parametrize("sampler", sampling.SAMPLERS)
@pytest.mark.parametrize("proposer", ["drafter", "marginals"])
@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (8, 0.9)])
def test_verified_tokens_keep_the_targets_distribution(random_pair, baseline, sampler, proposer, top_k, top_p):
    ref = baseline(top_k, top_p)
    propose = marginal_proposer(baseline(top_k, top_p)[:1000]) if proposer == "marginals" else None
    out = sample(random_pair, B, seed=7, sampler=sampler, propose=propose, top_k=top_k, top_p=top_p)
    accepted = sum(a for s in out.steps for a in s.accepted)
    assert accepted > ROWS // 20                         # drafts were kept: the acceptance path was exercised
    assert min(p_values(out.sequences, ref)) > ALPHA


def test_the_chi_square_test_rejects_a_biased_verifier(random_pair, baseline, monkeypatch):
    """Power: a verifier that, after a refused draft, samples from p instead of the residual favours the
    drafted tokens; the same test on the same rows must reject it."""
    def biased(drafts, target_probs, draft_probs, generator):
        kept, _ = sampling.verify(drafts, target_probs, draft_probs, generator)
        return kept, sampling.draw(target_probs[torch.arange(len(kept)), kept], generator)

    monkeypatch.setattr(engine, "verify", biased)
    ref = baseline()
    out = sample(random_pair, B, seed=7, propose=marginal_proposer(ref[:1000]))
    assert min(p_values(out.sequences, ref)) < 1e-6

"""Sampling a verified block at temperature > 0 without changing the target's distribution.

Both verifiers are speculative rejection sampling (Leviathan et al.): draft i is kept with probability
min(1, p(d_i) / q(d_i)); at the first refusal the token comes from the residual max(p - q, 0),
renormalised; if every draft is kept, the last position's token comes from p. They differ only in q:
- `vllm` (vLLM's default, `draft_sample_method="greedy"`): the drafts are the drafter's argmax, so q is
  one-hot at the draft; a draft is kept with probability p(d) and the residual is p without d.
- `rejection` (the authors' `dflash_generate`): the drafts are sampled from the drafter's own tempered,
  top-k/top-p filtered distribution q.

The verification method (vLLM's `rejection_sample_method`, METHODS) is separate from q:
- `standard`: the token-by-token test above (`verify`).
- `block`: block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding",
  arXiv 2403.10444), as vLLM 0.26's V2 rejection sampler (`v1/worker/gpu/spec_decode/
  rejection_sampler_utils.py`, `_rejection_kernel` and `_resample_kernel`) implements it (`block_verify`).
  Lossless too; at temperature 0 vLLM runs it as greedy standard verification, and so does the engine.
- `synthetic`: the drafts are accepted at set unconditional per-position rates, whatever they are; not
  lossless (`synthetic_accept`, as vLLM's `rejection_greedy_sample_kernel` / `rejection_random_sample_kernel`
  in `v1/sample/rejection_sampler.py` and V2's `_rejection_kernel` in synthetic mode).
"""
from __future__ import annotations

import torch

from specsweep.metrics import set_acceptance_rates

SAMPLERS = ("vllm", "rejection")
METHODS = ("standard", "block", "synthetic")


def filtered_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """softmax(logits / temperature), restricted to the top_k tokens and then to the smallest set whose mass
    reaches top_p (the authors' `_sampling_probs`, which vLLM's sampler also follows)."""
    scores = logits.float() / temperature
    if 0 < top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per distribution over the last axis."""
    flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)
    return flat.view(probs.shape[:-1])


def verify(drafts: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
           generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, how many drafts are kept and the token that follows them.

    drafts [B, t-1]; target_probs [B, t, V] (the target's distribution after each block slot); draft_probs
    [B, t-1, V] the distribution each draft was sampled from, or None for deterministic drafts (one-hot q).
    """
    p = target_probs[:, :drafts.shape[1]].gather(-1, drafts[..., None])[..., 0]
    q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, drafts[..., None])[..., 0]
    u = torch.rand(p.shape, generator=generator, device=p.device)
    kept = (u * q < p).long().cumprod(dim=1).sum(dim=1)                    # [B]
    return kept, resample(kept, drafts, target_probs, draft_probs, generator)


def resample(kept: torch.Tensor, drafts: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
             generator: torch.Generator | None, scale: torch.Tensor | None = None) -> torch.Tensor:
    """The token after `kept` drafts: from the target's distribution there if every draft was kept, else from
    the residual max(scale * p - q, 0), renormalised (scale 1 for standard verification; block verification's
    p_tau); with one-hot q the residual is p without the refused draft, whatever the scale."""
    b, g = drafts.shape
    rows = torch.arange(b, device=drafts.device)
    residual = target_probs[rows, kept].clone()                            # [B, V]
    refused = kept < g
    at = kept.clamp(max=g - 1)
    if draft_probs is None:                                                # q one-hot: p without the draft
        residual[rows[refused], drafts[rows, at][refused]] = 0
    else:
        if scale is not None:
            residual *= scale[:, None]
        residual -= refused[:, None].to(residual.dtype) * draft_probs[rows, at]
    residual.clamp_(min=0)
    total = residual.sum(-1, keepdim=True)
    residual = torch.where(total > 0, residual / total.clamp(min=torch.finfo(residual.dtype).tiny),
                           target_probs[rows, kept])
    return draw(residual, generator)


def block_verify(drafts: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor | None,
                 generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification (Sun et al. 2024, Algorithm 2; vLLM 0.26 V2's `_rejection_kernel` with
    USE_BLOCK_VERIFICATION and its `_resample_kernel`): the same arguments and results as `verify`.

    With drafts d_1..d_g, p (target) and q (the drafts' distribution) at each block slot, and p_0 = 1:
      p_i = min(p_{i-1} * p(d_i) / q(d_i), 1)
      h_i = r_i / (r_i + 1 - p_i), r_i = sum_x max(p_i * p_{i+1}(x) - q_{i+1}(x), 0)   for i < g (1 if 0/0)
      h_g = p_g
    one uniform u_i per slot, tau = the largest i with u_i <= h_i (0 if none): d_1..d_tau are kept, and the
    next token is sampled from p_g's slot if tau = g, else from max(p_tau * p(x) - q(x), 0) renormalised at
    slot tau (with one-hot q: p there without d_{tau+1}, and r_i = p_i * (1 - p_{i+1}(d_{i+1}))).
    """
    b, g = drafts.shape
    p = target_probs[:, :g].gather(-1, drafts[..., None])[..., 0]          # [B, g]: p(d_i) at its slot
    q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, drafts[..., None])[..., 0]
    ratio = torch.where(q > 0, p / q.clamp(min=torch.finfo(p.dtype).tiny), torch.zeros_like(p))
    joint = torch.empty_like(p)                                            # p_1..p_g
    running = torch.ones_like(p[:, 0])
    for i in range(g):
        running = torch.clamp(running * ratio[:, i], max=1.0)
        joint[:, i] = running
    h = joint.clone()                                                      # h_g = p_g
    if g > 1:
        if draft_probs is None:
            res = joint[:, :-1] * (1 - p[:, 1:])
        else:
            res = (joint[:, :-1, None] * target_probs[:, 1:g] - draft_probs[:, 1:g]).clamp(min=0).sum(-1)
        denom = res + 1 - joint[:, :-1]
        h[:, :-1] = torch.where(denom > 0, res / denom.clamp(min=torch.finfo(p.dtype).tiny), torch.ones_like(res))
    u = torch.rand(p.shape, generator=generator, device=p.device)
    slots = torch.arange(1, g + 1, device=p.device)
    kept = ((u <= h).long() * slots).max(dim=1).values                     # [B]: tau
    scale = torch.cat([torch.ones_like(joint[:, :1]), joint], dim=1).gather(1, kept[:, None])[:, 0]   # p_tau
    return kept, resample(kept, drafts, target_probs, draft_probs, generator, scale=scale)


def length_to_rates(length: float, n: int) -> list[float]:
    """A mean acceptance length (the bonus token counted) as n unconditional per-position rates, vLLM's
    minimum-variance schedule (`SpeculativeConfig._acceptance_length_to_rates`, vllm/config/speculative.py,
    0.26): floor(L - 1) positions always accepted, the next one with the fractional part, the rest never.
    Defined once, in metrics.set_acceptance_rates (the summary's expected acceptance reads it too)."""
    return set_acceptance_rates(float(length), n)


def synthetic_rates(n: int, rates=None, length: float | None = None) -> list[float]:
    """vLLM's `SpeculativeConfig._resolve_synthetic_acceptance_rates`: exactly one of n unconditional rates
    (each in [0, 1], non-increasing) or a mean acceptance length, as n unconditional rates."""
    if (rates is None) == (length is None):
        raise ValueError("synthetic acceptance needs exactly one of rates or a length")
    if rates is None:
        return length_to_rates(float(length), n)
    rates = [float(r) for r in rates]
    if len(rates) != n:
        raise ValueError(f"synthetic acceptance rates must have length {n}, got {rates}")
    if not all(0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"synthetic acceptance rates must each be in [0, 1], got {rates}")
    if any(b > a for a, b in zip(rates, rates[1:])):
        raise ValueError(f"synthetic acceptance rates must be non-increasing, got {rates}")
    return rates


def conditional_rates(rates: list[float]) -> list[float]:
    """Unconditional rates r_i = P(at least i+1 drafts kept) as the chain's conditional ones,
    c_i = r_i / r_{i-1} (r_{-1} = 1; 0 after a 0): vLLM's `unconditional_to_conditional_rates`
    (vllm/v1/spec_decode/utils.py)."""
    return [r / prev if prev > 0.0 else 0.0 for r, prev in zip(rates, [1.0, *rates[:-1]])]


def synthetic_accept(conditional: torch.Tensor, batch: int, drafts: int,
                     generator: torch.Generator | None) -> torch.Tensor:
    """Per row, how many drafts a synthetic step keeps: slot i is kept if u_i < c_i and every earlier slot
    was, with one uniform per slot, so P(kept >= i+1) = c_0 * ... * c_i = r_i, whatever the drafts are.
    conditional [K] (K >= drafts: a shrunk last block uses its first `drafts` rates)."""
    u = torch.rand(batch, drafts, generator=generator, device=conditional.device)
    return (u < conditional[:drafts]).long().cumprod(dim=1).sum(dim=1)

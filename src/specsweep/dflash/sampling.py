"""Sampling a verified block at temperature > 0 without changing the target's distribution.

Both verifiers are speculative rejection sampling (Leviathan et al.): draft i is kept with probability
min(1, p(d_i) / q(d_i)); at the first refusal the token comes from the residual max(p - q, 0),
renormalised; if every draft is kept, the last position's token comes from p. They differ only in q:
- `vllm` (vLLM's default, `draft_sample_method="greedy"`): the drafts are the drafter's argmax, so q is
  one-hot at the draft; a draft is kept with probability p(d) and the residual is p without d.
- `rejection` (the authors' `dflash_generate`): the drafts are sampled from the drafter's own tempered,
  top-k/top-p filtered distribution q.
"""
from __future__ import annotations

import torch

SAMPLERS = ("vllm", "rejection")


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
    b, g = drafts.shape
    p = target_probs[:, :g].gather(-1, drafts[..., None])[..., 0]
    q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, drafts[..., None])[..., 0]
    u = torch.rand(p.shape, generator=generator, device=p.device)
    kept = (u * q < p).long().cumprod(dim=1).sum(dim=1)                    # [B]
    rows = torch.arange(b, device=drafts.device)
    residual = target_probs[rows, kept].clone()                            # [B, V]
    refused = kept < g
    at = kept.clamp(max=g - 1)
    if draft_probs is None:                                                # q one-hot: p without the draft
        residual[rows[refused], drafts[rows, at][refused]] = 0
    else:
        residual -= refused[:, None].to(residual.dtype) * draft_probs[rows, at]
    residual.clamp_(min=0)
    total = residual.sum(-1, keepdim=True)
    residual = torch.where(total > 0, residual / total.clamp(min=torch.finfo(residual.dtype).tiny),
                           target_probs[rows, kept])
    return kept, draw(residual, generator)

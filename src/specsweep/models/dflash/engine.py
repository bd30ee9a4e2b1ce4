"""Lossless block-speculative decoding with a DFlash drafter and an HF causal-LM target.

Each step: put [last committed token, MASK x (b-1)] at the next b positions; the drafter proposes b-1
tokens in one non-causal pass; the target verifies the whole block in one pass; the matching prefix plus
the target's own next token is committed; the target cache is cropped to the committed length; the
drafter's context grows by the newly committed positions only. Block size 1 is plain autoregressive
decoding through the same code.

Each row of a batch commits its own accepted prefix: the cache keeps, per step, as many positions as the
longest row kept, and the attention masks (target and drafter context) hide every row's refused ones.
A block never verifies more drafts than the budget left (as the authors' `dflash_generate`): the last
block shrinks to the tokens a row can still commit.

At temperature > 0 the block is verified by rejection sampling (sampling.py): `sampler="vllm"` keeps the
drafter's greedy drafts (vLLM's default), `sampler="rejection"` samples them (the authors' reference).
`method` is vLLM's `rejection_sample_method`: "standard" (token by token), "block" (block verification at
temperature > 0; greedy verification at 0, as vLLM) or "synthetic" (drafts kept at set per-position rates,
whatever they are: not lossless; the drafter and the target's verify still run).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import DynamicCache

from specsweep.models.dflash.model import DFlashDrafter
from specsweep.models.dflash.sampling import (
    METHODS,
    SAMPLERS,
    block_verify,
    conditional_rates,
    draw,
    filtered_probs,
    resample,
    synthetic_accept,
    synthetic_rates,
    verify,
)


@dataclass
class Step:
    drafted: list[list[int]]       # per row, the b-1 proposed tokens
    target: list[list[int]]        # per row, the target's b choices (argmax when sampling) at the block
    accepted: list[int]            # per row, how many proposals matched before the first miss
    committed: list[int]           # per row, tokens committed this step (its accepted prefix + 1)
    live: list[int] = field(default_factory=list)   # rows still decoding when the step ran
    t_s: float = 0.0               # seconds since the call began, when the step's tokens were committed


@dataclass
class Output:
    sequences: list[list[int]]     # new tokens per row, cut at its stop token or max_new_tokens
    steps: list[Step] = field(default_factory=list)
    first_token_s: float = 0.0     # prefill and the first token
    finish_s: list[float] = field(default_factory=list)   # per row, when its last token was committed

    def acceptance_lengths(self) -> list[int]:
        """Per step and live row: accepted proposals + 1 (the target's own token), as vLLM counts it."""
        return [s.accepted[r] + 1 for s in self.steps for r in s.live]


class Rows:
    """Each row's committed tokens, cut exactly at its first stop token or at max_new_tokens; the
    bookkeeping that every decode loop shares."""

    def __init__(self, n: int, max_new_tokens: int, stop_ids, t0: float):
        self.out = Output(sequences=[[] for _ in range(n)], finish_s=[0.0] * n)
        self.done = [False] * n
        self.max_new_tokens, self.stop_ids, self.t0 = max_new_tokens, stop_ids, t0

    def live(self) -> list[int]:
        return [r for r, d in enumerate(self.done) if not d]

    def commit(self, rows_tokens: dict[int, list[int]]) -> float:
        """Commit tokens per row; returns the seconds since the start, which rows that finished record."""
        for row, tokens in rows_tokens.items():
            seq = self.out.sequences[row]
            for tok in tokens:
                if self.done[row]:
                    break
                seq.append(tok)
                self.done[row] = tok in self.stop_ids or len(seq) >= self.max_new_tokens
        now = time.perf_counter() - self.t0
        for row in rows_tokens:
            if self.done[row] and not self.out.finish_s[row]:
                self.out.finish_s[row] = now
        return now


Proposer = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""(block ids [B, t], positions [B, t]) -> the t-1 drafts [B, t-1] (deterministic), or their logits
[B, t-1, V] (then drafted like the drafter's: argmax, or sampled under sampler="rejection")."""


def room(x: torch.Tensor, need: int, dim: int) -> torch.Tensor:
    """x, or x doubled along `dim` (zeros) until it holds `need`: buffers sized once, grown rarely. A batch's
    cache gains the longest row's kept count each step, so it can outgrow prompt + budget + one block."""
    size = x.shape[dim]
    if need <= size:
        return x
    while size < need:
        size *= 2
    shape = list(x.shape)
    shape[dim] = size - x.shape[dim]
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


class ContextCache:
    """The drafter's per-layer context K/V in buffers sized once, with a mask of the positions rows kept."""

    def __init__(self, kv: list, mask: torch.Tensor, capacity: int):
        b = mask.shape[0]
        self.k = [k.new_zeros(b, k.shape[1], capacity, k.shape[3]) for k, _ in kv]
        self.v = [v.new_zeros(b, v.shape[1], capacity, v.shape[3]) for _, v in kv]
        self.mask = torch.zeros(b, capacity, dtype=torch.bool, device=mask.device)
        self.length = 0
        self.append(kv, mask)

    def append(self, kv: list, keep: torch.Tensor) -> None:
        a, z = self.length, self.length + keep.shape[1]
        self.k = [room(k, z, 2) for k in self.k]
        self.v = [room(v, z, 2) for v in self.v]
        self.mask = room(self.mask, z, 1)
        for i, (k, v) in enumerate(kv):
            self.k[i][:, :, a:z] = k
            self.v[i][:, :, a:z] = v
        self.mask[:, a:z] = keep
        self.length = z

    def view(self) -> tuple[list, torch.Tensor]:
        n = self.length
        return [(k[:, :, :n], v[:, :, :n]) for k, v in zip(self.k, self.v)], self.mask[:, :n]


@torch.no_grad()
def generate(target, drafter: DFlashDrafter | None, input_ids: list[list[int]], block_size: int,
             max_new_tokens: int, stop_ids: set[int] = frozenset(), temperature: float = 0.0,
             pad_id: int = 0, seed: int = 0, propose: Proposer | None = None, sampler: str = "vllm",
             top_p: float = 1.0, top_k: int = 0, method: str = "standard",
             synthetic_acceptance_rates: list[float] | None = None,
             synthetic_acceptance_length: float | None = None) -> Output:
    """Decode every prompt; `propose` replaces the drafter (tests use it to inject known drafts).

    method="synthetic" takes exactly one of synthetic_acceptance_rates (block_size - 1 unconditional rates)
    or synthetic_acceptance_length (a mean acceptance length, resolved to rates as vLLM resolves it)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    device = next(target.parameters()).device
    t0 = time.perf_counter()
    conditional = None
    if method == "synthetic":
        rates = synthetic_rates(block_size - 1, synthetic_acceptance_rates, synthetic_acceptance_length)
        conditional = torch.tensor(conditional_rates(rates), dtype=torch.float32, device=device)
    elif synthetic_acceptance_rates is not None or synthetic_acceptance_length is not None:
        raise ValueError(f"synthetic acceptance rates or length need method='synthetic', got {method!r}")
    gen = torch.Generator(device=device).manual_seed(seed) if temperature > 0 or conditional is not None else None

    def choose(logits):
        return logits.argmax(-1) if temperature <= 0 else draw(filtered_probs(logits, temperature, top_p, top_k), gen)

    b = len(input_ids)
    width = max(len(p) for p in input_ids)
    capacity = width + max_new_tokens + block_size                        # a single row never needs more
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in input_ids], device=device)   # left-padded
    mask = torch.zeros(b, capacity, dtype=torch.long, device=device)
    mask[:, :width] = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in input_ids], device=device)
    pos = (mask[:, :width].cumsum(-1) - 1).clamp(min=0)
    features = block_size > 1 and propose is None
    cache = DynamicCache()
    out = target(input_ids=ids, attention_mask=mask[:, :width], position_ids=pos, past_key_values=cache,
                 output_hidden_states=features, use_cache=True)
    last = choose(out.logits[:, -1])                                      # [B]: the first new token
    next_pos = pos[:, -1] + 1                                             # where `last` will sit
    length = width                                                        # positions in the target cache
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    ctx = ContextCache(drafter.context_kv(drafter.context_states(out.hidden_states), pos),
                       mask[:, :width].bool(), capacity) if features else None
    offsets = torch.arange(block_size, device=device)
    every = torch.arange(b, device=device)
    fill = drafter.mask_token_id if drafter is not None else pad_id

    rows = Rows(b, max_new_tokens, stop_ids, t0)
    rows.out.first_token_s = rows.commit({r: [tok] for r, tok in enumerate(last.tolist())})
    while live := rows.live():
        # the budget edge: verify no more drafts than the live rows can still commit
        t = min(block_size, 1 + max(max_new_tokens - len(rows.out.sequences[r]) for r in live))
        block_pos = next_pos[:, None] + offsets[:t]                       # [B, t]
        block = torch.full((b, t), fill, device=device)
        block[:, 0] = last
        draft_probs = None
        if t > 1:
            logits = propose(block, block_pos) if propose is not None else \
                head(drafter(embed(block), block_pos, *ctx.view())[:, 1:])
            if not logits.is_floating_point():                            # an injected proposer's tokens
                drafts = logits
            elif temperature > 0 and sampler == "rejection":
                draft_probs = filtered_probs(logits, temperature, top_p, top_k)
                drafts = draw(draft_probs, gen)
            else:
                drafts = logits.argmax(-1)
            block[:, 1:] = drafts
        mask = room(mask, length + t, 1)
        mask[:, length:length + t] = 1
        out = target(input_ids=block, attention_mask=mask[:, :length + t], position_ids=block_pos,
                     past_key_values=cache, output_hidden_states=features, use_cache=True)
        choice = out.logits.argmax(-1)                                    # [B, t]
        if conditional is not None and t > 1:
            # vLLM's synthetic mode: the accepted drafts stay; at a refusal the target's argmax (greedy) or a
            # sample from its residual (p without the draft, or max(p - q, 0)); after all of them, the bonus
            n = synthetic_accept(conditional, b, t - 1, gen)
            nxt = choice[every, n] if temperature <= 0 else \
                resample(n, block[:, 1:], filtered_probs(out.logits, temperature, top_p, top_k), draft_probs, gen)
        elif temperature <= 0:
            n = (block[:, 1:] == choice[:, :-1]).long().cumprod(dim=1).sum(dim=1)
            nxt = choice[every, n]
        elif t > 1:
            check = block_verify if method == "block" else verify
            n, nxt = check(block[:, 1:], filtered_probs(out.logits, temperature, top_p, top_k), draft_probs, gen)
        else:
            n, nxt = torch.zeros_like(last), choose(out.logits[:, 0])
        host = torch.cat([block, choice, n[:, None], nxt[:, None]], dim=1).tolist()   # the step's one transfer
        now = rows.commit({r: host[r][1:host[r][2 * t] + 1] + [host[r][-1]] for r in live})
        accepted = [h[2 * t] for h in host]
        rows.out.steps.append(Step(drafted=[h[1:t] for h in host], target=[h[t:2 * t] for h in host],
                                   accepted=accepted, committed=[a + 1 for a in accepted], live=live, t_s=now))
        # keep as many positions as the longest live row kept; the mask hides each row's refused ones
        m = 1 + max(accepted[r] for r in live)
        keep = (n + 1).clamp(max=m)
        kept = offsets[:m] < keep[:, None]                                # [B, m]
        mask[:, length:length + m] = kept
        if t > m:
            cache.crop(m - t)
        length += m
        if ctx is not None:
            hidden = tuple(h[:, :m] for h in out.hidden_states)
            ctx.append(drafter.context_kv(drafter.context_states(hidden), block_pos[:, :m]), kept)
        last = nxt
        next_pos = next_pos + keep
    return rows.out

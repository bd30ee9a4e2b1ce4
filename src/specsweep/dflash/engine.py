"""Lossless block-speculative decoding with a DFlash drafter and an HF causal-LM target.

Each step: put [last committed token, MASK x (b-1)] at the next b positions; the drafter proposes b-1
tokens in one non-causal pass; the target verifies the whole block in one pass; the matching prefix plus
the target's own next token is committed; the target cache is cropped to the committed length; the
drafter's context grows by the newly committed positions only. Block size 1 is plain autoregressive
decoding through the same code.

Batches commit the same number of tokens per sequence each step (the smallest over unfinished rows):
every committed token is still the target's own choice, so the output stays exact.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import DynamicCache

from .model import DFlashDrafter


@dataclass
class Step:
    drafted: list[list[int]]       # per row, the b-1 proposed tokens
    target: list[list[int]]        # per row, the target's b choices at the block's positions
    accepted: list[int]            # per row, how many proposals matched before the first miss
    committed: list[int]           # per row, tokens committed this step (here the same for every row)
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


def pick(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    flat = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator)
    return flat.view(probs.shape[:-1])


Proposer = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]   # (block ids, positions) -> b-1 drafts


@torch.no_grad()
def generate(target, drafter: DFlashDrafter | None, input_ids: list[list[int]], block_size: int,
             max_new_tokens: int, stop_ids: set[int] = frozenset(), temperature: float = 0.0,
             pad_id: int = 0, seed: int = 0, propose: Proposer | None = None) -> Output:
    """Decode every prompt; `propose` replaces the drafter (tests use it to inject known drafts)."""
    device = next(target.parameters()).device
    t0 = time.perf_counter()
    gen = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    b = len(input_ids)
    width = max(len(p) for p in input_ids)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in input_ids], device=device)   # left-padded
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in input_ids], device=device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = target(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                 output_hidden_states=block_size > 1, use_cache=True)
    last = pick(out.logits[:, -1], temperature, gen)                      # [B]: the first new token
    next_pos = pos[:, -1] + 1                                             # where `last` will sit
    ctx_kv, ctx_mask = None, mask.bool()
    embed = target.get_input_embeddings()
    if block_size > 1 and propose is None:
        ctx_kv = drafter.context_kv(drafter.context_states(out.hidden_states), pos)

    rows = Rows(b, max_new_tokens, stop_ids, t0)
    rows.out.first_token_s = rows.commit({r: [tok] for r, tok in enumerate(last.tolist())})
    while rows.live():
        offsets = torch.arange(block_size, device=device)
        block_pos = next_pos[:, None] + offsets                           # [B, b]
        block = torch.full((b, block_size), drafter.mask_token_id if drafter else pad_id, device=device)
        block[:, 0] = last
        if block_size > 1:
            if propose is not None:
                drafts = propose(block, block_pos)
            else:
                hidden = drafter(embed(block), block_pos, ctx_kv, ctx_mask)
                drafts = pick(target.get_output_embeddings()(hidden[:, 1:]), 0.0, None)
            block[:, 1:] = drafts
        full_mask = torch.cat([mask, torch.ones(b, block_size, dtype=mask.dtype, device=device)], dim=1)
        out = target(input_ids=block, attention_mask=full_mask, position_ids=block_pos, past_key_values=cache,
                     output_hidden_states=block_size > 1 and propose is None, use_cache=True)
        choice = pick(out.logits, temperature, gen)                       # [B, b]: target's token after each slot
        match = (block[:, 1:] == choice[:, :-1]).int().cumprod(dim=1).sum(dim=1) if block_size > 1 \
            else torch.zeros(b, dtype=torch.long, device=device)
        live = rows.live()
        n = int(min(match[r] for r in live))                              # proposals every live row keeps
        now = rows.commit({r: block[r, 1:n + 1].tolist() + [int(choice[r, n])] for r in live})
        rows.out.steps.append(Step(drafted=block[:, 1:].tolist(), target=choice.tolist(), accepted=match.tolist(),
                                 committed=[n + 1] * b, live=live, t_s=now))
        # the target has now processed `last` and the n kept proposals: keep those, drop the rest
        if block_size - (n + 1):
            cache.crop(-(block_size - (n + 1)))
        mask = torch.cat([mask, torch.ones(b, n + 1, dtype=mask.dtype, device=device)], dim=1)
        if ctx_kv is not None:
            new = drafter.context_kv(drafter.context_states(tuple(h[:, : n + 1] for h in out.hidden_states)),
                                     block_pos[:, : n + 1])
            ctx_kv = [(torch.cat([k0, k1], 2), torch.cat([v0, v1], 2)) for (k0, v0), (k1, v1) in zip(ctx_kv, new)]
            ctx_mask = torch.cat([ctx_mask, torch.ones(b, n + 1, dtype=torch.bool, device=device)], dim=1)
        last = choice[torch.arange(b, device=device), n]
        next_pos = next_pos + n + 1
    return rows.out

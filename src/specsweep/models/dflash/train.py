"""Training a DFlash drafter against a frozen target, by the DFlash recipe.

The one thing that must be exact is the alignment. For an anchor at position a (the last emitted token,
not yet processed by the target), the block is [token_a, MASK x (b-1)] at positions a..a+b-1; the drafter
sees target features for positions 0..a-1 only, and slot k is trained on the target's greedy token at
position a+k. Many anchors share one forward: each block sees the context before its own anchor and its
own slots, in both directions, and nothing of other blocks. This is the same computation as one decode
step, which tests/test_dflash_train.py checks.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from specsweep.models.dflash.model import DFlashDrafter


@torch.no_grad()
def target_pass(target, input_ids: torch.Tensor):
    """All hidden states, and the target's greedy choice for each next position (greedy[:, i] -> i+1)."""
    out = target(input_ids=input_ids, output_hidden_states=True)
    return out.hidden_states, out.logits.argmax(-1)


def block_hidden(drafter: DFlashDrafter, embed, input_ids, hidden_states, anchors) -> torch.Tensor:
    """Drafter hidden states for every anchor's block in one forward: [B, A, b, H]."""
    b = drafter.block_size
    bsz, length = input_ids.shape
    n_anchor = anchors.shape[1]
    device = input_ids.device
    block_ids = torch.full((bsz, n_anchor, b), drafter.mask_token_id, dtype=torch.long, device=device)
    block_ids[..., 0] = input_ids.gather(1, anchors)
    positions = (anchors[..., None] + torch.arange(b, device=device)).view(bsz, n_anchor * b)
    ctx_pos = torch.arange(length, device=device).expand(bsz, length)
    ctx_kv = drafter.context_kv(drafter.context_states(hidden_states), ctx_pos)
    sees_ctx = torch.arange(length, device=device) < anchors[..., None]               # [B, A, L]: p < a
    sees_ctx = sees_ctx[:, :, None, :].expand(bsz, n_anchor, b, length).reshape(bsz, n_anchor * b, length)
    own = torch.block_diag(*[torch.ones(b, b, dtype=torch.bool, device=device)] * n_anchor)
    mask = torch.cat([sees_ctx, own.expand(bsz, -1, -1)], dim=-1)
    hidden = drafter(embed(block_ids.view(bsz, n_anchor * b)), positions, ctx_kv, mask)
    return hidden.view(bsz, n_anchor, b, -1)


def slot_weights(block_size: int, gamma: float, device=None) -> torch.Tensor:
    """exp(-(k-1)/gamma) for slots k = 1..b-1: early slots matter most, since a miss ends the block."""
    k = torch.arange(1, block_size, device=device, dtype=torch.float32)
    return torch.exp(-(k - 1) / gamma)


def drafter_loss(drafter, target, input_ids, lengths, anchors, gamma: float = 4.0):
    """Weighted cross-entropy of slots 1..b-1 against the target's greedy tokens at a+1..a+b-1."""
    b = drafter.block_size
    hidden_states, greedy = target_pass(target, input_ids)
    h = block_hidden(drafter, target.get_input_embeddings(), input_ids, hidden_states, anchors)
    logits = target.get_output_embeddings()(h[:, :, 1:])                              # [B, A, b-1, V]
    label_pos = anchors[..., None] + torch.arange(b - 1, device=input_ids.device)    # greedy at a+k-1 -> a+k
    valid = label_pos < (lengths[:, None, None] - 1)                                  # labels past the end: masked
    labels = greedy.gather(1, label_pos.clamp(max=input_ids.shape[1] - 1).view(len(input_ids), -1)).view_as(label_pos)
    ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none").view_as(label_pos)
    w = slot_weights(b, gamma, input_ids.device) * valid
    return (ce * w).sum() / w.sum().clamp(min=1e-9)


def sample_anchors(lengths, starts, n: int, generator) -> torch.Tensor:
    """n anchors per row in [start, length - 2]: an anchor is an emitted token with at least one label."""
    rows = []
    for length, start in zip(lengths.tolist(), starts.tolist()):
        hi = max(start + 1, length - 1)
        rows.append(torch.randint(start, hi, (n,), generator=generator))
    return torch.stack(rows).to(lengths.device)


def train_drafter(drafter: DFlashDrafter, target, sequences: list[list[int]], starts: list[int], steps: int,
                  batch: int = 16, anchors: int = 16, lr: float = 3e-3, gamma: float = 4.0, pad_id: int = 0,
                  seed: int = 0, log=None) -> list[float]:
    """Train the drafter on sequences (ideally the target's own outputs); anchors fall at or after starts.
    `log(step, loss)` after each step (core.progress.Steps.tick: a line at a modest rate)."""
    target.requires_grad_(False)
    drafter.train()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    losses = []
    for step in range(steps):
        idx = torch.randint(0, len(sequences), (batch,), generator=gen).tolist()
        rows = [sequences[i] for i in idx]
        width = max(map(len, rows))
        input_ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
        lengths = torch.tensor([len(r) for r in rows])
        a = sample_anchors(lengths, torch.tensor([starts[i] for i in idx]), anchors, gen)
        loss = drafter_loss(drafter, target, input_ids, lengths, a, gamma)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log:
            log(step, loss.item())
    drafter.eval()
    return losses

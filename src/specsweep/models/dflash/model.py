"""The DFlash drafter in torch, in the published checkpoint format, with vLLM's forward semantics.

Context: target hidden states at `target_layer_ids` (HF `hidden_states[id + 1]`), concatenated, through
`fc` and `hidden_norm`; each layer projects them with its own k/v projections (k_norm, RoPE at their
positions). Block: token embeddings (the target's) through Qwen3 decoder layers whose queries attend,
non-causally, to [context ; block]. The target's lm_head turns the final hidden states into drafts.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specsweep.models import model_shape
from specsweep.models.drafter_config import mask_token_id, target_layer_ids


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope(x, cos, sin):
    """Rotate-half RoPE (Qwen3's); x [B, heads, T, hd], cos/sin [B, T, hd]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


class Attention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.heads, self.kv_heads, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        h, bias = c["hidden_size"], c.get("attention_bias", False)
        self.q_proj = nn.Linear(h, self.heads * self.hd, bias=bias)
        self.k_proj = nn.Linear(h, self.kv_heads * self.hd, bias=bias)
        self.v_proj = nn.Linear(h, self.kv_heads * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.hd, h, bias=False)
        self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])

    def kv(self, x, cos, sin):
        b, t, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        return rope(k, cos, sin), v

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.hd)).transpose(1, 2)
        q = rope(q, cos, sin)
        k, v = self.kv(x, cos, sin)
        k, v = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])   # mask [B, T, Lctx + T]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Layer(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, i, bias=False)
        self.mlp.up_proj = nn.Linear(h, i, bias=False)
        self.mlp.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x, cos, sin, ctx_k, ctx_v, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx_k, ctx_v, mask)
        h = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(h)) * self.mlp.up_proj(h))


class DFlashDrafter(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        self.config = config
        shape = model_shape.shape(config)     # a drafter's config is flat; the owner reads it like any other
        h = shape.hidden
        self.layer_ids = target_layer_ids(config)
        self.mask_token_id = mask_token_id(config)
        self.block_size = config.get("block_size") or (config.get("dflash_config") or {}).get("block_size")
        self.layers = nn.ModuleList(Layer(config) for _ in range(shape.layers))
        self.fc = nn.Linear(h * len(self.layer_ids), h, bias=False)
        self.hidden_norm = RMSNorm(h, config["rms_norm_eps"])
        self.norm = RMSNorm(h, config["rms_norm_eps"])
        hd = config["head_dim"]
        theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 1e6)
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd), persistent=False)

    # ---- checkpoint I/O: the published format (no `model.` prefix, no embeddings, no lm_head) -----------
    @classmethod
    def from_pretrained(cls, path: str | Path, dtype=torch.float32) -> "DFlashDrafter":
        from safetensors.torch import load_file

        path = Path(path)
        model = cls(json.loads((path / "config.json").read_text()))
        state = {}
        for f in sorted(path.glob("*.safetensors")):
            state.update(load_file(str(f)))
        model.load_state_dict(state, strict=True)
        return model.to(dtype).eval()

    def save_pretrained(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(path / "model.safetensors"))
        (path / "config.json").write_text(json.dumps(self.config, indent=2, sort_keys=True) + "\n")

    # ---- forward -------------------------------------------------------------------------------------------
    def cos_sin(self, positions):
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        dtype = self.fc.weight.dtype                     # computed in fp32, applied in the weights' dtype
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def context_states(self, hidden_states: tuple) -> torch.Tensor:
        """fc over the concatenated target layers (HF hidden_states, index 0 = embeddings)."""
        return self.fc(torch.cat([hidden_states[i + 1] for i in self.layer_ids], dim=-1))

    def context_kv(self, ctx_states, ctx_positions) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's K/V for context positions; cacheable, since a position's context never changes."""
        normed = self.hidden_norm(ctx_states)
        cos, sin = self.cos_sin(ctx_positions)
        return [layer.self_attn.kv(normed, cos, sin) for layer in self.layers]

    def forward(self, block_embeds, block_positions, ctx_kv, mask) -> torch.Tensor:
        """Final hidden states of the block(s). `mask` says which keys each query sees: [B, Lctx] for one
        block (padding False; the block sees itself), or [B, T, Lctx + T] in full (training's many blocks)."""
        b, t, _ = block_embeds.shape
        if mask.dim() == 2:
            own = torch.ones(b, t, dtype=torch.bool, device=mask.device)
            mask = torch.cat([mask, own], dim=1)[:, None, :].expand(b, t, -1)
        cos, sin = self.cos_sin(block_positions)
        x = block_embeds
        for layer, (k, v) in zip(self.layers, ctx_kv):
            x = layer(x, cos, sin, k, v, mask)
        return self.norm(x)

"""What a DFlash drafter checkpoint is: its config, or one inferred from the safetensors shapes alone."""
from __future__ import annotations

import re
from pathlib import Path

from specsweep.models import model_shape


def weight_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from every *.safetensors file in a checkpoint directory (headers only, no tensors)."""
    from safetensors import safe_open

    shapes = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                shapes[name] = tuple(st.get_slice(name).get_shape())
    return shapes


def default_target_layer_ids(num_target_layers: int, k: int) -> list[int]:
    """The authors' spacing: one id -> [n // 2]; else round(1 + i * (n - 4) / (k - 1))."""
    if k == 1:
        return [num_target_layers // 2]
    return [round(1 + i * (num_target_layers - 4) / (k - 1)) for i in range(k)]


def infer_config(shapes: dict[str, tuple[int, ...]], target: dict | None = None) -> tuple[dict, list[str]]:
    """A DFlash config implied by weight shapes; returns it and what had to be assumed."""
    if "fc.weight" not in shapes:
        raise ValueError("no fc.weight: this is not a DFlash drafter checkpoint")
    hidden, fc_in = shapes["fc.weight"]
    if fc_in % hidden:
        raise ValueError(f"fc.weight {shapes['fc.weight']} is not [H, k*H]")
    k = fc_in // hidden
    layers = sorted({int(m.group(1)) for n in shapes if (m := re.match(r"layers\.(\d+)\.", n))})
    q = shapes["layers.0.self_attn.q_proj.weight"][0]
    kv = shapes["layers.0.self_attn.k_proj.weight"][0]
    head_dim = shapes["layers.0.self_attn.q_norm.weight"][0]
    assumed = []
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
        "num_hidden_layers": len(layers), "num_attention_heads": q // head_dim, "num_key_value_heads": kv // head_dim,
        "head_dim": head_dim, "intermediate_size": shapes["layers.0.mlp.gate_proj.weight"][0],
        "hidden_act": "silu", "attention_bias": "layers.0.self_attn.q_proj.bias" in shapes,
    }
    assumed.append("hidden_act=silu, rms_norm_eps and rope settings copied from the target (Qwen3 defaults)")
    shape = model_shape.shape(target) if target else None
    if shape:
        text = model_shape.text_config(target)
        n = shape.layers
        rope = (text.get("rope_parameters") or {}).get("rope_theta")
        cfg.update(num_target_layers=n, vocab_size=shape.vocab, rms_norm_eps=text.get("rms_norm_eps", 1e-6),
                   rope_theta=text.get("rope_theta") or rope or 1e6,
                   max_position_embeddings=text.get("max_position_embeddings", 40960))
        ids = default_target_layer_ids(n, k)
        assumed.append(f"target_layer_ids={ids}: the authors' default spacing for {k} context layers of {n}")
        mask = target.get("mask_token_id", text.get("mask_token_id"))
        if mask is None:
            assumed.append("mask_token_id unknown: set dflash_config.mask_token_id (Qwen3 drafters use 151669)")
        cfg["dflash_config"] = {"target_layer_ids": ids, "mask_token_id": mask}
    else:
        assumed.append(f"{k} context layers, but no target config was given: target_layer_ids, vocab_size and "
                       "mask_token_id are left out")
    return cfg, assumed


def mask_token_id(cfg: dict) -> int | None:
    return (cfg.get("dflash_config") or {}).get("mask_token_id", cfg.get("mask_token_id"))


def target_layer_ids(cfg: dict) -> list[int] | None:
    return (cfg.get("dflash_config") or {}).get("target_layer_ids", cfg.get("target_layer_ids"))


def block_size(cfg: dict) -> int | None:
    """The drafter's block: `dflash_config.block_size` (the newer drafters) or a top-level `block_size`."""
    return (cfg.get("dflash_config") or {}).get("block_size", cfg.get("block_size"))

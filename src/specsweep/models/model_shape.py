"""A model's shape, from its config.json alone: the one owner of reading layers, heads, vocab and layer types.

A checkpoint's config may keep the text model's fields at the top level (a plain causal LM, a DFlash drafter) or
nested in a multimodal wrapper (`text_config` of Qwen3.5/3.6's `Qwen3_5ForConditionalGeneration`, `llm_config`,
`language_config`, `thinker_config.text_config`): `text_config` finds it as transformers'
`PretrainedConfig.get_text_config` does, without loading anything. `Shape` then says what the model holds whatever
serves it: its parameters and weights, the KV of attention layers a token, and the conv and recurrent state of
linear-attention (Gated DeltaNet) layers a sequence at `mamba_ssm_dtype`
(`MambaStateShapeCalculator.gated_delta_net_state_shape`). How an engine lays those out (vLLM 0.26's blocks and
pages) is its backend's: `backends/vllm/memory.py`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Where composite configs keep their text model: transformers' get_text_config names (decoder, generator,
# text_config, text_encoder) and the multimodal wrappers' own (InternVL/DeepSeek-VL llm_config/language_config,
# Qwen-Omni thinker_config whose text model is its own text_config).
TEXT_KEYS = ("text_config", "language_config", "llm_config", "decoder", "generator", "text_encoder",
             "thinker_config")
TOWER_KEYS = ("vision_config", "audio_config", "vision_tower", "audio_tower", "speech_config")
LINEAR_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "gated_delta_net"})
SLIDING_TYPES = frozenset({"sliding_attention", "chunked_attention"})
DTYPE_BYTES = {"float32": 4, "float": 4, "fp32": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp16": 2, "bf16": 2,
               "float8": 1, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def read_config(path: str | Path) -> dict | None:
    """A checkpoint folder's (or a config.json path's) config as shipped; None where there is none to read."""
    f = Path(path)
    f = f / "config.json" if f.is_dir() or not f.suffix else f
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def text_config(cfg: dict) -> dict:
    """The text model's config inside `cfg` (a nested text_config, language_config, llm_config,
    thinker_config.text_config ...), else `cfg` itself."""
    for key in TEXT_KEYS:
        sub = cfg.get(key)
        if isinstance(sub, dict) and sub:
            return text_config(sub)
    return cfg


def dtype_bytes(dtype: str | None) -> int:
    """Bytes a value of this dtype name takes (torch or vLLM spelling, 'torch.' prefix allowed); 2 where unknown."""
    return DTYPE_BYTES.get(str(dtype or "").removeprefix("torch."), 2)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    layer_types: tuple[str, ...]
    tie_embeddings: bool
    dtype: str
    ssm_dtype: str
    multimodal: bool
    architectures: tuple[str, ...]
    attn_output_gate: bool = False       # Qwen3.5/Qwen3-Next gated attention: q_proj gives heads x head_dim x 2
    linear_k_heads: int = 0              # Gated DeltaNet: key heads, value heads, their dims, conv kernel
    linear_v_heads: int = 0
    linear_k_dim: int = 0
    linear_v_dim: int = 0
    conv_kernel: int = 4
    sliding_window: int | None = None
    context_layers: int = 0              # a DFlash drafter's tapped target layers (its fc: hidden x layers x hidden)
    experts: int = 0                     # MoE: experts per layer and each one's FFN size, plus a shared expert's
    expert_intermediate: int = 0
    shared_intermediate: int = 0
    tower_params: int = 0                # the vision/audio tower's parameter count, roughly (0 where none)

    @property
    def full_attention_layers(self) -> int:
        return sum(t not in LINEAR_TYPES and t not in SLIDING_TYPES for t in self.layer_types)

    @property
    def linear_attention_layers(self) -> int:
        return sum(t in LINEAR_TYPES for t in self.layer_types)

    @property
    def attention_layers(self) -> int:
        """Layers that hold a KV cache: full and sliding-window attention."""
        return self.layers - self.linear_attention_layers

    @property
    def hybrid(self) -> bool:
        return self.linear_attention_layers > 0

    @property
    def drafter(self) -> bool:
        return "DFlashDraftModel" in self.architectures or self.context_layers > 0

    # ---- the caches -------------------------------------------------------------------------------------------
    def kv_bytes_per_token_layer(self, width: int = 2) -> int:
        """One attention layer's K and V for one token: vLLM's FullAttentionSpec(block_size=1).page_size_bytes."""
        return 2 * self.kv_heads * self.head_dim * width

    def kv_bytes_per_token(self, width: int = 2) -> int:
        """The KV cache of one token: attention layers only (a sliding-window layer counts in full: an upper bound,
        and all a 5-layer drafter's are); linear-attention layers hold none."""
        return self.attention_layers * self.kv_bytes_per_token_layer(width)

    def mamba_page_bytes(self, spec_tokens: int = 0) -> int:
        """One linear-attention layer's state for one sequence, unpadded (vLLM's MambaSpec page): the conv state
        (kernel - 1 + spec tokens) x (2 key dims + value dims) at the model dtype, and the recurrent state value
        heads x value dim x key dim at mamba_ssm_dtype."""
        if not self.hybrid:
            return 0
        conv_dim = 2 * self.linear_k_heads * self.linear_k_dim + self.linear_v_heads * self.linear_v_dim
        conv = (self.conv_kernel - 1 + spec_tokens) * conv_dim * dtype_bytes(self.dtype)
        return conv + self.linear_v_heads * self.linear_v_dim * self.linear_k_dim * dtype_bytes(self.ssm_dtype)

    # ---- the weights ------------------------------------------------------------------------------------------
    def params(self, language_only: bool = True) -> int:
        """Parameters counted from the shape: embeddings (none in a DFlash drafter, which shares the target's),
        an untied lm_head, each layer's attention or Gated DeltaNet projections and its MLP, a drafter's fc, and
        the vision/audio tower unless language_only. Norms and biases are left out (well under 0.1%)."""
        h = self.hidden
        q = self.heads * self.head_dim
        attn = h * q * (2 if self.attn_output_gate else 1) + 2 * h * self.kv_heads * self.head_dim + q * h
        kd, vd = self.linear_k_heads * self.linear_k_dim, self.linear_v_heads * self.linear_v_dim
        gdn = h * (2 * kd + 2 * vd) + h * 2 * self.linear_v_heads + (2 * kd + vd) * self.conv_kernel + vd * h
        if self.experts:
            mlp = 3 * h * (self.experts * self.expert_intermediate + self.shared_intermediate) + h * self.experts
        else:
            mlp = 3 * h * self.intermediate
        total = self.linear_attention_layers * gdn + self.attention_layers * attn + self.layers * mlp
        if self.drafter:
            total += self.context_layers * h * h
        else:
            total += self.vocab * h * (1 if self.tie_embeddings else 2)
        return total + (0 if language_only else self.tower_params)

    def weights_bytes(self, width: int = 2, language_only: bool = True) -> int:
        return width * self.params(language_only)


def _layer_types(t: dict, layers: int) -> tuple[str, ...]:
    given = t.get("layer_types")
    if isinstance(given, list) and len(given) == layers:
        return tuple(str(x) for x in given)
    interval = t.get("full_attention_interval")
    if interval and ("linear_num_value_heads" in t or "linear_key_head_dim" in t):   # Qwen3-Next/3.5 spelling
        return tuple("full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(layers))
    return ("full_attention",) * layers


def _tower_params(cfg: dict) -> int:
    total = 0
    for key in TOWER_KEYS:
        v = cfg.get(key)
        if not isinstance(v, dict):
            continue
        h = int(v.get("hidden_size") or v.get("embed_dim") or v.get("d_model") or 0)
        depth = int(v.get("depth") or v.get("num_hidden_layers") or v.get("encoder_layers") or 0)
        inter = int(v.get("intermediate_size") or v.get("encoder_ffn_dim") or 4 * h)
        out = int(v.get("out_hidden_size") or 0)
        merge = int(v.get("spatial_merge_size") or 1) ** 2
        total += depth * (4 * h * h + 2 * h * inter) + (h * merge) ** 2 + h * merge * out
    return total


def shape(path_or_cfg: str | Path | dict | None) -> Shape | None:
    """The text model's Shape of a checkpoint folder, a config.json path, or a config dict; None where there is no
    config or it names no layers (a field it lacks counts 0, or its usual default)."""
    cfg = path_or_cfg if isinstance(path_or_cfg, dict) else read_config(path_or_cfg) if path_or_cfg else None
    if not cfg:
        return None
    t = text_config(cfg)

    def get(key, default=None):
        v = t.get(key)
        return cfg.get(key, default) if v is None else v

    layers = int(get("num_hidden_layers") or get("num_layers") or get("n_layer") or 0)
    hidden = int(get("hidden_size") or get("d_model") or get("n_embd") or 0)
    if not layers:
        return None
    heads = int(get("num_attention_heads") or get("n_head") or 1)
    dtype = str(get("dtype") or get("torch_dtype") or "bfloat16").removeprefix("torch.")
    dflash = cfg.get("dflash_config") or {}
    ids = dflash.get("target_layer_ids") or cfg.get("target_layer_ids") or []
    return Shape(
        layers=layers, hidden=hidden, heads=heads,
        kv_heads=int(get("num_key_value_heads") or heads),
        head_dim=int(get("head_dim") or hidden // heads),
        vocab=int(get("vocab_size") or 0),
        intermediate=int(get("intermediate_size") or 4 * hidden),
        layer_types=_layer_types(t, layers),
        tie_embeddings=bool(get("tie_word_embeddings", False)),
        dtype=dtype, ssm_dtype=str(get("mamba_ssm_dtype") or dtype).removeprefix("torch."),
        multimodal=any(isinstance(cfg.get(k), dict) for k in TOWER_KEYS)
        or any(isinstance((cfg.get("thinker_config") or {}).get(k), dict) for k in TOWER_KEYS),
        architectures=tuple(cfg.get("architectures") or t.get("architectures") or ()),
        attn_output_gate=bool(get("attn_output_gate", False)),
        linear_k_heads=int(get("linear_num_key_heads") or 0), linear_v_heads=int(get("linear_num_value_heads") or 0),
        linear_k_dim=int(get("linear_key_head_dim") or 0), linear_v_dim=int(get("linear_value_head_dim") or 0),
        conv_kernel=int(get("linear_conv_kernel_dim") or 4),
        sliding_window=get("sliding_window"),
        context_layers=len(ids) if "DFlashDraftModel" in (cfg.get("architectures") or []) else 0,
        experts=int(get("num_experts") or 0), expert_intermediate=int(get("moe_intermediate_size") or 0),
        shared_intermediate=int(get("shared_expert_intermediate_size") or 0),
        tower_params=_tower_params(cfg) + _tower_params(cfg.get("thinker_config") or {}),
    )


def files_bytes(folder: str | Path | None) -> int | None:
    """A checkpoint folder's weights on disk: its safetensors index's total_size, else its safetensors files' sizes
    together; None where it has none."""
    d = Path(folder) if folder else None
    if d is None or not d.is_dir():
        return None
    index = d / "model.safetensors.index.json"
    if index.exists():
        return json.loads(index.read_text()).get("metadata", {}).get("total_size")
    files = list(d.glob("*.safetensors"))
    return sum(f.stat().st_size for f in files) if files else None


def weights_bytes(path: str | Path | None, dummy: bool = False, width: int = 2) -> int | None:
    """A model's weights as a server holds them: its safetensors' size where it has them and loads them, else, for
    random (dummy) weights or a folder of config only, `width` bytes a parameter counted from its shape (the text
    model only, as served with --language-model-only); 0 for no model, None where neither is on this machine. The
    one owner of a model's weight size."""
    if not path:
        return 0
    on_disk = None if dummy else files_bytes(path)
    if on_disk:
        return on_disk
    s = shape(path)
    return None if s is None else s.weights_bytes(width)

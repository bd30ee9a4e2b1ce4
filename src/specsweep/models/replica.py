"""Real-format weights for a config-only replica (`specsweep shape NAME DEST --weights`, issue 52): random values in
bf16 safetensors, sharded, with `model.safetensors.index.json`, so that a server loads them from files as it loads a
published checkpoint (no `--load-format dummy`): the load path, the planner's reading of weights from safetensors
(model_shape.files_bytes) and a level-2 sleep, whose wake reloads the weights from disk, all run as a user's would.

Dense Qwen3 layouts (the target's `Qwen3ForCausalLM` names under `model.`, and a DFlash drafter's, which has no
`model.` prefix, no embedding and no LM head: `layers.{i}.*`, `norm`, `hidden_norm`, `fc`; shared/notes/dflash.md),
and the dense Qwen3.5/3.6 Gated DeltaNet hybrid's text model (`hybrid_tensors`); no MoE.
The file is written tensor by tensor and each tensor in chunks, so memory stays at one chunk whatever the model's
size; the safetensors format (an 8-byte header length, a JSON header of dtype, shape and offsets, the raw bytes) is
written directly, which needs neither torch nor the safetensors package on the host. A matrix's values are random
bf16 bit patterns: a random sign and mantissa under one exponent, so each is +-[2^-6, 2^-5) (standard deviation
about 0.024, mean 0), drawn as random 16-bit integers: 240 M values a second on one loaded core here, where a
normal draw made 14 M (9.2 G values for the 8B pair). Norms get their neutral value, as a model's own init gives
them: 1 for a norm that scales by its weight (Qwen3's, the hybrid's gated GDN norm), 0 for the hybrid's other norms,
which scale by 1 + weight (zero-centred: vLLM's GemmaRMSNorm). Random text, no NaN or overflow.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from specsweep.core.errors import SpecsweepError
from specsweep.models import model_shape

INDEX = "model.safetensors.index.json"
HYBRID = "model.language_model."    # the hybrid's text model's names (a dense Qwen3's are under model.)
SIGN_MANTISSA, EXPONENT = 0x807F, 121 << 7     # bf16: sign, 8-bit exponent (bias 127), 7-bit mantissa
CHUNK = 1 << 24            # values drawn at once (32 MiB)
SHARD_BYTES = 2 << 30      # a shard's size, at most (a tensor larger than this is a shard of its own)


def tensors(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Each tensor's name and shape, in the order written, of a dense Qwen3 target, a Qwen3.5/3.6 Gated DeltaNet
    hybrid target (its text model, as served with --language-model-only: `hybrid_tensors`) or a DFlash drafter's
    config."""
    s = model_shape.shape(cfg)          # the one reader of a model's shape
    if s.linear_attention_layers and not s.experts:
        return hybrid_tensors(s)
    if cfg.get("text_config") or s.experts or any(t not in ("full_attention", "sliding_attention")
                                                   for t in s.layer_types):
        raise SpecsweepError("shape --weights: only dense Qwen3 and dense Qwen3.5/3.6 hybrid layouts are written "
                             "(qwen3-8b, qwen3.5-27b, qwen3.6-27b); an MoE target has no writer here: serve it with "
                             "--load-format dummy")
    h, n, vocab = s.hidden, s.layers, s.vocab
    drafter = "DFlashDraftModel" in s.architectures
    pre = "" if drafter else "model."
    out: list[tuple[str, tuple[int, ...]]] = [] if drafter else [("model.embed_tokens.weight", (vocab, h))]
    for i in range(n):
        p = f"{pre}layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                *_attention(p, s), *_mlp(p, s)]
    out.append((f"{pre}norm.weight", (h,)))
    if drafter:
        out += [("hidden_norm.weight", (h,)), ("fc.weight", (h, h * s.context_layers))]
    elif not s.tie_embeddings:
        out.append(("lm_head.weight", (vocab, h)))
    return out


def _attention(p: str, s) -> list[tuple[str, tuple[int, ...]]]:
    q = s.heads * s.head_dim * (2 if s.attn_output_gate else 1)      # a gated attention's q_proj gives the gate too
    return [(p + "self_attn.q_proj.weight", (q, s.hidden)), (p + "self_attn.k_proj.weight", (s.kv_heads * s.head_dim, s.hidden)),
            (p + "self_attn.v_proj.weight", (s.kv_heads * s.head_dim, s.hidden)),
            (p + "self_attn.o_proj.weight", (s.hidden, s.heads * s.head_dim)),
            (p + "self_attn.q_norm.weight", (s.head_dim,)), (p + "self_attn.k_norm.weight", (s.head_dim,))]


def _mlp(p: str, s) -> list[tuple[str, tuple[int, ...]]]:
    return [(p + "mlp.gate_proj.weight", (s.intermediate, s.hidden)), (p + "mlp.up_proj.weight", (s.intermediate, s.hidden)),
            (p + "mlp.down_proj.weight", (s.hidden, s.intermediate))]


def hybrid_tensors(s) -> list[tuple[str, tuple[int, ...]]]:
    """A dense Qwen3.5/3.6 hybrid's text model under `model.language_model.` (the checkpoint's names, which vLLM's
    Qwen3_5 loader maps): each Gated DeltaNet layer's `linear_attn` (in_proj_qkv, in_proj_z, in_proj_b,
    in_proj_a, conv1d, dt_bias, A_log, a gated norm, out_proj), each full layer's gated `self_attn`; no vision tower
    (the launch serves such a checkpoint with --language-model-only). tests/test_replica.py checks the names and
    shapes against transformers' own model of the config."""
    h, pre = s.hidden, HYBRID
    keys, values = s.linear_k_heads * s.linear_k_dim, s.linear_v_heads * s.linear_v_dim
    conv = 2 * keys + values
    out: list[tuple[str, tuple[int, ...]]] = [(pre + "embed_tokens.weight", (s.vocab, h))]
    for i, kind in enumerate(s.layer_types):
        p = f"{pre}layers.{i}."
        if kind in model_shape.LINEAR_TYPES:
            a = p + "linear_attn."
            mixer = [(a + "dt_bias", (s.linear_v_heads,)), (a + "A_log", (s.linear_v_heads,)),
                     (a + "conv1d.weight", (conv, 1, s.conv_kernel)), (a + "norm.weight", (s.linear_v_dim,)),
                     (a + "out_proj.weight", (h, values)), (a + "in_proj_qkv.weight", (conv, h)),
                     (a + "in_proj_z.weight", (values, h)), (a + "in_proj_b.weight", (s.linear_v_heads, h)),
                     (a + "in_proj_a.weight", (s.linear_v_heads, h))]
        else:
            mixer = _attention(p, s)
        out += [*mixer, *_mlp(p, s), (p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,))]
    out.append((pre + "norm.weight", (h,)))
    if not s.tie_embeddings:
        out.append(("lm_head.weight", (s.vocab, h)))
    return out


def _size(shape: tuple[int, ...]) -> int:
    return 2 * int(np.prod(shape))


def shards(named: list[tuple[str, tuple[int, ...]]], shard_bytes: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The tensors packed in order into shards of at most `shard_bytes` (a larger tensor alone)."""
    out: list[list] = [[]]
    used = 0
    for name, shape in named:
        if out[-1] and used + _size(shape) > shard_bytes:
            out.append([])
            used = 0
        out[-1].append((name, shape))
        used += _size(shape)
    return out


def _write_tensor(f, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> None:
    count = int(np.prod(shape))
    if name.endswith("norm.weight"):        # RMSNorm weights, neutral: 1.0 in bf16 is 0x3F80, or 0 (zero-centred)
        zero_centred = name.startswith(HYBRID) and ".linear_attn." not in name
        f.write(np.full(count, 0 if zero_centred else 0x3F80, dtype="<u2").tobytes())
        return
    for start in range(0, count, CHUNK):
        bits = rng.integers(0, 1 << 16, size=min(CHUNK, count - start), dtype=np.uint16)
        bits &= SIGN_MANTISSA
        bits |= EXPONENT
        f.write(bits.astype("<u2", copy=False).tobytes())


def write_shard(path: Path, named: list[tuple[str, tuple[int, ...]]], rng: np.random.Generator) -> int:
    """One safetensors file of these tensors, written through a temporary name; returns its tensors' bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in named:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + _size(shape)]}
        offset += _size(shape)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)                      # the data starts 8-byte aligned
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, shape in named:
            _write_tensor(f, name, shape, rng)
    os.replace(tmp, path)
    return offset


def write_weights(folder: str | Path, shard_bytes: int = SHARD_BYTES, seed: int = 0, progress=None) -> int:
    """Random bf16 weights for the config.json in `folder`: model-0000i-of-0000n.safetensors and the index (its
    metadata's total_size: what model_shape.files_bytes reads). Returns the bytes written."""
    d = Path(folder)
    cfg = json.loads((d / "config.json").read_text())
    parts = shards(tensors(cfg), shard_bytes)
    rng = np.random.default_rng(seed)
    weight_map, total = {}, 0
    for i, part in enumerate(parts, 1):
        name = f"model-{i:05d}-of-{len(parts):05d}.safetensors"
        total += write_shard(d / name, part, rng)
        weight_map.update({t: name for t, _ in part})
        if progress:
            progress(f"{d.name}: {name} ({total / 2 ** 30:.1f} GiB so far)")
    (d / INDEX).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return total

"""Config-only replicas of published pairs: study a model's cost before downloading its weights.

vLLM's `--load-format dummy` makes random weights itself, for the target and the drafter, so a model-sized cost
study needs only each `config.json` and a tokenizer of the model's own vocabulary (every id, text carried word by
word or in characters, a ChatML template: `tokenizer`). `specsweep shape NAME DEST` writes DEST/target (config,
tokenizer, generation config, and a multimodal target's processor files: `QWEN35_PROCESSOR`) and
DEST/drafter/config.json (vLLM 0.26's DFlash format: `DFlashDraftModel`, `dflash_config` with `mask_token_id` and
`target_layer_ids`, `block_size`, `num_target_layers`). Random weights accept no drafts: such a pair measures the
cost side, or set acceptance (`sweep.set_acceptance`).

Shapes (../shared/notes/hybrid-models.md): `qwen3-8b` (Qwen3-8B and z-lab/Qwen3-8B-DFlash-b16), `qwen3.5-27b`
(the Gated DeltaNet hybrid inside its multimodal `Qwen3_5ForConditionalGeneration` wrapper, and a drafter of
z-lab/Qwen3.5-27B-DFlash's layout: five full_attention layers) and `qwen3.6-27b` (the same target; the drafter of
z-lab/Qwen3.6-27B-DFlash: four sliding_attention layers of window 2048, then one full_attention), and
`qwen3.6-35b-a3b` (../shared/notes/moe-hybrid.md: the Gated DeltaNet hybrid MoE Qwen3.6-35B-A3B in its
`Qwen3_5MoeForConditionalGeneration` wrapper, 40 layers, 256 experts top-8 and a shared expert, and the current
z-lab/Qwen3.6-35B-A3B-DFlash: five sliding_attention layers of window 4096, then one full_attention, mask token
248077, eight tapped layers, `block_size` inside `dflash_config`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from specsweep.core.errors import SpecsweepError

DRAFT_LAYERS, BLOCK = 5, 16
CHAT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content']"
                 " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                 "{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@dataclass(frozen=True)
class Family:
    target: dict                    # the target's config.json
    drafter: dict                   # the drafter's config.json
    specials: dict = field(default_factory=dict)      # token -> id in the replica tokenizer
    processor: dict = field(default_factory=dict)     # file name -> the checkpoint's processor file (beside config)


def _ids(n: int, k: int = DRAFT_LAYERS) -> list[int]:
    """The authors' spacing of k tapped layers in n: round(1 + i (n - 4) / (k - 1))."""
    return [round(1 + i * (n - 4) / (k - 1)) for i in range(k)]


def _qwen3_8b() -> Family:
    specials = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|MASK|>": 151669}
    shape = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False)
    n = shape["num_hidden_layers"]
    common = {**shape, "model_type": "qwen3", "hidden_act": "silu", "attention_bias": False,
              "attention_dropout": 0.0, "torch_dtype": "bfloat16", "use_sliding_window": False,
              "sliding_window": None, "bos_token_id": 151643, "eos_token_id": 151645, "pad_token_id": 151643}
    target = {**common, "architectures": ["Qwen3ForCausalLM"], "max_window_layers": n,
              "layer_types": ["full_attention"] * n}
    drafter = {**common, "architectures": ["DFlashDraftModel"], "num_hidden_layers": DRAFT_LAYERS,
               "layer_types": ["full_attention"] * DRAFT_LAYERS, "block_size": BLOCK, "num_target_layers": n,
               "dflash_config": {"mask_token_id": specials["<|MASK|>"], "target_layer_ids": _ids(n)}}
    return Family(target, drafter, specials)


QWEN35_SPECIALS = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<|MASK|>": 248070}


def qwen35_27b_target() -> dict:
    """Qwen3.5/3.6-27B as shipped: the text model (64 layers, every 4th full_attention with an output gate, the
    rest Gated DeltaNet) under `text_config`, a vision tower under `vision_config`, nothing of the text model's
    shape at the top level. Field names are transformers' Qwen3_5Config/Qwen3_5TextConfig, which vLLM 0.26 reads."""
    n, eos, pad = 64, QWEN35_SPECIALS["<|im_end|>"], QWEN35_SPECIALS["<|endoftext|>"]
    text = {
        "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408,
        "num_hidden_layers": n, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
        "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "initializer_range": 0.02,
        "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "full_attention_interval": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)],
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_num_key_heads": 16, "linear_num_value_heads": 48, "mamba_ssm_dtype": "float32",
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "dtype": "bfloat16", "use_cache": True, "bos_token_id": pad, "eos_token_id": eos, "pad_token_id": pad,
    }
    vision = {"model_type": "qwen3_5", "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh",
              "intermediate_size": 4304, "num_heads": 16, "in_channels": 3, "patch_size": 16,
              "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 5120,
              "num_position_embeddings": 2304, "initializer_range": 0.02}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "dtype": "bfloat16",
            "text_config": text, "vision_config": vision, "tie_word_embeddings": False,
            "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
            "vision_end_token_id": 248054}


# The checkpoint's own processor files, written beside a multimodal target's config.json: SGLang (and vLLM without
# --language-model-only) builds the image processor at start-up even to serve text, and SGLang 0.5.17 exits without
# preprocessor_config.json ("OSError: Can't load image processor", on an H100 on 2026-12-06). preprocessor_config.json
# is Qwen/Qwen3.6-27B's as shipped (snapshot 6a9e13bd6fc8, quoted whole in helexa-ai/helexa's
# doc/vision-qwen3_6-spec.md). No copy of a Qwen3.5/3.6 video_preprocessor_config.json was found: its values are
# Qwen3-VL's video processor's (Qwen/Qwen3-VL-2B-Instruct's, whose vision tower has the same patch 16, merge 2 and
# temporal patch 2), as hand-written on that host, where SGLang then served the replica. The 35B-A3B's vision tower
# has the same sizes, so it gets the same files (not checked against its own).
QWEN35_PROCESSOR = {
    "preprocessor_config.json": {
        "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast"},
    "video_preprocessor_config.json": {
        "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16, "temporal_patch_size": 2,
        "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "processor_class": "Qwen3VLProcessor", "video_processor_type": "Qwen3VLVideoProcessor"},
}


def qwen35_27b_drafter(sliding: bool) -> dict:
    """z-lab's 5-layer DFlash drafter for the 27B (32 heads of 128, 8 KV heads, FFN 17408, taps [1, 16, 31, 46,
    61]): all full_attention (Qwen3.5-27B-DFlash), or four sliding_attention of window 2048 then one full
    (Qwen3.6-27B-DFlash, which vLLM runs only on its V2 model runner)."""
    n = 64
    types = (["sliding_attention"] * 4 + ["full_attention"]) if sliding else ["full_attention"] * DRAFT_LAYERS
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "dtype": "bfloat16",
        "vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": DRAFT_LAYERS,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "rope_theta": 10000000.0, "max_position_embeddings": 262144,
        "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
        "use_sliding_window": sliding, "sliding_window": 2048 if sliding else None,
        "max_window_layers": 4 if sliding else DRAFT_LAYERS, "layer_types": types,
        "block_size": BLOCK, "num_target_layers": n,
        "dflash_config": {"mask_token_id": QWEN35_SPECIALS["<|MASK|>"], "target_layer_ids": _ids(n)},
        "bos_token_id": QWEN35_SPECIALS["<|endoftext|>"], "eos_token_id": QWEN35_SPECIALS["<|im_end|>"],
    }


QWEN36_MOE_SPECIALS = {**QWEN35_SPECIALS, "<|MASK|>": 248077}     # the 35B-A3B drafter's own mask token


def qwen36_35b_a3b_target() -> dict:
    """Qwen/Qwen3.6-35B-A3B's config.json as the notes give it (Qwen3.5-35B-A3B has the same text shape): 40 layers,
    10 x (3 Gated DeltaNet + 1 gated full attention), each followed by an MoE of 256 experts (FFN 512, top-8) and
    a shared expert of 512, hidden 2048, 16 Q / 2 KV heads of 256, one MTP layer, inside the multimodal wrapper."""
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": 248044,
        "dtype": "bfloat16", "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144, "model_type": "qwen3_5_moe_text", "moe_intermediate_size": 512,
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "num_attention_heads": 16,
        "num_experts": 256, "num_experts_per_tok": 8, "num_hidden_layers": 40, "num_key_value_heads": 2,
        "output_router_logits": False, "pad_token_id": None, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "partial_rotary_factor": 0.25,
                            "rope_theta": 10000000, "rope_type": "default"},
        "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512, "tie_word_embeddings": False,
        "use_cache": True, "vocab_size": 248320,
    }
    vision = {"deepstack_visual_indexes": [], "depth": 27, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152,
              "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 4304, "model_type": "qwen3_5_moe",
              "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2048, "patch_size": 16,
              "spatial_merge_size": 2, "temporal_patch_size": 2}
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "image_token_id": 248056,
            "model_type": "qwen3_5_moe", "text_config": text, "tie_word_embeddings": False,
            "transformers_version": "4.57.1", "video_token_id": 248057, "vision_config": vision,
            "vision_end_token_id": 248054, "vision_start_token_id": 248053}


def qwen36_35b_a3b_drafter() -> dict:
    """z-lab/Qwen3.6-35B-A3B-DFlash's current layout (since mid-June 2026) as the notes give it: 6 layers, five
    sliding_attention (window 4096) then one full_attention (vLLM's V2 model runner), 32 Q / 8 KV heads of 128, FFN
    6144; `dflash_config` holds block_size 16, mask_token_id 248077 and the 8 tapped layers."""
    return {
        "architectures": ["DFlashDraftModel"], "attention_bias": False, "attention_dropout": 0.0,
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"}, "bos_token_id": None,
        "dflash_config": {"block_size": BLOCK, "mask_token_id": QWEN36_MOE_SPECIALS["<|MASK|>"],
                          "target_layer_ids": [1, 6, 11, 16, 22, 27, 32, 37]},
        "dtype": "bfloat16", "eos_token_id": 248044, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 6144,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "max_position_embeddings": 262144,
        "max_window_layers": 6, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 6,
        "num_key_value_heads": 8, "num_target_layers": 40, "pad_token_id": None, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000000, "rope_type": "default"}, "sliding_window": 4096,
        "tie_word_embeddings": False, "transformers_version": "5.7.0", "use_cache": True, "use_sliding_window": True,
        "vocab_size": 248320,
    }


SHAPES = {
    "qwen3-8b": _qwen3_8b,
    "qwen3.5-27b": lambda: Family(qwen35_27b_target(), qwen35_27b_drafter(False), QWEN35_SPECIALS, QWEN35_PROCESSOR),
    "qwen3.6-27b": lambda: Family(qwen35_27b_target(), qwen35_27b_drafter(True), QWEN35_SPECIALS, QWEN35_PROCESSOR),
    "qwen3.6-35b-a3b": lambda: Family(qwen36_35b_a3b_target(), qwen36_35b_a3b_drafter(), QWEN36_MOE_SPECIALS,
                                      QWEN35_PROCESSOR),
}


def tokenizer(out: Path, vocab_size: int, specials: dict, max_length: int) -> None:
    """A tokenizer with exactly the model's ids that carries a prompt's text: each word of the synthetic problems
    and the chat roles one token (as a real tokenizer's common words are), any other word spelled in characters
    (WordPiece's ## pieces), never [UNK]; w<i> for every other id, which is what a random model's output reads as.
    A word-level vocabulary of w<i> alone made every English word [UNK]: a model saw a prompt's length only."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from specsweep.grid.datasets import synthetic_words

    chars = [chr(c) for c in range(33, 127)]
    words = dict.fromkeys([*chars, *("##" + c for c in chars), "system", "user", "assistant", *synthetic_words()])
    vocab = {"[UNK]": 0, **specials}
    free = (i for i in range(1, vocab_size) if i not in vocab.values())
    vocab.update(zip(words, free))
    taken = set(vocab.values())
    vocab.update({f"w{i}": i for i in range(vocab_size) if i not in taken})
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", additional_special_tokens=["<|im_start|>", "<|MASK|>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = max_length
    fast.save_pretrained(out)


def shallower(fam: Family, layers: int) -> Family:
    """The family with its target cut to its first `layers` layers (their layer types as they were: a hybrid keeps
    its pattern) and the drafter tapping that many, spaced as the authors space them (`_ids`): every layer's shape
    stays the model's, its depth does not, so random weights of it fit a GPU host's disk (`shape --layers`)."""
    from specsweep.models.model_shape import text_config

    target, drafter = json.loads(json.dumps(fam.target)), json.loads(json.dumps(fam.drafter))
    text = text_config(target)
    taps = (drafter.get("dflash_config") or {}).get("target_layer_ids") or []
    ids = _ids(layers, len(taps))
    if not len(set(ids)) == len(taps) or not 0 <= ids[0] and ids[-1] < layers <= text["num_hidden_layers"]:
        raise SpecsweepError(f"shape --layers {layers}: give {len(taps) + 3} to {text['num_hidden_layers']} layers "
                             f"(the drafter taps {len(taps)} distinct ones)")
    text["num_hidden_layers"] = layers
    if text.get("layer_types"):
        text["layer_types"] = text["layer_types"][:layers]
    if "max_window_layers" in text:
        text["max_window_layers"] = min(text["max_window_layers"], layers)
    drafter["num_target_layers"] = layers
    drafter["dflash_config"]["target_layer_ids"] = ids
    return replace(fam, target=target, drafter=drafter)


def write(name: str, dest: str | Path, with_tokenizer: bool = True, layers: int | None = None) -> Path:
    """DEST/target and DEST/drafter of shape `name` (one of SHAPES), cut to `layers` (shallower) where given; returns
    DEST."""
    from specsweep.models.model_shape import text_config

    if name not in SHAPES:
        raise SpecsweepError(f"shape: no shape {name!r}: pick one of {', '.join(SHAPES)}")
    fam, out = SHAPES[name](), Path(dest)
    fam = shallower(fam, layers) if layers else fam
    for part, cfg in (("target", fam.target), ("drafter", fam.drafter)):
        (out / part).mkdir(parents=True, exist_ok=True)
        (out / part / "config.json").write_text(json.dumps(cfg, indent=2))
    for file, content in fam.processor.items():
        (out / "target" / file).write_text(json.dumps(content, indent=2))
    text = text_config(fam.target)
    (out / "target" / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": text["eos_token_id"], "pad_token_id": text["pad_token_id"]}))
    if with_tokenizer:
        tokenizer(out / "target", text["vocab_size"], fam.specials, text["max_position_embeddings"])
    return out

"""A target and DFlash drafter shaped like Qwen3-8B and z-lab/Qwen3-8B-DFlash-b16, as config files only.

vLLM's `--load-format dummy` initialises random weights itself, for the target and the drafter, so a
model-sized cost study needs no weight files (no hub here, and 16 GiB would not travel): each `config.json`
and a tokenizer of the model's own vocabulary (151,936 ids, word-level, ChatML template) are enough. The
drafter config is vLLM 0.26's format (shared/gpu-vllm/README.md): `DFlashDraftModel`, `dflash_config` with
`mask_token_id` and `target_layer_ids` [1, 9, 17, 25, 33], all layers `full_attention`.

    python bench/shaped_pair.py OUT      -> OUT/target (config.json, tokenizer files), OUT/drafter/config.json

Random weights accept no drafts: this pair measures the cost side (or set acceptance, `sweep.set_acceptance`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False)
MASK_TOKEN_ID = 151669            # Qwen3's <|MASK|>-slot id the published drafter uses
DRAFT_LAYERS, BLOCK = 5, 16
SPECIALS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|MASK|>": MASK_TOKEN_ID}
CHAT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content']"
                 " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
                 "{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def tokenizer(out: Path, vocab_size: int) -> None:
    """A word-level tokenizer with exactly the model's ids: w<i> for every id but the specials."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    by_id = {i: s for s, i in SPECIALS.items()}
    vocab = {by_id.get(i, f"w{i}"): i for i in range(vocab_size)}
    vocab["[UNK]"] = vocab.pop("w0")
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", additional_special_tokens=["<|im_start|>", "<|MASK|>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = QWEN3_8B["max_position_embeddings"]
    fast.save_pretrained(out)


def configs(shape: dict) -> tuple[dict, dict]:
    n = shape["num_hidden_layers"]
    common = {**shape, "model_type": "qwen3", "hidden_act": "silu", "attention_bias": False,
              "attention_dropout": 0.0, "torch_dtype": "bfloat16", "use_sliding_window": False,
              "sliding_window": None, "bos_token_id": SPECIALS["<|endoftext|>"],
              "eos_token_id": SPECIALS["<|im_end|>"], "pad_token_id": SPECIALS["<|endoftext|>"]}
    target = {**common, "architectures": ["Qwen3ForCausalLM"], "max_window_layers": n,
              "layer_types": ["full_attention"] * n}
    ids = [round(1 + i * (n - 4) / (DRAFT_LAYERS - 1)) for i in range(DRAFT_LAYERS)]    # 1, 9, 17, 25, 33
    drafter = {**common, "architectures": ["DFlashDraftModel"], "num_hidden_layers": DRAFT_LAYERS,
               "layer_types": ["full_attention"] * DRAFT_LAYERS, "block_size": BLOCK, "num_target_layers": n,
               "dflash_config": {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": ids}}
    return target, drafter


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    out = p.parse_args().out
    target, drafter = configs(QWEN3_8B)
    for name, cfg in (("target", target), ("drafter", drafter)):
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "config.json").write_text(json.dumps(cfg, indent=2))
    (out / "target" / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": target["eos_token_id"], "pad_token_id": target["pad_token_id"]}))
    tokenizer(out / "target", QWEN3_8B["vocab_size"])
    print(f"wrote {out}/target and {out}/drafter (config only: serve with --load-format dummy)")


if __name__ == "__main__":
    main()

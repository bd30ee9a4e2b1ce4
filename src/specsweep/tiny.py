"""The embedded default pair, built locally with nothing downloaded.

A byte-level BPE tokenizer with a mask token and a Qwen3-style chat template, a tiny Qwen3 target, and
a DFlash drafter in the published checkpoint format (config keys and weight names as z-lab's). The target
is randomly initialised (its answers are meaningless, and very predictable); the drafter is trained for
about 20 s on 2 cores against the target's own greedy answers, so that acceptance and speedup are real.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from .datasets import synthetic_problem

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]

# Qwen3's convention: with enable_thinking=false the template writes an empty think block itself.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}"
)

TARGET_SHAPE = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, max_position_embeddings=1024, rms_norm_eps=1e-6,
                    rope_theta=10000.0)
DRAFT_LAYERS = 1
BLOCK_SIZE = 8


def build_tokenizer(out: Path, seed: int = 0, vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = []
    for _ in range(4000):
        q, a, _ = synthetic_problem(rng)
        corpus.append(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   mask_token="<|mask|>", additional_special_tokens=SPECIAL[1:5])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_pair(root: str | Path, seed: int = 0) -> dict:
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    root = Path(root)
    target_dir, drafter_dir = root / "target", root / "drafter"
    tok = build_tokenizer(target_dir, seed)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL}
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), tie_word_embeddings=True, eos_token_id=ids["<|im_end|>"],
                      bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
                      torch_dtype="float32", **TARGET_SHAPE)
    target = Qwen3ForCausalLM(cfg).eval()
    target.save_pretrained(target_dir, safe_serialization=True)
    GenerationConfig(eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]).save_pretrained(target_dir)

    # Context layers: 0..n-2 (vLLM reads hidden_states[id + 1], so id n-1 would be past the last layer).
    layer_ids = list(range(cfg.num_hidden_layers - 1))
    dcfg = Qwen3Config(**{**cfg.to_dict(), "num_hidden_layers": DRAFT_LAYERS,
                          "layer_types": ["full_attention"] * DRAFT_LAYERS})
    tensors = {}
    for i in range(DRAFT_LAYERS):
        layer = Qwen3DecoderLayer(dcfg, layer_idx=i)
        for name, t in layer.state_dict().items():
            tensors[f"layers.{i}.{name}"] = t.detach().clone()
    h = cfg.hidden_size
    tensors["norm.weight"] = torch.ones(h)
    tensors["hidden_norm.weight"] = torch.ones(h)
    tensors["fc.weight"] = torch.randn(h, h * len(layer_ids)) * 0.02
    for name, t in tensors.items():
        if name.endswith("proj.weight"):
            tensors[name] = torch.randn_like(t) * 0.02
    drafter_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(drafter_dir / "model.safetensors"))
    draft_config = {k: v for k, v in dcfg.to_dict().items()
                    if k not in ("architectures", "transformers_version", "_name_or_path")}
    draft_config.update(architectures=["DFlashDraftModel"], model_type="qwen3", block_size=BLOCK_SIZE,
                        num_target_layers=cfg.num_hidden_layers,
                        dflash_config={"mask_token_id": ids["<|mask|>"], "target_layer_ids": layer_ids})
    (drafter_dir / "config.json").write_text(json.dumps(draft_config, indent=2, sort_keys=True) + "\n")
    drafter_train = train_drafter_on_target(target_dir, drafter_dir, tok, seed)
    return {"target": str(target_dir), "drafter": str(drafter_dir), "vocab_size": len(tok), **drafter_train,
            "mask_token_id": ids["<|mask|>"], "target_layer_ids": layer_ids,
            "target_params": sum(p.numel() for p in target.parameters()),
            "drafter_params": sum(t.numel() for t in tensors.values())}


def chat_ids(tok, question: str, thinking: bool = False) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                   enable_thinking=thinking, tokenize=False)
    return tok(text, add_special_tokens=False).input_ids


def train_drafter_on_target(target_dir: Path, drafter_dir: Path, tok, seed: int = 0, prompts: int = 96,
                            answer_tokens: int = 64, steps: int = 300) -> dict:
    """Train the drafter on what the target really writes for chat prompts disjoint from the eval set."""
    import time

    import torch
    from transformers import AutoModelForCausalLM

    from .dflash.engine import generate
    from .dflash.model import DFlashDrafter
    from .dflash.train import train_drafter

    torch.set_num_threads(1)
    t0 = time.monotonic()
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(drafter_dir)
    rng = random.Random(1000 + seed)                 # the eval prompts use seeds from 10000 up
    train_prompts = [chat_ids(tok, synthetic_problem(rng)[0]) for _ in range(prompts)]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    answers = generate(target, None, train_prompts, 1, answer_tokens, stop_ids={eos}).sequences
    losses = train_drafter(drafter, target, [p + a for p, a in zip(train_prompts, answers)],
                           [len(p) for p in train_prompts], steps=steps, batch=8, anchors=8, seed=seed, log=None)
    drafter.save_pretrained(drafter_dir)
    return {"drafter_train_s": round(time.monotonic() - t0, 1), "drafter_loss_first": round(losses[0], 3),
            "drafter_loss_last": round(losses[-1], 3)}

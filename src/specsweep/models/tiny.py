"""The embedded default pair, built and trained here with nothing downloaded, in three cached steps.

1. A byte-level BPE tokenizer (digits one per token) with a mask token and a Qwen3-style chat template.
2. A tiny Qwen3 target trained on synthetic arithmetic word problems with worked answers, in both of
   Qwen3's modes: thinking on (the worked steps inside <think>) and off (the template's empty think block).
   It is evaluated on held-out prompts: an answer counts when its final number is right.
3. A DFlash drafter (published checkpoint format) trained by the DFlash recipe against the frozen target's
   own greedy answers, since at decode time it reads what the target writes. It is evaluated by the
   engine's acceptance length at its block size on the same held-out prompts.

Training uses one torch thread: on a shared 2-core box that is fastest (see ../shared/notes).
"""
from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

from specsweep.core import layout
from specsweep.core.progress import Steps, say
from specsweep.core.results import atomic_write_json
from specsweep.grid.datasets import synthetic_problem

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
TRAIN_SEED, EVAL_SEED = 1000, 10_000      # training prompts and held-out prompts come from disjoint streams
EVAL_PROMPTS = 100


def train_scale(choice: str | None) -> float | None:
    """The config's `tiny_pair` as the scale the DAG trains the pair at: None for `shipped` (copied, not trained),
    1.0 for `train` (the recipe), S for `train@S` (0 < S < 1: the recipe's steps, prompts and held-out prompts
    times S, for a test of the training rules; the schema refuses any other value)."""
    if choice in (None, "shipped"):
        return None
    return float(choice.split("@", 1)[1]) if "@" in choice else 1.0


def scaled(n: int, scale: float) -> int:
    """n times scale, at least 1: a count of the recipe (steps, prompts) in a pair trained at that scale."""
    return max(1, round(n * scale))


def answer_text(steps: str, result: int, thinking: bool) -> str:
    """The assistant turn as the target learns to write it (after the template's generation prompt)."""
    if thinking:
        return f"<think>\n{steps}\n</think>\n\nThe answer is {result}."
    return f"{steps} The answer is {result}."


def final_number(text: str) -> str | None:
    tail = text.rsplit("The answer is ", 1)
    return tail[1].rstrip(".").strip() if len(tail) == 2 else None


def build_tokenizer(out: str | Path, seed: int = 0, vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = []
    for i in range(4000):
        q, steps, result = synthetic_problem(rng)
        corpus.append(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
                      f"{answer_text(steps, result, i % 2 == 0)}<|im_end|>\n")
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


def chat_ids(tok, question: str, thinking: bool = False) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                   enable_thinking=thinking, tokenize=False)
    return tok(text, add_special_tokens=False).input_ids


def held_out(n: int = 1000) -> set[str]:
    """The first n questions of the held-out stream (the evaluation's and the synthetic dataset's)."""
    rng = random.Random(EVAL_SEED)
    return {synthetic_problem(rng)[0] for _ in range(n)}


def examples(tok, n: int, seed: int, exclude: set[str] = frozenset()) -> list[tuple[list[int], list[int], int, bool]]:
    """(prompt ids, answer ids ending in <|im_end|>, result, thinking) for n problems, half in each mode."""
    rng = random.Random(seed)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    out = []
    for i in range(n):
        q, steps, result = synthetic_problem(rng)
        while q in exclude:
            q, steps, result = synthetic_problem(rng)
        thinking = i % 2 == 1
        answer = tok(answer_text(steps, result, thinking), add_special_tokens=False).input_ids + [eos]
        out.append((chat_ids(tok, q, thinking), answer, result, thinking))
    return out


def train_target(tokenizer_dir: str | Path, out: str | Path, seed: int = 0, steps: int = 600, batch: int = 32,
                 lr: float = 3e-3, corpus: int = 20_000, scale: float = 1.0) -> dict:
    """Train the target on worked answers (loss on answer tokens only), save it with its tokenizer, evaluate.
    scale < 1 (`tiny_pair=train@S`) runs S times the steps (warm-up included), corpus and held-out prompts; its
    report records the scale, so such a pair is never taken for the recipe's (scripts/ship_tiny_pair.py refuses it)."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.set_num_threads(1)
    t0 = time.monotonic()
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), tie_word_embeddings=True, eos_token_id=eos, bos_token_id=pad,
                      pad_token_id=pad, torch_dtype="float32", **TARGET_SHAPE)
    model = Qwen3ForCausalLM(cfg)
    steps, corpus, n_eval = scaled(steps, scale), scaled(corpus, scale), scaled(EVAL_PROMPTS, scale)
    rows = examples(tok, corpus, TRAIN_SEED + seed, exclude=held_out())
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = scaled(50, scale)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    rng = random.Random(seed)
    model.train()
    losses = []
    progress = Steps("tiny pair: target", steps)
    for step in range(steps):
        picked = [rows[rng.randrange(len(rows))] for _ in range(batch)]
        width = max(len(p) + len(a) for p, a, _, _ in picked)
        x = torch.full((batch, width), pad)
        y = torch.full((batch, width), -100)
        for i, (p, a, _, _) in enumerate(picked):
            x[i, : len(p) + len(a)] = torch.tensor(p + a)
            y[i, len(p) - 1: len(p) + len(a) - 1] = torch.tensor(a)     # logits at i predict token i + 1
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        progress.tick(step, loss.item())
    model.eval()
    say(f"tiny pair: target: evaluating on {n_eval} held-out prompts in each thinking mode")
    out = Path(out)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad).save_pretrained(out)
    report = {"train_s": round(time.monotonic() - t0, 1), "steps": steps, "batch": batch, "lr": lr,
              "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4), "scale": scale,
              "params": sum(p.numel() for p in model.parameters()), **evaluate_target(model, tok, n_eval)}
    atomic_write_json(out / layout.TRAIN_REPORT, report)
    return report


def evaluate_target(model, tok, n: int = EVAL_PROMPTS) -> dict:
    """Share of held-out problems whose final number is right, greedy, in each thinking mode."""
    from specsweep.models.dflash.engine import generate

    rows = examples(tok, 2 * n, EVAL_SEED)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    out = {}
    for thinking in (False, True):
        subset = [r for r in rows if r[3] == thinking][:n]
        answers = generate(model, None, [p for p, *_ in subset], 1, 96, stop_ids={eos}).sequences
        right = sum(final_number(tok.decode(a, skip_special_tokens=True)) == str(r[2])
                    for a, r in zip(answers, subset))
        out[f"correct_thinking_{'on' if thinking else 'off'}"] = right / len(subset)
    out["eval_prompts_per_mode"] = n
    return out


def train_drafter_for(target_dir: str | Path, out: str | Path, seed: int = 0, prompts: int = 3000,
                      steps: int = 2000, batch: int = 16, anchors: int = 8, lr: float = 3e-3,
                      scale: float = 1.0) -> dict:
    """A fresh drafter in the published format, trained on the target's own greedy answers, then evaluated.
    scale < 1 runs S times the prompts, steps and held-out prompts, and its report records it (train_target)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.models.dflash.engine import generate
    from specsweep.models.dflash.model import DFlashDrafter
    from specsweep.models.dflash.train import train_drafter

    torch.set_num_threads(1)
    t0 = time.monotonic()
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    out = Path(out)
    init_drafter(target.config, tok.convert_tokens_to_ids("<|mask|>"), out, seed)
    drafter = DFlashDrafter.from_pretrained(out)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    prompts, steps, n_eval = scaled(prompts, scale), scaled(steps, scale), scaled(EVAL_PROMPTS, scale)
    train_prompts = [p for p, *_ in examples(tok, prompts, TRAIN_SEED + 7 + seed, exclude=held_out())]
    answers = []
    say(f"tiny pair: drafter: the target answers its {len(train_prompts)} training prompts (about a minute)")
    for i in range(0, len(train_prompts), 64):
        answers += generate(target, None, train_prompts[i:i + 64], 1, 96, stop_ids={eos}).sequences
    gen_s = time.monotonic() - t0
    losses = train_drafter(drafter, target, [p + a for p, a in zip(train_prompts, answers)],
                           [len(p) for p in train_prompts], steps=steps, batch=batch, anchors=anchors, lr=lr,
                           seed=seed, log=Steps("tiny pair: drafter", steps).tick)
    drafter.save_pretrained(out)
    say(f"tiny pair: drafter: evaluating its acceptance on {n_eval} held-out prompts")
    report = {"train_s": round(time.monotonic() - t0, 1), "target_answers_s": round(gen_s, 1), "steps": steps,
              "prompts": prompts, "loss_first": round(losses[0], 3), "loss_last": round(losses[-1], 3),
              "scale": scale, "params": sum(p.numel() for p in drafter.parameters()),
              **evaluate_drafter(target, drafter, tok, n_eval)}
    atomic_write_json(out / layout.TRAIN_REPORT, report)
    return report


def evaluate_drafter(target, drafter, tok, n: int = EVAL_PROMPTS) -> dict:
    """Mean acceptance length (bonus token included, vLLM's convention) at the drafter's block size,
    greedy, one prompt at a time, on the held-out prompts with thinking off."""
    from specsweep.models.dflash.engine import generate

    eos = tok.convert_tokens_to_ids("<|im_end|>")
    lengths = []
    for p, *_ in [r for r in examples(tok, 2 * n, EVAL_SEED) if not r[3]][:n]:
        lengths += generate(target, drafter, [p], drafter.block_size, 96, stop_ids={eos}).acceptance_lengths()
    return {"mean_acceptance_length": round(sum(lengths) / len(lengths), 3), "block_size": drafter.block_size,
            "eval_prompts": n}


def init_drafter(target_cfg, mask_token_id: int, out: Path, seed: int = 0) -> None:
    """A randomly initialised drafter written in z-lab's checkpoint format (config keys, weight names)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    torch.manual_seed(seed)
    # Context layers 0..n-2: vLLM reads hidden_states[id + 1], so id n-1 would be past the last layer.
    layer_ids = list(range(target_cfg.num_hidden_layers - 1))
    dcfg = Qwen3Config(**{**target_cfg.to_dict(), "num_hidden_layers": DRAFT_LAYERS,
                          "layer_types": ["full_attention"] * DRAFT_LAYERS})
    tensors = {}
    for i in range(DRAFT_LAYERS):
        for name, t in Qwen3DecoderLayer(dcfg, layer_idx=i).state_dict().items():
            tensors[f"layers.{i}.{name}"] = t.detach().clone()
    h = target_cfg.hidden_size
    tensors["norm.weight"] = torch.ones(h)
    tensors["hidden_norm.weight"] = torch.ones(h)
    tensors["fc.weight"] = torch.randn(h, h * len(layer_ids)) * 0.02
    for name, t in tensors.items():
        if name.endswith("proj.weight"):
            tensors[name] = torch.randn_like(t) * 0.02
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"))
    config = {k: v for k, v in dcfg.to_dict().items() if k not in ("architectures", "transformers_version",
                                                                    "_name_or_path")}
    config.update(architectures=["DFlashDraftModel"], model_type="qwen3", block_size=BLOCK_SIZE,
                  num_target_layers=target_cfg.num_hidden_layers,
                  dflash_config={"mask_token_id": mask_token_id, "target_layer_ids": layer_ids})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


MANIFEST = "MANIFEST.json"      # the shipped pair's (models/tiny/): recipe, seed, commit, files


def recipe() -> dict:
    """What the pair's training depends on in this code: the shapes, seeds and each step's defaults. The scale is
    not the recipe's: the recipe is what scale 1 runs, and a pair trained at another records its scale instead."""
    import inspect

    def defaults(fn):
        return {k: p.default for k, p in inspect.signature(fn).parameters.items()
                if p.default is not inspect.Parameter.empty and k != "scale"}
    return {"target_shape": TARGET_SHAPE, "draft_layers": DRAFT_LAYERS, "block_size": BLOCK_SIZE,
            "train_seed": TRAIN_SEED, "eval_seed": EVAL_SEED, "eval_prompts": EVAL_PROMPTS, "special": SPECIAL,
            "tokenizer": defaults(build_tokenizer), "target": defaults(train_target),
            "drafter": defaults(train_drafter_for)}


def file_digests(root: str | Path, steps=("tokenizer", "target", "drafter")) -> dict[str, str]:
    """Each file of the pair's steps under root, by its path relative to root: its SHA-256."""
    import hashlib

    root = Path(root)
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
            for step in steps for f in sorted((root / step).rglob("*")) if f.is_file()}


def build_pair(root: str | Path, seed: int = 0) -> dict:
    """All three steps in one call (the DAG runs them as separate cached rules)."""
    root = Path(root)
    build_tokenizer(root / "tokenizer", seed)
    return {"target": train_target(root / "tokenizer", root / "target", seed),
            "drafter": train_drafter_for(root / "target", root / "drafter", seed)}

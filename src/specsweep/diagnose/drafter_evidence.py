"""A drafter's evidence from files alone, no torch and no server: tensor shapes from safetensors headers, the
tokenizer's own mask token, and whether the drafter, the target and the tokenizer agree on the vocabulary (the
diagnosis's `vocabulary` cause, which has no counterfactual to run)."""
from __future__ import annotations

import json
import struct
from pathlib import Path

from specsweep.diagnose import diagnosis
from specsweep.models import model_shape
from specsweep.plan.checks import _tokenizer_ids


def safetensors_shapes(folder: Path) -> dict[str, list[int]]:
    """Tensor shapes from the safetensors headers of a checkpoint folder (no tensor read, no torch)."""
    shapes = {}
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        shapes.update({k: v["shape"] for k, v in header.items() if k != "__metadata__"})
    return shapes


def tokenizer_mask(folder: Path | None) -> tuple[str | None, int | None]:
    """The tokenizer's own mask token and its id (tokenizer_config.json or special_tokens_map.json)."""
    if folder is None:
        return None, None
    token = None
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = folder / name
        if token is None and f.exists():
            token = json.loads(f.read_text()).get("mask_token")
    if isinstance(token, dict):
        token = token.get("content")
    ids = _tokenizer_ids(folder) or {}
    return token, ids.get(token) if token else None


def vocabulary_evidence(drafter: dict, target_dir: Path | None, tokenizer_dir: Path | None,
                        mask_id: int | None) -> tuple[str, str]:
    """(status, evidence) of a tokenizer or vocabulary mismatch, from shapes alone: no counterfactual exists (the
    drafter reads the target's embeddings and lm_head, so there is no other vocabulary to try)."""
    target = model_shape.read_config(target_dir) if target_dir else None
    if target is None:
        return diagnosis.NOT_TESTED, "the target's config is not on this machine: shapes not compared"
    tv = model_shape.text_config(target).get("vocab_size")
    embed = next((s for n, s in safetensors_shapes(target_dir).items() if n.endswith("embed_tokens.weight")), None)
    ids = _tokenizer_ids(tokenizer_dir) if tokenizer_dir else None
    tok = max(ids.values()) + 1 if ids else None          # the ids the tokenizer can give, added tokens included
    seen = [f"target vocab_size {tv}", f"drafter {drafter.get('vocab_size', 'none given')}",
            f"target embedding rows {embed[0] if embed else 'n/a'}", f"tokenizer ids 0..{tok - 1 if tok else 'n/a'}"]
    problems = []
    if drafter.get("vocab_size") not in (None, tv):
        problems.append(f"the drafter's vocab_size {drafter['vocab_size']} is not the target's {tv}")
    if embed and embed[0] != tv:
        problems.append(f"the target's embedding has {embed[0]} rows for vocab_size {tv}")
    if tok is not None and tv is not None and tok > tv:
        problems.append(f"the tokenizer gives ids up to {tok - 1}, past the target's vocab_size {tv}")
    if mask_id is not None and tv is not None and not 0 <= mask_id < tv:
        problems.append(f"mask_token_id {mask_id} is outside the vocabulary of {tv}")
    tail = "; no counterfactual possible, from shapes only"
    if problems:
        return diagnosis.SUSPECTED, "; ".join(problems) + tail
    return diagnosis.RULED_OUT, "shapes agree (" + ", ".join(seen) + ")" + tail

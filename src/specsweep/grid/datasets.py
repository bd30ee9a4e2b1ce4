"""Benchmark prompts: the embedded synthetic set, hub datasets (cached), and local JSONL.

Every source is normalised to JSONL rows `{"turns": [str, ...]}` under results/datasets/, plus
`"category": str` where the source has one (mt-bench's `category` column, or a JSONL row's), so results
can be broken down by category.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_jsonl, read_jsonl

NAMES = ["Ada", "Ben", "Caro", "Dev", "Eli", "Fay", "Gus", "Hana"]
ITEMS = ["apples", "books", "coins", "marbles", "pens", "shells", "stamps", "tickets"]


MAX_VALUE = 20   # running totals stay in 0..20: small enough for a 0.85M-parameter target to learn exactly


def synthetic_problem(rng: random.Random) -> tuple[str, str, int]:
    """A multi-step arithmetic word problem, its worked steps, and the final number."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    total = rng.randint(1, MAX_VALUE)
    question = f"{name} has {total} {item}."
    steps = []
    for _ in range(rng.randint(1, 3)):
        if (rng.random() < 0.5 and total < MAX_VALUE) or total == 0:
            n = rng.randint(1, MAX_VALUE - total)
            question += f" {name} gets {n} more."
            steps.append(f"{total} + {n} = {total + n}.")
            total += n
        else:
            n = rng.randint(1, total)
            question += f" {name} gives away {n}."
            steps.append(f"{total} - {n} = {total - n}.")
            total -= n
    question += f" How many {item} does {name} have now?"
    return question, " ".join(steps), total


def synthetic_words() -> list[str]:
    """Every whitespace-separated word of the synthetic problems and their steps (a shaped replica's tokenizer
    gives each its own id: models/shaped.py), sorted."""
    rng = random.Random(0)
    return sorted({w for _ in range(4000) for part in synthetic_problem(rng)[:2] for w in part.split()})


def synthetic_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(10_000 + seed)   # disjoint from the seeds the tiny pair trains on
    return [{"turns": [synthetic_problem(rng)[0]]} for _ in range(n)]


def jsonl_rows(path: str | Path, on_bad_line: str = "skip") -> tuple[list[dict], int]:
    """Rows of a local JSONL file, and how many malformed lines were skipped."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"dataset: {path} does not exist: set dataset.path to a JSONL file")
    rows, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                turns = obj["turns"] if "turns" in obj else [obj["prompt"]]
                if not turns or not all(isinstance(t, str) and t for t in turns):
                    raise ValueError("empty turn")
            except (ValueError, KeyError, TypeError) as e:
                if on_bad_line == "fail":
                    raise ConfigError(f"dataset: {path}:{lineno} is not a JSON object with a 'prompt' string or "
                                      f"'turns' list ({e}): fix the line, or set dataset.on_bad_line=skip") from None
                bad += 1
                continue
            rows.append(_with_category({"turns": turns}, obj.get("category")))
    return rows, bad


def hub_rows(cfg: dict) -> list[dict]:
    import datasets as hf

    hub = cfg["hub"]
    try:
        ds = hf.load_dataset(hub["path"], hub.get("name"), split=hub["split"])
    except Exception as e:  # the hub client raises many types; all mean "not reachable or not there"
        raise ConfigError(f"dataset {cfg['name']}: could not load {hub['path']} from the hub "
                          f"({type(e).__name__}): run where the hub is reachable once to fill results/{layout.DATASETS}/, "
                          "or use dataset=jsonl dataset.path=FILE") from None
    fields, template = cfg["fields"], cfg.get("template", "{prompt}")
    rows = []
    for ex in ds:
        if "turns" in fields:
            turns = [template.format(prompt=t) for t in ex[fields["turns"]]]
        else:
            text = ex[fields["prompt"]]
            extra = ex.get(fields["input"]) if "input" in fields else None
            turns = [template.format(prompt=f"{text}\n\n{extra}" if extra else text)]
        rows.append(_with_category({"turns": turns}, ex.get("category")))
    return rows


def _with_category(row: dict, category) -> dict:
    return {**row, "category": category} if isinstance(category, str) and category else row


def materialise(cfg: dict, out: str | Path) -> dict:
    """Write the dataset's prompts (first num_prompts) to `out`; returns counts for the log."""
    bad = 0
    if cfg["source"] == "synthetic":
        rows = synthetic_rows(cfg["num_prompts"], cfg.get("seed", 0))
    elif cfg["source"] == "jsonl":
        rows, bad = jsonl_rows(cfg["path"], cfg.get("on_bad_line", "skip"))
    else:
        rows = hub_rows(cfg)
    if not rows:
        raise ConfigError(f"dataset {cfg['name']}: no usable prompts ({bad} malformed lines): "
                          "give a file with at least one prompt")
    rows = rows[: cfg["num_prompts"]]
    atomic_write_jsonl(out, rows)
    return {"prompts": len(rows), "skipped_lines": bad}


def load_prompt_rows(path: str | Path, cfg: dict) -> tuple[list[dict], int]:
    """A bench cell's prompt rows (turns, and category where known), and how many malformed lines were skipped."""
    if cfg["source"] == "jsonl":
        rows, bad = jsonl_rows(path, cfg.get("on_bad_line", "skip"))
        if not rows:
            raise ConfigError(f"dataset {cfg['name']}: {path} has no usable prompts: give at least one")
        return rows[: cfg["num_prompts"]], bad
    return read_jsonl(path), 0


def prompts_digest(prompts: list[list[str]]) -> str:
    """sha256 of the prompt texts in order: two cells are paired by prompt index only if this matches."""
    return hashlib.sha256(json.dumps(prompts, ensure_ascii=False).encode()).hexdigest()


# ---- the prompt-length axis (sweep.prompt_length, docs/axes.md) --------------------------------------------------
CONTEXT_SEPARATOR = "\n\n"


def lengthen(prompts: list[list[str]], length: int, encode, decode) -> list[list[str]]:
    """Each prompt's first turn set to `length` tokens (as `encode` counts them: the target's tokenizer, without
    the chat template) from the dataset's own text: the next prompt's first turn is put just before it, the one
    after that before that, and so on (wrapping round as often as needed), separated by blank lines, and the
    text is cut to its last `length` tokens, so the prompt's own question stays whole at the end (a question longer
    than `length` keeps its last `length` tokens). Later turns are left as they are."""
    if length < 1:
        raise ValueError(f"prompt length {length} must be at least 1")
    firsts = [p[0] for p in prompts]
    out = []
    for i, turns in enumerate(prompts):
        ids = encode(turns[0])
        j = 1
        while len(ids) < length:
            ids = encode(firsts[(i + j) % len(firsts)] + CONTEXT_SEPARATOR) + ids
            j += 1
        out.append([decode(ids[-length:]), *turns[1:]])
    return out

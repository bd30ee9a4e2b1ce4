"""Frozen with its campaign (h200-vllm, h200-sglang): last ran from 1e23ceb as bench/cross_hardware.py; run it from
that commit. Not maintained, no smoke.

The same pair, prompts and K on other hardware or another server: do they accept the same drafts?

At temperature 0 and concurrency 1 two servers should nearly agree; kernels flip near-ties. For each DFlash K
this compares each study with the first: the mean acceptance length and per-position acceptance (the server's
own counters), greedy agreement with its own baseline, and per prompt whether the answer is the same text, with
the first differing character, and the same steps, with the first differing step. A step's size is read from
the stream: at concurrency 1 each chunk is one verify step's output, accepted drafts + 1 (`chunk_tokens`), so
this works on a vLLM without per-request metrics (0.26) too. A bursty stream has no step sizes.

    python bench/cross_hardware.py --out bench/archive/h200/vllm/cross_hardware.json \
        vllm-cpu=results/tiny-cpu vllm-h200=/tmp/h200/tiny-gpu local-h200=/tmp/h200/tiny-gpu-local
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from specsweep.metrics import BURST_SHARE, is_bursty, token_chunks  # noqa: E402
from specsweep.read.study import Study  # noqa: E402


def first_difference(a: str, b: str) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def steps(row: dict) -> list[int] | None:
    """Tokens per verify step after the first token (accepted + 1), from the chunks; None for a bursty stream.

    SGLang 0.5.17 sends the prefill's token and the first verify step's tokens in one chunk (its captured
    stream: tests/data/sglang0517/dflash_chat_stream.txt), vLLM the prefill's alone: a first chunk of n > 1
    tokens is read as 1 + (n - 1)."""
    chunks = token_chunks(row) if row.get("ok") else None
    if not chunks or is_bursty(chunks, row["e2e_s"]):
        return None
    first = [chunks[0][1] - 1] if chunks[0][1] > 1 else []
    return first + [n for _, n in chunks[1:]]


def by_k(study: Path) -> dict:
    """K -> {figures, rows by (repeat, prompt, turn)} for a study's DFlash cells at concurrency 1."""
    cells = Study.load(study).cells.values()
    out: dict = {}
    for cell in cells:
        s, b = cell.config["server_spec"], cell.bench
        if s["method"] == "none" or b["concurrency"] != 1 or s.get("set_acceptance") is not None:
            continue
        k = out.setdefault(s["num_speculative_tokens"], {"cells": [], "rows": {}})
        k["cells"].append(cell.metrics)
        for r in cell.requests():
            k["rows"][(b["repeat"], r["index"], r["turn"])] = r
    return out


def figures(metrics: list[dict]) -> dict:
    """Acceptance pooled over a K's repeats (each repeat's figures weighted by its drafts: the server's counter
    deltas, or the in-process engine's own count), and its greedy agreement (mean over repeats)."""
    drafts = accepted = 0
    per_pos: dict[int, float] = {}
    for m in metrics:
        sd = m["spec_decode"]
        drafts += sd["num_drafts"]
        accepted += (sd["mean_acceptance_length"] - 1) * sd["num_drafts"]
        for pos, rate in enumerate(sd["per_position_acceptance"] or []):     # None: SGLang 0.5.17's counter
            per_pos[pos] = per_pos.get(pos, 0) + rate * sd["num_drafts"]
    greedy = [m["greedy_agreement"] for m in metrics if m.get("greedy_agreement") is not None]
    return {"drafts": drafts, "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts else None,
            "per_position_acceptance": [round(per_pos[p] / drafts, 4) for p in sorted(per_pos)] if per_pos else None,
            "greedy_agreement": round(sum(greedy) / len(greedy), 4) if greedy else None,
            "version": metrics[0].get("vllm_version") or metrics[0].get("sglang_version"),
            "spec_decode_source": metrics[0].get("spec_decode_source")}


def prompt_differences(ref: dict, other: dict) -> dict:
    same_text = same_steps = unknown_steps = 0
    diffs = []
    for key, a in sorted(ref.items()):
        b = other.get(key)
        if b is None or not (a["ok"] and b["ok"]):
            continue
        char = first_difference(a["text"], b["text"])
        sa, sb = steps(a), steps(b)
        step = None if sa is None or sb is None or sa == sb else first_difference(sa, sb)   # list compare
        same_text += char is None
        same_steps += sa is not None and sb is not None and sa == sb
        unknown_steps += sa is None or sb is None
        if char is not None or step is not None:
            diffs.append({"repeat": key[0], "prompt": key[1], "turn": key[2], "first_differing_char": char,
                          "text_at": [a["text"][char or 0:(char or 0) + 24], b["text"][char or 0:(char or 0) + 24]]
                          if char is not None else None,
                          "first_differing_step": step,
                          "steps_at": [sa[step:step + 6], sb[step:step + 6]] if step is not None else None})
    compared = sum(1 for k in ref if k in other)
    return {"requests_compared": compared, "same_text": same_text, "same_steps": same_steps,
            "steps_unknown": unknown_steps, "differences": diffs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("studies", nargs="*", metavar="NAME=PATH", help="the first is the reference")
    p.add_argument("--out", type=Path)
    p.add_argument("--smoke", action="store_true", help="the kept vllm-cpu study against itself, nothing written")
    args = p.parse_args()
    if args.smoke:
        kept = Path(__file__).resolve().parent / "archive" / "h200" / "vllm" / "tiny-cpu"
        args.studies, args.out = [f"a={kept}", f"b={kept}"], None
    elif not args.studies or not args.out:
        p.error("give NAME=PATH studies and --out (or --smoke)")
    studies = {n: by_k(Path(path)) for n, path in (s.split("=", 1) for s in args.studies)}
    ref_name, ref = next(iter(studies.items()))
    report = {"reference": ref_name, "burst_share": BURST_SHARE, "by_k": {}}
    for k in sorted(ref):
        row = {"figures": {n: figures(s[k]["cells"]) for n, s in studies.items() if k in s}, "against_reference": {}}
        for name, s in studies.items():
            if name != ref_name and k in s:
                row["against_reference"][name] = prompt_differences(ref[k]["rows"], s[k]["rows"])
        report["by_k"][str(k)] = row
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    for k, row in report["by_k"].items():
        for name, f in row["figures"].items():
            cmp = row["against_reference"].get(name)
            vs = f"; vs {ref_name}: same text {cmp['same_text']}/{cmp['requests_compared']}, same steps " \
                 f"{cmp['same_steps']}/{cmp['requests_compared']} ({cmp['steps_unknown']} bursty)" if cmp else ""
            print(f"K={k} {name}: AL {f['mean_acceptance_length']} per position {f['per_position_acceptance']} "
                  f"greedy {f['greedy_agreement']}{vs}")
    print(f"wrote {args.out}" if args.out else "smoke: nothing written")


if __name__ == "__main__":
    main()

"""Pure metric functions over request records and counter deltas; no I/O."""
from __future__ import annotations

import statistics

import numpy as np


def dist(values: list[float]) -> dict:
    """mean, median, p90 and p99, in the values' own unit."""
    if not values:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99))}


def request_figures(records: list[dict], wall_s: float) -> dict:
    """Throughput and latency over one bench cell's measured (non-warm-up) requests."""
    ok = [r for r in records if r["ok"]]
    out_tokens = sum(r["completion_tokens"] for r in ok)
    tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["completion_tokens"] - 1)
            for r in ok if r["ttft_s"] is not None and r["completion_tokens"] > 1]
    return {
        "requests_sent": len(records),
        "requests_completed": len(ok),
        "requests_errored": len(records) - len(ok),
        "error_rate": (len(records) - len(ok)) / len(records) if records else 0.0,
        "wall_s": wall_s,
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in ok),
        "completion_tokens": out_tokens,
        "output_tok_s": out_tokens / wall_s if wall_s > 0 else None,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else None,
        "ttft_ms": dist([r["ttft_s"] * 1e3 for r in ok if r["ttft_s"] is not None]),
        "tpot_ms": dist([t * 1e3 for t in tpot]),
        "itl_ms": dist([x * 1e3 for r in ok for x in r["itl_s"]]),
        "e2e_ms": dist([r["e2e_s"] * 1e3 for r in ok]),
    }


def acceptance_from_lengths(lengths: list[int], block_size: int) -> dict:
    """vLLM's acceptance figures from per-step acceptance lengths (accepted drafts + 1, in 1..block_size),
    plus the histogram of lengths (index i counts steps of length i + 1)."""
    drafts, per_step = len(lengths), block_size - 1
    accepted = sum(n - 1 for n in lengths)
    return {
        "num_drafts": drafts,
        "num_draft_tokens": drafts * per_step,
        "num_accepted_tokens": accepted,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / (drafts * per_step) if drafts and per_step else None,
        "per_position_acceptance": [sum(n > p for n in lengths) / drafts for p in range(1, block_size)] if drafts else [],
        "acceptance_length_histogram": [sum(n == i for n in lengths) for i in range(1, block_size + 1)],
    }


def length_shares(per_position: list[float]) -> list[float]:
    """Share of steps with acceptance length 1..K+1, from per-position acceptance rates r_1..r_K
    (r_p: share of steps whose draft p was accepted; a step accepts a prefix, so the r_p fall with p)."""
    rates = [1.0, *per_position, 0.0]
    return [rates[i] - rates[i + 1] for i in range(len(rates) - 1)]


def greedy_agreement(records: list[dict], baseline: list[dict]) -> float | None:
    """Share of requests whose text equals the baseline's for the same prompt and turn."""
    base = {(r["index"], r["turn"]): r["text"] for r in baseline if r["ok"]}
    pairs = [(r["text"], base[(r["index"], r["turn"])]) for r in records if r["ok"] and (r["index"], r["turn"]) in base]
    if not pairs:
        return None
    return sum(a == b for a, b in pairs) / len(pairs)


def speedup(cell: dict, baseline: dict) -> dict:
    """Output tok/s ratio and TPOT ratio (baseline / cell): above 1 is faster."""
    tok = cell["output_tok_s"], baseline["output_tok_s"]
    tpot = cell["tpot_ms"]["mean"], baseline["tpot_ms"]["mean"]
    return {"speedup_output_tok_s": tok[0] / tok[1] if all(tok) else None,
            "speedup_tpot": tpot[1] / tpot[0] if all(tpot) else None}


def median_mad(values: list[float]) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    med = statistics.median(vals)
    return med, statistics.median(abs(v - med) for v in vals)

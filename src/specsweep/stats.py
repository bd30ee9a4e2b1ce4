"""Paired statistics behind a verdict: is a speedup real, or within the run's noise? Pure: rows in, figures out.

One run's single speedup figure moved a lot between identical runs, so a figure comes with a 95%
bootstrap CI. Requests are paired by (repeat, prompt index, turn): the same request sent to both cells.
The figure is the geometric mean of the per-request ratios (a ratio's natural average: 2x and 0.5x cancel).
The bootstrap resamples prompts, not requests, so every turn and repeat of one prompt stays together.
The seed is fixed, so a rerun on the same files gives the same CI.

What the CI covers: prompt-to-prompt variation and the noise between requests within the run. Not
covered: a slowdown that lasts a whole server cell (another job on the machine while the baseline ran),
which moves every request of one side at once; only rerunning the study shows that.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Iterable

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
N_RESAMPLES = 9999
SEED = 0
MIN_PROMPTS = 5      # below this, no CI: a bootstrap over 2-4 prompts has almost no distinct resamples

FASTER, SLOWER, NOISE = "faster", "slower", "within noise"


def request_latency(row: dict, figure: str) -> float | None:
    """A finished request's latency in seconds: `e2e` (whole request) or `tpot` (per output token after
    the first); None when the request failed or the figure is undefined for it."""
    if not row.get("ok") or not row.get("e2e_s"):
        return None
    if figure == "e2e":
        return row["e2e_s"]
    ttft, tokens = row.get("ttft_s"), row.get("completion_tokens") or 0
    if ttft is None or tokens < 2 or row["e2e_s"] <= ttft:
        return None
    return (row["e2e_s"] - ttft) / (tokens - 1)


def row_acceptance(row: dict) -> tuple[float, float] | None:
    """(drafting steps, accepted drafts) of one finished request: from its per-step `acceptance_lengths`
    (the local engine) or its own spec-decode figures `spec` (a server's, vLLM's names); else None."""
    if not row.get("ok"):
        return None
    if row.get("acceptance_lengths") is not None:
        lengths = row["acceptance_lengths"]
        return float(len(lengths)), float(sum(n - 1 for n in lengths))
    spec = row.get("spec")
    if spec and spec.get("num_spec_steps") is not None:
        return float(spec["num_spec_steps"]), float(spec["num_accepted_draft_tokens"])
    return None


def _matched(cell_runs: list[list[dict]], ref_runs: list[list[dict]], value: Callable[[dict], object]):
    """(prompt index, cell value, ref value) for each (repeat, prompt, turn) with a value on both sides;
    cell_runs[i] is the same repeat as ref_runs[i]."""
    for cell, ref in zip(cell_runs, ref_runs):
        ref_by_key = {(r["index"], r["turn"]): value(r) for r in ref}
        for r in cell:
            a, b = value(r), ref_by_key.get((r["index"], r["turn"]))
            if a and b:
                yield r["index"], a, b


def _per_prompt(items: Iterable[tuple[Hashable, tuple[float, ...]]]) -> np.ndarray:
    """Sum each column over a prompt's items: one row per prompt, the unit the bootstrap resamples."""
    sums: dict[Hashable, np.ndarray] = {}
    for key, cols in items:
        sums[key] = sums.get(key, 0) + np.asarray(cols, dtype=float)
    return np.array([sums[k] for k in sorted(sums, key=repr)])


def _ci(columns: np.ndarray, statistic, seed: int) -> dict:
    """A BCa bootstrap CI of statistic(*columns) over prompts (rows of `columns`). BCa, not percentile:
    in a simulation of 16 prompts with skewed ratios it covered 87% against the percentile's 86%; both
    fall short of 95% with few prompts, hence MIN_PROMPTS."""
    if len(columns) < MIN_PROMPTS:
        return {"ci_low": None, "ci_high": None}
    with warnings.catch_warnings():      # every resample equal: scipy warns and gives NaN; handled below
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.bootstrap(tuple(columns.T), statistic, paired=True, vectorized=True, n_resamples=N_RESAMPLES,
                            confidence_level=CONFIDENCE, method="BCa", rng=np.random.default_rng(seed))
    spread = res.bootstrap_distribution
    if np.all(spread == spread[0]):      # no spread at all (identical cells): the CI is the point
        return {"ci_low": float(spread[0]), "ci_high": float(spread[0])}
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {"ci_low": None, "ci_high": None} if math.isnan(lo) or math.isnan(hi) else {"ci_low": lo, "ci_high": hi}


def _geomean(log_sums, counts, axis=-1):
    return np.exp(np.sum(log_sums, axis=axis) / np.sum(counts, axis=axis))


def geomean_ci(pairs: Iterable[tuple[Hashable, float]], seed: int = SEED) -> dict:
    """Geometric mean of ratios given as (prompt, log ratio) pairs, with a bootstrap CI over prompts."""
    columns = _per_prompt((key, (v, 1.0)) for key, v in pairs)
    if not len(columns):
        return {"ratio": None, "ci_low": None, "ci_high": None, "prompts": 0, "requests": 0}
    return {"ratio": float(_geomean(*columns.T)), **_ci(columns, _geomean, seed), "prompts": len(columns),
            "requests": int(columns[:, 1].sum())}


def verdict(ci_low: float | None, ci_high: float | None) -> str | None:
    """`faster` (CI above 1), `slower` (CI below 1), `within noise` (CI includes 1); None without a CI."""
    if ci_low is None or ci_high is None:
        return None
    return FASTER if ci_low > 1 else SLOWER if ci_high < 1 else NOISE


def paired_speedup(cell_runs: list[list[dict]], ref_runs: list[list[dict]], seed: int = SEED) -> dict:
    """Speedup of a cell over a reference from repeat-matched request rows, pooled over repeats: the
    e2e and TPOT latency ratios (ref / cell) as geomeans with CIs, and the verdict on e2e."""
    out: dict = {}
    for figure in ("e2e", "tpot"):
        g = geomean_ci((i, math.log(b / a)) for i, a, b in
                       _matched(cell_runs, ref_runs, lambda r: request_latency(r, figure)))
        out.update({f"speedup_{figure}_geomean": g["ratio"], f"speedup_{figure}_ci_low": g["ci_low"],
                    f"speedup_{figure}_ci_high": g["ci_high"]})
        if figure == "e2e":
            out.update(paired_prompts=g["prompts"], paired_requests=g["requests"])
    out["verdict"] = verdict(out["speedup_e2e_ci_low"], out["speedup_e2e_ci_high"])
    return out


def _acceptance_ratio(steps_a, acc_a, steps_b, acc_b, axis=-1):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 + np.sum(acc_a, axis=axis) / np.sum(steps_a, axis=axis)) / \
            (1 + np.sum(acc_b, axis=axis) / np.sum(steps_b, axis=axis))


def acceptance_ratio(cell_runs: list[list[dict]], ref_runs: list[list[dict]], seed: int = SEED) -> dict:
    """The cell's mean acceptance length over the reference's, on the requests both finished with
    per-request acceptance, with a CI over prompts; ratio None where either side lacks it."""
    columns = _per_prompt((i, (*a, *b)) for i, a, b in _matched(cell_runs, ref_runs, row_acceptance))
    if not len(columns) or not columns[:, 0].sum() or not columns[:, 2].sum():
        return {"ratio": None, "ci_low": None, "ci_high": None}
    return {"ratio": float(_acceptance_ratio(*columns.T)), **_ci(columns, _acceptance_ratio, seed)}


def ratio_of_medians(cell: list[float], ref: list[float], seed: int = SEED) -> dict:
    """median(cell) / median(ref), for a figure measured once per repeat (output tok/s). Repeats of two
    cells ran at different times, so they are resampled independently, not paired; a percentile CI
    from 3 repeats each (BCa's jackknife needs more), below that the ratio alone."""
    cell, ref = [v for v in cell if v], [v for v in ref if v]
    if not cell or not ref:
        return {"ratio": None, "ci_low": None, "ci_high": None}
    out = {"ratio": float(np.median(cell) / np.median(ref)), "ci_low": None, "ci_high": None}
    if min(len(cell), len(ref)) < 3:
        return out
    res = sps.bootstrap((np.array(cell), np.array(ref)),
                        lambda a, b, axis=-1: np.median(a, axis=axis) / np.median(b, axis=axis),
                        vectorized=True, n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                        method="percentile", rng=np.random.default_rng(seed))
    return {**out, "ci_low": float(res.confidence_interval.low), "ci_high": float(res.confidence_interval.high)}


def mean_acceptance_length(rows: list[dict]) -> float | None:
    """1 + accepted / steps over the requests' steps (token-weighted, as vLLM's counters are)."""
    counts = [c for c in map(row_acceptance, rows) if c]
    steps = sum(s for s, _ in counts)
    return 1.0 + sum(a for _, a in counts) / steps if steps else None


def format_ratio(ratio: float | None, lo: float | None, hi: float | None) -> str:
    """`1.18x [1.10, 1.27]`, the way tables print a ratio with its CI."""
    if ratio is None:
        return "n/a"
    return f"{ratio:.2f}x" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None else " (no CI)")

"""Paired statistics behind a verdict: is a speedup real, or within the run's noise? Pure: rows in, figures out.

One run's single speedup figure moved a lot between identical runs, so a figure comes with a 95%
bootstrap CI (scipy.stats.bootstrap, BCa, fixed seed: a rerun on the same files gives the same CI).

The figure: each request's latency in the reference over its latency in the cell, for the same prompt
and turn, summarised as a geometric mean (a ratio's natural average: 2x and 0.5x cancel). What is
resampled is what varies between reruns:
- prompts, each with all its turns (and its requests in every repeat) together;
- with repeats that ran apart (fewer than cells.MIN_BLOCKS co-resident repeats, or one relaunch round), each
  cell's repeats, independently of the other cell's: a repeat is a stretch of time on the machine, and a load
  that comes and goes (other jobs on a shared box) moves every request of that stretch at once. Resampling
  prompts alone, with every repeat's requests pooled, gave a confident `slower` for a cell whose five repeats
  ranged from 0.57x to 1.54x (docs/methods.md).
- with blocks (schedule.block): stretches of time in which both cells ran, the blocks first: a cluster
  bootstrap draws blocks with replacement, then within each drawn block each side's repeats of it, then prompts.
  A co-resident group takes turns repeat by repeat, so repeat r of the cell and of its baseline ran back to back
  and are one block: a load that moves a whole repeat moves both sides of it. Relaunch rounds (sweep.residency
  relaunch, sweep.rounds > 1) are blocks too: a load that covers one launch of one cell and not its baseline's
  then varies between resamples and widens the CI, where with one launch it only moves the figure.
Not covered with one launch of a group: a difference between launches; sweep.rounds > 1, or a rerun, shows it.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np

from specsweep import metrics

CONFIDENCE = 0.95
N_RESAMPLES = 9999
SEED = 0
MIN_PROMPTS = 5      # below this, no CI: a bootstrap over 2-4 prompts has almost no distinct resamples

# The one vocabulary of verdicts (issue 46, docs/methods.md#looking-after-every-repeat-sequential-verdicts), for any
# interval of a speedup: the fixed bootstrap's read once at its budget, and an `auto` study's stopping rule's
# (spending.py's planned looks, sequential.py's confidence sequence)
FASTER, SLOWER, EQUIVALENT, UNRESOLVED = "faster", "slower", "equivalent", "unresolved"
EQUIVALENCE = 0.05   # sweep.equivalence's default: a speedup inside [1/1.05, 1.05] is `equivalent`
# The verdict of a pair whose answers degenerate on either side (metrics.answer_figures): a speedup on text that
# loops is no speedup of the drafter, whichever way it points; `verdict_reason` says which side and repeat
DEGENERATE = "degenerate"


def _scipy_stats():
    """scipy.stats, imported where a CI is computed: its import (about a second here,
    docs/campaigns/2026-12-03-small-grid.md#2026-12-03-night-no-checkpoint-jobs-and-why-3-s-is-out-of-reach-here) is not
    paid by the jobs that only format one (the MLflow ingest) or by a group's job before its servers start."""
    from scipy import stats

    return stats


FIGURES = ("e2e", "streamed_tpot", "server_tpot")     # the per-request latencies a paired speedup is taken of


def request_latency(row: dict, figure: str) -> float | None:
    """A finished request's latency in seconds: `e2e` (the whole request, row's e2e_s) or `streamed_tpot`
    (metrics.request_tpot: None for a bursty stream or one without per-chunk token counts) or `server_tpot`
    (metrics.request_server_tpot: the server's own timing); None when the request failed or the figure is
    undefined for it."""
    if not row.get("ok") or not row.get("e2e_s"):
        return None
    if figure == "e2e":
        return row["e2e_s"]
    if figure == "streamed_tpot":
        return metrics.request_tpot(row)
    if figure == "server_tpot":
        return metrics.request_server_tpot(row)
    raise ValueError(f"unknown latency figure {figure!r}: one of {FIGURES}")


def row_acceptance(row: dict) -> tuple[float, float] | None:
    """(drafting steps, accepted drafts) of one finished request, from its own figures in the neutral shape
    (metrics.request_spec: a server's `spec`, or the local engine's per-step lengths); else None."""
    spec = metrics.request_spec(row, 0) if row.get("ok") else None
    if spec is None:
        return None
    return float(spec["num_spec_steps"]), float(spec["num_accepted_draft_tokens"])


def _matched(cell_runs: list[list[dict]], ref_runs: list[list[dict]], value: Callable[[dict], object]):
    """(prompt index, cell value, ref value) for each (repeat, prompt, turn) with a value on both sides;
    cell_runs[i] is the same repeat as ref_runs[i]."""
    for cell, ref in zip(cell_runs, ref_runs):
        ref_by_key = {(r["index"], r["turn"]): value(r) for r in ref}
        for r in cell:
            a, b = value(r), ref_by_key.get((r["index"], r["turn"]))
            if a and b:
                yield r["index"], a, b


def _bootstrap(samples: tuple[np.ndarray, ...], statistic, seed: int, paired: bool) -> dict:
    """A BCa bootstrap CI of a vectorised statistic. BCa, not percentile: in a simulation of 16 prompts
    with skewed ratios it covered 87% against the percentile's 86% (both short of 95% with few prompts,
    hence MIN_PROMPTS). All resamples equal (identical cells): the CI is the point."""
    sps = _scipy_stats()
    with warnings.catch_warnings():      # that case makes scipy warn and return NaN
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        res = sps.bootstrap(samples, statistic, paired=paired, vectorized=True, n_resamples=N_RESAMPLES, batch=1000,
                            confidence_level=CONFIDENCE, method="BCa", rng=np.random.default_rng(seed))
    spread = res.bootstrap_distribution
    if np.all(spread == spread[0]):
        return {"ci_low": float(spread[0]), "ci_high": float(spread[0])}
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {"ci_low": None, "ci_high": None} if math.isnan(lo) or math.isnan(hi) else {"ci_low": lo, "ci_high": hi}


def _log_latencies(cell_runs: list[list[dict]], ref_runs: list[list[dict]], figure: str):
    """Per side, a (repeats x prompts) matrix of each prompt's summed log latencies over its turns, and
    each prompt's number of turns; only (prompt, turn)s finished in every repeat of both sides count."""
    tables = [[{(r["index"], r["turn"]): request_latency(r, figure) for r in run} for run in runs]
              for runs in (cell_runs, ref_runs)]
    present = [{k for k, v in t.items() if v} for side in tables for t in side]
    keys = sorted(set.intersection(*present)) if present and all(tables) else []
    column = {i: j for j, i in enumerate(sorted({i for i, _ in keys}))}
    turns = np.bincount([column[i] for i, _ in keys], minlength=len(column)).astype(float)
    logs = []
    for side in tables:
        m = np.zeros((len(side), len(column)))
        for r, table in enumerate(side):
            for i, t in keys:
                m[r, column[i]] += math.log(table[i, t])
        logs.append(m)
    return logs[0], logs[1], turns


def _log_speedup_statistic(cell: np.ndarray, ref: np.ndarray, turns: np.ndarray, resampled: tuple[str, ...]):
    """statistic(*index samples, axis=-1): the mean log(ref / cell) latency per request, over the resampled
    prompts and each side's resampled repeats (a side with one repeat is not resampled)."""
    def statistic(*samples, axis=-1):
        batch = samples[0].shape[:-1]
        idx = {name: s.reshape(-1, s.shape[-1]).astype(int) for name, s in zip(resampled, samples)}

        def mean_over_repeats(logs, name):     # (batches, prompts)
            return logs[idx[name]].mean(axis=1) if name in idx else logs.mean(axis=0)[None, :]

        diff = mean_over_repeats(ref, "ref") - mean_over_repeats(cell, "cell")
        if "prompt" not in idx:
            return (diff.sum(axis=1) / turns.sum()).reshape(batch)
        p = idx["prompt"]
        diff = np.broadcast_to(diff, (p.shape[0], diff.shape[1]))
        return (np.take_along_axis(diff, p, axis=1).sum(axis=1) / turns[p].sum(axis=1)).reshape(batch)
    return statistic


def _cluster_bootstrap(cell: np.ndarray, ref: np.ndarray, turns: np.ndarray, cell_rounds, ref_rounds,
                       seed: int) -> dict:
    """A percentile CI of the mean log(ref / cell) latency per request, resampling rounds (with replacement),
    then within each drawn round each side's repeats of it, then prompts. The repeats of every drawn round are
    pooled, as the point figure pools every repeat. Percentile, not BCa: BCa's jackknife has no one-level form
    for nested draws."""
    rounds = sorted(set(cell_rounds) & set(ref_rounds))
    rng = np.random.default_rng(seed)
    B, R, P = N_RESAMPLES, len(rounds), len(turns)
    drawn = rng.integers(0, R, size=(B, R))                  # the rounds of each resample

    def pooled(logs, of_round):                              # (B, prompts): each resample's summed logs, and count
        members = [np.flatnonzero(np.asarray(of_round) == u) for u in rounds]
        size = np.array([len(m) for m in members])
        width = size.max()
        table = np.full((R, width), -1)
        for u, m in enumerate(members):
            table[u, :len(m)] = m
        n = size[drawn]                                      # (B, R) repeats in each drawn round
        pick = np.floor(rng.random((B, R, width)) * n[..., None]).astype(int)
        idx = table[drawn[..., None], pick]                  # (B, R, width): repeat indices
        mask = np.arange(width)[None, None, :] < n[..., None]
        total = np.where(mask[..., None], logs[np.where(mask, idx, 0)], 0.0).sum(axis=(1, 2))
        return total / n.sum(axis=1)[:, None]

    diff = pooled(ref, ref_rounds) - pooled(cell, cell_rounds)
    p = rng.integers(0, P, size=(B, P))
    dist = np.take_along_axis(diff, p, axis=1).sum(axis=1) / turns[p].sum(axis=1)
    if np.all(dist == dist[0]):
        return {"ci_low": float(dist[0]), "ci_high": float(dist[0])}
    alpha = (1 - CONFIDENCE) / 2
    lo, hi = np.quantile(dist, [alpha, 1 - alpha])
    return {"ci_low": float(lo), "ci_high": float(hi)}


def speedup_ci(cell_runs: list[list[dict]], ref_runs: list[list[dict]], figure: str, seed: int = SEED,
               rounds: tuple[list[int], list[int]] | None = None) -> dict:
    """Geometric-mean latency ratio ref / cell (above 1: the cell is faster) of one figure (`FIGURES`)
    over the requests of every repeat of each side, with its CI; `prompts` and `requests` say what entered.
    `rounds`: the round each run of (cell_runs, ref_runs) ran in; where both sides share two or more rounds the
    CI resamples rounds (_cluster_bootstrap), else it is the one-round CI."""
    cell, ref, turns = _log_latencies(cell_runs, ref_runs, figure)
    out = {"ratio": None, "ci_low": None, "ci_high": None, "prompts": len(turns),
           "requests": int(turns.sum()) * len(cell)}
    if not len(turns):
        return out
    out["ratio"] = float(np.exp((ref.mean(axis=0) - cell.mean(axis=0)).sum() / turns.sum()))
    if len(turns) >= MIN_PROMPTS and rounds and len(set(rounds[0]) & set(rounds[1])) > 1:
        cell_rounds, ref_rounds = rounds
        shared = set(cell_rounds) & set(ref_rounds)     # a round one side has no valid repeat of is left out
        keep_c, keep_r = ([i for i, u in enumerate(rs) if u in shared] for rs in rounds)
        ci = _cluster_bootstrap(cell[keep_c], ref[keep_r], turns, [cell_rounds[i] for i in keep_c],
                                [ref_rounds[i] for i in keep_r], seed)
        out.update({k: float(np.exp(v)) for k, v in ci.items()})
    elif len(turns) >= MIN_PROMPTS:
        samples = {"prompt": np.arange(len(turns)), "cell": np.arange(len(cell)), "ref": np.arange(len(ref))}
        resampled = tuple(n for n in ("prompt", "cell", "ref") if len(samples[n]) > 1)
        statistic = _log_speedup_statistic(cell, ref, turns, resampled)
        ci = _bootstrap(tuple(samples[n] for n in resampled), statistic, seed, paired=False)
        out.update({k: None if v is None else float(np.exp(v)) for k, v in ci.items()})
    return out


def verdict(ci_low: float | None, ci_high: float | None, equivalence: float = EQUIVALENCE,
            at_budget: bool = True) -> str | None:
    """The one vocabulary, for any interval of a speedup (ratio scale, above 1: the cell is faster): `faster`
    (the interval lies above 1), `slower` (below 1), `equivalent` (it holds 1 and lies inside the margin
    [1 / (1 + equivalence), 1 + equivalence]), else `unresolved` at the budget and None (not answered yet)
    before it. No interval: None."""
    if ci_low is None or ci_high is None:
        return None
    if ci_low > 1:
        return FASTER
    if ci_high < 1:
        return SLOWER
    if 1 / (1 + equivalence) <= ci_low and ci_high <= 1 + equivalence:
        return EQUIVALENT
    return UNRESOLVED if at_budget else None


def verdict_text(verdict_: str | None, equivalence: float = EQUIVALENCE) -> str:
    """How tables and lines print a verdict: `equivalent within ±5%` (its margin said); the others as they are;
    `no CI` for None."""
    if verdict_ == EQUIVALENT:
        return f"{EQUIVALENT} within ±{equivalence * 100:g}%"
    return verdict_ or "no CI"


def answered(verdict_text_: str | None) -> bool:
    """A verdict (as verdict_text writes it) that answers its comparison: faster, slower or equivalent."""
    return bool(verdict_text_) and verdict_text_.split(" ")[0] in (FASTER, SLOWER, EQUIVALENT)


def streamed_na(cell_runs: list[list[dict]], ref_runs: list[list[dict]],
                sides: tuple[str, str] = ("cell", "reference")) -> str | None:
    """Why the paired streamed TPOT of these runs is not shown: the first repeat of either side whose streams
    fail its own check (metrics.streamed_invalid), named by side and repeat; None where every repeat passes."""
    return _first_invalid(cell_runs, ref_runs, sides, metrics.streamed_invalid)


def server_tpot_na(cell_runs: list[list[dict]], ref_runs: list[list[dict]],
                   sides: tuple[str, str] = ("cell", "reference")) -> str | None:
    """Why the paired server-timed TPOT of these runs is not shown: the first repeat of either side whose server
    timing fails its check (metrics.server_invalid); None where every repeat passes."""
    return _first_invalid(cell_runs, ref_runs, sides, metrics.server_invalid)


def degenerate_na(cell_runs: list[list[dict]], ref_runs: list[list[dict]],
                  sides: tuple[str, str] = ("cell", "reference")) -> str | None:
    """Why these runs get the DEGENERATE verdict: the first repeat of either side whose answers degenerate
    (metrics.degenerate_reason); None where neither side's do."""
    return _first_invalid(cell_runs, ref_runs, sides, metrics.degenerate_reason)


def _first_invalid(cell_runs, ref_runs, sides, check) -> str | None:
    for side, runs in zip(sides, (cell_runs, ref_runs)):
        for i, run in enumerate(runs):
            reason = check(run)
            if reason:
                return f"{side} repeat {i + 1} of {len(runs)}: {reason}"
    return None


def paired_speedup(cell_runs: list[list[dict]], ref_runs: list[list[dict]], seed: int = SEED,
                   sides: tuple[str, str] = ("cell", "reference"),
                   rounds: tuple[list[int], list[int]] | None = None, equivalence: float = EQUIVALENCE) -> dict:
    """Speedup of a cell over a reference from each side's repeats (request rows): the e2e latency ratio, the
    streamed-TPOT ratio (the client's clock) and the server-TPOT ratio (the server's own timing), each a geomean
    with its CI, what entered, and the verdict (on e2e, read once at the budget: verdict_text; DEGENERATE, with `verdict_reason`, where either side's
    answers degenerate in any repeat). A TPOT ratio stands only where every repeat of both sides
    passes that figure's check; elsewhere it is None and `speedup_streamed_tpot_na` / `speedup_server_tpot_na`
    says why (`sides` name the two in that reason). `rounds`: each run's round, per side (speedup_ci)."""
    out: dict = {}
    both = bool(cell_runs and ref_runs)
    nas = {"e2e": None, "streamed_tpot": streamed_na(cell_runs, ref_runs, sides) if both else None,
           "server_tpot": server_tpot_na(cell_runs, ref_runs, sides) if both else None}
    for figure in FIGURES:
        g = speedup_ci(cell_runs, ref_runs, figure, seed, rounds) if not nas[figure] else \
            dict.fromkeys(("ratio", "ci_low", "ci_high"))
        out.update({f"speedup_{figure}_geomean": g["ratio"], f"speedup_{figure}_ci_low": g["ci_low"],
                    f"speedup_{figure}_ci_high": g["ci_high"]})
        if figure == "e2e":
            out.update(paired_prompts=g["prompts"], paired_requests=g["requests"])
    out["speedup_streamed_tpot_na"] = nas["streamed_tpot"]
    out["speedup_server_tpot_na"] = nas["server_tpot"]
    v = verdict(out["speedup_e2e_ci_low"], out["speedup_e2e_ci_high"], equivalence)
    out["verdict"] = verdict_text(v, equivalence) if v else None
    out["verdict_reason"] = degenerate_na(cell_runs, ref_runs, sides) if both else None
    if out["verdict_reason"]:      # the speedups stay, as measured; the verdict claims none of them
        out["verdict"] = DEGENERATE
    return out


def _acceptance_ratio(steps_a, acc_a, steps_b, acc_b, axis=-1):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (1 + np.sum(acc_a, axis=axis) / np.sum(steps_a, axis=axis)) / \
            (1 + np.sum(acc_b, axis=axis) / np.sum(steps_b, axis=axis))


def acceptance_ratio(cell_runs: list[list[dict]], ref_runs: list[list[dict]], seed: int = SEED) -> dict:
    """The cell's mean acceptance length over the reference's, on the requests both finished with
    per-request acceptance (repeat-matched: at temperature 0 a repeat drafts what the first did), with a
    CI over prompts; ratio None where either side lacks per-request acceptance."""
    sums: dict[int, np.ndarray] = {}
    for i, a, b in _matched(cell_runs, ref_runs, row_acceptance):
        sums[i] = sums.get(i, 0) + np.array([*a, *b])
    columns = np.array([sums[i] for i in sorted(sums)])
    if not len(columns) or not columns[:, 0].sum() or not columns[:, 2].sum():
        return {"ratio": None, "ci_low": None, "ci_high": None}
    ci = _bootstrap(tuple(columns.T), _acceptance_ratio, seed, paired=True) if len(columns) >= MIN_PROMPTS \
        else {"ci_low": None, "ci_high": None}
    return {"ratio": float(_acceptance_ratio(*columns.T)), **ci}


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
    res = _scipy_stats().bootstrap((np.array(cell), np.array(ref)),
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

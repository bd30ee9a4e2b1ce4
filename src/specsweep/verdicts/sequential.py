"""Verdicts at a stated precision, looked at after every repeat: an anytime-valid interval for a paired speedup,
the one vocabulary of verdicts, and the stopping rule (issue 46; docs/methods.md#looking-after-every-repeat-sequential-verdicts).
Pure: request rows or per-repeat figures in, records out.

The unit is a repeat block: repeat r of a cell and repeat r of the cell it is compared with ran back to back (a
co-resident group takes turns repeat by repeat), and a load that moves a whole repeat moves both. A block's figure
is the mean log(ref / cell) latency over the requests both sides finished in it (block_log_ratios), so a block is
one draw of the paired log-speedup; the blocks are taken as independent draws with one mean mu (the log of the
speedup) and an unknown spread.

The interval on mu is a confidence sequence (Lai 1976; Howard, Ramdas, McAuliffe, Sekhon 2021, "Time-uniform,
nonparametric, nonasymptotic confidence sequences", the scale-invariant normal mixture): with S = sum(d - mu),
V = sum((d - mu)^2) over t blocks, and a normal mixture of precision MIXTURE over the effect in units of the
spread,

    M_t(mu) = sqrt(c / (t + c)) * (1 - S^2 / ((t + c) V)) ^ (-t / 2)

is a nonnegative martingale with M_0 = 1 under mu, whatever the spread, for normal blocks; by Ville's
inequality P(some t with M_t(mu) >= 1 / alpha) <= alpha, so the set {mu: M_t(mu) < 1 / alpha} holds mu at every
look at once with probability 1 - alpha, and so at any stopping time, a rule's included, and whatever budget a
rerun later allows. Block figures are means over a repeat's requests, near normal; the A/A simulation on recorded
requests (tests/test_sequential.py) checks the rate without that assumption. Symmetric or mildly skewed blocks
keep it (simulated: t(3) 1.7%, lognormal sigma 0.25 2.7%, over 30 looks); strongly skewed ones do not (lognormal
sigma 1: 21%). One block says nothing (M_1 = 1), two almost nothing; the interval is about twice as wide as a
t-interval over the same blocks looked at once.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specsweep.verdicts import launches, stats
from specsweep.verdicts.stats import EQUIVALENCE, UNRESOLVED, verdict

EVERY = "every"       # sweep.looks: this rule's name in a record (spending.py's is `planned`)

ALPHA = 1 - stats.CONFIDENCE
MIXTURE = 0.03       # the mixture's precision c: the narrowest interval at 3-6 blocks (docs/methods.md)
# Why a comparison stopped, the one spelling (looks.json, the summary): its verdict decided (and as narrow as
# sweep.precision asks), the budget of repeats spent, a group job's time budget spent, or a fixed study read once
ANSWERED, BUDGET, TIME, FIXED = "answered", "budget", "time", "fixed"


def block_log_ratios(cell_runs: list[list[dict]], ref_runs: list[list[dict]], figure: str = "e2e") -> list[float]:
    """Per repeat block r (cell_runs[r] and ref_runs[r], which ran back to back), the mean log(ref / cell) latency
    of one figure (stats.FIGURES) over the (prompt, turn)s both sides finished in that block; a block with none
    is left out (it has nothing to say)."""
    out = []
    for cell, ref in zip(cell_runs, ref_runs):
        ref_by_key = {(r["index"], r["turn"]): stats.request_latency(r, figure) for r in ref}
        logs = [math.log(b / a) for r in cell
                if (a := stats.request_latency(r, figure)) and (b := ref_by_key.get((r["index"], r["turn"])))]
        if logs:
            out.append(sum(logs) / len(logs))
    return out


def confidence_sequence(blocks: Sequence[float], alpha: float = ALPHA, mixture: float = MIXTURE) -> tuple[float, float]:
    """(low, high) on the log scale: the mu with M_t(mu) < 1 / alpha after these t blocks (module doc), in closed
    form: |mean - mu| < sqrt(q / (1 - q)) * sd, sd the blocks' spread (divided by t), q = (t + c) / t *
    (1 - (alpha^2 c / (t + c)) ^ (1 / t)). Unbounded (-inf, inf) with fewer than 2 blocks or where q >= 1."""
    t = len(blocks)
    if t < 2:
        return -math.inf, math.inf
    d = np.asarray(blocks, dtype=float)
    mean, sd = float(d.mean()), float(d.std())
    q = (t + mixture) / t * (1 - (alpha ** 2 * mixture / (t + mixture)) ** (1 / t))
    if q >= 1:
        return -math.inf, math.inf
    half = math.sqrt(q / (1 - q)) * sd
    return mean - half, mean + half


def running_interval(blocks: Sequence[float], alpha: float = ALPHA, mixture: float = MIXTURE) -> tuple[float, float]:
    """The confidence sequence intersected over every look so far (after block 2, 3, ..., t): as valid as the
    last look's (every look holds mu at once), and never widening."""
    low, high = -math.inf, math.inf
    for t in range(2, len(blocks) + 1):
        low, high = intersect((low, high), confidence_sequence(blocks[:t], alpha, mixture))
    return low, high


def intersect(running: tuple[float, float], new: tuple[float, float]) -> tuple[float, float]:
    """The running interval narrowed by a look's; where the two do not meet (blocks that drift, so no one mean
    fits them all, a 5% event at most for blocks that do share one), the look's own, which holds on its own."""
    low, high = max(running[0], new[0]), min(running[1], new[1])
    return (low, high) if low <= high else new


def precise(low: float, high: float, precision: float | None) -> bool:
    """Whether a log-scale interval is as narrow as a study asks (sweep.precision: its ratio hi / lo at most
    1 + precision); any interval where it asks for none, none that is unbounded."""
    return precision is None or (math.isfinite(low) and math.isfinite(high) and high - low <= math.log1p(precision))


def comparison(blocks: Sequence[float], max_repeats: int, equivalence: float = EQUIVALENCE,
               alpha: float = ALPHA, mixture: float = MIXTURE, repeats: int | None = None,
               precision: float | None = None, launch_sd: float = 0.0) -> dict:
    """The record of one comparison looked at after each of its blocks so far (blocks[r]: block_log_ratios' figure
    of a repeat), `repeats` the group's repeats so far (default: one per block; more where a repeat paired no
    request and gave no block): its verdict on the running interval (`unresolved` once max_repeats repeats are
    in and it is not answered, None while it may go on), the speedup (exp of the blocks' mean) with the interval
    (ratio scale), `repeats`, `blocks`, `looks` (one after each repeat), `answered_at` (the block at which it was
    first answered, else None), `equivalence`, `stopped` (`answered`, `budget`, or None while it goes on), `method`
    (`every`) and `nominal` (alpha: the sequence's level holds at every look).

    With a `precision` (sweep.precision) a comparison is answered only once its verdict is decided and its interval
    is that narrow (`precise`): before, its verdict is None (it goes on); at the budget, the decided word, `stopped`
    `budget`. With a `launch_sd` (log scale) each look's sequence carries it at alpha's level (launches.widen)."""
    low, high = -math.inf, math.inf
    answered_at = None
    z = launches.z_of(alpha) if launch_sd else 0.0
    for t in range(1, len(blocks) + 1):
        own = confidence_sequence(blocks[:t], alpha, mixture)
        if launch_sd:
            own = launches.widen(*own, float(np.mean(blocks[:t])), launch_sd, z)
        low, high = intersect((low, high), own)
        if answered_at is None and verdict(math.exp(low), math.exp(high), equivalence, at_budget=False) \
                and precise(low, high, precision):
            answered_at = t
    n = len(blocks)
    repeats = n if repeats is None else repeats
    at_budget = repeats >= max_repeats
    ci = (None, None) if math.isinf(low) or math.isinf(high) else (math.exp(low), math.exp(high))
    v = verdict(*ci, equivalence, at_budget) if ci[0] is not None else (UNRESOLVED if at_budget else None)
    if answered_at is None and not at_budget:
        v = None
    return {"verdict": v, "ratio": math.exp(float(np.mean(blocks))) if n else None, "ci_low": ci[0], "ci_high": ci[1],
            "repeats": repeats, "blocks": n, "looks": repeats, "answered_at": answered_at, "equivalence": equivalence,
            "precision": precision,
            "stopped": None if v is None else (ANSWERED if answered_at is not None else BUDGET),
            "method": EVERY, "nominal": alpha, "launch_sd": launch_sd}


def look(blocks_by_comparison: dict[str, Sequence[float]], max_repeats: int, equivalence: float = EQUIVALENCE,
         alpha: float = ALPHA, mixture: float = MIXTURE, repeats: int | None = None,
         precision: float | None = None) -> tuple[bool, dict[str, dict]]:
    """The stopping rule, applied after a repeat: (stop, each comparison's record, `comparison`). A group stops
    when every comparison it answers is answered (`faster`, `slower`, `equivalent`) or when its budget is spent:
    `repeats` (the group's repeats so far; default, the most blocks of any comparison) reaching max_repeats,
    where those not answered are `unresolved`. A comparison answered before the others keeps its answer on
    later looks (the running interval only narrows: `equivalent` may become `faster`, nothing flips)."""
    if repeats is None:
        repeats = max((len(b) for b in blocks_by_comparison.values()), default=0)
    records = {name: comparison(b, max_repeats, equivalence, alpha, mixture, repeats, precision)
               for name, b in blocks_by_comparison.items()}
    return repeats >= max_repeats or all(r["verdict"] is not None for r in records.values()), records

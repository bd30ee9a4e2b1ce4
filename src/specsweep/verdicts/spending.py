"""Verdicts at a few planned looks with alpha spending (`sweep.looks: planned`; issue 46,
docs/methods.md#a-planned-look-schedule-alpha-spending): the other stopping rule beside sequential.py's
confidence sequence, on the same repeat blocks (sequential.block_log_ratios), with the same vocabulary and
record. Pure: block figures in, records out.

The plan: looks after the repeats `plan(max_repeats)` (3, 5, 7, 10 for 10), fixed by the budget before the first
look. At look k, with n_k blocks, the statistic Z_k = sqrt(n_k) (mean_k - mu) / sigma is standard normal and
Z_j, Z_k (j < k) have correlation sqrt(n_j / n_k) (independent blocks, one mean). A Lan-DeMets spending function
(Lan and DeMets 1983, Biometrika 70:659) says how much of alpha the looks up to information fraction
t = n_k / n_K may spend; the boundaries c_1..c_K solve, look by look,

    P(|Z_1| < c_1, ..., |Z_k| < c_k) = 1 - spent(t_k)

exactly for these correlated normals (scipy.stats.multivariate_normal's cdf over the box). The intervals
mean_k +- c_k sigma / sqrt(n_k) then hold mu at every planned look at once with probability 1 - alpha: repeated
confidence intervals (Jennison and Turnbull 1989, JRSS B 51:305), so `faster`, `slower` and `equivalent`, read at
any look of the plan, are wrong at most alpha of the time. The spending function (SPENDING) is O'Brien-Fleming-type
(alpha/2 a side, 4 - 4 Phi(z_{1 - alpha/4} / sqrt(t)); 4.333, 2.963, 2.359, 2.014 for four equal looks, as
published): it keeps almost all of alpha for the last looks, so the last look's interval is near a one-look
interval's, which is what a comparison answered late needs; Pocock-type (alpha ln(1 + (e - 1) t)) spends evenly and
widens the last look. Hwang-Shih-DeCani's gamma family and the power family (`spent`) span the two; issue 54's
search of designs (bench/look_design.py: spending function, looks, budget, on the recorded CPU blocks) compares
them. A group keeps the plan it recorded (its looks and spending function: `comparison`'s `looks` and `spending`,
which run/looks.py reads from the group's plan record).

sigma is not known: a look's interval is mean_k +- b_k s_k / sqrt(n_k), s_k the blocks' standard deviation. Since
issue 54 (CALIBRATED, the default) the b_k are calibrated for the studentized statistics themselves:
T_k = sqrt(n_k) (mean_k - mu) / s_k has, for independent normal blocks, a joint law that depends on neither mu nor
sigma, so a simulation of normal blocks gives boundaries whose error rate is alpha exactly (to the simulation's
precision) at these block counts, spent look by look as the spending function says: b_1 is Student's t quantile at
n_1 - 1 degrees of freedom (exact), and each later b_k the quantile of |T_k| among the simulated studies that
crossed no earlier boundary that spends the look's share (t_boundaries). They are computed once, by
bench/calibrate_boundaries.py, into boundaries.json beside this module (2,000,000 studies a plan, seeded), for
every max_repeats the table holds; another plan is simulated on first use (200,000 studies, cached). A look's
interval is the t interval at its nominal level p_k = 2 P(t_{n_k - 1} > b_k), which is b_k itself.

Before (NOMINAL_T, which a group planned then keeps: looks.calibration), each look used the normal boundary's
nominal level p_k = 2 (1 - Phi(c_k)) with Student's t at n_k - 1 degrees of freedom (the significance-level
approach, Jennison and Turnbull 2000, Group Sequential Methods with Applications to Clinical Trials, section 3.8;
Pocock 1977, Biometrika 64:191): about 5.3% for normal blocks, not 5%. The A/A simulation on recorded requests
(tests/test_spending.py) checks either without the normal assumption.
"""
from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specsweep.verdicts import launches
from specsweep.verdicts.sequential import ALPHA, ANSWERED, BUDGET, UNRESOLVED, intersect, precise
from specsweep.verdicts.stats import EQUIVALENCE, verdict

PLANNED = "planned"   # sweep.looks: this rule's name in a record (sequential.py's is `every`)

MIN_LOOK = 3                               # no look before 3 repeats: a t with 1 degree of freedom says little
OBF, POCOCK = "obrien-fleming", "pocock"  # spending functions: issue 46's and 54's first rule, and its alternative
HSD = "hwang-shih-decani"                  # the gamma family, named with its gamma: "hwang-shih-decani(-4)"
POWER = "power"                            # the power family alpha t^rho, named with rho: "power(3)"
FRACTIONS = (0.3, 0.5, 0.7, 1.0)           # the looks, as shares of max_repeats
SPENDING = OBF                             # the spending function of a new plan (and of every plan recorded so far)
SEED = 0                                   # the cdf's quasi-Monte Carlo points: a plan's boundaries are fixed
CALIBRATED, NOMINAL_T = "simulated-t", "t-nominal"   # how a look's level is found: issue 54's, and issue 46's
TABLE = Path(__file__).with_name("boundaries.json")  # bench/calibrate_boundaries.py's calibrated boundaries
STUDIES, FALLBACK_STUDIES = 2_000_000, 200_000       # simulated studies a plan: the table's, and one not in it
CALIBRATION_SEED = 54_000                  # + max_repeats: the calibration's seed (a check must use others)


def plan(max_repeats: int, fractions: Sequence[float] = FRACTIONS) -> tuple[int, ...]:
    """The repeats after which the group looks: `fractions` of max_repeats, rounded, none before MIN_LOOK, the last
    at max_repeats (3, 5, 7, 10 for 10; 4, 6, 8, 12 for 12; one look at the budget below MIN_LOOK)."""
    looks = {max(MIN_LOOK, round(f * max_repeats)) for f in fractions[:-1]}
    return tuple(sorted(r for r in looks if r < max_repeats)) + (max_repeats,)


def family(spending: str) -> tuple[str, float | None]:
    """A spending function's family and parameter: "hwang-shih-decani(-4)" -> (HSD, -4.0); OBF -> (OBF, None)."""
    m = re.fullmatch(r"([a-z-]+)(?:\(([-+0-9.e]+)\))?", spending)
    if not m or m.group(1) not in (OBF, POCOCK, HSD, POWER) or (m.group(2) is None) != (m.group(1) in (OBF, POCOCK)):
        raise ValueError(f"spending function {spending!r}: one of {OBF}, {POCOCK}, {HSD}(gamma), {POWER}(rho)")
    return m.group(1), None if m.group(2) is None else float(m.group(2))


def spent(t: float, alpha: float = ALPHA, spending: str = SPENDING) -> float:
    """The alpha the looks up to information fraction t spend (Lan-DeMets): O'Brien-Fleming-type, two-sided as
    alpha / 2 on each side (gsDesign's sfLDOF, ldbounds), 4 - 4 Phi(z_{1 - alpha/4} / sqrt(t)); Pocock-type,
    alpha ln(1 + (e - 1) t); Hwang-Shih-DeCani (1990), alpha (1 - e^{-gamma t}) / (1 - e^{-gamma}) (alpha t at
    gamma 0; gsDesign's sfHSD: gamma -4 is near O'Brien-Fleming's, 1 near Pocock's); or the power family (Kim and
    DeMets 1987), alpha t^rho."""
    from scipy.stats import norm

    kind, p = family(spending)
    t = min(t, 1.0)
    if t <= 0:
        return 0.0
    if kind == POCOCK:
        return alpha * math.log(1 + (math.e - 1) * t)
    if kind == HSD:
        return alpha * t if p == 0 else alpha * (1 - math.exp(-p * t)) / (1 - math.exp(-p))
    if kind == POWER:
        return alpha * t ** p
    return float(4 - 4 * norm.cdf(norm.ppf(1 - alpha / 4) / math.sqrt(t)))


@functools.lru_cache(maxsize=64)
def boundaries(looks: tuple[int, ...], alpha: float = ALPHA, spending: str = SPENDING) -> tuple[float, ...]:
    """The two-sided normal boundaries c_k of the looks after `looks` blocks (module doc), each the root of
    P(|Z_j| < c_j, j <= k) = 1 - spent(n_k / n_K) given the earlier ones."""
    from scipy.optimize import brentq
    from scipy.stats import multivariate_normal, norm

    n = np.asarray(looks, dtype=float)
    out: list[float] = []
    for k in range(len(looks)):
        stay = 1 - spent(n[k] / n[-1], alpha, spending)
        if k == 0:
            out.append(float(norm.ppf(1 - (1 - stay) / 2)))
            continue
        cov = np.sqrt(np.minimum.outer(n[:k + 1], n[:k + 1]) / np.maximum.outer(n[:k + 1], n[:k + 1]))

        def excess(c: float) -> float:
            upper = np.array(out + [c])
            return multivariate_normal.cdf(upper, np.zeros(k + 1), cov, lower_limit=-upper, abseps=1e-5,
                                           releps=1e-5, rng=np.random.default_rng(SEED)) - stay
        out.append(float(brentq(excess, 1.0, 8.0, xtol=1e-4)))
    return tuple(out)


def studentized(looks: tuple[int, ...], studies: int, seed: int, chunk: int = 100_000) -> np.ndarray:
    """|T_k| = sqrt(n_k) |mean_k| / s_k at each look of `studies` simulated studies of independent standard normal
    blocks (studies x looks): their joint law is every normal study's, whatever its mean and spread."""
    rng = np.random.Generator(np.random.PCG64(seed))
    n = np.asarray(looks)
    out = np.empty((studies, len(looks)))
    for start in range(0, studies, chunk):
        x = rng.standard_normal((min(chunk, studies - start), looks[-1]))
        mean = np.cumsum(x, axis=1)[:, n - 1] / n
        var = (np.cumsum(x * x, axis=1)[:, n - 1] - n * mean ** 2) / (n - 1)
        out[start:start + len(x)] = np.abs(mean) * np.sqrt(n / var)
    return out


def calibrate(looks: tuple[int, ...], alpha: float = ALPHA, spending: str = SPENDING, studies: int = STUDIES,
              seed: int | None = None) -> tuple[float, ...]:
    """The boundaries b_k of the studentized statistics (module doc): b_1 Student's t quantile of the first look's
    spend (exact), each later one the midpoint between the simulated |T_k|s, among studies that crossed no earlier
    boundary, that spends exactly the share the spending function gives the looks up to k."""
    from scipy.stats import t as student

    n = np.asarray(looks, dtype=float)
    if len(looks) == 1 or looks[0] < 2:
        return (float(student.isf(alpha / 2, max(looks[-1] - 1, 1))),)
    stats_ = studentized(looks, studies, CALIBRATION_SEED + looks[-1] if seed is None else seed)
    crossed = np.zeros(studies, dtype=bool)
    out: list[float] = []
    for k in range(len(looks)):
        share = spent(n[k] / n[-1], alpha, spending)
        if k == 0:
            b = float(student.isf(share / 2, looks[0] - 1))
        else:
            need = int(round(share * studies)) - int(crossed.sum())
            left = np.sort(stats_[~crossed, k])[::-1]
            b = float("inf") if need <= 0 else float((left[need - 1] + left[min(need, len(left) - 1)]) / 2)
        crossed |= stats_[:, k] >= b
        out.append(b)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(TABLE.read_text()) if TABLE.exists() else {}


@functools.lru_cache(maxsize=64)
def t_boundaries(looks: tuple[int, ...], alpha: float = ALPHA, spending: str = SPENDING) -> tuple[float, ...]:
    """The calibrated boundaries of a plan: the table's (bench/calibrate_boundaries.py) where it holds this plan,
    alpha and spending function; else simulated now (FALLBACK_STUDIES, seeded: the same on every call)."""
    table = _table()
    entry = table.get("plans", {}).get(str(looks[-1]))
    if entry and tuple(entry["looks"]) == tuple(looks) and table["alpha"] == alpha and table["spending"] == spending:
        return tuple(entry["boundaries"])
    return calibrate(looks, alpha, spending, FALLBACK_STUDIES)


@functools.lru_cache(maxsize=256)
def nominal_levels(looks: tuple[int, ...], alpha: float = ALPHA, spending: str = SPENDING,
                   calibration: str = CALIBRATED) -> tuple[float, ...]:
    """Each look's nominal two-sided level: what a one-look t interval at that look would be. CALIBRATED: 2 P(t_{n_k
    - 1} > b_k) of the calibrated boundaries; NOMINAL_T (issue 46's): 2 (1 - Phi(c_k)) of the normal ones."""
    from scipy.stats import norm
    from scipy.stats import t as student

    if calibration == NOMINAL_T:
        return tuple(float(2 * norm.sf(c)) for c in boundaries(looks, alpha, spending))
    return tuple(float(2 * student.sf(b, max(n - 1, 1))) for n, b in zip(looks, t_boundaries(looks, alpha, spending)))


@functools.lru_cache(maxsize=4096)
def _t_quantile(nominal: float, df: int) -> float:
    """Student's t upper nominal/2 quantile (cached: a study's looks ask for a few, an A/A simulation for millions)."""
    from scipy.stats import t as student

    return float(student.isf(nominal / 2, df))


def interval(blocks: Sequence[float], nominal: float) -> tuple[float, float]:
    """(low, high) on the log scale: the t interval of the blocks' mean at the nominal two-sided level; unbounded
    with fewer than 2 blocks, or where it spans more than e^+-300 (a tiny level at 1 degree of freedom)."""
    n = len(blocks)
    if n < 2:
        return -math.inf, math.inf
    d = np.asarray(blocks, dtype=float)
    half = _t_quantile(nominal, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    if not half < 300:
        return -math.inf, math.inf
    return float(d.mean()) - half, float(d.mean()) + half


def comparison(blocks: Sequence[float], max_repeats: int, equivalence: float = EQUIVALENCE,
               alpha: float = ALPHA, repeats: int | None = None, spending: str = SPENDING,
               precision: float | None = None, calibration: str = CALIBRATED,
               looks: Sequence[int] | None = None, launch_sd: float = 0.0) -> dict:
    """The record of one comparison under the plan of max_repeats, at the planned looks taken so far (those at or
    before `repeats`, the group's repeats, default one per block; the look after repeat r reads the first r
    blocks): sequential.comparison's fields, with the interval the looks' intervals share (each holds with all the
    others at once, so their intersection does too; where two do not meet, the later one's) and its verdict: once
    answered (`answered_at`) it only narrows, so `faster` stays `faster` and `equivalent` may become one; None
    before the first look, `unresolved` at the budget; plus `method`, `plan` and `nominal`, the last look's
    nominal level. The speedup is the blocks' mean up to that look, as the interval's. With a `precision`
    (sweep.precision), answered means decided and that narrow (sequential.precise), as in sequential.comparison.
    `looks`: the plan a group recorded (an older design's, looks.calibration), else plan(max_repeats).
    `launch_sd`: a launch SD (log scale) that each look's interval carries at its own level (launches.widen)."""
    n = len(blocks)
    repeats = n if repeats is None else repeats
    schedule = tuple(looks) if looks else plan(max_repeats)
    taken = [r for r in schedule if r <= repeats]     # the boundaries (scipy, a second) only once a look is taken
    taken = list(zip(taken, nominal_levels(schedule, alpha, spending, calibration))) if taken else []
    ci, v, answered_at, nominal, used = (None, None), None, None, None, n
    low, high = -math.inf, math.inf
    for r, p in taken:
        used, nominal = min(r, n), p
        own = interval(blocks[:used], p)
        if launch_sd:
            own = launches.widen(*own, float(np.mean(blocks[:used])), launch_sd, launches.z_of(p))
        low, high = intersect((low, high), own)
        ci = (None, None) if math.isinf(low) or math.isinf(high) else (math.exp(low), math.exp(high))
        v = verdict(*ci, equivalence, at_budget=False)
        if v and answered_at is None and precise(low, high, precision):
            answered_at = r
    if answered_at is None:
        v = (v or UNRESOLVED) if repeats >= max_repeats else None
    return {"verdict": v, "ratio": math.exp(float(np.mean(blocks[:used]))) if used else None,
            "ci_low": ci[0], "ci_high": ci[1], "repeats": repeats, "blocks": n, "looks": len(taken),
            "answered_at": answered_at, "equivalence": equivalence, "precision": precision,
            "stopped": None if v is None else (ANSWERED if answered_at is not None else BUDGET),
            "method": PLANNED, "plan": list(schedule), "nominal": nominal, "boundaries": calibration,
            "spending": spending, "launch_sd": launch_sd}


def look(blocks_by_comparison: dict[str, Sequence[float]], max_repeats: int, equivalence: float = EQUIVALENCE,
         alpha: float = ALPHA, repeats: int | None = None, spending: str = SPENDING,
         precision: float | None = None, calibration: str = CALIBRATED,
         looks: Sequence[int] | None = None) -> tuple[bool, dict[str, dict]]:
    """sequential.look's stopping rule under the plan: (stop, each comparison's record). Between planned looks
    nothing changes; at one, the group stops once every comparison is answered, or at the budget."""
    if repeats is None:
        repeats = max((len(b) for b in blocks_by_comparison.values()), default=0)
    records = {name: comparison(b, max_repeats, equivalence, alpha, repeats, spending, precision, calibration, looks)
               for name, b in blocks_by_comparison.items()}
    return repeats >= max_repeats or all(r["verdict"] is not None for r in records.values()), records

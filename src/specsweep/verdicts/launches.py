"""The launch-to-launch component of a speedup (issue 54 item 5). Pure: numbers in, numbers out.

A study's interval resamples its repeats, all of one launch of its group: it holds that launch's speedup. Another
launch of the same comparison on the same host (another study, a load that came or went, a server that came up
otherwise) moves the speedup by a launch SD, tau, on the log scale, which no resampling within a launch sees.
`dersimonian_laird` estimates tau from launches' block means (Cochran's Q, DerSimonian-Laird, and tau's Q-profile
95% interval); `widen` carries a tau into one launch's interval: each side's distance from the point becomes
sqrt(d^2 + (z tau)^2), z the interval's own normal quantile (1.96 at 95%), as the sum of the launch's own error and an
independent launch effect (docs/methods.md#the-launch-component-sweeplaunch_sd).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MIN_LAUNCHES = 4       # a launch SD from fewer launches says little (issue 54: 4 or more on the H200)
Z95 = 1.959963984540054


def dersimonian_laird(means: Sequence[float], variances: Sequence[float]) -> dict:
    """Cochran's Q of launches' means (each with the variance of its own mean), its degrees of freedom and p, the
    DerSimonian-Laird tau (log scale) and its Q-profile 95% interval, and the precision-weighted mean. Needs 2
    launches or more."""
    from scipy import optimize, stats as sps

    m, v = np.asarray(means, float), np.asarray(variances, float)
    k = len(m)
    if k < 2:
        raise ValueError(f"dersimonian_laird: {k} launch(es): a launch SD needs 2 or more")
    w = 1 / v
    mean = float((w * m).sum() / w.sum())
    q = float((w * (m - mean) ** 2).sum())
    c = float(w.sum() - (w ** 2).sum() / w.sum())
    tau2 = max(0.0, (q - (k - 1)) / c)

    def gen_q(t2: float) -> float:
        ws = 1 / (v + t2)
        mu = (ws * m).sum() / ws.sum()
        return float((ws * (m - mu) ** 2).sum())

    def bound(target: float) -> float:
        if gen_q(0.0) <= target:
            return 0.0
        hi = 1.0
        while gen_q(hi) > target:
            hi *= 4
        return float(optimize.brentq(lambda t2: gen_q(t2) - target, 0.0, hi))

    lo, hi = bound(float(sps.chi2.ppf(0.975, k - 1))), bound(float(sps.chi2.ppf(0.025, k - 1)))
    return {"launches": k, "weighted_mean": mean, "cochran_q": q, "df": k - 1, "q_p": float(sps.chi2.sf(q, k - 1)),
            "launch_sd": math.sqrt(tau2), "launch_sd_ci": [math.sqrt(lo), math.sqrt(hi)]}


def launch_mean(blocks: Sequence[float]) -> tuple[float, float] | None:
    """A launch's mean of its repeat blocks (log scale) and that mean's variance (s^2 / n); None with fewer than 2
    blocks or no spread."""
    b = np.asarray(blocks, float)
    if len(b) < 2 or not b.var(ddof=1) > 0:
        return None
    return float(b.mean()), float(b.var(ddof=1)) / len(b)


def widen(low: float, high: float, point: float, launch_sd: float, z: float = Z95) -> tuple[float, float]:
    """A log-scale interval around `point` with a launch SD carried: each side's distance d from the point becomes
    sqrt(d^2 + (z launch_sd)^2). Unchanged where launch_sd is 0 or a side is unbounded."""
    if not launch_sd or not (math.isfinite(low) and math.isfinite(high)):
        return low, high
    extra = (z * launch_sd) ** 2
    return point - math.sqrt((point - low) ** 2 + extra), point + math.sqrt((high - point) ** 2 + extra)


def widen_ratio(low: float | None, high: float | None, ratio: float | None, launch_sd: float,
                z: float = Z95) -> tuple[float | None, float | None]:
    """`widen` on the ratio scale (a summary's speedup and its interval); None stays None."""
    if not launch_sd or None in (low, high, ratio) or min(low, high, ratio) <= 0:
        return low, high
    lo, hi = widen(math.log(low), math.log(high), math.log(ratio), launch_sd, z)
    return math.exp(lo), math.exp(hi)


def z_of(nominal: float) -> float:
    """The normal quantile of a two-sided level `nominal` (0.05: 1.96): how far a launch effect reaches at the
    interval's own level."""
    from scipy.stats import norm

    return float(norm.isf(nominal / 2))

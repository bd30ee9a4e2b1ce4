"""Why a cell's acceptance is low: the known causes in order, each decided by a counterfactual cell's measured
acceptance against the cell's own, never by the config alone (docs/methods.md#low-acceptance-diagnosis).

Pure: step histograms and already-measured figures in, each cause's status and the row's diagnosis out. Running
the counterfactual cells is counterfactuals.py's.

The statistic. The unit is one verify step, its figure the number of drafts it accepted (0..K), read from a
step histogram (index j: steps that accepted j drafts). A counterfactual's acceptance *rises* when both
- its mean acceptance length is at least MIN_RISE above the cell's on the same prompts, and
- the one-sided two-sample z statistic of the steps' mean accepted drafts (unequal variances) is at least
  Z_RISE, a level of 0.001 where the steps were independent.
Steps within one answer are not quite independent, which is why the level is strict and the margin is there
as well: neither alone decides.
"""
from __future__ import annotations

import math

from specsweep.core.table import value

BELOW_AL = 1.5        # sweep.diagnose.below_al's default: a pooled acceptance length below it is diagnosed
PROMPTS = 4           # sweep.diagnose.prompts's default: the counterfactual cells' prompts (one repeat)
MIN_RISE = 0.25       # the acceptance length a counterfactual must add, at least
Z_RISE = 3.09         # one-sided z at a level of 0.001
LOW_RATE = 0.5        # a position's rate below this is low: most steps accept nothing there

# the causes, in the order they are tried (the issue's), with the text a summary row shows
CAUSES = ("thinking", "target_layer_ids", "mask_token", "vocabulary", "undertrained")
LABELS = {"thinking": "thinking on for a drafter trained without it",
          "target_layer_ids": "target_layer_ids offset",
          "mask_token": "wrong mask token",
          "vocabulary": "tokenizer or vocabulary mismatch",
          "undertrained": "undertrained drafter",
          "unexplained": "none of the known causes"}

CONFIRMED, RULED_OUT, SUSPECTED, NOT_APPLICABLE, NOT_TESTED = (
    "confirmed", "ruled out", "suspected", "not applicable", "not tested")


def histogram_from_rates(rates: list[float], drafts: int) -> list[float]:
    """A step histogram (index j: steps that accepted j drafts) from per-position rates (accepted_at_i / drafts,
    not increasing) and the number of steps: steps that accepted exactly j drafts are drafts x (r_j - r_(j+1)),
    with r_0 = 1."""
    full = [1.0, *rates, 0.0]
    return [drafts * (full[j] - full[j + 1]) for j in range(len(rates) + 1)]


def step_moments(histogram: list[float]) -> tuple[float, float, float]:
    """(steps, mean accepted drafts per step, its sample variance) of a step histogram."""
    n = sum(histogram)
    if n <= 0:
        return 0.0, math.nan, math.nan
    mean = sum(j * h for j, h in enumerate(histogram)) / n
    var = sum(h * (j - mean) ** 2 for j, h in enumerate(histogram)) / (n - 1) if n > 1 else 0.0
    return n, mean, var


def rise(cell: list[float], counterfactual: list[float]) -> dict:
    """Whether the counterfactual's acceptance rose above the cell's (the module's statistic), with the figures:
    both acceptance lengths (1 + mean accepted drafts per step), both step counts and z."""
    n0, m0, v0 = step_moments(cell)
    n1, m1, v1 = step_moments(counterfactual)
    out = {"al_cell": None if n0 == 0 else 1 + m0, "al_counterfactual": None if n1 == 0 else 1 + m1,
           "steps_cell": n0, "steps_counterfactual": n1, "z": None, "rose": False}
    if n0 < 2 or n1 < 2:
        return out
    se = math.sqrt(v0 / n0 + v1 / n1)
    z = (m1 - m0) / se if se > 0 else (math.inf if m1 > m0 else -math.inf if m1 < m0 else 0.0)
    out.update(z=z, rose=bool(z >= Z_RISE and m1 - m0 >= MIN_RISE))
    return out


def rates_low(rates: list[float] | None, al: float) -> bool:
    """Every position's rate below LOW_RATE. Without per-position rates the first is bounded by AL - 1 (the rates
    sum to it and none is negative), so an AL below 1 + LOW_RATE says it too."""
    if rates:
        return all(r < LOW_RATE for r in rates)
    return al - 1 < LOW_RATE


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def rise_text(what: str, figures: dict, prompts: int) -> str:
    """`target_layer_ids shifted by +1: AL 1.04 -> 2.65 (z 8.1), 4 prompts`."""
    z = figures.get("z")
    zt = "" if z is None else f", z {z:.1f}" if math.isfinite(z) else f", z {'+' if z > 0 else '-'}inf"
    return (f"{what}: AL {_fmt(figures.get('al_cell'))} -> {_fmt(figures.get('al_counterfactual'))}"
            f"{zt}, {prompts} prompts")


def decide(causes: list[dict], rates: list[float] | None, al: float) -> dict:
    """The diagnosis of one low row from its causes (dicts with `cause`, `status`, `evidence`, in CAUSES order,
    undertrained left out): the first confirmed cause; else the first suspected one (a vocabulary mismatch
    seen in the shapes, for which no counterfactual exists); else `undertrained` when every position's rate is
    low and no counterfactual raised acceptance; else `unexplained`. Returns the undertrained cause's entry too
    (appended to the causes) and the diagnosis with its evidence."""
    causes = [c for c in causes if c["cause"] != "undertrained"]
    confirmed = next((c for c in causes if c["status"] == CONFIRMED), None)
    suspected = next((c for c in causes if c["status"] == SUSPECTED), None)
    tried = [t for c in causes if c["status"] == RULED_OUT for t in c.get("counterfactuals") or []]
    shown = "; ".join(f"{x:.2f}" for x in rates) if rates else f"none measured, AL {al:.2f}"
    if confirmed or suspected:
        under = {"cause": "undertrained", "status": NOT_TESTED,
                 "evidence": f"not decided: {(confirmed or suspected)['cause']} explains the low acceptance first"}
    elif rates_low(rates, al):
        under = {"cause": "undertrained", "status": CONFIRMED,
                 "evidence": f"every position's rate is below {LOW_RATE} ({shown}) and no counterfactual raised "
                             f"acceptance ({len(tried)} counterfactual cell(s))"}
    else:
        under = {"cause": "undertrained", "status": RULED_OUT,
                 "evidence": f"not every position's rate is below {LOW_RATE} ({shown})"}
    under.update(label=LABELS["undertrained"], counterfactuals=[])
    causes = [*causes, under]
    first = confirmed or suspected or (under if under["status"] == CONFIRMED else None)
    if first is None:
        return {"causes": causes, "diagnosis": "unexplained",
                "evidence": f"no counterfactual raised acceptance ({len(tried)} counterfactual cell(s)) and "
                            f"{under['evidence']}"}
    return {"causes": causes, "diagnosis": first["cause"], "evidence": first["evidence"]}


def ceiling_text(row: dict) -> str:
    """What the system's curve says an undertrained drafter would need, from a summary row's ceiling columns;
    without a curve, how to get one."""
    be, x15 = value(row, "break_even_al"), value(row, "al_for_1_5x")
    if be is None and x15 is None:
        return ("no set-acceptance curve at this K and concurrency: sweep.set_acceptance=[null,1,2,4,8] gives the "
                "acceptance length this system needs")
    parts = [f"break-even at AL {be:.2f}" if be is not None else None,
             f"1.5x at AL {x15:.2f}" if x15 is not None else None]
    return "the system's curve: " + ", ".join(p for p in parts if p)

"""The system's ceiling: speedup against acceptance length, measured by cells whose acceptance is set
(sweep.set_acceptance: vLLM's synthetic sampler accepts drafts at a set rate while drafting and verifying
cost what they cost), and where the measured drafter sits on that curve.

Pure: typed summary rows in (summary.rows, table.read), the same rows with the ceiling's columns out. A curve is the set-acceptance rows of
one (pair, backend, K, dataset, thinking, concurrency), each a point (measured mean acceptance length, paired
e2e speedup with its CI). Lengths between points are read off the straight line between them; nothing is
extrapolated past the measured range.
"""
from __future__ import annotations

from specsweep.core.table import blank, value

TARGETS = {"break_even_al": 1.0, "al_for_1_5x": 1.5, "al_for_2x": 2.0}
COLUMNS = ["ceiling_points", *TARGETS, "break_even_al_low", "break_even_al_high", "ceiling_speedup_at_al",
           "ceiling_na"]
_GROUP = ("pair", "backend", "num_speculative_tokens", "dataset", "thinking", "concurrency")


def _point(row: dict) -> tuple[float, float, float | None, float | None] | None:
    al, speedup = value(row, "mean_acceptance_length"), value(row, "speedup_e2e_geomean")
    if al is None or speedup is None:
        return None
    return al, speedup, value(row, "speedup_e2e_ci_low"), value(row, "speedup_e2e_ci_high")


def length_for(points: list[tuple[float, float]], target: float) -> float | None:
    """The smallest acceptance length at which the curve (AL, speedup), sorted by AL, first reaches `target`:
    a point's own length, or the line between two points; None where no measured point is below it and one
    above (the range does not say)."""
    points = sorted(points)
    if len(points) < 2 or points[0][1] >= target:
        return None
    for (a0, s0), (a1, s1) in zip(points, points[1:]):
        if s0 < target <= s1:
            return a0 + (target - s0) * (a1 - a0) / (s1 - s0)
    return None


def speedup_at(points: list[tuple[float, float]], al: float) -> float | None:
    """The curve's speedup at length `al`, on the line between the two points around it; None outside."""
    points = sorted(points)
    for (a0, s0), (a1, s1) in zip(points, points[1:]):
        if a0 <= al <= a1:
            return s0 if a1 == a0 else s0 + (al - a0) * (s1 - s0) / (a1 - a0)
    return None


def curve_key(row: dict) -> tuple:
    return tuple(str(row.get(k)) for k in _GROUP)


def curves(rows: list[dict]) -> dict[tuple, list[tuple[float, float, float | None, float | None]]]:
    """(pair, backend, K, dataset, thinking, concurrency) -> the curve's points, from valid set-acceptance rows."""
    out: dict[tuple, list] = {}
    for row in rows:
        if row.get("method") == "none" or blank(row.get("set_acceptance")) or row.get("valid") is not True:
            continue
        point = _point(row)
        if point:
            out.setdefault(curve_key(row), []).append(point)
    return {key: sorted(points) for key, points in out.items()}


def _reason(points: list, row: dict) -> str | None:
    if len(points) < 2:
        return (f"{len(points)} set-acceptance point(s) at this K and concurrency: a curve needs at least two "
                "(sweep.set_acceptance with two or more lengths)")
    low, high = points[0], points[-1]
    notes = []
    if low[1] >= 1:
        notes.append(f"every point is above 1x (the lowest, AL {low[0]:.3g}, gives {low[1]:.3g}x): add a shorter "
                     "set length for the break-even")
    if high[1] < 2:
        notes.append(f"no point reaches 2x (the highest, AL {high[0]:.3g}, gives {high[1]:.3g}x)")
    al = value(row, "mean_acceptance_length")
    if blank(row.get("set_acceptance")) and al is not None and not low[0] <= al <= high[0]:
        notes.append(f"the drafter's AL {al:.3g} is outside the curve's {low[0]:.3g}-{high[0]:.3g}")
    return "; ".join(notes) or None


def annotate(rows: list[dict]) -> list[dict]:
    """Each speculative row of a (pair, backend, K, dataset, thinking, concurrency) that has a curve gets the
    curve's lengths for 1x, 1.5x and 2x (with the break-even's range from the CI bounds), and a real-acceptance
    row gets the curve's speedup at its own measured length. Other rows get the columns empty."""
    by_key = curves(rows)
    for row in rows:
        row.update(dict.fromkeys(COLUMNS))
        # a K schedule's cell (sweep.k_schedule) runs several Ks: no one K's curve is its own
        points = by_key.get(curve_key(row)) if row.get("method") != "none" and blank(row.get("k_schedule")) else None
        if points is None:
            continue
        line = [(a, s) for a, s, _, _ in points]
        row["ceiling_points"] = [[round(a, 4), round(s, 4), lo, hi] for a, s, lo, hi in points]
        for column, target in TARGETS.items():
            row[column] = length_for(line, target)
        if all(lo is not None and hi is not None for _, _, lo, hi in points):
            # the CI's upper bounds reach 1x first (the shortest break-even the data allow), the lower ones last
            row["break_even_al_low"] = length_for([(a, hi) for a, _, _, hi in points], 1.0)
            row["break_even_al_high"] = length_for([(a, lo) for a, _, lo, _ in points], 1.0)
        al = value(row, "mean_acceptance_length")
        if blank(row.get("set_acceptance")) and al is not None:
            row["ceiling_speedup_at_al"] = speedup_at(line, al)
        row["ceiling_na"] = _reason(points, row)
    return rows

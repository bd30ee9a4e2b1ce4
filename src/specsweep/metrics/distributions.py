"""A figure's spread over values: mean and tail percentiles (`dist`), or p10/p50/p90 (`quantiles`)."""
from __future__ import annotations

import numpy as np


def dist(values: list[float]) -> dict:
    """mean, median, p90 and p99, in the values' own unit."""
    if not values:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99))}


def quantiles(values: list[float]) -> dict:
    """p10, p50 and p90: the spread of a per-request figure."""
    if not values:
        return {"p10": None, "p50": None, "p90": None}
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90)}

"""What the maintained benchmarks share: the A B B A order, the interval of a paired ratio, one record shape, a
scratch folder, and the map of a simulation's chunks over worker processes.

A script in bench/ imports it as a module of the `bench` package, `from bench import harness`: the runner
(`python -m bench run NAME`, bench/__main__.py) puts the repository's root, src/ and tests/ on the path once.
"""
from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

from specsweep.core import results

REPO = Path(__file__).resolve().parents[1]


def scratch(prefix: str, keep: bool) -> Path:
    """A new folder under the system's temp folder for a run's servers and files; unless `keep` (a --smoke run's),
    removed when the process exits, its servers stopped by then (a SIGTERM handler's sys.exit unwinds first)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if not keep:
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def parallel_map(fn, jobs: list, workers: int) -> list:
    """fn over jobs, in their order: in `workers` processes (fn and each job picklable), or here when workers is 1."""
    if workers <= 1:
        return [fn(j) for j in jobs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs))


def abba(arms: tuple[str, str], rounds: int) -> list[str]:
    """Two arms alternating A B B A A B ..., `rounds` of each, so a drift of the host falls on both alike."""
    return [arms[(i + i // 2) % 2] for i in range(2 * rounds)]


def interval(log_ratios: list[float], rng: np.random.Generator | None = None) -> dict:
    """The geometric-mean ratio over paired log ratios with its 95% t interval (scipy), and with `rng` a bootstrap
    (percentile) one too. One pair gives the ratio and no interval (None)."""
    a = np.asarray(log_ratios, dtype=float)
    mean = float(a.mean())
    out = {"ratio": math.exp(mean), "n": len(a), "t95": None}
    if len(a) > 1:
        sem = float(stats.sem(a))
        lo, hi = stats.t.interval(0.95, len(a) - 1, loc=mean, scale=sem) if sem > 0 else (mean, mean)
        out |= {"t95": [math.exp(lo), math.exp(hi)], "sd_log_ratio": float(a.std(ddof=1))}
        if rng is not None:
            blo, bhi = np.percentile(rng.choice(a, size=(20000, len(a))).mean(axis=1), [2.5, 97.5])
            out["bootstrap95"] = [math.exp(blo), math.exp(bhi)]
    return out


def ratio_interval(a: list[float], b: list[float], rng: np.random.Generator | None = None) -> dict:
    """`interval` of a / b, paired in order (1st with 1st, ...)."""
    return interval([math.log(x / y) for x, y in zip(a, b, strict=True)], rng)


def verdict(ci: dict, slow_side: str, goal: float = 0.98) -> str:
    """Against "no slowdown above 2%": `slow_side` "low" when a ratio below 1 is a slowdown (tok/s), "high" when
    above 1 is (CPU per token)."""
    if ci["t95"] is None:
        return "unresolved: one pair gives no interval"
    bound = ci["t95"][0] if slow_side == "low" else 1 / ci["t95"][1]
    other = ci["t95"][1] if slow_side == "low" else 1 / ci["t95"][0]
    if bound >= goal:
        return f"met: any slowdown is below {1 - goal:.0%} (95% t interval)"
    if other < goal:
        return f"missed: a slowdown above {1 - goal:.0%} is resolved"
    return f"unresolved: the interval is wider than the {1 - goal:.0%} goal, so the noise cannot rule it out"


# the record shape is specsweep's (core/results.run_record), which the kept-study readers in read/ write too
commit, host = results.commit, results.host


def record(path: str | Path | None, *, rounds: int, ratio: dict | None, **figures) -> dict:
    """The one record shape: host, commit, argv, rounds, the headline ratio with its CI (`interval`'s dict), then
    the script's own figures. Written atomically to `path` (None, as under --smoke: nothing written)."""
    return results.run_record(path, rounds=rounds, ratio=ratio, **figures)

"""What the maintained benchmarks share: the A B B A order, the interval of a paired ratio, one record shape, a
scratch folder, a kept campaign read from its pack, and the map of a simulation's chunks over worker processes.

A script in bench/ imports it as a module of the `bench` package, `from bench import harness`: the runner
(`python -m bench run NAME`, bench/__main__.py) puts the repository's root, src/ and tests/ on the path once.
"""
from __future__ import annotations

import atexit
import contextlib
import math
import shutil
import tarfile
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


PACK = "studies.tar.gz"
"""A kept campaign's studies packed in one file beside its loose ones (campaign.log, its script, its JSON): each kept
file costs the checkout tar a header or three (tests/test_code_shape.py), and a campaign keeps thousands."""


@contextlib.contextmanager
def unpacked(folder: Path):
    """A campaign's folder as its readers expect it: the folder itself, or, where its studies are packed (PACK), a
    temporary folder of the same name holding the pack's contents and links to the loose files, removed after."""
    folder = Path(folder)
    if not (folder / PACK).is_file():
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="campaign-") as tmp:
        out = Path(tmp) / folder.name
        out.mkdir()
        with tarfile.open(folder / PACK) as tar:
            tar.extractall(out, filter="data")
        for f in folder.iterdir():
            if f.name != PACK and not (out / f.name).exists():
                (out / f.name).symlink_to(f.resolve())
        yield out


def pack(folder: Path, keep: list[str]) -> Path:
    """Pack a kept campaign's studies: every file and folder of `folder` but the `keep` names into folder/PACK (in
    name order, times and owners zeroed, so one campaign always packs alike), checked against the files, which are
    then removed. Returns the pack."""
    import gzip
    import io

    folder = Path(folder)
    if (folder / PACK).exists():
        raise SystemExit(f"pack: {folder / PACK} exists already")
    tops = sorted(p for p in folder.iterdir() if p.name not in keep)
    if not tops:
        raise SystemExit(f"pack: nothing in {folder} to pack beside {keep}")
    paths = [q for t in tops for q in ([t, *sorted(t.rglob("*"))] if t.is_dir() else [t])]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for q in paths:
            info = tar.gettarinfo(q, arcname=str(q.relative_to(folder)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if info.isdir() else 0o644
            with open(q, "rb") if info.isfile() else contextlib.nullcontext() as f:
                tar.addfile(info, f)
    tmp = folder / (PACK + ".part")
    with open(tmp, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    with tarfile.open(tmp) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    if files != {str(q.relative_to(folder)): q.read_bytes() for q in paths if q.is_file()}:
        tmp.unlink()
        raise SystemExit(f"pack: {tmp} does not hold {folder}'s files as they are: nothing removed")
    tmp.rename(folder / PACK)
    for t in tops:
        if t.is_dir():
            shutil.rmtree(t)
        else:
            t.unlink()
    return folder / PACK


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

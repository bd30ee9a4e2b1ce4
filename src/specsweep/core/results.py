"""Result files: atomic writes (temp file + rename), log tails, and the per-study summary table."""
from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from pathlib import Path

import yaml

from specsweep.core import layout
from specsweep.core.paths import REPO


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write through a temp file and a rename, so a reader sees the old file or the new one, never a part. The file
    gets the mode a plain open would give it (0666 less the umask), not mkstemp's 0600: a study's results are for
    whoever may read its directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def atomic_write_yaml(path: str | Path, obj) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=True))


def atomic_write_jsonl(path: str | Path, rows) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows))


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSON-lines file; where it is absent and `<path>.gz` is there (an archive keeps requests
    gzipped: bench/archive/), that one."""
    path = Path(path)
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        import gzip

        with gzip.open(path.with_name(path.name + ".gz"), "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def launches(log_dir: str | Path) -> list[dict]:
    """A server cell's launch records (its logs/server.json, one entry per launch), oldest first; a record written
    before server.json was a list (one dict, the last launch) reads as a list of one."""
    try:
        data = json.loads((Path(log_dir) / layout.SERVER_RECORD).read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else [data]


def tail(path: str | Path, n: int = 40) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=n))
    except OSError:
        return ""


def commit() -> str | None:
    """The checkout's commit, with `+dirty` when it has uncommitted changes; None outside a git checkout."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def host() -> dict:
    import platform

    return {"name": platform.node(), "cores": len(os.sched_getaffinity(0)), "load_1min": os.getloadavg()[0]}


def run_record(path: str | Path | None, *, rounds: int, ratio: dict | None, **figures) -> dict:
    """A benchmark's or a kept-study reader's record: host, commit, argv, rounds, the headline ratio with its CI,
    then its own figures. Written atomically to `path` (None: nothing written)."""
    import sys

    rec = {"host": host(), "commit": commit(), "argv": sys.argv, "rounds": rounds, "ratio": ratio, **figures}
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, rec)
    return rec

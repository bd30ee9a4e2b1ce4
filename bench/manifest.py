"""bench/manifest.toml read: its entries, a group of them, and one run of an entry (the runner's and the smoke
test's), with the path set once here."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "bench" / "manifest.toml"
TIERS = ("fast", "server", "dag", "gpu", "manual")
FIELDS = {"name", "script", "measures", "host", "minutes", "goal", "smoke", "page"}
DEFAULTS = {"args": [], "smoke_args": [], "smoke_expect": [], "smoke_timeout": 120, "solo": False}


def load(path: Path = MANIFEST) -> list[dict]:
    """The entries, each with every field (the optional ones defaulted); a missing field or an unknown tier refused."""
    entries = tomllib.loads(path.read_text())["bench"]
    out = []
    for e in entries:
        missing = FIELDS - set(e)
        if missing or e["smoke"] not in TIERS or set(e) - FIELDS - set(DEFAULTS):
            raise ValueError(f"{path}: entry {e.get('name')!r}: missing {sorted(missing)}, smoke {e.get('smoke')!r} "
                             f"(one of {TIERS}), unknown {sorted(set(e) - FIELDS - set(DEFAULTS))}")
        out.append({**DEFAULTS, **e})
    return out


def entry(entries: list[dict], name: str) -> dict:
    found = [e for e in entries if e["name"] == name]
    if not found:
        raise SystemExit(f"bench: no entry {name!r} in {MANIFEST.relative_to(REPO)}: "
                         + " ".join(e["name"] for e in entries))
    return found[0]


def group(entries: list[dict], name: str) -> list[dict]:
    """A smoke tier's entries, or a host's (`cpu`: every entry whose host names cpu)."""
    if name in TIERS:
        return [e for e in entries if e["smoke"] == name]
    return [e for e in entries if name in [h.strip() for h in e["host"].split(",")]]


def env() -> dict:
    """This environment with the repository's root, src/ and tests/ first on PYTHONPATH: the path, set once."""
    path = [str(REPO), str(REPO / "src"), str(REPO / "tests")]
    rest = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path + ([rest] if rest else []))}


def placeholders(tmp: Path | None = None, tiny_pair: Path | None = None) -> dict:
    """What {tmp}, {random_pair} and {tiny_pair} in smoke_args stand for, made on use (a {tmp} made here is removed
    when this process exits, after its runs)."""

    class Lazy(dict):
        def __missing__(self, key):
            if key == "tmp":
                from bench import harness

                self[key] = str(tmp or harness.scratch("bench-smoke-", keep=False))
            elif key == "random_pair":
                sys.path.insert(0, str(REPO / "tests"))
                from helpers import make_random_pair

                self[key] = str(make_random_pair(Path(self["tmp"]) / "random"))
            elif key == "tiny_pair":
                pair = tiny_pair or Path(os.environ.get("SPECSWEEP_BENCH_TINY", REPO / "results" / "models" / "tiny"))
                if not (pair / "drafter").exists():
                    raise SystemExit(f"bench: {pair} holds no trained tiny pair: build it (snakemake "
                                     "results/models/tiny/drafter/config.json) or set SPECSWEEP_BENCH_TINY")
                self[key] = str(pair)
            else:
                raise KeyError(key)
            return self[key]
    return Lazy()


def argv(e: dict, smoke: bool = False, extra: list[str] = (), values: dict | None = None) -> list[str]:
    args = [*e["args"], *(["--smoke", *e["smoke_args"]] if smoke else []), *extra]
    values = placeholders() if values is None else values
    return [sys.executable, "-m", f"bench.{e['script']}", *(a.format_map(values) for a in args)]


def run(e: dict, smoke: bool = False, extra: list[str] = (), values: dict | None = None,
        echo: bool = False) -> tuple[bool, subprocess.CompletedProcess]:
    """One run from the repository's root: (whether it passed, the process); a smoke passes when it exits 0 and
    its output holds every smoke_expect string."""
    if not smoke:          # a full run: its output as it comes (a GPU-host step tees it)
        out = subprocess.run(argv(e, smoke, extra, values), cwd=REPO, env=env())
        return out.returncode == 0, out
    out = subprocess.run(argv(e, smoke, extra, values), cwd=REPO, env=env(), capture_output=True, text=True,
                         timeout=e["smoke_timeout"])
    if echo:
        sys.stdout.write(out.stdout)
        sys.stderr.write(out.stderr[-3000:] if out.returncode else "")
    lacking = [s for s in e["smoke_expect"] if s not in out.stdout]
    if echo and lacking and out.returncode == 0:
        print(f"bench {e['name']} --smoke: its output lacks {lacking}")
    return out.returncode == 0 and not lacking, out

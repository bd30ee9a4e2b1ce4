"""Resampled A/A studies on recorded requests through the looks' own rules (issue 54's Done-when): how often does a
study of no true difference, with blocks made of real repeats, end `faster` or `slower`?

Where bench/aa_looks.py draws a study's blocks from a law (normal, and stress cases), this one makes them from
recorded baseline repeats. A pool is one configuration's repeats (one server and model, one bench setting: the
same prompts, concurrency and max_tokens), each repeat the request rows of one baseline bench cell (a server cell
`base-*`, not an A/A cell `base-aa-*`; finished, with metrics.json, and valid). A simulated study picks a pool at
random (each pool of its host class equally likely), and for each of its --max-repeats blocks draws two distinct
repeats of that pool at random as cell and reference: its block is sequential.block_log_ratios' figure of the two
(the mean log(ref / cell) e2e latency over the (prompt index, turn)s both finished; both ran the same dataset's
prompts). Cell and reference are exchangeable, so there is no true difference, and each block keeps the recorded
spread between repeats (and, where a pool spans launches, between launches). The study then runs through the rule
as bench/aa_looks.py's `study` takes it: `planned` (spending.comparison at the plan of --max-repeats, 6, 10, 14,
20 for 20, calibrated boundaries) or `every` (sequential.comparison, the confidence sequence).

Sources (folders searched for `**/base-*/*/requests.jsonl[.gz]`, or a file in tests/data/aa_requests.json's form):
--cpu and --h200, one host class each. How repeats are pooled (--cpu-pools, --h200-pools): `config` pools every
repeat of one configuration, whichever study folder it lies in (the CPU default: 24 launches of the default
study); `study` keeps one study folder's repeats apart (the H200 default: each study there is one configuration
on one day). Each pool's blocks are computed once, for every ordered pair of its repeats. A pool needs 2 repeats;
one of few gives a block law of few values (2 repeats: +d and -d only), where a run of equal blocks, no spread,
comes often, as recorded blocks never do: --min-repeats leaves such pools out (a stress case).

Host classes: `cpu`, `h200`, and `all` (both classes' studies together: half each, a class equally likely and then
a pool within it). Seeds: --seed gives one numpy SeedSequence child per host class (cpu first, then h200, whichever
are given) and each of those one child per chunk of 10,000 studies: a run is the same on any machine with the same
numpy and the same pools. Both rules read the same studies. The calibration used seeds 54003-54040; use others.

    nice -n 10 python -m bench run aa_resample -- --cpu /tmp/avf --studies 50000 --out /tmp/aa-resample.json
    python -m bench run aa_resample --smoke      # its own pools, from tests/data/aa_requests.json: 500 studies a class
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from bench import harness
from bench.aa_looks import CHUNK, design_arg, study, tally, wilson
from specsweep.core import layout
from specsweep.read.study import Cell
from specsweep.verdicts import sequential, spending

HOSTS = ("cpu", "h200")
POOLING = ("config", "study")
AA_REQUESTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "aa_requests.json"
TALLIES = ("studies", "decided", "equivalent", "unresolved", "stops", "ever")


@dataclass
class Pool:
    """One configuration's recorded repeats: blocks[i, j] is the block of repeat i as cell against repeat j as
    reference (sequential.block_log_ratios), NaN on the diagonal."""
    host: str
    label: str
    blocks: np.ndarray
    prompts: int          # distinct prompt indices the repeats finished
    requests: int         # distinct (prompt index, turn)s the repeats finished
    studies: list[str]    # the study folders (or launches) its repeats came from

    @property
    def repeats(self) -> int:
        return len(self.blocks)

    def describe(self) -> dict:
        return {"host": self.host, "pool": self.label, "repeats": self.repeats, "prompts": self.prompts,
                "requests": self.requests, "studies": len(self.studies), "from": self.studies}


def pool(host: str, label: str, runs: list[list[dict]], studies: list[str]) -> Pool:
    """A pool of `runs` (each a repeat's request rows), its blocks for every ordered pair of distinct repeats."""
    n = len(runs)
    blocks = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(n):
            if i != j:
                b = sequential.block_log_ratios([runs[i]], [runs[j]])
                if not b:
                    raise SystemExit(f"aa_resample: pool {label}: repeats {i} and {j} share no finished request")
                blocks[i, j] = b[0]
    keys = {(r["index"], r["turn"]) for rows in runs for r in rows if sequential.stats.request_latency(r, "e2e")}
    return Pool(host, label, blocks, len({k[0] for k in keys}), len(keys), sorted(set(studies)))


def _config(cell: Cell) -> tuple[str, str]:
    """(key, label) of a cell's configuration: its bench setting but the repeat, and its server spec with the
    model named by its last two path parts (a launch's own folder left out) and no environment."""
    bench = {k: v for k, v in cell.bench.items() if k != "repeat"}
    server = json.loads(json.dumps(cell.server_spec, default=str))
    for k in ("target", "tokenizer", "drafter"):
        if server.get(k):
            server[k] = "/".join(Path(server[k]).parts[-2:])
    server.get("server", {}).pop("env", None)
    ds = bench["dataset"]
    label = (f"{server.get('target')} {server.get('server', {}).get('device')} c{bench['concurrency']} "
             f"{ds['name']}/{ds.get('num_prompts')} max_tokens {bench.get('max_tokens')}"
             + (" ignore_eos" if bench.get("ignore_eos") else ""))
    return json.dumps([bench, server], sort_keys=True, default=str), label


def baseline_cells(folder: Path) -> tuple[list[Cell], list[str]]:
    """The baseline bench cells with requests under `folder` (module doc), and those left out, with why."""
    cells, skipped, seen = [], [], set()
    for req in sorted(folder.glob("**/base-*/*/requests.jsonl*")):
        d = req.parent
        if req.name not in (layout.REQUESTS, layout.REQUESTS_KEPT) or d in seen or d.parent.name.startswith("base-aa-"):
            continue
        seen.add(d)
        if not Cell.finished(d):
            skipped.append(f"{d}: no metrics.json")
            continue
        cell = Cell.load(d)
        if not cell.valid:
            skipped.append(f"{d}: marked invalid")
            continue
        cells.append(cell)
    return cells, skipped


def folder_pools(host: str, folders: list[Path], pooling: str, least: int = 2) -> tuple[list[Pool], list[str]]:
    """The pools of the baseline repeats under `folders`, by configuration (and study folder, pooling `study`), of
    `least` repeats or more."""
    groups, skipped = defaultdict(list), []
    for folder in folders:
        cells, left = baseline_cells(folder)
        skipped += left
        for cell in cells:
            key, label = _config(cell)
            study_dir = _rel(cell.path.parent.parent)
            if pooling == "study":
                key, label = (study_dir, cell.server_cell, key), f"{study_dir} {label}"
            groups[key].append((label, study_dir, cell))
    pools = []
    for members in groups.values():
        label = members[0][0]
        runs = [c.requests() for _, _, c in members]
        runs = [r for r in runs if any(sequential.stats.request_latency(x, "e2e") for x in r)]
        if len(runs) < max(2, least):
            skipped.append(f"{label}: {len(runs)} repeat(s) with finished requests, a pool needs {max(2, least)}")
            continue
        pools.append(pool(host, label, runs, [s for _, s, _ in members]))
    return pools, skipped


def json_pools(host: str, path: Path, least: int = 2) -> list[Pool]:
    """The pools of a file in tests/data/aa_requests.json's form: per configuration, each launch's repeats with
    each finished request's e2e latency by "index/turn"."""
    data = json.loads(path.read_text())
    pools = []
    for name, conf in data.items():
        if name == "source":
            continue
        runs, studies = [], []
        for launch, repeats in conf["launches"].items():
            for rep in repeats:
                runs.append([{"index": int(k.split("/")[0]), "turn": int(k.split("/")[1]), "ok": True, "e2e_s": v}
                             for k, v in rep["e2e_s"].items()])
                studies.append(launch)
        if len(runs) >= max(2, least):
            pools.append(pool(host, f"{path.name}:{name}", runs, studies))
    return pools


def load_pools(host: str, sources: list[Path], pooling: str, least: int = 2) -> tuple[list[Pool], list[str]]:
    pools, skipped = [], []
    folders = [s for s in sources if s.is_dir()]
    for s in sources:
        if not s.exists():
            raise SystemExit(f"aa_resample: {s} does not exist")
        if s.is_file():
            pools += json_pools(host, s, least)
    if folders:
        found, skipped = folder_pools(host, folders, pooling, least)
        pools += found
    return pools, skipped


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def write_cells(out: Path, conf: str, path: Path = AA_REQUESTS) -> Path:
    """A folder of bench cells made from one configuration of an aa_requests.json-form file (the smoke's, and the
    test's): per launch a study folder <out>/<launch>/base-target-x/<bench>/ with config.yaml, metrics.json (valid)
    and requests.jsonl."""
    data = json.loads(path.read_text())[conf]
    for launch, repeats in data["launches"].items():
        for r, rep in enumerate(repeats):
            d = out / launch / "base-target-x" / rep["bench"]
            d.mkdir(parents=True, exist_ok=True)
            bench = {"concurrency": 1, "dataset": {"name": "synthetic", "num_prompts": 16}, "max_tokens": 64,
                     "repeat": r}
            server = {"method": "none", "target": f"/{launch}/tiny/target", "server": {"device": "cuda"}}
            (d / layout.CONFIG).write_text(yaml.safe_dump({"bench_spec": bench, "server_spec": server}))
            (d / layout.METRICS).write_text(json.dumps({"valid": True}))
            rows = [{"index": int(k.split("/")[0]), "turn": int(k.split("/")[1]), "ok": True, "e2e_s": v}
                    for k, v in rep["e2e_s"].items()]
            (d / layout.REQUESTS).write_text("".join(json.dumps(x) + "\n" for x in rows))
    return out


def chunk(args: tuple) -> dict:
    """One chunk of a host class's studies: per pool, the tallies of how its studies ended."""
    seed, studies, rule, max_repeats, pools, design = args
    rng = np.random.Generator(np.random.PCG64(seed))
    which = rng.integers(0, len(pools), studies)
    u = rng.random((studies, max_repeats, 2))
    out = [dict.fromkeys(TALLIES, 0) for _ in pools]
    for s in range(studies):
        blocks = pools[which[s]]
        n = len(blocks)
        cell = (u[s, :, 0] * n).astype(int)
        ref = (cell + 1 + (u[s, :, 1] * (n - 1)).astype(int)) % n          # another repeat of the pool
        tally(out[which[s]], study(blocks[cell, ref], rule, max_repeats, None, spending.CALIBRATED, *design))
    return {"pools": out}


def summary(host: str, rule: str, tallies: list[dict], pools: list[Pool], seconds: float) -> dict:
    total = {k: sum(t[k] for t in tallies) for k in TALLIES}
    n, x = total["studies"], total["decided"]
    return {"host_class": host, "rule": rule, "studies": n, "false_verdicts": x / n,
            "false_verdicts_ci": wilson(x, n), "equivalent": total["equivalent"] / n,
            "unresolved": total["unresolved"] / n, "mean_stop_repeat": total["stops"] / n,
            "budget_excludes_0": total["ever"] / n, "pools_used": len([t for t in tallies if t["studies"]]),
            "per_pool": [{"pool": p.label, "repeats": p.repeats, "studies": t["studies"],
                          "false_verdicts": t["decided"] / t["studies"] if t["studies"] else None}
                         for p, t in zip(pools, tallies)],
            "seconds": round(seconds, 1)}


def run(pools_by_host: dict[str, list[Pool]], studies: int, seed: int, rule: str, max_repeats: int = 20,
        workers: int = 1, design: tuple[str, tuple[int, ...] | None] = (spending.SPENDING, None)) -> list[dict]:
    """Per host class given (and `all` where both are), the share of `studies` resampled A/A studies that end
    `faster` or `slower`, with its 95% Wilson interval, and how they ended."""
    seqs = dict(zip(HOSTS, np.random.SeedSequence(seed).spawn(len(HOSTS))))
    results, every = [], ([], [])
    for host in HOSTS:
        pools = pools_by_host.get(host)
        if not pools:
            continue
        mats = [p.blocks for p in pools]
        jobs = [(int(c.generate_state(1)[0]), min(CHUNK, studies - i * CHUNK), rule, max_repeats, mats, design)
                for i, c in enumerate(seqs[host].spawn(math.ceil(studies / CHUNK)))]
        start = time.monotonic()
        parts = harness.parallel_map(chunk, jobs, workers)
        tallies = [{k: sum(p["pools"][i][k] for p in parts) for k in TALLIES} for i in range(len(pools))]
        results.append(summary(host, rule, tallies, pools, time.monotonic() - start))
        every[0].extend(tallies)
        every[1].extend(pools)
    if len(results) == 2:
        results.append(summary("all", rule, every[0], every[1], sum(r["seconds"] for r in results)))
    return results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=Path, nargs="+", default=[], help="CPU folders (or aa_requests.json-form files)")
    ap.add_argument("--h200", type=Path, nargs="+", default=[], help="H200 folders (or aa_requests.json-form files)")
    ap.add_argument("--cpu-pools", choices=POOLING, default="config")
    ap.add_argument("--h200-pools", choices=POOLING, default="study")
    ap.add_argument("--min-repeats", type=int, default=2, help="leave out pools of fewer repeats (a stress case)")
    ap.add_argument("--studies", type=int, default=20_000, help="per host class")
    ap.add_argument("--seed", type=int, default=20261210)
    ap.add_argument("--rule", choices=("planned", "every", "both"), default="both")
    ap.add_argument("--max-repeats", type=int, default=20)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--design", type=design_arg, default=(spending.SPENDING, None),
                    help="planned looks of another design, SPENDING:LOOKS (bench/aa_looks.py's --design)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="500 studies a class, both rules, nothing written, on its "
                    "own sources: a CPU folder made from tests/data/aa_requests.json, and that file as H200")
    args = ap.parse_args(argv)
    if args.design[1]:
        args.max_repeats = args.design[1][-1]
    tmp = None
    if args.smoke:
        args.studies, args.rule, args.out, args.cpu_pools = 500, "both", None, "config"
        tmp = tempfile.TemporaryDirectory(prefix="aa-resample-")
        args.cpu, args.h200 = [write_cells(Path(tmp.name), "tiny-gpu-c1")], [AA_REQUESTS]
    if not args.cpu and not args.h200:
        ap.error("give --cpu and/or --h200 sources")
    pools_by_host, skipped = {}, []
    for host, sources, pooling in (("cpu", args.cpu, args.cpu_pools), ("h200", args.h200, args.h200_pools)):
        if sources:
            with contextlib.ExitStack() as stack:     # a packed campaign (harness.PACK) is read from a temporary copy
                sources = [stack.enter_context(harness.unpacked(s)) if s.is_dir() else s for s in sources]
                pools_by_host[host], left = load_pools(host, sources, pooling, args.min_repeats)
            skipped += left
            if not pools_by_host[host]:
                raise SystemExit(f"aa_resample: no pool of 2 repeats or more in the {host} sources")
    for host, pools in pools_by_host.items():
        for p in pools:
            print(f"{host:5s} {p.repeats:4d} repeats, {p.prompts:3d} prompts ({p.requests} requests), "
                  f"{len(p.studies):2d} studies: {p.label}")
    for s in skipped:
        print(f"left out: {s}")
    results = []
    for rule in ("planned", "every") if args.rule == "both" else (args.rule,):
        for r in run(pools_by_host, args.studies, args.seed, rule, args.max_repeats, args.workers, args.design):
            results.append(r)
            lo, hi = r["false_verdicts_ci"]
            print(f"{rule:8s} {r['host_class']:5s} {r['studies']} studies, {r['pools_used']} pools: faster/slower "
                  f"{100 * r['false_verdicts']:.3f}% [{100 * lo:.3f}, {100 * hi:.3f}], equivalent "
                  f"{100 * r['equivalent']:.1f}%, unresolved {100 * r['unresolved']:.1f}%, mean stop "
                  f"{r['mean_stop_repeat']:.2f}, {r['seconds']} s", flush=True)
    doc = {"command": "python -m bench.aa_resample " + shlex.join(sys.argv[1:] if argv is None else argv), "seed": args.seed, "studies_per_host": args.studies,
           "max_repeats": args.max_repeats, "plan": list(args.design[1] or spending.plan(args.max_repeats)),
           "spending": args.design[0],
           "boundaries": spending.CALIBRATED, "pooling": {"cpu": args.cpu_pools, "h200": args.h200_pools},
           "min_repeats": args.min_repeats,
           "sources": {"cpu": [_rel(p) for p in args.cpu], "h200": [_rel(p) for p in args.h200]},
           "pools": [p.describe() for ps in pools_by_host.values() for p in ps], "left_out": skipped,
           "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    else:
        print(json.dumps({"results": [{k: v for k, v in r.items() if k != "per_pool"} for r in results]}, indent=1))
        print("nothing written")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()

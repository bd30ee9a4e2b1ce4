"""Replay recorded `repeats: auto` studies through each stopping rule: what would each have decided, and when?

Reads kept default studies (baseline, K=3, K=7, optionally the A/A baseline; one results_dir each) and takes each
comparison's repeat blocks (sequential.block_log_ratios over the first --max-repeats repeats that finished valid:
K=3 and K=7 against the baseline, K=7 against K=3, the A/A cell against the baseline). Then, block by block, as a
group's job would have looked:
- `sequence`: the confidence sequence after every repeat (sweep.looks=every, sequential.look);
- `planned`: the planned looks with O'Brien-Fleming-type spending (sweep.looks=planned, spending.look);
- `planned_pocock`: the same plan with Pocock-type spending (the alternative the default was chosen against);
- `naive`: an uncorrected 95% t interval after every repeat from 2 (invalid: for contrast only);
- `one_look`: the 95% t interval once, after all the blocks (a fixed design's read).
Per study and method: each comparison's verdict, interval and the repeat at which it was answered, and the
group's repeats (the first look at which every comparison but the A/A check is answered, else the budget). For
K=7 against K=3 also `first_one_look`: the first repeat at which a single one-look 95% t interval over the blocks
so far would exclude 1, a lower bound on the repeats any valid rule needs at that spread. A replay of recorded
blocks, not a live run. A library module (`study_blocks`, `replay`), and a command:

    python -m specsweep.read.replay_looks --out bench/archive/cpu/auto-repeats/replay_looks.json /tmp/vw/{a1,a2,b1,b2}
    python -m specsweep.read.replay_looks --smoke      # seeded normal blocks, nothing written
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from specsweep.core import layout
from specsweep.core.results import read_json, read_jsonl, run_record
from specsweep.verdicts import sequential, spending, stats

ROLES = {"base-aa-": "A/A", "base-": "base", "tiny-dflash-k3-": "K=3", "tiny-dflash-k7-": "K=7"}
COMPARISONS = (("K=3", "base"), ("K=7", "base"), ("K=7", "K=3"), ("A/A", "base"))
CHECK = "A/A vs base"          # looked at, holds no group
ALPHA = sequential.ALPHA


def runs_of(server_dir: Path, max_repeats: int) -> list[list[dict]]:
    """A server cell's request rows per repeat 0 .. max_repeats - 1 ([] where a repeat has no valid record)."""
    out = []
    for r in range(max_repeats):
        bench = next(iter(server_dir.glob(f"*-r{r}-*/{layout.METRICS}")), None)
        ok = bench is not None and read_json(bench).get("valid")
        out.append(read_jsonl(bench.parent / layout.REQUESTS) if ok else [])
    return out


def study_blocks(results: Path, max_repeats: int) -> dict[str, list[float]]:
    """Each comparison's repeat blocks in one kept study (its one study folder under results)."""
    servers: dict[str, Path] = {}
    for d in sorted(p for p in results.glob("*/*") if p.is_dir()):
        role = next((r for prefix, r in ROLES.items() if d.name.startswith(prefix)), None)
        if role and role not in servers:
            servers[role] = d
    runs = {role: runs_of(d, max_repeats) for role, d in servers.items()}
    return {f"{a} vs {b}": sequential.block_log_ratios(runs[a], runs[b])
            for a, b in COMPARISONS if a in runs and b in runs}


def t_interval(blocks, level: float = 1 - ALPHA) -> tuple[float, float]:
    return spending.interval(blocks, 1 - level)


def one_record(low: float, high: float, blocks, answered_at) -> dict:
    ci = None if math.isinf(low) else [round(math.exp(low), 4), round(math.exp(high), 4)]
    v = stats.verdict(*(ci or (None, None)), at_budget=True) if ci else stats.UNRESOLVED
    return {"verdict": v, "ratio": round(math.exp(float(np.mean(blocks))), 4), "ci": ci, "answered_at": answered_at}


def every_repeat(blocks: dict[str, list[float]], max_repeats: int, interval_of) -> dict:
    """A rule that looks after every repeat with an interval of the blocks so far (`interval_of`); a comparison
    keeps its first answer."""
    out, group = {}, None
    for r in range(1, max_repeats + 1):
        for name, b in blocks.items():
            if name in out or len(b) < min(r, 2):
                continue
            low, high = interval_of(b[:r])
            if not math.isinf(low) and stats.verdict(math.exp(low), math.exp(high), at_budget=False):
                out[name] = one_record(low, high, b[:r], r)
        if group is None and all(n in out for n in blocks if n != CHECK):
            group = r
    for name, b in blocks.items():
        out.setdefault(name, one_record(*interval_of(b), b, None))
    return {"group_repeats": group or max_repeats, "comparisons": out}


def through(module, blocks: dict[str, list[float]], max_repeats: int, **kw) -> dict:
    """A group's job under `module`.look (sequential or spending): its looks until it stops, the A/A read there."""
    checks = {n: b for n, b in blocks.items() if n == CHECK}
    rest = {n: b for n, b in blocks.items() if n != CHECK}
    for r in range(1, max_repeats + 1):
        stop, records = module.look({n: b[:r] for n, b in rest.items()}, max_repeats, repeats=r, **kw)
        if stop:
            break
    records.update({n: module.comparison(b[:r], max_repeats, repeats=r, **kw) for n, b in checks.items()})
    return {"group_repeats": r, "comparisons": {
        n: {"verdict": rec["verdict"] or stats.UNRESOLVED, "ratio": rec["ratio"] and round(rec["ratio"], 4),
            "ci": rec["ci_low"] and [round(rec["ci_low"], 4), round(rec["ci_high"], 4)],
            "answered_at": rec["answered_at"], **({"nominal": rec["nominal"]} if "nominal" in rec else {})}
        for n, rec in records.items()}}


def first_one_look(blocks: list[float]) -> int | None:
    """The first repeat r at which a single 95% t interval over blocks[:r] excludes 1 (0 on the log scale)."""
    for r in range(2, len(blocks) + 1):
        low, high = t_interval(blocks[:r])
        if low > 0 or high < 0:
            return r
    return None


def replay(blocks: dict[str, list[float]], max_repeats: int) -> dict:
    k = blocks.get("K=7 vs K=3", [])
    return {"blocks": {n: len(b) for n, b in blocks.items()},
            "spread": {n: round(float(np.std(b, ddof=1)), 4) for n, b in blocks.items() if len(b) > 1},
            "sequence": through(sequential, blocks, max_repeats),
            "planned": through(spending, blocks, max_repeats),
            "planned_pocock": through(spending, blocks, max_repeats, spending=spending.POCOCK),
            "naive": every_repeat(blocks, max_repeats, t_interval),
            "one_look": {"group_repeats": max_repeats, "comparisons": {
                n: one_record(*t_interval(b), b, len(b)) for n, b in blocks.items()}},
            "k7_vs_k3_first_one_look": first_one_look(k)}


def smoke_blocks(seed: int = 46, n: int = 10) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    effects = {"K=3 vs base": 1.5, "K=7 vs base": 1.75, "K=7 vs K=3": 1.17, CHECK: 1.0}
    return {name: list(math.log(e) + 0.16 * rng.standard_normal(n)) for name, e in effects.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="*", type=Path, help="kept results dirs, one default study each")
    ap.add_argument("--max-repeats", type=int, default=10)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="seeded normal blocks, nothing written")
    args = ap.parse_args(argv)
    if args.smoke:
        studies = {"smoke": replay(smoke_blocks(), args.max_repeats)}
    else:
        blocks = {p.name: study_blocks(p, args.max_repeats) for p in args.results}
        empty = [str(p) for p in args.results if "K=7 vs K=3" not in blocks[p.name]]
        if not args.results or empty:
            sys.exit(f"replay_looks: {', '.join(empty) or 'no folder given'}: no kept default study (a results_dir "
                     "whose study folder holds the baseline, K=3 and K=7 server cells); name kept results dirs, "
                     "or --smoke")
        studies = {name: replay(b, args.max_repeats) for name, b in blocks.items()}
    methods = ("sequence", "planned", "planned_pocock", "naive")
    for name, s in studies.items():
        print(name, " ".join(f"{m}={s[m]['group_repeats']}:{s[m]['comparisons']['K=7 vs K=3']['verdict']}"
                             f"@{s[m]['comparisons']['K=7 vs K=3']['answered_at']}" for m in methods),
              f"one_look={s['one_look']['comparisons']['K=7 vs K=3']['verdict']}",
              f"first_one_look={s['k7_vs_k3_first_one_look']}")
    means = {m: float(np.mean([s[m]["group_repeats"] for s in studies.values()])) for m in methods}
    print("mean group repeats", json.dumps(means))
    if args.smoke or not args.out:
        print("nothing written")
        return
    run_record(args.out, rounds=len(studies), ratio=None, max_repeats=args.max_repeats,
                   plan=list(spending.plan(args.max_repeats)),
                   nominal={s: spending.nominal_levels(spending.plan(args.max_repeats), spending=s)
                            for s in (spending.OBF, spending.POCOCK)},
                   mean_group_repeats=means, studies=studies,
                   note="a replay of recorded repeat blocks, not a live run")
    print("wrote", args.out)


if __name__ == "__main__":
    main()

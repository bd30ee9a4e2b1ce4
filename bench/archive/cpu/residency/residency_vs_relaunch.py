# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/residency_vs_relaunch.py up to 58d1a74; run it from there.
"""The default study with co-resident groups against relaunch rounds, side by side in one run, from one trained pair.

Each pass runs the default study from scratch (a fresh results_dir; the tiny pair built beforehand and pointed at),
once with `sweep.residency=coresident sweep.rounds=1` (the default: each server starts once, the members take turns
repeat by repeat) and once with `sweep.residency=relaunch sweep.rounds=3` (the design before it: each server cell
launched three times, interleaved with its group's), the order alternating pass by pass (A B, B A, ...). Per run:
the wall of `snakemake --cores 2`, the serving wall (the group job's span, from .snakemake/metadata), the launches
(entries of every logs/server.json), and each speculative row's paired e2e speedup, its 95% CI, the CI's width in
log units, and the verdict, and the K comparison. The ratio of serving walls is coresident / relaunch, pass by pass.

    PYTHONPATH=src .venv/bin/python bench/residency_vs_relaunch.py --pair results/models/tiny --ks 2,5 \\
        --passes 1 [--extra-coresident 2] --out bench/archive/cpu/residency
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import time
from pathlib import Path

from dag_overhead import BIN, REPO, jobs_of

from specsweep.results import atomic_write_json, atomic_write_text, launches

MODES = {"coresident": ["sweep.residency=coresident", "sweep.rounds=1"],
         "relaunch": ["sweep.residency=relaunch", "sweep.rounds=3"]}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_study(mode: str, pair: Path, ks: str, root: Path) -> dict:
    work, results = root / "work", root / "results"
    overrides = [f"pair.target={pair / 'target'}", f"pair.drafter={pair / 'drafter'}", "pair.built_by_workflow=false",
                 f"sweep.num_speculative_tokens=[{ks}]", "tracking=off", *MODES[mode]]
    argv = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--config",
            f"results_dir={results}", "overrides=" + " ".join(overrides)]
    before, t0 = load(), time.time()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    t1 = time.time()
    (root / "snakemake.log").write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"{mode} study failed (rc {out.returncode}); log {root / 'snakemake.log'}")
    serve = [j for j in jobs_of(work, t0, t1) if j["rule"] == "serve_and_bench"]
    records = [r for f in (results / "default").glob("*/logs/server.json") for r in launches(f.parent)]
    with open(results / "default" / "summary.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["method"] != "none"]
    with open(results / "default" / "k_comparison.csv") as f:
        kcmp = list(csv.DictReader(f))
    cells = []
    for r in rows:
        lo, hi = float(r["speedup_e2e_ci_low"]), float(r["speedup_e2e_ci_high"])
        cells.append({"K": int(r["num_speculative_tokens"]), "speedup": float(r["speedup_e2e_geomean"]),
                      "ci": [lo, hi], "log_width": math.log(hi / lo), "verdict": r["verdict"],
                      "mean_acceptance_length": float(r["mean_acceptance_length"])})
    return {"mode": mode, "wall_s": round(t1 - t0, 1),
            "serving_s": round(max(j["end"] for j in serve) - min(j["start"] for j in serve), 1),
            "launches": len(records), "ready_s": [r.get("ready_s") for r in records],
            "load_before": before, "load_after": load(), "cells": sorted(cells, key=lambda c: c["K"]),
            "k_comparison": [{k: c[k] for k in ("k_a", "k_b", "statement") if k in c} for c in kcmp]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", required=True, type=Path)
    ap.add_argument("--ks", default="2,5")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--extra-coresident", type=int, default=0, help="more co-resident runs after the passes")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/residency-bench"))
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    pair = args.pair.resolve()
    runs = []
    order = []
    for p in range(args.passes):
        order += ["coresident", "relaunch"] if p % 2 == 0 else ["relaunch", "coresident"]
    order += ["coresident"] * args.extra_coresident
    for i, mode in enumerate(order):
        run = run_study(mode, pair, args.ks, args.scratch / f"{i}-{mode}")
        runs.append(run)
        print(json.dumps(run), flush=True)
    pairs = []
    for p in range(args.passes):
        a, b = runs[2 * p], runs[2 * p + 1]
        co, re = (a, b) if a["mode"] == "coresident" else (b, a)
        pairs.append({"serving_ratio": co["serving_s"] / re["serving_s"], "wall_ratio": co["wall_s"] / re["wall_s"]})
    atomic_write_json(args.out / "runs.json", {"ks": args.ks, "runs": runs, "pairs": pairs})
    lines = ["| run | mode | load before / after | wall s | serving s | launches | "
             + " | ".join(f"K={k} speedup [95% CI], log width" for k in args.ks.split(",")) + " | K comparison |",
             "|---|---|---|---|---|---|" + "---|" * len(args.ks.split(",")) + "---|"]
    for i, r in enumerate(runs):
        cells = " | ".join(f"{c['speedup']:.2f}x [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}] {c['verdict']}, {c['log_width']:.3f}"
                           for c in r["cells"])
        kc = "; ".join(c.get("statement", "") for c in r["k_comparison"])
        lines.append(f"| {i + 1} | {r['mode']} | {r['load_before']} / {r['load_after']} | {r['wall_s']} | "
                     f"{r['serving_s']} | {r['launches']} | {cells} | {kc} |")
    for p, x in enumerate(pairs):
        lines.append(f"\npass {p + 1}: serving wall coresident / relaunch {x['serving_ratio']:.2f}, "
                     f"whole wall {x['wall_ratio']:.2f}")
    atomic_write_text(args.out / "runs.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

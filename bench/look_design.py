"""Which planned-look design answers the default CPU study soonest (issue 54 item 2, "a budget that can answer")?
A replay of the recorded CPU blocks through the planned rule (spending.comparison) under each candidate design (a
spending function, its looks, a budget), with the wall each predicts against the fixed 10-repeat design.

Blocks: the auto-against-fixed campaign's 24 recorded default studies (bench/archive/cpu/auto-vs-fixed, or the
folders given: a1, b1, ... with campaign.log), each comparison's repeat blocks (replay_looks.study_blocks). A
replayed study picks a recorded study at random and draws each comparison's `budget` blocks with replacement from
that study's own (as bench/auto_vs_fixed.py's replay: a launch's offset stays with its blocks); each comparison is
answered at the first planned look where its verdict is decided (`faster`, `slower`, `equivalent`).

Wall model: a study's wall is a fixed overhead (servers, the DAG, the report) plus a cost per bench cell that runs
(a member's turn in one repeat), both from the archived live studies: the cost per cell is the in-study span
(first bench cell's start to the last one's end, metrics.json) summed over the studies over the cells they ran
(the span is proportional to the cells: an OLS fit has intercept about 0), the overhead the median of wall minus
span. A member runs until no open comparison needs it (looks.py), so a replayed study's cells are
max(a3, a7) + max(a3, a73) + max(a7, a73), a* the repeat each comparison stopped at (its answer, else the budget);
the fixed design runs 3 x 10. Its median and 95th percentile over the replayed studies, over the fixed design's
constant, predict the live ratios (noise-free: the load noise of live walls is left out). Beside it: a cost per
repeat (all three members every repeat up to the last answer: no member stops early), and the OLS line of live
wall on cells over the 24 studies (load confounds it; steeper).

    nice -n 10 python -m bench run look_design     # --workers 2 --out bench/archive/cpu/look-design/look_design.json
    python -m bench run look_design --smoke       # two designs, 300 studies, nothing written
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench import harness
from bench.aa_looks import design_arg
from bench.auto_vs_fixed import campaign_walls
from specsweep.read.replay_looks import study_blocks
from specsweep.verdicts import spending, stats

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "bench" / "archive" / "cpu" / "auto-vs-fixed"
NAMES = ("K=3 vs base", "K=7 vs base", "K=7 vs K=3")
ANSWERS = (stats.FASTER, stats.SLOWER, stats.EQUIVALENT)
FIXED_CELLS = 3 * 10
MAX_BLOCKS = 40
HSD = spending.HSD
# (spending function, looks): the O'Brien-Fleming plan `auto` uses, and the candidates of the design search
DESIGNS = [
    (spending.OBF, (6, 10, 14, 20)),
    (spending.POCOCK, (6, 10, 14, 20)),
    (f"{HSD}(-4)", (6, 10, 14, 20)),
    (f"{HSD}(-4)", (6, 11, 16, 22)),
    (f"{HSD}(-5)", (6, 10, 14, 18, 22)),
    (spending.OBF, (7, 12, 16, 23)),
    (f"{HSD}(-5)", (7, 12, 16, 23)),
    (f"{HSD}(-6)", (7, 12, 16, 23)),
    (f"{HSD}(-4)", (6, 12, 17, 23)),
    (f"{spending.POWER}(2)", (6, 24)),
    (f"{HSD}(-5)", (7, 12, 17, 24)),
    (f"{HSD}(-2)", (5, 10, 15, 20, 25)),
    (f"{HSD}(-4)", (6, 12, 19, 25)),
    (f"{spending.POWER}(2)", (6, 25)),
    (spending.OBF, (9, 15, 21, 30)),
    (f"{HSD}(-4)", (6, 12, 18, 24, 30)),
]


def wall_model(roots: list[Path]) -> dict:
    """The overhead and cost per bench cell (module doc), and the OLS line of wall on cells."""
    rows = []
    for root in roots:
        for name, wall in campaign_walls(root).items():
            ms = [json.loads(p.read_text()) for p in (root / name).glob("*/*/*/metrics.json")]
            span = max(m["finished_at"] for m in ms) - min(m["started_at"] for m in ms)
            rows.append((wall, len(ms), span))
    w, n, span = (np.asarray(x, float) for x in zip(*rows))
    per_cell = float(span.sum() / n.sum())
    slope, intercept = np.polyfit(n, w, 1)
    s_slope, s_intercept = np.polyfit(n, span, 1)
    return {"studies": len(rows), "overhead_s": float(np.median(w - span)), "per_cell_s": per_cell,
            "span_on_cells": {"intercept_s": float(s_intercept), "slope_s": float(s_slope)},
            "ols_wall_on_cells": {"intercept_s": float(intercept), "slope_s": float(slope)},
            "fixed_cells": FIXED_CELLS}


def replay(blocks: dict[str, dict[str, list[float]]], spending_fn: str, looks: tuple[int, ...], studies: int,
           seed: int) -> dict:
    """Each replayed study's stop per comparison (answered repeat, else the budget) under one design, through
    spending.comparison (module doc)."""
    budget = looks[-1]
    rng = np.random.Generator(np.random.PCG64(seed))
    names = sorted(blocks)
    stops = np.empty((studies, len(NAMES)), int)
    answered = np.zeros((studies, len(NAMES)), bool)
    for s in range(studies):
        rec_study = blocks[names[rng.integers(len(names))]]
        for j, name in enumerate(NAMES):
            rec = spending.comparison(list(rng.choice(rec_study[name], budget)), budget, spending=spending_fn,
                                      looks=looks)
            answered[s, j] = rec["verdict"] in ANSWERS and rec["answered_at"] is not None
            stops[s, j] = rec["answered_at"] if answered[s, j] else budget
    return {"stops": stops, "answered": answered}


def summarize(spending_fn: str, looks: tuple[int, ...], runs: list[dict], model: dict) -> dict:
    stops = np.concatenate([r["stops"] for r in runs])
    answered = np.concatenate([r["answered"] for r in runs])
    a3, a7, a73 = stops.T
    cells = np.maximum(a3, a7) + np.maximum(a3, a73) + np.maximum(a7, a73)
    last = stops.max(1)
    o, c = model["overhead_s"], model["per_cell_s"]
    ols = model["ols_wall_on_cells"]

    def ratio(x, o_, c_):
        return (o_ + c_ * x) / (o_ + c_ * FIXED_CELLS)
    per_seed = [float(r["answered"].all(1).mean()) for r in runs]
    return {"spending": spending_fn, "looks": list(looks), "budget": looks[-1],
            "boundaries": [round(b, 3) for b in spending.t_boundaries(tuple(looks), spending=spending_fn)],
            "studies": int(len(stops)), "all_three_answered": float(answered.all(1).mean()),
            "all_three_answered_per_seed": per_seed,
            "answered": {n: float(answered[:, j].mean()) for j, n in enumerate(NAMES)},
            "last_repeat": {"median": float(np.median(last)), "p95": float(np.percentile(last, 95)),
                            "mean": float(last.mean())},
            "cells": {"median": float(np.median(cells)), "p95": float(np.percentile(cells, 95))},
            "wall_ratio": {"median": ratio(np.median(cells), o, c), "p95": ratio(np.percentile(cells, 95), o, c)},
            "wall_ratio_ols": {"median": ratio(np.median(cells), ols["intercept_s"], ols["slope_s"]),
                               "p95": ratio(np.percentile(cells, 95), ols["intercept_s"], ols["slope_s"])},
            "wall_ratio_per_repeat": {"median": ratio(3 * np.median(last), o, c),
                                      "p95": ratio(3 * np.percentile(last, 95), o, c)}}


def one_design(job: tuple) -> dict:
    blocks, fn, looks, replays, seeds, model = job
    start = time.monotonic()
    row = summarize(fn, looks, [replay(blocks, fn, looks, replays, s) for s in seeds], model)
    return {**row, "seconds": round(time.monotonic() - start, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("campaign", nargs="*", type=Path, help="campaign folders (default: the archived one)")
    ap.add_argument("--replays", type=int, default=30_000, help="studies per seed")
    ap.add_argument("--seed", type=int, action="append", help="default 20261206 (auto_vs_fixed's) to 20261215")
    ap.add_argument("--design", type=design_arg, action="append", help="SPENDING:LOOKS, instead of the list")
    ap.add_argument("--workers", type=int, default=1, help="designs replayed in parallel")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="two designs, 300 studies, nothing written")
    args = ap.parse_args(argv)
    roots = args.campaign or [ARCHIVE]
    seeds = args.seed or list(range(20261206, 20261216))
    designs = args.design or DESIGNS
    if args.smoke:
        args.replays, seeds, designs, args.out, args.workers = 300, seeds[:1], DESIGNS[:2], None, 1
    with contextlib.ExitStack() as stack:     # a packed campaign (harness.PACK) is read from a temporary copy
        roots = [stack.enter_context(harness.unpacked(root)) for root in roots]
        blocks = {f"{root.name}/{n}": study_blocks(root / n, MAX_BLOCKS) for root in roots for n in campaign_walls(root)}
        model = wall_model(roots)
    print(json.dumps(model))
    jobs = [(blocks, fn, looks, args.replays, seeds, model) for fn, looks in designs]
    rows = harness.parallel_map(one_design, jobs, args.workers)
    for row in rows:
        fn, looks = row["spending"], row["looks"]
        print(f"{fn:24s} {str(tuple(looks)):26s} all three {100 * row['all_three_answered']:.2f}% "
              f"({', '.join(f'{100 * x:.2f}' for x in row['all_three_answered_per_seed'])}) last median "
              f"{row['last_repeat']['median']:.0f} p95 {row['last_repeat']['p95']:.0f}; cells median "
              f"{row['cells']['median']:.0f} p95 {row['cells']['p95']:.0f}; wall x{row['wall_ratio']['median']:.3f} "
              f"p95 x{row['wall_ratio']['p95']:.3f} (OLS x{row['wall_ratio_ols']['median']:.3f}, "
              f"x{row['wall_ratio_ols']['p95']:.3f}) {row['seconds']:.0f} s", flush=True)
    doc = {"command": "python -m bench.look_design " + " ".join(sys.argv[1:] if argv is None else argv),
           "seeds": seeds, "replays_per_seed": args.replays,
           "blocks_from": [str(r.relative_to(ROOT)) if r.is_relative_to(ROOT) else str(r) for r in roots],
           "wall_model": model, "designs": rows}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    else:
        print("nothing written")


if __name__ == "__main__":
    main()

"""How long a study's group takes to be all up when its members start side by side (sweep.start_at_once) against one
after another, through the group job's own code (runner.Members.start, residency.plan).

Starts alternate between the widths A B B A A B ... after one uncounted start (the session's first pays for a cold
page cache). Each start: when the last member was up (all_up_s, what the study waits for) and each member's ready_s.
The ratio wide / one of all_up_s pairs the starts in order (1st with 1st, ...), with its geometric mean and a 95% t
interval. Every server started here is stopped before the next start.

    PYTHONPATH=src .venv/bin/python bench/start_side_by_side.py --overrides "pair.target=... pair.drafter=..." \\
        --width 2 --starts 3 --out bench/archive/cpu/start-side-by-side
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import signal
import sys
import tempfile
import time
from pathlib import Path

from engine_core import interval     # bench/engine_core.py: a t interval of logs

from specsweep import residency, runner
from specsweep.cells import expand
from specsweep.config import compose_jobs
from specsweep.results import atomic_write_json, atomic_write_text


def one_start(overrides: list[str], results: Path, width: int) -> dict:
    grid = expand(compose_jobs([f"results_dir={results}", "tracking=off", *overrides]))
    members = grid.group(grid.leads()[0])
    launches = {s: dataclasses.replace(launch, start_at_once=width) for s, launch in residency.plan(grid, members).items()}
    t0 = time.monotonic()
    with runner.Members(grid, launches, progress=False) as group:
        group.start(members)
        all_up = time.monotonic() - t0
        assert not group.broken, group.broken
        info = {s: group.sessions[s][1].srv.info for s in members}
    return {"width": width, "all_up_s": round(all_up, 1), "ready_s": {s: i["ready_s"] for s, i in info.items()},
            "engine_init_s": {s: i.get("engine_init_s") for s, i in info.items()},
            "kv_cache_tokens": {s: i.get("kv_cache_tokens") for s, i in info.items()},
            "members": len(members), "residency": launches[members[0]].residency}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--width", type=int, default=len(os.sched_getaffinity(0)), help="members started at once")
    ap.add_argument("--starts", type=int, default=3, help="starts of the group at each width")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: the servers started here are stopped
    results = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    overrides = args.overrides.split()
    widths = (args.width, 1)
    order = [widths[(i + i // 2) % 2] for i in range(2 * args.starts)]      # A B B A A B ...
    t0 = time.time()
    warm = one_start(overrides, results, 1)
    print(json.dumps({"warm_up": warm}), flush=True)
    starts = []
    for width in order:
        starts.append(one_start(overrides, results, width))
        print(json.dumps(starts[-1]), flush=True)
    wide, one = ([s["all_up_s"] for s in starts if s["width"] == w] for w in widths)
    g, lo, hi = interval([math.log(a / b) for a, b in zip(wide, one)])
    summary = {"warm_up": warm, "starts": starts, "order": order, "overrides": args.overrides,
               "ratio_all_up": {"geomean": g, "ci95_low": lo, "ci95_high": hi, "pairs": len(wide)},
               "host": platform.node(), "cores": len(os.sched_getaffinity(0)), "wall_s": round(time.time() - t0, 1)}
    out = Path(args.out)
    atomic_write_json(out / "start_side_by_side.json", summary)
    lines = ["| start | at once | all up s | each member's ready_s |", "|---|---|---|---|"]
    lines += [f"| {i + 1} | {s['width']} | {s['all_up_s']} | {', '.join(str(r) for r in s['ready_s'].values())} |"
              for i, s in enumerate(starts)]
    lines.append(f"\n{args.width} at once / one at a time, all up: {g:.3f} [{lo:.3f}, {hi:.3f}] (95% t, {len(wide)} "
                 f"pairs of starts); {starts[0]['members']} members, {summary['cores']} cores; "
                 f"overrides: {args.overrides}")
    atomic_write_text(out / "start_side_by_side.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""A study run twice on one host, cold then warm (one compile cache): each member's start against its cold start,
whether the warm one came from the compile cache, and each study's whole wall against a reference wall.

Issue 45's goals, read from the two kept studies (`bash scripts/gpu_host.sh bg 8b-studies`: qwen3-8b-cold, then
qwen3-8b-warm on the same host cache): every warm member a compile-cache hit and at most 0.7x of its cold start, the
cold study's wall at most 0.65x and the warm one's at most 0.55x of issue 28's 740 s. Members are matched by server
cell id (a study's name is not part of it); each member's first launch of each study is read (server.json). The
walls are the studies' own, the DAG and the packing of its files (`study NAME: rc=0 in N s`, what scripts/gpu_host.sh
prints after each), given with --walls or read from its output with --step-out. Compare the two studies' verdicts
with `specsweep compare COLD WARM`. A library module (`read`, `table`), and a command:

    python -m specsweep.read.warm_study COLD_STUDY_DIR WARM_STUDY_DIR --step-out step.out --out warm_study.json
    python -m specsweep.read.warm_study --smoke          # two made-up studies, nothing written
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from specsweep.core import layout
from specsweep.core.results import launches, run_record

REFERENCE_WALL_S = 740.0       # issue 28's 8B-shaped group study on the H200, members started one after another
GOALS = {"warm_over_cold_start": 0.7, "cold_wall_over_reference": 0.65, "warm_wall_over_reference": 0.55}
WALL = re.compile(r"^study (\S+): rc=(\d+) in (\d+) s$", re.M)


def first_launches(study: Path) -> dict[str, dict]:
    """Each server cell's first launch record in a kept study folder (<study>/<cell>/logs/server.json)."""
    out = {}
    for log_dir in sorted(study.glob(f"*/{layout.LOGS}")):
        records = launches(log_dir)
        if records:
            out[log_dir.parent.name] = records[0]
    return out


def walls_from(step_out: str) -> dict[str, float]:
    """Each study's whole wall from scripts/gpu_host.sh's output, by study name (a study that failed is left out)."""
    return {name: float(s) for name, rc, s in WALL.findall(step_out) if rc == "0"}


def read(cold: Path, warm: Path, walls: tuple[float | None, float | None], reference: float) -> dict:
    a, b = first_launches(cold), first_launches(warm)
    if not a or set(a) != set(b):
        raise SystemExit(f"warm_study: {cold} and {warm} must hold the same server cells, each with a launch record "
                         f"(found {sorted(a)} and {sorted(b)}): name two kept studies of one grid")
    members = {}
    for sid in sorted(a):
        c, w = a[sid], b[sid]
        ratio = round(w["ready_s"] / c["ready_s"], 3) if c.get("ready_s") and w.get("ready_s") else None
        members[sid] = {"cold_ready_s": c.get("ready_s"), "warm_ready_s": w.get("ready_s"), "warm_over_cold": ratio,
                        "cold_compile_cache": c.get("compile_cache"), "warm_compile_cache": w.get("compile_cache"),
                        "warm_load_failure": w.get("compile_cache_load_failure"),
                        "start_at_once": [c.get("start_at_once"), w.get("start_at_once")],
                        "kv_cache_tokens": [c.get("kv_cache_tokens"), w.get("kv_cache_tokens")]}
    ratios = [m["warm_over_cold"] for m in members.values()]
    worst = None if None in ratios else max(ratios)
    every_hit = all(m["warm_compile_cache"] == "hit" for m in members.values())
    goal = GOALS["warm_over_cold_start"]
    out = {"members": members, "every_warm_member_hit": every_hit,
           # the group's all-up time where its members started at once (start_at_once), else one member's start
           "slowest_start_s": {"cold": max(m["cold_ready_s"] or 0 for m in members.values()),
                               "warm": max(m["warm_ready_s"] or 0 for m in members.values())},
           "goals": {"warm_over_cold_start": {"goal": goal, "worst": worst,
                                              "met": every_hit and worst is not None and worst <= goal}},
           "reference_wall_s": reference}
    for name, wall in zip(("cold", "warm"), walls):
        key = f"{name}_wall_over_reference"
        ratio = round(wall / reference, 3) if wall else None
        out["goals"][key] = {"goal": GOALS[key], "wall_s": wall, "ratio": ratio,
                             "met": ratio is not None and ratio <= GOALS[key]}
    return out


def table(found: dict) -> str:
    lines = ["| member | cold ready s | warm ready s | warm / cold | warm cache | load failure |", "|---|---|---|---|---|---|"]
    for sid, m in found["members"].items():
        lines.append(f"| {sid} | {m['cold_ready_s']} | {m['warm_ready_s']} | {m['warm_over_cold']} | "
                     f"{m['warm_compile_cache']} | {m['warm_load_failure'] or ''} |")
    goals = "; ".join(f"{k}: {json.dumps({x: v for x, v in g.items() if x != 'goal'})} (goal <= {g['goal']})"
                      for k, g in found["goals"].items())
    return "\n".join(lines) + f"\n\nslowest start: {found['slowest_start_s']}; {goals}"


def smoke_studies(root: Path) -> tuple[Path, Path]:
    """Two made-up kept studies of two members: the warm one a hit at 0.6x."""
    from specsweep.core.results import atomic_write_json as write

    for study, ready, cache in (("cold", (100.0, 150.0), "miss"), ("warm", (60.0, 90.0), "hit")):
        for sid, r in zip(("base-target-0", "tiny-dflash-k7-0"), ready):
            write(root / study / sid / layout.LOGS / layout.SERVER_RECORD,
                  [{"ready_s": r, "compile_cache": cache, "compile_cache_load_failure": None, "start_at_once": 2,
                    "kv_cache_tokens": 1000}])
    return root / "cold", root / "warm"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("studies", nargs="*", type=Path, help="the cold study's folder, then the warm one's")
    ap.add_argument("--walls", nargs=2, type=float, metavar=("COLD_S", "WARM_S"), help="the studies' whole walls")
    ap.add_argument("--step-out", type=Path, help="scripts/gpu_host.sh's output, to read the walls from")
    ap.add_argument("--reference", type=float, default=REFERENCE_WALL_S, help="the wall the studies are held against")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="two made-up studies, nothing written")
    args = ap.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="warm-study-") as tmp:
            print(table(read(*smoke_studies(Path(tmp)), (400.0, 350.0), args.reference)))
        print("nothing written")
        return
    if len(args.studies) != 2:
        sys.exit("warm_study: name the cold study's folder and the warm one's (or --smoke)")
    cold, warm = args.studies
    walls = tuple(args.walls) if args.walls else (None, None)
    if args.step_out:
        found = walls_from(args.step_out.read_text())
        walls = (found.get(cold.name), found.get(warm.name))
    result = read(cold, warm, walls, args.reference)
    print(table(result))
    if not args.out:
        print("nothing written")
        return
    run_record(args.out, rounds=1, ratio=None, cold=str(cold), warm=str(warm), **result)
    print("wrote", args.out)


if __name__ == "__main__":
    main()

# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/replay_reproduction.py up to 58d1a74; run it from there.
"""Does a replay of a drafter's own per-position rates reproduce that drafter's measured speedup? (issue 20)

A set-acceptance cell (`sweep.set_acceptance=[{rates_from: <server cell>}]`) keeps every cost real and fixes
only which drafts are accepted, drawn at the given per-position rates. Replaying the rates a drafter measured,
on the same engine and prompts, it should give that drafter's speedup within its CI; where it does not, the
difference bounds what the system's ceiling curve can claim about a drafter.

Through the DAG as a user runs it, on the in-process engine (`server=local`) with the tiny pair at concurrency 1:
1. a pilot: the real drafter at each K, one repeat, no baseline: the cell whose rates are replayed. At
   temperature 0 the engine's acceptance is the same in every repeat, so the pilot's rates are the main real
   cell's (the script checks this);
2. the study: the baseline, the real drafter at each K and the replay of its rates at the same K (one more
   Hydra job per K, `--also`), all in one grid, so their launches interleave round by round (sweep.rounds);
   `sweep.ignore_eos=true` everywhere, so the real cell decodes the same lengths as its replay (which forces it)
   and the two are paired request by request too;
3. `specsweep compare <study>`: predicted against measured, with CIs, the realised per-position rates against
   the given ones.

Writes into --out: README.md (the command, date, load, wall times, the figures), predicted.csv, compare.txt, the
study's summary.csv and k_comparison.csv, and steps.csv (per cell, the verify steps per request: a replay draws
its accepts afresh at every step, so its requests' step counts spread less than the real drafter's, whose
acceptance follows the prompt).

    PYTHONPATH=src .venv/bin/python bench/replay_reproduction.py --pair results/models/tiny \\
        --results /tmp/replay/results --out bench/archive/cpu/replay [--ks 7 3] [--prompts 32] [--repeats 6]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def sweep(overrides: list[str], also: list[str], log: Path) -> float:
    """`specsweep sweep` (the user's way in) with these overrides; returns its wall time, exits on failure."""
    argv = [sys.executable, "-m", "specsweep.cli", "sweep", "--cores", "2", *overrides]
    for more in also:
        argv += ["--also", more]
    start = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.call(argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"replay_reproduction: {' '.join(argv)} failed (exit {rc}); its output is in {log}")
    return time.monotonic() - start


def cell_of(study: Path, k: int, replay: bool) -> Path:
    """The local engine's server cell of block k+1 with real (replay False) or set acceptance."""
    import yaml

    for cell in sorted(study.glob(f"*-local-b{k + 1}-*")):
        config = next(cell.glob("*/config.yaml"), None)
        if config and (yaml.safe_load(config.read_text())["server_spec"].get("set_acceptance") is not None) == replay:
            return cell
    sys.exit(f"replay_reproduction: no {'replay' if replay else 'real'} cell of block {k + 1} in {study}")


def median_rates(cell: Path) -> list[float]:
    per = [json.loads(m.read_text())["spec_decode"]["per_position_acceptance"] for m in cell.glob("*/metrics.json")]
    return [statistics.median(p[i] for p in per) for i in range(len(per[0]))]


def steps(cell: Path) -> dict:
    """Verify steps per request over the cell's repeats: mean, geometric mean, and the spread (sd / mean)."""
    counts = [len(json.loads(line)["acceptance_lengths"]) for f in cell.glob("*/requests.jsonl")
              for line in open(f) if line.strip()]
    mean = statistics.fmean(counts)
    return {"requests": len(counts), "mean_steps": mean,
            "geomean_steps": math.exp(statistics.fmean(math.log(c) for c in counts)),
            "cv_steps": statistics.pstdev(counts) / mean}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=REPO / "results" / "models" / "tiny")
    ap.add_argument("--results", type=Path, required=True, help="a results_dir of its own (fresh: nothing cached)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "archive" / "cpu" / "replay")
    ap.add_argument("--ks", type=int, nargs="+", default=[7])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not (args.pair / "target").is_dir() or not (args.pair / "drafter").is_dir():
        sys.exit(f"replay_reproduction: {args.pair} has no target/ and drafter/: give --pair a trained tiny pair "
                 "(results/models/tiny, which the default study builds)")
    pair = args.pair.resolve()
    results = args.results.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = results.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    common = [f"results_dir={results}", "server=local", "kernel=local_sdpa", f"pair.target={pair / 'target'}",
              f"pair.drafter={pair / 'drafter'}", "pair.built_by_workflow=false", "sweep.concurrency=[1]",
              f"dataset.num_prompts={args.prompts}", f"sweep.max_tokens={args.max_tokens}", "sweep.ignore_eos=true",
              "tracking=off"]
    ks = f"[{','.join(map(str, args.ks))}]"
    record = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "uptime_before": uptime()}

    pilot = ["study=replay-pilot", *common, f"sweep.num_speculative_tokens={ks}", "sweep.repeats=1",
             "sweep.rounds=1", "sweep.baseline=false"]
    record["pilot_s"] = sweep(pilot, [], logs / "pilot.log")
    sources = {k: cell_of(results / "replay-pilot", k, replay=False) for k in args.ks}
    main_run = ["study=replay", *common, f"sweep.num_speculative_tokens={ks}", f"sweep.repeats={args.repeats}",
                f"sweep.rounds={args.rounds}"]
    also = [f"sweep.num_speculative_tokens=[{k}] sweep.set_acceptance=[{{rates_from:{sources[k]}}}]" for k in args.ks]
    record["uptime_pilot_done"] = uptime()
    record["study_s"] = sweep(main_run, also, logs / "study.log")
    record["uptime_after"] = uptime()

    study = results / "replay"
    compare = subprocess.run([sys.executable, "-m", "specsweep.cli", "compare", str(study), "--predicted-out",
                              str(args.out / "predicted.csv")], cwd=REPO, capture_output=True, text=True)
    (args.out / "compare.txt").write_text(compare.stdout + compare.stderr)
    if compare.returncode != 0:
        sys.exit(f"replay_reproduction: specsweep compare failed: {compare.stderr.strip()}")
    for name in ("summary.csv", "k_comparison.csv"):
        shutil.copy2(study / name, args.out / name)

    step_rows, checks = [], []
    for k in args.ks:
        real, replay = cell_of(study, k, replay=False), cell_of(study, k, replay=True)
        pilot_rates, real_rates = median_rates(sources[k]), median_rates(real)
        checks.append(f"K={k}: the pilot's rates and the study's real cell's differ by at most "
                      f"{max(abs(a - b) for a, b in zip(pilot_rates, real_rates)):.4f} per position")
        for kind, cell in (("real", real), ("replay", replay)):
            step_rows.append({"K": k, "cell": kind, "server_cell": cell.name, **steps(cell)})
    with open(args.out / "steps.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(step_rows[0]))
        w.writeheader()
        w.writerows(step_rows)

    predicted = list(csv.DictReader(open(args.out / "predicted.csv")))

    def ratio(r, stem):
        return f"{float(r[stem + '_geomean']):.3f}x [{float(r[stem + '_ci_low']):.3f}, {float(r[stem + '_ci_high']):.3f}]"

    command = " ".join(["PYTHONPATH=src", os.path.relpath(sys.executable, REPO), "bench/replay_reproduction.py",
                        *sys.argv[1:]])
    lines = [
        "# Replaying a drafter's own rates on the local engine (CPU)", "",
        "Written by `bench/replay_reproduction.py` (its docstring says what it runs); figures as measured.", "",
        "```bash", command, "```", "",
        f"- date: {record['date']}; {os.cpu_count()} cores",
        f"- load: before `{record['uptime_before']}`; after the pilot `{record['uptime_pilot_done']}`; after the "
        f"study `{record['uptime_after']}`",
        f"- wall: pilot {record['pilot_s']:.0f} s, study {record['study_s']:.0f} s",
        f"- the study: the tiny pair on `server=local` (CPU, one torch thread), concurrency 1, {args.prompts} "
        f"synthetic prompts x {args.max_tokens} tokens (`sweep.ignore_eos=true`), {args.repeats} repeats in "
        f"{args.rounds} rounds, the baseline, the real drafter and its replay interleaved",
        *[f"- {c}" for c in checks], "",
        "| K | measured e2e speedup [95% CI] | replayed (predicted) | predicted / measured | agree | measured vs "
        "replay, paired | AL measured | AL replayed (given / realised) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in predicted:
        lines.append(f"| {r['num_speculative_tokens']} | {ratio(r, 'measured_speedup_e2e')} | "
                     f"{ratio(r, 'predicted_speedup_e2e')} | {float(r['predicted_over_measured']):.3f} | {r['agree']} | "
                     f"{ratio(r, 'measured_vs_predicted_e2e')} {r['measured_vs_predicted_verdict']} | "
                     f"{float(r['measured_al']):.3f} | {float(r['replayed_al']):.3f} / {float(r['predicted_al']):.3f} |")
    lines += ["", "Per-position acceptance:", ""]
    for r in predicted:
        lines += [f"- K={r['num_speculative_tokens']}: given (the pilot's) {r['replayed_rates']}; realised by the "
                  f"replay {r['realised_rates']}; the real cell's {r['measured_rates']}"]
    lines += ["", "Verify steps per request (`steps.csv`):", "", "| K | cell | requests | mean | geometric mean | sd / mean |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {s['K']} | {s['cell']} | {s['requests']} | {s['mean_steps']:.2f} | {s['geomean_steps']:.2f} | "
              f"{s['cv_steps']:.3f} |" for s in step_rows]
    lines += ["", "`compare.txt` is `specsweep compare` on the study; `predicted.csv` its table.", ""]
    (args.out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

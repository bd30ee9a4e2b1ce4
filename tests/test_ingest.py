"""`specsweep ingest`: a finished study copied from another host (tracking=off there) goes into MLflow once."""
import shutil

import pytest

from conftest import BIN, run

pytestmark = pytest.mark.server


def test_a_copied_study_is_ingested_once_and_an_unfinished_one_is_refused(smoke, tmp_path):
    work, _ = smoke
    copied = tmp_path / "results" / "smoke"
    shutil.copytree(work.parent / "results" / "smoke", copied,
                    ignore=shutil.ignore_patterns("mlflow-*.done"))
    uri = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    alone = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert alone.returncode == 2 and "copy results/datasets/ beside results/<study> too" in alone.stderr
    shutil.copytree(work.parent / "results" / "datasets", tmp_path / "results" / "datasets")
    first = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert first.returncode == 0, first.stderr[-2000:]
    assert '"runs_added": 4' in first.stdout
    again = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert again.returncode == 0 and '"runs_added": 0' in again.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("specsweep").experiment_id])
    cells = {r.data.tags["specsweep.cell_id"] for r in runs if r.data.tags.get("specsweep.kind") == "bench_cell"}
    assert len(cells) == 4

    metrics = next(p for p in copied.glob("*/*/metrics.json") if not p.parts[-3].startswith("base-"))
    metrics.unlink()
    partial = run([str(BIN / "specsweep"), "ingest", str(copied), "--uri", uri])
    assert partial.returncode == 2 and "is not a finished study" in partial.stderr
    assert "Traceback" not in partial.stderr

"""MLflow ingest: the single writer. One parent run per study, one child run per bench cell.

Idempotent: a child run is keyed by its cell id (a tag), so re-ingesting never duplicates runs. Runs read
like the study: each child spans its cell's real start and end and names its dataset as an MLflow dataset
input; the parent spans the study and holds the summary as a table the UI renders.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .cells import Grid
from .config import REPO
from .errors import TrackingError
from .results import atomic_write_json, read_json
from .stats import format_ratio
from .summary import BY_CATEGORY, K_COMPARISON

CELL_TAG = "specsweep.cell_id"
STUDY_TAG = "specsweep.study"
KIND_TAG = "specsweep.kind"
SUMMARY_TABLE = "summary_table.json"
TIMES = ("started_at", "finished_at")     # in metrics.json: wall-clock seconds, never logged as metrics


def tracking_uri(grid: Grid, study: str) -> str:
    uri = grid.tracking[study]["uri"]
    return uri or f"sqlite:///{default_store(grid)}"


def default_store(grid: Grid) -> Path:
    return (grid.results_dir / "mlflow.db").resolve()


def create_store_in_memory(db: Path, shm: Path = Path("/dev/shm")) -> None:
    """Create a new default store in tmpfs and link it into place, whole or not at all.

    MLflow creates a SQLite store by running each schema migration in its own transaction, and SQLite syncs
    every commit to disk: on the 2-core machine that took 7.6 s on disk and 2.0 s in /dev/shm.
    """
    if db.exists() or not shm.is_dir():
        return
    from mlflow.tracking import MlflowClient

    db.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=shm, prefix="specsweep-mlflow-") as tmp:
        MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db").search_experiments()
        staged = db.with_name(f".{db.name}.{os.getpid()}.tmp")
        try:
            with open(staged, "xb") as out, open(f"{tmp}/mlflow.db", "rb") as src:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
            os.link(staged, db)          # never over a store another ingest created meanwhile
        except FileExistsError:
            pass                         # that store is used; MLflow creates one itself if none is left
        finally:
            staged.unlink(missing_ok=True)


def marker(grid: Grid, study: str) -> str:
    """The ingest rule's output, one per tracking store: a store that was down is ingested on a later run."""
    from .cells import stable_hash

    key = stable_hash([tracking_uri(grid, study), grid.tracking[study]["experiment"]])[:10]
    return str(grid.results_dir / study / f"mlflow-{key}.done")


def flatten(obj, prefix: str = "") -> dict:
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list) and obj and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in obj):
        for i, v in enumerate(obj):
            out[f"{prefix}{i}"] = v
    else:
        out[prefix.rstrip(".")] = obj
    return out


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _numeric(d: dict) -> dict:
    return {k: float(v) for k, v in flatten(d).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and k not in TIMES}


def cell_times_ms(figures: dict, cell_dir: Path) -> tuple[int, int]:
    """A bench cell's start and end in epoch ms: metrics.json's own, or for a cell measured before it recorded
    them, the times of its first file written (config.yaml) and its last (metrics.json)."""
    start = figures.get("started_at") or (cell_dir / "config.yaml").stat().st_mtime
    end = figures.get("finished_at") or (cell_dir / "metrics.json").stat().st_mtime
    return int(start * 1000), int(end * 1000)


@functools.lru_cache(maxsize=None)
def dataset_input(name: str, prompts_file: str):
    """The prompts file as an MLflow dataset input: its name and the digest of the file's bytes. Made once per
    file per process (an ingest is one process): every bench cell of a dataset logs the same one."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    digest = hashlib.sha256(Path(prompts_file).read_bytes()).hexdigest()[:16]
    dataset = Dataset(name=name, digest=digest, source_type="local",
                      source=json.dumps({"uri": Path(prompts_file).resolve().as_uri()}))
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "eval")])


def log_summary_table(client, run_id: str, summary_csv: str) -> None:
    """The summary as an MLflow table. log_table appends rows to a table already logged, so a re-ingest
    writes the table file afresh instead, in the format log_table writes."""
    import pandas as pd

    table = pd.read_csv(summary_csv)
    if not any(a.path == SUMMARY_TABLE for a in client.list_artifacts(run_id)):
        client.log_table(run_id, data=table, artifact_file=SUMMARY_TABLE)
        return
    with tempfile.TemporaryDirectory() as tmp:
        table.to_json(Path(tmp) / SUMMARY_TABLE, orient="split", index=False, date_format="iso")
        client.log_artifact(run_id, str(Path(tmp) / SUMMARY_TABLE))


def ingest(grid: Grid, study: str, summary_csv: str, plots_dir: str, env_json: str, out: str) -> dict:
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    from mlflow.entities import Metric, Param
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(grid, study)
    try:
        if not grid.tracking[study]["uri"]:
            create_store_in_memory(default_store(grid))
        client = MlflowClient(tracking_uri=uri)
        name = grid.tracking[study]["experiment"]
        exp = client.get_experiment_by_name(name)
        # With the default SQLite store, artifacts go under results/ too (MLflow's own default is ./mlruns).
        artifacts = None if grid.tracking[study]["uri"] else (grid.results_dir / "mlartifacts").resolve().as_uri()
        exp_id = exp.experiment_id if exp else client.create_experiment(name, artifact_location=artifacts)
        existing = {r.data.tags.get(CELL_TAG): r for r in client.search_runs(
            [exp_id], filter_string=f"tags.`{STUDY_TAG}` = '{study}'", max_results=50000)}
        finished = {(sid, bid): read_json(grid.metrics_path(sid, bid)) for sid, bid in grid.cells_of_study(study)
                    if grid.metrics_path(sid, bid).exists()}
        times = {key: cell_times_ms(figures, grid.bench_dir(*key)) for key, figures in finished.items()}
        parent = existing.get(f"study:{study}")
        if parent is None:
            parent = client.create_run(exp_id, run_name=study, start_time=min((t[0] for t in times.values()),
                                                                              default=None),
                                       tags={STUDY_TAG: study, KIND_TAG: "study", CELL_TAG: f"study:{study}"})
        parent_id = parent.info.run_id
        commit, added = git_commit(), 0
        pooled = summary_tags(summary_csv)
        for (sid, bid), figures in finished.items():
            cell_id = f"{sid}/{bid}"
            if cell_id in existing:      # its own figures are final; the verdict over repeats may have moved
                for key, value in pooled.get(cell_id, {}).items():
                    client.set_tag(existing[cell_id].info.run_id, key, value)
                continue
            cdir = grid.bench_dir(sid, bid)
            bench, server = grid.benches[sid][bid].spec, grid.servers[sid]
            tags = {STUDY_TAG: study, KIND_TAG: "bench_cell", CELL_TAG: cell_id, "mlflow.parentRunId": parent_id,
                    "pair": server.pair["name"], "method": server.spec["method"],
                    "backend": server.spec["server"]["backend"],
                    "dataset": bench["dataset"]["name"], "thinking": str(bench["thinking"]).lower(),
                    "vllm_version": str(figures.get("vllm_version")), "git_commit": commit,
                    "valid": str(figures["valid"]).lower()}
            if figures.get("verdict"):     # this repeat's paired e2e speedup: tags.verdict = 'faster'
                tags["verdict"] = figures["verdict"]
            for why in ("streamed_figures_invalid", "speedup_streamed_tpot_na"):   # their figures are null, unlogged
                if figures.get(why):
                    tags[why] = figures[why][:5000]
            tags.update(pooled.get(cell_id, {}))
            run = client.create_run(exp_id, run_name=cell_id, tags=tags, start_time=times[sid, bid][0])
            client.log_inputs(run.info.run_id, [dataset_input(bench["dataset"]["name"],
                                                              grid.dataset_file(bench["dataset"]))])
            params = [Param(k[:250], str(v)[:6000]) for k, v in flatten(read_yaml(cdir / "config.yaml")).items()]
            for i in range(0, len(params), 100):
                client.log_batch(run.info.run_id, params=params[i:i + 100])
            metrics = [Metric(k, v, 0, 0) for k, v in _numeric(figures).items()]
            for i in range(0, len(metrics), 500):
                client.log_batch(run.info.run_id, metrics=metrics[i:i + 500])
            for art in ("metrics.json", "requests.jsonl", "config.yaml", "server.log"):
                if (cdir / art).exists():
                    client.log_artifact(run.info.run_id, str((cdir / art).resolve()))
            client.set_terminated(run.info.run_id, end_time=times[sid, bid][1])
            added += 1
        client.log_artifact(parent_id, summary_csv)
        log_summary_table(client, parent_id, summary_csv)
        for table in (K_COMPARISON, BY_CATEGORY):
            if (Path(summary_csv).parent / table).exists():
                client.log_artifact(parent_id, str(Path(summary_csv).parent / table))
        client.log_artifact(parent_id, env_json)
        for png in sorted(Path(plots_dir).glob("*.png")):
            client.log_artifact(parent_id, str(png), artifact_path="plots")
        client.set_terminated(parent_id, end_time=max((t[1] for t in times.values()), default=None))
    except (MlflowException, OSError) as e:
        raise TrackingError(f"MLflow at {uri} could not be written ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200]}): results/ is complete; start the server or fix "
                            "tracking.uri, then rerun snakemake to ingest") from None
    record = {"tracking_uri": uri, "experiment": name, "parent_run": parent_id, "runs_added": added}
    atomic_write_json(out, record)
    print(f"mlflow: {added} new bench-cell runs under {parent_id} at {uri}")
    return record


def summary_tags(summary_csv: str) -> dict[str, dict[str, str]]:
    """Per bench cell, its summary row's verdict over all repeats, which a single repeat's cannot give:
    tags summary_verdict ('faster', 'slower', 'within noise') and summary_speedup_e2e ('1.18x [1.10, 1.27]'),
    and beside them summary_speedup_streamed_tpot only where the streams passed their check, else
    summary_speedup_streamed_tpot_na with the reason."""
    import pandas as pd

    out = {}
    for row in pd.read_csv(summary_csv).to_dict("records"):
        if not isinstance(row["verdict"], str):          # a baseline, or a cell without a CI
            continue
        text = format_ratio(row["speedup_e2e_geomean"], row["speedup_e2e_ci_low"], row["speedup_e2e_ci_high"])
        tags = {"summary_verdict": row["verdict"], "summary_speedup_e2e": text}
        na, tpot = row.get("speedup_streamed_tpot_na"), row.get("speedup_streamed_tpot_geomean")
        if isinstance(na, str):
            tags["summary_speedup_streamed_tpot_na"] = na[:5000]
        elif tpot == tpot and tpot is not None:
            tags["summary_speedup_streamed_tpot"] = format_ratio(
                tpot, *(None if v != v else v for v in (row["speedup_streamed_tpot_ci_low"],
                                                        row["speedup_streamed_tpot_ci_high"])))
        for bid in row["bench_cells"].split():
            out[f"{row['server_cell']}/{bid}"] = tags
    return out


def read_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())

"""MLflow ingest: the single writer. One run for the study, and under it one run per configuration.

A configuration is one row of summary.csv: a server cell with its bench settings (dataset, thinking,
concurrency), pooled over its repeats. What its run holds (name, tags, params, metrics, artifacts) is
mlflow_runs'; this module keeps the store, the experiment and idempotence. The study's run holds the summary
table, the plots and the other study files, and is its configurations' parent: MLflow's convention for a sweep
(a parent run, its child runs tagged `mlflow.parentRunId`), so the runs table shows each study as one row that
opens onto its configurations, whatever other studies share the experiment.

Idempotent: a run is keyed by its configuration id (a tag) and carries a digest of what it holds, so a
re-ingest adds nothing, and a configuration whose run changed (more repeats) is replaced, not duplicated.
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

from specsweep.core import layout, table
from specsweep.core.errors import TrackingError
from specsweep.core.labels import both_eos, config_id, several_output_lengths
from specsweep.core.paths import REPO, user_cache
from specsweep.core.results import atomic_write_json, read_json
from specsweep.grid.cells import AA, Grid
from specsweep.read.mlflow_runs import RunPayload, configuration_run, k_tags
from specsweep.read.study import Study

CELL_TAG = "specsweep.cell_id"          # a configuration's id (server cell / bench settings), or study:<study>
STUDY_TAG = "specsweep.read.study"
KIND_TAG = "specsweep.kind"             # "configuration" or "study"
PARENT_TAG = "mlflow.parentRunId"       # MLflow's own tag of a nested run (mlflow.utils.mlflow_tags)
DIGEST_TAG = "specsweep.row_digest"     # the digest of what the run holds (mlflow_runs.RunPayload.digest)
OLD_KIND = "bench_cell"                 # the per-repeat layout's runs (one per bench cell, nested under the study)
SUMMARY_TABLE = "summary_table.json"
# MLflow 3.17's UI shows an experiment as GenAI (its traces overview) or classic ML (the runs table) by the
# sidebar's workflowType, remembered per browser and "genai" by default; this query sets it for one link.
WORKFLOW_QUERY = "workflowType=machine_learning"
# No sort in the link (orderByKey): MLflow's runs table nests child runs under their parent only in its default
# order, by start time; sorted by anything else it lists every run flat.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")   # read where that switch is off
UI = "http://127.0.0.1:5000"              # where `mlflow ui` serves a file store by default


def experiment_url(experiment_id: str, base: str = UI) -> str:
    """The experiment's runs table in MLflow's UI, as classic ML (not the GenAI overview)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{WORKFLOW_QUERY}"


def compare_url(run_ids: list[str], experiment_id: str, base: str = UI) -> str:
    return (f"{base.rstrip('/')}/#/compare-runs?runs={json.dumps(run_ids, separators=(',', ':'))}"
            f"&experiments={json.dumps([experiment_id])}&{WORKFLOW_QUERY}")


def default_store(grid: Grid) -> Path:
    return layout.mlflow_db(grid.results_dir).resolve()


def _schema_template(cache: Path, shm: Path) -> Path:
    """An empty store of this MLflow's schema, made once per machine and MLflow version: MLflow creates a SQLite
    store by running each of its schema migrations in its own transaction (what that cost a cold study:
    docs/campaigns/2026-12-02-small-grid.md#2026-12-02-one-job-per-group-and-the-mlflow-schema-made-once). It holds no experiment, so MLflow
    makes its Default experiment where the store is first opened, as it would in a new store."""
    import sqlite3

    import mlflow
    from mlflow.tracking import MlflowClient

    template = cache / f"mlflow-{mlflow.__version__}-schema.db"
    if template.exists():
        return template
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else cache, prefix="specsweep-mlflow-") as tmp:
        made = Path(tmp) / "schema.db"
        MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
        with sqlite3.connect(made) as con:
            con.execute("DELETE FROM experiment_tags")
            con.execute("DELETE FROM experiments")
        con.close()
        staged = cache / f".{template.name}.{os.getpid()}.tmp"
        shutil.copyfile(made, staged)
        os.replace(staged, template)        # whole or not at all; two makers write the same schema
    return template


def create_store(db: Path, shm: Path = Path("/dev/shm"), cache: Path | None = None) -> None:
    """Create a new default store from the schema template (_schema_template) and link it into place, whole or
    not at all; never over a store that exists, or one another ingest created meanwhile."""
    if db.exists():
        return
    template = _schema_template(cache or user_cache(), shm)
    db.parent.mkdir(parents=True, exist_ok=True)
    staged = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        with open(staged, "xb") as out, open(template, "rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        os.link(staged, db)
    except FileExistsError:
        pass                         # that store is used; MLflow creates one itself if none is left
    finally:
        staged.unlink(missing_ok=True)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


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


def old_layout_refusal(uri: str, grid: Grid, study: str) -> str:
    """The one line for a store that holds the per-repeat layout's runs, which would sit beside the new ones."""
    if not grid.tracking[study]["uri"]:
        what = f"{default_store(grid)} and {layout.mlartifacts(grid.results_dir)}"
    elif uri.startswith("sqlite:///"):
        what = uri[len("sqlite:///"):]
    else:
        what = f"experiment '{grid.tracking[study]['experiment']}' there"
    return (f"MLflow at {uri}: this store was written by specsweep's per-repeat layout (runs tagged "
            f"{KIND_TAG}={OLD_KIND}): delete {what}, or give tracking.uri (specsweep ingest --uri) a new store, "
            "then ingest again; results/ is complete")


def configuration_runs(results: Study, summary_csv: str | Path, k_comparison_csv: str | Path) -> list[RunPayload]:
    """Each summary row's run (mlflow_runs.configuration_run), a baseline named by the pairs it is the baseline of,
    each larger K's run tagged with its K comparisons."""
    grid = results.grid
    pairs_of: dict[str, set] = {}                    # a baseline server cell -> the pairs it is the baseline of
    for spec, base in grid.baseline_of.items():
        if grid.servers[spec].pair["name"] != AA:    # an A/A cell is the baseline's twin, not a pair it serves
            pairs_of.setdefault(base, set()).add(grid.servers[spec].pair["name"])
    ks = k_tags(table.read(k_comparison_csv, table.K_COMPARISON)) if Path(k_comparison_csv).exists() else {}
    out = []
    rows = table.read(summary_csv)
    lengths = several_output_lengths(rows)            # a study of several output lengths: -o<max_tokens> in ids
    eos = both_eos(rows)                              # a baseline of both ignore_eos settings: -e in one's id
    for row in rows:
        sid = row["server_cell"]
        named_by = grid.baseline_of.get(sid, sid) if row.get("pair") == AA else sid    # A/A: its baseline's pairs
        cells = [results.cells[sid, b] for b in (row.get("bench_cells") or "").split() if (sid, b) in results.cells]
        out.append(configuration_run(row, cells, "/".join(sorted(pairs_of.get(named_by, ()))) or None,
                                     ks.get(config_id(row, lengths)), lengths, eos))
    return out


def _experiment(client, grid: Grid, study: str, uri: str) -> str:
    """The study's experiment's id, created where it is missing (with the default store, its artifacts under
    results/; MLflow's own default is ./mlruns), shown as classic ML; a store of the old layout is refused."""
    name = grid.tracking[study]["experiment"]
    exp = client.get_experiment_by_name(name)
    artifacts = None if grid.tracking[study]["uri"] else layout.mlartifacts(grid.results_dir).resolve().as_uri()
    exp_id = exp.experiment_id if exp else client.create_experiment(name, artifact_location=artifacts)
    if client.search_runs([exp_id], filter_string=f"tags.`{KIND_TAG}` = '{OLD_KIND}'", max_results=1):
        raise TrackingError(old_layout_refusal(uri, grid, study))
    if (exp.tags if exp else {}).get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
        client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
    return exp_id


def _log_run(client, exp_id: str, run: RunPayload, tags: dict[str, str], prompts_file: Path | None) -> str:
    """Write one configuration's run; its digest tag last, so a run cut short has none and is made again."""
    from mlflow.entities import Metric, Param

    created = client.create_run(exp_id, run_name=run.name, tags={**tags, **run.tags}, start_time=run.start_ms)
    run_id = created.info.run_id
    if prompts_file is not None:
        client.log_inputs(run_id, [dataset_input(run.dataset["name"], str(prompts_file))])
    params = [Param(k, v) for k, v in run.params.items()]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i:i + 100])
    metrics = [Metric(*m) for m in run.metrics]
    for i in range(0, len(metrics), 500):
        client.log_batch(run_id, metrics=metrics[i:i + 500])
    for path, folder in run.artifacts:
        client.log_artifact(run_id, str(path.resolve()), artifact_path=folder)
    client.set_terminated(run_id, end_time=run.end_ms)
    client.set_tag(run_id, DIGEST_TAG, run.digest)
    return run_id


def ingest(results: Study, summary_csv: str | Path, k_comparison_csv: str | Path, by_category_csv: str | Path,
           plots_dir: str | Path, env_json: str | Path, out: str | Path) -> dict:
    """Log a study's configurations (summary_csv's rows, with k_comparison_csv's statements as tags) and its own
    run (the tables, env_json and the plots in plots_dir); write the marker `out`. A configuration whose run is
    the same as before (its digest) is kept; one that changed is replaced."""
    grid, study = results.grid, results.name
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri, name = grid.tracking_uri(study), grid.tracking[study]["experiment"]
    configurations = configuration_runs(results, summary_csv, k_comparison_csv)
    try:
        if not grid.tracking[study]["uri"]:
            create_store(default_store(grid))
        client = MlflowClient(tracking_uri=uri)
        exp_id = _experiment(client, grid, study, uri)
        existing = {r.data.tags.get(CELL_TAG): r for r in client.search_runs(
            [exp_id], filter_string=f"tags.`{STUDY_TAG}` = '{study}'", max_results=50000)}
        env = read_json(env_json) if Path(env_json).exists() else {}
        versions = {k: env[k] for k in ("torch", "transformers", "python") if isinstance(env.get(k), str)}
        commit, added, replaced, runs = git_commit(), 0, 0, {}
        parent = existing.get(f"study:{study}")
        if parent is None:
            parent = client.create_run(exp_id, run_name=f"{study} · summary and plots",
                                       start_time=min((r.start_ms for r in configurations if r.start_ms), default=None),
                                       tags={STUDY_TAG: study, KIND_TAG: "study", CELL_TAG: f"study:{study}",
                                             **versions, "git_commit": commit})
        parent_id = parent.info.run_id
        for run in configurations:
            old = existing.get(run.config_id)
            if old is not None and old.data.tags.get(DIGEST_TAG) == run.digest:
                runs[run.config_id] = old.info.run_id
                if old.data.tags.get(PARENT_TAG) != parent_id:      # ingested before runs were nested
                    client.set_tag(old.info.run_id, PARENT_TAG, parent_id)
                continue
            if old is not None:          # more repeats, a summary that moved, or an ingest cut short: made afresh
                client.delete_run(old.info.run_id)
                replaced += 1
            tags = {STUDY_TAG: study, KIND_TAG: "configuration", CELL_TAG: run.config_id, PARENT_TAG: parent_id,
                    **versions, "git_commit": commit}
            prompts = grid.dataset_file(run.dataset) if run.dataset else None
            runs[run.config_id] = _log_run(client, exp_id, run, tags, prompts)
            added += 1
        client.log_artifact(parent_id, str(summary_csv))
        log_summary_table(client, parent_id, summary_csv)
        for path in (k_comparison_csv, by_category_csv, env_json):
            client.log_artifact(parent_id, str(path))
        for png in sorted(Path(plots_dir).glob(f"*{layout.PLOT_SUFFIX}")):
            client.log_artifact(parent_id, str(png), artifact_path=layout.PLOTS)
        client.set_terminated(parent_id, end_time=max((r.end_ms for r in configurations if r.end_ms), default=None))
    except (MlflowException, OSError) as e:
        raise TrackingError(f"MLflow at {uri} could not be written ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:200]}): results/ is complete; start the server or fix "
                            "tracking.uri, then rerun snakemake to ingest") from None
    base = uri if uri.startswith(("http://", "https://")) else UI
    record = {"tracking_uri": uri, "experiment": name, "experiment_id": exp_id, "study_run": parent_id,
              "runs_added": added, "runs_replaced": replaced, "configurations": runs,
              "url": experiment_url(exp_id, base)}
    atomic_write_json(out, record)
    serve = "" if base != UI else f" (serve it: mlflow ui --backend-store-uri {uri} --port 5000)"
    print(f"mlflow: {added} configuration runs added ({replaced} replaced), {len(runs)} in study {study} at "
          f"{uri}; open {record['url']}{serve}")
    return record

"""MLflow ingest: the single writer. One run per configuration, one run for the study.

A configuration is one row of summary.csv: a server cell with its bench settings (dataset, thinking,
concurrency), pooled over its repeats. Its run carries the row's figures (the paired speedup with its CI
and verdict, the acceptance figures) as metrics, each repeat's own figures as metric steps (step = repeat
index, under `repeat.`), and is named like the configuration: `tiny · dflash K=7 · data=synthetic · c=4`.
The study's run holds the summary table, the plots and the other study files.

Idempotent: a run is keyed by its configuration id (a tag) and carries a digest of its summary row, so a
re-ingest adds nothing, and a configuration whose row changed (more repeats) is replaced, not duplicated.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import backends, layout
from .cells import Grid, stable_hash
from .config import REPO
from .errors import TrackingError
from .nested import flatten
from .results import atomic_write_json, read_json
from .stats import format_ratio
from .study import Study
from .summary import schedule_label

CELL_TAG = "specsweep.cell_id"          # a configuration's id (server cell / bench settings), or study:<study>
STUDY_TAG = "specsweep.study"
KIND_TAG = "specsweep.kind"             # "configuration" or "study"
DIGEST_TAG = "specsweep.row_digest"     # the summary row the run was made from
OLD_KIND = "bench_cell"                 # the per-repeat layout's runs (one per bench cell, nested under the study)
SUMMARY_TABLE = "summary_table.json"
TIMES = ("started_at", "finished_at")     # in metrics.json: wall-clock seconds, never logged as metrics
REPEAT = "repeat."                        # prefix of the per-repeat metrics, logged with step = repeat index
# The verdict's figures: what a configuration run is compared by. Every numeric column the summary row has is
# logged; these are the ones the docs and tests name (absent or blank ones are skipped, e.g. a baseline's).
VERDICT_FIGURES = ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high",
                   "speedup_streamed_tpot_geomean", "speedup_streamed_tpot_ci_low", "speedup_streamed_tpot_ci_high",
                   "speedup_server_tpot_geomean", "speedup_server_tpot_ci_low", "speedup_server_tpot_ci_high",
                   "server_tpot_ms", "streamed_tpot_ms",
                   "speedup_output_tok_s", "speedup_output_tok_s_ci_low", "speedup_output_tok_s_ci_high",
                   "mean_acceptance_length", "acceptance_rate")
SETTINGS = ("num_speculative_tokens", "concurrency")     # numeric summary columns that are settings: tags, params
# MLflow 3.17's UI shows an experiment as GenAI (its traces overview) or classic ML (the runs table) by the
# sidebar's workflowType, remembered per browser and "genai" by default; this query sets it for one link.
WORKFLOW_QUERY = "workflowType=machine_learning"
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")   # read where that switch is off
UI = "http://127.0.0.1:5000"              # where `mlflow ui` serves a file store by default


def experiment_url(experiment_id: str, base: str = UI) -> str:
    """The experiment's runs table in MLflow's UI, as classic ML (not the GenAI overview)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{WORKFLOW_QUERY}"


def compare_url(run_ids: list[str], experiment_id: str, base: str = UI) -> str:
    return (f"{base.rstrip('/')}/#/compare-runs?runs={json.dumps(run_ids, separators=(',', ':'))}"
            f"&experiments={json.dumps([experiment_id])}&{WORKFLOW_QUERY}")


def tracking_uri(grid: Grid, study: str) -> str:
    uri = grid.tracking[study]["uri"]
    return uri or f"sqlite:///{default_store(grid)}"


def default_store(grid: Grid) -> Path:
    return layout.mlflow_db(grid.results_dir).resolve()


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
        made = Path(tmp) / db.name
        MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
        staged = db.with_name(f".{db.name}.{os.getpid()}.tmp")
        try:
            with open(staged, "xb") as out, open(made, "rb") as src:
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
    key = stable_hash([tracking_uri(grid, study), grid.tracking[study]["experiment"]])[:10]
    return str(grid.study_files(study).mlflow_marker(key))


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _numeric(d: dict) -> dict:
    return {k: float(v) for k, v in flatten(d, split_lists=True).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and k not in TIMES}


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


def summary_rows(summary_csv: str) -> list[dict[str, str]]:
    """summary.csv's rows as the strings it holds: each column read by name, none assumed but the ids."""
    with open(summary_csv, newline="") as f:
        return list(csv.DictReader(f))


def _float(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def row_figures(row: dict[str, str]) -> dict[str, float]:
    """Every figure of a summary row as a metric: its numeric columns (blank ones skipped), and each entry of
    its JSON lists (per_position_acceptance.0, ...). Settings (K, concurrency) are tags and params instead."""
    out = {}
    for key, text in row.items():
        if key in SETTINGS or text in (None, ""):
            continue
        if text.startswith("["):
            try:
                values = json.loads(text)
            except ValueError:
                continue
            out.update({f"{key}.{i}": v for i, v in enumerate(values) if _float(v) is not None})
        elif _float(text) is not None and text not in ("True", "False"):
            out[key] = _float(text)
    return out


def _true(text) -> bool:
    return str(text).strip().lower() == "true"


def config_id(row: dict[str, str]) -> str:
    """A configuration's id: its server cell and bench settings, as a bench cell id reads without its repeat."""
    return f"{row['server_cell']}/{row['dataset']}-t{int(_true(row['thinking']))}-c{row['concurrency']}"


def run_name(row: dict[str, str], pair: str | None = None) -> str:
    """`tiny · dflash K=7 · data=synthetic · c=4`; a baseline `tiny · baseline · ...`; a set acceptance adds
    `AL set 3.0` (a length) or `AL set 3.4 (rates)`, block verification `block verification`; thinking adds
    `think`, a backend whose cell ids carry a tag (all but vLLM) its name.
    `pair` names a baseline by the pairs it is the baseline of (its own pair is "baseline")."""
    parts = [pair or row["pair"]]
    if row["method"] == "none":
        parts.append("baseline")
    else:
        schedule = json.loads(row["k_schedule"]) if row.get("k_schedule") else None
        parts.append(f"{row['method']} " + (schedule_label(schedule) if schedule
                                             else f"K={row['num_speculative_tokens']}"))
        if row.get("set_acceptance"):
            value = json.loads(row["set_acceptance"])
            parts.append(f"AL set {round(1 + sum(value), 3)} (rates)" if isinstance(value, list)
                         else f"AL set {round(float(value), 3)}")
        if row.get("verification") not in (None, "", "standard"):
            parts.append(f"{row['verification']} verification")
    if row.get("backend") in backends.names() and backends.get(row["backend"]).ID_TAG:    # as its cell ids name it
        parts.append(row["backend"])
    parts.append(f"data={row['dataset']}")
    if _true(row.get("thinking")):
        parts.append("think")
    parts.append(f"c={row['concurrency']}")
    return " · ".join(parts)


def server_versions(row: dict[str, str], repeats: dict[str, dict]) -> dict[str, str]:
    """The server's versions over a configuration's repeats, as its backend names them (VERSION_FIELDS, e.g.
    vllm_version), each tagged where a repeat recorded it."""
    fields = backends.get(row["backend"]).VERSION_FIELDS if row.get("backend") in backends.names() else ()
    found = {key: sorted({str(f[key]) for f in repeats.values() if f.get(key)}) for key in fields}
    return {key: " ".join(values) for key, values in found.items() if values}


def row_tags(row: dict[str, str]) -> dict[str, str]:
    """The configuration's settings and its verdict over repeats: verdict ('faster', 'slower', 'within
    noise'; absent without a CI) and speedup_e2e ('1.18x [1.10, 1.27]'), speedup_output_tok_s likewise."""
    tags = {"pair": row["pair"], "method": row["method"], "K": row["num_speculative_tokens"],
            "dataset": row["dataset"], "thinking": str(_true(row["thinking"])).lower(),
            "concurrency": row["concurrency"], "backend": row.get("backend", ""),
            "valid": str(_true(row.get("valid"))).lower(), "repeats": row.get("repeats", ""),
            "specsweep.server_cell": row["server_cell"], "specsweep.bench_cells": row.get("bench_cells", "")}
    if row.get("set_acceptance"):
        tags["set_acceptance"] = row["set_acceptance"]
    if row.get("verification"):
        tags["verification"] = row["verification"]
    if row.get("k_schedule"):
        tags["k_schedule"] = row["k_schedule"]
    if row.get("verdict"):
        tags["verdict"] = row["verdict"]
    if row.get("diagnosis"):            # why the acceptance is low (counterfactuals.py), with its evidence
        tags.update(diagnosis=row["diagnosis"], diagnosis_evidence=row.get("diagnosis_evidence") or "")
    # the paired geomeans (the streamed TPOT's blank where a stream failed its check: the reason is a tag then)
    # and the tok/s ratio of medians
    ratios = {"speedup_e2e": "speedup_e2e_geomean", "speedup_streamed_tpot": "speedup_streamed_tpot_geomean",
              "speedup_server_tpot": "speedup_server_tpot_geomean", "speedup_output_tok_s": "speedup_output_tok_s"}
    for name, point in () if row["method"] == "none" else ratios.items():
        if _float(row.get(point)) is not None:
            tags[name] = format_ratio(_float(row[point]), _float(row.get(f"{name}_ci_low")),
                                      _float(row.get(f"{name}_ci_high")))
    if row.get("tpot_source"):          # which TPOT the configuration has (docs/timing.md)
        tags["tpot_source"] = row["tpot_source"]
    for why in ("streamed_figures_invalid", "speedup_streamed_tpot_na", "figures_disagree",
                "server_figures_invalid", "speedup_server_tpot_na", "tpot_sources_disagree"):
        if row.get(why):
            tags[why] = row[why][:5000]
    return {k: v for k, v in tags.items() if v not in (None, "")}


def k_tags(k_comparison_csv: Path) -> dict[str, dict[str, str]]:
    """Per configuration, its K comparisons against each smaller K (k_comparison.csv's statements), as tags
    `vs_K3`: `1.28x [1.26, 1.30] resolved (K=7 faster)`; none where the table is absent."""
    out: dict[str, dict[str, str]] = {}
    for row in summary_rows(str(k_comparison_csv)) if k_comparison_csv.exists() else []:
        statement = row.get("statement") or ""
        if not (row.get("server_cell_a") and ": " in statement):
            continue
        key = config_id({**row, "server_cell": row["server_cell_a"]})
        out.setdefault(key, {})[f"vs_K{row.get('k_b')}"] = statement.split(": ", 1)[1]
    return out


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


def ingest(results: Study, summary_csv: str | Path, k_comparison_csv: str | Path, by_category_csv: str | Path,
           plots_dir: str | Path, env_json: str | Path, out: str | Path) -> dict:
    """Log a study's configurations (summary_csv's rows, with k_comparison_csv's statements as tags) and its own
    run (the tables, env_json and the plots in plots_dir); write the marker `out`."""
    grid, study = results.grid, results.name
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
        artifacts = None if grid.tracking[study]["uri"] else layout.mlartifacts(grid.results_dir).resolve().as_uri()
        exp_id = exp.experiment_id if exp else client.create_experiment(name, artifact_location=artifacts)
        if client.search_runs([exp_id], filter_string=f"tags.`{KIND_TAG}` = '{OLD_KIND}'", max_results=1):
            raise TrackingError(old_layout_refusal(uri, grid, study))
        if (exp.tags if exp else {}).get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
            client.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
        existing = {r.data.tags.get(CELL_TAG): r for r in client.search_runs(
            [exp_id], filter_string=f"tags.`{STUDY_TAG}` = '{study}'", max_results=50000)}
        env = read_json(env_json) if Path(env_json).exists() else {}
        versions = {k: env[k] for k in ("torch", "transformers", "python") if isinstance(env.get(k), str)}
        commit, added, replaced, runs = git_commit(), 0, 0, {}
        pairs_of = {}                    # a baseline server cell -> the pairs it is the baseline of
        for spec, base in grid.baseline_of.items():
            pairs_of.setdefault(base, set()).add(grid.servers[spec].pair["name"])
        spans, ks = [], k_tags(Path(k_comparison_csv))
        for row in summary_rows(summary_csv):
            cid, sid = config_id(row), row["server_cell"]
            bids = sorted(row.get("bench_cells", "").split(),
                          key=lambda b: grid.benches[sid][b].spec["repeat"] if b in grid.benches.get(sid, {}) else 0)
            cells = {b: results.cells[sid, b] for b in bids if (sid, b) in results.cells}
            repeats = {b: c.metrics for b, c in cells.items()}
            times = {b: c.times_ms() for b, c in cells.items()}
            steps = {b: grid.benches[sid][b].spec["repeat"] if b in grid.benches.get(sid, {}) else i
                     for i, b in enumerate(repeats)}
            span = (min((t[0] for t in times.values()), default=None),
                    max((t[1] for t in times.values()), default=None))
            spans.append(span)
            vs = ks.get(cid, {})
            digest = stable_hash([row, {b: times[b] for b in repeats}, vs])[:16]
            old = existing.get(cid)
            if old is not None and old.data.tags.get(DIGEST_TAG) == digest:
                runs[cid] = old.info.run_id
                continue
            if old is not None:          # more repeats, a summary that moved, or an ingest cut short: made afresh
                client.delete_run(old.info.run_id)
                replaced += 1
            tags = {STUDY_TAG: study, KIND_TAG: "configuration", CELL_TAG: cid,
                    **row_tags(row), **vs, **versions, "git_commit": commit, **server_versions(row, repeats)}
            run = client.create_run(exp_id, run_name=run_name(row, "/".join(sorted(pairs_of.get(sid, ())))),
                                     tags=tags, start_time=span[0])
            run_id = runs[cid] = run.info.run_id
            bench = grid.benches[sid][bids[0]].spec if bids and bids[0] in grid.benches.get(sid, {}) else None
            if bench:
                client.log_inputs(run_id, [dataset_input(bench["dataset"]["name"],
                                                         grid.dataset_file(bench["dataset"]))])
            # params: the repeats' resolved config, less what differs between repeats (the repeat index, its id)
            configs = [flatten(c.config, split_lists=True) for c in cells.values()]
            common = {k: v for k, v in (configs[0] if configs else {}).items()
                      if all(c.get(k) == v for c in configs[1:])}
            params = [Param(k[:250], str(v)[:6000]) for k, v in common.items()]
            for i in range(0, len(params), 100):
                client.log_batch(run_id, params=params[i:i + 100])
            metrics = [Metric(k, v, span[1] or 0, 0) for k, v in row_figures(row).items()]
            for b, figures in repeats.items():
                values = {**_numeric(figures), "valid": float(bool(figures.get("valid")))}
                metrics += [Metric(REPEAT + k, v, times[b][1], steps[b]) for k, v in values.items()]
            for i in range(0, len(metrics), 500):
                client.log_batch(run_id, metrics=metrics[i:i + 500])
            for b, c in cells.items():
                for art in c.files():
                    client.log_artifact(run_id, str(art.resolve()), artifact_path=f"repeats/r{steps[b]}-{b}")
            client.set_terminated(run_id, end_time=span[1])
            client.set_tag(run_id, DIGEST_TAG, digest)       # last: a run cut short has none, and is made again
            added += 1
        parent = existing.get(f"study:{study}")
        if parent is None:
            parent = client.create_run(exp_id, run_name=f"{study} · summary and plots",
                                       start_time=min((s[0] for s in spans if s[0]), default=None),
                                       tags={STUDY_TAG: study, KIND_TAG: "study", CELL_TAG: f"study:{study}",
                                             **versions, "git_commit": commit})
        parent_id = parent.info.run_id
        client.log_artifact(parent_id, str(summary_csv))
        log_summary_table(client, parent_id, summary_csv)
        for table in (k_comparison_csv, by_category_csv):
            client.log_artifact(parent_id, str(table))
        client.log_artifact(parent_id, str(env_json))
        for png in sorted(Path(plots_dir).glob(f"*{layout.PLOT_SUFFIX}")):
            client.log_artifact(parent_id, str(png), artifact_path=layout.PLOTS)
        client.set_terminated(parent_id, end_time=max((s[1] for s in spans if s[1]), default=None))
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


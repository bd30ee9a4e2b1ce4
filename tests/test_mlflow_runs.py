"""A configuration's MLflow run as a payload (mlflow_runs.py), made without MLflow: its name, tags, params, metrics
and artifacts, and what MLflow 3.17's compare view draws of two of them by default; and the new default store (with MLflow)."""
import pytest

from specsweep.read import mlflow_runs
from specsweep.read.study import Cell

JOB = {"sweep": {"num_speculative_tokens": [3, 7], "repeats": 2}, "study": "v"}


def cell(tmp_path, k: int, repeat: int, speedup: float) -> Cell:
    """A finished repeat of K=k (k=0: the baseline) as its config.yaml and metrics.json hold it."""
    sid = "base-target-aa" if k == 0 else f"tiny-dflash-k{k}-bb"
    spec = {"method": "none" if k == 0 else "dflash", "num_speculative_tokens": k, "target": "/m/target",
            "drafter": None if k == 0 else "/m/drafter", "set_acceptance": None, "server": {"backend": "vllm"}}
    pair = {"name": "baseline", "target": "/m/target", "method": "none"} if k == 0 else \
        {"name": "tiny", "target": "/m/target", "drafter": "/m/drafter", "method": "dflash", "trained": 1}
    bid = f"synthetic-t0-c4-r{repeat}-cc"
    path = tmp_path / sid / bid
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.json").write_text("{}")
    config = {"study": "v", "server_cell": sid, "bench_cell": bid, "baseline_cell": "base-target-aa", "pair": pair,
              "server_spec": spec, "bench_spec": {"dataset": {"name": "synthetic"}, "concurrency": 4,
                                                 "thinking": False, "repeat": repeat}, "job_config": JOB}
    metrics = {"valid": True, "output_tok_s": 10.0 * (1 + repeat), "speedup_e2e_geomean": speedup,
               "spec_decode": {"per_position_acceptance": [0.9, 0.5]}, "started_at": 100.0 + repeat,
               "finished_at": 101.0 + repeat, "baseline_cell": "base-target-aa"}
    return Cell(path, metrics, config)


def row(k: int, speedup: float | None) -> dict:
    """A typed summary row (table.read) of K=k."""
    return {"study": "v", "server_cell": "base-target-aa" if k == 0 else f"tiny-dflash-k{k}-bb", "backend": "vllm",
            "pair": "baseline" if k == 0 else "tiny", "method": "none" if k == 0 else "dflash",
            "num_speculative_tokens": k, "set_acceptance": None, "verification": None if k == 0 else "standard",
            "k_schedule": None, "dataset": "synthetic", "thinking": False, "concurrency": 4, "repeats": 2,
            "valid": True, "bench_cells": "synthetic-t0-c4-r0-cc synthetic-t0-c4-r1-cc", "output_tok_s": 12.5,
            "speedup_e2e_geomean": speedup, "speedup_e2e_ci_low": speedup and speedup - 0.1,
            "speedup_e2e_ci_high": speedup and speedup + 0.1, "verdict": speedup and "faster",
            "per_position_acceptance": [] if k == 0 else [0.9, 0.5], "paired_prompts": None if k == 0 else 12}


def run(tmp_path, k, speedup=1.4, **kw):
    return mlflow_runs.configuration_run(row(k, speedup if k else None), [cell(tmp_path, k, r, speedup)
                                                                          for r in (1, 0)], **kw)


def test_a_configurations_run_is_named_tagged_and_measured_from_its_row_and_repeats(tmp_path):
    k3 = run(tmp_path, 3, vs={"vs_K1": "1.1x"})
    # what differs within a study first, then the answer: MLflow's runs table shows a name's start
    assert (k3.config_id, k3.name) == ("tiny-dflash-k3-bb/synthetic-t0-c4",
                                       "K=3 · c=4 · 1.40x [1.30, 1.50] faster · tiny · data=synthetic")
    assert {k: k3.tags[k] for k in ("K", "thinking", "concurrency", "valid", "verdict", "speedup_e2e", "vs_K1",
                                    "specsweep.baseline_cell")} == {
        "K": "3", "thinking": "false", "concurrency": "4", "valid": "true", "verdict": "faster",
        "speedup_e2e": "1.40x [1.30, 1.50]", "vs_K1": "1.1x", "specsweep.baseline_cell": "base-target-aa"}
    figures = {m[0]: m[1] for m in k3.metrics if m[3] == 0 and not m[0].startswith(mlflow_runs.REPEAT)}
    assert figures == {"speedup_e2e_geomean": 1.4, "speedup_e2e_ci_low": pytest.approx(1.3),
                       "speedup_e2e_ci_high": pytest.approx(1.5), "output_tok_s": 12.5, "repeats": 2.0,
                       "paired_prompts": 12.0, "per_position_acceptance.0": 0.9, "per_position_acceptance.1": 0.5}
    # each repeat's figures as steps, at the repeat's end; the times are never metrics
    steps = sorted((m[3], m[2], m[1]) for m in k3.metrics if m[0] == "repeat.output_tok_s")
    assert steps == [(0, 101000, 10.0), (1, 102000, 20.0)]
    assert not any(m[0].endswith(("started_at", "finished_at")) for m in k3.metrics)
    assert (k3.start_ms, k3.end_ms) == (100000, 102000)
    assert [a for _, a in k3.artifacts] == ["repeats/r0-synthetic-t0-c4-r0-cc", "repeats/r1-synthetic-t0-c4-r1-cc"]


def test_params_are_the_configurations_own_settings_one_name_per_value(tmp_path):
    params = run(tmp_path, 3).params
    assert params["server_spec.num_speculative_tokens"] == "3" and params["pair.name"] == "tiny"
    assert params["pair.trained"] == "1" and "pair.drafter" not in params          # the server spec holds it
    assert not [p for p in params if p.startswith("job_config.") or p in ("study", "server_cell", "bench_cell",
                                                                            "baseline_cell", "bench_spec.repeat")]


def test_a_baseline_is_named_by_its_pairs_and_has_no_speedup(tmp_path):
    base = run(tmp_path, 0, pair="tiny")
    assert base.name == "baseline · c=4 · tiny · data=synthetic"
    assert not {"speedup_e2e", "verdict", "specsweep.baseline_cell"} & set(base.tags)


def test_an_aa_member_is_named_as_one_with_its_answer_and_a_thinking_cell_says_so():
    """An A/A cell (sweep.aa: the baseline's twin, pair name "A/A") is `A/A baseline` with its pair's name and its
    speedup against the baseline; `think` follows the settings."""
    from specsweep.grid.cells import AA

    aa = {**row(0, 1.01), "pair": AA, "verdict": "equivalent within ±5%"}
    assert mlflow_runs.run_name(aa, "tiny") == (
        "A/A baseline · c=4 · 1.01x [0.91, 1.11] equivalent within ±5% · tiny · data=synthetic")
    assert mlflow_runs.row_tags(aa)["speedup_e2e"] == "1.01x [0.91, 1.11]"
    assert mlflow_runs.run_name({**row(7, 1.2), "thinking": True, "method": "eagle3"}).startswith(
        "eagle3 K=7 · think · c=4 · 1.20x")


def test_the_digest_is_the_runs_and_moves_with_it(tmp_path):
    assert run(tmp_path / "a", 3).digest == run(tmp_path / "b", 3).digest
    assert run(tmp_path / "c", 3, speedup=1.5).digest != run(tmp_path / "a", 3).digest


def test_mlflows_compare_view_plots_the_speedup_against_k_by_default(tmp_path):
    """MLflow 3.17's compare view (ParallelCoordinatesPlotPanel) draws, by default, the first three params that
    differ between the runs, sorted by name, and the first metric they share, in the order the store returns
    them: the order they were logged."""
    k3, k7 = run(tmp_path / "a", 3), run(tmp_path / "b", 7, speedup=1.8)
    differ = sorted(p for p in k3.params.keys() | k7.params.keys() if k3.params.get(p) != k7.params.get(p))[:3]
    shared = [m[0] for m in k3.metrics if m[0] in {m[0] for m in k7.metrics}]
    assert (differ, shared[0]) == (["server_spec.num_speculative_tokens"], "speedup_e2e_geomean")


def test_a_new_default_store_is_a_copy_of_the_schema_made_once(tmp_path, monkeypatch):
    """The migrated empty schema is made once per MLflow version (tracking._schema_template); each new store is a
    copy that MLflow opens without migrating, with its Default experiment made where it is first opened."""
    from mlflow.tracking import MlflowClient

    from specsweep.read import tracking

    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    first, second = tmp_path / "a" / "mlflow.db", tmp_path / "b" / "mlflow.db"
    tracking.create_store(first, cache=cache)
    [template] = cache.glob("mlflow-*-schema.db")
    made = template.stat().st_mtime_ns
    tracking.create_store(second, cache=cache)
    assert template.stat().st_mtime_ns == made and first.read_bytes() == second.read_bytes()
    client = MlflowClient(tracking_uri=f"sqlite:///{second}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
    assert client.get_experiment("0").artifact_location.startswith(str(work))
    exp = client.create_experiment("specsweep")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "x", 1.0)
    assert client.get_run(run.info.run_id).data.metrics == {"x": 1.0}
    before = second.read_bytes()
    tracking.create_store(second, cache=cache)          # never over a store that exists
    assert second.read_bytes() == before

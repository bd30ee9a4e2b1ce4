"""Verdicts end to end without a server: a fake session measures the two-category dataset with latencies
set per K, run_bench_cell writes each cell's files, and the summary, K comparison, per-category table and
`specsweep compare` (test_compare.py) read them back."""
import csv
import json
import math
import random

import pandas as pd
import pytest
from helpers import DATA, ServerlessSession

from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.metrics import acceptance_from_lengths, request_figures
from specsweep.read import summary
from specsweep.read.study import Study
from specsweep.run.bench_cell import Measurement, run_bench_cell

TWO_CATEGORIES = DATA / "two_categories.jsonl"


class FakeSession(ServerlessSession):
    """Latency = the prompt's baseline latency / speedup[K], times log-normal noise; acceptance length per
    step from the category (math drafts well, writing poorly) and K."""
    def __init__(self, k: int, speedup: dict, noise: float, seed: int, bursty: tuple = (), degenerate: tuple = (),
                 starve: tuple = ()):
        self.k, self.speedup, self.noise, self.rng = k, speedup, noise, random.Random(seed)
        self.bursty = k in bursty          # every answer held back and sent at once, at the end
        self.degenerate = k in degenerate  # every answer a loop
        self.starve = k in starve          # prompt 0's stream decodes at a tenth of the others' rate

    def measure(self, prompts, bench, progress, desc):
        rows = []
        for i, turns in enumerate(prompts):
            for t, _ in enumerate(turns):
                e2e = (0.5 + 0.1 * i + 0.2 * t) / self.speedup[self.k] * math.exp(self.rng.gauss(0, self.noise))
                e2e *= 10 if self.starve and i == 0 else 1
                text = "and " * 20 if self.degenerate else f"answer {i}.{t}: the sum of {i} and {t} is {i + t}"
                row = {"index": i, "turn": t, "ok": True, "e2e_s": e2e, "ttft_s": 0.02, "completion_tokens": 40,
                       "prompt_tokens": 10, "itl_s": [], "text": text,
                       "chunk_t_s": [e2e - 0.01 if self.bursty else 0.02 + j * (e2e - 0.03) / 39 for j in range(40)],
                       "chunk_tokens": [1] * 40}
                if self.k:
                    row["acceptance_lengths"] = [min(self.k + 1, 4 if i % 2 == 0 else 2)] * 10
                rows.append(row)
        # in waves of `concurrency` streams, each wave starting when the one before it has finished
        for w in range(0, len(rows), bench["concurrency"]):
            wave = rows[w:w + bench["concurrency"]]
            for r in wave:
                r["start_s"] = rows[w - 1]["start_s"] + max(x["e2e_s"] for x in rows[w - bench["concurrency"]:w]) \
                    if w else 0.0
        figures = request_figures(rows, wall_s=sum(r["e2e_s"] for r in rows) / bench["concurrency"])
        lengths = [n for r in rows for n in r.get("acceptance_lengths", [])]
        figures["spec_decode"] = acceptance_from_lengths(lengths, self.k + 1) if self.k else None
        return Measurement(rows, figures)


def study(results, speedup, noise=0.03, seed=0, extra=(), bursty=(), degenerate=(), starve=(), name="v"):
    """A study on the two-category file, K in the speedup dict, every cell measured by FakeSession."""
    ks = sorted(k for k in speedup if k)
    grid = expand(compose_jobs([f"results_dir={results}", f"study={name}", "dataset=jsonl", f"dataset.path={TWO_CATEGORIES}",
                                f"sweep.num_speculative_tokens=[{','.join(map(str, ks))}]", "sweep.repeats=2",
                                "pair.target=/nonexistent/target", "pair.drafter=/nonexistent/drafter",
                                "pair.built_by_workflow=false", *extra]))
    order = sorted(grid.servers, key=lambda s: grid.servers[s].spec["num_speculative_tokens"])   # baseline first
    for n, sid in enumerate(order):
        k = grid.servers[sid].spec["num_speculative_tokens"]
        for m, bid in enumerate(sorted(grid.benches[sid])):
            run_bench_cell(grid, sid, bid, FakeSession(k, speedup, noise, seed + 10 * n + m, bursty, degenerate, starve),
                           progress=False)
    return grid


def summarize(grid, name="v"):
    """What the summarize rule does: the study's three tables, each at its place in the results tree."""
    f = grid.study_files(name)
    return summary.write_summary(Study.load(f.dir, grid), f.summary, f.k_comparison, f.by_category)


def ingest_args(grid, name="v"):
    """The ingest rule's inputs and output after the study, for tracking.ingest."""
    f = grid.study_files(name)
    return (f.summary, f.k_comparison, f.by_category, f.plots, f.env, f.dir / "mlflow.done")


@pytest.fixture
def verdict_study(tmp_path):
    grid = study(tmp_path / "results", {0: 1.0, 3: 1.5, 7: 1.5})
    table = summarize(grid)
    return grid, table, tmp_path / "results" / "v"


def test_each_cell_records_its_verdict_and_the_prompt_categories(verdict_study):
    grid, _, _ = verdict_study
    [(sid, bid)] = [(s, b) for s, b in grid.cells_of_study("v") if "-k3-" in s][:1]
    m = json.loads(grid.metrics_path(sid, bid).read_text())
    assert m["verdict"] == "faster" and m["speedup_e2e_ci_low"] > 1.3 and m["paired_prompts"] == 12
    assert m["paired_requests"] == 18 and len(m["prompts_sha256"]) == 64
    reqs = [json.loads(line) for line in open(grid.bench_dir(sid, bid) / "requests.jsonl")]
    assert {r["category"] for r in reqs} == {"math", "writing"}


def test_summary_pools_repeats_into_one_verdict_per_cell(verdict_study):
    _, table, _ = verdict_study
    spec = table[table.method != "none"].set_index("num_speculative_tokens")
    assert list(spec.verdict) == ["faster", "faster"]
    assert (spec.paired_prompts == 12).all() and (spec.paired_requests == 36).all()   # 2 repeats x 18 requests
    assert (spec.speedup_e2e_ci_low > 1.3).all() and (spec.speedup_streamed_tpot_ci_low > 1.3).all()
    assert spec.speedup_output_tok_s_ci_low.isna().all()          # 2 repeats: a tok/s ratio, but no CI
    base = table[table.method == "none"].iloc[0]
    assert base.speedup_output_tok_s == 1.0 and pd.isna(base.verdict)


def test_repeat_agreement_compares_a_cell_with_its_first_repeat_at_concurrency_1_only(tmp_path):
    grid = study(tmp_path / "results", {0: 1.0, 3: 1.5}, extra=["sweep.concurrency=[1,2]",
                                                               "sweep.set_acceptance=[null,2.0]"])
    [(sid, bid)] = [(s, b) for s, b in grid.cells_of_study("v") if grid.servers[s].spec["num_speculative_tokens"]
                    and not grid.servers[s].sets_acceptance and grid.benches[s][b].spec["concurrency"] == 1
                    and grid.benches[s][b].spec["repeat"] == 1]
    path = grid.bench_dir(sid, bid) / "requests.jsonl"
    reqs = [json.loads(line) for line in path.read_text().splitlines()]
    reqs[0]["text"] += " after the wake"
    path.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    got = {(r["server_cell"], r["concurrency"]): (r["repeat_agreement"], r["repeat_agreement_na"])
           for r in summary.rows(Study.load(tmp_path / "results" / "v", grid))}
    base = grid.baseline_of[sid]
    [set_sid] = [s for s in grid.servers if grid.servers[s].sets_acceptance]
    assert got[sid, 1] == (17 / 18, None) and got[base, 1] == (1.0, None)     # 18 requests, one changed
    assert got[sid, 2] == got[base, 2] == (None, "concurrency above 1: batch composition varies between repeats; "
                                                 "vLLM is not batch-invariant")
    assert got[set_sid, 1] == (None, "set acceptance: the text is not the target's")
    # every request of one repeat of the cell decoded tokens but no text (random weights' special tokens): neither
    # agreement can say anything of that cell, whatever its metrics.json recorded
    for r in reqs:
        r["text"] = ""
    path.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    blank = {(r["server_cell"], r["concurrency"]): r for r in summary.rows(Study.load(tmp_path / "results" / "v", grid))}
    assert blank[sid, 1]["greedy_agreement"] is None and blank[sid, 1]["repeat_agreement"] is None
    assert blank[sid, 1]["greedy_agreement_na"].startswith("18 request(s) decoded tokens but returned no text")
    assert blank[sid, 1]["repeat_agreement_na"] == blank[sid, 1]["greedy_agreement_na"]
    assert blank[base, 1]["greedy_agreement"] == 1.0 and blank[base, 1]["greedy_agreement_na"] is None
    sampled = study(tmp_path / "sampled", {0: 1.0, 3: 1.5}, extra=["sweep.concurrency=[1]", "sweep.temperature=0.7"],
                    name="s")
    assert {r["repeat_agreement_na"] for r in summary.rows(Study.load(tmp_path / "sampled" / "s", sampled))} == \
        {"sampled (temperature > 0): the text differs between repeats by chance"}


def test_a_cell_of_bursty_streams_has_no_streamed_figures_in_its_metrics_or_the_summary(tmp_path):
    grid = study(tmp_path / "results", {0: 1.0, 3: 1.5, 7: 1.5}, bursty=(3,))
    table = summarize(grid).set_index(
        "num_speculative_tokens")
    for sid, bid in grid.cells_of_study("v"):
        m = json.loads(grid.metrics_path(sid, bid).read_text())
        k = grid.servers[sid].spec["num_speculative_tokens"]
        assert (m["bursty_streams"] == 18, m["streamed_figures_invalid"] is not None) == (k == 3, k == 3)
        assert (m["streamed_tpot_ms"]["mean"] is None, m.get("speedup_streamed_tpot_geomean") is None) == \
            (k == 3, k != 7)
        assert m["valid"] and m.get("verdict") == (None if k == 0 else "faster")     # e2e and its verdict stay
    streamed = ["streamed_tpot_ms", "streamed_itl_ms_median", "speedup_streamed_tpot_geomean",
                "speedup_streamed_tpot_ci_low"]
    assert table.loc[3, streamed].isna().all() and table.loc[3, "verdict"] == "faster"
    assert table.loc[3, "streamed_figures_invalid"].startswith("repeat 1 of 2: 18 of 18 streams arrived in a burst")
    assert table.loc[3, "speedup_streamed_tpot_na"].startswith("this cell repeat 1 of 2: 18 of 18 streams")
    assert table.loc[3, "bursty_streams"] == 36 and table.loc[3, "e2e_ms_per_output_token"] > 0
    assert table.loc[7, streamed].notna().all() and table.loc[0, "streamed_tpot_ms"] > table.loc[7, "streamed_tpot_ms"]
    assert table.loc[[0, 7], "streamed_figures_invalid"].isna().all()
    assert pd.isna(table.loc[7, "speedup_streamed_tpot_na"])     # no reason: shown (NaN in pandas 3, None in 2)
    # K=7 against K=3: K=3's streams fail, so the K comparison carries no TPOT ratio, only its reason
    [k] = summary.k_comparison(Study.load(tmp_path / "results" / "v", grid))
    assert k["speedup_streamed_tpot_geomean"] is None and k["speedup_streamed_tpot_na"].startswith("K=3 repeat 1")
    summary.assert_consistent(table.reset_index())
    # the pages put the paired streamed TPOT beside the verdict, and the reason where it is blank
    from specsweep.read.pages import summary_page

    summary_page(tmp_path / "results" / "v" / "summary.csv", tmp_path / "results" / "v" / "k_comparison.csv",
                 tmp_path / "summary.html")
    first = (tmp_path / "summary.html").read_text().split("</table>")[0]     # "The figures to read first"
    assert "<th>speedup_streamed_tpot_geomean</th>" in first and "<th>speedup_streamed_tpot_na</th>" in first
    assert "this cell repeat 1 of 2: 18 of 18 streams arrived in a burst" in first
    # MLflow's configuration runs, tagged from the summary rows: the streamed TPOT for K=7, the reason for K=3
    from specsweep.core import table as tables
    from specsweep.read.mlflow_runs import row_tags

    by_k = {r["num_speculative_tokens"]: row_tags(r) for r in tables.read(tmp_path / "results" / "v" / "summary.csv")}
    assert "speedup_streamed_tpot" not in by_k[3] and \
        by_k[3]["speedup_streamed_tpot_na"].startswith("this cell repeat 1 of 2")
    assert by_k[3]["streamed_figures_invalid"].startswith("repeat 1 of 2: 18 of 18 streams")
    assert by_k[7]["speedup_streamed_tpot"].startswith("1.5") and "speedup_streamed_tpot_na" not in by_k[7]


def test_k_comparison_says_equal_ks_are_equivalent(verdict_study, capsys):
    grid, _, out = verdict_study
    [k] = list(csv.DictReader(open(out / "k_comparison.csv")))
    assert (k["k_a"], k["k_b"], k["verdict"], k["resolved"]) == ("7", "3", "equivalent within ±5%", "True")
    assert k["statement"].startswith("K=7 vs K=3: ") and k["statement"].endswith("equivalent within ±5%")
    assert (k["looks"], k["stopped"]) == ("1", "fixed")         # a fixed study is read once, at its budget
    summarize(grid)      # the summarize job prints the verdicts
    printed = capsys.readouterr().out
    assert "e2e speedup 1.5" in printed and "faster (12 prompts, 2 repeat(s), 1 look(s), stopped: fixed)" in printed
    assert "within noise" not in printed and "borderline" not in printed
    assert printed.rstrip().endswith(k["statement"])


def test_k_comparison_resolves_a_real_difference(tmp_path, capsys):
    grid = study(tmp_path / "results", {0: 1.0, 3: 1.2, 7: 1.8})
    [k] = summary.k_comparison(Study.load(tmp_path / "results" / "v", grid))
    assert k["resolved"] and k["verdict"] == "faster" and k["speedup_e2e_geomean"] == pytest.approx(1.5, rel=0.05)
    assert k["statement"].endswith("] K=7 faster")


def test_per_category_acceptance_and_speedup(verdict_study):
    _, _, out = verdict_study
    cats = {(r["num_speculative_tokens"], r["category"]): r for r in csv.DictReader(open(out / "summary_by_category.csv"))}
    assert set(cats) == {("3", "math"), ("3", "writing"), ("7", "math"), ("7", "writing")}
    assert float(cats["3", "math"]["mean_acceptance_length"]) == pytest.approx(4.0)
    assert float(cats["7", "writing"]["mean_acceptance_length"]) == pytest.approx(2.0)
    assert cats["3", "math"]["prompts"] == "6" and cats["3", "math"]["verdict"] == "faster"


def test_plots_include_the_category_heatmap(verdict_study):
    from specsweep.read.plots import plot_study

    _, _, out = verdict_study
    paths = plot_study(out / "summary.csv", out / "summary_by_category.csv", out / "plots")
    assert out / "plots" / "category_by_k.png" in paths and all(p.exists() for p in paths)


def test_mlflow_has_one_run_per_configuration_with_its_verdict_and_repeats_as_steps(verdict_study):
    """Each summary row is one run: its pooled verdict, speedup and CI to filter on, each repeat's figures as
    metric steps. A re-ingest adds nothing; a row that changed replaces its run; an old-layout store is refused."""
    import csv

    from mlflow.tracking import MlflowClient

    from specsweep.core import table as tables
    from specsweep.core.errors import TrackingError
    from specsweep.read import tracking

    grid, _, out = verdict_study
    (out / "env.json").write_text("{}")
    args = ingest_args(grid)
    first = tracking.ingest(Study.load(out, grid), *args)
    client = MlflowClient(tracking_uri=grid.tracking_uri("v"))
    exp = client.get_experiment_by_name("specsweep")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert first["url"].endswith(f"/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning")
    configs = client.search_runs([exp.experiment_id], filter_string="tags.`specsweep.kind` = 'configuration'")
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert first["runs_added"] == len(configs) == len(rows) == 3
    faster = client.search_runs([exp.experiment_id], filter_string="tags.verdict = 'faster'")
    assert {r.data.tags["K"] for r in faster} == {"3", "7"}
    for run in faster:
        row = next(x for x in rows if x["num_speculative_tokens"] == run.data.tags["K"])
        assert run.info.run_name == (f"K={row['num_speculative_tokens']} · c=4 · {run.data.tags['speedup_e2e']} faster"
                                     " · tiny · data=jsonl")
        for figure in tables.metric_names():        # every figure of the summary's own, none recomputed
            if row[figure] and tables.columns(tables.SUMMARY)[figure].encoding != tables.JSON:   # a list: `.<i>`
                assert run.data.metrics[figure] == pytest.approx(float(row[figure]))
        assert run.data.metrics["speedup_e2e_ci_low"] > 1.3 and run.data.tags["speedup_e2e"].startswith("1.")
        assert run.data.tags["stopped"] == "fixed" and run.data.metrics["looks"] == 1      # read once, at its budget
        assert "per_position_acceptance.0" in run.data.metrics
        steps = client.get_metric_history(run.info.run_id, "repeat.speedup_e2e_geomean")
        assert sorted(m.step for m in steps) == [0, 1]          # two repeats
        assert run.data.tags["specsweep.cell_id"] == f"{row['server_cell']}/jsonl-t0-c4"
    [k7] = [r for r in faster if r.data.tags["K"] == "7"]            # K against K, on the larger K's run
    [statement] = [x["statement"] for x in csv.DictReader(open(out / "k_comparison.csv"))]
    assert statement == f"K=7 vs K=3: {k7.data.tags['vs_K3']}" and "equivalent within ±5%" in statement
    [base] = [r for r in configs if r.data.tags["method"] == "none"]

    assert base.info.run_name == "baseline · c=4 · tiny · data=jsonl" and "verdict" not in base.data.tags
    [study] = client.search_runs([exp.experiment_id], filter_string="tags.`specsweep.kind` = 'study'")
    assert {r.data.tags["mlflow.parentRunId"] for r in configs} == {study.info.run_id}    # nested under the study
    assert {"k_comparison.csv", "summary_by_category.csv"} <= {a.path for a in client.list_artifacts(study.info.run_id)}

    again = tracking.ingest(Study.load(out, grid), *args)
    assert (again["runs_added"], again["runs_replaced"]) == (0, 0)
    assert again["configurations"] == first["configurations"]

    table = (out / "summary.csv").read_text()          # a row that moved (say, more repeats) replaces its run
    k3 = next(x for x in rows if x["num_speculative_tokens"] == "3")
    (out / "summary.csv").write_text(table.replace(k3["speedup_e2e_ci_high"], "1.99", 1))
    moved = tracking.ingest(Study.load(out, grid), *args)
    assert (moved["runs_added"], moved["runs_replaced"]) == (1, 1)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`specsweep.kind` = 'configuration'")
    assert len(runs) == 3 and len({r.data.tags["specsweep.cell_id"] for r in runs}) == 3
    assert client.get_run(moved["configurations"][f"{k3['server_cell']}/jsonl-t0-c4"]).data.metrics[
        "speedup_e2e_ci_high"] == 1.99

    client.create_run(exp.experiment_id, tags={"specsweep.kind": "bench_cell", "specsweep.read.study": "old"})
    with pytest.raises(TrackingError) as refused:
        tracking.ingest(Study.load(out, grid), *args)
    message = str(refused.value)
    assert "this store was written by specsweep's per-repeat layout" in message and "\n" not in message
    assert f"delete {tracking.default_store(grid)}" in message


def test_configuration_run_names_read_like_the_configuration():
    from specsweep.core.labels import config_id, label

    row = {"pair": "tiny", "method": "dflash", "num_speculative_tokens": 7, "set_acceptance": None, "backend": "vllm",
           "dataset": "synthetic", "thinking": False, "concurrency": 4, "server_cell": "tiny-dflash-k7-ab12"}
    assert label(row) == "tiny · dflash K=7 · data=synthetic · c=4"
    assert config_id(row) == "tiny-dflash-k7-ab12/synthetic-t0-c4"
    assert label({**row, "set_acceptance": 3.0}) == "tiny · dflash K=7 · AL set 3.0 · data=synthetic · c=4"
    assert label({**row, "set_acceptance": [0.9, 0.6]}).startswith("tiny · dflash K=7 · AL set 2.5 (rates) ·")
    assert label({**row, "thinking": True, "backend": "sglang"}) == \
        "tiny · dflash K=7 · sglang · data=synthetic · think · c=4"
    base = {**row, "pair": "baseline", "method": "none", "num_speculative_tokens": 0}
    assert label(base, "tiny") == "tiny · baseline · data=synthetic · c=4"

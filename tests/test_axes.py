"""The length axes (sweep.max_tokens as a list, sweep.prompt_length) and acceptance by phase in the summary: ids,
columns, the multirun over output length, the too-long prompt refusal, and prompt lengthening (docs/axes.md)."""
import pytest
from helpers import DATA, ServerlessSession

from specsweep.core.errors import CellError, ConfigError
from specsweep.core.table import AXES, names
from specsweep.grid.cells import BenchCell, expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import lengthen
from specsweep.metrics import acceptance_from_lengths, request_figures
from specsweep.plan.checks import check_prompt_length
from specsweep.read import summary
from specsweep.read.study import Study
from specsweep.run.bench_cell import Measurement, run_bench_cell

TWO_CATEGORIES = DATA / "two_categories.jsonl"


def jobs(results, *extra):
    """A study in the fixed design (sweep=default), whose ids predate waves."""
    return compose_jobs([f"results_dir={results}", "study=ax", "sweep=default", "dataset=jsonl",
                         f"dataset.path={TWO_CATEGORIES}",
                         "sweep.num_speculative_tokens=[3]", "sweep.repeats=2", "sweep.rounds=1",
                         "pair.target=/nonexistent/target", "pair.drafter=/nonexistent/drafter",
                         "pair.built_by_workflow=false", *extra])


def bench_ids(grid):
    return {bid for sid in grid.servers for bid in grid.benches[sid]}


def test_a_scalar_max_tokens_and_a_list_of_one_give_the_same_ids(tmp_path):
    scalar, listed = expand(jobs(tmp_path, "sweep.max_tokens=64")), expand(jobs(tmp_path, "sweep.max_tokens=[64]"))
    assert set(scalar.servers) == set(listed.servers) and bench_ids(scalar) == bench_ids(listed)
    # and prompt_length null leaves them alone too
    assert bench_ids(expand(jobs(tmp_path, "sweep.prompt_length=null"))) == bench_ids(scalar)


def test_each_output_length_is_its_own_bench_cell(tmp_path):
    grid = expand(jobs(tmp_path, "sweep.max_tokens=[16,32,64]"))
    for sid in grid.servers:
        lengths = sorted(b.spec["max_tokens"] for b in grid.benches[sid].values())
        assert lengths == [16, 16, 32, 32, 64, 64]           # 3 lengths x 2 repeats
    # the list gives the cells a multirun over the same lengths gives (one job per length)
    multirun = expand([j for mt in (16, 32, 64) for j in jobs(tmp_path, f"sweep.max_tokens={mt}")])
    assert bench_ids(multirun) == bench_ids(grid) and set(multirun.servers) == set(grid.servers)


def test_prompt_length_ids_name_the_length_and_leave_old_ids(tmp_path):
    grid = expand(jobs(tmp_path, "sweep.prompt_length=[64,128]"))
    names = sorted(bench_ids(grid))
    assert any("-p64-" in n for n in names) and any("-p128-" in n for n in names)
    spec = next(iter(next(iter(grid.benches.values())).values())).spec
    assert BenchCell({**spec, "prompt_length": None}).id == BenchCell({k: v for k, v in spec.items()
                                                                       if k != "prompt_length"}).id


class PhaseSession(ServerlessSession):
    """Every answer: 1 prefill token and 4 steps at K=3 accepting [3, 3, 0, 1] (thinking) then [2, 2] (answer)
    with </think> at position 10, or no steps for the baseline; latency falls with max_tokens' cell."""
    def __init__(self, k):
        self.k = k

    def measure(self, prompts, bench, progress, desc):
        acc = [3, 3, 0, 1, 2, 2]
        n = 1 + sum(a + 1 for a in acc)
        rows = []
        for i, turns in enumerate(prompts):
            e2e = bench["max_tokens"] / 100 / (1.5 if self.k else 1.0) * (1 + 0.01 * i)
            row = {"index": i, "turn": 0, "ok": True, "e2e_s": e2e, "ttft_s": 0.01, "completion_tokens": n,
                   "prompt_tokens": 10, "itl_s": [], "text": f"a{i}", "chunk_t_s": [0.01, e2e], "chunk_tokens": [1, n - 1]}
            if self.k:
                row.update(acceptance_lengths=[a + 1 for a in acc], per_step_accepted=acc,
                           per_step_drafted=[3] * len(acc), think_end=10 if bench["thinking"] else None)
            rows.append(row)
        figures = request_figures(rows, wall_s=sum(r["e2e_s"] for r in rows))
        lengths = [x for r in rows for x in r.get("acceptance_lengths", [])]
        figures["spec_decode"] = acceptance_from_lengths(lengths, self.k + 1) if self.k else None
        return Measurement(rows, figures)


def run_study(grid):
    for sid in sorted(grid.servers, key=lambda s: grid.servers[s].spec["num_speculative_tokens"]):   # baseline first
        for bid in sorted(grid.benches[sid]):
            run_bench_cell(grid, sid, bid, PhaseSession(grid.servers[sid].spec["num_speculative_tokens"]),
                           progress=False)
    f = grid.study_files("ax")
    return summary.rows(Study.load(f.dir, grid))


def test_a_multirun_over_max_tokens_gives_rows_told_apart(tmp_path):
    grid = expand([j for mt in (16, 64) for j in jobs(tmp_path / "results", f"sweep.max_tokens={mt}")])
    table = run_study(grid)
    keys = [(r["server_cell"], r["max_tokens"]) for r in table]
    assert len(keys) == len(set(keys)) == 4                  # baseline and K=3, each at 16 and 64
    assert all(r["repeats"] == 2 for r in table)             # not one row of both lengths' repeats
    assert {r["max_tokens"] for r in table} == {16, 64} and all(r["prompt_length"] is None for r in table)


def test_phase_columns_in_the_summary(tmp_path):
    table = run_study(expand(jobs(tmp_path / "results", "sweep.thinking=[false,true]")))
    spec = {r["thinking"]: r for r in table if r["method"] != "none"}
    on, off = spec[True], spec[False]
    # </think> at 10: steps start at 1, 5, 9, 10 (thinking: starts <= 10), then 12, 15 (answer)
    prompts = sum(1 for line in open(TWO_CATEGORIES) if line.strip())
    assert on["phase_split_na"] is None and on["phase_requests"] == 2 * prompts       # every request, 2 repeats
    assert on["think_acceptance_length"] == pytest.approx(1 + 7 / 4)
    assert on["answer_acceptance_length"] == pytest.approx(3.0)
    assert on["think_acceptance_rate"] == pytest.approx(7 / 12)
    assert on["think_per_position_acceptance"] == pytest.approx([0.75, 0.5, 0.5])
    assert on["think_token_share"] == pytest.approx(11 / 18)
    assert on["think_acceptance_length_ci_low"] <= on["think_acceptance_length"] <= on["think_acceptance_length_ci_high"]
    assert off["think_acceptance_length"] is None and off["answer_token_share"] == 1.0
    assert off["answer_acceptance_length"] == pytest.approx(1 + 11 / 6)
    base = next(r for r in table if r["method"] == "none")
    assert base["phase_split_na"] == "baseline: no drafts"
    assert set(names(AXES)) <= set(on)


def test_a_prompt_too_long_for_the_server_is_refused_in_one_line(tmp_path):
    [cfg] = jobs(tmp_path, "server.max_model_len=512", "sweep.prompt_length=[128,480]", "sweep.max_tokens=64")
    check = check_prompt_length(cfg, {})
    assert check.status == "fail" and "\n" not in check.message
    assert "480" in check.message and "max_model_len=512" in check.message
    [cfg] = jobs(tmp_path, "server.max_model_len=512", "sweep.prompt_length=[128,400]", "sweep.max_tokens=64")
    assert check_prompt_length(cfg, {}).status == "pass"


def test_lengthen_uses_the_datasets_own_text_and_keeps_the_question():
    words = lambda text: text.split(" ")  # noqa: E731 - a tokenizer of words, for exact counts
    prompts = [["one two three"], ["four five"], ["six seven eight nine", "second turn"]]
    out = lengthen(prompts, 6, words, " ".join)
    assert [len(words(p[0])) for p in out] == [6, 6, 6]
    assert out[0][0].endswith("one two three") and "four" in out[0][0]          # the next prompt's text first
    assert out[2] == [out[2][0], "second turn"] and out[2][0].endswith("six seven eight nine")
    assert lengthen([["a b c d e f g h"]], 3, words, " ".join) == [["f g h"]]    # a long question keeps its end


def test_the_length_and_phase_plots(tmp_path):
    import pandas as pd

    from specsweep.read.plots import acceptance_by_phase, k_styles, speedup_vs_output_length, speedup_vs_prompt_length

    grid = expand(jobs(tmp_path / "results", "sweep.max_tokens=[16,32,64]", "sweep.thinking=[true]"))
    table = pd.DataFrame(run_study(grid))
    styles = k_styles(table)
    assert speedup_vs_output_length(table, styles, tmp_path / "o.png") is True
    assert (tmp_path / "o.png").stat().st_size > 0
    assert speedup_vs_prompt_length(table, styles, tmp_path / "p.png") is False      # one (unset) prompt length
    assert acceptance_by_phase(table, styles, tmp_path / "ph.png") is True
    blank = table.assign(think_acceptance_length=None, answer_acceptance_length=None)
    assert acceptance_by_phase(blank, styles, tmp_path / "none.png") is False


def test_waves_send_the_datasets_first_waves_x_concurrency_prompts_and_leave_old_ids(tmp_path):
    """sweep.waves: each turn the dataset's first waves x concurrency prompts, or with `all` every prompt at any
    concurrency (the wave barrier itself, a short last wave included: test_client.py); null keeps the ids of a study
    made before the option; too small a dataset, or a word other than `all`, is refused."""
    plain = expand(jobs(tmp_path, "sweep.concurrency=[1,2]"))
    assert bench_ids(expand(jobs(tmp_path, "sweep.concurrency=[1,2]", "sweep.waves=null"))) == bench_ids(plain)
    grid = expand(jobs(tmp_path / "results", "sweep.concurrency=[1,2]", "sweep.waves=3"))
    assert not bench_ids(grid) & bench_ids(plain)
    sent = {}

    class Counting(PhaseSession):
        def measure(self, prompts, bench, progress, desc):
            sent[bench["concurrency"]] = len(prompts)
            return super().measure(prompts, bench, progress, desc)

    sid = next(s for s in grid.servers if grid.servers[s].is_baseline)
    for bid in grid.benches[sid]:
        run_bench_cell(grid, sid, bid, Counting(0), progress=False)
    assert sent == {1: 3, 2: 6}                              # of the dataset's 12
    with pytest.raises(ConfigError, match="dataset.num_prompts=8"):
        expand(jobs(tmp_path, "sweep.concurrency=[1,2]", "sweep.waves=4", "dataset.num_prompts=6"))
    with pytest.raises(ConfigError, match="sweep.waves: 'most' is not valid"):     # the schema's line
        expand(jobs(tmp_path, "sweep.waves=most"))
    every = expand(jobs(tmp_path / "r3", "sweep.concurrency=[1,5]", "sweep.waves=all"))   # every prompt, any concurrency
    assert not bench_ids(every) & bench_ids(plain)
    sent.clear()
    sid = next(s for s in every.servers if every.servers[s].is_baseline)
    for bid in every.benches[sid]:
        run_bench_cell(every, sid, bid, Counting(0), progress=False)
    assert sent == {1: 12, 5: 12}
    big = expand(jobs(tmp_path / "r2", "sweep.concurrency=[4]", "sweep.waves=4"))   # 16 of 12: the cell says so
    sid = next(s for s in big.servers if big.servers[s].is_baseline)
    with pytest.raises(CellError, match="needs 16 prompts, but the dataset holds 12"):
        run_bench_cell(big, sid, next(iter(big.benches[sid])), Counting(0), progress=False)

"""Where a greedy member's text leaves its baseline's (metrics/divergence.py, sweep.divergence): the first differing
token found from both servers' token ids, the probe's margins read, and run_bench_cell probing on the cell's own
session after its timing. Exact logic on given rows and a deterministic probe."""
import json

import pytest
from test_bench_cell import FixedSession, STEPS, cells, counters, rows
from test_metrics import rec

from specsweep.core.errors import ServerError
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.metrics import divergence
from specsweep.read import summary
from specsweep.read.study import Study
from specsweep.run.bench_cell import run_bench_cell


def row(index, ids, prompt=(7, 8)):
    return {**rec(index, tokens=len(ids), text=" ".join(map(str, ids))), "token_ids": list(ids),
            "prompt_token_ids": list(prompt)}


def test_the_first_difference_counts_an_early_end():
    assert divergence.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert divergence.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert divergence.first_difference([1, 2], [1, 2, 3]) == 2


def test_each_differing_request_is_located_at_its_first_differing_token_with_the_shared_prefix():
    base = [row(0, [1, 2, 3]), row(1, [4, 5, 6]), row(2, [9, 9, 9])]
    cell = [row(0, [1, 2, 3]), row(1, [4, 7, 7]), row(2, [9, 9])]      # 1 parts at 1; 2 only ended sooner
    found, why = divergence.located(cell, base)
    assert found == [{"index": 1, "turn": 0, "position": 1, "baseline_token": 5, "cell_token": 7,
                      "prefix": [7, 8, 4]}]
    assert "1 differing request(s) have no differing token to probe" in why
    no_ids = [{**r, "token_ids": None} for r in cell]
    assert divergence.located(no_ids, base)[0] == []
    many = [row(i, [1, 2]) for i in range(10)], [row(i, [1, 3]) for i in range(10)]
    found, why = divergence.located(*many, limit=8)
    assert len(found) == 8 and why == "2 more differing request(s) not probed (the first 8 are)"
    assert divergence.MAX_PROBES >= 16      # a GPU preset's 16 prompts are all probed


def test_margins_are_read_from_the_probe_and_a_token_outside_the_top_gives_a_bound():
    near = {"index": 0, "turn": 0, "position": 3, "baseline_token": 5, "cell_token": 7,
            "logprobs": {5: -1.00, 7: -1.02, 9: -3.0}}
    far = {**near, "index": 1, "logprobs": {5: -0.1, 9: -4.0}}          # the cell's token is not in the top
    failed = {**near, "index": 2, "error": "/v1/completions with logprobs: HTTPStatusError: 400"}
    nothing = {**near, "index": 3, "logprobs": {}}                       # a probe that returned no logprobs
    assert divergence.explained([nothing], None)["greedy_divergences"][0]["margin"] is None
    got = divergence.explained([near, far, failed], None)
    first, second, third = got["greedy_divergences"]
    assert first["margin"] == pytest.approx(0.02) and first["probe_top_token"] == 5
    assert second["margin"] is None and second["margin_at_least"] == pytest.approx(3.9)
    assert got["greedy_divergence_margin"] == pytest.approx(3.9) and third["error"].endswith("400")
    assert got["greedy_divergence_na"] == "1 probe(s) failed: /v1/completions with logprobs: HTTPStatusError: 400"


class ProbingSession(FixedSession):
    """A session with vLLM's probe: given log-probabilities per prefix; records the prefixes asked."""

    def __init__(self, rows, counted, answers):
        super().__init__(rows, counted)
        self.answers, self.asked = answers, []

    def next_token_logprobs(self, prefix, top):
        self.asked.append((list(prefix), top))
        got = self.answers.get(tuple(prefix))
        if got is None:
            raise ServerError("/v1/completions with logprobs: HTTPStatusError: 400")
        return got


@pytest.fixture
def grid(tmp_path):
    grid = expand(compose_jobs([f"results_dir={tmp_path}", "pair=tiny-ngram", "sweep.num_speculative_tokens=3",
                                "dataset.num_prompts=2", "sweep.divergence=true"]))
    bench = next(iter(next(iter(grid.benches.values())).values())).spec
    materialise(bench["dataset"], grid.dataset_file(bench["dataset"]))
    return grid


def with_ids(rs, ids):
    return [{**r, "token_ids": i, "prompt_token_ids": [7, 8], "text": " ".join(map(str, i))} for r, i in zip(rs, ids)]


def test_a_greedy_cell_whose_text_parts_is_probed_on_its_own_server_after_its_timing(grid):
    sid, base, bid = cells(grid)
    ids = [list(range(12)), list(range(10))]
    run_bench_cell(grid, base, bid, FixedSession(with_ids(rows(), ids), None, None), progress=False)
    parted = [ids[0], ids[1][:4] + [99] * 6]                           # prompt 1 parts at token 4
    session = ProbingSession(with_ids(rows(), parted), counters(STEPS), {(7, 8, 0, 1, 2, 3): {4: -0.7, 99: -0.71}})
    m = run_bench_cell(grid, sid, bid, session, progress=False)
    assert m["greedy_agreement"] == 0.5 and session.asked == [([7, 8, 0, 1, 2, 3], divergence.TOP)]
    [d] = m["greedy_divergences"]
    assert (d["index"], d["position"], d["baseline_token"], d["cell_token"]) == (1, 4, 4, 99)
    assert d["margin"] == pytest.approx(0.01) and m["greedy_divergence_margin"] == pytest.approx(0.01)
    assert m["greedy_divergence_na"] is None and m["valid"]
    [row] = [r for r in summary.rows(Study.load(grid.study_files(grid.servers[sid].study).dir, grid))
             if r["method"] != "none"]
    assert row["greedy_agreement"] == 0.5 and row["greedy_divergence_margin"] == pytest.approx(0.01)   # the table's


def test_agreeing_texts_and_a_backend_without_a_probe(grid):
    sid, base, bid = cells(grid)
    ids = [list(range(12)), list(range(10))]
    run_bench_cell(grid, base, bid, FixedSession(with_ids(rows(), ids), None, None), progress=False)
    same = ProbingSession(with_ids(rows(), ids), counters(STEPS), {})
    m = run_bench_cell(grid, sid, bid, same, progress=False)
    assert m["greedy_agreement"] == 1.0 and same.asked == [] and "greedy_divergences" not in m
    parted = FixedSession(with_ids(rows(), [ids[0], [5] * 10]), counters(STEPS))
    m = run_bench_cell(grid, sid, bid, parted, progress=False)
    assert m["greedy_divergences"] == [] and m["greedy_divergence_margin"] is None
    assert m["greedy_divergence_na"] == "1 divergence(s) not probed: this backend has no log-probability probe"


def test_a_cell_that_ran_before_its_baseline_says_it_was_not_probed(grid):
    sid, base, bid = cells(grid)
    ids = [list(range(12)), list(range(10))]
    parted = ProbingSession(with_ids(rows(), [ids[0], [5] * 10]), counters(STEPS), {})
    assert run_bench_cell(grid, sid, bid, parted, progress=False)["greedy_agreement"] is None    # no baseline yet
    run_bench_cell(grid, base, bid, FixedSession(with_ids(rows(), ids), None, None), progress=False)
    m = json.loads(grid.metrics_path(sid, bid).read_text())      # compared when its baseline finished
    assert m["greedy_agreement"] == 0.5 and parted.asked == [] and m["greedy_divergences"] == []
    assert m["greedy_divergence_na"].startswith("this cell ran before its baseline's")

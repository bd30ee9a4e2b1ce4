"""run_bench_cell's own bookkeeping on a session that returns fixed rows and counts: where the per-request
acceptance comes from, its exactness against the counters, validity, and the output-length warning."""
import json

import pytest
from test_metrics import rec, vllm_spec

from specsweep import metrics
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.run.bench_cell import Measurement, run_bench_cell

STEPS = [[3, 3, 0], [1, 0, 0, 2]]        # accepted drafts per verify step of two requests, K = 3


class FixedSession:
    """A backend session whose measurement is given: rows, and the counter deltas a server would report."""
    log_path = None

    def __init__(self, rows, counted=None, level="detailed"):
        self.rows, self.counted, self.level = rows, counted, level

    def alive(self):
        return True

    def log_tail(self):
        return ""

    def measure(self, prompts, bench, progress, desc):
        figures = metrics.request_figures(self.rows, 1.0)
        figures["spec_decode"] = metrics.acceptance(self.counted) if self.counted else None
        figures["per_request_spec_metrics"] = self.level
        return Measurement(self.rows, figures, per_request_asked=self.level)


def counters(steps, k=3, extra_drafts=0):
    flat = [a for s in steps for a in s]
    return metrics.SpecCounters(drafts=float(len(flat) + extra_drafts), draft_tokens=float(k * len(flat)),
                                  accepted=float(sum(flat)),
                                  per_pos={p: float(sum(a > p for a in flat)) for p in range(k)})


@pytest.fixture
def grid(tmp_path):
    grid = expand(compose_jobs([f"results_dir={tmp_path}", "pair=tiny-ngram", "sweep.num_speculative_tokens=3",
                                "dataset.num_prompts=2"]))
    bench = next(iter(next(iter(grid.benches.values())).values())).spec
    materialise(bench["dataset"], grid.dataset_file(bench["dataset"]))
    return grid


def cells(grid):
    spec = next(s for s, c in grid.servers.items() if not c.is_baseline)
    return spec, grid.baseline_of[spec], next(iter(grid.benches[spec]))


def rows(steps=STEPS, tokens=(12, 10)):
    return [{**rec(i, tokens=t), "spec": vllm_spec(s, 3)} for i, (s, t) in enumerate(zip(steps, tokens))]


def test_per_request_sums_equal_to_the_counters_give_per_prompt_figures(grid):
    sid, _, bid = cells(grid)
    m = run_bench_cell(grid, sid, bid, FixedSession(rows(), counters(STEPS)), progress=False)
    assert (m["valid"], m["invalid_reason"], m["spec_decode_source"], m["spec_decode_exact"]) == \
        (True, None, "per_request", True)
    sd = m["spec_decode"]
    assert sd["mean_acceptance_length"] == pytest.approx(1 + 9 / 7)                   # token-weighted
    assert sd["mean_acceptance_length_per_prompt"] == pytest.approx(((1 + 2) + (1 + 3 / 4)) / 2)
    assert sd["acceptance_length_histogram"] == [3, 1, 1, 2]
    assert m["output_length"]["mean"] == 11.0 and m["per_request_spec_metrics"] == "detailed"
    saved = [json.loads(line) for line in open(grid.bench_dir(sid, bid) / "requests.jsonl")]
    assert [r["spec"]["per_step_accepted"] for r in saved] == STEPS                     # the server's own record


def test_a_mismatch_with_the_counters_marks_the_cell_invalid_with_the_reason(grid):
    sid, _, bid = cells(grid)
    m = run_bench_cell(grid, sid, bid, FixedSession(rows(), counters(STEPS, extra_drafts=1)), progress=False)
    assert m["valid"] is False and m["spec_decode_exact"] is False
    assert m["invalid_reason"] == ("per-request spec-decode figures disagree with the counters (drafts: 7 summed "
                                   "over requests, 8 counted)")
    assert json.loads(grid.metrics_path(sid, bid).read_text())["valid"] is False


def test_asked_for_but_missing_is_invalid_and_a_vllm_without_the_flag_falls_back_to_the_counters(grid):
    sid, _, bid = cells(grid)
    bare = [{k: v for k, v in r.items() if k != "spec"} for r in rows()]
    m = run_bench_cell(grid, sid, bid, FixedSession(bare, counters(STEPS)), progress=False)
    assert m["valid"] is False and m["invalid_reason"] == ("the server was asked for per-request spec-decode "
                                                           "metrics (detailed) but no response carried them")
    m = run_bench_cell(grid, sid, bid, FixedSession(bare, counters(STEPS), level="none"), progress=False)
    assert (m["valid"], m["spec_decode_source"], m["spec_decode_exact"]) == (True, "counters", None)
    assert "mean_acceptance_length_per_prompt" not in m["spec_decode"]
    m = run_bench_cell(grid, sid, bid, FixedSession(rows()[:1] + bare[1:], counters(STEPS)), progress=False)
    assert m["invalid_reason"] == "1 of 2 finished requests carry no per-request spec-decode figures"


def test_errors_and_different_output_lengths_are_said_in_metrics_json(grid):
    sid, base, bid = cells(grid)
    b = run_bench_cell(grid, base, bid, FixedSession([rec(0, tokens=20), rec(1, tokens=20)], level=None),
                       progress=False)
    assert (b["spec_decode_source"], b["output_length_warning"], b["valid"]) == (None, None, True)
    m = run_bench_cell(grid, sid, bid, FixedSession(rows(), counters(STEPS)), progress=False)
    assert m["output_length_warning"].startswith("mean output length 11.0 tokens vs the baseline's 20.0 (-45.0%)")
    m = run_bench_cell(grid, sid, bid, FixedSession(rows()[:1] + [rec(1, ok=False)], counters(STEPS)),
                       progress=False)
    assert m["valid"] is False and m["invalid_reason"] == "error rate 0.500 is above sweep.max_error_rate 0.0"
    assert m["spec_decode_exact"] is None          # the errored request's steps are counted but in no row
    m = run_bench_cell(grid, sid, bid, FixedSession([rec(0, ok=False), rec(1, ok=False)], counters(STEPS)),
                       progress=False)
    assert m["invalid_reason"] == "error rate 1.000 is above sweep.max_error_rate 0.0"     # one reason, not two

"""A set acceptance asked against realised (issue 30, item 8): the expected length on the cell's own steps, the
binomial test and its flag, the summary's columns; a request seed per request; `compare` blanks what a cell's own
checks void. Pure functions and fake sessions: no server, deterministic."""
import json
import math

import pytest
from helpers import ServerlessSession
from test_verdicts import TWO_CATEGORIES, study, summarize

from specsweep import metrics
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.metrics import acceptance_from_lengths, request_figures
from specsweep.models.dflash.sampling import length_to_rates
from specsweep.read import compare
from specsweep.run import client
from specsweep.run.bench_cell import Measurement, run_bench_cell


# ---- the expectation and its noise ---------------------------------------------------------------------------
def test_a_length_is_the_minimum_variance_schedule_and_its_moments_are_exact():
    assert metrics.set_acceptance_rates(6.54, 15)[:7] == pytest.approx([1, 1, 1, 1, 1, 0.54, 0])
    assert length_to_rates(6.54, 15) == metrics.set_acceptance_rates(6.54, 15)     # defined once
    # one step offering K: X = 5 + Bernoulli(0.54)
    mean, var = metrics.set_step_moments(metrics.set_acceptance_rates(6.54, 15), 15)
    assert (mean, var) == pytest.approx((5.54, 0.54 * 0.46))
    # a step offering 3 drafts keeps at most 3, whatever the schedule
    assert metrics.set_step_moments(metrics.set_acceptance_rates(6.54, 15), 3) == pytest.approx((3.0, 0.0))
    # rates: E[X^2] = sum (2i - 1) r_i, checked against the distribution itself
    rates = [0.9, 0.6, 0.3]
    p = [1 - 0.9, 0.9 - 0.6, 0.6 - 0.3, 0.3]                   # P(X = 0..3)
    m = sum(x * q for x, q in enumerate(p))
    assert metrics.set_step_moments(rates, 3) == pytest.approx((m, sum(x * x * q for x, q in enumerate(p)) - m * m))
    with pytest.raises(ValueError, match=r"must be in \[1, 4\]"):
        metrics.set_acceptance_rates(5.0, 3)


def test_the_h200_cell_is_flagged_and_its_position_named():
    """2026-12-02: AL 6.54 at K=15, 1280 steps, 6996 accepted (positions 1-5 always, position 6 in 596)."""
    per_pos = [1280] * 5 + [596] + [0] * 9
    out = metrics.set_acceptance_check(6.54, 15, 1280, 6996, per_pos)
    assert out["set_acceptance_length"] == pytest.approx(6.54)
    assert out["expected_acceptance_length"] == pytest.approx(6.54)
    assert out["acceptance_gap"] == pytest.approx(6996 / 1280 + 1 - 6.54)
    z = (596 - 0.54 * 1280) / math.sqrt(1280 * 0.54 * 0.46)
    assert out["acceptance_gap_z"] == pytest.approx(z) and z < -metrics.SET_ACCEPTANCE_Z
    assert "z = -5.3" in out["set_acceptance_gap"] and "position 6: 596 of 1280 (0.466 for 0.540" in \
        out["set_acceptance_gap"]


def test_within_noise_is_not_flagged_and_the_threshold_is_the_stated_one():
    sd = math.sqrt(1000 * 0.54 * 0.46)
    for off, flagged in ((2.9, False), (3.1, True), (-3.1, True)):
        accepted = 5 * 1000 + 0.54 * 1000 + off * sd
        out = metrics.set_acceptance_check(6.54, 15, 1000, accepted)
        assert out["acceptance_gap_z"] == pytest.approx(off)
        assert (out["set_acceptance_gap"] is not None) is flagged


def test_the_expectation_accounts_for_steps_cut_at_the_budget_edge():
    """AL 4 at K=3 is deterministic: every full step keeps 3. A request of 11 tokens: the first from prefill, then
    three full steps (9) and a last one that offers a single draft (the budget edge): realised (3 * 3 + 1) / 4 + 1."""
    by_drafts = metrics.steps_by_drafts([[3, 3, 3, 1]] * 8)
    assert by_drafts == {3: 24, 1: 8}
    out = metrics.set_acceptance_check(4.0, 3, 32, 8 * 10, by_drafts=by_drafts)
    assert out["set_acceptance_length"] == 4.0 and out["expected_acceptance_length"] == pytest.approx(3.5)
    assert out["acceptance_gap"] == pytest.approx(0.0) and out["set_acceptance_gap"] is None
    # the same counts read as if every step offered K: a deterministic schedule missed, flagged
    full = metrics.set_acceptance_check(4.0, 3, 32, 80)
    assert full["acceptance_gap_z"] == -math.inf and "z = -inf" in full["set_acceptance_gap"]
    with pytest.raises(ValueError, match="per-step counts hold 32 steps but the counters 31"):
        metrics.set_acceptance_check(4.0, 3, 31, 80, by_drafts=by_drafts)


def test_shared_draws_are_named_in_the_flag():
    assert metrics.distinct_step_sequences([[5, 6, 5], [5, 6, 5], [6, 5, 5], []]) == (2, 3)
    out = metrics.set_acceptance_check(6.54, 15, 1280, 6996, sequences=(3, 32))
    assert "32 requests drew only 3 distinct acceptance sequences" in out["set_acceptance_gap"]


# ---- the summary ---------------------------------------------------------------------------------------------
class SetSession(ServerlessSession):
    """Every step of every request keeps `kept(step)` drafts of the K offered; the last step offers `last` (the
    budget edge), as the local engine records it (per-step drafted and accepted counts)."""
    def __init__(self, k: int, kept, last: int | None = None):
        self.k, self.kept, self.last = k, kept, last

    def measure(self, prompts, bench, progress, desc):
        rows = []
        for i, turns in enumerate(prompts):
            offered = [self.k] * 9 + [self.last or self.k]
            acc = [min(self.kept(s), d) for s, d in enumerate(offered)] if self.k else []
            row = {"index": i, "turn": 0, "ok": True, "e2e_s": 0.5 + 0.1 * i, "ttft_s": 0.02, "completion_tokens": 40,
                   "prompt_tokens": 10, "itl_s": [], "text": f"answer {i}", "chunk_t_s": [0.02 + j * 0.01 for j in
                                                                                          range(40)],
                   "chunk_tokens": [1] * 40}
            if self.k:
                row.update(acceptance_lengths=[a + 1 for a in acc], per_step_accepted=acc, per_step_drafted=offered)
            rows.append(row)
        figures = request_figures(rows, wall_s=sum(r["e2e_s"] for r in rows))
        lengths = [n for r in rows for n in r.get("acceptance_lengths", [])]
        figures["spec_decode"] = acceptance_from_lengths(lengths, self.k + 1) if self.k else None
        return Measurement(rows, figures)


def set_study(results, kept, last=None):
    grid = expand(compose_jobs([f"results_dir={results}", "study=v", "dataset=jsonl", f"dataset.path={TWO_CATEGORIES}",
                                "sweep.num_speculative_tokens=[3]", "sweep.set_acceptance=[3.0]", "sweep.repeats=1",
                                "pair.target=/nonexistent/target", "pair.drafter=/nonexistent/drafter",
                                "pair.built_by_workflow=false"]))
    for sid, cell in grid.servers.items():
        for bid in grid.benches[sid]:
            run_bench_cell(grid, sid, bid, SetSession(cell.spec["num_speculative_tokens"], kept, last), progress=False)
    return grid


def test_the_summary_states_the_asked_the_expected_and_flags_a_gap(tmp_path):
    """AL 3 at K=3: every step keeps 2 drafts. A cell that does so is not flagged, whatever its last step; one that
    keeps 1 at every fifth step is (a deterministic schedule missed); a baseline's columns are blank."""
    rows = summarize(set_study(tmp_path / "ok", lambda s: 2, last=1)).set_index("method")
    spec = rows.loc["dflash"]
    assert spec["set_acceptance_length"] == 3.0
    assert spec["expected_acceptance_length"] == pytest.approx(1 + (9 * 2 + 1) / 10)     # the last step offered 1
    assert spec["acceptance_gap"] == pytest.approx(0.0) and not isinstance(spec["set_acceptance_gap"], str)
    assert math.isnan(rows.loc["none"]["set_acceptance_length"])
    bad = summarize(set_study(tmp_path / "bad", lambda s: 1 if s % 5 == 0 else 2)).set_index("method").loc["dflash"]
    assert bad["acceptance_gap"] == pytest.approx(-0.2) and bad["acceptance_gap_z"] == -math.inf
    assert bad["set_acceptance_gap"].startswith("AL 2.800 against the 3.000 the set rates give on these")


# ---- a seed per request --------------------------------------------------------------------------------------
def test_each_request_is_sent_its_own_seed_and_a_rerun_the_same():
    s = client.ChatSettings("m", 8, 0.0, 7, False, 1.0)
    seeds = {(i, t): client._payload([], s, i, t)["seed"] for i in range(50) for t in range(3)}
    assert len(set(seeds.values())) == len(seeds)
    assert seeds[0, 0] == 7 and client._payload([], s, 3, 1)["seed"] == seeds[3, 1]


# ---- compare blanks what a cell's own checks void -----------------------------------------------------------------
def _edit(cell_dir, **changes):
    path = cell_dir / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_compare_blanks_a_tpot_a_cell_voided_and_leaves_out_invalid_repeats(tmp_path):
    study(tmp_path / "a", {0: 1.0, 3: 1.5})
    study(tmp_path / "b", {0: 1.0, 3: 2.0}, seed=100)
    before = next(r for r in compare.compare(tmp_path / "a" / "v", tmp_path / "b" / "v") if r["method"] == "dflash")
    assert before["b_vs_a_speedup_streamed_tpot_geomean"] is not None and before["repeats_void"] is None
    r0, r1 = sorted(p.parent for p in (tmp_path / "b" / "v").glob("*-k3-*/*/metrics.json"))
    _edit(r0, streamed_figures_invalid="3 of 4 streams bursty")        # its rows would pass today's check
    _edit(r1, valid=False, invalid_reason="error rate 0.5 above 0")
    row = next(r for r in compare.compare(tmp_path / "a" / "v", tmp_path / "b" / "v") if r["method"] == "dflash")
    assert row["repeats"] == 1 and f"B {r1.name}: error rate 0.5 above 0" in row["repeats_void"]
    assert row["b_vs_a_speedup_streamed_tpot_geomean"] is None
    assert row["b_vs_a_speedup_streamed_tpot_na"] == f"B {r0.name}: 3 of 4 streams bursty"
    assert row["b_vs_a_speedup_e2e_geomean"] is not None                  # e2e stands: the repeat is valid
    _edit(r0, valid=False, invalid_reason="lossless check failed")
    gone = next(r for r in compare.compare(tmp_path / "a" / "v", tmp_path / "b" / "v") if r["method"] == "dflash")
    assert gone["repeats"] == 0 and gone["b_vs_a_speedup_e2e_geomean"] is None and gone["b_vs_a_verdict"] is None
    assert gone["b_mean_acceptance_length"] is None
    assert gone["b_vs_a_speedup_streamed_tpot_na"].startswith("no repeat valid on both sides: ")
    assert any(line.startswith("  left out (their own checks void them): ") for line in compare.table_lines([gone]))

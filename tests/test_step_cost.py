"""step_cost: a verify step's time over its baseline's decode step, mean_acceptance_length / the server TPOT speedup
(read/step_cost.py), on made-up rows and on the H200's 27B hybrid study, whose page computed it by hand."""
from __future__ import annotations

import pytest

from specsweep.core import table
from specsweep.core.paths import REPO
from specsweep.read import step_cost


def row(method="dflash", valid=True, al=6.0, point=4.0, low=3.8, high=4.2):
    return {"method": method, "valid": valid, "mean_acceptance_length": al, "speedup_server_tpot_geomean": point,
            "speedup_server_tpot_ci_low": low, "speedup_server_tpot_ci_high": high}


def test_a_step_cost_is_the_acceptance_length_over_the_tpot_speedup_with_its_ci_bounds_swapped():
    [r] = step_cost.annotate([row()])
    assert r["step_cost"] == pytest.approx(1.5)
    assert (r["step_cost_ci_low"], r["step_cost_ci_high"]) == (pytest.approx(6 / 4.2), pytest.approx(6 / 3.8))


@pytest.mark.parametrize("blanked", [row(method="none", al=1.0, point=1.0), row(valid=False), row(point=None),
                                     row(al=None)])
def test_no_step_cost_on_a_baseline_an_invalid_row_or_without_either_figure(blanked):
    [r] = step_cost.annotate([blanked])
    assert [r[c] for c in step_cost.COLUMNS] == [None, None, None]


def test_a_speedup_without_its_ci_gives_a_step_cost_without_one():
    [r] = step_cost.annotate([row(low=None, high=None)])
    assert r["step_cost"] == pytest.approx(1.5) and r["step_cost_ci_low"] is None is r["step_cost_ci_high"]


def test_the_27b_hybrids_step_costs_are_its_pages():
    """docs/campaigns/2026-12-04-h200-hybrid.md's table (AL x TPOT(K=15) / TPOT(baseline), from medians): 1.39 and
    1.73 (all-full drafter, c=1 and 8), 2.12 and 2.27 (sliding window); from the archived summary's paired speedups
    the column gives the same to 0.03 (2.10 for 2.12: a geomean of paired ratios, not a ratio of medians), with a
    range."""
    rows = step_cost.annotate(table.read(REPO / "bench/archive/h200/vllm/qwen3.6-27b-hybrid/summary.csv"))
    got = {(r["pair"], r["concurrency"]): r for r in rows if r["method"] != "none"}
    page = {("qwen3.5-27b-dflash", 1): 1.39, ("qwen3.5-27b-dflash", 8): 1.73, ("qwen3.6-27b-dflash", 1): 2.12,
            ("qwen3.6-27b-dflash", 8): 2.27}
    for key, figure in page.items():
        r = got[key]
        assert r["step_cost"] == pytest.approx(figure, abs=0.03)
        assert r["step_cost_ci_low"] <= r["step_cost"] <= r["step_cost_ci_high"]
    assert all(r["step_cost"] is None for r in rows if r["method"] == "none")


def test_the_verdict_line_splits_the_server_tpot_speedup_into_acceptance_and_step_cost():
    from specsweep.read import summary

    r = {c: None for c in table.names(table.SUMMARY)}
    r.update(row(), server_cell="k7", pair="tiny", dataset="synthetic", thinking=False, concurrency=1,
             speedup_e2e_geomean=1.4, speedup_e2e_ci_low=1.3, speedup_e2e_ci_high=1.5, verdict="faster",
             paired_prompts=16, valid_repeats=10, looks=1, stopped="fixed", speedup_output_tok_s=1.4)
    [line] = summary.verdict_lines(step_cost.annotate([r]), [])
    assert line.endswith("; server TPOT 4.00x [3.80, 4.20] = AL 6.00 / a step of 1.50x a decode step"), line
    r["speedup_server_tpot_na"], r["speedup_server_tpot_geomean"] = "a repeat's server timing failed", None
    [line] = summary.verdict_lines(step_cost.annotate([r]), [])
    assert line.endswith("; server TPOT n/a (a repeat's server timing failed)"), line

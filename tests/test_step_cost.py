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

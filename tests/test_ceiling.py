"""The system's ceiling (ceiling.py): lengths read off a curve of set-acceptance points, and the drafter's place
on it. Pure rows in and out; the H200 curve these came from is bench/archive/h200/vllm/qwen3-8b-curve."""

import pytest

from specsweep.read import ceiling


def row(al, speedup, set_=None, conc=1, lo=None, hi=None, k=15, valid=True):
    return {"pair": "p", "backend": "vllm", "num_speculative_tokens": k, "dataset": "d", "thinking": False,
            "concurrency": conc, "method": "dflash", "set_acceptance": set_, "valid": valid,
            "mean_acceptance_length": al, "speedup_e2e_geomean": speedup,
            "speedup_e2e_ci_low": lo if lo is not None else speedup * 0.9,
            "speedup_e2e_ci_high": hi if hi is not None else speedup * 1.1}


def test_lengths_are_read_off_the_line_between_the_points_around_them():
    line = [(2.0, 0.8), (4.0, 1.4), (8.0, 2.3)]
    assert ceiling.length_for(line, 1.0) == pytest.approx(2 + 0.2 / 0.6 * 2)
    assert ceiling.length_for(line, 1.4) == pytest.approx(4.0)
    assert ceiling.length_for(line, 2.0) == pytest.approx(4 + 0.6 / 0.9 * 4)
    assert ceiling.length_for(line, 3.0) is None          # past the last point: never extrapolated
    assert ceiling.length_for(line, 0.5) is None          # below the first: the curve does not say where
    assert ceiling.length_for(line[:1], 1.0) is None
    assert ceiling.speedup_at(line, 3.0) == pytest.approx(1.1)
    assert ceiling.speedup_at(line, 1.0) is None


def test_a_curve_gives_every_speculative_row_of_its_group_the_lengths_and_the_drafter_its_place():
    rows = [row(2.0, 0.8, 2.0, conc=32), row(4.0, 1.4, 4.0, conc=32), row(8.0, 2.3, 8.0, conc=32),
            row(3.1, 1.05, None, conc=32),                                  # the drafter, real acceptance
            row(2.0, 1.6, 2.0, conc=1),                                   # another concurrency: one point
            {"method": "none", "pair": "baseline", "concurrency": 32, "valid": True}]
    out = {(r["concurrency"], r.get("set_acceptance")): r for r in ceiling.annotate(rows) if r["method"] != "none"}
    drafter = out[32, None]
    assert drafter["break_even_al"] == pytest.approx(2 + 0.2 / 0.6 * 2)
    assert drafter["ceiling_speedup_at_al"] == pytest.approx(0.8 + 1.1 * 0.3)     # the curve at AL 3.1
    assert out[32, 4.0]["ceiling_speedup_at_al"] is None                        # set rows are the curve
    assert out[32, 4.0]["al_for_2x"] == drafter["al_for_2x"]
    # the break-even's range: the CI's upper bounds reach 1x at a shorter length than the lower bounds
    assert drafter["break_even_al_low"] < drafter["break_even_al"] < drafter["break_even_al_high"]
    assert drafter["ceiling_points"][0][:2] == [2.0, 0.8]
    assert drafter["ceiling_na"] is None
    assert out[1, 2.0]["break_even_al"] is None and "a curve needs at least two" in out[1, 2.0]["ceiling_na"]
    base = next(r for r in rows if r["method"] == "none")
    assert all(base[c] is None for c in ceiling.COLUMNS)


def test_a_curve_that_never_crosses_says_so_and_invalid_rows_are_not_points():
    rows = [row(2.0, 1.6, 2.0), row(4.0, 1.9, 4.0), row(8.0, 5.0, 8.0, valid=False), row(1.0, 0.8)]
    drafter = next(r for r in ceiling.annotate(rows) if r["set_acceptance"] is None)
    assert drafter["break_even_al"] is None and drafter["al_for_2x"] is None
    assert drafter["ceiling_na"] == ("every point is above 1x (the lowest, AL 2, gives 1.6x): add a shorter set "
                                     "length for the break-even; no point reaches 2x (the highest, AL 4, gives "
                                     "1.9x); the drafter's AL 1 is outside the curve's 2-4")

"""Issue 54's Done-when in CI size: A/A studies of i.i.d. normal blocks through each look rule's own functions
(bench/aa_looks.py: spending.comparison at the planned looks of the default budget, 20 repeats; sequential.comparison
after every repeat), each stopping where a group's job would, end `faster` or `slower` at most 5% of the time. The
dated page (docs/campaigns/2026-12-06-cpu-answers.md) holds the 10^6-study run. Seeds 20261206 and on: none of
the calibration's (54003-54040)."""
import sys

import numpy as np
import pytest
from helpers import REPO

from specsweep.verdicts import spending

sys.path.insert(0, str(REPO))
from bench import aa_looks  # noqa: E402


def test_planned_looks_call_a_difference_where_a_boundary_is_crossed_and_that_is_5_percent():
    """10,000 studies through spending.comparison end `faster`/`slower` exactly where the studentized mean crosses a
    calibrated boundary at some planned look (a spread far above the ±5% margin: none ends `equivalent` first);
    over 10^6 studies that criterion holds 5.00% within three standard errors (0.065 points)."""
    looks, bounds = spending.plan(20), spending.t_boundaries(spending.plan(20))
    rng = np.random.Generator(np.random.PCG64(20261206))
    blocks = aa_looks.draw(rng, 10_000, 20, "normal")
    real = [aa_looks.study(row, "planned", 20, None, spending.CALIBRATED)["verdict"] in aa_looks.DECIDED
            for row in blocks]
    assert np.array_equal(np.array(real), aa_looks.crossed(blocks, looks, bounds))
    assert 0.045 < np.mean(real) < 0.056, np.mean(real)          # three standard errors of 10,000 studies
    share = np.mean([aa_looks.crossed(aa_looks.draw(np.random.Generator(np.random.PCG64(c)), 100_000, 20, "normal"),
                                      looks, bounds).mean() for c in range(20261207, 20261217)])
    assert share == pytest.approx(0.05, abs=0.00065), share


def test_the_sequence_after_every_repeat_keeps_its_margin():
    r = aa_looks.run(10_000, seed=20261206, rule="every", max_repeats=20)
    assert r["studies"] == 10_000 and r["false_verdicts_ci"][1] < 0.05, r

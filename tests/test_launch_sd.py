"""The launch component (sweep.launch_sd; issue 54 item 5): DerSimonian-Laird on launches' block means, an interval
carrying a launch SD, each group's pin of what its comparisons carry (from the launches this host recorded before
it, a given number, or none), and the summary's intervals and verdicts with it, fixed and `auto`."""
import math
import socket
from pathlib import Path

import numpy as np
import pytest
from test_auto_repeats import auto_group, k_factor, measured, timed_backend

from specsweep.core import layout, table
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_json, read_json
from specsweep.read import summary
from specsweep.read.study import Study
from specsweep.run import launch_record, looks, runner
from specsweep.verdicts import launches, sequential, spending


def test_dersimonian_laird_by_hand():
    # four launches 0.1 apart, each mean's variance 0.001: Q = 1000 x (0.15^2 + 0.05^2) x 2 = 50 on 3 df,
    # c = 4000 - 4 x 10^6 / 4000 = 3000, tau^2 = (50 - 3) / 3000
    dl = launches.dersimonian_laird([0.0, 0.1, 0.2, 0.3], [0.001] * 4)
    assert dl["cochran_q"] == pytest.approx(50) and dl["df"] == 3 and dl["q_p"] < 1e-9
    assert dl["launch_sd"] == pytest.approx(math.sqrt(47 / 3000))
    assert dl["launch_sd_ci"][0] < dl["launch_sd"] < dl["launch_sd_ci"][1]
    assert dl["weighted_mean"] == pytest.approx(0.15)
    same = launches.dersimonian_laird([0.1, 0.1, 0.1, 0.1], [0.001, 0.002, 0.001, 0.004])
    assert same["launch_sd"] == 0 and same["launch_sd_ci"][0] == 0 and same["q_p"] == pytest.approx(1)
    with pytest.raises(ValueError):
        launches.dersimonian_laird([0.1], [0.001])


def test_widen_adds_the_launch_sd_in_quadrature_on_each_side():
    assert launches.widen(-0.1, 0.3, 0.1, 0.0) == (-0.1, 0.3)
    assert launches.widen(-math.inf, 0.3, 0.1, 0.05) == (-math.inf, 0.3)
    lo, hi = launches.widen(0.0, 0.3, 0.1, 0.05)
    assert lo == pytest.approx(0.1 - math.hypot(0.1, launches.Z95 * 0.05))
    assert hi == pytest.approx(0.1 + math.hypot(0.2, launches.Z95 * 0.05))
    rl, rh = launches.widen_ratio(1.1, 1.3, 1.2, 0.05)
    assert rl < 1.1 and rh > 1.3 and launches.widen_ratio(None, 1.3, 1.2, 0.05) == (None, 1.3)
    assert launches.z_of(0.05) == pytest.approx(launches.Z95)


@pytest.mark.parametrize("rule", [spending.comparison, sequential.comparison])
def test_a_carried_launch_sd_widens_each_look_and_can_leave_a_comparison_open(rule):
    blocks = list(0.06 + 0.01 * np.sin(np.arange(20)))          # 6% faster, little spread within the launch
    own, carried = rule(blocks, 20), rule(blocks, 20, launch_sd=0.05)
    assert own["verdict"] == "faster" and own["launch_sd"] == 0 and carried["launch_sd"] == 0.05
    assert carried["ci_low"] < own["ci_low"] and carried["ci_high"] > own["ci_high"]
    assert carried["verdict"] == "unresolved" and carried["answered_at"] is None       # +-9.8% from the launch SD alone
    assert rule(blocks, 20, launch_sd=0.01)["verdict"] == "faster"


def test_a_bad_launch_sd_is_refused_in_one_line():
    assert launch_record.mode({}) == launch_record.RECORDED
    assert launch_record.mode({"launch_sd": None}) == launch_record.mode({"launch_sd": 0}) == launch_record.OFF
    assert launch_record.mode({"launch_sd": 0.03}) == 0.03
    with pytest.raises(ConfigError, match="sweep.launch_sd='sometimes'"):
        launch_record.mode({"launch_sd": "sometimes"})


def _record_launches(g, lead, members, means, host=None, prefix="earlier"):
    """Earlier studies' launches of this group's comparisons, as their summaries write them (layout.LAUNCHES_RECORD):
    one study per mean, each comparison's blocks that mean +- 0.01."""
    compared = looks.setting_comparisons(g, members)
    for i, m in enumerate(means):
        entries = [{"key": launch_record.key(c, r, s), "cell": c, "ref": r, "setting": s, "label": "x",
                    "setting_text": "y", "host": host or socket.gethostname(), "blocks": [m - 0.01, m, m + 0.01]}
                   for c, r, s in compared]
        atomic_write_json(Path(g.configs[lead]["results_dir"]) / f"{prefix}{i}" / layout.LAUNCHES_RECORD,
                          {"comparisons": entries})
    return compared


def test_a_group_pins_the_launch_sd_of_the_launches_recorded_before_it(tmp_path):
    g, lead, members = auto_group(tmp_path)
    compared = _record_launches(g, lead, members, [0.10, 0.20, 0.30])          # three: too few
    first = launch_record.pin(g, members, compared)
    assert {c["launch_sd"] for c in first["comparisons"].values()} == {0.0}
    assert all("3 launch(es)" in c["why"] for c in first["comparisons"].values())
    # a fourth launch recorded later does not move what the group pinned
    _record_launches(g, lead, members, [0.10, 0.20, 0.30, 0.40])
    assert launch_record.pin(g, members, compared) == first
    # a new group (another results tree: the same cells) with four recorded, and one on another host ignored
    g2, lead2, members2 = auto_group(tmp_path / "two")
    _record_launches(g2, lead2, members2, [0.10, 0.20, 0.30, 0.40])
    _record_launches(g2, lead2, members2, [0.10, 0.20, 0.30, 0.40, 5.0], host="another-host", prefix="elsewhere")
    pinned = launch_record.pin(g2, members2, looks.setting_comparisons(g2, members2))
    want = launches.dersimonian_laird([0.1, 0.2, 0.3, 0.4], [0.0001 / 3] * 4)["launch_sd"]
    assert {c["launches"] for c in pinned["comparisons"].values()} == {4}
    assert [c["launch_sd"] for c in pinned["comparisons"].values()] == pytest.approx([want] * len(compared))
    cell, ref, setting = compared[0]
    assert launch_record.pinned(g2, cell, ref, setting)["launch_sd"] == pytest.approx(want)


def test_a_given_number_none_and_rounds(tmp_path):
    g, lead, members = auto_group(tmp_path, "sweep.launch_sd=0.02")
    compared = looks.setting_comparisons(g, members)
    assert {c["launch_sd"] for c in launch_record.pin(g, members, compared)["comparisons"].values()} == {0.02}
    g, lead, members = auto_group(tmp_path, "sweep.launch_sd=null")     # asked again: pinned anew
    assert {c["launch_sd"] for c in launch_record.pin(g, members, compared)["comparisons"].values()} == {0.0}
    g, lead, members = auto_group(tmp_path / "r", "sweep.repeats=4", "sweep.rounds=2", "sweep.launch_sd=0.02")
    pinned = launch_record.pin(g, members, looks.setting_comparisons(g, members))
    assert {c["launch_sd"] for c in pinned["comparisons"].values()} == {0.0}
    assert all("sweep.rounds" in c["why"] for c in pinned["comparisons"].values())


def test_the_summary_carries_the_pinned_launch_sd_and_records_the_studys_launches(tmp_path, monkeypatch):
    """A fixed study: its bootstrap interval widened and its verdict read again; an `auto` one: its rule carries it.
    Each summary writes its launches for later studies."""
    for extra, tau in ((["sweep.repeats=4", "sweep.launch_sd=null"], 0.0), (["sweep.repeats=4", "sweep.launch_sd=0.4"], 0.4)):
        root = tmp_path / f"tau{tau}"
        g, lead, members = auto_group(root, *extra)
        events = []
        timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
        runner.run_group(g, lead, root / "m.done", progress=False)
        assert measured(events) == [0, 1, 2, 3]
        f = g.study_files("v")
        summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
        rows = [r for r in table.read(f.summary) if r["method"] != "none"]
        [k] = table.read(f.k_comparison)
        assert {r["launch_sd"] for r in rows} == {tau} and k["launch_sd"] == tau
        if tau:
            assert {r["verdict"] for r in rows} == {"unresolved"} and k["verdict"] == "unresolved"
            assert all(r["speedup_e2e_ci_high"] / r["speedup_e2e_ci_low"] > math.exp(2 * launches.Z95 * tau)
                       for r in rows)
        else:
            assert {r["verdict"] for r in rows} == {"faster"}
        record = read_json(f.dir / layout.LAUNCHES_RECORD)
        assert len(record["comparisons"]) == 3 and all(len(e["blocks"]) == 4 for e in record["comparisons"])
        assert {e["host"] for e in record["comparisons"]} == {socket.gethostname()}
    # an auto study: its looks carry the given launch SD, and so does the summary's reading
    g, lead, members = auto_group(tmp_path / "auto", "sweep.max_repeats=6", "sweep.looks=every", "sweep.launch_sd=0.4")
    events = []
    timed_backend(monkeypatch, events, k_factor(g, {0: 1.0, 3: 0.7, 7: 0.5}), noise=0.02)
    runner.run_group(g, lead, tmp_path / "auto.done", progress=False)
    record = read_json(g.server_dir(lead) / layout.LOOKS)
    assert measured(events) == list(range(6)) and {r["launch_sd"] for r in record["comparisons"].values()} == {0.4}
    f = g.study_files("v")
    summary.write_summary(Study.load(f.dir, g), f.summary, f.k_comparison, f.by_category)
    rows = [r for r in table.read(f.summary) if r["method"] != "none"]
    assert {r["verdict"] for r in rows} == {"unresolved"} and {r["launch_sd"] for r in rows} == {0.4}

"""bench/auto_vs_fixed.py's launches over sessions (issue 54 item 5): kept studies' blocks read back, each
session's fixed launches together and apart, and the intervals that hold the weighted mean counted."""
import csv
import json
import math
from pathlib import Path

from bench import auto_vs_fixed as avf


def _study(root, name, blocks, ci):
    """A kept study: its tables (K=3 and K=7 against the baseline, K=7 against K=3; every interval `ci`) and
    blocks.json, as `--keep` writes them."""
    d = root / name / "default"
    d.mkdir(parents=True)
    base = {"pair": "tiny", "verdict": "faster", "speedup_e2e_geomean": 1.5, "speedup_e2e_ci_low": ci[0],
            "speedup_e2e_ci_high": ci[1], "repeats": 10, "answered_repeat": ""}
    with open(d / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["method", "num_speculative_tokens", *base])
        w.writeheader()
        w.writerow({"method": "none", "num_speculative_tokens": "", **base})
        for k in (3, 7):
            w.writerow({"method": "dflash", "num_speculative_tokens": k, **base})
    with open(d / "k_comparison.csv", "w", newline="") as f:
        row = {"k_a": 7, "k_b": 3, "repeats_a": 10, **{k: v for k, v in base.items() if k != "repeats"}}
        w = csv.DictWriter(f, list(row))
        w.writeheader()
        w.writerow(row)
    (d / avf.BLOCKS).write_text(json.dumps({n: blocks for n in avf.NAMES}))


def _campaign(root, studies):
    root.mkdir()
    log = []
    for name, blocks, ci in studies:
        _study(root, name, blocks, ci)
        log += [f"{name} start 2026-12-06T09:00:00Z 1.0", f"{name} end 2026-12-06T09:01:00Z rc=0 wall_s=60.0 1.0"]
    (root / "campaign.log").write_text("\n".join(log) + "\n")
    return root


def test_sessions_pool_fixed_launches_and_count_the_intervals_that_hold_the_mean(tmp_path):
    one = _campaign(tmp_path / "one", [("b1", [0.40, 0.42, 0.38], [1.4, 1.6]),
                                       ("b2", [0.40, 0.41, 0.39], [1.45, 1.55]),
                                       ("a1", [0.9, 0.9, 0.9], [2.0, 3.0])])     # an auto study: not a fixed launch
    two = _campaign(tmp_path / "two", [("b1", [0.50, 0.52, 0.48], [1.6, 1.7]),
                                       ("b2", [0.50, 0.52, 0.48], [1.6, 1.7])])
    out = avf.sessions([(one, "b"), (two, "b")])
    rec = out["all"]["K=7 vs base"]
    assert rec["launches"] == 4 and rec["df"] == 3
    # weights n / s^2: 3 / 0.0004, 3 / 0.0001, 3 / 0.0004, 3 / 0.0004: the mean is (0.40 + 4 x 0.40 + 2 x 0.50) / 7
    assert math.isclose(math.log(rec["weighted_mean_ratio"]), (0.40 + 4 * 0.40 + 2 * 0.50) / 7)
    assert rec["intervals_holding_mean"] == 2 and rec["intervals"] == 4      # exp(0.4286) = 1.535: [1.4, 1.6], [1.45, 1.55]
    assert rec["launch_sd"] > 0 and rec["q_p"] < 0.05
    assert [r["K=7 vs base"]["launches"] for r in out["per_session"].values()] == [2, 2]


def test_a_session_of_one_launch_is_refused_in_one_line(tmp_path):
    import pytest

    one = _campaign(tmp_path / "one", [("b1", [0.4, 0.42, 0.38], [1.4, 1.6]), ("b2", [0.4, 0.41, 0.39], [1.4, 1.6])])
    two = _campaign(tmp_path / "two", [("b1", [0.5, 0.52, 0.48], [1.6, 1.7])])
    with pytest.raises(SystemExit, match="two or more"):
        avf.sessions([(one, "b"), (two, "b")])


def test_keep_writes_tables_and_blocks_that_read_back_the_same(tmp_path):
    src = _campaign(tmp_path / "src", [("b1", [0.1, 0.2, 0.3], [1.0, 1.3])])
    avf.keep(src, tmp_path / "kept")
    study = tmp_path / "kept" / "b1" / "default"
    assert avf.blocks_of(study) == avf.blocks_of(src / "b1" / "default")
    assert avf.verdicts(study) == avf.verdicts(src / "b1" / "default")
    assert (tmp_path / "kept" / "campaign.log").read_text() == (src / "campaign.log").read_text()


def test_a_campaign_of_three_arms_is_read_against_the_fixed_arm_named(tmp_path, capsys):
    """`--fixed c` reads A against C and leaves B out; block_sd pools each arm's within-study spread."""
    log = []
    for i in (1, 2):
        for arm, spread in (("a", 0.01), ("b", 0.02), ("c", 0.04)):
            _study(tmp_path, f"{arm}{i}", [0.1 + spread * (j % 2 * 2 - 1) for j in range(10)], [1.05, 1.2])
            log.append(f"{arm}{i} end 2026-12-06T00:00:00Z rc=0 wall_s={50 + i + 'abc'.index(arm)}")
    (tmp_path / "campaign.log").write_text("\n".join(log) + "\n")
    out = tmp_path / "out.json"
    avf.main([str(tmp_path), "--fixed", "c", "--replays", "50", "--out", str(out)])
    got = json.loads(out.read_text())
    assert sorted(got["studies"]) == ["a1", "a2", "c1", "c2"]
    assert got["live"]["wall_median_s"] == {"auto": 51.5, "fixed": 53.5}
    sd = got["block_sd"]["fixed"]["K=7 vs K=3"]
    assert sd["df"] == 18 and math.isclose(sd["sd"], 0.04 * math.sqrt(10 / 9))


def test_a_session_names_the_letter_of_its_fixed_studies():
    """--session DIR:c reads a campaign whose fixed default is its third arm (bench/archive/cpu/waves-auto)."""
    assert avf.session_arg("runs/waves-auto:c") == (Path("runs/waves-auto"), "c")
    assert avf.session_arg("runs/launches-2") == (Path("runs/launches-2"), "b")

"""`specsweep compare A B` on studies written by test_verdicts' fake session: side by side with paired CIs,
and a one-line refusal (exit 2, no traceback) for a pair that did not run the same requests."""
import csv
import sys

import pytest
from helpers import run
from test_verdicts import study

from specsweep.read import compare


def test_compare_two_studies(tmp_path):
    study(tmp_path / "a", {0: 1.0, 3: 1.5})
    study(tmp_path / "b", {0: 1.0, 3: 2.0}, seed=100)
    rows = compare.write_comparison(tmp_path / "a" / "v", tmp_path / "b" / "v", tmp_path / "c.csv")
    spec = next(r for r in rows if r["method"] == "dflash")
    assert spec["repeats"] == 2 and spec["a_verdict"] == spec["b_verdict"] == "faster"
    assert spec["b_vs_a_verdict"] == "faster" and spec["b_vs_a_speedup_e2e_geomean"] == pytest.approx(4 / 3, rel=0.05)
    assert spec["b_vs_a_acceptance_ratio"] == pytest.approx(1.0)
    assert (spec["a_looks"], spec["a_stopped"]) == (1, "fixed")        # a fixed study's verdict: one look
    assert len(list(csv.DictReader(open(tmp_path / "c.csv")))) == 2
    base = next(r for r in rows if r["method"] == "none")       # the two baselines: one configuration, no difference
    assert base["b_vs_a_verdict"] in ("equivalent within ±5%", "unresolved")
    printed = "\n".join(compare.table_lines(rows))
    assert f"] {base['b_vs_a_verdict']}  streamed TPOT" in printed        # the lines print the same words


def cli(*args):
    return run([sys.executable, "-m", "specsweep.cli", "compare", *map(str, args)])


@pytest.mark.parametrize("extra, says", [
    (["sweep.temperature=0.7"], "differ in temperature (0.0 vs 0.7), so their requests are not the same: "
                                "compare cells run with the same sweep.temperature"),
    (["sweep.seed=1"], "differ in seed (0 vs 1)"),
    (["sweep.max_tokens=32"], "differ in max_tokens (64 vs 32)"),
    (["dataset.num_prompts=6"], "ran different prompts (prompt digests"),
])
def test_compare_refuses_different_work_in_one_line(tmp_path, extra, says):
    study(tmp_path / "a", {0: 1.0, 3: 1.5})
    study(tmp_path / "b", {0: 1.0, 3: 1.5}, extra=extra)
    out = cli(tmp_path / "a" / "v", tmp_path / "b" / "v", "--out", tmp_path / "c.csv")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("specsweep: compare: ") and says in line
    assert not (tmp_path / "c.csv").exists()


def test_compare_refuses_a_missing_ignore_eos_against_true(tmp_path):
    """A bench spec from before sweep.ignore_eos existed counts as false."""
    study(tmp_path / "a", {0: 1.0, 3: 1.5})
    [b] = [p.parent for p in (tmp_path / "a" / "v").glob("*-k3-*/*/metrics.json")][:1]
    a = compare.Cell.load(b)
    other = compare.Cell(a.path, a.metrics, {**a.config, "bench_spec": {**a.bench, "ignore_eos": True}})
    with pytest.raises(compare.ConfigError, match=r"differ in ignore_eos \(False vs True\)"):
        compare.check_same_work(a, other)


def test_compare_refuses_mixed_or_unknown_paths(tmp_path):
    study(tmp_path / "a", {0: 1.0, 3: 1.5})
    cell = next((tmp_path / "a" / "v").glob("*-k3-*/*/metrics.json")).parent
    out = cli(tmp_path / "a" / "v", cell)
    assert out.returncode == 2 and "A is a study and B a cell: give two studies or two bench cells" in out.stderr
    out = cli(tmp_path / "a" / "v", tmp_path / "nowhere")
    assert out.returncode == 2 and "is neither a study directory" in out.stderr and "Traceback" not in out.stderr

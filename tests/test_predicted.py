"""`specsweep compare`'s predicted against measured: a replay of a drafter's per-position rates
(sweep.set_acceptance, e.g. [{rates_from: <server cell>}]) beside that drafter's own cell, in one study or across two.
Studies written by test_verdicts' fake session, with the latencies set per cell; no server."""
import csv
import json
import sys

import pytest
import yaml
from helpers import run
from test_verdicts import TWO_CATEGORIES, FakeSession

from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.read import compare, predictions, sides
from specsweep.run.bench_cell import run_bench_cell

# the fake session's K=3 drafter: 10 steps of length 4 per turn of the six one-turn (even) prompts, 10 of length 2
# per turn of the six two-turn ones; so 60 of its 180 steps accept 3 drafts, all accept 1 (rounded as rates_from)
OWN_RATES = [1.0, 0.3333, 0.3333]
GIVEN = json.dumps(OWN_RATES).replace(" ", "")       # as an override gives them


def measure(results, name="v", real=1.5, replay=1.5, extra=(), seed=0):
    """A study of K=3 on the two-category file (2 repeats), every cell measured by FakeSession: the real cell at
    speedup `real`, a set-acceptance cell at `replay`. Returns the grid."""
    grid = expand(compose_jobs([f"results_dir={results}", f"study={name}", "dataset=jsonl",
                                f"dataset.path={TWO_CATEGORIES}", "sweep.num_speculative_tokens=[3]",
                                "sweep.repeats=2", "pair.target=/nonexistent/target",
                                "pair.drafter=/nonexistent/drafter", "pair.built_by_workflow=false", *extra]))
    for n, (sid, cell) in enumerate(sorted(grid.servers.items(), key=lambda kv: not kv[1].is_baseline)):
        k = cell.spec["num_speculative_tokens"]
        speed = {0: 1.0, 3: replay if cell.sets_acceptance else real}
        for m, bid in enumerate(sorted(grid.benches[sid])):
            run_bench_cell(grid, sid, bid, FakeSession(k, speed, 0.03, seed + 10 * n + m), progress=False)
    return grid


def real_cell(grid):
    return next(grid.server_dir(s) for s, c in grid.servers.items() if not c.is_baseline and not c.sets_acceptance)


def replay_of_own_rates(tmp_path, real=1.5, replay=1.5, *extra):
    """The drafter's study, then the same study with its K=3 cell's rates replayed beside it (the second run
    measures every cell again, as a fresh study would)."""
    first = measure(tmp_path, real=real, replay=replay, extra=extra)
    source = real_cell(first)
    return measure(tmp_path, real=real, replay=replay, extra=[*extra, f"sweep.set_acceptance=[null,{{rates_from:{source}}}]"]), \
        source


def test_a_replay_of_the_drafters_own_rates_records_its_source_and_agrees(tmp_path):
    grid, source = replay_of_own_rates(tmp_path, 1.5, 1.5, "sweep.ignore_eos=true")
    [replay] = [s for s, c in grid.servers.items() if c.sets_acceptance]
    assert grid.servers[replay].spec["set_acceptance"] == OWN_RATES
    assert str(source) not in replay                                     # the id holds the rates, never the path
    config = yaml.safe_load(next(grid.server_dir(replay).glob("*/config.yaml")).read_text())
    recorded = config["set_acceptance_source"]
    assert (recorded["pair"], recorded["server_cell"], recorded["study"], recorded["rates"]) == (
        "tiny", source.name, "v", OWN_RATES)
    assert len(recorded["bench_cells"]) == 2

    rows, unmatched = predictions.predictions(("", sides.side_of(grid.study_files("v").dir)))
    assert unmatched == []
    [row] = rows
    assert row["rates_source"] == "own rates" and row["measured_cell"].startswith(str(source))
    assert json.loads(row["replayed_rates"]) == OWN_RATES and row["replayed_al"] == pytest.approx(2.6666)
    assert row["predicted_speedup_e2e_geomean"] == pytest.approx(1.5, rel=0.05)
    assert row["measured_speedup_e2e_geomean"] == pytest.approx(1.5, rel=0.05)
    assert row["agree"] is True
    # both decode to max_tokens (sweep.ignore_eos=true): the same requests, paired directly
    assert row["measured_vs_predicted_e2e_geomean"] == pytest.approx(1.0, rel=0.05)
    assert row["measured_vs_predicted_verdict"] == "equivalent within ±5%"


def test_a_replay_far_from_its_drafter_disagrees(tmp_path):
    grid, _ = replay_of_own_rates(tmp_path, 2.0, 1.2, "sweep.ignore_eos=true")
    [row], _ = predictions.predictions(("", sides.side_of(grid.study_files("v").dir)))
    assert row["agree"] is False and row["predicted_over_measured"] == pytest.approx(0.6, rel=0.05)
    assert row["measured_vs_predicted_verdict"] == "faster"                 # the drafter beat its prediction
    lines = predictions.prediction_lines([row], [])
    assert any(line.strip().startswith("speedup  predicted 1.2") and line.endswith("disagree") for line in lines)


def test_without_a_recorded_source_a_replay_is_its_drafters_only_by_its_rates(tmp_path):
    grid = measure(tmp_path, extra=[f"sweep.set_acceptance=[null,{GIVEN},[0.9,0.1,0.0]]"])
    rows, unmatched = predictions.predictions(("", sides.side_of(grid.study_files("v").dir)))
    [row] = rows
    assert row["rates_source"].startswith("by rates (no source recorded") and json.loads(row["replayed_rates"]) == \
        OWN_RATES
    assert row["measured_vs_predicted_e2e_geomean"] is None      # the real cell stops at its end, the replay does not
    [line] = unmatched
    assert "-al2-rates-" in line and "its rates differ from the measured cell's by up to 0.33 (more than 0.01)" in line


def test_two_studies_set_a_replay_in_one_beside_its_drafter_in_the_other(tmp_path, capsys):
    drafter = measure(tmp_path / "a", name="s", real=1.6)
    source = real_cell(drafter)
    measure(tmp_path / "b", name="s", replay=1.6, extra=[f"sweep.set_acceptance=[{{rates_from:{source}}}]"])
    rows = compare.write_comparison(tmp_path / "a" / "s", tmp_path / "b" / "s", tmp_path / "c.csv",
                                    tmp_path / "p.csv")
    out = capsys.readouterr().out
    # the replay's baseline decodes to max_tokens, A's to its stop token: no grid point of one is the other's
    assert rows == [] and "no side-by-side table: no cell of A matches one of B" in out
    assert not (tmp_path / "c.csv").exists()
    [row] = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert (row["predicted_side"], row["measured_side"]) == ("B", "A")
    assert row["rates_source"] == "own rates" and row["agree"] == "True"      # A's K=3 cell is the source
    assert "replay in B, measured in A; own rates" in out


def cli(*args):
    return run([sys.executable, "-m", "specsweep.cli", "compare", *map(str, args)])


def test_one_study_prints_its_predictions_and_one_without_a_replay_is_one_line(tmp_path):
    grid, _ = replay_of_own_rates(tmp_path)
    out = cli(grid.study_files("v").dir, "--predicted-out", tmp_path / "p.csv")
    assert out.returncode == 0, out.stderr
    assert "agree: each CI holds the other's figure" in out.stdout and "own rates" in out.stdout
    assert len(list(csv.DictReader(open(tmp_path / "p.csv")))) == 1
    plain = measure(tmp_path / "plain")
    out = cli(plain.study_files("v").dir, "--predicted-out", tmp_path / "q.csv")
    assert out.returncode == 2 and "Traceback" not in out.stderr and not (tmp_path / "q.csv").exists()
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("specsweep: compare: ") and "has no replay cell" in line


def test_compare_matches_set_acceptance_cells_apart_from_their_drafters(tmp_path):
    """Two studies with a replay and the drafter each: compare no longer calls them the same kind of cell."""
    for side in ("a", "b"):
        measure(tmp_path / side, extra=[f"sweep.set_acceptance=[null,{GIVEN}]", "sweep.ignore_eos=true"],
                seed=0 if side == "a" else 100)
    rows = compare.write_comparison(tmp_path / "a" / "v", tmp_path / "b" / "v", tmp_path / "c.csv", tmp_path / "p.csv")
    assert sorted((r["method"], r["set_acceptance"] or []) for r in rows) == [     # typed: the rates themselves
        ("dflash", []), ("dflash", OWN_RATES), ("none", [])]
    assert sorted(r["set_acceptance"] for r in csv.DictReader(open(tmp_path / "c.csv"))) == ["", "", json.dumps(OWN_RATES)]
    assert len(list(csv.DictReader(open(tmp_path / "p.csv")))) == 4       # each replay with each side's drafter

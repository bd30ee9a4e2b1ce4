"""sweep.rounds: each server cell runs in several launches, interleaved with its group's (baseline, K_a, K_b,
baseline, ...), and the paired CI resamples those rounds (stats._cluster_bootstrap). Scheduling only: no cell id
changes. The DAG test runs the SGLang stand-in on an injected GPU and reads its start records."""
import json
import os
import random
import time

import numpy as np
import pytest

from specsweep import stats
from specsweep.cells import Grid, expand
from specsweep.config import compose_jobs

from helpers import run_bounded, snakemake_argv, standin_k, standin_study
from test_stats import baseline, rows


def grid(*overrides) -> Grid:
    return expand(compose_jobs(list(overrides)))


def ids(g: Grid):
    return {(sid, bid) for sid in g.servers for bid in g.benches[sid]}


def test_rounds_leave_every_id_unchanged_and_one_round_is_todays_marker():
    one, three = grid("sweep.rounds=1"), grid()         # the default runs 3 rounds
    assert ids(one) == ids(three)
    for sid in one.servers:
        assert one.rounds(sid) == 1 and three.rounds(sid) == 3
        assert one.round_cells(sid, None) == list(one.benches[sid])
        assert one.run_marker(sid) == one.run_marker(sid, None)
        assert Grid.marker_round(one.run_marker(sid).stem) is None
        assert [Grid.marker_round(three.run_marker(sid, r).stem) for r in range(3)] == [0, 1, 2]


def test_repeats_are_spread_over_the_rounds_in_contiguous_blocks():
    g = grid("sweep.rounds=3")            # the default's 10 repeats: round r * 3 // 10
    for sid in g.servers:
        by_repeat = {g.benches[sid][b].spec["repeat"]: g.round_of(sid, b) for b in g.benches[sid]}
        assert by_repeat == {r: r * 3 // 10 for r in range(10)}
        assert [len(g.round_cells(sid, r)) for r in range(3)] == [4, 3, 3]
        assert sorted(b for r in range(3) for b in g.round_cells(sid, r)) == sorted(g.benches[sid])


def test_the_launch_order_interleaves_the_baseline_and_its_k_cells():
    g = grid("sweep.rounds=2")
    base = next(s for s, c in g.servers.items() if c.is_baseline)
    k3, k7 = (next(s for s, c in g.servers.items() if c.spec["num_speculative_tokens"] == k) for k in (3, 7))
    order = [(base, 0), (k3, 0), (k7, 0), (base, 1), (k3, 1), (k7, 1)]
    assert g.round_order(base) == g.round_order(k3) == g.round_order(k7) == order


def test_without_a_baseline_the_k_cells_of_a_pair_interleave():
    g = grid("sweep.rounds=2", "sweep.baseline=false")
    k3, k7 = (next(s for s, c in g.servers.items() if c.spec["num_speculative_tokens"] == k) for k in (3, 7))
    assert g.round_order(k3) == g.round_order(k7) == [(k3, 0), (k7, 0), (k3, 1), (k7, 1)]


def test_more_rounds_than_repeats_runs_one_repeat_per_round():
    g = grid("sweep.repeats=2", "sweep.rounds=3")         # the default's 3 rounds with 2 repeats: 2 launches
    for sid in g.servers:
        assert g.rounds(sid) == 2
        assert sorted(g.round_of(sid, b) for b in g.benches[sid]) == [0, 1]
    single = grid("sweep.repeats=1")
    assert all(single.rounds(sid) == 1 for sid in single.servers)


# ---- the cluster bootstrap ------------------------------------------------------------------------------------
def shifted_study(rounds=4, per_round=3, shift=0.6, seed=0):
    """A cell 1.5x faster than its baseline, whose launches in the second half of the rounds ran under a load
    that slowed the cell alone by 1/shift; the baseline is steady."""
    rng = random.Random(seed)
    base = baseline()
    cell_runs, ref_runs, of_round = [], [], []
    for r in range(rounds):
        load = 1 / shift if r >= rounds // 2 else 1.0
        for _ in range(per_round):
            cell_runs.append(rows([b / 1.5 * load * rng.uniform(0.95, 1.05) for b in base]))
            ref_runs.append(rows([b * rng.uniform(0.95, 1.05) for b in base]))
            of_round.append(r)
    return cell_runs, ref_runs, of_round


def test_one_round_gives_todays_ci_exactly():
    cell_runs, ref_runs, _ = shifted_study()
    plain = stats.paired_speedup(cell_runs, ref_runs)
    zeros = [0] * len(cell_runs)
    assert stats.paired_speedup(cell_runs, ref_runs, rounds=(zeros, zeros)) == plain
    assert stats.paired_speedup(cell_runs, ref_runs, rounds=None) == plain


def test_a_load_shift_between_rounds_widens_the_ci():
    cell_runs, ref_runs, of_round = shifted_study()
    plain = stats.paired_speedup(cell_runs, ref_runs)
    clustered = stats.paired_speedup(cell_runs, ref_runs, rounds=(of_round, of_round))
    assert clustered["speedup_e2e_geomean"] == plain["speedup_e2e_geomean"]      # the figure is the same
    width = lambda s: math_log(s["speedup_e2e_ci_high"]) - math_log(s["speedup_e2e_ci_low"])  # noqa: E731
    assert width(clustered) > 1.2 * width(plain), (plain, clustered)
    # here the one-launch-per-cell CI calls it faster ([1.02, 1.33]); the rounds' says it is not resolved
    assert plain["verdict"] == stats.FASTER_BORDERLINE and clustered["verdict"] == stats.NOISE
    assert clustered["speedup_e2e_ci_low"] <= plain["speedup_e2e_geomean"] <= clustered["speedup_e2e_ci_high"]
    again = stats.paired_speedup(cell_runs, ref_runs, rounds=(of_round, of_round))
    assert again == clustered                                                       # seeded


def test_steady_rounds_do_not_widen_the_ci_much():
    cell_runs, ref_runs, of_round = shifted_study(shift=1.0)
    plain = stats.paired_speedup(cell_runs, ref_runs)
    clustered = stats.paired_speedup(cell_runs, ref_runs, rounds=(of_round, of_round))
    assert clustered["verdict"] == plain["verdict"] == "faster"
    assert clustered["speedup_e2e_ci_low"] > 1.3 and clustered["speedup_e2e_ci_high"] < 1.7


def math_log(x):
    return float(np.log(x))


# ---- borderline verdicts --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi, expected", [
    (1.10, 1.50, stats.FASTER), (1.02, 1.50, stats.FASTER_BORDERLINE), (1.0 + stats.BORDERLINE, 1.2,
                                                                       stats.FASTER_BORDERLINE),
    (0.95, 1.05, stats.NOISE), (0.60, 0.90, stats.SLOWER), (0.60, 0.98, stats.SLOWER_BORDERLINE),
    (None, 1.2, None)])
def test_a_ci_that_ends_near_1_says_borderline(lo, hi, expected):
    assert stats.verdict(lo, hi) == expected
    assert stats.direction(expected) == {stats.FASTER_BORDERLINE: stats.FASTER,
                                         stats.SLOWER_BORDERLINE: stats.SLOWER}.get(expected, expected)


# ---- the DAG: interleaved launches, a resumed round, a rerun that does nothing ---------------------------------
@pytest.mark.server
@pytest.mark.dag
def test_rounds_launch_interleaved_resume_in_their_round_and_a_rerun_does_nothing(tiny_results, tmp_path):
    records, site, standin = standin_study(tiny_results, tmp_path, 0.2)
    results = tmp_path / "results"
    study = [*standin, "server.stop_grace_s=5", "sweep.num_speculative_tokens=[2,3]",
             "dataset.num_prompts=4", "sweep.concurrency=[4]", "sweep.max_tokens=8", "sweep.warmup=0",
             "sweep.repeats=4", "sweep.rounds=2", "tracking=off"]     # after snakemake_argv's sweep.repeats=1
    argv = snakemake_argv(tmp_path / "work", results, *study, extra=["--resources", "gpu=1"])
    env = {"SPECSWEEP_GPUS": "0", "SPECSWEEP_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}

    def launches():
        started = sorted((json.loads(p.read_text()) for p in records.glob("*.json")), key=lambda r: r["started_at"])
        return [standin_k(r) for r in started]

    rc = run_bounded(argv, tmp_path / "first.log", 600, env)
    assert rc == 0, (tmp_path / "first.log").read_text()[-4000:]
    assert launches() == [0, 2, 3, 0, 2, 3]                      # baseline, K=2, K=3, then the second round
    g = grid("study=t", f"results_dir={results}", "sweep.repeats=1", *study)
    for sid in g.servers:
        d = g.server_dir(sid)
        assert sorted(p.name.split("-")[0] for p in (d / "runs").glob("*.done")) == ["round0", "round1"]
        assert len(list(d.glob("*/metrics.json"))) == 4
    assert (results / "t" / "summary.csv").exists()

    # a run stopped before round 1 of K=2 finished its last bench cell (that cell's metrics.json, the server
    # cell's cells-*.done and the study's summary missing, as after a failed job): the rerun launches that one
    # round, and runs only it
    k2 = next(s for s, c in g.servers.items() if c.spec["num_speculative_tokens"] == 2)
    lost = next(b for b in g.benches[k2] if g.benches[k2][b].spec["repeat"] == 3)
    assert g.round_of(k2, lost) == 1
    kept = {b: g.metrics_path(k2, b).stat().st_mtime for b in g.benches[k2] if b != lost}
    g.metrics_path(k2, lost).unlink()
    g.cells_done(k2).unlink()
    (results / "t" / "summary.csv").unlink()
    time.sleep(1)
    rc = run_bounded(argv, tmp_path / "resume.log", 600, env)
    assert rc == 0, (tmp_path / "resume.log").read_text()[-4000:]
    assert launches() == [0, 2, 3, 0, 2, 3, 2]
    assert g.metrics_path(k2, lost).exists()
    assert {b: g.metrics_path(k2, b).stat().st_mtime for b in kept} == kept

    # a rerun after a finished study does nothing
    dry = run_bounded([*argv, "-n"], tmp_path / "dry.log", 300, env)
    assert dry == 0 and "Nothing to be done" in (tmp_path / "dry.log").read_text(), \
        (tmp_path / "dry.log").read_text()[-3000:]
    rc = run_bounded(argv, tmp_path / "rerun.log", 300, env)
    assert rc == 0 and launches() == [0, 2, 3, 0, 2, 3, 2]

"""A group's turns and rounds: its servers start once and take turns repeat by repeat (sweep.residency coresident),
or relaunch once a round (relaunch); sweep.rounds launches the group several times, and the paired CI resamples
those rounds (stats._cluster_bootstrap). Scheduling only: no cell id changes. The DAG tests run the SGLang stand-in
on an injected GPU and read its start records."""
import json
import os
import random
import tempfile
import time

import numpy as np
import pytest
from helpers import run_bounded, served_launches, snakemake_argv, standin_k, standin_study
from test_stats import baseline, rows

from specsweep.grid import schedule
from specsweep.grid.cells import Grid, expand
from specsweep.grid.config import compose_jobs
from specsweep.verdicts import stats

# where a grid's overrides give no results_dir: an empty one of this module's (its ids name the pair's paths under
# it), so that no study left in this checkout's results/ counts as finished
_EMPTY = tempfile.TemporaryDirectory(prefix="specsweep-rounds-")      # removed when the session's Python exits
EMPTY_RESULTS = _EMPTY.name


def grid(*overrides) -> Grid:
    """A study in the fixed design (sweep=default: 10 repeats), whose repeats rounds and residency divide."""
    if not any(o.startswith("results_dir=") for o in overrides):
        overrides = (f"results_dir={EMPTY_RESULTS}", *overrides)
    return expand(compose_jobs(["sweep=default", *overrides]))


def ids(g: Grid):
    return {(sid, bid) for sid in g.servers for bid in g.benches[sid]}


def members(g: Grid) -> tuple[str, str, str]:
    base = next(s for s, c in g.servers.items() if c.is_baseline)
    k3, k7 = (next(s for s, c in g.servers.items() if c.spec["num_speculative_tokens"] == k) for k in (3, 7))
    return base, k3, k7


def test_rounds_and_residency_leave_every_id_unchanged():
    default = grid()
    for other in (grid("sweep.rounds=3"), grid("sweep.residency=relaunch", "sweep.rounds=3"),
                  grid("sweep.residency=sleep"), grid("sweep.start_at_once=3")):
        assert ids(other) == ids(default)


def test_a_group_is_a_baseline_and_its_k_cells_and_one_job_runs_it():
    g = grid()
    base, k3, k7 = members(g)
    assert schedule.leads(g) == [base] and schedule.group(g, base) == [base, k3, k7]
    assert {schedule.group_of(g, s) for s in (base, k3, k7)} == {base}
    assert schedule.run_marker(g, base).parent == g.server_dir(base) / "runs"
    assert schedule.group_pending(g, base) == [(s, b) for s in (base, k3, k7) for b in g.benches[s]]
    nobase = grid("sweep.baseline=false")       # without a baseline each cell is a group of its own
    k3, k7 = (next(s for s, c in nobase.servers.items() if c.spec["num_speculative_tokens"] == k) for k in (3, 7))
    assert schedule.leads(nobase) == [k3, k7] and schedule.group(nobase, k3) == [k3] and schedule.group(nobase, k7) == [k7]


def test_coresident_members_take_turns_repeat_by_repeat_in_a_rotating_order():
    g = grid("sweep.repeats=4")
    base, k3, k7 = members(g)
    turns = schedule.turns(g, schedule.group(g, base))
    order = [sid for _, sid, _ in turns]
    assert order == [base, k3, k7, k3, k7, base, k7, base, k3, base, k3, k7]
    for i, (rnd, sid, bids) in enumerate(turns):         # one repeat a turn, repeat i // 3
        assert rnd == 0 and [g.benches[sid][b].spec["repeat"] for b in bids] == [i // 3]
    assert sorted((sid, b) for _, sid, bids in turns for b in bids) == sorted(schedule.group_pending(g, base))


def test_relaunch_members_take_one_turn_a_round_in_an_order_that_rotates_with_the_round():
    g = grid("sweep.residency=relaunch", "sweep.rounds=3")       # 10 repeats in 3 rounds: 0-3, 4-6, 7-9
    base, k3, k7 = members(g)
    turns = schedule.turns(g, schedule.group(g, base))
    assert [(rnd, sid) for rnd, sid, _ in turns] == [(0, base), (0, k3), (0, k7), (1, k3), (1, k7), (1, base),
                                                      (2, k7), (2, base), (2, k3)]
    assert [len(bids) for _, _, bids in turns] == [4, 4, 4, 3, 3, 3, 3, 3, 3]


def test_coresident_rounds_are_launches_of_the_whole_group():
    g = grid("sweep.repeats=4", "sweep.rounds=2")
    base, k3, k7 = members(g)
    turns = schedule.turns(g, schedule.group(g, base))
    assert [rnd for rnd, _, _ in turns] == [0] * 6 + [1] * 6
    assert [g.benches[s][b].spec["repeat"] for rnd, s, bids in turns for b in bids if rnd == 1] == [2] * 3 + [3] * 3


def test_turns_skip_finished_cells(tmp_path):
    g = grid(f"results_dir={tmp_path}", "sweep.repeats=2")
    base, k3, k7 = members(g)
    for sid in (base, k7):
        for bid in g.benches[sid]:
            g.metrics_path(sid, bid).parent.mkdir(parents=True)
            g.metrics_path(sid, bid).write_text("{}")
    assert [sid for _, sid, _ in schedule.turns(g, schedule.group(g, base))] == [k3, k3]
    assert schedule.group_pending(g, base) == [(k3, b) for b in g.benches[k3]]


def test_repeats_are_spread_over_the_rounds_in_contiguous_blocks():
    g = grid("sweep.rounds=3")            # the default's 10 repeats: round r * 3 // 10
    for sid in g.servers:
        by_repeat = {g.benches[sid][b].spec["repeat"]: schedule.round_of(g, sid, b) for b in g.benches[sid]}
        assert by_repeat == {r: r * 3 // 10 for r in range(10)}
        assert [len(schedule.round_cells(g, sid, r)) for r in range(3)] == [4, 3, 3]
        assert sorted(b for r in range(3) for b in schedule.round_cells(g, sid, r)) == sorted(g.benches[sid])


def test_more_rounds_than_repeats_runs_one_repeat_per_round():
    g = grid("sweep.repeats=2", "sweep.rounds=3")
    for sid in g.servers:
        assert schedule.rounds(g, sid) == 2
        assert sorted(schedule.round_of(g, sid, b) for b in g.benches[sid]) == [0, 1]
    single = grid("sweep.repeats=1")
    assert all(schedule.rounds(single, sid) == 1 for sid in single.servers)


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
    assert plain["verdict"] == stats.FASTER and clustered["verdict"] == stats.UNRESOLVED
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


# ---- the one vocabulary, read once at a fixed budget -------------------------------------------------------------
@pytest.mark.parametrize("lo, hi, expected", [
    (1.10, 1.50, stats.FASTER), (1.01, 1.04, stats.FASTER), (0.60, 0.98, stats.SLOWER),
    (0.96, 1.04, stats.EQUIVALENT), (1 / 1.05, 1.05, stats.EQUIVALENT), (0.95, 1.06, stats.UNRESOLVED),
    (None, 1.2, None)])
def test_a_fixed_interval_reads_in_the_four_words(lo, hi, expected):
    assert stats.verdict(lo, hi) == expected
    assert stats.verdict(lo, hi, at_budget=False) == (None if expected == stats.UNRESOLVED else expected)
    assert stats.answered(stats.verdict_text(expected)) == (expected in (stats.FASTER, stats.SLOWER, stats.EQUIVALENT))


# ---- the DAG: one launch per member, turns, a resumed cell, a rerun that does nothing; relaunch rounds ----------
def dag_study(pair_results, tmp_path, *extra):
    records, site, standin = standin_study(pair_results, tmp_path, 0.2)
    results = tmp_path / "results"
    study = [*standin, "sweep=default", "server.stop_grace_s=5", "sweep.num_speculative_tokens=[2,3]",
             "dataset.num_prompts=4", "sweep.concurrency=[4]", "sweep.max_tokens=8", "sweep.warmup=0",
             "sweep.repeats=4", "tracking=off", *extra]     # after snakemake_argv's sweep.repeats=1
    argv = snakemake_argv(tmp_path / "work", results, *study, extra=["--resources", "gpu=1"])
    gpus = json.dumps([{"index": "0", "memory_total_mib": 81559}])       # an injected 80 GiB GPU
    env = {"SPECSWEEP_GPUS": gpus, "SPECSWEEP_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}

    def launches():
        started = sorted((json.loads(p.read_text()) for p in records.glob("*.json")), key=lambda r: r["started_at"])
        return [standin_k(r) for r in started]
    g = expand(compose_jobs(["study=t", f"results_dir={results}", "sweep.repeats=1", *study]))   # as the DAG composes it
    return g, argv, env, launches


def k_of(g, sid):
    return g.servers[sid].spec["num_speculative_tokens"]


@pytest.mark.dag
def test_a_group_starts_each_server_once_takes_turns_resumes_one_cell_and_a_rerun_does_nothing(random_results, tmp_path):
    g, argv, env, launches = dag_study(random_results, tmp_path)
    rc = run_bounded(argv, tmp_path / "first.log", 600, env)
    assert rc == 0, (tmp_path / "first.log").read_text()[-4000:]
    assert launches() == [0, 2, 3]                                  # one launch per server cell, up together
    lead = schedule.leads(g)[0]
    ran = sorted(((json.loads(g.metrics_path(s, b).read_text())) for s in g.servers for b in g.benches[s]),
                 key=lambda m: m["started_at"])
    # the turns, repeat by repeat, in a rotating order: (0, 2, 3), (2, 3, 0), (3, 0, 2), (0, 2, 3)
    assert [k_of(g, m["server_cell"]) for m in ran] == [0, 2, 3, 2, 3, 0, 3, 0, 2, 0, 2, 3]
    assert [g.benches[m["server_cell"]][m["bench_cell"]].spec["repeat"] for m in ran] == [r for r in range(4) for _ in "abc"]
    # each launch of the group stayed up through all the turns: one launch record each, overlapping the others
    records = {s: served_launches(g.log_dir(s)) for s in g.servers}
    assert all(len(r) == 1 for r in records.values())
    spans = [(r[0]["started_at"], r[0]["stopped_at"]) for r in records.values()]
    assert max(a for a, _ in spans) < min(b for _, b in spans)
    shares = {s: r[0]["gpu_memory_share"] for s, r in records.items()}
    assert all(r[0]["residency"] == "coresident" and r[0]["cuda_visible_devices"] == "0" for r in records.values())
    assert 0 < sum(shares.values()) <= 0.9 and all(m["residency"] == "coresident" for m in ran)
    for s, r in records.items():               # each member launched with its own share of the GPU
        argv_s = r[0]["argv"]
        assert float(argv_s[argv_s.index("--mem-fraction-static") + 1]) == shares[s]
    # a speculative cell whose repeat ran before its baseline's still has its comparison (refresh_comparisons)
    assert all(m["baseline_cell"] == lead for m in ran)
    assert (g.results_dir / "t" / "summary.csv").exists()

    # a run stopped before K=2's last bench cell finished (its metrics.json, cells-*.done and the study's summary
    # missing, as after a failed job): the rerun launches K=2 alone, and runs only that cell
    k2 = next(s for s in g.servers if k_of(g, s) == 2)
    lost = next(b for b in g.benches[k2] if g.benches[k2][b].spec["repeat"] == 3)
    kept = {(s, b): g.metrics_path(s, b).stat().st_mtime for s in g.servers for b in g.benches[s] if b != lost or s != k2}
    g.metrics_path(k2, lost).unlink()
    g.cells_done(k2).unlink()
    (g.results_dir / "t" / "summary.csv").unlink()
    time.sleep(1)
    rc = run_bounded(argv, tmp_path / "resume.log", 600, env)
    assert rc == 0, (tmp_path / "resume.log").read_text()[-4000:]
    assert launches() == [0, 2, 3, 2]
    assert g.metrics_path(k2, lost).exists()
    assert {c: g.metrics_path(*c).stat().st_mtime for c in kept} == kept
    assert len(served_launches(g.log_dir(k2))) == 2           # each launch that served keeps its record

    # a rerun after a finished study does nothing
    dry = run_bounded([*argv, "-n"], tmp_path / "dry.log", 300, env)
    assert dry == 0 and "Nothing to be done" in (tmp_path / "dry.log").read_text(), \
        (tmp_path / "dry.log").read_text()[-3000:]
    rc = run_bounded(argv, tmp_path / "rerun.log", 300, env)
    assert rc == 0 and launches() == [0, 2, 3, 2]


@pytest.mark.dag
def test_relaunch_rounds_launch_each_member_once_a_round_in_a_rotating_order(random_results, tmp_path):
    g, argv, env, launches = dag_study(random_results, tmp_path, "sweep.residency=relaunch", "sweep.rounds=2")
    rc = run_bounded(argv, tmp_path / "first.log", 600, env)
    assert rc == 0, (tmp_path / "first.log").read_text()[-4000:]
    assert launches() == [0, 2, 3, 2, 3, 0]                      # baseline, K=2, K=3, then round 1 rotated
    for sid in g.servers:
        records = served_launches(g.log_dir(sid))
        assert len(records) == 2 and all(r["residency"] == "relaunch" for r in records)
        assert len(list(g.server_dir(sid).glob("*/metrics.json"))) == 4


def test_coresident_repeats_are_the_blocks_the_paired_ci_resamples():
    co = grid()                                                  # 10 co-resident repeats: one block each
    rel = grid("sweep.residency=relaunch", "sweep.rounds=3")     # 3 relaunch rounds
    few = grid("sweep.repeats=4")                                # too few repeats to resample as blocks
    for sid in co.servers:
        assert sorted(schedule.block_of(co, sid, b) for b in co.benches[sid]) == list(range(10))
        assert sorted(schedule.block_of(rel, sid, b) for b in rel.benches[sid]) == [0] * 4 + [1] * 3 + [2] * 3
        assert {schedule.block_of(few, sid, b) for b in few.benches[sid]} == {None}
    one = grid("sweep.residency=relaunch")
    assert {schedule.block_of(one, s, b) for s in one.servers for b in one.benches[s]} == {None}

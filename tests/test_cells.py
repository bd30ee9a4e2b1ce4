from dataclasses import replace

import specsweep.grid.cells as cells
from specsweep.cli import expand_multirun
from specsweep.grid.cells import BenchCell, expand
from specsweep.grid.config import compose_jobs, jobs_from_snakemake


def ids(grid):
    return {(sid, bid) for sid in grid.servers for bid in grid.benches[sid]}


def test_default_grid_has_one_shared_baseline_and_two_dflash_cells():
    grid = expand(compose_jobs([]))
    base = [s for s, c in grid.servers.items() if c.is_baseline]
    spec = [s for s, c in grid.servers.items() if not c.is_baseline]
    assert len(base) == 1 and len(spec) == 2
    assert all(grid.baseline_of[s] == base[0] for s in spec)
    # the matched baseline bench cell has the same bench id under the baseline server cell
    assert set(grid.benches[spec[0]]) == set(grid.benches[base[0]])


def test_ids_are_the_same_through_snakemake_config_and_hydra_multirun():
    via_snakemake = expand(jobs_from_snakemake(
        {"sweep": {"num_speculative_tokens": ["3", "7"]}, "overrides": "sweep.datasets=[synthetic,gsm8k]"}))
    runs = expand_multirun(["sweep.num_speculative_tokens=3,7", "dataset=synthetic,gsm8k"])
    assert len(runs) == 4
    via_multirun = expand([j for ov in runs for j in compose_jobs(ov)])
    assert ids(via_snakemake) == ids(via_multirun)
    assert len(via_snakemake.servers) == 3   # one baseline shared by K=3 and K=7


def test_also_groups_join_one_grid_with_one_baseline():
    """`specsweep sweep ... --also "..."`: cells that are no product of axes (K=3,7 at c=4, plus K=2 at c=1) share
    the study's one baseline, which runs every concurrency its cells run, and keep the ids they have alone."""
    from specsweep.cli import build_parser, override_runs

    args = build_parser().parse_args(["cells", "-m", "sweep.num_speculative_tokens=3,7", "sweep.repeats=1",
                                      "--also", "sweep.num_speculative_tokens=2 sweep.concurrency=[1]"])
    runs = override_runs(args)
    assert len(runs) == 3
    grid = expand([j for ov in runs for j in compose_jobs(ov)])
    [base] = [s for s, c in grid.servers.items() if c.is_baseline]
    assert len(grid.servers) == 4 and {grid.baseline_of[s] for s in grid.servers if s != base} == {base}
    assert sorted(b.spec["concurrency"] for b in grid.benches[base].values()) == [1, 4]
    alone = expand(compose_jobs(["sweep.num_speculative_tokens=[2]", "sweep.concurrency=[1]", "sweep.repeats=1"]))
    assert ids(alone) - {(base, b) for b in grid.benches[base]} <= ids(grid)


def test_ids_are_stable_and_ignore_operational_settings():
    a = expand(compose_jobs([]))
    b = expand(compose_jobs(["server.port_range=[20000,20010]", "server.ready_timeout_s=9"]))
    assert ids(a) == ids(b)
    c = expand(compose_jobs(["server.max_model_len=1024"]))
    assert not ids(a) & ids(c)


def test_one_new_grid_value_adds_only_its_own_server_cell():
    a = expand(compose_jobs([]))
    b = expand(compose_jobs(["sweep.num_speculative_tokens=[3,7,5]"]))
    assert ids(a) < ids(b)
    assert len({s for s, _ in ids(b) - ids(a)}) == 1


def test_bench_axes_and_repeats():
    grid = expand(compose_jobs(["sweep.concurrency=[1,8]", "sweep.thinking=[false,true]", "sweep.repeats=3",
                                "sweep.num_speculative_tokens=3"]))
    assert len(grid.servers) == 2
    assert all(len(b) == 2 * 2 * 3 for b in grid.benches.values())


def test_method_none_is_a_baseline_only_study():
    grid = expand(compose_jobs(["pair.method=none"]))
    assert [c.is_baseline for c in grid.servers.values()] == [True]


def test_an_experiment_preset_is_its_group_choices_and_its_study_wins():
    explicit = compose_jobs(["study=blocks", "server=local", "kernel=local_sdpa", "sweep=blocks"])
    assert compose_jobs(["experiment=blocks"]) == explicit          # the same configs, so the same cells
    assert ids(expand(compose_jobs(["experiment=blocks"]))) == ids(expand(explicit))
    # the preset's study beats the root's `study: default`; a command-line override beats both
    [renamed] = compose_jobs(["experiment=blocks", "study=blocks2", "server=local_cuda"])
    assert renamed["study"] == "blocks2" and renamed["server"]["device"] == "cuda"
    assert renamed["sweep"]["num_speculative_tokens"] == [1, 3, 7, 15]


def test_a_key_added_to_a_spec_enters_the_id_only_away_from_its_default(monkeypatch):
    grid = expand(compose_jobs([]))
    sid, cell = next((s, c) for s, c in grid.servers.items() if not c.is_baseline)
    bid, bench = next(iter(grid.benches[sid].items()))

    def server_id(value):      # the same cell, as a spec with a new server key would give it
        return replace(cell, spec={**cell.spec, "server": {**cell.spec["server"], "new_key": value}}).id

    def bench_id(value):
        return BenchCell({**bench.spec, "new_bench_key": value}).id

    assert server_id(4) != sid and bench_id(None) != bid          # unlisted, a new key renames every cell
    monkeypatch.setattr(cells, "ADDED_SPEC_KEYS", {**cells.ADDED_SPEC_KEYS, "server.new_key": 4, "new_bench_key": None})
    assert server_id(4) == sid and bench_id(None) == bid          # listed, at its default: the old ids
    assert server_id(8) != sid and bench_id("x") != bid           # set away from it: new cells
    spec = {**cell.spec, "server": {**cell.spec["server"], "new_key": 4}}
    assert replace(cell, spec=spec).id == sid and spec["server"]["new_key"] == 4   # the recorded spec keeps it


def test_sweep_runs_its_own_pythons_snakemake_where_no_script_was_installed(tmp_path, monkeypatch):
    """An offline host installs Snakemake with `pip --target`, which writes no `snakemake` script: the sweep
    then runs `python -m snakemake` under the same Python instead of whatever `snakemake` PATH holds."""
    import subprocess
    import sys

    from specsweep import cli

    calls = []
    monkeypatch.setattr(subprocess, "call", lambda argv, cwd=None: calls.append(argv) or 0)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python3"))
    jobs = compose_jobs([f"results_dir={tmp_path / 'results'}"])
    assert cli.run_jobs(jobs, 2, ["-n"], "test") == 0
    assert calls[0][:3] == [str(tmp_path / "bin" / "python3"), "-m", "snakemake"] and calls[0][-1] == "-n"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "snakemake").write_text("")
    cli.run_jobs(jobs, 2, [], "test")
    assert calls[1][0] == str(tmp_path / "bin" / "snakemake")

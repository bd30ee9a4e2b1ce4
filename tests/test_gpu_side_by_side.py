"""Two GPU server cells side by side in one local Snakemake run (--resources gpu=2), where one finishes while the
other is mid-way: each runs once. A finished checkpoint makes Snakemake re-evaluate every server cell's inputs,
also those of the cell still running; it must not name that cell's unfinished bench cells as a new job (it did,
and on a 2x H200 host a second server for the same cell started on the freed GPU; common.smk's run_marker). Here
such a second job shows as a second logs/job-*.log of the cell, and fails on the first job's live server.json.

No GPU here: the inventory is injected (SPECSWEEP_GPUS) and the servers are the SGLang stand-in
(tests/fake_sglang), whose STANDIN_SLOW_S_K<K> sets how long each server cell's requests take."""
import json
import os
import time

import pytest

from helpers import last_launch, run_bounded, served_launches, snakemake_argv, standin_k, standin_study

pytestmark = pytest.mark.dag

FAST_K, SLOW_K = 2, 3
FAST_S, SLOW_S = 2.0, 5.0     # per bench cell (its 4 prompts run at once): the K=3 cell is mid-way when K=2 ends
REPEATS = 3


def test_a_finished_gpu_cell_does_not_start_the_running_one_again(random_results, tmp_path):
    records, site, standin = standin_study(random_results, tmp_path, 0.5)
    results = tmp_path / "results"
    study = [*standin, f"+server.env.STANDIN_SLOW_S_K{FAST_K}={FAST_S}",
             f"+server.env.STANDIN_SLOW_S_K{SLOW_K}={SLOW_S}",
             "server.stop_grace_s=5", "sweep.baseline=false", f"sweep.num_speculative_tokens=[{FAST_K},{SLOW_K}]",
             "dataset.num_prompts=4", "sweep.concurrency=[4]", "sweep.max_tokens=8", "sweep.warmup=0",
             f"sweep.repeats={REPEATS}", "sweep.rounds=1", "tracking=off"]    # one launch per server cell
    argv = snakemake_argv(tmp_path / "work", results, *study, extra=["--resources", "gpu=2"])
    log = tmp_path / "snakemake.log"
    # env_check runs in Snakemake's environment: it finds the stand-in there, as preflight finds an SGLang
    env = {"SPECSWEEP_GPUS": "0,1", "SPECSWEEP_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.monotonic()
    rc = run_bounded(argv, log, 300, env)
    wall = time.monotonic() - t0
    print(f"snakemake took {wall:.1f} s")
    # one serve_and_bench job per server cell: the running cell was not started again
    jobs = {}
    for p in sorted((results / "t").glob("*/logs/job-*.log")):
        jobs.setdefault(p.parent.parent.name, []).append(p.name)
    twice = {sid: names for sid, names in jobs.items() if len(names) > 1}
    assert not twice, f"a server cell got a second serve_and_bench job: {twice}\n{log.read_text()[-3000:]}"
    assert rc == 0, log.read_text()[-4000:]
    assert len(jobs) == 2, jobs

    dirs = {standin_k(last_launch(p.parent)): p.parent.parent for p in (results / "t").glob("*/logs/server.json")}
    assert sorted(dirs) == [FAST_K, SLOW_K], dirs
    started = [json.loads(p.read_text()) for p in sorted(records.glob("*.json"))]
    starts = {k: [r for r in started if standin_k(r) == k] for k in (FAST_K, SLOW_K)}
    # one server per cell, one run marker, every bench cell measured
    for k, d in dirs.items():
        assert len(starts[k]) == 1, (f"K={k}: {len(starts[k])} servers started",
                                     [(r["env"]["CUDA_VISIBLE_DEVICES"], r["started_at"]) for r in starts[k]])
        assert len(served_launches(d / "logs")) == 1, sorted(p.name for p in (d / "logs").iterdir())
        assert len(list((d / "runs").glob("*.done"))) == 1, sorted(p.name for p in (d / "runs").iterdir())
        assert len(list(d.glob("*/metrics.json"))) == REPEATS, sorted(p.name for p in d.iterdir())
    fast, slow = starts[FAST_K][0], starts[SLOW_K][0]
    # side by side, each on its own GPU
    assert {fast["env"]["CUDA_VISIBLE_DEVICES"], slow["env"]["CUDA_VISIBLE_DEVICES"]} == {"0", "1"}
    assert fast["started_at"] < slow["stopped_at"] and slow["started_at"] < fast["stopped_at"]
    # the case this is about: when the fast cell's job had ended, the slow one had finished some bench cells, not all
    [fast_done] = (dirs[FAST_K] / "runs").glob("*.done")
    slow_times = sorted(p.stat().st_mtime for p in dirs[SLOW_K].glob("*/metrics.json"))
    before = sum(t < fast_done.stat().st_mtime for t in slow_times)
    assert 0 < before < REPEATS, (f"the slow cell had {before} of {REPEATS} bench cells when the fast one ended: "
                                  "the timing did not give the case this tests", wall)

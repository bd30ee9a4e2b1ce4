"""sweep.k_schedule: vLLM's num_speculative_tokens_per_batch_size as one server cell beside the fixed-K cells.
Its argv, id and name, validation, preflight's refusal with data parallel, and the K comparison with each
fixed K. No server runs (vLLM's own parser reads the argv in test_vllm_argv.py)."""
import json

import pytest

from specsweep.backends.vllm import checks as vllm_checks
from specsweep.backends.vllm import launch as vllm_cmd
from specsweep.core import labels, parts
from specsweep.core.errors import ConfigError
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.plan import checks
from specsweep.read import summary
from specsweep.read.study import Study

SCHEDULE = "sweep.k_schedule=[[5,64,3],[1,4,7]]"


def expanded(*overrides):
    return expand(compose_jobs(["results_dir=results", "sweep.num_speculative_tokens=[3,7]", "sweep.repeats=1",
                                "sweep.concurrency=[1,8]", *overrides]))


def test_unset_keeps_every_id_and_a_schedule_is_one_more_cell_at_its_largest_k():
    plain = expanded()
    grid = expanded(SCHEDULE)
    extra = set(grid.servers) - set(plain.servers)
    assert set(plain.servers) <= set(grid.servers) and len(extra) == 1
    (sid,) = extra
    cell = grid.servers[sid]
    assert sid.startswith("tiny-dflash-k7-sched-")
    assert cell.spec["k_schedule"] == [[1, 4, 7], [5, 64, 3]]            # sorted, as vLLM sorts it
    assert cell.spec["num_speculative_tokens"] == 7                       # vLLM clamps each entry to K
    assert sorted(b.spec["concurrency"] for b in grid.benches[sid].values()) == [1, 8]
    assert grid.baseline_of[sid] == grid.baseline_of[next(iter(plain.servers.keys() - {grid.baseline_of[sid]}))]


def test_the_schedule_reaches_vllm_in_its_speculative_config():
    grid = expanded(SCHEDULE, "server=vllm_gpu", "pair=qwen3-8b-dflash-b16")
    cell = next(c for c in grid.servers.values() if c.spec.get("k_schedule"))
    argv = vllm_cmd.build_argv(["vllm"], cell.spec, "127.0.0.1", 8000, cell.served_name)
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "dflash", "num_speculative_tokens": 7, "model": "z-lab/Qwen3-8B-DFlash-b16",
        "num_speculative_tokens_per_batch_size": [[1, 4, 7], [5, 64, 3]]}


@pytest.mark.parametrize("schedule, message", [
    ("[[2,4,7]]", "must start at batch size 1 (vLLM requires it)"),
    ("[[1,4,7],[3,8,3]]", "overlap: each batch size gets one K"),
    ("[[1,0,7]]", "needs 1 <= start <= end and K >= 0"),
])
def test_a_bad_schedule_is_one_line(schedule, message):
    with pytest.raises(ConfigError) as e:
        expanded(f"sweep.k_schedule={schedule}")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_preflight_refuses_a_schedule_with_data_parallel_and_on_other_backends():
    cfg = compose_jobs(["server=vllm_gpu", SCHEDULE, "server.data_parallel_size=2"])[0]
    check = vllm_checks.check_k_schedule(cfg, {})
    assert check.status == "fail" and "vLLM drops the schedule when data parallel is above 1" in check.message
    assert vllm_checks.check_k_schedule(compose_jobs(["server=vllm_gpu", SCHEDULE])[0], {}).status == "pass"
    old = {"server_env": {"vllm": "0.8.0", "k_schedule": False}}
    assert vllm_checks.check_k_schedule(compose_jobs(["server=vllm_gpu", SCHEDULE])[0], old).status == "fail"
    local = compose_jobs(["server=local", "kernel=local_sdpa", SCHEDULE])[0]
    assert checks.check_k_schedule in checks.refusals("local")
    assert vllm_checks.check_k_schedule in parts.checks("vllm").CHECKS and not checks.refusals("vllm")
    assert checks.check_k_schedule(local, {}).message == (
        "sweep.k_schedule [[5, 64, 3], [1, 4, 7]] is not implemented on the local backend: run these cells on a "
        "backend that has it (server.backend vllm), or drop sweep.k_schedule")


def test_the_k_comparison_sets_the_schedule_against_each_fixed_k(tmp_path):
    from test_verdicts import study
    grid = study(tmp_path, {0: 1.0, 3: 1.4, 7: 1.6}, extra=[SCHEDULE])
    loaded = Study.load(grid.study_files("v").dir, grid)
    statements = [k["statement"] for k in summary.k_comparison(loaded)]
    assert any(s.startswith("K=7 vs K=3: ") for s in statements)
    assert any(s.startswith("K schedule 1-4:7,5-64:3 vs K=3: ") for s in statements)
    assert any(s.startswith("K schedule 1-4:7,5-64:3 vs K=7: ") for s in statements)
    row = next(r for r in summary.rows(loaded) if r["k_schedule"])
    assert labels.label(row).startswith("tiny · dflash K schedule 1-4:7,5-64:3 · ")
    assert row["ceiling_na"] is None and row["break_even_al"] is None

"""sweep.verification: standard or block verification (vLLM's rejection_sample_method) as an axis of server
cells. Their argv, ids and names, and the refusal beside a set acceptance. No server runs; preflight's checks
are in test_preflight.py, vLLM's own parser reads the argv in test_vllm_argv.py."""
import json

import pytest

from specsweep.backends.vllm import launch
from specsweep.core import labels
from specsweep.core.errors import ConfigError
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.read import mlflow_runs


def expanded(*overrides):
    return expand(compose_jobs(["results_dir=results", "sweep.num_speculative_tokens=[3,7]", "sweep.repeats=1",
                                *overrides]))


def by_method(grid):
    return {(c.spec["num_speculative_tokens"], c.spec["verification"]): sid
            for sid, c in grid.servers.items() if not c.is_baseline}


def test_standard_keeps_every_id_and_block_gives_a_named_cell_per_k():
    plain = expanded()
    assert expanded("sweep.verification=standard").servers.keys() == plain.servers.keys()
    grid = expanded("sweep.verification=[standard,block]", "sweep.temperature=0.8")
    ids = by_method(grid)
    assert set(ids) == {(3, "standard"), (3, "block"), (7, "standard"), (7, "block")}
    warm = expanded("sweep.temperature=0.8")
    assert {ids[3, "standard"], ids[7, "standard"]} == {s for s, c in warm.servers.items() if not c.is_baseline}
    assert ids[7, "block"].startswith("tiny-dflash-k7-block-") and ids[7, "block"] not in warm.servers
    assert len([c for c in grid.servers.values() if c.is_baseline]) == 1     # one baseline for all four


def test_block_reaches_vllm_as_its_rejection_sample_method():
    grid = expanded("sweep.verification=[standard,block]", "server=vllm_gpu", "pair=qwen3-8b-dflash-b16")
    configs = {}
    for (k, method), sid in by_method(grid).items():
        cell = grid.servers[sid]
        argv = launch.build_argv(["vllm"], cell.spec, "127.0.0.1", 8000, cell.served_name)
        configs[k, method] = json.loads(argv[argv.index("--speculative-config") + 1])
    assert configs[3, "standard"] == {"method": "dflash", "num_speculative_tokens": 3,
                                      "model": "z-lab/Qwen3-8B-DFlash-b16"}
    assert configs[3, "block"] == {**configs[3, "standard"], "rejection_sample_method": "block"}


def test_block_beside_a_set_acceptance_is_one_line():
    with pytest.raises(ConfigError) as e:
        expanded("sweep.verification=[block]", "sweep.set_acceptance=[null,3.0]")
    assert str(e.value).startswith("config: sweep.verification ['block'] with sweep.set_acceptance [None, 3.0]: a "
                                   "set acceptance replaces the verification")
    with pytest.raises(Exception):          # the schema's enum
        expanded("sweep.verification=[blockwise]")


def test_the_run_name_and_tags_say_block():
    row = {"pair": "tiny", "method": "dflash", "num_speculative_tokens": 7, "verification": "block",
           "dataset": "synthetic", "thinking": False, "concurrency": 4, "backend": "vllm", "server_cell": "x"}
    assert labels.label(row) == "tiny · dflash K=7 · block verification · data=synthetic · c=4"
    assert labels.label({**row, "verification": "standard"}) == "tiny · dflash K=7 · data=synthetic · c=4"
    assert mlflow_runs.row_tags(row)["verification"] == "block"

"""A new backend is its package, one registry line and one conf/server/ entry: a stand-in fourth one
(tests/echo_backend/) added at test time runs through config (the schema's backend list comes from the registry),
cells, preflight (refusing what it lacks by capability), the runner, bench_cell and MLflow's naming with nothing
else changed (docs/development.md)."""
import shutil
from pathlib import Path

import pytest

from specsweep.core import labels, registry
from specsweep.core.errors import ConfigError
from specsweep.core.results import read_json
from specsweep.grid import config, schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.plan import preflight
from specsweep.read import mlflow_runs
from specsweep.run import runner

HERE = Path(__file__).resolve().parent
SERVER_ENTRY = """\
backend: echo
device: cpu
dtype: float32
threads: 1
job: {runtime_min: 5, mem_mb: 1000, cpus: null, gpu_model: null, signal_before_s: 10}
"""


@pytest.fixture
def echo(tmp_path, monkeypatch):
    """The places a new backend touches, made in tmp_path: its package is tests/echo_backend/."""
    conf = tmp_path / "conf"
    shutil.copytree(config.CONF_DIR, conf)
    (conf / "server" / "echo.yaml").write_text(SERVER_ENTRY)                  # its conf/server/ entry
    monkeypatch.setattr(config, "CONF_DIR", conf)
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setitem(registry.BACKENDS, "echo", "echo_backend")           # its registry line

    def jobs(*overrides):
        return compose_jobs([f"results_dir={tmp_path / 'results'}", "server=echo", "sweep.num_speculative_tokens=[3]",
                             "dataset.num_prompts=3", "sweep.repeats=1", "sweep.concurrency=[1]", *overrides])
    return jobs


def test_a_fourth_backend_is_its_package_a_registry_line_and_a_server_entry(echo):
    jobs = echo()
    assert "echo" in config.schema()["properties"]["server"]["properties"]["backend"]["enum"]   # from the registry
    grid = expand(jobs)
    base, spec = sorted(grid.servers, key=lambda s: not grid.servers[s].is_baseline)
    assert base.startswith("base-echo-target-") and spec.startswith("tiny-echo-dflash-k3-")      # its id tag

    with pytest.raises(ConfigError, match="overrides the cell's spec .*: use pair.target"):       # its spec flags
        echo('+server.extra_args=["--echo-model=x"]')

    env = preflight.environment(jobs[0]["server"])                                                # its checks
    assert env["server_env"] == {"echo": "1.0"}
    assert [c.name for c in preflight.run_checks(jobs, env)] == ["dataset", "echo", "set_acceptance", "verification",
                                                                 "k_schedule", "divergence", "residency"]   # refused by capability
    [refused] = [c for c in preflight.run_checks(echo("sweep.set_acceptance=[3.0]"), env) if c.status == "fail"]
    assert refused.message == ("sweep.set_acceptance [3.0] is not implemented on the echo backend: run these cells "
                               "on a backend that has it (server.backend vllm or local), or drop sweep.set_acceptance")
    assert registry.get("echo").describe(env) == "echo 1.0"

    bench = next(iter(grid.benches[spec].values())).spec                                          # its session
    materialise(bench["dataset"], grid.dataset_file(bench["dataset"]))
    for sid in (base, spec):
        runner.run_server_cell(grid, sid, schedule.run_marker(grid, sid), progress=False)
    [bid] = grid.benches[spec]
    m = read_json(grid.metrics_path(spec, bid))
    assert (m["backend"], m["valid"], m["greedy_agreement"], m["baseline_cell"]) == ("echo", True, 1.0, base)
    # its steps drafted (and accepted nothing): a speculative cell with no drafts at all is invalid (never_drafted)
    assert m["spec_decode"]["num_draft_tokens"] > 0 and m["spec_decode"]["mean_acceptance_length"] == 1.0
    assert m["spec_decode_source"] == "per_request" and m["spec_decode_exact"] is True

    row = {"pair": "tiny", "method": "dflash", "num_speculative_tokens": 3, "dataset": "synthetic",
           "thinking": False, "concurrency": 1, "backend": "echo"}
    assert labels.label(row) == "tiny · dflash K=3 · echo · data=synthetic · c=1"                # its name, as ids
    assert mlflow_runs.server_versions(row, [m]) == {"echo_version": "1.0"}                      # its versions


def test_the_new_backend_is_nowhere_in_the_library():
    """Nothing under src/ names it: adding it changed no module there."""
    src = HERE.parent / "src" / "specsweep"
    assert not [p for p in src.rglob("*.py") if "echo" in p.read_text().lower()]

"""The planner's figures for the shapes of the archived GPU groups stay what they were when the backends took over
their machines (issue 51): the 8B-shaped group (baseline, K=7 and K=15 at concurrency 1 and 8), the 27B hybrid
group of three and the tiny pair's GPU group (experiment=gpu_tiny, the shipped pair), each on an 80 GiB and a
141 GiB GPU with a 128 GiB host and 2 cores. tests/data/planner_figures.json was
written by the planner before the move (plan/residency's own arithmetic) and matched by the one after it. Pure."""
import json
import shutil
from pathlib import Path

import pytest

from specsweep.grid import schedule
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.models import shaped
from specsweep.plan import residency

GIB = 1024 ** 3
GOLDEN = json.loads((Path(__file__).parent / "data" / "planner_figures.json").read_text())
GROUPS = {
    "8b-group": [["experiment=gpu_8b_shaped", "server=vllm_gpu", "sweep.num_speculative_tokens=[7,15]",
                  "sweep.concurrency=[1,8]"]],
    "27b-group": [["experiment=gpu_27b_hybrid", "pair=qwen3.6-27b-dflash", "server=vllm_gpu"],
                  ["experiment=gpu_27b_hybrid", "pair=qwen3.5-27b-dflash", "server=vllm_gpu",
                   "pair.target=RES/models/qwen3.6-27b-dflash-shaped/target"]],
    "tiny-group": [["experiment=gpu_tiny", "server=vllm_gpu"]],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    res = tmp_path_factory.mktemp("res")
    for name, folder in (("qwen3-8b", "qwen3-8b-shaped"), ("qwen3.5-27b", "qwen3.5-27b-dflash-shaped"),
                         ("qwen3.6-27b", "qwen3.6-27b-dflash-shaped")):
        shaped.write(name, res / "models" / folder, with_tokenizer=False)
    shutil.copytree(Path(__file__).resolve().parents[1] / "models" / "tiny", res / "models" / "tiny")
    return res


@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("device_gib", [80, 141])
def test_the_planner_s_figures_for_the_archived_groups_are_unchanged(models, group, device_gib, monkeypatch):
    monkeypatch.setattr(residency.os, "sched_getaffinity", lambda _: {0, 1})      # the golden file's 2 cores
    jobs = [j for o in GROUPS[group] for j in compose_jobs([x.replace("RES", str(models)) for x in o]
                                                           + [f"results_dir={models}"])]
    g = expand(jobs)
    [lead] = [s for s in schedule.leads(g) if len(schedule.group(g, s)) > 1]
    members = schedule.group(g, lead)
    plan = residency.plan(g, members, ["0"], device_bytes=device_gib * GIB, available_bytes=128 * GIB)
    got = [json.loads(json.dumps(plan[s].facts(), default=str)) for s in sorted(members)]
    assert got == GOLDEN[f"{group}/{device_gib}GiB"]

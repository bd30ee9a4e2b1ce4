"""The GPU studies of the H200 campaigns are named presets (conf/experiment/gpu_*.yaml, docs/gpu-hosts.md#presets):
each composes to the very jobs its step of the frozen step lists composed (bench/archive/h200/vllm/h200_vllm.sh,
bench/archive/h200/sglang/h200_sglang.sh: their override strings), and scripts/gpu_host.sh runs each named step as
a preset run."""
import re
import subprocess
from pathlib import Path

import pytest

from specsweep.grid.config import compose_jobs

REPO = Path(__file__).resolve().parents[1]
RES = "/root/res"
V, S = f"server=vllm_gpu_bundle results_dir={RES}", f"server=sglang_gpu_bundle results_dir={RES}"
# preset -> the frozen step's overrides (the step name in brackets)
STEPS = {
    "gpu_tiny_vllm": f"experiment=gpu_tiny {V}",                                                        # tiny
    "gpu_tiny_local": f"experiment=gpu_tiny server=local_cuda kernel=local_sdpa study=tiny-gpu-local "
                      f"results_dir={RES}",                                                             # tiny
    "gpu_8b_set": f"experiment=gpu_8b_shaped {V} sweep.num_speculative_tokens=[15] sweep.set_acceptance=[6.54]",
    "gpu_8b_curve": f"experiment=gpu_8b_shaped {V} study=qwen3-8b-curve sweep.num_speculative_tokens=[15] "
                    "sweep.set_acceptance=[null,2,4]",                                                 # 8b-curve 1
    "gpu_tiny_block": f"experiment=gpu_tiny {V} study=tiny-gpu-block sweep.num_speculative_tokens=[7] "
                      "sweep.verification=[standard,block] sweep.temperature=0.8",
    "gpu_tiny_sched": f"experiment=gpu_tiny {V} study=tiny-gpu-sched sweep.num_speculative_tokens=[3,7] "
                      "sweep.k_schedule=[[1,4,7],[5,64,3]] sweep.concurrency=[1,8]",
    "gpu_tiny_diag": f"experiment=gpu_tiny {V} study=tiny-gpu-diag pair.drafter={RES}/models/tiny-badmask/drafter "
                     "sweep.num_speculative_tokens=[7]",
    "gpu_8b_group": f"experiment=gpu_8b_shaped {V} study=qwen3-8b-group sweep.num_speculative_tokens=[7,15] "
                    "sweep.concurrency=[1,8] sweep.repeats=3",
    "gpu_8b_sleep": f"experiment=gpu_8b_shaped {V} study=qwen3-8b-sleep sweep.num_speculative_tokens=[15] "
                    "sweep.concurrency=[8] sweep.repeats=3 sweep.residency=sleep",
    "gpu_tiny_relaunch": f"experiment=gpu_tiny {V} study=tiny-gpu-relaunch sweep.num_speculative_tokens=[7] "
                         "sweep.repeats=4 sweep.rounds=2 sweep.residency=relaunch",
    "gpu_27b_one": f"experiment=gpu_27b_hybrid pair=qwen3.6-27b-dflash {V} study=qwen3.6-27b-hybrid",
    "gpu_sglang_tiny": f"experiment=gpu_tiny {S} kernel=sglang_triton study=tiny-gpu-sglang server.dtype=bfloat16 "
                       "sweep.num_speculative_tokens=[7]",
    "gpu_sglang_tiny_local": f"experiment=gpu_tiny server=local_cuda kernel=local_sdpa study=tiny-gpu-local-bf16 "
                             f"results_dir={RES} server.dtype=bfloat16 sweep.num_speculative_tokens=[7]",
    "gpu_sglang_8b": f"experiment=gpu_8b_shaped {S} kernel=sglang_triton study=qwen3-8b-shaped-sglang "
                     "sweep.num_speculative_tokens=[15] server.cuda_graph_max_bs=32 "
                     "server.extra_args=[--load-format,dummy]",
}


@pytest.mark.parametrize("preset", sorted(STEPS))
def test_each_preset_composes_its_frozen_steps_jobs(preset):
    assert compose_jobs([f"experiment={preset}", f"results_dir={RES}"]) == compose_jobs(STEPS[preset].split())


def test_every_gpu_preset_is_listed_in_gpu_hosts_md():
    page = (REPO / "docs" / "gpu-hosts.md").read_text()
    presets = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("gpu_*.yaml"))
    assert not [p for p in presets if f"`{p}`" not in page], "docs/gpu-hosts.md does not list them"


def test_gpu_host_runs_every_frozen_step_by_name():
    """Each step of the frozen step lists is a command of scripts/gpu_host.sh (the SGLang list's as sglang-NAME), and
    the script's shell is valid."""
    host = REPO / "scripts" / "gpu_host.sh"
    assert subprocess.run(["bash", "-n", str(host)]).returncode == 0
    commands = set(re.findall(r"^  ([a-z0-9][a-z0-9-]*)\)", host.read_text(), flags=re.M))
    for frozen, prefix in (("bench/archive/h200/vllm/h200_vllm.sh", ""), ("bench/archive/h200/sglang/h200_sglang.sh",
                                                                           "sglang-")):
        steps = set(re.findall(r"^  ([a-z0-9][a-z0-9-]*)\)", (REPO / frozen).read_text(), flags=re.M))
        if prefix:
            steps = {f"{prefix}{s}" if s not in ("recv", "install") else f"{s}-sglang" for s in steps}
        assert steps and not steps - commands, (frozen, steps - commands)


# a step that adds --also cells: (gpu_host.sh's main overrides, its --also), against the frozen step's
ALSO = {
    "8b-cost": ((f"experiment=gpu_8b_shaped results_dir={RES} server=vllm_gpu_bundle",
                 "sweep.num_speculative_tokens=[15] sweep.set_acceptance=[6.54]"),
                (f"experiment=gpu_8b_shaped {V}", "sweep.num_speculative_tokens=[15] sweep.set_acceptance=[6.54]")),
    "27b-group": ((f"experiment=gpu_27b_one results_dir={RES}",
                   f"pair=qwen3.5-27b-dflash pair.target={RES}/models/qwen3.6-27b-dflash-shaped/target"),
                  (f"experiment=gpu_27b_hybrid pair=qwen3.6-27b-dflash {V} study=qwen3.6-27b-hybrid",
                   f"pair=qwen3.5-27b-dflash pair.target={RES}/models/qwen3.6-27b-dflash-shaped/target")),
    "27b-greedy": ((f"experiment=gpu_27b_one results_dir={RES} sweep.set_acceptance=[null,6.0]",
                    f"pair=qwen3.5-27b-dflash pair.target={RES}/models/qwen3.6-27b-dflash-shaped/target "
                    "sweep.set_acceptance=[6.0]"),
                   (f"experiment=gpu_27b_hybrid pair=qwen3.6-27b-dflash {V} study=qwen3.6-27b-hybrid "
                    "sweep.set_acceptance=[null,6.0]",
                    f"pair=qwen3.5-27b-dflash pair.target={RES}/models/qwen3.6-27b-dflash-shaped/target "
                    "sweep.set_acceptance=[6.0]")),
    "8b-curve 2": ((f"experiment=gpu_8b_curve results_dir={RES} sweep.set_acceptance=[null,2,4,8,12]", ""),
                   (f"experiment=gpu_8b_shaped {V} study=qwen3-8b-curve sweep.num_speculative_tokens=[15] "
                    "sweep.set_acceptance=[null,2,4,8,12]", "")),
    "8b-studies": ((f"experiment=gpu_8b_group results_dir={RES} study=qwen3-8b-cold", ""),
                   (f"experiment=gpu_8b_shaped {V} study=qwen3-8b-cold sweep.num_speculative_tokens=[7,15] "
                    "sweep.concurrency=[1,8] sweep.repeats=3", "")),
}


@pytest.mark.parametrize("step", sorted(ALSO))
def test_a_step_with_more_cells_composes_the_frozen_steps_jobs(step):
    def jobs(main, also):
        return compose_jobs(main.split()) + (compose_jobs(main.split() + also.split()) if also else [])
    new, old = ALSO[step]
    assert jobs(*new) == jobs(*old)
    assert f"study {new[0].split()[0].removeprefix('experiment=')}" in (REPO / "scripts" / "gpu_host.sh").read_text()


def test_no_page_names_a_bench_runbook():
    """The README and docs point at presets and scripts/gpu_host.sh; a step list is named only where it lies frozen
    (bench/archive/...)."""
    pages = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(REPO)}: {m}" for p in pages for m in re.findall(r"(?<![\w/])bench/[\w-]+\.sh", p.read_text())]
    assert not found, found

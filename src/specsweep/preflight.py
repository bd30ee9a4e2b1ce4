"""The environment record (env.json) written before any server starts, and the checks that gate it."""
from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
import sys

from .results import atomic_write_json
from .server import gpu_inventory, interpreter_of, server_command, vllm_version


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def gpus() -> list[dict]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,memory.free,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = []
    for line in out.stdout.splitlines():
        idx, name, cap, total, free, driver = [x.strip() for x in line.split(",")]
        rows.append({"index": idx, "name": name, "compute_capability": cap, "memory_total_mib": int(total),
                     "memory_free_mib": int(free), "driver": driver})
    return rows


def environment(server_run: dict) -> dict:
    """Versions and devices of this machine, and of the server's own Python."""
    command = server_command(server_run)
    python = interpreter_of(command)
    try:
        import torch

        torch_info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    except ImportError:
        torch_info = {"torch": None, "cuda": None}
    return {
        "python": sys.version.split()[0], "platform": platform.platform(), **torch_info,
        "transformers": _version("transformers"), "flash_attn": _version("flash-attn"),
        "vllm_executable": command[0] if len(command) == 1 else " ".join(command),
        "vllm_python": python, "vllm": vllm_version(python) if python else None,
        "gpus": gpus(), "gpu_inventory": gpu_inventory(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "orchestrator_python": sys.executable,
    }


def write_env(configs: list[dict], out: str) -> dict:
    """Record the environment for a study; ServerError stops the DAG when vLLM cannot be found."""
    env = environment(configs[0]["server"])
    atomic_write_json(out, env)
    print(f"env: vLLM {env['vllm']} at {env['vllm_executable']} (Python {env['vllm_python']})")
    return env

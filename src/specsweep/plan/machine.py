"""What the planner asks a member's backend about the machine, and the shape of its answers.

Each backend package answers in its `machine` part (core.machines.machine(name); residency.machine_of), so the
planner (plan/residency) never names a backend:
- `gpu_need(grid, sid)`: what a member needs of a GPU (`Need`: weights, KV cache, recurrent state, an overhead), as
  its engine allocates it, or None where a model's config is not on this machine;
- `cpu_need_gib(grid, sid)`: what a member holds of a CPU host's memory;
- `IN_PROCESS`: members load in the group job's own process (the local engine), so they share its GPUs as they are;
- `SHARES_GPU`: a member can be launched with a share of a GPU's memory, so members fit side by side;
- `FIXES_KV`: its KV cache can be fixed at launch, so no member's memory profiling counts another's loading and
  members may start side by side on a GPU;
- `cpu_start_one_core(spec)`: whether its start-up keeps about one core busy on a CPU, so members start side by side;
- `SLEEP_LEVELS` and `sleep_level(grid, members, device_bytes, budget, available_bytes)`: the sleep levels it has
  between turns, and which one a group gets (None: relaunch instead), with why.
"""
from __future__ import annotations

from dataclasses import dataclass

GIB = 1024 ** 3
QUESTIONS = ("gpu_need", "cpu_need_gib", "IN_PROCESS", "SHARES_GPU", "FIXES_KV", "cpu_start_one_core",
             "SLEEP_LEVELS", "sleep_level")


@dataclass(frozen=True)
class Need:
    """One member's memory on a GPU, in bytes: what stays whatever its concurrency (weights and an overhead: the CUDA
    context, activations' peak, CUDA graphs) and what its bench cells' sequences hold (KV cache and, for a hybrid,
    the linear-attention layers' state)."""
    weights: int
    kv: int
    state: int = 0
    overhead: int = 0

    @property
    def fixed(self) -> int:
        return self.weights + self.overhead

    @property
    def cache(self) -> int:
        return self.kv + self.state

    @property
    def total(self) -> int:
        return self.fixed + self.cache


def kv_cache_given(n: Need, share: float, device: int) -> int:
    """A co-resident GPU member's fixed KV cache in MiB (where its backend FIXES_KV): its memory share less its
    weights and overhead, what its engine's profiling would have left it alone; never less than its cells need."""
    return max(n.cache, int(share * device) - n.fixed) // 2 ** 20

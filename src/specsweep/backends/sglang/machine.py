"""SGLang's answers to the planner's questions about the machine (plan/machine.py). A member takes a share of a GPU
(--mem-fraction-static, from its launch's gpu_memory_utilization), so a group's members can be up side by side;
its KV pool is sized from the memory free when it starts, which another member's loading changes, so they start one
at a time; specsweep drives no sleep mode of SGLang's, so a group that does not fit is relaunched."""
from __future__ import annotations

from specsweep.grid.cells import Grid
from specsweep.models import model_shape
from specsweep.plan.machine import GIB, Need

IN_PROCESS = False
SHARES_GPU = True
FIXES_KV = False
SLEEP_LEVELS: tuple[int, ...] = ()
OVERHEAD_GIB = 4.0         # CUDA context, activations, CUDA graphs, as for vLLM
CPU_SERVER_GIB = 2.1       # a server's processes on a CPU host (the stand-in of tests/fake_sglang on CPU)


def gpu_need(grid: Grid, sid: str) -> Need | None:
    """Weights (target and drafter), the KV its largest concurrency holds at the full context (attention layers'
    tokens) and a hybrid's state a sequence (its linear-attention layers' pages, one a speculative token more),
    from the models' shapes; None where a config is not here."""
    cell = grid.servers[sid]
    spec = cell.spec
    seqs, ctx = grid.max_concurrency(sid), int(spec["server"]["max_model_len"])
    width = model_shape.dtype_bytes(spec["server"]["dtype"])
    models = [spec["target"]] + ([spec["drafter"]] if not cell.is_baseline and spec.get("drafter") else [])
    shapes = [model_shape.shape(m) for m in models]
    weights = [model_shape.weights_bytes(m, cell.random_weights, width) for m in models]
    if any(s is None for s in shapes) or any(w is None for w in weights):
        return None
    k = 0 if cell.is_baseline else int(spec.get("num_speculative_tokens") or 0)
    kv = seqs * ctx * sum(s.kv_bytes_per_token(width) for s in shapes)
    state = seqs * shapes[0].linear_attention_layers * shapes[0].mamba_page_bytes(k) * (1 + k)
    return Need(weights=int(sum(weights)), kv=int(kv), state=int(state), overhead=int(OVERHEAD_GIB * GIB))


def cpu_need_gib(grid: Grid, sid: str) -> float:
    return CPU_SERVER_GIB


def cpu_start_one_core(spec: dict) -> bool:
    return False


def sleep_level(grid, members, device_bytes, budget, available_bytes=None) -> tuple[int | None, str]:
    return None, "SGLang has no sleep mode that specsweep drives"

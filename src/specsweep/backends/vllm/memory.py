"""vLLM 0.26's memory model: how its allocator lays out a server's models (v1/core/kv_cache_utils.py), from their
shapes (models.model_shape): the attention block size a hybrid raises so that one attention page holds one Mamba
page (`Platform.check_and_update_config`), the state blocks a sequence holds, the pool's groups and pages, the 'GPU
KV cache size' it logs, and what a member of a group needs of a GPU (weights, KV, state, an overhead). A vLLM
upgrade that changes its allocator edits this file, not the planner.
"""
from __future__ import annotations

from dataclasses import dataclass

from specsweep.core.extra_args import flag_value
from specsweep.models import model_shape
from specsweep.models.model_shape import LINEAR_TYPES, SLIDING_TYPES, Shape, cdiv
from specsweep.plan.machine import Need

IN_FLIGHT_TOKENS = 8192     # vLLM's max_num_batched_tokens on a GPU: what a sliding-window layer holds beyond its window
KERNEL_BLOCK = 16           # FlashAttention's get_supported_kernel_block_sizes: MultipleOf(16), vLLM's default block


def block_size(s: Shape, spec_tokens: int = 0, asked: int = KERNEL_BLOCK, width: int = 2) -> int:
    """The attention block size vLLM runs with: `asked` for a dense model; for a hybrid, the smallest multiple
    of the kernel alignment max(16, asked) whose attention page holds one Mamba page (vLLM overrides a smaller
    --block-size): alignment x cdiv(mamba page, alignment x attention bytes a token)."""
    if not s.hybrid or not s.attention_layers:
        return asked
    align = max(KERNEL_BLOCK, asked)
    need = align * cdiv(s.mamba_page_bytes(spec_tokens), align * s.kv_bytes_per_token_layer(width))
    return max(asked, need)


def state_bytes_per_sequence(s: Shape, spec_tokens: int = 0, width: int = 2, mamba_cache_mode: str = "none") -> int:
    """The recurrent and conv state of every linear-attention layer for one sequence, as vLLM allocates it:
    one Mamba page a layer, padded up to the attention page (block size x attention bytes a token), times
    1 + spec tokens blocks (2 + spec tokens in `align` mode, vLLM's MambaSpec.max_memory_usage_bytes)."""
    if not s.hybrid:
        return 0
    page = s.mamba_page_bytes(spec_tokens)
    if s.attention_layers:
        page = max(page, block_size(s, spec_tokens, width=width) * s.kv_bytes_per_token_layer(width))
    return s.linear_attention_layers * page * mamba_blocks(spec_tokens, mamba_cache_mode)


def kv_tokens(s: Shape, budget_bytes: int, max_model_len: int, spec_tokens: int = 0, width: int = 2,
              mamba_cache_mode: str = "none") -> int:
    """The 'GPU KV cache size' vLLM logs for a KV budget, this model alone (see `pool`)."""
    return pool(s, None, spec_tokens, width, mamba_cache_mode).tokens(budget_bytes, max_model_len)


def mamba_blocks(spec_tokens: int = 0, mamba_cache_mode: str = "none") -> int:
    """Blocks a linear-attention group holds for one request: 1 (2 in `align` mode, prefix caching on) plus one a
    speculative token (vLLM 0.26 MambaSpec.num_speculative_blocks)."""
    return (2 if mamba_cache_mode == "align" else 1) + spec_tokens


@dataclass(frozen=True)
class Pool:
    """vLLM 0.26's KV cache of one server (kv_cache_utils): every layer's page the same size (block size x attention
    bytes a token, a Mamba page padded to it), layers of one kind in groups of `group_size`, one block of memory
    shared by one layer of each group (page x group size), and a request holding blocks in every group."""
    block_size: int
    page_bytes: int
    group_size: int
    attention_windows: tuple[int | None, ...]      # one entry a group: None for full attention, else its window
    mamba_groups: int
    mamba_blocks: int                               # blocks a linear-attention group holds for one request

    @property
    def block_bytes(self) -> int:
        return self.page_bytes * self.group_size

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int = IN_FLIGHT_TOKENS) -> int:
        """A full-attention group holds cdiv(len, block) blocks; a sliding-window one cdiv(min(window - 1 + tokens
        in flight, len), block) + 1 (SlidingWindowSpec.max_admission_blocks_per_request); a Mamba group its
        `mamba_blocks`."""
        full = cdiv(max_model_len, self.block_size)
        attn = sum(full if w is None else cdiv(min(w - 1 + in_flight_tokens, max_model_len), self.block_size) + 1
                   for w in self.attention_windows)
        return attn + self.mamba_groups * self.mamba_blocks

    def bytes_per_request(self, max_model_len: int, in_flight_tokens: int = IN_FLIGHT_TOKENS) -> int:
        return self.blocks_per_request(max_model_len, in_flight_tokens) * self.block_bytes

    def tokens(self, budget_bytes: int, max_model_len: int, in_flight_tokens: int = IN_FLIGHT_TOKENS) -> int:
        """vLLM's 'GPU KV cache size: N tokens': budget // block bytes blocks, over the blocks a request of
        max_model_len holds, times max_model_len (get_kv_cache_capacity)."""
        blocks = int(budget_bytes // self.block_bytes)
        return int(blocks / self.blocks_per_request(max_model_len, in_flight_tokens) * max_model_len)


def pool(target: Shape, drafter: Shape | None = None, spec_tokens: int = 0, width: int = 2,
         mamba_cache_mode: str = "none", asked_block: int = KERNEL_BLOCK) -> Pool:
    """The pool vLLM 0.26 makes for a server of `target` (and a drafter's attention layers, which join it): the
    block size the hybrid's Mamba page sets, and the groups: the fewest layers of one kind (the most, where no kind
    has 1.5 times another's) a group (_get_kv_cache_groups_uniform_page_size). The Qwen3.5-27B shape: 16 full +
    48 GDN layers, 4 groups of 16; with a 5-layer drafter, groups of 5."""
    kinds: dict[tuple, int] = {}
    for m in (target, drafter):
        if m is None:
            continue
        window = m.sliding_window if m.sliding_window else None
        for t in m.layer_types:
            if t in LINEAR_TYPES:
                continue
            key = ("attn", m.kv_heads, m.head_dim, window if t in SLIDING_TYPES else None)
            kinds[key] = kinds.get(key, 0) + 1
    if target.linear_attention_layers:
        kinds[("mamba",)] = target.linear_attention_layers
    block = block_size(target, spec_tokens, asked_block, width)
    per_token = max(m.kv_bytes_per_token_layer(width) for m in (target, drafter) if m is not None)
    fewest, most = min(kinds.values()), max(kinds.values())
    group = most if most < fewest * 1.5 else fewest
    windows = tuple(k[3] for k, n in kinds.items() if k[0] == "attn" for _ in range(cdiv(n, group)))
    return Pool(block_size=block, page_bytes=block * per_token, group_size=group, attention_windows=windows,
                mamba_groups=cdiv(kinds.get(("mamba",), 0), group),
                mamba_blocks=mamba_blocks(spec_tokens, mamba_cache_mode))


# ---- a member of a group on a GPU --------------------------------------------------------------------------------
GIB = 1024 ** 3
OVERHEAD_GIB = 4.0     # CUDA context, activations' peak, CUDA graphs: what a member needs beyond weights and KV


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


def need(grid, sid: str) -> Need | None:
    """One GPU member's memory as vLLM 0.26 counts it (pool): its weights, target and drafter, and an overhead; the
    KV cache blocks its largest concurrency holds at the full context (attention layers only, in blocks of vLLM's
    attention block size, which a hybrid raises to the Mamba page) and a hybrid's conv and recurrent state a
    sequence, at mamba_ssm_dtype, a block for each speculative token; None where a model's config is not here."""
    cell = grid.servers[sid]
    spec = cell.spec
    extra = spec["server"].get("extra_args") or []
    seqs, ctx = grid.max_concurrency(sid), int(spec["server"]["max_model_len"])
    width = model_shape.dtype_bytes(spec["server"]["dtype"])
    k = spec_tokens(spec, cell.is_baseline)
    models = [spec["target"]] + ([spec["drafter"]] if not cell.is_baseline and spec.get("drafter") else [])
    shapes = [model_shape.shape(m) for m in models]
    weights = [model_shape.weights_bytes(m, cell.random_weights, width) for m in models]
    if any(s is None for s in shapes) or any(w is None for w in weights):
        return None
    p = pool(shapes[0], shapes[1] if len(shapes) > 1 else None, k, width, mamba_cache_mode(extra))
    state = seqs * p.mamba_groups * p.mamba_blocks * p.block_bytes
    return Need(weights=int(sum(weights)), kv=int(seqs * p.bytes_per_request(ctx)) - state, state=state,
                overhead=int(OVERHEAD_GIB * GIB))


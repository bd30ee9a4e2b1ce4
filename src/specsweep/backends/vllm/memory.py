"""vLLM 0.26's memory model: how its allocator lays out a server's models (v1/core/kv_cache_utils.py), from their
shapes (models.model_shape): the attention block size a hybrid raises so that one attention page holds one Mamba
page (`Platform.check_and_update_config`), the state blocks a sequence holds, the pool's groups and pages, the 'GPU
KV cache size' it logs, and what a member of a group needs of a GPU (weights, KV, state, an overhead). A vLLM
upgrade that changes its allocator edits this file, not the planner.
"""
from __future__ import annotations

from dataclasses import dataclass

from specsweep.backends.vllm import graphs
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


def _member(grid, sid: str):
    """A member's shapes, weights (bytes, target and drafter), pool, largest concurrency and context; None where a
    model's config is not here."""
    cell = grid.servers[sid]
    spec = cell.spec
    extra = spec["server"].get("extra_args") or []
    width = model_shape.dtype_bytes(spec["server"]["dtype"])
    k = spec_tokens(spec, cell.is_baseline)
    models = [spec["target"]] + ([spec["drafter"]] if not cell.is_baseline and spec.get("drafter") else [])
    shapes = [model_shape.shape(m) for m in models]
    weights = [model_shape.weights_bytes(m, cell.random_weights, width) for m in models]
    if any(s is None for s in shapes) or any(w is None for w in weights):
        return None
    p = pool(shapes[0], shapes[1] if len(shapes) > 1 else None, k, width, mamba_cache_mode(extra))
    return int(sum(weights)), p, grid.max_concurrency(sid), int(spec["server"]["max_model_len"])


def need(grid, sid: str) -> Need | None:
    """One GPU member's memory as vLLM 0.26 counts it (pool): its weights, target and drafter, and an overhead; the
    KV cache blocks its largest concurrency holds at the full context (attention layers only, in blocks of vLLM's
    attention block size, which a hybrid raises to the Mamba page) and a hybrid's conv and recurrent state a
    sequence, at mamba_ssm_dtype, a block for each speculative token; None where a model's config is not here."""
    member = _member(grid, sid)
    if member is None:
        return None
    weights, p, seqs, ctx = member
    state = seqs * p.mamba_groups * p.mamba_blocks * p.block_bytes
    return Need(weights=weights, kv=int(seqs * p.bytes_per_request(ctx)) - state, state=state,
                overhead=int(OVERHEAD_GIB * GIB))


# ---- whether a member starts at all on its share ----------------------------------------------------------------
# What vLLM 0.26's memory profiling takes of a member's share beside its weights before it sizes the KV cache
# (activations' peak, the CUDA context, non-torch allocations), at the least it was logged: the 35B-A3B baseline
# on an 80 GB H100 (81,559 MiB) at 0.85 had 0.9 GiB of KV (44 blocks of 20.6 MiB) after "Model loading took
# 64.69 GiB": 2.25 GiB beside the 64.56 GiB model_shape counts; the 27B on the H200 had 3.1 GiB. The planner's
# OVERHEAD_GIB is a margin for sharing a GPU; this is what a refusal may count on, so it refuses only what vLLM
# would refuse.
START_GIB = 2.25
HIGHEST_SHARE = 0.95     # the highest gpu_memory_utilization a fix suggests for a member alone on its GPU


@dataclass(frozen=True)
class Fit:
    """One vLLM member on its share of a GPU, as vLLM 0.26 sizes it at start-up: the KV budget (its fixed KV cache,
    or its share less its weights and START_GIB), the blocks of its pool, what one request of max_model_len holds,
    and, for a hybrid, the sequences its state blocks carry: vLLM refuses max_num_seqs above the Mamba cache blocks
    ("max_num_seqs (64) exceeds available Mamba cache blocks (44)"), each sequence holding `mamba_blocks` of them
    (1 + K; 2 + K with prefix caching) in a linear-attention group."""
    sid: str
    share: int
    device: int
    weights: int
    kv: int
    pool: Pool
    request: int            # bytes one request of max_model_len holds (its attention blocks and its state blocks)
    concurrency: int        # the most requests its bench cells send at once
    max_num_seqs: int
    fixed_kv: bool          # a co-resident member's KV cache, given at launch (--kv-cache-memory-bytes)

    @property
    def blocks(self) -> int:
        return max(0, self.kv) // self.pool.block_bytes

    @property
    def sequences(self) -> int | None:
        """The sequences vLLM lets its state blocks carry (None for a model without linear-attention layers)."""
        return self.blocks // self.pool.mamba_blocks if self.pool.mamba_groups else None

    @property
    def state_per_sequence(self) -> int:
        """The blocks a running sequence's state holds whatever its length: `mamba_blocks` in every
        linear-attention group."""
        return self.pool.mamba_groups * self.pool.mamba_blocks * self.pool.block_bytes

    def least_kv(self, seqs: int) -> int:
        """The KV budget for one request of max_model_len and the state of `seqs` - 1 more running sequences."""
        return self.request + (seqs - 1) * self.state_per_sequence

    def _total(self, seqs: int) -> int:
        return int(self.weights + START_GIB * GIB + self.least_kv(seqs))

    def fix(self) -> str:
        """How to make it start and serve its study: fewer sequences where its budget carries the study's
        concurrency, else more of its GPU (at most HIGHEST_SHARE of it, alone), else a larger GPU or fewer requests
        at once."""
        c = self.concurrency
        m = graphs.least_seqs(c)      # fewer would leave c requests' decode steps outside the full CUDA graphs
        if self.kv >= self.least_kv(m) and (self.sequences or m) >= m:
            return f"add --max-num-seqs {m} to server.extra_args (at most {self.sequences}; the study sends at most {c})"
        total = self._total(m)
        seqs_fix = f" with --max-num-seqs {m}" if self.pool.mamba_groups and self.max_num_seqs > m else ""
        if not self.fixed_kv and total <= HIGHEST_SHARE * self.device:
            return (f"raise server.gpu_memory_utilization to {cdiv(total * 100, self.device) / 100:.2f}{seqs_fix} "
                    f"(it needs {total / GIB:.1f} GiB)")
        if self.fixed_kv:
            return f"run its group with sweep.residency=relaunch{seqs_fix}, or on a larger GPU"
        fewer = max((n for n in range(1, c) if self._total(graphs.least_seqs(n)) <= HIGHEST_SHARE * self.device),
                    default=0)
        here = (f", or send at most {fewer} at once here (sweep.concurrency) at server.gpu_memory_utilization="
                f"{HIGHEST_SHARE} with --max-num-seqs {graphs.least_seqs(fewer)}") if fewer else ""
        return (f"run it on a GPU of at least {cdiv(total, int(HIGHEST_SHARE * GIB))} GiB at "
                f"server.gpu_memory_utilization={HIGHEST_SHARE}{seqs_fix} (it needs {total / GIB:.1f} GiB at "
                f"concurrency {c}){here}")

    def refusal(self) -> str | None:
        """One line where vLLM would refuse to start this member, or where it could not hold the state of the
        sequences its study sends at once, naming it, its need, the GPU and the fix; None where it serves."""
        where = f"its {self.share / GIB:.1f} GiB share of the {self.device / GIB:.0f} GiB GPU"
        if self.kv < self.request:
            if self.fixed_kv:
                have = f"its fixed KV cache of {self.kv / GIB:.2f} GiB"
            elif self.kv <= 0:
                have = (f"{self.weights / GIB:.1f} GiB of weights and {START_GIB} GiB to start exceed {where} "
                        "(vLLM: 'No available memory for the cache blocks'), leaving nothing")
            else:
                have = (f"{self.weights / GIB:.1f} GiB of weights and {START_GIB} GiB to start leave "
                        f"{self.kv / GIB:.2f} GiB of {where}")
            return (f"{self.sid}: {have} for KV, less than one request of max_model_len holds "
                    f"({self.request / GIB:.2f} GiB); {self.fix()}")
        c = self.concurrency
        if self.kv < self.least_kv(c):
            return (f"{self.sid}: {self.kv / GIB:.2f} GiB of KV in {where} hold one request of max_model_len "
                    f"({self.request / GIB:.2f} GiB) but not the state of {c - 1} more sequences "
                    f"({self.state_per_sequence / GIB:.2f} GiB each, whatever their length), so its cells at "
                    f"concurrency {c} would queue; {self.fix()}")
        seqs = self.sequences
        if seqs is not None and self.max_num_seqs > seqs:
            return (f"{self.sid}: max_num_seqs {self.max_num_seqs} exceeds the {seqs} sequences its "
                    f"{self.blocks} KV blocks hold in linear-attention state ({self.pool.mamba_blocks} a sequence; "
                    f"{self.kv / GIB:.2f} GiB of KV in {where}), so vLLM refuses to start ('exceeds available "
                    f"Mamba cache blocks'); {self.fix()}")
        return None


def fit(grid, sid: str, share_bytes: int, device_bytes: int, max_num_seqs: int,
        kv_cache_mib: int | None = None) -> Fit | None:
    """A member on `share_bytes` of a `device_bytes` GPU, with `max_num_seqs` (its --max-num-seqs, else vLLM's
    default) and its KV cache fixed at `kv_cache_mib` where given; None where a model's config is not here."""
    member = _member(grid, sid)
    if member is None:
        return None
    weights, p, seqs, ctx = member
    kv = kv_cache_mib * 2 ** 20 if kv_cache_mib else int(share_bytes - weights - START_GIB * GIB)
    return Fit(sid=sid, share=int(share_bytes), device=int(device_bytes), weights=weights, kv=int(kv), pool=p,
               request=p.bytes_per_request(ctx), concurrency=seqs, max_num_seqs=int(max_num_seqs),
               fixed_kv=bool(kv_cache_mib))


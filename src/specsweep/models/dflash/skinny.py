"""x @ w.T for skinny x (a decode step's block x batch rows) as a Triton split-K GEMM.

cuBLAS reads a 4096x4096 weight at about 1.2 TB/s for 16 rows (bench/archive/h200): a few dozen tiles leave most
of the 132 SMs idle. Here each program streams a BLOCK_N x (K / SPLIT_K) slice of the weight, so a
skinny product spreads over every SM. The split partials are summed in a fixed order by a second kernel
(no atomics), so a row's result never depends on the other rows or on timing: a block of 16 rows gives
each row exactly what decoding it alone gives, which keeps the bf16 step equal to its own block-1 decode.

The tile is tuned once per weight shape (N, K), by timing a few candidates at the first call, and the same
tiling serves every M, for the same reason. `mm` is a torch custom op, so torch.compile keeps it whole and
fuses what runs around it; off CUDA it is torch's matmul.
"""
from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:                 # CPU-only installs: `mm` falls back to torch
    triton = None

CANDIDATES = [  # (BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)
    (32, 128, 1, 4, 4), (32, 256, 1, 4, 4), (64, 128, 1, 4, 4), (64, 256, 1, 4, 3),
    (32, 128, 2, 4, 4), (32, 256, 2, 4, 4), (64, 128, 2, 4, 4), (64, 256, 2, 4, 3),
    (32, 128, 4, 4, 4), (64, 128, 4, 4, 4), (128, 128, 1, 4, 3), (16, 256, 1, 4, 4),
    (32, 512, 1, 4, 3), (64, 512, 1, 8, 3), (32, 256, 1, 4, 6), (64, 256, 1, 8, 4),
    (32, 512, 2, 4, 3), (16, 512, 1, 4, 4), (128, 256, 1, 8, 3), (64, 128, 1, 4, 6),
]
MAX_ROWS = 16   # one row tile (BLOCK_M = 16); at 128 rows (batch 8 x block 16) cuBLAS was faster (docs/engine.md#on-a-gpu-the-h200-benchmark)
_tiles: dict[tuple, tuple] = {}

if triton is not None:
    @triton.jit
    def _partial(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, K_PER_SPLIT,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
        """c[split, m, n] = sum over this split's K of a[m, k] * b[n, k] (fp32); K_PER_SPLIT % BLOCK_K == 0."""
        pid_n, split, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a = a_ptr + rm[:, None] * stride_am + (split * K_PER_SPLIT + rk)[None, :]
        b = b_ptr + rn[:, None] * stride_bn + (split * K_PER_SPLIT + rk)[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, K_PER_SPLIT, BLOCK_K):
            x = tl.load(a, mask=rm[:, None] < M, other=0.0)
            w = tl.load(b, mask=rn[:, None] < N, other=0.0)
            acc += tl.dot(x, tl.trans(w), input_precision=PRECISION)
            a += BLOCK_K
            b += BLOCK_K
        c = c_ptr + split * M * N + rm[:, None] * N + rn[None, :]
        tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    @triton.jit
    def _reduce(p_ptr, c_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
        """c = sum of the SPLIT_K partials, in order, cast to c's dtype."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):
            acc += tl.load(p_ptr + s * MN + i, mask=i < MN, other=0.0)
        tl.store(c_ptr + i, acc.to(c_ptr.dtype.element_ty), mask=i < MN)


def _launch(x: torch.Tensor, w: torch.Tensor, tile: tuple) -> torch.Tensor:
    block_n, block_k, split, warps, stages = tile
    m, k = x.shape
    n = w.shape[0]
    block_m = 16
    partial = torch.empty((split, m, n), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(n, block_n), split, triton.cdiv(m, block_m))     # m <= MAX_ROWS: one row tile
    precision = "ieee" if x.dtype == torch.float32 else "tf32"
    _partial[grid](x, w, partial, m, n, k, x.stride(0), w.stride(0), k // split,
                   BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=precision,
                   num_warps=warps, num_stages=stages)
    out = torch.empty((m, n), device=x.device, dtype=x.dtype)
    _reduce[(triton.cdiv(m * n, 1024),)](partial, out, m * n, SPLIT_K=split, BLOCK=1024)
    return out


def _tile(x: torch.Tensor, w: torch.Tensor) -> tuple:
    """The fastest candidate for this weight's shape, timed at 16 rows (a block) on first use."""
    key = (w.shape[0], w.shape[1], w.dtype)
    if key not in _tiles:
        from triton.testing import do_bench

        k = w.shape[1]
        probe = torch.randn(16, k, device=w.device, dtype=w.dtype)
        timed = {}
        for c in (c for c in CANDIDATES if k % (c[1] * c[2]) == 0):
            try:
                timed[c] = do_bench(lambda: _launch(probe, w, c), warmup=5, rep=20)
            except triton.runtime.errors.OutOfResources:     # too much shared memory for this dtype
                pass
        if not timed:
            raise ValueError(f"no split-K tile fits K={k} in {w.dtype}")
        _tiles[key] = min(timed, key=timed.get)
    return _tiles[key]


@torch.library.custom_op("specsweep::skinny_mm", mutates_args=())
def _skinny_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _launch(x, w, _tile(x, w))


@_skinny_mm.register_fake
def _(x, w):
    return x.new_empty((x.shape[0], w.shape[0]))


def mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., K] @ w[N, K].T, through the split-K kernel on CUDA when x has at most MAX_ROWS rows."""
    rows = x.reshape(-1, x.shape[-1])
    if triton is None or not x.is_cuda or rows.shape[0] > MAX_ROWS:
        return x @ w.T
    return _skinny_mm(rows.contiguous(), w).view(*x.shape[:-1], w.shape[0])

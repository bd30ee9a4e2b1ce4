"""Whether a vLLM server's decode steps at a concurrency run inside its full CUDA graphs, as vLLM 0.26 sizes and
dispatches them (vllm/config/vllm.py `_set_cudagraph_sizes`, vllm/v1/cudagraph_dispatcher.py).

The capture sizes are 1, 2, 4, then multiples of 8 below 256 and of 16 from 256, up to min(2 x max_num_seqs x q,
512, max_num_batched_tokens), q = 1 + K the tokens a request's decode step carries; with a drafter (q > 1) the V1
model runner rounds each up to a multiple of q (compilation.py `adjust_cudagraph_sizes_for_spec_decode`; the V2
runner, which a sliding-window drafter takes, keeps them and captures FULL graphs at their multiples of q alone:
for K = 7 and 15 the two agree below 256 tokens, where every multiple of 8 is a size). A decode batch of c requests
(c x q tokens) is padded to the smallest capture size at least that; it runs in a FULL graph only where that size
is a FULL decode size: at most q x max_num_seqs and a multiple of q. Otherwise it runs in the PIECEWISE graph,
where every op vLLM splits the graph at (attention, and a hybrid's Gated DeltaNet and Mamba mixers) runs outside
any graph. On the H100 the Qwen3.6-35B-A3B-shaped baseline at --max-num-seqs 3 captured FULL graphs for 1 and 2
requests only ("FULL=2 (largest=2)"): at concurrency 3 its decode slowed several times over while the K=15
member's (FULL at 16, 32, 48 tokens) did not, so the speedup at 3 measured the graphs, not the drafter (the figures:
docs/campaigns/2026-12-06-h100-moe-and-waves.md)."""
from __future__ import annotations

from specsweep.backends.vllm import known_issues

LARGEST = 512
PREFILL_TOKENS = 64      # below this a baseline's largest graph misses most chat prompts (the template alone ~20)


def capture_sizes(max_num_seqs: int, q: int, max_num_batched_tokens: int | None = None,
                  largest: int | None = None) -> list[int]:
    """vLLM 0.26's CUDA graph capture sizes (in tokens) for a server of `max_num_seqs` and q = 1 + K, the largest
    `largest` where given (kernel.cuda_graph_max_tokens: its compilation config's max_cudagraph_capture_size)."""
    top = largest or min(max_num_seqs * q * 2, LARGEST)
    if max_num_batched_tokens:
        top = min(top, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))
    if max_num_batched_tokens and max_num_batched_tokens <= top:
        sizes.append(max_num_batched_tokens)
    if q > 1:
        sizes = [-(-s // q) * q for s in sizes if -(-s // q) * q <= top] or ([q] if q <= top else [])
    return sorted(set(sizes))


def full_decode(concurrency: int, max_num_seqs: int, q: int, max_num_batched_tokens: int | None = None,
                largest: int | None = None) -> bool:
    """Whether a decode step of `concurrency` requests runs in a FULL CUDA graph (module doc)."""
    tokens = concurrency * q
    padded = next((s for s in capture_sizes(max_num_seqs, q, max_num_batched_tokens, largest) if s >= tokens), None)
    return padded is not None and padded <= q * max_num_seqs and padded % q == 0


def least_seqs(concurrency: int) -> int:
    """The smallest max_num_seqs at which `concurrency` requests of a baseline (q = 1, which needs the most) decode in
    a FULL graph: the smallest capture size at least `concurrency`."""
    return next(m for m in range(concurrency, 2 * concurrency + 8) if full_decode(concurrency, m, 1))


def batch(extra_args: list, default_seqs: int, default_tokens: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of a server: its --max-num-seqs and --max-num-batched-tokens, else
    vLLM's defaults."""
    return (known_issues.extra_arg(extra_args, "--max-num-seqs") or default_seqs,
            known_issues.extra_arg(extra_args, "--max-num-batched-tokens") or default_tokens)


def outside(extra_args: list, concurrency: int, k: int, default_seqs: int, default_tokens: int,
            largest: int | None = None) -> str | None:
    """Why this server's decode steps at `concurrency` run outside its full CUDA graphs, with the fix; None where
    they run inside."""
    seqs, tokens = batch(extra_args, default_seqs, default_tokens)
    q = 1 + k
    if full_decode(concurrency, seqs, q, tokens, largest):
        return None
    full = [s // q for s in capture_sizes(seqs, q, tokens, largest) if s <= q * seqs and s % q == 0]
    most = max(full, default=0)
    return (f"at concurrency {concurrency} its decode steps ({concurrency * q} tokens) run outside vLLM's full CUDA "
            f"graphs, which --max-num-seqs {seqs} captures for at most {most} request(s), so every split op "
            f"(attention, a hybrid's linear-attention mixers) runs eagerly and the cell measures the graphs: set "
            f"--max-num-seqs {least_seqs(concurrency)} (a capture size), or a concurrency of at most {most}")


def prefill_outside(extra_args: list, default_seqs: int, default_tokens: int, largest: int | None = None) -> str | None:
    """Why a baseline's prefills would run outside its CUDA graphs where its speculative members' run inside
    (its graphs stop at 2 x max_num_seqs tokens, theirs at 2 x max_num_seqs x (1 + K)), with the fix; None where
    its largest graph holds a typical prompt (PREFILL_TOKENS)."""
    seqs, tokens = batch(extra_args, default_seqs, default_tokens)
    top = capture_sizes(seqs, 1, tokens, largest)[-1]
    if top >= PREFILL_TOKENS:
        return None
    return (f"its CUDA graphs stop at {top} tokens (2 x --max-num-seqs {seqs}), so a prompt longer than that prefills "
            f"outside them while its speculative members' prefills run inside, and those cells are marked invalid "
            f"when they run: set kernel.cuda_graph_max_tokens={LARGEST}")

"""The DFlash decode step on a GPU, side by side in one run, on random weights shaped like Qwen3-8B and
its b16 drafter (random weights accept nothing, so steps are compared, and throughput is implied at a
given acceptance length):

- the static step (dflash/static.py) replayed as one CUDA graph, per matmul kernel (`--linear`: cuBLAS,
  the split-K Triton GEMM) and per torch.compile mode (`--compile`, per layer or whole step), at batch 1
  and 8, each option in its own time box;
- each projection alone in a CUDA graph, cuBLAS against the split-K GEMM;
- exactness: against transformers' greedy decoding (small fp32 model), and in bf16 the block-16 step
  against the same kernels' block-1 decode (`--exact`, `--diagnose`);
- the HBM bound (weight bytes / 4.8 TB/s) and the practical one (/ 4.18 TB/s);
- with `--reference`, engine.py's HF-cache step and the authors' `dflash_generate` on the same weights.

    python3 bench/gpu_step.py [--out DIR] [--compile default max-autotune-no-cudagraphs] [--uncompiled]
        [--linear torch skinny] [--exact] [--diagnose torch skinny] [--profile] [--reference] [--small] [--smoke]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch

from specsweep.models.dflash.engine import generate
from specsweep.models.dflash.model import DFlashDrafter
from specsweep.models.dflash.static import StaticPair

HBM_BYTES_PER_S = 4.8e12
PRACTICAL_BYTES_PER_S = 4.18e12       # a large sum's read rate measured on the H200 (issue 12)
QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False)
SMALL = dict(QWEN3_8B, vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=6,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64)


def build(shape: dict, draft_layers: int, block: int, device, dtype):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**shape)
    with torch.device(device):
        target = Qwen3ForCausalLM(cfg).to(dtype).eval()
    n = cfg.num_hidden_layers
    ids = [round(1 + i * (n - 4) / (draft_layers - 1)) for i in range(draft_layers)]   # Qwen3-8B: 1, 9, ..., 33
    dcfg = {**cfg.to_dict(), "num_hidden_layers": draft_layers, "block_size": block,
            "num_target_layers": n, "architectures": ["DFlashDraftModel"],
            "layer_types": ["full_attention"] * draft_layers,
            "dflash_config": {"mask_token_id": shape["vocab_size"] - 1, "target_layer_ids": ids}}
    with torch.device(device):
        drafter = DFlashDrafter(dcfg).to(dtype).eval()
    return target, drafter, dcfg


def weight_bytes(module, skip=()) -> int:
    return sum(p.numel() * p.element_size() for name, p in module.named_parameters()
               if not any(s in name for s in skip))


def cuda_ms(fn, iters: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def static_step_ms(target, drafter, batch, block, max_len, prompt_len, **kw) -> float:
    pair = StaticPair(target, drafter, batch, max_len, block, **kw)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 1000, (prompt_len,), generator=g).tolist() for _ in range(batch)]
    pair.prefill(prompts)

    def one():
        pair.start.fill_(prompt_len)       # keep every replay at the same positions
        pair.step()
    ms = cuda_ms(one)
    pair = None                            # the closure's reference too
    import gc

    gc.collect()
    torch.cuda.empty_cache()               # each pair holds fused copies of the weights
    return ms


def kernel_breakdown(target, drafter, block, max_len, prompt_len, batch=1, **kw) -> dict:
    """GPU kernel time per step by family, from torch.profiler over eager runs of the static step (the
    same kernels a graph replays; the graph's step time minus their sum is idle time between them)."""
    from torch.profiler import ProfilerActivity, profile

    pair = StaticPair(target, drafter, batch, max_len, block, **kw)
    pair.prefill([list(range(prompt_len))] * batch)
    pair.step()                             # compile and tune outside the profile
    replays = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            pair.start.fill_(prompt_len)
            pair.step()
        torch.cuda.synchronize()
    families = {"matmul": ("gemm", "cutlass", "nvjet", "sm90", "splitk", "gemv", "_partial", "_reduce")}
    out = {"matmul": 0.0, "other": 0.0, "kernels_per_step": 0, "top": {}}
    for evt in prof.key_averages():
        t = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
        if not t or evt.key.startswith(("cudaGraph", "ProfilerStep")):
            continue
        name = evt.key.lower()
        family = next((f for f, keys in families.items() if any(k in name for k in keys)), "other")
        out[family] += t / 1e3 / replays
        out["kernels_per_step"] += evt.count / replays
        out["top"][evt.key[:80]] = t / 1e3 / replays
    out["top"] = dict(sorted(out["top"].items(), key=lambda kv: -kv[1])[:12])
    return out


def hf_engine_step_ms(target, drafter, block, prompt, new_tokens) -> float:
    torch.cuda.synchronize()
    out = generate(target, drafter, [prompt], block, new_tokens)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = generate(target, drafter, [prompt], block, new_tokens)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0 - out.first_token_s) / len(out.steps) * 1e3


def reference_step_ms(target, drafter, dcfg, block, prompt, new_tokens) -> float | None:
    try:
        from dflash.model import DFlashDraftModel, dflash_generate
    except ImportError:
        return None
    from transformers import Qwen3Config

    ref = DFlashDraftModel(Qwen3Config(**{k: v for k, v in dcfg.items() if k != "architectures"}))
    missing, unexpected = ref.load_state_dict(drafter.state_dict(), strict=False)
    if [m for m in missing if "rotary" not in m] or unexpected:
        raise RuntimeError(f"reference drafter weights do not line up: {missing} {unexpected}")
    ref = ref.to(target.device, next(target.parameters()).dtype).eval()
    ids = torch.tensor([prompt], device=target.device)
    dflash_generate(ref, target, ids, 8, None, block_size=block)                 # warm up
    stats = dflash_generate(ref, target, ids, new_tokens, None, block_size=block, return_stats=True)
    # nothing is accepted on random weights: every step yields one token
    return stats.time_per_output_token * 1e3 * (sum(stats.acceptance_lengths) / len(stats.acceptance_lengths))


def exactness_check(device, linear: str = "torch") -> bool:
    """The static step against transformers' greedy decoding on a small fp32 model, on this device."""
    target, drafter, _ = build(dict(SMALL, vocab_size=512), 2, 8, device, torch.float32)
    prompt = torch.randint(0, 500, (12,), generator=torch.Generator().manual_seed(1)).tolist()
    want = target.generate(torch.tensor([prompt], device=device), max_new_tokens=24, do_sample=False,
                           pad_token_id=0)[0, 12:].tolist()
    got = StaticPair(target, drafter, 1, 128, 8, cuda_graph=device == "cuda", linear=linear
                     ).generate([prompt], 24).sequences[0]
    return got == want


GEMM_SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (24576, 4096), "down": (4096, 12288),
               "lm_head": (151936, 4096), "draft_fc": (4096, 20480)}


def graph_ms(fn, calls: int = 20) -> float:
    """GPU time of one call, from a CUDA graph of `calls` calls (no host launch cost in the figure)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return cuda_ms(g.replay, iters=5) / calls


def gemm_rates(rows=(16,)) -> dict:
    """Each Qwen3-8B projection alone at M rows, replayed in a CUDA graph: cuBLAS against the split-K
    kernel, in TB/s of weight read."""
    from specsweep.models.dflash import skinny

    out = {}
    for name, (n, k) in GEMM_SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for m in rows:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = x @ w.T
            got = skinny.mm(x, w)
            cub = graph_ms(lambda: x @ w.T)
            spl = graph_ms(lambda: skinny.mm(x, w))
            out[f"{name} M={m}"] = {"cublas_ms": cub, "skinny_ms": spl, "cublas_TBps": n * k * 2 / cub / 1e9,
                                    "skinny_TBps": n * k * 2 / spl / 1e9, "tile": skinny._tiles[(n, k, w.dtype)],
                                    "max_rel_err": ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()}
    return out


def exact_kernels(target, drafter, linear: str, compile: str | None, sdpa: str | None = None) -> dict:
    """bf16, Qwen3-8B shapes: the block-16 step decodes what the same kernels decode at block 1 (random drafts
    are refused, so each block-16 step commits the target's own token at its first position)."""
    prompt = torch.randint(0, 1000, (64,), generator=torch.Generator().manual_seed(3)).tolist()
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    kw = dict(cuda_graph=True, compile=compile, linear=linear)
    with sdpa_kernel(getattr(SDPBackend, sdpa)) if sdpa else nullcontext():    # sdpa: e.g. MATH
        one = StaticPair(target, None, 1, 256, 1, **kw).generate([prompt], 32).sequences[0]
        sixteen = StaticPair(target, drafter, 1, 256, 16, **kw).generate([prompt], 32).sequences[0]
    import gc

    gc.collect()
    torch.cuda.empty_cache()
    same = next((i for i, (a, b) in enumerate(zip(one, sixteen)) if a != b), len(one))
    return {"equal": one == sixteen, "first_difference": same, "tokens": len(one)}


class TimeBox:
    """Stop a section after `seconds` (SIGALRM) and record why, so one slow option costs only its box."""

    def __init__(self, rec: dict, name: str, seconds: int):
        self.rec, self.name, self.seconds = rec, name, seconds

    def __enter__(self):
        import signal

        def stop(*_):
            raise TimeoutError(f"time box of {self.seconds} s")
        signal.signal(signal.SIGALRM, stop)
        signal.alarm(self.seconds)
        self.t0 = time.perf_counter()

    def __exit__(self, kind, err, tb):
        import signal

        signal.alarm(0)
        self.rec.setdefault("section_s", {})[self.name] = round(time.perf_counter() - self.t0, 1)
        if err is not None and isinstance(err, Exception):
            self.rec[self.name] = {"error": f"{kind.__name__}: {str(err)[:300]}"}
            print(f"[gpu_step] {self.name}: {kind.__name__}: {str(err)[:200]}", flush=True)
            return True
        return False


def save(rec: dict, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, "gpu_step.json.tmp")
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=2)
    os.replace(tmp, os.path.join(out, "gpu_step.json"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also split each variant's GPU time by kernel")
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--linear", nargs="*", default=["torch", "skinny"], help="matmul kernels: torch (cuBLAS), skinny")
    ap.add_argument("--compile", nargs="*", default=[],
                    help="also time the step under these torch.compile modes (default, max-autotune-no-cudagraphs)")
    ap.add_argument("--compile-scope", default="layer", choices=["layer", "step"])
    ap.add_argument("--box", type=int, default=120, help="seconds each option may take")
    ap.add_argument("--autotune-box", type=int, default=300, help="seconds a max-autotune option may take")
    ap.add_argument("--exact", action="store_true", help="each variant's bf16 block 16 against its block 1")
    ap.add_argument("--diagnose", nargs="*", default=[], help="bf16 exactness of these linears, uncompiled")
    ap.add_argument("--uncompiled", action="store_true", help="also time the graphs without torch.compile")
    ap.add_argument("--reference", action="store_true", help="also time the HF-cache engine and dflash_generate")
    ap.add_argument("--smoke", action="store_true", help="the small shapes, cuBLAS uncompiled only, into a temp dir")
    args = ap.parse_args()
    if args.smoke:
        import tempfile

        args.small, args.linear, args.compile, args.uncompiled, args.box = True, ["torch"], [], True, 60
        args.out = tempfile.mkdtemp(prefix="gpu-step-smoke-")
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 64          # one compiled layer per (batch, length) and instance
    device = "cuda"
    torch.manual_seed(0)
    rec: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "argv": vars(args)}
    with TimeBox(rec, "exact_vs_transformers", args.box):
        rec["exact_vs_transformers"] = {lin: exactness_check(device, lin) for lin in args.linear}
    with TimeBox(rec, "gemm", args.box):
        rec["gemm"] = gemm_rates()
    save(rec, args.out)
    shape = SMALL if args.small else QWEN3_8B
    target, drafter, dcfg = build(shape, 5, args.block, device, torch.bfloat16)
    b, max_len, plen = args.block, args.prompt_len + 256, args.prompt_len
    target_bytes = weight_bytes(target, skip=("embed_tokens",))           # the embedding is a gather, not a read
    draft_bytes = weight_bytes(drafter) + target.lm_head.weight.numel() * 2
    rec["hbm_bound_ms"] = {"verify": target_bytes / HBM_BYTES_PER_S * 1e3, "draft": draft_bytes / HBM_BYTES_PER_S * 1e3}
    rec["hbm_bound_ms"]["step"] = rec["hbm_bound_ms"]["verify"] + rec["hbm_bound_ms"]["draft"]
    rec["practical_bound_ms"] = {k: v * HBM_BYTES_PER_S / PRACTICAL_BYTES_PER_S for k, v in rec["hbm_bound_ms"].items()}
    for lin in args.diagnose:        # which kernels keep bf16 block 16 equal to block 1: uncompiled, SDPA default / math
        for sdpa in (None, "MATH"):
            with TimeBox(rec, f"diagnose {lin} {sdpa}", args.box):
                rec.setdefault("exact_bf16_diagnosis", {})[f"graph[{lin}] sdpa={sdpa or 'default'}"] = \
                    exact_kernels(target, drafter, lin, None, sdpa)
        save(rec, args.out)
    variants = [(lin, mode) for mode in args.compile for lin in args.linear] + \
        [(lin, None) for lin in args.linear if args.uncompiled]
    for lin, mode in variants:
        name = f"graph[{lin}]" if mode is None else f"compiled_graph[{lin},{mode},{args.compile_scope}]"
        kw = dict(cuda_graph=True, linear=lin, compile=mode, compile_scope=args.compile_scope)
        with TimeBox(rec, name, args.autotune_box if mode and "autotune" in mode else args.box):
            r = rec[name] = {}
            r["step"] = static_step_ms(target, drafter, 1, b, max_len, plen, **kw)
            r["verify"] = static_step_ms(target, None, 1, b, max_len, plen, **kw)
            r["draft"] = r["step"] - r["verify"]
            r["step_batch8"] = static_step_ms(target, drafter, 8, b, max_len, plen, **kw)
            r["over_hbm_bound"] = r["step"] / rec["hbm_bound_ms"]["step"]
            r["batch8_over_batch1_throughput"] = 8 * r["step"] / r["step_batch8"]
            print(f"[gpu_step] {name}: {json.dumps(r)}", flush=True)
        save(rec, args.out)
        if args.exact:
            with TimeBox(rec, f"exact_bf16_vs_own_block1 {name}", args.box):
                rec[name]["exact_bf16_vs_own_block1"] = exact_kernels(target, drafter, lin, mode)
        if args.profile:
            with TimeBox(rec, f"kernel_ms_per_step {name}", args.box):
                rec[name]["kernel_ms_per_step"] = {
                    f"batch{n}": kernel_breakdown(target, drafter, b, max_len, plen, batch=n, linear=lin,
                                                  compile=mode, compile_scope=args.compile_scope) for n in (1, 8)}
        save(rec, args.out)
    timed = {k: v for k, v in rec.items() if k.startswith(("graph[", "compiled_graph[")) and "step" in v}
    best = min(timed, key=lambda k: timed[k]["step"])
    rec["best"] = best
    if args.reference:
        prompt = torch.randint(0, 1000, (plen,), generator=torch.Generator().manual_seed(2)).tolist()
        for name, fn in (("hf_engine_ms", lambda: hf_engine_step_ms(target, drafter, b, prompt, 24)),
                         ("reference_ms", lambda: reference_step_ms(target, drafter, dcfg, b, prompt, 24))):
            with TimeBox(rec, name, args.box):
                rec[name] = {"step": fn()}
    step = timed[best]["step"]
    rec["ratios"] = {"best_step_over_hbm_bound": step / rec["hbm_bound_ms"]["step"],
                     "best_step_over_practical_bound": step / rec["practical_bound_ms"]["step"],
                     "best_batch8_over_batch1_throughput": timed[best]["batch8_over_batch1_throughput"],
                     "max_batch8_over_batch1_throughput": max(v["batch8_over_batch1_throughput"] for v in timed.values())}
    for name in ("hf_engine_ms", "reference_ms"):
        if (rec.get(name) or {}).get("step"):
            rec["ratios"][f"{name.removesuffix('_ms')}_over_best_step"] = rec[name]["step"] / step
    save(rec, args.out)
    print(json.dumps({k: rec[k] for k in ("best", "ratios", "hbm_bound_ms", "practical_bound_ms")}, indent=2))


if __name__ == "__main__":
    main()

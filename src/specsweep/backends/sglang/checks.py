"""SGLang's preflight checks (CHECKS, in order), and what preflight records about SGLang's own Python
(environment). The refusals its argv makes too are written once, in launch.py."""
from __future__ import annotations

from pathlib import Path

from specsweep.backends.sglang.launch import (
    DRAFT_ATTENTION,
    PROCESSOR_FILE,
    PROCESSOR_FIX,
    TESTED_VERSION,
    compilation_problem,
    extra_problem,
    method_problem,
    probe,
    release_of,
    server_python,
    unknown_release,
)
from specsweep.core.errors import ServerError
from specsweep.core.nested import aslist
from specsweep.models import drafter_config, model_shape
from specsweep.plan.checks import (
    _tokenizer_ids,
    check_dataset,
    check_drafter,
    check_max_tokens,
    check_memory,
    check_num_speculative_tokens,
    check_pair_paths,
    check_parallel,
    check_port,
    check_prompt_length,
    check_thinking,
    fail,
    local_dir,
    ok,
    warn,
)

# Attention backends SGLang 0.5.17 and 0.5.23 take on an NVIDIA GPU (srt/arg_groups/choices.py, ATTENTION_BACKEND_CHOICES)
SGLANG_ATTENTION = ("fa3", "fa4", "flashinfer", "triton", "torch_native", "flex_attention", "trtllm_mha")

SGLANG_DFLASH_MAX_RUNNING = 48     # DFLASH's default --max-running-requests (speculative_hook.py, _handle_dflash)

# SGLang releases whose DFLASH has served a Gated DeltaNet hybrid target here (issue 52, item 4). 0.5.17 on an H100,
# 2026-12-07: the 27B-shaped replica with both z-lab drafter layouts (all full attention; four sliding-window layers
# and one full), random weights, every request finished (bench/archive/h100/sglang/qwen3.6-27b-hybrid-sglang-first);
# at its default memory split the scheduler ran one request at a time (its mamba state cache: bench_cell marks a
# cell of higher concurrency), and with random weights nothing was accepted, so whether its accepted tokens are right
# is not shown.
HYBRID_DFLASH_VERIFIED: tuple[str, ...] = ("0.5.17",)


def environment(server_run: dict) -> dict:
    """SGLang's own Python and what it holds (its server_env), probed without importing SGLang."""
    try:
        python = server_python(server_run)
    except ServerError as e:
        return {"sglang_python": None, "sglang_missing": str(e), "server_env": {}}
    return {"sglang_python": python, "sglang_missing": None, "server_env": probe(python, server_run.get("env"))}


def check_sglang_server(cfg, env):
    """SGLang's own Python: set, a working interpreter, with SGLang and its launcher, of a release whose flags
    and response fields specsweep knows (launch.RELEASES)."""
    name = "sglang_server"
    if env.get("sglang_missing"):
        return fail(name, env["sglang_missing"])
    se = env["server_env"]
    if not se.get("executable"):
        return fail(name, f"server.python {env['sglang_python']} does not run (a shim or a broken environment?): "
                          "point it at the real interpreter of SGLang's environment")
    if se.get("sglang") is None or not se.get("launch_server"):
        return fail(name, f"no SGLang under {se['executable']}: pip install sglang=={TESTED_VERSION} in that "
                          "environment, or point server.python at the Python that has it")
    rel = release_of(se["sglang"])
    if rel is None:
        return fail(name, unknown_release(se["sglang"]))
    stats = "per-request stats in its stream" if rel.details else "acceptance from its verify-step counter"
    return ok(name, f"SGLang {se['sglang']} under {se['executable']} ({stats})")


def check_sglang_dflash(cfg, env):
    """DFLASH in that SGLang, the pair's extra options as SGLang flags, and DFLASH's cap on running requests."""
    name, pair = "sglang_dflash", cfg["pair"]
    if pair["method"] == "none":
        return ok(name, "method none: DFLASH not needed")
    if method_problem(pair["method"]):
        return fail(name, method_problem(pair["method"]))
    se = env["server_env"]
    if se.get("sglang") is None:
        return fail(name, "no SGLang to run DFLASH in server.python's environment (see sglang_server)")
    if not se.get("dflash_module"):
        return fail(name, f"SGLang {se['sglang']} has no DFLASH (sglang/srt/speculative/dflash_worker_v2.py is "
                          f"missing): upgrade SGLang to {TESTED_VERSION} in the server environment, or choose "
                          "pair.method=none")
    extra = pair["speculative_extra"] or {}
    if extra_problem(extra):
        return fail(name, extra_problem(extra))
    draft = extra.get("draft_attention_backend")
    if draft is not None and draft not in DRAFT_ATTENTION:
        return fail(name, f"pair.speculative_extra.draft_attention_backend={draft} is not one SGLang drafts with "
                          f"(it would fall back to another): use one of {list(DRAFT_ATTENTION)}")
    over = [c for c in aslist(cfg["sweep"]["concurrency"]) if c > SGLANG_DFLASH_MAX_RUNNING]
    if over and not any(str(a).startswith("--max-running-requests") for a in cfg["server"]["extra_args"]):
        return warn(name, f"sweep.concurrency {over} exceeds the {SGLANG_DFLASH_MAX_RUNNING} requests SGLang runs "
                          "at once with DFLASH (the rest queue): add "
                          f"'server.extra_args=[\"--max-running-requests\",\"{max(over)}\"]'")
    return ok(name, f"SGLang {se['sglang']} has DFLASH")


def check_sglang_device(cfg, env):
    name = "sglang_device"
    if cfg["server"]["device"] != "cuda":
        return fail(name, f"server.device={cfg['server']['device']}: SGLang refuses DFLASH on CPU "
                          "(speculative_hook.py takes cuda, npu or xpu) and has no supported CPU server: set "
                          "server.device=cuda and run on a GPU host")
    if cfg["server"]["dtype"] in ("float32", "float"):
        return fail(name, f"server.dtype={cfg['server']['dtype']}: SGLang's CUDA RMSNorm (sgl_kernel) takes no "
                          "float32 and the server dies at its first forward (0.5.17 on an H200: \"failed to "
                          "dispatch data type Float\"): use server.dtype=bfloat16")
    return ok(name, f"cuda ({cfg['server']['dtype']})")


def check_sglang_kernel(cfg, env):
    """SGLang's attention backends have their own names (fa3, flashinfer, ...), and it has no compilation modes."""
    name, kernel = "sglang_kernel", cfg["kernel"]
    backend = kernel["attention_backend"]
    if compilation_problem(kernel):
        return fail(name, compilation_problem(kernel))
    if backend is None:
        return warn(name, f"kernel.attention_backend is unset (kernel={kernel['name']}): SGLang picks one and the "
                          "cell records none; use kernel=sglang_fa3")
    if backend not in SGLANG_ATTENTION:
        return fail(name, f"kernel.attention_backend={backend} is not an SGLang attention backend (SGLang names "
                          f"them {', '.join(SGLANG_ATTENTION)}): use kernel=sglang_fa3")
    if backend == "fa3" and env.get("server_env", {}).get("sgl_kernel") and not env["server_env"].get("fa3"):
        return fail(name, "kernel.attention_backend=fa3 but this sgl_kernel has no FA3 library (flash_ops, which "
                          "a trimmed bundle leaves out): use kernel=sglang_triton")
    for g in env["gpus"] if backend == "fa3" else []:
        cc = float(g.get("compute_capability") or 0)
        if cc and not 8 <= cc <= 9:
            return fail(name, f"SGLang's fa3 needs sm_80 to sm_90, but GPU {g['index']} is sm_{int(cc * 10)}: set "
                              "kernel.attention_backend=flashinfer (or fa4 on Blackwell)")
    return ok(name, f"{backend} attention, CUDA graphs {'on' if kernel['cuda_graphs'] else 'off'}")


def check_sglang_mask_token(cfg, env):
    """SGLang reads the mask token from the drafter's config alone: dflash_config.mask_token (default <|MASK|>)
    must not name another id than mask_token_id in the tokenizer, or DFLASH refuses to start
    (dflash_worker_v2.py, _resolve_mask_token_id); pair.mask_token_id has no SGLang flag to reach it."""
    name, pair = "sglang_mask_token", cfg["pair"]
    if pair["method"] != "dflash":
        return ok(name, "no DFlash drafter")
    ddir = local_dir(pair["drafter"])
    cfg_d = model_shape.read_config(ddir) if ddir else None
    if cfg_d is None:
        return warn(name, f"drafter {pair['drafter']} is not on this machine: its mask token is not checked")
    in_config = drafter_config.mask_token_id(cfg_d)
    if pair["mask_token_id"] is not None and pair["mask_token_id"] != in_config:
        return fail(name, f"pair.mask_token_id={pair['mask_token_id']} but SGLang reads only the drafter's "
                          f"config.json (mask_token_id {in_config}): set dflash_config.mask_token_id there")
    token = (cfg_d.get("dflash_config") or {}).get("mask_token") or "<|MASK|>"
    tdir = local_dir(pair["tokenizer"] or pair["target"])
    vocab = _tokenizer_ids(tdir) if tdir else None
    if vocab is None:
        return warn(name, f"no tokenizer.json under {pair['tokenizer'] or pair['target']}: mask token {token} not "
                          "checked")
    if in_config is None and token not in vocab:
        return fail(name, f"the drafter has no mask_token_id and the tokenizer has no {token}: set "
                          "dflash_config.mask_token_id and dflash_config.mask_token in its config.json")
    if token in vocab and in_config is not None and vocab[token] != in_config:
        return fail(name, f"dflash_config.mask_token {token} is id {vocab[token]} in the tokenizer, not "
                          f"mask_token_id {in_config}: SGLang refuses the pair; set dflash_config.mask_token to the "
                          "tokenizer's mask token")
    return ok(name, f"{token} -> {in_config if in_config is not None else vocab[token]}")


def check_sglang_processor(cfg, env):
    """A multimodal target (a vision tower in its config: model_shape's Shape.multimodal) needs the checkpoint's
    preprocessor_config.json in the folder SGLang builds its processor from (pair.tokenizer's, else the target's:
    --tokenizer-path): SGLang 0.5.17 loads the image processor at start-up even to serve text, and exits before it
    is ready without the file (launch.PROCESSOR_FILE). A hub id, a folder not here, or a text-only target passes."""
    name, pair = "sglang_processor", cfg["pair"]
    tdir = local_dir(pair["target"])
    got = model_shape.shape(tdir) if tdir else None
    if got is None or not got.multimodal:
        return ok(name, "a text-only target (or none on this machine): no image processor to load")
    folder = Path(pair["tokenizer"] or pair["target"]).expanduser()
    if not folder.is_dir():
        return ok(name, f"{folder} is no folder here (a hub id): SGLang fetches the checkpoint's processor files")
    if not (folder / PROCESSOR_FILE).is_file():
        return fail(name, f"{folder} has no {PROCESSOR_FILE}: SGLang 0.5.17 loads a multimodal checkpoint's image "
                          f"processor even to serve text, and exits before it is ready without it; {PROCESSOR_FIX}")
    return ok(name, f"a multimodal target with its {PROCESSOR_FILE}")


STATE_CACHE_FLAG = "--max-mamba-cache-size"    # SGLang's state slots; 0.5.17 took 5 a request (its log says so)


def check_sglang_hybrid(cfg, env):
    """DFLASH on a Gated DeltaNet hybrid target (Qwen3.5/3.6: linear-attention layers) in the probed SGLang: a
    warning naming the limit where that release has not served one here (HYBRID_DFLASH_VERIFIED), keyed on the
    version preflight records; where it has, a warning for a sweep above one request at SGLang's default state cache
    (no STATE_CACHE_FLAG), which ran one DFLASH request at a time; a dense target or a baseline passes."""
    name, pair = "sglang_hybrid", cfg["pair"]
    tdir = local_dir(pair["target"])
    got = model_shape.shape(tdir) if tdir else None
    if got is None or not got.hybrid or pair["method"] != "dflash":
        return ok(name, "a dense target or no DFLASH: nothing hybrid to check")
    version = (env.get("server_env") or {}).get("sglang")
    what = f"a Gated DeltaNet hybrid target ({got.linear_attention_layers} linear-attention layers)"
    if version in HYBRID_DFLASH_VERIFIED:
        top = max(cfg["sweep"]["concurrency"])
        if top > 1 and STATE_CACHE_FLAG not in map(str, cfg["server"]["extra_args"]):
            return warn(name, f"SGLang {version} serves DFLASH on {what}, but at its default memory split it ran one "
                              "request at a time on an 80 GB H100 (the verify's states filled its mamba state cache; "
                              f"2026-12-07), so a cell above its limit (concurrency {top} here) would be invalid: give "
                              f"it {STATE_CACHE_FLAG} (5 slots a request) and --mamba-ssm-dtype bfloat16 in "
                              "server.extra_args and raise server.gpu_memory_utilization, as "
                              "experiment=gpu_sglang_27b_hybrid_c8 does (8 at once at 0.92)")
        return ok(name, f"SGLang {version} has served DFLASH on {what} (with random weights; its scheduler may cap the "
                        "running requests by its mamba state cache, which a cell of higher concurrency is marked for)")
    return warn(name, f"SGLang {version or '(not probed)'}: DFLASH on {what} has not run here; the 0.5.17 wheel's "
                      "DFLASH worker commits the Gated DeltaNet state after each verify for Qwen3.5/3.6 configs, "
                      "and its draft model reads layer_types (sliding windows), but no server has served it: expect "
                      "the study to answer it (docs/backends.md#sglang-on-a-hybrid-target)")


CHECKS = [check_dataset, check_sglang_device, check_parallel, check_sglang_server, check_sglang_dflash,
          check_sglang_kernel, check_pair_paths, check_sglang_processor, check_drafter, check_sglang_mask_token,
          check_num_speculative_tokens, check_thinking, check_port, check_memory, check_max_tokens,
          check_prompt_length, check_sglang_hybrid]   # and the shared refusals of all FEATURES (checks.refusals)

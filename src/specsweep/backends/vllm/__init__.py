"""vLLM: one `vllm serve` per server cell (session), its argv and probe (launch), its /metrics counters
(promstats), the middleware that runs inside it (guard), its known DFlash problems by version (known_issues),
and its preflight checks (checks).

This file holds the backend's facts (backends/__init__.py) and imports nothing but the standard library:
vLLM's own process imports it on the way to `guard`.
"""
_TP, _DP = "use server.tensor_parallel_size", "use server.data_parallel_size"
_GRAPHS = "use kernel.cuda_graphs"

# The flags a server cell's spec sets, and the per-request metrics level it records (launch.build_argv passes
# them from the config, and an extra_args copy, coming later, would win): each with the config key to use
# instead. Any --speculative-* flag counts too (config._spec_flag_fix).
SPEC_FLAGS = {
    "--model": "use pair.target", "--tokenizer": "use pair.tokenizer",
    "--served-model-name": "drop it: specsweep names the served model itself (after the target)",
    "--host": "use server.host", "--port": "use server.port", "--dtype": "use server.dtype",
    "--max-model-len": "use server.max_model_len", "--tensor-parallel-size": _TP, "-tp": _TP,
    "--data-parallel-size": _DP, "-dp": _DP, "--gpu-memory-utilization": "use server.gpu_memory_utilization",
    "--attention-backend": "use kernel.attention_backend (e.g. kernel=flash_attn_graphs)",
    "--enforce-eager": _GRAPHS, "--no-enforce-eager": _GRAPHS,
    "--compilation-config": "use kernel.compilation_level",
    "--per-request-spec-decode-metrics": "use server.per_request_spec_metrics",
    "--enable-per-request-metrics": "use server.per_request_timing",
    "--api-key": "drop it: each launch gets a fresh random API key of its own (docs/backends.md#api-keys)",
    "--config": "pass each option in server.extra_args instead: a config file could set what the cell sets, unchecked",
    "--middleware": "drop it: specsweep sets vLLM's middleware",
    "--enable-prefix-caching": "use server.prefix_caching", "--no-enable-prefix-caching": "use server.prefix_caching",
}

LABEL = "vLLM"         # how messages name it
ID_TAG = ""            # the first backend: its cell ids carry no tag, and stay as they were
ID_BY_BLOCK = False
LAYER_ID_OFFSET = 1                  # adds 1 to each target_layer_id (its probe in env.json says): ids 0..n-2
VERSION_FIELDS = ("vllm_version",)
CAPABILITIES = frozenset({"set_acceptance", "block_verification", "k_schedule", "divergence"})   # backends.FEATURES
# What its configs must also hold (config.schema() adds it): a server's launch settings, and the command it runs
SCHEMA = {"properties": {
    "server": {"required": ["python", "host", "port", "port_range", "tensor_parallel_size", "data_parallel_size",
                            "max_model_len", "gpu_memory_utilization", "extra_args", "env", "ready_timeout_s",
                            "stop_grace_s", "request_timeout_s", "job", "executable"]},
    "kernel": {"properties": {"attn_implementation": {
        "const": None,
        "fix": "the local engine's attention implementation, which a server backend does not take: use kernel=cpu "
               "on CPU or kernel=flash_attn_graphs on a GPU, which set kernel.attention_backend"}}},
}}


def describe(env: dict) -> str:
    se = env.get("server_env") or {}
    return (f"vllm {se.get('vllm')} (DFlash: {se.get('dflash_module')}) via "
            f"{' '.join(env.get('vllm_command') or []) or 'none'} under {se.get('executable')}")

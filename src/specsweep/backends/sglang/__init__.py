"""SGLang: one `python -m sglang.launch_server` per server cell, run by the Python of SGLang's own environment
(`server.python`). Its releases, probe and argv (launch), its session and acceptance figures (session), and
its preflight checks (checks).

This file holds the backend's facts (backends/__init__.py) and imports nothing but the standard library.
"""
_TP, _DP = "use server.tensor_parallel_size", "use server.data_parallel_size"
_ATTENTION = "use kernel.attention_backend (e.g. kernel=sglang_fa3, or kernel=sglang_triton without FA3)"
_GRAPHS = "use kernel.cuda_graphs"

# launch.build_argv's flags, their aliases (--model, --tensor-parallel-size, --data-parallel-size), and the
# spellings that would override them: per-phase attention backends win over --attention-backend, and the CUDA
# graph switches over --cuda-graph-backend-* (SGLang 0.5.23's srt/arg_groups/fields/). Each with the config key
# to use instead; any --speculative-* flag counts too (config._spec_flag_fix).
SPEC_FLAGS = {
    "--model-path": "use pair.target", "--model": "use pair.target",
    "--tokenizer-path": "use pair.tokenizer",
    "--served-model-name": "drop it: specsweep names the served model itself (after the target)",
    "--host": "use server.host", "--port": "use server.port", "--device": "use server.device",
    "--dtype": "use server.dtype", "--context-length": "use server.max_model_len",
    "--tp-size": _TP, "--tensor-parallel-size": _TP, "--dp-size": _DP, "--data-parallel-size": _DP,
    "--mem-fraction-static": "use server.gpu_memory_utilization",
    "--attention-backend": _ATTENTION, "--prefill-attention-backend": _ATTENTION,
    "--decode-attention-backend": _ATTENTION,
    "--cuda-graph-backend-decode": _GRAPHS, "--cuda-graph-backend-prefill": _GRAPHS,
    "--cuda-graph-config": _GRAPHS, "--disable-cuda-graph": _GRAPHS,
    "--disable-decode-cuda-graph": _GRAPHS, "--disable-prefill-cuda-graph": _GRAPHS,
    "--enable-metrics": "drop it: specsweep turns SGLang's metrics on itself",
    "--sampling-backend": "use server.sampling_backend",
    "--cuda-graph-max-bs": "use server.cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "use server.cuda_graph_max_bs",
    "--cuda-graph-max-bs-prefill": "use server.cuda_graph_max_prefill_tokens",
    "--piecewise-cuda-graph-max-tokens": "use server.cuda_graph_max_prefill_tokens",
    "--mm-feature-transport": "use server.mm_feature_transport",
    "--api-key": "drop it: each launch gets a fresh random API key of its own (docs/backends.md#api-keys)",
    "--config": "pass each option in server.extra_args instead: a config file could set what the cell sets, unchecked",
}

LABEL = "SGLang"         # how messages name it
ID_TAG = "-sglang"
ID_BY_BLOCK = False
LAYER_ID_OFFSET = 1                  # assumed as vLLM: ids 0..n-2 (not probed)
VERSION_FIELDS = ("sglang_version",)
CAPABILITIES: frozenset[str] = frozenset()   # backends.FEATURES: none yet
# What its configs must also hold (config.schema() adds it): a server's launch settings (no `executable`: it
# always runs as `server.python -m sglang.launch_server`)
SCHEMA = {"properties": {
    "server": {"required": ["python", "host", "port", "port_range", "tensor_parallel_size", "data_parallel_size",
                            "max_model_len", "gpu_memory_utilization", "extra_args", "env", "ready_timeout_s",
                            "stop_grace_s", "request_timeout_s", "job"]},
    "kernel": {"properties": {"attn_implementation": {
        "const": None,
        "fix": "the local engine's attention implementation, which a server backend does not take: use kernel=cpu "
               "on CPU or kernel=flash_attn_graphs on a GPU, which set kernel.attention_backend"}}},
}}


def describe(env: dict) -> str:
    se = env.get("server_env") or {}
    return (f"sglang {se.get('sglang')} (DFLASH: {se.get('dflash_module')}) under "
            f"{se.get('executable') or env.get('sglang_missing')}")

"""The local engine: bench cells decoded in-process by the DFlash engine (src/specsweep/models/dflash/), no server.
Its session (session) and its preflight checks (checks).

This file holds the backend's facts (backends/__init__.py) and imports nothing but the standard library:
a vLLM job reads it and must not import torch.
"""
SPEC_FLAGS: dict[str, str] = {}      # no launch argv: server.extra_args is never passed anywhere
ID_TAG = "-local"
ID_BY_BLOCK = True                   # a server cell is one block size (K + 1; the baseline is block 1)
LAYER_ID_OFFSET = 0                  # reads HF hidden_states[id + 1]: ids 0..n-1 of an n-layer target (diagnosis)
VERSION_FIELDS: tuple[str, ...] = ()  # the engine is this checkout's (git_commit) on this torch (tagged)
CAPABILITIES = frozenset({"set_acceptance", "block_verification"})   # backends.FEATURES (docs/engine.md)
# What its configs must also hold (config.schema() adds it): no server launch settings, and no server's kernel
SCHEMA = {"properties": {
    "server": {"required": ["threads", "job"]},
    "kernel": {"properties": {"attention_backend": {
        "const": None,
        "fix": "a server's attention backend, which the local engine (server.backend=local) does not take: use "
               "kernel=local_sdpa (or another kernel=local_*), which sets kernel.attn_implementation"}}},
}}


def describe(env: dict) -> str:
    return "backend: the in-process DFlash engine (no vLLM)"

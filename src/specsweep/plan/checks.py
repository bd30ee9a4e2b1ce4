"""The preflight checks every backend may list (each backend's checks.py lists its own, in full), and what they
share: a check passes, warns or fails with one line that names the problem and the fix. Preflight
(preflight.py) runs the lists."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from specsweep.core import registry
from specsweep.core.claims import port_is_free, port_owner
from specsweep.core.extra_args import random_weights
from specsweep.core.errors import ConfigError
from specsweep.core.nested import aslist
from specsweep.models import drafter_config, model_shape

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


# ---- the checks -------------------------------------------------------------------------------------

def check_dataset(cfg, env):
    """A local JSONL is read before any server starts: malformed lines, empty files, bad encodings."""
    from specsweep.core.errors import ConfigError
    from specsweep.grid.datasets import jsonl_rows

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


# A model id on the hub: a name, or owner/name (huggingface_hub's repo ids); a path of more parts, or one that starts
# with / . or ~, can only be a folder on this machine
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def check_pair_paths(cfg, env):
    """A target or drafter given as a path must be a folder here: where it is not, the server would fail only once
    started (a relative path is read from the directory the workflow runs in, `snakemake -d`)."""
    name = "pair paths"
    pair = cfg["pair"]
    if pair["built_by_workflow"]:
        return ok(name, "the embedded pair: built by the workflow")
    roles = [("target", pair["target"])] + ([("drafter", pair["drafter"])] if pair["method"] == "dflash" else [])
    for role, path in roles:
        if path and not Path(path).expanduser().is_dir() and not HUB_ID.fullmatch(str(path)):
            return fail(name, f"pair.{role}={path} is no folder here ({Path.cwd()}) and no hub id (owner/name): give "
                              "its absolute path, or run from the folder it is relative to")
    return ok(name, "; ".join(f"{role} {path}" for role, path in roles))


def check_drafter(cfg, env):
    name = "drafter"
    pair = cfg["pair"]
    if pair["method"] != "dflash":
        return ok(name, "no DFlash drafter")
    ddir, tdir = local_dir(pair["drafter"]), local_dir(pair["target"])
    if ddir is None:
        return warn(name, f"drafter {pair['drafter']} is not on this machine: its config is checked when it is "
                          "downloaded")
    target = model_shape.shape(tdir) if tdir else None
    cfg_d = model_shape.read_config(ddir)
    if cfg_d is None:
        try:
            inferred, assumed = drafter_config.infer_config(drafter_config.weight_shapes(ddir),
                                                            model_shape.read_config(tdir) if tdir else None)
        except (ValueError, KeyError) as e:
            return fail(name, f"{ddir} has no config.json and its weights do not say what it is ({e})")
        return fail(name, f"{ddir} has no config.json: run `specsweep drafter inspect {ddir} --write` to write the "
                          f"inferred one ({inferred['num_hidden_layers']} layers, hidden {inferred['hidden_size']}; "
                          f"assumed: {'; '.join(assumed)})")
    # the drafter's own config is what every backend's server reads (vLLM, SGLang, the local engine): a pair
    # preset that says otherwise would only mislabel the study, so it is refused
    mask, block = drafter_config.mask_token_id(cfg_d), drafter_config.block_size(cfg_d)
    if mask is None:
        return fail(name, f"{ddir}/config.json has no mask_token_id: add dflash_config.mask_token_id "
                          "(Qwen3 drafters use 151669, Qwen3.5 248070, Qwen3.6-35B-A3B 248077)")
    if pair["mask_token_id"] is not None and pair["mask_token_id"] != mask:
        return fail(name, f"pair.mask_token_id={pair['mask_token_id']} but the drafter's config.json says "
                          f"{mask}, which the server uses: set pair.mask_token_id=null (the drafter's own) or "
                          f"{mask}, or pick the drafter trained with {pair['mask_token_id']}")
    if block is not None and pair.get("block_size") is not None and pair["block_size"] != block:
        return fail(name, f"pair.block_size={pair['block_size']} but the drafter's config.json says {block}, "
                          f"which the server uses: set pair.block_size={block}")
    if target is None:
        return warn(name, f"target {pair['target']} is not on this machine: drafter/target agreement not checked")
    n = target.layers
    ids = drafter_config.target_layer_ids(cfg_d) or []
    backend = (cfg.get("server") or {}).get("backend", "vllm")     # `specsweep drafter inspect` gives no server
    offset = env.get("server_env", {}).get("dflash_layer_offset")    # what this vLLM adds to each (its probe)
    facts = registry.get(backend) if backend in registry.names() else None
    if offset is None:      # else the backend's fact: the local engine reads hidden_states[id + 1] up to id n - 1
        offset = getattr(facts, "LAYER_ID_OFFSET", 1)
    bad = [i for i in ids if not 0 <= i <= n - 1 - offset]
    if bad:
        who = getattr(facts, "LABEL", f"the {backend} backend")
        return fail(name, f"target_layer_ids {bad} out of range for a {n}-layer target: {who} adds {offset} to "
                          f"each, so each must be 0..{n - 1 - offset}; fix dflash_config.target_layer_ids")
    text = model_shape.text_config(cfg_d)     # a drafter's config is flat today; read it as any model's
    if text.get("hidden_size") != target.hidden:
        return fail(name, f"drafter hidden_size {text.get('hidden_size')} != target's {target.hidden}: "
                          "this drafter was trained for another target; pick the matching pair")
    if cfg_d.get("num_target_layers") not in (None, n):
        return fail(name, f"drafter num_target_layers {cfg_d['num_target_layers']} != the target's {n} layers: "
                          "this drafter was trained for another target; pick the matching pair")
    if text.get("vocab_size") not in (None, target.vocab):
        return fail(name, f"drafter vocab_size {text['vocab_size']} != target's {target.vocab}: the "
                          "drafter shares the target's embeddings, so both need one tokenizer; pick the matching pair")
    tok = pair["tokenizer"]
    if tok and local_dir(tok) and local_dir(tok) != tdir:
        tcfg = _tokenizer_vocab(local_dir(tok))
        if tcfg is not None and tcfg > (target.vocab or tcfg):
            return fail(name, f"pair.tokenizer {tok} has {tcfg} tokens but the target's vocab is "
                              f"{target.vocab}: use the target's own tokenizer (pair.tokenizer=null)")
    layers = text.get("num_hidden_layers")
    return ok(name, f"{ddir.name}: {layers} layer{'' if layers == 1 else 's'}, ids {ids}, mask {mask}"
                    f"{f', block {block}' if block is not None else ''} (its own config.json, which the server uses)")


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


def check_memory(cfg, env):
    name = "memory"
    s, pair = cfg["server"], cfg["pair"]
    sizes = [model_shape.files_bytes(local_dir(pair["target"])),
             model_shape.files_bytes(local_dir(pair["drafter"])) if pair["method"] == "dflash" else 0]
    free_disk = shutil.disk_usage(Path(cfg["results_dir"]).resolve().anchor).free
    if None in sizes and random_weights(s.get("extra_args") or []):
        return ok(name, "random weights (--load-format dummy): the server makes them, nothing to download")
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
    mt = min(aslist(cfg["sweep"]["max_tokens"]))       # an output-length axis: its shortest length decides
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


def check_prompt_length(cfg, env):
    """sweep.prompt_length with sweep.max_tokens within the server's server.max_model_len (the chat template adds
    a few tokens more): a longer request would be refused by the server for every prompt."""
    name = "prompt_length"
    lengths = aslist(cfg["sweep"].get("prompt_length"))
    limit = cfg["server"].get("max_model_len")
    if not lengths:
        return ok(name, "the dataset's own prompts")
    need = max(lengths) + max(aslist(cfg["sweep"]["max_tokens"]))
    if limit and need > limit:
        return fail(name, f"sweep.prompt_length {max(lengths)} + sweep.max_tokens {max(aslist(cfg['sweep']['max_tokens']))}"
                          f" = {need} tokens is over server.max_model_len={limit}: shorten them, or raise "
                          "server.max_model_len (within the target's positions)")
    return ok(name, f"prompt lengths {lengths} fit" + (f" server.max_model_len={limit}" if limit else ""))


def _refused(name: str, feature: str, asked: str, cfg: dict, drop: str):
    """A feature the cell's backend does not implement (registry.FEATURES, its CAPABILITIES): one line naming the
    backends that do, from the registry."""
    backend = cfg["server"]["backend"]
    if feature in registry.capabilities(backend):
        return ok(name, f"{registry.FEATURES[feature]}: the {backend} backend's own check")
    having = registry.having(feature)
    where = f"server.backend {' or '.join(having)}" if having else "no backend implements it yet"
    return fail(name, f"{asked} is not implemented on the {backend} backend: run these cells on a backend that "
                      f"has it ({where}), or {drop}")


def check_set_acceptance(cfg, env):
    """sweep.set_acceptance, refused where the backend cannot set acceptance (a backend that can checks it itself)."""
    fixed = [a for a in cfg["sweep"]["set_acceptance"] if a is not None]
    if not fixed:
        return ok("set_acceptance", "real acceptance")
    return _refused("set_acceptance", "set_acceptance", f"sweep.set_acceptance {fixed}", cfg,
                    "drop sweep.set_acceptance")


def check_verification(cfg, env):
    """sweep.verification=block, refused where the backend has no block verification."""
    methods = [m for m in cfg["sweep"]["verification"] if m != "standard"]
    if not methods or cfg["pair"]["method"] == "none":
        return ok("verification", "standard")
    return _refused("verification", "block_verification", f"sweep.verification {methods}", cfg,
                    "set sweep.verification=[standard]")


def check_k_schedule(cfg, env):
    """sweep.k_schedule (K by batch size), refused where the backend has no K schedule."""
    schedule = cfg["sweep"].get("k_schedule")
    if not schedule or cfg["pair"]["method"] == "none":
        return ok("k_schedule", "fixed K")
    return _refused("k_schedule", "k_schedule", f"sweep.k_schedule {schedule}", cfg, "drop sweep.k_schedule")


def check_residency(configs: list[dict], env):
    """How each group of the study will keep its servers (residency.plan), with the fallback and its sizes where the
    group does not fit as asked: a warning, not a failure, since the fallback runs the same cells. On every job
    config at once: a group gathers the members of all the study's jobs (`--also`), as the DAG runs it."""
    from specsweep.grid import schedule
    from specsweep.grid.cells import expand
    from specsweep.plan import residency

    grid = expand(configs)
    try:
        lines = [residency.preview(grid, lead, env.get("gpus") or []) for lead in schedule.leads(grid)]
    except ConfigError as e:        # a choice the plan refuses (a backend's, e.g. vLLM's sweep.sleep_level 2)
        return fail("residency", str(e).removeprefix("config: "))
    message = "; ".join(text for _, text in lines)
    return ok("residency", message) if all(fits for fits, _ in lines) else warn("residency", message)


def check_divergence(cfg, env):
    """sweep.divergence (each request's token ids, the target's log-probabilities where a greedy text parts),
    refused where the backend returns neither."""
    if not cfg["sweep"].get("divergence"):
        return ok("divergence", "no divergence probe")
    return _refused("divergence", "divergence", "sweep.divergence", cfg, "set sweep.divergence=false")


# each feature's refusal, which preflight adds to the checks of every backend without that feature
REFUSALS = {"set_acceptance": check_set_acceptance, "block_verification": check_verification,
            "k_schedule": check_k_schedule, "divergence": check_divergence}


def refusals(backend: str) -> list:
    """The shared refusals of a backend: one per feature (registry.FEATURES) it does not implement."""
    caps = registry.capabilities(backend)
    return [check for feature, check in REFUSALS.items() if feature not in caps]


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

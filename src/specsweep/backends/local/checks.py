"""The local engine's preflight checks (CHECKS, in order); it runs in this Python, so preflight records
nothing more about another one (environment)."""
from __future__ import annotations

from specsweep.plan.checks import (
    check_dataset,
    check_drafter,
    check_max_tokens,
    check_memory,
    check_num_speculative_tokens,
    check_pair_paths,
    check_prompt_length,
    check_thinking,
    fail,
    ok,
    warn,
)


def environment(server_run: dict) -> dict:
    return {}


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


def check_set_acceptance(cfg, env):
    """sweep.set_acceptance: the local engine implements vLLM's synthetic acceptance itself (docs/engine.md)."""
    name = "set_acceptance"
    fixed = [a for a in cfg["sweep"]["set_acceptance"] if a is not None]
    if not fixed:
        return ok(name, "real acceptance")
    return ok(name, f"{fixed}: the local engine accepts the drafts at the set rate (vLLM's synthetic mode; on the "
                    "HF-cache engine, whatever the kernel)")


def check_verification(cfg, env):
    """sweep.verification=block: the local engine's block verification (docs/engine.md)."""
    name = "verification"
    methods = [m for m in cfg["sweep"]["verification"] if m != "standard"]
    if not methods or cfg["pair"]["method"] == "none":
        return ok(name, "standard")
    if float(cfg["sweep"]["temperature"]) == 0:
        return warn(name, "sweep.verification=block at sweep.temperature=0 verifies as standard does (the local "
                          "engine, as vLLM, verifies greedy requests token by token): set sweep.temperature above "
                          "0 to compare them")
    return ok(name, f"{methods}: the local engine's block verification (docs/engine.md)")


CHECKS = [check_dataset, check_pair_paths, check_drafter, check_num_speculative_tokens, check_thinking, check_memory,
          check_max_tokens, check_prompt_length, check_local_engine, check_set_acceptance, check_verification]
# and the shared refusal of sweep.k_schedule, which it lacks (CAPABILITIES; checks.refusals)

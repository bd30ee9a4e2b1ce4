"""Every preflight check, failing and passing, on real files, ports, interpreters and HTTP servers.
Only the GPU inventory is injected (SPECSWEEP_GPUS), since no GPU is here."""
import json
import shutil
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import BIN, REPO, run

from specsweep.backends.local import checks as local_checks
from specsweep.backends.vllm import checks as vllm_checks
from specsweep.core import parts
from specsweep.grid.config import compose_jobs
from specsweep.plan import checks, preflight

H200 = {"index": "0", "name": "NVIDIA H200", "compute_capability": "9.0", "memory_total_mib": 143771,
        "memory_free_mib": 143000}


def job(*overrides, results="results"):
    [cfg] = compose_jobs([f"results_dir={results}", *overrides])
    return cfg


def env_for(cfg, monkeypatch, gpus=None, visible=None):
    if gpus is not None:
        monkeypatch.setenv("SPECSWEEP_GPUS", json.dumps(gpus))
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    return preflight.environment(cfg["server"])


def gpu(i, **kw):
    return {**H200, "index": str(i), **kw}


# 1 -------------------------------------------------------------------------------------------------
def test_parallel_layout(monkeypatch):
    cfg = job("server=vllm_gpu", "server.tensor_parallel_size=2", "server.data_parallel_size=2")
    env = env_for(cfg, monkeypatch, [gpu(i) for i in range(4)], visible="0,1")
    c = checks.check_parallel(cfg, env)
    assert (c.status, c.message) == ("fail", "server.tensor_parallel_size x server.data_parallel_size = 4, but 2 GPUs "
                                             "are visible (CUDA_VISIBLE_DEVICES=0,1): set data_parallel_size=1 or "
                                             "expose 4 GPUs")
    env = env_for(cfg, monkeypatch, [gpu(i) for i in range(8)], visible="0,1,2,3,4,5,6,7")
    assert checks.check_parallel(cfg, env).status == "pass"
    cfg3 = job("server=vllm_gpu", "server.tensor_parallel_size=3")
    c = checks.check_parallel(cfg3, env)
    assert c.status == "warn" and "2 will idle" in c.message


# 2 -------------------------------------------------------------------------------------------------
def fake_flash_attn(tmp_path, version):
    site = tmp_path / f"fa{version}"
    (site / f"flash_attn-{version}.dist-info").mkdir(parents=True)
    (site / f"flash_attn-{version}.dist-info" / "METADATA").write_text(f"Name: flash-attn\nVersion: {version}\n")
    return site


def test_flash_attn_major_against_the_gpu(tmp_path, monkeypatch):
    cfg = job("server=vllm_gpu")
    monkeypatch.setenv("PYTHONPATH", str(fake_flash_attn(tmp_path, "4.0.0")))
    env = env_for(cfg, monkeypatch, [gpu(0)])
    c = vllm_checks.check_flash_attn(cfg, env)
    assert (c.status, c.message) == ("fail", "flash-attn 4.0.0 targets Blackwell (sm_100) and lacks the 2.x modules "
                                             "vLLM imports, but GPU 0 is sm_90: pip install 'flash-attn<3'")
    monkeypatch.setenv("PYTHONPATH", str(fake_flash_attn(tmp_path, "2.8.3")))
    env = env_for(cfg, monkeypatch, [gpu(0)])
    assert vllm_checks.check_flash_attn(cfg, env).status == "pass"


# 3 -------------------------------------------------------------------------------------------------
def test_stale_wrapper_and_shims(tmp_path, monkeypatch):
    stale = tmp_path / "vllm"
    stale.write_text("#!/nonexistent/venv/bin/python3\nimport vllm\n")
    stale.chmod(0o755)
    cfg = job(f"server.executable={stale}")
    c = vllm_checks.check_vllm_executable(cfg, env_for(cfg, monkeypatch))
    assert (c.status, c.message) == ("fail", f"{stale} is a stale wrapper: its interpreter /nonexistent/venv/bin/"
                                             "python3 does not exist; reinstall vLLM there or set server.python to "
                                             "the Python of the environment that holds vLLM")
    shim = tmp_path / "vllm-shim"
    shim.write_text(f"#!/bin/sh\nexec {BIN / 'vllm'} \"$@\"\n")
    shim.chmod(0o755)
    cfg = job(f"server.executable={shim}")
    c = vllm_checks.check_vllm_executable(cfg, env_for(cfg, monkeypatch))
    assert c.status == "fail" and "starts /bin/sh, which is not a working Python (a shim?)" in c.message
    cfg = job()
    monkeypatch.setenv("PATH", f"{BIN}:/usr/bin:/bin")
    assert vllm_checks.check_vllm_executable(cfg, env_for(cfg, monkeypatch)).status == "pass"


# 4 -------------------------------------------------------------------------------------------------
def old_vllm(tmp_path):
    """The Python of a venv holding a vLLM 0.8.0 with none of the modules a new one has."""
    venv = tmp_path / "old-vllm"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "vllm" / "engine").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "engine" / "arg_utils.py").write_text('parser.add_argument("--speculative-config")\n')
    (site / "vllm-0.8.0.dist-info").mkdir()
    (site / "vllm-0.8.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.8.0\n")
    return venv / "bin" / "python"


def test_vllm_without_dflash(tmp_path, monkeypatch):
    cfg = job(f"server.python={old_vllm(tmp_path)}")
    c = vllm_checks.check_dflash_support(cfg, env_for(cfg, monkeypatch))
    assert (c.status, c.message) == ("fail", "vLLM 0.8.0 has no DFlash (vllm.v1.spec_decode.dflash is missing): "
                                             "upgrade vLLM in the server environment, or choose "
                                             "pair.method=none|ngram|eagle3")
    cfg = job()
    assert vllm_checks.check_dflash_support(cfg, env_for(cfg, monkeypatch)).status == "pass"


def vllm_site(tmp_path, version="0.26.0", files=None):
    """A site directory holding a vLLM with DFlash (as on the GPU host: untarred, importable only through
    PYTHONPATH), with any of its source files given as {relative path: text}."""
    site = tmp_path / f"site-{version}"
    for rel, text in {"__init__.py": "", "v1/spec_decode/dflash.py": "", "engine/arg_utils.py": "",
                      **(files or {})}.items():
        (site / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / "vllm" / rel).write_text(text)
    (site / f"vllm-{version}.dist-info").mkdir()
    (site / f"vllm-{version}.dist-info" / "METADATA").write_text(f"Name: vllm\nVersion: {version}\n")
    return site


def test_the_probe_runs_in_the_servers_environment(tmp_path, monkeypatch):
    """The GPU host's vLLM is importable only through server.env's PYTHONPATH: the probe must see it there."""
    site = vllm_site(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    cfg = job(f"+server.env.PYTHONPATH={site}")
    env = env_for(cfg, monkeypatch)
    assert (env["server_env"]["vllm"], env["server_env"]["vllm_root"]) == ("0.26.0", str(site / "vllm"))
    assert env["server_env"]["per_request_spec_metrics"] is False
    assert env_for(job(), monkeypatch)["server_env"]["vllm"] != "0.26.0"    # this machine's own vLLM otherwise


def test_vllm_without_per_request_spec_metrics_warns_and_keeps_the_counters(tmp_path, monkeypatch):
    cfg = job("pair=tiny-ngram", f"server.python={old_vllm(tmp_path)}")
    env = env_for(cfg, monkeypatch)
    assert env["server_env"]["per_request_spec_metrics"] is False
    c = vllm_checks.check_per_request_metrics(cfg, env)
    assert c.status == "warn" and c.message.startswith("vLLM 0.8.0 has no --per-request-spec-decode-metrics: cells "
                                                       "keep the counters' token-weighted acceptance")
    off = vllm_checks.check_per_request_metrics(job("pair=tiny-ngram", "server.per_request_spec_metrics=none"), env)
    assert off.status == "pass" and off.message.startswith("off")
    cfg = job()                                        # this machine's vLLM 0.32 has it
    env = env_for(cfg, monkeypatch)
    assert env["server_env"]["per_request_spec_metrics"] is True
    c = vllm_checks.check_per_request_metrics(cfg, env)
    assert c.status == "pass" and c.message.startswith("detailed: each response carries its own acceptance")


# 5 -------------------------------------------------------------------------------------------------
def broken_drafter(results, tmp_path, edit):
    """The pair's drafter copied and edited (an untrained pair will do: preflight reads configs and shapes)."""
    d = tmp_path / "drafter"
    shutil.copytree(results / "models" / "tiny" / "drafter", d)
    cfg = json.loads((d / "config.json").read_text())
    if edit == "no-config":
        (d / "config.json").unlink()
    else:
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    target = results / "models" / "tiny" / "target"
    return job(f"pair.drafter={d}", f"pair.target={target}", "pair.built_by_workflow=false"), d


def nest_text(cfg: dict, **over) -> None:
    """The drafter's text model moved under text_config, as a multimodal wrapper keeps it, with `over` set there."""
    text = {k: cfg.pop(k) for k in ("hidden_size", "num_hidden_layers", "vocab_size") if k in cfg}
    cfg["text_config"] = {**text, **over}


@pytest.mark.parametrize("edit, message", [
    ("no-config", "has no config.json: run `specsweep drafter inspect"),
    (lambda c: c["dflash_config"].pop("mask_token_id"), "config.json has no mask_token_id: add "
                                                        "dflash_config.mask_token_id (Qwen3 drafters use 151669"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[1, 2, 3]),
     "target_layer_ids [3] out of range for a 4-layer target: vLLM adds 1 to each, so each must be 0..2"),
    (lambda c: c.update(hidden_size=256), "drafter hidden_size 256 != target's 128"),
    (lambda c: c.update(num_target_layers=36), "drafter num_target_layers 36 != the target's 4 layers"),
    (lambda c: c.update(vocab_size=151936), "drafter vocab_size 151936 != target's"),
    (lambda c: nest_text(c, hidden_size=256), "drafter hidden_size 256 != target's 128"),    # read where it is
])
def test_drafter_problems(random_results, tmp_path, monkeypatch, edit, message):
    cfg, _ = broken_drafter(random_results, tmp_path, edit)
    c = checks.check_drafter(cfg, {})
    assert c.status == "fail" and message in c.message, c.message


def test_a_good_drafter_passes_and_inference_recovers_its_config(random_results, tmp_path):
    cfg, d = broken_drafter(random_results, tmp_path, lambda c: None)
    assert checks.check_drafter(cfg, {}).status == "pass"
    out = run([str(BIN / "specsweep"), "drafter", "inspect", str(d), "--target",
               str(random_results / "models" / "tiny" / "target")])
    assert out.returncode == 0 and "[pass] matches" in out.stdout


# 6, 7, 11 --------------------------------------------------------------------------------------------
def test_num_speculative_tokens_against_block_size():
    c = checks.check_num_speculative_tokens(job("sweep.num_speculative_tokens=[3,9]"), {})
    assert (c.status, c.message) == ("warn", "sweep.num_speculative_tokens [9] exceed block_size - 1 = 7: the drafter "
                                             "was trained to fill one block; the authors' convention is K = 7")
    assert checks.check_num_speculative_tokens(job("sweep.num_speculative_tokens=[0]"), {}).status == "fail"
    assert checks.check_num_speculative_tokens(job("sweep.num_speculative_tokens=[7]"), {}).status == "pass"


def test_thinking_against_the_drafters_training():
    c = checks.check_thinking(job("pair=qwen3-8b-dflash-b16", "sweep.thinking=[false,true]"), {})
    assert c.status == "fail" and "trained without thinking traces" in c.message
    c = checks.check_thinking(job("pair=qwen3.5-27b-dflash", "sweep.thinking=false"), {})
    assert c.status == "fail" and "trained with thinking traces" in c.message
    allowed = job("pair=qwen3-8b-dflash-b16", "sweep.thinking=true", "+pair.allow_thinking_mismatch=true")
    assert checks.check_thinking(allowed, {}).status == "pass"
    assert checks.check_thinking(job("pair=qwen3-8b-dflash-b16", "sweep.thinking=false"), {}).status == "pass"


def test_the_model_in_vllm_cpus_engine_core_is_one_rank_on_one_thread(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert vllm_checks.check_executor(job(), {}).status == "pass"          # vllm_cpu's default, on two cores
    c = vllm_checks.check_executor(job("server.tensor_parallel_size=2"), {})
    assert (c.status, c.message) == ("fail", "server.distributed_executor_backend=uni runs one rank, but "
                                             "tensor_parallel_size x data_parallel_size = 2: set "
                                             "server.distributed_executor_backend=mp")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    c = vllm_checks.check_executor(job(), {})
    assert c.status == "warn" and "16 cores" in c.message and "binds its worker to 15" in c.message
    assert vllm_checks.check_executor(job("+server.env.OMP_NUM_THREADS=8"), {}).status == "pass"
    assert vllm_checks.check_executor(job("server.distributed_executor_backend=mp"), {}).status == "pass"
    assert vllm_checks.check_executor(job("server=vllm_gpu"), {}).message == "vLLM's choice"


def test_max_tokens_with_thinking():
    c = checks.check_max_tokens(job("pair=qwen3.5-27b-dflash", "sweep.thinking=true", "sweep.max_tokens=64"), {})
    assert c.status == "fail" and "cut off inside the thinking trace" in c.message
    ok = job("pair=qwen3.5-27b-dflash", "sweep.thinking=true", "sweep.max_tokens=4096")
    assert checks.check_max_tokens(ok, {}).status == "pass"


# 8 -------------------------------------------------------------------------------------------------
def test_taken_port_names_its_process():
    import os

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        c = checks.check_port(job(f"server.port={port}"), {})
        assert c.status == "fail" and f"taken by pid {os.getpid()}" in c.message
    assert checks.check_port(job(f"server.port={port}"), {}).status == "pass"


class Fake(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        html = self.server.mode == "html"
        body = b"<html>login</html>" if html else json.dumps({"data": [{"id": "target"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html" if html else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("mode, model, status, message", [
    ("html", "target", "fail", "answered HTML (status 200)"),
    ("json", "other", "fail", "serves ['target'], not 'other': pass --model target"),
    ("json", "target", "pass", "serves target"),
])
def test_existing_server_base_url(mode, model, status, message):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    srv.mode = mode
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = checks.check_base_url(f"http://127.0.0.1:{srv.server_port}", model)
    finally:
        srv.shutdown()
        srv.server_close()
    assert c.status == status and message in c.message


# 9 -------------------------------------------------------------------------------------------------
def test_attention_backend_must_be_non_causal_capable():
    c = vllm_checks.check_attention_backend(job("server=vllm_gpu", "kernel.attention_backend=FLASHINFER"), {})
    assert c.status == "fail" and "cannot do the non-causal attention" in c.message
    assert vllm_checks.check_attention_backend(job("server=vllm_gpu", "kernel=flash_attn_graphs"), {}).status == "pass"
    assert vllm_checks.check_attention_backend(job(), {}).status == "pass"


def test_float32_needs_an_attention_backend_with_a_float32_kernel():
    """FlashAttention has fp16/bf16 kernels only: the tiny pair in float32 on a GPU takes Triton attention."""
    c = vllm_checks.check_attention_backend(job("server=vllm_gpu", "kernel=flash_attn_graphs", "server.dtype=float32"), {})
    assert c.status == "fail" and "no float32 kernel: use kernel=triton_attn_graphs" in c.message
    for kernel in ("triton_attn_graphs", "flash_attn_graphs"):
        c = vllm_checks.check_attention_backend(job("server=vllm_gpu", f"kernel={kernel}"), {})
        assert c.status == "pass", c.message
    c = vllm_checks.check_attention_backend(job("server=vllm_gpu", "kernel=triton_attn_graphs", "server.dtype=float32"), {})
    assert c.status == "pass" and "float32" in c.message


# 10 ------------------------------------------------------------------------------------------------
def test_weights_against_free_gpu_memory(random_results, monkeypatch):
    cfg = job("server=vllm_gpu", results=str(random_results))
    env = env_for(cfg, monkeypatch, [gpu(0, memory_free_mib=1)])
    c = checks.check_memory(cfg, env)
    assert c.status == "fail" and "offers 0.0 GiB at server.gpu_memory_utilization=0.85" in c.message
    env = env_for(cfg, monkeypatch, [gpu(0)])
    assert checks.check_memory(cfg, env).status == "pass"


# the rule ------------------------------------------------------------------------------------------
@pytest.mark.dag
def test_broken_pair_stops_the_dag_at_env_check_before_any_server(random_results, tmp_path):
    cfg, d = broken_drafter(random_results, tmp_path, lambda c: c["dflash_config"].pop("mask_token_id"))
    results = tmp_path / "results"
    out = run([str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "2",
               "--config", f"results_dir={results}",
               f"overrides=pair.drafter={d} pair.built_by_workflow=false dataset.num_prompts=2 "
               f"pair.target={random_results / 'models' / 'tiny' / 'target'}"], timeout=300)
    err = out.stdout + out.stderr
    assert out.returncode != 0
    assert f"specsweep: drafter: {d}/config.json has no mask_token_id: add dflash_config.mask_token_id" in err
    assert "Traceback" not in err
    assert not list(results.glob("*/*/logs/server.json"))      # no server was started
    assert "Error in rule env_check" in err
    assert ": server cell " not in err          # the server job's start message never appeared


# the local backend ----------------------------------------------------------------------------------
def test_local_engine_checks_replace_the_vllm_launch_checks(monkeypatch):
    cfg = job("server=local", "kernel=local_sdpa")
    env = env_for(cfg, monkeypatch, gpus=[])
    names = [c.name for c in preflight.run_checks([cfg], env)]
    assert "local_engine" in names and "vllm_executable" not in names and "port" not in names
    assert local_checks.check_local_engine(cfg, env).status == "pass"
    for overrides, message in [
        (["kernel=local_graphs"], "kernel.cuda_graphs=true needs server.device=cuda"),
        (["kernel=local_fa2"], "needs a GPU and flash-attn 2"),
        (["pair=tiny-ngram"], "the local engine runs DFlash drafters only"),
    ]:
        bad = job("server=local", "kernel=local_sdpa", *overrides)
        check = local_checks.check_local_engine(bad, env)
        assert check.status == "fail" and message in check.message, check


def test_local_engine_on_a_gpu_needs_one_visible(monkeypatch):
    cfg = job("server=local_cuda", "kernel=local_graphs")
    env = env_for(cfg, monkeypatch, gpus=[])
    env["cuda"] = "13.0"                               # a CUDA build of torch, but no GPU to be seen
    check = local_checks.check_local_engine(cfg, env)
    assert check.status == "fail" and "no GPU is visible" in check.message
    env["gpus"] = [H200]
    assert local_checks.check_local_engine(cfg, env).status == "pass"


# sweep.set_acceptance -------------------------------------------------------------------------------
def test_set_acceptance_needs_vllm_with_synthetic_acceptance_on_a_gpu(tmp_path, monkeypatch):
    cfg = job("sweep.set_acceptance=[null,3.0]")                      # vllm_cpu: this machine's vllm-cpu 0.32
    env = env_for(cfg, monkeypatch)
    assert env["server_env"]["set_acceptance"] is True                # 0.32 parses it ...
    c = vllm_checks.check_set_acceptance(cfg, env)                    # ... and dies at the first request
    assert (c.status, c.message) == ("fail", "sweep.set_acceptance [3.0] on server.device=cpu: vLLM's CPU sampling "
                                             "has no synthetic acceptance (vllm-cpu 0.32 dies at the first request); "
                                             "run these cells with server=vllm_gpu on a GPU host, or drop "
                                             "sweep.set_acceptance")
    gpu_cfg = job("server=vllm_gpu", "sweep.set_acceptance=[3.0]")
    assert vllm_checks.check_set_acceptance(gpu_cfg, env).status == "pass"
    old = job("server=vllm_gpu", "sweep.set_acceptance=[3.0]", f"server.python={old_vllm(tmp_path)}")
    old_env = env_for(old, monkeypatch)
    assert old_env["server_env"]["set_acceptance"] is False
    c = vllm_checks.check_set_acceptance(old, old_env)
    assert (c.status, c.message) == ("fail", "vLLM 0.8.0 has no synthetic acceptance (rejection_sample_method="
                                             "synthetic): upgrade the server's vLLM (0.26 has it), or drop "
                                             "sweep.set_acceptance")
    assert vllm_checks.check_set_acceptance(job(), old_env).status == "pass"        # real acceptance: any vLLM
    assert "set_acceptance" in [c.name for c in preflight.run_checks([cfg], env)]


def test_set_acceptance_runs_on_the_local_engine():
    cfg = job("server=local", "kernel=local_sdpa", "sweep.set_acceptance=[[0.9,0.5,0.1]]")
    assert local_checks.check_set_acceptance in parts.checks("local").CHECKS
    assert local_checks.check_set_acceptance(cfg, {}).status == "pass"


@pytest.mark.parametrize("overrides, backend", [
    (["server=sglang", "kernel=sglang_fa3", f"server.python={sys.executable}"], "sglang"),
])
def test_set_acceptance_is_refused_on_the_other_backends_for_now(overrides, backend):
    cfg = job(*overrides, "sweep.set_acceptance=[[0.9,0.5,0.1]]")
    assert checks.check_set_acceptance in checks.refusals(backend)
    check = checks.check_set_acceptance(cfg, {})
    assert (check.status, check.message) == ("fail", f"sweep.set_acceptance [[0.9, 0.5, 0.1]] is not implemented on "
                                                     f"the {backend} backend: run these cells on a backend that has "
                                                     "it (server.backend vllm or local), or drop sweep.set_acceptance")


# sweep.verification ---------------------------------------------------------------------------------
def test_block_verification_warns_on_vllm_cpu_and_needs_a_vllm_that_has_it(tmp_path, monkeypatch):
    cfg = job("sweep.verification=[standard,block]", "sweep.temperature=0.8")    # vllm_cpu: this machine's 0.32
    env = env_for(cfg, monkeypatch)
    assert env["server_env"]["block_verification"] is True                    # 0.32 takes `block` ...
    c = vllm_checks.check_verification(cfg, env)                              # ... and its V1 runner ignores it
    assert c.status == "warn" and c.message.startswith("sweep.verification=block on server.device=cpu runs as "
                                                       "standard: vllm-cpu uses the V1 model runner")
    gpu = job("server=vllm_gpu", "sweep.verification=[block]", "sweep.temperature=0.8")
    assert vllm_checks.check_verification(gpu, env).status == "pass"
    greedy = job("server=vllm_gpu", "sweep.verification=[block]")
    assert vllm_checks.check_verification(greedy, env).message.startswith(
        "sweep.verification=block at sweep.temperature=0 verifies as standard does")
    old = job("server=vllm_gpu", "sweep.verification=block", f"server.python={old_vllm(tmp_path)}")
    old_env = env_for(old, monkeypatch)
    assert old_env["server_env"]["block_verification"] is False
    c = vllm_checks.check_verification(old, old_env)
    assert (c.status, c.message) == ("fail", "vLLM 0.8.0 has no block verification (rejection_sample_method=block): "
                                             "upgrade the server's vLLM (0.26 has it), or set "
                                             "sweep.verification=[standard]")
    assert vllm_checks.check_verification(job(), old_env).status == "pass"     # standard: any vLLM
    assert "verification" in [c.name for c in preflight.run_checks([cfg], env)]


def test_block_verification_runs_on_the_local_engine():
    cfg = job("server=local", "kernel=local_sdpa", "sweep.verification=[block]", "sweep.temperature=0.8")
    assert local_checks.check_verification in parts.checks("local").CHECKS
    assert local_checks.check_verification(cfg, {}).status == "pass"
    greedy = job("server=local", "kernel=local_sdpa", "sweep.verification=[block]")
    assert local_checks.check_verification(greedy, {}).status == "warn"


@pytest.mark.parametrize("overrides, backend", [
    (["server=sglang", "kernel=sglang_fa3", f"server.python={sys.executable}"], "sglang"),
])
def test_block_verification_is_refused_on_the_other_backends(overrides, backend):
    cfg = job(*overrides, "sweep.verification=[block]", "sweep.temperature=0.8")
    assert checks.check_verification in checks.refusals(backend)
    check = checks.check_verification(cfg, {})
    assert (check.status, check.message) == ("fail", f"sweep.verification ['block'] is not implemented on the "
                                                     f"{backend} backend: run these cells on a backend that has it "
                                                     "(server.backend vllm or local), or set "
                                                     "sweep.verification=[standard]")


def test_a_pair_path_that_is_no_folder_here_fails_in_one_line_and_a_hub_id_passes(random_results, tmp_path,
                                                                                   monkeypatch):
    """A relative pair.target read from another directory (`snakemake -d`) fails before any server starts."""
    target = random_results / "models" / "tiny" / "target"
    drafter = random_results / "models" / "tiny" / "drafter"
    monkeypatch.chdir(random_results.parent)
    relative = job("pair.target=results/models/tiny/target", f"pair.drafter={drafter}", "pair.built_by_workflow=false")
    assert checks.check_pair_paths(relative, {}).status == "pass"            # read from here, it is a folder
    monkeypatch.chdir(tmp_path)
    c = checks.check_pair_paths(relative, {})
    assert c.status == "fail" and c.message == (f"pair.target=results/models/tiny/target is no folder here ({tmp_path}) "
                                                "and no hub id (owner/name): give its absolute path, or run from the "
                                                "folder it is relative to")
    hub = job("pair=qwen3-8b-dflash-b16")                                   # hub ids: checked once downloaded
    assert checks.check_pair_paths(hub, {}).status == "pass"
    assert checks.check_pair_paths(job(f"pair.target={target}", "pair.drafter=./nowhere/drafter",
                                       "pair.built_by_workflow=false"), {}).message.startswith(
        "pair.drafter=./nowhere/drafter is no folder here")
    assert vllm_checks.CHECKS.index(checks.check_pair_paths) < vllm_checks.CHECKS.index(checks.check_drafter)


def test_kv_cache_mib_against_the_studys_largest_concurrency(tmp_path):
    """2 x layers x KV heads x head size x dtype bytes a token, target and drafter (the tiny pair's shapes: vllm-cpu
    counted 2,048 and 2,560 bytes a token, 32,768 and 26,112 tokens in 64 MiB); a model whose config is not here
    yet is left to the launch."""
    for name, layers in (("target", 4), ("drafter", 1)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(
            {"num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}))
    pair = [f"pair.target={tmp_path / 'target'}", f"pair.drafter={tmp_path / 'drafter'}"]
    c = vllm_checks.check_kv_cache(job(*pair), {})
    assert (c.status, c.message) == ("pass", "64 MiB: about 51 requests of max_model_len 512, for concurrency 4")
    c = vllm_checks.check_kv_cache(job(*pair, "sweep.concurrency=[1,64]"), {})
    assert c.status == "warn" and c.message.startswith("server.kv_cache_mib=64 holds about 51 requests of "
                                                       "max_model_len 512 (2560 bytes a token, target and drafter)")
    assert vllm_checks.check_kv_cache(job(*pair, "sweep.concurrency=[1]", "sweep.k_by_concurrency={64: 3}"),
                                      {}).status == "warn"
    assert vllm_checks.check_kv_cache(job(*pair, "sweep.concurrency=[64]", "server.kv_cache_mib=128"),
                                      {}).status == "pass"
    assert vllm_checks.check_kv_cache(job(*pair, "server=vllm_gpu"), {}).message == "vLLM's own sizing"
    missing = vllm_checks.check_kv_cache(job(f"pair.target={tmp_path / 'nowhere'}"), {})
    assert missing.status == "pass" and "checked once its server is up" in missing.message


# a nested (multimodal) target -------------------------------------------------------------------------------------
@pytest.fixture
def hybrid_pair(tmp_path):
    """Qwen3.5-27B's shape as shipped: nothing of the text model at the top level (issue 44's KeyError)."""
    from specsweep.models import shaped

    models = shaped.write("qwen3.5-27b", tmp_path / "m", with_tokenizer=False)
    return models, ["pair=qwen3.5-27b-dflash", f"pair.target={models / 'target'}",
                    f"pair.drafter={models / 'drafter'}", "pair.built_by_workflow=false"]


def test_the_drafter_check_reads_a_nested_target(hybrid_pair):
    models, pair = hybrid_pair
    c = checks.check_drafter(job(*pair), {})
    assert (c.status, c.message) == ("pass", "drafter: 5 layers, ids [1, 16, 31, 46, 61], mask 248070, block 16 "
                                             "(its own config.json, which the server uses)")
    cfg = json.loads((models / "drafter" / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [1, 16, 31, 46, 63]
    (models / "drafter" / "config.json").write_text(json.dumps(cfg))
    c = checks.check_drafter(job(*pair), {})
    assert c.status == "fail" and "target_layer_ids [63] out of range for a 64-layer target" in c.message


def test_drafter_inference_reads_a_nested_target(hybrid_pair):
    from specsweep.models import drafter_config, model_shape

    models, _ = hybrid_pair
    shapes = {"fc.weight": (5120, 5 * 5120), "layers.0.self_attn.q_proj.weight": (4096, 5120),
              "layers.0.self_attn.k_proj.weight": (1024, 5120), "layers.0.self_attn.q_norm.weight": (128,),
              "layers.0.mlp.gate_proj.weight": (17408, 5120)}
    cfg, _ = drafter_config.infer_config(shapes, model_shape.read_config(models / "target"))
    assert (cfg["num_target_layers"], cfg["vocab_size"], cfg["rope_theta"]) == (64, 248320, 10000000.0)
    assert cfg["dflash_config"]["target_layer_ids"] == [1, 16, 31, 46, 61]


def test_the_kv_check_reads_a_nested_hybrid_target(hybrid_pair):
    """16 full-attention layers of 4 KV heads of 256 (4,096 bytes a token each) and the drafter's 5 of 8 x 128, in
    vLLM's pool (backends/vllm/memory.pool): groups of 5 layers, pages of 864 x 4,096 bytes, a 4096-token request holding
    5 blocks in each of 5 attention groups and 1 + 15 in each of 10 GDN groups, none of it in all 64 layers."""
    _, pair = hybrid_pair
    c = vllm_checks.check_kv_cache(job(*pair, "server.kv_cache_mib=8192", "server.max_model_len=4096",
                                       "server.dtype=bfloat16", "sweep.num_speculative_tokens=[15]",
                                       "sweep.concurrency=[8]"), {})
    block = 5 * 864 * 4096
    assert 2 ** 33 // ((5 * 5 + 10 * 16) * block) == 2 and 10 * 16 * block // 2 ** 20 == 2700
    assert c.status == "warn" and c.message.startswith(
        "server.kv_cache_mib=8192 holds about 2 requests of max_model_len 4096 (86016 bytes a token, target and "
        "drafter and 2700 MiB of linear-attention state a request), fewer than concurrency 8")


# the drafter's own config is the truth (issue 52) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def moe_pair(tmp_path_factory):
    """The Qwen3.6-35B-A3B shape and its drafter (mask token 248077, block 16 in dflash_config)."""
    from specsweep.models import shaped

    models = shaped.write("qwen3.6-35b-a3b", tmp_path_factory.mktemp("moe") / "m", with_tokenizer=False)
    return [f"pair.target={models / 'target'}", f"pair.drafter={models / 'drafter'}"]


def drafter_check(backend):
    [check] = [c for c in parts.checks(backend).CHECKS if c.__name__ == "check_drafter"]
    return check


@pytest.mark.parametrize("server, backend", [("vllm_gpu", "vllm"), ("sglang server.python=python3", "sglang"), ("local", "local")])
def test_a_pair_preset_that_disagrees_with_its_drafters_config_is_refused_on_every_backend(moe_pair, server, backend):
    """Issue 52: the 27B pair preset (mask 248070) on the 35B-A3B's drafter (248077) passed and printed the preset's
    mask token; every backend's server reads the drafter's own config, so the preset is refused in one line."""
    c = drafter_check(backend)(job("pair=qwen3.6-27b-dflash", *moe_pair, *f"server={server}".split()), {})
    assert (c.status, c.message) == ("fail", "pair.mask_token_id=248070 but the drafter's config.json says 248077, "
                                             "which the server uses: set pair.mask_token_id=null (the drafter's own) "
                                             "or 248077, or pick the drafter trained with 248070")
    c = drafter_check(backend)(job("pair=qwen3.6-35b-a3b-dflash", *moe_pair, *f"server={server}".split(),
                                   "pair.block_size=8"), {})
    assert (c.status, c.message) == ("fail", "pair.block_size=8 but the drafter's config.json says 16, which the "
                                             "server uses: set pair.block_size=16")
    c = drafter_check(backend)(job("pair=qwen3.6-35b-a3b-dflash", *moe_pair, *f"server={server}".split()), {})
    assert (c.status, c.message) == ("pass", "drafter: 6 layers, ids [1, 6, 11, 16, 22, 27, 32, 37], mask 248077, "
                                             "block 16 (its own config.json, which the server uses)")
    agreeing = job("pair=qwen3.6-35b-a3b-dflash", *moe_pair, *f"server={server}".split(), "pair.mask_token_id=248077")
    assert drafter_check(backend)(agreeing, {}).status == "pass"


# a member that cannot start on its GPU, foreseen from the shapes (issue 52) -------------------------------------------
H100 = {"index": "0", "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_total_mib": 81559,
        "memory_free_mib": 81000}


@pytest.fixture(scope="module")
def shaped_results(tmp_path_factory):
    """A results_dir with the 35B-A3B and 27B shapes where the presets look for them."""
    from specsweep.models import shaped

    res = tmp_path_factory.mktemp("shaped") / "res"
    for name, folder in (("qwen3.6-35b-a3b", "qwen3.6-35b-a3b-dflash-shaped"),
                         ("qwen3.6-27b", "qwen3.6-27b-dflash-shaped")):
        shaped.write(name, res / "models" / folder, with_tokenizer=False)
    return res


def gpu_fit(res, card, *overrides):
    cfg = job("experiment=gpu_35b_moe_hybrid", "server=vllm_gpu", *overrides, results=str(res))
    return vllm_checks.check_gpu_fit(cfg, {"gpus": [card], "server_env": {"vllm": "0.26.0"}})


def test_the_moe_hybrid_on_an_80_gb_h100_is_refused_as_vllm_refused_it(shaped_results):
    """Issue 52, at the 27B preset's --max-num-seqs 64 on an 80 GB H100 at 0.85: the baseline loaded 64.7 GiB and
    had 0.9 GiB of KV, and vLLM refused "max_num_seqs (64) exceeds available Mamba cache blocks (44)"; the K=15
    member had -0.27 GiB ("No available memory for the cache blocks"). Both refused in a second, each with its fix;
    the planner had said "relaunch" for members needing 69.7 and 88.8 GiB."""
    c = gpu_fit(shaped_results, H100, 'server.extra_args=[--load-format,dummy,--max-num-seqs,"64"]')
    base, k15 = c.message.split("; qwen3.6-35b-a3b-dflash-dflash-k15")
    assert c.status == "fail" and base.startswith("base-target-")
    assert ": max_num_seqs 64 exceeds the 44 sequences its 44 KV blocks hold in linear-attention state (1 a sequence; " \
           "0.89 GiB of KV in its 67.7 GiB share of the 80 GiB GPU), so vLLM refuses to start ('exceeds available " \
           "Mamba cache blocks'); add --max-num-seqs 8 to server.extra_args (at most 44; the study sends at most 8)" in base
    assert ": 65.3 GiB of weights and 2.25 GiB to start leave 0.17 GiB of its 67.7 GiB share of the 80 GiB GPU for " \
           "KV, less than one request of max_model_len holds (2.45 GiB); run it on a GPU of at least 90 GiB at " \
           "server.gpu_memory_utilization=0.95 with --max-num-seqs 8 (it needs 84.9 GiB at concurrency 8), or send " \
           "at most 2 at once here (sweep.concurrency) at server.gpu_memory_utilization=0.95 with --max-num-seqs 2" in k15
    # the preset's --max-num-seqs 8: the baseline starts; the K=15 member's state for 8 sequences needs more than
    # the H100 gives it, even at 0.95
    c = gpu_fit(shaped_results, H100)
    assert c.status == "fail" and c.message.startswith("qwen3.6-35b-a3b-dflash-dflash-k15") and "base-target" not in \
        c.message
    c = gpu_fit(shaped_results, H100, "server.gpu_memory_utilization=0.95")
    assert c.status == "fail" and "8.14 GiB of KV in its 75.7 GiB share of the 80 GiB GPU hold one request of " \
        "max_model_len (2.45 GiB) but not the state of 7 more sequences (2.14 GiB each, whatever their length), so " \
        "its cells at concurrency 8 would queue" in c.message
    # the fix it names fits, and its decode steps run in the full CUDA graphs
    fix = ("server.gpu_memory_utilization=0.95", "sweep.concurrency=[1,2]",
           'server.extra_args=[--load-format,dummy,--max-num-seqs,"2"]')
    assert gpu_fit(shaped_results, H100, *fix).status == "pass"
    cfg = job("experiment=gpu_35b_moe_hybrid", "server=vllm_gpu", *fix, results=str(shaped_results))
    assert vllm_checks.check_cuda_graphs(cfg, {"gpus": [H100], "server_env": {"vllm": "0.26.0"}}).status == "pass"


def test_a_baseline_outside_its_full_cuda_graphs_is_refused_as_the_h100_moe_run_found(shaped_results):
    """The H100 run of this session (3 sequences fit, so the fix then named concurrency 3 at --max-num-seqs 3): vLLM
    captured the baseline's FULL decode graphs for 1 and 2 requests only, and at 3 its decode slowed several times
    over where the K=15 member's did not. Now gpu_fit passes it and cuda_graphs refuses the baseline."""
    run = ("server.gpu_memory_utilization=0.95", "sweep.concurrency=[1,3]",
           'server.extra_args=[--load-format,dummy,--max-num-seqs,"3"]')
    assert gpu_fit(shaped_results, H100, *run).status == "pass"
    cfg = job("experiment=gpu_35b_moe_hybrid", "server=vllm_gpu", *run, results=str(shaped_results))
    c = vllm_checks.check_cuda_graphs(cfg, {"gpus": [H100], "server_env": {"vllm": "0.26.0"}})
    assert c.status == "fail" and c.message.startswith("base-target-") and ";" not in c.message, c.message
    assert "at concurrency 3 its decode steps (3 tokens) run outside vLLM's full CUDA graphs, which --max-num-seqs " \
           "3 captures for at most 2 request(s)" in c.message and "set --max-num-seqs 4" in c.message


def test_the_moe_hybrid_fits_an_h200_and_a_member_whose_weights_exceed_its_share_is_one_line(shaped_results):
    """On the H200 (140.4 GiB) both members start, at the preset's 8 sequences and at the 27B preset's 64; on a
    GPU smaller than the weights, one line that says so."""
    c = gpu_fit(shaped_results, H200)
    assert c.status == "pass" and c.message.startswith("each member starts on its share: base-target-")
    assert "52.5 GiB of KV, max_num_seqs 8 of at most 2608" in c.message and "51.8 GiB of KV, max_num_seqs 8 of " \
        "at most 726" in c.message
    assert gpu_fit(shaped_results, H200, 'server.extra_args=[--load-format,dummy,--max-num-seqs,"64"]').status == "pass"
    # vLLM's own default max_num_seqs on a GPU of 70 GiB and more (1024) is more than the K=15 member's 726
    c = gpu_fit(shaped_results, H200, "server.extra_args=[--load-format,dummy]")
    assert c.status == "fail" and "max_num_seqs 1024 exceeds the 726 sequences" in c.message
    small = {**H100, "name": "NVIDIA A100 64GB", "memory_total_mib": 65536}
    c = gpu_fit(shaped_results, small)
    assert c.status == "fail" and ": 64.6 GiB of weights and 2.25 GiB to start exceed its 54.4 GiB share of the 64 " \
        "GiB GPU (vLLM: 'No available memory for the cache blocks'), leaving nothing for KV" in c.message
    assert "run it on a GPU of at least 71 GiB at server.gpu_memory_utilization=0.95" in c.message


def test_doctor_shows_the_gpu_fit_and_the_27b_group_still_fits_the_h200(shaped_results, monkeypatch):
    cfg = job("experiment=gpu_27b_one", "server=vllm_gpu", results=str(shaped_results))
    env = env_for(cfg, monkeypatch, gpus=[H200])
    c = next(c for c in preflight.run_checks([cfg], env) if c.name == "gpu_fit")
    assert c.status == "pass" and "max_num_seqs 64 of at most 1209" in c.message
    monkeypatch.setenv("SPECSWEEP_GPUS", json.dumps([H100]))
    out = run([str(BIN / "specsweep"), "doctor", "experiment=gpu_35b_moe_hybrid", "server=vllm_gpu",
               f"results_dir={shaped_results}"])
    line = next(x for x in out.stdout.splitlines() if "gpu_fit:" in x)
    assert out.returncode == 1 and line.startswith("[fail] gpu_fit: qwen3.6-35b-a3b-dflash-dflash-k15-al6-")


def test_the_moe_presets_baseline_prefills_in_its_graphs_and_without_its_largest_graph_is_warned(shaped_results):
    """The preset's --max-num-seqs 8 leaves the baseline's CUDA graphs at 16 tokens, below a chat prompt, where its
    K=15 member's reach 256: the preset's kernel.cuda_graph_max_tokens=512 passes on an H200; null is warned."""
    env = {"gpus": [H200], "server_env": {"vllm": "0.26.0"}}
    cfg = job("experiment=gpu_35b_moe_hybrid", "server=vllm_gpu", results=str(shaped_results))
    assert vllm_checks.check_cuda_graphs(cfg, env).status == "pass"
    cfg = job("experiment=gpu_35b_moe_hybrid", "server=vllm_gpu", "kernel.cuda_graph_max_tokens=null",
              results=str(shaped_results))
    c = vllm_checks.check_cuda_graphs(cfg, env)
    assert c.status == "warn" and c.message.startswith("base-target-") and "stop at 16 tokens" in c.message

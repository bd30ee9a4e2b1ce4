"""vLLM's launch for a hybrid, multimodal target (issue 44 items 3-7): the flags the server's Python and the
target's shape call for, the sleep level the host's memory allows, a dead engine's one line, prefix caching.

No vLLM starts: the probe and the target's shape are given (a stand-in for model_shape.shape, so that these tests
check this launch's logic and not the shape's counting), and the servers are small Python scripts on 127.0.0.1."""
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specsweep.backends.vllm import checks as vllm_checks
from specsweep.backends.vllm import engine_death, launch
from specsweep.backends.vllm import session as vllm_session
from specsweep.core.errors import ConfigError, ServerError
from specsweep.grid import schedule
from specsweep.grid.cells import expand, spec_hash
from specsweep.grid.config import compose_jobs
from specsweep.models import model_shape
from specsweep.plan import residency
from specsweep.run.server import Server

GIB = 1024 ** 3
NO_FLASHINFER = {"executable": sys.executable, "vllm": "0.26.0", "dflash_module": True, "flashinfer": None,
                 "per_request_spec_metrics": False, "per_request_timing": False}
FLASHINFER = {**NO_FLASHINFER, "flashinfer": "0.5.3"}


@dataclass
class StandInShape:
    """What this launch reads of model_shape.Shape."""
    hybrid: bool
    multimodal: bool
    weights: int

    def weights_bytes(self, width: int, language_only: bool = True) -> int:
        return self.weights


@pytest.fixture
def shapes(monkeypatch):
    """specsweep.models.model_shape.shape stood in: a config.json's `_test_shape` entry is its shape."""
    def shape(path):
        try:
            got = json.loads((Path(path) / "config.json").read_text()).get("_test_shape")
        except (OSError, ValueError, TypeError):
            return None
        return StandInShape(got["hybrid"], got["multimodal"], int(got["weights_gib"] * GIB)) if got else None

    monkeypatch.setattr(model_shape, "shape", shape)


def model(root: Path, name: str, hybrid=False, multimodal=False, weights_gib=1.0, layers=8) -> Path:
    d = root / name
    d.mkdir(parents=True)
    cfg = {"num_hidden_layers": layers, "hidden_size": 256, "head_dim": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000,
           "_test_shape": {"hybrid": hybrid, "multimodal": multimodal, "weights_gib": weights_gib}}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def gpu_grid(tmp_path, *extra, hybrid=True, multimodal=True, weights_gib=1.0, ks="[15]"):
    target = model(tmp_path, "target", hybrid, multimodal, weights_gib)
    drafter = model(tmp_path, "drafter", weights_gib=0.0, layers=1)
    return expand(compose_jobs([f"results_dir={tmp_path / 'r'}", "server=vllm_gpu", f"pair.target={target}",
                                f"pair.drafter={drafter}", "pair.built_by_workflow=false",
                                f"sweep.num_speculative_tokens={ks}", "sweep.concurrency=[1]", *extra]))


def launched(grid, probe, monkeypatch, tmp_path, baseline=True):
    monkeypatch.setattr(launch, "probe_python", lambda python, env=None: probe)
    monkeypatch.setattr(launch, "server_command", lambda run: [sys.executable, "-m", "vllm.entrypoints.cli.main"])
    sid = next(s for s, c in grid.servers.items() if c.is_baseline == baseline)
    srv = vllm_session.server_for(grid, sid, tmp_path / "logs")
    return srv, srv.argv_for(18000)


# ---- item 3: the kernels the server's Python really has ---------------------------------------------------------
def test_a_hybrid_target_without_flashinfer_gets_the_triton_gdn_kernel_and_the_samplers_switch(
        tmp_path, monkeypatch, shapes):
    srv, argv = launched(gpu_grid(tmp_path), NO_FLASHINFER, monkeypatch, tmp_path)
    assert argv[argv.index("--gdn-prefill-backend") + 1] == "triton"
    assert srv.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    assert any("--gdn-prefill-backend triton" in n for n in srv.record["launch_notes"])


def test_a_hybrid_target_with_flashinfer_or_a_dense_one_gets_no_kernel_flag(tmp_path, monkeypatch, shapes):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    srv, argv = launched(gpu_grid(tmp_path / "a"), FLASHINFER, monkeypatch, tmp_path / "a")
    assert "--gdn-prefill-backend" not in argv and "VLLM_USE_FLASHINFER_SAMPLER" not in srv.env
    srv, argv = launched(gpu_grid(tmp_path / "b", hybrid=False), NO_FLASHINFER, monkeypatch, tmp_path / "b")
    assert "--gdn-prefill-backend" not in argv
    assert srv.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"           # the sampler needs it on any target


def test_the_users_gdn_backend_wins_and_a_forced_flashinfer_without_it_is_one_line(tmp_path, monkeypatch, shapes):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    g = gpu_grid(tmp_path / "a", "server.extra_args=[--gdn-prefill-backend,triton]")
    _, argv = launched(g, NO_FLASHINFER, monkeypatch, tmp_path / "a")
    assert argv.count("--gdn-prefill-backend") == 1
    forced = gpu_grid(tmp_path / "b", "server.extra_args=['--gdn-prefill-backend=flashinfer']")
    with pytest.raises(ServerError, match="--gdn-prefill-backend flashinfer, but the server's Python cannot import"):
        launched(forced, NO_FLASHINFER, monkeypatch, tmp_path / "b")
    cfg = forced.configs[schedule.leads(forced)[0]]
    check = vllm_checks.check_launch_flags(cfg, {"server_env": NO_FLASHINFER})
    assert check.status == "fail" and "\n" not in check.message and "--gdn-prefill-backend" in check.message


def test_server_json_keeps_the_gdn_kernel_vllm_logged():
    log = ("(EngineCore_DP0 pid=4775) INFO 12-04 12:28:06 [qwen_gdn_linear_attn.py:228] Using Triton/FLA GDN prefill "
           "kernel (requested=triton, head_k_dim=128).\n")
    facts = vllm_session.startup_facts(log)
    assert facts["gdn_prefill_backend"] == "Triton/FLA" and facts["gdn_prefill_backend_requested"] == "triton"
    assert "gdn_prefill_backend" not in vllm_session.startup_facts("INFO nothing\n")     # a dense target's log


def test_a_sampler_forced_on_without_flashinfer_is_a_known_issue_keyed_on_the_probe(tmp_path, shapes):
    from specsweep.backends.vllm import known_issues

    g = gpu_grid(tmp_path, "+server.env.VLLM_USE_FLASHINFER_SAMPLER='1'")
    cfg = g.configs[schedule.leads(g)[0]]
    facts = known_issues.Facts(cfg, NO_FLASHINFER, [], None, None)
    assert "has no flashinfer" in known_issues.flashinfer_sampler(facts)
    assert known_issues.flashinfer_sampler(known_issues.Facts(cfg, FLASHINFER, [], None, None)) is None


# ---- item 4: a multimodal checkpoint in a text study -------------------------------------------------------------
def test_a_multimodal_target_launches_language_model_only_or_warns_where_extra_args_keep_the_vision_tower(
        tmp_path, monkeypatch, shapes):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    g = gpu_grid(tmp_path / "a")
    _, argv = launched(g, FLASHINFER, monkeypatch, tmp_path / "a")
    assert "--language-model-only" in argv
    ok = vllm_checks.check_launch_flags(g.configs[schedule.leads(g)[0]], {"server_env": FLASHINFER})
    assert ok.status == "pass" and "--language-model-only" in ok.message
    keeps = gpu_grid(tmp_path / "b", "server.extra_args=[--limit-mm-per-prompt,'{\"image\":1}']")
    srv, argv = launched(keeps, FLASHINFER, monkeypatch, tmp_path / "b")
    assert "--language-model-only" not in argv and "keep its vision tower" in srv.record["launch_warnings"][0]
    warned = vllm_checks.check_launch_flags(keeps.configs[schedule.leads(keeps)[0]], {"server_env": FLASHINFER})
    assert warned.status == "warn" and "--limit-mm-per-prompt" in warned.message


# ---- item 5: sleep that fits the host --------------------------------------------------------------------------
def test_sleep_level_follows_the_hosts_available_memory(tmp_path, shapes):
    """Two 27B-shaped members (about 50 GiB of weights each): level 1 backs up 100 GiB in host memory, which a
    125 GiB host cannot spare (both engines died so, issue 44): level 2 there, level 1 on a 512 GiB host."""
    g = gpu_grid(tmp_path, "sweep.residency=sleep", weights_gib=50.0)
    ms = schedule.group(g, schedule.leads(g)[0])
    assert len(ms) == 2
    small = residency.plan(g, ms, ["0"], device_bytes=140 * GIB, available_bytes=118 * GIB)
    assert {p.residency for p in small.values()} == {"sleep"} and {p.sleep_level for p in small.values()} == {2}
    note = small[ms[0]].note
    assert "100.0 GiB" in note and "118.0 GiB available" in note and "level 2" in note
    assert small[ms[0]].facts()["sleep_level"] == 2
    big = residency.plan(g, ms, ["0"], device_bytes=140 * GIB, available_bytes=512 * GIB)
    assert {p.sleep_level for p in big.values()} == {1} and "fit in host memory" in big[ms[0]].note


def test_five_50_gib_members_are_relaunched_where_level_2s_leftovers_do_not_fit(tmp_path, shapes):
    """Five ~50 GiB members: 250 GiB cannot sleep at level 1 on a 125 GiB host; at level 2 four sleeping members'
    leftovers (SLEEP_GPU_GIB each) must fit beside the awake one's share of the GPU, else relaunch."""
    plans = {}
    for budget in (0.95, 0.85):
        g = gpu_grid(tmp_path / str(budget), "sweep.residency=sleep", f"server.gpu_memory_utilization={budget}",
                     weights_gib=50.0, ks="[1,2,3,4]")
        ms = schedule.group(g, schedule.leads(g)[0])
        assert len(ms) == 5
        plans[budget] = residency.plan(g, ms, ["0"], device_bytes=140 * GIB, available_bytes=118 * GIB)[ms[0]]
    assert plans[0.95].residency == "relaunch" and plans[0.95].sleep_level is None
    assert "250.0 GiB" in plans[0.95].note and "relaunched one at a time" in plans[0.95].note
    assert plans[0.85].residency == "sleep" and plans[0.85].sleep_level == 2


# ---- a stand-in vLLM: its sleep endpoints, and an engine that dies ----------------------------------------------
FAKE_VLLM = r'''
import http.server, json, os, sys

ENGINE_DEATH = """(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866] Traceback (most recent call last):
(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866]   File "/tmp/site/vllm/v1/engine/core.py", line 857, in run_engine_core
(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866]     engine_core.run_busy_loop()
(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866]   File "/tmp/site/vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py", line 180, in fi_chunk_gated_delta_rule
(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866]     from flashinfer.gdn_prefill import (
(EngineCore_DP0 pid=2345) ERROR 12-04 10:12:13 [core.py:866] ModuleNotFoundError: No module named 'flashinfer'
(APIServer pid=2201) ERROR 12-04 10:12:13 [async_llm.py:480] AsyncLLM output_handler failed.
(APIServer pid=2201) ERROR 12-04 10:12:13 [async_llm.py:480] Traceback (most recent call last):
(APIServer pid=2201) ERROR 12-04 10:12:13 [async_llm.py:480]   File "/tmp/site/vllm/v1/engine/async_llm.py", line 439, in output_handler
(APIServer pid=2201) ERROR 12-04 10:12:13 [async_llm.py:480]     outputs = await engine_core.get_output_async()
(APIServer pid=2201) ERROR 12-04 10:12:13 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""

class Vllm(http.server.BaseHTTPRequestHandler):
    def _send(self, code, body=b""):
        self.send_response(code)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, json.dumps({"data": [{"id": "m"}]}).encode())

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        print(f"POST {self.path} {body}", flush=True)
        if self.path.startswith("/sleep") and sys.argv[2] == "die":
            print(ENGINE_DEATH, flush=True)
            os._exit(1)
        if self.path.startswith("/sleep"):
            print("(EngineCore_DP0 pid=2345) INFO 12-04 10:12:13 [gpu_worker.py:123] Sleep mode freed 50.21 GiB "
                  "memory, 1.80 GiB memory is still in use.", flush=True)
        self._send(200)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Vllm).serve_forever()
'''


def fake_vllm(tmp_path, mode: str, level: int) -> vllm_session.VllmSession:
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_VLLM)
    run = {"host": "127.0.0.1", "port": None, "port_range": [18400, 18499], "ready_timeout_s": 30, "stop_grace_s": 5}
    srv = Server(lambda p: [sys.executable, str(script), str(p), mode], run, tmp_path / "logs", served_name="m",
                 kind="vLLM", record={"sleep_level": level})
    srv.__enter__()
    return vllm_session.VllmSession(srv, run)


def posts(session) -> list[str]:
    return [line for line in session.srv.log_path.read_text().splitlines() if line.startswith("POST ")]


def test_level_2_wakes_the_weights_reloads_them_then_the_kv_cache_and_times_the_wake(tmp_path, lock_dir):
    session = fake_vllm(tmp_path, "live", level=2)
    try:
        session.sleep()
        session.wake()
        assert posts(session) == ["POST /sleep?level=2 ", "POST /wake_up?tags=weights ",
                                  'POST /collective_rpc {"method":"reload_weights"}', "POST /wake_up?tags=kv_cache "]
        assert len(session.srv.info["wake_s"]) == 1 and session.srv.info["sleep_still_in_use_gib"] == 1.8
    finally:
        session.srv.stop()


def test_an_engine_that_dies_at_sleep_is_one_line_with_its_root_cause_and_no_sleep_advice(tmp_path, lock_dir):
    session = fake_vllm(tmp_path, "die", level=1)
    try:
        with pytest.raises(ServerError) as e:
            session.sleep()
        line = str(e.value)
        assert line.startswith("vLLM's engine died at /sleep: ModuleNotFoundError: No module named 'flashinfer'")
        assert "\n" not in line and "sleep mode" not in line and "residency" not in line
        deadline = time.monotonic() + 10
        while session.srv.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        failure = session.death("server died during the cell (vLLM's engine core exited)")
        assert "ModuleNotFoundError: No module named 'flashinfer'" in failure
    finally:
        session.srv.stop()


# ---- item 6: the root-cause rule on realistic logs --------------------------------------------------------------
def test_the_root_cause_is_the_first_exception_that_is_not_a_wrapper():
    startup = """(EngineCore_DP0 pid=11) ERROR 12-04 09:00:00 [core.py:700] EngineCore failed to start.
(EngineCore_DP0 pid=11) ERROR 12-04 09:00:00 [core.py:700] Traceback (most recent call last):
(EngineCore_DP0 pid=11) ERROR 12-04 09:00:00 [core.py:700]     raise ValueError("x")
(EngineCore_DP0 pid=11) ERROR 12-04 09:00:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
(APIServer pid=10) Traceback (most recent call last):
(APIServer pid=10) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
    assert engine_death.root_cause(startup) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    wrapped = ("(APIServer pid=10) ERROR 12-04 09:00:00 [core_client.py:600] Engine core proc EngineCore_DP0 died "
               "unexpectedly, shutting down client.\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered "
               "an issue. See stack trace (above) for the root cause.\n")
    assert engine_death.root_cause(wrapped) is None           # killed without a traceback (the host's OOM killer)
    assert engine_death.died(wrapped, alive=True) and not engine_death.died("INFO fine\n", alive=True)
    assert engine_death.died("", alive=False)


# ---- item 7: prefix caching ---------------------------------------------------------------------------------------
def test_prefix_caching_is_off_by_default_outside_the_id_and_recorded(tmp_path, monkeypatch, shapes):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    g = gpu_grid(tmp_path / "a", hybrid=False, multimodal=False)
    srv, argv = launched(g, FLASHINFER, monkeypatch, tmp_path / "a")
    assert "--no-enable-prefix-caching" in argv and srv.record["prefix_caching"] is False
    sid = next(s for s, c in g.servers.items() if c.is_baseline)
    spec = g.servers[sid].spec
    bare = {**spec, "server": {k: v for k, v in spec["server"].items() if k != "prefix_caching"}}
    assert spec_hash(spec) == spec_hash(bare)                  # ids of studies before the key stay as they were
    on = gpu_grid(tmp_path / "b", "server.prefix_caching=true", hybrid=False, multimodal=False)
    srv, argv = launched(on, FLASHINFER, monkeypatch, tmp_path / "b")
    assert "--no-enable-prefix-caching" not in argv
    on_sid = next(s for s, c in on.servers.items() if c.is_baseline)
    assert spec_hash(on.servers[on_sid].spec) != spec_hash({**on.servers[on_sid].spec, "server": {
        **on.servers[on_sid].spec["server"], "prefix_caching": False}})
    with pytest.raises(ConfigError, match="use server.prefix_caching"):
        gpu_grid(tmp_path / "c", "server.extra_args=[--enable-prefix-caching]")


def test_a_hybrid_targets_greedy_cells_keep_the_greedy_agreement_check(tmp_path, shapes):
    from specsweep.run.bench_cell import greedy_agreement_na

    g = gpu_grid(tmp_path, "sweep.temperature=0")
    sid = next(s for s, c in g.servers.items() if not c.is_baseline)
    for bid in g.benches[sid]:
        assert greedy_agreement_na(g, sid, bid) is None


def test_the_probe_finds_flashinfer_in_the_servers_own_environment(tmp_path):
    """The probe runs with server.env: a flashinfer importable only through its PYTHONPATH is found, without being
    imported (a package folder whose __init__ would fail on import)."""
    site = tmp_path / "site" / "flashinfer"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("raise ImportError('never imported by the probe')\n")
    assert launch.probe_python(sys.executable, {"PYTHONPATH": str(tmp_path / "site")})["flashinfer"] == "found"
    import importlib.util

    without = launch.probe_python(sys.executable, {})["flashinfer"]
    assert (without is None) == (importlib.util.find_spec("flashinfer") is None)     # this Python's own answer


def test_a_vllm_cell_records_its_max_num_seqs_as_the_servers_running_limit(tmp_path, monkeypatch):
    """vLLM runs at most --max-num-seqs requests at once and queues the rest: a cell records the flag's value as the
    server's running limit (server_max_running_requests), which bench_cell holds a cell's concurrency against, as for
    SGLang's capped scheduler (tested end to end there, tests/test_sglang.py). No request is sent here."""
    from types import SimpleNamespace

    from specsweep.run.bench_cell import Measurement

    async def sent(url, prompts, settings, concurrency, warmup, progress=True, desc=""):
        return [], {"requests_completed": 0}

    monkeypatch.setattr(vllm_session, "measure", sent)
    grid = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.concurrency=[4]"]))
    sid = next(iter(grid.servers))
    bench = next(iter(grid.benches[sid].values())).spec
    for argv, limit in (([sys.executable, "-m", "vllm", "serve", "m", "--max-num-seqs", "2"], 2),
                        ([sys.executable, "-m", "vllm", "serve", "m", "--max_num_seqs=8"], 8), (["vllm", "serve"], None)):
        srv = SimpleNamespace(info={"argv": argv}, log_path=None, alive=lambda: True, url="http://127.0.0.1:1",
                              served_name="m", api_key=None)
        m = vllm_session.VllmSession(srv, {"request_timeout_s": 5}).measure([["hi"]], bench, False, "d")
        assert isinstance(m, Measurement) and m.figures["server_max_running_requests"] == limit
        assert m.figures["server_running_cap"] == (f"its --max-num-seqs {limit} (server.extra_args)" if limit else None)

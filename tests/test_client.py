"""The client against a real local HTTP server that misbehaves in every way a proxy or server can."""
import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from specsweep.run.client import ChatSettings, run_requests

DATA = Path(__file__).parent / "data"


def sse(chunks, done=True):
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return body + ("data: [DONE]\n\n" if done else "")


GOOD = [{"choices": [{"delta": {"content": "Hel"}}]}, {"choices": [{"delta": {"content": "lo"}}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}]

# continuous_usage_stats: a cumulative count on every chunk; the finish chunk brings a token without text (EOS)
COUNTED = [{"choices": [{"delta": {"role": "assistant", "content": ""}}], "usage": {"completion_tokens": 0}},
           {"choices": [{"delta": {"content": "Hel"}}], "usage": {"prompt_tokens": 7, "completion_tokens": 1}},
           {"choices": [{"delta": {"content": "lo"}}], "usage": {"prompt_tokens": 7, "completion_tokens": 4}},
           {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 7, "completion_tokens": 5}},
           {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}]

# vLLM 0.32's final usage chunk with --per-request-spec-decode-metrics=summary (chat_completion/serving.py)
SPEC = {"mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.5, "acceptance_histogram": [0, 1, 1, 0],
        "num_spec_steps": 2, "num_accepted_draft_tokens": 3, "num_draft_tokens": 6, "num_spec_tokens": 3}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = body["messages"][-1]["content"]
        self.server.seen.append(body)
        if mode == "html":
            self._reply(502, "text/html", "<html><body>Bad Gateway</body></html>")
        elif mode == "500":
            self._reply(500, "application/json", json.dumps({"message": "engine dead"}))
        elif mode == "notjson":
            self._reply(200, "text/event-stream", "data: {not json\n\n")
        elif mode == "truncated":
            self._reply(200, "text/event-stream", sse(GOOD[:2], done=False))
        elif mode == "plainjson":
            self._reply(200, "application/json", json.dumps({"choices": []}))
        elif mode == "spec":        # stats in their own chunk, as SGLang streams sglext (tests/test_sglang.py)
            stats = {"choices": [], "usage": None, "sglext": {"spec_tokens_details": {"spec_verify_ct": 2}}}
            self._reply(200, "text/event-stream", sse(GOOD[:3] + [stats] + GOOD[3:]))
        elif mode == "vllmspec":        # vLLM: on the final usage chunk
            last = {**GOOD[-1], "metrics": {"speculative_decoding": SPEC}}
            self._reply(200, "text/event-stream", sse(GOOD[:-1] + [last]))
        elif mode == "sglang0517":     # a real SGLang 0.5.17 DFLASH stream, captured on an H200
            self._reply(200, "text/event-stream; charset=utf-8", (DATA / "sglang0517" / "dflash_chat_stream.txt").read_text())
        elif mode == "counted":
            self._reply(200, "text/event-stream", sse(COUNTED))
        elif mode.startswith("wait"):      # "wait0.4": answer after that many seconds
            import time
            time.sleep(float(mode[4:]))
            self._reply(200, "text/event-stream", sse(GOOD))
        elif mode == "slow":
            import time
            time.sleep(3)
            self._reply(200, "text/event-stream", sse(GOOD))
        else:
            self._reply(200, "text/event-stream", sse(GOOD))

    def _reply(self, status, ctype, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.seen = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_bad_answers_become_errors_with_reasons(server):
    url = f"http://127.0.0.1:{server.server_port}"
    prompts = [["ok"], ["html"], ["500"], ["notjson"], ["truncated"], ["plainjson"], ["slow"]]
    s = ChatSettings(model="m", max_tokens=8, temperature=0.0, seed=0, thinking=False, timeout_s=1.0)
    records, wall = asyncio.run(run_requests(url, prompts, s, concurrency=3, progress=False))
    by = {r.index: r for r in records}
    assert len(records) == 7 and wall > 0
    assert by[0].ok and by[0].text == "Hello" and by[0].completion_tokens == 2 and by[0].finish_reason == "stop"
    assert by[0].ttft_s is not None and len(by[0].itl_s) == 1
    assert len(by[0].chunk_t_s) == 2 and by[0].chunk_tokens is None     # no per-chunk usage: no counts
    assert "HTML body" in by[1].error and by[1].status == 502
    assert by[2].error == "HTTP 500: engine dead"
    assert "non-JSON stream chunk" in by[3].error
    assert "truncated" in by[4].error and by[4].text == "Hello"
    assert "expected an event stream" in by[5].error
    assert "timed out" in by[6].error
    assert sum(r.ok for r in records) == 1


@pytest.mark.parametrize("waves", [False, True])
def test_waves_send_each_wave_together_once_the_one_before_has_finished(server, waves):
    """sweep.waves: at concurrency 2, prompts 2 and 3 go out together once 0 (slow) and 1 have both finished;
    without waves, prompt 2 takes prompt 1's slot as soon as it frees, while 0 is still running."""
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="m", max_tokens=8, temperature=0.0, seed=0, thinking=False, timeout_s=10.0, waves=waves)
    prompts = [["wait0.6"], ["wait0.02"], ["wait0.02"], ["wait0.02"], ["wait0.02"]]
    records, _ = asyncio.run(run_requests(url, prompts, s, concurrency=2, progress=False))
    by = {r.index: r for r in records}
    assert all(r.ok for r in records) and len(records) == 5
    end = {i: r.start_s + r.e2e_s for i, r in by.items()}
    if waves:
        assert min(by[2].start_s, by[3].start_s) >= max(end[0], end[1])
        assert by[4].start_s >= max(end[2], end[3])
    else:
        assert by[2].start_s < end[0] and by[4].start_s < end[0]


def test_thinking_and_sampling_settings_reach_the_server(server):
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="m", max_tokens=5, temperature=0.5, seed=3, thinking=True, timeout_s=5.0)
    asyncio.run(run_requests(url, [["ok"]], s, concurrency=1, progress=False))
    body = server.seen[-1]
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["stream"] and body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (5, 0.5, 3)


def test_a_servers_own_fields_go_out_and_its_spec_stats_come_back(server):
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="m", max_tokens=5, temperature=0.0, seed=0, thinking=False, timeout_s=5.0,
                     extra_body={"return_spec_tokens_details": True}, spec_field=("sglext", "spec_tokens_details"))
    records, _ = asyncio.run(run_requests(url, [["spec"], ["ok"]], s, concurrency=1, progress=False))
    assert all(body["return_spec_tokens_details"] is True and body["stream"] for body in server.seen)
    by = {r.index: r for r in records}
    assert by[0].ok and by[0].text == "Hello" and by[0].spec == {"spec_verify_ct": 2}
    assert by[1].ok and by[1].spec is None


def test_multi_turn_sends_the_models_own_first_answer(server):
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="m", max_tokens=5, temperature=0.0, seed=0, thinking=False, timeout_s=5.0)
    records, _ = asyncio.run(run_requests(url, [["first", "second"]], s, concurrency=1, progress=False))
    assert [r.turn for r in records] == [0, 1]
    assert server.seen[-1]["messages"] == [{"role": "user", "content": "first"},
                                           {"role": "assistant", "content": "Hello"},
                                           {"role": "user", "content": "second"}]


def test_connection_refused_is_an_error_not_a_crash():
    s = ChatSettings(model="m", max_tokens=5, temperature=0.0, seed=0, thinking=False, timeout_s=2.0)
    records, _ = asyncio.run(run_requests("http://127.0.0.1:9", [["a"], ["b"]], s, concurrency=2, progress=False))
    assert all(not r.ok and "Connect" in r.error for r in records)


def test_per_request_spec_figures_ride_on_the_usage_chunk_and_ignore_eos_is_sent_only_when_set(server):
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="m", max_tokens=5, temperature=0.0, seed=0, thinking=False, timeout_s=5.0,
                     spec_field=("metrics", "speculative_decoding"))
    records, _ = asyncio.run(run_requests(url, [["vllmspec"], ["ok"]], s, concurrency=1, progress=False))
    assert records[0].ok and records[0].spec == SPEC and records[0].completion_tokens == 2
    assert records[1].ok and records[1].spec is None
    assert all("ignore_eos" not in body for body in server.seen)
    s.ignore_eos = True
    asyncio.run(run_requests(url, [["ok"]], s, concurrency=1, progress=False))
    assert server.seen[-1]["ignore_eos"] is True


def test_per_chunk_counts_come_from_the_cumulative_usage_and_a_token_without_text_is_a_chunk(server):
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="m", max_tokens=5, temperature=0.0, seed=0, thinking=False, timeout_s=5.0)
    [r], _ = asyncio.run(run_requests(url, [["counted"]], s, concurrency=1, progress=False))
    assert r.ok and r.text == "Hello" and r.completion_tokens == 5
    assert r.chunk_tokens == [1, 3, 1] and len(r.chunk_t_s) == 3 and len(r.itl_s) == 1
    assert r.chunk_t_s == sorted(r.chunk_t_s) and r.chunk_t_s[0] == pytest.approx(r.ttft_s, abs=1e-3)


def test_a_real_sglang_0517_dflash_stream_counts_its_chunks_and_carries_no_spec_stats(server):
    """0.5.17 was asked for return_spec_tokens_details and sent none: the stats are not in its chat stream."""
    url = f"http://127.0.0.1:{server.server_port}"
    s = ChatSettings(model="tiny", max_tokens=24, temperature=0.0, seed=0, thinking=False, timeout_s=5.0,
                     spec_field=("sglext", "spec_tokens_details"))
    [r], _ = asyncio.run(run_requests(url, [["sglang0517"]], s, concurrency=1, progress=False))
    assert r.ok and r.finish_reason == "length" and r.completion_tokens == 24 and r.spec is None
    assert r.text.startswith("\n1 + 1 = 2.")
    # per-chunk usage on every content chunk; the first chunk holds the prefill's token and the first verify step's
    assert sum(r.chunk_tokens) == 24 and r.chunk_tokens[0] == 6 and all(n >= 1 for n in r.chunk_tokens)

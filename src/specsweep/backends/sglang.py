"""SGLang: one `python -m sglang.launch_server` per server cell, run by the Python of SGLang's own environment
(`server.python`: `pip install sglang` pins its own CUDA torch, so it never shares the orchestrator's venv).

SGLang has no accepted/drafted counters to take deltas of, so a cell's acceptance is summed over its own
requests: each asks for `return_spec_tokens_details` and SGLang answers with `sglext.spec_tokens_details`.
Every flag, path and response shape here was checked against SGLang 0.5.23's source (docs/backends.md#sglang).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .. import client, metrics, promstats
from ..bench_cell import Measurement
from ..cells import Grid
from ..errors import ServerError
from ..server import Server, ServerSession

TESTED_VERSION = "0.5.23"
SPEC_SOURCE = "per-request sums (SGLang has no counters)"
# The request field and where the answer sits: srt/entrypoints/openai/protocol.py (ChatCompletionRequest,
# SglExt, SpecTokensDetails); in a stream, its own chunk with `choices: []` after the finish_reason chunk and
# before the usage chunk (serving_chat.py, _generate_chat_stream).
SPEC_REQUEST = {"return_spec_tokens_details": True}
SPEC_FIELD = ("sglext", "spec_tokens_details")
# Incremented by each finished request's verify steps (srt/observability/metrics_collector.py): a cross-check
# of the per-request sums, not their source.
VERIFY_CALLS = "sglang:spec_verify_calls_total"
# pair.speculative_extra keys this backend passes as `--speculative-<key>` (srt/arg_groups/fields/spec.py);
# the draft's attention backends SGLang takes for DFLASH (srt/arg_groups/choices.py).
SPECULATIVE_EXTRA = ("draft_attention_backend", "draft_window_size")
DRAFT_ATTENTION = ("flashinfer", "fa3", "fa4", "triton", "trtllm_mha")
# What /server_info reports as resolved (ServerArgs.resolved_dict, flat), recorded with every bench cell.
RESOLVED = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_draft_attention_backend",
            "attention_backend", "max_running_requests")


def server_python(run: dict) -> str:
    """The Python of SGLang's environment, as server.python names it (a path, or a name on PATH)."""
    python = run.get("python")
    if not python:
        raise ServerError("server.python is not set: SGLang runs in its own environment; set server.python to "
                          "that environment's Python, e.g. server.python=/opt/sglang/bin/python")
    found = shutil.which(python) or python
    if not Path(found).exists():
        raise ServerError(f"server.python {python!r} does not exist: point it at the Python of the environment "
                          "where SGLang is installed")
    return found


# Finds the package without importing it: sglang/__init__.py loads transformers and more. srt/ and
# srt/speculative/ are namespace packages, so the worker module is looked for as a file.
PROBE = r"""
import importlib.metadata as m, importlib.util as u, json, os, sys
try: version = m.version("sglang")
except m.PackageNotFoundError: version = None
spec = u.find_spec("sglang")
roots = list(spec.submodule_search_locations or []) if spec else []
has = lambda *rel: any(os.path.isfile(os.path.join(r, *rel)) for r in roots)
print(json.dumps({"executable": sys.executable, "sglang": version, "launch_server": has("launch_server.py"),
                  "dflash_module": has("srt", "speculative", "dflash_worker_v2.py")}))
"""


def probe(python: str) -> dict:
    """What SGLang's Python holds: its real executable, SGLang's version, its launcher and DFLASH worker."""
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"executable": None, "error": f"could not run {python}"}


def build_argv(python: str, spec: dict, host: str, port: int, name: str) -> list[str]:
    """The launch argv; config.SPEC_FLAGS["sglang"] refuses each of these flags in server.extra_args.

    DFLASH's `--speculative-num-draft-tokens` is its block size, the verify window: the anchor token plus
    the drafts (dflash_worker_v2.py; SGLang counts proposed drafts as verify steps x (it - 1)), so our K is
    it minus 1, as on vLLM and the local engine. `--speculative-dflash-block-size` is an alias that must
    equal it (speculative_hook.py, _handle_dflash), so it is not passed.
    """
    s, k = spec["server"], spec["kernel"]
    if k["compilation_level"] is not None:
        raise ServerError(f"kernel.compilation_level={k['compilation_level']} is vLLM's compilation mode, which "
                          "SGLang does not take: use kernel=sglang_fa3")
    argv = [python, "-m", "sglang.launch_server", "--model-path", spec["target"], "--served-model-name", name,
            "--host", host, "--port", str(port), "--device", s["device"], "--dtype", s["dtype"],
            "--context-length", str(s["max_model_len"]), "--enable-metrics"]
    if spec["tokenizer"] != spec["target"]:
        argv += ["--tokenizer-path", spec["tokenizer"]]
    if s["tensor_parallel_size"] != 1:
        argv += ["--tp-size", str(s["tensor_parallel_size"])]
    if s["data_parallel_size"] != 1:
        argv += ["--dp-size", str(s["data_parallel_size"])]
    if s["gpu_memory_utilization"] is not None:
        argv += ["--mem-fraction-static", str(s["gpu_memory_utilization"])]
    if k["attention_backend"]:
        argv += ["--attention-backend", k["attention_backend"]]
    if not k["cuda_graphs"]:      # 0.5.23 spells it so; `--disable-cuda-graph` is deprecated (server_args.py)
        argv += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    if spec["method"] == "dflash":
        argv += ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", spec["drafter"],
                 "--speculative-num-draft-tokens", str(spec["num_speculative_tokens"] + 1)]
        extra = spec.get("speculative_extra") or {}
        unknown = sorted(set(extra) - set(SPECULATIVE_EXTRA))
        if unknown:
            raise ServerError(f"pair.speculative_extra keys {unknown} are not SGLang DFLASH options: it takes "
                              f"{list(SPECULATIVE_EXTRA)}, each passed as --speculative-<key>")
        for key, value in extra.items():
            argv += [f"--speculative-{key.replace('_', '-')}", str(value)]
    elif spec["method"] != "none":
        raise ServerError(f"pair.method={spec['method']}: the sglang backend runs DFlash drafters (and baselines) "
                          "only; use server=vllm_gpu for it")
    return argv + [str(a) for a in s["extra_args"]]


def server_for(grid: Grid, sid: str, log_dir: Path | None = None) -> Server:
    """The SGLang server of a server cell, not started yet."""
    cell = grid.servers[sid]
    python = server_python(cell.run)
    name = cell.served_name
    return Server(lambda port: build_argv(python, cell.spec, cell.run["host"], port, name), cell.run,
                  log_dir or grid.server_dir(sid) / "logs", env=cell.spec["server"]["env"], gpus_needed=cell.gpus,
                  served_name=name, kind="SGLang", key_config_flag="--config", record={"python": python})


def acceptance(rows: list[dict], k: int) -> dict:
    """The cell's acceptance from its finished requests' own stats, in vLLM's figures (promstats.acceptance).

    Drafts are verify steps, draft tokens the drafts proposed (steps x K), accepted the correct drafts;
    per-position acceptance and the acceptance-length histogram (index i: steps that accepted i drafts, so
    length i + 1, as the local engine's) come from `spec_correct_drafts_histogram`.
    """
    sums, hist, without = promstats.SpecCounters(), [0] * (k + 1), 0
    for r in rows:
        if not r["ok"]:
            continue
        s = r.get("spec")
        if not s:
            without += r["completion_tokens"] > 1        # a second token comes from a verify step
            continue
        sums.drafts += s["spec_verify_ct"]
        sums.draft_tokens += s["spec_num_proposed_drafts"]
        sums.accepted += s["spec_num_correct_drafts"]
        for i, steps in enumerate(s["spec_correct_drafts_histogram"]):
            hist += [0] * (i + 1 - len(hist))
            hist[i] += steps
    sums.per_pos = {p: float(sum(hist[p + 1:])) for p in range(k)}
    spec = promstats.acceptance(sums) if sums.drafts else None
    if spec:
        spec["acceptance_length_histogram"] = hist
    return {"spec_decode": spec, "spec_decode_source": SPEC_SOURCE,
            "spec_request_sums": promstats.counters_dict(sums), "spec_requests_without_details": without}


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
                  warmup: int, k: int, progress: bool = True, desc: str = "requests") -> tuple[list[dict], dict]:
    """Warm up, send every prompt, sum the requests' acceptance; the verify-call counter's delta cross-checks it."""
    if warmup:
        await client.run_requests(url, prompts[:warmup], settings, concurrency, progress=False)
    before, error = await scrape_verify_calls(url, settings.model) if k else (None, None)
    records, wall = await client.run_requests(url, prompts, settings, concurrency, progress=progress, desc=desc)
    rows = [r.as_dict() for r in records]
    figures = metrics.request_figures(rows, wall)
    if not k:
        figures["spec_decode"] = None
        return rows, figures
    figures.update(acceptance(rows, k))
    after, error_after = await scrape_verify_calls(url, settings.model)
    figures["spec_verify_calls_delta"] = after - before if before is not None and after is not None else None
    if error or error_after:                 # only the cross-check is lost, not the figures
        figures["scrape_error"] = error or error_after
    return rows, figures


def resolved_settings(url: str, headers: dict) -> dict:
    """SGLang's version and the speculative settings it resolved, from /server_info (which its API key guards)."""
    try:
        info = httpx.get(f"{url}/server_info", headers=headers, timeout=30).raise_for_status().json()
    except (httpx.HTTPError, ValueError) as e:
        raise ServerError(f"{url}/server_info did not answer ({type(e).__name__}): is server.python's SGLang "
                          f"{TESTED_VERSION} or later?") from None
    return {"version": info.get("version"), **{key: info.get(key) for key in RESOLVED}}


class SglangSession(ServerSession):
    def __init__(self, srv: Server, spec: dict, run: dict):
        super().__init__(srv, run)
        self.k = spec["num_speculative_tokens"] if spec["method"] == "dflash" else 0
        self.resolved = resolved_settings(srv.url, srv.auth)
        block = self.resolved["speculative_num_draft_tokens"]
        if self.k and block != self.k + 1:
            raise ServerError(f"SGLang resolved speculative_num_draft_tokens={block}, not K + 1 = {self.k + 1}: "
                              f"the cell would record one block and run another; see {self.log_path}")

    def measure(self, prompts: list[list[str]], bench: dict, progress: bool, desc: str) -> Measurement:
        settings = client.settings_for(bench, self.srv.served_name, self.run["request_timeout_s"],
                                       extra_body=SPEC_REQUEST if self.k else None, spec_field=SPEC_FIELD,
                                       api_key=self.srv.api_key)
        rows, figures = asyncio.run(measure(self.srv.url, prompts, settings, bench["concurrency"], bench["warmup"],
                                            self.k, progress, desc))
        failure = None
        if not self.srv.alive():
            failure = "server died during the cell"
        elif self.k and figures["spec_requests_without_details"] and not figures["spec_decode"]:
            failure = ("no finished request carried sglext.spec_tokens_details, so the cell has no acceptance: "
                       f"is server.python's SGLang {TESTED_VERSION} or later?")
        figures.update(backend="sglang", sglang_version=self.resolved["version"], server_python=self.srv.info["python"],
                       sglang_resolved=self.resolved)
        return Measurement(rows, figures, failure)


@contextmanager
def open_session(grid: Grid, sid: str, progress: bool = True) -> Iterator[SglangSession]:
    cell = grid.servers[sid]
    t0 = time.monotonic()
    with server_for(grid, sid) as srv:
        session = SglangSession(srv, cell.spec, cell.run)
        print(f"[specsweep] {sid}: SGLang ready on {srv.url} in {time.monotonic() - t0:.0f} s "
              f"(SGLang {session.resolved['version']}, {srv.info['python']})", flush=True)
        yield session

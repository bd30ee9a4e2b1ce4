"""Capture what a real SGLang answers, as test data for the backend and its stand-in (tests/data/sglang0517_*).

    PYTHONPATH=/tmp/sgl python3 tests/fake_sglang/capture.py PAIR OUT [dflash] [base]

Starts SGLang (the Python running this script, whose PYTHONPATH holds SGLang) twice on 127.0.0.1 with the pair
in PAIR (target/, drafter/): a DFLASH server at block 8 and then a baseline, eager, Triton attention, bfloat16 (sgl_kernel's rmsnorm takes no float32),
as the tiny study runs them. From each it keeps, in OUT: /metrics before and after requests, the raw event
stream of one chat completion (with per-chunk usage and the request field 0.5.23 answers with per-request
stats), a non-streamed chat completion with return_meta_info, /generate's answer, /server_info and the log.
Standard library only; each server runs in its own process group, stopped by that group.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PAIR, OUT = Path(sys.argv[1]), Path(sys.argv[2])
PORT = 18123
URL = f"http://127.0.0.1:{PORT}"
MESSAGES = [{"role": "user", "content": "Count from one to ten, then say done."}]


def get(path: str) -> str:
    with urllib.request.urlopen(URL + path, timeout=30) as r:
        return r.read().decode()


def post(path: str, body: dict) -> str:
    req = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read().decode()


def serve(tag: str, extra: list[str]) -> None:
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(PAIR / "target"),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(PORT), "--device", "cuda",
            "--dtype", "bfloat16", "--context-length", "512", "--enable-metrics", "--attention-backend", "triton",
            "--sampling-backend", "pytorch", "--mm-feature-transport", "cpu", "--mem-fraction-static", "0.3",
            "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled", *extra]
    log = open(OUT / f"sglang0517_{tag}_log.txt", "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise SystemExit(f"{tag}: SGLang exited with {proc.returncode} (see its log)")
            try:
                if urllib.request.urlopen(URL + "/health", timeout=5).status == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            raise SystemExit(f"{tag}: not healthy after 300 s")
        print(f"{tag}: ready in {time.monotonic() - t0:.0f} s", flush=True)
        (OUT / f"sglang0517_{tag}_metrics_before.txt").write_text(get("/metrics"))
        body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 24, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                "return_spec_tokens_details": True}
        (OUT / f"sglang0517_{tag}_chat_stream.txt").write_text(post("/v1/chat/completions", body))
        body = {**body, "stream": False, "return_meta_info": True}
        body.pop("stream_options")
        (OUT / f"sglang0517_{tag}_chat_meta_info.json").write_text(post("/v1/chat/completions", body))
        gen = {"text": "Count from one to ten.", "sampling_params": {"max_new_tokens": 24, "temperature": 0}}
        (OUT / f"sglang0517_{tag}_generate.json").write_text(post("/generate", gen))
        time.sleep(1)
        (OUT / f"sglang0517_{tag}_metrics.txt").write_text(get("/metrics"))
        (OUT / f"sglang0517_{tag}_server_info.json").write_text(get("/server_info"))
        print(f"{tag}: captured", flush=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


OUT.mkdir(parents=True, exist_ok=True)
for tag, extra in (("dflash", ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                               str(PAIR / "drafter"), "--speculative-num-draft-tokens", "8"]),
                   ("base", [])):
    if sys.argv[3:] and tag not in sys.argv[3:]:      # optional: only the servers named after OUT
        continue
    try:
        serve(tag, extra)
    except (SystemExit, OSError) as e:
        print(f"{tag}: {e}", flush=True)

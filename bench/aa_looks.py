"""A/A studies through the looks' own rules (issue 54's Done-when): how often does a study of no true difference end
`faster` or `slower`?

Each simulated study is one comparison's repeat blocks (sequential.block_log_ratios' figure) with no true
difference, looked at as a group's job looks at it (run/looks.py): under `planned` at the plan of --max-repeats
(spending.comparison, the calibrated boundaries unless --boundaries t-nominal), under `every` after each repeat
(sequential.comparison); it stops at the first look where it is answered (decided and, with --precision, that
narrow), else at the budget, and its verdict is the rule's at that look. One call of the rule over a study's whole
budget gives the first look answered (each rule's running interval at look r reads only the first r blocks), a
second call over the blocks up to it the verdict there: the records Looks would have written.

Blocks (--blocks): `normal` (i.i.d., the rules' assumption; the gate), and stress cases reported, not gated:
`lognormal` (sigma 0.25, centred to mean 0), `ar1` (AR(1), 0.3), `offset` (a per-study instance offset, N(0,
0.25^2) in block-spread units, added to every block: a launch that differs, which an interval conditional on the
launch cannot see). Both rules are scale-invariant, so the spread is 1.

Seeds: --seed spawns one numpy SeedSequence child per chunk of 10,000 studies: a run is the same on any machine
with the same numpy. The calibration used seeds 54003-54040 (`python -m bench run calibrate_boundaries`); use others.

    nice -n 10 python -m bench run aa_looks -- --studies 1000000 --seed 20261206 --rule planned --out /tmp/aa.json
    python -m bench run aa_looks -- --studies 2000 --rule both     # a quick look
    python -m bench run aa_looks --smoke                           # 500 studies, both rules, nothing written
    python -m bench run aa_looks -- --rule planned --design 'hwang-shih-decani(-2):5,10,15,20,25'   # another design
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from bench import harness
from specsweep.verdicts import sequential, spending

CHUNK = 10_000
BLOCKS = ("normal", "lognormal", "ar1", "offset")
DECIDED = (sequential.stats.FASTER, sequential.stats.SLOWER)


def draw(rng: np.random.Generator, studies: int, n: int, kind: str) -> np.ndarray:
    """`studies` x `n` blocks with no true difference (module doc)."""
    z = rng.standard_normal((studies, n))
    if kind == "lognormal":
        return np.exp(0.25 * z) - math.exp(0.25 ** 2 / 2)
    if kind == "ar1":
        out = np.empty_like(z)
        out[:, 0] = z[:, 0] / math.sqrt(1 - 0.3 ** 2)       # stationary from the first block
        for t in range(1, n):
            out[:, t] = 0.3 * out[:, t - 1] + z[:, t]
        return out
    if kind == "offset":
        return z + 0.25 * rng.standard_normal((studies, 1))
    return z


def crossed(blocks: np.ndarray, looks: tuple[int, ...], boundaries: tuple[float, ...]) -> np.ndarray:
    """Per study (a row of blocks), whether some planned look's studentized mean |T_k| reaches its boundary: for a
    study of no true difference, whether some look's interval excludes the truth (vectorised; `study` under the
    planned rule ends `faster` or `slower` exactly when this holds and no earlier look answered it `equivalent`)."""
    t = np.stack([np.abs(blocks[:, :k].mean(1)) / (blocks[:, :k].std(1, ddof=1) / np.sqrt(k)) for k in looks], 1)
    return np.any(t >= np.asarray(boundaries), axis=1)


def study(blocks: np.ndarray, rule: str, max_repeats: int, precision: float | None, boundaries: str,
          spending_fn: str = spending.SPENDING, looks: tuple[int, ...] | None = None) -> dict:
    """One study's stop under a rule, as Looks takes it: the verdict, the repeat it stopped at, and whether some
    look's interval excluded the truth. `spending_fn` and `looks`: another design of planned looks (a group's
    recorded plan, or a candidate of bench/look_design.py), else the default plan of max_repeats."""
    b = [float(x) for x in blocks]
    if rule == "planned":
        def read(upto: int) -> dict:
            return spending.comparison(b[:upto], max_repeats, repeats=upto, precision=precision,
                                       calibration=boundaries, spending=spending_fn, looks=looks)
    else:
        def read(upto: int) -> dict:
            return sequential.comparison(b[:upto], max_repeats, repeats=upto, precision=precision)
    whole = read(max_repeats)
    at = whole["answered_at"] or max_repeats
    rec = whole if at == max_repeats else read(at)
    return {"verdict": rec["verdict"], "stop": at,
            "ever": whole["ci_low"] is not None and (whole["ci_low"] > 1 or whole["ci_high"] < 1)}


def wilson(x: int, n: int, z: float = 1.959964) -> list[float]:
    """The 95% Wilson interval of a share x / n."""
    centre = (x + z * z / 2) / (n + z * z)
    half = z * math.sqrt(x * (n - x) / n + z * z / 4) / (n + z * z)
    return [centre - half, centre + half]


def chunk(args: tuple) -> dict:
    seed, studies, rule, max_repeats, kind, precision, boundaries, design = args
    rng = np.random.Generator(np.random.PCG64(seed))
    blocks = draw(rng, studies, max_repeats, kind)
    out = {"studies": 0, "decided": 0, "equivalent": 0, "unresolved": 0, "stops": 0, "ever": 0}
    for row in blocks:
        tally(out, study(row, rule, max_repeats, precision, boundaries, *design))
    return out


def tally(out: dict, s: dict) -> None:
    """Count one study's ending (`study`) into `out`'s counters."""
    out["studies"] += 1
    out["decided"] += s["verdict"] in DECIDED
    out["equivalent"] += s["verdict"] == sequential.stats.EQUIVALENT
    out["unresolved"] += s["verdict"] == sequential.UNRESOLVED
    out["stops"] += s["stop"]
    out["ever"] += s["ever"]


def run(studies: int, seed: int, rule: str, max_repeats: int = 20, kind: str = "normal",
        precision: float | None = None, boundaries: str = spending.CALIBRATED, workers: int = 1,
        design: tuple[str, tuple[int, ...] | None] = (spending.SPENDING, None)) -> dict:
    """The share of `studies` A/A studies that end `faster` or `slower` (with its 95% Wilson interval), and how
    they ended."""
    children = np.random.SeedSequence(seed).spawn(math.ceil(studies / CHUNK))
    jobs = [(int(c.generate_state(1)[0]), min(CHUNK, studies - i * CHUNK), rule, max_repeats, kind, precision,
             boundaries, design) for i, c in enumerate(children)]
    start = time.monotonic()
    parts = harness.parallel_map(chunk, jobs, workers)
    total = {k: sum(p[k] for p in parts) for k in parts[0]}
    n, x = total["studies"], total["decided"]
    return {"rule": rule, "blocks": kind, "max_repeats": max_repeats, "precision": precision,
            "boundaries": boundaries if rule == "planned" else None, "seed": seed, "studies": n,
            "false_verdicts": x / n, "false_verdicts_ci": wilson(x, n),
            "equivalent": total["equivalent"] / n, "unresolved": total["unresolved"] / n,
            "mean_stop_repeat": total["stops"] / n, "budget_excludes_0": total["ever"] / n,
            "seconds": round(time.monotonic() - start, 1)}


def design_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """`SPENDING:LOOKS` -> (spending function, looks)."""
    fn, looks = text.rsplit(":", 1)
    spending.family(fn)
    return fn, tuple(int(x) for x in looks.split(","))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=20261206)
    ap.add_argument("--rule", choices=("planned", "every", "both"), default="both")
    ap.add_argument("--max-repeats", type=int, default=20)
    ap.add_argument("--blocks", choices=BLOCKS + ("all",), default="normal")
    ap.add_argument("--precision", type=float, default=None)
    ap.add_argument("--boundaries", choices=(spending.CALIBRATED, spending.NOMINAL_T), default=spending.CALIBRATED)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--design", type=design_arg, default=(spending.SPENDING, None),
                    help="planned looks of another design, SPENDING:LOOKS (hwang-shih-decani(-2):5,10,15,20,25; "
                         "bench/look_design.py's form); its last look is the budget")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="500 studies, both rules, nothing written")
    args = ap.parse_args(argv)
    if args.smoke:
        args.studies, args.rule, args.out = 500, "both", None
    if args.design[1]:
        args.max_repeats = args.design[1][-1]
    results = []
    for kind in BLOCKS if args.blocks == "all" else (args.blocks,):
        for rule in ("planned", "every") if args.rule == "both" else (args.rule,):
            r = run(args.studies, args.seed, rule, args.max_repeats, kind, args.precision, args.boundaries,
                    args.workers, args.design)
            if rule == "planned":
                r.update(spending=args.design[0], looks=list(args.design[1] or spending.plan(args.max_repeats)))
            results.append(r)
            lo, hi = r["false_verdicts_ci"]
            print(f"{rule:8s} {kind:9s} {r['studies']} studies: faster/slower {100 * r['false_verdicts']:.3f}% "
                  f"[{100 * lo:.3f}, {100 * hi:.3f}], equivalent {100 * r['equivalent']:.1f}%, mean stop "
                  f"{r['mean_stop_repeat']:.2f}, {r['seconds']} s", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "results": results}, indent=1) + "\n")
    else:
        print("nothing written")


if __name__ == "__main__":
    main()

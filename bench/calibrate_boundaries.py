"""Calibrate the planned looks' boundaries (issue 54 item 2; specsweep.verdicts.spending, module doc) and write
them to src/specsweep/verdicts/boundaries.json, the table `spending.t_boundaries` reads.

For each max_repeats in the range, the plan `spending.plan(max_repeats)` and its O'Brien-Fleming-type boundaries
of the studentized block means, from spending.STUDIES simulated studies of independent normal blocks, seeded
spending.CALIBRATION_SEED + max_repeats (a check of the rate must use other seeds: bench/aa_looks.py does).
Deterministic for a given numpy (PCG64's normals).

    nice -n 10 python -m bench run calibrate_boundaries         # 3..40, about a minute here
    python -m bench run calibrate_boundaries -- --upto 12 --out /tmp/b.json
    python -m bench run calibrate_boundaries --smoke   # max_repeats 10 and 20 on 20,000 studies, nothing written
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specsweep.verdicts import spending


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="lo", type=int, default=3)
    ap.add_argument("--upto", type=int, default=40)
    ap.add_argument("--studies", type=int, default=spending.STUDIES)
    ap.add_argument("--out", type=Path, default=spending.TABLE)
    ap.add_argument("--smoke", action="store_true", help="max_repeats 10 and 20, 20,000 studies, nothing written")
    args = ap.parse_args(argv)
    import numpy as np

    plans = {}
    for m in (10, 20) if args.smoke else range(args.lo, args.upto + 1):
        if args.smoke:
            args.studies = 20_000
        start = time.monotonic()
        looks = spending.plan(m)
        b = spending.calibrate(looks, studies=args.studies)
        plans[str(m)] = {"looks": list(looks), "boundaries": [round(x, 6) for x in b],
                         "seed": spending.CALIBRATION_SEED + m}
        print(f"max_repeats {m}: looks {looks} boundaries {[round(x, 3) for x in b]} "
              f"({time.monotonic() - start:.1f} s)", flush=True)
    if args.smoke:
        print("nothing written")
        return
    table = {"alpha": spending.ALPHA, "spending": spending.OBF, "studies": args.studies, "method": spending.CALIBRATED,
             "numpy": np.__version__, "script": "bench/calibrate_boundaries.py", "plans": plans}
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()

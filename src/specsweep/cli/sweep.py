"""`specsweep sweep`: compose a grid with Hydra and run it through the Snakemake DAG."""
from __future__ import annotations

import argparse
import os

from specsweep.cli.runs import override_runs, run_jobs
from specsweep.grid.config import compose_jobs


def add(sub) -> None:
    s = sub.add_parser("sweep", help="compose a grid with Hydra and run it through the Snakemake DAG")
    s.add_argument("-m", "--multirun", action="store_true", help="Hydra multirun: a=1,2 expands to two jobs")
    s.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    s.add_argument("-n", "--dry-run", action="store_true", help="list the cells still to run")
    s.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. sweep.num_speculative_tokens=3,7")
    s.add_argument("--also", action="append", default=[], metavar="OVERRIDES",
                   help="more cells: overrides on top of the main ones, whose jobs join the same grid")
    s.add_argument("--snakemake-args", nargs=argparse.REMAINDER, default=[], help="passed on to snakemake")
    s.set_defaults(fn=main)


def main(args) -> int:
    runs = override_runs(args)
    jobs = [job for ov in runs for job in compose_jobs(ov)]

    return run_jobs(jobs, args.cores, (["-n"] if args.dry_run else []) + args.snakemake_args,
                    f"{len(runs)} Hydra job(s)")

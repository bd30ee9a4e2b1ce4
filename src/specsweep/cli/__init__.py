"""`specsweep`: sweep (Hydra multirun into the Snakemake DAG), bench, cells, compare, tune, doctor, ingest.

One module a command: its `add(sub)` declares the command's arguments beside the `main(args)` that runs it. A new
command is a module with those two and one line in COMMANDS."""
from __future__ import annotations

import argparse
import sys

from specsweep.cli import bench, cells, compare, doctor, drafter, ingest, shape, sweep, trace, tune
from specsweep.cli.runs import expand_multirun, override_runs, run_jobs  # noqa: F401 - the grid's runs, for callers and tests
from specsweep.core.errors import SpecsweepError

COMMANDS = (sweep, cells, bench, ingest, compare, tune, doctor, trace, shape, drafter)   # in `specsweep --help`'s order


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specsweep", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in COMMANDS:
        command.add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except SpecsweepError as e:
        print(f"specsweep: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`specsweep cells`: list the grid's server and bench cells, and which are done."""
from __future__ import annotations

from specsweep.cli.runs import override_runs
from specsweep.grid.config import compose_jobs


def add(sub) -> None:
    c = sub.add_parser("cells", help="list the grid's server and bench cells, and which are done")
    c.add_argument("-m", "--multirun", action="store_true")
    c.add_argument("overrides", nargs="*")
    c.add_argument("--also", action="append", default=[], metavar="OVERRIDES")
    c.set_defaults(fn=main)


def main(args) -> int:
    from specsweep.grid import repeats
    from specsweep.grid.cells import expand

    grid = expand([job for ov in override_runs(args) for job in compose_jobs(ov)])
    for sid, cell in grid.servers.items():
        base = grid.baseline_of.get(sid)
        print(f"{cell.study}/{sid}  gpus={cell.gpus}" + (f"  baseline={base}" if base else ""))
        for bid in grid.benches[sid]:
            state = "done" if grid.metrics_path(sid, bid).exists() else \
                "not needed" if repeats.not_needed(grid, sid, bid) else "todo"     # sweep.repeats=auto
            print(f"    {state}  {bid}")
    return 0

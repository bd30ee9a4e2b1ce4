"""One server cell (or one round of it): open its backend once, run each unfinished bench cell on it, close it.

This is the only loop over bench cells; backends (backends/) only open a session and measure.
"""
from __future__ import annotations

import time
from pathlib import Path

from .backends import parts
from .bench_cell import run_bench_cell
from .cells import Grid
from .errors import CellError, ServerError, SpecsweepError
from .results import atomic_write_json


def run_server_cell(grid: Grid, sid: str, marker: str | Path, progress: bool = True,
                    rnd: int | None = None) -> None:
    """Run every unfinished bench cell of one server cell, or of its round `rnd` (grid.round_cells: with
    sweep.rounds > 1 each round is one job, one server launch), then write the job's marker."""
    pending = grid.pending(sid, rnd)
    failures: list[str] = []
    if pending:
        try:
            with parts.session(grid.servers[sid].spec["server"]["backend"]).open_session(grid, sid, progress) as session:
                for bid in pending:
                    try:
                        run_bench_cell(grid, sid, bid, session, progress)
                        print(f"[specsweep] {sid}/{bid}: done", flush=True)
                    except (SpecsweepError, OSError, ValueError) as e:
                        failures.append(f"{e}" if isinstance(e, CellError) else f"bench cell {sid}/{bid}: {e}")
                        print(f"[specsweep] {sid}/{bid}: FAILED: {e}", flush=True)
                    if not session.alive():
                        break
        except ServerError as e:
            raise CellError(f"server cell {sid}: {e}") from None
    missing = grid.pending(sid, rnd)
    if missing:
        first = failures[0].splitlines()[0] if failures else "the server stopped before they ran"
        where = f"server cell {sid}" if rnd is None else f"server cell {sid} round {rnd}"
        raise CellError(f"{where}: {len(missing)} bench cell(s) not finished ({', '.join(missing)}); "
                        f"first: {first}\n" + "\n".join(failures))
    Path(marker).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"server_cell": sid, "finished_at": time.time()})

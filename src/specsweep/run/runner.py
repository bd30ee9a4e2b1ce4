"""One group's job: bring its server cells up (residency.py), let them take turns over their unfinished bench cells
(schedule.turns), bring them down.

This is the only loop over bench cells; backends (backends/) only open a session and measure. A member that dies, or
never comes up, fails its own unfinished cells; the others go on, and the job then fails naming what is missing,
so a rerun runs only that. With sweep.repeats=auto the group looks at its comparisons before each repeat and stops
once they are answered (looks.py), the repeats left recorded as not needed.
"""
from __future__ import annotations

import contextvars
import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from specsweep.core import parts
from specsweep.core.claims import take_gpus
from specsweep.core.errors import CellError, ServerError, SpecsweepError
from specsweep.core.progress import say
from specsweep.core.results import atomic_write_json
from specsweep.grid import schedule
from specsweep.grid.cells import Grid
from specsweep.plan import residency
from specsweep.run import launch_record, looks as looking
from specsweep.run.bench_cell import run_bench_cell
from specsweep.run.server import SideBySide


class Members:
    """The open sessions of one round of a group, each kept between its turns as its Launch says (paused, asleep,
    or stopped and relaunched at its next turn)."""

    def __init__(self, grid: Grid, launches: dict[str, residency.Launch], progress: bool):
        self.grid, self.launches, self.progress = grid, launches, progress
        self.sessions: dict[str, object] = {}
        self.broken: dict[str, str] = {}        # member -> why it has no session
        # co-resident members that took a turn since their start (a relaunched or woken one warms up every turn)
        self.warm: set[str] = set()

    def __enter__(self) -> "Members":
        return self

    def __exit__(self, *exc) -> None:
        """Stop every member still up, the last started first; one that fails to stop does not keep the others up."""
        errors = []
        for sid in reversed(list(self.sessions)):
            cm, _ = self.sessions.pop(sid)
            try:
                cm.__exit__(None, None, None)
            except Exception as e:      # noqa: BLE001 - re-raised below, once every member is down
                errors.append(e)
        if errors and exc[0] is None:
            raise errors[0]

    def _open(self, sid: str):
        cm = parts.session(self.grid.servers[sid].spec["server"]["backend"]).open_session(
            self.grid, sid, self.progress, how=self.launches[sid])
        return cm, cm.__enter__()

    def start(self, sids: list[str]) -> None:
        """Bring these members up, `start_at_once` of them side by side (residency.start_at_once: on a GPU only where
        every member is vLLM with its KV cache fixed, so that no member's memory profiling counts another's loading;
        each launch records the width and its own ready_s). One that fails is broken (its cells fail), the others go
        on. Each is idle (paused, asleep) from its start to its turn."""
        sids = [sid for sid in sids if self.launches[sid].residency != "relaunch"]
        width = max((self.launches[sid].start_at_once for sid in sids), default=1)
        if width == 1:
            for sid in sids:
                self._bring_up(sid)
            return
        # ThreadPoolExecutor's exit joins the threads; SideBySide's, first, tells those still starting to give up
        with ThreadPoolExecutor(width, thread_name_prefix="start") as pool, SideBySide():
            futures = [pool.submit(contextvars.copy_context().run, self._bring_up, sid) for sid in sids]
            # in short waits: a signal that reached another thread runs its handler here only between them
            while wait(futures, timeout=0.25).not_done:
                pass
            for future in futures:
                future.result()

    def _bring_up(self, sid: str) -> None:
        self._keep(sid, self._try_open(sid))
        self.end_turn(sid)

    def _try_open(self, sid: str):
        try:
            return self._open(sid)
        except ServerError as e:
            return e

    def _keep(self, sid: str, got) -> None:
        if isinstance(got, ServerError):
            self.broken[sid] = f"server cell {sid}: {got}"
            return
        self.sessions[sid] = got

    def take_turn(self, sid: str):
        """The member's session, ready for traffic (started, resumed or woken); None where it is broken."""
        if sid in self.broken:
            return None
        if sid not in self.sessions:           # relaunch: one launch per turn
            self._keep(sid, self._try_open(sid))
            return self.take_turn(sid) if sid in self.sessions else None
        session = self.sessions[sid][1]
        if self.launches[sid].residency == "sleep":
            session.wake()
        elif self.launches[sid].pause_idle and hasattr(session, "resume"):    # an in-process engine has no server
            session.resume()
        return session

    def end_turn(self, sid: str) -> None:
        if sid not in self.sessions:
            return
        cm, session = self.sessions[sid]
        if not session.alive():
            return
        launch = self.launches[sid]
        if launch.residency == "relaunch":
            del self.sessions[sid]
            cm.__exit__(None, None, None)
        elif launch.residency == "sleep":
            session.sleep()
        elif launch.pause_idle and hasattr(session, "pause"):
            session.pause()


# What else a member's own server can serve once its cells are done: (server cell, bench ids) to run on it, e.g. the
# diagnosis's counterfactual cells that need no server of their own (counterfactuals.on_own_server)
AlsoServed = Callable[[Grid, str], list[tuple[str, list[str]]]]


def run_group(grid: Grid, lead: str, marker: str | Path, progress: bool = True, also: AlsoServed | None = None) -> None:
    """Run every unfinished bench cell of a group (schedule.group), and what `also` names for its members, then write
    the job's marker."""
    run_cells(grid, schedule.group(grid, lead), marker, progress, also)


def run_server_cell(grid: Grid, sid: str, marker: str | Path, progress: bool = True) -> None:
    """One server cell on its own (a diagnosis's counterfactual cell)."""
    run_cells(grid, [sid], marker, progress)


def run_cells(grid: Grid, members: list[str], marker: str | Path, progress: bool = True,
              also: AlsoServed | None = None) -> None:
    failures: list[str] = []
    turns = schedule.turns(grid, members)
    if compared := looking.setting_comparisons(grid, members):
        launch_record.pin(grid, members, compared)   # the launch SD its verdicts carry (sweep.launch_sd), pinned once
    looks = looking.Looks.of(grid, members)       # sweep.repeats=auto; None for a number of repeats
    if turns and looks and looks.stop_before(_repeat(grid, turns[0])):    # a rerun: answered before it starts
        turns = []
    elif turns and looks and looks.dropped:     # a rerun: the looks replayed stopped a setting or member
        looks.dropped = False
        turns = schedule.turns(grid, members)
    if turns:
        repeats = 1 + max(int(b.spec["repeat"]) for s in members for b in grid.benches[s].values())
        gpus = max(grid.servers[s].gpus for s in members)
        gpu_ids, claims = take_gpus(gpus) if gpus else ([], [])
        try:
            for rnd, block in itertools.groupby(turns, key=lambda t: t[0]):
                block = list(block)
                up = list(dict.fromkeys(sid for _, sid, _ in block))
                launches = residency.plan(grid, up, gpu_ids)
                block = residency.launch_turns(block, launches)
                note = next((launch.note for launch in launches.values() if launch.note), "")
                if note:
                    print(f"[specsweep] {note}", flush=True)
                with Members(grid, launches, progress) as group:
                    group.start(up)
                    taken: set[tuple[str, str]] = set()
                    while block:
                        if looks and looks.stop_before(_repeat(grid, block[0])):
                            break
                        if looks and looks.dropped:     # a setting or member stopped: the turns left, rotated anew
                            looks.dropped = False
                            block = _turns_left(grid, members, launches, rnd, taken)
                            continue
                        _, sid, bids = block.pop(0)
                        taken |= {(sid, b) for b in bids}
                        if looks:
                            looks.turn_starts()
                        failures += _turn(grid, group, sid, bids, launches[sid], rnd, progress)
                        rep = _repeat(grid, (rnd, sid, bids))
                        if not looks and launches[sid].residency != "relaunch" and \
                                (not block or _repeat(grid, block[0]) != rep):
                            say(f"[specsweep] group {members[0]}: repeat {rep + 1} of {repeats} done "
                                f"({len(failures)} failure(s) so far)")
                    if also and rnd == turns[-1][0]:
                        _also_served(grid, group, up, launches, rnd, progress, also)
            if looks:
                looks.finish()
        finally:
            for claim in claims:
                claim.release()
    missing = [f"{s}/{b}" for s in members for b in schedule.pending(grid, s)]
    if missing:
        first = failures[0].splitlines()[0] if failures else "the server stopped before they ran"
        where = f"server cell {members[0]}" if len(members) == 1 else f"group {members[0]}"
        raise CellError(f"{where}: {len(missing)} bench cell(s) not finished ({', '.join(missing)}); "
                        f"first: {first}\n" + "\n".join(dict.fromkeys(failures)))
    Path(marker).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"server_cells": members, "finished_at": time.time()})


def _turns_left(grid: Grid, members: list[str], launches: dict[str, residency.Launch], rnd: int,
               taken: set[tuple[str, str]]) -> list[tuple[int, str, list[str]]]:
    """The round's turns not yet taken, as the schedule orders them now (an `auto` group's looks may have recorded
    cells not needed: schedule.turns rotates the rest among the members still needed)."""
    out = []
    for r, sid, bids in schedule.turns(grid, [m for m in members if m in launches]):
        todo = [b for b in bids if (sid, b) not in taken]
        out += [(r, sid, todo)] if r == rnd and todo else []
    return residency.launch_turns(out, launches)


def _repeat(grid: Grid, turn: tuple[int, str, list[str]]) -> int:
    """The repeat a co-resident turn runs (schedule.turns: one repeat of one member)."""
    return int(grid.benches[turn[1]][turn[2][0]].spec["repeat"])


def _also_served(grid: Grid, group: Members, up: list[str], launches: dict[str, residency.Launch], rnd: int,
                 progress: bool, also: AlsoServed) -> None:
    """What `also` names for each member (a diagnosis's counterfactual cells that need no server of their own), run
    on the member's server before the group's servers stop, so that no later job launches it again. One that fails
    is left to that job; a relaunched member is left to it too (serving it here would be a launch as well)."""
    for sid in up:
        if launches[sid].residency == "relaunch" or sid in group.broken:
            continue
        for cell, bids in also(grid, sid):
            print(f"[specsweep] {sid}: {cell} runs on its server", flush=True)
            _turn(grid, group, sid, bids, launches[sid], rnd, progress, cell=cell)


def _turn(grid: Grid, group: Members, sid: str, bids: list[str], launch: residency.Launch, rnd: int,
          progress: bool, cell: str | None = None) -> list[str]:
    """One member's turn: its bench cells of one repeat (co-resident) or one round (relaunch); `cell`: the server
    cell whose bench cells these are, where it is not the member (a counterfactual cell its server serves)."""
    session = group.take_turn(sid)
    if session is None:
        reason = group.broken.get(sid) or f"server cell {sid}: its server is gone"
        for bid in bids:
            print(f"[specsweep] {sid}/{bid}: FAILED: {reason.splitlines()[0]}", flush=True)
        return [reason]
    failures = []
    context = {**launch.facts(), "round": rnd, **({"served_by": sid} if cell else {})}
    try:
        for bid in bids:
            try:
                run_bench_cell(grid, cell or sid, bid, session, progress, context, warm=sid in group.warm)
                if launch.residency == "coresident":     # it stays up, warm, until the job ends
                    group.warm.add(sid)
                print(f"[specsweep] {cell or sid}/{bid}: done", flush=True)
            except (SpecsweepError, OSError, ValueError) as e:
                failures.append(f"{e}" if isinstance(e, CellError) else f"bench cell {cell or sid}/{bid}: {e}")
                print(f"[specsweep] {cell or sid}/{bid}: FAILED: {e}", flush=True)
            if not session.alive():
                dead = session.death(f"its server died during bench cell {bid}") if hasattr(session, "death") else None
                group.broken[sid] = f"server cell {sid}: {dead or f'its server died during bench cell {bid}'}"
                break
    finally:
        group.end_turn(sid)
    return failures

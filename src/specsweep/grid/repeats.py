"""How many repeats a study runs: `sweep.repeats`, a number, or `auto` with a budget (`sweep.max_repeats`,
`sweep.max_minutes`, `sweep.equivalence`) that a group's job spends repeat by repeat until its comparisons are
answered (looks.py; docs/methods.md#sweeprepeats-auto-in-a-groups-job).

With `auto` the grid holds the bench cells of repeats 0 .. max_repeats - 1, with the ids a fixed study of as many
repeats gives them; those a group did not need are recorded so (a not-needed record in the bench cell's folder,
layout.NOT_NEEDED, keyed on the budget), and count as done for the DAG (done_path) and the schedule
(schedule.pending) while the budget they were written under is the study's: a rerun with a larger budget sees
them as to run, and its group goes on where it stopped.
"""
from __future__ import annotations

from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.results import read_json
from specsweep.verdicts.sequential import EVERY
from specsweep.verdicts.spending import PLANNED
from specsweep.verdicts.stats import EQUIVALENCE

AUTO = "auto"
MAX_REPEATS = 20        # auto's default budget (issue 54: four planned looks, 6, 10, 14, 20)
# sweep.looks: spending.py's planned looks, or sequential.py's after every repeat (each rule names itself)


def is_auto(sweep: dict) -> bool:
    return sweep.get("repeats") == AUTO


def count(sweep: dict) -> int:
    """The repeats the grid composes: sweep.repeats, or with `auto` its budget, sweep.max_repeats."""
    return int(sweep.get("max_repeats") or MAX_REPEATS) if is_auto(sweep) else int(sweep.get("repeats", 1))


def rounds(sweep: dict) -> int:
    """The rounds a job's sweep runs its server cells in: sweep.rounds, at most one round per repeat."""
    return min(int(sweep.get("rounds", 1)), count(sweep))


def equivalence(sweep: dict) -> float:
    """sweep.equivalence: the margin inside which a speedup's interval reads `equivalent` (stats.verdict)."""
    return float(sweep.get("equivalence") or EQUIVALENCE)


def precision(sweep: dict) -> float | None:
    """sweep.precision: how narrow an `auto` comparison's interval must be to be answered, as a relative width (0.02:
    the speedup's hi / lo at most 1.02); None (the default): any interval that decides its verdict."""
    got = sweep.get("precision")
    return None if got is None else float(got)


def looks(sweep: dict) -> str:
    """sweep.looks: when an `auto` group looks, `planned` (a schedule fixed by max_repeats, alpha spent over it:
    spending.py) or `every` repeat (the confidence sequence: sequential.py)."""
    return sweep.get("looks") or PLANNED


def budget(sweep: dict) -> dict | None:
    """What a not-needed record is keyed on: the budget of an `auto` study, with its look rule where it is
    `planned` (an `every` budget reads as before the rule was a choice) and its precision where it asks for one
    (a study without reads as before precision was a choice); None for a fixed one."""
    if not is_auto(sweep):
        return None
    out = {"max_repeats": count(sweep), "max_minutes": sweep.get("max_minutes"), "equivalence": equivalence(sweep)}
    out = out if looks(sweep) == EVERY else {**out, "looks": PLANNED}
    return out if precision(sweep) is None else {**out, "precision": precision(sweep)}


def check(sweep: dict) -> None:
    """The combinations refused, each in one line."""
    if is_auto(sweep) and int(sweep.get("rounds", 1)) > 1:
        raise ConfigError(f"config: sweep.repeats=auto looks after every repeat of one launch of the group, so "
                          f"sweep.rounds must be 1 (got {sweep['rounds']}): drop sweep.rounds, or give a number of "
                          "repeats (sweep=default: 10, the design before auto)")
    if is_auto(sweep) and sweep.get("residency") == "relaunch":
        raise ConfigError("config: sweep.repeats=auto looks after every repeat, but sweep.residency=relaunch runs a "
                          "round's repeats in one launch per member: use coresident or sleep, or a number of repeats "
                          "(sweep=default: 10, the design before auto)")
    if sweep.get("aa") and not sweep.get("baseline", True):
        raise ConfigError("config: sweep.aa=true compares a second baseline server with the baseline, but "
                          "sweep.baseline=false has none: set sweep.baseline=true, or drop sweep.aa")


def record_path(grid, sid: str, bid: str) -> Path:
    return grid.bench_dir(sid, bid) / layout.NOT_NEEDED


def not_needed(grid, sid: str, bid: str) -> dict | None:
    """The bench cell's not-needed record, where it was written under the study's budget as it is now; else None
    (none, or a smaller budget's: the cell is to run)."""
    path = record_path(grid, sid, bid)
    want = budget(grid.configs[sid]["sweep"])
    if want is None or not path.exists():
        return None
    record = read_json(path)
    return record if record.get("budget") == want else None


def done_path(grid, sid: str, bid: str) -> Path:
    """The file that says a bench cell is done, for the DAG: its metrics.json, or its not-needed record."""
    return record_path(grid, sid, bid) if not_needed(grid, sid, bid) else grid.metrics_path(sid, bid)

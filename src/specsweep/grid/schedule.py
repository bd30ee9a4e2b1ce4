"""The schedule of a study, pure over its grid: which server cells form a group (a baseline and its speculative
cells, run in one job), the rounds (launches) a group's repeats are spread over, the turns its members take, the
blocks of time the paired statistics resample, and what is still pending. Never part of an id.

The Snakefile, `study`, the looks and the diagnosis read it without the planner (`plan.residency`, which decides how
the members share the machine)."""
from __future__ import annotations

from pathlib import Path

from specsweep.core import layout
from specsweep.grid import repeats
from specsweep.grid.cells import MIN_BLOCKS, Grid, stable_hash


def setting(bench: dict) -> tuple:
    """A bench spec's setting, what its repeats share and what a summary row, a comparison and a diagnosis group
    by: (dataset, thinking, concurrency, (max_tokens, prompt_length), ignore_eos), prompt_length None for the
    dataset's own prompts; ignore_eos apart, since a set-acceptance study's baseline runs both (cells.py). The one
    spelling of the bench-cell grouping."""
    return (bench["dataset"]["name"], bench["thinking"], bench["concurrency"], lengths_of(bench),
            bool(bench.get("ignore_eos", False)))


def lengths_of(bench: dict) -> tuple:
    """A bench spec's length axes: (max_tokens, prompt_length), prompt_length None for the dataset's own prompts."""
    return (int(bench["max_tokens"]), bench.get("prompt_length"))


def round_of_repeat(repeat: int, rounds: int, repeats: int) -> int:
    """Repeat r of R rounds over n repeats runs in round r * R // n, so each round holds a contiguous block of
    repeats (10 repeats in 3 rounds: 0-3, 4-6, 7-9)."""
    return repeat * rounds // repeats


def block(sweep: dict, repeat: int) -> int | None:
    """The stretch of time a bench cell (of a group run under `sweep`, at `repeat`) ran in together with its group's
    other members, which the paired CI resamples as one (stats._cluster_bootstrap), or None where there is no such
    stretch to resample: co-resident members take turns repeat by repeat, so repeat r of each ran back to back
    (with at least MIN_BLOCKS repeats; fewer give the draw too few outcomes); relaunched ones share a round (with 2
    or more)."""
    count = repeats.count(sweep)
    if sweep.get("residency", "coresident") == "relaunch":
        rounds = repeats.rounds(sweep)
        return round_of_repeat(repeat, rounds, count) if rounds > 1 else None
    return repeat if count >= MIN_BLOCKS else None


def block_of(grid: Grid, sid: str, bid: str) -> int | None:
    """A bench cell's block (block)."""
    return block(grid.configs[sid]["sweep"], int(grid.benches[sid][bid].spec["repeat"]))


def group_of(grid: Grid, sid: str) -> str:
    """The lead of the server cell's group, the cells compared with each other and so run in one job: a baseline
    and its speculative cells (lead: the baseline). A cell without a baseline (sweep.baseline=false), and a
    diagnosis's counterfactual cell, is a group of its own, so such cells still run side by side on disjoint GPUs."""
    return grid.baseline_of.get(sid, sid)


def group(grid: Grid, lead: str) -> list[str]:
    """A group's server cells, the lead first, then grid order."""
    return [lead] + [s for s in grid.servers if grid.baseline_of.get(s) == lead]


def leads(grid: Grid) -> list[str]:
    return [s for s in grid.servers if group_of(grid, s) == s]


def group_gpus(grid: Grid, lead: str) -> int:
    """The GPUs a group's job holds: co-resident members share their GPUs (the most any member needs)."""
    return max(grid.servers[s].gpus for s in group(grid, lead))


def rounds(grid: Grid, sid: str) -> int:
    """How many launches of its group the server cell runs in (sweep.rounds); each holds a contiguous block of its
    repeats (round_of)."""
    return repeats.rounds(grid.configs.get(sid, {}).get("sweep", {}))


def round_of(grid: Grid, sid: str, bid: str) -> int:
    """The round a bench cell runs in (cells.round_of_repeat)."""
    return round_of_repeat(int(grid.benches[sid][bid].spec["repeat"]), rounds(grid, sid),
                           repeats.count(grid.configs[sid]["sweep"]))


def round_cells(grid: Grid, sid: str, rnd: int | None) -> list[str]:
    """The bench cells of one round of a server cell; rnd None: all of them."""
    return [bid for bid in grid.benches[sid] if rnd is None or round_of(grid, sid, bid) == rnd]


def _rotated(items: list, by: int) -> list:
    by %= len(items)
    return items[by:] + items[:by]


def turns(grid: Grid, members: list[str]) -> list[tuple[int, str, list[str]]]:
    """The (round, server cell, bench cells) turns a group's job takes, in order, unfinished cells only. Round by
    round; within a round, co-resident members (`coresident`, `sleep`) take turns repeat by repeat, in an order that
    rotates with the repeat (baseline, K_a, K_b; K_a, K_b, baseline; ...), so that a load that shifts during the
    round falls on every member alike; `relaunch` members take one turn a round, all of that round's repeats in one
    launch, in an order that rotates with the round."""
    out: list[tuple[int, str, list[str]]] = []
    repeat = {s: {b: int(c.spec["repeat"]) for b, c in grid.benches[s].items()} for s in members}
    for rnd in range(max(rounds(grid, s) for s in members)):
        live = [s for s in members if rnd < rounds(grid, s)]
        if grid.residency(members[0]) == "relaunch":
            for sid in _rotated(members, rnd):
                todo = [b for b in round_cells(grid, sid, rnd) if sid in live and _unfinished(grid, sid, b)]
                out += [(rnd, sid, todo)] if todo else []
            continue
        for i, rep in enumerate(sorted({repeat[s][b] for s in live for b in round_cells(grid, s, rnd)})):
            todo = {sid: [b for b in round_cells(grid, sid, rnd) if repeat[sid][b] == rep and _unfinished(grid, sid, b)]
                    for sid in live}
            # the order rotates among the members with cells left at this repeat: where an `auto` group's member is
            # no longer needed (looks.py), those still needed keep a balanced order
            for sid in _rotated([s for s in members if todo.get(s)] or members, i):
                out += [(rnd, sid, todo[sid])] if todo.get(sid) else []
    return out


def settings(grid: Grid, sid: str) -> dict[str, dict[int, str]]:
    """A server cell's bench cells by setting (everything in the bench spec but the repeat: concurrency, dataset,
    thinking, lengths; a hash), then by repeat. An `auto` group stops each setting apart (looks.py)."""
    out: dict[str, dict[int, str]] = {}
    for bid, cell in grid.benches[sid].items():
        setting = stable_hash({k: v for k, v in cell.spec.items() if k != "repeat"})
        out.setdefault(setting, {})[int(cell.spec["repeat"])] = bid
    return out


def _unfinished(grid: Grid, sid: str, bid: str) -> bool:     # a repeat an `auto` group did not need is done
    return not grid.metrics_path(sid, bid).exists() and not repeats.not_needed(grid, sid, bid)


def pending(grid: Grid, sid: str, rnd: int | None = None) -> list[str]:
    """The unfinished bench cells of a server cell, or of one of its rounds (not those recorded not needed)."""
    return [bid for bid in round_cells(grid, sid, rnd) if _unfinished(grid, sid, bid)]


def group_pending(grid: Grid, lead: str) -> list[tuple[str, str]]:
    return [(sid, bid) for sid in group(grid, lead) for bid in pending(grid, sid)]


def run_marker(grid: Grid, lead: str) -> Path:
    """A group's job output, in its lead's folder: named after the bench cells the group still has to run."""
    todo = stable_hash(sorted(group_pending(grid, lead)))[:12]
    return layout.run_marker(grid.server_dir(lead), todo)

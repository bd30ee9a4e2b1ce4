"""The block spreads this host has recorded: each `repeats: auto` group's looks.json under a results_dir holds its
comparisons' blocks (issue 54 item 6), and `specsweep doctor` predicts a study's repeats and seconds from them
(verdicts.forecast; issue 54 item 4)."""
from __future__ import annotations

import socket
from pathlib import Path

import numpy as np

from specsweep.core import layout
from specsweep.core.results import read_json
from specsweep.grid import repeats, schedule
from specsweep.grid.cells import Grid
from specsweep.run import launch_record, looks
from specsweep.verdicts import forecast, launches

MIN_BLOCKS = 3      # a spread from fewer blocks says little


def recorded(results_dir: str | Path) -> list[dict]:
    """One entry per comparison with MIN_BLOCKS blocks or more in any group's looks.json under results_dir
    (<study>/<lead>/looks.json), newest first: its label (`K=7 vs K=3`), setting, host, spread (the blocks'
    standard deviation, log scale), effect (their mean), blocks, and the group's seconds per repeat."""
    out = []
    for path in Path(results_dir).glob(f"*/*/{layout.LOOKS}"):
        try:
            record = read_json(path)
        except (OSError, ValueError):
            continue
        per_repeat = (record.get("seconds") or 0) / record["repeats"] if record.get("repeats") else None
        for rec in record.get("comparisons", {}).values():
            values = rec.get("block_values") or []
            if len(values) >= MIN_BLOCKS and rec.get("label"):
                out.append({"label": rec["label"], "setting": rec.get("setting"), "host": record.get("host"),
                            "spread": float(np.std(values, ddof=1)), "effect": float(np.mean(values)),
                            "blocks": len(values), "seconds_per_repeat": per_repeat or None,
                            "written_at": record.get("written_at") or 0, "path": str(path)})
    return sorted(out, key=lambda r: -r["written_at"])


def matching(entries: list[dict], label: str, setting: str, host: str | None = None) -> dict | None:
    """The newest entry of this comparison and setting on this host (default: this one)."""
    host = host or socket.gethostname()
    return next((e for e in entries if (e["label"], e["setting"], e["host"]) == (label, setting, host)), None)


def forecast_lines(grid: Grid, entries: list[dict] | None = None, host: str | None = None) -> list[str]:
    """What `specsweep doctor` says of each comparison of an `auto` study before it runs: the repeat at which a
    typical study answers it (verdicts.forecast, at the spread and effect this host recorded for that comparison
    and setting, the newest) and about how many seconds that takes (the recorded group's seconds per repeat), or
    that its budget is unlikely to answer it, or that nothing is recorded."""
    out = []
    for lead in schedule.leads(grid):
        sweep = grid.configs[lead]["sweep"]
        if not repeats.is_auto(sweep):
            continue
        b = repeats.budget(sweep)
        if entries is None:
            entries = recorded(grid.configs[lead]["results_dir"])
        history = launch_record.recorded(grid.configs[lead]["results_dir"], host or socket.gethostname(),
                                         grid.servers[lead].study)
        for cell, ref, setting in looks.setting_comparisons(grid, schedule.group(grid, lead)):
            label = looks.comparison_label(grid, cell, ref)
            by = schedule.settings(grid, cell)[setting]
            text = looks.setting_text(grid.benches[cell][next(iter(by.values()))].spec)
            e = matching(entries, label, text, host)
            if e is None:
                out.append(f"{label} at {text}: no blocks recorded on this host: no forecast")
                continue
            tau = launch_record.carry(sweep, history.get(launch_record.key(cell, ref, setting), []))
            n = forecast.repeats_to_answer(e["spread"], e["effect"], b["max_repeats"], repeats.looks(sweep),
                                           repeats.precision(sweep), b["equivalence"], tau["launch_sd"])
            seen = f"(recorded: spread {e['spread']:.2%}, effect {e['effect']:+.2%} over {e['blocks']} blocks" + (
                f"; carrying a launch SD of {tau['launch_sd']:.2%} "
                + (f"from {tau['launches']} launches)" if tau["launches"] else "(sweep.launch_sd))")
                if tau["launch_sd"] else ")")
            if n is None:
                out.append(f"{label} at {text}: the budget of {b['max_repeats']} repeats is unlikely to answer it "
                           f"{seen}: raise sweep.max_repeats, or loosen sweep.precision" + (
                               f"; the launch SD alone leaves it +-{launches.Z95 * tau['launch_sd']:.1%}"
                               if tau["launch_sd"] else ""))
            else:
                secs = f", about {n * e['seconds_per_repeat']:.0f} s" if e["seconds_per_repeat"] else ""
                out.append(f"{label} at {text}: answered at about repeat {n}{secs} {seen}")
    return out

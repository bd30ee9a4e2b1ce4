"""A study's launches, as later studies read them for their launch SD (run.launch_record; `sweep.launch_sd`): the
summarize job writes them (layout.LAUNCHES_RECORD) beside the tables."""
from __future__ import annotations

from specsweep.grid import schedule
from specsweep.read.study import Study
from specsweep.run import launch_record, looks
from specsweep.verdicts import sequential


def entries(study: Study) -> list[dict]:
    """Per comparison of each of the study's groups at each setting: its repeat blocks (an `auto` comparison's as its
    looks read them, to where it stopped; a fixed one's sequential.block_log_ratios of its finished repeats), with
    the host its group ran on (as its pin says: a group run before launch_sd.json existed records none)."""
    grid, out = study.grid, []
    for lead in schedule.leads(grid):
        if grid.servers[lead].study != study.name:
            continue
        host = launch_record.host_of(grid, lead)
        record = (looks.group_record(grid, lead) or {}).get("comparisons", {})    # an `auto` group's blocks, as read
        for cell, ref, setting in looks.setting_comparisons(grid, schedule.group(grid, lead)):
            bids = sorted(set(schedule.settings(grid, cell)[setting].values())
                          & set(schedule.settings(grid, ref)[setting].values()))
            text = looks.setting_text(grid.benches[cell][bids[0]].spec)
            looked = next((r["block_values"] for r in record.values() if (r.get("cell"), r.get("ref"), r.get("setting"))
                           == (cell, ref, text) and r.get("block_values")), None)
            blocks = looked or sequential.block_log_ratios(*study.paired_runs(cell, ref, bids))
            if host and len(blocks) >= 2:
                out.append({"key": launch_record.key(cell, ref, setting), "cell": cell, "ref": ref, "setting": setting,
                            "label": looks.comparison_label(grid, cell, ref), "setting_text": text, "host": host,
                            "blocks": blocks})
    return out

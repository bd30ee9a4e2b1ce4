"""The launches this host has recorded, and the launch SD each group carries (`sweep.launch_sd`; issue 54 item 5;
docs/methods.md#the-launch-component-sweeplaunch_sd).

Each study's summary writes its launches (layout.LAUNCHES_RECORD in the study's folder): per comparison, both sides' server
cells, the setting, the host the group ran on, and the repeat blocks the verdict read. The same comparison (the same
two server cells at the same setting, on the same host) in other studies under the results_dir are other launches
of it. When a group's job starts it pins what it carries (layout.LAUNCH_SD in the lead's folder), once:

- `recorded` (the default): per comparison, the DerSimonian-Laird launch SD over the launches recorded before it,
  where there are launches.MIN_LAUNCHES or more; none where fewer (the interval is then one launch's, as it says);
- a number: that launch SD (log scale) for every comparison;
- null or 0: none (every interval is conditional on its launch).

The stopping rule and the summary read the pinned value, so a study's intervals do not move when other studies
finish later. A group pinned before this existed carries none."""
from __future__ import annotations

import socket
import time
from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_json, read_json
from specsweep.grid import repeats, schedule
from specsweep.grid.cells import Grid
from specsweep.verdicts import launches

RECORDED = "recorded"
OFF = "off"


def mode(sweep: dict) -> str | float:
    """sweep.launch_sd as the pin records it: `recorded`, a number, or `off` (null or 0)."""
    got = sweep.get("launch_sd", RECORDED)
    if got in (None, 0, 0.0, False):
        return OFF
    if got == RECORDED:
        return RECORDED
    try:
        value = float(got)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 <= value < 1:
        raise ConfigError(f"config: sweep.launch_sd={got!r}: give `recorded`, null, or a launch SD on the log scale "
                          "(0.03 = 3%) below 1")
    return value


def key(cell: str, ref: str, setting: str) -> str:
    """A comparison as launches are matched: its two server cells and its setting (schedule.settings' hash)."""
    return f"{cell} vs {ref} @ {setting}"


def recorded(results_dir: str | Path, host: str, exclude_study: str | None = None) -> dict[str, list[dict]]:
    """Per comparison key, the launches recorded on `host` under results_dir (each study's layout.LAUNCHES_RECORD), but
    `exclude_study`'s own: each with its study, mean and variance of its blocks' mean (launches.launch_mean)."""
    out: dict[str, list[dict]] = {}
    for path in sorted(Path(results_dir).glob(f"*/{layout.LAUNCHES_RECORD}")):
        if path.parent.name == exclude_study:
            continue
        try:
            record = read_json(path)
        except (OSError, ValueError):
            continue
        for entry in record.get("comparisons", []):
            got = launches.launch_mean(entry.get("blocks") or [])
            if entry.get("host") == host and got:
                out.setdefault(entry["key"], []).append({"study": path.parent.name, "mean": got[0],
                                                         "variance": got[1]})
    return out


def carried(entries: list[dict]) -> dict:
    """What a comparison carries from its recorded launches: their launch SD where there are enough, else none."""
    if len(entries) < launches.MIN_LAUNCHES:
        return {"launch_sd": 0.0, "launches": len(entries),
                "why": f"{len(entries)} launch(es) recorded on this host: a launch SD needs {launches.MIN_LAUNCHES}"}
    dl = launches.dersimonian_laird([e["mean"] for e in entries], [e["variance"] for e in entries])
    return {"launch_sd": dl["launch_sd"], "launches": dl["launches"], "launch_sd_ci": dl["launch_sd_ci"],
            "q_p": dl["q_p"], "studies": sorted(e["study"] for e in entries),
            "why": f"DerSimonian-Laird over {dl['launches']} launches recorded on this host (Q p {dl['q_p']:.3g})"}


def carry(sweep: dict, history: list[dict]) -> dict:
    """What a comparison carries under this sweep (module doc), given its recorded launches on this host: what `pin`
    writes, and what `specsweep doctor` forecasts with."""
    want = mode(sweep)
    if want != OFF and repeats.rounds(sweep) > 1:       # its rounds are launches: the cluster bootstrap resamples them
        return {"launch_sd": 0.0, "launches": None,
                "why": "sweep.rounds > 1: the interval resamples the group's own launches"}
    if want == RECORDED:
        return carried(history)
    return {"launch_sd": 0.0 if want == OFF else want, "launches": None,
            "why": "sweep.launch_sd=null: none" if want == OFF else "sweep.launch_sd, as given"}


def pin(grid: Grid, members: list[str], compared: list[tuple[str, str, str]]) -> dict:
    """The group's pinned launch SDs (module doc) for its comparisons (`compared`: looks.setting_comparisons' cell,
    ref and setting): written when its job first starts, or again where sweep.launch_sd changed; read as they are
    otherwise."""
    lead = schedule.group_of(grid, members[0])
    path = grid.server_dir(lead) / layout.LAUNCH_SD
    want = mode(grid.configs[lead]["sweep"])
    if path.exists():
        record = read_json(path)
        if record.get("asked") == want:
            return record
    host, sweep = socket.gethostname(), grid.configs[lead]["sweep"]
    history = recorded(grid.configs[lead]["results_dir"], host, grid.servers[lead].study) if want == RECORDED else {}
    out = {key(c, r, s): carry(sweep, history.get(key(c, r, s), [])) for c, r, s in compared}
    record = {"asked": want, "host": host, "comparisons": out, "written_at": time.time()}
    atomic_write_json(path, record)
    return record


def pinned(grid: Grid, cell: str, ref: str, setting: str) -> dict:
    """What a comparison carries, as its group pinned it; none (with why) where the group pinned nothing."""
    path = grid.server_dir(schedule.group_of(grid, cell)) / layout.LAUNCH_SD
    record = read_json(path) if path.exists() else {}
    got = (record.get("comparisons") or {}).get(key(cell, ref, setting))
    return got or {"launch_sd": 0.0, "launches": None, "why": "no launch SD pinned for this group (run before "
                                                                  "sweep.launch_sd, or not yet run)"}


def host_of(grid: Grid, lead: str) -> str | None:
    path = grid.server_dir(lead) / layout.LAUNCH_SD
    return read_json(path).get("host") if path.exists() else None


def write(study_dir: Path, entries: list[dict]) -> None:
    """A study's launches (module doc), as its summary read them."""
    atomic_write_json(study_dir / layout.LAUNCHES_RECORD, {"comparisons": entries, "written_at": time.time()})

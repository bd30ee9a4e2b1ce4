"""The light part of the low-acceptance diagnosis (the `acceptance` checkpoint): per bench group (dataset,
thinking, concurrency) of a speculative server cell, its pooled acceptance length and whether it is below
sweep.diagnose.below_al. Only where one is does the workflow ask for the diagnose job (counterfactuals.py), so a
healthy cell costs no launch and no cluster job."""
from __future__ import annotations

from pathlib import Path

from specsweep.core.errors import ConfigError
from specsweep.core.results import atomic_write_json, read_json
from specsweep.diagnose import diagnosis
from specsweep.grid import schedule
from specsweep.grid.cells import Grid


def settings(cfg: dict) -> tuple[float, int]:
    """sweep.diagnose's (below_al, prompts), refused in one line where they make no sense."""
    given = (cfg.get("sweep") or {}).get("diagnose") or {}
    below, prompts = given.get("below_al", diagnosis.BELOW_AL), given.get("prompts", diagnosis.PROMPTS)
    if isinstance(below, bool) or not isinstance(below, (int, float)) or below < 0:
        raise ConfigError(f"config: sweep.diagnose.below_al={below} must be a number >= 0 (an acceptance length; "
                          "0 turns the diagnosis off), e.g. sweep.diagnose.below_al=1.5")
    if isinstance(prompts, bool) or not isinstance(prompts, int) or prompts < 1:
        raise ConfigError(f"config: sweep.diagnose.prompts={prompts} must be a whole number >= 1 (the counterfactual "
                          "cells' prompts), e.g. sweep.diagnose.prompts=4")
    return float(below), prompts


def _pooled(valid: list[dict]) -> tuple[float | None, list[float] | None]:
    """The pooled acceptance length (accepted over steps, summed over the valid repeats) and per-position rates."""
    sds = [m["spec_decode"] for m in valid if m.get("spec_decode") and m["spec_decode"].get("num_drafts")]
    drafts = sum(s["num_drafts"] for s in sds)
    if not drafts:
        return None, None
    al = 1 + sum(s["num_accepted_tokens"] for s in sds) / drafts
    widths = [len(s.get("per_position_acceptance") or []) for s in sds]
    if not sds or not min(widths):
        return al, None
    rates = [sum(s["per_position_acceptance"][i] * s["num_drafts"] for s in sds) / drafts for i in range(min(widths))]
    return al, rates


def groups(grid: Grid, sid: str) -> dict[tuple, list[str]]:
    """A setting (schedule.setting: dataset, thinking, concurrency, lengths, ignore_eos) -> the finished bench ids of
    a server cell, as the summary groups them."""
    out: dict[tuple, list[str]] = {}
    for bid, bench in grid.benches[sid].items():
        if grid.metrics_path(sid, bid).exists():
            out.setdefault(schedule.setting(bench.spec), []).append(bid)
    return out


def groups_needed(grid: Grid, sid: str, below: float) -> list[tuple[dict, list[str], list[float] | None]]:
    """Each bench group's entry (its pooled acceptance, whether it needs a diagnosis and, if not, why), its bench
    ids and its pooled per-position rates."""
    out = []
    order = sorted(groups(grid, sid).items(), key=lambda kv: (*kv[0][:3], kv[0][3][0], kv[0][3][1] or 0))
    for (dataset, thinking, conc, (max_tokens, prompt_length), _ignore_eos), bids in order:
        entry = {"dataset": dataset, "thinking": thinking, "concurrency": conc, "max_tokens": max_tokens,
                 "prompt_length": prompt_length}
        valid = [m for m in (read_json(grid.metrics_path(sid, b)) for b in bids) if m.get("valid")]
        al, rates = _pooled(valid)
        entry.update(mean_acceptance_length=al, per_position_acceptance=rates,
                     needed=al is not None and grid.diagnosed(sid) and al < below)
        if not entry["needed"]:
            entry["reason"] = ("no valid repeat with drafts" if al is None else "a set acceptance"
                               if not grid.diagnosed(sid) else f"AL {al:.3g} is at least sweep.diagnose.below_al "
                                                                f"{below:g}")
        out.append((entry, bids, rates))
    return out


def acceptance(grid: Grid, sid: str, out: str | Path) -> dict:
    """The light part: write `out` (Grid.acceptance_path) saying, per bench group, whether the cell's
    pooled acceptance length is below sweep.diagnose.below_al; the workflow asks for a diagnosis only where one is."""
    below, prompts = settings(grid.configs[sid])
    entries = [e for e, _, _ in groups_needed(grid, sid, below)]
    record = {"server_cell": sid, "below_al": below, "prompts": prompts, "needed": any(e["needed"] for e in entries),
              "groups": entries}
    atomic_write_json(out, record)
    return record


def record_acceptance(grid: Grid, members: list[str]) -> None:
    """Write the acceptance record (`acceptance`) of each diagnosed member whose cells are all finished, in the
    group's job after its servers stop: the acceptance checkpoint then finds it written and runs no job of its own
    (a Python start-up per speculative cell on the chain to the summary). The checkpoint still writes a record
    this did not (a group that failed, a study from before)."""
    for sid in members:
        if not grid.diagnosed(sid) or schedule.pending(grid, sid):
            continue
        record = grid.acceptance_path(sid)
        newest = max(p.stat().st_mtime for bid in grid.benches[sid]     # not a repeat an auto group did not need
                     if (p := grid.metrics_path(sid, bid)).exists())
        if not record.exists() or record.stat().st_mtime < newest:   # a member this job ran no cell of keeps its own
            acceptance(grid, sid, record)

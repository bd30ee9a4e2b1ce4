"""`specsweep compare A B`: two studies (results/<study>) or two bench cells side by side, e.g. two vLLM
versions or two drafters for one target, with paired CIs and verdicts (stats.py).

Studies are matched cell by cell on (method, K, dataset, thinking, concurrency, repeat); requests are
paired by prompt and turn. A pair that did not run the same requests is refused, since its per-request
ratios would compare different work: different prompts, sampling (temperature, seed), max_tokens or
ignore_eos (a bench spec without that key predates it: false).
"""
from __future__ import annotations

from pathlib import Path

from specsweep.core import derived_tables, labels, layout, table
from specsweep.core.errors import ConfigError
from specsweep.grid import schedule
from specsweep.grid.cells import Grid
from specsweep.grid.datasets import load_prompt_rows, prompts_digest
from specsweep.metrics import median_mad, phases
from specsweep.read import summary
from specsweep.read.predictions import predictions, write_predictions
from specsweep.read.sides import Side, own_baseline, ratio_text, rounds_of, side_of, two_places
from specsweep.read.study import KEY, Cell
from specsweep.run import looks
from specsweep.verdicts import stats

# What must match for two cells' requests to be the same requests: (bench spec key, the config key to set).
SAME_WORK = (("temperature", "sweep.temperature"), ("seed", "sweep.seed"), ("max_tokens", "sweep.max_tokens"),
             ("ignore_eos", "sweep.ignore_eos"), ("thinking", "sweep.thinking"))


def prompts_sha256(cell: Cell) -> str:
    """The digest recorded at the cell's end, or (a cell from before it was recorded) the digest of its dataset
    file, found the way the grid names it under the cell's results_dir."""
    if cell.metrics.get("prompts_sha256"):
        return cell.metrics["prompts_sha256"]
    ds = cell.bench["dataset"]
    path = Path(Grid(results_dir=cell.path.parents[2]).dataset_file(ds))
    if not path.exists():
        raise ConfigError(f"compare: cannot check the prompts of {cell.path}: its dataset file {path} is gone: "
                          f"restore it, or rerun the cell so {layout.METRICS} records prompts_sha256")
    return prompts_digest([r["turns"] for r in load_prompt_rows(path, ds)[0]])


def check_same_work(a: Cell, b: Cell) -> None:
    """Refuse, in one line, a pair whose requests are not the same requests."""
    for key, setting in SAME_WORK:
        va, vb = a.bench.get(key, False), b.bench.get(key, False)
        if va != vb:
            raise ConfigError(f"compare: {a.path} and {b.path} differ in {key} ({va} vs {vb}), so their requests are "
                              f"not the same: compare cells run with the same {setting}")
    da, db = prompts_sha256(a), prompts_sha256(b)
    if da != db:
        raise ConfigError(f"compare: {a.path} and {b.path} ran different prompts (prompt digests {da[:12]} vs "
                          f"{db[:12]}): compare cells of the same dataset file and dataset.num_prompts")


def _without_max_tokens(key: tuple) -> tuple:
    i = KEY.index("max_tokens")
    return key[:i] + (None,) + key[i + 1:]


def _pairs(a: Side, b: Side, required: bool = True) -> list[tuple[Cell, Cell]]:
    if a.kind != b.kind:
        raise ConfigError(f"compare: A is a {a.kind} and B a {b.kind}: give two studies or two bench cells")
    if a.kind == "cell":
        return [(a.cells[0], b.cells[0])]
    by_key = []
    for side in (a, b):
        keyed: dict[tuple, Cell] = {}
        for c in side.cells:
            if c.key in keyed:
                raise ConfigError(f"compare: {keyed[c.key].path} and {c.path} are the same kind of cell in one study "
                                  "(they differ in a setting compare does not match on): compare bench cells directly")
            keyed[c.key] = c
        by_key.append(keyed)
    common = sorted(set(by_key[0]) & set(by_key[1]), key=repr)
    if not common:      # two studies of one output length each: matched without it, so check_same_work says so
        by_key = [{_without_max_tokens(k): c for k, c in keyed.items()} for keyed in by_key]
        if all(len(keyed) == len(side.cells) for keyed, side in zip(by_key, (a, b))):
            common = sorted(set(by_key[0]) & set(by_key[1]), key=repr)
    if not common and required:
        raise ConfigError("compare: no cell of A matches one of B on (method, K, set acceptance, verification, K "
                          "schedule, dataset, thinking, concurrency, ignore_eos, repeat): compare studies that ran "
                          "the same grid points")
    return [(by_key[0][k], by_key[1][k]) for k in common]


def compare(path_a: str | Path, path_b: str | Path, required: bool = True) -> list[dict]:
    """One row per matched grid point, repeats pooled: each side's acceptance and speedup over its own
    baseline, and B against A (latency ratios A / B: above 1, B is faster). Where both studies ran their
    cells in several rounds (sweep.rounds), the paired CIs resample rounds first, as the summary's do; B
    against A pairs round i of B with round i of A. `required=False`: no matched grid point gives no rows
    instead of refusing."""
    side_a, side_b = side_of(path_a), side_of(path_b)
    pairs = _pairs(side_a, side_b, required)
    for a, b in pairs:
        check_same_work(a, b)
    groups: dict[tuple, list[tuple[Cell, Cell]]] = {}
    for a, b in pairs:
        groups.setdefault(a.key[:-1], []).append((a, b))
    out = []
    for key, every in groups.items():
        point = dict(zip(KEY, key))
        # only repeats that both cells' own checks accept (valid: true), as the summary takes them
        matched = [(a, b) for a, b in every if a.valid and b.valid] or every
        void = "; ".join(f"{side} {c.path.name}: {void_reason(c)}" for pair in every for side, c in zip("AB", pair)
                         if not c.valid) or None
        a_runs, b_runs = [a.requests() for a, _ in matched], [b.requests() for _, b in matched]
        a_spec, b_spec = matched[0][0].server_spec, matched[0][1].server_spec
        row = {"method": point["method"], "num_speculative_tokens": point["num_speculative_tokens"],
               "set_acceptance": a_spec.get("set_acceptance"), "verification": point["verification"],
               "k_schedule": a_spec.get("k_schedule"), "b_method": b_spec["method"],
               "b_num_speculative_tokens": b_spec["num_speculative_tokens"], "dataset": point["dataset"],
               "thinking": point["thinking"], "concurrency": point["concurrency"],
               "max_tokens": matched[0][0].bench["max_tokens"], "prompt_length": point["prompt_length"],
               "repeats": len(matched) if void is None or len(matched) < len(every) else 0,
               "cell_a": str(matched[0][0].path), "cell_b": str(matched[0][1].path), "repeats_void": void}
        for side, (name, cells) in ((side_a, ("a", [a for a, _ in matched])), (side_b, ("b", [b for _, b in matched]))):
            row[f"{name}_mean_acceptance_length"] = median_mad([(c.metrics.get("spec_decode") or {})
                                                                .get("mean_acceptance_length") for c in cells])[0]
            row[f"{name}_output_tok_s"] = median_mad([c.metrics.get("output_tok_s") for c in cells])[0]
            row.update(phase_figures(name, cells))
            vs_base = own_baseline(side, cells)
            vs_base.update(own_sequence(side, cells, vs_base))
            row.update({f"{name}_{figure}": vs_base.get(figure) for figure in
                        ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "verdict",
                         "verdict_reason", "looks", "stopped")})
            # the answers and the streams under the summary's names (table.QUALITY), blank where a cell's check voids
            row.update({f"{name}_{k}": v for k, v in summary.quality_row([c.metrics for c in cells]).items()
                        if not k.endswith(table.MAD)})
        acc = stats.acceptance_ratio(b_runs, a_runs)
        row.update(b_vs_a_acceptance_ratio=acc["ratio"], b_vs_a_acceptance_ci_low=acc["ci_low"],
                   b_vs_a_acceptance_ci_high=acc["ci_high"])
        # the streamed-TPOT ratio only where every repeat of both sides passes its own stream check
        rounds_b, rounds_a = rounds_of([b for _, b in matched]), rounds_of([a for a, _ in matched])
        rounds = (rounds_b, rounds_a) if rounds_b is not None and rounds_a is not None else None
        row.update({f"b_vs_a_{name}": v for name, v in
                    stats.paired_speedup(b_runs, a_runs, sides=("B", "A"), rounds=rounds).items()})
        tok = stats.ratio_of_medians([b.metrics.get("output_tok_s") for _, b in matched],
                                     [a.metrics.get("output_tok_s") for a, _ in matched])
        row.update(b_vs_a_output_tok_s_ratio=tok["ratio"], b_vs_a_output_tok_s_ci_low=tok["ci_low"],
                   b_vs_a_output_tok_s_ci_high=tok["ci_high"])
        out.append(blank_void(row, matched, every_void=row["repeats"] == 0))
    return out


def own_sequence(side: Side, cells: list[Cell], paired: dict) -> dict:
    """A study side's verdict against its own baseline as its summary reads it (summary.sequence): in a
    `repeats: auto` study the stopping rule's interval and verdict over all the repeats of that grid point, with its
    looks and why it stopped, so compare and the summary never disagree; else, and for a lone cell, one look
    (`fixed`). B against A is one look at the repeats both studies ran."""
    cell = cells[0] if cells else None
    base = cell.metrics.get("baseline_cell") if cell else None
    if side.study is None or not base or base == cell.server_cell:
        return {"looks": 1, "stopped": looks.FIXED}
    bench = cell.bench
    key = (cell.server_cell, *schedule.setting(bench))
    bids = side.study.groups.get(key) or [c.bench_cell for c in cells]
    return summary.sequence(side.study, cell.server_cell, base, bids, paired)


def void_reason(cell: Cell) -> str:
    """Why a cell's own checks reject its figures (metrics.json's valid: false), in its words."""
    return cell.metrics.get("invalid_reason") or "valid: false"


# figures a cell's own recorded check voids: its metrics.json key, and the compare columns it blanks
VOIDED_BY = (("streamed_figures_invalid", "b_vs_a_speedup_streamed_tpot"),
             ("server_figures_invalid", "b_vs_a_speedup_server_tpot"))


def blank_void(row: dict, matched: list[tuple[Cell, Cell]], every_void: bool = False) -> dict:
    """Blank every figure of a compare row that the cells' own checks void: all of them where no repeat of the
    point is valid on both sides (repeats_void says why); a paired TPOT ratio where any cell it pairs recorded that
    figure's check as failed (streamed_figures_invalid, server_figures_invalid in its metrics.json), whatever its
    rows would say today, with that cell's reason in the ratio's `_na`."""
    if every_void:
        keep = {"repeats", "repeats_void", "cell_a", "cell_b", "b_method", "b_num_speculative_tokens", *derived_tables.COMPARE_KEY}
        return {k: v if k in keep else (f"no repeat valid on both sides: {row['repeats_void']}" if k.endswith("_na")
                                        else None) for k, v in row.items()}
    for key, stem in VOIDED_BY:
        reason = next((f"{side} {c.path.name}: {c.metrics[key]}" for pair in matched for side, c in zip("AB", pair)
                       if c.metrics.get(key)), None)
        if reason:
            row.update({f"{stem}_geomean": None, f"{stem}_ci_low": None, f"{stem}_ci_high": None})
            row[f"{stem}_na"] = row.get(f"{stem}_na") or reason
    return row


def phase_figures(name: str, cells: list[Cell]) -> dict:
    """A side's acceptance by phase over its cells' requests (phases.py), under the summary's names with the
    side's prefix (a_think_acceptance_length, ...; per-position lists, which compare.csv writes as JSON); blank for a baseline, with
    phase_split_na's reason."""
    if not cells or cells[0].server_spec["method"] == "none":
        cols = phases.columns({"na": "baseline: no drafts", "requests": 0})
    else:
        thinking = bool(cells[0].bench["thinking"])
        cols = phases.columns(phases.pooled([phases.request_split(r, thinking) for c in cells for r in c.requests()
                                             if r.get("ok")]))
    return {f"{name}_{k}": v for k, v in cols.items()}


def table_lines(rows: list[dict]) -> list[str]:
    """The printed table: a few lines per grid point, each headed by its configuration's label (labels.label, less
    the pair: a grid point is matched across pairs)."""
    out = []
    for r in rows:
        b_cell = "" if (r["b_method"], r["b_num_speculative_tokens"]) == (r["method"], r["num_speculative_tokens"]) \
            else " (B: " + labels.SEP.join(labels.setting({"method": r["b_method"],
                                                           "num_speculative_tokens": r["b_num_speculative_tokens"]})) + ")"
        out.append(f"{labels.label(r, with_pair=False)}{b_cell}, {r['repeats']} repeat(s):")
        if r.get("repeats_void"):
            out.append(f"  left out (their own checks void them): {r['repeats_void']}")
        if r["method"] != "none":
            out += [f"  acceptance       A {two_places(r['a_mean_acceptance_length'])}  "
                    f"B {two_places(r['b_mean_acceptance_length'])}  B/A {ratio_text(r, 'b_vs_a_acceptance', 'ratio')}",
                    f"  vs own baseline  A {ratio_text(r, 'a_speedup_e2e')} {r['a_verdict'] or 'no CI'}  "
                    f"B {ratio_text(r, 'b_speedup_e2e')} {r['b_verdict'] or 'no CI'}"]
        out += [f"  {side} no verdict    {r[f'{side.lower()}_verdict_reason']}" for side in ("A", "B")
                if r.get(f"{side.lower()}_verdict_reason")]
        out.append(f"  B vs A           e2e {ratio_text(r, 'b_vs_a_speedup_e2e')} {r['b_vs_a_verdict'] or 'no CI'}  "
                   "streamed TPOT " + (f"n/a ({r['b_vs_a_speedup_streamed_tpot_na']})"
                                       if r["b_vs_a_speedup_streamed_tpot_na"] else ratio_text(r, "b_vs_a_speedup_streamed_tpot"))
                   + "  server TPOT " + (f"n/a ({r['b_vs_a_speedup_server_tpot_na']})"
                                         if r.get("b_vs_a_speedup_server_tpot_na")
                                         else ratio_text(r, "b_vs_a_speedup_server_tpot"))
                   + f"  output tok/s {ratio_text(r, 'b_vs_a_output_tok_s', 'ratio')}")
        if r.get("b_vs_a_verdict_reason"):
            out.append(f"  B vs A no verdict  {r['b_vs_a_verdict_reason']}")
        if r["concurrency"] > 1:
            out.append("  streams          " + "  ".join(
                f"{side} steady {two_places(r[f'{p}_steady_output_tok_s'])} tok/s"
                + (f" (n/a: {r[f'{p}_steady_na']})" if r[f"{p}_steady_na"] else "")
                + f", decode tok/s min/max {two_places(r[f'{p}_decode_tok_s_min_over_max'])}"
                + (f", starved: {r[f'{p}_stream_starvation']}" if r[f"{p}_stream_starvation"] else "")
                for side, p in (("A", "a"), ("B", "b"))))
    return out


def write_comparison(path_a: str | Path, path_b: str | Path | None, out: str | Path,
                     predicted_out: str | Path = "predicted.csv") -> list[dict]:
    """Compare, write the CSV, print the table; then predicted against measured wherever a side holds a replay and
    a side its drafter's own cell (written to predicted_out). One study (path_b None): that table alone."""
    if path_b is None:
        side = side_of(path_a)
        rows, unmatched = predictions(("", side))
        if not rows:
            raise ConfigError(f"compare: {path_a} has no replay cell (sweep.set_acceptance rates, e.g. "
                              "[{rates_from: <server cell>}]) beside a measured cell of the same drafter at its grid "
                              "point" + (f" ({unmatched[0]})" if unmatched else "") + ": run the replay in the "
                              "drafter's study, or give two studies")
        print(f"study = {path_a}")
        write_predictions(rows, unmatched, predicted_out, {"study": str(path_a)})
        return rows
    side_a, side_b = side_of(path_a), side_of(path_b)
    predicted, unmatched = predictions(("A", side_a), ("B", side_b)) if side_a.kind == side_b.kind else ([], [])
    try:
        rows = compare(path_a, path_b, required=not predicted)
    except ConfigError as e:
        if not predicted:
            raise
        rows, refused = [], str(e)
    else:
        refused = None if rows else ("no cell of A matches one of B on (method, K, set acceptance, verification, K "
                                     "schedule, dataset, thinking, concurrency, ignore_eos, repeat)")
    print(f"A = {path_a}\nB = {path_b}\n(ratios B vs A above 1: B is faster; 95% CIs resample prompts and repeats)")
    if refused:      # e.g. a replay's baseline decodes to max_tokens and the other study's to the stop token
        print(f"no side-by-side table: {refused}")
    if rows:
        matched = _pairs(side_a, side_b, required=False)
        table.write(derived_tables.COMPARE, rows, out, inputs={
            "written_by": "specsweep compare", "a": str(path_a), "b": str(path_b),
            "settings": {"matched_on": list(KEY), "same_work": [key for key, _ in SAME_WORK],
                         "voided_by": [key for key, _ in VOIDED_BY]},
            "cells": {"a": [str(a.path) for a, _ in matched], "b": [str(b.path) for _, b in matched]}})
        print("\n".join(table_lines(rows)))
        print(f"wrote {out}")
    write_predictions(predicted, unmatched, predicted_out, {"a": str(path_a), "b": str(path_b)})
    return rows

"""The study table: one row per bench cell over its repeats (medians, and MAD across repeats).

Written with the csv module: pandas cost its job 0.5 s of imports for one write."""
from __future__ import annotations

import csv
import io
import json

from .cells import Grid
from .metrics import length_shares, median_mad
from .results import atomic_write_text, read_json

FIGURES = {
    "output_tok_s": ("output_tok_s",), "request_throughput": ("request_throughput",),
    "tpot_ms": ("tpot_ms", "mean"), "ttft_ms_median": ("ttft_ms", "median"), "itl_ms_median": ("itl_ms", "median"),
    "e2e_ms_median": ("e2e_ms", "median"), "mean_acceptance_length": ("spec_decode", "mean_acceptance_length"),
    "acceptance_rate": ("spec_decode", "acceptance_rate"), "speedup_output_tok_s": ("speedup_output_tok_s",),
    "speedup_tpot": ("speedup_tpot",), "greedy_agreement": ("greedy_agreement",), "error_rate": ("error_rate",),
}


def _get(d: dict, path: tuple):
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def rows(grid: Grid, study: str) -> list[dict]:
    groups: dict[tuple, list[tuple[str, dict]]] = {}
    for sid, bid in grid.cells_of_study(study):
        path = grid.metrics_path(sid, bid)
        if not path.exists():
            continue
        bench = grid.benches[sid][bid].spec
        key = (sid, bench["dataset"]["name"], bench["thinking"], bench["concurrency"])
        groups.setdefault(key, []).append((bid, read_json(path)))
    out = []
    for (sid, dataset, thinking, conc), cells in sorted(groups.items()):
        cell = grid.servers[sid]
        valid = [m for _, m in cells if m["valid"]]
        row = {"study": study, "server_cell": sid, "backend": cell.spec["server"]["backend"],
               "pair": cell.pair["name"], "method": cell.spec["method"],
               "num_speculative_tokens": cell.spec["num_speculative_tokens"], "dataset": dataset,
               "thinking": thinking, "concurrency": conc, "repeats": len(cells), "valid_repeats": len(valid),
               "valid": bool(valid), "bench_cells": " ".join(sorted(b for b, _ in cells))}
        for name, path in FIGURES.items():
            row[name], row[f"{name}_mad"] = median_mad([_get(m, path) for m in valid])
        per_pos = [m["spec_decode"]["per_position_acceptance"] for m in valid if m.get("spec_decode")]
        width = max((len(p) for p in per_pos), default=0)
        medians = [median_mad([p[i] for p in per_pos if i < len(p)])[0] for i in range(width)]
        row["per_position_acceptance"] = json.dumps(medians)
        row["acceptance_length_shares"] = json.dumps(length_shares(medians) if medians else [])
        out.append(row)
    return out


def write_summary(grid: Grid, study: str, out: str) -> list[dict]:
    table = rows(grid, study)
    text = io.StringIO()
    if table:
        writer = csv.DictWriter(text, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    atomic_write_text(out, text.getvalue())
    print(f"summary: {len(table)} rows -> {out}")
    return table

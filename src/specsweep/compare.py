"""`specsweep compare A B`: two studies (results/<study>) or two bench cells side by side, e.g. two vLLM
versions or two drafters for one target, with paired CIs and verdicts (stats.py).

Studies are matched cell by cell on (method, K, dataset, thinking, concurrency, repeat); requests are
paired by prompt and turn. A pair that did not run the same requests is refused, since its per-request
ratios would compare different work: different prompts, sampling (temperature, seed), max_tokens or
ignore_eos (a bench spec without that key predates it: false).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import layout, stats
from .cells import Grid
from .datasets import load_prompt_rows, prompts_digest
from .errors import ConfigError
from .metrics import median_mad
from .results import atomic_write_text
from .study import Cell, Study

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


@dataclass
class Side:
    """What one side of a comparison is: one bench cell, or a study's cells."""
    kind: str                        # "cell" or "study"
    cells: list[Cell]
    study: Study | None = None

    def baseline(self, cell: Cell) -> Cell | None:
        """The cell's matched baseline, finished: the study's own, or for a lone cell the one beside it."""
        return cell.baseline() if self.study is None else self.study.baseline(cell)


def rounds_of(cells: list[Cell]) -> list[int] | None:
    """The round each cell ran in (sweep.rounds), or None where none ran in more than one."""
    rounds = [c.round for c in cells]
    return None if all(r is None for r in rounds) else [r or 0 for r in rounds]


def side_of(path: str | Path) -> Side:
    """A finished bench cell, or a study directory (read by Study.load)."""
    p = Path(path)
    if Cell.finished(p):
        return Side("cell", [Cell.load(p)])
    if not p.is_dir() or not any(p.glob(f"*/*/{layout.METRICS}")):
        raise ConfigError(f"compare: {p} is neither a study directory (results/<study>) nor a finished bench cell "
                          f"(results/<study>/<server cell>/<bench cell> with {layout.METRICS}): give one of those")
    study = Study.load(p)
    return Side("study", [study.cells[k] for k in sorted(study.cells)], study)


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


def _pairs(a: Side, b: Side) -> list[tuple[Cell, Cell]]:
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
    if not common:
        raise ConfigError("compare: no cell of A matches one of B on (method, K, dataset, thinking, concurrency, "
                          "repeat): compare studies that ran the same grid points")
    return [(by_key[0][k], by_key[1][k]) for k in common]


def _own_baseline(side: Side, cells: list[Cell]) -> dict:
    """A side's cells against their own matched baselines, paired as the summary pairs them (with rounds,
    the rounds resampled first)."""
    own = [(c, base) for c in cells if (base := side.baseline(c)) is not None]
    mine, theirs = rounds_of([c for c, _ in own]), rounds_of([base for _, base in own])
    rounds = (mine, theirs) if own and mine is not None and theirs is not None else None
    return stats.paired_speedup([c.requests() for c, _ in own], [base.requests() for _, base in own],
                                rounds=rounds)


def compare(path_a: str | Path, path_b: str | Path) -> list[dict]:
    """One row per matched grid point, repeats pooled: each side's acceptance and speedup over its own
    baseline, and B against A (latency ratios A / B: above 1, B is faster). Where both studies ran their
    cells in several rounds (sweep.rounds), the paired CIs resample rounds first, as the summary's do; B
    against A pairs round i of B with round i of A."""
    side_a, side_b = side_of(path_a), side_of(path_b)
    pairs = _pairs(side_a, side_b)
    for a, b in pairs:
        check_same_work(a, b)
    groups: dict[tuple, list[tuple[Cell, Cell]]] = {}
    for a, b in pairs:
        groups.setdefault(a.key[:-1], []).append((a, b))
    out = []
    for (method, k, dataset, thinking, conc), matched in groups.items():
        a_runs, b_runs = [a.requests() for a, _ in matched], [b.requests() for _, b in matched]
        b_spec = matched[0][1].config["server_spec"]
        row = {"method": method, "num_speculative_tokens": k, "b_method": b_spec["method"],
               "b_num_speculative_tokens": b_spec["num_speculative_tokens"], "dataset": dataset,
               "thinking": thinking, "concurrency": conc, "repeats": len(matched),
               "cell_a": str(matched[0][0].path), "cell_b": str(matched[0][1].path)}
        for side, (name, cells) in ((side_a, ("a", [a for a, _ in matched])), (side_b, ("b", [b for _, b in matched]))):
            row[f"{name}_mean_acceptance_length"] = median_mad([(c.metrics.get("spec_decode") or {})
                                                                .get("mean_acceptance_length") for c in cells])[0]
            row[f"{name}_output_tok_s"] = median_mad([c.metrics.get("output_tok_s") for c in cells])[0]
            vs_base = _own_baseline(side, cells)
            row.update({f"{name}_{figure}": vs_base[figure] for figure in
                        ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "verdict")})
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
        out.append(row)
    return out


def _fmt(row: dict, stem: str, point: str = "geomean") -> str:
    return stats.format_ratio(row[f"{stem}_{point}"], row[f"{stem}_ci_low"], row[f"{stem}_ci_high"])


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def table_lines(rows: list[dict]) -> list[str]:
    """The printed table: a few lines per grid point."""
    out = []
    for r in rows:
        b_cell = "" if (r["b_method"], r["b_num_speculative_tokens"]) == (r["method"], r["num_speculative_tokens"]) \
            else f" (B: {r['b_method']} K={r['b_num_speculative_tokens']})"
        out.append(f"{r['method']} K={r['num_speculative_tokens']}{b_cell} {r['dataset']} think={r['thinking']} "
                   f"c={r['concurrency']}, {r['repeats']} repeat(s):")
        if r["method"] != "none":
            out += [f"  acceptance       A {_number(r['a_mean_acceptance_length'])}  "
                    f"B {_number(r['b_mean_acceptance_length'])}  B/A {_fmt(r, 'b_vs_a_acceptance', 'ratio')}",
                    f"  vs own baseline  A {_fmt(r, 'a_speedup_e2e')} {r['a_verdict'] or 'no CI'}  "
                    f"B {_fmt(r, 'b_speedup_e2e')} {r['b_verdict'] or 'no CI'}"]
        out.append(f"  B vs A           e2e {_fmt(r, 'b_vs_a_speedup_e2e')} {r['b_vs_a_verdict'] or 'no CI'}  "
                   "streamed TPOT " + (f"n/a ({r['b_vs_a_speedup_streamed_tpot_na']})"
                                       if r["b_vs_a_speedup_streamed_tpot_na"] else _fmt(r, "b_vs_a_speedup_streamed_tpot"))
                   + f"  output tok/s {_fmt(r, 'b_vs_a_output_tok_s', 'ratio')}")
    return out


def write_comparison(path_a: str | Path, path_b: str | Path, out: str | Path) -> list[dict]:
    """Compare, write the CSV, print the table."""
    rows = compare(path_a, path_b)
    atomic_write_text(out, pd.DataFrame(rows).to_csv(index=False))
    print(f"A = {path_a}\nB = {path_b}\n(ratios B vs A above 1: B is faster; 95% CIs resample prompts and repeats)")
    print("\n".join(table_lines(rows)))
    print(f"wrote {out}")
    return rows

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
import yaml

from . import stats
from .cells import Grid
from .datasets import load_prompt_rows, prompts_digest
from .errors import ConfigError
from .metrics import median_mad
from .results import atomic_write_text, read_json, read_jsonl

# What must match for two cells' requests to be the same requests: (bench spec key, the config key to set).
SAME_WORK = (("temperature", "sweep.temperature"), ("seed", "sweep.seed"), ("max_tokens", "sweep.max_tokens"),
             ("ignore_eos", "sweep.ignore_eos"), ("thinking", "sweep.thinking"))


@dataclass
class Cell:
    """One finished bench cell on disk."""
    path: Path
    config: dict
    metrics: dict

    @property
    def bench(self) -> dict:
        return self.config["bench_spec"]

    @property
    def key(self) -> tuple:
        s, b = self.config["server_spec"], self.bench
        return (s["method"], s["num_speculative_tokens"], b["dataset"]["name"], b["thinking"], b["concurrency"],
                b["repeat"])

    def requests(self) -> list[dict]:
        return read_jsonl(self.path / "requests.jsonl")

    def baseline_requests(self) -> list[dict] | None:
        """The matched baseline's requests: the same bench id under the baseline server cell."""
        base = self.metrics.get("baseline_cell")
        if not base or base == self.config["server_cell"]:
            return None
        path = self.path.parent.parent / base / self.path.name / "requests.jsonl"
        return read_jsonl(path) if path.exists() else None

    def prompts_sha256(self) -> str:
        """The digest recorded at the cell's end, or (a cell from before it was recorded) the digest of
        its dataset file, found the way the grid names it under the cell's results_dir."""
        if self.metrics.get("prompts_sha256"):
            return self.metrics["prompts_sha256"]
        ds = self.bench["dataset"]
        path = Path(Grid(results_dir=self.path.parents[2]).dataset_file(ds))
        if not path.exists():
            raise ConfigError(f"compare: cannot check the prompts of {self.path}: its dataset file {path} is gone: "
                              "restore it, or rerun the cell so metrics.json records prompts_sha256")
        return prompts_digest([r["turns"] for r in load_prompt_rows(path, ds)[0]])


def load_cell(path: Path) -> Cell:
    return Cell(path, yaml.safe_load((path / "config.yaml").read_text()), read_json(path / "metrics.json"))


def cells_of(path: str | Path) -> tuple[str, list[Cell]]:
    """('cell', [one]) for a finished bench cell, ('study', [...]) for a study directory."""
    p = Path(path)
    if (p / "metrics.json").exists() and (p / "config.yaml").exists():
        return "cell", [load_cell(p)]
    found = sorted(m.parent for m in p.glob("*/*/metrics.json"))
    if not found:
        raise ConfigError(f"compare: {p} is neither a study directory (results/<study>) nor a finished bench cell "
                          "(results/<study>/<server cell>/<bench cell> with metrics.json): give one of those")
    return "study", [load_cell(c) for c in found]


def check_same_work(a: Cell, b: Cell) -> None:
    """Refuse, in one line, a pair whose requests are not the same requests."""
    for key, setting in SAME_WORK:
        va, vb = a.bench.get(key, False), b.bench.get(key, False)
        if va != vb:
            raise ConfigError(f"compare: {a.path} and {b.path} differ in {key} ({va} vs {vb}), so their requests are "
                              f"not the same: compare cells run with the same {setting}")
    da, db = a.prompts_sha256(), b.prompts_sha256()
    if da != db:
        raise ConfigError(f"compare: {a.path} and {b.path} ran different prompts (prompt digests {da[:12]} vs "
                          f"{db[:12]}): compare cells of the same dataset file and dataset.num_prompts")


def _pairs(kind_a: str, a: list[Cell], kind_b: str, b: list[Cell]) -> list[tuple[Cell, Cell]]:
    if kind_a != kind_b:
        raise ConfigError(f"compare: A is a {kind_a} and B a {kind_b}: give two studies or two bench cells")
    if kind_a == "cell":
        return [(a[0], b[0])]
    by_key = []
    for side in (a, b):
        keyed: dict[tuple, Cell] = {}
        for c in side:
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


def compare(path_a: str | Path, path_b: str | Path) -> list[dict]:
    """One row per matched grid point, repeats pooled: each side's acceptance and speedup over its own
    baseline, and B against A (latency ratios A / B: above 1, B is faster)."""
    pairs = _pairs(*cells_of(path_a), *cells_of(path_b))
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
        for side, cells in (("a", [a for a, _ in matched]), ("b", [b for _, b in matched])):
            row[f"{side}_mean_acceptance_length"] = median_mad([(c.metrics.get("spec_decode") or {})
                                                                .get("mean_acceptance_length") for c in cells])[0]
            row[f"{side}_output_tok_s"] = median_mad([c.metrics.get("output_tok_s") for c in cells])[0]
            own = [(c.requests(), c.baseline_requests()) for c in cells]
            own = [(c, r) for c, r in own if r is not None]
            vs_base = stats.paired_speedup([c for c, _ in own], [r for _, r in own])
            row.update({f"{side}_{name}": vs_base[name] for name in
                        ("speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high", "verdict")})
        acc = stats.acceptance_ratio(b_runs, a_runs)
        row.update(b_vs_a_acceptance_ratio=acc["ratio"], b_vs_a_acceptance_ci_low=acc["ci_low"],
                   b_vs_a_acceptance_ci_high=acc["ci_high"])
        # the streamed-TPOT ratio only where every repeat of both sides passes its own stream check
        row.update({f"b_vs_a_{name}": v for name, v in stats.paired_speedup(b_runs, a_runs, sides=("B", "A")).items()})
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

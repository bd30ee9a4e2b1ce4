"""Plots of one study's summary: acceptance and speedup against K, per-position acceptance, the
acceptance-length histogram, throughput. They take the summary's rows as `summary.rows` returns them, in
the job that writes summary.csv: one Python start-up and no pandas (0.5 s of imports) for both."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

from .cells import Grid
from .summary import write_summary

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _save(fig, path: Path) -> None:
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # K, positions and concurrency are whole
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _groups(rows: list[dict], *keys: str) -> list[tuple[tuple, list[dict]]]:
    out: dict[tuple, list[dict]] = {}
    for row in rows:
        out.setdefault(tuple(row[k] for k in keys), []).append(row)
    return sorted(out.items())


def _value(v) -> float:
    return float("nan") if v is None else v


def _speculative(table: list[dict]) -> list[dict]:
    return [r for r in table if r["method"] != "none" and r["valid"]]


def _by_k(table: list[dict], column: str, ylabel: str, title: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for (dataset, thinking, conc), g in _groups(_speculative(table), "dataset", "thinking", "concurrency"):
        g = sorted(g, key=lambda r: r["num_speculative_tokens"])
        ax.errorbar([r["num_speculative_tokens"] for r in g], [_value(r[column]) for r in g],
                    yerr=[r[f"{column}_mad"] or 0 for r in g], marker="o",
                    capsize=3, label=f"{dataset} think={thinking} c={conc}")
    invalid = sum(not r["valid"] for r in table)
    ax.set(xlabel="num_speculative_tokens (K)", ylabel=ylabel,
           title=title + (f" ({invalid} invalid cells left out)" if invalid else ""))
    if column.startswith("speedup"):
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, path)


def write_report(grid: Grid, study: str, summary_csv: str, out_dir: str) -> list[Path]:
    """summary.csv and the plots of one study (the `summarize` rule)."""
    return plot_study(write_summary(grid, study, summary_csv), out_dir)


def plot_study(table: list[dict], out_dir: str) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / n for n in ("acceptance_length_vs_k.png", "per_position_acceptance.png",
                               "speedup_vs_k.png", "throughput_vs_concurrency.png",
                               "acceptance_length_histogram.png")]
    _by_k(table, "mean_acceptance_length", "mean acceptance length", "Acceptance length", paths[0])
    _by_k(table, "speedup_output_tok_s", "speedup (output tok/s vs baseline)", "Speedup", paths[2])

    fig, ax = plt.subplots(figsize=(6, 4))
    for row in _speculative(table):
        rates = json.loads(row["per_position_acceptance"])
        if rates:
            ax.plot(range(1, len(rates) + 1), rates, marker="o",
                    label=f"K={row['num_speculative_tokens']} {row['dataset']} c={row['concurrency']}")
    ax.set(xlabel="draft position", ylabel="acceptance rate", ylim=(0, 1.05), title="Per-position acceptance")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, paths[1])

    fig, ax = plt.subplots(figsize=(6, 4))
    spec = sorted(_speculative(table), key=lambda r: r["num_speculative_tokens"])
    width = 0.8 / max(len(spec), 1)
    for i, row in enumerate(spec):
        shares = json.loads(row["acceptance_length_shares"])
        ax.bar([n + 1 + (i - (len(spec) - 1) / 2) * width for n in range(len(shares))], shares, width=width,
               label=f"K={row['num_speculative_tokens']} {row['dataset']} think={row['thinking']} "
                     f"c={row['concurrency']}")
    ax.set(xlabel="acceptance length (drafts accepted + 1)", ylabel="share of steps",
           title="Acceptance-length histogram")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, paths[4])

    fig, ax = plt.subplots(figsize=(6, 4))
    for (sid, dataset), g in _groups([r for r in table if r["valid"]], "server_cell", "dataset"):
        g = sorted(g, key=lambda r: r["concurrency"])
        ax.plot([r["concurrency"] for r in g], [_value(r["output_tok_s"]) for r in g], marker="o",
                label=f"{sid.rsplit('-', 1)[0]} {dataset}")
    ax.set(xlabel="concurrency", ylabel="output tok/s", title="Throughput vs concurrency")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, paths[3])
    return paths

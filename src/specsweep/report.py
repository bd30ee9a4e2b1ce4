"""Plots of one study's summary: acceptance and speedup against K, per-position acceptance, the
acceptance-length histogram, throughput, and (for a dataset with categories) category x K heatmaps."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def _save(fig, path: Path) -> None:
    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # K, positions and concurrency are whole
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _by_k(table: pd.DataFrame, column: str, ylabel: str, title: str, path: Path, ci: str | None = None) -> None:
    """`column` against K per bench group; error bars are the CI columns `{ci}_low`/`_high` if given, else its MAD."""
    fig, ax = plt.subplots(figsize=(6, 4))
    spec = table[(table.method != "none") & table.valid]
    for (dataset, thinking, conc), g in spec.groupby(["dataset", "thinking", "concurrency"]):
        g = g.sort_values("num_speculative_tokens")
        if ci:
            err = [(g[column] - g[f"{ci}_low"]).fillna(0), (g[f"{ci}_high"] - g[column]).fillna(0)]
        else:
            err = g[f"{column}_mad"].fillna(0)
        ax.errorbar(g.num_speculative_tokens, g[column], yerr=err, marker="o",
                    capsize=3, label=f"{dataset} think={thinking} c={conc}")
    invalid = int((~table.valid).sum())
    ax.set(xlabel="num_speculative_tokens (K)", ylabel=ylabel,
           title=title + (f" ({invalid} invalid cells left out)" if invalid else ""))
    if column.startswith("speedup"):
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, path)


def plot_study(summary_csv: str, out_dir: str) -> list[Path]:
    table = pd.read_csv(summary_csv)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / n for n in ("acceptance_length_vs_k.png", "per_position_acceptance.png",
                               "speedup_vs_k.png", "throughput_vs_concurrency.png",
                               "acceptance_length_histogram.png")]
    _by_k(table, "mean_acceptance_length", "mean acceptance length", "Acceptance length", paths[0])
    _by_k(table, "speedup_e2e_geomean", "speedup (paired e2e latency, geomean)", "Speedup, 95% CI", paths[2],
          ci="speedup_e2e_ci")

    fig, ax = plt.subplots(figsize=(6, 4))
    for _, row in table[(table.method != "none") & table.valid].iterrows():
        rates = json.loads(row.per_position_acceptance)
        if rates:
            ax.plot(range(1, len(rates) + 1), rates, marker="o",
                    label=f"K={row.num_speculative_tokens} {row.dataset} c={row.concurrency}")
    ax.set(xlabel="draft position", ylabel="acceptance rate", ylim=(0, 1.05), title="Per-position acceptance")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, paths[1])

    fig, ax = plt.subplots(figsize=(6, 4))
    spec = table[(table.method != "none") & table.valid].sort_values("num_speculative_tokens")
    width = 0.8 / max(len(spec), 1)
    for i, (_, row) in enumerate(spec.iterrows()):
        shares = json.loads(row.acceptance_length_shares)
        ax.bar([n + 1 + (i - (len(spec) - 1) / 2) * width for n in range(len(shares))], shares, width=width,
               label=f"K={row.num_speculative_tokens} {row.dataset} think={row.thinking} c={row.concurrency}")
    ax.set(xlabel="acceptance length (drafts accepted + 1)", ylabel="share of steps",
           title="Acceptance-length histogram")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, paths[4])

    fig, ax = plt.subplots(figsize=(6, 4))
    for (sid, dataset), g in table[table.valid].groupby(["server_cell", "dataset"]):
        g = g.sort_values("concurrency")
        ax.plot(g.concurrency, g.output_tok_s, marker="o", label=f"{sid.rsplit('-', 1)[0]} {dataset}")
    ax.set(xlabel="concurrency", ylabel="output tok/s", title="Throughput vs concurrency")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, paths[3])
    categories = Path(summary_csv).with_name("summary_by_category.csv")
    if categories.exists():
        paths += _category_heatmaps(pd.read_csv(categories), out)
    return paths


def _category_heatmaps(cats: pd.DataFrame, out: Path) -> list[Path]:
    """Category x K: mean acceptance length and paired e2e speedup, one row of panels per bench group."""
    if cats.empty:
        return []
    groups = list(cats.groupby(["dataset", "thinking", "concurrency"]))
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 0.4 * cats.category.nunique() * len(groups) + 2),
                             squeeze=False)
    for row, ((dataset, thinking, conc), g) in zip(axes, groups):
        for ax, column, label in zip(row, ("mean_acceptance_length", "speedup_e2e_geomean"),
                                     ("mean acceptance length", "e2e speedup (geomean)")):
            grid = g.pivot_table(index="category", columns="num_speculative_tokens", values=column)
            image = ax.imshow(grid.values, aspect="auto", cmap="viridis")
            ax.set_xticks(range(len(grid.columns)), [f"K={k}" for k in grid.columns])
            ax.set_yticks(range(len(grid.index)), grid.index)
            for (i, j), v in np.ndenumerate(grid.values):
                if v == v:
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
            ax.set_title(f"{label}\n{dataset} think={thinking} c={conc}", fontsize=9)
            fig.colorbar(image, ax=ax)
    path = out / "category_by_k.png"
    fig.tight_layout()      # not _save: its integer ticks are for numeric axes, these are labels
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]

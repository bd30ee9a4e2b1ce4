"""The plots of one study, from its tables (table.frame: typed). Every plot gives a setting (a K, a set acceptance
at a K) the same colour and label (`k_styles`; the label is labels.setting's): speedup
against K with its paired 95% CI, acceptance length against K beside the per-position acceptance, the
acceptance-length histogram, throughput against concurrency, the throughput Pareto plot (as `vllm bench
sweep plot_pareto` draws it), for a study with set-acceptance cells the system's speedup against acceptance
length with the drafter on it, and, for a dataset with categories, category x K heatmaps.

A plot is one function registered with `@plot(name)` (PLOTS, in drawing order; its file is `plots/<name>.png`).
`plot_study` hands each the table it draws and the study's styles (`k_styles`, one per K); each draws the rows
`shown` picks, the one filter.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from specsweep.core import labels, layout  # noqa: E402
from specsweep.core.table import BY_CATEGORY, blank, frame  # noqa: E402

BASELINE_COLOUR = "black"


@dataclass(frozen=True)
class Plot:
    name: str                                  # its file in plots/ (layout.plot_file)
    draw: Callable                             # draw(table, styles, path), or draw(categories, path)
    source: str = "summary"                    # the table it draws: "summary" or "by_category"


PLOTS: list[Plot] = []


def plot(name: str, source: str = "summary"):
    """Register a plot: `@plot("speedup_vs_k")` over `def f(table, styles, path)`; a `by_category` one is
    `def f(categories, path)`. Either returns False where it has nothing to draw (no categories, no set-acceptance
    curve), and then no file is written."""
    def register(draw):
        PLOTS.append(Plot(name, draw, source))
        return draw
    return register


def shown(table: pd.DataFrame, speculative: bool = True) -> pd.DataFrame:
    """The rows the plots draw: the valid ones, and with speculative (the default) only the speculative cells.
    `_left_out` says in a title how many invalid ones are missing."""
    keep = table.valid.astype(bool)
    return table[keep & (table.method != "none")] if speculative else table[keep]


def acceptance(row) -> str:
    """'' for a cell with real acceptance; else what it was set to (labels.acceptance_label: `AL set 6.54`)."""
    return labels.acceptance_label(getattr(row, "set_acceptance", None))


def k_styles(table: pd.DataFrame) -> dict:
    """A row's setting (style_key: `dflash K=7 · AL set 3.0`) -> (label, colour): one colour per K (and per set
    acceptance, schedule or verification at that K) in every plot of the study, black for the baseline; the label
    is the setting's, less the method where the study has one. A cell whose acceptance was set never looks like
    its K's real cell."""
    spec = table[table.method != "none"]
    methods = spec.method.nunique()
    rows = {style_key(r): r for r in spec.itertuples(index=False)}
    # a colour per setting less the method, real Ks first (a setting of one part), by K
    curve = {key: labels.setting(r, method=False) for key, r in rows.items()}
    order = sorted({(len(parts) > 1, int(rows[key].num_speculative_tokens), labels.SEP.join(parts))
                    for key, parts in curve.items()})
    colours = {c: plt.get_cmap("tab10")(i % 10) for i, (_, _, c) in enumerate(order)}
    styles = {"baseline": ("baseline", BASELINE_COLOUR)}
    for r in table[table.method == "none"].itertuples(index=False):   # `baseline · exact length` too (ignore_eos)
        styles[style_key(r)] = (style_key(r), BASELINE_COLOUR)
    for key, r in rows.items():
        styles[key] = (labels.SEP.join(labels.setting(r, method=methods > 1)), colours[labels.SEP.join(curve[key])])
    return styles


def style_key(row) -> str:
    """A row's setting as labels.setting spells it: `baseline`, `dflash K=7`, `dflash K=15 · AL set 6.54`."""
    return labels.SEP.join(labels.setting(row))


def style_of(styles: dict, row) -> tuple[str, object]:
    return styles[style_key(row)]


def _group_label(dataset, thinking, conc) -> str:
    return f"{dataset} think={str(thinking).lower()} c={conc}"


def _save(fig, path: Path, integer_x: bool = True, bottom: float = 0.0) -> None:
    for ax in fig.axes:
        if integer_x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # K, positions and concurrency are whole
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout(rect=(0, bottom, 1, 1))      # bottom: room kept for a note under the axes
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _left_out(table: pd.DataFrame) -> str:
    invalid = int((~table.valid).sum())
    return f" ({invalid} invalid cells left out)" if invalid else ""


def _by_k(ax, table: pd.DataFrame, styles: dict, column: str, err) -> None:
    """`column` against K: one grey line per bench group and acceptance source (real, or each set value), each
    point in its style's colour with error bars `err(g)`."""
    spec = shown(table)
    spec = spec.assign(source=[acceptance(r) for r in spec.itertuples(index=False)])
    groups = spec.groupby(["dataset", "thinking", "concurrency"])
    for marker, ((dataset, thinking, conc), group) in zip("osD^v<>p" * 8, groups):
        for source, g in group.groupby("source"):
            g = g.sort_values("num_speculative_tokens")
            ax.plot(g.num_speculative_tokens, g[column], color="grey", lw=0.8, marker=marker, ms=0,
                    ls=":" if source else "-",
                    label=_group_label(dataset, thinking, conc) if groups.ngroups > 1 and not source else None)
            low, high = err(g)
            for (_, row), lo, hi in zip(g.iterrows(), low, high):
                label, colour = style_of(styles, row)
                ax.errorbar([row.num_speculative_tokens], [row[column]], yerr=[[lo], [hi]], marker=marker,
                            capsize=3, color=colour, ls="none",
                            label=None if label in ax.get_legend_handles_labels()[1] else label)
    ax.set_xticks(sorted(spec.num_speculative_tokens.unique()))
    ax.set_xlabel("num_speculative_tokens (K)")


def _streamed_tpot(ax, table: pd.DataFrame, styles: dict, stem: str = "speedup_streamed_tpot", offset: float = 0.15,
                   marker: str = "o", legend: str = "streamed TPOT (hollow)") -> list[str]:
    """The paired streamed-TPOT speedup (or, with stem speedup_server_tpot, the server-timed one: docs/timing.md) as
    hollow markers just right of each K, only where both cells passed that figure's check; returns, for each
    valid cell without one, its label and why (`<stem>_na`)."""
    spec = shown(table)
    if f"{stem}_geomean" not in spec:      # a summary from before the column
        return []
    missing, labelled = [], False
    for _, row in spec.iterrows():
        label, colour = style_of(styles, row)
        point = row[f"{stem}_geomean"]
        if blank(point):          # None or NaN (a column blank throughout stays None): not shown
            why = row.get(f"{stem}_na")
            missing.append(f"{label} c={row.concurrency}: {why if isinstance(why, str) else 'no paired requests'}")
            continue
        lo, hi = row[f"{stem}_ci_low"], row[f"{stem}_ci_high"]
        err = [[0 if blank(lo) else point - lo], [0 if blank(hi) else hi - point]]
        ax.errorbar([row.num_speculative_tokens + offset], [point], yerr=err, marker=marker, mfc="none", capsize=2,
                    color=colour, ls="none", label=None if labelled else legend)
        labelled = True
    return missing


@plot("speedup_vs_k")
def speedup_vs_k(table: pd.DataFrame, styles: dict, path: Path) -> None:
    """The verdict's figure, the paired e2e speedup, per K; the paired streamed-TPOT speedup beside it only where
    it passed its check, and below the plot the reason for each cell where it did not; the server-timed TPOT
    speedup (docs/timing.md) beside them as hollow squares where it passed its own (its reasons: the summary)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    _by_k(ax, table, styles, "speedup_e2e_geomean", lambda g: (
        (g.speedup_e2e_geomean - g.speedup_e2e_ci_low).fillna(0), (g.speedup_e2e_ci_high - g.speedup_e2e_geomean).fillna(0)))
    missing = _streamed_tpot(ax, table, styles)
    _streamed_tpot(ax, table, styles, "speedup_server_tpot", 0.3, "s", "server TPOT (hollow square)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(ylabel="speedup (paired e2e latency, geomean)",
           title="Speedup over the baseline, 95% CI" + _left_out(table))
    bottom = 0.0
    if missing:
        shown = [m.split(" (first to last chunk")[0] for m in missing[:4]] + \
            ([f"... and {len(missing) - 4} more ({layout.SUMMARY})"] if len(missing) > 4 else [])
        fig.text(0.01, 0.01, "streamed TPOT not shown:\n" + "\n".join(shown), fontsize=6, va="bottom")
        bottom = 0.04 * (len(shown) + 1)
    _save(fig, path, integer_x=False, bottom=bottom)     # _by_k set the ticks: the Ks


@plot("acceptance_vs_k")
def acceptance_vs_k(table: pd.DataFrame, styles: dict, path: Path) -> None:
    """Left: mean acceptance length against K (error bars: MAD over repeats). Right: per-position acceptance."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    _by_k(left, table, styles, "mean_acceptance_length",
          lambda g: (g.mean_acceptance_length_mad.fillna(0), g.mean_acceptance_length_mad.fillna(0)))
    left.set(ylabel="mean acceptance length", title="Acceptance length" + _left_out(table))
    spec = shown(table).sort_values("num_speculative_tokens")
    several = spec.groupby(["dataset", "thinking", "concurrency"]).ngroups > 1
    seen = set()
    for _, row in spec.iterrows():
        rates = [] if blank(row.per_position_acceptance) else row.per_position_acceptance
        label, colour = style_of(styles, row)
        if several:
            label = f"{label} {_group_label(row.dataset, row.thinking, row.concurrency)}"
        if rates:
            right.plot(range(1, len(rates) + 1), rates, marker="o", color=colour,
                       label=None if label in seen else label)
            seen.add(label)
    right.set(xlabel="draft position", ylabel="acceptance rate", ylim=(0, 1.05), title="Per-position acceptance")
    right.set_xticks(range(1, int(spec.num_speculative_tokens.max()) + 1) if len(spec) else [])
    _save(fig, path, integer_x=False)


@plot("acceptance_length_histogram")
def histogram(table: pd.DataFrame, styles: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    spec = shown(table).sort_values("num_speculative_tokens")
    width = 0.8 / max(len(spec), 1)
    for i, (_, row) in enumerate(spec.iterrows()):
        shares = [] if blank(row.acceptance_length_shares) else row.acceptance_length_shares
        label, colour = style_of(styles, row)
        ax.bar([n + 1 + (i - (len(spec) - 1) / 2) * width for n in range(len(shares))], shares, width=width,
               color=colour, label=f"{label} {_group_label(row.dataset, row.thinking, row.concurrency)}")
    ax.set(xlabel="acceptance length (drafts accepted + 1)", ylabel="share of steps",
           title="Acceptance-length histogram")
    _save(fig, path)


_CURVE_AXES = ("max_tokens", "prompt_length", "ignore_eos")    # each value its own curve, where a table has them


def _curves(table: pd.DataFrame):
    """Per server cell and bench group (all but concurrency: each output and prompt length, and a baseline's two
    ignore_eos settings, apart), its valid rows sorted by concurrency."""
    keys = ["server_cell", "dataset", "thinking", *(k for k in _CURVE_AXES if k in table)]
    for _, g in shown(table, speculative=False).groupby(keys, dropna=False):
        yield g.sort_values("concurrency")


def _curve_label(table: pd.DataFrame, g: pd.DataFrame, label: str) -> str:
    """A curve's legend: its setting's label, and the data, thinking and output length where the table has
    several."""
    row = g.iloc[0]
    several_data = table.dataset.nunique() * table.thinking.nunique() > 1
    several_lengths = "max_tokens" in table and table.max_tokens.nunique() > 1
    return " ".join([label, *([f"{row.dataset} think={str(row.thinking).lower()}"] if several_data else []),
                     *([f"out={row.max_tokens}"] if several_lengths else [])])


@plot("throughput_vs_concurrency")
def throughput(table: pd.DataFrame, styles: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for g in _curves(table):
        label, colour = style_of(styles, g.iloc[0])
        ax.plot(g.concurrency, g.output_tok_s, marker="o", color=colour, label=_curve_label(table, g, label))
    ax.set(xlabel="concurrency", ylabel="output tok/s (total)", title="Throughput against concurrency")
    _save(fig, path)


@plot("pareto")
def pareto(table: pd.DataFrame, styles: dict, path: Path) -> None:
    """Per-user output tok/s (total / concurrency) against total output tok/s, one curve per K and the baseline,
    each point labelled with its concurrency: up and right is better, and the curve shows the trade."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for g in _curves(table):
        label, colour = style_of(styles, g.iloc[0])
        per_user = g.output_tok_s / g.concurrency
        ax.plot(per_user, g.output_tok_s, marker="o", color=colour, label=_curve_label(table, g, label))
        for x, y, c in zip(per_user, g.output_tok_s, g.concurrency):
            ax.annotate(f"c={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=colour)
    ax.set(xlabel="output tok/s per user", ylabel="output tok/s (total)",
           title="Throughput Pareto: per user against total")
    _save(fig, path, integer_x=False)


@plot("speedup_vs_acceptance")
def speedup_vs_acceptance(table: pd.DataFrame, styles: dict, path: Path) -> bool:
    """The system and your drafter: per (pair, K, concurrency) with set-acceptance cells, their paired e2e speedup
    against measured acceptance length with CIs (the system's curve, ceiling.py), the real-acceptance cell as a
    star on it, and the break-even length where the curve crosses 1. Drawn only where a study has such cells."""
    rows = shown(table)
    if "ceiling_points" not in rows or not rows.ceiling_points.notna().any():
        return False
    curves = rows[rows.ceiling_points.notna()].groupby(["pair", "num_speculative_tokens", "dataset", "thinking",
                                                        "concurrency"], sort=True)
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    colours = plt.get_cmap("tab10")
    for i, ((pair, k, dataset, thinking, conc), g) in enumerate(curves):
        colour = colours(i % 10)
        bounds = g.ceiling_points.iloc[0]
        points = np.array([p[:2] for p in bounds])
        err = None
        if all(b[2] is not None and b[3] is not None for b in bounds):
            err = np.array([[b[1] - b[2] for b in bounds], [b[3] - b[1] for b in bounds]])
        ax.errorbar(points[:, 0], points[:, 1], yerr=err, marker="o", color=colour, capsize=3,
                    label=f"{pair} · {labels.k_label(k)} · c={conc}: the system")
        for r in g[g.set_acceptance.isna()].itertuples(index=False):
            ax.errorbar([r.mean_acceptance_length], [r.speedup_e2e_geomean],
                        yerr=[[r.speedup_e2e_geomean - r.speedup_e2e_ci_low],
                              [r.speedup_e2e_ci_high - r.speedup_e2e_geomean]],
                        marker="*", markersize=13, color=colour, linestyle="none", capsize=3,
                        label=f"{pair} · {labels.k_label(k)} · c={conc}: your drafter (AL "
                              f"{r.mean_acceptance_length:.2f})")
        be = g.break_even_al.dropna()
        if not be.empty:
            ax.axvline(be.iloc[0], color=colour, linestyle=":", linewidth=1)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set(xlabel="mean acceptance length", ylabel="e2e speedup (paired geomean, 95% CI)",
           title="Speedup against acceptance length: the system and your drafter" + _left_out(table))
    _save(fig, path, integer_x=False)
    return True


@plot("category_by_k", source="by_category")
def category_heatmaps(cats: pd.DataFrame, path: Path) -> bool:
    """Category x K: mean acceptance length and paired e2e speedup, one row of panels per bench group."""
    if cats.empty:
        return False
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
    fig.tight_layout()      # not _save: its integer ticks are for numeric axes, these are labels
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---- issue #31: the length axes and acceptance by phase (docs/axes.md) ----------------------------------------------
def _speedup_vs(table: pd.DataFrame, styles: dict, path: Path, column: str, xlabel: str) -> bool:
    """The paired e2e speedup (95% CI) against a length axis, one line per K and bench group; False where the
    study has fewer than two values of it."""
    if column not in table:
        return False
    spec = shown(table)
    spec = spec[spec[column].notna()]
    if spec[column].nunique() < 2:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    several = spec.groupby(["dataset", "thinking", "concurrency"]).ngroups > 1
    for keys, g in spec.groupby(["server_cell", "dataset", "thinking", "concurrency"]):
        g = g.sort_values(column)
        label, colour = style_of(styles, g.iloc[0])
        if several:
            label = f"{label} {_group_label(*keys[1:])}"
        err = [(g.speedup_e2e_geomean - g.speedup_e2e_ci_low).fillna(0),
               (g.speedup_e2e_ci_high - g.speedup_e2e_geomean).fillna(0)]
        ax.errorbar(g[column], g.speedup_e2e_geomean, yerr=err, marker="o", capsize=3, color=colour, label=label)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(spec[column].unique()), [str(int(x)) for x in sorted(spec[column].unique())])
    ax.set(xlabel=xlabel, ylabel="speedup (paired e2e latency, geomean)",
           title=f"Speedup against {xlabel.split(' (')[0]}, 95% CI" + _left_out(table))
    _save(fig, path, integer_x=False)
    return True


@plot("speedup_vs_output_length")
def speedup_vs_output_length(table: pd.DataFrame, styles: dict, path: Path) -> bool:
    return _speedup_vs(table, styles, path, "max_tokens", "output length (sweep.max_tokens)")


@plot("speedup_vs_prompt_length")
def speedup_vs_prompt_length(table: pd.DataFrame, styles: dict, path: Path) -> bool:
    return _speedup_vs(table, styles, path, "prompt_length", "prompt length (sweep.prompt_length, tokens)")


def _num(value) -> float | None:
    """A table value as a float, None where it is blank (None or NaN)."""
    return None if value is None or value != value else float(value)


@plot("acceptance_by_phase")
def acceptance_by_phase(table: pd.DataFrame, styles: dict, path: Path) -> bool:
    """Acceptance length in the thinking span and in the answer span (phases.py), with 95% CIs, per speculative
    row; the label gives each phase's share of the tokens. False where no row has a thinking span (a study without
    thinking: its answer span is the whole answer, as the summary's acceptance already says)."""
    if "answer_acceptance_length" not in table or not table.think_acceptance_length.notna().any():
        return False
    spec = shown(table)
    spec = spec[spec.answer_acceptance_length.notna() | spec.think_acceptance_length.notna()]
    if spec.empty:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(spec)), 4))
    width = 0.38
    for i, (_, row) in enumerate(spec.iterrows()):
        label, colour = style_of(styles, row)
        for j, (phase, hatch) in enumerate((("think", "//"), ("answer", ""))):
            al, lo, hi, share = (_num(row[f"{phase}_{c}"]) for c in ("acceptance_length", "acceptance_length_ci_low",
                                                                       "acceptance_length_ci_high", "token_share"))
            if al is None:
                continue
            err = [[al - lo if lo is not None else 0], [hi - al if hi is not None else 0]]
            name = f"{phase} span"
            ax.bar(i + (j - 0.5) * width, al, width, yerr=err, capsize=3, color=colour, hatch=hatch,
                   edgecolor="black", label=None if name in ax.get_legend_handles_labels()[1] else name)
            ax.text(i + (j - 0.5) * width, 0.05, f"{share:.0%}" if share is not None else "", ha="center", fontsize=7)
    ax.set_xticks(range(len(spec)), [f"{style_of(styles, r)[0]}\nthink={str(r.thinking).lower()} "
                                     f"out={r.max_tokens}" for _, r in spec.iterrows()], fontsize=7)
    ax.set(ylabel="acceptance length (pooled, 95% CI)",
           title="Acceptance by phase (bar foot: the phase's share of tokens)" + _left_out(table))
    _save(fig, path, integer_x=False)
    return True


def plot_study(summary_csv: str | Path, by_category_csv: str | Path, out_dir: str | Path) -> list[Path]:
    """Every registered plot of one study, from its summary and per-category tables, into out_dir."""
    tables = {"summary": frame(summary_csv), "by_category": frame(by_category_csv, BY_CATEGORY)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    styles = k_styles(tables["summary"])
    paths = []
    for p in PLOTS:
        path = layout.plot_file(out, p.name)
        drawn = p.draw(tables["summary"], styles, path) if p.source == "summary" else p.draw(tables[p.source], path)
        if drawn is False:          # a plot with nothing to show in this study (no categories, no curve)
            continue
        paths.append(path)
    return paths

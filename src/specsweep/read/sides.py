"""The sides of `specsweep compare` and what its two tools (compare: A against B; predictions: predicted against
measured) share: a side (one bench cell, or a study's cells), a side's cells against their own baselines, and how a
ratio with its CI prints.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.read.study import Cell, Study
from specsweep.verdicts import stats


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


def own_baseline(side: Side, cells: list[Cell]) -> dict:
    """A side's cells against their own matched baselines, paired as the summary pairs them (with rounds,
    the rounds resampled first)."""
    own = [(c, base) for c in cells if c.valid and (base := side.baseline(c)) is not None and base.valid]
    mine, theirs = rounds_of([c for c, _ in own]), rounds_of([base for _, base in own])
    rounds = (mine, theirs) if own and mine is not None and theirs is not None else None
    return stats.paired_speedup([c.requests() for c, _ in own], [base.requests() for _, base in own],
                                rounds=rounds)


def ratio_text(row: dict, stem: str, point: str = "geomean") -> str:
    return stats.format_ratio(row[f"{stem}_{point}"], row[f"{stem}_ci_low"], row[f"{stem}_ci_high"])


def two_places(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"

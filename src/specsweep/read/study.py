"""A study on disk, read back in one place: its grid (ids, baselines, rounds) and its finished bench cells, each
with its config, metrics and requests. The tables (summary), the pages, MLflow (tracking), `compare`, `tune` and
`ingest` read a study through `Study.load`; where its files lie is `layout`'s.

In the DAG the study's grid is the workflow's own (`Study.load(dir, grid)`: the cells the config asks for); from
a folder alone (`Study.load(dir)`: compare, tune, ingest of a copied study) it is rebuilt from the job configs its
cells' config.yaml files hold, so it has every cell that ran there.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import yaml

from specsweep import metrics
from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.results import launches, read_json, read_jsonl
from specsweep.grid import schedule
from specsweep.grid.cells import Grid, answers_not_judged, expand

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
KEY = ("method", "num_speculative_tokens", "set_acceptance", "verification", "k_schedule", "dataset", "thinking",
       "concurrency", "ignore_eos", "max_tokens", "prompt_length", "repeat")     # Cell.key's parts, by name


def _json(value) -> str | None:
    return None if value is None else json.dumps(value)


class Cell:
    """One finished bench cell: its metrics.json, and on demand its config.yaml and requests.jsonl."""

    def __init__(self, path: Path, metrics: dict, config: dict | None = None):
        self.path, self.metrics, self._config, self._requests = Path(path), metrics, config, None

    @classmethod
    def load(cls, path: str | Path) -> "Cell":
        cell = cls(Path(path), read_json(Path(path) / layout.METRICS))
        if cell.metrics.get("answers_degenerate") and cell.answers_not_judged:    # judged before it was not
            cell.metrics.update(metrics.answer_figures(cell.requests()))
        return cell

    @property
    def answers_not_judged(self) -> str | None:
        """Why this cell's text is no model's answer (cells.answers_not_judged, from its own server spec)."""
        return answers_not_judged(self.server_spec)

    @staticmethod
    def finished(path: str | Path) -> bool:
        return (Path(path) / layout.METRICS).exists() and (Path(path) / layout.CONFIG).exists()

    @property
    def config(self) -> dict:
        if self._config is None:
            self._config = yaml.load((self.path / layout.CONFIG).read_text(), Loader=_Loader)
        return self._config

    @property
    def server_cell(self) -> str:
        return self.path.parent.name

    @property
    def bench_cell(self) -> str:
        return self.path.name

    @property
    def server_spec(self) -> dict:
        return self.config["server_spec"]

    @property
    def bench(self) -> dict:
        return self.config["bench_spec"]

    @property
    def valid(self) -> bool:
        return bool(self.metrics.get("valid"))

    @property
    def key(self) -> tuple:
        """What `compare` matches two studies' cells on: method, K, set acceptance, verification, K schedule,
        dataset, thinking, concurrency, ignore_eos (a baseline runs both where its study sets acceptance), the length
        axes (max_tokens, prompt_length), repeat (KEY names them)."""
        s, b = self.server_spec, self.bench
        return (s["method"], s["num_speculative_tokens"], _json(s.get("set_acceptance")),
                s.get("verification", "standard") if s["method"] != "none" else None, _json(s.get("k_schedule")),
                b["dataset"]["name"], b["thinking"], b["concurrency"], bool(b.get("ignore_eos", False)),
                *schedule.lengths_of(b), b["repeat"])

    @property
    def set_acceptance_source(self) -> dict | None:
        """Where a replay's rates came from (sweep.set_acceptance {rates_from: DIR}, replay_rates.rates_source), as its
        config.yaml records it; None for other cells, and for a replay of rates given as a list."""
        return self.config.get("set_acceptance_source")

    @property
    def round(self) -> int | None:
        """The block of time the cell ran in with its group (schedule.block: its repeat where the group was
        co-resident, its round where it was relaunched), or None where there is none to resample."""
        return schedule.block(self.config["job_config"].get("sweep", {}), int(self.bench["repeat"]))

    def requests(self) -> list[dict]:
        """requests.jsonl, or in a study kept in the repo (scripts/keep_study.sh) its gzipped copy."""
        if self._requests is None:
            path = self.path / layout.REQUESTS
            if not path.exists() and (self.path / layout.REQUESTS_KEPT).exists():
                with gzip.open(self.path / layout.REQUESTS_KEPT, "rt", encoding="utf-8") as f:
                    self._requests = [json.loads(line) for line in f if line.strip()]
            else:
                self._requests = read_jsonl(path)
            if why := self.answers_not_judged:     # also in requests written before the mark was (bench_cell)
                for r in self._requests:
                    r.setdefault("answer_not_judged", why)
        return self._requests

    def baseline(self) -> "Cell | None":
        """The matched baseline, finished: the same bench id under the baseline server cell (metrics.json's
        baseline_cell); None for a baseline itself or where it has not finished."""
        base = self.metrics.get("baseline_cell")
        if not base or base == self.server_cell:
            return None
        path = self.path.parent.parent / base / self.bench_cell
        return Cell.load(path) if (path / layout.METRICS).exists() else None

    def files(self) -> list[Path]:
        """The cell's files that exist, of those it keeps (layout.CELL_FILES)."""
        return [self.path / name for name in layout.CELL_FILES if (self.path / name).exists()]

    def times_ms(self) -> tuple[int, int]:
        """The cell's start and end in epoch ms: metrics.json's own, or for a cell measured before it recorded
        them, the times of its first file written (config.yaml) and its last (metrics.json)."""
        start = self.metrics.get("started_at") or (self.path / layout.CONFIG).stat().st_mtime
        end = self.metrics.get("finished_at") or (self.path / layout.METRICS).stat().st_mtime
        return int(start * 1000), int(end * 1000)


def grid_of(study_dir: Path) -> Grid:
    """The grid of a study folder, from the job configs its bench cells' config.yaml files hold."""
    configs = sorted(study_dir.glob(f"*/*/{layout.CONFIG}"))
    if not configs:
        raise ConfigError(f"{study_dir} holds no bench cells (*/*/{layout.CONFIG}): give a results/<study> folder")
    jobs = {}
    for f in configs:
        job = dict(yaml.load(f.read_text(), Loader=_Loader)["job_config"], results_dir=str(study_dir.resolve().parent))
        jobs[json.dumps(job, sort_keys=True, default=str)] = job
    return expand(list(jobs.values()))


class Study:
    """A study's finished bench cells, keyed by (server cell, bench cell), and its grid.

    Loaded with the workflow's grid, its cells are that grid's finished ones; loaded from the folder alone, they
    are every finished cell in it, and the grid is rebuilt from their job configs when first asked for (ingest;
    compare and tune need only the cells)."""

    def __init__(self, path: Path, cells: dict[tuple[str, str], Cell], grid: Grid | None = None):
        self.name, self.cells, self._grid = path.name, cells, grid
        self.files = layout.StudyFiles(path)
        self._groups: dict[tuple, list[str]] | None = None

    @classmethod
    def load(cls, path: str | Path, grid: Grid | None = None) -> "Study":
        """The study in folder `path` (results/<study>); `grid`: the workflow's grid."""
        path = Path(path)
        if grid is not None:
            grid = grid.of_study(path.name)
            return cls(path, {(sid, bid): Cell.load(grid.bench_dir(sid, bid))
                              for sid, bid in grid.cells_of_study(path.name) if grid.metrics_path(sid, bid).exists()},
                       grid)
        found = sorted(m.parent for m in path.glob(f"*/*/{layout.METRICS}") if Cell.finished(m.parent))
        if not found and not any(path.glob(f"*/*/{layout.CONFIG}")):
            raise ConfigError(f"{path} is neither a study directory nor one that holds a bench cell (results/<study>/"
                              f"<server cell>/<bench cell>/{layout.CONFIG}): give a results/<study> folder")
        return cls(path, {(c.parent.name, c.name): Cell.load(c) for c in found})

    @property
    def grid(self) -> Grid:
        if self._grid is None:
            grid = grid_of(self.dir)
            if grid.studies() != [self.name]:
                raise ConfigError(f"{self.dir}: its cells' {layout.CONFIG} name study {', '.join(grid.studies())}, "
                                  f"not {self.name}: keep a study in the folder named after it")
            self._grid = grid
        return self._grid

    @property
    def dir(self) -> Path:
        return self.files.dir

    @property
    def groups(self) -> dict[tuple, list[str]]:
        """(server cell, dataset, thinking, concurrency, lengths, ignore_eos) -> the bench ids of its finished
        repeats; lengths is (max_tokens, prompt_length) (schedule.setting), so each output and prompt length is a row
        of its own, and so is each ignore_eos of a set-acceptance study's baseline."""
        if self._groups is None:
            self._groups = {}
            for sid, bid in self.cells:
                bench = self.grid.benches[sid][bid].spec
                self._groups.setdefault((sid, *schedule.setting(bench)), []).append(bid)
        return self._groups

    def metrics(self, sid: str, bid: str) -> dict | None:
        cell = self.cells.get((sid, bid))
        return cell.metrics if cell else None

    def valid(self, sid: str, bid: str) -> bool:
        cell = self.cells.get((sid, bid))
        return bool(cell and cell.valid)

    def requests(self, sid: str, bid: str) -> list[dict]:
        return self.cells[sid, bid].requests()

    def runs(self, sid: str, bids: list[str]) -> list[list[dict]]:
        """Request rows of the cell's valid repeats among these bench ids, in bench-id order."""
        return [self.requests(sid, b) for b in sorted(bids) if self.valid(sid, b)]

    def paired_runs(self, sid: str, ref: str, bids: list[str]) -> tuple[list[list[dict]], list[list[dict]]]:
        """Each side's request rows per repeat, in repeat order ([] where either side's repeat is not valid): the
        blocks an `auto` rule reads (sequential.block_log_ratios)."""
        def by_repeat(s: str) -> list[list[dict]]:
            return [self.requests(s, b) if self.valid(s, b) and self.valid(ref if s == sid else sid, b) else []
                    for b in sorted(bids, key=lambda b: self.grid.benches[sid][b].spec["repeat"])]
        return by_repeat(sid), by_repeat(ref)

    def rounds(self, pairs: tuple[tuple[str, list[str]], tuple[str, list[str]]]):
        """The block (schedule.block_of) of each run `runs` gives, per side ((sid, bids) of the cell and of its
        reference), for the paired bootstrap (stats.speedup_ci); None where a side has no blocks."""
        blocks = tuple([schedule.block_of(self.grid, sid, b) for b in sorted(bids) if self.valid(sid, b)] for sid, bids in pairs)
        return None if any(b is None for side in blocks for b in side) else blocks

    def baseline(self, cell: Cell) -> Cell | None:
        """A cell's matched baseline among the study's finished cells (metrics.json's baseline_cell)."""
        base = cell.metrics.get("baseline_cell")
        return None if not base or base == cell.server_cell else self.cells.get((base, cell.bench_cell))

    def launches(self, sid: str) -> list[dict]:
        """The server cell's launch records (server.json, one per launch, oldest first); none where no server was
        launched (the local engine runs inside the job)."""
        return launches(self.grid.log_dir(sid))

    def diagnosis(self, sid: str) -> dict | None:
        """The server cell's diagnosis.json (the diagnose rule's, counterfactuals.py), or None where it has none."""
        path = self.grid.diagnosis_path(sid)
        return read_json(path) if path.exists() else None

    def unfinished(self) -> list[str]:
        """The server cells with a bench cell still to run."""
        return [sid for sid in self.grid.servers if schedule.pending(self.grid, sid)]

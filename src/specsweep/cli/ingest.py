"""`specsweep ingest`: log finished studies copied from another host into MLflow."""
from __future__ import annotations

import json
from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError


def add(sub) -> None:
    ig = sub.add_parser("ingest", help="log finished studies copied from another host (tracking=off there) into MLflow")
    ig.add_argument("study_dirs", nargs="+", help="results/<study> folders, copied whole")
    ig.add_argument("--uri", default=None, help=f"an MLflow tracking URI (default: sqlite:///<results>/{layout.MLFLOW_DB})")
    ig.add_argument("--experiment", default="specsweep")
    ig.set_defaults(fn=main)


def main(args) -> int:
    """Log finished studies into MLflow that ran elsewhere (a GPU host with tracking=off), copied here whole:
    each bench cell's config.yaml holds the composed job it came from, so Study.load rebuilds the grid from them."""
    from specsweep.read.study import Study
    from specsweep.read.tracking import ingest

    for study_dir in map(Path, args.study_dirs):
        results = Study.load(study_dir)
        grid, study, sf = results.grid, results.name, results.files
        grid.tracking[study] = {"enabled": True, "uri": args.uri, "experiment": args.experiment}
        missing = results.unfinished()
        files = [sf.summary, sf.k_comparison, sf.by_category, sf.plots, sf.env]
        if missing or not all(f.exists() for f in files):
            raise ConfigError(f"{study_dir} is not a finished study ({', '.join(missing) or 'no summary'}): finish it "
                              "with snakemake where it ran, then copy the whole results/<study> folder")
        prompts = sorted({grid.dataset_file(b.spec["dataset"])
                          for cells in grid.benches.values() for b in cells.values()})
        absent = [p for p in prompts if not Path(p).exists()]
        if absent:     # MLflow's dataset input is the prompts file's digest
            raise ConfigError(f"{absent[0]} is missing: copy {Path(absent[0]).parent.name} (results/"
                              f"{Path(absent[0]).parent.name}/) beside results/<study> too")
        out = ingest(results, *files, grid.mlflow_marker(study))
        print(f"specsweep: {study}: {json.dumps(out)}")
    return 0

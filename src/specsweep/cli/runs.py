"""What `sweep`, `cells` and `tune --verify` share: Hydra's multirun expansion of overrides, and resolved study
configs run through the Snakemake DAG."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from specsweep.core import layout
from specsweep.core.errors import ConfigError
from specsweep.core.paths import REPO


def expand_multirun(overrides: list[str]) -> list[list[str]]:
    """Hydra's own multirun expansion: `a=1,2 b=x,y` -> four override lists."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise ConfigError(f"config: {' '.join(str(e).split())[:300]}") from None
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


def override_runs(args) -> list[list[str]]:
    """The override lists of `sweep` and `cells`: the main ones, and each --also group on top of them (a grid
    that is no product of axes, e.g. K=3,7,15 plus K=15 with set acceptance), each expanded by -m."""
    groups = [args.overrides] + [args.overrides + shlex.split(more) for more in args.also]
    return [run for ov in groups for run in (expand_multirun(ov) if args.multirun else [ov])]


def run_jobs(jobs: list[dict], cores: int, snakemake_args: list[str], what: str) -> int:
    """Resolved study configs through the Snakemake DAG, by way of a jobs file."""
    from specsweep.core.results import atomic_write_yaml
    from specsweep.grid.cells import expand, stable_hash

    grid = expand(jobs)   # validates the whole grid before Snakemake starts
    jobs_file = layout.jobs_file(grid.results_dir, stable_hash(jobs)[:12])
    atomic_write_yaml(jobs_file, jobs)
    snakemake = Path(sys.executable).parent / "snakemake"
    # this Python's own Snakemake: its script, or the module where it was installed without one (--target)
    argv = [str(snakemake)] if snakemake.exists() else [sys.executable, "-m", "snakemake"]
    argv += ["--cores", str(cores),
             "--config", f"jobs_file={jobs_file.resolve()}"] + snakemake_args
    print(f"specsweep: {what}, {len(grid.servers)} server cells, "
          f"{sum(len(b) for b in grid.benches.values())} bench cells -> {' '.join(argv)}", flush=True)
    return subprocess.call(argv, cwd=REPO)

"""The results tree: every file and folder name under `results/`, and where each lies (docs/reference.md).

This module is the one place that spells them; the library, the rules and the scripts ask it
(`tests/test_layout.py` checks that nothing else in `src/` or `workflow/` does). It knows names and shapes,
not ids: `cells.Grid` owns the server and bench cell ids and asks this module where a cell's files lie.
It imports nothing of specsweep, so every module can use it.

```
<results>/<study>/                        StudyFiles: env.json, summary.csv, launches.json, k_comparison.csv, summary_by_category.csv,
                                          tune.csv, tune.yaml, tune_verify.csv, plots/, pages/, logs/, mlflow-<store>.done
<results>/<study>/<server cell>/          logs/ (server-*.log, server.json, job-*.log), runs/<todo>.done, cells-<set>.done,
                                          acceptance-<settings>.json, diagnosis.json, looks.json, look_plan.json, launch_sd.json, counterfactuals/ (drafters/<tag>/,
                                          <cf cell>/<bench>/)
<results>/<study>/<server cell>/<bench>/  config.yaml, requests.jsonl, metrics.json, failed.json, not_needed.json, server.log
<results>/datasets/, models/tiny/, sweeps/, mlflow.db, mlartifacts/; vLLM's compile cache is per host (vllm_cache)
```
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# ---- a bench cell's files ---------------------------------------------------------------------------------
CONFIG = "config.yaml"            # the resolved config: both cell specs, ids and the job config; written first
REQUESTS = "requests.jsonl"       # one record per request (prompt x turn)
REQUESTS_KEPT = "requests.jsonl.gz"   # the same, gzipped, in a study kept in the repo (scripts/keep_study.sh)
METRICS = "metrics.json"          # the cell's figures; written last: the cell is finished when it exists
FAILED = "failed.json"            # why a cell's figures cannot be trusted (its kept requests stay)
NOT_NEEDED = "not_needed.json"    # sweep.repeats=auto: a repeat its group did not need (repeats.py), in place of metrics
LOOKS = "looks.json"              # sweep.repeats=auto: a group's last look, in its lead's folder (looks.py)
LOOK_PLAN = "look_plan.json"      # sweep.looks=planned: the plan a group first looked by, in its lead's folder (looks.py)
LAUNCH_SD = "launch_sd.json"      # the launch SD a group carries, pinned when its job starts (launch_record.py)
SERVER_LOG_LINK = "server.log"    # a link to the launch's log
CELL_FILES = (METRICS, REQUESTS, CONFIG, SERVER_LOG_LINK)     # what a cell keeps as artifacts (MLflow)

# ---- a server cell's files --------------------------------------------------------------------------------
LOGS = "logs"                     # also a study's: its rules' logs
SERVER_RECORD = "server.json"     # the launch record: PID, process group, argv, readiness
RUNS = "runs"                     # the server job's run markers
ACCEPTANCE = "acceptance-{}.json"  # a speculative cell's pooled acceptance per bench group: is a diagnosis needed?
DIAGNOSIS = "diagnosis.json"      # why a speculative cell's acceptance is low (the diagnose rule)
COUNTERFACTUALS = "counterfactuals"  # the diagnosis's counterfactual cells and doctored drafters
DRAFTERS = "drafters"             # under counterfactuals/: one doctored drafter per counterfactual tag

# ---- a study's files --------------------------------------------------------------------------------------
ENV = "env.json"
SUMMARY = "summary.csv"
LAUNCHES_RECORD = "launches.json"  # a study's launches: each comparison's repeat blocks, for later studies (launch_record)
K_COMPARISON = "k_comparison.csv"
BY_CATEGORY = "summary_by_category.csv"
TUNE_TABLE = "tune.csv"
TUNE_MAPPING = "tune.yaml"
TUNE_VERIFY = "tune_verify.csv"
PLOTS = "plots"
PLOT_SUFFIX = ".png"
PAGES = "pages"
SUMMARY_PAGE = "summary.html"
ENV_PAGE = "env.html"
LAUNCHES = "launches"
PAGE_SUFFIX = ".html"

# ---- beside the studies -----------------------------------------------------------------------------------
DATASETS = "datasets"
MODELS = "models"
TINY = "tiny"
TRAIN_REPORT = "train.json"       # a tiny model's training record
TRAINING_PAGE = "training.html"
SWEEPS = "sweeps"                 # the jobs files `specsweep sweep` hands Snakemake
MLFLOW_DB = "mlflow.db"           # the default MLflow store
MLARTIFACTS = "mlartifacts"       # its artifacts
VLLM_CACHE = ".vllm-cache"        # where VLLM_CACHE_ROOT was, per results folder, before vllm_cache()
VLLM_CACHE_ENV = "SPECSWEEP_VLLM_CACHE"    # the host's vLLM cache root, where not the default (vllm_cache)
MARKER_SUFFIX = ".done"
LOG_SUFFIX = ".log"
INPUTS_SUFFIX = ".inputs.json"    # beside a derived table (tune.csv, compare.csv, ...): its settings and input cells

# What tests/test_layout.py looks for outside this module: each file name, and each folder name where it is a
# part of a path. (A checkpoint's config.json and tokenizer.json are Hugging Face's names, read in any
# checkpoint, so they are not in it.)
FILE_NAMES = (CONFIG, REQUESTS_KEPT, REQUESTS, METRICS, FAILED, SERVER_LOG_LINK, SERVER_RECORD, ACCEPTANCE, DIAGNOSIS,
              ENV, SUMMARY, K_COMPARISON, BY_CATEGORY, TUNE_TABLE, TUNE_MAPPING, TUNE_VERIFY, SUMMARY_PAGE, ENV_PAGE,
              TRAIN_REPORT,
              TRAINING_PAGE, MLFLOW_DB)
DIR_NAMES = (LOGS, RUNS, COUNTERFACTUALS, DRAFTERS, PLOTS, PAGES, LAUNCHES, DATASETS, SWEEPS, MLARTIFACTS,
             VLLM_CACHE)   # not MODELS: /v1/models
SUFFIXES = (PLOT_SUFFIX, MARKER_SUFFIX, LOG_SUFFIX, INPUTS_SUFFIX)


# ---- where things lie -------------------------------------------------------------------------------------
def inputs_of(table_path: str | Path) -> Path:
    """The record beside a derived table (tune.csv: tune.inputs.json): the settings and the input cells it used."""
    path = Path(table_path)
    return path.with_name(path.name.rsplit(".", 1)[0] + INPUTS_SUFFIX)


def study_dir(results_dir: str | Path, study: str) -> Path:
    return Path(results_dir) / study


def server_dir(results_dir: str | Path, study: str, sid: str) -> Path:
    return study_dir(results_dir, study) / sid


def bench_dir(results_dir: str | Path, study: str, sid: str, bid: str) -> Path:
    return server_dir(results_dir, study, sid) / bid


def run_marker(server: Path, todo: str) -> Path:
    """A group's job output in its lead server cell's folder: `runs/<todo>.done`."""
    return server / RUNS / f"{todo}{MARKER_SUFFIX}"


def cells_done(server: Path, cellset: str) -> Path:
    """The marker that a server cell's bench cells (the set named by cellset) are all finished."""
    return server / f"cells-{cellset}{MARKER_SUFFIX}"


def acceptance(server: Path, settings: str) -> Path:
    """Whether a speculative server cell needs a diagnosis: `acceptance-<settings>.json` in its folder, named after
    the sweep.diagnose settings it was decided with (Grid.acceptance_path)."""
    return Path(server) / ACCEPTANCE.format(settings)


def diagnosis(server: Path) -> Path:
    """A speculative server cell's diagnosis: `diagnosis.json` in its folder."""
    return Path(server) / DIAGNOSIS


def counterfactual_dir(server: Path, cf_sid: str) -> Path:
    """A counterfactual server cell's folder, under the cell it diagnoses: `counterfactuals/<cf cell>/`."""
    return Path(server) / COUNTERFACTUALS / cf_sid


def doctored_drafter(server: Path, tag: str) -> Path:
    """A doctored drafter (edited config.json, linked weights): `counterfactuals/drafters/<tag>/`."""
    return Path(server) / COUNTERFACTUALS / DRAFTERS / tag


def server_log(log_dir: Path, stamp: str, pid: int, rand: str) -> Path:
    """One launch's log: `server-<time>-<pid>-<rand>.log`."""
    return log_dir / f"server-{stamp}-{pid}-{rand}{LOG_SUFFIX}"


def log(folder: str | Path, name: str) -> Path:
    """A job's log in a folder's logs/: `logs/<name>.log`."""
    return Path(folder) / LOGS / f"{name}{LOG_SUFFIX}"


def dataset_file(results_dir: str | Path, stem: str) -> Path:
    """A materialised prompts file, `datasets/<name>-<hash>.jsonl` (stem: `<name>-<hash>`)."""
    return Path(results_dir) / DATASETS / f"{stem}.jsonl"


def dataset_log(results_dir: str | Path, stem: str) -> Path:
    return Path(results_dir) / DATASETS / f"{stem}{LOG_SUFFIX}"


def jobs_file(results_dir: str | Path, key: str) -> Path:
    return Path(results_dir) / SWEEPS / f"{key}.yaml"


def mlflow_db(results_dir: str | Path) -> Path:
    return Path(results_dir) / MLFLOW_DB


def mlartifacts(results_dir: str | Path) -> Path:
    return Path(results_dir) / MLARTIFACTS


def vllm_cache() -> Path:
    """vLLM's cache root (VLLM_CACHE_ROOT) for every launch on this host: $SPECSWEEP_VLLM_CACHE, else
    $XDG_CACHE_HOME/specsweep/vllm (~/.cache/specsweep/vllm). One root serves every shape: vLLM keys each compiled
    graph by a hash of its config, code and compiler, and each speculative method and K compiles into a folder of its
    own below it (backends/vllm/session.compile_folder; docs/residency.md#the-compile-cache)."""
    if os.environ.get(VLLM_CACHE_ENV):
        return Path(os.environ[VLLM_CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specsweep" / "vllm"


def plot_file(plots: str | Path, name: str) -> Path:
    """A plot in a study's plots/: `<name>.png`."""
    return Path(plots) / f"{name}{PLOT_SUFFIX}"


def plot_pattern() -> str:
    """The plots folder's file pattern for Snakemake's report."""
    return "{name}" + PLOT_SUFFIX


def launch_page(launches: str | Path, sid: str) -> Path:
    return Path(launches) / f"{sid}{PAGE_SUFFIX}"


def launch_page_pattern() -> str:
    return "{server}" + PAGE_SUFFIX


@dataclass(frozen=True)
class StudyFiles:
    """A study's own files. Its folder may be a Snakemake pattern (`results/{study}`)."""
    dir: Path

    @property
    def env(self) -> Path:
        return self.dir / ENV

    @property
    def summary(self) -> Path:
        return self.dir / SUMMARY

    @property
    def k_comparison(self) -> Path:
        return self.dir / K_COMPARISON

    @property
    def by_category(self) -> Path:
        return self.dir / BY_CATEGORY

    @property
    def tune_table(self) -> Path:
        return self.dir / TUNE_TABLE

    @property
    def tune_mapping(self) -> Path:
        return self.dir / TUNE_MAPPING

    @property
    def tune_verify(self) -> Path:
        return self.dir / TUNE_VERIFY

    @property
    def plots(self) -> Path:
        return self.dir / PLOTS

    @property
    def pages(self) -> Path:
        return self.dir / PAGES

    @property
    def summary_page(self) -> Path:
        return self.pages / SUMMARY_PAGE

    @property
    def env_page(self) -> Path:
        return self.pages / ENV_PAGE

    @property
    def launches(self) -> Path:
        return self.pages / LAUNCHES

    def log(self, name: str) -> Path:
        return log(self.dir, name)

    def mlflow_marker(self, store: str) -> Path:
        """The ingest rule's output, one per tracking store."""
        return self.dir / f"mlflow-{store}{MARKER_SUFFIX}"


def study_files(results_dir: str | Path, study: str) -> StudyFiles:
    return StudyFiles(study_dir(results_dir, study))


@dataclass(frozen=True)
class TinyPair:
    """The embedded pair the workflow builds: `models/tiny/{tokenizer,target,drafter}/`."""
    dir: Path

    @property
    def tokenizer(self) -> Path:
        return self.dir / "tokenizer"

    @property
    def target(self) -> Path:
        return self.dir / "target"

    @property
    def drafter(self) -> Path:
        return self.dir / "drafter"

    @property
    def tokenizer_file(self) -> Path:
        return self.tokenizer / "tokenizer.json"       # Hugging Face's name

    @staticmethod
    def config(model: Path) -> Path:
        return model / "config.json"                   # Hugging Face's name

    @staticmethod
    def train_report(model: Path) -> Path:
        return model / TRAIN_REPORT

    @property
    def training_page(self) -> Path:
        return self.dir / TRAINING_PAGE

    def log(self, name: str) -> Path:
        return log(self.dir, name)


def tiny_pair(results_dir: str | Path) -> TinyPair:
    return TinyPair(Path(results_dir) / MODELS / TINY)

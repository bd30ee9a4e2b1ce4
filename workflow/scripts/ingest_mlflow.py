from specsweep import snakejob, tracking

snakejob.run(snakemake.log[0], lambda: tracking.ingest(
    snakemake.params.grid, snakemake.wildcards.study, snakemake.input.summary,
    snakemake.input.plots, snakemake.input.env, snakemake.output[0]))

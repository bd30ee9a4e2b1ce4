from specsweep import snakejob, summary

snakejob.run(snakemake.log[0], lambda: summary.write_summary(snakemake.params.grid, snakemake.wildcards.study,
                                                             snakemake.output[0]))

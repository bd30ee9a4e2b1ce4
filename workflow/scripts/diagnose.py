from specsweep import counterfactuals, snakejob

snakejob.run(snakemake.log[0], lambda: counterfactuals.diagnose(snakemake.params.grid, snakemake.wildcards.server,
                                                                snakemake.output[0], snakemake.input.env))

from specsweep import runner, snakejob

snakejob.run(snakemake.log[0], lambda: runner.run_group(snakemake.params.grid, snakemake.wildcards.server,
                                                        snakemake.output[0]))

from specsweep import counterfactuals, runner, snakejob

# a low thinking-on cell's counterfactual without thinking runs on the cell's own server (counterfactuals.on_own_server)
snakejob.run(snakemake.log[0], lambda: runner.run_group(snakemake.params.grid, snakemake.wildcards.server,
                                                        snakemake.output[0], also=counterfactuals.on_own_server))

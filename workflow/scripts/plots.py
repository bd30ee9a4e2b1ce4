from specsweep import plots, snakejob

snakejob.run(snakemake.log[0], lambda: plots.plot_study(snakemake.input.summary, snakemake.input.by_category,
                                                        snakemake.output[0]))

from specsweep import report, snakejob

snakejob.run(snakemake.log[0], lambda: report.plot_study(snakemake.input.summary, snakemake.output[0]))

from pathlib import Path

from specsweep import report, snakejob

snakejob.run(snakemake.log[0], lambda: report.plot_study(snakemake.input.summary,
                                                         str(Path(snakemake.output[0]).parent)))

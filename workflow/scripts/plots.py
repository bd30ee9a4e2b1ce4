from pathlib import Path

from specsweep import report, snakejob

snakejob.run(snakemake.log[0], lambda: report.plot_study(snakemake.input[0], str(Path(snakemake.output[0]).parent)))

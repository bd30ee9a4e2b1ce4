from pathlib import Path

from specsweep import report, snakejob

snakejob.run(snakemake.log[0], lambda: report.write_report(snakemake.params.grid, snakemake.wildcards.study,
                                                           snakemake.output.summary,
                                                           str(Path(snakemake.output.plots).parent)))

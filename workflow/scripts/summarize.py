import sys
from pathlib import Path

from specsweep import snakejob, summary

snakejob.run(snakemake.log[0], lambda: summary.write_summary(snakemake.params.grid, snakemake.wildcards.study,
                                                             snakemake.output.summary))
sys.stderr.write(Path(snakemake.log[0]).read_text())   # the verdicts, where the user sees them

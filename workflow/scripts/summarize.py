import sys
from pathlib import Path

from specsweep import snakejob, summary
from specsweep.study import Study

snakejob.run(snakemake.log[0], lambda: summary.write_summary(
    Study.load(snakemake.params.dir, snakemake.params.grid), snakemake.output.summary, snakemake.output.k_comparison,
    snakemake.output.by_category))
sys.stderr.write(Path(snakemake.log[0]).read_text())   # the verdicts, where the user sees them

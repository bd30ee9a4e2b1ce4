import sys
from pathlib import Path

from specsweep.read import plots, summary
from specsweep import snakejob
from specsweep.read.study import Study


def summarize_and_plot():
    out = snakemake.output
    summary.write_summary(Study.load(snakemake.params.dir, snakemake.params.grid), out.summary, out.k_comparison,
                          out.by_category)
    plots.plot_study(out.summary, out.by_category, out.plots)


snakejob.run(snakemake.log[0], summarize_and_plot)
sys.stderr.write(Path(snakemake.log[0]).read_text())   # the verdicts, where the user sees them

import contextlib
import io

from specsweep.read import plots, summary
from specsweep import snakejob
from specsweep.core import progress
from specsweep.read.study import Study


def summarize_and_plot():
    out = snakemake.output
    verdicts = io.StringIO()
    with contextlib.redirect_stdout(verdicts):
        summary.write_summary(Study.load(snakemake.params.dir, snakemake.params.grid), out.summary,
                              out.k_comparison, out.by_category)
    for line in verdicts.getvalue().splitlines():      # the verdicts, where the user sees them, and in the log
        progress.say(line)
    plots.plot_study(out.summary, out.by_category, out.plots)


snakejob.run(snakemake.log[0], summarize_and_plot)

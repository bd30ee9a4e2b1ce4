# The study's tables and plots, in one job: summary.csv (one row per cell, with the paired speedup's CI and verdict),
# k_comparison.csv (K against K) and summary_by_category.csv, then the plots drawn from them; the job prints the
# verdicts. One job, not two: each is a Python start-up and its imports on the chain to the MLflow ingest
# (docs/campaigns/2026-12-03-small-grid.md#2026-12-03-later-members-started-two-at-a-time-summary-and-plots-in-one-job).
# The plots are a directory with a pattern, so the report shows each
# plot the study has (the category heatmap only for a dataset with categories), with its caption from plots.rst.
rule summarize:
    input:
        cells=lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
        diagnoses=lambda w: diagnoses_of(w.study),
    output:
        summary=STUDY.summary,
        k_comparison=STUDY.k_comparison,
        by_category=STUDY.by_category,
        plots=report(
            directory(STUDY.plots),
            patterns=[layout.plot_pattern()],
            caption="../report/plots.rst",
            category="Plots",
            subcategory="{study}",
            labels=plot_labels,
        ),
    log:
        STUDY.log("summarize"),
    params:
        grid=lambda w: GRID.of_study(w.study),
        dir=lambda w: GRID.study_files(w.study).dir,
    script:
        "../scripts/summarize.py"

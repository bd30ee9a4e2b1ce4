# The study's tables: summary.csv (one row per cell, with the paired speedup's CI and verdict),
# k_comparison.csv (K against K) and summary_by_category.csv; the job prints the verdicts.
rule summarize:
    input:
        cells=lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
        diagnoses=lambda w: diagnoses_of(w.study),
    output:
        summary=STUDY.summary,
        k_comparison=STUDY.k_comparison,
        by_category=STUDY.by_category,
    log:
        STUDY.log("summarize"),
    params:
        grid=lambda w: GRID.of_study(w.study),
        dir=lambda w: GRID.study_files(w.study).dir,
    script:
        "../scripts/summarize.py"


# Declared as a directory with a pattern, so the report shows each plot the study has (the category heatmap
# only for a dataset with categories), with its caption from plots.rst.
rule plots:
    input:
        summary=STUDY.summary,
        by_category=STUDY.by_category,
    output:
        report(
            directory(STUDY.plots),
            patterns=[layout.plot_pattern()],
            caption="../report/plots.rst",
            category="Plots",
            subcategory="{study}",
            labels=plot_labels,
        ),
    log:
        STUDY.log("plots"),
    script:
        "../scripts/plots.py"

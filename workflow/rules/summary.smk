# The study's tables: summary.csv (one row per cell, with the paired speedup's CI and verdict),
# k_comparison.csv (K against K) and summary_by_category.csv; the job prints the verdicts.
rule summarize:
    input:
        lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
    output:
        summary=f"{RESULTS}/{{study}}/summary.csv",
        k_comparison=f"{RESULTS}/{{study}}/k_comparison.csv",
        by_category=f"{RESULTS}/{{study}}/summary_by_category.csv",
    log:
        f"{RESULTS}/{{study}}/logs/summarize.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/summarize.py"


# Declared as a directory with a pattern, so the report shows each plot the study has (the category heatmap
# only for a dataset with categories), with its caption from plots.rst.
rule plots:
    input:
        summary=f"{RESULTS}/{{study}}/summary.csv",
        by_category=f"{RESULTS}/{{study}}/summary_by_category.csv",
    output:
        report(
            directory(f"{RESULTS}/{{study}}/plots"),
            patterns=["{name}.png"],
            caption="../report/plots.rst",
            category="Plots",
            subcategory="{study}",
            labels=plot_labels,
        ),
    log:
        f"{RESULTS}/{{study}}/logs/plots.log",
    script:
        "../scripts/plots.py"

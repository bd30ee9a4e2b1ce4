# What `snakemake --report results/<study>/report.html` shows besides the plots: HTML pages of the study's
# records (the report renders HTML and images in place, and offers CSV and JSON only as downloads).
# Its labels come from common.smk.


rule report_pages:
    input:
        cells=lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
        summary=f"{RESULTS}/{{study}}/summary.csv",
        k_comparison=f"{RESULTS}/{{study}}/k_comparison.csv",
        env=f"{RESULTS}/{{study}}/env.json",
    output:
        summary=report(
            f"{RESULTS}/{{study}}/pages/summary.html",
            caption="../report/summary.rst",
            category="Summary",
            subcategory="{study}",
            labels=lambda w: study_labels(w.study),
        ),
        env=report(
            f"{RESULTS}/{{study}}/pages/env.html",
            caption="../report/env.rst",
            category="Environment",
            subcategory="{study}",
            labels=lambda w: study_labels(w.study),
        ),
        launches=report(
            directory(f"{RESULTS}/{{study}}/pages/launches"),
            patterns=["{server}.html"],
            caption="../report/launch.rst",
            category="Server launches",
            subcategory="{study}",
            labels=launch_labels,
        ),
    log:
        f"{RESULTS}/{{study}}/logs/report_pages.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/report_pages.py"


rule training_page:
    input:
        target=rules.tiny_target.output.report,
        drafter=rules.tiny_drafter.output.report,
    output:
        report(
            f"{TINY}/training.html",
            caption="../report/training.rst",
            category="Tiny pair",
            labels={"pair": "tiny", "figure": "training"},
        ),
    log:
        f"{TINY}/logs/training_page.log",
    script:
        "../scripts/training_page.py"

# What `snakemake --report results/<study>/report.html` shows besides the plots: HTML pages of the study's
# records (the report renders HTML and images in place, and offers CSV and JSON only as downloads).
# Its labels come from common.smk.


rule report_pages:
    input:
        cells=lambda w: [str(GRID.cells_done(sid)) for sid in server_cells_of(w.study)],
        diagnoses=lambda w: diagnoses_of(w.study),
        summary=STUDY.summary,
        k_comparison=STUDY.k_comparison,
        env=STUDY.env,
    output:
        summary=report(
            STUDY.summary_page,
            caption="../report/summary.rst",
            category="Summary",
            subcategory="{study}",
            labels=lambda w: study_labels(w.study),
        ),
        env=report(
            STUDY.env_page,
            caption="../report/env.rst",
            category="Environment",
            subcategory="{study}",
            labels=lambda w: study_labels(w.study),
        ),
        launches=report(
            directory(STUDY.launches),
            patterns=[layout.launch_page_pattern()],
            caption="../report/launch.rst",
            category="Server launches",
            subcategory="{study}",
            labels=launch_labels,
        ),
    log:
        STUDY.log("report_pages"),
    params:
        grid=lambda w: GRID.of_study(w.study),
        dir=lambda w: GRID.study_files(w.study).dir,
    script:
        "../scripts/report_pages.py"


rule training_page:
    input:
        target=rules.tiny_target.output.report,
        drafter=rules.tiny_drafter.output.report,
    output:
        report(
            TINY.training_page,
            caption="../report/training.rst",
            category="Tiny pair",
            labels={"pair": "tiny", "figure": "training"},
        ),
    log:
        TINY.log("training_page"),
    script:
        "../scripts/training_page.py"

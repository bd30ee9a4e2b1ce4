# The single MLflow writer: one run per configuration (a summary.csv row) and one per study, idempotent by id.
# Its marker names the tracking store (GRID.mlflow_marker), so a store that was down when cells finished is
# ingested later.


rule ingest_mlflow:
    input:
        summary=STUDY.summary,
        k_comparison=STUDY.k_comparison,
        by_category=STUDY.by_category,
        plots=STUDY.plots,
        env=STUDY.env,
    output:
        STUDY.mlflow_marker("{store}"),
    log:
        STUDY.log("ingest_mlflow-{store}"),
    params:
        grid=lambda w: GRID.of_study(w.study),
        dir=lambda w: GRID.study_files(w.study).dir,
    script:
        "../scripts/ingest_mlflow.py"

# The single MLflow writer: one parent run per study, one child per bench cell, idempotent by cell id.
rule ingest_mlflow:
    input:
        summary=RESULTS + "/{study}/summary.csv",
        plots=RESULTS + "/{study}/plots/done",
        env=RESULTS + "/{study}/env.json",
    output:
        RESULTS + "/{study}/mlflow.done",
    log:
        RESULTS + "/{study}/logs/ingest_mlflow.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/ingest_mlflow.py"

# The single MLflow writer: one run per configuration (a summary.csv row) and one per study, idempotent by id.
# Its marker names the tracking store, so a store that was down when cells finished is ingested later.
from specsweep.tracking import marker as mlflow_marker


rule ingest_mlflow:
    input:
        summary=f"{RESULTS}/{{study}}/summary.csv",
        plots=f"{RESULTS}/{{study}}/plots",
        env=f"{RESULTS}/{{study}}/env.json",
    output:
        f"{RESULTS}/{{study}}/mlflow-{{store}}.done",
    log:
        f"{RESULTS}/{{study}}/logs/ingest_mlflow-{{store}}.log",
    params:
        grid=lambda w: GRID.of_study(w.study),
    script:
        "../scripts/ingest_mlflow.py"

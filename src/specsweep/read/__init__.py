"""A study read back: `study` (the one reader on disk), the summary tables, the ceiling, plots and pages, MLflow
(`mlflow_runs`, `tracking`), `compare`, `predictions` and `tune`."""

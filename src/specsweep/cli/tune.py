"""`specsweep tune`: predict AL, TPOT and speedup for every K up to a study's largest; recommend K."""
from __future__ import annotations

import os
from pathlib import Path

from specsweep.cli.runs import run_jobs
from specsweep.core import layout
from specsweep.core.errors import ConfigError


def add(sub) -> None:
    tu = sub.add_parser("tune", help="predict AL, TPOT and speedup for every K up to a study's largest; "
                                     "recommend K per concurrency")
    tu.add_argument("study", help="results/<study>: its largest K at each concurrency, and for a recommendation "
                                  "the baseline and at least two K")
    tu.add_argument("--verify", action="store_true",
                    help="run the recommended K and one each side through the DAG; report predicted vs measured")
    tu.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    tu.set_defaults(fn=main)


TUNE_COLUMNS = {"dataset": "dataset", "thinking": "think", "concurrency": "c", "k": "K",
                "predicted_al": "AL pred", "predicted_al_ci_low": "AL lo", "predicted_al_ci_high": "AL hi",
                "predicted_al_calibrated": "AL cal", "measured_al": "AL meas", "ms_per_token_figure": "ms/token figure",
                "predicted_ms_per_token": "ms/token pred", "measured_ms_per_token": "ms/token meas",
                "predicted_speedup": "speedup pred", "measured_speedup": "speedup meas", "recommended": "best"}
VERIFY_COLUMNS = {"dataset": "dataset", "thinking": "think", "concurrency": "c", "k": "K", "recommended": "best",
                  "in_study_before": "measured before", "predicted_al": "AL pred",
                  "predicted_al_calibrated": "AL cal", "measured_al": "AL meas", "al_error": "AL err",
                  "al_calibrated_error": "AL cal err", "predicted_speedup": "speedup pred", "measured_speedup": "speedup meas",
                  "speedup_error": "speedup err"}


def _print_table(rows: list[dict], columns: dict[str, str]) -> None:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(columns)).rename(columns=columns)
    for name in frame.columns:       # a figure column with gaps (None) prints as '-', like NaN
        if frame[name].dtype == object and all(v is None or isinstance(v, float) for v in frame[name]):
            frame[name] = pd.to_numeric(frame[name])
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-"))


def main(args) -> int:
    """Predict AL, TPOT and speedup for every K up to a study's largest, recommend K per concurrency, verify."""
    from specsweep.core import derived_tables, table
    from specsweep.read import tune

    study = Path(args.study)
    files = layout.StudyFiles(study)
    rows, mapping, notes = tune.write_tune(study)
    _print_table(rows, TUNE_COLUMNS)
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {files.tune_table} and {files.tune_mapping}")
    if mapping:
        print(f"recommended: {tune.override(mapping)}")
        print(f"as vLLM's dynamic K (one cell beside the fixed Ks): {tune.schedule_override(mapping)}")
    if not args.verify:
        return 0
    if not mapping:
        raise ConfigError(f"tune: --verify needs a recommendation, and {study} has no step-cost model: run the baseline "
                          "and at least two K at each concurrency (e.g. sweep.num_speculative_tokens=[3,7])")
    check = tune.k_by_concurrency(rows, neighbours=True)
    # --forcerun summarize: the study's summary.csv exists, and Snakemake does not always rebuild it for a
    # missing input behind a checkpoint (it did not here without the first run's .snakemake metadata);
    # forcing it makes Snakemake run the new cells it needs, and the summary then holds them too
    rc = run_jobs(tune.verify_jobs(study, check), args.cores, ["--forcerun", "summarize"],
                  f"tune --verify {tune.override(check)}")
    if rc != 0:
        return rc
    checked = tune.verify_rows(rows, study, check)
    missing = [f"K={r['k']} c={r['concurrency']}" for r in checked if r["measured_al"] is None]
    if missing:
        raise ConfigError(f"tune: --verify ran, but {', '.join(missing)} have no finished cells in {study}: "
                          "see the Snakemake output above, fix the cause and rerun")
    table.write(derived_tables.TUNE_VERIFY, checked, files.tune_verify,
                inputs=tune.inputs(study, tune.load_study(study), verified=tune.override(check)))
    _print_table(checked, VERIFY_COLUMNS)
    print(f"wrote {files.tune_verify}")
    return 0

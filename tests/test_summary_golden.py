"""The golden test: archived studies re-summarized offline give the values the summary tables had before the
modules were split (tests/data/golden, written by main 58d1a74's summary from the same archived bench cells), in
every column, whatever the columns' order; and tiny-gpu-sched's own archived summary.csv, in every column it had.
Numbers agree to 1e-9 relative, not bit for bit: another release of the numeric libraries can round a last digit
otherwise (numpy 2.3.5, scipy 1.17.1 and pandas 3.1.1 gave 2.7578271957693503 where the golden has 2.75782719576935)."""
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers import REPO

from specsweep.read.study import Study
from specsweep.read.summary import write_summary

ARCHIVE = REPO / "bench" / "archive" / "h200" / "vllm"
GOLDEN = REPO / "tests" / "data" / "golden"


def same_columns(old: pd.DataFrame, new: pd.DataFrame) -> None:
    assert set(old.columns) <= set(new.columns), sorted(set(old.columns) - set(new.columns))
    assert len(old) == len(new)
    for column in old.columns:      # numbers to rtol (NaN equal to NaN), text exactly
        pd.testing.assert_series_equal(old[column], new[column], check_dtype=False, rtol=1e-9, atol=1e-12)


def resummarize(tmp_path: Path, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    study = tmp_path / name
    shutil.copytree(ARCHIVE / name, study)
    out = tmp_path / "out"
    out.mkdir()
    write_summary(Study.load(study), out / "summary.csv", out / "k.csv", out / "c.csv")
    return pd.read_csv(out / "summary.csv"), pd.read_csv(out / "k.csv")


@pytest.mark.parametrize("name", ["tiny-gpu-sched", "tiny-gpu-relaunch"])
def test_an_archived_study_resummarizes_to_its_golden_tables(tmp_path, name):
    summary, ks = resummarize(tmp_path, name)
    golden = pd.read_csv(GOLDEN / f"{name}.summary.csv")
    same_columns(golden, summary)
    same_columns(pd.read_csv(GOLDEN / f"{name}.k_comparison.csv"), ks)


def test_an_archived_summary_keeps_every_column_it_had(tmp_path):
    summary, _ = resummarize(tmp_path, "tiny-gpu-sched")
    same_columns(pd.read_csv(ARCHIVE / "tiny-gpu-sched" / "summary.csv"), summary)

"""results.atomic_write_text: whole files only, with the mode a plain open would give."""
import os
import stat

import pytest

from specsweep.core.results import atomic_write_text


def test_an_atomic_write_leaves_no_temp_file_and_takes_the_umask_not_0600(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a" / "summary.csv", "x\n")
    finally:
        os.umask(old)
    path = tmp_path / "a" / "summary.csv"
    assert path.read_text() == "x\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in path.parent.iterdir()] == ["summary.csv"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("old")

    with pytest.raises(TypeError):
        atomic_write_text(path, 3)          # not text: the write fails after the temp file exists
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]

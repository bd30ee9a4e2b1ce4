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


def test_read_jsonl_reads_an_archives_gzipped_copy_where_the_plain_file_is_absent(tmp_path):
    import gzip

    from specsweep.core.results import read_jsonl

    (tmp_path / "a.jsonl").write_text('{"x": 1}\n\n{"x": 2}\n')
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write('{"x": 3}\n')
    assert read_jsonl(tmp_path / "a.jsonl") == [{"x": 1}, {"x": 2}]
    assert read_jsonl(tmp_path / "b.jsonl") == [{"x": 3}]
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "c.jsonl")

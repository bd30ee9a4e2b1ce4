"""The study tables as data (table.py): each column declared once, one writer, one typed reader that undoes it."""
import pytest

from specsweep.core import table
from specsweep.core.errors import ConfigError
from specsweep.core.table import BOOL, FIGURE, ID, INT, JSON, SETTING, TEXT, Column

SMALL = (Column("id", ID, encoding=TEXT), Column("k", SETTING, encoding=INT), Column("x", FIGURE, median=True),
         Column("flag", FIGURE, encoding=BOOL), Column("rates", SETTING, encoding=JSON))


def test_every_column_is_declared_once_with_a_kind_and_an_encoding():
    for t in (table.SUMMARY, table.K_COMPARISON, table.BY_CATEGORY):
        names = table.names(t)
        assert len(names) == len(set(names))
        assert {c.kind for c in t} <= {table.ID, table.SETTING, table.FIGURE, table.VERDICT, table.LABEL,
                                       table.DIAGNOSIS}
        assert {c.encoding for c in t} <= {TEXT, INT, table.FLOAT, BOOL, JSON}
    assert all(isinstance(c.source, tuple) and c.source for c in table.medians())    # a path in metrics.json
    assert set(table.READ_FIRST) <= set(table.names(table.SUMMARY))
    assert set(table.K_READ_FIRST) <= set(table.names(table.K_COMPARISON))
    assert table.metric_names()[0] == "speedup_e2e_geomean"


def test_summary_csv_opens_at_its_answer():
    """The label, the verdict, the e2e speedup with its CI and the acceptance length first; the rest after, in
    _SUMMARY's order, each column once."""
    names = table.names(table.SUMMARY)
    assert names[:7] == ["label", "verdict", "speedup_e2e_geomean", "speedup_e2e_ci_low", "speedup_e2e_ci_high",
                         "mean_acceptance_length", "mean_acceptance_length_mad"]
    assert names[7:] == [n for n in table.names(table._SUMMARY) if n not in names[:7]]
    assert sorted(names) == sorted(["label", *table.names(table._SUMMARY)])


def test_the_reader_undoes_the_writer(tmp_path):
    rows = [{"id": "a", "k": 3, "x": 1.25, "x_mad": 0.1, "flag": True, "rates": [0.9, 0.5]},
            {"id": "b", "k": None, "x": None, "x_mad": None, "flag": False, "rates": 3.0}]
    table.write(SMALL, rows, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines()[:2] == ["id,k,x,x_mad,flag,rates",
                                                                  'a,3,1.25,0.1,True,"[0.9, 0.5]"']  # an INT: "3"
    assert table.read(tmp_path / "t.csv", SMALL) == rows
    frame = table.frame(tmp_path / "t.csv", SMALL)
    assert list(frame.columns) == table.names(SMALL) and frame.rates[0] == [0.9, 0.5]


def test_a_row_with_an_undeclared_column_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"undeclared \['new'\].*declare each column once in specsweep/core/table.py"):
        table.write(SMALL, [{"id": "a", "k": 1, "x": 1.0, "x_mad": 0.0, "flag": True, "rates": None, "new": 1}],
                    tmp_path / "t.csv")
    assert not (tmp_path / "t.csv").exists()


def test_a_bad_value_is_one_line_naming_the_file_line_and_column(tmp_path):
    (tmp_path / "t.csv").write_text("id,k,x,x_mad,flag,rates\na,three,1,0,True,\n")
    with pytest.raises(ConfigError) as e:
        table.read(tmp_path / "t.csv", SMALL)
    assert f"{tmp_path / 't.csv'} line 2, column k: 'three' is not a int" in str(e.value) and "\n" not in str(e.value)


def test_older_and_newer_files_read_what_they_hold(tmp_path):
    """A column the file lacks (an older summary) is absent; one the table does not declare (newer) stays text."""
    (tmp_path / "t.csv").write_text("id,k,later\na,2,7\n")
    assert table.read(tmp_path / "t.csv", SMALL) == [{"id": "a", "k": 2, "later": "7"}]


def test_the_summary_reads_back_as_summary_rows_made_it(tmp_path):
    from test_verdicts import study

    from specsweep.read import summary
    from specsweep.read.study import Study

    grid = study(tmp_path / "results", {0: 1.0, 3: 1.5}, extra=["sweep.set_acceptance=[null,2.0,[0.9,0.6,0.5]]"])
    files = grid.study_files("v")
    loaded = Study.load(files.dir, grid)
    summary.write_summary(loaded, files.summary, files.k_comparison, files.by_category)
    assert table.read(files.summary) == summary.rows(loaded)
    assert {type(r["set_acceptance"]) for r in table.read(files.summary)} == {type(None), float, list}

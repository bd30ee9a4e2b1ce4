"""The derived tables (tune.csv, tune_verify.csv, compare.csv, predicted.csv) are typed tables of
specsweep.core.derived_tables, written through table.write: the file is what pandas wrote before (the values did
not change), it reads back typed, and beside it a record names the settings and the input cells it came from."""
import csv
import json

import pandas as pd
import pytest
from test_predicted import GIVEN, measure
from test_tune import _study
from test_verdicts import study

from specsweep.core import derived_tables, layout, table
from specsweep.read import compare, tune


def header(path):
    return next(csv.reader(open(path)))


def test_the_tables_declare_each_column_once():
    for t in (derived_tables.TUNE, derived_tables.TUNE_VERIFY, derived_tables.COMPARE, derived_tables.PREDICTED):
        names = table.names(t)
        assert len(names) == len(set(names))
    assert set(derived_tables.COMPARE_KEY) <= set(table.names(derived_tables.COMPARE))
    assert layout.inputs_of("/x/tune.csv").name == "tune.inputs.json"


def test_a_row_with_an_undeclared_column_is_refused(tmp_path):
    row = dict.fromkeys(table.names(derived_tables.TUNE_VERIFY), None)
    with pytest.raises(ValueError, match="undeclared"):
        table.write(derived_tables.TUNE_VERIFY, [dict(row, new=1)], tmp_path / "t.csv")


def test_tune_csv_is_typed_and_records_its_cells(tmp_path):
    s = _study(tmp_path)
    rows, mapping, _ = tune.write_tune(s)
    path = s / layout.TUNE_TABLE
    assert path.read_text() == pd.DataFrame(rows).to_csv(index=False)       # the values pandas wrote before
    assert header(path) == table.names(derived_tables.TUNE)
    back = table.read(path, derived_tables.TUNE)
    assert [r["recommended"] for r in back] == [r["recommended"] for r in rows]     # booleans, not text
    assert back[0]["k"] == 1 and isinstance(back[0]["thinking"], bool)
    record = json.loads(layout.inputs_of(path).read_text())
    assert record["written_by"] == "specsweep tune" and record["columns"] == table.names(derived_tables.TUNE)
    assert record["settings"]["seed"] == tune.SEED and record["settings"]["n_resamples"] == tune.N_RESAMPLES
    cells = [c for group in record["cells"].values() for c in group]
    assert len(cells) == 3 * 2 * 2 and all(c.startswith(str(s)) for c in cells)      # 3 K, 2 concurrencies, 2 repeats


def test_compare_csv_is_typed_and_records_both_sides_cells(tmp_path):
    study(tmp_path / "a", {0: 1.0, 3: 1.5})
    study(tmp_path / "b", {0: 1.0, 3: 2.0}, seed=100)
    out = tmp_path / "c.csv"
    rows = compare.write_comparison(tmp_path / "a" / "v", tmp_path / "b" / "v", out)
    assert header(out) == table.names(derived_tables.COMPARE)
    before = [{k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()} for r in rows]
    assert out.read_text() == pd.DataFrame(before).to_csv(index=False)
    back = {r["method"]: r for r in table.read(out, derived_tables.COMPARE)}
    assert back["dflash"]["b_vs_a_verdict"] == "faster" and back["dflash"]["repeats"] == 2
    record = json.loads(layout.inputs_of(out).read_text())
    assert record["a"] == str(tmp_path / "a" / "v") and record["b"] == str(tmp_path / "b" / "v")
    assert len(record["cells"]["a"]) == len(record["cells"]["b"]) == 4      # two grid points, two repeats each
    assert "temperature" in record["settings"]["same_work"] and "repeat" in record["settings"]["matched_on"]


def test_predicted_csv_is_typed_and_records_its_cells(tmp_path):
    for side in ("a", "b"):
        measure(tmp_path / side, extra=[f"sweep.set_acceptance=[null,{GIVEN}]", "sweep.ignore_eos=true"],
                seed=0 if side == "a" else 100)
    out = tmp_path / "p.csv"
    compare.write_comparison(tmp_path / "a" / "v", tmp_path / "b" / "v", tmp_path / "c.csv", out)
    assert header(out) == table.names(derived_tables.PREDICTED)
    back = table.read(out, derived_tables.PREDICTED)
    assert len(back) == 4 and all(isinstance(r["agree"], (bool, type(None))) for r in back)
    record = json.loads(layout.inputs_of(out).read_text())
    assert set(record["cells"]) == {r["predicted_cell"] for r in back} | {r["measured_cell"] for r in back}
    assert record["written_by"] == "specsweep compare" and record["unmatched"] == []

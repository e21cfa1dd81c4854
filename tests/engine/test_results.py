"""The results file (engine/results.py): deterministic text, atomic writes, the DataFrame of
``reports.load`` and the CSV export.  Rows here are written by hand (no run), so each test
checks the file layer alone."""

from __future__ import annotations

import json
import math
import os
import random

import pandas as pd
import pytest

from roundoff_coverage import reports
from roundoff_coverage.engine import results
from roundoff_coverage.engine.runner import Selection
from conftest import load_error


def _row(op="exp", route="forward", port="y", fmt="bfloat16", max_ulp=0.25, **extra):
    row = {f: None for f in results.ROW_FIELDS}
    row.update(op=op, instance="default", attrs={"shape": [3]}, route=route, port=port,
               format=fmt, mode="nearest_even", policy="strict", implementation="emulated",
               device="cpu", status="ok", exhaustive=False, samples=12, max_ulp=max_ulp,
               p99_ulp=max_ulp, mean_ulp=0.1, exceptional={}, unmeasured=0,
               histogram=[0] * 32, ref_prec=72)
    row.update(extra)
    return row


ROWS = [_row(), _row(route="gradient", port="x", max_ulp=math.inf, bound_ratio=math.inf),
        _row(op="add", fmt="binary16", max_ulp=0.5, bound=0.5, bound_ratio=1.0, violations=0),
        _row(op="eq", route="tangent", status="not_differentiable", reason="no value input",
             max_ulp=None, samples=0)]
SEL = Selection(ops=("exp", "add", "eq"), formats=("bfloat16", "binary16"))


def test_same_rows_in_any_order_give_the_same_bytes():
    text = results.dumps(results.document(ROWS, SEL))
    shuffled = ROWS[:]
    random.Random(3).shuffle(shuffled)
    assert results.dumps(results.document(shuffled, SEL)) == text
    doc = json.loads(text)                                  # valid JSON, no NaN/Infinity
    assert doc["schema"] == "roundoff-coverage/1"
    assert [r["op"] for r in doc["rows"]] == ["add", "eq", "exp", "exp"]
    assert [r["route"] for r in doc["rows"]][2:] == ["forward", "gradient"]
    assert doc["rows"][3]["max_ulp"] == "inf"               # non-finite floats as strings
    assert doc["meta"]["seed"] == 0 and doc["meta"]["command"].startswith("roundoff-coverage run")


def test_write_is_atomic_and_replaces_the_old_file(tmp_path):
    path = tmp_path / "r.json"
    results.write(path, results.document(ROWS, SEL))
    first = path.read_bytes()
    with pytest.raises(TypeError):                          # not serializable: nothing written
        results.write(path, {"schema": results.SCHEMA, "meta": {}, "rows": [{"x": object()}]})
    assert path.read_bytes() == first
    assert sorted(os.listdir(tmp_path)) == ["r.json"]       # no temporary file left behind


def test_load_gives_a_dataframe_with_the_row_fields(tmp_path):
    path = tmp_path / "r.json"
    results.write(path, results.document(ROWS, SEL))
    df = reports.load(path)
    assert isinstance(df, pd.DataFrame) and len(df) == 4
    for field in ("op", "attributes", "route", "port", "format", "mode", "policy",
                  "implementation",
                  "device", "status", "samples", "max_ulp", "p99_ulp", "mean_ulp", "max_rel",
                  "bound_ratio", "violations", "exceptional", "worst"):
        assert field in df.columns
    assert df["max_ulp"].dtype == "float64"
    grad = df[(df.op == "exp") & (df.route == "gradient")].iloc[0]
    assert math.isinf(grad["max_ulp"]) and math.isinf(grad["bound_ratio"])
    assert math.isnan(df[df.op == "eq"].iloc[0]["max_ulp"])
    assert df[df.op == "add"].iloc[0]["violations"] == 0
    assert df.attrs["meta"]["seed"] == 0


def test_a_rows_attributes_and_the_files_meta_are_both_reachable(tmp_path):
    # pandas' own ``attrs`` (the frame's metadata, which a row inherits) shadows a column of
    # that name on a row: the column is ``attributes``, the meta stays in df.attrs.
    path = tmp_path / "r.json"
    results.write(path, results.document(ROWS, SEL))
    df = reports.load(path)
    row = df.iloc[0]
    assert row.attributes == {"shape": [3]} and row["attributes"] == {"shape": [3]}
    assert "attrs" not in df.columns and df.attrs["meta"]["seed"] == 0
    assert list(df.columns) == list(results.FRAME_COLUMNS)
    assert [c for c in df.columns if c not in results.ROW_FIELDS] == ["attributes"]


def test_csv_export_keeps_every_row_and_nested_fields_as_json(tmp_path):
    path, csv = tmp_path / "r.json", tmp_path / "r.csv"
    results.write(path, results.document(ROWS, SEL), csv=csv)
    back = pd.read_csv(csv)
    assert len(back) == 4 and list(back.columns) == list(results.FRAME_COLUMNS)
    assert json.loads(back.loc[0, "attributes"]) == {"shape": [3]}
    assert back["max_ulp"].astype(float).max() == math.inf


@pytest.mark.parametrize("content,fragment", [
    ("{not json", "not valid JSON"),
    ('{"schema": "other/1", "rows": []}', "not a roundoff-coverage/1 results file"),
], ids=["syntax", "schema"])
def test_load_of_a_bad_file_raises_one_line(tmp_path, content, fragment):
    assert fragment in load_error(reports.load, tmp_path / "bad.json", content,
                                  results.ResultsError)

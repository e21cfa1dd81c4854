"""Reports are functions of their records: a coverage run's results file records its
operators (family, spec order, notes, certificates), and the HTML report and the gate read
them from the file -- an old file renders with its own notes, whatever the operator table
holds today (engine/operators.py)."""

from __future__ import annotations

import json

from roundoff_coverage import routes
from roundoff_coverage.reports import gate, html
from roundoff_coverage.engine import operators, results, runner


def _run(tmp_path, name="r.json"):
    out = tmp_path / name
    sel = runner.Selection(ops=("exp", "add"), formats=("bfloat16",), routes=("forward",),
                           draws=1)
    runner.run(sel, str(out), jobs=1, progress=False)
    return out


def test_the_file_records_its_operators_as_the_table_had_them(tmp_path):
    doc = json.loads(_run(tmp_path).read_text())
    rec = doc["operators"]
    assert rec["families"][0] == routes.declaration(routes.names()[0]).family
    exp = rec["entries"]["exp"]
    assert exp["family"] == routes.declaration("exp").family
    assert exp["order"] == list(routes.names()).index("exp")
    assert exp["notes"] == list(routes.declaration("exp").notes)
    assert [(c["kind"], c["statement"]) for c in exp["certificates"]] == \
        [(c.kind, c.statement) for c in routes.certificates("exp")]
    assert set(rec["entries"]) == {"exp", "add"}


def test_the_report_shows_the_notes_the_file_recorded(tmp_path):
    path = _run(tmp_path)
    doc = json.loads(path.read_text())
    doc["operators"]["entries"]["exp"]["notes"] = ["a note from the day of the run"]
    doc["operators"]["entries"]["exp"]["certificates"] = []
    path.write_text(results.dumps(doc))
    html.build(str(path), str(tmp_path / "rep"))
    page = (tmp_path / "rep" / "ops" / "exp.html").read_text()
    assert "a note from the day of the run" in page
    assert not any(n[:40] in page for n in routes.declaration("exp").notes)


def test_a_file_without_records_falls_back_to_this_versions_table_and_says_so(tmp_path):
    path = _run(tmp_path)
    doc = json.loads(path.read_text())
    del doc["operators"]
    path.write_text(results.dumps(doc))
    table = operators.Table(doc)
    assert not table.recorded and table.family("exp") == routes.declaration("exp").family
    html.build(str(path), str(tmp_path / "rep"))
    page = (tmp_path / "rep" / "ops" / "exp.html").read_text()
    assert "does not record its operators" in page


def test_the_gate_takes_families_from_the_files(tmp_path):
    # A tolerance for the family the current file records for exp, which is not exp's
    # family in today's table: the gate must apply it.
    base, cur = _run(tmp_path, "b.json"), _run(tmp_path, "c.json")
    doc = json.loads(cur.read_text())
    for r in doc["rows"]:
        if r["op"] == "exp" and r["max_ulp"] is not None:
            r["max_ulp"] += 0.25                           # a regression of 0.25 ulp
            r["p99_ulp"] = min(r["p99_ulp"], r["max_ulp"])
    other = next(f for f in doc["operators"]["families"]
                 if f != routes.declaration("exp").family)
    doc["operators"]["entries"]["exp"]["family"] = other
    cur.write_text(results.dumps(doc))
    b, c = gate.read(str(base), "baseline"), gate.read(str(cur))
    strict = gate.compare(b, c)
    assert strict.regressions and all(ch.key[0] == "exp" for ch in strict.regressions)
    loose = gate.compare(b, c, tolerances=gate.Tolerances(families={other: 1.0}))
    assert not loose.regressions

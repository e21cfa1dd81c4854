"""The HTML report (reports/html/, ``roundoff-coverage report``, ``run --html``).

Oracles: the results file itself (the numbers a page must show and the order a sort must
give), an independent evaluation of each reproducer snippet in a fresh namespace (it must
print the computed value the run recorded), WCAG relative luminance for the colour scale,
and a real browser (headless Chromium over the DevTools protocol, tests/cdp.py) for what
the pages do when opened from disk.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import pathlib

import pytest

from roundoff_coverage.reports import html
from roundoff_coverage.engine import runner
from roundoff_coverage.reports.cli import main
from roundoff_coverage.reports.html import markup, model, palette, snippet

import cdp

SMALL = runner.Selection(ops=("exp", "softmax", "eq", "add"),
                         formats=("bfloat16", "float8_e4m3fn"), draws=1)
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "small.json"
    runner.run(SMALL, str(path), jobs=1, progress=False)
    return path


@pytest.fixture(scope="module")
def report_dir(run_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "report"
    html.build(str(run_file), str(out))
    return out


def _doc(path):
    return json.loads(pathlib.Path(path).read_text())


def _doctored(run_file, tmp_path):
    """The small run plus a failed row with a hostile reason and three malformed rows."""
    doc = _doc(run_file)
    bad = copy.deepcopy(next(r for r in doc["rows"] if r["op"] == "exp"))
    bad.update(status="error", reason=HOSTILE, max_ulp=None, worst=None, port="y<b>")
    garbled = copy.deepcopy(next(r for r in doc["rows"] if r["op"] == "exp"))
    garbled.update(max_ulp="abc", histogram="nope", worst={"inputs": 3})
    nameless = copy.deepcopy(doc["rows"][0])
    del nameless["op"]
    doc["rows"] += [bad, garbled, nameless, ["not", "a", "row"]]
    path = tmp_path / "doctored.json"
    path.write_text(json.dumps(doc))
    return path


def _pages(folder):
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
            for p in pathlib.Path(folder).rglob("*") if p.is_file()}


# ----- without a browser -------------------------------------------------------------------------

def test_hostile_text_is_escaped_everywhere(run_file, tmp_path):
    out = tmp_path / "r"
    html.build(str(_doctored(run_file, tmp_path)), str(out))
    pages = _pages(out)
    for name, text in pages.items():
        assert HOSTILE not in text, name
        assert "y<b>" not in text, name
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["ops/exp.html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["index.html"]   # missing list
    # In the table's data the reason is JSON with < and > as \u escapes.
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in pages["assets/rows.js"]


def test_script_json_cannot_close_its_script_element():
    from roundoff_coverage.reports.html.markup import script_json
    text = script_json({"a": "</script><!-- & \u2028"})
    assert "</" not in text and "<!--" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028"}


def test_malformed_rows_render_as_error_rows(run_file, tmp_path):
    path = _doctored(run_file, tmp_path)
    rep = model.Report(_doc(path), str(path))
    tail = rep.rows[-4:]
    assert [r.status for r in tail] == ["error"] * 4
    assert tail[0].reason == HOSTILE
    assert "max_ulp is not a number" in tail[1].reason
    assert "op missing" in tail[2].reason
    assert "not an object" in tail[3].reason
    out = tmp_path / "r"
    html.build(str(path), str(out))
    data = json.loads(pathlib.Path(out, "assets/rows.js").read_text()
                      .removeprefix("window.ROUNDOFF_TABLE = ").rstrip().rstrip(";"))
    status = [c["key"] for c in data["columns"]].index("status")
    assert [r[status] for r in data["rows"][-4:]] == ["error"] * 4
    exp_page = pathlib.Path(out, "ops/exp.html").read_text()
    assert f'id="r{tail[1].index}"' in exp_page and "malformed row" in exp_page
    assert "could not be drawn" not in exp_page          # drawn as an error row, not a crash


def test_colour_scale_is_monotone_in_value_and_luminance():
    scale = palette.LogScale(-10, 20)
    values = [0.0] + [2.0 ** (k / 4) for k in range(-48, 88)] + [math.inf]
    positions = [scale.position(v) for v in values]
    assert positions == sorted(positions) and positions[0] == 0 and positions[-1] == 1
    lum = [palette.luminance(palette.colour_at(t / 200)) for t in range(201)]
    assert all(a < b for a, b in zip(lum, lum[1:]))       # strictly brighter as errors grow
    assert palette.colour_at(0) == palette.STOPS[0] and palette.colour_at(1) == palette.STOPS[-1]


def test_scale_covers_the_errors_within_the_histogram_range():
    s = palette.LogScale.covering([0.3, 5.0, 1e44, None, math.inf])
    assert (s.lo, s.hi) == (-2, 20)


def _exec(code) -> dict:
    """Run a snippet in a fresh namespace; its printed 'computed' and 'exact' lines."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<snippet>", "exec"), {"__name__": "snippet"})
    return dict(line.split(" ", 1) for line in buf.getvalue().splitlines())


def _same(a: str, b: str) -> bool:
    x, y = float(a), float(b)
    return x == y or (math.isnan(x) and math.isnan(y))


@pytest.mark.parametrize("op,route,fmt,regenerate", [
    ("exp", "forward", "bfloat16", False),           # elementwise: one element at shape (1,)
    ("exp", "tangent", "float8_e4m3fn", False),
    ("add", "gradient", "bfloat16", False),           # two inputs, a cotangent
    ("softmax", "gradient", "float8_e4m3fn", False),  # whole arrays, flat element index
    ("softmax", "forward", "bfloat16", True),         # redrawn from the seed
])
def test_reproducer_snippet_prints_the_computed_value(run_file, op, route, fmt, regenerate):
    rep = model.Report(_doc(run_file), str(run_file))
    rows = [r for r in rep.rows if (r.op, r.route, r.format, r.status) == (op, route, fmt, "ok")
            and r.worst is not None]
    assert rows
    for row in rows:
        code = snippet.snippet(row, rep.path, force_regenerate=regenerate)
        assert ("reports.reproduce" in code) == regenerate
        printed = _exec(code)
        assert _same(printed["computed"], row.worst["computed"]), code
        # The exact value agrees with the run's to the digits the run stored.
        assert math.isclose(float(printed["exact"]), float(row.worst["exact"]),
                            rel_tol=1e-15, abs_tol=1e-300)


def test_a_row_without_a_reproducer_says_why(run_file):
    rep = model.Report(_doc(run_file), str(run_file))
    row = copy.deepcopy(next(r for r in rep.rows if r.worst is not None))
    row.worst = {"inputs": {"x": "0x3f80"}}
    with pytest.raises(snippet.SnippetError, match="element"):
        snippet.snippet(row, rep.path)


def test_operator_page_shows_units_figures_and_anchors(report_dir, run_file):
    page = (report_dir / "ops" / "exp.html").read_text()
    assert '<h1 id="operator">exp</h1>' in page
    for anchor in ("forward-bfloat16", "tangent-float8_e4m3fn", "gradient-bfloat16"):
        assert f'id="{anchor}"' in page
    assert "Histogram of |error| in ulp" in page and "binade of the exact value" in page
    assert " ulp</dd>" in page and "(relative)</dd>" in page and " bits</dd>" in page
    assert "Notes and certificates" in page and "exp(-inf) = 0" in page
    assert "IEEE flags raised" in page


def test_comparison_lists_what_got_worse(run_file, tmp_path):
    doc = _doc(run_file)
    row = next(r for r in doc["rows"] if r["op"] == "exp" and r["status"] == "ok"
               and r["route"] == "forward" and r["format"] == "bfloat16")
    for name in ("max_ulp", "p99_ulp", "mean_ulp"):       # the baseline was 4x better
        row[name] = row[name] / 4
    base = tmp_path / "base.json"
    base.write_text(json.dumps(doc))
    out = tmp_path / "r"
    html.build(str(run_file), str(out), str(base))
    page = (out / "compare.html").read_text()
    assert "Worse: 1 route<" in page and "exp[shape=[2,3]]-forward-y-bfloat16" in page
    assert "gate: FAIL: 1 regression" in page
    assert 'href="compare.html"' in (out / "index.html").read_text()


@pytest.mark.parametrize("case", ["missing", "corrupt", "out_is_a_file", "bad_baseline"])
def test_bad_input_is_exit_2_with_one_line(capsys, run_file, tmp_path, case):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"schema": "roundoff-coverage/1", "rows": [')
    a_file = tmp_path / "file"
    a_file.write_text("")
    argv = {"missing": [str(tmp_path / "none.json"), "--out", str(tmp_path / "r")],
            "corrupt": [str(corrupt), "--out", str(tmp_path / "r")],
            "out_is_a_file": [str(run_file), "--out", str(a_file)],
            "bad_baseline": [str(run_file), "--out", str(tmp_path / "r"), "--baseline",
                             str(corrupt)]}[case]
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("roundoff-coverage: error: ") and err.count("\n") == 1
    assert case == "out_is_a_file" or not (tmp_path / "r").exists()


def test_run_html_writes_the_report_of_the_fresh_results(capsys, tmp_path):
    out = tmp_path / "r"
    rc = main(["run", "--ops", "neg", "--formats", "bfloat16", "--samples", "1", "--jobs", "1",
               "--quiet", "--out", str(tmp_path / "neg.json"), "--html", str(out)])
    assert rc == 0
    assert (out / "index.html").exists() and (out / "ops" / "neg.html").exists()
    assert "neg" in (out / "assets" / "rows.js").read_text()


def test_full_sized_table_stays_in_the_data_file(run_file, tmp_path):
    """~8000 rows (the default run's size): index.html does not grow with the rows."""
    doc = _doc(run_file)
    rows = doc["rows"]
    doc["rows"] = [dict(r, attrs={**r["attrs"], "copy": i}) for i in range(8000 // len(rows) + 1)
                   for r in rows]
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    small_out, big_out = tmp_path / "s", tmp_path / "b"
    html.build(str(run_file), str(small_out))
    built = html.build(str(big), str(big_out))
    grow = (big_out / "index.html").stat().st_size / (small_out / "index.html").stat().st_size
    assert grow < 1.5 and built.seconds < 60


# ----- in a real browser -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    exe = cdp.find()
    missing = None
    if exe is None:
        missing = "chromium is not installed (apt-get install chromium)"
    else:
        try:
            import websocket  # noqa: F401
        except ImportError:
            missing = "websocket-client is not installed (pip install '.[test]')"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}: CI must run the browser test")
        pytest.skip(missing)
    with cdp.Browser(exe) as b:
        yield b


def _values(doc, key, descending, view="whole"):
    """The row values of ``key`` as the table sorts them in ``view``: numbers first, in
    order; on the ordinary domain, those of the rows' ``by_kind["ordinary"]``."""
    if view == "ordinary":
        nums = [model.number(((r.get("by_kind") or {}).get("ordinary") or {}).get(key))
                for r in doc["rows"]]
    else:
        nums = [model.number(r.get(key)) for r in doc["rows"]]
    nums = [v for v in nums if v is not None and not math.isnan(v)]
    return sorted(nums, reverse=descending)


_VISIBLE = ("[...document.querySelectorAll('{}')].filter(e => e.getClientRects().length)"
            ".map(e => e.textContent)")
_FILLS = ("[...document.querySelectorAll('svg.heatmap a rect')].map(r => [r.getAttribute("
          "'fill'), r.getAttribute('data-ordinary'), r.getAttribute('data-whole')])")


def _switch(browser, view):
    browser.evaluate(f"document.querySelector('input[name=view][value={view}]').click()")


def test_report_in_chromium(browser, report_dir, run_file, tmp_path):
    doc = _doc(run_file)
    browser.navigate(cdp.file_url(report_dir / "index.html"))
    assert browser.evaluate("document.querySelector('h1').textContent") == \
        "Roundoff coverage report"
    cells = browser.evaluate("document.querySelectorAll('svg.heatmap a rect').length")
    groups = {(r["op"], r["route"], r["format"]) for r in doc["rows"]}
    assert cells == len(groups)
    assert browser.evaluate("document.querySelectorAll('#rows tbody tr').length") == \
        min(len(doc["rows"]), 100)
    assert browser.evaluate("document.getElementById('table-count').textContent") == \
        f"{len(doc['rows'])} of {len(doc['rows'])} rows"

    # The page opens on the ordinary domain and says so; the heat map's cells are filled
    # with their ordinary-domain colours.
    assert browser.evaluate("document.body.dataset.view") == "ordinary"
    assert browser.evaluate("document.querySelector('input[name=view]:checked').value") == \
        "ordinary"
    said = browser.evaluate(_VISIBLE.format("#view-said span"))
    assert len(said) == 1 and said[0].startswith("errors on the ordinary domain")
    assert browser.evaluate(_VISIBLE.format("#heatmap h2 span")) == ["ordinary domain"]
    fills = browser.evaluate(_FILLS)
    assert all(f == o for f, o, _ in fills)
    assert any(o != w for _, o, w in fills)      # the views differ somewhere in this run

    read = ("[...document.querySelectorAll('#rows tbody td[data-key=max_ulp]')]"
            ".slice(0, 15).map(td => td.getAttribute('data-v'))")
    click = "document.querySelector('th[data-key=max_ulp] button').click()"
    browser.evaluate(click)
    assert browser.evaluate("document.querySelector('th[data-key=max_ulp]')"
                            ".getAttribute('aria-sort')") == "descending"
    shown = [float(v) for v in browser.evaluate(read)]
    assert shown == _values(doc, "max_ulp", True, "ordinary")[:15]
    assert shown != _values(doc, "max_ulp", True)[:15]

    # One click to the whole range: the text, the heat map and the sorted table follow.
    _switch(browser, "whole")
    assert browser.evaluate("document.body.dataset.view") == "whole"
    said = browser.evaluate(_VISIBLE.format("#view-said span"))
    assert len(said) == 1 and said[0].startswith("errors over the whole range")
    assert browser.evaluate(_VISIBLE.format("#heatmap h2 span")) == ["whole range"]
    assert all(f == w for f, _, w in browser.evaluate(_FILLS))
    shown = [float(v) for v in browser.evaluate(read)]
    assert shown == _values(doc, "max_ulp", True)[:15]
    browser.evaluate(click)
    shown = [float(v) for v in browser.evaluate(read)]
    assert shown == _values(doc, "max_ulp", False)[:15]
    _switch(browser, "ordinary")                    # and one click back
    shown = [float(v) for v in browser.evaluate(read)]
    assert shown == _values(doc, "max_ulp", False, "ordinary")[:15]
    assert all(f == o for f, o, _ in browser.evaluate(_FILLS))

    browser.evaluate("(() => { const f = document.getElementById('filter');"
                     " f.value = 'softmax gradient'; f.dispatchEvent(new Event('input')); })()")
    ops = browser.evaluate("[...document.querySelectorAll('#rows tbody td[data-key=op]')]"
                           ".map(td => td.textContent)")
    expected = [r for r in doc["rows"] if r["op"] == "softmax" and r["route"] == "gradient"]
    assert ops and set(ops) == {"softmax"} and len(ops) == len(expected)

    assert browser.screenshot(tmp_path / "index.png") > 10_000
    assert browser.errors == []

    href = browser.evaluate("document.querySelector('svg.heatmap a').getAttribute('href')")
    op, anchor = href.removeprefix("ops/").removesuffix("").split(".html#")
    browser.navigate(cdp.file_url(report_dir / "index.html").rsplit("/", 1)[0] + "/" + href)
    assert browser.evaluate("document.querySelector('h1').textContent") == op
    assert browser.evaluate(f"document.getElementById({json.dumps(anchor)}) !== null")
    assert browser.evaluate("document.querySelectorAll('figure svg').length") > 0
    assert browser.errors == []


def test_a_results_file_without_kinds_renders_the_whole_range_with_a_note(browser, run_file,
                                                                         tmp_path):
    # A file of the previous version: no by_kind, buckets, bits, inside or by_input.
    doc = _doc(run_file)
    for r in doc["rows"]:
        for name in ("by_kind", "buckets", "max_bits", "mean_bits", "inside", "by_input"):
            r.pop(name, None)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    html.build(str(old), str(tmp_path / "r"))
    browser.navigate(cdp.file_url(tmp_path / "r" / "index.html"))
    assert browser.evaluate("document.body.dataset.view") == "whole"
    assert browser.evaluate("[...document.querySelectorAll('input[name=view]')]"
                            ".every(i => i.disabled)")
    assert "no statistics per sample kind" in browser.evaluate(
        "document.getElementById('view-note').textContent")
    browser.evaluate("document.querySelector('th[data-key=max_ulp] button').click()")
    shown = browser.evaluate("[...document.querySelectorAll('#rows tbody td[data-key=max_ulp]')]"
                             ".slice(0, 10).map(td => td.getAttribute('data-v'))")
    assert [float(v) for v in shown] == _values(doc, "max_ulp", True)[:10]
    assert browser.errors == []


def test_implementations_stand_side_by_side_on_the_operator_page(tmp_path):
    # Two implementations of one route and format: one line each with the numbers of its
    # row in the results file (the oracle), linking to the row; one implementation: none.
    path = tmp_path / "two.json"
    runner.run(runner.Selection(ops=("exp",), formats=("bfloat16",), draws=1,
                                implementations=("emulated", "native")), str(path), jobs=1,
               progress=False)
    out = tmp_path / "r"
    html.build(str(path), str(out))
    page = (out / "ops" / "exp.html").read_text()
    assert page.count("Implementations side by side") == 3          # one per route
    fwd = [r for r in _doc(path)["rows"] if r["route"] == "forward"]
    assert {r["implementation"] for r in fwd} == {"emulated", "native"}
    section = page.split("forward in bfloat16")[1].split("</table>")[0]
    for r in fwd:
        assert f">{r['implementation']}</a>" in section
        assert markup.ulp(r["max_ulp"]) in section
    one = tmp_path / "one.json"
    runner.run(runner.Selection(ops=("neg",), formats=("bfloat16",), draws=1), str(one),
               jobs=1, progress=False)
    html.build(str(one), str(tmp_path / "one"))
    assert "side by side" not in (tmp_path / "one" / "ops" / "neg.html").read_text()

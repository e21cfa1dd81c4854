"""The model report (reports/html/model_page.py, the index of a model results file).

Oracles: the results file of a model run on the tests' softmax-shift graph (its exact-zero
bias gradient: every element cancels), doctored with rows whose numbers the file spells
"inf", "-inf" and "nan", an exact-zero gradient row with a residue (norm_rel null,
cancelled > 0), an all-cancelled node row and hostile names; the page as headless Chromium
draws it (tests/cdp.py).
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from roundoff_coverage.reports import html
from roundoff_coverage.reports.cli import main
from roundoff_coverage.reports.html import model

import cdp
from conftest import softmax_shift_graph

HOSTILE = "<script>alert(1)</script>"
UNDEFINED = ("norm_rel", "norm_rel_max", "bits", "sqnr_db", "cosine", "scale_ulp")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("model_html")
    softmax_shift_graph().save(str(d / "g.json"))
    status = main(["model", str(d / "g.json"), "--routes", "forward,gradient", "--samples",
                   "1", "--jobs", "1", "--quiet", "--out", str(d / "r.json")])
    assert status == 0
    return d / "r.json"


def _doctored(path, out):
    """The run's rows plus: a node row of non-finite numbers, the bias gradient with a
    residue (no relative error defined), an all-cancelled node row, a hostile node."""
    doc = json.loads(path.read_text())
    rows = doc["rows"]
    soft = next(r for r in rows if r["node"] == "softmax" and r["route"] == "forward"
                and r["attribution"] == "propagated")
    soft.update(max_ulp="inf", max_rel="inf", norm_rel="inf", norm_rel_max="inf",
                bits="-inf", sqnr_db="-inf", scale_ulp="inf")
    total = next(r for r in rows if r["node"] == "total" and r["route"] == "forward"
                 and r["attribution"] == "propagated")
    total.update(cosine="nan", max_ulp="nan")          # refused by the checks: an error row
    bias = next(r for r in rows if r["node"] == "input:b")
    bias.update({k: None for k in UNDEFINED}, cancelled_error=2.0 ** -40, max_ulp=None,
                cancelled=16, samples=0)
    gone = next(r for r in rows if r["node"] == "shift" and r["route"] == "gradient"
                and r["attribution"] == "propagated" and r["port"] == "x")
    gone.update({k: None for k in UNDEFINED}, cancelled_error=2.0 ** -30, cancelled=16,
                samples=0, max_ulp=None, mean_ulp=None)
    evil = copy.deepcopy(next(r for r in rows if r["node"] == "total"
                              and r["route"] == "forward" and r["attribution"] == "local"))
    evil.update(node=HOSTILE, module=HOSTILE, node_index=3)
    rows.append(evil)
    out.write_text(json.dumps(doc))
    return out


@pytest.fixture(scope="module")
def report(model_file, tmp_path_factory):
    d = tmp_path_factory.mktemp("model_report")
    path = _doctored(model_file, d / "doctored.json")
    html.build(str(path), str(d / "html"))
    return path, d / "html"


def test_rows_read_the_files_spellings_of_non_finite_numbers(report):
    path, _ = report
    rep = model.Report(json.loads(path.read_text()), str(path))
    soft = next(r for r in rep.rows if r.node == "softmax" and r.route == "forward"
                and r.attribution == "propagated")
    assert soft.status == "ok" and soft.norm_rel == float("inf") and soft.bits == -float("inf")
    assert soft.max_ulp == float("inf")
    bias = next(r for r in rep.rows if r.node == "input:b")
    assert bias.norm_rel is None and bias.cancelled == 16 and bias.family == model.MODEL_FAMILY


def test_the_index_is_about_the_model(report):
    _, out = report
    page = (out / "index.html").read_text()
    assert "unknown" not in page and "by_kind" not in page
    assert "per sample kind and task" not in page and "whole model" in page
    assert "model.html" in page and HOSTILE not in page


def test_hostile_names_are_escaped_on_the_model_page(report):
    _, out = report
    page = (out / "model.html").read_text()
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert "could not be drawn" not in page


@pytest.fixture(scope="module")
def browser():
    exe = cdp.find()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: CI must run the browser test")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    pytest.importorskip("websocket")
    with cdp.Browser(exe) as b:
        yield b


def _texts(browser, selector):
    return browser.evaluate(f"[...document.querySelectorAll({json.dumps(selector)})]"
                            ".map(e => e.textContent)")


def test_the_model_page_in_chromium(browser, report, tmp_path):
    path, out = report
    doc = json.loads(path.read_text())
    browser.navigate(cdp.file_url(out / "model.html"))
    assert browser.evaluate("document.querySelector('h1').textContent").startswith("Model: ")
    assert not browser.evaluate("document.body.textContent.includes('could not be drawn')")
    # The plot: one point per node and route, in execution order.
    for route in ("forward", "gradient"):
        nodes = {r["node"] for r in doc["rows"] if r["route"] == route
                 and r["node_index"] is not None and r["attribution"] == "propagated"}
        pts = browser.evaluate(
            f"[...document.querySelectorAll('svg.along-graph circle.pt[data-route={route}]')]"
            ".map(c => c.getAttribute('data-node'))")
        assert sorted(pts) == sorted(nodes) and len(pts) == 3
    # The normwise measures beside the componentwise ones, and the non-finite numbers.
    heads = _texts(browser, "table.model th")
    for h in ("propagated bits", "norm_rel", "SQNR (dB)", "cosine", "scale ulp", "cancelled",
              "max ulp", "reproduce"):
        assert h in heads
    cells = _texts(browser, "table.model td")
    assert "∞" in cells and "−∞\u00a0bits" in " ".join(cells)
    assert any(c.startswith("16 of 16") for c in cells)        # the all-cancelled row
    whole = _texts(browser, "#whole td")
    assert "input:b" in whole and any(c.startswith("16 of 16 (max |err| 9.09e-13)")
                                      for c in whole)
    # Every node's row links to its reproducer, which names the node.
    links = browser.evaluate("[...document.querySelectorAll('table.model a')]"
                             ".map(a => a.getAttribute('href').slice(1))")
    assert links and all(browser.evaluate(f"document.getElementById({json.dumps(h)}) !== null")
                         for h in links)
    # The shares: one table per output and input gradient, under its closure, each link
    # resolving to a node's row.
    targets = {r["output"] for r in doc["rows"] if r["attribution"] == "share"}
    assert any(t.startswith("input:") for t in targets)
    titles = _texts(browser, "#shares h3")
    assert len(titles) == len(targets)
    assert all(any(f": {t} (" in h or h.endswith(f": {t}") for h in titles) for t in targets)
    shared = browser.evaluate("[...document.querySelectorAll('#shares a')]"
                              ".map(a => a.getAttribute('href').slice(1))")
    assert all(browser.evaluate(f"document.getElementById({json.dumps(h)}) !== null")
               for h in shared)
    # The keep-in-binary32 table, and its note: no candidate improves an exact model.
    assert browser.evaluate("document.querySelectorAll('table.keep tbody tr').length") == \
        len(next(iter(doc["model"]["summary"].values()))["keep_binary32"])
    assert browser.evaluate("document.getElementById('keep-none') !== null")
    assert browser.screenshot(tmp_path / "model.png") > 10_000
    assert browser.errors == []


# Model runs of every kind the tests make: captured torch models (attention, convolutions and
# pooling, embeddings with integer inputs and a scalar loss, transposed convolutions), every
# route, a plain format, a scaled format and a recipe on products.
RUNS = (("mlp", ("bfloat16",), "strict"),
        ("cnn", ("bfloat16", "mxfp8_e4m3"), "strict"),
        ("transformer-causal", ("binary16",), "fp32_accumulate"),
        ("embedding-cross-entropy", ("bfloat16",), "strict"),
        ("conv-transpose", ("mxfp8_e4m3",), "scaled_recipe"))


@pytest.mark.parametrize("key, formats, policy", RUNS, ids=[r[0] for r in RUNS])
def test_the_page_of_every_kind_of_model_run_draws(browser, tmp_path, key, formats, policy):
    torch = pytest.importorskip("torch")
    import torch_models
    from roundoff_coverage import routes
    model, args = torch_models.models()[key]
    with torch.no_grad():
        routes.from_torch(model.eval(), args).save(str(tmp_path / "g.json"))
    status = main(["model", str(tmp_path / "g.json"), "--formats", ",".join(formats),
                   "--policies", policy, "--routes", "forward,gradient,tangent",
                   "--samples", "2", "--jobs", "1", "--quiet", "--out",
                   str(tmp_path / "r.json"), "--html", str(tmp_path / "html")])
    assert status == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    browser.navigate(cdp.file_url(tmp_path / "html" / "model.html"))
    text = browser.evaluate("document.body.textContent")
    assert "could not be drawn" not in text and "malformed row" not in text
    points = browser.evaluate("document.querySelectorAll('svg.along-graph circle.pt').length")
    assert points > 0, browser.evaluate("document.body.innerHTML").count("along-graph")
    nodes = {r["node"] for r in doc["rows"] if r["node_index"] is not None}
    drawn = set(browser.evaluate("[...document.querySelectorAll('table.model td span[id]')]"
                                 ".map(a => a.textContent)"))
    assert nodes <= drawn | {r["node"] for r in doc["rows"] if r["status"] != "ok"}
    browser.navigate(cdp.file_url(tmp_path / "html" / "index.html"))
    index = browser.evaluate("document.body.textContent")
    assert "unknown" not in index and "written before rows had by_kind" not in index
    assert browser.errors == []

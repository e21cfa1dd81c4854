"""Static HTML error reports of a results file: ``build(results_path, out_dir, baseline=None)``.

The report is a folder that opens from disk (file://) with no server and no network:

- ``index.html``: what was run, coverage by family and format, what is missing, the heat
  map (inline SVG) and the sortable, filterable table of every row;
- ``ops/<operator>.html``: one page per operator (operator_page.py);
- ``model.html`` for a model run (model_page.py): nodes in execution order with their
  local and propagated errors, module groups, where to keep precision;
- ``compare.html`` with ``baseline``: what got better and worse (compare.py);
- ``advice.html``: the precision advisor's answer (``build_advice``, advice_page.py);
- ``assets/``: the style sheet, the table's script and its data (rows.js).

Reports are pure functions of the result records (shared/STYLE.md rule 12): malformed rows
become error rows, and a page or section that fails to render becomes an error message in
the report rather than an exception.  ``HtmlError`` (one line) is raised only for a results
or baseline file that cannot be read, one with two rows of one route key (results.check: the
gate refuses it too), and an output folder that cannot be written.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from roundoff_coverage.engine import results
from roundoff_coverage.reports import gate

from . import advice_page, assets, compare, index, model, model_page, operator_page
from .markup import esc, page, slug

__all__ = ["build", "build_advice", "prepare", "HtmlError", "Built"]


class HtmlError(ValueError):
    """A results file, baseline or output folder the report cannot use (one line)."""


@dataclass
class Built:
    """What ``build`` wrote: the folder, the main page, the number of files, seconds."""

    out: str
    index: str
    files: int
    seconds: float


def build(results_path, out_dir, baseline=None) -> Built:
    """Write the report of the results file ``results_path`` into ``out_dir`` (created if
    needed); with ``baseline`` (a results file) also the comparison page."""
    t0 = time.perf_counter()
    try:
        doc = results.check(results.read(results_path), results_path, strict=False)
    except results.ResultsError as exc:
        raise HtmlError(_one_line(exc)) from None
    cmp = summary = None
    if baseline is not None:
        try:
            cmp, summary = compare.comparison(baseline, results_path)
        except gate.GateError as exc:
            raise HtmlError(_one_line(exc)) from None
    prepare(out_dir)
    report = model.Report(doc, results_path)
    files = {"assets/report.css": assets.CSS, "assets/report.js": assets.JS,
             "assets/rows.js": _guard(lambda: index.rows_script(report),
                                      "window.ROUNDOFF_TABLE = null;\n")}
    files["index.html"] = page("Roundoff coverage report",
                               index.page_body(report, summary, _section),
                               scripts=("rows.js", "report.js"), view=report.default_view)
    for op, rows in report.by_op.items():
        files[f"ops/{slug(op)}.html"] = page(
            f"{op}: roundoff coverage", _guard(lambda: operator_page.page_body(report, op, rows),
                                              None, op), root="../")
    if report.model is not None:
        files["model.html"] = page("Model: roundoff coverage", _guard(
            lambda: model_page.page_body(report, _section), None, "model", root=""))
    if baseline is not None:
        files["compare.html"] = page("Comparison with the baseline",
                                     compare.page_body(cmp, summary, baseline))
    _write(out_dir, files)
    return Built(str(out_dir), os.path.join(str(out_dir), "index.html"), len(files),
                 time.perf_counter() - t0)


def build_advice(doc: dict, out_dir) -> Built:
    """Write the page of the advisor's answer ``doc`` (``advise --out``'s JSON) into
    ``out_dir`` as advice.html, with the style sheet."""
    t0 = time.perf_counter()
    prepare(out_dir)
    files = {"assets/report.css": assets.CSS,
             "advice.html": page("Precision advice", _guard(
                 lambda: advice_page.page_body(doc), None, "advice", root=""))}
    _write(out_dir, files)
    return Built(str(out_dir), os.path.join(str(out_dir), "advice.html"), len(files),
                 time.perf_counter() - t0)


def _write(out_dir, files) -> None:
    """Write ``files`` ({path under out_dir: text}); HtmlError when impossible."""
    try:
        for name, text in files.items():
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as fh:
                fh.write(text)
    except OSError as exc:
        raise HtmlError(f"cannot write the report into {out_dir}: "
                        f"{exc.strerror or exc}") from None


def prepare(out_dir) -> None:
    """Create ``out_dir`` with its assets/ and ops/ folders; HtmlError when impossible."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise HtmlError(f"report folder {out_dir} is not a folder (give a folder path)")
    try:
        for sub in ("assets", "ops"):
            os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
        probe = os.path.join(out_dir, f".roundoff-coverage-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise HtmlError(f"cannot write the report into {out_dir}: "
                        f"{exc.strerror or exc}") from None


def _guard(render, fallback, op=None, root="../"):
    """``render()``, or an error message in its place when it raises (module docstring);
    ``root``: the path from the page back to the report folder (operator pages sit in ops/,
    the model page beside index.html)."""
    try:
        return render()
    except Exception as exc:                                  # noqa: BLE001
        if fallback is not None:
            return fallback
        return (f'<header><nav><a href="{root}index.html">report</a></nav><h1 id="operator">'
                f'{esc(op)}</h1></header><p class="bad">This page could not be drawn: '
                f"{esc(_one_line(exc))}</p>")


def _section(render, title) -> str:
    """A section of the main page, or its error message."""
    try:
        return render()
    except Exception as exc:                                  # noqa: BLE001
        return (f'<section><h2>{esc(title)}</h2><p class="bad">This section could not be '
                f"drawn: {esc(_one_line(exc))}</p></section>")


def _one_line(exc) -> str:
    return " ".join(str(exc).split())

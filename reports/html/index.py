"""The main page (index.html): what was run, coverage by family and format, what is missing,
the heat map, and the table of every row; and the table's data file (assets/rows.js).

The table's rows travel as one JSON value in assets/rows.js, rendered a page at a time by
assets/report.js, so index.html stays small (the heat map is its largest part) and the
browser builds at most ``PAGE_ROWS`` table rows at once however large the run.
"""

from __future__ import annotations

import datetime
import math
import os

from roundoff_coverage.reports import views

from . import model, svg
from .markup import bits, count, esc, script_json, short, slug, table
from .palette import LogScale

# (key, header, type): "num" columns sort numerically (first click: largest first).
COLUMNS = (("op", "operator", "text"), ("instance", "instance", "text"),
           ("route", "route", "text"), ("port", "port", "text"), ("format", "format", "text"),
           ("mode", "mode", "text"), ("policy", "policy", "text"),
           ("implementation", "implementation", "text"), ("device", "device", "text"),
           ("status", "status", "text"), ("over", "errors over", "text"),
           ("max_ulp", "max |err| (ulp)", "num"),
           ("p99_ulp", "p99 |err| (ulp)", "num"), ("mean_ulp", "mean |err| (ulp)", "num"),
           ("max_bits", "max err (bits)", "num"), ("mean_bits", "mean err (bits)", "num"),
           ("max_rel", "max rel. err (relative)", "num"),
           ("bound_ratio", "bound ratio (× bound)", "num"),
           ("violations", "violations (samples)", "num"),
           ("exceptional", "exceptional outcomes (samples)", "text"),
           ("flags", "IEEE flags", "text"), ("note", "reason / need", "text"))
# The columns whose values depend on the view (reports/views.py): the rows hold the whole
# range's, ``ordinary`` the ordinary domain's.
VIEW_COLUMNS = ("over", "max_ulp", "p99_ulp", "mean_ulp", "max_bits", "mean_bits",
                "exceptional")
OVER = {views.ORDINARY: "ordinary draws", views.WHOLE: "every draw",
        None: "no ordinary draws (see whole range)"}
PAGE_ROWS = 100


def op_href(op: str, anchor: str = "") -> str:
    return f"ops/{slug(op)}.html" + (f"#{anchor}" if anchor else "")


def cell_anchor(route: str, fmt: str) -> str:
    return slug(f"{route}-{fmt}")


def _json_number(v):
    """A float for JSON: non-finite values as the results file spells them."""
    if v is None:
        return None
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _view_cells(r: model.Row, view) -> dict:
    """The VIEW_COLUMNS of row ``r`` in ``view``: its statistics there, or empty numbers
    and a note where it has none (no ordinary draws); no numbers for rows without ulps."""
    numbers = VIEW_COLUMNS[1:-1]
    if r.status not in model.MEASURED or r.max_ulp is None:
        return {"over": "", "exceptional": _exceptional(r.exceptional)} | \
            dict.fromkeys(numbers)
    s = r.stats(view)
    if s is None:
        return {"over": OVER[None], "exceptional": ""} | dict.fromkeys(numbers)
    return {"over": OVER[view], "exceptional": _exceptional(s.get("exceptional") or {})} | {
        k: _json_number(s.get(k)) for k in numbers}


def _exceptional(counts: dict) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))


def table_data(report: model.Report) -> dict:
    """The table's rows as arrays in COLUMNS order (the whole range's numbers), with each
    row's link; ``ordinary``: per row, the VIEW_COLUMNS on the ordinary domain (None for a
    file without statistics per sample kind); ``view``: the view the page opens on."""
    rows, ordinary = [], []
    for r in report.rows:
        note = r.reason or ""
        if r.need:
            note = f"needs {r.need}" + (f": {note}" if note and r.need not in note else "")
        cells = {"op": r.op, "instance": r.instance or r.attrs_text, "route": r.route,
                 "port": r.port, "format": r.format, "mode": r.mode, "policy": r.policy,
                 "implementation": r.implementation, "device": r.device, "status": r.status,
                 "flags": ", ".join(r.flags or []), "note": note}
        cells |= _view_cells(r, views.WHOLE)
        for key in ("max_rel", "bound_ratio"):
            cells[key] = _json_number(r.values.get(key))
        cells["violations"] = r.violations
        rows.append([cells[k] for k, _, _ in COLUMNS] + [op_href(r.op, f"r{r.index}")])
        alt = _view_cells(r, views.ORDINARY)
        ordinary.append([alt[k] for k in VIEW_COLUMNS])
    return {"columns": [{"key": k, "label": h, "type": t} for k, h, t in COLUMNS],
            "pageRows": PAGE_ROWS, "rows": rows, "viewColumns": list(VIEW_COLUMNS),
            "ordinary": ordinary if report.has_kinds else None, "view": report.default_view}


def rows_script(report: model.Report) -> str:
    """assets/rows.js: the table data as one assignment."""
    return "window.ROUNDOFF_TABLE = " + script_json(table_data(report)) + ";\n"


# ----- sections --------------------------------------------------------------------------------

def page_body(report: model.Report, comparison_line: str | None, guard) -> str:
    """The main page's body; ``guard(render, title)`` draws a section or its error."""
    nav = ['<a href="#overview">overview</a>', '<a href="#heatmap">heat map</a>',
           '<a href="#coverage">coverage</a>', '<a href="#missing">missing</a>',
           '<a href="#table">all rows</a>']
    if comparison_line is not None:
        nav.append('<a href="compare.html">comparison with the baseline</a>')
    return (f'<header><h1>Roundoff coverage report</h1><nav>{" · ".join(nav)}</nav></header>'
            + guard(lambda: view_bar(report), "Errors shown") + "<main>"
            + guard(lambda: overview(report, comparison_line), "What was run")
            + guard(lambda: heatmap(report), "Heat map")
            + guard(lambda: coverage(report), "Coverage")
            + guard(lambda: missing(report), "What is missing")
            + guard(lambda: rows_table(report), "All rows") + "</main>")


def view_bar(report: model.Report) -> str:
    """The switch between the ordinary domain and the whole range (reports/views.py), kept
    in view at the top of the page, saying which one the heat map and the table show; for
    a results file without statistics per sample kind it is disabled, with a note."""
    off = "" if report.has_kinds else " disabled"
    choices = "".join(
        f'<label><input type="radio" name="view" value="{v}"'
        f'{" checked" if v == report.default_view else ""}{off}> {esc(views.TITLES[v])}'
        f"</label> " for v in views.VIEWS)
    said = "".join(f'<span class="only-{v}">{esc(views.DESCRIPTIONS[v])}.</span>'
                   for v in views.VIEWS)
    note = "" if report.has_kinds or report.model is not None else (
        ' <span class="note" id="view-note">This results file has no statistics per sample '
        "kind (it was written before rows had <code>by_kind</code>): only the whole range "
        "can be shown.</span>")
    if report.model is not None and not report.has_kinds:
        note = (' <span class="note" id="view-note">A model run measures every element of '
                "the model's tensors on its samples: there are no sample kinds, only the "
                "whole range.</span>")
    elif report.has_kinds and report.default_view == views.WHOLE:
        note = (' <span class="note" id="view-note">No row of this file has ordinary draws '
                "(its inputs were enumerated): it opens on the whole range.</span>")
    if report.model is not None and not report.has_kinds:
        said = '<span class="only-whole">every element of every sample.</span>'
    return ('<div id="view-bar" class="viewbar" role="group" aria-label="errors shown">'
            f'<b>Errors shown:</b> {choices}<span id="view-said">Showing {said}</span>'
            f"{note}</div>")


def _list(v) -> str:
    if isinstance(v, list):
        return ", ".join(str(x) for x in v) or "–"
    return "–" if v is None else str(v)


def overview(report: model.Report, comparison_line) -> str:
    meta, sel = report.meta, report.selection
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    machine = meta.get("machine") if isinstance(meta.get("machine"), dict) else {}
    try:
        written = datetime.datetime.fromtimestamp(os.path.getmtime(report.path),
                                                  datetime.timezone.utc)
        written = written.strftime("%Y-%m-%d %H:%M UTC") + " (the file's modification time)"
    except OSError:
        written = "–"
    samples = sel.get("samples")
    about = [("model", esc(report.model.target)),
             ("graph artifact", f"<code>{esc(report.model.artifact)}</code>")] \
        if report.model is not None else []
    items = [("command", f"<code>{esc(meta.get('command', '–'))}</code>")] + about + [
        ("formats", esc(_list(sel.get("formats")))),
        ("rounding modes", esc(_list(sel.get("modes")))),
        ("accumulation policies", esc(_list(sel.get("policies")))),
        ("implementations", esc(_list(sel.get("implementations")))),
        ("routes", esc(_list(sel.get("routes")))),
        ("operators", esc(count(len(report.by_op), "operator")))]
    if report.model is None:
        items += [("draws", esc(count(samples, "draw") + " per sample kind and task"
                                if isinstance(samples, int) else "–")),
                  ("exhaustive", "yes" if sel.get("exhaustive") else "no")]
    else:
        items.append(("samples", esc(count(samples, "sample") + " of the model's inputs"
                                     if isinstance(samples, int) else "–")))
    items += [
        ("seed", esc(meta.get("seed", "–"))),
        ("tool", esc(f"{meta.get('tool', 'roundoff-coverage')} {meta.get('version', '?')}")),
        ("versions", esc(", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or "–")),
        ("machine", esc(" ".join(str(v) for _, v in sorted(machine.items())) or "–")),
        ("reference", esc(meta.get("reference", "–"))),
        ("results file", f"<code>{esc(report.path)}</code>, written {esc(written)}"),
    ]
    counts = report.status_counts()
    items.append(("rows", esc(f"{len(report.rows)} route ports: " + ", ".join(
        f"{n} {s}" for s, n in counts.items()))))
    if report.model is not None:
        items.append(("model page", '<a href="model.html">every node\'s local and '
                                    'propagated errors, along the graph, and where to keep '
                                    'precision</a>'))
    if comparison_line is not None:
        items.append(("baseline", f'<a href="compare.html">{esc(comparison_line)}</a>'))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<section id="overview"><h2>What was run</h2><dl class="meta">{dl}</dl></section>'


_COVERAGE = ("measured", "bounded", "without a rule", "not differentiable", "failed")


def coverage(report: model.Report) -> str:
    """One row per family, one column per format; each cell lists the counts of route ports
    by outcome (zeros left out, measured always shown), a last row sums each format."""
    cells, totals = {}, {}
    for fam, fmt, *c in model.coverage(report):
        cells[(fam, fmt)] = c
        totals[fmt] = [a + b for a, b in zip(totals.get(fmt, [0] * 5), c)]
    rows = [[esc(fam)] + [_coverage_cell(cells.get((fam, f))) for f in report.formats]
            for fam in report.families]
    rows.append(["<b>all families</b>"] + [_coverage_cell(totals.get(f)) for f in
                                          report.formats])
    return ('<section id="coverage"><h2>Coverage by family and format</h2>'
            '<p>Counts of route ports (rows of the results): <i>measured</i> have errors '
            'against exact values; <i>bounded</i> of those also have a certified or a '
            'rigorous (enclosure) bound; '
            '<i>without a rule</i> need a capability the backend lacks; <i>not '
            'differentiable</i> have no tangent or gradient route; <i>failed</i> raised an '
            'error.  Zero counts are left out.</p>'
            + table(("family",) + tuple(report.formats), rows, "coverage") + "</section>")


def _coverage_cell(c) -> str:
    if c is None:
        return "–"
    parts = []
    for i, (n, what) in enumerate(zip(c, _COVERAGE)):
        if n or i == 0:
            cls = ' class="bad"' if i == 4 else ""
            parts.append(f"<span{cls}>{n} {what}</span>")
    return "<br>".join(parts)


def missing(report: model.Report) -> str:
    groups = model.missing(report)
    parts = ['<section id="missing"><h2>What is missing</h2>']
    titles = {"error": "Failed (error, with its reason)",
              "convention": "Measured against the implementation's own convention (where "
                            "it differs from the rule's)",
              "no_rule": "Without a rule (the capability needed)",
              "not_differentiable": "Not differentiable"}
    for status in ("error", "convention", "no_rule", "not_differentiable"):
        items = groups[status]
        n = sum(g[4] for g in items)
        rows = [[f'<a href="{esc(op_href(op))}">{esc(op)}</a>', esc(route), esc(why),
                 esc(", ".join(fmts)), esc(count(k, "row"))] for op, route, why, fmts, k in items]
        body = table(("operator", "route", "reason", "formats", "rows"), rows, "missing") \
            if rows else "<p>None.</p>"
        opened = " open" if status != "not_differentiable" and n else ""
        parts.append(f"<details{opened}><summary>{esc(titles[status])}: "
                     f"{esc(count(n, 'row'))}</summary>{body}</details>")
    return "".join(parts) + "</section>"


def _cell(rows, view=views.WHOLE):
    """(state, value) of the heat map cell of one operator, route and format in ``view``:
    ``no_ordinary`` where its rows have ulp errors but none on the ordinary domain."""
    statuses = {r.status for r in rows}
    measured = [r for r in rows if r.status in model.MEASURED and r.max_ulp is not None]
    if "error" in statuses:
        return "error", None
    if measured:
        vals = [s.get("max_ulp") for s in (r.stats(view) for r in measured) if s]
        vals = [math.inf if math.isnan(v) else v for v in vals if v is not None]
        return ("measured", max(vals)) if vals else ("no_ordinary", None)
    ok = [r for r in rows if r.status in model.MEASURED]
    if ok:
        return ("mismatch" if any((r.mismatches or 0) > 0 for r in ok) else "exact"), None
    return ("no_rule" if "no_rule" in statuses else "not_differentiable"), None


def heatmap(report: model.Report) -> str:
    columns = [(route, fmt) for route in report.routes for fmt in report.formats]
    col = {c: j for j, c in enumerate(columns)}
    ops = report.ops_in_order()
    groups: dict = {}
    for r in report.rows:
        groups.setdefault((r.op, r.route, r.format), []).append(r)
    cells, values, states = {}, [], set()
    row_of = {op: i for i, op in enumerate(ops)}
    shown = views.VIEWS if report.has_kinds else (views.WHOLE,)
    for (op, route, fmt), rows in groups.items():
        per_view = {v: _cell(rows, v) for v in shown}
        values += [value for state, value in per_view.values() if state == "measured"]
        states |= {state for state, _ in per_view.values()}
        cells[(row_of[op], col[(route, fmt)])] = (
            per_view, op_href(op, cell_anchor(route, fmt)),
            _title(op, route, fmt, per_view, rows))
    # One scale for both views, so that a colour is the same error in either.
    scale = LogScale.covering(values)
    labels = [(op, report.by_op[op][0].family) for op in ops]
    fig = svg.heatmap(labels, columns, cells, scale, report.default_view)
    over = "".join(f'<span class="only-{v}">{esc(views.TITLES[v])}</span>' for v in shown)
    return ('<section id="heatmap"><h2>Heat map: max error per operator, route and '
            f'format, {over}</h2><figure class="wide">'
            + svg.legend(scale, "no_ordinary" in states) +
            '<div class="scroll">' + fig + '</div><figcaption>Each cell is the largest max '
            '|error| in ulp of the format over the instances, ports, modes, policies and '
            'implementations of one operator, route and format, coloured on a log2 scale '
            '(viridis: dark small, bright large), on the ordinary domain (draws of sample '
            'kind ordinary) or over the whole range (every draw) as the switch at the top '
            'says, on one scale for both.  Outputs compared exactly (integers, Booleans) '
            'count as 0 ulp when all match.  Click a cell for its details; hover for the '
            'numbers of both views.</figcaption></figure></section>')


def _title(op, route, fmt, per_view, rows) -> str:
    """The hover text of a cell: the maximum in each view, named."""
    if not any(state in ("measured", "no_ordinary") for state, _ in per_view.values()):
        state, value = per_view[views.WHOLE]
        return _title_state(op, route, fmt, state, value, rows)
    parts = [f"{views.TITLES[v]}: max |error| {short(value)} ulp" if state == "measured"
             else f"{views.TITLES[v]}: no ordinary draws" for v, (state, value) in
             per_view.items()]
    return f"{op} {route} {fmt}: " + "; ".join(parts) + f" (over {count(len(rows), 'row')})"


def _title_state(op, route, fmt, state, value, rows) -> str:
    head = f"{op} {route} {fmt}: "
    if state == "measured":
        return head + f"max |error| {short(value)} ulp over {count(len(rows), 'row')}"
    if state == "error":
        bad = next(r for r in rows if r.status == "error")
        return head + f"failed: {bad.reason or 'no reason given'}"
    if state == "exact":
        return head + "outputs compared exactly: no mismatch"
    if state == "mismatch":
        return head + "outputs compared exactly: mismatches"
    if state == "no_rule":
        r = next(r for r in rows if r.status == "no_rule")
        return head + f"no rule (needs {r.need or '?'})"
    return head + "not differentiable"


def rows_table(report: model.Report) -> str:
    heads = "".join(
        f'<th data-key="{esc(k)}" data-type="{t}" aria-sort="none"><button type="button">'
        f"{esc(h)}</button></th>" for k, h, t in COLUMNS)
    fmts = "".join(f'<option value="{esc(f)}">{esc(f)}</option>' for f in report.formats)
    statuses = "".join(f'<option value="{s}">{s}</option>' for s in model.STATUSES)
    over = "".join(f'<span class="only-{v}">{esc(views.TITLES[v])}</span>'
                   for v in views.VIEWS)
    return (f'<section id="table"><h2>All rows, errors on the {over}</h2>'
            '<p>The columns from <i>errors over</i> to <i>exceptional outcomes</i> follow '
            'the switch at the top: the ordinary domain or the whole range.  Bits of error '
            'count the format values between the computed and the correctly rounded '
            "result: log2(1 + n), at most the format's width.  "
            'Click a header to sort (numbers: largest first, again for smallest; empty '
            'cells last).  The filter keeps the rows whose cells contain every word typed.'
            f'  Precision of the reference: {esc(bits(_ref_bits(report)))} at most.</p>'
            '<div class="controls"><label>filter <input id="filter" type="search" '
            'placeholder="e.g. softmax gradient bfloat16"></label> '
            f'<label>status <select id="status-filter"><option value="">all</option>'
            f'{statuses}</select></label> <label>format <select id="format-filter">'
            f'<option value="">all</option>{fmts}</select></label> '
            '<span id="table-count" aria-live="polite"></span></div>'
            '<div class="scroll"><table id="rows" class="rows num"><thead><tr>'
            f'{heads}</tr></thead><tbody></tbody></table></div>'
            '<div class="pager"><button type="button" id="prev">previous</button> '
            '<span id="page"></span> <button type="button" id="next">next</button></div>'
            '<noscript><p>The table needs JavaScript; the results file holds the same rows.'
            '</p></noscript></section>')


def _ref_bits(report):
    precs = [r.ref_prec for r in report.rows if r.ref_prec is not None]
    return max(precs) if precs else None

"""One page per operator (ops/<name>.html): its notes and certificates, then for each route
and format every row of the results: the metrics with their units, the histogram of ulp
errors, the error by binade of the exact value, the bound tightness, the IEEE flags, the
exceptional outcomes and the worst case with a Python reproducer.

A row that cannot be drawn (a malformed field the model let through, a reproducer that does
not fit the operator) becomes an error block with the reason; the rest of the page stands.
"""

from __future__ import annotations

import json

from . import model, snippet, svg
from .index import cell_anchor
from .markup import bits, count, esc, rel, ratio, table, ulp

_SHOW_ELEMENTS = 12            # stored input elements shown inline (all are in the snippet)


def page_body(report: model.Report, op: str, rows: list) -> str:
    family = rows[0].family
    parts = [f'<header><nav><a href="../index.html">report</a> · '
             f'<a href="../index.html#heatmap">heat map</a> · '
             f'<a href="../index.html#table">all rows</a></nav>'
             f'<h1 id="operator">{esc(op)}</h1><p>family {esc(family)} · '
             f'{esc(count(len(rows), "row"))} · '
             + ", ".join(f"{n} {s}" for s, n in report.status_counts(rows).items() if n)
             + "</p></header><main>", _declaration(report.operators, op)]
    for route in report.routes:
        in_route = [r for r in rows if r.route == route]
        if not in_route:
            continue
        parts.append(f'<section><h2>{esc(route)}</h2>')
        for fmt in report.formats:
            block = [r for r in in_route if r.format == fmt]
            if not block:
                continue
            parts.append(f'<section class="fmt" id="{esc(cell_anchor(route, fmt))}">'
                         f"<h3>{esc(route)} in {esc(fmt)}</h3>")
            parts += [_safe_row(report, r) for r in block]
            parts.append("</section>")
        parts.append("</section>")
    parts.append("</main>")
    return "".join(parts)


def _declaration(table, op: str) -> str:
    """The operator's notes and certificates as the results file records them (as
    ``roundoff-coverage ops`` showed them when the run was made; reports/operators.py)."""
    entry = table.entry(op)
    if entry is None:
        return ('<section><h2>Notes and certificates</h2><p class="note">Not recorded in this '
                "results file, and not in this version's operator table.</p></section>")
    source = "" if table.recorded else (
        '<p class="note">This results file does not record its operators: shown from the '
        "operator table of this version.</p>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in entry.get("notes") or []) or "<li>none</li>"
    items = []
    for c in entry.get("certificates") or []:
        if not isinstance(c, dict):
            continue
        route = f" ({c['route']})" if c.get("route") else ""
        where = f" (inputs {list(c['inputs'])})" if isinstance(c.get("inputs"), list) else ""
        evidence = "".join(f"<li><code>{esc(e)}</code></li>" for e in c.get("evidence") or [])
        items.append(f"<li><b>{esc(c.get('kind', '?'))}</b>{esc(route + where)}: "
                     f"{esc(c.get('statement', ''))}<ul class='evidence'>{evidence}</ul></li>")
    certs_html = "".join(items) or "<li>none</li>"
    return (f'<section><h2>Notes and certificates</h2>{source}<h3>Notes</h3><ul>{notes}</ul>'
            f"<h3>Certificates</h3><ul>{certs_html}</ul></section>")


def _safe_row(report, r) -> str:
    try:
        return _row(report, r)
    except Exception as exc:                                  # noqa: BLE001
        from roundoff_coverage.reports.evaluate import one_line
        return (f'<div class="row error" id="r{r.index}"><h4>{esc(_heading(r))}</h4>'
                f"<p>This row could not be drawn: {esc(one_line(exc))}</p></div>")


def _heading(r) -> str:
    attrs = r.instance or r.attrs_text or "default"
    return (f"{r.op} [{attrs}] · port {r.port} · {r.mode} · {r.policy} · "
            f"{r.implementation} on {r.device}")


def _row(report, r) -> str:
    head = (f'<h4>{esc(_heading(r))} <span class="status {esc(r.status)}">{esc(r.status)}'
            f"</span></h4>")
    if r.status not in model.MEASURED:
        why = esc(r.reason or "no reason given")
        need = f" (needs capability <code>{esc(r.need)}</code>)" if r.need else ""
        cls = "error" if r.status == "error" else "missing"
        return f'<div class="row {cls}" id="r{r.index}">{head}<p>{why}{need}</p></div>'
    exc = ", ".join(f"{k}: {count(n, 'sample')}" for k, n in sorted(r.exceptional.items()))
    metrics = [("samples", count(r.samples, "sample")), ("max |error|", ulp(r.max_ulp)),
               ("p99 |error|", ulp(r.p99_ulp)), ("mean |error|", ulp(r.mean_ulp)),
               ("signed range", f"{ulp(r.min_signed_ulp)} to {ulp(r.max_signed_ulp)}"),
               ("max relative error", rel(r.max_rel)),
               ("bound", ulp(r.bound) if r.bound is not None else "no certified bound"),
               ("bound ratio", ratio(r.bound_ratio)),
               ("rigorous bound (enclosures)", ulp(r.interval_bound)
                if r.interval_bound is not None else "none"),
               ("rigorous bound ratio", ratio(r.interval_bound_ratio)),
               ("violations", count(r.violations, "sample") if r.violations is not None
                else "–"),
               ("unmeasurable errors", count(r.unmeasured, "sample")),
               ("exceptional outcomes", exc or "none"),
               ("IEEE flags raised", ", ".join(r.flags) if r.flags else
                ("none" if r.flags == [] else "not recorded")),
               ("reference precision", bits(r.ref_prec))]
    if r.status == "convention":
        metrics.insert(0, ("convention", r.reason or "no reason given"))
    if r.mismatches is not None:
        metrics.insert(1, ("mismatches (exact comparison)", count(r.mismatches, "sample")))
    if r.contract is not None:
        metrics.append(("kernel contract", _contract(r.contract)))
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in metrics)
    if r.histogram is None and r.mismatches is not None:
        figures = ('<p class="note">Outputs compared exactly (integers, indices or Booleans): '
                   'no ulp figures.</p>')
    else:
        figures = svg.histogram(r.histogram, report.edges) + svg.magnitude(r.by_magnitude,
                                                                           r.format)
    return (f'<div class="row" id="r{r.index}">{head}<dl class="metrics">{dl}</dl>'
            f'<div class="figures">{figures}{svg.bound_bar(r.max_ulp, r.bound, r.violations)}'
            f"</div>{_worst(report, r)}</div>")


def _contract(c: dict) -> str:
    """A kernel's contract and whether it held (reports/cuda.py), in words."""
    claim = c.get("max_ulp")
    parts = [f"{'held' if c.get('held') else 'NOT held'}: agreement with the model "
             f"{c.get('agreement', '?')}",
             f"{c.get('differing', '?')} elements differing from it",
             f"claimed max {ulp(claim) if isinstance(claim, (int, float)) else 'none'}",
             f"order {c.get('order', '?')}, fma {c.get('fma', '?')}, ftz {c.get('ftz', '?')}"]
    return "; ".join(parts)


def _worst(report, r) -> str:
    w = r.worst
    if w is None:
        return '<p class="note">No worst case (no measurable error).</p>'
    facts = [("sample kind", w.get("kind")), ("draw", w.get("draw")),
             ("element (flat index)", w.get("element")),
             ("error", ulp(w["ulp"]) if isinstance(w.get("ulp"), (int, float)) else "–"),
             ("computed", w.get("computed")), ("exact", w.get("exact"))]
    rows = [[esc(k), f"<code>{esc(v)}</code>"] for k, v in facts]
    for what in ("inputs", "tangents", "cotangents"):
        ports = w.get(what)
        if isinstance(ports, dict):
            for name, v in ports.items():
                rows.append([esc(f"{what[:-1]} {name}"), f"<code>{esc(_shown(v))}</code>"])
    try:
        code = snippet.snippet(r, report.path)
        repro = (f"<details><summary>Python reproducer</summary><pre><code>{esc(code)}"
                 f"</code></pre></details>")
    except snippet.SnippetError as exc:
        repro = f'<p class="note">No reproducer snippet: {esc(exc)}</p>'
    return (f'<div class="worst"><h5>Worst case (bit patterns of the format, hexadecimal)'
            f"</h5>{table(('field', 'value'), rows, 'worst')}{repro}</div>")


def _shown(v) -> str:
    """A stored input for display: at most _SHOW_ELEMENTS elements of a pattern list."""
    if isinstance(v, list):
        flat = []

        def walk(x):
            if isinstance(x, list):
                for y in x:
                    walk(y)
            else:
                flat.append(x)
        walk(v)
        if len(flat) > _SHOW_ELEMENTS:
            return (" ".join(str(x) for x in flat[:_SHOW_ELEMENTS])
                    + f" … ({len(flat)} elements; all in the reproducer)")
        return json.dumps(v)
    return str(v)

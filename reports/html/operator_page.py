"""One page per operator (ops/<name>.html): its notes and certificates, then for each route
and format every row of the results: first its errors by sample kind, the ordinary domain
first, and where it broke down (what overflowed or underflowed inside, for which inputs);
then the samples by |error| bucket, the metrics over every draw with their units, the
histogram of ulp errors, the error by binade of the exact value, the error against the
input (unary elementwise operators), the bound tightness, the IEEE flags, the exceptional
outcomes and the worst case with a Python reproducer.  A row of a scaled format adds its
scheme, block axes, unit, what quantization did (clipped elements, blocks that became zero
or NaN) and the spread of its block scales.

A row that cannot be drawn (a malformed field the model let through, a reproducer that does
not fit the operator) becomes an error block with the reason; the rest of the page stands.
"""

from __future__ import annotations

import json

from roundoff_coverage.engine import rows as row_fields
from roundoff_coverage.engine.evaluate import one_line
from roundoff_coverage.reports import views

from . import model, snippet, svg
from .index import cell_anchor
from .markup import bits, count, error_bits, esc, rel, ratio, table, ulp

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
            parts.append(_side_by_side(block))
            parts += [_safe_row(report, r) for r in block]
            parts.append("</section>")
        parts.append("</section>")
    parts.append("</main>")
    return "".join(parts)


def _side_by_side(block) -> str:
    """The implementations of one route and format side by side (one line each, linking to
    its row below), when more than one measured it."""
    if len({r.implementation for r in block}) < 2:
        return ""
    lines = [[esc(r.instance or r.attrs_text or "default"),
              f'<a href="#r{r.index}">{esc(r.implementation)}</a>', esc(r.device),
              esc(r.port), esc(r.mode), esc(r.policy), esc(r.status), ulp(r.max_ulp),
              ulp(r.p99_ulp), ulp(r.mean_ulp), ratio(r.bound_ratio)]
             for r in sorted(block, key=lambda r: (r.instance or r.attrs_text or "",
                                                   str(r.port), r.mode, r.implementation,
                                                   r.policy))]
    return ('<p class="note">Implementations side by side, against the same exact values '
            '(each links to its row):</p>' + table(
                ["instance", "implementation", "device", "port", "mode", "policy", "status",
                 "max ulp",
                 "p99 ulp", "mean ulp", "bound ratio"], lines, "side"))


def _declaration(table, op: str) -> str:
    """The operator's notes and certificates as the results file records them (as
    ``roundoff-coverage ops`` showed them when the run was made; engine/operators.py)."""
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
               ("max error in bits", error_bits(r.max_bits)),
               ("mean error in bits", error_bits(r.mean_bits)),
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
        # Where it breaks down first (unary elementwise operators), then the distributions.
        figures = svg.by_input(r.by_input, r.format) + svg.histogram(r.histogram, report.edges) \
            + svg.magnitude(r.by_magnitude, r.format)
    return (f'<div class="row" id="r{r.index}">{head}{_scaled(r)}{_by_kind(r)}'
            f'{_breakdown(r)}{_buckets(r)}<p class="over">Over every draw (the whole range):'
            f'</p><dl class="metrics">{dl}</dl>'
            f'<div class="figures">{figures}{svg.bound_bar(r.max_ulp, r.bound, r.violations)}'
            f"{_spread(r)}</div>{_worst(report, r)}</div>")


def _scaled(r) -> str:
    """A scaled format's facts (engine/rows.py SCALED_FIELDS): the scheme, the unit of the
    errors, the block axes, and what quantizing the port and each input did."""
    sc = r.scaled
    if sc is None:
        return ""
    facts = [("scheme", sc.get("scheme")),
             ("unit of the errors", sc.get("error_unit") or "exact comparison"),
             ("block axes (from the end)", sc.get("scale_axis"))]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
    # A recipe's row quantized its operands only: no counts of its own port.
    body = [[esc(f"{r.port} (measured)")] + _block_cells(sc)] \
        if sc.get("blocks") is not None else []
    inputs = sc.get("scaled_inputs")
    for name, c in (inputs.items() if isinstance(inputs, dict) else ()):
        if isinstance(c, dict):
            body.append([esc(name)] + _block_cells(c))
    return (f'<div class="scaled"><h5>Scaled format</h5><dl class="metrics">{dl}</dl>'
            + table(("tensor", "blocks", "clipped elements", "blocks become zero",
                     "NaN blocks", "scales from", "scales to"), body, "scaled num")
            + "</div>")


def _block_cells(c) -> list:
    exps = c.get("scale_exponents")
    ks = [p[0] for p in exps if isinstance(p, list) and p] if isinstance(exps, list) else []
    return [esc("–" if c.get(k) is None else c.get(k))
            for k in ("blocks", "clipped", "zero_blocks", "nan_blocks")] + \
        [esc(f"2^{min(ks)}") if ks else "–", esc(f"2^{max(ks)}") if ks else "–"]


def _spread(r) -> str:
    """The spread of the block scales of the measured port (a scaled row)."""
    if r.scaled is None or r.scaled.get("blocks") is None:
        return ""
    return svg.scale_spread(r.scaled.get("scale_exponents"), f"port {r.port}")


def _kinds(r) -> list:
    """[(label, statistics)] of a row: its sample kinds, ordinary first, then every draw."""
    order = {k: i for i, k in enumerate(("ordinary", "edges", "special", "magnitudes"))}
    kinds = sorted(r.by_kind or {}, key=lambda k: (order.get(k, len(order)), k))
    out = [(k, r.by_kind[k]) for k in kinds if isinstance(r.by_kind[k], dict)]
    return out + [("every draw (whole range)", r.stats(views.WHOLE))]


def _by_kind(r) -> str:
    """The errors of each sample kind, the ordinary domain first: how accurate the route is
    where it is meant to be used, before where it breaks down."""
    if r.by_kind is None:
        if r.histogram is None and r.mismatches is not None:
            return ""
        return ('<p class="note">No statistics per sample kind (a results file written '
                "before rows had by_kind, or inputs not drawn by kind): the figures below "
                "are over every draw.</p>")
    body = []
    for label, s in _kinds(r):
        exc = ", ".join(f"{k} {n}" for k, n in sorted((s.get("exceptional") or {}).items()))
        cells = [count(s.get("samples"), "sample")] + [
            ulp(views.number(s.get(k))) for k in ("max_ulp", "p99_ulp", "mean_ulp")] + [
            error_bits(views.number(s.get(k))) for k in ("max_bits", "mean_bits")] + [
            count(s.get("unmeasured"), "sample"), exc or "none"]
        name = f"<b>{esc(label)}</b>" if label == views.ORDINARY else esc(label)
        body.append([name] + [esc(c) for c in cells])
    return ("<h5>Errors by sample kind</h5>" + table(
        ("draws", "samples", "max |error|", "p99 |error|", "mean |error|", "max error",
         "mean error", "unmeasurable", "exceptional outcomes"), body, "kinds num"))


def _breakdown(r) -> str:
    """Where the route broke down, in words (reports/views.py), from its ``inside``."""
    if r.inside is None:
        return ""
    said = views.inside_words(r.inside, r.format)
    if not said:
        return ('<p class="breakdown">Nothing overflowed, underflowed or became NaN inside '
                "the route on these samples.</p>")
    items = "".join(f"<li>{esc(w)}</li>" for w in said)
    return (f'<div class="breakdown"><b>Where it breaks down</b> (outcomes not even a '
            f"faithful rounding of the exact value):<ul>{items}</ul></div>")


def _buckets(r) -> str:
    """Samples by |error| bucket (engine/rows.py BUCKET_LABELS) per sample kind, as
    accuracy reports of hardware vendors count them."""
    rows = [(label, s.get("buckets")) for label, s in
            (_kinds(r) if r.by_kind is not None else [("every draw", {"buckets": r.buckets})])]
    n = len(row_fields.BUCKET_LABELS)
    body = [[esc(label)] + [esc(c) for c in b] for label, b in rows
            if isinstance(b, list) and len(b) == n]
    if not body:
        return ""
    heads = ("draws",) + tuple(f"{b} ulp".replace("<=", "≤") if b[0] in "<>0" else b
                               for b in row_fields.BUCKET_LABELS)
    return "<h5>Samples by |error|</h5>" + table(heads, body, "buckets num")


def _contract(c: dict) -> str:
    """A kernel's contract and whether it held (engine/implementations/cuda.py), in words."""
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
    if r.scaled is not None:
        return (f'<div class="worst"><h5>Worst case (inputs, tangents and cotangents: the '
                f"dequantized values of {esc(r.scaled.get('scheme'))} as binary64 bit "
                f"patterns, hexadecimal)</h5>{table(('field', 'value'), rows, 'worst')}"
                '<p class="note">No reproducer snippet for a scaled format: evaluate the '
                "route under numerics.emulated(\"binary32\") on these inputs, then quantize "
                "its output with formats.quantize(y, scheme, axis=-1).</p></div>")
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

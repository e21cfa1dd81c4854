"""The model page of a model run's report (``model.html``), a pure function of the typed
rows (model.Row) and summary (model.ModelInfo) of the results file.

What it shows, per configuration: the whole model's outputs and input gradients; a plot of
each node's propagated error along the graph in execution order (forward, tangent and
gradient routes, modules as bands); per route a table of every node and port in execution
order, grouped by module, with the normwise measures (engine/tensor_measures.py: bits of
agreement, norm_rel, SQNR, cosine, error at the tensor's scale, cancelled elements) beside
the componentwise ulps; attribution shares where the rows carry them; the nodes adding the
most error and the keep-in-binary32 experiment from the summary; and per node how to load
the graph artifact and inspect that node.  Numbers that are not finite read inf or NaN.
"""

from __future__ import annotations

import math

from . import svg
from .markup import esc, short, slug, table

BAR_W, BAR_H = 120, 10
LOCAL_FILL, PROPAGATED_FILL, OTHER_FILL = "#5ec962", "#3b528b", "#e08214"
ROUTES = ("forward", "tangent", "gradient")
MEASURES = (
    "<b>bits</b>: bits of agreement, −log2 of the normwise relative error "
    "<b>norm_rel</b> = ‖ŷ − y‖₂ / ‖y‖₂ (∞: computed = exact; – where the exact tensor is 0 "
    "and the computed one is not); <b>max-norm rel</b>: max |ŷ − y| / max |y|; "
    "<b>SQNR</b>: 10 log10(‖y‖² / ‖ŷ − y‖²) in dB; <b>cosine</b>: cosine similarity of ŷ "
    "and y; <b>scale ulp</b>: max |ŷ − y| in ulps of the format at the tensor's scale max |y|; "
    "<b>cancelled</b>: elements whose exact magnitude is below 2^−p of the tensor's scale "
    "(p the format's precision; exact zeros included), with their largest absolute error: "
    "they are left out of the componentwise <b>max ulp</b> (ulps at each exact value).")


def page_body(report, guard) -> str:
    """The page's HTML body of ``report`` (model.Report); ``guard(render, title)`` draws a
    section or its error message."""
    info = report.model
    rows = [r for r in report.rows if r.node is not None]
    nodes = [r for r in rows if r.node_index is not None
             and r.attribution in ("local", "propagated")]
    parts = ['<header><nav><a href="index.html">report</a></nav><h1 id="model">Model: '
             f'{esc(info.target if info else "?")}</h1></header>',
             guard(lambda: _source(info, nodes), "Reproduce"),
             f'<section id="measures"><h2>The measures</h2><p>{MEASURES}</p></section>',
             guard(lambda: _whole_section([r for r in rows if r.node_index is None]),
                   "The whole model")]
    emulated = [r for r in nodes if r.implementation == "emulated"]
    for config in dict.fromkeys(_config(r) for r in emulated):
        mine = [r for r in nodes if _config(r) == config or (
            r.implementation != "emulated" and config.startswith(f"{r.format} {r.mode} "))]
        parts.append(guard(lambda: _plot_section(config, mine), f"Error along the graph: "
                                                               f"{config}"))
        for route in ROUTES:
            part = [r for r in mine if r.route == route]
            if part:
                parts.append(guard(lambda: _route_section(config, route, part),
                                   f"{route}: {config}"))
    shares = [r for r in rows if r.attribution == "share"]
    if shares:
        wholes = [r for r in rows if r.node_index is None and r.attribution == "propagated"]
        parts.append(guard(lambda: _share_section(shares, wholes),
                           "Shares of the outputs' errors"))
    for summary in info.summaries if info else ():
        parts.append(guard(lambda: _keep_section(summary), "Where to keep precision"))
    if info and info.problem:
        parts.append('<section><h2>Where to keep precision</h2><p class="bad">This section '
                     f'could not be drawn: {esc(info.problem)}</p></section>')
    return "".join(parts)


def _config(r) -> str:
    """A row's configuration; other implementations' rows (policy ``torch``) sit beside
    the emulated rows of every policy of their format and mode."""
    return f"{r.format} {r.mode} {r.policy}"


def node_id(route, node, port) -> str:
    return "node-" + slug(f"{route}-{node}-{port}")


def repro_id(node) -> str:
    return "reproduce-" + slug(str(node))


def _bits(v) -> str:
    """Bits of agreement with its unit; inf where computed = exact."""
    return "–" if v is None else f"{short(v)}\u00a0bits"


def _failed(r) -> str | None:
    if r.status in ("ok", "convention"):
        return None
    return f'<span class="bad">{esc(r.status)}: {esc(r.reason)}</span>'


def _cancelled(r) -> str:
    if not r.cancelled:
        return "0" if r.cancelled == 0 else "–"
    total = r.cancelled + (r.samples or 0)
    return esc(f"{r.cancelled} of {total} (max |err| {short(r.cancelled_error)})")


def _source(info, nodes) -> str:
    art = info.artifact if info else "?"
    code = ("from roundoff_coverage import routes\n"
            f"g = routes.load_graph({art!r})\n"
            "k = g.node_names.index(NODE)      # the node's index; g.nodes[k].op, .args\n")
    per = []
    for node in dict.fromkeys(r.node for r in sorted(nodes, key=lambda r: r.node_index)):
        line = f"node = g.nodes[g.node_names.index({node!r})]   # node.op, node.args"
        per.append(f'<li id="{esc(repro_id(node))}"><code>{esc(node)}</code>: '
                   f'<code>{esc(line)}</code></li>')
    listed = (f'<details><summary>Each node ({len(per)})</summary><ul class="repro">'
              f'{"".join(per)}</ul></details>') if per else ""
    return ('<section id="reproduce"><h2>Reproduce</h2><p>Every row below names a node of the '
            f'graph artifact <code>{esc(art)}</code> (sha256 <code>'
            f'{esc(info.sha256 if info else "?")}</code>): the report is reproduced from the '
            f'artifact alone with <code>roundoff-coverage model {esc(art)}</code> and the '
            'options of the command on the report\'s main page, a node inspected with</p>'
            f'<pre><code>{esc(code)}</code></pre>{listed}</section>')


def _whole_section(whole) -> str:
    if not whole:
        return ""
    body = []
    for r in sorted(whole, key=lambda r: (_config(r), r.route, r.node, r.implementation)):
        bad = _failed(r)
        cells = [esc(_config(r)), esc(r.implementation), esc(r.route), esc(r.node)]
        cells += [bad, "", "", "", "", "", ""] if bad else [
            esc(_bits(r.bits)), esc(short(r.norm_rel)), esc(short(r.sqnr_db)),
            esc(short(r.cosine)), esc(short(r.scale_ulp)), _cancelled(r)]
        cells += ["" if bad else esc(short(r.max_ulp)), "" if bad else esc(short(r.max_rel))]
        if r.closure is not None:
            cells[-1] += esc(f" (closure {short(r.closure)})")
        body.append(cells)
    return ('<section id="whole"><h2>The whole model (propagated)</h2><p>The model\'s '
            'outputs and the gradients of its inputs and parameters, measured on the full '
            'emulated run against exact values (see the measures above).</p>' + table(
                ["configuration", "implementation", "route", "value", "bits", "norm_rel",
                 "SQNR (dB)", "cosine", "scale ulp", "cancelled", "max ulp", "max rel"],
                body, "num") + "</section>")


def _node_points(part):
    """{node: (bits, title)} of a route's propagated emulated rows: each node's worst port
    (fewest bits; None, no relative error defined or a failed row, counts as worst)."""
    out = {}
    for r in part:
        if r.attribution != "propagated" or r.implementation != "emulated":
            continue
        b = None if _failed(r) else r.bits
        key = -math.inf if b is None else (math.inf if math.isnan(b) else b)
        said = f"{r.status}: {r.reason}" if _failed(r) else \
            f"{_bits(b)}, norm_rel {short(r.norm_rel)}"
        have = out.get(r.node)
        if have is None or key < have[0]:
            out[r.node] = (key, b, f"{r.node} ({r.op}) {r.route} port {r.port}: {said}")
    return {n: (b, t) for n, (_, b, t) in out.items()}


def _plot_section(config, part) -> str:
    order = sorted({(r.node_index, r.node, r.module) for r in part})
    names = [n for _, n, _ in order]
    bands = []
    for i, (_, _, module) in enumerate(order):
        if bands and bands[-1][0] == module:
            bands[-1][2] = i
        else:
            bands.append([module, i, i])
    series = [(route, _node_points([r for r in part if r.route == route]))
              for route in ROUTES if any(r.route == route for r in part)]
    fig = svg.along_graph(names, series, [tuple(b) for b in bands])
    return (f'<section><h2>Error along the graph: {esc(config)}</h2><figure class="wide">'
            f'<div class="scroll">{fig}</div><figcaption>Bits of agreement (−log2 of the '
            'normwise relative error norm_rel, so a log scale of norm_rel; higher is better) '
            'of each node\'s propagated error on the full emulated run, one point per node '
            'and route (its worst port), nodes in execution order and modules as bands.  The '
            'forward and tangent routes run left to right, the gradient route (cotangents '
            'and gradient contributions) right to left.  Hollow points: exact (top) or no '
            'relative error defined (n/a: an exact tensor of zeros with a residue).'
            '</figcaption></figure></section>')


def _bar(r, lo, fill) -> str:
    """A bar of the normwise relative error on a log2 scale from 2**lo to 1."""
    v = r.norm_rel
    if v is None or math.isnan(v):
        w = 0.0
    elif v <= 0:
        w = 0.0
    else:
        w = BAR_W * min(1.0, max(0.0, (math.log2(v) - lo) / -lo)) if math.isfinite(v) \
            else BAR_W
    return (f'<svg class="bar" width="{BAR_W}" height="{BAR_H}" role="img"><title>norm_rel '
            f'{esc(short(v))} ({esc(_bits(r.bits))})</title><rect x="0" y="0" '
            f'width="{BAR_W}" height="{BAR_H}" fill="#f0f0f0"/><rect x="0" y="0" '
            f'width="{w:.1f}" height="{BAR_H}" fill="{fill}"/></svg>')


def _route_cells(pair, others, lo) -> list:
    """The measure cells of one node and port: local, then propagated, then the other
    implementations' propagated bits."""
    loc, prop = pair.get(("emulated", "local")), pair.get(("emulated", "propagated"))
    cells = []
    if loc is None:
        cells += ["–", "–"]
    elif _failed(loc):
        cells += [_failed(loc), ""]
    else:
        cells += [_bar(loc, lo, LOCAL_FILL) + "\u00a0" + esc(_bits(loc.bits)), esc(short(loc.max_ulp))]
    if prop is None or _failed(prop):
        cells += [_failed(prop) if prop else "–"] + [""] * 7
    else:
        cells += [_bar(prop, lo, PROPAGATED_FILL) + "\u00a0" + esc(_bits(prop.bits)),
                  esc(short(prop.norm_rel)), esc(short(prop.norm_rel_max)),
                  esc(short(prop.sqnr_db)), esc(short(prop.cosine)),
                  esc(short(prop.scale_ulp)), _cancelled(prop), esc(short(prop.max_ulp))]
    for impl in others:
        o = pair.get((impl, "propagated"))
        cells.append("–" if o is None else _failed(o) or (
            _bar(o, lo, OTHER_FILL) + "\u00a0" + esc(_bits(o.bits))))
    return cells


def _route_section(config, route, part) -> str:
    by = {}
    for r in part:
        by.setdefault((r.node_index, r.node, r.port), {})[(r.implementation, r.attribution)] = r
    others = sorted({r.implementation for r in part} - {"emulated"})
    finite = [r.bits for r in part if r.bits is not None and math.isfinite(r.bits)]
    lo = -min(64, max(8, math.ceil(max(finite, default=8))))
    heads = ["#", "node", "op", "port", "local bits", "local max ulp", "propagated bits",
             "norm_rel", "max-norm rel", "SQNR (dB)", "cosine", "scale ulp", "cancelled",
             "max ulp"] + [f"{i} bits" for i in others] + ["reproduce"]
    body, module = [], None
    for (k, node, port), pair in sorted(by.items(), key=lambda e: (e[0][0], e[0][2])):
        first = next(iter(pair.values()))
        if first.module != module:
            module = first.module
            body.append(f'<tr class="group"><td colspan="{len(heads)}"><b>module '
                        f'{esc(module or "(top level)")}</b></td></tr>')
        cells = [esc(k), f'<span id="{esc(node_id(route, node, port))}">{esc(node)}</span>',
                 esc(first.op), esc(port)] + _route_cells(pair, others, lo) + [
                     f'<a href="#{esc(repro_id(node))}">reproduce</a>']
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in heads)
    return (f'<section><h2>{esc(route)}: {esc(config)}</h2><p>Bars: the normwise relative '
            f'error norm_rel on a log2 scale from 2^{lo} (empty) to 1 (full), longer is '
            'worse, its bits of agreement beside it; local (green): the node alone on the '
            'exact inputs rounded into the format; propagated (blue): the full emulated run, '
            'with its other measures; other implementations (orange): their own run of the '
            'model against the same exact values.  Max ulp: componentwise, over the elements '
            'that do not cancel.</p><div class="scroll"><table class="model num"><thead><tr>'
            f'{head}</tr></thead><tbody>' + "".join(body) + "</tbody></table></div></section>")


def _share_section(shares, wholes) -> str:
    """One table per configuration and output (or input gradient): the nodes' shares,
    largest first, under the output's measured error and closure."""
    measured = {(_config(r), r.node): r for r in wholes if r.implementation == "emulated"}
    groups = {}
    for r in shares:
        groups.setdefault((_config(r), r.output or "–"), []).append(r)
    parts = ['<section id="shares"><h2>Shares of the outputs\' errors</h2><p>Each node\'s '
             'first-order share of the error of a whole-model output (forward) or input '
             'gradient (gradient): its local error in the emulated run carried there through '
             'the rest of the model, as a normwise relative error of that output '
             '(norm_rel = ||share|| / ||exact output||), largest first.  Closure: the '
             'shares\' sum over the measured error (1: first order explains it; misfit: how '
             'far the sum is from the measured error itself).</p>']
    for (config, output), part in sorted(groups.items()):
        whole = measured.get((config, output))
        head = f"{config}: {output}"
        if whole is not None:
            head += (f" (measured norm_rel {short(whole.norm_rel)}, closure "
                     f"{short(whole.closure)}, misfit {short(whole.closure_misfit)})")
        part.sort(key=lambda r: (-(r.norm_rel if r.norm_rel is not None and
                                   not math.isnan(r.norm_rel) else -1.0),
                                 r.node_index or 0))
        none = [r for r in part if r.status == "ok" and r.norm_rel == 0]
        part = [r for r in part if r not in none]
        body = [[f'<a href="#{esc(node_id("forward", r.node, r.port))}">{esc(r.node)}</a>',
                 esc(r.module or "–"), esc(r.op), esc(r.port),
                 _failed(r) or esc(short(r.norm_rel)), esc(short(r.bits))] for r in part]
        parts.append(f"<h3>{esc(head)}</h3>" + (
            f'<p class="bad">{esc(whole.reason)}</p>' if whole is not None and whole.reason
            and "not linear in its rounding" in whole.reason else "") + table(
                ["node", "module", "op", "port", "norm_rel", "bits"], body, "num") + (
                    f"<p>{len(none)} more nodes have no share of it (no local error, or "
                    f"none that reaches it).</p>" if none else ""))
    return "".join(parts) + "</section>"


def _helps(e) -> bool:
    before, after = e.bits_before, e.bits_after
    if before is None or after is None or math.isnan(before) or math.isnan(after):
        return False
    return after > before


def _keep_section(summary) -> str:
    parts = [f"<section><h2>Where to keep precision: {esc(summary.key.replace('|', ' '))}</h2>"]
    for route, top in summary.largest.items():
        if top:
            parts.append(f"<h3>Nodes adding the most error ({esc(route)}, local, ranked by "
                         "norm_rel)</h3>" + table(
                             ["node", "module", "op", "port", "bits", "norm_rel", "SQNR (dB)",
                              "scale ulp", "cancelled", "max ulp"],
                             [[f'<a href="#{esc(node_id(route, t.node, t.port))}">'
                               f'{esc(t.node)}</a>', esc(t.module or "(top level)"),
                               esc(t.op), esc(t.port), esc(_bits(t.bits)),
                               esc(short(t.norm_rel)), esc(short(t.sqnr_db)),
                               esc(short(t.scale_ulp)), esc(short(t.cancelled)),
                               esc(short(t.max_ulp))] for t in top], "num"))
    if summary.keep:
        helped = [e for e in summary.keep if _helps(e)]
        note = "" if helped else (
            '<p class="note" id="keep-none">No candidate helps: keeping any one of these '
            'nodes or modules in binary32 leaves the worst tensor\'s bits of agreement where '
            'they were (or makes them undefined).</p>')
        parts.append(
            "<h3>Keeping one node or module in binary32</h3><p>The worst tensor of the route "
            "(fewest bits of agreement: an output or a gradient) before and after that node, "
            "or every node of that module, computes in binary32 and its result is rounded "
            "into the format as the next node reads it.</p>" + note + table(
                ["keep", "module", "nodes", "route", "worst tensor before", "bits before",
                 "worst tensor after", "bits after", "gain (bits)", "norm_rel before",
                 "norm_rel after"],
                [[esc(e.keep), esc(e.module or "(top level)"), esc(short(e.nodes)),
                  esc(e.route), esc(e.tensor_before or "–"), esc(_bits(e.bits_before)),
                  esc(e.tensor_after or "–"), esc(_bits(e.bits_after)),
                  esc(short(e.bits_after - e.bits_before) if _helps(e) and
                      math.isfinite(e.bits_after - e.bits_before) else "none"),
                  esc(short(e.norm_rel_before)), esc(short(e.norm_rel_after))]
                 for e in summary.keep], "num keep"))
    elif summary.keep_note:
        parts.append(f'<p class="note">{esc(summary.keep_note)}</p>')
    return "".join(parts) + "</section>"

"""The model page of a model run's report (``model.html``): the whole model's errors, then
per configuration and route every node in execution order, grouped by module, with its
local and propagated max |error| as bars on a log2 scale, the nodes that add the most
error, what keeping a node or module in binary32 buys, and how to reproduce a node from
the graph artifact alone.  A pure function of the results document (engine/model_run.py
writes its ``model`` object; the rows carry node, module, node_index and attribution)."""

from __future__ import annotations

import math

from .markup import esc, short, table

BAR_W, BAR_H = 160, 10
LOCAL_FILL, PROPAGATED_FILL, OTHER_FILL = "#5ec962", "#3b528b", "#e08214"
LO_EXP = -10                       # bars start at 2**-10 ulp


def page_body(doc: dict, rows: list) -> str:
    """The page's HTML body of the results document ``doc`` and its raw ``rows``."""
    info = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    rows = [r for r in rows if isinstance(r, dict) and r.get("node") is not None]
    parts = ['<header><nav><a href="index.html">report</a></nav><h1 id="model">Model: '
             f'{esc(info.get("target", "?"))}</h1></header>', _source(info)]
    whole = [r for r in rows if r.get("node_index") is None]
    if whole:
        parts.append("<section><h2>The whole model (propagated)</h2>" + table(
            ["configuration", "implementation", "route", "value", "max ulp", "mean ulp",
             "max rel"],
            [[esc(_config(r)), esc(r.get("implementation")), esc(r.get("route")),
              esc(r.get("node")), short(r.get("max_ulp")), short(r.get("mean_ulp")),
              short(r.get("max_rel")) if r.get("status") in ("ok", None) else
              f'<span class="bad">{esc(r.get("status"))}: {esc(r.get("reason"))}</span>']
             for r in sorted(whole, key=lambda r: (_config(r), str(r.get("route")),
                                                   str(r.get("node")),
                                                   str(r.get("implementation"))))])
            + "</section>")
    nodes = [r for r in rows if r.get("node_index") is not None]
    top = max([_value(r.get("max_ulp")) for r in nodes] + [1.0])
    beside = [r for r in nodes if r.get("implementation") != "emulated"]
    hi = max(1, math.ceil(math.log2(top))) if math.isfinite(top) else 64
    for config in dict.fromkeys(_config(r) for r in nodes if r not in beside):
        for route in ("forward", "tangent", "gradient"):
            part = [r for r in nodes if r.get("route") == route and
                    (_config(r) == config or (r in beside and config.startswith(
                        f"{r.get('format')} {r.get('mode')} ")))]
            if part:
                parts.append(_route_section(config, route, part, hi))
    for key, summary in (info.get("summary") or {}).items():
        parts.append(_keep_section(key, summary))
    return "".join(parts)


def _config(r) -> str:
    """A row's configuration; other implementations' rows (policy ``torch``) sit beside
    the emulated rows of every policy of their format and mode."""
    return f"{r.get('format')} {r.get('mode')} {r.get('policy')}"


def _columns(part) -> list:
    """(implementation, attribution) columns of a route's table: emulated local, then each
    implementation's propagated error."""
    impls = sorted({r.get("implementation") for r in part}, key=lambda i: (i != "emulated", i))
    return [("emulated", "local")] + [(i, "propagated") for i in impls]


def _value(v) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    return math.inf if v == "inf" else 0.0


def _source(info) -> str:
    art, sha = info.get("artifact"), info.get("sha256")
    code = ("from roundoff_coverage import routes\n"
            f"g = routes.load_graph({art!r})\n"
            "k = g.node_names.index(NODE)      # the node's index; g.nodes[k].op, .args\n")
    return ("<section><h2>Reproduce</h2><p>Every row below names a node of the graph "
            f"artifact <code>{esc(art)}</code> (sha256 <code>{esc(sha)}</code>): the "
            "report is reproduced from the artifact alone with <code>roundoff-coverage "
            f"model {esc(art)}</code> and the options of the command above, a node "
            f"inspected with</p><pre><code>{esc(code)}</code></pre></section>")


def _bar(v, hi, fill) -> str:
    """A bar of width log2(v / 2**LO_EXP) on [LO_EXP, hi]: the error in ulp (log scale)."""
    x = _value(v)
    if x <= 0:
        w = 0.0
    elif not math.isfinite(x):
        w = BAR_W
    else:
        w = BAR_W * min(1.0, max(0.0, (math.log2(x) - LO_EXP) / (hi - LO_EXP)))
    return (f'<svg width="{BAR_W}" height="{BAR_H}" role="img"><title>{esc(short(v))} ulp'
            f'</title><rect x="0" y="0" width="{BAR_W}" height="{BAR_H}" fill="#f0f0f0"/>'
            f'<rect x="0" y="0" width="{w:.1f}" height="{BAR_H}" fill="{fill}"/></svg>')


def _route_section(config, route, part, hi) -> str:
    by, columns = {}, _columns(part)
    for r in part:
        by.setdefault((r["node_index"], r.get("node"), r.get("port")), {})[
            (r.get("implementation"), r.get("attribution"))] = r
    body, module = [], None
    for (k, node, port), pair in sorted(by.items(), key=lambda e: (e[0][0], str(e[0][2]))):
        any_row = next(iter(pair.values()))
        if any_row.get("module", "") != module:
            module = any_row.get("module", "")
            body.append(f'<tr class="group"><td colspan="{5 + len(columns)}"><b>module '
                        f'{esc(module or "(top level)")}</b></td></tr>')
        prop = pair.get(("emulated", "propagated"), {})
        cells = [esc(k), f'<span id="{esc(route)}-{esc(node)}-{esc(port)}">{esc(node)}</span>',
                 esc(any_row.get("op")), esc(port)]
        for col in columns:
            r = pair.get(col, {})
            fill = LOCAL_FILL if col[1] == "local" else PROPAGATED_FILL if \
                col[0] == "emulated" else OTHER_FILL
            if not r:
                cells.append("–")
            elif r.get("status") not in (None, "ok"):
                cells.append(f'<span class="bad">{esc(r.get("status"))}: '
                             f'{esc(r.get("reason"))}</span>')
            else:
                cells.append(_bar(r.get("max_ulp"), hi, fill) + " " + esc(short(r.get("max_ulp"))))
        w = prop.get("worst") or {}
        cells.append(esc(f"sample {w.get('sample')}, element {w.get('element')}") if w else "–")
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in
                   ["#", "node", "op", "port"] +
                   [f"{a} max ulp" if i == "emulated" else f"{i} max ulp"
                    for i, a in columns] + ["worst (emulated, propagated)"])
    return (f'<section><h2>{esc(route)}: {esc(config)}</h2><p>Bars: max |error| in ulps '
            f'of the format, log2 scale from 2**{LO_EXP} to 2**{hi}; local (green): the node '
            f'alone on the exact inputs rounded into the format; propagated (blue): the full '
            f'emulated run; other implementations (orange): their own run of the model, '
            f'against the same exact values.</p><table class="model"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(body) + "</tbody></table></section>")


def _keep_section(key, summary) -> str:
    if not isinstance(summary, dict):
        return ""
    parts = [f"<section><h2>Where to keep precision: {esc(key.replace('|', ' '))}</h2>"]
    for route, top in (summary.get("largest_local") or {}).items():
        if top:
            parts.append(f"<h3>Nodes adding the most error ({esc(route)}, local)</h3>" + table(
                ["node", "module", "op", "port", "max ulp", "mean ulp"],
                [[f'<a href="#{esc(route)}-{esc(t.get("node"))}-{esc(t.get("port"))}">'
                  f'{esc(t.get("node"))}</a>', esc(t.get("module")), esc(t.get("op")),
                  esc(t.get("port")), short(t.get("max_ulp")), short(t.get("mean_ulp"))]
                 for t in top]))
    keep = summary.get("keep_binary32")
    if keep:
        parts.append("<h3>Keeping one node or module in binary32</h3><p>The whole model's "
                     "mean and max |error| (ulps against binary64 roundings of the exact "
                     "values) when that node, or every node of that module, computes in "
                     "binary32 and its result is rounded into the format as the next node "
                     "reads it.</p>" + table(
                         ["keep", "route", "mean before", "mean after", "max before",
                          "max after"],
                         [[esc(e.get("keep")), esc(e.get("route")),
                           short(e.get("mean_ulp_before")), short(e.get("mean_ulp_after")),
                           short(e.get("max_ulp_before")), short(e.get("max_ulp_after"))]
                          for e in keep]))
    elif summary.get("keep_note"):
        parts.append(f"<p>{esc(summary['keep_note'])}</p>")
    return "".join(parts) + "</section>"

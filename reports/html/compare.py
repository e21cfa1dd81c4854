"""The comparison with a baseline (compare.html): what got better and worse, judged by the
gate (reports/gate.py ``compare``, default metric and tolerance), so the report and a CI
gate never disagree about a regression.
"""

from __future__ import annotations

from roundoff_coverage.reports import gate

from .index import op_href
from .markup import esc, short, table
from .model import number


def comparison(baseline_path: str, current_path: str) -> tuple:
    """(gate.Comparison or None, a one-line summary).  A baseline the gate cannot read is
    the user's error (GateError propagates); a current file the gate refuses (a malformed
    row) leaves the report without a comparison, with the reason in the summary."""
    base = gate.read(baseline_path, "baseline")
    try:
        cur = gate.read(current_path, "results file")
    except gate.GateError as exc:
        return None, f"no comparison: {exc}"
    cmp = gate.compare(base, cur)
    return cmp, cmp.verdict()


def page_body(cmp, summary: str, baseline_path: str) -> str:
    head = ('<header><nav><a href="index.html">report</a></nav><h1>Comparison with the '
            f'baseline</h1><p>Baseline <code>{esc(baseline_path)}</code>.  Judged as '
            '<code>roundoff-coverage gate</code> judges it: metric max |error| in ulp, '
            'tolerance 0.01 ulp by default.</p></header><main>')
    if cmp is None:
        return head + f'<p class="bad">{esc(summary)}</p></main>'
    parts = [head, f'<p class="{"bad" if cmp.failed else "good"}">{esc(summary)}</p>']
    if cmp.settings:
        parts.append("<h2>Settings that differ</h2><ul>"
                     + "".join(f"<li>{esc(s)}</li>" for s in cmp.settings) + "</ul>")
    for title, changes, cls in (("Worse", cmp.regressions, "bad"),
                                ("Better", cmp.improvements, "good")):
        parts.append(f'<section><h2 class="{cls}">{title}: {len(changes)} route'
                     f'{"" if len(changes) == 1 else "s"}</h2>')
        if changes:
            parts.append(table(("route", "baseline max |err| (ulp)", "now max |err| (ulp)",
                                "what changed"), [_cells(c) for c in changes], "compare"))
        parts.append("</section>")
    return "".join(parts) + "</main>"


def _cells(change) -> list:
    label = gate.label(change.key)
    link = f'<a href="{esc(op_href(change.key[0]))}">{esc(label)}</a>'

    def metric(row):
        if row is None:
            return "absent"
        try:
            v = number(row.get("max_ulp"))
        except ValueError:
            v = None
        return short(v) + " ulp" if v is not None else str(row.get("status", "–"))
    return [link, esc(metric(change.baseline)), esc(metric(change.current)),
            esc("; ".join(change.reasons))]

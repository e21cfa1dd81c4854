"""The precision advisor's page (``advice.html``), a pure function of the answer ``advise
--out`` writes (engine/advise.py ``document``): whether the budget is met on the samples and
on the held-back samples, the list to paste (torchao's ``filter_fqns`` form), the cost beside
every unit in one format and the two hand rules, every budgeted tensor's error, a table per
unit (its format, cost and what lowering it alone does to the budget) and the cost/error
front of every measured assignment.  Numbers that are not finite read inf or NaN."""

from __future__ import annotations

import shlex

from . import svg
from .markup import esc, short, table

MEASURE = ("Errors are normwise relative errors ‖ŷ − y‖₂ / ‖y‖₂ against exact values, each "
           "tensor joined over the samples; <b>usage</b> is a tensor's error divided by its "
           "budget (at most 1: met).  Costs are seconds on a stated H100 SXM roofline "
           "(bytes moved at the format's width, products at its tensor-core rate; "
           "engine/cost.py), shown in µs: they rank assignments, they do not predict a "
           "kernel's time.")


def page_body(doc: dict) -> str:
    """The page's HTML body of the answer ``doc``."""
    keep = doc.get("keep") or []
    met, held = doc.get("met"), doc.get("met_held_back")
    verdict = ("meets the budget on the samples and on the held-back samples" if met and held
               else "meets the budget on the samples but not on the held-back samples"
               if met else "does not meet the budget")
    cost = doc.get("cost") or {}
    parts = [f'<header><h1 id="advice">Precision advice: {esc(doc.get("target", "?"))}</h1>'
             f'</header><section id="answer"><h2>The answer</h2>'
             f'<p class="{"good" if met and held else "bad"}">The assignment {esc(verdict)} '
             f'({esc(", ".join(doc.get("budget") or []))}), at {_us(cost.get("assignment"))} '
             f'µs against {_us(cost.get("all_highest"))} µs with every {esc(doc.get("unit"))} '
             f'in {esc(doc.get("keep_format"))}.</p>'
             + (f'<p class="bad">{esc(doc["reason"])}</p>' if doc.get("reason") else "")
             + f'<p>Keep in {esc(doc.get("keep_format"))} (torchao <code>filter_fqns</code>):'
               f'</p><pre>{esc(repr(keep))}</pre>'
             + f'<p>Measure it again, node by node: <code>'
               f'{esc(shlex.join(["roundoff-coverage", "model", str(doc.get("target", "")), "--assignment", "ADVICE.json"]))}'
               f'</code> (ADVICE.json: the file <code>advise --out</code> wrote).</p>'
               f'<p>{MEASURE}</p></section>',
             _choices(doc), _errors(doc), _units(doc),
             f'<section id="front"><h2>Cost and error of every measured assignment</h2>'
             f'{svg.front(doc.get("front") or [])}</section>']
    return "".join(parts)


def _choices(doc) -> str:
    cost = doc.get("cost") or {}
    front = {p.get("source"): p for p in doc.get("front") or []}
    rows = [["this assignment", _us(cost.get("assignment")), _yes(doc.get("met"))]]
    for label in (doc.get("keep_format"), (doc.get("candidates") or ["?"])[0]):
        p = front.get(f"all {label}", {})
        rows.append([f"every {esc(doc.get('unit'))} in {esc(label)}", _us(p.get("cost")),
                     _yes(_le1(p.get("usage")))])
    for r in doc.get("rules") or []:
        rows.append([esc(r.get("rule")), _us(r.get("cost")), _yes(r.get("met"))])
    return ('<section id="choices"><h2>Against the alternatives</h2>'
            + table(["choice", "cost (µs)", "meets the budget"], rows) + "</section>")


def _errors(doc) -> str:
    rows = []
    confirmed = doc.get("confirmed") or {}
    for t, v in sorted(confirmed.items(), key=lambda kv: (not kv[0].startswith("output:"),
                                                           kv[0])):
        b = v.get("budget")
        rows.append([esc(t), "–" if b is None else esc(short(b)), esc(short(v.get("samples"))),
                     esc(short(v.get("held_back"))),
                     "–" if b is None else _yes(_le(v.get("held_back"), b)
                                                and _le(v.get("samples"), b))])
    return ('<section id="errors"><h2>Errors against exact values</h2>'
            + table(["tensor", "budget", "samples", "held-back samples", "met"], rows)
            + "</section>")


def _units(doc) -> str:
    cands = [c for c in doc.get("candidates") or [] if c != doc.get("keep_format")]
    rows = []
    for u in doc.get("units") or []:
        alone = u.get("alone") or {}
        rows.append([esc(u.get("unit")), esc(u.get("nodes")), esc(u.get("format")),
                     _us(u.get("cost"))] + [esc(short(alone[c])) if c in alone else "–"
                                            for c in cands])
    return ('<section id="units"><h2>Per unit</h2><p>The format chosen for each unit, its '
            'cost in that format, and the largest usage of the budget when this unit alone '
            'is lowered to each candidate (the rest in the highest; – where the search did '
            'not need it).</p>'
            + table(["unit", "nodes", "format", "cost (µs)"]
                    + [f"usage, alone in {c}" for c in cands], rows) + "</section>")


def _us(v) -> str:
    return "–" if not isinstance(v, (int, float)) else esc(short(v * 1e6))


def _le(a, b) -> bool:
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a <= b


def _le1(v) -> bool:
    return _le(v, 1.0)


def _yes(flag) -> str:
    return '<span class="good">yes</span>' if flag else '<span class="bad">no</span>'

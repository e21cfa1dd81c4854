"""The terminal summary of a coverage run: a pure function of result rows.

``text(rows, phases=None, wall=None, view="ordinary") -> str``: counts per status, coverage
per family and format (the share of rows whose status is ok), the ten worst routes by max
|ulp error| in ``view`` (reports/views.py: the ordinary domain by default, beside each the
whole range's maximum; or the whole range, with the words on what overflowed or underflowed
inside), and the seconds spent per phase when given.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from roundoff_coverage import routes

from ..engine.rows import MEASURED, STATUSES
from . import views


def _num(v):
    if v is None:
        return None
    if isinstance(v, str):
        return float(v)
    return float(v)


def _table(headers, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w)       # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(headers)] + [line(r) for r in rows])


def status_counts(rows) -> dict:
    c = Counter(r["status"] for r in rows)
    return {s: c.get(s, 0) for s in STATUSES} | {s: n for s, n in c.items() if s not in STATUSES}


def coverage(rows) -> dict:
    """{(family, format): (measured rows: ok or convention, rows)}."""
    fam = {}
    out = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["op"] not in fam:
            try:
                fam[r["op"]] = routes.declaration(r["op"]).family
            except Exception:                                  # noqa: BLE001
                fam[r["op"]] = "?"
        cell = out[(fam[r["op"]], r["format"])]
        cell[0] += r["status"] in MEASURED
        cell[1] += 1
    return dict(out)


def worst(rows, n=10, view=views.ORDINARY):
    """The n measured rows with the largest finite-or-infinite max |ulp error| in ``view``
    (rows without that view's statistics are left out), as (max_ulp, row)."""
    scored = []
    for r in rows:
        s = views.stats(r, view) if r["status"] in MEASURED else None
        v = views.number(s.get("max_ulp")) if s else None
        if v is not None and not math.isnan(v):
            scored.append((v, r))
    scored.sort(key=lambda vr: (-vr[0], vr[1]["op"], vr[1]["instance"], vr[1]["route"],
                                str(vr[1]["port"]), vr[1]["format"]))
    return scored[:n]


def _worst_lines(rows, view) -> list:
    """The table of the ten worst routes in ``view`` and what it leaves out."""
    asked = view
    if view == views.ORDINARY:
        view = views.default_view(rows)         # rows without ordinary draws: every draw
    top = worst(rows, view=view)
    if not top:
        return []
    table, notes, words = [], [], []
    for v, r in top:
        ratio = _num(r.get("bound_ratio"))
        bits = views.number(views.stats(r, view).get("max_bits"))
        cells = [f"{r['op']}[{r['instance']}]", r["route"], str(r["port"]), r["format"],
                 f"{r['mode']}/{r['policy']}/{r['implementation']}", _short(v),
                 "-" if bits is None else f"{bits:.1f}"]
        if view == views.ORDINARY:
            whole = _num(r.get("max_ulp"))
            cells.append("-" if whole is None else _short(whole))
        table.append(cells + ["-" if ratio is None else _short(ratio)])
        words.append(views.inside_words(r.get("inside"), r["format"], ">=", "<=")
                     if view == views.WHOLE else [])
    heads = ["operator", "route", "port", "format", "mode/policy/impl", "max_ulp", "max_bits"]
    heads += ["whole range max_ulp"] if view == views.ORDINARY else []
    drawn = _table(heads + ["bound_ratio"], table).split("\n")
    # Under each row, what overflowed or underflowed inside it.
    lines = ["", f"the {len(top)} worst routes by max |error| (ulp) on the "
                 f"{views.TITLES[view]} ({views.SHORT[view]}):", drawn[0]]
    for line, said in zip(drawn[1:], words):
        lines += [line] + [f"    {w}" for w in said]
    if view == views.ORDINARY:
        left = sum(r["status"] in MEASURED and r.get("max_ulp") is not None
                   and views.stats(r, view) is None for r in rows)
        if left:
            notes.append(f"{left} measured rows have no ordinary draws (enumerated inputs) "
                         f"and are ranked over the whole range only")
        notes.append("ranked on the ordinary domain; --whole-range ranks every draw and says "
                     "what overflowed or underflowed inside")
    elif asked == views.ORDINARY:
        notes.append("no row has statistics on the ordinary domain (enumerated inputs, or "
                     "a results file written before by_kind): ranked over the whole range")
    else:
        notes.append("ranked over the whole range; without --whole-range the summary ranks "
                     "the ordinary domain")
    return lines + [f"({n})" for n in notes]


def text(rows, phases=None, wall=None, view=views.ORDINARY) -> str:
    lines = []
    counts = status_counts(rows)
    lines.append(f"{len(rows)} rows: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    cov = coverage(rows)
    if cov:
        fams = sorted({f for f, _ in cov})
        fmts = sorted({m for _, m in cov})
        table = []
        for f in fams:
            cells = [f]
            for m in fmts:
                ok, n = cov.get((f, m), (0, 0))
                cells.append(f"{100 * ok / n:.0f}% ({ok}/{n})" if n else "-")
            table.append(cells)
        lines += ["", "coverage (share of rows ok) per family and format:",
                  _table(["family"] + fmts, table)]
    lines += _kernels(rows)
    lines += _worst_lines(rows, view)
    if phases:
        total = sum(phases.values())
        parts = ", ".join(f"{p} {s:.1f} s ({100 * s / total:.0f}%)" if total else f"{p} {s:.1f} s"
                          for p, s in phases.items())
        lines += ["", f"time per phase (summed over workers): {parts}"]
    if wall is not None:
        lines.append(f"wall time: {wall:.1f} s")
    return "\n".join(lines)


def _kernels(rows) -> list:
    """Lines on the CUDA kernels' rows: the devices, the contracts that did not hold, and a
    warning that simulator rows are a correctness check, not GPU accuracy."""
    cuda = [r for r in rows if r.get("implementation") == "cuda" and r.get("status") == "ok"]
    if not cuda:
        return []
    devices = sorted({str(r.get("device")) for r in cuda})
    broken = [r for r in cuda if (r.get("contract") or {}).get("held") is False]
    out = ["", f"cuda kernels: {len(cuda)} rows measured on {', '.join(devices)}; "
               f"{len(broken)} contracts did not hold"
               + (": " + ", ".join(sorted({f"{r['op']} {r['route']} {r['format']}"
                                           for r in broken})[:10]) if broken else "")]
    if "simulator" in devices:
        out.append("(simulator rows check the kernels' logic on small inputs; they are not "
                   "GPU accuracy)")
    return out


def _short(v) -> str:
    if math.isinf(v):
        return "inf"
    return f"{v:.4g}"

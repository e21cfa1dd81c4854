"""The terminal summary of a coverage run: a pure function of result rows.

``text(rows, phases=None, wall=None) -> str``: counts per status, coverage per family and
format (the share of rows whose status is ok), the ten worst routes by max |ulp error|, and
the seconds spent per phase when given.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from .rows import MEASURED, STATUSES


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
    from roundoff_coverage import routes
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


def worst(rows, n=10):
    """The n measured rows with the largest finite-or-infinite max |ulp error|."""
    scored = [(_num(r.get("max_ulp")), r) for r in rows if r["status"] in MEASURED]
    scored = [(v, r) for v, r in scored if v is not None and not math.isnan(v)]
    scored.sort(key=lambda vr: (-vr[0], vr[1]["op"], vr[1]["instance"], vr[1]["route"],
                                str(vr[1]["port"]), vr[1]["format"]))
    return scored[:n]


def text(rows, phases=None, wall=None) -> str:
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
    top = worst(rows)
    if top:
        table = []
        for v, r in top:
            ratio = _num(r.get("bound_ratio"))
            table.append([f"{r['op']}[{r['instance']}]", r["route"], str(r["port"]),
                          r["format"], f"{r['mode']}/{r['policy']}/{r['implementation']}",
                          _short(v), "-" if ratio is None else _short(ratio)])
        lines += ["", f"the {len(top)} worst routes by max |error| (ulp):",
                  _table(["operator", "route", "port", "format", "mode/policy/impl",
                          "max_ulp", "bound_ratio"], table)]
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

"""The two views of a row's errors -- the ordinary domain and the whole range -- and the
words that say where a route breaks down.

The coverage run draws four sample kinds (README, "The coverage run"): ``ordinary`` (the
smooth part of an operator's domain), ``edges``, ``special`` and ``magnitudes``.  A reader
asks first how accurate a route is on its ordinary domain, then where it breaks down, so
the terminal summary, the heat map and the table show the ``ordinary`` view by default and
the ``whole`` range (every draw) one switch away.  A row without ordinary draws (enumerated
inputs, a measured target) or written before rows had ``by_kind`` has no ordinary view.

Pure functions of row data: dicts with the row's fields (engine/rows.py), numbers as the
results file spells them ("inf" included).
"""

from __future__ import annotations

import math

from ..engine import results
from ..engine.rows import KIND_STATS

ORDINARY, WHOLE = "ordinary", "whole"
VIEWS = (ORDINARY, WHOLE)
TITLES = {ORDINARY: "ordinary domain", WHOLE: "whole range"}
DESCRIPTIONS = {
    ORDINARY: "errors on the ordinary domain: the draws of sample kind 'ordinary' (the "
              "smooth part of each operator's domain)",
    WHOLE: "errors over the whole range: every draw (sample kinds ordinary, edges, special "
           "values and magnitudes)"}
SHORT = {ORDINARY: "draws of sample kind ordinary",
         WHOLE: "every draw: ordinary, edges, special, magnitudes"}
# What went wrong inside a route (engine/measuring.py INSIDE), in words, in this order.
INSIDE_WORDS = (("overflow", "overflow inside"), ("underflow", "underflow inside"),
                ("nan", "NaN inside"))


def stats(row, view) -> dict | None:
    """The statistics (rows.KIND_STATS) of the row dict ``row`` in ``view``: the row's own
    fields for WHOLE; its ``by_kind["ordinary"]`` for ORDINARY, None where it has none."""
    if view == WHOLE:
        return {k: row.get(k) for k in KIND_STATS}
    by_kind = row.get("by_kind")
    s = by_kind.get(ORDINARY) if isinstance(by_kind, dict) else None
    return s if isinstance(s, dict) else None


def has_kinds(rows) -> bool:
    """Whether any row carries statistics per sample kind (files written before
    ``by_kind`` do not: their reports show the whole range only)."""
    return any(isinstance(r.get("by_kind"), dict) for r in rows)


def default_view(rows) -> str:
    """The view reports open on: the ordinary domain where any row has it, else (files
    written before ``by_kind``, runs of enumerated inputs only) the whole range."""
    return ORDINARY if any(stats(r, ORDINARY) is not None for r in rows) else WHOLE


def number(v) -> float | None:
    """A statistic as a float ("inf", "nan" included), None when absent or not a number."""
    return None if v is None else results.number(v)


def inside_words(inside, fmt, ge: str = "≥", le: str = "≤") -> list[str]:
    """One phrase per thing that went wrong inside a route (a row's ``inside``): 'overflow
    inside at |x| ≥ 88.72 in binary32 (3 samples: edges 2, magnitudes 1)'.  The input
    range is that of the samples where it happened: its lower end when every such |x| is
    at least 1 (an overflow of large inputs), its upper end when every one is at most 1,
    else both; none for operators that are not unary elementwise."""
    out = []
    if not isinstance(inside, dict):
        return out
    for what, words in INSIDE_WORDS:
        e = inside.get(what)
        if not isinstance(e, dict):
            continue
        lo, hi = number(e.get("min_abs_input")), number(e.get("max_abs_input"))
        name = e.get("input")
        if isinstance(name, str) and lo is not None and hi is not None:
            x = f"|{name}|"
            words += (f" at {x} {ge} {_g(lo)}" if lo >= 1 else f" at {x} {le} {_g(hi)}"
                      if hi <= 1 else f" at {_g(lo)} {le} {x} {le} {_g(hi)}")
        words += f" in {fmt}"
        n = e.get("samples")
        kinds = e.get("kinds") if isinstance(e.get("kinds"), dict) else {}
        if isinstance(n, int):
            words += f" ({n} sample{'' if n == 1 else 's'}" + (
                ": " + ", ".join(f"{k} {c}" for k, c in kinds.items()) if kinds else "") + ")"
        out.append(words)
    return out


def _g(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.4g}"

"""HTML text helpers: escaping, script-safe JSON, numbers with their units, the page frame.

Every string that reaches a page passes through ``esc`` (text and attribute values) or
``script_json`` (data inside a <script> element); nothing else writes user data.  Numbers
are written by ``ulp``, ``rel``, ``bits``, ``count`` and ``ratio`` so each carries its unit
(shared/STYLE.md rule 12).
"""

from __future__ import annotations

import html
import json
import math
import re

_SLUG_OK = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def esc(value) -> str:
    """``value`` as HTML text, safe inside elements and quoted attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def script_json(data) -> str:
    """``data`` as JSON text that is safe inside <script>...</script> and inside a JS file:
    '<', '>' and '&' become \\u escapes (no "</script>" or "<!--" can appear), and so do
    U+2028/U+2029, which end a line in older JavaScript string literals."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    for ch, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                     ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, code)
    return text


def slug(text) -> str:
    """A name usable as a file name and an HTML id: ``text`` itself when it is made of
    letters, digits, '_', '-' and '.' and does not start with '.' or '-' (every registered
    operator, catalog format and compact spec), else its safe characters plus a short hash,
    so two different names do not share a slug and no slug climbs out of a folder."""
    text = str(text)
    if _SLUG_OK.fullmatch(text):
        return text
    import hashlib
    safe = re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-")[:40] or "x"
    return f"{safe}-{hashlib.sha1(text.encode('utf-8', 'replace')).hexdigest()[:8]}"


def short(v, digits: int = 3) -> str:
    """A float in ``digits`` significant digits; infinities as the infinity sign."""
    if v is None:
        return "–"
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if v == 0:
        return "0"
    return f"{v:.{digits}g}"


def ulp(v) -> str:
    """An error in units in the last place of the route's format."""
    return "–" if v is None else f"{short(v)} ulp"


def rel(v) -> str:
    """A relative error |computed - exact| / |exact| (a pure number)."""
    return "–" if v is None else f"{short(v)} (relative)"


def bits(v) -> str:
    """A precision in bits (a whole number)."""
    return "–" if v is None else f"{int(v)} bits"


def error_bits(v) -> str:
    """Bits of error (engine/rows.py: log2(1 + format values between), at most the
    format's width)."""
    return "–" if v is None else f"{short(v)} bit{'' if v == 1 else 's'}"


def count(n, unit: str) -> str:
    """``n`` with ``unit`` (plural by an appended s)."""
    if n is None:
        return "–"
    return f"{n} {unit}{'' if n == 1 else 's'}"


def ratio(v) -> str:
    """A measured error over its bound: a multiple of the bound."""
    return "–" if v is None else f"{short(v)} × bound"


def page(title: str, body: str, root: str = "", scripts: tuple = (), view=None) -> str:
    """A whole HTML document: ``root`` is the path back to the report folder ("" or
    "../"); ``scripts`` are files under assets/ loaded at the end of the body; ``view``
    (reports/views.py) the errors the page opens on, which the style sheet shows and the
    script switches.  The empty icon keeps browsers from asking file:// for a favicon.ico
    that is not there."""
    tags = "".join(f'<script src="{root}assets/{esc(s)}"></script>' for s in scripts)
    attrs = f' data-view="{esc(view)}"' if view else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{esc(title)}</title><link rel="icon" href="data:,">'
            f'<link rel="stylesheet" href="{root}assets/report.css"></head>\n'
            f'<body{attrs}>{body}\n{tags}</body></html>\n')


def table(headers, rows, cls: str = "") -> str:
    """A static table: ``headers`` are plain strings (escaped), ``rows`` lists of cells
    that are already HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return (f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")

"""Figures as inline SVG text: the heat map with its legend, the histogram of ulp errors,
the error by binade of the exact value, the error against the input, the
bound-tightness bar, and the spread of a scaled format's block scales.

Each function returns one <figure> with an SVG (title and description for screen readers,
labelled axes) and a caption.  Cells that carry a status instead of an error use neutral
greys and a hatch pattern, never a palette colour (palette.py).
"""

from __future__ import annotations

import math

from roundoff_coverage.engine.rows import POINTS_MAX
from roundoff_coverage.reports.views import number

from .markup import esc, short
from .palette import LogScale, text_colour

# Fills of the heat map cells without a measured error; the error hatch is a pattern so it
# differs from every viridis colour by texture, not only by hue.
NO_RULE, NOT_DIFF, EMPTY = "#bdbdbd", "#f0f0f0", "#ffffff"
# A cell with ulp errors but none on the ordinary domain (enumerated inputs), in that view.
NO_ORDINARY = "#d6dde6"
# The sample kinds in figures (routes.registry, plus enumerated inputs): apart in hue and
# in lightness, so they stay apart in grey.
KIND_COLOURS = {"ordinary": "#3b528b", "edges": "#e08214", "special": "#b2182b",
                "magnitudes": "#5ec962", "exhaustive": "#3b528b"}
ERROR_FILL = "url(#hatch-error)"
_DEFS = ('<defs><pattern id="hatch-error" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/>'
         '<rect width="3" height="6" fill="#b2182b"/></pattern></defs>')


def _figure(svg: str, caption: str, cls: str = "") -> str:
    return f'<figure class="{cls}">{svg}<figcaption>{caption}</figcaption></figure>'


def _svg(width, height, title, body, cls="") -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f"<title>{esc(title)}</title>{body}</svg>")


def _count_gridlines(w, h, left, bottom, top, peak) -> list:
    """Horizontal gridlines of a count axis on the log10(1 + count) scale whose top is
    ``peak``: at 1, 10, 100, ... (SVG elements, one per line)."""
    out = []
    for dec in range(0, math.floor(peak) + 1):
        y = h - bottom - (h - bottom - top) * math.log10(1 + 10 ** dec) / peak
        out.append(f'<line x1="{left}" x2="{w - 6}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{left - 3}" y="{y + 3:.1f}" text-anchor="end" '
                   f'class="tick">{10 ** dec}</text>')
    return out


def _pow2(k: int) -> str:
    return f"2<tspan dy='-5' font-size='8'>{k}</tspan>" if k not in (0, 1) else str(2 ** k)


# ----- heat map --------------------------------------------------------------------------------

def heatmap(rows, columns, cells, scale: LogScale, shown: str = "whole") -> str:
    """The operators x (route, format) grid.  ``rows``: [(label, family)]; ``columns``:
    [(route, format)]; ``cells[(i, j)]``: ({view: (state, value in ulp or None)}, href,
    title) with state in measured, exact, mismatch, no_rule, not_differentiable, error,
    no_ordinary.  A cell is filled as in view ``shown``; with two views its rect also
    carries both fills (``data-ordinary``, ``data-whole``) for the page's switch, and a dot
    that only one view has is of class ``only-VIEW``.  Every cell links to its detail."""
    ch, left, top = 13, 150, 118
    groups = []
    for j, (route, fmt) in enumerate(columns):
        if not groups or groups[-1][0] != route:
            groups.append([route, j, j])
        groups[-1][2] = j
    # Wide enough columns that each route's label (about 7 px a letter) fits over its band.
    cw = max([18] + [math.ceil((7 * len(str(r)) + 6) / (b - a + 1)) for r, a, b in groups])
    # 70 px on the right: the last format's label is rotated over it.
    width, height = left + cw * len(columns) + 70, top + ch * len(rows) + 10
    out = [_DEFS]
    for route, a, b in groups:                       # route bands above the formats
        x = left + cw * a
        out.append(f'<text x="{x + cw * (b - a + 1) / 2:.1f}" y="12" text-anchor="middle" '
                   f'class="axis">{esc(route)}</text>'
                   f'<line x1="{x + 1}" x2="{left + cw * (b + 1) - 1}" y1="17" y2="17" '
                   f'stroke="#555"/>')
    for j, (route, fmt) in enumerate(columns):
        x = left + cw * j + cw / 2 + 4
        out.append(f'<text transform="translate({x:.1f},{top - 4}) rotate(-60)" '
                   f'class="tick">{esc(fmt)}</text>')
    family = None
    for i, (label, fam) in enumerate(rows):
        y = top + ch * i
        if fam != family:
            family = fam
            out.append(f'<line x1="0" x2="{width - 10}" y1="{y}" y2="{y}" stroke="#999" '
                       f'stroke-width="0.5"/><text x="2" y="{y + 10}" class="family">'
                       f'{esc(fam)}</text>')
        out.append(f'<text x="{left - 4}" y="{y + 10}" text-anchor="end" class="tick">'
                   f'{esc(label)}</text>')
        for j in range(len(columns)):
            cell = cells.get((i, j))
            if cell is None:
                continue
            per_view, href, title = cell
            fills = {v: _cell_fill(state, value, scale) for v, (state, value) in
                     per_view.items()}
            fill = fills[shown if shown in fills else next(iter(fills))][0]
            data = "".join(f' data-{v}="{f}"' for v, (f, _) in fills.items()) \
                if len(fills) > 1 else ""
            x = left + cw * j
            dots = []
            marked = [v for v, (_, mark) in fills.items() if mark]
            for v in marked if len(marked) < len(fills) else marked[:1]:
                cls = f' class="only-{v}"' if len(marked) < len(fills) else ""
                f = fills[v][0]
                dots.append(f'<circle{cls} cx="{x + cw / 2}" cy="{y + ch / 2}" r="2.5" '
                            f'fill="{text_colour(f) if f.startswith("#") else "#000"}"/>')
            out.append(f'<a href="{esc(href)}"><rect x="{x}" y="{y}" width="{cw - 1}" '
                       f'height="{ch - 1}" fill="{fill}"{data}><title>{esc(title)}</title>'
                       f'</rect>{"".join(dots)}</a>')
    title = "Heat map: max |error| in ulp per operator, route and format"
    return _svg(width, height, title, "".join(out), "heatmap")


def _cell_fill(state, value, scale):
    """(fill, whether to mark the cell with a dot): a dot marks an error that is not a
    finite number of ulp (infinite or NaN) and outputs that differ from the exact ones."""
    if state == "measured":
        if value is None or math.isnan(value):
            return scale.colour(math.inf), True
        return scale.colour(value), math.isinf(value)
    if state == "exact":
        return scale.colour(0.0), False
    if state == "mismatch":
        return scale.colour(math.inf), True
    return {"no_rule": NO_RULE, "not_differentiable": NOT_DIFF, "error": ERROR_FILL,
            "no_ordinary": NO_ORDINARY}.get(state, EMPTY), False


def legend(scale: LogScale, no_ordinary: bool = False) -> str:
    """The colour bar of ``scale`` with ticks in ulp, and the swatches of the states (with
    ``no_ordinary``, also that of cells without ordinary draws, shown in that view)."""
    n, bar_w, x0 = 64, 320, 10
    out = [_DEFS]
    for k in range(n):
        mid = 2.0 ** (scale.lo + (scale.hi - scale.lo) * (k + 0.5) / n)     # ulp at the step
        out.append(f'<rect x="{x0 + bar_w * k / n:.1f}" y="18" width="{bar_w / n + 0.6:.2f}" '
                   f'height="14" fill="{scale.colour(mid)}"/>')
    for e in scale.ticks():
        x = x0 + bar_w * (e - scale.lo) / (scale.hi - scale.lo)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="32" y2="36" stroke="#000"/>'
                   f'<text x="{x:.1f}" y="48" text-anchor="middle" class="tick">{_pow2(e)}'
                   f'</text>')
    out.append(f'<text x="{x0}" y="12" class="axis">max |error| (ulp, log2 scale; ≤ '
               f'2^{scale.lo} darkest, ≥ 2^{scale.hi} brightest)</text>')
    swatches = (("#ffffff", "● infinite/NaN error or mismatched exact output", "dot"),
                (NO_RULE, "no rule (missing capability)", ""),
                (NOT_DIFF, "not differentiable", ""),
                (ERROR_FILL, "failed (error)", "")) + (
        ((NO_ORDINARY, "no ordinary draws (enumerated inputs): see the whole range", ""),)
        if no_ordinary else ())
    x, y, widest = x0, 60, 0.0
    for fill, label, kind in swatches:
        wide = 16 + 6.2 * (len(label) - (2 if kind == "dot" else 0)) + 14
        if x > x0 and x + wide > 900:                   # a second line of swatches
            x, y = x0, y + 18
        if kind == "dot":
            out.append(f'<circle cx="{x + 6}" cy="{y + 6}" r="3" fill="#000"/>')
            label = label[2:]
        else:
            out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{fill}" '
                       f'stroke="#777"/>')
        out.append(f'<text x="{x + 16}" y="{y + 10}" class="tick">{esc(label)}</text>')
        x += wide
        widest = max(widest, x)
    return _svg(max(int(widest), bar_w + 40), y + 20, "Legend of the heat map",
                "".join(out), "legend")


# ----- per-route figures -----------------------------------------------------------------------

def histogram(counts, edges) -> str:
    """Counts of |error| per bin [edges[i], edges[i+1]) (last bin open) as bars on a log
    scale of samples; a note instead of a figure when the data is unusable."""
    if not (isinstance(counts, list) and len(counts) == len(edges)
            and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                    for c in counts)):
        return '<p class="note">No histogram (missing or malformed in the results).</p>'
    total = sum(counts)
    if not total:
        return '<p class="note">No measurable errors: no histogram.</p>'
    w, h, left, bottom, top = 360, 150, 40, 34, 8
    bw = (w - left - 6) / len(counts)
    peak = math.log10(1 + max(counts))
    out = _count_gridlines(w, h, left, bottom, top, peak)      # 1, 10, 100 samples
    for i, c in enumerate(counts):
        if not c:                                    # an empty bin draws nothing
            continue
        hi = f"{short(edges[i + 1])} ulp" if i + 1 < len(edges) else "∞"
        tip = f"|error| in [{short(edges[i])} ulp, {hi}): {c} sample{'' if c == 1 else 's'}"
        bh = (h - bottom - top) * math.log10(1 + c) / peak
        out.append(f'<rect x="{left + bw * i:.1f}" y="{h - bottom - bh:.1f}" '
                   f'width="{bw - 1:.1f}" height="{bh:.1f}" fill="#3e4a89"><title>'
                   f'{esc(tip)}</title></rect>')
    for i, e in enumerate(edges):                    # x ticks every 4 bins, plus 0.5 ulp
        if i % 5 == 0 or e == 0.5:
            x = left + bw * i
            label = "0" if e == 0 else _pow2(round(math.log2(e))) if e > 0 else short(e)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{h - bottom}" '
                       f'y2="{h - bottom + 3}" stroke="#000"/><text x="{x:.1f}" '
                       f'y="{h - bottom + 14}" text-anchor="middle" class="tick">{label}</text>')
    out.append(_axes(w, h, left, bottom, top, "|error| (ulp, bins of powers of 2)",
                     "samples (log)"))
    svg = _svg(w, h, "Histogram of |ulp error|", "".join(out), "plot")
    return _figure(svg, f"Histogram of |error| in ulp over {total} samples; each bar counts "
                   f"the errors in [2^k, 2^(k+1)) ulp (log scale of samples).")


def magnitude(points, fmt_name: str) -> str:
    """Max |error| (ulp) against the binade floor(log2 |exact|) of the exact value, from a
    row's ``by_magnitude`` [[binade, count, max ulp], ...]."""
    ok = isinstance(points, list) and points and all(
        isinstance(p, list) and len(p) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)
        and math.isfinite(p[2]) for p in points)
    if not ok:
        return '<p class="note">No error-by-magnitude data (none measurable, or missing).</p>'
    w, h, left, bottom, top = 360, 150, 40, 34, 8
    bins = [int(p[0]) for p in points]
    b0, b1 = min(bins), max(bins)
    logs = [math.log2(p[2]) for p in points if p[2] > 0]
    y0 = math.floor(min(logs)) if logs else -1
    y1 = max(y0 + 2, math.ceil(max(logs)) if logs else 1)
    span_x = max(1, b1 - b0)

    def px(b):
        return left + 6 + (w - left - 16) * (b - b0) / span_x

    def py(v):
        lv = math.log2(v) if v > 0 else y0
        return h - bottom - (h - bottom - top) * (lv - y0) / (y1 - y0)
    out = _pow2_rules(y0, y1, py, left, w - 6)
    for b in range(b0, b1 + 1, max(1, math.ceil(span_x / 6))):
        out.append(f'<text x="{px(b):.1f}" y="{h - bottom + 14}" text-anchor="middle" '
                   f'class="tick">{b}</text>')
    for b, n, v in points:
        tip = (f"binade {int(b)} (|exact| in [2^{int(b)}, 2^{int(b) + 1})): max |error| "
               f"{short(v)} ulp over {int(n)} sample{'' if n == 1 else 's'}")
        out.append(f'<circle cx="{px(b):.1f}" cy="{py(v):.1f}" r="3" fill="#21918c" '
                   f'stroke="#000" stroke-width="0.4"><title>{esc(tip)}</title></circle>')
    out.append(_axes(w, h, left, bottom, top, "binade of the exact value, floor(log2 |exact|)",
                     "max |error| (ulp, log2)"))
    svg = _svg(w, h, "Max |ulp error| by binade of the exact value", "".join(out), "plot")
    zero = "" if len(logs) == len(points) else " Binades with no error sit on the bottom line."
    return _figure(svg, f"Max |error| in ulp of {esc(fmt_name)} per binade of the exact "
                   f"value (the result's magnitude; for elementwise operators the input's).{zero}")


def _points(data):
    """(input name, kinds, [(x, error, kind)]) of a row's ``by_input``, numbers as floats
    ("inf" included); None when it is missing or malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        return None
    kinds = data.get("kinds") if isinstance(data.get("kinds"), list) else []
    out = []
    for p in data["points"]:
        if not (isinstance(p, list) and len(p) == 3):
            return None
        x, e = number(p[0]), number(p[1])
        k = p[2]
        if x is None or e is None or math.isnan(x) or math.isnan(e) or isinstance(k, bool) \
                or not isinstance(k, int):
            return None
        out.append((x, e, str(kinds[k]) if 0 <= k < len(kinds) else "?"))
    return str(data.get("input", "x")), [str(k) for k in kinds], out


def by_input(data, fmt_name: str) -> str:
    """|error| in ulp against the input, one point per sample (a row's ``by_input``, unary
    elementwise operators), coloured by sample kind: where the route breaks down.  x: the
    input on a signed log2 axis (negative inputs left of zero, mirrored; +-inf at the
    ends); y: |error| on a log2 axis, errors below 2**-10 ulp (exact results among them) on
    the bottom line, infinite errors on the top one."""
    parsed = _points(data)
    if parsed is None or not parsed[2]:
        return ""
    name, kinds, pts = parsed
    w, h, left, bottom, top = 480, 180, 40, 34, 22
    logs = [math.log2(abs(x)) for x, _, _ in pts if x != 0 and math.isfinite(x)]
    lo, hi = (math.floor(min(logs)), math.ceil(max(logs))) if logs else (0, 0)

    def u(x):                                   # the signed log2 position of an input
        t = 0.0 if x == 0 else (hi - lo + 2 if math.isinf(x) else math.log2(abs(x)) - lo + 1)
        return math.copysign(t, x)
    us = [u(x) for x, _, _ in pts]
    u0, u1 = min(us + [0.0]), max(us + [0.0])
    u0, u1 = (u0 - 1, u1 + 1) if u0 == u1 else (u0, u1)
    elogs = [math.log2(abs(e)) for _, e, _ in pts if 0 < abs(e) < math.inf]
    # Errors below 2**-10 ulp (the histogram's first edge) sit on the bottom line with 0.
    y0 = max(math.floor(min(elogs)), -10) if elogs else -1
    y1 = max(y0 + 2, math.ceil(max(elogs)) if elogs else 1)
    span_y = y1 - y0 + (1 if any(math.isinf(e) for _, e, _ in pts) else 0)

    def px(v):
        return left + 6 + (w - left - 16) * (v - u0) / (u1 - u0)

    def py(e):
        a = abs(e)
        lv = y1 + 1 if math.isinf(a) else (max(math.log2(a), y0) if a > 0 else y0)
        return h - bottom - (h - bottom - top) * (lv - y0) / span_y
    out = _pow2_rules(y0, y1, py, left, w - 6)
    out.append(_signed_log_ticks(lo, hi, u0, u1, px, h - bottom + 14))
    for (x, e, kind), v in zip(pts, us):
        tip = f"{name} = {x:.6g}: error {short(e)} ulp ({kind})"
        out.append(f'<circle cx="{px(v):.1f}" cy="{py(e):.1f}" r="2.2" '
                   f'fill="{KIND_COLOURS.get(kind, "#777")}" fill-opacity="0.8">'
                   f"<title>{esc(tip)}</title></circle>")
    x = left + 4
    for kind in kinds:                          # the key of the colours, above the plot
        out.append(f'<circle cx="{x + 3}" cy="9" r="3" fill="{KIND_COLOURS.get(kind, "#777")}"'
                   f'/><text x="{x + 9}" y="12" class="tick">{esc(kind)}</text>')
        x += 16 + 5.5 * len(kind)
    out.append(_axes(w, h, left, bottom, top, f"input {name} (signed log2 scale)",
                     "|error| (ulp, log2)"))
    svg = _svg(w, h, f"|ulp error| against the input {name}", "".join(out), "plot byinput")
    return _figure(svg, f"|error| in ulp of {esc(fmt_name)} against the input {esc(name)}, "
                   f"one point per sample, coloured by sample kind (errors below 2^-10 ulp "
                   f"on the bottom line, infinite errors on the top one).  Beyond "
                   f"{_points_max()} samples, the largest error of each run of consecutive "
                   f"inputs.", "byinput")


def _pow2_rules(y0, y1, py, left, right) -> list:
    """About five horizontal rules from left to right at the powers 2**y0 .. 2**y1 (``py``
    places a value), each labelled at the left."""
    out = []
    for k in range(y0, y1 + 1, max(1, math.ceil((y1 - y0) / 5))):
        y = py(2.0 ** k)
        out.append(f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 3}" y="{y + 3:.1f}" text-anchor="end" class="tick">'
                   f'{_pow2(k)}</text>')
    return out


def _signed_log_ticks(lo, hi, u0, u1, px, y) -> str:
    """Labels of a signed log2 axis (by_input): 0, and +-2^k at multiples of a step (2^0 =
    1 among them, a landmark to read inputs by), none drawn over another."""
    step = max(1, math.ceil((hi - lo + 1) / (4 if u0 < 0 < u1 else 7)))
    ticks = [(0.0, "0")] if u0 <= 0 <= u1 else []
    for k in range(lo + (-lo) % step, hi + 1, step):
        for sign in (1, -1):
            v = sign * (k - lo + 1)
            if u0 <= v <= u1:
                ticks.append((v, ("−" if sign < 0 else "") + _pow2(k)))
    out, placed = [], []
    for v, label in ticks:
        if any(abs(px(v) - q) < 30 for q in placed):
            continue
        placed.append(px(v))
        out.append(f'<text x="{px(v):.1f}" y="{y}" text-anchor="middle" class="tick">'
                   f"{label}</text>")
    return "".join(out)


def _points_max() -> int:
    return POINTS_MAX


def _axes(w, h, left, bottom, top, xlabel, ylabel) -> str:
    return (f'<line x1="{left}" x2="{w - 6}" y1="{h - bottom}" y2="{h - bottom}" '
            f'stroke="#000"/><line x1="{left}" x2="{left}" y1="{top}" y2="{h - bottom}" '
            f'stroke="#000"/><text x="{(left + w) / 2:.0f}" y="{h - 4}" text-anchor="middle" '
            f'class="axis">{esc(xlabel)}</text><text transform="translate(10,'
            f'{(h - bottom + top) / 2:.0f}) rotate(-90)" text-anchor="middle" class="axis">'
            f'{esc(ylabel)}</text>')


def bound_bar(max_ulp, bound, violations) -> str:
    """The measured max |error| against the certified bound, both in ulp, on one axis from 0
    to the larger of the two (a violation shows as a bar past the bound's line)."""
    if bound is None or max_ulp is None or math.isnan(max_ulp) or bound <= 0:
        return ""
    w, h, left = 360, 46, 10
    top_v = max(bound, min(max_ulp, 4 * bound)) * 1.05
    scale = (w - 2 * left) / top_v
    bar = min(max_ulp, top_v) * scale
    colour = "#b2182b" if violations else "#21918c"
    svg = _svg(w, h, "Bound tightness", (
        f'<rect x="{left}" y="8" width="{bar:.1f}" height="12" fill="{colour}"/>'
        f'<line x1="{left + bound * scale:.1f}" x2="{left + bound * scale:.1f}" y1="2" '
        f'y2="26" stroke="#000" stroke-width="2" stroke-dasharray="3,2"/>'
        f'<text x="{left}" y="40" class="tick">0 ulp</text>'
        f'<text x="{left + bound * scale:.1f}" y="40" text-anchor="middle" class="tick">'
        f'bound {esc(short(bound))} ulp</text>'), "plot")
    return _figure(svg, f"Bound tightness: max |error| {esc(short(max_ulp))} ulp (bar) against "
                   f"the certified bound {esc(short(bound))} ulp (dashed line); "
                   f"{violations or 0} violation{'' if violations == 1 else 's'}.")


def scale_spread(points, what: str) -> str:
    """The block scales of a scaled format's tensor by exponent, from a row's
    ``scale_exponents`` [[floor(log2 D), blocks], ...] (D = block scale x tensor scale):
    one bar per exponent on a log scale of blocks, empty exponents left as gaps."""
    ok = isinstance(points, list) and points and all(
        isinstance(p, list) and len(p) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in p) and p[1] >= 0
        for p in points)
    if not ok:
        return f'<p class="note">No scale spread for {esc(what)} (missing or malformed).</p>'
    w, h, left, bottom, top = 360, 150, 40, 34, 8
    e0, e1 = min(p[0] for p in points), max(p[0] for p in points)
    span = e1 - e0 + 1
    bw = (w - left - 6) / span
    peak = math.log10(1 + max(p[1] for p in points)) or 1.0
    total = sum(p[1] for p in points)
    out = _count_gridlines(w, h, left, bottom, top, peak)      # 1, 10, 100 blocks
    for k, n in points:
        if not n:
            continue
        bh = (h - bottom - top) * math.log10(1 + n) / peak
        tip = f"scale in [2^{k}, 2^{k + 1}): {n} block{'' if n == 1 else 's'}"
        out.append(f'<rect x="{left + bw * (k - e0):.1f}" y="{h - bottom - bh:.1f}" '
                   f'width="{max(bw - 1, 0.5):.1f}" height="{bh:.1f}" fill="#5ec962" '
                   f'stroke="#000" stroke-width="0.3"><title>{esc(tip)}</title></rect>')
    step = max(1, math.ceil(span / 6))
    for k in range(e0, e1 + 1, step):
        x = left + bw * (k - e0 + 0.5)
        out.append(f'<text x="{x:.1f}" y="{h - bottom + 14}" text-anchor="middle" '
                   f'class="tick">{_pow2(k)}</text>')
    out.append(_axes(w, h, left, bottom, top, "block scale D (binade, floor(log2 D))",
                     "blocks (log)"))
    svg = _svg(w, h, f"Spread of the block scales of {what}", "".join(out), "plot")
    return _figure(svg, f"Spread of the block scales of {esc(what)}: {total} "
                   f"block{'' if total == 1 else 's'} with a finite scale over "
                   f"{span} binade{'' if span == 1 else 's'} (2^{e0} to 2^{e1}).")


# ----- a model's error along its graph ---------------------------------------------------------
ROUTE_COLOURS = {"forward": "#3b528b", "tangent": "#5ec962", "gradient": "#e08214"}
BAND_FILLS = ("#eef1f6", "#ffffff")


def _band_label(text: str, width: float) -> str:
    """``text`` cut to what fits in ``width`` px at the tick font (about 6 px a letter)."""
    room = int(width // 6)
    if room < 2:
        return ""
    return text if len(text) <= room else text[:room - 1] + "…"


def along_graph(nodes, series, bands) -> str:
    """Bits of agreement (-log2 of the normwise relative error) of each node along the graph.

    ``nodes``: node names in execution order (the x axis); ``series``: [(route, {node:
    (bits or None, title)})], bits inf where computed = exact, None where no relative error
    is defined (an exact tensor of zeros with a residue); ``bands``: [(module, first, last)]
    node positions.  One point (``circle.pt``, data-route, data-node) per node and route."""
    step = 9 if len(nodes) > 60 else 16
    left, right, top, bottom, strip = 52, 20, 34, 34, 18
    w = left + right + step * max(len(nodes), 1)
    w, h = max(w, 360), 260
    finite = [b for _, pts in series for b, _ in pts.values()
              if b is not None and math.isfinite(b)]
    hi = min(64, max(8, math.ceil(max(finite, default=8) + 1)))
    y0, y1 = h - bottom, top + 14                    # bits 0 and bits hi; exact above y1
    def y_of(b):
        if b is None:
            return y0 + 10
        if math.isinf(b):
            return top + 2 if b > 0 else y0
        return y0 - (y0 - y1) * min(hi, max(0.0, b)) / hi
    def x_of(i):
        return left + step * (i + 0.5)
    out = []
    for k, (module, a, b) in enumerate(bands):
        x, bw = left + step * a, step * (b - a + 1)
        out.append(f'<g class="band"><title>module {esc(module or "(top level)")}</title>'
                   f'<rect x="{x}" y="{top - strip}" width="{bw}" height="{y0 - top + strip}" '
                   f'fill="{BAND_FILLS[k % 2]}" stroke="#ccd" stroke-width="0.5"/>'
                   f'<text x="{x + 2}" y="{top - 6}" class="tick">'
                   f'{esc(_band_label(module or "(top level)", bw - 4))}</text></g>')
    for t in range(0, hi + 1, max(1, hi // 8)):
        y = y_of(t)
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#ddd"/><text x="{left - 3}" y="{y + 3:.1f}" text-anchor="end" '
                   f'class="tick">{t}</text>')
    out.append(f'<text x="{left - 3}" y="{top + 5}" text-anchor="end" class="tick">exact'
               f'</text><text x="{left - 3}" y="{y0 + 13}" text-anchor="end" class="tick">'
               f'n/a</text>')
    out.append(_axes(w, h, left, bottom, top, "nodes in execution order (modules as bands)",
                     "bits of agreement"))
    pos = {n: i for i, n in enumerate(nodes)}
    for route, pts in series:
        colour = ROUTE_COLOURS.get(route, "#555")
        placed = sorted((pos[n], n, b, t) for n, (b, t) in pts.items() if n in pos)
        line = " ".join(f"{x_of(i):.1f},{y_of(b):.1f}" for i, _, b, _ in placed
                        if b is not None and math.isfinite(b))
        if line:
            out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" '
                       f'stroke-width="1" stroke-opacity="0.6"/>')
        for i, n, b, t in placed:
            hollow = b is None or math.isinf(b)
            out.append(f'<circle class="pt" data-route="{esc(route)}" data-node="{esc(n)}" '
                       f'cx="{x_of(i):.1f}" cy="{y_of(b):.1f}" r="3" '
                       f'fill="{"#fff" if hollow else colour}" stroke="{colour}">'
                       f'<title>{esc(t)}</title></circle>')
    for k, (route, _) in enumerate(series):
        x = w - right - 90 * (len(series) - k)
        out.append(f'<circle cx="{x}" cy="6" r="3" fill="'
                   f'{ROUTE_COLOURS.get(route, "#555")}"/><text x="{x + 6}" y="9" '
                   f'class="tick">{esc(route)}</text>')
    title = "Bits of agreement of each node's propagated error, in execution order"
    return _svg(w, h, title, "".join(out), "along-graph")


# The advisor's cost/error front: where each measured assignment came from.
FRONT_COLOURS = {"all": "#7f7f7f", "confirmed": "#3b528b", "rule": "#e08214",
                 "chosen": "#21918c"}


def front(points) -> str:
    """The assignments the advisor measured (``advise --out``'s ``front``: source, cost in
    seconds, usage = the largest error / its budget): cost on x (linear, in us), usage on a
    log10 y axis with the budget's line at 1; every unit in one candidate grey, the search's
    confirmed rounds blue, the hand rules orange, the answer green and larger."""
    pts = [p for p in points if isinstance(p.get("cost"), (int, float))]
    if not pts:
        return ""
    w, h, left, bottom, top = 520, 230, 52, 36, 14
    us = [p["cost"] * 1e6 for p in pts]
    x0, x1 = 0.0, max(us) * 1.08 or 1.0
    finite = [p["usage"] for p in pts if isinstance(p["usage"], (int, float))
              and 0 < p["usage"] < math.inf]
    y0 = math.floor(math.log10(min(finite + [1.0]))) - 0.2
    y1 = math.ceil(math.log10(max(finite + [1.0]))) + 0.2

    def px(v):
        return left + (w - left - 10) * (v - x0) / (x1 - x0)

    def py(u):
        lv = y1 if not isinstance(u, (int, float)) or u == math.inf else \
            (y0 if u <= 0 else max(min(math.log10(u), y1), y0))
        return h - bottom - (h - bottom - top) * (lv - y0) / (y1 - y0)
    out = []
    for dec in range(math.ceil(y0), math.floor(y1) + 1):
        y = py(10.0 ** dec)
        line = 'stroke="#b2182b" stroke-dasharray="4,3"' if dec == 0 else 'stroke="#ddd"'
        out.append(f'<line x1="{left}" x2="{w - 10}" y1="{y:.1f}" y2="{y:.1f}" {line}/>'
                   f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end" class="tick">'
                   f'{esc(short(10.0 ** dec))}</text>')
    for i in range(5):
        v = x1 * i / 4
        anchor = "end" if i == 4 else "middle"
        out.append(f'<text x="{px(v):.1f}" y="{h - bottom + 13}" text-anchor="{anchor}" '
                   f'class="tick">{esc(short(v))}</text>')
    for p, v in sorted(zip(pts, us), key=lambda t: t[0]["source"] == "chosen"):
        kind = _front_kind(p["source"])
        r = 6 if kind == "chosen" else 4
        tip = f"{p['source']}: cost {short(v)} us, largest error / budget {short(p['usage'])}"
        out.append(f'<circle cx="{px(v):.1f}" cy="{py(p["usage"]):.1f}" r="{r}" '
                   f'fill="{FRONT_COLOURS[kind]}" fill-opacity="0.85" stroke="#000" '
                   f'stroke-width="{1 if kind == "chosen" else 0}"><title>{esc(tip)}</title>'
                   f'</circle>')
    x = left + 6
    for kind, text in (("all", "one format everywhere"), ("confirmed", "search, measured"),
                       ("rule", "hand rule"), ("chosen", "the answer")):
        out.append(f'<circle cx="{x + 3}" cy="{top - 4}" r="3.5" fill="{FRONT_COLOURS[kind]}"'
                   f'/><text x="{x + 10}" y="{top - 1}" class="tick">{esc(text)}</text>')
        x += 22 + 5.5 * len(text)
    out.append(_axes(w, h, left, bottom, top + 6, "cost (us, H100 roofline)",
                     "largest error / budget"))
    svg = _svg(w, h + 6, "Cost against error of the measured assignments", "".join(out),
               "plot front")
    return _figure(svg, "Every assignment the advisor measured on the samples: its cost on "
                   "the H100 roofline (engine/cost.py) against its largest error relative to "
                   "the budget (log scale; the dashed line is the budget: below it, met).",
                   "front")


def _front_kind(source: str) -> str:
    if source == "chosen":
        return "chosen"
    if source.startswith("all "):
        return "all"
    return "confirmed" if source.startswith(("confirmed", "refined")) else "rule"

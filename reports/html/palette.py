"""Colours of the heat map: ulp errors on a log2 scale, coloured with viridis.

viridis (van der Walt and Smith, matplotlib 2015) is perceptually uniform and readable with
the common colour-vision deficiencies (deuteranopia, protanopia, tritanopia) and in grey
scale, because its lightness rises monotonically from dark purple to yellow.  ``STOPS`` are
its ten evenly spaced samples as the R package viridisLite lists them (viridis(10)); between
them we interpolate linearly in sRGB, which keeps the relative luminance increasing
(tests/reports/test_html.py checks it over the whole scale), so "brighter" always means "larger
error".

Cells that hold no measured error get neutral greys or a pattern instead (see svg.py), never
a viridis colour, so a status is never mistaken for a magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STOPS = ("#440154", "#482878", "#3e4a89", "#31688e", "#26828e",
         "#1f9e89", "#35b779", "#6dcd59", "#b4de2c", "#fde725")


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


def colour_at(t: float) -> str:
    """The viridis colour at position ``t`` in [0, 1] (clamped) as #rrggbb."""
    t = min(1.0, max(0.0, t))
    x = t * (len(STOPS) - 1)
    i = min(int(x), len(STOPS) - 2)
    f = x - i
    a, b = _rgb(STOPS[i]), _rgb(STOPS[i + 1])
    return "#" + "".join(f"{round(p + (q - p) * f):02x}" for p, q in zip(a, b))


def luminance(hex_colour: str) -> float:
    """Relative luminance of an sRGB colour (WCAG 2.1 definition), 0 black to 1 white."""
    def linear(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(c) for c in _rgb(hex_colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_colour(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill``."""
    return "#000000" if luminance(fill) > 0.18 else "#ffffff"


@dataclass(frozen=True)
class LogScale:
    """Errors in ulp mapped to [0, 1] by log2 between 2**lo and 2**hi (integers): every
    error at or below 2**lo (0 included) gets the first colour, at or above 2**hi (and
    infinite errors) the last."""

    lo: int
    hi: int

    @classmethod
    def covering(cls, values, floor: int = -10, ceiling: int = 20) -> "LogScale":
        """The tightest power-of-two range around the positive finite ``values``, at least
        4 binades wide, within [2**floor, 2**ceiling] ulp.  The default limits are the
        histogram's (numerics.metrics.HIST_EDGES): one overflow measured as 2**(emax+2)
        (10**44 ulp in binary32) would otherwise squeeze every other error into the
        darkest colours."""
        logs = [math.log2(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
        if not logs:
            return cls(-2, 2)
        lo = max(floor, min(ceiling - 4, math.floor(min(logs))))
        hi = min(ceiling, max(lo + 4, math.ceil(max(logs))))
        return cls(lo, hi)

    def position(self, v: float) -> float:
        if v is None or math.isnan(v):
            raise ValueError("an unmeasurable error has no position on the scale")
        if v <= 0:
            return 0.0
        if math.isinf(v):
            return 1.0
        return min(1.0, max(0.0, (math.log2(v) - self.lo) / (self.hi - self.lo)))

    def colour(self, v: float) -> str:
        return colour_at(self.position(v))

    def ticks(self, most: int = 9) -> list[int]:
        """Exponents k of the tick marks 2**k, at most ``most`` of them, evenly spaced."""
        step = max(1, math.ceil((self.hi - self.lo) / (most - 1)))
        return list(range(self.lo, self.hi + 1, step))

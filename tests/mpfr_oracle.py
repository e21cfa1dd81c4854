"""An independent rounding oracle: MPFR (through gmpy2) does the rounding, and the
exceptional-value rules of shared/FACTS.md are restated here from the text, not imported.

``oracle(x, fmt)`` gives, for one float64 x, the (value, flags) of every mode but stochastic.
Values are floats (the formats here fit binary64); flags use the bit values of
shared/ARCHITECTURE.md.
"""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2

INEXACT, UNDERFLOW, OVERFLOW, INVALID = 1, 2, 4, 16
MODES7 = ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd")
_HUGE = gmpy2.get_emax_max()
_MPFR = type(gmpy2.mpfr(0))
_WIDE = gmpy2.context(precision=2048, emin=gmpy2.get_emin_min(), emax=_HUGE)


class FormatOracle:
    """MPFR contexts emulating one format; the tests' view of it is only its fields."""

    def __init__(self, fmt):
        self.p = fmt.man_bits + 1
        bias = fmt.bias
        self.emin = 1 - bias
        self.qmin = self.emin - fmt.man_bits
        self.encoding = fmt.encoding
        self.saturate = fmt.saturate
        self.flush = fmt.flush_subnormals
        top = (1 << fmt.exp_bits) - 1
        full = (1 << self.p) - 1
        # Max finite from the encodings' definitions (FACTS: fn's top code loses S.1111.111).
        if self.encoding == "ieee" or (self.encoding == "fn" and fmt.man_bits == 0):
            self.max = Fraction(full) * Fraction(2) ** (top - 1 - bias - fmt.man_bits)
        elif self.encoding == "fn":
            self.max = Fraction(full - 1) * Fraction(2) ** (top - bias - fmt.man_bits)
        else:
            self.max = Fraction(full) * Fraction(2) ** (top - bias - fmt.man_bits)
        # MPFR exponents: x = m 2**E with 1/2 <= m < 1, so 2**qmin has E = qmin + 1.
        self.max_mpfr = gmpy2.mpfr(gmpy2.mpq(self.max.numerator, self.max.denominator), self.p)
        self.min_normal = gmpy2.mpfr(gmpy2.mpq(*(Fraction(2) ** self.emin).as_integer_ratio()), 2)
        self.ctx = {name: gmpy2.context(precision=self.p, emin=self.qmin + 1, emax=_HUGE,
                                        subnormalize=True, round=rnd)
                    for name, rnd in (("RN", gmpy2.RoundToNearest), ("RZ", gmpy2.RoundToZero),
                                      ("RU", gmpy2.RoundUp), ("RD", gmpy2.RoundDown),
                                      ("RA", gmpy2.RoundAwayZero))}
        self.unbounded = {name: gmpy2.context(precision=self.p, emin=gmpy2.get_emin_min(), emax=_HUGE, round=c.round)
                          for name, c in self.ctx.items()}

    # -- helpers -----------------------------------------------------------------------------
    def _round(self, x, name, unbounded=False):
        # x is an exact binary64 mpfr; plus() under the context is one correct rounding.
        return (self.unbounded if unbounded else self.ctx)[name].plus(x)

    def _odd_significand(self, v, unbounded) -> bool:
        """Whether v's significand, counted in quanta of v's binade, is odd."""
        if v == 0:
            return False
        m, e = v.as_mantissa_exp()           # v = m * 2**e exactly
        m = abs(int(m))
        top = e + m.bit_length() - 1         # 2**top <= |v| < 2**(top+1)
        q = top - self.p + 1 if unbounded else max(top - self.p + 1, self.qmin)
        return (m << (e - q) if e >= q else m >> (q - e)) % 2 == 1

    def _mode_value(self, x, mode, unbounded=False):
        if mode == "nearest_even":
            return self._round(x, "RN", unbounded)
        if mode == "toward_zero":
            return self._round(x, "RZ", unbounded)
        if mode == "upward":
            return self._round(x, "RU", unbounded)
        if mode == "downward":
            return self._round(x, "RD", unbounded)
        rz, ra = self._round(x, "RZ", unbounded), self._round(x, "RA", unbounded)
        if rz == ra:
            return rz
        if mode == "nearest_away":
            # MPFR has no ties-away mode: a tie is exactly the midpoint of the neighbours
            # (both differences are exact at 2048 bits).
            tie = _WIDE.sub(x, rz) == _WIDE.sub(ra, x)
            return ra if tie else self._round(x, "RN", unbounded)
        # Round to odd: of the two neighbours, the one with an odd last significand bit.
        return rz if self._odd_significand(rz, unbounded) else ra

    # -- the oracle ----------------------------------------------------------------------------
    def round(self, xf, mode: str):
        """(value as float, flags) of rounding ``xf`` under ``mode``: a float64, or an mpfr
        (an exact value, or one rounded to odd far beyond the format's precision)."""
        if isinstance(xf, _MPFR):
            if gmpy2.is_nan(xf):
                xf = math.nan
            elif gmpy2.is_infinite(xf) or gmpy2.is_zero(xf):
                xf = float(xf)
            else:
                return self._round_finite(xf, xf < 0, math.copysign(1.0, float(xf)), mode)
        if math.isnan(xf):
            return (math.nan, 0) if self.encoding != "finite" else (0.0, INVALID)
        if math.isinf(xf):
            if self.encoding == "ieee" and not self.saturate:
                return xf, 0
            if self.encoding in ("fn", "fnuz") and not self.saturate:
                return math.nan, INVALID
            return math.copysign(float(self.max), xf), INVALID
        if xf == 0:
            return (0.0 if self.encoding == "fnuz" else xf), 0
        return self._round_finite(gmpy2.mpfr(xf, 53), xf < 0, xf, mode)

    def _round_finite(self, x, negative, xf, mode):
        """x: a finite nonzero mpfr; xf: a float with x's sign."""
        r = self._mode_value(x, mode)
        if abs(r) > self.max_mpfr:
            away = mode in ("nearest_even", "nearest_away") or \
                (mode == "upward" and not negative) or (mode == "downward" and negative)
            if away and self.encoding == "ieee" and not self.saturate:
                return math.copysign(math.inf, xf), OVERFLOW | INEXACT
            if away and self.encoding in ("fn", "fnuz") and not self.saturate:
                return math.nan, OVERFLOW | INEXACT
            return math.copysign(float(self.max), xf), OVERFLOW | INEXACT
        inexact = r != x
        flags = INEXACT if inexact else 0
        if inexact and abs(self._mode_value(x, mode, True)) < self.min_normal:
            flags |= UNDERFLOW
        value = float(r)
        if value == 0:
            value = math.copysign(0.0, xf)
        if self.flush and 0 < abs(r) < self.min_normal:
            value, flags = math.copysign(0.0, xf), INEXACT | UNDERFLOW
        if value == 0 and self.encoding == "fnuz":
            value = 0.0
        return value, flags

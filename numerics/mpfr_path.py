"""The exact path of the emulated backend: one element at a time through MPFR.

MPFR computes every primitive correctly rounded (including the transcendental ones).  We
ask it for the result rounded *to odd* at P = p + 66 bits (round toward zero, then set the
last bit when inexact), and let ``formats.round_exact`` round that into the format: a value
rounded to odd at p + 2 or more bits rounds correctly into p bits in every mode (Boldo &
Melquiond 2008), and with 66 extra bits the stochastic threshold floor(2**63 * fraction) is
the exact one too, so this path is bit-identical to rounding the exact real.

MPFR's own exponent range is far wider than any format's; where it still overflows or
underflows (exp(3e38)), a stand-in beyond the format's range with the same sign gives the
format's overflow or underflow result in every mode.
"""

from __future__ import annotations

import gmpy2
import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats import DIVIDE_BY_ZERO, INVALID

from .primitives import PRIMITIVES

_MPFR = type(gmpy2.mpfr(0))
_SUMS = ("add", "subtract", "fma")

# Primitive -> gmpy2 context method (numerics.primitives; rsqrt is MPFR's rec_sqrt), and
# ``plus``: one rounding of a number.
METHODS = {p.name: p.mpfr for p in PRIMITIVES.values() if p.mpfr is not None}
METHODS["plus"] = "plus"


class MpfrPath:
    """Correctly rounded primitives into one format and mode, element by element."""

    def __init__(self, fmt, mode):
        self.fmt = fmt
        self.mode = mode
        self.prec = fmt.precision + 66
        self.ctx = gmpy2.context(precision=self.prec, round=gmpy2.RoundToZero,
                                 emin=gmpy2.get_emin_min(), emax=gmpy2.get_emax_max())
        self.down = gmpy2.context(self.ctx, round=gmpy2.RoundDown)
        # Stand-ins for results beyond MPFR's range (see module doc).
        self.huge = gmpy2.mpfr(2) ** (fmt.emax + 8) if fmt.emax < 10**6 else None
        self.tiny = gmpy2.mpfr(2) ** (fmt.qmin - 8) if fmt.qmin > -10**6 else None

    def odd(self, name, args):
        """(value rounded to odd at self.prec, extra flags) of primitive ``name``."""
        ctx = self.ctx
        ctx.clear_flags()
        if name == "reciprocal":
            r = ctx.div(gmpy2.mpfr(1), args[0])
        else:
            r = getattr(ctx, METHODS[name])(*args)
        extra = 0
        if gmpy2.is_nan(r):
            return r, (0 if any(gmpy2.is_nan(a) for a in args) else INVALID)
        if gmpy2.is_infinite(r):
            if ctx.divzero:
                return r, DIVIDE_BY_ZERO
            if ctx.overflow and self.huge is not None:
                return (self.huge if r > 0 else -self.huge), 0
            return r, 0
        if gmpy2.is_zero(r) and ctx.underflow and self.tiny is not None:
            return (self.tiny if not gmpy2.is_signed(r) else -self.tiny), 0
        if gmpy2.is_zero(r) and self.mode == "downward" and name in _SUMS:
            # IEEE 754 6.3: an exact zero sum of opposite signs is -0 under downward
            # rounding only (+0 in every other mode); MPFR applies the rule of its mode.
            r = getattr(self.down, METHODS[name])(*args)
        if ctx.inexact and not gmpy2.is_zero(r):
            m, e = r.as_mantissa_exp()
            if m % 2 == 0:
                # Round to odd: the neighbour away from zero has the odd last bit.
                r = ctx.next_above(r) if r > 0 else ctx.next_below(r)
        return r, extra

    def apply(self, name, arrays, seed=0):
        """Elementwise ``name`` over broadcast arrays of float64 (or mpfr objects); returns
        (results as float64 or mpfr objects, uint8 flags)."""
        arrays = np.broadcast_arrays(*[np.asarray(a) for a in arrays])
        shape = arrays[0].shape
        wide = not self.fmt.fits_binary64
        out = np.empty(shape, dtype=object if wide else np.float64)
        flags = np.zeros(shape, dtype=np.uint8)
        flat = [a.reshape(-1) for a in arrays]
        for i in range(out.size):
            args = [_to_mpfr(a[i]) for a in flat]
            v, extra = self.odd(name, args)
            r = formats.round_exact(v, self.fmt, self.mode, seed=seed, index=i)
            out.flat[i] = r.to_mpfr() if wide else r.to_float()
            flags.flat[i] = r.flags | extra
        return out, flags


def _to_mpfr(x):
    if isinstance(x, _MPFR):
        return x
    return gmpy2.mpfr(float(x), 53)          # exact: a binary64 value at 53 bits

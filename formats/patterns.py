"""Bit patterns of one value as a Python integer, any width: ``Encoder`` writes the special
and finite patterns of a format, ``decode_int`` reads one back.  The layout is
formats/codec.py's; the exact rounding (formats/exact.py) and the array codec build on this.
"""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2

from .format import BinaryFormat, FormatError


class Encoder:
    """Bit patterns (Python ints) of the special and finite values of one format."""

    def __init__(self, fmt: BinaryFormat):
        self.fmt = fmt
        self.sign_bit = 1 << (fmt.bits - 1)
        self.top_code = (1 << fmt.exp_bits) - 1

    def zero(self, sign: int) -> int:
        return self.sign_bit if sign and self.fmt.has_negative_zero else 0

    def nan(self) -> int:
        f = self.fmt
        if f.encoding == "ieee":                        # quiet NaN: top code, fraction MSB
            return (self.top_code << f.man_bits) | (1 << (f.man_bits - 1))
        if f.encoding == "fn":                          # S.1..1.1..1, positive sign
            return self.sign_bit - 1
        if f.encoding == "fnuz":                        # the negative-zero pattern
            return self.sign_bit
        raise FormatError(f"{f.label} has no NaN")

    def inf(self, sign: int) -> int:
        if not self.fmt.has_inf:
            raise FormatError(f"{self.fmt.label} has no infinity")
        return (self.sign_bit if sign else 0) | (self.top_code << self.fmt.man_bits)

    def max_finite(self, sign: int) -> int:
        f = self.fmt
        return self.finite(sign, f.top_significand, f.emax - f.precision + 1)

    def finite(self, sign: int, m: int, q: int) -> int:
        """Pattern of (-1)**sign * m * 2**q, 0 < m < 2**p, on the format's grid."""
        f = self.fmt
        s = self.sign_bit if sign else 0
        hidden = 1 << f.man_bits
        if m >= hidden:                                 # normal: field = exponent + bias
            return s | ((q + f.man_bits + f.bias) << f.man_bits) | (m - hidden)
        return s | m                                    # subnormal, q == qmin


def decode_int(bits: int, fmt: BinaryFormat, kind=float):
    """Value of one pattern as ``float``, ``Fraction`` (None for inf/NaN) or ``"mpfr"``."""
    wf = fmt.man_bits
    sign = (bits >> (fmt.bits - 1)) & 1
    field = (bits >> wf) & ((1 << fmt.exp_bits) - 1)
    frac = bits & ((1 << wf) - 1)
    top = (1 << fmt.exp_bits) - 1
    special = None
    if fmt.encoding == "ieee" and field == top:
        special = "nan" if frac else ("-inf" if sign else "inf")
    elif fmt.encoding == "fn" and field == top and frac == (1 << wf) - 1:
        special = "nan"
    elif fmt.encoding == "fnuz" and bits == 1 << (fmt.bits - 1):
        special = "nan"
    if special is not None:
        if kind is Fraction:
            return None
        return float(special) if kind is float else gmpy2.mpfr(special)
    m, q = (frac, fmt.qmin) if field == 0 else (frac | (1 << wf), field - fmt.bias - wf)
    if kind is Fraction:
        value = Fraction(m) * Fraction(2) ** q
        return -value if sign else value
    if kind is float:
        return -math.ldexp(m, q) if sign else math.ldexp(m, q)
    if m == 0:
        return gmpy2.mpfr("-0" if sign else "0")
    m = -m if sign else m
    # One rounding at p bits of an exact p-bit value: exact (no context arithmetic after).
    return gmpy2.mpfr(gmpy2.mpq(m << q, 1) if q >= 0 else gmpy2.mpq(m, 1 << -q),
                      max(fmt.precision, 2))

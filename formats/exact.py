"""Exact rounding of any real number into any format, with IEEE flags.

The real is read exactly (int, Fraction, gmpy2 mpz/mpq/mpfr, float, numpy scalar, decimal
string) as a sign and a rational n/d, and rounded with Python integer arithmetic: this path is the
definition the fast path (``round_to``) must match bit for bit, and it handles formats of
any width (binary128, binary256).  Written separately from ``formats.kernel`` on purpose:
the two are compared against each other and both against MPFR.

Exceptional results follow shared/FACTS.md:
- NaN in: NaN out where the format has one (no flag); +0 and ``invalid`` where it has none.
- inf in: inf where the format has inf and does not saturate; otherwise NaN (fn, fnuz) or
  +-max_finite (finite encoding, or saturate), each with ``invalid``.
- overflow (the result rounded to p bits with an unbounded exponent exceeds max_finite):
  a rounding away from zero (nearest modes, stochastic, upward for x > 0, downward for
  x < 0) gives inf (ieee), NaN (fn, fnuz) or +-max_finite (finite, saturate); the other
  roundings (toward zero, odd, the other directed cases) give +-max_finite.  Flags overflow
  and inexact.
- underflow: tiny after rounding (the value rounded to p bits with an unbounded exponent
  lies below 2**emin in magnitude) and inexact.
- flush_subnormals: a result that would be subnormal is a zero of the same sign, flagged
  underflow and inexact.
- fnuz has no -0: every zero result is +0.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from fractions import Fraction

import gmpy2

from .catalog import get
from .format import BinaryFormat
from .kernel import py_stochastic_bits
from .modes import (DOWNWARD, INEXACT, INVALID, NEAREST_AWAY, NEAREST_EVEN, ODD, OVERFLOW,
                    STOCHASTIC, TOWARD_ZERO, UNDERFLOW, UPWARD, mode_code)
from .patterns import Encoder, decode_int


@dataclass(frozen=True)
class Real:
    """An exactly read real: ``kind`` in nan, inf, zero, finite; sign 0/1; magnitude n/d."""

    kind: str
    sign: int = 0
    n: int = 0
    d: int = 1


_ACCEPTS = "give an int, Fraction, gmpy2 number, float, numpy real scalar or decimal string"
_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_MPZ, _MPQ, _MPFR = type(gmpy2.mpz(0)), type(gmpy2.mpq(0)), type(gmpy2.mpfr(0))


def read_real(x) -> Real:
    """Read the real ``x`` exactly: int, Fraction, gmpy2 number, float, numpy real scalar
    (longdouble included), mpmath mpf, Decimal or decimal string; a ValueError names what
    could not be read (a complex number, say)."""
    if type(x) is float:
        return _read_float(x)
    if isinstance(x, bool):
        raise ValueError(f"round_exact: a bool is not a real number (got {x!r})")
    if isinstance(x, str):
        return _read_string(x)
    if isinstance(x, (int, _MPZ)):
        x = int(x)
        return Real("zero") if x == 0 else Real("finite", int(x < 0), abs(x), 1)
    if isinstance(x, _MPQ):
        x = Fraction(int(x.numerator), int(x.denominator))
    if isinstance(x, Fraction):
        if x == 0:
            return Real("zero")
        return Real("finite", int(x < 0), abs(x.numerator), x.denominator)
    if isinstance(x, _MPFR):
        if gmpy2.is_nan(x):
            return Real("nan")
        sign = int(gmpy2.is_signed(x))
        if gmpy2.is_infinite(x):
            return Real("inf", sign)
        if gmpy2.is_zero(x):
            return Real("zero", sign)
        n, d = x.as_integer_ratio()
        return Real("finite", sign, abs(int(n)), int(d))
    if isinstance(x, numbers.Complex) and not isinstance(x, numbers.Real):
        raise ValueError(f"round_exact: {type(x).__name__} {x!r} is complex, not a real number; "
                         f"{_ACCEPTS}")
    if isinstance(x, numbers.Integral):                     # numpy integers
        return read_real(int(x))
    if hasattr(x, "_mpf_") and x._mpf_[1]:
        # mpmath mpf, read from its raw (sign, man, exp, bc): exact, and mpmath 1.3 has no
        # as_integer_ratio (specials and zero, man 0, are read below).
        sign, man, exp, _ = x._mpf_
        n, d = (int(man) << exp, 1) if exp >= 0 else (int(man), 1 << -exp)
        return Real("finite", sign, n, d)
    try:
        # Exact for numpy floating scalars (longdouble too: float() would round it to
        # binary64), mpmath mpf, Decimal; NaN and inf raise, zeros lose their sign here.
        n, d = x.as_integer_ratio()
    except (AttributeError, TypeError, ValueError, OverflowError):
        n = 0
    if n:
        return Real("finite", int(n < 0), abs(int(n)), int(d))
    try:
        f = float(x)           # specials and zeros above; ml_dtypes scalars (exact in binary64)
    except (TypeError, ValueError):
        raise ValueError(f"round_exact: cannot read {type(x).__name__} {x!r} as a real number; "
                         f"{_ACCEPTS}") from None
    return _read_float(f)


def _read_float(f: float) -> Real:
    if f != f:
        return Real("nan")
    sign = 1 if math.copysign(1.0, f) < 0 else 0
    if f in (math.inf, -math.inf):
        return Real("inf", sign)
    if f == 0:
        return Real("zero", sign)
    n, d = f.as_integer_ratio()
    return Real("finite", sign, abs(n), d)


def _read_string(s: str) -> Real:
    t = s.strip().lower()
    sign = 1 if t.startswith("-") else 0
    body = t.lstrip("+-")
    if body == "nan":
        return Real("nan")
    if body in ("inf", "infinity"):
        return Real("inf", sign)
    if not _DECIMAL.match(t):
        raise ValueError(f"round_exact: {s!r} is not a decimal number (e.g. '0.1', '-2.5e-3', "
                         f"'inf', 'nan')")
    f = Fraction(body)
    if f == 0:
        return Real("zero", sign)
    return Real("finite", sign, f.numerator, f.denominator)


@dataclass(frozen=True)
class Rounded:
    """A value of ``fmt`` (its bit pattern) and the flags raised by producing it."""

    fmt: BinaryFormat
    bits: int
    flags: int

    def to_float(self) -> float:
        return decode_int(self.bits, self.fmt, float)

    def to_fraction(self) -> Fraction | None:
        """The exact value; None for inf and NaN (a zero's sign is lost)."""
        return decode_int(self.bits, self.fmt, Fraction)

    def to_mpfr(self):
        return decode_int(self.bits, self.fmt, "mpfr")


def round_exact(x, fmt, mode: str = "nearest_even", *, seed: int = 0, index: int = 0) -> Rounded:
    """Round the real ``x`` once into ``fmt`` under ``mode``; see the module doc.

    For ``stochastic``, the draw for (seed, index) is the one ``round_to`` uses at that flat
    index, so both paths round the same element the same way.
    """
    fmt = get(fmt)
    code = mode_code(mode)
    real = read_real(x)
    enc = Encoder(fmt)
    if real.kind == "nan":
        return Rounded(fmt, enc.nan(), 0) if fmt.has_nan else Rounded(fmt, enc.zero(0), INVALID)
    if real.kind == "inf":
        if fmt.has_inf and not fmt.saturate:
            return Rounded(fmt, enc.inf(real.sign), 0)
        if fmt.has_nan and not fmt.saturate:
            return Rounded(fmt, enc.nan(), INVALID)
        return Rounded(fmt, enc.max_finite(real.sign), INVALID)
    if real.kind == "zero":
        return Rounded(fmt, enc.zero(real.sign), 0)
    rand = py_stochastic_bits(seed, index) if code == STOCHASTIC else 0
    return _round_finite(real, fmt, code, rand, enc)


def _floor_log2(n: int, d: int) -> int:
    """floor(log2(n/d)) for positive integers."""
    e = n.bit_length() - d.bit_length()
    # Now 2**(e-1) < n/d < 2**(e+1); one comparison settles it.
    if (n << -e if e < 0 else n) < (d << e if e > 0 else d):
        e -= 1
    return e


def _quotient(n: int, d: int, q: int):
    """floor(n/d / 2**q) and the remainder rem/den of the quantum, 0 <= rem < den."""
    num, den = (n, d << q) if q >= 0 else (n << -q, d)
    trunc, rem = divmod(num, den)
    return trunc, rem, den


def _rounds_up(mode: int, sign: int, trunc: int, rem: int, den: int, rand: int) -> bool:
    """Whether |x| = trunc + rem/den quanta, 0 < rem < den, rounds to trunc + 1."""
    if mode == NEAREST_EVEN:
        return 2 * rem > den or (2 * rem == den and trunc % 2 == 1)
    if mode == NEAREST_AWAY:
        return 2 * rem >= den
    if mode == TOWARD_ZERO:
        return False
    if mode == UPWARD:
        return sign == 0
    if mode == DOWNWARD:
        return sign == 1
    if mode == ODD:
        return trunc % 2 == 0
    # Stochastic: up when the 63 random bits fall below floor(2**63 * rem / den).
    return rand < (rem << 63) // den


def _round_finite(real: Real, fmt: BinaryFormat, mode: int, rand: int, enc) -> Rounded:
    p, sign, n, d = fmt.precision, real.sign, real.n, real.d
    e = _floor_log2(n, d)
    q = max(e - p + 1, fmt.qmin)
    trunc, rem, den = _quotient(n, d, q)
    inexact = rem != 0
    r = trunc + (1 if inexact and _rounds_up(mode, sign, trunc, rem, den, rand) else 0)
    if r == 1 << p:
        r, q = r >> 1, q + 1
    if r == 0:
        return Rounded(fmt, enc.zero(sign), INEXACT | UNDERFLOW)
    normal = r >= 1 << (p - 1)
    # r * 2**q exceeds max_finite = top_significand * 2**(emax - p + 1).
    if normal and (q > fmt.emax - p + 1 or (q == fmt.emax - p + 1 and r > fmt.top_significand)):
        away = mode in (NEAREST_EVEN, NEAREST_AWAY, STOCHASTIC) or \
            (mode == UPWARD and sign == 0) or (mode == DOWNWARD and sign == 1)
        if away and fmt.has_inf and not fmt.saturate:
            bits = enc.inf(sign)
        elif away and fmt.has_nan and not fmt.saturate:
            bits = enc.nan()
        else:
            bits = enc.max_finite(sign)
        return Rounded(fmt, bits, OVERFLOW | INEXACT)
    flags = INEXACT if inexact else 0
    if inexact and e < fmt.emin:
        # Tininess after rounding: round again to p bits with no lower exponent limit; the
        # result is tiny unless it reached 2**emin.
        qu = e - p + 1
        tu, ru_rem, ru_den = _quotient(n, d, qu)
        ru = tu + (1 if ru_rem and _rounds_up(mode, sign, tu, ru_rem, ru_den, rand) else 0)
        if ru < 1 << (fmt.emin - qu):
            flags |= UNDERFLOW
    if not normal and fmt.flush_subnormals:
        return Rounded(fmt, enc.zero(sign), INEXACT | UNDERFLOW)
    return Rounded(fmt, enc.finite(sign, r, q), flags)

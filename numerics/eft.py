"""Compiled + - * / sqrt fma for the emulated backend: exact results, rounded once.

For a target of p <= 26 bits (binary32, tf32, bfloat16, binary16, float8/6/4) every
operation is evaluated in binary64 together with its error-free transformation, and the
exact result is compressed into one binary64 number by *rounding to odd*: keep the binary64
result if it is exact or its last bit is odd, else step one binary64 ulp toward the exact
value.  Rounding a value rounded to odd at p + 2 or more bits into p bits gives the correct
rounding in every nearest and directed mode (Boldo & Melquiond, "Emulation of FMA and
correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 2008), and also
keeps exactness, overflow and tininess decisions, so the scalar routine of formats.kernel
then rounds it into the format with the right flags.

The transformations (all exact in binary64 barring overflow, which these formats' ranges
exclude):
- a * b: exact itself (two significands of <= 26 bits make <= 52).
- a + b: TwoSum (Knuth): s = RN(a + b), err = (a - (s - bb)) + (b - bb), bb = s - a.
- fma(a, b, c): the exact product, then TwoSum with c.
- a / b: q = RN(a / b); the sign of a - q b says where a / b lies; q b = ph + pl exactly
  by Dekker's product (Veltkamp splitting), a - ph is exact (Sterbenz), and RN keeps the sign
  of (a - ph) - pl.
- sqrt(a): s = RN(sqrt(a)); the sign of a - s*s, by the same product.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats.fast import (finish, in_range_window, round_bits, round_in_range,
                                            threads_for)

ADD, SUBTRACT, MULTIPLY, DIVIDE, SQRT, FMA = range(6)
_INVALID, _DIVZERO = 16, 8
_SPLIT = 134217729.0          # 2**27 + 1: Veltkamp's splitter for binary64


@numba.njit(cache=True, error_model="numpy", inline="always")
def _two_product(a, b):
    """(ph, pl) with ph + pl = a * b exactly (Dekker 1971), ph = RN(a * b)."""
    ph = a * b
    t = _SPLIT * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLIT * b
    bh = t - (t - b)
    bl = b - bh
    pl = ((ah * bh - ph) + ah * bl + al * bh) + al * bl
    return ph, pl


@numba.njit(cache=True, error_model="numpy", inline="always")
def _zero_sum(x, y, downward):
    """The sign of an exact zero sum x + y: IEEE 754 6.3 gives -0 under downward rounding
    unless both are +0, and +0 in every other mode unless both are -0."""
    both_pos = math.copysign(1.0, x) > 0 and math.copysign(1.0, y) > 0
    both_neg = math.copysign(1.0, x) < 0 and math.copysign(1.0, y) < 0
    if downward:
        return 0.0 if both_pos else -0.0
    return -0.0 if both_neg else 0.0


@numba.njit(cache=True, error_model="numpy", inline="always")
def _two_sum(x, y, downward):
    """(s, d, 0): s = RN(x + y) and the side d of the exact sum from s, by TwoSum (Knuth):
    err = (x - (s - bb)) + (y - bb), bb = s - x, is exactly x + y - s."""
    s = x + y
    if not math.isfinite(s):
        return s, 0, 0
    if s == 0.0:
        return _zero_sum(x, y, downward), 0, 0
    bb = s - x
    err = (x - (s - bb)) + (y - bb)
    return s, (1 if err > 0 else (-1 if err < 0 else 0)), 0


@numba.njit(cache=True, error_model="numpy", inline="always")
def _exact_odd(op, a, b, c, downward):
    """(v, d, flags): the binary64 result v of the operation, the direction d (-1, 0, 1) of
    the exact result from v, and the invalid / divide-by-zero flags of the operation."""
    flags = 0
    if op == ADD or op == SUBTRACT:
        if op == SUBTRACT:
            b = -b
        if math.isinf(a) and math.isinf(b) and a != b:
            return a + b, 0, _INVALID
        return _two_sum(a, b, downward)
    if op == MULTIPLY:
        s = a * b
        if s != s and a == a and b == b:
            flags = _INVALID                               # 0 * inf
        return s, 0, flags
    if op == FMA:
        prod = a * b
        s = prod + c
        if s != s:
            if a == a and b == b and c == c:
                flags = _INVALID                           # 0 * inf, or inf - inf
            return s, 0, flags
        return _two_sum(prod, c, downward)
    if op == DIVIDE:
        q = a / b
        if q != q:
            if a == a and b == b:
                flags = _INVALID                           # 0/0, inf/inf
            return q, 0, flags
        if b == 0.0:
            return q, 0, (_DIVZERO if a != 0.0 and math.isfinite(a) else 0)
        if not math.isfinite(q) or q == 0.0 or math.isinf(b):
            return q, 0, 0
        ph, pl = _two_product(q, b)
        r = (a - ph) - pl
        d = 0
        if r != 0.0:
            d = 1 if (r > 0) == (b > 0) else -1
        return q, d, 0
    # SQRT
    if a < 0.0:
        return np.nan, 0, _INVALID
    s = math.sqrt(a)
    if s == 0.0 or not math.isfinite(s):
        return s, 0, 0
    ph, pl = _two_product(s, s)
    r = (a - ph) - pl
    return s, (1 if r > 0 else (-1 if r < 0 else 0)), 0


@numba.njit(cache=True, inline="always", error_model="numpy")
def odd_bits(op, a, b, c, downward):
    """(binary64 pattern, flags) of the exact result of ``op`` rounded to odd in binary64: the
    nearest value v and the sign of the remainder d, then, where v is not exact and even,
    one binary64 ulp toward the exact value (v != 0 there, so the step keeps the sign; +1
    on the pattern grows the magnitude): the module docstring's compression (``downward``:
    the rounding mode is toward -inf, which decides the sign of an exact zero sum)."""
    v, d, f = _exact_odd(op, a, b, c, downward)
    bits = np.float64(v).view(np.int64)
    if d != 0 and (bits & 1) == 0:
        bits += 1 if (d > 0) == (v > 0) else -1
    return bits, f


def _make_loop(op, fixed):
    """The array loops of one operation and, for ``fixed`` >= 0, one rounding mode
    (compile-time constants, so their branches fold away: round to nearest even, the mode
    nearly every run uses, about 3x faster than with the mode read at run time); for
    ``fixed`` < 0 the mode is the argument ``mode``, one compilation for the other modes (a
    compilation of a parallel loop takes seconds: one per mode was most of a fresh test
    run's time in these loops).  The exact result is rounded to odd in binary64, then
    rounded into the format."""

    @numba.njit(parallel=True, cache=True, error_model="numpy")
    def loop(a, b, c, out, flags, want_flags, p, qmin, emax, mtop, params, mode, seed,
             offset):
        lo, hi, shift = in_range_window(p, qmin, emax)
        mode = fixed if fixed >= 0 else mode
        for i in numba.prange(out.size):
            bits, f = odd_bits(op, a[i], b[i], c[i], mode == 4)
            e = (bits >> 52) & 0x7FF
            if e >= lo and e <= hi:
                r, g = round_in_range(bits, shift, mode, seed, offset + i)
            else:
                r, g = round_bits(bits, p, qmin, emax, mtop, params, mode, seed, offset + i)
            out[i] = r
            if want_flags:
                flags[i] = f | g

    @numba.njit(parallel=True, cache=True, error_model="numpy")
    def values(a, b, c, out, p, qmin, emax, mode, seed, offset):
        # Values without flags in two passes, as formats.fast does: the in-range results
        # here, the odd-rounded patterns of the others left for formats.fast.finish.
        lo, hi, shift = in_range_window(p, qmin, emax)
        mode = fixed if fixed >= 0 else mode
        outside = 0
        for i in numba.prange(out.size):
            bits, f = odd_bits(op, a[i], b[i], c[i], mode == 4)
            e = (bits >> 52) & 0x7FF
            if e >= lo and e <= hi:
                bits = round_in_range(bits, shift, mode, seed, offset + i)[0]
            else:
                outside += 1
            out[i] = bits
        return outside

    return loop, values


# Compiled on first use.  Stochastic rounding is not among the modes: rounding to odd does
# not keep its threshold (the emulated backend sends it to MPFR).
_NEAREST_EVEN = formats.mode_code("nearest_even")
_LOOPS = {(op, fixed): _make_loop(op, fixed) for op in range(6)
          for fixed in (_NEAREST_EVEN, -1)}


def apply_rounded(op, a, b, c, out, flags, want_flags, p, qmin, emax, mtop, params, mode,
                  seed, offset):
    """out[i] (int64 bits) = the exact op(a[i], b[i], c[i]) rounded once into the format."""
    loop, values = _LOOPS[op, _NEAREST_EVEN if mode == _NEAREST_EVEN else -1]
    with threads_for(out.size):
        if want_flags:
            loop(a, b, c, out, flags, True, p, qmin, emax, mtop, params, mode, seed, offset)
        elif values(a, b, c, out, p, qmin, emax, mode, seed, offset):
            finish(out, p, qmin, emax, mtop, params, mode, seed, offset)


def supported(fmt) -> bool:
    """Whether this compiled path is exact for ``fmt``: p + 2 <= 53 with exact products
    (2p <= 53), and products and quotients of format values stay normal in binary64."""
    return (fmt.fits_binary64 and fmt.precision <= 26 and fmt.emax <= 500
            and fmt.qmin >= -500)


@numba.njit(parallel=True, cache=True)
def screen_in_range(y, out, ok, p, qmin, emax, mode, rel):
    """Screened rounding of binary64 approximations y of exact values within rel * |y|:
    where y - d and y + d (d = rel |y|) both lie in the in-range shortcut's range and round
    to the same value, that value is the exact one's rounding (out, ok = True); elsewhere
    ok = False and the caller decides (zeros, infinities, NaN, near-boundary values,
    subnormal or overflowing results)."""
    lo, hi, shift = in_range_window(p, qmin, emax)
    for i in numba.prange(y.size):
        v = y[i]
        d = abs(v) * rel
        bl = np.float64(v - d).view(np.int64)
        bh = np.float64(v + d).view(np.int64)
        el = (bl >> 52) & 0x7FF
        eh = (bh >> 52) & 0x7FF
        good = False
        if v != 0.0 and el >= lo and el <= hi and eh >= lo and eh <= hi:
            rl = round_in_range(bl, shift, mode, 0, 0)[0]
            if rl == round_in_range(bh, shift, mode, 0, 0)[0]:
                out[i] = rl
                good = True
        ok[i] = good

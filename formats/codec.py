"""Bit patterns of format values: encode, decode, ordinals, neighbours, ulp, enumeration.

Layout of every encoding: sign bit, ``exp_bits`` exponent field, ``man_bits`` fraction.
Field 0 holds zero and the subnormals M * 2**qmin (M = fraction); field f > 0 holds the
normals (2**man_bits + fraction) * 2**(f - bias - man_bits).  Within one sign the magnitude
grows with the pattern, so a value's *ordinal* (the pattern without its sign bit, negated
for negative values) counts format values: ordinal distance is distance in ulps.

Two implementations: Python integers (formats/patterns.py) for any width, and numba loops
over float64 / uint64 arrays for the formats whose values fit binary64; wider formats take
their patterns from the exact rounding (formats/exact.py).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .catalog import get
from .exact import round_exact
from .patterns import Encoder, decode_int

# ----- vectorized, formats that fit binary64 ---------------------------------------------

@numba.njit(cache=True)
def _decode_loop(bits, out, nbits, wf, ew, bias, qmin, enc):
    # enc: 0 ieee, 1 fn, 2 fnuz, 3 finite
    top = (1 << ew) - 1
    for i in range(bits.size):
        b = np.int64(bits[i])
        sign = (b >> (nbits - 1)) & 1
        field = (b >> wf) & top
        frac = b & ((1 << wf) - 1)
        if enc == 0 and field == top:
            v = np.nan if frac != 0 else np.inf
        elif enc == 1 and field == top and frac == (1 << wf) - 1:
            v = np.nan
        elif enc == 2 and sign == 1 and field == 0 and frac == 0:
            v = np.nan
        elif field == 0:
            v = math.ldexp(float(frac), qmin)
        else:
            v = math.ldexp(float(frac | (1 << wf)), field - bias - wf)
        out[i] = -v if sign == 1 else v


@numba.njit(cache=True)
def _encode_loop(x, out, nbits, wf, ew, bias, qmin, emin, p, enc, mtop, emax):
    """Patterns of float64 values; returns the index of the first value that is not in the
    format, or -1."""
    top = (1 << ew) - 1
    sbit = np.int64(1) << (nbits - 1)
    for i in range(x.size):
        v = x[i]
        neg = v < 0 or (v == 0 and math.copysign(1.0, v) < 0)
        s = sbit if neg else 0
        a = abs(v)
        if v != v:
            if enc == 0:
                out[i] = (top << wf) | (1 << (wf - 1))
            elif enc == 1:
                out[i] = sbit - 1
            elif enc == 2:
                out[i] = sbit
            else:
                return i
        elif a == np.inf:
            if enc != 0:
                return i
            out[i] = s | (top << wf)
        elif a == 0:
            out[i] = s if enc != 2 else 0
        else:
            m, ex = math.frexp(a)
            e = ex - 1
            q = max(e - p + 1, qmin)
            mf = math.ldexp(a, -q)
            if mf != math.floor(mf) or e > emax or (e == emax and mf > mtop):
                return i
            mi = np.int64(mf)
            if e >= emin:
                out[i] = s | ((e + bias) << wf) | (mi - (1 << wf))
            else:
                out[i] = s | mi
    return -1


def _enc_code(fmt):
    return ("ieee", "fn", "fnuz", "finite").index(fmt.encoding)


def encode(x, fmt) -> np.ndarray:
    """Bit patterns of values of ``fmt``: uint64 for formats of at most 64 bits, else an
    object array of Python ints.  A value that is not in the format is an error (round it
    first with ``round_to``)."""
    fmt = get(fmt)
    x = np.asarray(x)
    if fmt.fits_binary64 and fmt.bits <= 64:
        flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
        out = np.empty(flat.size, dtype=np.int64)
        bad = _encode_loop(flat, out, fmt.bits, fmt.man_bits, fmt.exp_bits, fmt.bias, fmt.qmin,
                           fmt.emin, fmt.precision, _enc_code(fmt), fmt.top_significand, fmt.emax)
        if bad >= 0:
            raise ValueError(f"encode: {flat[bad]!r} is not a value of {fmt.label}; "
                             f"round it into the format first (formats.round_to)")
        return out.view(np.uint64).reshape(x.shape)
    out = np.empty(x.shape, dtype=object)
    for idx, v in np.ndenumerate(x):
        r = round_exact(v, fmt)
        if r.flags:
            raise ValueError(f"encode: {v!r} is not a value of {fmt.label}; round it first")
        out[idx] = r.bits
    return out


def decode(bits, fmt) -> np.ndarray:
    """Values of bit patterns: float64 where the format fits binary64, else an object array
    of gmpy2 mpfr numbers."""
    fmt = get(fmt)
    if fmt.fits_binary64 and fmt.bits <= 64:
        b = np.ascontiguousarray(bits, dtype=np.uint64)
        if b.size and int(b.max()) >> fmt.bits:
            raise ValueError(f"decode: pattern {int(b.max()):#x} has more than {fmt.bits} bits "
                             f"({fmt.label})")
        out = np.empty(b.size, dtype=np.float64)
        _decode_loop(b.reshape(-1).view(np.int64), out, fmt.bits, fmt.man_bits, fmt.exp_bits,
                     fmt.bias, fmt.qmin, _enc_code(fmt))
        return out.reshape(b.shape)
    b = np.asarray(bits, dtype=object)
    out = np.empty(b.shape, dtype=object)
    for idx, v in np.ndenumerate(b):
        out[idx] = decode_int(int(v), fmt, "mpfr")
    return out


def ordinal(x, fmt) -> np.ndarray:
    """int64 rank of each format value: consecutive values differ by 1, both zeros are 0."""
    fmt = get(fmt)
    b = encode(x, fmt).astype(np.int64)
    mag = b & np.int64((1 << (fmt.bits - 1)) - 1)
    neg = (b >> (fmt.bits - 1)) & 1
    if fmt.encoding == "fnuz":
        neg = np.where(mag == 0, 0, neg)
    return np.where(neg == 1, -mag, mag)


def from_ordinal(k, fmt) -> np.ndarray:
    """Values of the given ordinals (inverse of ``ordinal``; 0 gives +0)."""
    fmt = get(fmt)
    k = np.asarray(k, dtype=np.int64)
    top = _max_index(fmt)
    if np.any(np.abs(k) > top):
        raise ValueError(f"from_ordinal: ordinals of {fmt.label} lie in [-{top}, {top}]")
    bits = np.where(k < 0, (-k) | (np.int64(1) << (fmt.bits - 1)), k)
    return decode(bits.astype(np.uint64), fmt)


def _max_index(fmt):
    """The ordinal of max_finite."""
    return int(Encoder(fmt).max_finite(0))


def next_up(x, fmt) -> np.ndarray:
    """The next format value above each value (+inf past max_finite, NaN stays NaN)."""
    return _step(x, fmt, 1)


def next_down(x, fmt) -> np.ndarray:
    """The next format value below each value (-inf past -max_finite, NaN stays NaN)."""
    return _step(x, fmt, -1)


def _step(x, fmt, direction):
    fmt = get(fmt)
    x = np.asarray(x, dtype=np.float64)
    top = _max_index(fmt)
    finite = np.isfinite(x)
    k = ordinal(np.where(finite, x, 0.0), fmt) + direction
    out = from_ordinal(np.clip(k, -top, top), fmt)
    out = np.where(k > top, np.inf, np.where(k < -top, -np.inf, out))
    # Infinities step to the extreme finite values, toward the inside only.
    out = np.where(x == np.inf, np.inf if direction > 0 else fmt.max_finite, out)
    out = np.where(x == -np.inf, -fmt.max_finite if direction > 0 else -np.inf, out)
    return np.where(np.isnan(x), np.nan, out)


def ulp(x, fmt) -> np.ndarray:
    """ulp(x) = 2**max(e - p + 1, qmin) where 2**e <= |x| < 2**(e+1); 2**qmin at 0; NaN for
    inf and NaN.  Defined for any real x, not only format values (shared/FACTS.md)."""
    fmt = get(fmt)
    x = np.asarray(x, dtype=np.float64)
    _, ex = np.frexp(np.abs(x))
    q = np.maximum(ex - 1 - fmt.precision + 1, fmt.qmin)
    q = np.where(x == 0, fmt.qmin, q)
    return np.where(np.isfinite(x), np.ldexp(1.0, q), np.nan)


def values(fmt, signed_zeros: bool = True) -> np.ndarray:
    """Every finite value of a format of at most 24 bits, ascending (-0 before +0)."""
    fmt = get(fmt)
    if fmt.bits > 24:
        raise ValueError(f"values: {fmt.label} has {fmt.bits} bits; enumeration is for formats "
                         f"of at most 24 bits")
    top = _max_index(fmt)
    pos = decode(np.arange(top + 1, dtype=np.uint64), fmt)
    neg = -pos[::-1]
    if not (signed_zeros and fmt.has_negative_zero):
        neg = neg[:-1]
    return np.concatenate([neg, pos])

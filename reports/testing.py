"""``assert_ulp_close(actual, exact, fmt, max_ulp=0.5)``: a test assertion on ulp errors, for
users' own kernels in any binary format (float8 included).

``actual``: values of the format -- float64 (array or scalar) for formats that fit binary64,
an object array of exact numbers (gmpy2 mpfr, Fraction, ...) for wider ones.  ``exact``: the
true values, float64 or exact numbers (Fraction, int, mpmath mpf, gmpy2), scalar or array,
broadcast against ``actual``.  ``fmt``: a format name, spec or ``formats.BinaryFormat``.

The error of each element is numerics.metrics' ulp error (exact arithmetic, the extended
format's convention at overflow: see numerics/metrics.py).  An element passes when its
|ulp error| <= ``max_ulp``; NaN against NaN passes (error 0), as does an infinity against the
format's image of the same infinity.  Everything metrics cannot measure fails: a NaN where a
number or an infinity is exact, a number where NaN is exact, an infinity of the wrong sign.
On failure the AssertionError names how many elements fail and the worst one: its index, the
computed value and its bit pattern, the exact value and the error in ulps (or why it is not
measurable).  0.5 ulp is "correctly rounded to nearest", anything below 1 "faithful".
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.engine.rows import decimal_text
from roundoff_coverage.numerics import metrics

__all__ = ["assert_ulp_close"]


def assert_ulp_close(actual, exact, fmt, max_ulp: float = 0.5, msg: str | None = None) -> None:
    """Raise AssertionError unless every |ulp error| of ``actual`` against ``exact`` in
    ``fmt`` is at most ``max_ulp`` (module docstring); ``msg`` is prefixed to the message.
    ValueError for arguments that cannot be compared (a bad max_ulp, shapes that do not
    broadcast, ``actual`` values that the format does not hold)."""
    fmt = fmt if isinstance(fmt, formats.BinaryFormat) else formats.get(fmt)
    if isinstance(max_ulp, bool) or not isinstance(max_ulp, (int, float)) \
            or math.isnan(max_ulp) or max_ulp < 0:
        raise ValueError(f"assert_ulp_close: max_ulp must be a number >= 0 (got {max_ulp!r})")
    comp = _computed(actual, fmt)
    want = _exact(exact)
    try:
        # Copies: broadcast views are read-only, and the compiled metrics want arrays.
        comp, want = (np.array(a) for a in np.broadcast_arrays(comp, want))
    except ValueError:
        raise ValueError(f"assert_ulp_close: shapes {np.shape(comp)} (actual) and "
                         f"{np.shape(want)} (exact) do not broadcast") from None
    _check_values(comp, fmt)
    m = metrics.measure(comp, want, fmt)
    err = np.asarray(m.ulp, dtype=np.float64)
    unmeasurable = np.isnan(err)
    with np.errstate(invalid="ignore"):
        fails = unmeasurable | (np.abs(err) > max_ulp)
    count = int(np.count_nonzero(fails))
    if not count:
        return
    # The worst element: an unmeasurable one first (a NaN where a number belongs is worse
    # than any finite error), else the largest |error|.
    flat_err, flat_bad = err.reshape(-1), unmeasurable.reshape(-1)
    j = int(np.flatnonzero(flat_bad)[0]) if flat_bad.any() else int(np.nanargmax(np.abs(flat_err)))
    index = np.unravel_index(j, err.shape) if err.ndim else ()
    codes = np.asarray(m.codes).reshape(-1)
    c, x = comp.reshape(-1)[j], want.reshape(-1)[j]
    if flat_bad[j]:
        what = f"error not measurable ({metrics.CLASSES[int(codes[j])]})"
    else:
        what = f"error {flat_err[j]:+.6g} ulp"
    head = f"{msg}: " if msg else ""
    measurable = flat_err[~flat_bad]
    largest = f"; largest measurable |error| {np.max(np.abs(measurable)):.6g} ulp" \
        if measurable.size else ""
    raise AssertionError(
        f"{head}{count} of {err.size} element{'s' if err.size != 1 else ''} not within "
        f"{max_ulp:g} ulp in {fmt.label}{largest}\n"
        f"worst at index {tuple(int(i) for i in index)}: actual {_show(c)} "
        f"(bits {_bits(c, fmt)}), exact {_show(x)}, {what}")


def _computed(actual, fmt):
    """``actual`` as metrics reads computed values."""
    a = np.asarray(actual)
    if fmt.fits_binary64:
        if a.dtype == object or a.dtype.kind not in "fiub":
            try:
                a = np.asarray(a, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError("assert_ulp_close: actual must hold float64 values of "
                                 f"{fmt.label}") from None
        return np.asarray(a, dtype=np.float64)
    return np.asarray(a, dtype=object)


def _exact(exact):
    """``exact`` as metrics reads exact values: float64, or an object array of exact
    numbers (a float64 cast would round a Fraction or an mpmath value)."""
    a = np.asarray(exact) if not isinstance(exact, (Fraction, int)) else \
        np.asarray(exact, dtype=object)
    if a.dtype == object:
        return a
    if a.dtype.kind in "iub":                 # integers exactly, whatever their size
        return a.astype(object)
    return np.asarray(a, dtype=np.float64)


def _check_values(comp, fmt):
    """ValueError naming the first ``actual`` value the format does not hold (an
    unrounded float64 would otherwise be measured as if it were the kernel's output)."""
    if not fmt.fits_binary64:
        return
    with np.errstate(invalid="ignore"):
        # A value of the format is its own rounding (under any mode).
        back = formats.round_to(np.ascontiguousarray(comp, dtype=np.float64), fmt)
        same = (back == comp) | (np.isnan(back) & np.isnan(comp))
    if not same.all():
        j = int(np.flatnonzero(~same.reshape(-1))[0])
        index = np.unravel_index(j, comp.shape) if comp.ndim else ()
        raise ValueError(f"assert_ulp_close: actual {_show(comp.reshape(-1)[j])} at index "
                         f"{tuple(int(i) for i in index)} is not a value of {fmt.label} "
                         f"(round it into the format first: formats.round_to)")


def _show(v) -> str:
    """A number for the message: repr of binary64, Fraction as n/d with a decimal, mpmath
    and gmpy2 values at 20 significant digits."""
    if isinstance(v, Fraction):
        return f"{v.numerator}/{v.denominator} (~{float(v):.17g})" if v.denominator != 1 \
            else str(v.numerator)
    return decimal_text(v)


def _bits(v, fmt) -> str:
    """The bit pattern of a value of ``fmt`` in hex, as many digits as the format has."""
    try:
        word = formats.encode(np.asarray([v], dtype=np.float64 if fmt.fits_binary64
                                         else object), fmt)[0]
    except Exception:                                       # noqa: BLE001
        return "?"
    return f"0x{int(word):0{(fmt.bits + 3) // 4}x}"

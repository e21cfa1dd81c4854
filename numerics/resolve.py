"""resolve(fn, inputs, fmt): the exact rounding of a rule's outputs into a format, the
precision escalated until every result's rounding is settled, certified by interval
arithmetic (numerics/intervals.py) where it can be."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from mpmath import libmp
from mpmath.libmp import fone, fzero

from roundoff_coverage import formats

from .double_double import DD, exact_sums, exact_values
from .intervals import enclosures
from .reference import ReferenceBackend, raw_real, round_raw, special_raw


@dataclass
class Resolution:
    """What resolve() found.  values: mpf at the final precision ``prec``; bits: the format's
    bit patterns (Python ints, None where unresolved); rounded: float64 values (NaN where
    unresolved) for formats that fit binary64, else gmpy2 mpfr (None where unresolved);
    resolved, certified: bool arrays."""

    values: np.ndarray
    rounded: np.ndarray
    bits: np.ndarray
    resolved: np.ndarray
    certified: np.ndarray
    prec: int
    fmt: formats.BinaryFormat
    mode: str


def resolve(fn, inputs, fmt, mode="nearest_even", start_prec=64, max_prec=2048, seed=0):
    """fn(backend, *arrays) -> array, rounded into ``fmt`` under ``mode``, with the precision
    doubled from ``start_prec`` (up to ``max_prec``) until every element is settled.

    ``inputs`` reach ``fn`` through the backend's ``asarray`` (exactly); literals from
    ``constant`` are enclosed exactly.  At each precision fn runs on mpf points
    (ReferenceBackend) and on enclosures (IntervalBackend).  An element is
    - certified when both ends of its enclosure round to the same format value: every real
      inside then does too, rounding being monotone in every mode.  The enclosures are
      rigorous for +, -, *, /, sqrt, fma, hypot, integer powers; transcendental bounds are
      widened by 2**24 ulps of a guarded evaluation, so they trust mpmath that far (mpmath's
      own "directed" transcendental roundings are not reliable: see IntervalBackend).
      A zero-width enclosure is an exact result and certifies itself: exp(0) = 1 under
      ``upward``, sqrt(4) under ``downward``, log2(8), cbrt(-27), hypot(3, 4), cos(0).
    - resolved but not certified, only where no enclosure exists (NaN or inf on the way, a
      comparison or an fmod of non-points that intervals cannot decide): the point values
      round to the same format value at two successive precisions and do not lie on a
      rounding boundary (a format value under directed modes, a midpoint under nearest ones).
    - unresolved (resolved=False, rounded NaN or None) after ``max_prec`` otherwise: a value
      within about 2**-max_prec of a boundary, or an exact result on a boundary reached by a
      path whose enclosure is not a point (exp(log(2)) = 2 under ``upward``; 1 + tiny where
      every precision tried sees 1).  Never a silently wrong value.
    ``seed`` is the stochastic-rounding seed (the draw of element i is formats' (seed, i)).
    """
    fmt = formats.get(fmt)
    formats.mode_code(mode)
    if not 2 <= start_prec <= max_prec:
        raise ValueError(f"resolve: need 2 <= start_prec <= max_prec (got {start_prec}, "
                         f"{max_prec})")
    prec, prev = int(start_prec), None
    while True:
        bk = ReferenceBackend(prec)
        values = np.asarray(fn(bk, *[bk.asarray(x) for x in inputs]), dtype=object)
        boxes = enclosures(fn, inputs, prec)
        flat = values.reshape(-1)
        boxes = [None] * flat.size if boxes is None else boxes.reshape(-1)
        if prev is None:
            bits = np.full(flat.shape, None, dtype=object)
            resolved, certified = np.zeros(flat.shape, bool), np.zeros(flat.shape, bool)
        cur = [round_raw(v._mpf_, fmt, mode, i, seed) for i, v in enumerate(flat)]
        for i in np.flatnonzero(~certified):
            if boxes[i] is not None:
                lo, hi = (round_raw(e, fmt, mode, i, seed) for e in (boxes[i].lo, boxes[i].hi))
                ok = _key(lo) == _key(hi)
                # Zeros of both signs are one real: an unsigned zero reads as +0.
                bits[i] = (lo.bits if lo.bits == hi.bits else round_raw(fzero, fmt, mode).bits) \
                    if ok else None
                resolved[i] = certified[i] = ok
                continue
            ok = prev is not None and _key(cur[i]) == _key(prev[i]) and \
                not _on_boundary(flat[i]._mpf_, fmt, mode, prec, i, seed)
            resolved[i], bits[i] = ok, (cur[i].bits if ok else None)
        if resolved.all() or prec >= max_prec:
            break
        prev, prec = cur, min(2 * prec, max_prec)
    return _resolution(values, bits, resolved, certified, prec, fmt, mode)


def _key(r):
    """Rounded values compared as reals (both zeros equal); inf and NaN by their bits."""
    f = r.to_fraction()
    return ("bits", r.bits) if f is None else ("value", f)


def _on_boundary(r, fmt, mode, prec, index, seed):
    """Whether the rounding into fmt jumps at (or within a hair of) the real r: values just
    below and just above it, by 2**-8 of both an ulp at prec and a quantum of fmt, round
    differently."""
    if special_raw(r):
        return False
    top = fmt.qmin if r == fzero else min(max(r[2] + r[3] - 1, fmt.qmin - 2), fmt.emax + 2)
    x = raw_real(r, fmt, clamp=True)
    eps = Fraction(2) ** (top - max(prec, fmt.precision) - 8)
    below, above = (formats.round_exact(x + s * eps, fmt, mode, seed=seed, index=index)
                    for s in (-1, 1))
    return _key(below) != _key(above)


def _resolution(values, bits, resolved, certified, prec, fmt, mode):
    shape = values.shape
    if fmt.fits_binary64:
        rounded = np.array([np.nan if b is None else formats.Rounded(fmt, b, 0).to_float()
                            for b in bits], dtype=np.float64)
    else:
        rounded = np.empty(bits.shape, dtype=object)
        rounded[:] = [None if b is None else formats.Rounded(fmt, b, 0).to_mpfr() for b in bits]
    return Resolution(values, rounded.reshape(shape), bits.reshape(shape),
                      resolved.reshape(shape), certified.reshape(shape), prec, fmt, mode)


ReferenceBackend.resolve = staticmethod(resolve)


# ----- settle: the same precision loop for values measured in ulps ----------------------------

@dataclass
class Settled:
    """What settle() found, per item: ``values`` at the highest precision it was evaluated
    at, that precision (``precs``), and whether its last two evaluations agreed
    (``settled``)."""

    values: list
    precs: list
    settled: list


SETTLE_ULPS = 2.0 ** -32


def settle(fn, n, fmt, start_prec, max_prec=2048, tol=SETTLE_ULPS, first=None,
           floor=None, ladder=None, agree=None):
    """The exact values of ``n`` items to within ``tol`` ulps of ``fmt``, by resolve's loop:
    ``fn(prec, items)`` evaluates the items (a list of indices) at ``prec`` bits and returns
    one value per item (nested tuples / lists of arrays: mpf or float values, integers,
    Booleans, None).  Every item is evaluated at ``start_prec`` and at twice that; an item
    whose two evaluations differ anywhere by more than ``tol`` ulps of fmt (the ulp of the
    later value: max(|v| 2**(1-p), 2**qmin)) or in any non-real entry (an integer, a NaN
    pattern, a sign of infinity) is evaluated again at twice the precision, up to
    ``max_prec``.

    This is the array form of resolve's "resolved" test (two successive precisions agree)
    with a measurement's tolerance instead of a rounding's: a coverage run measures errors
    in ulps, and a reference that moves by less than 2**-32 ulp between precisions moves
    the measured error by less than that.  Cancellation inside a rule at start_prec (a sum
    of terms that nearly cancel, exp(x) - 1 near 0 written as such) is what it catches:
    the two evaluations then differ and the precision keeps doubling until they do not.
    An item still moving at ``max_prec`` keeps its max_prec values and ``settled`` False.
    Agreement is evidence, not proof: a cancellation that loses the whole result at both
    precisions ((1 + 2**-200) - 1 at 72 and 144 bits) agrees on a wrong value, which
    resolve's interval certification would refuse; the coverage run does not pay for an
    interval evaluation of every route.
    ``first``: the values at start_prec when the caller has them already.
    ``floor``: a share of an array's scale (its largest |value|) below which entries are
    compared in ulps at that floor instead of at themselves -- for measurements that leave
    such entries out of their ulp statistics (a tensor's elements below 2**-p of its
    scale, counted as cancelled): an exact 0 reached by cancellation, whose residue
    shrinks with every doubling and so never agrees with the next one in its own ulps,
    then settles at the first doubling.  Compared on Compact arrays (the model run's
    copies); other values ignore it.
    ``ladder``: the precisions after ``start_prec`` to evaluate at, in order (increasing),
    instead of doubling up to ``max_prec`` (a model run's sweeps).
    ``agree(a, b)``: the test of two evaluations of an item instead of the one above, for a
    caller that compares its items part by part (the same test: ``agree`` of this module
    with ``tol`` and ``floor``), letting each part's memory go before the next.
    """
    fmt = formats.get(fmt)
    if not 2 <= start_prec <= max_prec:
        raise ValueError(f"settle: need 2 <= start_prec <= max_prec (got {start_prec}, "
                         f"{max_prec})")
    if ladder is not None and list(ladder) != sorted(set(ladder)) or \
            ladder and ladder[0] <= start_prec:
        raise ValueError(f"settle: the ladder must increase from above start_prec (got "
                         f"{ladder!r} after {start_prec})")
    steps = iter(ladder) if ladder is not None else None
    items = list(range(n))
    values = list(first) if first is not None else list(fn(start_prec, items)) if n else []
    if len(values) != n:
        raise ValueError(f"settle: {len(values)} values for {n} items")
    precs, settled = [start_prec] * n, [False] * n
    prec, todo = start_prec, items
    while todo:
        if steps is None:
            if prec >= max_prec:
                break
            prec = min(2 * prec, max_prec)
        else:
            prec = next(steps, None)
            if prec is None:
                break
        again = fn(prec, todo)
        moving = []
        for k, v in zip(todo, again):
            if _agree(values[k], v, fmt, tol, floor) if agree is None else agree(values[k], v):
                settled[k] = True
            else:
                moving.append(k)
            values[k], precs[k] = v, prec
        todo = moving
    return Settled(values, precs, settled)


@dataclass(frozen=True)
class Compact:
    """An array of reals (mpf or float entries) kept as two binary64 numbers a value, ``hi
    + lo``: ``hi`` the value rounded to nearest binary64 (ties to even), ``lo`` the rest
    rounded to nearest; 16 bytes a value instead of an mpf's ~200.  ``hi + lo`` is within
    2**-106 of the value, far below the 2**-32 ulp tolerance settle compares with (2**-84
    of the value at binary64's 53 bits); ``hi`` is the value's binary64 stand-in, ``-lo``
    the nearest binary64 of ``hi`` minus the value, and double_double.odd53 its rounding to
    odd (from which it rounds correctly into any format of at most 51 bits)."""

    hi: np.ndarray
    lo: np.ndarray


class _NoPieces(Exception):
    """A value with no Compact form (compact)."""


def _two(v):
    """(hi, lo) of one mpf or float (Compact), or _NoPieces for a NaN, an infinity or a value
    whose pieces leave binary64's range (a bit of hi or of lo below 2**-1074, or a value of
    2**1023 or more, whose rounding could overflow)."""
    if type(v) is float:
        if v != v or v in (math.inf, -math.inf):
            raise _NoPieces
        return v, 0.0
    r = v._mpf_ if hasattr(v, "_mpf_") else None
    if r is None:
        raise _NoPieces
    sign, man, exp, bc = r
    if not man:
        if bc:                                  # mpmath's NaN and infinities: man 0, bc < 0
            raise _NoPieces
        return 0.0, 0.0
    if exp + bc > 1023:
        raise _NoPieces
    if bc <= 53:
        if exp < -1074:
            raise _NoPieces
        hi = math.ldexp(int(man), exp)
        return (-hi, 0.0) if sign else (hi, 0.0)
    cut = bc - 53
    top = int(man >> cut)
    rest = int(man) - (top << cut)             # odd (mpmath's mantissas are), below 2**cut
    half = 1 << (cut - 1)
    if rest > half or (rest == half and top & 1):
        top, rest = top + 1, rest - (1 << cut)  # to nearest, ties to even
    # hi's last bit at exp + cut; lo = float(rest) (to nearest) has its last bit at exp +
    # max(bits of rest - 53, 0): both must be binary64 bits (no second rounding below 2**-1074).
    if exp + cut < -1074 or exp + max(abs(rest).bit_length() - 53, 0) < -1074:
        raise _NoPieces
    hi, lo = math.ldexp(top, exp + cut), math.ldexp(float(rest), exp)
    return (-hi, -lo) if sign else (hi, lo)


def compact(a):
    """``a`` as a Compact where every entry is a finite real with binary64 pieces (no NaN
    or infinity, nothing beyond binary64's exponent range, where the comparison needs the
    exact entries); ``a`` itself otherwise (and for integer or Boolean arrays; None, nested
    tuples and lists: compacted entry by entry)."""
    if a is None or isinstance(a, Compact):
        return a
    if isinstance(a, (tuple, list)):
        return type(a)(compact(x) for x in a)
    arr = np.asarray(a)
    if arr.dtype == DD:       # double-double: its pieces, or its values beside a NaN or inf
        if np.isfinite(arr["hi"]).all():
            # Views of the pieces, not copies: the arrays compacted are a backend's
            # results, never written again, so a caller that keeps the Compact in their
            # place holds 16 bytes an element once, not twice.
            return Compact(arr["hi"], arr["lo"])
        return exact_values(arr)
    if arr.size == 0 or (arr.dtype != object and arr.dtype.kind != "f"):
        return a
    if arr.dtype != object:
        if not np.isfinite(arr).all():
            return a
        return Compact(arr.astype(np.float64), np.zeros(arr.shape))
    try:
        pairs = np.array([_two(v) for v in arr.reshape(-1).tolist()], dtype=np.float64)
    except _NoPieces:
        return a
    return Compact(pairs[:, 0].reshape(arr.shape), pairs[:, 1].reshape(arr.shape))


def _expanded(a):
    """A Compact's values hi + lo as exact numbers (double_double.exact_sums: floats where
    lo is 0, mpf otherwise; anything else as it is)."""
    return exact_sums(a.hi, a.lo) if isinstance(a, Compact) else a


def _agree_compact(a: Compact, b: Compact, fmt, tol, floor=None) -> bool:
    """_close of every entry on two Compacts, in binary64: hi - hi is exact where the values
    are within a factor 2 (Sterbenz) and far beyond the tolerance otherwise; lo - lo adds an
    error of at most 2**-106 of the value.  ``floor`` (settle): entries below floor times
    the array's largest |value| are compared in ulps at that level."""
    if a.hi.shape != b.hi.shape:
        return False
    with np.errstate(all="ignore"):
        diff = np.abs((a.hi - b.hi) + (a.lo - b.lo))
        size = np.abs(b.hi)
        if floor is not None and size.size:
            size = np.maximum(size, floor * float(np.max(size)))
        ulp = np.maximum(size * 2.0 ** (1 - fmt.precision), 2.0 ** fmt.qmin)
    return bool(np.all(diff <= tol * ulp))


def agree(a, b, fmt, tol=SETTLE_ULPS, floor=None) -> bool:
    """Whether two evaluations of one value (settle's items: nested tuples and lists of
    arrays) agree to within ``tol`` ulps of ``fmt``: settle's test, for a caller that keeps
    its own evaluations (``floor``: settle's)."""
    return _agree(a, b, formats.get(fmt), tol, floor)


def _agree(a, b, fmt, tol, floor=None) -> bool:
    """Whether two evaluations of one item agree to within ``tol`` ulps of fmt (``floor``:
    settle's)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and \
            all(_agree(x, y, fmt, tol, floor) for x, y in zip(a, b))
    if isinstance(a, Compact) or isinstance(b, Compact):
        a, b = compact(a), compact(b)
        if isinstance(a, Compact) and isinstance(b, Compact):
            return _agree_compact(a, b, fmt, tol, floor)
        a, b = _expanded(a), _expanded(b)      # one has a NaN, an infinity, a tiny value...
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        return False
    if x.dtype != object and x.dtype.kind in "biu":
        return bool(np.array_equal(x, y))
    return all(_close(u, v, fmt, tol) for u, v in zip(x.reshape(-1), y.reshape(-1)))


def _close(u, v, fmt, tol) -> bool:
    """|u - v| <= tol ulps of fmt at v, on raw mpf values (no global precision); entries that are not reals (integers, Booleans, words) compare equal."""
    ru, rv = _raw_or_none(u), _raw_or_none(v)
    if ru is None or rv is None:
        return ru is None and rv is None and u == v
    if special_raw(ru) or special_raw(rv):
        return ru == rv                                   # the same NaN or infinity
    # At 64 bits rounded away from zero: never below the true difference, and cheap where
    # the exponents are far apart (an exact difference of 1e30-bit-apart values is not).
    diff = libmp.mpf_abs(libmp.mpf_sub(ru, rv, 64, libmp.round_up))
    ulp = libmp.mpf_shift(libmp.mpf_abs(rv), 1 - fmt.precision)
    least = libmp.mpf_shift(fone, fmt.qmin)
    ulp = ulp if libmp.mpf_gt(ulp, least) else least
    return libmp.mpf_le(diff, libmp.mpf_mul(libmp.from_float(tol), ulp))


def _raw_or_none(x):
    if hasattr(x, "_mpf_"):
        return x._mpf_
    if isinstance(x, (float, np.floating)):
        return libmp.from_float(float(x))
    return None

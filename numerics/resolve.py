"""resolve(fn, inputs, fmt): the exact rounding of a rule's outputs into a format, the
precision escalated until every result's rounding is settled, certified by interval
arithmetic (numerics/intervals.py) where it can be."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from mpmath.libmp import fzero

from roundoff_coverage import formats

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

"""Tensor measures of a model row: how far a computed tensor is from the exact one as a whole
(issue 35, "What a model's error means").

Componentwise ulps are the wrong yardstick for a tensor: at an exact 0 (the gradient of an
attention key bias: softmax ignores a shift of a row of scores) or at an element far below
the tensor's scale (a ReLU output whose exact value is 0, a sum that cancels) a rounding
residue is measured in ulps of the least subnormal and reads as 1e38 ulp.  The measures here
compare the tensor with its own scale.

The tensor of a row is every element of every sample it measures (flat, joined over the
samples; elements NaN in both runs are left out by the caller).  With y the exact values,
y_hat the computed ones, d = y_hat - y, p the format's precision and s = max |y| the
tensor's scale:

- ``norm_rel`` = ||d||_2 / ||y||_2, ``norm_rel_max`` = max |d| / max |y|;
- ``bits`` = -log2(norm_rel): bits of agreement (inf where y_hat = y everywhere, negative
  where the error exceeds the tensor); ``sqnr_db`` = 10 log10(||y||^2 / ||d||^2) =
  -20 log10(norm_rel) (what torchao and the PT2E numeric debugger print; inf where exact);
- ``cosine`` = <y_hat, y> / (||y_hat|| ||y||), clipped to [-1, 1]; 1 where y_hat = y
  (both zero included), 0 where y_hat is 0 and y is not (torch's cosine_similarity there);
- ``scale_ulp`` = max |d| / ulp(s): the largest error in ulps of the format at the tensor's
  largest exact magnitude (formats.ulp);
- ``cancelled``: the elements with |y| < 2**-p * s (exact zeros included): a cancellation
  residue's ulps at its own magnitude say nothing about the tensor, so these elements are
  left out of the componentwise ulp statistics (max_ulp, mean_ulp, p99_ulp, buckets...) and
  counted here; ``cancelled_error``: their largest |d|, in the values' own units.

A tensor whose exact values all round to 0 in the format (s <= 2**(qmin-1), half the least
subnormal: an exact 0, or the cancellation residue the reference leaves of one,
engine/reference.py) has no scale: every element is cancelled, d is y_hat itself, and the
relative measures are null (no relative error is defined), except where y_hat is 0 too:
then norm_rel = norm_rel_max = scale_ulp = 0, bits = sqnr_db = inf, cosine = 1.  Its error
is ``cancelled_error`` = max |y_hat|.  A difference that is not a finite number (a computed
inf or NaN against a finite exact value) makes norm_rel, norm_rel_max and scale_ulp inf,
bits and sqnr_db -inf, cosine null.

Accuracy: y is read as its nearest binary64 (each exact value is an mpmath number at the
reference's precision); d = y_hat - y in binary64 then errs by at most 2**-53 |y| +
2**-53 |d|, far below any error of a format narrower than binary64, and where the stand-in
equals y_hat but y does not, d is recomputed from the exact value (rounded once to
binary64), so norm_rel = 0 means y_hat = y.  Norms are taken on the tensors scaled by their
largest magnitude (no overflow of the squares).  The threshold 2**-p * s is compared on the
stand-ins, exactly where a stand-in equals it.
"""

from __future__ import annotations

import math

import numpy as np
from mpmath import libmp

from roundoff_coverage import formats

from .lazy_exact import flat_exact

# The row fields this module fills (engine/rows.py declares them).
NORMWISE = ("norm_rel", "norm_rel_max", "bits", "sqnr_db", "cosine")
COMPONENTWISE = ("scale_ulp", "cancelled", "cancelled_error")
FIELDS = NORMWISE + COMPONENTWISE


class Raws:
    """The raw mpf value of each entry of a flat array of exact values, read when asked
    (None where the entry is a binary64 number already, a float), and ``lo``: the exact
    value minus its stand-in, rounded to nearest binary64, where that is known without the
    mpf (0 for a binary64 entry, a Compact's lo: numerics.resolve), NaN elsewhere."""

    __slots__ = ("flat", "lo")

    def __init__(self, flat, lo):
        self.flat, self.lo = flat, lo

    def __getitem__(self, i):
        return getattr(self.flat[i], "_mpf_", None)

    def subset(self, mask, flat=None) -> "Raws":
        """The entries of ``mask``; ``flat``: their exact values, where the caller has
        picked them already (no second copy)."""
        return Raws(self.flat[mask] if flat is None else flat, self.lo[mask])


def stand_ins(exact, nearest=None, lo=None) -> tuple[np.ndarray, Raws]:
    """(the nearest binary64 of each exact value, flat; their Raws).  ``nearest``, ``lo``:
    those binary64 numbers and the rests (Raws.lo) where the caller has them (a Compact's
    hi and lo, numerics.resolve)."""
    if nearest is not None:
        flat = flat_exact(exact)
        return (np.asarray(nearest, dtype=np.float64).reshape(-1),
                Raws(flat, np.asarray(lo, dtype=np.float64).reshape(-1)))
    a = np.asarray(exact)
    flat = a.reshape(-1)
    if a.dtype.kind == "f":
        return np.asarray(flat, dtype=np.float64), Raws(flat, np.zeros(flat.size))
    y, rest = np.empty(flat.size, dtype=np.float64), np.full(flat.size, np.nan)
    for i, v in enumerate(flat.tolist()):
        m = getattr(v, "_mpf_", None)
        if m is None:
            y[i], rest[i] = float(v), 0.0
        else:
            y[i] = libmp.to_float(m, rnd=libmp.round_nearest)
    return y, Raws(flat, rest)


def differences(comp, y, mpfs) -> np.ndarray:
    """comp - exact in binary64: from the stand-ins ``y``, and from the exact value rounded
    once where the stand-in equals the computed value but the exact value is not that
    binary64 number (module docstring): there comp - exact = -(exact - stand-in), whose
    rounding is ``-mpfs.lo`` where that is known, else computed from the mpf."""
    c = np.asarray(comp, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        d = c - y
    same = np.flatnonzero(d == 0)
    rest = mpfs.lo[same]
    known = ~np.isnan(rest)
    moved = same[known & (rest != 0)]
    d[moved] = -mpfs.lo[moved]
    for i in same[~known]:
        m = mpfs[i]
        if m is not None and m[1] and libmp.mpf_cmp(m, libmp.from_float(float(c[i]))) != 0:
            d[i] = libmp.to_float(libmp.mpf_sub(libmp.from_float(float(c[i])), m, 53,
                                                libmp.round_nearest))
    return d


def _norm(v) -> float:
    """||v||_2 of a finite binary64 vector, scaled by its largest magnitude."""
    m = float(np.max(np.abs(v))) if v.size else 0.0
    if m == 0:
        return 0.0
    return m * float(np.sqrt(np.sum(np.square(v / m))))


def _below(a, t, mpfs) -> np.ndarray:
    """|exact| < t of each element from the stand-ins' magnitudes ``a``, exactly where a
    stand-in equals t (rounding is monotone: elsewhere the stand-in decides)."""
    out = a < t
    tm = libmp.from_float(float(t))
    for i in np.flatnonzero(a == t):
        m = mpfs[i]
        if m is not None:
            out[i] = libmp.mpf_cmp(libmp.mpf_abs(m), tm) < 0
    return out


def measures(comp, exact, fmt, componentwise=True, stand=None) -> tuple[dict, np.ndarray]:
    """({field: value} of the tensor measures (module docstring) of computed values ``comp``
    (binary64) against ``exact`` (mpmath or binary64 values, same size) in ``fmt``; the
    mask of cancelled elements).  ``componentwise`` False (a scaled format, whose ulps are
    at block scales already): the normwise measures only, nothing cancelled.  ``stand``:
    ``stand_ins(exact)`` where the caller has it."""
    fmt = formats.get(fmt)
    c = np.asarray(comp, dtype=np.float64).reshape(-1)
    y, mpfs = stand_ins(exact) if stand is None else stand
    n = c.size
    out = dict.fromkeys(FIELDS if componentwise else NORMWISE)
    if componentwise:
        out["cancelled"] = 0
    if not n:
        return out, np.zeros(0, dtype=bool)
    a = np.abs(y)
    scale = float(np.max(a))
    zero = not scale > math.ldexp(1.0, fmt.qmin - 1)
    d = c.copy() if zero else differences(c, y, mpfs)
    cancelled = np.ones(n, dtype=bool) if zero else \
        _below(a, math.ldexp(scale, -fmt.precision), mpfs)
    if componentwise:
        out["cancelled"] = int(cancelled.sum())
        if cancelled.any():
            dc = np.abs(d[cancelled])
            out["cancelled_error"] = float(np.max(dc)) if not np.isnan(dc).any() else math.inf
    if not np.isfinite(d).all():
        out.update(norm_rel=math.inf, norm_rel_max=math.inf, bits=-math.inf,
                   sqnr_db=-math.inf, cosine=None)
        if componentwise:
            out["scale_ulp"] = math.inf
        return out, (cancelled if componentwise else np.zeros(n, dtype=bool))
    top = float(np.max(np.abs(d)))
    if zero and top > 0:
        return out, (cancelled if componentwise else np.zeros(n, dtype=bool))
    rel = 0.0 if top == 0 else _norm(d) / _norm(y)
    out.update(norm_rel=rel, norm_rel_max=0.0 if top == 0 else top / scale,
               bits=math.inf if rel == 0 else -math.log2(rel),
               sqnr_db=math.inf if rel == 0 else -20.0 * math.log10(rel),
               cosine=1.0 if top == 0 else _cosine(c, y))
    if componentwise:
        out["scale_ulp"] = 0.0 if top == 0 else \
            top / float(formats.ulp(np.array([scale]), fmt)[0])
    return out, (cancelled if componentwise else np.zeros(n, dtype=bool))


def _cosine(c, y) -> float:
    """<c, y> / (||c|| ||y||) of finite vectors, each scaled by its largest magnitude; 0
    where c is 0 (module docstring)."""
    mc, my = float(np.max(np.abs(c))), float(np.max(np.abs(y)))
    if mc == 0 or my == 0:
        return 0.0
    cn, yn = c / mc, y / my
    v = float(np.dot(cn, yn)) / (float(np.sqrt(np.dot(cn, cn))) * float(np.sqrt(np.dot(yn, yn))))
    return min(1.0, max(-1.0, v))


def cancel_text(cancelled, total, fmt, error) -> str:
    """The row's note on its cancelled elements (one line)."""
    return (f"{cancelled} of {total} elements cancel to below 2^-{fmt.precision} of the "
            f"tensor's scale (exact zeros included): left out of the ulp statistics; their "
            f"largest absolute error is {error:.3g}")

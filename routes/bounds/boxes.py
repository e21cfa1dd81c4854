"""Boxes and the outward-rounded arithmetic the bound propagations share.

A box of a tensor is a pair ``(lo, hi)`` of float64 arrays of the tensor's shape with
lo <= hi; it encloses a real tensor x when lo <= x <= hi entry by entry.  An endpoint may be
infinite (nothing is known on that side).  A port that does not hold the model's scalar
(index, bool, integer words) has no box: its exact array stands for both ends.

Two kinds of arithmetic, both rounding every endpoint outward:

- enclosures (the IBP arms): numerics.bounding's backend on binary64, whose exact-value
  interval E is the range of the real primitive over its argument boxes, rounded outward
  (numerics/bounding.py: TwoSum for + and -, one binary64 ulp outward for * / sqrt, libm
  trusted to 2**-40 relative for the transcendental functions).  ``enclose`` packs a box
  into that backend's numbers (the computed interval C set to E: only E is read) and
  ``ends`` reads E back.  An element with an infinite endpoint is poisoned there (unknown)
  and ``ends`` gives (-inf, inf) for it.  Composing range enclosures encloses the range of
  the composition (Moore, Kearfott, Cloud 2009, "Introduction to Interval Analysis",
  th. 5.1, the fundamental theorem of interval arithmetic), so a rule evaluated on boxes
  encloses the rule's real values, as long as every comparison it makes is decided for
  the whole box (the backend's ``undecided`` flag says when one is not).
- directed sums and products of float64 arrays (CROWN's linear forms): each rounded result
  moved one ulp outward with np.nextafter, and sums bounded by the standard model for any
  summation order: |fl(sum t) - sum t| <= gamma_(n-1) sum |t| (Higham 2002, "Accuracy and
  Stability of Numerical Algorithms", 2nd ed., sec. 4.2), gamma_m = m u / (1 - m u),
  u = 2**-53.
"""

from __future__ import annotations

import numpy as np

from roundoff_coverage.numerics import BoundingBackend
from roundoff_coverage.numerics.bounding import DTYPE

from ..errors import RouteError

INF = np.inf
U = 2.0 ** -53                   # binary64 unit roundoff
ETA = 2.0 ** -1074               # least binary64 subnormal: a product's absolute error term


# ----- reading boxes at an operator's or a graph's ports --------------------------------------
def read_boxes(who: str, names, ports, lows, highs) -> list:
    """``lows``/``highs`` (one array per port) as boxes after the checks, a RouteError line
    naming ``who`` and the port otherwise: at a scalar port float64 arrays of the port's
    shape, lo <= hi, no NaN; at any other port the exact array (it must fit the port, and
    low and high must be the same array)."""
    lows, highs = tuple(lows), tuple(highs)
    if len(lows) != len(ports) or len(highs) != len(ports):
        raise RouteError(f"{who}: expects {len(ports)} lows and highs ({', '.join(names)}) "
                         f"(got {len(lows)} and {len(highs)})")
    return [_read(who, name, port, lo, hi)
            for name, port, lo, hi in zip(names, ports, lows, highs)]


def _read(who, name, port, low, high):
    if not port.scalar:
        for end in (low, high):
            bad = port.mismatch(end)
            if bad:
                raise RouteError(f"{who}: input {name} expects {port} ({bad})")
        low, high = np.asarray(low), np.asarray(high)
        if not np.array_equal(low, high):
            at = first_index(low != high)
            raise RouteError(f"{who}: input {name} is a {port.kind} port, whose low and high "
                             f"must be the same exact array (they differ at entry {at})")
        return low, low
    ends = []
    for what, end in (("low", low), ("high", high)):
        a = np.asarray(end)
        if a.dtype.kind not in "fiu":
            raise RouteError(f"{who}: input {name}: {what} must be a float array "
                             f"(got {a.dtype})")
        if a.dtype.kind in "iu" and a.size and int(np.abs(a).max()) > 2 ** 53:
            raise RouteError(f"{who}: input {name}: {what} holds integers beyond 2**53, "
                             f"which binary64 does not hold exactly")
        if a.shape != port.shape:
            raise RouteError(f"{who}: input {name} expects {port} (got {what} of shape "
                             f"{list(a.shape)})")
        a = a.astype(np.float64)
        if np.isnan(a).any():
            raise RouteError(f"{who}: input {name}: {what} is NaN at entry "
                             f"{first_index(np.isnan(a))}")
        ends.append(a)
    lo, hi = ends
    if (lo > hi).any():
        at = first_index(lo > hi)
        raise RouteError(f"{who}: input {name}: low exceeds high at entry {at} "
                         f"({float(lo[at])!r} > {float(hi[at])!r})")
    return lo, hi


def first_index(mask) -> tuple:
    """The first (row-major) index where ``mask`` holds."""
    return tuple(int(i) for i in np.argwhere(np.asarray(mask))[0])


def is_point(box) -> bool:
    """Whether the box holds one value (lo == hi everywhere): an exact array counts."""
    lo, hi = box
    return bool(np.array_equal(lo, hi))


# ----- enclosures: numerics.bounding's exact-value intervals -----------------------------------
def enclosure_backend() -> BoundingBackend:
    """A fresh binary64 bounding backend (its ``undecided`` flag starts cleared)."""
    return BoundingBackend("binary64")


def enclose(lo, hi):
    """The box [lo, hi] as the bounding backend's numbers (an infinite end: unknown)."""
    return BoundingBackend.pack(lo, hi, lo, hi)


def ends(y) -> tuple:
    """(lo, hi) of the exact-value interval of the bounding backend's numbers ``y``; an
    unknown (poisoned) element gives (-inf, inf).  Plain arrays (a rule's exact constant)
    are their own ends."""
    y = np.asarray(y)
    if y.dtype != DTYPE:
        y = np.asarray(y, dtype=np.float64)
        return y, y
    lo, hi = np.array(y["elo"], dtype=np.float64), np.array(y["ehi"], dtype=np.float64)
    unknown = np.isnan(lo) | np.isnan(hi)
    return np.where(unknown, -INF, lo), np.where(unknown, INF, hi)


def unknown(shape) -> tuple:
    """The box of a value nothing is known about."""
    return np.full(shape, -INF), np.full(shape, INF)


def hull(a, b):
    """The smallest box holding the enclosures ``a`` and ``b`` (unknown where either is)."""
    (alo, ahi), (blo, bhi) = ends(a), ends(b)
    return enclose(np.minimum(alo, blo), np.maximum(ahi, bhi))


def meet(a, lo=-INF, hi=INF):
    """The enclosure ``a`` intersected with the constant bounds [lo, hi] that the real value
    is known to satisfy (an unknown element becomes [lo, hi])."""
    alo, ahi = ends(a)
    return enclose(np.maximum(alo, lo), np.minimum(ahi, hi))


def branch(always, never, a, b):
    """A selection ``cond ? a : b`` whose condition holds for every point of the boxes where
    ``always``, for none where ``never``: ``a`` there, ``b`` there, their hull elsewhere."""
    both = hull(a, b)
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    return np.where(always, a, np.where(never, b, both))


# ----- directed float64 arithmetic for linear forms -----------------------------------------
def down(v):
    return np.nextafter(v, -INF)


def up(v):
    return np.nextafter(v, INF)


def mul_down(a, b):
    """A lower bound of the exact products a b (0 where a factor is 0, even against inf)."""
    with np.errstate(all="ignore"):
        zero = (np.asarray(a) == 0) | (np.asarray(b) == 0)
        return np.where(zero, 0.0, down(np.multiply(a, b)))


def mul_up(a, b):
    return -mul_down(-np.asarray(a), b)


def add_down(a, b):
    """A lower bound of a + b (NaN, from inf - inf, counts as unknown: -inf)."""
    with np.errstate(all="ignore"):
        s = down(np.add(a, b))
    return np.where(np.isnan(s), -INF, s)


def sum_down(t, axis=-1):
    """A lower bound of the exact sum of ``t`` along ``axis``, whatever order numpy adds in:
    fl(sum) - gamma_(n-1) sum|t|, that error bound computed as 2 (n + 1) u fl(sum|t|) and
    rounded up (gamma_(n-1) / (1 - gamma_(n-1)) <= 2 (n - 1) u while n u <= 1/4, so the
    computed sum of |t| may fall short of the exact one)."""
    t = np.asarray(t, dtype=np.float64)
    n = t.shape[axis]
    if n == 0:
        return np.zeros(np.delete(t.shape, axis % t.ndim))
    with np.errstate(all="ignore"):
        s = np.sum(t, axis=axis)
        err = up(np.sum(np.abs(t), axis=axis) * ((n + 1) * 2.0 * U))
        lo = down(s - err)
    return np.where(np.isnan(lo), -INF, lo)


def sum_up(t, axis=-1):
    return -sum_down(-np.asarray(t, dtype=np.float64), axis)


def dot_lower(A, lo, hi):
    """min over x in the box [lo, hi] of A[k] . x, a lower bound for each row k of ``A``
    (shape (K, *box shape)): each entry takes the end its coefficient's sign picks."""
    K = A.shape[0]
    v = np.where(A >= 0, lo, hi)
    return sum_down(mul_down(A, v).reshape(K, -1), axis=1)


def slack(E, lo, hi):
    """An upper bound of sum E |x| over the box (E >= 0, shape (K, *box shape)): what a
    coefficient known to within E may cost against x."""
    K = E.shape[0]
    mag = np.maximum(np.abs(lo), np.abs(hi))
    return sum_up(mul_up(E, np.broadcast_to(mag, E.shape)).reshape(K, -1), axis=1)


def product_error(magnitude, n: int):
    """An upper bound of |fl(s) - s| for a sum s of at most ``n`` products of which
    ``magnitude`` = fl(sum of the products' absolute values), computed by the same code
    on absolute values: gamma_(n+2) (1 + gamma_(n+2)) times it (as 2 (n + 4) u, rounded up)
    plus (n + 4) subnormals for the products that underflow (Higham 2002, sec. 3.1; the
    standard model with underflow adds |eta| <= 2**-1075 per product)."""
    with np.errstate(all="ignore"):
        return up(np.abs(magnitude) * ((n + 4) * 2.0 * U)) + (n + 4) * ETA

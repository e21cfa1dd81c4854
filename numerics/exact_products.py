"""exact_matmul(a, b), exact_dot(a, b) -> ExactSums: every entry of a product of binary64
arrays exactly, at the speed of a few float64 BLAS calls; to_mpf(x, prec) and to_float64(x)
round it once.

Inputs: float64 arrays (any binary64 value: bfloat16, binary16, float8, binary32 values are
exactly binary64).  ``exact_matmul`` follows numpy's matmul shape rules (1-D operands, batch
axes that broadcast); ``exact_dot`` is sum_i a[..., i] * b[..., i] with broadcasting.

Representation (``ExactSums``): per entry a multi-limb integer times a power of two,
    value = sum_q limbs[q] * 2**(exp + (Q - 1 - q) * beta),   q = 0 .. Q-1,
limbs int64 of shape (Q,) + shape: limbs[0] signed (the sign of the entry), limbs[1:] in
[0, 2**beta) (a two's-complement-like fixed point: the limbs are disjoint bit fields).  Entries
computed by the slow path (below) are Python integers in ``wide`` ({flat index: (N, e)},
value N * 2**e; their limbs are 0).  ``special`` holds NaN / +-inf where the real extension
says the entry is not finite (0.0 elsewhere); ``negzero`` marks exact zeros that IEEE gives
as -0.

Method (the Ozaki scheme: Ozaki, Ogita, Oishi, Rump, "Error-free transformations of matrix
multiplication by using fast routines of matrix multiplication and its applications",
Numer. Algorithms 59, 2012): each row of a (each column of b) is scaled by its own power of
two, 2**(top+1) with 2**top <= the row's largest |x|, and cut into digit slices
    x = 2**(top+1) * sum_{s>=1} d_s * 2**(-s*beta),   d_s integers, |d_s| <= 2**beta - 1,
as many slices as the row's span (top down to its lowest set bit) needs.  With
beta = floor((53 - ceil(log2 k)) / 2) for inner dimension k, every product of two digits is
an integer below 2**(2*beta) in magnitude and every partial sum of k of them is an integer of
magnitude below k * 2**(2*beta) <= 2**53: representable in binary64, so each floating-point
addition (or FMA) the BLAS performs is exact, in ANY order or blocking.  Each digit-slice
product d_s(a) @ d_t(b) is therefore exact; the slice products are accumulated in int64 by
level s + t (|sum| < min(S_a, S_b) * 2**53 <= 2**61 with at most 256 slices) and the carries
propagated.  This assumes a BLAS that
computes in binary64 with additions and multiplications only (OpenBLAS and MKL dgemm do; a
Strassen-type algorithm, which forms sums of operands, would void the bound).

Cost: S_a * S_b matmuls, S = the largest slice count of a non-wide row (column): 1 each for
bfloat16 rows spanning <= beta bits, 2 each for typical binary32 rows; for 2-D operands a
later slice is multiplied only on the rows (columns) where it is not zero, so a few long rows
cost little.  Non-finite inputs add 12 matmuls of 0/1 indicator arrays, exact zeros in the
result 4 (the sign of zero).  Rows (columns) that would need more than ``max_slices`` slices
(a row mixing 1e300 and 1e-300 spans ~2000 bits) are left out of the matmuls; their entries
take the slow exact path: the same slicing with as many slices as that row and column need,
one small matmul per entry, combined in Python integers (``wide``).

Conventions: NaN and inf follow the real extension, as an IEEE sum of the products would: a
NaN operand or a 0 * inf term gives NaN, inf terms of both signs give NaN, else an inf term
gives that inf.  An exact zero is +0 unless every term is -0 (IEEE 754 6.3 under rounding to
nearest); an empty inner dimension gives +0.  to_mpf: mpmath has one zero (unsigned).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import mpmath
import numba
import numpy as np
from mpmath.libmp import fnan, finf, fninf, from_man_exp, round_nearest

__all__ = ["MAX_SLICES", "ExactSums", "exact_matmul", "exact_dot", "to_mpf", "to_float64",
           "slice_width"]

MAX_SLICES = 8        # per operand; beyond this a row (column) takes the slow exact path


@dataclass(frozen=True)
class ExactSums:
    """Exact entries: value = sum_q limbs[q] * 2**(exp + (Q-1-q)*beta) (module docstring),
    or ``wide[flat index] = (N, e)`` (N * 2**e), or ``special`` (NaN / +-inf) where that is
    not 0.0; ``negzero``: the entry is an exact zero that IEEE writes -0."""

    limbs: np.ndarray
    exp: np.ndarray
    beta: int
    special: np.ndarray
    negzero: np.ndarray
    wide: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple:
        return self.exp.shape

    def reshape(self, shape) -> "ExactSums":
        """The same entries in another shape of equal size (flat C order, so ``wide`` keys
        stay valid)."""
        shape = tuple(shape)
        return ExactSums(self.limbs.reshape((self.limbs.shape[0],) + shape),
                         self.exp.reshape(shape), self.beta, self.special.reshape(shape),
                         self.negzero.reshape(shape), self.wide)

    def integers(self):
        """(N, e): object array of Python ints and int64 array with value = N * 2**e for every
        finite entry (entries with a non-0.0 ``special`` are meaningless there)."""
        n = self.limbs[0].astype(object)
        for q in range(1, self.limbs.shape[0]):
            n = (n << self.beta) + self.limbs[q].astype(object)
        n, e = np.asarray(n, dtype=object).copy(), self.exp.copy()
        for i, (big, ex) in self.wide.items():
            n.reshape(-1)[i], e.reshape(-1)[i] = big, ex
        return n, e


# ----- public entry points ------------------------------------------------------------------
def slice_width(k: int) -> int:
    """beta: the digit width in bits for inner dimension k, the largest with
    k * 2**(2*beta) <= 2**53 (module docstring)."""
    k = max(int(k), 1)
    beta = (53 - (k - 1).bit_length()) // 2          # (k-1).bit_length() = ceil(log2 k)
    if beta < 1:
        raise ValueError(f"exact products: inner dimension {k} is too long for binary64 slices")
    return beta


def exact_matmul(a, b, max_slices: int = MAX_SLICES) -> ExactSums:
    """a @ b exactly, entry by entry (numpy's matmul shape rules); a, b: float64 arrays of any
    binary64 values, NaN and inf included (module docstring)."""
    a, b = _float64(a, "a"), _float64(b, "b")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("exact_matmul: operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"exact_matmul: inner dimensions differ ({a2.shape[-1]} and "
                         f"{b2.shape[-2]})")
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, n = a2.shape[-2], b2.shape[-1]
    out = _exact(a2, b2, _MATMUL, batch + (m, n), max_slices)
    shape = batch + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    return out.reshape(shape)


def exact_dot(a, b, max_slices: int = MAX_SLICES) -> ExactSums:
    """sum_i a[..., i] * b[..., i] exactly (leading axes broadcast); a, b as exact_matmul's."""
    a, b = _float64(a, "a"), _float64(b, "b")
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"exact_dot: need equal last dimensions (got {a.shape} and "
                         f"{b.shape})")
    a, b = np.broadcast_arrays(a, b)
    return _exact(a, b, _DOT, a.shape[:-1], max_slices)


def to_mpf(x: ExactSums, prec: int | None, ctx=None) -> np.ndarray:
    """Object array of mpmath mpf: each entry rounded once to nearest (ties to even) at
    ``prec`` bits, exact when it fits (``prec`` None: exact).  ``ctx``: the mpmath context
    that owns the numbers (a local one if None; its precision is not used)."""
    ctx = ctx if ctx is not None else mpmath.MPContext()
    p = 0 if prec is None else int(prec)
    if prec is not None and (p != prec or p < 1):
        raise ValueError(f"to_mpf: prec must be a positive number of bits (got {prec!r})")
    n, e = x.integers()
    raws = [from_man_exp(v, ex, p, round_nearest)
            for v, ex in zip(n.reshape(-1).tolist(), e.reshape(-1).tolist())]
    spec = x.special.reshape(-1)
    for i in np.flatnonzero(spec != 0):
        raws[i] = fnan if np.isnan(spec[i]) else (finf if spec[i] > 0 else fninf)
    out = np.empty(x.shape, dtype=object)
    out.reshape(-1)[:] = [ctx.make_mpf(r) for r in raws]
    return out


def to_float64(x: ExactSums) -> np.ndarray:
    """Each entry rounded once to the nearest binary64 (ties to even; gradual underflow;
    overflow to +-inf as IEEE's rounding with an unbounded exponent decides), signed zeros
    as the module docstring says."""
    out = np.array(_nearest(x.limbs, x.exp, x.beta), dtype=np.float64).reshape(x.shape)
    flat = out.reshape(-1)
    for i, (big, ex) in x.wide.items():
        flat[i] = _int_nearest(big, ex)
    out = np.where(x.negzero, -0.0, out)
    return np.where(x.special != 0, x.special, out)


# ----- layouts: which axis is reduced, how per-operand arrays meet in the output ------------
@dataclass(frozen=True)
class _Layout:
    axis_a: int
    axis_b: int
    contract: object      # (a-shaped, b-shaped float64) -> output-shaped sums of products
    outer: object         # (ufunc, a keepdims, b keepdims) -> output-shaped
    row: object           # (a, output index) -> the 1-D row of a that the entry reduces
    col: object           # (b, output index) -> the 1-D column of b (a, b broadcast to the
                          # output's batch axes)


_MATMUL = _Layout(-1, -2, np.matmul, lambda f, u, v: f(u, v),
                  lambda a, idx: a[idx[:-1]], lambda b, idx: b[idx[:-2] + (slice(None), idx[-1])])
_DOT = _Layout(-1, -1, np.vecdot, lambda f, u, v: f(u[..., 0], v[..., 0]),
               lambda a, idx: a[idx], lambda b, idx: b[idx])


# ----- the core ---------------------------------------------------------------------------
def _exact(a, b, lay: _Layout, shape, max_slices) -> ExactSums:
    """The exact contraction of a and b in layout ``lay`` into ``shape``."""
    if int(max_slices) != max_slices or not 1 <= max_slices <= 256:
        raise ValueError(f"exact products: max_slices must be an integer in [1, 256] (got "
                         f"{max_slices!r}); 256 keeps the int64 level sums below 2**61")
    k = a.shape[lay.axis_a]
    fin_a, fin_b = np.isfinite(a), np.isfinite(b)
    finite = bool(fin_a.all() and fin_b.all())
    fa = a if finite else np.where(fin_a, a, 0.0)
    fb = b if finite else np.where(fin_b, b, 0.0)
    zeros_i, zeros_b = np.zeros(shape, np.int64), np.zeros(shape, bool)
    if k == 0 or 0 in shape:
        return ExactSums(zeros_i[None], zeros_i, 1, np.zeros(shape), zeros_b)
    beta = slice_width(k)
    da, top_a, wide_a = _digits(fa, lay.axis_a, beta, max_slices)
    db, top_b, wide_b = _digits(fb, lay.axis_b, beta, max_slices)
    limbs = _limb_sums(da, db, lay.contract, shape, beta)
    exp = np.broadcast_to(lay.outer(np.add, top_a, top_b), shape) + 2 - \
        (len(da) + len(db)) * beta
    wide_out = np.broadcast_to(lay.outer(np.logical_or, wide_a, wide_b), shape)
    wide = _wide_entries(fa, fb, lay, wide_out, beta)
    zero = np.array(~limbs.any(axis=0) & ~wide_out).reshape(shape)
    for i, (big, _) in wide.items():
        zero.reshape(-1)[i] = big == 0
    special = np.zeros(shape) if finite else _specials(a, b, lay.contract, shape)
    zero &= special == 0
    negzero = np.array(_negzero(a, b, lay.contract, shape, k) & zero) if zero.any() else \
        zeros_b
    return ExactSums(limbs, np.array(exp, dtype=np.int64).reshape(shape), beta, special,
                     negzero, wide)


def _digits(x, axis, beta, cap):
    """(d, top, wide): digit slices d[s] (float64 integers, |d| <= 2**beta - 1) with
    x = 2**(top+1) * sum_s d[s] * 2**(-(s+1)*beta) along every row (``axis`` reduced), as many
    as the longest row needs, for rows needing at most ``cap`` slices (None: no cap); ``wide``
    marks the others (their digits are 0).  d: a list; top, wide: keepdims arrays."""
    top = np.frexp(np.max(np.abs(x), axis=axis, keepdims=True))[1].astype(np.int64) - 1
    live = np.any(x, axis=axis, keepdims=True)
    count = np.zeros(live.shape, np.int64)
    # Rows along the last axis (a's, most of the data: a convolution's gathered windows) or
    # the columns of a matrix: each slice in one compiled pass (_cut) instead of five.
    last = axis in (-1, x.ndim - 1)
    lines = x.reshape(-1, x.shape[-1]) if last else \
        x.T if x.ndim == 2 and axis in (-2, 0) else None
    compiled = lines is not None and lines.size > 0
    r, d = (np.array(lines, order="C") if compiled else x), []
    while live.any() and (cap is None or len(d) < cap):
        # |r| < 2**(top + 1 - s*beta), so r * 2**sh < 2**beta.  Where that product falls
        # below the normal range it may be rounded, but it is < 1 there and trunc gives 0
        # either way.  d * 2**-sh is the truncation of r to the grid 2**(top+1-(s+1)*beta),
        # representable (exact), and r minus it is r's lower bits (exact).
        sh = (len(d) + 1) * beta - (top + 1)
        count += live
        if compiled:
            t = np.empty(r.shape)
            live = _cut(r, sh.reshape(-1), t).reshape(live.shape)
            d.append(t.reshape(x.shape) if last else t.T)
            continue
        t = _scale(r, sh)
        d.append(np.trunc(t, out=t))
        u = _scale(t, -sh)
        r = np.subtract(r, u, out=u)
        live = np.any(r, axis=axis, keepdims=True)
    wide = live                      # still a remainder after cap slices
    slices = int(count[~wide].max(initial=0))
    d = d[:slices]
    if wide.any():
        keep = ~wide                 # the slow path takes the wide rows
        for t in d:
            t *= keep
    return d, top, wide


@numba.njit(cache=True)
def _cut(r, sh, d):
    """One digit slice of each row of ``r`` (2-D, C order) as _digits' numpy steps compute
    it: d = trunc(r * 2**sh[i]), r -= d * 2**-sh[i] (r in place); whether each row's
    remainder is not 0.  A multiply by a power of two where both powers are normal
    numbers, else ldexp: the same results (exact where representable; where r * 2**sh
    falls below the normal range it is < 1 and its trunc 0 either way)."""
    rows, k = r.shape
    live = np.zeros(rows, np.bool_)
    for i in range(rows):
        s = sh[i]
        fast = -1022 <= s <= 1022
        up = math.ldexp(1.0, s) if fast else 0.0
        down = math.ldexp(1.0, -s) if fast else 0.0
        rest = False
        for j in range(k):
            v = r[i, j]
            t = np.trunc(v * up) if fast else np.trunc(math.ldexp(v, s))
            d[i, j] = t
            v = v - (t * down if fast else math.ldexp(t, -s))
            r[i, j] = v
            rest = rest or v != 0.0
        live[i] = rest
    return live


def _scale(x, sh):
    """x * 2**sh (sh: int64 per row), exact wherever the result is representable: a multiply
    by a power of two while every factor is a normal number, else ldexp (several times
    slower)."""
    if sh.size and -1022 <= sh.min() and sh.max() <= 1023:
        return x * np.ldexp(1.0, sh)
    return np.ldexp(x, sh)


def _limb_sums(da, db, contract, shape, beta):
    """The slice products d_s(a) . d_t(b) (exact: module docstring) summed by level s + t in
    int64, carries propagated so limbs[1:] lie in [0, 2**beta).  For 2-D matmuls a slice
    product only involves the rows of d_s(a) and columns of d_t(b) that are not all zero:
    later slices are often needed by a few rows only."""
    levels = max(len(da) + len(db) - 1, 1)
    limbs = np.zeros((levels,) + tuple(shape), np.int64)
    plain = contract is not np.matmul or not (len(da) and len(db)) or da[0].ndim != 2 or \
        db[0].ndim != 2
    rows = [None if plain else np.flatnonzero(np.any(x, axis=1)) for x in da]
    cols = [None if plain else np.flatnonzero(np.any(x, axis=0)) for x in db]
    for s in range(len(da)):
        for t in range(len(db)):
            ra, cb = rows[s], cols[t]
            if plain or 2 * len(ra) > da[s].shape[0] and 2 * len(cb) > db[t].shape[1]:
                limbs[s + t] += np.broadcast_to(contract(da[s], db[t]), shape).astype(np.int64)
            elif len(ra) and len(cb):
                limbs[s + t][np.ix_(ra, cb)] += (da[s][ra] @ db[t][:, cb]).astype(np.int64)
    return _carry(limbs, beta)


def _carry(limbs, beta):
    """Propagate carries from the least significant limb up (floor division by 2**beta:
    the arithmetic shift), in place."""
    for q in range(limbs.shape[0] - 1, 0, -1):
        c = limbs[q] >> beta
        limbs[q] -= c << beta
        limbs[q - 1] += c
    return limbs


def _wide_entries(a, b, lay, wide_out, beta) -> dict:
    """The slow exact path for entries whose row or column needs more than the cap: that
    row's and column's digits with no cap, one small matmul, combined in Python ints."""
    out, rows, cols = {}, {}, {}
    if lay is _MATMUL:
        batch = wide_out.shape[:-2]
        a = np.broadcast_to(a, batch + a.shape[-2:])
        b = np.broadcast_to(b, batch + b.shape[-2:])
    for flat in np.flatnonzero(wide_out):
        idx = np.unravel_index(flat, wide_out.shape)
        idx = tuple(int(i) for i in idx)
        ka = idx[:-1] if lay is _MATMUL else idx
        kb = idx[:-2] + idx[-1:] if lay is _MATMUL else idx
        if ka not in rows:
            rows[ka] = _digits(lay.row(a, idx), -1, beta, None)[:2]
        if kb not in cols:
            cols[kb] = _digits(lay.col(b, idx), -1, beta, None)[:2]
        (da, ta), (db, tb) = rows[ka], cols[kb]
        if not len(da) or not len(db):
            out[int(flat)] = (0, 0)
            continue
        c = (np.array(da) @ np.array(db).T).astype(np.int64)   # exact: the matmuls' bound
        total = len(da) + len(db)
        big = sum(int(c[s, t]) << ((total - 2 - s - t) * beta)
                  for s in range(len(da)) for t in range(len(db)))
        out[int(flat)] = (big, int(ta[0]) + int(tb[0]) + 2 - total * beta)
    return out


def _specials(a, b, contract, shape):
    """NaN / +-inf where the real extension makes the entry non-finite, else 0.0: counts of
    offending terms by contractions of 0/1 indicator arrays (exact: counts <= k)."""
    f = lambda m: m.astype(np.float64)                         # noqa: E731
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    pos_a, neg_a, pos_b, neg_b = a > 0, a < 0, b > 0, b < 0
    c = lambda x, y: np.broadcast_to(contract(f(x), f(y)), shape)   # noqa: E731
    nan = (c(np.isnan(a), np.ones(b.shape, bool)) + c(np.ones(a.shape, bool), np.isnan(b))
           + c(inf_a, b == 0) + c(a == 0, inf_b))
    up = (c(inf_a & pos_a, pos_b) + c(inf_a & neg_a, neg_b) + c(pos_a, inf_b & pos_b)
          + c(neg_a, inf_b & neg_b))
    down = (c(inf_a & pos_a, neg_b) + c(inf_a & neg_a, pos_b) + c(pos_a, inf_b & neg_b)
            + c(neg_a, inf_b & pos_b))
    out = np.where(up > 0, np.inf, 0.0)
    out = np.where(down > 0, -np.inf, out)
    return np.where((nan > 0) | ((up > 0) & (down > 0)), np.nan, out)


def _negzero(a, b, contract, shape, k):
    """Entries whose k terms are all -0 (a zero times anything of the other sign): a count of
    such terms by contractions of indicator arrays, compared with k."""
    f = lambda m: m.astype(np.float64)                         # noqa: E731
    za, zb = a == 0, b == 0
    zm_a, zp_a = za & np.signbit(a), za & ~np.signbit(a)
    zm_b, zp_b = zb & np.signbit(b), zb & ~np.signbit(b)
    count = (contract(f(zm_a), f(zp_b | (b > 0))) + contract(f(zp_a), f(zm_b | (b < 0)))
             + contract(f(a > 0), f(zm_b)) + contract(f(a < 0), f(zp_b)))
    return np.broadcast_to(count == k, shape)


# ----- rounding to binary64 ---------------------------------------------------------------
def _bitlen(m):
    """Bit lengths of int64 values 0 <= m < 2**62 (frexp of the float, corrected where the
    conversion rounded up to the next power of two)."""
    e = np.frexp(m.astype(np.float64))[1].astype(np.int64)
    return e - ((e > 0) & ((m >> np.maximum(e - 1, 0)) == 0))


def _nearest(limbs, exp, beta):
    """The limbs' values rounded to the nearest binary64, ties to even, in int64: |N| in
    sign-magnitude limbs, its bit length, the grid 2**G of the result
    (G = max(exp + bits - 53, -1074)), then floor(|N| * 2**(exp - G + 1)) (the kept bits and
    the round bit; a left shift where nothing is dropped) and a sticky bit."""
    neg = limbs[0] < 0
    mag = _carry(limbs * (1 - 2 * neg.astype(np.int64)), beta)   # |N|: every limb >= 0
    nq = mag.shape[0]
    weight = [(nq - 1 - q) * beta for q in range(nq)]
    lead = np.argmax(mag != 0, axis=0)                 # the most significant nonzero limb
    top_limb = np.take_along_axis(mag, lead[None], axis=0)[0]
    bits = np.where(top_limb > 0, _bitlen(top_limb) + (nq - 1 - lead) * beta, 0)
    grid = np.maximum(exp + bits - 53, -1074)
    below = grid - exp - 1                             # the round bit's position in |N|
    head = np.zeros(exp.shape, np.int64)               # < 2**54: bits above the round bit
    sticky = np.zeros(exp.shape, bool)
    for q in range(nq):
        s = below - weight[q]                          # right shift of this limb
        head += np.where(s <= 0, mag[q] << np.clip(-s, 0, 62), mag[q] >> np.clip(s, 0, 63))
        lost = np.where(s >= 63, mag[q], mag[q] & ((np.int64(1) << np.clip(s, 0, 62)) - 1))
        sticky |= (s > 0) & (lost != 0)
    q = head >> 1
    q += head & 1 & (sticky | (q & 1))
    with np.errstate(over="ignore"):
        out = np.ldexp(q.astype(np.float64), grid)     # exact, or +inf past the top
    return np.where(neg, -out, out)


def _int_nearest(n: int, e: int) -> float:
    """n * 2**e rounded to the nearest binary64: Python's int true division rounds correctly,
    subnormals included; overflow gives +-inf."""
    try:
        return float(n << e) if e >= 0 else n / (1 << -e)
    except OverflowError:
        return float("inf") if n > 0 else float("-inf")


def _float64(x, name):
    arr = np.asarray(x)
    if arr.dtype != np.float64:
        if arr.dtype.kind not in "fiub" and arr.dtype.kind != "V":
            raise TypeError(f"exact products: {name} must hold binary64 values (got dtype "
                            f"{arr.dtype})")
        conv = arr.astype(np.float64)
        if arr.dtype.kind in "iu" and not np.array_equal(conv.astype(arr.dtype), arr):
            raise ValueError(f"exact products: {name} has integers beyond binary64")
        arr = conv
    return arr

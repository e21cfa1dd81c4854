"""Standard-model error bounds: exact Fraction constants, float64 bounds rounded up.

Contract: ``unit_roundoff``, ``eta`` and ``gamma`` give exact Fractions (``gamma`` of a float
u gives a float rounded up); ``sum_bound``, ``dot_bound``, ``matmul_bound`` and
``elementwise_bound`` take nonnegative arrays (float64, or object arrays of exact numbers)
and return float64 arrays of upper bounds on |computed - exact|, every float64 operation
rounded toward +inf (a bound rounded down is not a bound).  No bound covers overflow.

The model (shared/FACTS.md; Higham 2002, "Accuracy and Stability of Numerical Algorithms",
2nd ed., sec. 2.1-2.2): one rounding of a real x into a format is fl(x) = x(1 + d) + e with
|d| <= u, |e| <= eta, d*e = 0, where u = 2**-p and eta = 2**(qmin - 1) (half the subnormal
spacing) for rounding to nearest; directed roundings (toward zero, up, down, odd) and
stochastic rounding have errors below one ulp, so 2u and 2*eta.  The sum of two format
values is exact when it is below the normal range, so additions carry no eta term.

Accumulation (the orders of ``numerics.policy``; a term of the sum meets at most k roundings
on its way to the result, k = ``sum_depth(n, order)``):

- sum of n format values: |error| <= gamma_k(u) sum|x_i|, k = n - 1 sequential (Higham 2002,
  sec. 4.2), ceil(log2 n) pairwise (sec. 4.2), (K - 1) + (ceil(n/K) - 1) blocked:K
  (Blanchard, Higham, Mary 2020, "A class of fast and accurate summation algorithms", SISC).
- dot product: the product rounding adds one factor, gamma_(k+1)(u) sum|x_i y_i| (Higham
  2002, sec. 3.1, (3.5): gamma_n sequential), plus the underflow of the n products: each
  product error e_i (|e_i| <= eta) passes through at most k later roundings, so n * eta *
  (1 + gamma_k).  With FMA (sum = fma(x_i, y_i, sum), the first product of a block rounded
  alone, as ``numerics.backend`` evaluates it) the first term still meets 1 + (n - 1) = n
  roundings and every fma may underflow: the same worst-case bound, which is why ``fma``
  does not change the result.  When products are exact in the accumulation format
  (``products_exact``: 2 p_in <= p_acc, 2 qmin_in >= qmin_acc) the product factor and the
  eta term vanish: gamma_k(u_acc) sum|x_i y_i|.
- mixed precision: storage format S, accumulation format A containing S.  The result
  accumulated in A (error E_A as above with u_A, eta_A) is rounded once into S:
  |error| <= E_A + u_S |s_A| + eta_S with |s_A| <= |s| + E_A, so
  E_A + u_S (R + E_A) + eta_S where R bounds |exact result| (``abs_result``; sum|x_i| if not
  given).  No final term when S contains A (nothing to round).
"""

from __future__ import annotations

import math
from fractions import Fraction

import gmpy2
import numpy as np

from roundoff_coverage import formats

from .metrics import INF, NAN, read_exact
from .policy import block_size

_NEAREST = ("nearest_even", "nearest_away")


# ----- constants -------------------------------------------------------------------------

def _mode_factor(mode: str) -> int:
    formats.mode_code(mode)                        # one-line error for an unknown mode
    return 1 if mode in _NEAREST else 2


def unit_roundoff(fmt, mode: str = "nearest_even") -> Fraction:
    """u = 2**-p for rounding to nearest; 2u for directed and stochastic rounding (an error
    below one ulp, 2**(1-p) relative in the normal range)."""
    return _mode_factor(mode) * formats.get(fmt).unit_roundoff_exact


def eta(fmt, mode: str = "nearest_even") -> Fraction:
    """eta = 2**(emin - man_bits - 1), half the subnormal spacing, for rounding to nearest;
    2*eta (the whole spacing) for directed and stochastic rounding."""
    return _mode_factor(mode) * formats.get(fmt).eta_exact


def gamma(n: int, u):
    """gamma_n = n u / (1 - n u): exact Fraction for a Fraction (or int) u, a float rounded
    up for a float u; ValueError when n u >= 1, where the bound is undefined."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"gamma: n must be an integer >= 0 (got {n!r})")
    exact = Fraction(u)
    if exact < 0:
        raise ValueError(f"gamma: u must be >= 0 (got {u!r})")
    nu = int(n) * exact
    if nu >= 1:
        raise ValueError(f"gamma: n*u = {int(n)} * {u} >= 1, so gamma_n = n u / (1 - n u) is "
                         f"undefined (too many roundings for this unit roundoff)")
    g = nu / (1 - nu)
    return round_up(g) if isinstance(u, (float, np.floating)) else g


def round_up(x) -> float:
    """The smallest float64 >= the rational x (inf past binary64's range)."""
    q = gmpy2.mpq(x.numerator, x.denominator) if isinstance(x, Fraction) else gmpy2.mpq(x)
    try:
        f = int(q.numerator) / int(q.denominator)          # correctly rounded to nearest
    except OverflowError:
        return math.inf if q > 0 else -float(np.finfo(np.float64).max)
    return float(np.nextafter(f, math.inf)) if gmpy2.mpq(f) < q else f


def sum_depth(n: int, order: str = "sequential") -> int:
    """The most roundings one term of an n-term sum meets in ``order`` (see module doc)."""
    if n < 1:
        raise ValueError(f"sum_depth: n must be >= 1 (got {n})")
    k = block_size(order, n)
    if order == "sequential":
        return n - 1
    if order == "pairwise":
        return (n - 1).bit_length()                      # ceil(log2 n)
    return (min(k, n) - 1) + (-(-n // k) - 1)             # within a block, then across blocks


def products_exact(storage, accumulate) -> bool:
    """Whether every product of two ``storage`` values is a value of ``accumulate`` (barring
    overflow): 2p_S <= p_A (the significand product fits) and 2 qmin_S >= qmin_A (no
    underflow).  binary16 in binary32: yes; bfloat16 in binary32: no (products underflow)."""
    s, a = formats.get(storage), formats.get(accumulate)
    return 2 * s.precision <= a.precision and 2 * s.qmin >= a.qmin


def elementwise_ulp_bound(mode: str = "nearest_even") -> float:
    """Error of one correctly rounded primitive in ulps of the exact value: 0.5 nearest, 1
    directed and stochastic."""
    return 0.5 * _mode_factor(mode)


# ----- arrays rounded up ------------------------------------------------------------------

def _read(a, name):
    """(array, exact): float64 array, or object array of mpq (inf/NaN as floats)."""
    a = np.asarray(a)
    if a.dtype.kind == "f" and a.dtype.itemsize <= 8:
        a = a.astype(np.float64)
        if np.any(a < 0):
            raise ValueError(f"{name} must be >= 0 (absolute values)")
        return a, False
    if a.dtype.kind not in "iuO":
        raise TypeError(f"{name}: give float64 or an object array of exact numbers "
                        f"(got {a.dtype})")
    out = np.empty(a.shape, object)
    for idx, v in np.ndenumerate(a):
        kind, neg, _, val = read_exact(v)
        if neg and kind != NAN and (kind == INF or val != 0):
            raise ValueError(f"{name} must be >= 0 (absolute values)")
        out[idx] = math.nan if kind == NAN else (math.inf if kind == INF else val)
    return out, True


def _add_up(a, b):
    s = a + b
    return np.where((a == 0) | (b == 0), s, np.nextafter(s, np.inf))


def _combine_up(terms, const: Fraction, name: str) -> np.ndarray:
    """sum_j coef_j * x_j + const elementwise, rounded up to float64; terms: (Fraction coef,
    nonnegative array) pairs, broadcast together."""
    arrays = [_read(x, name) for _, x in terms]
    shape = np.broadcast_shapes(*(a.shape for a, _ in arrays))
    if not any(exact for _, exact in arrays):
        total = np.zeros(shape)
        with np.errstate(over="ignore", invalid="ignore"):
            for (coef, _), (x, _) in zip(terms, arrays):
                if coef == 0:
                    continue
                t = round_up(coef) * x
                total = _add_up(total, np.where(x == 0, 0.0, np.nextafter(t, np.inf)))
            return _add_up(total, round_up(const)) if const else total
    coefs = [gmpy2.mpq(c.numerator, c.denominator) for c, _ in terms]
    xs = [np.broadcast_to(x, shape) for x, _ in arrays]
    out = np.empty(shape, np.float64)
    for idx in np.ndindex(shape):
        vals = [x[idx] for x in xs]
        if any(isinstance(v, float) for v in vals):          # inf or NaN
            out[idx] = sum(float(c) * float(v) for c, v in zip(coefs, vals))
            continue
        out[idx] = round_up(sum((c * gmpy2.mpq(v) for c, v in zip(coefs, vals)),
                                gmpy2.mpq(const.numerator, const.denominator)))
    return out


# ----- bounds ------------------------------------------------------------------------------

def _check_n(n, name):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: n must be an integer >= 1 (got {n!r})")
    return int(n)


def _final(storage, acc, mode):
    """(u_S, eta_S) of the last rounding from the accumulation format into storage, or
    zeros when storage contains the accumulation format (nothing is rounded)."""
    if storage.spans(acc):
        return Fraction(0), Fraction(0)
    return unit_roundoff(storage, mode), eta(storage, mode)


def _formats(fmt, accumulate, name):
    storage = formats.get(fmt)
    acc = storage if accumulate is None else formats.get(accumulate)
    if not acc.spans(storage):
        raise ValueError(f"{name}: the accumulation format {acc.label} must contain the storage "
                         f"format {storage.label} (inputs would be rounded before summing)")
    return storage, acc


def _with_final(coef: Fraction, const: Fraction, abs_total, abs_result, us, es, name):
    """E_A = coef*T + const, then + u_S (R + E_A) + eta_S, R = abs_result or T."""
    if us == 0:
        return _combine_up([(coef, abs_total)], const, name)
    if abs_result is None:
        return _combine_up([((1 + us) * coef + us, abs_total)], (1 + us) * const + es, name)
    return _combine_up([((1 + us) * coef, abs_total), (us, abs_result)],
                       (1 + us) * const + es, name)


def sum_bound(abs_sum, n: int, fmt, mode: str = "nearest_even", order: str = "sequential",
              accumulate=None, abs_result=None) -> np.ndarray:
    """Bound on |computed sum - exact sum| of n values of ``fmt``: gamma_k(u_A) sum|x_i| with
    k = ``sum_depth(n, order)``, plus the final rounding into ``fmt`` when ``accumulate`` is a
    wider format (module doc).  ``abs_sum``: sum|x_i| or an upper bound of it (see
    ``abs_sum_upper``); ``abs_result``: an upper bound of |exact sum| (default abs_sum)."""
    n = _check_n(n, "sum_bound")
    storage, acc = _formats(fmt, accumulate, "sum_bound")
    coef = gamma(sum_depth(n, order), unit_roundoff(acc, mode))
    us, es = _final(storage, acc, mode)
    return _with_final(coef, Fraction(0), abs_sum, abs_result, us, es, "sum_bound: abs_sum")


def dot_bound(abs_dot, n: int, fmt, mode: str = "nearest_even", order: str = "sequential",
              fma: bool = False, accumulate=None, abs_result=None) -> np.ndarray:
    """Bound on |computed - exact| of a length-n dot product of ``fmt`` values:
    gamma_(k+1)(u_A) sum|x_i y_i| + n eta_A (1 + gamma_k(u_A)) (k = ``sum_depth``), the
    product terms dropped when products are exact in the accumulation format, plus the final
    rounding into ``fmt`` for a wider ``accumulate``.  ``fma`` does not change the worst case
    (module doc).  ``abs_dot``: sum|x_i y_i| or an upper bound (``abs_dot_upper``)."""
    n = _check_n(n, "dot_bound")
    storage, acc = _formats(fmt, accumulate, "dot_bound")
    u_a, k = unit_roundoff(acc, mode), sum_depth(n, order)
    rel = 2 * storage.precision > acc.precision           # products rounded
    tiny = 2 * storage.qmin < acc.qmin                     # products may underflow
    coef = gamma(k + (1 if rel else 0), u_a)
    const = n * eta(acc, mode) * (1 + gamma(k, u_a)) if tiny else Fraction(0)
    us, es = _final(storage, acc, mode)
    return _with_final(coef, const, abs_dot, abs_result, us, es, "dot_bound: abs_dot")


def matmul_bound(abs_a, abs_b, fmt, mode: str = "nearest_even", order: str = "sequential",
                 fma: bool = False, accumulate=None) -> np.ndarray:
    """Elementwise bound on |computed - exact| of A @ B: ``dot_bound`` of |A||B| (computed as
    a rigorous upper bound, ``abs_matmul_upper``) with n = the inner dimension."""
    abs_a, abs_b = np.asarray(abs_a), np.asarray(abs_b)
    if abs_a.ndim < 2 or abs_b.ndim < 2 or abs_a.shape[-1] != abs_b.shape[-2]:
        raise ValueError(f"matmul_bound: need (..., m, k) and (..., k, n) arrays "
                         f"(got {abs_a.shape} and {abs_b.shape})")
    return dot_bound(abs_matmul_upper(abs_a, abs_b), abs_a.shape[-1], fmt, mode, order, fma,
                     accumulate)


def promote_dot_bound(abs_dot, n: int, fmt, mode: str, inner, promote: int,
                      accumulate="binary32", abs_result=None) -> np.ndarray:
    """Bound on |computed - exact| of a length-n dot product under two-level accumulation
    (numerics.policy.Policy.promote): runs of K = ``promote`` products summed in ``inner``,
    each run converted into ``accumulate`` and added there in sequence.  A run of at most K
    terms meets at most k_I roundings in the inner format (K with the products rounded into
    it, K - 1 when they are exact there; an FMA chain meets no more), its conversion one
    more unless ``accumulate`` contains ``inner``, and the R = ceil(n/K) runs R - 1 additions
    in the accumulator (Blanchard, Higham, Mary 2020's blocked summation with a different
    format per level):
        E_A <= [gamma_kI(u_I) + gamma_kO(u_A) (1 + gamma_kI(u_I))] sum|x_i y_i|
               + n eta_I (1 + gamma_kI(u_I)) (1 + gamma_kO(u_A)),   kO = R - 1 (+1),
    the eta term only where products may underflow in ``inner``; then the final rounding into
    storage (``dot_bound``'s)."""
    n = _check_n(n, "promote_dot_bound")
    storage, inn = _formats(fmt, inner, "promote_dot_bound")
    acc = formats.get(accumulate)
    k = min(_check_n(promote, "promote_dot_bound (promote)"), n)
    u_i, u_a = unit_roundoff(inn, mode), unit_roundoff(acc, mode)
    k_in = k if 2 * storage.precision > inn.precision else k - 1
    k_out = -(-n // k) - 1 + (0 if acc.spans(inn) else 1)
    g_in, g_out = gamma(k_in, u_i), gamma(k_out, u_a)
    coef = g_in + g_out * (1 + g_in)
    tiny = 2 * storage.qmin < inn.qmin
    const = n * eta(inn, mode) * (1 + g_in) * (1 + g_out) if tiny else Fraction(0)
    us, es = _final(storage, acc, mode)
    return _with_final(coef, const, abs_dot, abs_result, us, es, "promote_dot_bound: abs_dot")


def fixed_point_dot_bound(block_abs, block: int, fmt, mode: str, bits: int,
                          accumulate="binary32", abs_result=None) -> np.ndarray:
    """Bound on |computed - exact| of a dot product under fixed-point alignment
    (numerics.policy.Policy.fixed_point): ``block_abs[..., j]`` an upper bound of sum|x_i y_i|
    over block j (at most ``block`` products).  Block j truncates its m + 1 <= K + 1 terms
    (the running sum s^_(j-1) and its products) to multiples of q_j = 2**(e_j - B), 2**e_j <=
    M_j = max(|s^_(j-1)|, max|p_i|), each by less than q_j <= 2**-B M_j, and rounds the sum
    t_j into the accumulator: s^_j = t_j (1 + d) + e, |d| <= u_A, |e| <= eta_A.  With A_j the
    absolute sums so far and E_j the error after block j, M_j <= A_j + E_(j-1) and
        E_j <= E_(j-1) + D_j + u_A (A_j + E_(j-1) + D_j) + eta_A,
        D_j = (K + 1) 2**-B (A_j + E_(j-1)),
    evaluated in binary64 with every step rounded up (nextafter); then the final rounding
    into storage."""
    storage = formats.get(fmt)
    acc = formats.get(accumulate)
    a = np.asarray(block_abs, dtype=np.float64)
    u_a, eta_a = float(unit_roundoff(acc, mode)), float(eta(acc, mode))
    us, es = (float(v) for v in _final(storage, acc, mode))
    c = float(block + 1) * 2.0 ** -bits                    # exact: a power of two times K+1
    return _cut_blocks_bound(a, c, 0.0, u_a, eta_a, us, es, abs_result)


def _cut_blocks_bound(a, c, floor, u, e, us, es, abs_result):
    """The recursion of fixed_point_dot_bound and tensor_core_dot_bound over the blocks
    ``a[..., j]`` (upper bounds of their absolute sums): each block's cut costs at most
    D_j = c (A_j + E_(j-1) + floor), its rounding u (A_j + E_(j-1) + D_j) + e; then the
    final rounding (us, es) into storage.  Binary64, every step rounded up."""
    def up(v):
        return np.nextafter(v, np.inf)

    big_a = np.zeros(a.shape[:-1])
    err = np.zeros(a.shape[:-1])
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(a.shape[-1]):
            big_a = up(big_a + a[..., j])
            t = up(big_a + err)
            d = up(c * (up(t + floor) if floor else t))
            err = up(up(err + d) + up(up(u * up(t + d)) + e))
        r = big_a if abs_result is None else np.asarray(abs_result, dtype=np.float64)
        return up(err + up(up(us * up(r + err)) + es))


def tensor_core_dot_bound(block_abs, group: int, fmt, mode: str, extra, rounding: str,
                          out_bits: int = 23, abs_result=None) -> np.ndarray:
    """Bound on |computed - exact| of a dot product computed by a tensor core's chained block
    FMAs (numerics.tensor_cores): ``block_abs[..., j]`` an upper bound of sum max(|x_i|, m)
    max(|y_i|, m) over group j (nonzero operands, m the input format's least normal: the
    alignment counts a subnormal at the least normal exponent).  Group j cuts its g + 1
    terms (the running result and its products) to multiples of 2**(E_j - 23 - extra),
    2**E_j <= max(A_j + E_(j-1), 2**-126) -- a binary32 running result is aligned at its
    exponent, subnormals at -126, and a unit's exponent floor is at most -126 -- each by
    less than one quantum (no cut when ``extra`` is None), then rounds the sum once
    (``rounding``, ``out_bits`` fraction bits, binary32's range):
        E_j <= E_(j-1) + D_j + u (A_j + E_(j-1) + D_j) + eta,
        D_j = (g + 1) 2**(-23 - extra) (A_j + E_(j-1) + 2**-126),
    evaluated in binary64 with every step rounded up; then the final rounding into the
    storage format ``fmt`` under ``mode``."""
    storage = formats.get(fmt)
    out = formats.BinaryFormat(8, out_bits, 127)
    a = np.asarray(block_abs, dtype=np.float64)
    u, e = float(unit_roundoff(out, rounding)), float(eta(out, rounding))
    us, es = (float(v) for v in _final(storage, out, mode))
    c = 0.0 if extra is None else float(group + 1) * 2.0 ** (-23 - extra)
    return _cut_blocks_bound(a, c, 2.0 ** -126, u, e, us, es, abs_result)


def elementwise_bound(exact_abs, fmt, mode: str = "nearest_even") -> np.ndarray:
    """Bound on |fl(x) - x| for one correctly rounded primitive with exact result x:
    max(u|x|, eta) (u, eta of the mode; d*e = 0 in the model, so this is also <= u|x| + eta):
    half an ulp to nearest, one ulp directed (``elementwise_ulp_bound``)."""
    f = formats.get(fmt)
    rel = _combine_up([(unit_roundoff(f, mode), exact_abs)], Fraction(0),
                      "elementwise_bound: exact_abs")
    return np.maximum(rel, round_up(eta(f, mode)))


# ----- rigorous absolute sums -----------------------------------------------------------------

# binary64 arithmetic in any order (numpy, BLAS, with or without FMA): a term meets at most n
# roundings with factors >= 1 - u64, and n products may underflow by eta64 each.
_U64, _ETA64 = Fraction(1, 2 ** 53), Fraction(1, 2 ** 1075)


def _inflate(computed, n: int, products: bool) -> np.ndarray:
    """Exact value <= (computed + c) / (1 - m u64): m = n - 1 for sums of |x_i| (no
    underflow term), m = n and c = n eta64 (1 + u64)**(n - 1) for sums of products."""
    m = n if products else n - 1
    if m * _U64 >= 1:
        raise ValueError(f"abs sums of {n} terms are beyond the binary64 bound")
    scale = 1 / (1 - m * _U64)
    const = n * _ETA64 * (1 + gamma(n - 1, _U64)) * scale if products else Fraction(0)
    return _combine_up([(scale, computed)], const, "abs sum")


def abs_sum_upper(x, axis: int = -1) -> np.ndarray:
    """An upper bound of sum|x_i| along ``axis``: exact (rounded up) for object arrays; for
    float64 the numpy sum inflated by its own worst-case binary64 error."""
    x = np.asarray(x)
    if x.dtype == object:
        return _combine_up([(Fraction(1), np.sum(_read(np.abs(x), "x")[0], axis=axis))],
                           Fraction(0), "abs_sum_upper")
    x = np.abs(x.astype(np.float64))
    return _inflate(np.sum(x, axis=axis), x.shape[axis], False)


def abs_dot_upper(a, b, axis: int = -1) -> np.ndarray:
    """An upper bound of sum|a_i b_i| along ``axis`` (exact for object arrays)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    if a.dtype == object or b.dtype == object:
        prod = _read(np.abs(a), "a")[0] * _read(np.abs(b), "b")[0]
        return _combine_up([(Fraction(1), np.sum(prod, axis=axis))], Fraction(0), "abs_dot")
    a, b = np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))
    return _inflate(np.sum(a * b, axis=axis), a.shape[axis], True)


def abs_matmul_upper(abs_a, abs_b) -> np.ndarray:
    """An upper bound of |A| @ |B| elementwise (exact for object arrays)."""
    abs_a, abs_b = np.asarray(abs_a), np.asarray(abs_b)
    if abs_a.dtype == object or abs_b.dtype == object:
        prod = np.matmul(_read(np.abs(abs_a), "abs_a")[0], _read(np.abs(abs_b), "abs_b")[0])
        return _combine_up([(Fraction(1), prod)], Fraction(0), "abs_matmul")
    a, b = np.abs(abs_a.astype(np.float64)), np.abs(abs_b.astype(np.float64))
    return _inflate(np.matmul(a, b), a.shape[-1], True)

"""Double-word arithmetic on pairs of float64 arrays: a number is ``hi + lo`` with
``hi = RN(hi + lo)``; every function takes and returns such pairs (hi, lo) elementwise, on
finite operands whose results lie in [2**-900, 2**900] or are 0 (numerics/double_double.py
checks the range and handles NaN and infinities; the ``DD`` backend is built on these).

Error-free transformations: ``two_sum`` (Knuth), ``fast_two_sum`` (Dekker, |a| >= |b|),
``two_prod`` by Veltkamp's splitting (Dekker 1971; needs |x| < 2**996).  Arithmetic
(u = 2**-53): ``add`` is AccurateDWPlusDW of Joldes, Muller and Popescu ("Tight and
rigorous error bounds for basic building blocks of double-word arithmetic", ACM TOMS 44(2),
2017), relative error at most 3u**2 / (1 - 4u) of the exact sum however much it cancels;
``mul`` their DWTimesDW with the cross products rounded separately (numpy has no fused
multiply-add); ``div`` the binary64 quotient corrected twice by its double-word remainder
(the QD library's accurate division); ``sqrt`` one Newton correction of the binary64 root.

Elementary functions, each written from its textbook series and held by the tests to
2**-100 relative of mpmath at 400 bits (observed about 2**-104):
- ``exp``/``expm1``: x = k ln 2 + r (ln 2 in three pieces), expm1(r / 16) by its Taylor
  series, four doublings expm1(2t) = expm1(t) (2 + expm1(t)) (no cancellation near 0),
  then exp = (1 + expm1(r)) 2**k and expm1 = expm1(r) 2**k + (2**k - 1), the latter pair
  exact and one accurate addition (relative error of the sum, not of its terms).
- ``log``/``log1p``: x = 2**k m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with
  s = (m - 1) / (m + 1), |s| <= 0.1716, by its series in s**2 to s**45; log1p(x) = 2
  atanh(x / (2 + x)) where 1 + x lies in that interval (relative accuracy at tiny x),
  log(1 + x) elsewhere (|result| >= 0.34: an absolute error of 1 + x is a relative one).
- ``tanh``: m / (m + 2) with m = expm1(2|x|), the sign restored; +-1 beyond |x| = 40
  (1 - tanh(40) = 2**-114).
- ``erf``: odd; |x| < 6.125 by the Taylor series of erf around the nearest multiple c of
  1/4 (|x - c| <= 1/8), to (x - c)**28, coefficients erf(c), then 2/sqrt(pi) (-1)**(n-1)
  H_{n-1}(c) e**(-c*c) / n! (Hermite polynomials, their recurrence), from mpmath at 300
  bits; by Cramer's inequality |H_n(c)| e**(-c*c/2) <= 1.09 sqrt(2**n n!) the first term
  left out is below 2**-119, and erf >= 0.14 off the first interval (whose series at 0 is
  relative-accurate: its leading term is 2x / sqrt(pi)).  Beyond 6.125: 1 - erfc(|x|) with
  erfc < 2**-59 from the C library in binary64 (error below 2**-105 absolute).
"""

from __future__ import annotations

import functools
import math

import mpmath
import numpy as np

__all__ = ["OutOfRange", "two_sum", "fast_two_sum", "two_prod", "add", "mul", "div", "sqrt",
           "exp", "expm1", "log", "log1p", "tanh", "erf"]

_SPLIT = 134217729.0    # 2**27 + 1: Veltkamp's splitting constant for binary64


class OutOfRange(ArithmeticError):
    """A result double-double does not hold: a finite one outside [2**-900, 2**900] (an
    underflow to 0 included), a NaN or an infinity the reference would not give."""


# ----- error-free transformations and the four operations ----------------------------------
def two_sum(a, b):
    s = a + b
    t = s - a
    return s, (a - (s - t)) + (b - t)


def fast_two_sum(a, b):
    """s + e = a + b exactly, for |a| >= |b| (or a = 0)."""
    s = a + b
    return s, b - (s - a)


def _split(a):
    t = _SPLIT * a
    hi = t - (t - a)
    return hi, a - hi


def two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def add(xh, xl, yh, yl):
    sh, sl = two_sum(xh, yh)
    th, tl = two_sum(xl, yl)
    vh, vl = fast_two_sum(sh, sl + th)
    return fast_two_sum(vh, tl + vl)


def mul(xh, xl, yh, yl):
    ch, cl = two_prod(xh, yh)
    return fast_two_sum(ch, cl + (xh * yl + xl * yh))


def div(xh, xl, yh, yl):
    q1 = xh / yh
    rh, rl = add(xh, xl, *mul(-q1, 0.0, yh, yl))
    q2 = rh / yh
    rh, rl = add(rh, rl, *mul(-q2, 0.0, yh, yl))
    q3 = rh / yh
    h, l = fast_two_sum(q1, q2)
    return add(h, l, q3, 0.0)


def sqrt(xh, xl):
    s = np.sqrt(xh)
    ph, pl = two_prod(s, s)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(s > 0, (((xh - ph) - pl) + xl) / (2.0 * s), 0.0)
    return fast_two_sum(s, r)


def _horner(coefficients, th, tl):
    """sum_n c_n t**n, coefficients (hi, lo) pairs from the constant term up; each entry a
    float or an array broadcasting against t."""
    qh, ql = coefficients[-1]
    qh, ql = qh + 0.0 * th, ql + 0.0 * th
    for ch, cl in coefficients[-2::-1]:
        qh, ql = add(*mul(qh, ql, th, tl), ch, cl)
    return qh, ql


def _pair(v):
    h = float(v)
    return h, float(v - h)


# ----- exp and expm1 ---------------------------------------------------------------------
# ln 2 in three pieces (L1 of 42 bits, so k * L1 is exact for |k| < 2**11), and 1/n! as
# double-word numbers, n = 0 .. _EXP_TERMS, from mpmath at 300 bits.
@functools.cache
def _exp_tables():
    with mpmath.workprec(300):
        ln2 = mpmath.log(2)
        l1 = float(mpmath.floor(ln2 * 2 ** 42)) / 2 ** 42
        l2 = float(ln2 - l1)
        ln2_pieces = (l1, l2, float(ln2 - l1 - l2))
        inverse_factorials = [_pair(1 / mpmath.factorial(n)) for n in range(_EXP_TERMS + 1)]
    return ln2_pieces, inverse_factorials


_EXP_TERMS = 14          # |s| <= ln2 / 2**5: the first term left out is below 2**-123
_EXP_HALVINGS = 4


def _times_ln2(k):
    """k ln 2 as a double-word number, |k| < 2**11 (relative error about 2**-105)."""
    l1, l2, l3 = _exp_tables()[0]
    h, l = two_prod(k, l2)
    return add(k * l1, 0.0, *add(h, l, k * l3, 0.0))


def _reduced_expm1(xh, xl):
    """(k, expm1(r)) with x = k ln 2 + r, |r| <= 0.35 + 2**-40 (module docstring); r's
    absolute error about 2**-105, expm1(r)'s relative error about 2**-101 (four doublings
    of a 2**-104 error)."""
    ln2, inverse_factorials = _exp_tables()
    k = np.rint(xh * (1.0 / ln2[0]))
    if (np.abs(k) > 899).any():
        raise OutOfRange("double-double: exp beyond [2**-900, 2**900]")
    l1, l2, l3 = ln2                    # x - k ln 2 piece by piece: each step cancels
    rh, rl = add(xh, xl, -k * l1, 0.0)
    rh, rl = add(rh, rl, *two_prod(-k, l2))
    rh, rl = add(rh, rl, -k * l3, 0.0)
    sh, sl = rh * 2.0 ** -_EXP_HALVINGS, rl * 2.0 ** -_EXP_HALVINGS
    qh, ql = mul(*_horner(inverse_factorials[1:], sh, sl), sh, sl)
    for _ in range(_EXP_HALVINGS):
        qh, ql = mul(qh, ql, *add(qh, ql, 2.0, 0.0))
    return k, qh, ql


def exp(xh, xl):
    """exp(x) for |x| up to about 623 (OutOfRange beyond): (1 + expm1(r)) 2**k."""
    k, qh, ql = _reduced_expm1(xh, xl)
    eh, el = add(qh, ql, 1.0, 0.0)
    k = k.astype(np.int64)
    return np.ldexp(eh, k), np.ldexp(el, k)


def expm1(xh, xl):
    """expm1(x), relative-accurate at every x: expm1(r) 2**k + (2**k - 1) (module
    docstring); -1 (to 2**-115) below x = -80."""
    low = xh < -80.0
    k, qh, ql = _reduced_expm1(np.where(low, 0.0, xh), np.where(low, 0.0, xl))
    p = np.ldexp(1.0, k.astype(np.int64))
    up = k >= 0
    mh, ml = fast_two_sum(np.where(up, p, -1.0), np.where(up, -1.0, p))     # 2**k - 1
    h, l = add(qh * p, ql * p, mh, ml)
    return np.where(low, -1.0, h), np.where(low, 0.0, l)


# ----- log and log1p ---------------------------------------------------------------------
_ATANH_TERMS = 22        # s**2 <= 0.0295: the first term left out is below 2**-115 of s


@functools.cache
def _atanh_coefficients():
    with mpmath.workprec(300):
        return [_pair(mpmath.mpf(1) / (2 * n + 1)) for n in range(_ATANH_TERMS + 1)]


def _two_atanh(sh, sl):
    """2 atanh(s) = 2 (s + s**3/3 + s**5/5 + ...) for |s| <= 0.1716."""
    zh, zl = mul(sh, sl, sh, sl)
    ph, pl = mul(*_horner(_atanh_coefficients(), zh, zl), sh, sl)
    return 2.0 * ph, 2.0 * pl


_SQRT_HALF = math.sqrt(0.5)


def log(xh, xl):
    """log(x) for x > 0: k ln 2 + 2 atanh((m - 1) / (m + 1)), x = 2**k m exactly."""
    k = np.frexp(xh)[1]
    k = np.where(np.ldexp(xh, -k) < _SQRT_HALF, k - 1, k)
    mh, ml = np.ldexp(xh, -k), np.ldexp(xl, -k)
    sh, sl = div(*add(mh, ml, -1.0, 0.0), *add(mh, ml, 1.0, 0.0))
    return add(*_times_ln2(k.astype(np.float64)), *_two_atanh(sh, sl))


def log1p(xh, xl):
    """log1p(x) for x > -1: 2 atanh(x / (2 + x)) where 1 + x is in [sqrt(1/2), sqrt(2)),
    log(1 + x) elsewhere (module docstring)."""
    near = (xh >= _SQRT_HALF - 1.0) & (xh < math.sqrt(2.0) - 1.0)
    ah, al = np.where(near, xh, 0.0), np.where(near, xl, 0.0)
    nh, nl = _two_atanh(*div(ah, al, *add(ah, al, 2.0, 0.0)))
    fh, fl = add(np.where(near, 1.0, xh), np.where(near, 0.0, xl), 1.0, 0.0)
    gh, gl = log(fh, fl)
    return np.where(near, nh, gh), np.where(near, nl, gl)


# ----- tanh and erf ----------------------------------------------------------------------
def tanh(xh, xl):
    """tanh(x) = sign(x) m / (m + 2), m = expm1(2|x|); +-1 beyond |x| = 40."""
    neg = xh < 0
    big = np.abs(xh) > 40.0
    ah, al = np.where(big, 0.0, np.abs(xh)), np.where(big, 0.0, np.where(neg, -xl, xl))
    mh, ml = expm1(2.0 * ah, 2.0 * al)
    th, tl = div(mh, ml, *add(mh, ml, 2.0, 0.0))
    th, tl = np.where(big, 1.0, th), np.where(big, 0.0, tl)
    return np.where(neg, -th, th), np.where(neg, -tl, tl)


_ERF_STEP, _ERF_CENTRES, _ERF_TERMS = 0.25, 25, 28      # |x| < 6.125 by series


@functools.cache
def _erf_coefficients():
    """(hi, lo) arrays of shape (_ERF_TERMS + 1, _ERF_CENTRES): the Taylor coefficients
    of erf around c = i / 4 (module docstring)."""
    hi = np.zeros((_ERF_TERMS + 1, _ERF_CENTRES))
    lo = np.zeros_like(hi)
    with mpmath.workprec(300):
        for i in range(_ERF_CENTRES):
            c = mpmath.mpf(i) * _ERF_STEP
            g = 2 / mpmath.sqrt(mpmath.pi) * mpmath.exp(-c * c)
            coefficients = [mpmath.erf(c)]
            h_prev, h = mpmath.mpf(0), mpmath.mpf(1)          # H_{-1} (unused), H_0
            factorial = mpmath.mpf(1)
            for n in range(1, _ERF_TERMS + 1):
                factorial *= n
                coefficients.append((-1) ** (n - 1) * g * h / factorial)
                h_prev, h = h, 2 * c * h - 2 * (n - 1) * h_prev     # H_n
            for n, v in enumerate(coefficients):
                hi[n, i], lo[n, i] = _pair(v)
    return hi, lo


def erf(xh, xl):
    """erf(x): odd; Taylor series around the nearest multiple of 1/4 below |x| = 6.125,
    1 - erfc beyond (module docstring)."""
    neg = xh < 0
    ah, al = np.abs(xh), np.where(neg, -xl, xl)
    far = ah >= (_ERF_CENTRES - 0.5) * _ERF_STEP
    i = np.where(far, 0, np.rint(ah / _ERF_STEP)).astype(np.int64)
    th, tl = add(np.where(far, 0.0, ah), np.where(far, 0.0, al), -i * _ERF_STEP, 0.0)
    hi, lo = _erf_coefficients()
    eh, el = _horner(list(zip(hi[:, i], lo[:, i])), th, tl)
    if far.any():
        tail = np.zeros(ah.shape)
        tail[far] = [math.erfc(v) for v in ah[far].tolist()]
        eh, el = np.where(far, 1.0, eh), np.where(far, -tail, el)
    return np.where(neg, -eh, eh), np.where(neg, -el, el)

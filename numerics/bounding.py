"""``bounding(fmt, mode, policy)``: a rigorous per-sample error bound for any route, by running
the route's rule on enclosures.

Every number is a numpy structured array of float64 fields (``DTYPE``: clo, chi, elo, ehi),
so data movement (reshape, transpose, indexing, concatenate, stack, broadcast_to, where) is
plain numpy, as the rules expect.  Two intervals per element:

- E = [elo, ehi] encloses the EXACT value: the rule evaluated in real arithmetic on the same
  (exact) inputs, as ``numerics.reference`` computes it;
- C = [clo, chi] encloses every value that ``numerics.emulated(fmt, mode, policy)`` can
  compute: its primitive returns fl(v), v the exact result on the COMPUTED operands.

One interval function per primitive (the range of the real function over a box, outward
rounded) serves both: E_out = F(E_in), and C_out = hull of fl over F(C_in).  Every rounding
mode of the emulated backend except stochastic is monotone (nearest even/away, toward zero,
up, down and odd: x <= y implies fl(x) <= fl(y)), so fl([lo, hi]) lies in [fl(lo), fl(hi)];
stochastic rounding picks one of the two neighbours, so [RD(lo), RU(hi)].  This hull is the
tightest enclosure and lies inside the standard model's set {v(1+d)+e: |d| <= u, |e| <= eta}
(Higham 2002, "Accuracy and Stability of Numerical Algorithms", 2nd ed., sec. 2.2;
numerics.bounds.unit_roundoff and eta give u and eta): one add or multiply is bounded by
half an ulp of its exact value in nearest modes, not u|v| (up to a whole ulp).  An overflow
rounds an endpoint to inf (unbounded), or NaN in fn/fnuz formats; saturating formats give
max_finite, which is what the emulated backend computes.  A policy's compute format rounds
twice (compute, then storage: a composition of monotone roundings); reductions, dot and
matmul are the base class's, so the policy's order, accumulation format and FMA are
followed step by step; Policy.fixed_point's aligned blocks are enclosed block by block
(``_aligned_block``: each term truncated by less than the largest possible quantum).

Interval arithmetic in binary64 (Moore, Kearfott, Cloud 2009, "Introduction to Interval
Analysis", ch. 2-5): + and - use the error-free TwoSum (Knuth; Higham 2002, alg. 4.4) to
round each endpoint outward only when inexact, so exact sums stay points; *, /, sqrt move
each rounded-to-nearest endpoint one binary64 ulp outward (np.nextafter), unless exactly
zero.  Transcendental primitives trust numpy's binary64 libm to 4096 ulps (the margin of
numerics.emulated's screen, 2**-40 relative): endpoints are widened by 2**-39 |y| (the
margin with room for its own rounding) plus 4096 subnormals, then moved one ulp outward.
Monotone functions map endpoints; non-monotone ones (sin, cos, tan, cosh, pow, atan2, hypot,
fmod, remainder, copysign, abs, square) take the true range with a check for critical
points and poles, or a safe hull.

Unavailable bounds: an element whose enclosure has a NaN or infinite endpoint is "poisoned"
(all four fields NaN: nothing is known about it; NaN propagates through every interval
operation); ``error_bound`` is inf there.  Comparisons and predicates return the decision at
E's midpoint and set ``undecided`` (shared with the accumulator) when some element's C or E
could decide otherwise, or is poisoned: the caller then takes the whole evaluation's bound
as unavailable.  ``reset()`` clears it.

Capabilities: Rounding, Erf, InverseTrig, Cbrt.  NextAfter and Bits are absent (no rule
that reads the neighbour or the bit pattern of an enclosure).  Formats must fit binary64.
"""

from __future__ import annotations

import math

import numpy as np

from roundoff_coverage import formats

from . import tensor_cores
from .backend import EXACT_PRIMITIVES, Backend
from .policy import for_backend
from .primitives import PRIMITIVES

DTYPE = np.dtype([("clo", np.float64), ("chi", np.float64), ("elo", np.float64),
                  ("ehi", np.float64)])
FIELDS = DTYPE.names
INF = np.inf

# numpy's libm functions are within a few binary64 ulps; trusted to 4096 ulps = 2**-40
# relative, as numerics.emulated's screen does.  The margin 2**-39 |y| covers 2**-40 |f|
# for |f| <= |y| (1 + 2**-40) and the rounding of the margin itself; _LIBM_ABS covers 4096
# ulps in the subnormal range, where an ulp is 2**-1074.
_LIBM_REL = 2.0 ** -39
_LIBM_ABS = 2.0 ** -1062
# Critical points of sin/cos/tan are located with a float64 quotient (x - c)/pi whose error
# is below |x| 2**-50 for |x| <= 2**20; a margin of 2**-20 in k makes "may contain" safe.
# Beyond 2**20 the safe hull is taken.
_TRIG_LIMIT = 2.0 ** 20
_TRIG_MARGIN = 2.0 ** -20


def bounding(fmt, mode: str = "nearest_even", policy=None) -> "BoundingBackend":
    """The bounding backend of storage format ``fmt`` under ``mode``; ``policy`` a Policy, a
    preset name (numerics.policy.PRESETS) or None (strict), as numerics.emulated takes."""
    return BoundingBackend(fmt, mode, policy)


# ----- outward-rounded interval arithmetic on (lo, hi) pairs of float64 arrays -------------

def _down(v):
    return np.nextafter(v, -INF)


def _up(v):
    return np.nextafter(v, INF)


def _two_sum(x, y):
    """s = fl(x + y) and the exact error e = (x + y) - s (Knuth's TwoSum; exact for finite
    binary64 x, y without overflow, underflow included)."""
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def _sum_down(x, y):
    s, e = _two_sum(x, y)
    return np.where(e < 0, _down(s), s)


def _sum_up(x, y):
    s, e = _two_sum(x, y)
    return np.where(e > 0, _up(s), s)


def _add(a, b):
    return _sum_down(a[0], b[0]), _sum_up(a[1], b[1])


def _sub(a, b):
    return _sum_down(a[0], -b[1]), _sum_up(a[1], -b[0])


def _hull(values, exact_zero):
    """(min, max) of candidate endpoint values, each rounded to nearest and moved one ulp
    outward unless it is an exact zero; NaN propagates (np.minimum/np.maximum)."""
    lo = hi = None
    for v, z in zip(values, exact_zero):
        vl, vh = np.where(z, v, _down(v)), np.where(z, v, _up(v))
        lo = vl if lo is None else np.minimum(lo, vl)
        hi = vh if hi is None else np.maximum(hi, vh)
    return lo, hi


def _mul(a, b):
    pairs = [(a[i], b[j]) for i in (0, 1) for j in (0, 1)]
    return _hull([x * y for x, y in pairs], [(x == 0) | (y == 0) for x, y in pairs])


def _div(a, b):
    """Division; a divisor interval containing 0 gives an unbounded (poisoned) result."""
    pairs = [(a[i], b[j]) for i in (0, 1) for j in (0, 1)]
    lo, hi = _hull([x / y for x, y in pairs], [x == 0 for x, _ in pairs])
    bad = (b[0] <= 0) & (b[1] >= 0)
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def _abs(a):
    lo = np.where(a[0] >= 0, a[0], np.where(a[1] <= 0, -a[1], 0.0))
    return lo, np.maximum(-a[0], a[1])


def _square(a):
    """x*x for ONE x in [lo, hi] (the same operand twice): [min x^2, max x^2], 0 when the
    interval straddles 0."""
    m = _abs(a)
    return np.maximum(np.where(m[0] == 0, 0.0, _down(m[0] * m[0])), 0.0), _up(m[1] * m[1])


def _sqrt(a):
    # sqrt of a negative endpoint is NaN: the exact operand may lie outside the domain.
    lo, hi = np.sqrt(a[0]), np.sqrt(a[1])
    return np.maximum(np.where(lo == 0, lo, _down(lo)), 0.0), np.where(hi == 0, hi, _up(hi))


def _fma(a, b, c):
    return _add(_mul(a, b), c)


def _exact_product(x, y):
    """Whether binary64 holds x * y exactly: a zero factor, or odd significands of w_x and
    w_y bits with w_x + w_y <= 53 whose lowest bits multiply to at least 2**-1074, and no
    overflow (the products of format values of <= 26 bits: Backend._fixed_point_dot)."""
    def parts(v):                         # v = odd M * 2**low, M of width bits (v != 0)
        m, e = np.frexp(np.where(np.isfinite(v) & (v != 0), v, 1.0))
        big = np.abs(np.ldexp(m, 53)).astype(np.int64)          # in [2**52, 2**53)
        zeros = np.frexp((big & -big).astype(np.float64))[1] - 1
        return 53 - zeros, e - 53 + zeros
    (wx, lx), (wy, ly) = parts(x), parts(y)
    fits = (wx + wy <= 53) & (lx + ly >= -1074) & np.isfinite(x * y)
    return (x == 0) | (y == 0) | fits


def _product(a, b):
    """_mul, leaving the corner products binary64 holds exactly (_exact_product) as they
    are: products of format values stay points."""
    pairs = [(a[i], b[j]) for i in (0, 1) for j in (0, 1)]
    return _hull([x * y for x, y in pairs], [_exact_product(x, y) for x, y in pairs])


def _quantum(m, bits):
    """2**max(floor(log2 m) - bits, -1074); 2**-1074 where m = 0, NaN where m is not finite
    (Backend._fixed_point_dot's quantum for the largest magnitude m)."""
    ok = np.isfinite(m) & (m > 0)
    e = np.frexp(np.where(ok, m, 1.0))[1] - 1
    q = np.where(ok, np.ldexp(1.0, np.maximum(e - bits, -1074)), 2.0 ** -1074)
    return np.where(np.isfinite(m), q, np.nan)


def _trunc_to(t, q):
    """t truncated toward zero to a multiple of the power of two q, exactly: t / q is exact,
    and where |t| >= 2**52 q, t is a multiple of q already."""
    return np.where(np.abs(t) >= q * 2.0 ** 52, t, np.trunc(t / q) * q)


def _aligned_block(lo, hi, bits):
    """(lo, hi) enclosing every sum of one fixed_point block (Backend._fixed_point_dot): the
    terms t_j in [lo[..., j], hi[..., j]] (the running sum, then the block's products), each
    truncated toward zero to a multiple of q = 2**(e - bits), e = floor(log2 max_j |t_j|),
    summed exactly (the alignment of NVIDIA tensor cores: Fasi, Higham, Mikaitis, Pranesh,
    "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021; about 14 bits kept on FP8
    tensor cores: DeepSeek-V3 technical report, 2024, sec. 3.3.2).

    Derivation.  mig_j <= |t_j| <= mag_j (the least and largest |t| over [lo_j, hi_j]) and
    floor(log2) is monotone, so qmin <= q <= Q with Q = _quantum(max_j mag_j), qmin =
    _quantum(max_j mig_j): powers of two (the model's quantum stops at 2**-1074 too), each
    dividing the larger.  trunc_q is nondecreasing, and a coarser quantum truncates further
    toward zero: for t >= 0, trunc_Q(t) <= trunc_q(t) <= trunc_qmin(t) <= t, mirrored for
    t <= 0.  So trunc_q(t_j) lies in [lo_j >= 0 ? trunc_Q(lo_j) : trunc_qmin(lo_j),
    hi_j >= 0 ? trunc_qmin(hi_j) : trunc_Q(hi_j)]; as |t - trunc_Q(t)| < Q, the block's sum
    lies at most (terms) * Q below or above the interval sum of the untruncated terms, and
    is the model's exact sum where the terms are points.  Sums outward rounded; a NaN or
    infinite end leaves a non-finite sum (poisoned by ``pack``)."""
    mag = np.maximum(np.abs(lo), np.abs(hi))
    mig = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
    big_q = _quantum(np.max(mag, axis=-1), bits)[..., None]
    small_q = _quantum(np.max(mig, axis=-1), bits)[..., None]
    return _cut_sum(lo, hi, big_q, small_q)


def _cut_sum(lo, hi, big_q, small_q):
    """(lo, hi) enclosing the sum of terms t_j in [lo[..., j], hi[..., j]], each truncated
    toward zero to a multiple of a quantum q in [small_q, big_q] (powers of two): a coarser
    quantum cuts further toward zero (_aligned_block's derivation), summed outward."""
    low = np.where(lo >= 0, _trunc_to(lo, big_q), _trunc_to(lo, small_q))
    high = np.where(hi >= 0, _trunc_to(hi, small_q), _trunc_to(hi, big_q))
    slo, shi = low[..., 0], high[..., 0]
    for j in range(1, lo.shape[-1]):
        slo, shi = _sum_down(slo, low[..., j]), _sum_up(shi, high[..., j])
    return slo, shi


def _alignment(m, least):
    """floor(log2 max(m, least)) for magnitudes m > 0, -inf for m = 0: the exponent a tensor
    core aligns a nonzero operand by (numerics.tensor_cores: subnormals at the least normal
    exponent); monotone in m."""
    e = np.frexp(np.maximum(np.where(m > 0, m, 1.0), least))[1] - 1.0
    return np.where(m > 0, e, -np.inf)


def _tensor_core_block(clo, chi, plo, phi, big_e, small_e, extra, floor=None):
    """(lo, hi) enclosing every cut sum of one tensor-core group (numerics.tensor_cores):
    the running result c in [clo, chi] and the products in [plo, phi], whose operands'
    alignment exponents are at most big_e = (ea, eb) and at least small_e (-inf where an
    operand may be zero).  E, the largest of e(a) + e(b) over the nonzero products and
    max(e(c), -126) -- at least ``floor`` where a term is nonzero (the unit's exponent
    floor; None: none) -- lies in [Emin, Emax]; the quantum 2**(E - 23 - extra) in
    [qmin, Q] -- powers of two, each dividing the larger.  As in _aligned_block, a coarser
    quantum cuts further toward zero, so each cut term lies in [lo >= 0 ? trunc_Q(lo) :
    trunc_qmin(lo), hi >= 0 ? trunc_qmin(hi) : trunc_Q(hi)], summed outward.  ``extra``
    None: no cut, the interval sum."""
    if extra is None:
        slo, shi = clo, chi
        for j in range(plo.shape[-1]):
            slo, shi = _sum_down(slo, plo[..., j]), _sum_up(shi, phi[..., j])
        return slo, shi
    cmag = np.maximum(np.abs(clo), np.abs(chi))
    cmig = np.where((clo <= 0) & (chi >= 0), 0.0, np.minimum(np.abs(clo), np.abs(chi)))

    def exponent(pe, cm):
        ce = _alignment(cm, 2.0 ** -126)
        e = np.maximum(np.max(pe[0] + pe[1], axis=-1, initial=-np.inf), ce)
        return e if floor is None else np.where(np.isfinite(e), np.maximum(e, floor), e)

    e_hi, e_lo = exponent(big_e, cmag), exponent(small_e, cmig)
    # a group whose terms may all be zero: the smallest quantum is the least one
    big_q = np.ldexp(1.0, np.clip(np.where(np.isfinite(e_hi), e_hi, -2000), -1074 - 40,
                                  2000).astype(np.int64) - 23 - extra)[..., None]
    small_q = np.ldexp(1.0, np.clip(np.where(np.isfinite(e_lo), e_lo, -2000), -1074 - 40,
                                    2000).astype(np.int64) - 23 - extra)[..., None]
    big_q, small_q = np.maximum(big_q, 2.0 ** -1074), np.maximum(small_q, 2.0 ** -1074)
    return _cut_sum(np.concatenate([clo[..., None], plo], axis=-1),
                    np.concatenate([chi[..., None], phi], axis=-1), big_q, small_q)


# ----- transcendental primitives: trusted libm values, widened -------------------------------

def _libm_lo(y):
    return _down(y - (np.abs(y) * _LIBM_REL + _LIBM_ABS))


def _libm_hi(y):
    return _up(y + (np.abs(y) * _LIBM_REL + _LIBM_ABS))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)       # two binary64 roundings: well inside the 4096-ulp trust


# The monotone primitives (numerics.primitives, cosh aside: even, enclosed by _cosh):
# name: (binary64 function, increasing?, loose (lower, upper) limits of the image, for
# clamping).  A domain violation at an endpoint gives NaN (log of a negative, asin of 1.5,
# ...); since domains are intervals, endpoints inside the domain put the whole interval
# inside.
_OWN64 = {"erf": _erf, "rsqrt": _rsqrt}
_MONOTONE = {p.name: (_OWN64.get(p.name) or p.ufunc, p.increasing, p.image)
             for p in PRIMITIVES.values() if p.monotone and not p.even}


def _clamp(lo, hi, limits):
    return np.clip(lo, limits[0], limits[1]), np.clip(hi, limits[0], limits[1])


def _monotone(name, a):
    f, increasing, limits = _MONOTONE[name]
    ya, yb = f(a[0]), f(a[1])
    if not increasing:
        ya, yb = yb, ya
    return _clamp(_libm_lo(ya), _libm_hi(yb), limits)


def _may_hit(a, offset, period):
    """Whether [lo, hi] may contain a point offset + k period (k an integer); True also for
    |x| beyond _TRIG_LIMIT, where the test is not accurate enough."""
    klo = np.ceil((a[0] - offset) / period - _TRIG_MARGIN)
    khi = np.floor((a[1] - offset) / period + _TRIG_MARGIN)
    far = (np.abs(a[0]) > _TRIG_LIMIT) | (np.abs(a[1]) > _TRIG_LIMIT)
    return (klo <= khi) | far


def _endpoint_range(f, a):
    """[min, max] of f at the two endpoints, widened for libm (f monotone on [lo, hi])."""
    ya, yb = f(a[0]), f(a[1])
    return _libm_lo(np.minimum(ya, yb)), _libm_hi(np.maximum(ya, yb))


def _sin_cos(f, a, top, bottom):
    """sin or cos: monotone between critical points; where [lo, hi] may contain a maximum
    (top + 2k pi) the upper end is 1, a minimum (bottom + 2k pi) the lower end is -1."""
    lo, hi = _endpoint_range(f, a)
    hi = np.where(_may_hit(a, top, 2 * np.pi), 1.0, hi)
    lo = np.where(_may_hit(a, bottom, 2 * np.pi), -1.0, lo)
    bad = np.isnan(a[0]) | np.isnan(a[1])
    return (np.where(bad, np.nan, np.clip(lo, -1.0, 1.0)),
            np.where(bad, np.nan, np.clip(hi, -1.0, 1.0)))


def _tan(a):
    """Increasing between the poles pi/2 + k pi; an interval that may hold a pole is
    unbounded."""
    lo, hi = _libm_lo(np.tan(a[0])), _libm_hi(np.tan(a[1]))
    pole = _may_hit(a, np.pi / 2, np.pi)
    return np.where(pole, np.nan, lo), np.where(pole, np.nan, hi)


def _cosh(a):
    """Even, decreasing then increasing: the minimum 1 at 0 when the interval straddles 0."""
    lo, hi = _endpoint_range(np.cosh, a)
    lo = np.where((a[0] < 0) & (a[1] > 0), 1.0, lo)
    return np.maximum(lo, 1.0), hi


def _corners(f, a, b):
    """Range of f(x, y) over the box, for f monotone in each argument separately on it (the
    direction may depend on the other argument): the extremes lie at the four corners."""
    vals = [f(a[i], b[j]) for i in (0, 1) for j in (0, 1)]
    return _libm_lo(np.minimum.reduce(vals)), _libm_hi(np.maximum.reduce(vals))


def _pow(a, b):
    """x**y.  x >= 0 (y > 0 where x may be 0): x**y = exp(y log x) is monotone in x for each
    y and in y for each x, so corners.  y a point integer n: x**n is monotone where x keeps
    its sign; across 0, [0, max] for even n > 0, increasing for odd n > 0, 1 for n = 0,
    unbounded for n < 0.  Anything else (negative base, non-integer exponent) is unknown."""
    with np.errstate(all="ignore"):
        lo, hi = _corners(np.power, a, b)
        positive = (a[0] > 0) | ((a[0] >= 0) & (b[0] > 0))
        n = b[0]
        integer = (b[0] == b[1]) & (np.floor(n) == n) & (np.abs(n) < 2.0 ** 53)
        straddle = (a[0] < 0) & (a[1] > 0)
        even = integer & (np.fmod(n, 2) == 0)
        plo, phi = _endpoint_range(lambda x: np.power(x, n), a)
        plo = np.where(straddle & even & (n > 0), 0.0, plo)
        plo = np.where(integer & (n == 0), 1.0, plo)
        phi = np.where(integer & (n == 0), 1.0, phi)
        ok_int = integer & ~(straddle & (n < 0))
    lo = np.where(positive, lo, np.where(ok_int, plo, np.nan))
    hi = np.where(positive, hi, np.where(ok_int, phi, np.nan))
    return lo, hi


def _atan2(y, x):
    """atan2(y, x): corners where the box avoids the branch cut (x <= 0, y = 0) and the
    origin (x > 0 on it, or y of one sign): there each partial derivative keeps its sign
    along the other variable's lines.  Otherwise unknown."""
    lo, hi = _corners(np.arctan2, y, x)
    ok = (x[0] > 0) | (y[0] > 0) | (y[1] < 0)
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def _hypot(a, b):
    """Increasing in |x| and |y|."""
    ma, mb = _abs(a), _abs(b)
    return (np.maximum(_libm_lo(np.hypot(ma[0], mb[0])), 0.0),
            _libm_hi(np.hypot(ma[1], mb[1])))


# ----- exact primitives: the result is a value of the operands' format ----------------------

def _copysign(a, b):
    """|x| with y's sign; a y interval that holds 0 (either sign of zero) gives the
    symmetric hull."""
    m = _abs(a)
    pos, neg = b[0] > 0, b[1] < 0
    lo = np.where(pos, m[0], np.where(neg, -m[1], -m[1]))
    hi = np.where(pos, m[1], np.where(neg, -m[0], m[1]))
    bad = np.isnan(b[0]) | np.isnan(b[1])
    return np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)


def _periodic_remainder(f, half, a, b):
    """fmod (half=False: |r| < |y|, sign of x) or IEEE remainder (half=True: |r| <= |y|/2):
    increasing in x between jumps down at (half-)multiples of y.  With y a point and
    [lo, hi] narrower than |y|, no jump lies inside iff f(lo) <= f(hi) (f exact in
    binary64); otherwise the hull from the bound on |r|."""
    rlo, rhi = f(a[0], b[0]), f(a[1], b[0])
    width_ok = (b[0] == b[1]) & (a[1] - a[0] < np.abs(b[0])) & (rlo <= rhi)
    m = np.maximum(np.abs(b[0]), np.abs(b[1]))
    if half:
        m = m * 0.5                                 # exact: halving a binary64 (or 0)
        hull = (-m, m)
    else:
        hull = (np.where(a[0] >= 0, 0.0, -m), np.where(a[1] <= 0, 0.0, m))
    # y may be 0 (NaN), or an operand is unknown: the hull must not hide it.
    bad = ((b[0] <= 0) & (b[1] >= 0)) | np.isnan(a[0]) | np.isnan(a[1]) | np.isnan(b[0]) \
        | np.isnan(b[1])
    lo = np.where(bad, np.nan, np.where(width_ok, rlo, hull[0]))
    hi = np.where(bad, np.nan, np.where(width_ok, rhi, hull[1]))
    return lo, hi


def _ieee_remainder(x, y):
    return np.vectorize(math.remainder, otypes=[np.float64])(x, y)


def _monotone_exact(f):
    return lambda a: (f(a[0]), f(a[1]))


_EXACT = {
    "negative": lambda a: (-a[1], -a[0]),
    "abs": _abs,
    "copysign": _copysign,
    "maximum": lambda a, b: (np.maximum(a[0], b[0]), np.maximum(a[1], b[1])),
    "minimum": lambda a, b: (np.minimum(a[0], b[0]), np.minimum(a[1], b[1])),
    "floor": _monotone_exact(np.floor), "ceil": _monotone_exact(np.ceil),
    "trunc": _monotone_exact(np.trunc), "round": _monotone_exact(np.rint),
    "fmod": lambda a, b: _periodic_remainder(np.fmod, False, a, b),
    "remainder": lambda a, b: _periodic_remainder(_ieee_remainder, True, a, b),
}
# NaN in an enclosure means "unknown", never IEEE's NaN: fmax/fmin keep propagating it.
_EXACT["fmax"], _EXACT["fmin"] = _EXACT["maximum"], _EXACT["minimum"]

_ROUNDED = {
    "add": _add, "subtract": _sub, "multiply": _mul, "divide": _div, "sqrt": _sqrt,
    "fma": _fma, "square": _square,
    "reciprocal": lambda a: _div((np.ones_like(a[0]), np.ones_like(a[1])), a),
    "sin": lambda a: _sin_cos(np.sin, a, np.pi / 2, -np.pi / 2),
    "cos": lambda a: _sin_cos(np.cos, a, 0.0, np.pi),
    "tan": _tan, "cosh": _cosh, "pow": _pow, "atan2": _atan2, "hypot": _hypot,
}
for _name in _MONOTONE:
    _ROUNDED[_name] = (lambda n: lambda a: _monotone(n, a))(_name)


def interval(name: str, *boxes) -> tuple:
    """(lo, hi): the range of primitive ``name`` (numerics.primitives) over the argument
    boxes, each a (lo, hi) pair of float64 arrays (broadcast), outward rounded in binary64:
    the function the bounding backend applies to each of its intervals (the module
    docstring).  A NaN end means unknown (a box outside the domain, a pole, a divisor box
    holding 0)."""
    f = _EXACT[name] if name in EXACT_PRIMITIVES else _ROUNDED[name]
    with np.errstate(all="ignore"):
        return f(*[(np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64))
                   for lo, hi in boxes])


# ----- comparisons: when is a decision certain for every pair of values -----------------------

def _certain(name, alo, ahi, blo, bhi):
    """(always, never) of the comparison ``name`` (less, less_equal, greater,
    greater_equal, equal, not_equal) between every a in [alo, ahi] and b in [blo, bhi]:
    it holds for every pair / for none; both False where an end is NaN."""
    if name == "less":
        return ahi < blo, alo >= bhi
    if name == "less_equal":
        return ahi <= blo, alo > bhi
    if name == "greater":
        return alo > bhi, ahi <= blo
    if name == "greater_equal":
        return alo >= bhi, ahi < blo
    same = (alo == ahi) & (blo == bhi) & (alo == blo)
    apart = (ahi < blo) | (alo > bhi)
    return (same, apart) if name == "equal" else (apart, same)


class EnclosureFormats:
    """How a backend of enclosures (BoundingBackend; routes/bounds/tracking.py's
    TrackingBackend) is made and reaches other formats: a format that fits binary64 (the
    enclosures are binary64 intervals), its name ``KIND(format,mode,policy)``; its
    accumulator and siblings are backends of its own class in those formats sharing its
    state (``_state``: a fresh copy of ``STATE`` unless given), and storing a value of
    another format is ``cast``'s one more rounding.  Its values are structured arrays of
    ``DTYPE`` with the exact enclosure in fields elo, ehi (``to_float64`` reads their
    midpoint).  Mixed in before numerics.Backend."""

    KIND = "enclosures"
    TENSOR_CORES = False            # whether _tensor_core_dot encloses Policy.tensor_core
    STATE: dict = {}
    DTYPE: np.dtype | None = None

    def __init__(self, fmt, mode="nearest_even", policy=None, _state=None):
        self.fmt = formats.get(fmt)
        formats.mode_code(mode)
        if not self.fmt.fits_binary64:
            raise ValueError(f"{self.KIND}: {self.fmt.label} does not fit binary64; "
                             f"enclosures are binary64 intervals")
        self.mode = mode
        self.policy = policy = for_backend(policy, self.fmt, self.KIND)
        if policy.tensor_core is not None and not self.TENSOR_CORES:
            raise ValueError(f"{self.KIND}: no enclosure of a tensor core's block FMAs "
                             f"(policy {policy.label})")
        self.name = f"{self.KIND}({self.fmt.label},{mode},{policy.label})"
        self._state = _state if _state is not None else dict(self.STATE)
        self._acc = None

    def accumulator(self):
        acc = self.policy.accumulate
        if acc == self.fmt:
            return self
        if self._acc is None:
            self._acc = type(self)(acc, self.mode, None, _state=self._state)
        return self._acc

    def sibling(self, fmt):
        return type(self)(fmt, self.mode, None, _state=self._state)

    def to_storage(self, a, source):
        if source is self or source.fmt == self.fmt:
            return a
        return self.cast(a, self.fmt)

    def to_float64(self, a):
        """The midpoint of the exact enclosure (each half taken first: no overflow)."""
        a = self._as(a)
        return a["elo"] * 0.5 + a["ehi"] * 0.5

    def where(self, cond, a, b):
        """np.where; a plain operand beside an enclosure (of the class's ``DTYPE``) is read
        with ``_as``, two plain ones (words, Booleans) pass unchanged."""
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype == self.DTYPE or b.dtype == self.DTYPE:
            a, b = self._as(a), self._as(b)
        return np.where(cond, a, b)

    def _exact_input(self, x) -> np.ndarray:
        """``x`` as an array for ``asarray``, integers beyond 2**53 as Python ints (object
        dtype): binary64 would round them."""
        x = np.asarray(x)
        if x.dtype.kind in "iu" and x.size and np.abs(x).max() > 2 ** 53:
            x = x.astype(object)
        return x

    # ----- comparisons and predicates: each subclass's ``_mark(bad)`` records the elements
    # whose decision the enclosures do not make certain ----------------------------------------
    def _compare(self, name, a, b):
        """The comparison at E's midpoint; undecided where, in C or E, some pair of values
        of the two enclosures would decide otherwise."""
        a, b = self._as(a), self._as(b)
        decision = getattr(np, name)(self.to_float64(a), self.to_float64(b))
        ok = np.ones(decision.shape, dtype=bool)
        for lo, hi in (("clo", "chi"), ("elo", "ehi")):
            always, never = _certain(name, a[lo], a[hi], b[lo], b[hi])
            ok &= np.where(decision, always, never)
        self._mark(~ok)
        return decision

    def _predicate(self, name, a):
        """Every element of a known enclosure is finite; an unknown (NaN, poisoned) one
        leaves the predicate undecided."""
        a = self._as(a)
        self._mark(np.isnan(a["elo"]))
        return getattr(np, name)(self.to_float64(a))


class BoundingBackend(EnclosureFormats, Backend):
    """Enclosures of the emulated backend's computed values (C) and of the exact values (E);
    see the module docstring.  ``undecided`` is set by a comparison or predicate that the
    enclosures cannot decide; ``reset()`` clears it."""

    capabilities = frozenset({"Rounding", "Erf", "InverseTrig", "Cbrt"})
    KIND = "bounding"
    TENSOR_CORES = True
    STATE = {"undecided": False}
    DTYPE = DTYPE

    # ----- the undecided flag, shared with the accumulator ----------------------------------
    @property
    def undecided(self) -> bool:
        return self._state["undecided"]

    @undecided.setter
    def undecided(self, value):
        self._state["undecided"] = bool(value)

    def reset(self) -> None:
        """Clear ``undecided`` before a new evaluation."""
        self._state["undecided"] = False

    # ----- packing -----------------------------------------------------------------------------
    @staticmethod
    def pack(clo, chi, elo, ehi) -> np.ndarray:
        """Four float64 arrays (broadcast) as enclosures; an element with a NaN or infinite
        endpoint is poisoned (all four NaN: unknown)."""
        parts = np.broadcast_arrays(*[np.asarray(v, dtype=np.float64)
                                      for v in (clo, chi, elo, ehi)])
        out = np.empty(parts[0].shape, dtype=DTYPE)
        for key, v in zip(FIELDS, parts):
            out[key] = v
        bad = ~(np.isfinite(parts[0]) & np.isfinite(parts[1]) & np.isfinite(parts[2])
                & np.isfinite(parts[3]))
        if bad.any():
            out[bad] = (np.nan,) * 4
        return out

    @staticmethod
    def split(y):
        """(clo, chi, elo, ehi) as float64 arrays."""
        y = np.asarray(y)
        return tuple(np.array(y[key], dtype=np.float64) for key in FIELDS)

    @staticmethod
    def error_bound(y) -> np.ndarray:
        """max |c - e| over c in C and e in E, rounded up: max(chi - elo, ehi - clo); inf
        where the enclosure is not finite (the bound is unavailable there)."""
        clo, chi, elo, ehi = BoundingBackend.split(y)
        with np.errstate(all="ignore"):
            b = np.maximum(_sum_up(chi, -elo), _sum_up(ehi, -clo))
        return np.where(np.isfinite(b), b, INF)

    def _as(self, a):
        a = np.asarray(a)
        return a if a.dtype == DTYPE else self.asarray(a)

    def _round(self, lo, hi, fmt, mode=None):
        """The hull of one rounding of [lo, hi] into fmt (module docstring)."""
        mode = mode or self.mode
        down, up = ("downward", "upward") if mode == "stochastic" else (mode, mode)
        with np.errstate(all="ignore"):
            return formats.round_to(lo, fmt, down), formats.round_to(hi, fmt, up)

    # ----- conversion ----------------------------------------------------------------------
    def asarray(self, x):
        """Exact inputs: E the value itself (enclosed in binary64 when not a binary64 value),
        C the value rounded once into the format, as numerics.emulated reads it."""
        x = self._exact_input(x)
        if x.dtype == DTYPE:
            return x
        if x.dtype == object:
            parts = [np.empty(x.shape) for _ in FIELDS]
            for idx, v in np.ndenumerate(x):
                for key, part in zip(FIELDS, parts):
                    part[idx] = self._literal(v, key)
            return self.pack(*parts)
        x = x.astype(np.float64)
        clo, chi = self._round(x, x, self.fmt)
        return self.pack(clo, chi, x, x)

    def _literal(self, v, key):
        """One endpoint of a literal: C rounded into the format (a neighbour each side
        under stochastic rounding), E rounded outward into binary64."""
        if key in ("elo", "ehi"):
            return formats.round_exact(v, "binary64",
                                       "downward" if key == "elo" else "upward").to_float()
        mode = self.mode
        if mode == "stochastic":
            mode = "downward" if key == "clo" else "upward"
        return formats.round_exact(v, self.fmt, mode).to_float()

    def constant(self, literal, shape=()):
        return self.pack(*[np.full(shape, self._literal(literal, key)) for key in FIELDS])

    def cast(self, a, fmt, mode=None, with_flags=False):
        """C rounded once more into ``fmt`` under ``mode`` (E unchanged)."""
        if with_flags:
            raise ValueError(f"{self.name}: enclosures carry no IEEE flags")
        a = self._as(a)
        clo, chi = self._round(a["clo"], a["chi"], formats.get(fmt), mode)
        return self.pack(clo, chi, a["elo"], a["ehi"])

    def _fixed_point_dot(self, a, b, acc):
        """Policy.fixed_point (Backend._fixed_point_dot) on enclosures, in ``acc``'s numbers:
        E the exact dot product of the E operands; C every value of the model on operands in
        C: products (exact in the model; enclosed, points where binary64 holds them), per
        block the hull of the aligned, truncated sum (_aligned_block) with the running sum
        as a term, rounded into ``acc`` (a monotone rounding: the module docstring)."""
        p = self.policy
        if 2 * self.fmt.precision > 53:
            raise ValueError(f"{self.name}: fixed_point needs products exact in binary64 "
                             f"(storage precision at most 26 bits; got {self.fmt.label})")
        a, b = np.broadcast_arrays(self._as(a), self._as(b))
        with np.errstate(all="ignore"):
            plo, phi = _product((a["clo"], a["chi"]), (b["clo"], b["chi"]))
            qlo, qhi = _product((a["elo"], a["ehi"]), (b["elo"], b["ehi"]))
            clo = chi = elo = ehi = np.zeros(a.shape[:-1])
            for j in range(a.shape[-1]):
                elo, ehi = _sum_down(elo, qlo[..., j]), _sum_up(ehi, qhi[..., j])
            for i in range(0, a.shape[-1], p.block):
                clo, chi = _aligned_block(
                    np.concatenate([clo[..., None], plo[..., i:i + p.block]], axis=-1),
                    np.concatenate([chi[..., None], phi[..., i:i + p.block]], axis=-1),
                    p.fixed_point)
                clo, chi = acc._round(clo, chi, acc.fmt)
        return self.pack(clo, chi, elo, ehi)

    def _tensor_core_dot(self, a, b, acc):
        """Policy.tensor_core (Backend._tensor_core_dot) on enclosures, in ``acc``'s numbers:
        E the exact dot product of the E operands; C every value of the unit on operands in
        C, read in its input format (binary32 as tf32: a truncation, monotone), products
        exact (points where binary64 holds them), per group the hull of the cut sum
        (_tensor_core_block) with the running result as a term, rounded into the datapath's
        output; a hull reaching the output's overflow threshold is poisoned (the unit gives
        inf there under every rounding)."""
        core = tensor_cores.tensor_core(self.policy.tensor_core)
        fin = tensor_cores.input_format(core, self.fmt)       # ValueError: not taken
        path = core.paths[fin]
        out = formats.BinaryFormat(8, 23 + min(path.extra or 0, 0), 127)
        least = float(formats.get(fin).min_normal)
        a, b = np.broadcast_arrays(self._as(a), self._as(b))
        with np.errstate(all="ignore"):
            read = [self._round(v["clo"], v["chi"], fin, "toward_zero") for v in (a, b)]
            plo, phi = _product(*read)
            mags = [np.maximum(np.abs(lo), np.abs(hi)) for lo, hi in read]
            migs = [np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
                    for lo, hi in read]
            qlo, qhi = _product((a["elo"], a["ehi"]), (b["elo"], b["ehi"]))
            clo = chi = elo = ehi = np.zeros(a.shape[:-1])
            for j in range(a.shape[-1]):
                elo, ehi = _sum_down(elo, qlo[..., j]), _sum_up(ehi, qhi[..., j])
            g = path.group
            for i in range(0, a.shape[-1], g):
                part = slice(i, i + g)
                clo, chi = _tensor_core_block(
                    clo, chi, plo[..., part], phi[..., part],
                    [_alignment(m[..., part], least) for m in mags],
                    [_alignment(m[..., part], least) for m in migs], path.extra,
                    core.alignment_floor(fin))
                over = (np.abs(clo) >= 2.0 ** 128) | (np.abs(chi) >= 2.0 ** 128)
                clo, chi = self._round(clo, chi, out, path.rounding)
                clo, chi = np.where(over, np.nan, clo), np.where(over, np.nan, chi)
        return acc.pack(clo, chi, elo, ehi)

    # ----- comparisons and predicates --------------------------------------------------------
    def _mark(self, bad) -> None:
        if np.asarray(bad).any():
            self.undecided = True

    # ----- primitives ------------------------------------------------------------------------
    def _apply(self, name, *arrays, with_flags=False):
        if with_flags:
            raise ValueError(f"{self.name}: enclosures carry no IEEE flags")
        xs = [self._as(a) for a in arrays]
        exact = name in EXACT_PRIMITIVES
        f = _EXACT[name] if exact else _ROUNDED[name]
        with np.errstate(all="ignore"):
            clo, chi = f(*[(x["clo"], x["chi"]) for x in xs])
            elo, ehi = f(*[(x["elo"], x["ehi"]) for x in xs])
            if not exact:
                if self.policy.compute != self.fmt:      # compute format, then storage
                    clo, chi = self._round(clo, chi, self.policy.compute)
                clo, chi = self._round(clo, chi, self.fmt)
        return self.pack(clo, chi, elo, ehi)

"""Exponentials, logarithms, trigonometric and hyperbolic functions (spec: "Exponentials,
logarithms, and trigonometric and hyperbolic functions"): the whole spec family."""

from __future__ import annotations

import math

import numpy as np

from ..certs import roundoff
from ..helpers import binary_elementwise, unary_elementwise
from ..samples import Domain, extremes, pick, uniform


def _exp_edges(f):
    """Inputs near exp's overflow threshold ln(max_finite), its normal and subnormal
    underflow thresholds ln(min_normal), ln(min_subnormal / 2), and 0 (where
    exp(x) - 1 loses everything): each with relative offsets down to 2**-(p+2)."""
    offsets = [s * 2.0 ** -k for k in range(1, f.precision + 3) for s in (-1, 1)]
    edges = [math.log(float(f.max_finite)), math.log(float(f.min_normal)),
             math.log(float(f.min_subnormal)) - math.log(2)]
    return [e * (1 + o) for e in edges for o in offsets] + offsets


def _guard(fn, lo=None, hi=None):
    """An mpmath oracle: NaN outside [lo, hi] (a domain error gives NaN, never complex)."""
    def oracle(ctx, x):
        if ctx.isnan(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
            return ctx.nan
        return fn(ctx, x)
    return oracle


def _one_rounding(name):
    return roundoff(0.5, statement=f"one primitive: {name} rounded once (emulated rounds the "
                                   f"exact value), within 0.5 ulp in round to nearest")


def _one_primitive(name, *, oracle=None, lo=None, hi=None,
                   certificates=("derivative", "prepared"), **more):
    """Declare the transcendental ``name``: y = the backend's primitive of the same name,
    rounded once, so its certificates end with _one_rounding(name).  The oracle is mpmath's
    function of that name (NaN outside [lo, hi] where either is given) unless ``oracle``
    says otherwise."""
    def same_name(ctx, x):
        return getattr(ctx, name)(x)

    if oracle is None:
        oracle = same_name if lo is None and hi is None else _guard(same_name, lo, hi)
    return unary_elementwise(name, "transcendental", f=lambda xp, x: getattr(xp, name)(x),
                             oracle=oracle, certificates=(*certificates, _one_rounding(name)),
                             **more)


_one_primitive(
    "exp",
    d=lambda xp, x, y, v: xp.multiply(v, y),          # d/dx e^x = e^x: reuse the output
    float64=(np.exp, lambda x, g: g * np.exp(x)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_exp_edges)),
    notes=("exp(-inf) = 0, exp(inf) = inf, exp(NaN) = NaN; the pullback g * exp(x) reuses the "
           "forward value, so prepare evaluates exp once.",),
    certificates=("derivative", "algebraic", "prepared"),
)


# ----- helpers for the blocks below (samplers and oracles: data, not rules) -----------------------
def _offsets(f):
    """Relative offsets +-2**-k, k = 1 .. p+2, of the target format."""
    return [s * 2.0 ** -k for k in range(1, f.precision + 3) for s in (-1, 1)]


def _around(points, f):
    """Each point with relative offsets (see _offsets), plus the bare offsets (near 0)."""
    offs = _offsets(f)
    return [e * (1 + o) for e in points for o in offs] + offs


def _exp2_edges(f):
    return _around([math.log2(float(f.max_finite)), math.log2(float(f.min_normal)),
                    math.log2(float(f.min_subnormal)) - 1], f)


def _expm1_edges(f):
    return _around([math.log(float(f.max_finite)), -(f.precision + 2) * math.log(2)], f)


def _log_edges(f):
    """Near 1 (where log loses everything), the format's extremes and 0."""
    return ([1 + o for o in _offsets(f)] + [float(f.max_finite), float(f.min_normal),
                                            float(f.min_subnormal), 0.0])


def _log1p_edges(f):
    """Near -1 (the pole) from above, around 0, and the largest finite value."""
    return ([-1 + 2.0 ** -k for k in range(1, f.precision + 3)] + _offsets(f) +
            [float(f.max_finite), -1.0])


def _trig_edges(f):
    """Near multiples of pi/2 (zeros and poles) and tiny arguments."""
    return _around([k * math.pi / 2 for k in range(1, 9)], f)


def _hyperbolic_edges(f):
    """Near sinh/cosh's overflow threshold ln(2 max_finite), and around 0."""
    return _around([math.log(float(f.max_finite)) + math.log(2)], f)


def _unit_edges(f):
    """Near +-1 from inside (asin, acos, atanh) and around 0."""
    inside = [s * (1 - 2.0 ** -k) for k in range(1, f.precision + 3) for s in (-1, 1)]
    return inside + _offsets(f) + [1.0, -1.0]


def _acosh_edges(f):
    return [1 + 2.0 ** -k for k in range(1, f.precision + 3)] + [1.0, float(f.max_finite)]


def _wide_edges(f):
    """Tiny and huge arguments (asinh, atan, erf)."""
    return _offsets(f) + [float(f.max_finite), -float(f.max_finite), float(f.min_subnormal),
                          6.0, -6.0]


# 2/sqrt(pi) to 40 digits, rounded once by the backend.
_TWO_OVER_SQRT_PI = "1.128379167095512573896158903121545171688"


def _times_log(xp, y, base, v):
    """v * y * ln(base): ln(base) computed by the backend."""
    return xp.multiply(v, xp.multiply(y, xp.log(xp.full_like(y, base))))


def _over_x_log(xp, x, base, v):
    """v / (x ln(base))."""
    return xp.divide(v, xp.multiply(x, xp.log(xp.full_like(x, base))))


_one_primitive(
    "exp2",
    d=lambda xp, x, y, v: _times_log(xp, y, "2", v),   # d/dx 2^x = ln2 * 2^x
    oracle=lambda ctx, x: ctx.power(2, x) if ctx.isfinite(x) else ctx.exp(x),
    float64=(np.exp2, lambda x, g: g * (np.exp2(x) * np.log(2.0))),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_exp2_edges)),
    notes=("exp2(-inf) = 0, exp2(inf) = inf, exp2(NaN) = NaN; the pullback g * exp2(x) * ln 2 "
           "reuses the forward value, ln 2 computed by the backend.",),
)

_one_primitive(
    "expm1",
    d=lambda xp, x, y, v: xp.multiply(v, xp.exp(x)),   # d/dx (e^x - 1) = e^x
    float64=(np.expm1, lambda x, g: g * np.exp(x)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_expm1_edges)),
    notes=("expm1(-inf) = -1, expm1(inf) = inf, expm1(NaN) = NaN, expm1(-0) = -0; accurate "
           "near 0 where exp(x) - 1 cancels.",),
)

_one_primitive(
    "log",
    d=lambda xp, x, y, v: xp.divide(v, x),
    lo=0,
    float64=(np.log, lambda x, g: g / x),
    domain=Domain(ordinary=uniform(0.125, 8), edges=pick(_log_edges)),
    notes=("log(+-0) = -inf (pole), log(inf) = inf; x < 0 is a domain error: NaN; "
           "log(NaN) = NaN.",),
    certificates=("derivative", "algebraic", "prepared"),
)


def _log_to_base(base):
    """Declare log2 or log10 (``base`` "2" or "10"), whose pullback divides by x ln(base)."""
    name = f"log{base}"
    _one_primitive(
        name,
        d=lambda xp, x, y, v: _over_x_log(xp, x, base, v),
        oracle=_guard(lambda ctx, x: ctx.log(x, int(base)), lo=0),
        float64=(getattr(np, name), lambda x, g: g / (x * np.log(float(base)))),
        domain=Domain(ordinary=uniform(0.125, 8), edges=pick(_log_edges)),
        notes=(f"{name}(+-0) = -inf (pole), {name}(inf) = inf; x < 0 is a domain error: NaN; "
               f"{name}(NaN) = NaN; the pullback g / (x ln {base}), ln {base} computed by the "
               "backend.",),
    )


_log_to_base("2")
_log_to_base("10")


_one_primitive(
    "log1p",
    d=lambda xp, x, y, v: xp.divide(v, xp.add(xp.ones_like(x), x)),
    lo=-1,
    float64=(np.log1p, lambda x, g: g / (1.0 + x)),
    domain=Domain(ordinary=uniform(-0.875, 8), edges=pick(_log1p_edges)),
    notes=("log1p(-1) = -inf (pole), log1p(inf) = inf, log1p(-0) = -0; x < -1 is a domain "
           "error: NaN; log1p(NaN) = NaN; accurate near 0 where log(1 + x) cancels.",),
)

_one_primitive(
    "sin",
    d=lambda xp, x, y, v: xp.multiply(v, xp.cos(x)),
    float64=(np.sin, lambda x, g: g * np.cos(x)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_trig_edges)),
    notes=("sin(+-inf) = NaN (domain error), sin(NaN) = NaN, sin(-0) = -0; the argument is "
           "reduced exactly (no pi approximation).",),
)

_one_primitive(
    "cos",
    d=lambda xp, x, y, v: xp.negative(xp.multiply(v, xp.sin(x))),
    float64=(np.cos, lambda x, g: -(g * np.sin(x))),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_trig_edges)),
    notes=("cos(+-inf) = NaN (domain error), cos(NaN) = NaN; the argument is reduced exactly "
           "(no pi approximation).",),
)

_one_primitive(
    "tan",
    d=lambda xp, x, y, v: xp.multiply(v, xp.add(xp.ones_like(y), xp.square(y))),
    float64=(np.tan, lambda x, g: g * (1.0 + np.square(np.tan(x)))),
    domain=Domain(ordinary=uniform(-1.5, 1.5), edges=pick(_trig_edges)),
    notes=("tan(+-inf) = NaN (domain error), tan(NaN) = NaN, tan(-0) = -0; the poles at odd "
           "multiples of pi/2 are never floating-point numbers, so tan is finite at every "
           "finite input; the pullback g (1 + tan(x)^2) reuses the forward value.",),
)

_one_primitive(
    "sinh",
    d=lambda xp, x, y, v: xp.multiply(v, xp.cosh(x)),
    float64=(np.sinh, lambda x, g: g * np.cosh(x)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_hyperbolic_edges)),
    notes=("sinh(+-inf) = +-inf, sinh(NaN) = NaN, sinh(-0) = -0.",),
)

_one_primitive(
    "cosh",
    d=lambda xp, x, y, v: xp.multiply(v, xp.sinh(x)),
    float64=(np.cosh, lambda x, g: g * np.sinh(x)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_hyperbolic_edges)),
    notes=("cosh(+-inf) = inf, cosh(NaN) = NaN.",),
)

_one_primitive(
    "asinh",
    d=lambda xp, x, y, v: xp.divide(v, xp.sqrt(xp.add(xp.square(x), xp.ones_like(x)))),
    float64=(np.arcsinh, lambda x, g: g / np.sqrt(np.square(x) + 1.0)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_wide_edges)),
    notes=("asinh(+-inf) = +-inf, asinh(NaN) = NaN, asinh(-0) = -0; the pullback "
           "g / sqrt(x^2 + 1) overflows x^2 to inf (gradient 0) for huge x.",),
)

_one_primitive(
    "acosh",
    d=lambda xp, x, y, v: xp.divide(v, xp.sqrt(xp.subtract(xp.square(x), xp.ones_like(x)))),
    lo=1,
    float64=(np.arccosh, lambda x, g: g / np.sqrt(np.square(x) - 1.0)),
    domain=Domain(ordinary=uniform(1.0625, 8), edges=pick(_acosh_edges)),
    notes=("acosh(1) = 0, acosh(inf) = inf; x < 1 is a domain error: NaN; acosh(NaN) = NaN; "
           "the derivative 1 / sqrt(x^2 - 1) has a pole at x = 1 (gradient inf there).",),
)

_one_primitive(
    "atanh",
    d=lambda xp, x, y, v: xp.divide(v, xp.subtract(xp.ones_like(x), xp.square(x))),
    lo=-1, hi=1,
    float64=(np.arctanh, lambda x, g: g / (1.0 - np.square(x))),
    domain=Domain(ordinary=uniform(-0.9375, 0.9375), edges=pick(_unit_edges)),
    notes=("atanh(+-1) = +-inf (poles), atanh(-0) = -0; |x| > 1 is a domain error: NaN; "
           "atanh(NaN) = NaN; the derivative 1 / (1 - x^2) has poles at +-1.",),
)

_one_primitive(
    "asin",
    d=lambda xp, x, y, v: xp.divide(v, xp.sqrt(xp.subtract(xp.ones_like(x), xp.square(x)))),
    lo=-1, hi=1,
    float64=(np.arcsin, lambda x, g: g / np.sqrt(1.0 - np.square(x))),
    domain=Domain(ordinary=uniform(-0.9375, 0.9375), edges=pick(_unit_edges)),
    needs="InverseTrig",
    notes=("asin(+-1) = +-pi/2, asin(-0) = -0; |x| > 1 is a domain error: NaN; asin(NaN) = "
           "NaN; the derivative 1 / sqrt(1 - x^2) has poles at +-1 (gradient inf there).",),
)

_one_primitive(
    "acos",
    d=lambda xp, x, y, v: xp.negative(
        xp.divide(v, xp.sqrt(xp.subtract(xp.ones_like(x), xp.square(x))))),
    lo=-1, hi=1,
    float64=(np.arccos, lambda x, g: -(g / np.sqrt(1.0 - np.square(x)))),
    domain=Domain(ordinary=uniform(-0.9375, 0.9375), edges=pick(_unit_edges)),
    needs="InverseTrig",
    notes=("acos(1) = 0, acos(-1) = pi; |x| > 1 is a domain error: NaN; acos(NaN) = NaN; the "
           "derivative -1 / sqrt(1 - x^2) has poles at +-1 (gradient -inf there).",),
)

_one_primitive(
    "atan",
    d=lambda xp, x, y, v: xp.divide(v, xp.add(xp.ones_like(x), xp.square(x))),
    float64=(np.arctan, lambda x, g: g / (1.0 + np.square(x))),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_wide_edges)),
    needs="InverseTrig",
    notes=("atan(+-inf) = +-pi/2, atan(-0) = -0, atan(NaN) = NaN; the pullback g / (1 + x^2) "
           "overflows x^2 to inf (gradient 0) for huge x.",),
)

def _atan2_kinks(x, y):
    """Near the origin (where the derivative blows up) and near the branch cut (first
    argument ~ 0, second < 0), where atan2 jumps by 2 pi."""
    return (np.hypot(x, y) < 0.25) | ((y < 0) & (np.abs(x) < 0.25))


def _atan2_edges(f):
    return [0.0, 1.0, -1.0, float(f.min_subnormal), float(f.min_normal), float(f.max_finite),
            -float(f.max_finite)]


def _atan2_special(rng, fmt, n):
    """Zeros, infinities, NaN and the extremes mixed with ordinary values; -0 is left out
    because the mpmath oracle has no signed zero (atan2(-0, x < 0) = -pi is a note)."""
    vals = np.asarray((0.0, np.inf, -np.inf, np.nan) + extremes(fmt), dtype=np.float64)
    out = []
    for x in uniform(-4, 4, 2)(rng, fmt, n):
        hit = rng.random(n) < 0.6
        out.append(np.where(hit, vals[rng.integers(0, len(vals), n)], x))
    return tuple(out)


def _atan2_oracle(ctx, x, y):
    # C99 F.10.1.4's infinite cases reduced to finite ones (mpmath 1.3, which torch's sympy
    # pins, gives NaN for atan2(+-inf, +-inf); 1.4 gives +-pi/4).
    if ctx.isnan(x) or ctx.isnan(y):
        return ctx.nan
    if ctx.isinf(x):
        return ctx.atan2(ctx.sign(x), 0 if not ctx.isinf(y) else ctx.sign(y))
    if ctx.isinf(y):
        return ctx.zero if y > 0 else (-ctx.pi if x < 0 else ctx.pi)
    return ctx.atan2(x, y)


def _atan2_r2(xp, x, y):
    return xp.add(xp.square(x), xp.square(y))


def _atan2_f64_backward(x, y, g):
    r2 = np.square(x) + np.square(y)
    return g * y / r2, -(g * x / r2)


binary_elementwise(
    "atan2", "transcendental",
    f=lambda xp, x, y: xp.atan2(x, y),
    dx=lambda xp, x, y, out, v: xp.divide(xp.multiply(v, y), _atan2_r2(xp, x, y)),
    dy=lambda xp, x, y, out, v: xp.negative(xp.divide(xp.multiply(v, x),
                                                      _atan2_r2(xp, x, y))),
    oracle=_atan2_oracle,
    float64=(np.arctan2, _atan2_f64_backward),
    domain=Domain(ordinary=uniform(-4, 4, 2), edges=pick(_atan2_edges, 2),
                  special=_atan2_special, kinks=_atan2_kinks),
    needs="InverseTrig",
    notes=("atan2(x, y) is the angle of the point (y, x): the first port is the numerator "
           "(C's atan2(y, x) order); the value lies in [-pi, pi], with the branch cut on the "
           "negative second-argument axis: atan2(+0, y < 0) = pi, atan2(-0, y < 0) = -pi; "
           "atan2(+-0, +0) = +-0, atan2(+-0, -0) = +-pi; infinities as C99 (atan2(inf, inf) = "
           "pi/4); NaN in, NaN out.  The gradient (y, -x) / (x^2 + y^2) is NaN at the origin.",),
    certificates=("prepared", _one_rounding("atan2")),
)

_one_primitive(
    "erf",
    d=lambda xp, x, y, v: xp.multiply(v, xp.multiply(xp.full_like(x, _TWO_OVER_SQRT_PI),
                                                     xp.exp(xp.negative(xp.square(x))))),
    domain=Domain(ordinary=uniform(-4, 4), edges=pick(_wide_edges)),
    needs="Erf",
    notes=("erf(+-inf) = +-1, erf(-0) = -0, erf(NaN) = NaN; the derivative "
           "2/sqrt(pi) exp(-x^2) uses 2/sqrt(pi) as a 40-digit literal rounded once by the "
           "backend; no binary64 reference (numpy has no erf, and native lacks Erf).",),
    certificates=("derivative",),
)

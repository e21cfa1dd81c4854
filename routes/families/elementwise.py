"""Elementwise arithmetic (spec: "Elementwise arithmetic"): the IEEE operations add, sub, mul,
div (with torch.div's rounding_mode), neg, abs, sqrt, rsqrt, cbrt, reciprocal, square, pow,
scale, fmod, remainder (torch's), hypot, copysign, nextafter, the fused forms lerp, addcmul,
addcdiv, fullLike, nanToNum, and the guarded forms safeDiv, safeInv, safeLog, smoothAbs.

The spec defines no formula for the guarded forms; here they are guards at a frozen eps > 0:
safeDiv(x, y) = x / max(y, eps), safeInv(x) = 1 / max(x, eps), safeLog(x) = log(max(x, eps))
(for non-negative quantities such as norms, variances, counts and probabilities that may be
0), and smoothAbs(x) = sqrt(x^2 + eps), a smooth |x|.  Operands of equal shapes
(broadcasting is its own operator); add, sub, mul, div, neg, pow and remainder also take the
element argument (scalars, Booleans or words; spec: "Ports And Element Sorts"): words compute
PyTorch's integer meaning exactly (routes.words), without gradients, and Booleans have a rule
only where PyTorch gives them one (add: or, mul: and)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..helpers import (ELEMENT, binary_elementwise, element_samplers, elementwise_oracle,
                       unary_elementwise, word_values)
from ..ports import frozen, value
from ..registry import Float64, define
from ..rules import shown, zero_tangents
from ..samples import Domain, extremes, into, special, target, uniform, unsigned_zeros

CONVENTIONS = "tests/test_routes_conventions.py"
WORDS = "tests/test_routes_word_arithmetic.py"


def _no_bool(what):
    """The reason an operator has no rule at element bool: PyTorch refuses it there."""
    return (f"element bool: PyTorch refuses {what} on Booleans (its integer meaning needs "
            f"words), so there is no rule")


def _nonzero_divisor(a, y):
    """At a word element, the message for a zero divisor y (spec: "An integer division or
    remainder fails its check at a zero divisor"), else None."""
    if a.element in ("scalar", "bool"):
        return None
    at = W.first_index(y == 0)
    return None if at is None else f"y must be a nonzero divisor (got 0 at index {at})"


def _word_divisors(rng, port):
    """Word operands x (any) and y (nonzero): inputs integer division and remainder accept."""
    return W.sample(rng, port), W.sample_nonzero(rng, port)


def _cancelling(rng, fmt, n):
    """x + y near cancellation (y = -x (1 +- 2**-k)) and near overflow (both near max)."""
    f = target(fmt)
    x = rng.uniform(-4, 4, n)
    k = rng.integers(1, f.precision + 2, n).astype(np.float64)
    y = -x * (1 + rng.choice([-1.0, 1.0], n) * np.exp2(-k))
    big = rng.random(n) < 0.3
    top = float(f.max_finite)
    return (np.where(big, top * rng.uniform(0.5, 1, n), x),
            np.where(big, top * rng.uniform(0.5, 1, n) * rng.choice([-1.0, 1.0], n), y))


binary_elementwise(
    "add", "elementwise",
    f=lambda xp, x, y: xp.add(x, y),
    dx=lambda xp, x, y, out, v: v,
    dy=lambda xp, x, y, out, v: v,
    words=W.add, word_oracle=lambda p, q: p + q,
    oracle=lambda ctx, x, y: ctx.fadd(x, y, exact=True),
    float64=(np.add, lambda x, y, g: (g, g)),
    domain=Domain(ordinary=uniform(-4, 4, 2), edges=_cancelling),
    notes=("IEEE addition: inf + -inf is NaN; the gradient passes the cotangent to both "
           "operands unchanged (an inf or NaN cotangent included).",
           "element bool: or; element int*/uint*: two's complement wrap-around; no gradient."),
    certificates=("derivative", "prepared",
                  roundoff(0.5, statement="one primitive: the sum rounded once, within 0.5 ulp "
                                          "in round to nearest")),
)


def _scaled(rng, fmt, n):
    """Products near the overflow threshold and in the subnormal range: x = s 2**i,
    y = t 2**j with i + j near emax or below emin."""
    f = target(fmt)
    i = rng.integers(f.emin, f.emax + 1, n)
    j = np.where(rng.random(n) < 0.5, f.emax - i, f.emin - f.man_bits // 2 - i)
    j = np.clip(j, f.emin, f.emax)
    sign = rng.choice([-1.0, 1.0], (2, n))
    return (sign[0] * rng.uniform(1, 2, n) * np.exp2(i.astype(np.float64)),
            sign[1] * rng.uniform(1, 2, n) * np.exp2(j.astype(np.float64)))


binary_elementwise(
    "mul", "elementwise",
    f=lambda xp, x, y: xp.multiply(x, y),
    dx=lambda xp, x, y, out, v: xp.multiply(v, y),
    dy=lambda xp, x, y, out, v: xp.multiply(x, v),
    words=W.multiply, word_oracle=lambda p, q: p * q,
    oracle=lambda ctx, x, y: ctx.fmul(x, y, exact=True),
    float64=(np.multiply, lambda x, y, g: (g * y, x * g)),
    domain=Domain(ordinary=uniform(-4, 4, 2), edges=_scaled),
    notes=("IEEE multiplication: 0 * inf is NaN, and so is its gradient 0 * g where the other "
           "operand is inf (the product rule is multiplied out, not selected).",
           "element bool: and; element int*/uint*: the low word of the product; no gradient."),
    certificates=("derivative", "prepared",
                  roundoff(0.5, statement="one primitive: the product rounded once, within "
                                          "0.5 ulp in round to nearest")),
)


binary_elementwise(
    "sub", "elementwise",
    f=lambda xp, x, y: xp.subtract(x, y),
    dx=lambda xp, x, y, out, v: v,
    dy=lambda xp, x, y, out, v: xp.negative(v),
    words=W.subtract, word_oracle=lambda p, q: p - q, bool_reason=_no_bool("subtraction"),
    oracle=lambda ctx, x, y: ctx.fsub(x, y, exact=True),
    float64=(np.subtract, lambda x, y, g: (g, -g)),
    domain=Domain(ordinary=uniform(-4, 4, 2),
                  edges=lambda rng, fmt, n: (lambda x, y: (x, -y))(*_cancelling(rng, fmt, n))),
    notes=("IEEE subtraction: inf - inf is NaN; the gradient passes the cotangent to x and its "
           "negation to y (an inf or NaN cotangent included).",
           "element int*/uint*: two's complement wrap-around (0 - 1 is 255 in uint8); no "
           "gradient.  element bool: no rule (PyTorch refuses - on Booleans; xor is "
           "logicalXor)."),
    certificates=("derivative", "prepared",
                  convention(f"{WORDS}::test_sub_and_neg_wrap_around",
                             "words: the difference modulo 2**width; Booleans: no rule",
                             route="forward"),
                  roundoff(0.5, statement="one primitive: the difference rounded once, within "
                                          "0.5 ulp in round to nearest")),
)


unary_elementwise(
    "neg", "elementwise",
    f=lambda xp, x: xp.negative(x),
    d=lambda xp, x, y, v: xp.negative(v),
    oracle=lambda ctx, x: -x,
    words=W.negative, word_oracle=lambda p: -p, bool_reason=_no_bool("negation"),
    float64=(np.negative, lambda x, g: -g),
    domain=Domain(ordinary=uniform(-4, 4), special=special(uniform(-4, 4))),
    notes=("neg flips the sign bit: neg(+0) = -0, neg(NaN) is NaN; the gradient is -g.",
           "element int*/uint*: two's complement wrap-around (neg(-128) is -128 in int8, "
           "neg(1) is 255 in uint8); no gradient.  element bool: no rule (PyTorch refuses "
           "- on Booleans; logicalNot inverts a mask)."),
    certificates=("derivative", "prepared",
                  convention(f"{WORDS}::test_sub_and_neg_wrap_around",
                             "words: the negation modulo 2**width; Booleans: no rule",
                             route="forward"),
                  roundoff(0, statement="exact: a sign flip")),
)


def _abs_d(xp, x, y, v):
    """sign(x) v by selection: v where x > 0, -v where x < 0, 0 at +-0 and at NaN."""
    return xp.where(xp.greater(x, xp.zeros_like(x)), v,
                    xp.where(xp.less(x, xp.zeros_like(x)), xp.negative(v), xp.zeros_like(v)))


unary_elementwise(
    "abs", "elementwise",
    f=lambda xp, x: xp.abs(x),
    d=_abs_d,
    oracle=lambda ctx, x: abs(x),
    float64=(np.abs, lambda x, g: np.where(x > 0, g, np.where(x < 0, -g, 0.0))),
    domain=Domain(ordinary=uniform(-4, 4), special=special(uniform(-4, 4)),
                  kinks=lambda x: np.abs(x) < 2.0 ** -20),
    notes=("abs clears the sign bit: abs(-0) = +0, abs(-inf) = inf, abs(NaN) is NaN.",
           "Subgradient at 0: 0 (sign(0) = 0, as PyTorch), selected, not multiplied: an "
           "infinite cotangent at +-0 gives 0.  NaN x gets 0 as well (selection fails both "
           "comparisons)."),
    certificates=("derivative", "algebraic", "prepared",
                  convention(f"{CONVENTIONS}::test_abs_subgradient_at_zero_is_zero",
                             "x = +-0 receives a zero gradient (sign(0) = 0)"),
                  roundoff(0, statement="exact: a sign change")),
)


unary_elementwise(
    "square", "elementwise",
    f=lambda xp, x: xp.square(x),
    d=lambda xp, x, y, v: xp.multiply(xp.multiply(v, x), xp.full_like(v, "2")),
    oracle=lambda ctx, x: ctx.fmul(x, x, exact=True),
    float64=(np.square, lambda x, g: g * x * 2),
    domain=Domain(ordinary=uniform(-4, 4), special=special(uniform(-4, 4))),
    notes=("square(x) = x * x rounded once; the gradient is (g x) 2 (the doubling exact "
           "unless it overflows).",),
    certificates=("derivative", "prepared",
                  roundoff(0.5, statement="one primitive: x*x rounded once, within 0.5 ulp in "
                                          "round to nearest")),
)


unary_elementwise(
    "reciprocal", "elementwise",
    f=lambda xp, x: xp.reciprocal(x),
    d=lambda xp, x, y, v: xp.negative(xp.multiply(v, xp.square(y))),
    oracle=lambda ctx, x: ctx.fdiv(1, x) if x else ctx.inf,
    float64=(np.reciprocal, lambda x, g: -(g * np.square(1 / x))),
    domain=Domain(ordinary=uniform(0.25, 4), special=unsigned_zeros(special(uniform(-4, 4)))),
    notes=("reciprocal(x) = 1 / x rounded once: 1/+0 = inf, 1/-0 = -inf, 1/inf = 0; the "
           "gradient -g y^2 reuses the output.",),
    certificates=("derivative", "algebraic", "prepared",
                  roundoff(0.5, statement="one primitive: 1/x rounded once, within 0.5 ulp in "
                                          "round to nearest")),
)


def _sqrt_d(xp, a, x, y, v):
    """g / (2 sqrt x) = (g 0.5) / y; at clampNegative 0 where x <= 0 (the clamp is flat below
    0; at 0 the one-sided derivative is taken as the flat side's), the denominator replaced by
    1 there so that no branch divides by zero."""
    half = xp.multiply(v, xp.full_like(v, "0.5"))
    if a.mode == "raw":
        return xp.divide(half, y)
    pos = xp.greater(x, xp.zeros_like(x))
    return xp.where(pos, xp.divide(half, xp.where(pos, y, xp.ones_like(y))), xp.zeros_like(v))


def _sqrt_f64(a, x):
    return np.sqrt(x) if a.mode == "raw" else np.sqrt(np.where(x < 0, 0.0, x))


def _sqrt_f64_bwd(a, xs, gs):
    x, g = xs[0], gs[0]
    if a.mode == "raw":
        return (g * 0.5 / np.sqrt(x),)
    return (np.where(x > 0, g * 0.5 / np.sqrt(np.where(x > 0, x, 1.0)), 0.0),)


def _sqrt_oracle(ctx, a, x):
    if a.mode == "raw":
        return elementwise_oracle(lambda c, v: c.sqrt(v) if v >= 0 else c.nan)(ctx, a, x)
    return elementwise_oracle(lambda c, v: v if c.isnan(v) else c.sqrt(max(v, 0)))(ctx, a, x)


define(
    "sqrt", "elementwise",
    attributes=(A.shape(), A.choice("mode", ("raw", "clampNegative"),
                                    doc="raw: the IEEE square root (NaN below 0); "
                                        "clampNegative: the root of max(x, 0)")),
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: xp.sqrt(x) if a.mode == "raw" else xp.sqrt(
        xp.where(xp.less(x, xp.zeros_like(x)), xp.zeros_like(x), x)),
    backward=lambda xp, a, xs, ys, gs, needs: (_sqrt_d(xp, a, xs[0], ys[0], gs[0]),),
    jvp=lambda xp, a, xs, ys, ts: _sqrt_d(xp, a, xs[0], ys[0], ts[0]),
    samples=Domain(ordinary=uniform(0.25, 4), special=special(uniform(-4, 4))).samplers(),
    oracle=_sqrt_oracle,
    float64=Float64(_sqrt_f64, _sqrt_f64_bwd),
    examples={"": {}, "2x3": {"shape": (2, 3)}, "clampNegative": {"mode": "clampNegative"}},
    notes=("mode raw (the default): the IEEE square root, sqrt(-0) = -0, NaN below 0; "
           "gradient g / (2 y), infinite at 0.",
           "mode clampNegative: sqrt(max(x, 0)) (NaN stays NaN, -0 gives +0 or -0 as the "
           "backend's sqrt); gradient 0 where x <= 0 or NaN (the flat side at 0), "
           "g / (2 y) above."),
    certificates=("derivative", "algebraic", "prepared",
                  convention(f"{CONVENTIONS}::test_sqrt_clamp_negative_gradient_is_zero_at_and_below_zero",
                             "at clampNegative x <= 0 receives a zero gradient"),
                  roundoff(0.5, statement="one primitive: sqrt rounded once (the clamp is "
                                          "exact), within 0.5 ulp in round to nearest")),
)


unary_elementwise(
    "rsqrt", "elementwise",
    f=lambda xp, x: xp.rsqrt(x),
    d=lambda xp, x, y, v: xp.negative(xp.divide(xp.multiply(xp.multiply(
        v, xp.full_like(v, "0.5")), y), x)),
    oracle=lambda ctx, x: (1 / ctx.sqrt(x) if x > 0 else ctx.inf if x == 0 else ctx.nan),
    float64=(lambda x: 1 / np.sqrt(x), lambda x, g: -(g * 0.5 * (1 / np.sqrt(x)) / x)),
    domain=Domain(ordinary=uniform(0.25, 4), special=unsigned_zeros(special(uniform(0.25, 4)))),
    notes=("rsqrt(x) = 1 / sqrt(x) rounded once: rsqrt(+0) = inf, NaN below 0, "
           "rsqrt(inf) = 0; gradient -(g/2) y / x reuses the output.",),
    certificates=("derivative", "prepared",
                  roundoff(0.5, statement="one primitive: rsqrt rounded once, within 0.5 ulp "
                                          "in round to nearest")),
)


unary_elementwise(
    "cbrt", "elementwise",
    f=lambda xp, x: xp.cbrt(x),
    d=lambda xp, x, y, v: xp.divide(v, xp.multiply(xp.square(y), xp.full_like(y, "3"))),
    oracle=lambda ctx, x: ctx.cbrt(x) if x >= 0 else -ctx.cbrt(-x),
    float64=(np.cbrt, lambda x, g: g / (np.square(np.cbrt(x)) * 3)),
    domain=Domain(ordinary=uniform(-4, 4), special=special(uniform(-4, 4)),
                  kinks=lambda x: np.abs(x) < 2.0 ** -10),
    needs="Cbrt",
    notes=("cbrt is the real cube root, odd: cbrt(-8) = -2, cbrt(+-0) = +-0, cbrt(+-inf) = "
           "+-inf; gradient g / (3 y^2), infinite at 0.",),
    certificates=("prepared",
                  roundoff(0.5, statement="one primitive: cbrt rounded once, within 0.5 ulp "
                                          "in round to nearest")),
)


def _div_forward(xp, a, x, y):
    if a.element != "scalar":
        return W.divide(x, y, W.element_port(a.element, a.shape), a.rounding_mode)
    q = xp.divide(x, y)
    if a.rounding_mode == "none":
        return q
    # Round only finite quotients (inf and NaN are their own trunc/floor; some backends'
    # integer rounding refuses them).
    fin = xp.isfinite(q)
    return xp.where(fin, getattr(xp, a.rounding_mode)(xp.where(fin, q, xp.zeros_like(q))), q)


def _div_d(xp, a, x, y, out, tx, ty):
    """(tx - out ty) / y at rounding_mode none (either tangent may be None); 0 at the rounded
    modes (piecewise constant)."""
    ref = tx if tx is not None else ty
    if a.rounding_mode != "none":
        return xp.zeros_like(ref)
    gx = None if tx is None else xp.divide(tx, y)
    gy = None if ty is None else xp.negative(xp.divide(xp.multiply(ty, out), y))
    return gx if gy is None else gy if gx is None else xp.add(gx, gy)


def _div_f64(a, x, y):
    q = x / y
    return q if a.rounding_mode == "none" else getattr(np, a.rounding_mode)(q)


def _div_f64_bwd(a, xs, gs):
    (x, y), g = xs, gs[0]
    if a.rounding_mode != "none":
        return np.zeros_like(g), np.zeros_like(g)
    return g / y, -(g * (x / y)) / y


def _trunc_div(p, q):
    """The quotient of Python ints rounded toward zero: |p| // |q| with the sign of p q."""
    n = abs(p) // abs(q)
    return n if (p < 0) == (q < 0) else -n


def _div_oracle(ctx, a, x, y):
    if a.element != "scalar":
        f = _trunc_div if a.rounding_mode == "trunc" else lambda p, q: p // q
        return (word_values(f, W.element_port(a.element, a.shape), x, y),)

    def one(p, q):
        if ctx.isnan(p) or ctx.isnan(q):
            return ctx.nan
        if q == 0:
            return ctx.nan if p == 0 else ctx.inf if p > 0 else -ctx.inf
        v = ctx.fdiv(p, q)
        if a.rounding_mode == "trunc" and ctx.isfinite(v):
            return ctx.floor(v) if v >= 0 else ctx.ceil(v)
        if a.rounding_mode == "floor" and ctx.isfinite(v):
            return ctx.floor(v)
        return v
    return (np.asarray(np.frompyfunc(one, 2, 1)(x, y), dtype=object),)


def _div_ports(a):
    p = W.element_port(a.element, a.shape)
    return {"x": p, "y": p}, {"out": p}


def _div_no_rule(a):
    """Booleans, and words at rounding_mode none (spec: "an integer true division (div
    .none) has no rule")."""
    if a.element == "bool":
        return _no_bool("division")
    if a.element != "scalar" and a.rounding_mode == "none":
        return ("integer true division (rounding_mode none): PyTorch promotes integer "
                "operands to a floating type, so the quotient is not a word; the spec gives "
                "it no rule (rounding_mode trunc or floor divides words)")
    return None


define(
    "div", "elementwise",
    attributes=(A.shape(), A.choice("rounding_mode", ("none", "trunc", "floor"),
                                    doc="torch.div's rounding_mode"), ELEMENT),
    ports=_div_ports,
    forward=_div_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _div_d(xp, a, xs[0], xs[1], ys[0], gs[0], None) if needs[0] else None,
        _div_d(xp, a, xs[0], xs[1], ys[0], None, gs[0]) if needs[1] else None),
    jvp=lambda xp, a, xs, ys, ts: _div_d(xp, a, xs[0], xs[1], ys[0], ts[0], ts[1]),
    needs=lambda a: "Rounding" if a.rounding_mode != "none" and a.element == "scalar" else None,
    no_rule=_div_no_rule,
    validate=lambda xp, a, x, y: _nonzero_divisor(a, y),
    samples=element_samplers(Domain(ordinary=lambda rng, fmt, n: (rng.uniform(-4, 4, n),
                                                                   rng.choice([-1.0, 1.0], n)
                                                                   * rng.uniform(0.25, 4, n)),
                                    special=unsigned_zeros(special(uniform(-4, 4, 2), 2)))
                             .samplers(), _word_divisors),
    oracle=_div_oracle,
    float64=Float64(_div_f64, _div_f64_bwd),
    examples={"": {}, "2x3": {"shape": (2, 3)}, "trunc": {"rounding_mode": "trunc"},
              "floor": {"rounding_mode": "floor"},
              "int8-trunc": {"element": "int8", "rounding_mode": "trunc"},
              "int8-floor": {"element": "int8", "rounding_mode": "floor"},
              "uint64-trunc": {"element": "uint64", "rounding_mode": "trunc"},
              "int64-floor": {"element": "int64", "rounding_mode": "floor"}},
    bad_inputs=(({"element": "int8", "rounding_mode": "trunc"},
                  (np.array([1, 2, 3], np.int8), np.array([1, 0, 2], np.int8)),
                  "div: y must be a nonzero divisor (got 0 at index [1])"),),
    notes=("rounding_mode none: IEEE division rounded once (x/0 = +-inf, 0/0 NaN); gradient "
           "(g/y, -(g out)/y) reusing the output.",
           "rounding_mode trunc / floor: trunc / floor of the rounded quotient (as torch.div "
           "for floats at trunc); the derivative is 0 (piecewise constant; the jumps are not "
           "differentiated).",
           "element int*/uint*: trunc is C's / (toward zero), floor Python's //, exact on the "
           "words; validate refuses a zero divisor; no gradient.  least // -1 = 2**(w-1) "
           "wraps to the least word (-128 in int8), as PyTorch's CPU kernels give for int8 "
           "and int16 (int32 and int64 trap with SIGFPE there, pytorch#127804).  "
           "rounding_mode none has no rule at words (integer true division), nor has "
           "element bool (PyTorch refuses it)."),
    certificates=("derivative", "algebraic", "prepared",
                  convention(f"{WORDS}::test_integer_div_is_exact_and_refuses_zero",
                             "words: trunc toward zero, floor as Python's //, least // -1 "
                             "wraps, a zero divisor refused; true division has no rule",
                             route="forward"),
                  roundoff(0.5, statement="none: one primitive, within 0.5 ulp in round to "
                                          "nearest")),
)


def _hypot_d(xp, x, out, v):
    """(x / out) v, 0 where out = 0 (the origin: a zero subgradient, as PyTorch's masked
    fill); the denominator replaced there so that no branch divides by zero."""
    pos = xp.greater(out, xp.zeros_like(out))
    return xp.where(pos, xp.multiply(v, xp.divide(x, xp.where(pos, out, xp.ones_like(out)))),
                    xp.zeros_like(v))


def _hypot_f64(x, y, g):
    out = np.hypot(x, y)
    pos = out > 0
    safe = np.where(pos, out, 1.0)
    return np.where(pos, g * (x / safe), 0.0), np.where(pos, g * (y / safe), 0.0)


binary_elementwise(
    "hypot", "elementwise",
    f=lambda xp, x, y: xp.hypot(x, y),
    dx=lambda xp, x, y, out, v: _hypot_d(xp, x, out, v),
    dy=lambda xp, x, y, out, v: _hypot_d(xp, y, out, v),
    oracle=lambda ctx, x, y: (ctx.inf if ctx.isinf(x) or ctx.isinf(y) else
                              ctx.nan if ctx.isnan(x) or ctx.isnan(y) else ctx.hypot(x, y)),
    float64=(np.hypot, _hypot_f64),
    domain=Domain(ordinary=uniform(-4, 4, 2), edges=_scaled,
                  kinks=lambda x, y: (np.abs(x) < 2.0 ** -20) & (np.abs(y) < 2.0 ** -20)),
    notes=("hypot(x, y) = sqrt(x^2 + y^2) without intermediate overflow or underflow; an "
           "infinite operand gives inf even against a NaN (IEEE, C).",
           "Gradient (x/out, y/out) g; at the origin (out = 0) the subgradient 0 (as "
           "PyTorch)."),
    certificates=("prepared",
                  convention(f"{CONVENTIONS}::test_hypot_gradient_at_the_origin_is_zero",
                             "at x = y = 0 both operands receive a zero gradient"),
                  roundoff(1, statement="hypot rounded once by the backend (correctly rounded "
                                        "where emulated), within 1 ulp")),
)


def _copysign_dx(xp, x, out, v):
    """d/dx copysign(x, y) = sign(x) sign(y): v where x and out have the same strict sign, -v
    where opposite, 0 at x = +-0 and NaN (as abs's subgradient)."""
    zx, zo = xp.zeros_like(x), xp.zeros_like(out)
    same = (xp.greater(x, zx) & xp.greater(out, zo)) | (xp.less(x, zx) & xp.less(out, zo))
    flip = (xp.greater(x, zx) & xp.less(out, zo)) | (xp.less(x, zx) & xp.greater(out, zo))
    return xp.where(same, v, xp.where(flip, xp.negative(v), xp.zeros_like(v)))


def _copysign_f64(x, y, g):
    out = np.copysign(x, y)
    same = ((x > 0) & (out > 0)) | ((x < 0) & (out < 0))
    flip = ((x > 0) & (out < 0)) | ((x < 0) & (out > 0))
    return np.where(same, g, np.where(flip, -g, 0.0)), np.zeros_like(g)


binary_elementwise(
    "copysign", "elementwise",
    f=lambda xp, x, y: xp.copysign(x, y),
    dx=lambda xp, x, y, out, v: _copysign_dx(xp, x, out, v),
    dy=lambda xp, x, y, out, v: xp.zeros_like(v),
    oracle=lambda ctx, x, y: x if ctx.isnan(x) else (abs(x) if y >= 0 else -abs(x)),
    float64=(np.copysign, _copysign_f64),
    # y's sign bit must be visible to the mpmath oracle: no NaN or -0 y in the samples.
    domain=Domain(ordinary=uniform(-4, 4, 2),
                  special=lambda rng, fmt, n: (special(uniform(-4, 4))(rng, fmt, n)[0],
                                               rng.choice([-1.0, 1.0], n)
                                               * rng.uniform(0.25, 4, n)),
                  kinks=lambda x, y: (np.abs(x) < 2.0 ** -20) | (np.abs(y) < 2.0 ** -20)),
    notes=("copysign(x, y): the magnitude of x with the sign bit of y (-0 and a NaN's sign bit "
           "count; the oracle's samples avoid NaN and -0 y, whose sign mpmath cannot see).",
           "Gradient: sign(x) sign(y) g to x (0 at x = +-0, as abs), 0 to y (piecewise "
           "constant in y)."),
    certificates=("prepared",
                  convention(f"{CONVENTIONS}::test_copysign_gradient",
                             "x = +-0 receives 0; y receives 0"),
                  roundoff(0, statement="exact: a sign-bit operation")),
)


def _lerp_sampler(kind):
    """x, y uniform (NaN/inf among them for ``special``), the frozen weight in [-0.5, 1.5]
    (0 and 1 at ``edges``)."""
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        x, y = into(rng.uniform(-4, 4, n), fmt), into(rng.uniform(-4, 4, n), fmt)
        w = into(rng.choice([0.0, 1.0, 0.5]) if kind == "edges" else rng.uniform(-0.5, 1.5), fmt)
        if kind == "special":
            specials = into([np.nan, np.inf, -np.inf, 0.0, -0.0], fmt)
            x = np.where(rng.random(n) < 0.4, specials[rng.integers(0, 5, n)], x)
        return (x.reshape(op.attrs.shape), y.reshape(op.attrs.shape), np.asarray(w))
    return sampler


def _lerp_oracle(ctx, a, x, y, w):
    wv = w[()]
    return (np.asarray(np.frompyfunc(lambda p, q: p + wv * (q - p), 2, 1)(x, y),
                       dtype=object),)


define(
    "lerp", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "y": value(a.shape), "weight": frozen()},
                     {"out": value(a.shape)}),
    forward=lambda xp, a, x, y, w: xp.add(x, xp.multiply(w, xp.subtract(y, x))),
    backward=lambda xp, a, xs, ys, gs, needs: (
        xp.subtract(gs[0], xp.multiply(gs[0], xs[2])) if needs[0] else None,
        xp.multiply(gs[0], xs[2]) if needs[1] else None, None),
    jvp=lambda xp, a, xs, ys, ts: xp.add(ts[0], xp.multiply(xs[2], xp.subtract(ts[1], ts[0]))),
    samples={k: _lerp_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_lerp_oracle,
    float64=Float64(lambda a, x, y, w: x + w * (y - x),
                    lambda a, xs, gs: (gs[0] - gs[0] * xs[2], gs[0] * xs[2], None)),
    examples={"": {}, "rank0": {"shape": ()}, "2x3": {"shape": (2, 3)}},
    notes=("lerp(x, y, weight) = x + weight (y - x), the weight a frozen scalar port (no "
           "gradient); x = y gives x exactly; infinite operands give NaN where y - x is "
           "inf - inf.",
           "Gradient: (g - g weight, g weight) to (x, y)."),
    certificates=("prepared",),
)


def _addc_sampler(kind, divide):
    """x, t1, t2 uniform (t2 away from 0 for addcdiv), the frozen value in [-2, 2]."""
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        x, t1 = into(rng.uniform(-4, 4, n), fmt), into(rng.uniform(-4, 4, n), fmt)
        t2 = (rng.choice([-1.0, 1.0], n) * rng.uniform(0.25, 4, n) if divide
              else rng.uniform(-4, 4, n))
        t2 = into(t2, fmt)
        c = into(rng.choice([0.0, 1.0, -1.0]) if kind == "edges" else rng.uniform(-2, 2), fmt)
        if kind == "special":
            specials = into([np.nan, np.inf, -np.inf, 0.0, -0.0], fmt)
            x = np.where(rng.random(n) < 0.4, specials[rng.integers(0, 5, n)], x)
        s = op.attrs.shape
        return x.reshape(s), t1.reshape(s), t2.reshape(s), np.asarray(c)
    return sampler


def _addc(name, divide):
    comb = "divide" if divide else "multiply"

    def forward(xp, a, x, t1, t2, c):
        return xp.add(x, xp.multiply(c, getattr(xp, comb)(t1, t2)))

    def parts(xp, x, t1, t2, c, out, v):
        """The partial maps applied to v: (v, c v t2 or c v / t2, c v t1 or -c v t1 / t2^2)."""
        cv = xp.multiply(c, v)
        if divide:
            return (v, xp.divide(cv, t2),
                    xp.negative(xp.divide(xp.divide(xp.multiply(cv, t1), t2), t2)))
        return v, xp.multiply(cv, t2), xp.multiply(cv, t1)

    def backward(xp, a, xs, ys, gs, needs):
        p = parts(xp, *xs, ys[0], gs[0])
        return tuple(p[i] if needs[i] else None for i in range(3)) + (None,)

    def jvp(xp, a, xs, ys, ts):
        x, t1, t2, c = xs
        out = xp.add(ts[0], xp.multiply(c, (xp.divide(ts[1], t2) if divide
                                            else xp.multiply(ts[1], t2))))
        last = (xp.negative(xp.divide(xp.divide(xp.multiply(xp.multiply(c, ts[2]), t1), t2),
                                      t2)) if divide else xp.multiply(xp.multiply(c, ts[2]), t1))
        return xp.add(out, last)

    def f64(a, x, t1, t2, c):
        return x + c * (t1 / t2 if divide else t1 * t2)

    def f64_bwd(a, xs, gs):
        x, t1, t2, c = xs
        g = gs[0]
        cv = c * g
        if divide:
            return g, cv / t2, -(((cv * t1) / t2) / t2), None
        return g, cv * t2, cv * t1, None

    def oracle(ctx, a, x, t1, t2, c):
        cv = c[()]
        fn = (lambda p, q, r: p + cv * (q / r)) if divide else (lambda p, q, r: p + cv * (q * r))
        return (np.asarray(np.frompyfunc(fn, 3, 1)(x, t1, t2), dtype=object),)

    op = "t1 / t2" if divide else "t1 * t2"
    define(
        name, "elementwise",
        attributes=(A.shape(),),
        ports=lambda a: ({"x": value(a.shape), "t1": value(a.shape), "t2": value(a.shape),
                          "value": frozen()}, {"out": value(a.shape)}),
        forward=forward, backward=backward, jvp=jvp,
        samples={k: _addc_sampler(k, divide) for k in ("ordinary", "edges", "special")},
        oracle=oracle,
        float64=Float64(f64, f64_bwd),
        examples={"": {}, "rank0": {"shape": ()}, "2x3": {"shape": (2, 3)}},
        notes=(f"{name}(x, t1, t2, value) = x + value ({op}) as torch.{name}, value a frozen "
               "scalar port (no gradient); each step rounded once.",),
        certificates=("prepared",),
    )


_addc("addcmul", divide=False)
_addc("addcdiv", divide=True)


def _full_like_sampler(kind):
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        x = into(rng.uniform(-4, 4, n), fmt)
        c = into(rng.choice([0.0, -0.0, 1.0]) if kind == "edges" else rng.uniform(-4, 4), fmt)
        if kind == "special":
            c = into(rng.choice([np.nan, np.inf, -np.inf, 0.0]), fmt)
        return x.reshape(op.attrs.shape), np.asarray(c)
    return sampler


define(
    "fullLike", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "value": frozen()}, {"out": value(a.shape)}),
    # Selection, not arithmetic: a -0 value stays -0 (0 + -0 would give +0).
    forward=lambda xp, a, x, c: xp.where(np.ones(np.shape(x), bool), c, x),
    backward=lambda xp, a, xs, ys, gs, needs: (xp.zeros_like(gs[0]) if needs[0] else None,
                                               None),
    jvp=lambda xp, a, xs, ys, ts: xp.zeros_like(ts[0]),
    samples={k: _full_like_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, x, c: (np.asarray(np.frompyfunc(lambda v: c[()], 1, 1)(x),
                                            dtype=object),),
    float64=Float64(lambda a, x, c: np.full_like(x, c),
                    lambda a, xs, gs: (np.zeros_like(gs[0]), None)),
    examples={"": {}, "rank0": {"shape": ()}, "2x3": {"shape": (2, 3)}},
    notes=("fullLike(x, value): x's shape filled with the frozen scalar value (NaN and inf "
           "included); x's values are not read, so its gradient is 0.",),
    certificates=("prepared",),
)


# ----- pow, scale, fmod, remainder, nextafter ---------------------------------------------------
def _c_pow(x, y):
    """C's pow (C11 F.10.4.4) on two Python floats through the platform's libm (math.pow),
    with the special cases math.pow reports as exceptions: the independent binary64 oracle."""
    odd = math.isfinite(y) and y == int(y) and int(y) % 2 == 1
    try:
        return math.pow(x, y)
    except ValueError:                       # 0 ** negative, or negative ** non-integer
        if x == 0:
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan
    except OverflowError:
        return -math.inf if x < 0 and odd else math.inf


def _pow_oracle(ctx, x, y):
    """pow in mpmath with C's special cases (a signed zero cannot reach it: the samples hold
    +0 only)."""
    if y == 0 or x == 1:
        return ctx.mpf(1)
    if ctx.isnan(x) or ctx.isnan(y):
        return ctx.nan
    integral = ctx.isfinite(y) and y == ctx.floor(y)
    odd = integral and ctx.floor(y) % 2 == 1
    if ctx.isinf(y):
        if x == -1:
            return ctx.mpf(1)
        return ctx.inf if (abs(x) > 1) == (y > 0) else ctx.mpf(0)
    if x == 0:
        return ctx.inf if y < 0 else ctx.mpf(0)
    if ctx.isinf(x):
        mag = ctx.inf if y > 0 else ctx.mpf(0)
        return -mag if x < 0 and odd else mag
    if x < 0:
        if not integral:
            return ctx.nan
        return -ctx.power(-x, y) if odd else ctx.power(-x, y)
    return ctx.power(x, y)


def _pow_dx(xp, x, y, out, v):
    """y x^(y-1) v, 0 where y = 0 (the constant x^0 = 1; PyTorch's masking)."""
    zero = xp.equal(y, xp.zeros_like(y))
    # The exponent y - 1 replaced by 1 where y = 0 (masked anyway): no 0^-1 evaluated there.
    power = xp.where(zero, xp.ones_like(y), xp.subtract(y, xp.ones_like(y)))
    d = xp.multiply(xp.multiply(v, y), xp.pow(x, power))
    return xp.where(zero, xp.zeros_like(v), d)


def _pow_dy(xp, x, y, out, v):
    """out log(x) v, 0 where x = 0 and y >= 0 (PyTorch's masking: 0^y is flat in y there);
    NaN for x < 0 (log of a negative number)."""
    flat = xp.equal(x, xp.zeros_like(x)) & xp.greater_equal(y, xp.zeros_like(y))
    safe = xp.where(flat, xp.ones_like(x), x)
    return xp.where(flat, xp.zeros_like(v), xp.multiply(xp.multiply(v, out), xp.log(safe)))


def _pow_f64_bwd(x, y, g):
    with np.errstate(all="ignore"):
        gx = np.where(y == 0, 0.0, g * y * np.frompyfunc(_c_pow, 2, 1)(x, y - 1).astype(float))
        flat = (x == 0) & (y >= 0)
        out = np.frompyfunc(_c_pow, 2, 1)(x, y).astype(float)
        gy = np.where(flat, 0.0, g * out * np.log(np.where(flat, 1.0, x)))
    return gx, gy


def _pow_edges(rng, fmt, n):
    """Negative bases with integer exponents, bases near 1 with large exponents (overflow and
    underflow thresholds), zero bases."""
    f = target(fmt)
    x = rng.choice([-1.0, 1.0], n) * rng.uniform(0.5, 4, n)
    y = rng.integers(-6, 7, n).astype(np.float64)
    big = rng.random(n) < 0.4
    x = np.where(big, rng.uniform(1.5, 4, n), x)
    y = np.where(big, rng.choice([-1.0, 1.0], n) * f.emax / np.log2(np.where(big, x, 2.0))
                 * rng.uniform(0.9, 1.1, n), y)
    zero = rng.random(n) < 0.15
    return np.where(zero, 0.0, x), np.where(zero, rng.choice([-2.0, -1.0, 0.5, 3.0], n), y)


def _non_negative_exponent(a, y):
    """At a word element, the message for a negative exponent y, else None."""
    if a.element in ("scalar", "bool"):
        return None
    at = W.first_index(y < 0)
    if at is None:
        return None
    return (f"y must be a non-negative exponent: integers to negative integer powers are not "
            f"allowed (got {y[tuple(at)]} at index {at})")


binary_elementwise(
    "pow", "elementwise",
    f=lambda xp, x, y: xp.pow(x, y),
    dx=_pow_dx, dy=_pow_dy,
    # Python's three-argument pow: exact modulo 2**64, a multiple of every width.
    words=W.power, word_oracle=lambda p, q: pow(p, q, 1 << 64),
    word_draw=lambda rng, port: (W.sample(rng, port), W.sample_exponents(rng, port)),
    bool_reason=_no_bool("pow"),
    validate=lambda xp, a, x, y: _non_negative_exponent(a, y),
    bad_inputs=(({"shape": (2,), "element": "int8"},
                 (np.array([2, 3], np.int8), np.array([1, -2], np.int8)),
                 "pow: y must be a non-negative exponent: integers to negative integer powers "
                 "are not allowed (got -2 at index [1])"),),
    oracle=_pow_oracle,
    # numpy's float64 power and the platform's libm pow are both faithful, not correctly
    # rounded: they differ by 1 ulp at some inputs (3.39351122 ** 1.9518253 on x86-64).
    float64=(np.frompyfunc(_c_pow, 2, 1), _pow_f64_bwd, 1),
    domain=Domain(ordinary=lambda rng, fmt, n: (rng.uniform(0.25, 4, n),
                                                 rng.uniform(-3, 3, n)),
                  edges=_pow_edges,
                  special=unsigned_zeros(special(uniform(-4, 4, 2), 2))),
    notes=("pow(x, y) is C's pow rounded once: pow(x, +-0) = 1 and pow(1, y) = 1 even for a "
           "NaN operand; a negative base needs an integral exponent (else NaN); pow(-0, y) "
           "for odd integral y < 0 is -inf (IEEE 754 pown/pow special cases).",
           "Gradient as PyTorch: y x^(y-1) g to x (0 where y = 0), x^y log(x) g to y (0 where "
           "x = 0 and y >= 0; NaN for x < 0, where x^y is not differentiable in y).",
           "element int*/uint*: torch.pow's integer kernel, x^y modulo 2**width (square and "
           "multiply with wrapping products; 0^0 = 1); no gradient.  validate refuses a "
           "negative exponent, as torch.pow does with a scalar exponent (\"Integers to "
           "negative integer powers are not allowed\"; its tensor-exponent kernel returns "
           "0 or +-1 instead).  element bool: no rule (PyTorch has no Boolean pow)."),
    certificates=("prepared",
                  convention(f"{CONVENTIONS}::test_pow_gradient_masks",
                             "y = 0 gives x a zero gradient; x = 0, y >= 0 gives y a zero "
                             "gradient"),
                  convention(f"{WORDS}::test_integer_pow_wraps_and_refuses_negative_exponents",
                             "words: x^y modulo 2**width, 0^0 = 1, a negative exponent "
                             "refused", route="forward"),
                  roundoff(0.5, statement="one primitive: C's pow rounded once, within 0.5 "
                                          "ulp in round to nearest")),
)


def _scale_sampler(kind):
    """x uniform (specials mixed in for ``special``), the frozen factor in [-4, 4] (0, +-1
    and a power of two at ``edges``)."""
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        x = into(rng.uniform(-4, 4, n), fmt)
        c = rng.choice([0.0, 1.0, -1.0, 0.5]) if kind == "edges" else rng.uniform(-4, 4)
        if kind == "special":
            specials = into([np.nan, np.inf, -np.inf, 0.0], fmt)
            x = np.where(rng.random(n) < 0.4, specials[rng.integers(0, 4, n)], x)
        return x.reshape(op.attrs.shape), np.asarray(into(c, fmt))
    return sampler


define(
    "scale", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "factor": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, c: xp.multiply(c, x),
    backward=lambda xp, a, xs, ys, gs, needs: (xp.multiply(xs[1], gs[0]) if needs[0] else None,
                                               None),
    jvp=lambda xp, a, xs, ys, ts: xp.multiply(xs[1], ts[0]),
    samples={k: _scale_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, x, c: (np.asarray(np.frompyfunc(lambda v: c[()] * v, 1, 1)(x),
                                            dtype=object),),
    float64=Float64(lambda a, x, c: c * x, lambda a, xs, gs: (xs[1] * gs[0], None)),
    examples={"": {}, "rank0": {"shape": ()}, "2x3": {"shape": (2, 3)}},
    notes=("scale(x, factor) = factor x rounded once, the factor a frozen scalar port (no "
           "gradient): 0 * inf is NaN; gradient factor g.",),
    certificates=("derivative", "prepared",
                  roundoff(0.5, statement="one primitive: the product rounded once, within "
                                          "0.5 ulp in round to nearest")),
)


def _fraction(v) -> Fraction:
    """A finite mpf as an exact Fraction (its sign, mantissa and exponent)."""
    sign, man, exp, _ = v._mpf_
    return (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)


def _mod_oracle(floor):
    """C's fmod (the remainder of the truncated quotient, sign of x) or, with ``floor``,
    PyTorch's remainder (of the floored quotient, sign of y; a zero result has y's sign,
    which mpmath cannot show)."""
    def oracle(ctx, x, y):
        if ctx.isnan(x) or ctx.isnan(y) or ctx.isinf(x) or y == 0:
            return ctx.nan
        if ctx.isinf(y):
            if not floor or x == 0 or (x > 0) == (y > 0):
                return x
            return y                         # x + y for x of the other sign: +-inf
        # Exactly, in rationals: x = n y + r with n the truncated or floored quotient.
        X, Y = (_fraction(v) for v in (x, y))
        n = math.floor(X / Y) if floor else math.trunc(X / Y)
        r = X - n * Y
        return ctx.mpf(r.numerator) / r.denominator
    return oracle


def _quotient(xp, x, y, out):
    """The integral quotient n of x = n y + out, as round((x - out) / y): (x - out) / y is an
    integer in exact arithmetic, so the rounded steps land within a fraction of 1 of it."""
    return xp.round(xp.divide(xp.subtract(x, out), y))


def _mod_edges(rng, fmt, n):
    """Large quotients (x / y up to the format's range), exact multiples (zero remainders) and
    signs of every combination."""
    f = target(fmt)
    y = rng.choice([-1.0, 1.0], n) * rng.uniform(0.25, 2, n)
    k = rng.integers(0, max(2, min(f.emax, 60)), n).astype(np.float64)
    x = rng.choice([-1.0, 1.0], n) * rng.uniform(1, 2, n) * np.exp2(k)
    mult = rng.random(n) < 0.3
    x = np.where(mult, np.abs(y) * rng.integers(-5, 6, n), x)
    return x, y


def _mod_kinks(x, y):
    """Jumps: x / y within 2**-20 of an integer."""
    q = x / y
    return np.abs(q - np.round(q)) < 2.0 ** -20


def _math_fmod(x, y):
    try:
        return math.fmod(x, y)
    except ValueError:                       # fmod(inf, y), fmod(x, 0)
        return math.nan


def _mod_samples():
    return Domain(ordinary=lambda rng, fmt, n: (rng.uniform(-8, 8, n),
                                                 rng.choice([-1.0, 1.0], n)
                                                 * rng.uniform(0.5, 4, n)),
                  edges=_mod_edges, kinks=_mod_kinks,
                  special=unsigned_zeros(special(uniform(-8, 8, 2), 2)))


binary_elementwise(
    "fmod", "elementwise",
    f=lambda xp, x, y: xp.fmod(x, y),
    dx=lambda xp, x, y, out, v: v,
    dy=lambda xp, x, y, out, v: xp.negative(xp.multiply(v, _quotient(xp, x, y, out))),
    oracle=_mod_oracle(floor=False),
    float64=(np.frompyfunc(_math_fmod, 2, 1),
             lambda x, y, g: (g, -(g * np.round((x - np.fmod(x, y)) / y)))),
    domain=_mod_samples(),
    needs="Rounding",
    notes=("fmod(x, y) = x - trunc(x / y) y exactly (C's fmod: the result has x's sign, "
           "|fmod| < |y|; it is always representable, so no rounding); fmod(x, +-inf) = x; "
           "fmod(inf, y), fmod(x, 0) and NaN operands give NaN.",
           "Gradient as PyTorch: g to x, -trunc(x / y) g to y (piecewise linear; the jumps "
           "where x / y is an integer are not differentiated).  The quotient is recovered "
           "as round((x - fmod) / y), an integer computed without a second remainder."),
    certificates=("prepared",
                  roundoff(0, statement="exact: the remainder is representable")),
)


def _remainder(xp, x, y):
    """PyTorch's remainder from C's fmod: r = fmod(x, y); where r != 0 and its sign differs
    from y's, r + y (one rounding of the exact floor remainder, so correctly rounded); a zero
    result takes y's sign (Python's and numpy's convention)."""
    r = xp.fmod(x, y)
    zero = xp.zeros_like(r)
    off = (xp.less(r, zero) & xp.greater(y, zero)) | (xp.greater(r, zero) & xp.less(y, zero))
    r = xp.where(off, xp.add(r, y), r)
    return xp.where(xp.equal(r, zero), xp.copysign(zero, y), r)


binary_elementwise(
    "remainder", "elementwise",
    f=_remainder,
    dx=lambda xp, x, y, out, v: v,
    dy=lambda xp, x, y, out, v: xp.negative(xp.multiply(v, _quotient(xp, x, y, out))),
    words=W.remainder, word_oracle=lambda p, q: p % q, word_draw=_word_divisors,
    bool_reason=_no_bool("remainder"),
    validate=lambda xp, a, x, y: _nonzero_divisor(a, y),
    bad_inputs=(({"shape": (2,), "element": "uint8"},
                 (np.array([7, 8], np.uint8), np.array([0, 3], np.uint8)),
                 "remainder: y must be a nonzero divisor (got 0 at index [0])"),),
    oracle=_mod_oracle(floor=True),
    float64=(np.remainder,
             lambda x, y, g: (g, -(g * np.round((x - np.remainder(x, y)) / y)))),
    domain=_mod_samples(),
    needs="Rounding",
    notes=("remainder(x, y) = x - floor(x / y) y as torch.remainder (Python's %): the result "
           "has y's sign, a zero result y's sign of zero; computed as fmod(x, y) + y where "
           "the signs differ, one rounding of the exact value (so correctly rounded, and "
           "exact unless |y| - |fmod| needs more bits).  remainder(x, inf) = x for x >= 0, "
           "inf for x < 0 (as numpy); NaN where fmod is NaN.",
           "Gradient as PyTorch: g to x, -floor(x / y) g to y.",
           "element int*/uint*: torch.remainder of words, x - floor(x / y) y exactly (Python's "
           "%: the divisor's sign; least % -1 is 0); validate refuses a zero divisor; no "
           "gradient, and no Rounding capability read (words are data).  element bool: no "
           "rule (PyTorch refuses it)."),
    certificates=("prepared",
                  convention(f"{CONVENTIONS}::test_remainder_signs",
                             "the result and a zero result take the divisor's sign",
                             route="forward"),
                  convention(f"{WORDS}::test_integer_remainder_takes_the_divisors_sign",
                             "words: Python's %, least % -1 = 0, a zero divisor refused",
                             route="forward"),
                  roundoff(0.5, statement="fmod exact, then one addition: within 0.5 ulp in "
                                          "round to nearest")),
)


define(
    "nextafter", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": frozen(a.shape), "y": frozen(a.shape)}, {"out": value(a.shape)}),
    forward=lambda xp, a, x, y: xp.nextafter(x, y),
    jvp=zero_tangents,
    needs="NextAfter",
    samples=Domain(ordinary=uniform(-4, 4, 2),
                   edges=lambda rng, fmt, n: (rng.choice(np.asarray(extremes(fmt) + (0.0, -0.0)),
                                                         n),
                                              rng.choice([-np.inf, np.inf, 0.0], n)),
                   special=special(uniform(-4, 4, 2), 2)).samplers(),
    float64=Float64(lambda a, x, y: np.frompyfunc(math.nextafter, 2, 1)(x, y).astype(float)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    notes=("nextafter(x, y) (C): the neighbour of x in the backend's format in the direction "
           "of y; x itself where x = y (y's sign of zero: nextafter(-0, +0) = +0); NaN if "
           "either is NaN; from +-0 the least subnormal of the sign of y; from max_finite "
           "toward inf, inf (with overflow).",
           "Both inputs are frozen ports (no value input): the map is piecewise constant, so "
           "its tangent is 0 and there is no pullback.  The backend's format decides the "
           "neighbour; numerics.reference has no NextAfter (a working precision has no "
           "neighbours), so there is no rule there."),
    certificates=(convention(f"{CONVENTIONS}::test_nextafter_walks_the_format",
                             "the neighbour in the backend's format, x at x = y"),),
)


# ----- nanToNum and the guarded forms ------------------------------------------------------------
def _finite_replacements(rng, fmt, kind):
    f = target(fmt)
    top = float(f.max_finite)
    if kind == "edges":
        return 0.0, top, -top
    return tuple(float(into(v, fmt)) for v in (rng.uniform(-1, 1), rng.uniform(1, 4),
                                               rng.uniform(-4, -1)))


def _nan_to_num_sampler(kind):
    def sampler(rng, fmt, op):
        n = int(np.prod(op.attrs.shape, dtype=np.int64))
        x = into(rng.uniform(-4, 4, n), fmt)
        if kind != "ordinary":
            specials = into([np.nan, np.inf, -np.inf, 0.0], fmt)
            x = np.where(rng.random(n) < 0.5, specials[rng.integers(0, 4, n)], x)
        reps = _finite_replacements(rng, fmt, kind)
        return (x.reshape(op.attrs.shape),) + tuple(np.asarray(v) for v in reps)
    return sampler


def _nan_to_num(xp, a, x, nan, posinf, neginf):
    out = xp.where(xp.isnan(x), nan, x)
    inf = xp.isinf(x)
    return xp.where(inf & xp.greater(x, xp.zeros_like(x)), posinf,
                    xp.where(inf, neginf, out))


def _nan_to_num_d(xp, x, v):
    """v where x is finite, 0 where it was replaced (a constant there; PyTorch's masking)."""
    return xp.where(xp.isfinite(x), v, xp.zeros_like(v))


def _nan_to_num_oracle(ctx, a, x, nan, posinf, neginf):
    def one(v):
        return nan[()] if ctx.isnan(v) else posinf[()] if v == ctx.inf else \
            neginf[()] if v == -ctx.inf else v
    return (np.asarray(np.frompyfunc(one, 1, 1)(x), dtype=object),)


define(
    "nanToNum", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "nan": frozen(), "posinf": frozen(),
                      "neginf": frozen()}, {"y": value(a.shape)}),
    forward=_nan_to_num,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _nan_to_num_d(xp, xs[0], gs[0]) if needs[0] else None, None, None, None),
    jvp=lambda xp, a, xs, ys, ts: _nan_to_num_d(xp, xs[0], ts[0]),
    samples={k: _nan_to_num_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_nan_to_num_oracle,
    float64=Float64(lambda a, x, nan, posinf, neginf: np.nan_to_num(
        x, nan=float(nan), posinf=float(posinf), neginf=float(neginf)),
        lambda a, xs, gs: (np.where(np.isfinite(xs[0]), gs[0], 0.0), None, None, None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    notes=("nanToNum(x, nan, posinf, neginf): NaN, +inf and -inf replaced by the frozen "
           "scalars (torch.nan_to_num's defaults are 0 and the format's +-max_finite: pass "
           "them); finite x unchanged (selection: no rounding).",
           "Gradient: g where x is finite, 0 where it was replaced (the output is a constant "
           "there), selected, so an infinite cotangent gives 0 there."),
    certificates=("derivative", "prepared", roundoff(0, statement="exact: a selection")),
)


def _eps_sampler(draws):
    """Value inputs drawn by ``draws[kind](rng, n)``; the frozen eps positive: 2**-k for k in
    [2, 12], at least the format's least normal (at ``edges`` sometimes that least normal)."""
    def make(kind):
        def sampler(rng, fmt, op):
            n = int(np.prod(op.attrs.shape, dtype=np.int64))
            xs = [into(x, fmt).reshape(op.attrs.shape) for x in draws[kind](rng, n)]
            least = float(target(fmt).min_normal)
            eps = max(2.0 ** -int(rng.integers(2, 13)), least)
            if kind == "edges" and rng.random() < 0.3:
                eps = least
            return tuple(xs) + (np.asarray(into(eps, fmt)),)
        return sampler
    return {k: make(k) for k in draws}


def _eps_valid(xp, eps):
    """The guard must be a positive finite number."""
    ok = xp.greater(eps, xp.zeros_like(eps)) & xp.isfinite(eps)
    return None if ok else f"eps must be positive and finite (got {shown(xp, eps)})"


def _specials_mixed(base):
    """``base`` with 40% of the entries replaced by +-0, +-inf or NaN."""
    def draw(rng, n):
        vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
        return tuple(np.where(rng.random(n) < 0.4, vals[rng.integers(0, 5, n)], x)
                     for x in base(rng, n))
    return draw


def _above(xp, d, eps, v):
    """The derivative of max(d, eps) applied to v: v where d > eps, 0 where d <= eps (the
    flat side of the guard, also at d = eps) and at NaN."""
    return xp.where(xp.greater(d, eps), v, xp.zeros_like(v))


def _safe_denominator(xp, d, eps):
    """d with the guarded entries (d <= eps, NaN) replaced by 1: a denominator for
    derivative formulas whose value ``_above`` discards there."""
    return xp.where(xp.greater(d, eps), d, xp.ones_like(d))


def _safe_f64_d(d, eps, v):
    return np.where(d > eps, v, 0.0)


_EDGE_VALUES = (0.0, 2.0 ** -12, 2.0 ** -2, -1.0, 1e-30, 2.0 ** -7)


def _eps_oracle(f):
    """An elementwise oracle ``f(ctx, *values, eps)`` with the frozen eps read once."""
    def oracle(ctx, a, *xs):
        eps = xs[-1][()]
        out = np.frompyfunc(lambda *v: f(ctx, *v, eps), len(xs) - 1, 1)(*xs[:-1])
        return (np.asarray(out, dtype=object),)
    return oracle


def _safe_log_d(xp, x, eps, v):
    return _above(xp, x, eps, xp.divide(v, _safe_denominator(xp, x, eps)))


define(
    "safeLog", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "eps": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, eps: xp.log(xp.maximum(x, eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _safe_log_d(xp, xs[0], xs[1], gs[0]) if needs[0] else None, None),
    jvp=lambda xp, a, xs, ys, ts: _safe_log_d(xp, xs[0], xs[1], ts[0]),
    validate=lambda xp, a, x, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(0.5, 4, n),),
        "edges": lambda rng, n: (rng.choice(_EDGE_VALUES, n),),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),))}),
    oracle=_eps_oracle(lambda ctx, x, eps: x if ctx.isnan(x) else ctx.log(max(x, eps))),
    float64=Float64(lambda a, x, eps: np.log(np.maximum(x, eps)),
                    lambda a, xs, gs: (_safe_f64_d(xs[0], xs[1], gs[0] / np.where(
                        xs[0] > xs[1], xs[0], 1.0)), None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], 0.0), "eps must be positive and finite (got 0)"),
                ({"shape": (1,)}, ([1.0], np.inf), "eps must be positive and finite (got inf)")),
    notes=("safeLog(x, eps) = log(max(x, eps)), eps > 0 a frozen scalar (validate refuses "
           "0, negative, inf or NaN eps): log never sees a value below eps, so 0 and "
           "negative x give log(eps); NaN x stays NaN (IEEE maximum propagates it).",
           "Gradient g / x where x > eps, 0 where x <= eps (the flat side of the guard, also "
           "at x = eps) and at NaN."),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_guarded_forms_below_the_guard",
                             "at and below the guard the guarded input's gradient is 0"),
                  roundoff(0.5, statement="the guard is exact, then one log rounded once: "
                                          "within 0.5 ulp in round to nearest")),
)


def _safe_inv_d(xp, x, y, eps, v):
    """-v y^2 where x > eps (y = 1/x), 0 at and below the guard."""
    return _above(xp, x, eps, xp.negative(xp.multiply(v, xp.square(y))))


define(
    "safeInv", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "eps": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, eps: xp.reciprocal(xp.maximum(x, eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _safe_inv_d(xp, xs[0], ys[0], xs[1], gs[0]) if needs[0] else None, None),
    jvp=lambda xp, a, xs, ys, ts: _safe_inv_d(xp, xs[0], ys[0], xs[1], ts[0]),
    validate=lambda xp, a, x, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(0.5, 4, n),),
        "edges": lambda rng, n: (rng.choice(_EDGE_VALUES, n),),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),))}),
    oracle=_eps_oracle(lambda ctx, x, eps: x if ctx.isnan(x) else 1 / max(x, eps)),
    float64=Float64(lambda a, x, eps: 1 / np.maximum(x, eps),
                    lambda a, xs, gs: (_safe_f64_d(xs[0], xs[1], -(gs[0] * np.square(
                        1 / np.maximum(xs[0], xs[1])))), None)),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], -1.0), "eps must be positive and finite (got -1)"),),
    notes=("safeInv(x, eps) = 1 / max(x, eps), eps > 0 a frozen scalar: for a non-negative "
           "quantity (a norm, a variance, a count) that may be 0; at most 1/eps; "
           "safeInv(inf) = 0; NaN stays NaN.",
           "Gradient -g / x^2 (as -g y^2) where x > eps, 0 at and below the guard."),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_guarded_forms_below_the_guard",
                             "at and below the guard the guarded input's gradient is 0"),
                  roundoff(0.5, statement="the guard is exact, then one division rounded "
                                          "once: within 0.5 ulp in round to nearest")),
)


def _safe_div_dx(xp, x, y, out, eps, v):
    """v / max(y, eps)."""
    return xp.divide(v, xp.maximum(y, eps))


def _safe_div_dy(xp, x, y, out, eps, v):
    """-(v out) / y where y > eps, 0 at and below the guard."""
    return _above(xp, y, eps, xp.negative(xp.divide(xp.multiply(v, out),
                                                    _safe_denominator(xp, y, eps))))


def _safe_div_jvp(xp, a, xs, ys, ts):
    x, y, eps = xs
    return xp.add(_safe_div_dx(xp, x, y, ys[0], eps, ts[0]),
                  _safe_div_dy(xp, x, y, ys[0], eps, ts[1]))


def _safe_div_f64_bwd(a, xs, gs):
    x, y, eps = xs
    d = np.maximum(y, eps)
    return gs[0] / d, _safe_f64_d(y, eps, -(gs[0] * (x / d)) / np.where(y > eps, y, 1.0)), None


define(
    "safeDiv", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "y": value(a.shape), "eps": frozen()},
                     {"out": value(a.shape)}),
    forward=lambda xp, a, x, y, eps: xp.divide(x, xp.maximum(y, eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _safe_div_dx(xp, *xs[:2], ys[0], xs[2], gs[0]) if needs[0] else None,
        _safe_div_dy(xp, *xs[:2], ys[0], xs[2], gs[0]) if needs[1] else None, None),
    jvp=_safe_div_jvp,
    validate=lambda xp, a, x, y, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(-4, 4, n), rng.uniform(0.5, 4, n)),
        "edges": lambda rng, n: (rng.uniform(-4, 4, n), rng.choice(_EDGE_VALUES, n)),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),
                                                   rng.uniform(-4, 4, n)))}),
    oracle=_eps_oracle(lambda ctx, x, y, eps: ctx.nan if ctx.isnan(x) or ctx.isnan(y) else
                       (ctx.nan if ctx.isinf(x) and y == ctx.inf else x / max(y, eps))),
    float64=Float64(lambda a, x, y, eps: x / np.maximum(y, eps), _safe_div_f64_bwd),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], [1.0], np.nan),
                 "eps must be positive and finite (got nan)"),),
    notes=("safeDiv(x, y, eps) = x / max(y, eps), eps > 0 a frozen scalar: a division by a "
           "non-negative quantity (a norm, a sum of weights, a count) that may be 0; "
           "x / 0 gives x / eps; NaN operands give NaN, inf / inf is NaN.",
           "Gradient g / max(y, eps) to x; -g out / y to y where y > eps, 0 at and below the "
           "guard."),
    certificates=("derivative", "prepared",
                  convention(f"{CONVENTIONS}::test_guarded_forms_below_the_guard",
                             "at and below the guard the denominator's gradient is 0"),
                  roundoff(0.5, statement="the guard is exact, then one division rounded "
                                          "once: within 0.5 ulp in round to nearest")),
)


def _smooth_abs_d(xp, x, y, v):
    """x / y v (y = sqrt(x^2 + eps) > 0)."""
    return xp.multiply(v, xp.divide(x, y))


def _smooth_abs_oracle(ctx, x, eps):
    if ctx.isnan(x):
        return x
    return ctx.inf if ctx.isinf(x) else ctx.sqrt(x * x + eps)


define(
    "smoothAbs", "elementwise",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": value(a.shape), "eps": frozen()}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, eps: xp.hypot(x, xp.sqrt(eps)),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _smooth_abs_d(xp, xs[0], ys[0], gs[0]) if needs[0] else None, None),
    jvp=lambda xp, a, xs, ys, ts: _smooth_abs_d(xp, xs[0], ys[0], ts[0]),
    validate=lambda xp, a, x, eps: _eps_valid(xp, eps),
    samples=_eps_sampler({
        "ordinary": lambda rng, n: (rng.uniform(-4, 4, n),),
        "edges": lambda rng, n: (rng.choice([0.0, 2.0 ** -12, -(2.0 ** -6), 1e30, -1e30], n),),
        "special": _specials_mixed(lambda rng, n: (rng.uniform(-4, 4, n),))}),
    oracle=_eps_oracle(_smooth_abs_oracle),
    float64=Float64(lambda a, x, eps: np.sqrt(np.square(x) + eps),
                    lambda a, xs, gs: (gs[0] * (xs[0] / np.sqrt(np.square(xs[0]) + xs[1])),
                                       None), ulps=2),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    bad_inputs=(({"shape": (1,)}, ([1.0], 0.0), "eps must be positive and finite (got 0)"),),
    notes=("smoothAbs(x, eps) = sqrt(x^2 + eps), eps > 0 a frozen scalar: a smooth |x| "
           "(sqrt(eps) at 0, |x| + eps / (2|x|) + ... far from 0), computed as "
           "hypot(x, sqrt(eps)): no overflow of x^2 for large |x|; NaN stays NaN.",
           "Gradient x / y g: smooth everywhere, 0 at x = 0, +-g far from 0."),
    certificates=("derivative", "prepared",
                  roundoff(1, statement="hypot rounded once of x and sqrt(eps) rounded once "
                                        "(whose relative error reaches the result damped by "
                                        "eps / (x^2 + eps) <= 1): within 1 ulp in round to "
                                        "nearest")),
)

"""Elementwise arithmetic (spec: "Elementwise arithmetic"): the IEEE operations add, sub, mul,
div (with torch.div's rounding_mode), neg, abs, sqrt, rsqrt, cbrt, reciprocal, square,
hypot, copysign, and the fused forms lerp, addcmul, addcdiv, fullLike; pow, scale, fmod,
remainder and nextafter are in pow_remainder.py, nanToNum and the guarded forms (safeDiv,
safeInv, safeLog, smoothAbs) in guarded.py, of the same family.  Operands of equal shapes
(broadcasting is its own operator); add, sub, mul, div, neg, pow and remainder also take the
element argument (scalars, Booleans or words; spec: "Ports And Element Sorts"): words compute
PyTorch's integer meaning exactly (routes.words), without gradients, and Booleans have a rule
only where PyTorch gives them one (add: or, mul: and)."""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..helpers import (ELEMENT, binary_elementwise, element_samplers, elementwise_oracle,
                       unary_elementwise, word_values)
from ..ports import frozen, value
from ..registry import Float64, define
from ..samples import Domain, into, special, target, uniform, unsigned_zeros

CONVENTIONS = "tests/routes/test_routes_conventions.py"
WORDS = "tests/routes/test_routes_word_arithmetic.py"


def no_bool(what):
    """The reason an operator has no rule at element bool: PyTorch refuses it there."""
    return (f"element bool: PyTorch refuses {what} on Booleans (its integer meaning needs "
            f"words), so there is no rule")


def nonzero_divisor(a, y):
    """At a word element, the message for a zero divisor y (spec: "An integer division or
    remainder fails its check at a zero divisor"), else None."""
    if a.element in ("scalar", "bool"):
        return None
    at = W.first_index(y == 0)
    return None if at is None else f"y must be a nonzero divisor (got 0 at index {at})"


def word_divisors(rng, port):
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
    words=W.subtract, word_oracle=lambda p, q: p - q, bool_reason=no_bool("subtraction"),
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
    words=W.negative, word_oracle=lambda p: -p, bool_reason=no_bool("negation"),
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
        return no_bool("division")
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
    validate=lambda xp, a, x, y: nonzero_divisor(a, y),
    samples=element_samplers(Domain(ordinary=lambda rng, fmt, n: (rng.uniform(-4, 4, n),
                                                                   rng.choice([-1.0, 1.0], n)
                                                                   * rng.uniform(0.25, 4, n)),
                                    special=unsigned_zeros(special(uniform(-4, 4, 2), 2)))
                             .samplers(), word_divisors),
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

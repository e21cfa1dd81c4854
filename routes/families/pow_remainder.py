"""Elementwise arithmetic, continued (spec: "Elementwise arithmetic"): pow (C's pow, PyTorch's
gradient masks; integer words as torch defines them), scale (a factor at a frozen port), fmod
(C's, exact), remainder (torch's: the divisor's sign) and nextafter (a neighbour in the
format, no rule under the reference).  The family is elementwise.py's."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..helpers import binary_elementwise
from ..ports import frozen, value
from ..registry import Float64, define
from ..rules import zero_tangents
from ..samples import Domain, extremes, into, special, target, uniform, unsigned_zeros

from .elementwise import CONVENTIONS, WORDS, no_bool, nonzero_divisor, word_divisors


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
    # x ** 3.0 at x < 0: the exponent (a constant) has no tangent, and its term, NaN there
    # (log x), must not make the tangent NaN: torch's forward mode gives 3 x^2.
    zero_tangent_adds_nothing=True,
    # Python's three-argument pow: exact modulo 2**64, a multiple of every width.
    words=W.power, word_oracle=lambda p, q: pow(p, q, 1 << 64),
    word_draw=lambda rng, port: (W.sample(rng, port), W.sample_exponents(rng, port)),
    bool_reason=no_bool("pow"),
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
           "x = 0 and y >= 0; NaN for x < 0, where x^y is not differentiable in y).  "
           "Tangent: the two terms, each 0 where its tangent is 0 (forward mode's symbolic "
           "zero, as torch's): x ** 3.0 at x < 0 has the tangent 3 x^2 t.",
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
    words=W.remainder, word_oracle=lambda p, q: p % q, word_draw=word_divisors,
    bool_reason=no_bool("remainder"),
    validate=lambda xp, a, x, y: nonzero_divisor(a, y),
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

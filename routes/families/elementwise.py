"""Elementwise arithmetic (spec: "Elementwise arithmetic"): add, mul so far; sub, div, neg,
abs, sqrt, ... follow the same pattern.  Operands of equal shapes (broadcasting is its own
operator); the element argument selects scalars, Booleans or words."""

from __future__ import annotations

import numpy as np

from .. import words as W
from ..certs import roundoff
from ..helpers import binary_elementwise
from ..samples import Domain, target, uniform


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
    certificates=("derivative", "algebraic", "prepared",
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
    certificates=("derivative", "algebraic", "prepared",
                  roundoff(0.5, statement="one primitive: the product rounded once, within "
                                          "0.5 ulp in round to nearest")),
)

"""Exponentials, logarithms, trigonometric and hyperbolic functions (spec: "Exponentials,
logarithms, and trigonometric and hyperbolic functions"): exp so far."""

from __future__ import annotations

import math

import numpy as np

from ..certs import roundoff
from ..helpers import unary_elementwise
from ..samples import Domain, pick, uniform


def _exp_edges(f):
    """Inputs near exp's overflow threshold ln(max_finite), its normal and subnormal
    underflow thresholds ln(min_normal), ln(min_subnormal / 2), and 0 (where
    exp(x) - 1 loses everything): each with relative offsets down to 2**-(p+2)."""
    offsets = [s * 2.0 ** -k for k in range(1, f.precision + 3) for s in (-1, 1)]
    edges = [math.log(float(f.max_finite)), math.log(float(f.min_normal)),
             math.log(float(f.min_subnormal)) - math.log(2)]
    return [e * (1 + o) for e in edges for o in offsets] + offsets


unary_elementwise(
    "exp", "transcendental",
    f=lambda xp, x: xp.exp(x),
    d=lambda xp, x, y, v: xp.multiply(v, y),          # d/dx e^x = e^x: reuse the output
    oracle=lambda ctx, x: ctx.exp(x),
    float64=(np.exp, lambda x, g: g * np.exp(x)),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(_exp_edges)),
    notes=("exp(-inf) = 0, exp(inf) = inf, exp(NaN) = NaN; the pullback g * exp(x) reuses the "
           "forward value, so prepare evaluates exp once.",),
    certificates=("derivative", "algebraic", "prepared",
                  roundoff(0.5, statement="one primitive: exp rounded once (emulated rounds "
                                          "the exact value), within 0.5 ulp in round to "
                                          "nearest")),
)

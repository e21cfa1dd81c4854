"""Activations (spec: the activation family): relu so far; sigmoid, tanh, softplus, silu,
gelu, elu, leakyReLU follow (their slopes and betas as frozen inputs)."""

from __future__ import annotations

import numpy as np

from ..certs import convention, roundoff
from ..helpers import unary_elementwise
from ..samples import Domain, extremes, pick, uniform

CONVENTIONS = "tests/test_routes_conventions.py"

unary_elementwise(
    "relu", "activation",
    f=lambda xp, x: xp.maximum(x, xp.zeros_like(x)),
    # The subgradient at 0 is 0 (PyTorch's threshold_backward).  Selecting v instead of
    # multiplying by a 0/1 derivative keeps an infinite cotangent at x < 0 from giving NaN.
    d=lambda xp, x, y, v: xp.where(xp.greater(x, xp.zeros_like(x)), v, xp.zeros_like(v)),
    oracle=lambda ctx, x: x if ctx.isnan(x) else max(x, ctx.zero),
    float64=(lambda x: np.maximum(x, 0.0), lambda x, g: np.where(x > 0, g, 0.0)),
    domain=Domain(ordinary=uniform(-4, 4), kinks=lambda x: np.abs(x) < 2.0 ** -20,
                  edges=pick(lambda f: [0.0, -0.0] + list(extremes(f)))),
    notes=("relu(x) = maximum(x, 0): NaN propagates (IEEE maximum); relu(-0) is +0 where the "
           "backend has signed zeros.",
           "Gradient: v where x > 0, else 0 -- 0 at the kink x = 0 and at NaN (a selection, so "
           "an inf cotangent at x < 0 gives 0, not NaN)."),
    certificates=("derivative", "algebraic", "prepared",
                  convention(f"{CONVENTIONS}::test_relu_subgradient_at_zero_is_zero",
                             "relu'(0) = 0 and the gradient is selected: x <= 0 or NaN gives "
                             "0 even for an infinite cotangent"),
                  roundoff(0, statement="exact: the output is the input or zero")),
)

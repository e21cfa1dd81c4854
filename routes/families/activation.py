"""Activations (spec: the activation family): relu so far; sigmoid, tanh, softplus, silu,
gelu, elu, leakyReLU follow (their slopes and betas as frozen inputs)."""

from __future__ import annotations

import numpy as np

from ..certs import convention, roundoff
from .. import attributes as A
from ..helpers import unary_elementwise
from ..ports import frozen, value
from ..registry import Float64, define
from ..samples import Domain, extremes, into, pick, special, uniform

CONVENTIONS = "tests/routes/test_routes_conventions.py"

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


# ----- sigmoid, tanh, silu --------------------------------------------------------------------
def _sigmoid(xp, x):
    """1 / (1 + exp(-x)): exp(inf) = inf gives 0 at -inf, no overflow trouble."""
    one = xp.ones_like(x)
    return xp.divide(one, xp.add(one, xp.exp(xp.negative(x))))


def _mp_nan(fn):
    return lambda ctx, x: ctx.nan if ctx.isnan(x) else fn(ctx, x)


def _np_sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


_SMOOTH = Domain(ordinary=uniform(-8, 8),
                 edges=pick(lambda f: [0.0, -0.0, 20.0, -20.0, 40.0, -40.0] + list(extremes(f))))

unary_elementwise(
    "sigmoid", "activation",
    f=_sigmoid,
    d=lambda xp, x, y, v: xp.multiply(v, xp.multiply(y, xp.subtract(xp.ones_like(y), y))),
    oracle=_mp_nan(lambda ctx, x: 1 / (1 + ctx.exp(-x))),
    float64=(_np_sigmoid, lambda x, g: g * (_np_sigmoid(x) * (1.0 - _np_sigmoid(x)))),
    domain=_SMOOTH,
    notes=("sigmoid(x) = 1 / (1 + exp(-x)): sigmoid(-inf) = 0, sigmoid(inf) = 1, NaN gives "
           "NaN; for very negative x it underflows to 0 (not to a subnormal tail first).",
           "Gradient: v * y * (1 - y) from the forward value y (PyTorch's sigmoid_backward)."),
    certificates=("derivative", "algebraic", "prepared"),
)

unary_elementwise(
    "tanh", "activation",
    f=lambda xp, x: xp.tanh(x),
    d=lambda xp, x, y, v: xp.multiply(v, xp.subtract(xp.ones_like(y), xp.multiply(y, y))),
    oracle=_mp_nan(lambda ctx, x: ctx.tanh(x)),
    float64=(np.tanh, lambda x, g: g * (1.0 - np.tanh(x) ** 2)),
    domain=_SMOOTH,
    notes=("tanh(+-inf) = +-1, tanh(-0) = -0, NaN gives NaN.",
           "Gradient: v * (1 - y^2) from the forward value y (PyTorch's tanh_backward)."),
    certificates=("derivative", "algebraic", "prepared"),
)


def _silu_d(xp, x, y, v):
    s = _sigmoid(xp, x)
    one = xp.ones_like(x)
    return xp.multiply(v, xp.multiply(s, xp.add(one, xp.multiply(x, xp.subtract(one, s)))))


unary_elementwise(
    "silu", "activation",
    f=lambda xp, x: xp.multiply(x, _sigmoid(xp, x)),
    d=_silu_d,
    oracle=_mp_nan(lambda ctx, x: x / (1 + ctx.exp(-x)) if ctx.isfinite(x) or x > 0
                   else ctx.nan),
    float64=(lambda x: x * _np_sigmoid(x),
             lambda x, g: g * (_np_sigmoid(x) * (1.0 + x * (1.0 - _np_sigmoid(x))))),
    domain=Domain(ordinary=uniform(-8, 8), edges=pick(lambda f: [0.0, -0.0, 20.0, -20.0])),
    notes=("silu(x) = x * sigmoid(x): silu(inf) = inf, silu(-inf) = -inf * 0 = NaN (as "
           "x * sigmoid(x) in IEEE arithmetic), NaN gives NaN.",
           "Gradient: v * s * (1 + x (1 - s)), s = sigmoid(x)."),
    certificates=("derivative", "prepared"),
)


# ----- operators with numeric attributes at frozen ports ---------------------------------------
def _frozen_sampler(draw, kinks, params):
    """x drawn by ``draw`` (kinks redrawn), then the frozen scalars ``params`` (floats: data)
    rounded into the format."""
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        n = int(np.prod(shape, dtype=np.int64))
        x = into(draw(rng, fmt, n)[0], fmt)
        for _ in range(100):
            bad = np.zeros(n, bool) if kinks is None else np.asarray(kinks(x), bool)
            if not bad.any():
                break
            x = np.where(bad, into(draw(rng, fmt, n)[0], fmt), x)
        return (x.reshape(shape),) + tuple(np.asarray(into(p, fmt)) for p in params)
    return sampler


def _frozen_unary(name, f, d, *, params, draws, kinks, oracle, float64, **more):
    """y = f(xp, x, *ps) with the frozen scalars ``params`` (port names -> sample values);
    ``d(xp, x, y, v, *ps)``; ``oracle(ctx, x, *ps)`` scalar mpmath; ``float64 = (fwd(x, *ps),
    bwd(x, g, *ps))``."""
    names = tuple(params)
    fwd, bwd = float64
    more.setdefault("examples", {"": {}, "2x3": {"shape": (2, 3)}})
    return define(
        name, "activation",
        attributes=(A.shape(),),
        ports=lambda a: ({"x": value(a.shape), **{k: frozen() for k in names}},
                         {"y": value(a.shape)}),
        forward=lambda xp, a, x, *ps: f(xp, x, *ps),
        backward=lambda xp, a, xs, ys, gs, needs: (d(xp, xs[0], ys[0], gs[0], *xs[1:]),)
        + (None,) * len(names),
        jvp=lambda xp, a, xs, ys, ts: d(xp, xs[0], ys[0], ts[0], *xs[1:]),
        samples={k: _frozen_sampler(dr, kinks if k == "ordinary" else None,
                                    tuple(params.values()))
                 for k, dr in draws.items()},
        oracle=lambda ctx, a, x, *ps: (np.asarray(np.frompyfunc(
            lambda v: ctx.nan if ctx.isnan(v) else oracle(ctx, v, *[p[()] for p in ps]),
            1, 1)(x), dtype=object),),
        float64=Float64(lambda a, x, *ps: fwd(x, *ps),
                        lambda a, xs, gs: (bwd(xs[0], gs[0], *xs[1:]),) + (None,) * len(names)),
        **more)


def _draws(lo, hi, edges):
    return {"ordinary": uniform(lo, hi), "edges": pick(edges),
            "special": special(uniform(lo, hi))}


_frozen_unary(
    "leakyReLU",
    f=lambda xp, x, s: xp.where(xp.greater(x, xp.zeros_like(x)), x, xp.multiply(x, s)),
    d=lambda xp, x, y, v, s: xp.where(xp.greater(x, xp.zeros_like(x)), v, xp.multiply(v, s)),
    params={"negative_slope": 0.01},
    draws=_draws(-4, 4, lambda f: [0.0, -0.0] + list(extremes(f))),
    kinks=lambda x: np.abs(x) < 2.0 ** -20,
    oracle=lambda ctx, x, s: x if x > 0 else x * s,
    float64=(lambda x, s: np.where(x > 0, x, x * s), lambda x, g, s: np.where(x > 0, g, g * s)),
    notes=("leakyReLU(x) = x for x > 0, negative_slope * x otherwise (torch's default slope "
           "0.01, read at the frozen port negative_slope); NaN gives NaN.",
           "Gradient: v for x > 0, negative_slope * v at x <= 0 (the slope at the kink x = 0, "
           "as PyTorch's leaky_relu_backward)."),
    certificates=("derivative", "prepared"),
)

_frozen_unary(
    "elu",
    f=lambda xp, x, al: xp.where(xp.greater(x, xp.zeros_like(x)), x,
                                 xp.multiply(al, xp.expm1(x))),
    d=lambda xp, x, y, v, al: xp.where(xp.greater(x, xp.zeros_like(x)), v,
                                       xp.multiply(v, xp.multiply(al, xp.exp(x)))),
    params={"alpha": 1.0},
    draws=_draws(-4, 4, lambda f: [0.0, -0.0, -20.0, -40.0] + list(extremes(f))),
    kinks=lambda x: np.abs(x) < 2.0 ** -20,
    oracle=lambda ctx, x, al: x if x > 0 else al * ctx.expm1(x),
    float64=(lambda x, al: np.where(x > 0, x, al * np.expm1(np.minimum(x, 0.0))),
             lambda x, g, al: np.where(x > 0, g, g * (al * np.exp(np.minimum(x, 0.0))))),
    notes=("elu(x) = x for x > 0, alpha * expm1(x) otherwise (alpha at the frozen port, torch's "
           "default 1); elu(-inf) = -alpha, NaN gives NaN.",
           "Gradient: v for x > 0, v * alpha * exp(x) at x <= 0 (the left slope alpha at the "
           "kink x = 0, as PyTorch's elu_backward)."),
    certificates=("derivative", "prepared"),
)


def _softplus(xp, x, beta, threshold):
    bx = xp.multiply(beta, x)
    return xp.where(xp.greater(bx, threshold), x,
                    xp.divide(xp.log1p(xp.exp(bx)), beta))


def _softplus_d(xp, x, y, v, beta, threshold):
    bx = xp.multiply(beta, x)
    return xp.where(xp.greater(bx, threshold), v, xp.multiply(v, _sigmoid(xp, bx)))


def _np_softplus(x, b, t):
    with np.errstate(over="ignore"):
        return np.where(b * x > t, x, np.log1p(np.exp(b * x)) / b)


_frozen_unary(
    "softplus",
    f=_softplus, d=_softplus_d,
    params={"beta": 1.0, "threshold": 20.0},
    draws=_draws(-8, 8, lambda f: [0.0, -0.0, 19.5, 20.5, -20.0, -40.0]),
    kinks=lambda x: np.abs(x - 20.0) < 2.0 ** -10,
    oracle=lambda ctx, x, b, t: x if b * x > t else ctx.log1p(ctx.exp(b * x)) / b,
    float64=(_np_softplus,
             lambda x, g, b, t: np.where(b * x > t, g, g * _np_sigmoid(b * x))),
    notes=("softplus(x) = log1p(exp(beta x)) / beta, and x itself where beta x > threshold "
           "(torch: beta 1, threshold 20, both at frozen ports); softplus(-inf) = 0, NaN "
           "gives NaN.",
           "Gradient: v * sigmoid(beta x), v where beta x > threshold (PyTorch's "
           "softplus_backward); the switch at beta x = threshold is a tiny jump."),
    certificates=("derivative", "prepared"),
)


# ----- gelu -------------------------------------------------------------------------------------
RSQRT2 = "0.707106781186547524400844362104849039284835937688474036588339868995366239231"          # 1/sqrt(2)
RSQRT2PI = "0.398942280401432677939946059934381868475858631164934657665925829670657925899"        # 1/sqrt(2 pi)
SQRT_2_OVER_PI = "0.797884560802865355879892119868763736951717262329869315331851659341315851799"  # sqrt(2/pi)
GELU_C = "0.044715"


def _gelu_tanh_parts(xp, x):
    """c and s = sigmoid(2 z), z = sqrt(2/pi) (x + c x^3): (1 + tanh z) / 2 = sigmoid(2 z)
    exactly, without the cancellation of 1 + tanh z at negative x."""
    c = xp.full_like(x, GELU_C)
    inner = xp.multiply(xp.full_like(x, SQRT_2_OVER_PI),
                        xp.add(x, xp.multiply(c, xp.multiply(x, xp.multiply(x, x)))))
    return c, _sigmoid(xp, xp.add(inner, inner))


def _gelu(xp, a, x):
    half, one = xp.full_like(x, "0.5"), xp.ones_like(x)
    if a.approximate == "none":
        phi = xp.multiply(half, xp.add(one, xp.erf(xp.multiply(x, xp.full_like(x, RSQRT2)))))
        return xp.multiply(x, phi)
    _, s = _gelu_tanh_parts(xp, x)
    return xp.multiply(x, s)


def _gelu_d(xp, a, x, v):
    half, one = xp.full_like(x, "0.5"), xp.ones_like(x)
    if a.approximate == "none":
        cdf = xp.multiply(half, xp.add(one, xp.erf(xp.multiply(x, xp.full_like(x, RSQRT2)))))
        pdf = xp.multiply(xp.full_like(x, RSQRT2PI),
                          xp.exp(xp.multiply(xp.negative(half), xp.multiply(x, x))))
        return xp.multiply(v, xp.add(cdf, xp.multiply(x, pdf)))
    c, s = _gelu_tanh_parts(xp, x)
    dinner = xp.multiply(xp.full_like(x, SQRT_2_OVER_PI),
                         xp.add(one, xp.multiply(xp.full_like(x, "3"),
                                                 xp.multiply(c, xp.multiply(x, x)))))
    # d/dx x s(2z) = s + 2 x s (1 - s) z'
    right = xp.multiply(xp.add(x, x),
                        xp.multiply(xp.multiply(s, xp.subtract(one, s)), dinner))
    return xp.multiply(v, xp.add(s, right))


def _mp_gelu(ctx, a, x):
    if ctx.isnan(x):
        return ctx.nan
    if ctx.isinf(x):
        return x if x > 0 else ctx.nan     # -inf * 0 in the rule, as the notes say
    if a.approximate == "none":
        return x * (1 + ctx.erf(x / ctx.sqrt(2))) / 2
    k = ctx.sqrt(2 / ctx.pi)
    return x * (1 + ctx.tanh(k * (x + ctx.mpf(GELU_C) * x ** 3))) / 2


define(
    "gelu", "activation",
    attributes=(A.shape(), A.choice("approximate", ("none", "tanh"),
                                    doc="none: x Phi(x) with erf; tanh: PyTorch's tanh "
                                        "approximation")),
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: _gelu(xp, a, x),
    backward=lambda xp, a, xs, ys, gs, needs: (_gelu_d(xp, a, xs[0], gs[0]),),
    jvp=lambda xp, a, xs, ys, ts: _gelu_d(xp, a, xs[0], ts[0]),
    needs=lambda a: "Erf" if a.approximate == "none" else None,
    # Below about -2.5, 1 + erf(x / sqrt 2) cancels (no erfc primitive): samples stay above.
    samples=Domain(ordinary=uniform(-2.5, 6),
                   edges=pick(lambda f: [0.0, -0.0, 2.0, -2.0, 6.0, 10.0])).samplers(),
    oracle=lambda ctx, a, x: (np.asarray(np.frompyfunc(lambda v: _mp_gelu(ctx, a, v), 1, 1)(x),
                                         dtype=object),),
    examples={"": {}, "2x3": {"shape": (2, 3)}, "tanh": {"approximate": "tanh"}},
    notes=("approximate none: gelu(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (needs Erf); "
           "tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's formula, every "
           "scalar), computed as x sigmoid(2 z) (the same value without 1 + tanh's "
           "cancellation).  approximate none loses accuracy below x ~ -2.5 (1 + erf cancels).  gelu(inf) = inf; gelu(-inf) is NaN (-inf * 0) in the rule; NaN gives NaN.",
           "Gradient: Phi(x) + x phi(x) (none) or the derivative of the tanh formula (tanh), as "
           "PyTorch's gelu_backward."),
    certificates=("derivative", "prepared"),
)

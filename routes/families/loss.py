"""Losses (spec: "Losses"), with PyTorch's reduction conventions: ``reduction`` mean (the
default: the sum divided by the number of terms), sum, or none (the per-term losses).

Pointwise losses (mse, mae, huber, hinge, poisson, logCosh, binaryCrossEntropy) take an input
and a target of one shape; the losses over slices (crossEntropy, crossEntropyProbabilities,
distill, cosineLoss) are in slice_loss.py, with the reduction pieces here.  Numbers (delta,
margin, eps, temperature) travel at frozen ports.  Every sum (the reduction, the
log-sum-exp, the norms) goes through xp.sum, so the numerics policy applies; the softmax
inside the cross entropies subtracts the slice's maximum first.
"""

from __future__ import annotations

import math

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import frozen, value
from ..registry import Float64, define
from ..rules import shown
from ..samples import into, log_uniform

TESTS = "tests/routes/test_routes_loss.py"
REDUCTIONS = ("mean", "sum", "none")
_LN2 = "0.693147180559945309417232121458176568075500134360255254120680009493393621969694715605863"


# ----- the reduction --------------------------------------------------------------------------
def count(shape) -> int:
    return math.prod(shape)                       # a shape's size: data, not a value


def reduce_terms(xp, how, terms):
    """The per-term losses reduced: none (as they are), sum, or mean (sum / count, the count
    rounded once as PyTorch's division by numel)."""
    if how == "none":
        return terms
    total = xp.sum(terms)
    if how == "sum":
        return total
    return xp.divide(total, xp.constant(count(np.shape(terms))))


def spread_back(xp, how, g, shape):
    """The cotangent of the reduced loss as per-term cotangents (the reduction's adjoint)."""
    if how == "none":
        return g
    g = np.broadcast_to(g, shape)
    if how == "sum":
        return g
    return xp.divide(g, xp.constant(count(shape), shape))


def reduction_check(a, shape):
    if a.reduction != "none" and count(shape) == 0:
        return (f"reduction {a.reduction} needs at least one term (got shape "
                f"{list(shape)})")
    return None


def mp_reduce(ctx, how, terms):
    terms = np.asarray(terms, dtype=object)
    if how == "none":
        return terms
    total = ctx.fsum(terms.reshape(-1).tolist())
    return np.asarray(total if how == "sum" else total / terms.size, dtype=object)


def np_reduce(how, terms):
    if how == "none":
        return terms
    total = np.sum(terms)
    return total if how == "sum" else total / terms.size


def reduction_attr():
    return A.choice("reduction", REDUCTIONS, doc="mean (sum / count), sum, or none: "
                    "PyTorch's reduction of the per-term losses")


def out_port(a, shape):
    return value(shape if a.reduction == "none" else ())


# ----- pointwise losses -----------------------------------------------------------------------
def _pointwise(name, *, f, dx, dt, params, draws, kinks, oracle, float64, target_port="value",
               validate=None, **more):
    """A loss whose terms are ``f(xp, x, t, *ps)`` elementwise: x a value port, the target
    ``t`` a value (or frozen) port of the same shape, then the frozen scalars ``params``
    (name -> sample value).  ``dx(xp, x, t, v, *ps)`` / ``dt(...)`` apply the partial
    derivatives to v; ``draws[kind](rng, n) -> (x, t)`` float64 samples; ``kinks(x, t, *ps)``
    the points redrawn in ordinary samples; ``oracle(ctx, x, t, *ps)`` one term in mpmath;
    ``float64 = (terms(x, t, *ps), slopes(x, t, *ps))`` numpy: the terms and the partial
    derivatives (d/dx, d/dt or None) elementwise."""
    names = tuple(params)
    tport = value if target_port == "value" else frozen

    def ports(a):
        return ({"x": value(a.shape), "target": tport(a.shape),
                 **{k: frozen() for k in names}}, {"loss": out_port(a, a.shape)})

    def forward(xp, a, x, t, *ps):
        return reduce_terms(xp, a.reduction, f(xp, x, t, *ps))

    def backward(xp, a, xs, ys, gs, needs):
        x, t, *ps = xs
        g = spread_back(xp, a.reduction, gs[0], a.shape)
        gt = dt(xp, x, t, g, *ps) if needs[1] and dt is not None else None
        return (dx(xp, x, t, g, *ps), gt) + (None,) * len(names)

    def jvp(xp, a, xs, ys, ts):
        x, t, *ps = xs
        lin = dx(xp, x, t, ts[0], *ps)
        if ts[1] is not None and dt is not None:
            lin = xp.add(lin, dt(xp, x, t, ts[1], *ps))
        return reduce_terms(xp, a.reduction, lin)

    def sampler(kind):
        def draw(rng, fmt, op):
            shape = op.attrs.shape
            n = count(shape)
            ps = tuple(np.asarray(into(p, fmt)) for p in params.values())
            # magnitudes draws span the format's range, so they take the format.
            got = draws[kind](rng, n, fmt) if kind == "magnitudes" else draws[kind](rng, n)
            x, t = (into(v, fmt) for v in got)
            for _ in range(100):
                if kind != "ordinary" or kinks is None:
                    break
                bad = np.asarray(kinks(x, t, *ps), bool)
                if not bad.any():
                    break
                fx, ft = (into(v, fmt) for v in draws[kind](rng, n))
                x, t = np.where(bad, fx, x), np.where(bad, ft, t)
            return (x.reshape(shape), t.reshape(shape)) + ps
        return draw

    def mp_oracle(ctx, a, x, t, *ps):
        terms = np.frompyfunc(lambda u, w: oracle(ctx, u, w, *[p[()] for p in ps]), 2, 1)(x, t)
        return (mp_reduce(ctx, a.reduction, terms),)

    more.setdefault("examples", {"": {}, "sum": {"reduction": "sum"},
                                 "none-2x2": {"reduction": "none", "shape": (2, 2)}})
    return define(
        name, "loss",
        attributes=(A.shape(), reduction_attr()),
        ports=ports, forward=forward, backward=backward, jvp=jvp,
        check=lambda a: reduction_check(a, a.shape),
        validate=validate,
        samples={k: sampler(k) for k in draws},
        oracle=mp_oracle,
        float64=Float64(lambda a, x, t, *ps: np_reduce(a.reduction, float64[0](x, t, *ps)),
                        lambda a, xs, gs: _np_pointwise_grads(a, float64[1], xs, gs[0]),
                        ulps=4),
        bad_attributes=(({"shape": (0,)}, "reduction mean needs at least one term (got "
                                          "shape [0])"),),
        **more)


def _np_pointwise_grads(a, slopes, xs, g):
    """The numpy gradients of a pointwise loss: the reduction's adjoint, then the slopes."""
    x, t, *ps = xs
    if a.reduction != "none":
        g = np.broadcast_to(g if a.reduction == "sum" else g / x.size, x.shape)
    dx, dt = slopes(x, t, *ps)
    return (dx * g, None if dt is None else dt * g) + (None,) * len(ps)


# Transcendental pointwise losses: the reduction code is shared (mse, mae, huber and hinge
# test sum as well), so two examples keep their emulated-backend tests short.
_FEW = {"": {}, "none-2x2": {"reduction": "none", "shape": (2, 2)}}


def _pair(lo, hi):
    return lambda rng, n: (rng.uniform(lo, hi, n), rng.uniform(lo, hi, n))


def _with_specials(base, vals=(0.0, -0.0, np.inf, -np.inf, np.nan)):
    vals = np.asarray(vals)

    def draw(rng, n):
        out = []
        for v in base(rng, n):
            out.append(np.where(rng.random(n) < 0.4, vals[rng.integers(0, len(vals), n)], v))
        return tuple(out)
    return draw


def _ties(base):
    """x == t for some entries (the kink of mae, the minimum of every distance loss)."""
    def draw(rng, n):
        x, t = base(rng, n)
        return x, np.where(rng.random(n) < 0.5, x, t)
    return draw


def _sign_lin(xp, d, v):
    """sign(d) * v, selected: 0 at d = 0 (PyTorch's sgn), NaN at NaN d."""
    zero = xp.zeros_like(v)
    return xp.where(xp.greater(d, zero), v,
                    xp.where(xp.less(d, zero), xp.negative(v),
                             xp.where(xp.isnan(d), d, zero)))


_pointwise(
    "mseLoss",
    f=lambda xp, x, t: xp.square(xp.subtract(x, t)),
    dx=lambda xp, x, t, v: xp.multiply(xp.add(v, v), xp.subtract(x, t)),
    dt=lambda xp, x, t, v: xp.multiply(xp.add(v, v), xp.subtract(t, x)),
    params={},
    draws={"ordinary": _pair(-4, 4), "edges": _ties(_pair(-4, 4)),
           "special": _with_specials(_pair(-4, 4))},
    kinks=None,
    oracle=lambda ctx, x, t: (x - t) ** 2,
    float64=(lambda x, t: np.square(x - t), lambda x, t: (2 * (x - t), 2 * (t - x))),
    notes=("mseLoss(x, target) = reduction of (x - target)^2 (torch.nn.MSELoss).",
           "Gradient: 2 (x - target) g at x (and its negation at target), g divided by the "
           "count under mean."),
    certificates=("prepared",),
)

_pointwise(
    "maeLoss",
    f=lambda xp, x, t: xp.abs(xp.subtract(x, t)),
    dx=lambda xp, x, t, v: _sign_lin(xp, xp.subtract(x, t), v),
    dt=lambda xp, x, t, v: _sign_lin(xp, xp.subtract(t, x), v),
    params={},
    draws={"ordinary": _pair(-4, 4), "edges": _ties(_pair(-4, 4)),
           "special": _with_specials(_pair(-4, 4))},
    kinks=lambda x, t: np.abs(x - t) < 2.0 ** -20,
    oracle=lambda ctx, x, t: abs(x - t),
    float64=(lambda x, t: np.abs(x - t), lambda x, t: (np.sign(x - t), np.sign(t - x))),
    notes=("maeLoss(x, target) = reduction of |x - target| (torch.nn.L1Loss).",
           "Gradient: sign(x - target) g, with sign(0) = 0 at the kink x = target (PyTorch's "
           "sgn) and NaN at a NaN difference; target gets the negation."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_mae_gradient_at_the_kink_is_zero",
                             "at x == target both gradients are 0")),
)


def _huber(xp, x, t, delta):
    d = xp.subtract(x, t)
    a = xp.abs(d)
    half = xp.full_like(d, "0.5")
    return xp.where(xp.less(a, delta), xp.multiply(half, xp.multiply(d, d)),
                    xp.multiply(delta, xp.subtract(a, xp.multiply(half, delta))))


def _huber_lin(xp, d, v, delta):
    """The derivative of the huber term at difference d applied to v: d v inside
    [-delta, delta] (both ends included: the two branches have the same slope there),
    +-delta v outside."""
    return xp.where(xp.greater(d, delta), xp.multiply(delta, v),
                    xp.where(xp.less(d, xp.negative(delta)),
                             xp.negative(xp.multiply(delta, v)), xp.multiply(d, v)))


def _positive_param(label):
    def validate(xp, a, x, t, p):
        if xp.isnan(p) or not xp.greater(p, xp.zeros_like(p)):
            return f"{label} must be > 0 (got {shown(xp, p)})"
        return None
    return validate


_pointwise(
    "huberLoss",
    f=_huber,
    dx=lambda xp, x, t, v, delta: _huber_lin(xp, xp.subtract(x, t), v, delta),
    dt=lambda xp, x, t, v, delta: _huber_lin(xp, xp.subtract(t, x), v, delta),
    params={"delta": 1.0},
    draws={"ordinary": _pair(-3, 3),
           "edges": lambda rng, n: (rng.choice([1.0, -1.0, 0.0, 0.5], n), np.zeros(n)),
           "special": _with_specials(_pair(-3, 3))},
    kinks=lambda x, t, delta: np.abs(np.abs(x - t) - delta) < 2.0 ** -20,
    oracle=lambda ctx, x, t, delta: (abs(x - t) ** 2 / 2 if abs(x - t) < delta
                                     else delta * (abs(x - t) - delta / 2)),
    float64=(lambda x, t, delta: np.where(np.abs(x - t) < delta, 0.5 * (x - t) * (x - t),
                                          delta * (np.abs(x - t) - 0.5 * delta)),
             lambda x, t, delta: (np.clip(x - t, -delta, delta), np.clip(t - x, -delta, delta))),
    validate=_positive_param("delta"),
    bad_inputs=(({}, ([0.0, 1.0, 2.0], [0.0, 0.0, 0.0], 0.0), "huberLoss: delta must be > 0 "
                 "(got 0)"),
                ({}, ([0.0, 1.0, 2.0], [0.0, 0.0, 0.0], np.nan), "delta must be > 0 (got nan)")),
    notes=("huberLoss(x, target, delta): with d = x - target, d^2 / 2 where |d| < delta, "
           "delta (|d| - delta / 2) elsewhere (torch.nn.HuberLoss; delta at a frozen port, "
           "torch's default 1).",
           "Gradient: d g for |d| <= delta, +-delta g beyond (PyTorch's huber_loss_backward); "
           "at |d| = delta both give +-delta g.  validate refuses delta <= 0 and NaN."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_huber_at_delta_is_continuous",
                             "at |x - target| = delta the value is delta^2 / 2 and the "
                             "gradient +-delta g")),
)


def _hinge_active(xp, x, y, margin):
    return xp.greater(xp.subtract(margin, xp.multiply(x, y)), xp.zeros_like(x))


_pointwise(
    "hingeLoss",
    f=lambda xp, x, y, margin: xp.maximum(xp.subtract(margin, xp.multiply(x, y)),
                                          xp.zeros_like(x)),
    dx=lambda xp, x, y, v, margin: xp.where(_hinge_active(xp, x, y, margin),
                                            xp.negative(xp.multiply(y, v)), xp.zeros_like(v)),
    dt=None,
    target_port="frozen",
    params={"margin": 1.0},
    draws={"ordinary": lambda rng, n: (rng.uniform(-3, 3, n), rng.choice([1.0, -1.0], n)),
           "edges": lambda rng, n: (rng.choice([1.0, -1.0, 0.0], n),
                                    rng.choice([1.0, -1.0], n)),
           "special": _with_specials(lambda rng, n: (rng.uniform(-3, 3, n),
                                                     rng.choice([1.0, -1.0], n)))},
    kinks=lambda x, y, margin: np.abs(margin - x * y) < 2.0 ** -20,
    oracle=lambda ctx, x, y, margin: ctx.nan if ctx.isnan(x * y) else max(margin - x * y,
                                                                            ctx.zero),
    float64=(lambda x, y, margin: np.maximum(margin - x * y, 0.0),
             lambda x, y, margin: (np.where(margin - x * y > 0, -y, 0.0), None)),
    notes=("hingeLoss(x, target, margin) = reduction of max(0, margin - target x): the "
           "binary (SVM) hinge with labels target (usually +-1) at a frozen port and the "
           "margin (default 1) at a frozen port; NaN propagates (IEEE maximum).",
           "Gradient: -target g where margin - target x > 0, else 0: 0 at the hinge point "
           "margin = target x (relu's subgradient at 0); no gradient to target or margin."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_hinge_gradient_at_the_hinge_point_is_zero",
                             "at target x = margin the gradient is 0")),
)

_pointwise(
    "poissonLoss",
    f=lambda xp, x, t: xp.subtract(xp.exp(x), xp.multiply(t, x)),
    dx=lambda xp, x, t, v: xp.multiply(xp.subtract(xp.exp(x), t), v),
    dt=lambda xp, x, t, v: xp.negative(xp.multiply(x, v)),
    params={},
    draws={"ordinary": lambda rng, n: (rng.uniform(-3, 3, n), rng.uniform(0, 5, n)),
           "edges": lambda rng, n: (rng.choice([-40.0, 0.0, 20.0, 700.0], n),
                                    rng.choice([0.0, 1.0, 3.0], n)),
           "special": _with_specials(lambda rng, n: (rng.uniform(-3, 3, n),
                                                     rng.uniform(0, 5, n)))},
    kinks=None,
    oracle=lambda ctx, x, t: ctx.exp(x) - t * x,
    float64=(lambda x, t: np.exp(x) - t * x, lambda x, t: (np.exp(x) - t, -x)),
    notes=("poissonLoss(x, target) = reduction of exp(x) - target x: "
           "torch.nn.PoissonNLLLoss with log_input=True and full=False (x is the log rate; "
           "no Stirling term).",
           "Gradient: (exp(x) - target) g at x, -x g at target."),
    examples=_FEW,
    certificates=("prepared",),
)


def _log_cosh(xp, x, t):
    """log cosh d without overflow or cancellation: log1p(2 sinh(|d|/2)^2) for |d| <= 20
    (cosh d - 1 = 2 sinh^2(d/2) exactly), |d| + log1p(exp(-2|d|)) - ln 2 beyond."""
    a = xp.abs(xp.subtract(x, t))
    small = xp.less_equal(a, xp.full_like(a, "20"))
    s = xp.sinh(xp.multiply(xp.where(small, a, xp.zeros_like(a)), xp.full_like(a, "0.5")))
    near = xp.log1p(xp.multiply(xp.full_like(a, "2"), xp.multiply(s, s)))
    far = xp.subtract(xp.add(a, xp.log1p(xp.exp(xp.multiply(xp.full_like(a, "-2"), a)))),
                      xp.full_like(a, _LN2))
    return xp.where(small, near, far)


_pointwise(
    "logCoshLoss",
    f=_log_cosh,
    dx=lambda xp, x, t, v: xp.multiply(xp.tanh(xp.subtract(x, t)), v),
    dt=lambda xp, x, t, v: xp.multiply(xp.tanh(xp.subtract(t, x)), v),
    params={},
    draws={"ordinary": _pair(-4, 4),
           "edges": lambda rng, n: (rng.choice([0.0, 1e-8, 19.9, 20.0, 20.1, 800.0, -800.0],
                                               n), np.zeros(n)),
           "special": _with_specials(_pair(-4, 4))},
    kinks=None,
    oracle=lambda ctx, x, t: ctx.nan if ctx.isnan(x - t) else (
        abs(x - t) if ctx.isinf(x - t) else ctx.log(ctx.cosh(x - t))),
    float64=(lambda x, t: np.where(
        np.abs(x - t) <= 20, np.log1p(2 * np.sinh(np.minimum(np.abs(x - t), 20) / 2) ** 2),
        np.abs(x - t) + np.log1p(np.exp(-2 * np.abs(x - t))) - np.log(2)),
        lambda x, t: (np.tanh(x - t), np.tanh(t - x))),
    notes=("logCoshLoss(x, target) = reduction of log(cosh(x - target)), computed as "
           "log1p(2 sinh(|d|/2)^2) for |d| <= 20 and |d| + log1p(exp(-2|d|)) - ln 2 beyond "
           "(no overflow of cosh, no cancellation near 0); infinite d gives inf.",
           "Gradient: tanh(x - target) g at x, its negation at target."),
    examples=_FEW,
    certificates=("prepared",),
)


# ----- binaryCrossEntropy ---------------------------------------------------------------------
def _bce_logs(xp, x):
    """(max(log x, -100), max(log1p(-x), -100), and whether each is above the clamp): the
    clamp of PyTorch's BCELoss, so x = 0 or 1 gives a finite loss."""
    floor = xp.full_like(x, "-100")
    l1, l0 = xp.log(x), xp.log1p(xp.negative(x))
    return (xp.maximum(l1, floor), xp.maximum(l0, floor),
            xp.greater(l1, floor), xp.greater(l0, floor))


def _bce(xp, x, t):
    l1, l0, _, _ = _bce_logs(xp, x)
    one = xp.ones_like(x)
    return xp.negative(xp.add(xp.multiply(t, l1), xp.multiply(xp.subtract(one, t), l0)))


def _bce_dx(xp, x, t, v):
    """d/dx of the clamped loss: -(t / x - (1 - t) / (1 - x)), each term 0 where its log is
    clamped (the selection keeps 1/0 out)."""
    _, _, on1, on0 = _bce_logs(xp, x)
    one, zero = xp.ones_like(x), xp.zeros_like(x)
    inv1 = xp.divide(one, xp.where(on1, x, one))
    inv0 = xp.divide(one, xp.where(on0, xp.subtract(one, x), one))
    d = xp.subtract(xp.where(on0, xp.multiply(xp.subtract(one, t), inv0), zero),
                    xp.where(on1, xp.multiply(t, inv1), zero))
    return xp.multiply(d, v)


def _bce_dt(xp, x, t, v):
    l1, l0, _, _ = _bce_logs(xp, x)
    return xp.multiply(xp.subtract(l0, l1), v)


def _bce_validate(xp, a, x, t):
    bad = xp.isnan(x) | xp.less(x, xp.zeros_like(x)) | xp.greater(x, xp.ones_like(x))
    if bad.any():
        return f"x must lie in [0, 1] (got {shown(xp, x)})"
    return None


def _mp_bce(ctx, x, t):
    def clamped(u):
        return ctx.mpf(-100) if u == 0 else max(ctx.log(u), ctx.mpf(-100))
    return -(t * clamped(x) + (1 - t) * clamped(1 - x))


def _np_bce(x, t):
    with np.errstate(divide="ignore"):
        return -(t * np.maximum(np.log(x), -100.0) + (1 - t) * np.maximum(np.log1p(-x), -100.0))


def _np_bce_slopes(x, t):
    with np.errstate(divide="ignore", invalid="ignore"):
        on1, on0 = np.log(x) > -100, np.log1p(-x) > -100
        l1, l0 = np.maximum(np.log(x), -100.0), np.maximum(np.log1p(-x), -100.0)
        dx = np.where(on0, (1 - t) * (1 / np.where(on0, 1 - x, 1.0)), 0.0) - \
            np.where(on1, t * (1 / np.where(on1, x, 1.0)), 0.0)
    return dx, l0 - l1


_pointwise(
    "binaryCrossEntropy",
    f=_bce, dx=_bce_dx, dt=_bce_dt,
    params={},
    draws={"ordinary": lambda rng, n: (rng.uniform(0.02, 0.98, n), rng.uniform(0, 1, n)),
           "edges": lambda rng, n: (rng.choice([0.0, 1.0, 1e-50, 1e-40, 0.5], n),
                                    rng.choice([0.0, 1.0, 0.5], n)),
           "special": lambda rng, n: (rng.choice([0.0, 1.0, -0.0, 0.25], n),
                                      rng.choice([0.0, 1.0, np.inf, np.nan], n)),
           # Probabilities log-uniform in [least subnormal, 1]: validate refuses x > 1.
           "magnitudes": lambda rng, n, fmt: (log_uniform(rng, fmt, np.ones(n), top=1.0),
                                              rng.uniform(0, 1, n))},
    kinks=None,
    oracle=_mp_bce,
    float64=(_np_bce, _np_bce_slopes),
    validate=_bce_validate,
    bad_inputs=(({}, ([0.5, 1.5, 0.0], [0.0, 1.0, 0.0]), "binaryCrossEntropy: x must lie in "
                 "[0, 1] (got [0.5, 1.5, 0])"),
                ({}, ([0.5, np.nan, 0.0], [0.0, 1.0, 0.0]), "x must lie in [0, 1]")),
    notes=("binaryCrossEntropy(x, target) = reduction of -(target log x + (1 - target) "
           "log(1 - x)) on probabilities x (torch.nn.BCELoss), each log clamped below at -100 "
           "as PyTorch does, so x = 0 or 1 gives a finite loss; log(1 - x) is computed as "
           "log1p(-x).",
           "validate refuses x outside [0, 1] and NaN x (PyTorch's check); target is not "
           "checked.",
           "Gradient: the derivative of the clamped loss, -(target / x - (1 - target) / "
           "(1 - x)) g with a clamped term contributing 0 (PyTorch divides by max(x (1 - x), "
           "1e-12) instead, which differs only within e^-100 of 0 and 1); target gets "
           "(log(1 - x) - log x) g, clamped logs."),
    examples=_FEW,
    certificates=("prepared",
                  convention(f"{TESTS}::test_bce_clamps_the_logs_at_minus_100",
                             "x = 0 or 1 gives loss 100 per mismatched term and a finite "
                             "gradient")),
)

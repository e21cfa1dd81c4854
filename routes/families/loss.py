"""Losses (spec: "Losses"), with PyTorch's reduction conventions: ``reduction`` mean (the
default: the sum divided by the number of terms), sum, or none (the per-term losses).

Pointwise losses (mse, mae, huber, hinge, poisson, logCosh, binaryCrossEntropy) take an input
and a target of one shape; cosineLoss compares slices along an axis; crossEntropy takes
logits and class indices at an index port, crossEntropyProbabilities logits and target
probabilities, distill student logits and a teacher at a detached port.  Numbers (delta,
margin, eps, temperature) travel at frozen ports.  Every sum (the reduction, the
log-sum-exp, the norms) goes through xp.sum, so the numerics policy applies; the softmax
inside the cross entropies subtracts the slice's maximum first.
"""

from __future__ import annotations

import math

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import detached, frozen, index, value
from ..registry import Float64, define
from ..rules import saving, shown
from ..samples import into, log_uniform, target
from .softmax_attention import log_softmax

TESTS = "tests/test_routes_loss.py"
REDUCTIONS = ("mean", "sum", "none")
_LN2 = "0.693147180559945309417232121458176568075500134360255254120680009493393621969694715605863"


# ----- the reduction --------------------------------------------------------------------------
def _count(shape) -> int:
    return math.prod(shape)                       # a shape's size: data, not a value


def _reduce(xp, how, terms):
    """The per-term losses reduced: none (as they are), sum, or mean (sum / count, the count
    rounded once as PyTorch's division by numel)."""
    if how == "none":
        return terms
    total = xp.sum(terms)
    if how == "sum":
        return total
    return xp.divide(total, xp.constant(_count(np.shape(terms))))


def _spread(xp, how, g, shape):
    """The cotangent of the reduced loss as per-term cotangents (the reduction's adjoint)."""
    if how == "none":
        return g
    g = np.broadcast_to(g, shape)
    if how == "sum":
        return g
    return xp.divide(g, xp.constant(_count(shape), shape))


def _reduction_check(a, shape):
    if a.reduction != "none" and _count(shape) == 0:
        return (f"reduction {a.reduction} needs at least one term (got shape "
                f"{list(shape)})")
    return None


def _mp_reduce(ctx, how, terms):
    terms = np.asarray(terms, dtype=object)
    if how == "none":
        return terms
    total = ctx.fsum(terms.reshape(-1).tolist())
    return np.asarray(total if how == "sum" else total / terms.size, dtype=object)


def _np_reduce(how, terms):
    if how == "none":
        return terms
    total = np.sum(terms)
    return total if how == "sum" else total / terms.size


def _reduction_attr():
    return A.choice("reduction", REDUCTIONS, doc="mean (sum / count), sum, or none: "
                    "PyTorch's reduction of the per-term losses")


def _out_port(a, shape):
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
                 **{k: frozen() for k in names}}, {"loss": _out_port(a, a.shape)})

    def forward(xp, a, x, t, *ps):
        return _reduce(xp, a.reduction, f(xp, x, t, *ps))

    def backward(xp, a, xs, ys, gs, needs):
        x, t, *ps = xs
        g = _spread(xp, a.reduction, gs[0], a.shape)
        gt = dt(xp, x, t, g, *ps) if needs[1] and dt is not None else None
        return (dx(xp, x, t, g, *ps), gt) + (None,) * len(names)

    def jvp(xp, a, xs, ys, ts):
        x, t, *ps = xs
        lin = dx(xp, x, t, ts[0], *ps)
        if ts[1] is not None and dt is not None:
            lin = xp.add(lin, dt(xp, x, t, ts[1], *ps))
        return _reduce(xp, a.reduction, lin)

    def sampler(kind):
        def draw(rng, fmt, op):
            shape = op.attrs.shape
            n = _count(shape)
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
        return (_mp_reduce(ctx, a.reduction, terms),)

    more.setdefault("examples", {"": {}, "sum": {"reduction": "sum"},
                                 "none-2x2": {"reduction": "none", "shape": (2, 2)}})
    return define(
        name, "loss",
        attributes=(A.shape(), _reduction_attr()),
        ports=ports, forward=forward, backward=backward, jvp=jvp,
        check=lambda a: _reduction_check(a, a.shape),
        validate=validate,
        samples={k: sampler(k) for k in draws},
        oracle=mp_oracle,
        float64=Float64(lambda a, x, t, *ps: _np_reduce(a.reduction, float64[0](x, t, *ps)),
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


# ----- losses over slices: shared pieces ------------------------------------------------------
def _class_axis(shape) -> int:
    """PyTorch's class axis: 1 for rank >= 2, else 0."""
    return 1 if len(shape) >= 2 else 0


def _rest(shape, axis) -> tuple:
    return tuple(n for i, n in enumerate(shape) if i != axis)


def _logits_check(a):
    if len(a.shape) == 0:
        return "shape must have rank >= 1 (got [])"
    c = a.shape[_class_axis(a.shape)]
    if c == 0:
        return f"the class axis {_class_axis(a.shape)} must have extent > 0 (got shape " \
               f"{list(a.shape)})"
    return _reduction_check(a, _rest(a.shape, _class_axis(a.shape)))


_LOGITS_BAD = (({"shape": ()}, "shape must have rank >= 1 (got [])"),
               ({"shape": (2, 0)}, "the class axis 1 must have extent > 0"),
               ({"shape": (0, 3)}, "reduction mean needs at least one term (got shape [0])"))
_LOGITS_EXAMPLES = {"": {}, "sum-rank1": {"shape": (3,), "reduction": "sum"},
                    "none": {"reduction": "none"}}


def _logits(rng, fmt, shape, kind):
    """Logits: uniform in [-4, 4]; edges +-1000 among them (the shift matters)."""
    n = _count(shape)
    x = rng.uniform(-4, 4, n)
    if kind == "edges":
        top = float(target(fmt).max_finite)
        big = np.clip([1000.0, -1000.0, 0.0], -top, top)
        x = np.where(rng.random(n) < 0.6, big[rng.integers(0, 3, n)], x)
    elif kind == "special":
        vals = np.array([0.0, np.inf, -np.inf, np.nan])
        x = np.where(rng.random(n) < 0.3, vals[rng.integers(0, 4, n)], x)
    return into(x, fmt).reshape(shape)


def _expand(g, axis):
    """Per-slice values broadcast back along ``axis`` (data movement)."""
    return np.expand_dims(g, axis)


def _mp_lse_rows(ctx, x, axis):
    """(rows of x along axis as lists, log-sum-exp of each) in mpmath, from the definition:
    NaN or +inf in a row, or a row of all -inf, gives NaN."""
    moved = np.moveaxis(np.asarray(x, dtype=object), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1]).tolist()
    lse = []
    for r in rows:
        if any(ctx.isnan(v) or v == ctx.inf for v in r) or all(v == -ctx.inf for v in r):
            lse.append(ctx.nan)
        else:
            lse.append(ctx.log(ctx.fsum(ctx.exp(v) for v in r if v != -ctx.inf)))
    return rows, lse, moved.shape[:-1]


def _np_lsm(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _np_cep(a, x, t):
    return _np_reduce(a.reduction, -np.sum(t * _np_lsm(x, _class_axis(a.shape)),
                                           axis=_class_axis(a.shape)))


def _np_distill(a, s, teacher, temp):
    ax = _class_axis(a.shape)
    lp, lq = _np_lsm(teacher / temp, ax), _np_lsm(s / temp, ax)
    p = np.exp(lp)
    kl = np.sum(np.where(p > 0, p * lp, 0.0) - p * lq, axis=ax)
    return _np_reduce(a.reduction, temp * temp * kl)


def _np_cos(a, x, t, eps):
    ax = a.axis
    dot = np.sum(x * t, axis=ax)
    nx, nt = np.sqrt(np.sum(x * x, axis=ax)), np.sqrt(np.sum(t * t, axis=ax))
    return _np_reduce(a.reduction, 1 - dot / (np.maximum(nx, eps) * np.maximum(nt, eps)))


# ----- crossEntropy ---------------------------------------------------------------------------
def _onehot(t, axis, classes):
    """Booleans: True at the target class of each slice (data movement on indices)."""
    return np.moveaxis(np.expand_dims(t, -1) == np.arange(classes), -1, axis)


def _ce_forward(xp, a, x, t):
    ax = _class_axis(a.shape)
    lsm = log_softmax(xp, x, ax)
    picked = np.take_along_axis(lsm, np.expand_dims(t, ax), axis=ax)
    loss = _reduce(xp, a.reduction, xp.negative(np.squeeze(picked, axis=ax)))
    return saving(loss, log_softmax=lsm)


def _ce_backward(xp, a, xs, ys, gs, needs):
    x, t = xs
    ax = _class_axis(a.shape)
    p = xp.exp(ys.saved["log_softmax"])
    hot = _onehot(t, ax, a.shape[ax])
    g = _expand(_spread(xp, a.reduction, gs[0], _rest(a.shape, ax)), ax)
    diff = xp.where(hot, xp.subtract(p, xp.ones_like(p)), p)
    return xp.multiply(diff, g), None


def _ce_jvp(xp, a, xs, ys, ts):
    x, t = xs
    ax = _class_axis(a.shape)
    p = xp.exp(ys.saved["log_softmax"])
    hot = _onehot(t, ax, a.shape[ax])
    tx = ts[0]
    picked = xp.sum(xp.where(hot, tx, xp.zeros_like(tx)), axis=ax)
    return _reduce(xp, a.reduction, xp.subtract(xp.sum(xp.multiply(p, tx), axis=ax), picked))


def _ce_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        ax = _class_axis(shape)
        t = rng.integers(0, shape[ax], _rest(shape, ax)).astype(np.int64)
        return _logits(rng, fmt, shape, kind), t
    return sampler


def _mp_ce(ctx, a, x, t):
    ax = _class_axis(a.shape)
    rows, lse, rest = _mp_lse_rows(ctx, x, ax)
    terms = [s - r[int(c)] for r, s, c in zip(rows, lse, np.ravel(t).tolist())]
    return (_mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


define(
    "crossEntropy", "loss",
    attributes=(A.shape(default=(2, 3), doc="the logits' shape: [N, C, ...] or [C] (class "
                        "axis 1, or 0 at rank 1, as PyTorch)"), _reduction_attr()),
    ports=lambda a: ({"x": value(a.shape),
                      "target": index((a.shape[_class_axis(a.shape)] if a.shape else 1,),
                                      _rest(a.shape, _class_axis(a.shape)))},
                     {"loss": _out_port(a, _rest(a.shape, _class_axis(a.shape)))}),
    forward=_ce_forward,
    backward=_ce_backward,
    jvp=_ce_jvp,
    check=_logits_check,
    samples={k: _ce_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_mp_ce,
    examples=_LOGITS_EXAMPLES,
    bad_attributes=_LOGITS_BAD,
    notes=("crossEntropy(x, target) = reduction of logsumexp(x_n) - x_n[target_n] over the "
           "class axis (1, or 0 at rank 1), target class indices at an index port "
           "(torch.nn.CrossEntropyLoss without weights, ignore_index or label smoothing); "
           "mean divides by the number of targets.",
           "The log-softmax subtracts each slice's maximum first: logits of 1000 do not "
           "overflow.  A NaN or +inf logit, or a slice of all -inf, gives NaN.",
           "prepare keeps the log-softmax; gradient (softmax(x) - onehot(target)) g (PyTorch's "
           "formula); the indices have no gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_cross_entropy_large_logits_do_not_overflow",
                             "logits of 1000 give the exact log-sum-exp loss, no overflow",
                             route="forward")),
)


# ----- crossEntropyProbabilities --------------------------------------------------------------
def _cep_forward(xp, a, x, t):
    ax = _class_axis(a.shape)
    lsm = log_softmax(xp, x, ax)
    terms = xp.negative(xp.sum(xp.multiply(t, lsm), axis=ax))
    return saving(_reduce(xp, a.reduction, terms), log_softmax=lsm)


def _cep_backward(xp, a, xs, ys, gs, needs):
    x, t = xs
    ax = _class_axis(a.shape)
    lsm = ys.saved["log_softmax"]
    g = _expand(_spread(xp, a.reduction, gs[0], _rest(a.shape, ax)), ax)
    # d/dx of -sum(t * lsm) = softmax * sum(t) - t (PyTorch's formula keeps sum(t)).
    gx = xp.multiply(xp.subtract(xp.multiply(xp.exp(lsm), xp.sum(t, axis=ax, keepdims=True)),
                                 t), g)
    gt = xp.multiply(xp.negative(lsm), g) if needs[1] else None
    return gx, gt


def _cep_jvp(xp, a, xs, ys, ts):
    x, t = xs
    ax = _class_axis(a.shape)
    lsm = ys.saved["log_softmax"]
    tx, tt = ts
    dl = xp.subtract(tx, xp.sum(xp.multiply(xp.exp(lsm), tx), axis=ax, keepdims=True))
    lin = xp.add(xp.multiply(t, dl), xp.multiply(tt, lsm))
    return _reduce(xp, a.reduction, xp.negative(xp.sum(lin, axis=ax)))


def _cep_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        ax = _class_axis(shape)
        w = rng.uniform(0.05, 1, shape)
        t = into(w / np.sum(w, axis=ax, keepdims=True), fmt)
        if kind == "edges":                          # one-hot targets: the hard-label case
            t = (w == np.max(w, axis=ax, keepdims=True)).astype(np.float64)
        return _logits(rng, fmt, shape, kind), t
    return sampler


def _mp_cep(ctx, a, x, t):
    ax = _class_axis(a.shape)
    rows, lse, rest = _mp_lse_rows(ctx, x, ax)
    trows = np.moveaxis(np.asarray(t, dtype=object), ax, -1).reshape(len(rows), -1).tolist()
    terms = [ctx.fsum(p * (s - v) for p, v in zip(tr, r)) for r, s, tr in zip(rows, lse, trows)]
    return (_mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


define(
    "crossEntropyProbabilities", "loss",
    attributes=(A.shape(default=(2, 3), doc="the logits' shape: [N, C, ...] or [C] (class "
                        "axis 1, or 0 at rank 1)"), _reduction_attr()),
    ports=lambda a: ({"x": value(a.shape), "target": value(a.shape)},
                     {"loss": _out_port(a, _rest(a.shape, _class_axis(a.shape)) if a.shape
                                        else ())}),
    forward=_cep_forward,
    backward=_cep_backward,
    jvp=_cep_jvp,
    check=_logits_check,
    samples={k: _cep_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_mp_cep,
    float64=Float64(_np_cep, ulps=4),
    examples=_LOGITS_EXAMPLES,
    bad_attributes=_LOGITS_BAD,
    notes=("crossEntropyProbabilities(x, target) = reduction of -sum_c target_c "
           "logSoftmax(x)_c over the class axis (1, or 0 at rank 1): torch.nn.CrossEntropyLoss "
           "with class-probability targets; mean divides by the number of slices.  The "
           "target is not checked to be a distribution.",
           "The log-softmax subtracts each slice's maximum first.  A target of 0 against a "
           "-inf logit gives 0 * -inf = NaN (as PyTorch).",
           "prepare keeps the log-softmax; gradient (softmax(x) sum(target) - target) g at x, "
           "-logSoftmax(x) g at target."),
    certificates=("prepared",),
)


# ----- distill --------------------------------------------------------------------------------
def _distill_parts(xp, a, s, teacher, temp):
    ax = _class_axis(a.shape)
    lp = log_softmax(xp, xp.divide(teacher, temp), ax)
    lq = log_softmax(xp, xp.divide(s, temp), ax)
    return ax, lp, lq, xp.exp(lp)


def _distill_forward(xp, a, s, teacher, temp):
    ax, lp, lq, p = _distill_parts(xp, a, s, teacher, temp)
    # PyTorch's kl_div: xlogy(p, p) - p lq, with xlogy(0, .) = 0 (a -inf teacher logit).
    plogp = xp.where(xp.greater(p, xp.zeros_like(p)), xp.multiply(p, lp), xp.zeros_like(p))
    kl = xp.sum(xp.subtract(plogp, xp.multiply(p, lq)), axis=ax)
    terms = xp.multiply(xp.multiply(temp, temp), kl)
    return saving(_reduce(xp, a.reduction, terms), lp=lp, lq=lq)


def _distill_backward(xp, a, xs, ys, gs, needs):
    s, teacher, temp = xs
    ax = _class_axis(a.shape)
    p, q = xp.exp(ys.saved["lp"]), xp.exp(ys.saved["lq"])
    g = _expand(_spread(xp, a.reduction, gs[0], _rest(a.shape, ax)), ax)
    # d/ds of T^2 sum p (lp - lq) = T (q sum(p) - p).
    d = xp.subtract(xp.multiply(q, xp.sum(p, axis=ax, keepdims=True)), p)
    return xp.multiply(xp.multiply(temp, d), g), None, None


def _distill_jvp(xp, a, xs, ys, ts):
    s, teacher, temp = xs
    ax = _class_axis(a.shape)
    p, q = xp.exp(ys.saved["lp"]), xp.exp(ys.saved["lq"])
    dz = ts[0]
    inner = xp.subtract(xp.multiply(xp.sum(p, axis=ax), xp.sum(xp.multiply(q, dz), axis=ax)),
                        xp.sum(xp.multiply(p, dz), axis=ax))
    return _reduce(xp, a.reduction, xp.multiply(temp, inner))


def _distill_validate(xp, a, s, teacher, temp):
    if xp.isnan(temp) or not xp.greater(temp, xp.zeros_like(temp)):
        return f"temperature must be > 0 (got {shown(xp, temp)})"
    return None


def _distill_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        temp = {"ordinary": 2.0, "edges": 0.5, "special": 1.0}[kind]
        return (_logits(rng, fmt, shape, kind), _logits(rng, fmt, shape, kind),
                np.asarray(into(temp, fmt)))
    return sampler


def _mp_distill(ctx, a, s, teacher, temp):
    ax = _class_axis(a.shape)
    temp = temp[()]
    rows_s, lse_s, rest = _mp_lse_rows(ctx, np.asarray(s, dtype=object) / temp, ax)
    rows_t, lse_t, _ = _mp_lse_rows(ctx, np.asarray(teacher, dtype=object) / temp, ax)
    terms = []
    for rs, ls, rt, lt in zip(rows_s, lse_s, rows_t, lse_t):
        lp = [v - lt if v != -ctx.inf else -ctx.inf for v in rt]
        lq = [v - ls for v in rs]
        kl = ctx.fsum((ctx.exp(u) * u if u != -ctx.inf else ctx.zero) - ctx.exp(u) * w
                      for u, w in zip(lp, lq))
        terms.append(ctx.nan if ctx.isnan(lt) or ctx.isnan(ls) else temp * temp * kl)
    return (_mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


define(
    "distill", "loss",
    attributes=(A.shape(default=(2, 3), doc="the logits' shape: [N, C, ...] or [C] (class "
                        "axis 1, or 0 at rank 1)"), _reduction_attr()),
    ports=lambda a: ({"x": value(a.shape), "teacher": detached(a.shape),
                      "temperature": frozen()},
                     {"loss": _out_port(a, _rest(a.shape, _class_axis(a.shape)) if a.shape
                                        else ())}),
    forward=_distill_forward,
    backward=_distill_backward,
    jvp=_distill_jvp,
    check=_logits_check,
    validate=_distill_validate,
    samples={k: _distill_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_mp_distill,
    float64=Float64(_np_distill, ulps=4),
    examples=_LOGITS_EXAMPLES,
    bad_attributes=_LOGITS_BAD,
    bad_inputs=(({}, (np.zeros((2, 3)), np.zeros((2, 3)), 0.0),
                 "distill: temperature must be > 0 (got 0)"),
                ({}, (np.zeros((2, 3)), np.zeros((2, 3)), np.nan),
                 "temperature must be > 0 (got nan)")),
    notes=("distill(x, teacher, T) = reduction of T^2 KL(p || q) over the class axis, "
           "p = softmax(teacher / T), q = softmax(x / T) (Hinton's distillation loss, "
           "PyTorch's T^2 kl_div(log_softmax(x/T), softmax(teacher/T))); mean divides the sum "
           "by the number of slices (kl_div's batchmean for [N, C] logits).",
           "The teacher is read at a detached port (no contribution, as PyTorch's detach); "
           "the temperature at a frozen port; validate refuses T <= 0 and NaN.",
           "Both log-softmaxes subtract the slice's maximum first; the terms are PyTorch's "
           "kl_div, xlogy(p, p) - p log q with xlogy(0, .) = 0, so a teacher probability of "
           "0 (a -inf teacher logit, or underflow) contributes 0.",
           "prepare keeps both log-softmaxes; gradient T (q sum(p) - p) g at x."),
    certificates=("prepared",),
)


# ----- cosineLoss -----------------------------------------------------------------------------
def _cos_parts(xp, a, x, t, eps):
    """(dot, |x|, |t|, max(|x|, eps), max(|t|, eps), cos) along axis, keepdims."""
    ax = a.axis
    dot = xp.sum(xp.multiply(x, t), axis=ax, keepdims=True)
    nx = xp.sqrt(xp.sum(xp.multiply(x, x), axis=ax, keepdims=True))
    nt = xp.sqrt(xp.sum(xp.multiply(t, t), axis=ax, keepdims=True))
    cx, ct = xp.maximum(nx, eps), xp.maximum(nt, eps)
    return dot, nx, nt, cx, ct, xp.divide(dot, xp.multiply(cx, ct))


def _cos_forward(xp, a, x, t, eps):
    *_, c = _cos_parts(xp, a, x, t, eps)
    terms = np.squeeze(xp.subtract(xp.ones_like(c), c), axis=a.axis)
    return _reduce(xp, a.reduction, terms)


def _cos_dir(xp, u, w, nu, cu, cw, c, eps):
    """d cos / d u (the other operand w fixed): w / (cu cw) - c [|u| > eps] u / |u|^2 (the
    clamped norm has slope 0; the selection keeps 0 / 0 out)."""
    on = xp.greater(nu, eps)
    nu2 = xp.where(on, xp.multiply(nu, nu), xp.ones_like(nu))
    pull = xp.where(on, xp.divide(c, nu2), xp.zeros_like(nu))
    return xp.subtract(xp.divide(w, xp.multiply(cu, cw)), xp.multiply(pull, u))


def _cos_backward(xp, a, xs, ys, gs, needs):
    x, t, eps = xs
    _, nx, nt, cx, ct, c = _cos_parts(xp, a, x, t, eps)
    g = xp.negative(_expand(_spread(xp, a.reduction, gs[0], _rest(a.shape, a.axis)),
                            a.axis))
    gx = xp.multiply(_cos_dir(xp, x, t, nx, cx, ct, c, eps), g)
    gt = xp.multiply(_cos_dir(xp, t, x, nt, ct, cx, c, eps), g) if needs[1] else None
    return gx, gt, None


def _cos_jvp(xp, a, xs, ys, ts):
    x, t, eps = xs
    _, nx, nt, cx, ct, c = _cos_parts(xp, a, x, t, eps)
    lin = xp.add(xp.multiply(_cos_dir(xp, x, t, nx, cx, ct, c, eps), ts[0]),
                 xp.multiply(_cos_dir(xp, t, x, nt, ct, cx, c, eps), ts[1]))
    return _reduce(xp, a.reduction, xp.negative(xp.sum(lin, axis=a.axis)))


def _cos_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        x, t = rng.uniform(-2, 2, shape), rng.uniform(-2, 2, shape)
        if kind == "edges":
            # Antiparallel and zero slices.  Not parallel ones: 1 - cos = 0 there is the
            # cancellation of two roundings, which no relative comparison can judge.
            per = list(shape)
            per[op.attrs.axis] = 1
            t = x * rng.choice([-1.0, 0.0, -2.0], per)
        elif kind == "special":
            vals = np.array([0.0, np.inf, np.nan])
            x = np.where(rng.random(shape) < 0.3, vals[rng.integers(0, 3, shape)], x)
        return into(x, fmt), into(t, fmt), np.asarray(into(1e-8, fmt))
    return sampler


def _mp_cos(ctx, a, x, t, eps):
    eps = eps[()]
    xm = np.moveaxis(np.asarray(x, dtype=object), a.axis, -1)
    tm = np.moveaxis(np.asarray(t, dtype=object), a.axis, -1)
    rest = xm.shape[:-1]
    terms = []
    for r, w in zip(xm.reshape(-1, xm.shape[-1]).tolist(), tm.reshape(-1, tm.shape[-1]).tolist()):
        nx, nt = ctx.sqrt(ctx.fsum(v * v for v in r)), ctx.sqrt(ctx.fsum(v * v for v in w))
        terms.append(1 - ctx.fsum(u * v for u, v in zip(r, w)) / (max(nx, eps) * max(nt, eps))
                     if not (ctx.isnan(nx) or ctx.isnan(nt)) else ctx.nan)
    return (_mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


def _cos_check(a):
    rank = len(a.shape)
    if a.axis >= rank:
        return f"axis must be < rank {rank} (got {a.axis})"
    return _reduction_check(a, _rest(a.shape, a.axis))


define(
    "cosineLoss", "loss",
    attributes=(A.shape(default=(2, 3)),
                A.nat("axis", 1, gen=(0, 3), doc="the axis the cosine is taken along"),
                _reduction_attr()),
    ports=lambda a: ({"x": value(a.shape), "target": value(a.shape), "eps": frozen()},
                     {"loss": _out_port(a, _rest(a.shape, a.axis))}),
    forward=_cos_forward,
    backward=_cos_backward,
    jvp=_cos_jvp,
    check=_cos_check,
    samples={k: _cos_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_mp_cos,
    float64=Float64(_np_cos, ulps=4),
    examples={"": {}, "rank1-sum": {"shape": (3,), "axis": 0, "reduction": "sum"},
              "none": {"reduction": "none"}},
    bad_attributes=(({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
                    ({"shape": (0, 3)}, "reduction mean needs at least one term")),
    notes=("cosineLoss(x, target, eps) = reduction of 1 - cos(x, target) over the slices "
           "along axis, cos = sum(x target) / (max(|x|, eps) max(|target|, eps)) (PyTorch's "
           "cosine_similarity, each norm clamped at eps; eps at a frozen port, default "
           "1e-8): CosineEmbeddingLoss with every label +1.",
           "A zero vector gives cos = 0, loss 1; a NaN or inf entry gives NaN.  Near "
           "parallel slices 1 - cos cancels: its error is absolute (a few ulps of 1).",
           "Gradient at x: -(target / (cx ct) - cos x / |x|^2) g, cx = max(|x|, eps); the "
           "second term is 0 where |x| <= eps (the clamp's slope); symmetric at target."),
    certificates=("prepared",),
)

"""Normalization (spec: "layerNorm over the last axis, batchNorm with batch statistics and
batchNormRunning with running statistics along any axis"), each with an affine weight and
bias (value ports) and epsilon at a frozen port.

Statistics are backend sums (``xp.sum`` in the policy order and accumulation format) divided
once by the integer count: mean mu = sum(x)/n, biased variance sum((x - mu)^2)/n (the two-pass
form), then x_hat = (x - mu) * rsqrt(var + eps) and y = x_hat * weight + bias.
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from ..ports import frozen, value
from ..registry import define
from ..rules import saving, shown
from .reduction import axes_problem, constant_draw, from_last, mp_array, to_last, \
    uniform_sampler


def _groups(x, axes):
    """x as (R, n): the normalized groups in rows."""
    f = to_last(x, axes)
    return np.reshape(f, (-1, f.shape[-1]))


def _mean_last(xp, f):
    """The mean of a (R, n) array along its last axis, (R, 1)."""
    return xp.divide(xp.sum(f, axis=-1, keepdims=True), xp.constant(f.shape[-1]))


def _param(v, shape, axis):
    """A per-channel parameter (extent shape[axis]) shaped to broadcast against ``shape``."""
    return np.reshape(v, tuple(n if ax == axis else 1 for ax, n in enumerate(shape)))


def _sum_except(xp, v, axis, channels):
    """sum of v over every axis but ``axis`` (a parameter's gradient)."""
    axes = tuple(ax for ax in range(np.ndim(v)) if ax != axis)
    if not axes:
        return v
    if np.size(v) == 0:
        return xp.constant(0, (channels,))
    return np.reshape(xp.sum(v, axis=axes), (channels,))


def _eps_problem(xp, eps):
    if not xp.isfinite(eps) or xp.less(eps, xp.zeros_like(eps)):
        return f"eps must be finite and >= 0 (got {shown(xp, eps)})"
    return None


# ----- batch statistics (layerNorm, batchNorm) -----------------------------------------------
def _batch_forward(axes, axis):
    """forward(xp, a, x, weight, bias, eps) normalizing over ``axes(a)`` with the parameters
    along ``axis(a)``; keeps x_hat and 1/sigma (flat, groups last) for the rules."""
    def forward(xp, a, x, w, b, eps):
        ax, shape = axes(a), a.shape
        if np.size(x) == 0:
            return saving(xp.zeros_like(x), xhat=None, r=None)
        f = _groups(x, ax)
        d = xp.subtract(f, _mean_last(xp, f))
        r = xp.rsqrt(xp.add(_mean_last(xp, xp.multiply(d, d)), eps))
        xhat = xp.multiply(d, r)
        xh = from_last(xhat, shape, ax)
        y = xp.add(xp.multiply(xh, _param(w, shape, axis(a))), _param(b, shape, axis(a)))
        return saving(y, xhat=xhat, r=r)
    return forward


def _batch_jvp(axes, axis):
    def jvp(xp, a, xs, ys, ts):
        x, w, _, _ = xs
        tx, tw, tb, _ = ts
        if ys.saved["xhat"] is None:
            return xp.zeros_like(x)
        ax, shape, c = axes(a), a.shape, axis(a)
        xhat, r = ys.saved["xhat"], ys.saved["r"]
        t = _groups(tx, ax)
        dd = xp.subtract(t, _mean_last(xp, t))
        dxhat = xp.multiply(r, xp.subtract(dd, xp.multiply(xhat, _mean_last(
            xp, xp.multiply(xhat, dd)))))
        xh = from_last(xhat, shape, ax)
        return xp.add(xp.add(xp.multiply(from_last(dxhat, shape, ax), _param(w, shape, c)),
                             xp.multiply(xh, _param(tw, shape, c))), _param(tb, shape, c))
    return jvp


def _batch_backward(axes, axis):
    def backward(xp, a, xs, ys, gs, needs):
        x, w, _, _ = xs
        g = gs[0]
        ax, shape, c = axes(a), a.shape, axis(a)
        channels = shape[c]
        if ys.saved["xhat"] is None:
            return (xp.zeros_like(x), xp.constant(0, (channels,)),
                    xp.constant(0, (channels,)), None)
        xhat, r = ys.saved["xhat"], ys.saved["r"]
        gx = gw = gb = None
        if needs[0]:
            gh = _groups(xp.multiply(g, _param(w, shape, c)), ax)
            u = xp.subtract(gh, xp.multiply(xhat, _mean_last(xp, xp.multiply(xhat, gh))))
            gx = from_last(xp.multiply(r, xp.subtract(u, _mean_last(xp, u))), shape, ax)
        if needs[1]:
            gw = _sum_except(xp, xp.multiply(g, from_last(xhat, shape, ax)), c, channels)
        if needs[2]:
            gb = _sum_except(xp, g, c, channels)
        return gx, gw, gb, None
    return backward


def _batch_oracle(axes, axis):
    def oracle(ctx, a, x, w, b, eps):
        ax, shape, c = axes(a), a.shape, axis(a)
        rows = _groups(x, ax)
        out = []
        for row in rows:
            n = len(row)
            mu = ctx.fsum(row) / n
            var = ctx.fsum((v - mu) ** 2 for v in row) / n
            out.append([(v - mu) / ctx.sqrt(var + eps[()]) for v in row])
        xh = from_last(mp_array([v for row in out for v in row], rows.shape), shape, ax)
        y = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            y[idx] = xh[idx] * w[idx[c]] + b[idx[c]]
        return (y,)
    return oracle


def _eps_draw(rng, fmt, port):
    return rng.uniform(0.01, 0.1)


def _constant_rows(axes):
    """Edge samples: some normalized groups constant (variance 0: y = bias), eps at 0.01."""
    def sampler(rng, fmt, op):
        x, w, b, eps = uniform_sampler(-2, 2, fixed={"eps": _eps_draw})(rng, fmt, op)
        f = np.array(_groups(x, axes(op.attrs)))
        f[::2] = f[::2, :1]
        return from_last(f, op.attrs.shape, axes(op.attrs)), w, b, eps
    return sampler


def _batch_norm(name, axes, axis, bad_inputs, **more):
    define(
        name, "normalization",
        ports=lambda a: ({"x": value(a.shape), "weight": value((a.shape[axis(a)],)),
                          "bias": value((a.shape[axis(a)],)), "eps": frozen()},
                         {"y": value(a.shape)}),
        forward=_batch_forward(axes, axis),
        backward=_batch_backward(axes, axis),
        jvp=_batch_jvp(axes, axis),
        validate=lambda xp, a, x, w, b, eps: _eps_problem(xp, eps),
        samples={"ordinary": uniform_sampler(-2, 2, fixed={"eps": _eps_draw}),
                 "edges": _constant_rows(axes)},
        oracle=_batch_oracle(axes, axis),
        bad_inputs=bad_inputs,
        certificates=("derivative", "prepared"),
        **more)


def _ln_check(a):
    if not a.shape or a.shape[-1] == 0:
        return f"shape must end in a positive extent (got {list(a.shape)})"
    return None


def _bad_eps(name, shape):
    c = shape[-1] if name == "layerNorm" else shape[1]
    args = lambda eps: (np.zeros(shape), np.ones(c), np.zeros(c), eps)
    return (({}, args(-1.0), f"{name}: eps must be finite and >= 0 (got -1)"),
            ({}, args(np.inf), f"{name}: eps must be finite and >= 0 (got inf)"),
            ({}, args(np.nan), f"{name}: eps must be finite and >= 0 (got nan)"))


_batch_norm(
    "layerNorm",
    axes=lambda a: (len(a.shape) - 1,), axis=lambda a: len(a.shape) - 1,
    attributes=(A.shape(default=(2, 3), doc="the operand; the last axis is normalized"),),
    check=_ln_check,
    examples={"": {}, "row": {"shape": (4,)}},
    notes=("layerNorm(x, weight, bias, eps) over the last axis (PyTorch's layer_norm with "
           "normalized_shape the last extent): y = (x - mu) * rsqrt(var + eps) * weight + "
           "bias, var the biased (1/n) variance, two-pass; eps is a frozen scalar, finite "
           "and >= 0 (validate).",
           "A constant row has var = 0: y = bias when eps > 0 (0/0 NaN when eps = 0).",
           "Gradient in x: rsqrt(var+eps) * P(u), u = g w - x_hat mean(x_hat g w), P removing "
           "the mean; weight: sum of g x_hat over the leading axes; bias: sum of g."),
    bad_attributes=(({"shape": ()}, "layerNorm: shape must end in a positive extent"),
                    ({"shape": (2, 0)}, "layerNorm: shape must end in a positive extent")),
    bad_inputs=_bad_eps("layerNorm", (2, 3)),
)


def _bn_axes(a):
    return (0,) + tuple(range(2, len(a.shape)))


def _bn_check(a):
    if len(a.shape) < 2:
        return f"shape must be (batch, channels, ...) of rank >= 2 (got {list(a.shape)})"
    if a.shape[1] and any(a.shape[ax] == 0 for ax in _bn_axes(a)):
        return f"every channel needs at least one value (got shape {list(a.shape)})"
    return None


_batch_norm(
    "batchNorm",
    axes=_bn_axes, axis=lambda a: 1,
    attributes=(A.shape(default=(3, 2), doc="(batch, channels, spatial...)"),),
    check=_bn_check,
    examples={"": {}, "spatial": {"shape": (2, 2, 2)}},
    notes=("batchNorm(x, weight, bias, eps) with batch statistics (PyTorch's batch_norm in "
           "training mode, without updating running statistics): per channel (axis 1) over "
           "the batch and spatial axes, y = (x - mu) * rsqrt(var + eps) * weight + bias, var "
           "biased (1/n), two-pass; eps frozen, finite and >= 0 (validate).",
           "One value per channel gives var = 0 and y = bias (PyTorch refuses it in training).",
           "Gradient as layerNorm's, the statistics' groups being the channels."),
    bad_attributes=(({"shape": (3,)}, "batchNorm: shape must be (batch, channels, ...)"),
                    ({"shape": (0, 2)}, "batchNorm: every channel needs at least one value")),
    bad_inputs=_bad_eps("batchNorm", (3, 2)),
)


# ----- running statistics --------------------------------------------------------------------
def _br_check(a):
    problem = axes_problem((a.axis,), len(a.shape), "axis")
    return problem.replace("[", "").replace("]", "") if problem else None


def _br_parts(xp, a, x, rm, rv, eps):
    r = xp.rsqrt(xp.add(rv, eps))
    xhat = xp.multiply(xp.subtract(x, _param(rm, a.shape, a.axis)), _param(r, a.shape, a.axis))
    return xhat, _param(r, a.shape, a.axis)


def _br_forward(xp, a, x, w, b, rm, rv, eps):
    xhat, _ = _br_parts(xp, a, x, rm, rv, eps)
    return xp.add(xp.multiply(xhat, _param(w, a.shape, a.axis)), _param(b, a.shape, a.axis))


def _br_backward(xp, a, xs, ys, gs, needs):
    x, w, b, rm, rv, eps = xs
    g, c = gs[0], a.shape[a.axis]
    xhat, r = _br_parts(xp, a, x, rm, rv, eps)
    gx = xp.multiply(g, xp.multiply(r, _param(w, a.shape, a.axis))) if needs[0] else None
    gw = _sum_except(xp, xp.multiply(g, xhat), a.axis, c) if needs[1] else None
    gb = _sum_except(xp, g, a.axis, c) if needs[2] else None
    return gx, gw, gb, None, None, None


def _br_jvp(xp, a, xs, ys, ts):
    x, w, b, rm, rv, eps = xs
    xhat, r = _br_parts(xp, a, x, rm, rv, eps)
    return xp.add(xp.add(xp.multiply(ts[0], xp.multiply(r, _param(w, a.shape, a.axis))),
                         xp.multiply(xhat, _param(ts[1], a.shape, a.axis))),
                  _param(ts[2], a.shape, a.axis))


def _br_validate(xp, a, x, w, b, rm, rv, eps):
    problem = _eps_problem(xp, eps)
    if problem:
        return problem
    if not (xp.isfinite(rv) & xp.greater_equal(rv, xp.zeros_like(rv))).all():
        return f"running_var must be finite and >= 0 (got {shown(xp, rv)})"
    if not xp.greater(xp.add(rv, eps), xp.zeros_like(rv)).all():
        return f"running_var + eps must be > 0 (got running_var {shown(xp, rv)}, eps 0)"
    return None


def _br_oracle(ctx, a, x, w, b, rm, rv, eps):
    y = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(*a.shape):
        c = idx[a.axis]
        y[idx] = (x[idx] - rm[c]) / ctx.sqrt(rv[c] + eps[()]) * w[c] + b[c]
    return (y,)


def _br_args(eps, rv):
    return (np.zeros((2, 3)), np.ones(3), np.zeros(3), np.zeros(3), np.asarray(rv, float), eps)


define(
    "batchNormRunning", "normalization",
    attributes=(A.shape(default=(2, 3), doc="the operand"),
                A.nat("axis", default=1, doc="the channel axis")),
    ports=lambda a: ({"x": value(a.shape), "weight": value((a.shape[a.axis],)),
                      "bias": value((a.shape[a.axis],)),
                      "running_mean": frozen((a.shape[a.axis],)),
                      "running_var": frozen((a.shape[a.axis],)), "eps": frozen()},
                     {"y": value(a.shape)}),
    forward=_br_forward,
    backward=_br_backward,
    jvp=_br_jvp,
    check=_br_check,
    validate=_br_validate,
    samples={"ordinary": uniform_sampler(-2, 2, fixed={
        "eps": _eps_draw, "running_mean": constant_draw(-1, 1),
        "running_var": constant_draw(0.25, 2)})},
    oracle=_br_oracle,
    examples={"": {}, "axis0": {"shape": (2, 2, 2), "axis": 0},
              "last": {"shape": (2, 3), "axis": 0}},
    notes=("batchNormRunning(x, weight, bias, running_mean, running_var, eps): PyTorch's "
           "batch_norm in evaluation mode along any channel axis: y = (x - running_mean) * "
           "rsqrt(running_var + eps) * weight + bias, each product rounded once; the running "
           "statistics and eps are frozen (no gradient).",
           "validate: eps finite and >= 0, running_var finite and >= 0, running_var + eps > 0.",
           "Gradients: g * rsqrt(running_var + eps) * weight for x, sums of g x_hat and g over "
           "the other axes for weight and bias."),
    bad_attributes=(({"axis": 2}, "batchNormRunning: axis must be < rank 2 (got 2)"),),
    bad_inputs=(({}, _br_args(-1.0, [1, 1, 1]),
                 "batchNormRunning: eps must be finite and >= 0 (got -1)"),
                ({}, _br_args(0.1, [1, -1, 1]),
                 "batchNormRunning: running_var must be finite and >= 0"),
                ({}, _br_args(0.0, [1, 0, 1]),
                 "batchNormRunning: running_var + eps must be > 0")),
    certificates=("derivative", "prepared"),
)

"""Products (spec: "Products, matmul and scaledMatmul with broadcast batch prefixes and linear
over leading axes"): matmul, scaledMatmul and linear.

Each output entry is one dot product through the backend's ``matmul`` (the policy's order,
accumulation format and fma); the gradients are matrix products too, and the sums over
broadcast batch axes go through ``xp.sum``.
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from ..certs import STANDARD, Spec, apriori
from ..helpers import bilinear_tangent
from ..ports import frozen, value
from ..registry import define
from .reduction import constant_draw, matmul2, mp_array, uniform_sampler


def _batch(a):
    """numpy's broadcast of the batch prefixes; ValueError when they do not broadcast."""
    s, t = a.x_shape[:-2], a.y_shape[:-2]
    n = max(len(s), len(t))
    s, t = (1,) * (n - len(s)) + s, (1,) * (n - len(t)) + t
    out = []
    for p, q in zip(s, t):
        if p != q and 1 not in (p, q):
            raise ValueError("batch prefixes do not broadcast")
        out.append(q if p == 1 else p)
    return tuple(out)


def _mm_check(a):
    for name, s in (("x_shape", a.x_shape), ("y_shape", a.y_shape)):
        if len(s) < 2:
            return f"{name} must have rank >= 2 (got {list(s)})"
    if a.x_shape[-1] != a.y_shape[-2]:
        return (f"inner extents must agree (x_shape ends in {a.x_shape[-1]}, y_shape has "
                f"{a.y_shape[-2]} rows)")
    try:
        _batch(a)
    except ValueError:
        return (f"batch prefixes must broadcast (got {list(a.x_shape[:-2])} and "
                f"{list(a.y_shape[:-2])})")
    return None


def _mm_shape(a):
    return tuple(_batch(a)) + (a.x_shape[-2], a.y_shape[-1])


def _matmul(xp, a, x, y):
    """x @ y with broadcast batch prefixes; an empty inner extent gives zeros."""
    if a.x_shape[-1] == 0:
        return xp.constant(0, _mm_shape(a))
    return np.reshape(xp.matmul(x, y), _mm_shape(a))


def sum_to(xp, v, shape):
    """v summed (through the backend) over the axes broadcasting added or stretched, so that
    it has ``shape``."""
    v = np.asarray(v)
    lead = v.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and v.shape[lead + i] != 1)
    if not axes:
        return np.reshape(v, shape)
    if any(v.shape[ax] == 0 for ax in axes) or v.size == 0:
        return xp.constant(0, shape)
    return np.reshape(xp.sum(v, axis=axes), shape)


def _mm_grads(xp, a, x, y, g, needs):
    """(gx, gy) of x @ y at the cotangent g (None where not needed)."""
    gx = gy = None
    if needs[0]:
        full = xp.constant(0, g.shape[:-1] + (a.x_shape[-1],)) if a.y_shape[-1] == 0 else \
            xp.matmul(g, np.swapaxes(y, -1, -2))
        gx = sum_to(xp, full, a.x_shape)
    if needs[1]:
        full = xp.constant(0, g.shape[:-2] + a.y_shape[-2:]) if a.x_shape[-2] == 0 else \
            xp.matmul(np.swapaxes(x, -1, -2), g)
        gy = sum_to(xp, full, a.y_shape)
    return gx, gy


def _mm_oracle(ctx, x, y, out_shape):
    batch = out_shape[:-2]
    xb = np.broadcast_to(x, batch + x.shape[-2:])
    yb = np.broadcast_to(y, batch + y.shape[-2:])
    out = []
    for idx in np.ndindex(*batch):
        p, q = xb[idx], yb[idx]
        out += [ctx.fsum(p[i, k] * q[k, j] for k in range(p.shape[1])) if p.shape[1]
                else ctx.zero for i in range(p.shape[0]) for j in range(q.shape[1])]
    return mp_array(out, out_shape)


_MM_ATTRS = (A.shape("x_shape", default=(2, 3), max_rank=4, doc="the shape of x: batch, m, k"),
             A.shape("y_shape", default=(3, 2), max_rank=4, doc="the shape of y: batch, k, n"))
# x[..., i, :] . y[..., :, j]: x's rows and y's columns are the dot products' factors.
_MM_PRODUCTS = {"x": -1, "y": -2}
_MM_EXAMPLES = {"": {}, "batch": {"x_shape": (2, 1, 2, 2), "y_shape": (3, 2, 2)}}
_MM_BAD = (({"x_shape": (3,)}, "x_shape must have rank >= 2 (got [3])"),
           ({"y_shape": (2, 2)}, "inner extents must agree"),
           ({"x_shape": (2, 2, 3), "y_shape": (3, 3, 2)}, "batch prefixes must broadcast"))

define(
    "matmul", "product",
    attributes=_MM_ATTRS,
    ports=lambda a: ({"x": value(a.x_shape), "y": value(a.y_shape)},
                     {"z": value(_mm_shape(a))}),
    forward=_matmul,
    backward=lambda xp, a, xs, ys, gs, needs: _mm_grads(xp, a, *xs, gs[0], needs),
    jvp=lambda xp, a, xs, ys, ts: bilinear_tangent(_matmul, xp, a, *xs, *ts),
    check=_mm_check,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=lambda ctx, a, x, y: (_mm_oracle(ctx, x, y, _mm_shape(a)),),
    examples=_MM_EXAMPLES,
    products=_MM_PRODUCTS,
    notes=("matmul(x, y) = x @ y over the last two axes with numpy's broadcasting of the "
           "batch prefixes (both ranks >= 2); one dot product per output entry in the "
           "backend's policy order and accumulation format (fma where the policy fuses).",
           "Gradients: g @ y^T and x^T @ g, summed over the batch axes broadcasting "
           "stretched; an empty inner extent gives zeros."),
    bad_attributes=tuple((at, "matmul: " + m) for at, m in _MM_BAD),
    certificates=("prepared",
                  apriori("per entry a dot product: gamma_(k+1)(u_A) sum|x_i y_i| + n eta_A "
                          "(1 + gamma_k) plus the final rounding into storage "
                          "(routes/apriori.py)")),
)


def _scaled(xp, a, x, y, scale):
    return xp.multiply(_matmul(xp, a, x, y), scale)


define(
    "scaledMatmul", "product",
    attributes=_MM_ATTRS,
    ports=lambda a: ({"x": value(a.x_shape), "y": value(a.y_shape), "scale": frozen()},
                     {"z": value(_mm_shape(a))}),
    forward=_scaled,
    backward=lambda xp, a, xs, ys, gs, needs: _mm_grads(
        xp, a, xs[0], xs[1], xp.multiply(gs[0], xs[2]), needs) + (None,),
    jvp=lambda xp, a, xs, ys, ts: xp.multiply(
        bilinear_tangent(_matmul, xp, a, xs[0], xs[1], ts[0], ts[1]), xs[2]),
    check=_mm_check,
    samples={"ordinary": uniform_sampler(-2, 2, fixed={"scale": constant_draw(0.25, 2)})},
    oracle=lambda ctx, a, x, y, s: (_mm_oracle(ctx, x, y, _mm_shape(a)) * s[()],),
    examples=_MM_EXAMPLES,
    products=_MM_PRODUCTS,
    notes=("scaledMatmul(x, y, scale) = (x @ y) * scale: the product as matmul (policy order "
           "and accumulation format), then one rounded multiplication by the frozen scalar "
           "scale (1/sqrt(d) of attention scores, a dequantization factor).",
           "Gradients: (g * scale) @ y^T and x^T @ (g * scale), summed over broadcast batch "
           "axes; scale is frozen (no gradient)."),
    bad_attributes=tuple((at, "scaledMatmul: " + m) for at, m in _MM_BAD),
    certificates=("prepared",),
)


# ----- linear ----------------------------------------------------------------------------------
def _linear(xp, a, w, b, x):
    xm = np.reshape(x, (-1, a.in_features))
    y = xp.add(matmul2(xp, xm, np.transpose(w)), np.reshape(b, (1, -1)))
    return np.reshape(y, a.batch + (a.out_features,))


def _linear_backward(xp, a, xs, ys, gs, needs):
    w, b, x = xs
    xm = np.reshape(x, (-1, a.in_features))
    g = np.reshape(gs[0], (-1, a.out_features))
    gw = matmul2(xp, np.transpose(g), xm) if needs[0] else None
    gb = (xp.sum(g, axis=0) if g.shape[0] else xp.constant(0, (a.out_features,))) \
        if needs[1] else None
    gx = np.reshape(matmul2(xp, g, w), x.shape) if needs[2] else None
    return gw, gb, gx


def _linear_jvp(xp, a, xs, ys, ts):
    w, b, x = xs
    tw, tb, tx = ts
    zero = xp.zeros_like(b)
    return xp.add(_linear(xp, a, tw, tb, x), _linear(xp, a, w, zero, tx))


def _linear_oracle(ctx, a, w, b, x):
    xm = np.reshape(x, (-1, a.in_features))
    out = [ctx.fsum([w[o, i] * xm[r, i] for i in range(a.in_features)] + [b[o]])
           for r in range(xm.shape[0]) for o in range(a.out_features)]
    return (mp_array(out, a.batch + (a.out_features,)),)


define(
    "linear", "product",
    attributes=(A.shape("batch", default=(2,), doc="the leading axes of x"),
                A.nat("in_features", default=3, gen=(0, 4), doc="the last extent of x"),
                A.nat("out_features", default=2, gen=(0, 4), doc="the last extent of y")),
    ports=lambda a: ({"weight": value((a.out_features, a.in_features)),
                      "bias": value((a.out_features,)),
                      "x": value(a.batch + (a.in_features,))},
                     {"y": value(a.batch + (a.out_features,))}),
    forward=_linear,
    backward=_linear_backward,
    jvp=_linear_jvp,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=_linear_oracle,
    # y = x weight^T: both sum over in_features; the bias is added after the product.
    products={"weight": -1, "x": -1},
    examples={"": {}, "rank2": {"batch": (2, 2), "in_features": 2, "out_features": 3}},
    notes=("linear(weight, bias, x) = x @ weight^T + bias over the leading axes of x "
           "(PyTorch's F.linear): each x @ weight^T entry one dot product in the policy order "
           "and accumulation format, then one rounded addition of the bias.",
           "Gradients: g^T x for weight, g summed over the leading axes for bias, g @ weight "
           "for x.  The spec registers an algebraic certificate for input 2 (x) only."),
    certificates=(Spec("algebraic", (STANDARD["algebraic"][0],), STANDARD["algebraic"][1],
                       inputs=(2,)),
                  "prepared",
                  apriori("the dot products' bound E, then one addition: E + u (|x||W|^T + "
                          "|b| + E) (routes/apriori.py)")),
)

"""matmul, scaledMatmul and linear: forward and gradient routes, one thread per output entry.

Every entry is a dot product in sequential k order with each product rounded before it is
added (no FMA), as the emulated backend's strict policy computes it (``Backend._contract``:
the rounded products folded acc = p_0, acc = acc + p_k; ``Backend.matmul`` multiplies a row
entry of its left operand by a column entry of its right one, in that operand order).  The
host broadcasts the batch prefixes and transposes operands (data movement), so the matmul
kernel sees x[B, m, k] and y[B, k, n] with k >= 1.  The dot product's error is bounded by
gamma_k sum|x_i y_i| (Higham 2002, 3.1), routes.apriori's matmul formula.

The rules mirrored (routes/families/product.py):

- matmul: ``xp.matmul(x, y)``; an empty inner extent gives the constant +0.
- scaledMatmul: ``xp.multiply(x @ y, scale)`` (scale a frozen scalar: no gradient), so an
  empty inner extent gives 0 * scale rounded (-0 for a negative scale, NaN for an infinite
  one).
- matmul / scaledMatmul gradients (``_mm_grads``): gx = sum_to(g @ y^T), gy = sum_to(x^T @ g),
  where scaledMatmul first rounds g' = g * scale elementwise (the rule's
  ``xp.multiply(gs[0], xs[2])``); ``sum_to`` is one ``xp.sum`` over the batch axes
  broadcasting added or stretched, a sequential fold over those axes flattened in C order
  (the rows module's reduce kernel after ``to_last``, exactly ``Backend._reduce``).  An empty
  contraction (y_shape[-1] = 0 for gx, x_shape[-2] = 0 for gy) gives +0.
- linear: y = xp.add(matmul2(x, w^T), b): per entry the dot product sum_i x[r, i] w[o, i]
  (products x * w in that order), then one rounded addition of the bias (acc + b[o]); no
  input features give +0 + b[o] (so -0 biases come out +0 in nearest even).
- linear gradients (``_linear_backward``): gw = matmul2(g^T, x) (products g[r, o] * x[r, i],
  summed over r), gb = xp.sum(g, axis=0) (sequential over r), gx = matmul2(g, w) (products
  g[r, o] * w[o, i], summed over o); an empty contraction gives +0.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from roundoff_coverage import routes
from roundoff_coverage.routes.families.reduction import to_last

from .base import FEW, Instance, Kernel, flat, special_values
from .contract import TRACED, Contract
from .rows import by_scalar, make_reduce, reduce_code


def make_matmul(P: dict):
    """matmul(x[B, m, k], y[B, k, n], out[B, m, n], scaled, scale, rp): out = x @ y, then
    out * scale rounded once when ``scaled`` (scaledMatmul's rule)."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def matmul(x, y, out, scaled, scale, rp):
        t = cuda.grid(1)
        m, n = out.shape[1], out.shape[2]
        if t < out.size:
            b = t // (m * n)
            i = (t // n) % m
            j = t % n
            acc = mul(x[b, i, 0], y[b, 0, j], rp)
            for k in range(1, x.shape[2]):
                acc = add(acc, mul(x[b, i, k], y[b, k, j], rp), rp)
            if scaled == 1:
                acc = mul(acc, scale, rp)
            out[b, i, j] = acc
    return matmul


def make_linear(P: dict):
    """linear(x[R, K], w[O, K], b[O], out[R, O], rp): out[r, o] = (sum_i x[r, i] w[o, i]) +
    b[o], the dot product sequential in i (+0 when K = 0), then one rounded addition."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def linear(x, w, b, out, rp):
        t = cuda.grid(1)
        n = out.shape[1]
        if t < out.size:
            r = t // n
            o = t % n
            acc = 0.0
            if x.shape[1] > 0:
                acc = mul(x[r, 0], w[o, 0], rp)
                for i in range(1, x.shape[1]):
                    acc = add(acc, mul(x[r, i], w[o, i], rp), rp)
            out[r, o] = add(acc, b[o], rp)
    return linear


# ----- host helpers ----------------------------------------------------------------------------
def matmul3(ctx, p, q):
    """p[B, m, k] @ q[B, k, n] on the device (float64 (B, m, n)); +0 when k = 0."""
    p = np.ascontiguousarray(p, dtype=np.float64)
    q = np.ascontiguousarray(q, dtype=np.float64)
    out = np.zeros((p.shape[0], p.shape[1], q.shape[2]))
    if p.shape[2] == 0:
        return out
    kern = ctx.compile("matmul", lambda: make_matmul(ctx.P))
    ctx.launch(kern, out.size, p, q, out, 0, 1.0, ctx.rp)
    return out


def row_sums(ctx, rows):
    """Sequential sums of rows[R, n] on the device (n >= 1): the rows module's reduce."""
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    out = np.empty(rows.shape[0])
    kern = ctx.compile("reduce", lambda: make_reduce(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, out, reduce_code("sum"), ctx.rp)
    return out


def sum_to(ctx, v, shape):
    """routes' ``sum_to``: v summed over the axes broadcasting added or stretched (one
    sequential fold over those axes flattened in C order), reshaped to ``shape``."""
    v = np.asarray(v, dtype=np.float64)
    lead = v.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and v.shape[lead + i] != 1)
    if not axes:
        return np.reshape(v, shape)
    if v.size == 0 or any(v.shape[ax] == 0 for ax in axes):
        return np.zeros(shape)
    moved = to_last(v, axes)
    return row_sums(ctx, moved.reshape(-1, moved.shape[-1])).reshape(shape)


def _batch(a):
    return tuple(np.broadcast_shapes(a.x_shape[:-2], a.y_shape[:-2]))


def _stack(v, batch, tail):
    """v broadcast to batch + tail and flattened to (B,) + tail (data movement)."""
    return np.broadcast_to(v, batch + tail).reshape((int(np.prod(batch)),) + tail)


# ----- launchers -------------------------------------------------------------------------------
def _mm_forward(o, xs, ctx):
    a = o.attrs
    x, y = xs[0], xs[1]
    batch = _batch(a)
    m, kk, n = a.x_shape[-2], a.x_shape[-1], a.y_shape[-1]
    shape = batch + (m, n)
    is_scaled = o.name == "scaledMatmul"
    if kk == 0:
        zeros = np.zeros(shape)
        return (by_scalar(ctx, zeros, xs[2], False) if is_scaled else zeros,)
    xb = np.ascontiguousarray(_stack(x, batch, (m, kk)))
    yb = np.ascontiguousarray(_stack(y, batch, (kk, n)))
    out = np.empty((xb.shape[0], m, n))
    scale = float(xs[2]) if is_scaled else 1.0
    kern = ctx.compile("matmul", lambda: make_matmul(ctx.P))
    ctx.launch(kern, out.size, xb, yb, out, 1 if is_scaled else 0, scale, ctx.rp)
    return (out.reshape(shape),)


def _mm_gradient(o, xs, cotangents, ctx):
    a = o.attrs
    x, y = xs[0], xs[1]
    (g,) = ctx.cotangents(o, cotangents)
    if o.name == "scaledMatmul":
        g = by_scalar(ctx, g, xs[2], False)                         # g * scale, rounded once
    batch = _batch(a)
    m, kk, n = a.x_shape[-2], a.x_shape[-1], a.y_shape[-1]
    gb = _stack(g, batch, (m, n))
    # gx = g @ y^T: full[b, i, c] = sum_j g[b, i, j] * y[b, c, j].
    full = matmul3(ctx, gb, _stack(np.swapaxes(y, -1, -2), batch, (n, kk)))
    gx = sum_to(ctx, full.reshape(batch + (m, kk)), a.x_shape)
    # gy = x^T @ g: full[b, c, j] = sum_i x[b, i, c] * g[b, i, j].
    full = matmul3(ctx, _stack(np.swapaxes(x, -1, -2), batch, (kk, m)), gb)
    gy = sum_to(ctx, full.reshape(batch + (kk, n)), a.y_shape)
    return (gx, gy) + ((None,) if o.name == "scaledMatmul" else ())


def launch(o, xs, cotangents, route, ctx):
    """matmul and scaledMatmul, both routes."""
    if route == "forward":
        return _mm_forward(o, xs, ctx)
    return _mm_gradient(o, xs, cotangents, ctx)


def launch_linear(o, xs, cotangents, route, ctx):
    a = o.attrs
    w, b, x = (np.asarray(v, dtype=np.float64) for v in xs)
    rows = int(np.prod(a.batch))
    xm = np.ascontiguousarray(x.reshape(rows, a.in_features))
    if route == "forward":
        out = np.empty((xm.shape[0], a.out_features))
        kern = ctx.compile("products.linear", lambda: make_linear(ctx.P))
        ctx.launch(kern, out.size, xm, np.ascontiguousarray(w), flat(b), out, ctx.rp)
        return (out.reshape(a.batch + (a.out_features,)),)
    (g,) = ctx.cotangents(o, cotangents)
    g = np.reshape(g, (rows, a.out_features))
    gw = matmul3(ctx, g.T[None], xm[None])[0]             # sum over r of g[r, o] * x[r, i]
    gb = row_sums(ctx, g.T) if g.shape[0] else np.zeros(a.out_features)
    gx = matmul3(ctx, g[None], w[None])[0]                # sum over o of g[r, o] * w[o, i]
    return gw, gb, gx.reshape(x.shape)


def _square(name, size):
    """(n x 64) @ (64 x n), n = size / 64 between 2 and 64 (gpu_check's instance)."""
    n = min(64, max(2, size // 64))
    return routes.op(name, x_shape=(n, 64), y_shape=(64, n))


def _linear_sized(size):
    return routes.op("linear", batch=(max(1, size // 64),), in_features=64, out_features=64)


def _few(**attrs):
    """A further instance (geometry edges, broadcasting, empty extents) in fewer formats."""
    return Instance(attrs, formats=FEW)


def _specials(**attrs):
    """Special values where the samplers have none: NaN and infinities through the dot
    products, signed zero sums."""
    return Instance(attrs, formats=("binary32", "bfloat16"), kinds=("specials",),
                    inputs=special_values)


def _negative_scale_empty(o, rng, fmt):
    # 0 * scale of an empty product is -0 under a negative scale.
    return np.zeros(o.inputs[0].shape), np.zeros(o.inputs[1].shape), np.asarray(-0.75)


def _negative_scale(o, rng, fmt):
    # g * scale flips the signs of the cotangent's products.
    return o.samples(rng, fmt, "ordinary")[:2] + (np.asarray(-1.25),)


# Test instances (kernels.base.Instance): every example of each product in every format, a
# plain and a broadcast batched product, stretched and added batch axes (sums in the
# gradient), empty extents, and special values.
_PRODUCT = (Instance({"x_shape": (2, 3), "y_shape": (3, 4)}, kinds=("ordinary",)),
            Instance({"x_shape": (2, 1, 2, 3), "y_shape": (3, 3, 2)}, kinds=("ordinary",)),
            Instance())

KERNELS = (
    Kernel("matmul", "matmul", Contract(TRACED, TRACED, None), launch,
           sized=lambda size: _square("matmul", size),
           tests=_PRODUCT + (
               _few(x_shape=(1, 2, 3), y_shape=(2, 3, 2)), _few(x_shape=(3, 2, 2), y_shape=(2, 1)),
               _few(x_shape=(2, 3), y_shape=(3, 0)), _few(x_shape=(0, 3), y_shape=(3, 2)),
               _specials(x_shape=(2, 3), y_shape=(3, 2)))),
    Kernel("scaledMatmul", "matmul", Contract(TRACED, TRACED, None), launch,
           sized=lambda size: _square("scaledMatmul", size),
           tests=_PRODUCT + (
               _few(x_shape=(2, 0), y_shape=(0, 2)), _few(x_shape=(2, 2, 3), y_shape=(1, 3, 1)),
               _specials(x_shape=(1, 3), y_shape=(3, 2)),
               Instance({"x_shape": (2, 0), "y_shape": (0, 2)}, formats=("bfloat16",),
                        kinds=("negative-scale",), routes=("forward",),
                        inputs=_negative_scale_empty),
               Instance({}, formats=("bfloat16",), kinds=("negative-scale",),
                        routes=("gradient",), inputs=_negative_scale))),
    Kernel("linear", "matmul", Contract(TRACED, TRACED, None), launch_linear,
           sized=_linear_sized,
           tests=(Instance(), _few(batch=(0,)),
                  # The rule cannot pull back through out_features = 0
                  # (np.reshape(g, (-1, 0))): the forward route only.
                  Instance({"batch": (3,), "in_features": 1, "out_features": 0}, formats=FEW,
                           routes=("forward",)),
                  _few(batch=(1, 2), in_features=4, out_features=1), _specials())),
)

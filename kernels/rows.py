"""Row kernels: reduce (sum, prod, max, min), mean, softmax and logSoftmax (forward and
gradient), one thread per output row, every loop in sequential order (element 0 first),
which is the emulated backend's "strict" policy: ``Backend._sequential`` folds acc = x[0],
then acc = op(acc, x[j]) for j = 1, 2, ... (numerics/backend.py).  The host moves the
reduced axes last and flattens them (data movement, routes.families.reduction.to_last), so
a kernel sees a C-contiguous (rows, n) array.  A fixed order per output element is what
makes the result reproducible and comparable bit for bit; the error of a sequential sum is
gamma_(n-1) sum|x_i| (Higham 2002, 4.2), which routes.apriori bounds per sample.

Rules mirrored (routes/families/reduction.py, softmax_attention.py):

- reduce gradient ``_reduce_linear`` (transpose): sum spreads the cotangent; prod multiplies
  it by ``_others`` (each entry's product of the other entries of its row, folded
  sequentially, no division); max/min recompute the extreme y, count the entries equal to
  it (NaN entries when y is NaN) by a sequential sum of ones and zeros, and give each
  g / count, +0 to the others.

- mean: ``xp.divide(xp.sum(x, axes), xp.constant(n))``: the sequential sum, then one division
  by the count n rounded once into the format (on the host, ``ctx.round``); gradient
  ``xp.divide(spread(g), xp.constant(n))``: the cotangent spread over its group (data
  movement, on the host) and divided elementwise by the same rounded n.
- softmax gradient ``_softmax_lin``: y * (g - sum(g * y)), y the forward value recomputed by
  the same row code, the products g_j y_j rounded, summed sequentially, each g_j - s rounded,
  then multiplied by y_j.
- logSoftmax gradient ``_log_softmax_lin`` (transpose): g - exp(y) * sum(g), y the forward
  value, sum(g) sequential, exp(y_j) rounded, its product with the sum rounded, then the
  difference.
"""

from __future__ import annotations

import math

import numpy as np
# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
from numba import cuda

from roundoff_coverage import routes
from roundoff_coverage.routes.families.reduction import from_last, kept_shape, spread, to_last

from .base import FEW, Instance, Kernel, fixed, flat, special_values
from .contract import TRACED, Contract

REDUCE_OPS = ("sum", "prod", "max", "min")
_CODE = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def reduce_code(op: str) -> int:
    return _CODE[op]


def make_reduce(P: dict):
    """reduce(x[rows, n], out[rows], code, rp): n >= 1."""
    add, mul, mx, mn = P["add"], P["multiply"], P["maximum"], P["minimum"]

    @cuda.jit
    def reduce(x, out, code, rp):
        r = cuda.grid(1)
        if r < out.size:
            acc = x[r, 0]
            for j in range(1, x.shape[1]):
                v = x[r, j]
                if code == 0:
                    acc = add(acc, v, rp)
                elif code == 1:
                    acc = mul(acc, v, rp)
                elif code == 2:
                    acc = mx(acc, v, rp)
                else:
                    acc = mn(acc, v, rp)
            out[r] = acc
    return reduce


def make_reduce_grad(P: dict):
    """reduce_grad(x[rows, n], g[rows], out[rows, n], code, rp): the pullback of reduce (the
    rule's ``_reduce_linear`` with transpose), one thread per row, n >= 1.
    sum (code 0): out_j = g (spread, no arithmetic);
    prod (code 1): out_i = g * (x_0 * ... x_(i-1) * x_(i+1) * ...), the other entries' product
    folded sequentially from the first of them (``_others``: no division; 1 when n = 1);
    max / min (code 2 / 3): y the row's sequential maximum / minimum (the forward), the mask
    x_j == y or both NaN, count = the sequential sum of 1 (masked) and +0 (not) from the
    first entry, share = g / count, out_j = share where masked, +0 elsewhere."""
    add, mul, div, mx, mn = P["add"], P["multiply"], P["divide"], P["maximum"], P["minimum"]

    @cuda.jit
    def reduce_grad(x, g, out, code, rp):
        r = cuda.grid(1)
        if r < out.shape[0]:
            n = x.shape[1]
            gr = g[r]
            if code == 0:
                for j in range(n):
                    out[r, j] = gr
            elif code == 1:
                for i in range(n):
                    acc = 1.0
                    first = True
                    for j in range(n):
                        if j != i:
                            if first:
                                acc = x[r, j]
                                first = False
                            else:
                                acc = mul(acc, x[r, j], rp)
                    out[r, i] = mul(gr, acc, rp)
            else:
                y = x[r, 0]
                for j in range(1, n):
                    y = mx(y, x[r, j], rp) if code == 2 else mn(y, x[r, j], rp)
                ynan = y != y
                count = 0.0
                for j in range(n):
                    v = x[r, j]
                    one = 1.0 if (v == y or (ynan and v != v)) else 0.0
                    count = one if j == 0 else add(count, one, rp)
                share = div(gr, count, rp)
                for j in range(n):
                    v = x[r, j]
                    out[r, j] = share if (v == y or (ynan and v != v)) else 0.0
    return reduce_grad


def make_mean(P: dict):
    """mean(x[rows, n], out[rows], count, rp): the sequential sum of each row divided once by
    ``count`` (n rounded into the format).  n >= 1."""
    add, div = P["add"], P["divide"]

    @cuda.jit
    def mean(x, out, count, rp):
        r = cuda.grid(1)
        if r < out.size:
            acc = x[r, 0]
            for j in range(1, x.shape[1]):
                acc = add(acc, x[r, j], rp)
            out[r] = div(acc, count, rp)
    return mean


def make_by_scalar(P: dict):
    """by_scalar(v[n], out[n], c, divide, rp): out = v / c (divide = 1: mean's gradient) or
    v * c (divide = 0: scaledMatmul's ``xp.multiply(v, scale)``), one rounding per element,
    the operand order kept."""
    div, mul = P["divide"], P["multiply"]

    @cuda.jit
    def by_scalar(v, out, c, divide, rp):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = div(v[i], c, rp) if divide == 1 else mul(v[i], c, rp)
    return by_scalar


def by_scalar(ctx, a, c, divide):
    """a / c (``divide``) or a * c elementwise on the device (float64, a's shape)."""
    a = np.asarray(a, dtype=np.float64)
    out = np.empty(a.size)
    kern = ctx.compile("rows.by_scalar", lambda: make_by_scalar(ctx.P))
    ctx.launch(kern, out.size, flat(a), out, float(c), 1 if divide else 0, ctx.rp)
    return out.reshape(a.shape)


def softmax_row(P: dict):
    """The device function row(x, out, r, log, rp) writing routes' _softmax (log = 0) or
    log_softmax (log = 1) of row r of x into row r of out: m = max (exact, NaN-propagating),
    z = x - m rounded, e = exp(z), s = sequential sum of e; softmax e / s, logSoftmax
    z - log(s).  The forward and gradient kernels share it, so the gradient's y is the
    forward's, bit for bit."""
    add, sub, div, mx, ex, lg = (P["add"], P["subtract"], P["divide"], P["maximum"],
                                 P["exp"], P["log"])

    @cuda.jit(device=True)
    def row(x, out, r, log, rp):
        n = x.shape[1]
        m = x[r, 0]
        for j in range(1, n):
            m = mx(m, x[r, j], rp)
        s = 0.0
        for j in range(n):
            z = sub(x[r, j], m, rp)
            e = ex(z, rp)
            s = e if j == 0 else add(s, e, rp)
            out[r, j] = e if log == 0 else z
        if log == 0:
            for j in range(n):
                out[r, j] = div(out[r, j], s, rp)
        else:
            ls = lg(s, rp)
            for j in range(n):
                out[r, j] = sub(out[r, j], ls, rp)
    return row


def make_softmax(P: dict):
    """softmax(x[rows, n], out[rows, n], log, rp): one row per thread (``softmax_row``)."""
    row = softmax_row(P)

    @cuda.jit
    def softmax(x, out, log, rp):
        r = cuda.grid(1)
        if r < x.shape[0]:
            row(x, out, r, log, rp)
    return softmax


def make_softmax_grad(P: dict):
    """softmax_grad(x[rows, n], g[rows, n], out[rows, n], log, rp): the pullback of the
    cotangent g at the forward value y (computed into out first, then overwritten entry by
    entry, each entry read before it is written).
    softmax (log = 0): s = sum_j g_j * y_j sequentially, out_j = y_j * (g_j - s);
    logSoftmax (log = 1): s = sum_j g_j sequentially, out_j = g_j - exp(y_j) * s."""
    row = softmax_row(P)
    add, sub, mul, ex = P["add"], P["subtract"], P["multiply"], P["exp"]

    @cuda.jit
    def softmax_grad(x, g, out, log, rp):
        r = cuda.grid(1)
        if r < x.shape[0]:
            row(x, out, r, log, rp)
            n = x.shape[1]
            s = 0.0
            for j in range(n):
                t = mul(g[r, j], out[r, j], rp) if log == 0 else g[r, j]
                s = t if j == 0 else add(s, t, rp)
            for j in range(n):
                if log == 0:
                    out[r, j] = mul(out[r, j], sub(g[r, j], s, rp), rp)
                else:
                    out[r, j] = sub(g[r, j], mul(ex(out[r, j], rp), s, rp), rp)
    return softmax_grad


def launch_reduce(o, xs, cotangents, route, ctx):
    a = o.attrs
    x = xs[0]
    if route == "gradient":
        return (reduce_gradient(o, x, cotangents, ctx),)
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    if x.size == 0 or any(a.shape[ax] == 0 for ax in a.axes):
        return (np.full(shape, 1.0 if a.op == "prod" else 0.0),)
    moved = to_last(x, a.axes)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64)
    out = np.empty(rows.shape[0])
    kern = ctx.compile("reduce", lambda: make_reduce(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, out, reduce_code(a.op), ctx.rp)
    return (out.reshape(shape),)


def reduce_gradient(o, x, cotangents, ctx):
    """reduce's pullback: the rows of x (reduced axes last), the cotangent one value per row,
    one thread per row (``make_reduce_grad``), moved back to x's shape."""
    a = o.attrs
    (g,) = ctx.cotangents(o, cotangents)
    if x.size == 0:
        return np.zeros(a.shape)
    moved = to_last(x, a.axes)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64)
    out = np.empty_like(rows)
    kern = ctx.compile("rows.reduce_grad", lambda: make_reduce_grad(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, flat(g), out, reduce_code(a.op), ctx.rp)
    return np.ascontiguousarray(from_last(out.reshape(moved.shape), a.shape, a.axes))


def launch_mean(o, xs, cotangents, route, ctx):
    a = o.attrs
    count = ctx.round(math.prod(a.shape[ax] for ax in a.axes))
    if route == "gradient":
        (g,) = ctx.cotangents(o, cotangents)
        return (by_scalar(ctx, spread(g, a.shape, a.axes), count, True).reshape(a.shape),)
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    x = xs[0]
    if x.size == 0:                                  # the rule's constant 0 (check: n >= 1)
        return (np.zeros(shape),)
    moved = to_last(x, a.axes)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64)
    out = np.empty(rows.shape[0])
    kern = ctx.compile("mean", lambda: make_mean(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, out, float(count), ctx.rp)
    return (out.reshape(shape),)


def softmax_rows(x, axis):
    """x with ``axis`` moved last, as C-contiguous float64 rows, and the moved shape."""
    moved = np.moveaxis(x, axis, -1)
    return np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64), \
        moved.shape


def launch_softmax(o, xs, cotangents, route, ctx):
    axis = o.attrs.axis
    log = 1 if o.name == "logSoftmax" else 0
    rows, shape = softmax_rows(xs[0], axis)
    out = np.empty_like(rows)
    if route == "gradient":
        (g,) = ctx.cotangents(o, cotangents)
        grows, _ = softmax_rows(g, axis)
        kern = ctx.compile("softmax_grad", lambda: make_softmax_grad(ctx.P))
        ctx.launch(kern, rows.shape[0], rows, grows, out, log, ctx.rp)
    else:
        kern = ctx.compile("softmax", lambda: make_softmax(ctx.P))
        ctx.launch(kern, rows.shape[0], rows, out, log, ctx.rp)
    return (np.moveaxis(out.reshape(shape), -1, axis),)


def _rows(size):
    """Rows of 64 elements for about ``size`` in all (gpu_check's instances)."""
    return max(1, size // 64)


def _op(name, **attrs):
    return routes.op(name, **attrs)


def _reduce(label, formats=FEW, **attrs):
    """A further reduce instance, its gradient in every sample kind of ``formats``."""
    return Instance(attrs, label, formats=formats, routes=("gradient",))


# Test instances (kernels.base.Instance).  reduce: each operation over rows in both routes;
# the examples and further layouts (keepdim, every axis, a single entry, empty rows) in the
# gradient; specials where the samplers have none (-0 shares, NaN maxima shared among NaN
# entries); ties: 18 equal entries (a count of 18 is 16 in float8_e4m3fn, 17 rounds to 16),
# -0 and +0 tied in a minimum, zeros in a product.
_REDUCE_TESTS = tuple(
    Instance({"shape": (3, 4), "op": r, "axes": (1,)}, f"{r}-3x4", kinds=("ordinary", "special"))
    for r in ("sum", "prod", "max", "min")) + (
    Instance({"shape": (2, 3, 2), "axes": (0, 2), "keepdim": True}, "sum-2x3x2-keepdim",
             kinds=("ordinary",)),
    Instance(routes=("gradient",)),
    *(Instance({"shape": (3, 4), "op": r, "axes": (1,)}, f"{r}-3x4", formats=FEW,
               kinds=("edges",), routes=("gradient",)) for r in ("sum", "prod", "max")),
    _reduce("prod-2x3x2-keepdim", shape=(2, 3, 2), op="prod", axes=(0, 2), keepdim=True),
    _reduce("min-2x3x2-axes21", shape=(2, 3, 2), op="min", axes=(2, 1)),
    _reduce("sum-2x3x2-all", shape=(2, 3, 2), op="sum", axes=(0, 1, 2)),
    _reduce("prod-3x1", shape=(3, 1), op="prod", axes=(1,)),          # no other entry: 1
    _reduce("sum-2x0", shape=(2, 0), op="sum", axes=(1,)),            # empty
    _reduce("prod-0x3", shape=(0, 3), op="prod", axes=(1,)),
    Instance({"shape": (3, 4), "op": "prod", "axes": (1,)}, "prod-3x4",
             formats=("binary32", "bfloat16"), kinds=("specials",), routes=("gradient",),
             inputs=special_values),
    Instance({"shape": (4, 3), "op": "max", "axes": (0,)}, "max-4x3-axis0",
             formats=("binary32", "bfloat16"), kinds=("specials",), routes=("gradient",),
             inputs=special_values),
    *(Instance(attrs, label, formats=("bfloat16", "float8_e4m3fn"), kinds=("ties",),
               routes=("gradient",), inputs=fixed(x))
      for label, attrs, x in (
          ("max-2x18", {"shape": (2, 18), "op": "max", "axes": (1,)},
           np.concatenate([np.zeros((1, 18)), np.full((1, 18), -1.5)])),
          ("min-2x3", {"shape": (2, 3), "op": "min", "axes": (1,)},
           np.array([[0.0, -0.0, 1.0], [2.0, 2.0, 2.0]])),
          ("prod-1x3", {"shape": (1, 3), "op": "prod", "axes": (1,)},
           np.array([[0.0, 0.0, -2.0]])))),
)


# softmax and logSoftmax: rows along the last and the first axis, and one more layout each.
_ROWS = (Instance({"shape": (3, 5), "axis": 1}, kinds=("ordinary", "edges", "special")),
         Instance({"shape": (4, 2), "axis": 0}, kinds=("ordinary",)))


KERNELS = (
    # reduce: sum and prod in sequential order (many roundings), max and min exact.  The
    # gradient: sum's spread (no arithmetic), prod's products of the other entries times the
    # cotangent, max/min's recomputed extreme, tie count (a sum) and share (a division).
    Kernel("reduce", "reduce",
           Contract(TRACED, TRACED, None),
           launch_reduce, sized=lambda size: _op("reduce", shape=(_rows(size), 64), axes=(1,)),
           tests=_REDUCE_TESTS),
    # mean: a sequential sum, then one division by the rounded count; its gradient is one
    # division per element.  Outside nearest even its contract claims no agreement, but the
    # kernel runs in every deterministic mode.
    Kernel("mean", "reduce", Contract(TRACED, TRACED, None),
           launch_mean, sized=lambda size: _op("mean", shape=(_rows(size), 64), axes=(1,)),
           tests=(Instance({"shape": (3, 4), "axes": (1,)}, kinds=("ordinary", "special")),
                  Instance({"shape": (2, 3, 2), "axes": (0, 2), "keepdim": True},
                           kinds=("ordinary",)),
                  Instance({"shape": (2, 3), "axes": (1,)}, formats=("bfloat16",),
                           kinds=("ordinary",), routes=("forward",),
                           modes=("toward_zero", "upward")))),
    # The gradients recompute the forward value (the same row code) before the pullback.
    Kernel("softmax", "softmax",
           Contract(TRACED, TRACED, None), launch_softmax,
           sized=lambda size: _op("softmax", shape=(_rows(size), 64), axis=1),
           tests=_ROWS + (Instance({"shape": (2, 3), "axis": 0}, "2x3-axis0",
                                   kinds=("ordinary", "special")),)),
    Kernel("logSoftmax", "softmax",
           Contract(TRACED, TRACED, None), launch_softmax,
           sized=lambda size: _op("logSoftmax", shape=(_rows(size), 64), axis=1),
           tests=_ROWS + (Instance({"shape": (3, 2), "axis": 1}, kinds=("ordinary", "edges")),)),
)

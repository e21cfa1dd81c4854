"""Normalization kernels: layerNorm and batchNorm (batch statistics, forward and gradient),
batchNormRunning (running statistics, forward and gradient), each the rule of
routes/families/normalization.py spelt with the device primitives, in the rule's order.

Batch statistics (``_batch_forward``): the host moves the normalized axes last and flattens
them (``_groups``, data movement), so a kernel sees a C-contiguous (R, n) array with one
thread per group (row).  Per row, with c = n rounded once into the format (the rule's
``xp.constant(n)``, on the host) and every sum sequential (acc = t_0, acc = acc + t_j, the
strict policy's ``Backend._sequential``):

    mu = sum(x) / c,  d_j = x_j - mu,  var = sum(d_j * d_j) / c       (two-pass, biased)
    r = rsqrt(var + eps),  xhat_j = d_j * r,  y_j = xhat_j * w_j + b_j

each operation rounded once; eps is the frozen scalar port (rounded by the launcher), rsqrt
the backend's primitive (correctly rounded; on the device 1 / sqrt(a) in binary64, two
correctly rounded operations, rounded once into the format: not correctly rounded, hence
the screened claim, kernels.primitives).  The affine weight and bias are
broadcast over x along the channel axis and grouped like x on the host (data movement), so
w_j and b_j are the parameters of the element x_j.

Gradient (``_batch_backward``), per row from the recomputed xhat and r, with gh_j = g_j * w_j:

    m1 = sum(xhat_j * gh_j) / c,  u_j = gh_j - xhat_j * m1,  m2 = sum(u_j) / c,
    gx_j = r * (u_j - m2)

and the parameter gradients ``_sum_except``: gw = sum of g * xhat and gb = sum of g over every
axis but the channel axis, in ascending axis order (one thread per channel, sequential).

batchNormRunning (``_br_forward``, ``_br_backward``): one thread per element with the
channel's running statistics: r = rsqrt(running_var + eps), xhat = (x - running_mean) * r,
y = xhat * w + b; gradient gx = g * (r * w), and gw, gb as above.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from roundoff_coverage import routes
from roundoff_coverage.routes.families.reduction import from_last, to_last

from .base import Instance, Kernel, flat
from .contract import TRACED, Contract


# ----- device code -----------------------------------------------------------------------------
def make_batch_stats(P: dict):
    """The device function stats(x, i, count, eps, rp) -> (mu, r) of row i of x:
    the rule's two-pass mean and biased variance and r = rsqrt(var + eps)."""
    add, sub, mul, div, rsqrt = (P["add"], P["subtract"], P["multiply"], P["divide"],
                                 P["rsqrt"])

    @cuda.jit(device=True)
    def stats(x, i, count, eps, rp):
        n = x.shape[1]
        acc = x[i, 0]
        for j in range(1, n):
            acc = add(acc, x[i, j], rp)
        mu = div(acc, count, rp)
        d = sub(x[i, 0], mu, rp)
        acc = mul(d, d, rp)
        for j in range(1, n):
            d = sub(x[i, j], mu, rp)
            acc = add(acc, mul(d, d, rp), rp)
        r = rsqrt(add(div(acc, count, rp), eps, rp), rp)
        return mu, r
    return stats


def make_batch_norm(P: dict):
    """batch_norm(x[R, n], w[R, n], b[R, n], y[R, n], count, eps, rp): y = xhat * w + b per
    row, xhat = (x - mu) * r."""
    add, sub, mul = P["add"], P["subtract"], P["multiply"]
    stats = make_batch_stats(P)

    @cuda.jit
    def batch_norm(x, w, b, y, count, eps, rp):
        i = cuda.grid(1)
        if i < x.shape[0]:
            mu, r = stats(x, i, count, eps, rp)
            for j in range(x.shape[1]):
                xhat = mul(sub(x[i, j], mu, rp), r, rp)
                y[i, j] = add(mul(xhat, w[i, j], rp), b[i, j], rp)
    return batch_norm


def make_batch_norm_grad(P: dict):
    """batch_norm_grad(x, w, g, gx, xh, count, eps, rp), every array [R, n]: gx the rule's
    gradient in x, xh the recomputed xhat (for the parameter gradients).  gx first holds
    u_j, then r * (u_j - m2)."""
    add, sub, mul, div = P["add"], P["subtract"], P["multiply"], P["divide"]
    stats = make_batch_stats(P)

    @cuda.jit
    def batch_norm_grad(x, w, g, gx, xh, count, eps, rp):
        i = cuda.grid(1)
        if i < x.shape[0]:
            n = x.shape[1]
            mu, r = stats(x, i, count, eps, rp)
            acc = 0.0
            for j in range(n):
                xh[i, j] = mul(sub(x[i, j], mu, rp), r, rp)
                t = mul(xh[i, j], mul(g[i, j], w[i, j], rp), rp)
                acc = t if j == 0 else add(acc, t, rp)
            m1 = div(acc, count, rp)
            for j in range(n):
                gx[i, j] = sub(mul(g[i, j], w[i, j], rp), mul(xh[i, j], m1, rp), rp)
                acc = gx[i, j] if j == 0 else add(acc, gx[i, j], rp)
            m2 = div(acc, count, rp)
            for j in range(n):
                gx[i, j] = mul(r, sub(gx[i, j], m2, rp), rp)
    return batch_norm_grad


def make_param_sums(P: dict):
    """param_sums(g[C, m], xh[C, m], gw[C], gb[C], rp): per channel, gw = sum_j g_j * xhat_j
    and gb = sum_j g_j, sequential (m >= 1)."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def param_sums(g, xh, gw, gb, rp):
        c = cuda.grid(1)
        if c < gw.size:
            sw = mul(g[c, 0], xh[c, 0], rp)
            sb = g[c, 0]
            for j in range(1, g.shape[1]):
                sw = add(sw, mul(g[c, j], xh[c, j], rp), rp)
                sb = add(sb, g[c, j], rp)
            gw[c] = sw
            gb[c] = sb
    return param_sums


def make_running(P: dict):
    """running(x, w, b, rm, rv, y, eps, rp), flat arrays of x's size (parameters broadcast):
    y = (x - rm) * rsqrt(rv + eps) * w + b, each operation rounded."""
    add, sub, mul, rsqrt = P["add"], P["subtract"], P["multiply"], P["rsqrt"]

    @cuda.jit
    def running(x, w, b, rm, rv, y, eps, rp):
        i = cuda.grid(1)
        if i < y.size:
            r = rsqrt(add(rv[i], eps, rp), rp)
            xhat = mul(sub(x[i], rm[i], rp), r, rp)
            y[i] = add(mul(xhat, w[i], rp), b[i], rp)
    return running


def make_running_grad(P: dict):
    """running_grad(x, w, rm, rv, g, gx, xh, eps, rp), flat arrays: gx = g * (r * w) and the
    recomputed xhat = (x - rm) * r, r = rsqrt(rv + eps)."""
    add, sub, mul, rsqrt = P["add"], P["subtract"], P["multiply"], P["rsqrt"]

    @cuda.jit
    def running_grad(x, w, rm, rv, g, gx, xh, eps, rp):
        i = cuda.grid(1)
        if i < gx.size:
            r = rsqrt(add(rv[i], eps, rp), rp)
            xh[i] = mul(sub(x[i], rm[i], rp), r, rp)
            gx[i] = mul(g[i], mul(r, w[i], rp), rp)
    return running_grad


# ----- host ------------------------------------------------------------------------------------
def _axes(o):
    """(normalized axes, channel axis) of a batch-statistics operator."""
    rank = len(o.attrs.shape)
    if o.name == "layerNorm":
        return (rank - 1,), rank - 1
    return (0,) + tuple(range(2, rank)), 1


def _spread(v, shape, axis):
    """A per-channel parameter broadcast over ``shape`` along ``axis`` (a copy)."""
    ones = tuple(n if ax == axis else 1 for ax, n in enumerate(shape))
    return np.broadcast_to(np.reshape(v, ones), shape).copy()


def _grouped(a, axes):
    """``a`` with ``axes`` moved last and flattened: C-contiguous float64 rows."""
    f = to_last(a, axes)
    return np.ascontiguousarray(np.reshape(f, (-1, f.shape[-1])), dtype=np.float64)


def _others(shape, axis):
    return tuple(ax for ax in range(len(shape)) if ax != axis)


def _param_sums(g, xhat, shape, axis, ctx):
    """(gw, gb): _sum_except of g * xhat and g, one thread per channel (zeros when x is
    empty, as the rule's constant 0)."""
    channels = shape[axis]
    if int(np.prod(shape)) == 0:
        return np.zeros(channels), np.zeros(channels)
    others = _others(shape, axis)
    gc, xc = _grouped(g, others), _grouped(xhat, others)
    gw, gb = np.empty(channels), np.empty(channels)
    kern = ctx.compile("norm_param_sums", lambda: make_param_sums(ctx.P))
    ctx.launch(kern, channels, gc, xc, gw, gb, ctx.rp)
    return gw, gb


def launch_batch(o, xs, cotangents, route, ctx):
    """layerNorm and batchNorm (module docstring)."""
    x, w, b, eps = xs
    shape = tuple(o.attrs.shape)
    axes, axis = _axes(o)
    grad = route == "gradient"
    g = ctx.cotangents(o, cotangents)[0] if grad else None
    if x.size == 0:
        if grad:
            return (np.zeros(shape), np.zeros(shape[axis]), np.zeros(shape[axis]), None)
        return (np.zeros(shape),)
    rows = _grouped(x, axes)
    wg = _grouped(_spread(w, shape, axis), axes)
    count = float(ctx.round(rows.shape[1]))
    out = np.empty_like(rows)
    if not grad:
        b_g = _grouped(_spread(b, shape, axis), axes)
        kern = ctx.compile("batch_norm", lambda: make_batch_norm(ctx.P))
        ctx.launch(kern, rows.shape[0], rows, wg, b_g, out, count, float(eps), ctx.rp)
        return (from_last(out, shape, axes),)
    xh = np.empty_like(rows)
    kern = ctx.compile("batch_norm_grad", lambda: make_batch_norm_grad(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, wg, _grouped(g, axes), out, xh, count, float(eps),
               ctx.rp)
    gw, gb = _param_sums(g, from_last(xh, shape, axes), shape, axis, ctx)
    return (np.ascontiguousarray(from_last(out, shape, axes)), gw, gb, None)


def launch_running(o, xs, cotangents, route, ctx):
    """batchNormRunning (module docstring)."""
    x, w, b, rm, rv, eps = xs
    shape, axis = tuple(o.attrs.shape), o.attrs.axis
    wf, rmf, rvf = (flat(_spread(v, shape, axis)) for v in (w, rm, rv))
    n = x.size
    if route == "forward":
        y = np.empty(n)
        kern = ctx.compile("batch_norm_running", lambda: make_running(ctx.P))
        ctx.launch(kern, n, flat(x), wf, flat(_spread(b, shape, axis)), rmf, rvf, y,
                   float(eps), ctx.rp)
        return (y.reshape(shape),)
    (g,) = ctx.cotangents(o, cotangents)
    gx, xh = np.empty(n), np.empty(n)
    kern = ctx.compile("batch_norm_running_grad", lambda: make_running_grad(ctx.P))
    ctx.launch(kern, n, flat(x), wf, rmf, rvf, flat(g), gx, xh, float(eps), ctx.rp)
    gw, gb = _param_sums(g, xh.reshape(shape), shape, axis, ctx)
    return (gx.reshape(shape), gw, gb, None, None, None)


def _op(name, **attrs):
    """gpu_check's instance (Kernel.sized): rows of 64 elements."""
    return routes.op(name, **attrs)


# Test instances (kernels.base.Instance): the defaults and other layouts of each operator.
_ORDINARY = ("ordinary",)

KERNELS = (
    Kernel("layerNorm", "norm", Contract(TRACED, TRACED, None), launch_batch,
           sized=lambda size: _op("layerNorm", shape=(max(1, size // 64), 64)),
           tests=(Instance({}, kinds=("ordinary", "edges")), Instance("row", kinds=_ORDINARY),
                  Instance({"shape": (2, 2, 2)}, kinds=_ORDINARY))),
    Kernel("batchNorm", "norm", Contract(TRACED, TRACED, None), launch_batch,
           sized=lambda size: _op("batchNorm", shape=(64, max(1, size // 64))),
           tests=(Instance({}, kinds=("ordinary", "edges")),
                  Instance("spatial", kinds=_ORDINARY))),
    Kernel("batchNormRunning", "norm", Contract(TRACED, TRACED, None), launch_running,
           sized=lambda size: _op("batchNormRunning", shape=(max(1, size // 64), 64), axis=1),
           tests=(Instance({}, kinds=_ORDINARY), Instance("axis0", kinds=_ORDINARY),
                  Instance({"shape": (3,), "axis": 0}, kinds=_ORDINARY))),
)

"""Convolution and pooling kernels: conv, convTranspose, pool (max and average) and
smoothMaxPool, forward and gradient routes, at every attribute combination the rules accept.

The rules (routes/families/conv_pool.py) are gathers followed by backend reductions: conv is
``gather_dot`` (one ``xp.dot`` per output over the zero-padded window, input channel major,
kernel tap row-major) then ``xp.add`` of the bias; convTranspose is ``scatter_dot`` (one
``xp.dot`` per output position over the (input channel, window, tap) entries that reach it,
channel major, padded with exact zeros to a common count M per channel, the products of
those zeros 0 * 0 included) then the bias; pool is ``xp.max`` over each window (entries
outside the input repeat the window's first inside one) or ``xp.sum`` over the window with
exact zeros outside, then one division by the integer divisor rounded into the format;
smoothMaxPool is (M + log sum exp(beta x - M)) / beta per window, M the window's maximum of
beta x.

A gather moves values and rounds nothing.  The host takes the geometry from the rules' own
``windows`` and ``inverse`` (integer tables of spatial positions, as small as one window
grid: (outputs, taps) or (positions, M)), with -1 (or the sentinel) where the rule reads one
of its padding zeros; the device computes the channel offsets and does the arithmetic, one
thread per output: products rounded then folded sequentially acc = p_0, acc = acc + p_t
(``Backend._contract`` under the strict policy, products x * w in the rule's operand order,
a padding zero multiplied like any entry, so -0 and NaN products appear exactly where the
rule has them), then one rounded addition of the bias.  An empty contraction gives the
rule's constant +0 before the bias.

Gradients (the rules' pullbacks, same tables): conv's input gradient is ``scatter_dot`` of
the cotangent (one thread per input entry, the (channel, slot) pairs of ``inverse`` in the
rule's order, zero pairs included), its weight gradient ``weight_dot`` (batch major, then
windows), the bias gradient a sequential sum per channel; convTranspose's are
``gather_dot`` and ``weight_dot`` of the cotangent placed in the uncropped output (so one
``gather_dot`` and one ``scatter_dot`` kernel serve both, with and without the bias).  pool:
each window's share (max: the recomputed maximum, the sequential count of inside entries
equal to it -- NaN entries for a NaN maximum --, g / count; average: g / divisor), then
``scatter_sum``: one thread per input entry adding, from the first slot of ``inverse``, the
share of each window reaching it (+0 where it is not the maximum, and for the sentinel
slots).  smoothMaxPool: per window the terms exp(beta x - m) / s * g, then the same scatter.
"""

from __future__ import annotations

import math

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from roundoff_coverage import routes
from roundoff_coverage.routes.windows import inverse, windows
from roundoff_coverage.routes.families.pool import pool_divisors, pool_extents

from .base import FEW, Instance, Kernel, fixed, flat, special_values
from .contract import TRACED, Contract


# ----- device kernels --------------------------------------------------------------------------
def make_window(P: dict):
    """window(x, idx[O, K], valid[O, K], code, div[O], size, out, rp): per row of ``size``
    entries and window o, the sequential maximum of x[idx[o, :]] (code 0: outside entries
    repeat an inside one), or the sequential sum with +0 outside divided by div[o] (code 1)."""
    add, div_, mx = P["add"], P["divide"], P["maximum"]

    @cuda.jit
    def window(x, idx, valid, code, div, size, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            nwin = idx.shape[0]
            o = r % nwin
            base = (r // nwin) * size
            acc = 0.0
            for k in range(idx.shape[1]):
                v = x[base + idx[o, k]]
                if code == 1 and valid[o, k] == 0:
                    v = 0.0                                              # a padding zero
                if k == 0:
                    acc = v
                elif code == 0:
                    acc = mx(acc, v, rp)
                else:
                    acc = add(acc, v, rp)
            if code == 1:
                acc = div_(acc, div[o], rp)
            out[r] = acc
    return window


def smooth_parts(P: dict):
    """The device function parts(x, idx, o, base, beta, rp) -> (m, s) of window o of the row
    at ``base``: m = max_k x_k * beta (exact maximum of rounded products), s = sequential sum
    of exp(x_k * beta - m) -- routes' smoothMaxPool before its log; the forward and the
    gradient share it, so the gradient's m and s are the forward's, bit for bit."""
    add, sub, mul, mx, ex = (P["add"], P["subtract"], P["multiply"], P["maximum"], P["exp"])

    @cuda.jit(device=True)
    def parts(x, idx, o, base, beta, rp):
        taps = idx.shape[1]
        m = mul(x[base + idx[o, 0]], beta, rp)
        for k in range(1, taps):
            m = mx(m, mul(x[base + idx[o, k]], beta, rp), rp)
        s = ex(sub(mul(x[base + idx[o, 0]], beta, rp), m, rp), rp)
        for k in range(1, taps):
            s = add(s, ex(sub(mul(x[base + idx[o, k]], beta, rp), m, rp), rp), rp)
        return m, s
    return parts


def make_smooth(P: dict):
    """smooth(x, idx[O, K], size, beta, out, rp): routes' _smooth_forward per window: z = x *
    beta, m = sequential max of z, s = sequential sum of exp(z - m), out = (m + log s) / beta
    (z recomputed in the second pass: the same rounded products)."""
    add, div, lg = P["add"], P["divide"], P["log"]
    parts = smooth_parts(P)

    @cuda.jit
    def smooth(x, idx, size, beta, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            m, s = parts(x, idx, r % idx.shape[0], (r // idx.shape[0]) * size, beta, rp)
            out[r] = div(add(m, lg(s, rp), rp), beta, rp)
    return smooth


# ----- gradient kernels ------------------------------------------------------------------------
def make_gather_dot(P: dict):
    """gd(z, w, b, pos[O, K], geo, biased, out, rp): routes' ``gather_dot``: geo = [Cz,
    Cz/groups, Co, Co/groups, S] (S z's spatial size); out[n, co, o] = sequential sum over
    (ci, k), ci major, of z[n, group(co) * Cz/groups + ci, pos[o, k]] * w[co, ci, k] (a padding
    zero where pos < 0), +0 for an empty sum, then + b[co] rounded when ``biased``.  conv's
    forward (z = x, biased) and convTranspose's input gradient (z the cotangent, no bias)."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def gd(z, w, b, pos, geo, biased, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            c, cg, oc, ocg, size = geo[0], geo[1], geo[2], geo[3], geo[4]
            nwin, taps = pos.shape[0], pos.shape[1]
            o = r % nwin
            co = (r // nwin) % oc
            base = ((r // (nwin * oc)) * c + (co // ocg) * cg) * size
            acc = 0.0
            for ci in range(cg):
                for k in range(taps):
                    p = pos[o, k]
                    zv = 0.0 if p < 0 else z[base + ci * size + p]      # a padding zero
                    term = mul(zv, w[(co * cg + ci) * taps + k], rp)
                    acc = term if ci == 0 and k == 0 else add(acc, term, rp)
            out[r] = add(acc, b[co], rp) if biased == 1 else acc
    return gd


def make_scatter_dot(P: dict):
    """sd(v, w, b, io[F, M], ik[F, M], crop[Q], geo, biased, out, rp): routes'
    ``scatter_dot``: geo = [Cv, Cv/groups, Co, Co/groups, O, K] (O windows = v's spatial
    size, K taps); out[n, co, q] = sequential sum over (channel cc of co's group, slot j),
    cc major, of v[n, ch, io[p, j]] * w[ch, co % (Co/groups), ik[p, j]] (p = crop[q], ch the
    cc-th channel of the group; the sentinel io = O a zero pair, 0 * 0 included), then
    + b[co] rounded when ``biased``.  convTranspose's forward (v = x, biased) and conv's input
    gradient (v the cotangent, no bias)."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def sd(v, w, b, io, ik, crop, geo, biased, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            c, cg, oc, ocg, nin, taps = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
            nq, m = crop.size, io.shape[1]
            p = crop[r % nq]
            co = (r // nq) % oc
            n = r // (nq * oc)
            first = (co // ocg) * cg
            acc = 0.0
            for cc in range(cg):
                ch = first + cc
                for j in range(m):
                    i = io[p, j]
                    av, bv = 0.0, 0.0                                    # the zero pair
                    if i != nin:
                        av = v[(n * c + ch) * nin + i]
                        bv = w[(ch * ocg + co % ocg) * taps + ik[p, j]]
                    term = mul(av, bv, rp)
                    acc = term if cc == 0 and j == 0 else add(acc, term, rp)
            out[r] = add(acc, b[co], rp) if biased == 1 else acc
    return sd


def make_weight_dot(P: dict):
    """wd(z, v, pos[O, K], geo, out, rp): routes' ``weight_dot``: geo = [Cz, Cz/groups, Cv,
    Cv/groups, S, N]; out[cv, cz, k] (cz within cv's group) = sequential sum over (n, o), n
    major, of z[n, group(cv) * Cz/groups + cz, pos[o, k]] * v[n, cv, o] (a padding zero where
    pos < 0), +0 for an empty sum.  The weight gradients of conv (z = x, v the cotangent) and
    convTranspose (z the cotangent, v = x)."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def wd(z, v, pos, geo, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            c, cg, vc, vcg, size, batch = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5]
            nwin, taps = pos.shape[0], pos.shape[1]
            k = r % taps
            cz = (r // taps) % cg
            cv = r // (taps * cg)
            zch = (cv // vcg) * cg + cz
            acc = 0.0
            for n in range(batch):
                for o in range(nwin):
                    p = pos[o, k]
                    zv = 0.0 if p < 0 else z[(n * c + zch) * size + p]
                    term = mul(zv, v[(n * vc + cv) * nwin + o], rp)
                    acc = term if n == 0 and o == 0 else add(acc, term, rp)
            out[r] = acc
    return wd


def make_channel_sum(P: dict):
    """cs(g, geo, out, rp): routes' ``_channel_sum``: geo = [N, C, S]; out[c] = sequential
    sum over (n, s), n major, of g[n, c, s] (the bias gradients; N S >= 1)."""
    add = P["add"]

    @cuda.jit
    def cs(g, geo, out, rp):
        c = cuda.grid(1)
        if c < out.size:
            batch, ch, size = geo[0], geo[1], geo[2]
            acc = 0.0
            for n in range(batch):
                for s in range(size):
                    v = g[(n * ch + c) * size + s]
                    acc = v if n == 0 and s == 0 else add(acc, v, rp)
            out[c] = acc
    return cs


def make_pool_share(P: dict):
    """share(x, g, idx[O, K], valid[O, K], code, div[O], size, y, out, rp): per row of
    ``size`` entries and window o, the share of the cotangent g each entry of the window
    receives (routes' ``_pool_linear``, transposed).  code 0 (max): y = the window's
    sequential maximum (the forward), count = the sequential sum over the taps of 1 where the
    tap is inside and x == y (both NaN for a NaN y), +0 elsewhere, share = g / count; code 1
    (average): share = g / div[o]."""
    add, div_, mx = P["add"], P["divide"], P["maximum"]

    @cuda.jit
    def share(x, g, idx, valid, code, div, size, y, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            nwin = idx.shape[0]
            o = r % nwin
            if code == 1:
                out[r] = div_(g[r], div[o], rp)
            else:
                base = (r // nwin) * size
                m = x[base + idx[o, 0]]
                for k in range(1, idx.shape[1]):
                    m = mx(m, x[base + idx[o, k]], rp)
                mnan = m != m
                count = 0.0
                for k in range(idx.shape[1]):
                    v = x[base + idx[o, k]]
                    hit = valid[o, k] != 0 and (v == m or (mnan and v != v))
                    one = 1.0 if hit else 0.0
                    count = one if k == 0 else add(count, one, rp)
                y[r] = m
                out[r] = div_(g[r], count, rp)
    return share


def make_pool_scatter(P: dict):
    """scatter(x, y, share, io[S, M], code, size, nwin, out, rp): routes' ``scatter_sum`` of
    the pooled shares (nwin windows per row): out[b, p] = the sequential sum over the slots j
    of the windows reading position p (io[p, j], in the rule's window order; the sentinel
    nwin an exact +0) of
    share[b, o] where it reaches p (max, code 0: x[b, p] == y[b, o], or both NaN; average,
    code 1: always), +0 elsewhere."""
    add = P["add"]

    @cuda.jit
    def scatter(x, y, share, io, code, size, nwin, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            p = r % size
            b = r // size
            v = x[r]
            acc = 0.0
            for j in range(io.shape[1]):
                o = io[p, j]
                term = 0.0
                if o != nwin:
                    if code == 1:
                        term = share[b * nwin + o]
                    else:
                        m = y[b * nwin + o]
                        if v == m or (m != m and v != v):
                            term = share[b * nwin + o]
                acc = term if j == 0 else add(acc, term, rp)
            out[r] = acc
    return scatter


def make_smooth_terms(P: dict):
    """terms(x, g, idx[O, K], size, beta, out, rp): per row and window o, the K terms of
    routes' ``_smooth_linear`` (transposed): the forward's m and s (``make_smooth``), then
    weight_k = exp(x_k * beta - m) / s and term_k = weight_k * g (out[(row, o), k])."""
    sub, mul, div, ex = P["subtract"], P["multiply"], P["divide"], P["exp"]
    parts = smooth_parts(P)

    @cuda.jit
    def terms(x, g, idx, size, beta, out, rp):
        r = cuda.grid(1)
        if r < g.size:
            taps = idx.shape[1]
            o = r % idx.shape[0]
            base = (r // idx.shape[0]) * size
            m, s = parts(x, idx, o, base, beta, rp)
            for k in range(taps):
                e = ex(sub(mul(x[base + idx[o, k]], beta, rp), m, rp), rp)
                out[r * taps + k] = mul(div(e, s, rp), g[r], rp)
    return terms


def make_scatter_terms(P: dict):
    """scatter(c, io[S, M], ik[S, M], size, nwin, out, rp): routes' ``scatter_sum``: out[b, p]
    = the sequential sum over the slots j of c[b, io[p, j], ik[p, j]] (c of shape (B, nwin,
    K)), the sentinel io = nwin an exact +0."""
    add = P["add"]

    @cuda.jit
    def scatter(c, io, ik, size, nwin, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            p = r % size
            taps = c.size // ((out.size // size) * nwin)
            base = (r // size) * nwin * taps
            acc = 0.0
            for j in range(io.shape[1]):
                o = io[p, j]
                term = 0.0 if o == nwin else c[base + o * taps + ik[p, j]]
                acc = term if j == 0 else add(acc, term, rp)
            out[r] = acc
    return scatter


# ----- geometry from the rules (host integers) -------------------------------------------------
def _ints(a):
    return np.ascontiguousarray(a, dtype=np.int64)


def conv_positions(a, out_dims):
    """pos[O, K]: conv's windows over the zero-padded input (routes' ``_conv_parts``) as flat
    positions in the unpadded input, -1 where the window reads a padding zero."""
    spatial = a.shape[2:]
    padded = tuple(s + 2 * p for s, p in zip(spatial, a.padding))
    inner = np.full(padded, -1, dtype=np.int64)
    inner[tuple(slice(p, p + s) for p, s in zip(a.padding, spatial))] = \
        np.arange(math.prod(spatial)).reshape(spatial)
    idx, _ = windows(padded, out_dims, a.kernel, a.stride, a.dilation, (0,) * len(padded))
    return _ints(inner.reshape(-1)[idx])


def conv_transpose_geometry(a, out_dims):
    """(io, ik, crop): the rule's ``inverse`` of the windows over the uncropped output
    (routes' ``_ct_parts``) and the uncropped position of each output position."""
    full = tuple(o + 2 * p for o, p in zip(out_dims, a.padding))
    idx, valid = windows(full, a.shape[2:], a.kernel, a.stride, a.dilation, (0,) * len(full))
    io, ik = inverse(idx, valid, math.prod(full))
    crop = np.arange(math.prod(full)).reshape(full)[
        tuple(slice(p, p + o) for p, o in zip(a.padding, out_dims))]
    return _ints(io), _ints(ik), _ints(crop.reshape(-1))


# ----- launchers -------------------------------------------------------------------------------
def _groups(a, channels):
    """[C, C/groups, C_out, C_out/groups] (channels: C of the kernel's x operand)."""
    g = a.groups
    return [channels, channels // g, a.out_channels, a.out_channels // g]


def launch_conv(o, xs, cotangents, route, ctx):
    a = o.attrs
    x, w, b = (flat(v) for v in xs)
    shape = o.outputs[0].shape
    if route == "gradient":
        return conv_gradient(o, x, w, ctx.cotangents(o, cotangents)[0], ctx)
    pos = conv_positions(a, shape[2:])
    geo = _ints(_groups(a, a.shape[1]) + [math.prod(a.shape[2:])])
    out = np.empty(math.prod(shape))
    kern = ctx.compile("conv.gather_dot", lambda: make_gather_dot(ctx.P))
    ctx.launch(kern, out.size, x, w, b, pos, geo, 1, out, ctx.rp)
    return (out.reshape(shape),)


def launch_conv_transpose(o, xs, cotangents, route, ctx):
    a = o.attrs
    x, w, b = (flat(v) for v in xs)
    shape = o.outputs[0].shape
    if route == "gradient":
        return conv_transpose_gradient(o, x, w, ctx.cotangents(o, cotangents)[0], ctx)
    io, ik, crop = conv_transpose_geometry(a, shape[2:])
    geo = _ints(_groups(a, a.shape[1]) + [math.prod(a.shape[2:]), math.prod(a.kernel)])
    out = np.empty(math.prod(shape))
    kern = ctx.compile("conv.scatter_dot", lambda: make_scatter_dot(ctx.P))
    ctx.launch(kern, out.size, x, w, b, io, ik, crop, geo, 1, out, ctx.rp)
    return (out.reshape(shape),)


def launch_pool(o, xs, cotangents, route, ctx):
    a = o.attrs
    shape = o.outputs[0].shape
    dims, ext = pool_extents(a)
    idx, valid = windows(dims, ext, a.kernel, a.stride, a.dilation, a.padding)
    if route == "gradient":
        return (pool_gradient(o, xs[0], ctx.cotangents(o, cotangents)[0], dims, ext, idx,
                              valid, ctx),)
    out = np.empty(math.prod(shape))
    average = a.mode == "average"
    # The divisors: Python integers, each rounded once into the format (xp.constant).
    div = ctx.round(np.asarray(pool_divisors(a), dtype=np.float64)) if average \
        else np.ones(1)
    kern = ctx.compile("conv.pool", lambda: make_window(ctx.P))
    ctx.launch(kern, out.size, flat(xs[0]), _ints(idx), _ints(valid), 1 if average else 0,
               div, math.prod(dims), out, ctx.rp)
    return (out.reshape(shape),)


def _run(ctx, key, make, n, *args, threads=None):
    """A float64 vector of n results of the kernel ``make`` under ``key`` (args before out),
    one thread per result (or ``threads``)."""
    out = np.empty(n)
    kern = ctx.compile(key, lambda: make(ctx.P))
    ctx.launch(kern, n if threads is None else threads, *args, out, ctx.rp)
    return out


def bias_gradient(g, channels, ctx):
    """routes' ``_channel_sum`` of the cotangent g (N, C, spatial...): +0 when g is empty."""
    if g.size == 0:
        return np.zeros(channels)
    geo = _ints([g.shape[0], channels, math.prod(g.shape[2:])])
    return _run(ctx, "conv.channel_sum", make_channel_sum, channels, flat(g), geo)


def conv_gradient(o, x, w, g, ctx):
    """conv's pullback (routes' ``_conv_backward``): the input gradient is ``scatter_dot`` of
    the cotangent over the zero-padded input, cropped; the weight gradient ``weight_dot``;
    the bias gradient the channel sums."""
    a = o.attrs
    shape, wshape = o.outputs[0].shape, o.inputs[1].shape
    spatial = a.shape[2:]
    padded = tuple(s + 2 * p for s, p in zip(spatial, a.padding))
    idx, valid = windows(padded, shape[2:], a.kernel, a.stride, a.dilation, (0,) * len(padded))
    io, ik = inverse(idx, valid, math.prod(padded))
    crop = np.arange(math.prod(padded)).reshape(padded)[
        tuple(slice(p, p + s) for p, s in zip(a.padding, spatial))]
    gv = flat(g)
    geo = _ints(_groups(a, a.out_channels)[:2] + [a.shape[1], a.shape[1] // a.groups,
                                                   idx.shape[0], idx.shape[1]])
    gx = _run(ctx, "conv.scatter_dot", make_scatter_dot, math.prod(a.shape), gv, w,
              np.zeros(1), _ints(io), _ints(ik), _ints(crop.reshape(-1)), geo, 0)
    geo = _ints(_groups(a, a.shape[1]) + [math.prod(spatial), a.shape[0]])
    gw = _run(ctx, "conv.weight_dot", make_weight_dot, math.prod(wshape), x, gv,
              conv_positions(a, shape[2:]), geo)
    return gx.reshape(a.shape), gw.reshape(wshape), bias_gradient(g, a.out_channels, ctx)


def conv_transpose_gradient(o, x, w, g, ctx):
    """convTranspose's pullback (routes' ``_ct_backward``): the cotangent placed in the
    uncropped output (zeros around it), then ``gather_dot`` with the weight (input gradient),
    ``weight_dot`` with x (weight gradient), and the channel sums (bias gradient)."""
    a = o.attrs
    shape, wshape = o.outputs[0].shape, o.inputs[1].shape
    out_dims = shape[2:]
    full = tuple(d + 2 * p for d, p in zip(out_dims, a.padding))
    idx, _ = windows(full, a.shape[2:], a.kernel, a.stride, a.dilation, (0,) * len(full))
    inner = np.full(full, -1, dtype=np.int64)
    inner[tuple(slice(p, p + d) for p, d in zip(a.padding, out_dims))] = \
        np.arange(math.prod(out_dims)).reshape(out_dims)
    pos = _ints(inner.reshape(-1)[idx])
    gv = flat(g)
    cg = a.out_channels // a.groups
    geo = _ints([a.out_channels, cg, a.shape[1], a.shape[1] // a.groups,
                 math.prod(out_dims)])
    gx = _run(ctx, "conv.gather_dot", make_gather_dot, math.prod(a.shape), gv, w, np.zeros(1),
              pos, geo, 0)
    geo = _ints([a.out_channels, cg, a.shape[1], a.shape[1] // a.groups,
                 math.prod(out_dims), a.shape[0]])
    gw = _run(ctx, "conv.weight_dot", make_weight_dot, math.prod(wshape), gv, x, pos, geo)
    return gx.reshape(a.shape), gw.reshape(wshape), bias_gradient(g, a.out_channels, ctx)


def pool_gradient(o, x, g, dims, ext, idx, valid, ctx):
    """pool's pullback (routes' ``_pool_linear``, transposed): each window's share of its
    cotangent (``make_pool_share``), then one thread per input entry summing the shares of
    the windows that reach it in the rule's ``scatter_sum`` order (``make_pool_scatter``)."""
    a = o.attrs
    size = math.prod(dims)
    nwin = math.prod(ext)
    if x.size == 0 or nwin == 0:
        return np.zeros(a.shape)
    rows = x.size // size
    average = a.mode == "average"
    div = ctx.round(np.asarray(pool_divisors(a), dtype=np.float64)) if average \
        else np.ones(1)
    xv = flat(x)
    y = np.zeros(rows * nwin)
    share = _run(ctx, "conv.pool_share", make_pool_share, rows * nwin, xv, flat(g),
                 _ints(idx), _ints(valid), 1 if average else 0, div, size, y)
    io, _ = inverse(idx, valid, size)
    out = _run(ctx, "conv.pool_scatter", make_pool_scatter, x.size, xv, y, share, _ints(io),
               1 if average else 0, size, nwin)
    return out.reshape(a.shape)


def launch_smooth(o, xs, cotangents, route, ctx):
    a = o.attrs
    shape = o.outputs[0].shape
    dims = a.shape[len(a.shape) - len(a.kernel):]
    idx, valid = windows(dims, shape[len(shape) - len(dims):], a.kernel, a.stride,
                         (1,) * len(dims), (0,) * len(dims))
    if route == "gradient":
        (g,) = ctx.cotangents(o, cotangents)
        x = flat(xs[0])
        size, nwin = math.prod(dims), idx.shape[0]
        if x.size == 0 or nwin == 0:                       # the rule's zeros (no weights)
            return np.zeros(a.shape), None
        c = _run(ctx, "conv.smooth_terms", make_smooth_terms, g.size * idx.shape[1], x,
                 flat(g), _ints(idx), size, float(xs[1]), threads=g.size)
        io, ik = inverse(idx, valid, size)
        out = _run(ctx, "conv.scatter_terms", make_scatter_terms, x.size, c, _ints(io),
                   _ints(ik), size, nwin)
        return out.reshape(a.shape), None
    out = np.empty(math.prod(shape))
    kern = ctx.compile("conv.smooth_max_pool", lambda: make_smooth(ctx.P))
    ctx.launch(kern, out.size, flat(xs[0]), _ints(idx), math.prod(dims), float(xs[1]), out,
               ctx.rp)
    return (out.reshape(shape),)


def _conv_sized(size):
    """gpu_check's conv: 8 channels of 64, a batch of size / 512, kernel 3, padding 1."""
    return routes.op("conv", shape=(max(1, size // 512), 8, 64), out_channels=8, kernel=(3,),
                     padding=(1,))


def _few(routes=None, **attrs):
    """A further instance (strides, padding, dilation and groups together; 2-D windows) in
    fewer formats."""
    return Instance(attrs, formats=FEW, routes=routes)


def _specials(attrs, routes=None):
    """Special values where the samplers have none: padding zeros times infinities, -0
    shares and cotangents, NaN maxima shared among NaN entries (``attrs``: a mapping or an
    example's label)."""
    return Instance(attrs, formats=("binary32", "bfloat16"), kinds=("specials",),
                    routes=routes, inputs=special_values)


_GRADIENT = ("gradient",)
_OVERLAPPING = {"shape": (2, 6), "kernel": (3,), "stride": (1,), "padding": (1,)}

KERNELS = (
    # The gradients: dot products (input and weight) and sums (bias).
    Kernel("conv", "window", Contract(TRACED, TRACED, None), launch_conv,
           sized=lambda size: _conv_sized(size),
           tests=(Instance(),
                  _few(shape=(1, 2, 3, 3), out_channels=2, kernel=(2, 2), stride=(2, 1),
                       padding=(1, 1), dilation=(1, 2), groups=2),
                  _few(shape=(2, 2, 3), out_channels=1, kernel=(3,), stride=(2,), padding=(2,),
                       dilation=(1,), groups=1),
                  _few(_GRADIENT, shape=(1, 4, 3), out_channels=2, kernel=(1,), groups=2),
                  _specials("strided"), _specials("2d-groups"))),
    Kernel("convTranspose", "window", Contract(TRACED, TRACED, None), launch_conv_transpose,
           tests=(Instance(),
                  _few(shape=(1, 1, 3), out_channels=2, kernel=(2,), stride=(3,), padding=(1,),
                       dilation=(2,), output_padding=(2,), groups=1),
                  _few(shape=(2, 2, 2, 1), out_channels=2, kernel=(2, 3), stride=(1, 2),
                       padding=(1, 1), dilation=(1, 1), output_padding=(0, 1), groups=1),
                  _specials("strided"), _specials("2d-groups"))),
    # max pooling is exact, average pooling a sum and a division: one contract for both; the
    # gradient recomputes the maximum, counts ties (a sum), divides and sums the shares.
    # Tests: 2-D max with padding, dilation and ceil mode; average in every mode; windows
    # overlapping; a window maximum tied within and across windows, -0 and +0 tied.
    Kernel("pool", "window", Contract(TRACED, TRACED, None), launch_pool,
           tests=(Instance(),
                  _few(shape=(1, 4, 5), kernel=(3, 2), stride=(2, 2), padding=(1, 1),
                       dilation=(1, 2), ceil_mode=True),
                  _few(mode="average", shape=(2, 4, 4), kernel=(3, 2), stride=(2, 1),
                       padding=(1, 1), dilation=(1, 1), ceil_mode=True, count_include_pad=True),
                  _few(mode="average", shape=(1, 1, 5, 3), kernel=(2, 3), stride=(3, 1),
                       padding=(1, 1), dilation=(1, 1), count_include_pad=False),
                  _few(_GRADIENT, **_OVERLAPPING),
                  _specials(_OVERLAPPING, _GRADIENT), _specials("average", _GRADIENT),
                  Instance({"shape": (1, 2, 5), "kernel": (3,), "stride": (1,),
                            "padding": (1,)}, formats=("bfloat16", "float8_e4m3fn"),
                           kinds=("ties",), routes=_GRADIENT,
                           inputs=fixed(np.array([[[1.0, 1.0, 0.5, 1.0, 1.0],
                                                   [0.0, -0.0, 0.0, -1.0, -0.0]]]))))),
    # smoothMaxPool's gradient recomputes m and the sum (no log), the weights e / s, their
    # products with the cotangent and the sums of the windows' terms per entry.
    Kernel("smoothMaxPool", "window",
           Contract(TRACED, TRACED, None),
           launch_smooth,
           tests=(Instance(), _few(shape=(2, 5), kernel=(3,), stride=(2,)),
                  _few(shape=(1, 4, 3), kernel=(2, 3), stride=(2, 1)),
                  _few(_GRADIENT, shape=(1, 4, 3), kernel=(2, 3), stride=(1, 1)))),
)

"""Convolution and pooling kernels: conv, convTranspose, pool (max and average) and
smoothMaxPool, forward routes, at every attribute combination the rules accept.

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
"""

from __future__ import annotations

import math

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from routes.families.conv_pool import inverse, pool_extents, windows

from .base import Kernel, flat
from .contract import Contract


# ----- device kernels --------------------------------------------------------------------------
def make_conv(P: dict):
    """conv(x, w, b, pos[O, K], geo, out, rp): geo = [C, C/groups, C_out, C_out/groups, S]
    (S the input's spatial size); pos[o, k] the flat spatial position window o reads at tap
    k, -1 in the padding.  out[n, co, o] = (sum over ci, k of x * w) + b[co]."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def conv(x, w, b, pos, geo, out, rp):
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
                    xv = 0.0 if p < 0 else x[base + ci * size + p]      # a padding zero
                    term = mul(xv, w[(co * cg + ci) * taps + k], rp)
                    acc = term if ci == 0 and k == 0 else add(acc, term, rp)
            out[r] = add(acc, b[co], rp)
    return conv


def make_conv_transpose(P: dict):
    """ct(x, w, b, io[F, M], ik[F, M], crop[Q], geo, out, rp): geo = [C, C/groups, C_out,
    C_out/groups, I, K] (I input positions = windows, K taps); io, ik the rule's ``inverse``
    (sentinel io = I: a zero pair); crop[q] the uncropped position of output position q."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def ct(x, w, b, io, ik, crop, geo, out, rp):
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
                        av = x[(n * c + ch) * nin + i]
                        bv = w[(ch * ocg + co % ocg) * taps + ik[p, j]]
                    term = mul(av, bv, rp)
                    acc = term if cc == 0 and j == 0 else add(acc, term, rp)
            out[r] = add(acc, b[co], rp)
    return ct


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


def make_smooth(P: dict):
    """smooth(x, idx[O, K], size, beta, out, rp): routes' _smooth_forward per window: z = x *
    beta, m = sequential max of z, s = sequential sum of exp(z - m), out = (m + log s) / beta
    (z recomputed in the second pass: the same rounded products)."""
    add, sub, mul, div, mx, ex, lg = (P["add"], P["subtract"], P["multiply"], P["divide"],
                                      P["maximum"], P["exp"], P["log"])

    @cuda.jit
    def smooth(x, idx, size, beta, out, rp):
        r = cuda.grid(1)
        if r < out.size:
            nwin, taps = idx.shape[0], idx.shape[1]
            o = r % nwin
            base = (r // nwin) * size
            m = mul(x[base + idx[o, 0]], beta, rp)
            for k in range(1, taps):
                m = mx(m, mul(x[base + idx[o, k]], beta, rp), rp)
            s = ex(sub(mul(x[base + idx[o, 0]], beta, rp), m, rp), rp)
            for k in range(1, taps):
                s = add(s, ex(sub(mul(x[base + idx[o, k]], beta, rp), m, rp), rp), rp)
            out[r] = div(add(m, lg(s, rp), rp), beta, rp)
    return smooth


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


def divisors(a, dims, out):
    """The average pool's divisor per window: the window clipped to the padded input
    (count_include_pad) or to the input (routes' ``_divisors``, the same integers)."""
    res = []
    for o in np.ndindex(*out):
        total = 1
        for oa, n, k, s, p in zip(o, dims, a.kernel, a.stride, a.padding):
            start = oa * s - p
            end = min(start + k, n + p)
            if not a.count_include_pad:
                start, end = max(start, 0), min(end, n)
            total *= end - start
        res.append(total)
    return res


# ----- launchers -------------------------------------------------------------------------------
def _groups(a, channels):
    """[C, C/groups, C_out, C_out/groups] (channels: C of the kernel's x operand)."""
    g = a.groups
    return [channels, channels // g, a.out_channels, a.out_channels // g]


def launch_conv(o, xs, cotangents, route, ctx):
    a = o.attrs
    x, w, b = (flat(v) for v in xs)
    shape = o.outputs[0].shape
    pos = conv_positions(a, shape[2:])
    geo = _ints(_groups(a, a.shape[1]) + [math.prod(a.shape[2:])])
    out = np.empty(math.prod(shape))
    kern = ctx.compile("conv.conv", lambda: make_conv(ctx.P))
    ctx.launch(kern, out.size, x, w, b, pos, geo, out, ctx.rp)
    return (out.reshape(shape),)


def launch_conv_transpose(o, xs, cotangents, route, ctx):
    a = o.attrs
    x, w, b = (flat(v) for v in xs)
    shape = o.outputs[0].shape
    io, ik, crop = conv_transpose_geometry(a, shape[2:])
    geo = _ints(_groups(a, a.shape[1]) + [math.prod(a.shape[2:]), math.prod(a.kernel)])
    out = np.empty(math.prod(shape))
    kern = ctx.compile("conv.conv_transpose", lambda: make_conv_transpose(ctx.P))
    ctx.launch(kern, out.size, x, w, b, io, ik, crop, geo, out, ctx.rp)
    return (out.reshape(shape),)


def launch_pool(o, xs, cotangents, route, ctx):
    a = o.attrs
    shape = o.outputs[0].shape
    dims, ext = pool_extents(a)
    idx, valid = windows(dims, ext, a.kernel, a.stride, a.dilation, a.padding)
    out = np.empty(math.prod(shape))
    average = a.mode == "average"
    # The divisors: Python integers, each rounded once into the format (xp.constant).
    div = ctx.round(np.asarray(divisors(a, dims, ext), dtype=np.float64)) if average \
        else np.ones(1)
    kern = ctx.compile("conv.pool", lambda: make_window(ctx.P))
    ctx.launch(kern, out.size, flat(xs[0]), _ints(idx), _ints(valid), 1 if average else 0,
               div, math.prod(dims), out, ctx.rp)
    return (out.reshape(shape),)


def launch_smooth(o, xs, cotangents, route, ctx):
    a = o.attrs
    shape = o.outputs[0].shape
    dims = a.shape[len(a.shape) - len(a.kernel):]
    idx, _ = windows(dims, shape[len(shape) - len(dims):], a.kernel, a.stride,
                     (1,) * len(dims), (0,) * len(dims))
    out = np.empty(math.prod(shape))
    kern = ctx.compile("conv.smooth_max_pool", lambda: make_smooth(ctx.P))
    ctx.launch(kern, out.size, flat(xs[0]), _ints(idx), math.prod(dims), float(xs[1]), out,
               ctx.rp)
    return (out.reshape(shape),)


_f = frozenset
KERNELS = (
    Kernel("conv", "window", Contract(_f({"multiply", "add"}), None, False), launch_conv),
    Kernel("convTranspose", "window", Contract(_f({"multiply", "add"}), None, False),
           launch_conv_transpose),
    # max pooling is exact, average pooling a sum and a division: one contract for both.
    Kernel("pool", "window", Contract(_f({"maximum", "add", "divide"}), None, False),
           launch_pool),
    Kernel("smoothMaxPool", "window",
           Contract(_f({"multiply", "maximum", "subtract", "exp", "add", "log", "divide"}),
                    None, False), launch_smooth),
)

"""Convolution and pooling (spec: "Convolution and pooling"): conv, convTranspose, pool (max
and average) and smoothMaxPool, over the trailing spatial axes of (batch, channels,
spatial...) operands, PyTorch's layouts.

Windows are explicit gathers (numpy index arrays built from the geometry: data movement);
every sum is a backend reduction (``xp.dot`` over the window of each output, ``xp.sum`` for
average pooling and for the adjoint scatters), so the accumulation policy applies.  An
adjoint scatter (the input gradient of conv, the forward of convTranspose) gathers, for each
input position, the window entries that touch it, padded with exact zeros to a common count:
under the pairwise order those zeros take part in the tree.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import frozen, value
from ..registry import define
from ..rules import saving, shown
from .reduction import constant_draw, mp_array, pick_sampler, uniform_sampler

TESTS = "tests/test_routes_conv_pool.py"


# ----- geometry (numpy on attributes: index data) ---------------------------------------------
def _grid(dims):
    """Every index tuple of ``dims`` in row-major order (pure Python)."""
    return list(itertools.product(*(range(n) for n in dims)))


def _flat_index(q, dims):
    """The row-major flat index of the tuple q in ``dims``."""
    out = 0
    for qa, n in zip(q, dims):
        out = out * n + qa
    return out


def windows(in_dims, out_dims, kernel, stride, dilation, padding):
    """(idx, valid) of shape (O, K): for output window o and kernel offset k (row-major), the
    flat index into ``in_dims`` of o*stride + k*dilation - padding and whether it is inside;
    an outside entry's index is the window's first inside one (0 when none)."""
    outs, offs = _grid(out_dims), _grid(kernel)
    idx, valid = [], []
    for o in outs:
        row, ok = [], []
        for k in offs:
            q = [oa * s + ka * d - p for oa, ka, s, d, p in
                 zip(o, k, stride, dilation, padding)]
            inside = all(0 <= qa < n for qa, n in zip(q, in_dims))
            ok.append(inside)
            row.append(_flat_index(q, in_dims) if inside else None)
        first = next((v for v in row if v is not None), 0)
        idx.append([first if v is None else v for v in row])
        valid.append(ok)
    shape = (len(outs), len(offs))
    return (np.asarray(idx, dtype=int).reshape(shape),
            np.asarray(valid, dtype=bool).reshape(shape))


def inverse(idx, valid, size):
    """(io, ik) of shape (size, M): for each input position, the (window, offset) pairs whose
    index is that position, padded with the sentinel (O, K); M >= 1."""
    lists = [[] for _ in range(size)]
    n_out, n_off = idx.shape
    for o in range(n_out):
        for k in range(n_off):
            if valid[o, k]:
                lists[idx[o, k]].append((o, k))
    m = max([1] + [len(v) for v in lists])
    io = [[o for o, _ in v] + [n_out] * (m - len(v)) for v in lists]
    ik = [[k for _, k in v] + [n_off] * (m - len(v)) for v in lists]
    return (np.asarray(io, dtype=int).reshape(size, m),
            np.asarray(ik, dtype=int).reshape(size, m))


def _zeros_last(xp, a):
    """``a`` with one exact zero appended along its last axis (the sentinel slot)."""
    return np.concatenate([a, xp.constant(0, a.shape[:-1] + (1,))], axis=-1)


def _size(shape):
    return math.prod(shape)


# ----- the three contractions of a grouped convolution ----------------------------------------
def gather_dot(xp, z, w, idx):
    """out[n,g,co,o] = sum over ci, k of w[g,co,ci,k] * z[n,g,ci,idx[o,k]]: z (N,G,Ci,L),
    w (G,Co,Ci,K) -> (N,G,Co,O), one dot product per output."""
    n, g, ci, _ = z.shape
    co, k, o = w.shape[1], w.shape[3], idx.shape[0]
    if ci * k == 0 or _size((n, g, co, o)) == 0:
        return xp.constant(0, (n, g, co, o))
    p = np.transpose(z[..., idx], (0, 1, 3, 2, 4)).reshape(n, g, 1, o, ci * k)
    return xp.dot(p, np.reshape(w, (1, g, co, 1, ci * k)))


def scatter_dot(xp, v, w, idx, valid, size):
    """The adjoint of gather_dot in z: out[n,g,ci,p] = sum over co and the (o, k) with
    idx[o,k] = p of v[n,g,co,o] * w[g,co,ci,k]: v (N,G,Co,O), w (G,Co,Ci,K) -> (N,G,Ci,size)."""
    n, g, co, _ = v.shape
    ci = w.shape[2]
    io, ik = inverse(idx, valid, size)
    m = io.shape[1]
    if co * m == 0 or _size((n, g, ci, size)) == 0:
        return xp.constant(0, (n, g, ci, size))
    a = _zeros_last(xp, v)[..., io]                       # (N,G,Co,size,M)
    b = _zeros_last(xp, w)[..., ik]                       # (G,Co,Ci,size,M)
    a = np.transpose(a, (0, 1, 3, 2, 4)).reshape(n, g, 1, size, co * m)
    b = np.transpose(b, (0, 2, 3, 1, 4)).reshape(1, g, ci, size, co * m)
    return xp.dot(a, b)


def weight_dot(xp, v, z, idx):
    """The adjoint of gather_dot in w: out[g,co,ci,k] = sum over n, o of v[n,g,co,o] *
    z[n,g,ci,idx[o,k]]: v (N,G,Co,O), z (N,G,Ci,L) -> (G,Co,Ci,K)."""
    n, g, co, o = v.shape
    ci, k = z.shape[2], idx.shape[1]
    if n * o == 0 or _size((g, co, ci, k)) == 0:
        return xp.constant(0, (g, co, ci, k))
    p = np.transpose(z[..., idx], (1, 2, 4, 0, 3)).reshape(g, 1, ci, k, n * o)
    q = np.transpose(v, (1, 2, 0, 3)).reshape(g, co, 1, 1, n * o)
    return xp.dot(p, q)


def _channel_sum(xp, g, channels):
    """sum of g over every axis but 1 (the bias gradient)."""
    axes = (0,) + tuple(range(2, np.ndim(g)))
    if _size(g.shape) == 0:
        return xp.constant(0, (channels,))
    return np.reshape(xp.sum(g, axis=axes), (channels,))


def _bias(b, rank):
    return np.reshape(b, (1, -1) + (1,) * (rank - 2))


# ----- attribute checks shared by convolution and pooling -------------------------------------
def _axes_problem(a, spatial):
    """The pooled axes must be axes of the shape: a proof attribute (the spec's pooled axes
    are indices below the rank), which decode decides."""
    k = len(a.kernel)
    if k > spatial:
        return (f"kernel has {k} entries, more than the {spatial} spatial axes of shape "
                f"{list(a.shape)}")
    return None


def _pooled_axes(a):
    """pool's and smoothMaxPool's proofs: the trailing len(kernel) axes exist.  The window
    itself (one entry per pooled axis, positive extents and strides...) is Op.check's, which
    decode does not run."""
    return _axes_problem(a, len(a.shape))


def _window_problem(a, spatial, names):
    k = len(a.kernel)
    if k == 0:
        return "kernel must have one entry per pooled axis (got [])"
    if k > spatial:
        return _axes_problem(a, spatial)
    for name in names:
        if len(a[name]) != k:
            return (f"{name} must have one entry per pooled axis (kernel has {k}, got "
                    f"{list(a[name])})")
    for name in ("kernel", "stride", "dilation"):
        if name in a and any(v == 0 for v in a[name]):
            return f"{name} must be > 0 on every pooled axis (got {list(a[name])})"
    return None


# ----- conv ------------------------------------------------------------------------------------
def _conv_geometry(a):
    spatial = a.shape[2:]
    padded = tuple(n + 2 * p for n, p in zip(spatial, a.padding))
    out = tuple((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in
                zip(padded, a.kernel, a.stride, a.dilation))
    return spatial, padded, out


def _conv_check(a):
    if len(a.shape) < 3:
        return f"shape must be (batch, channels, spatial...) of rank >= 3 (got {list(a.shape)})"
    problem = _window_problem(a, len(a.shape) - 2, ("stride", "padding", "dilation"))
    if problem:
        return problem
    if len(a.kernel) != len(a.shape) - 2:
        return (f"kernel must have one entry per spatial axis ({len(a.shape) - 2}, got "
                f"{list(a.kernel)})")
    if a.groups == 0 or a.shape[1] % a.groups or a.out_channels % a.groups:
        return (f"groups must divide the input channels {a.shape[1]} and out_channels "
                f"{a.out_channels} (got {a.groups})")
    _, padded, _ = _conv_geometry(a)
    if any(n < d * (k - 1) + 1 for n, k, d in zip(padded, a.kernel, a.dilation)):
        return (f"the dilated kernel must fit the padded input (padded {list(padded)}, kernel "
                f"{list(a.kernel)}, dilation {list(a.dilation)})")
    return None


def _conv_ports(a):
    weight = (a.out_channels, a.shape[1] // max(a.groups, 1)) + tuple(a.kernel)
    out = (a.shape[0], a.out_channels) + _conv_geometry(a)[2]
    return ({"x": value(a.shape), "weight": value(weight), "bias": value((a.out_channels,))},
            {"y": value(out)})


def _conv_parts(xp, a, x, w):
    """(z, wg, idx, valid, padded): the zero-padded input as (N,G,Ci,L), the grouped weight
    (G,Co,Ci,K) and the window indices."""
    spatial, padded, out = _conv_geometry(a)
    n, c, g = a.shape[0], a.shape[1], a.groups
    buf = xp.constant(0, (n, c) + padded)
    buf[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in
                                           zip(a.padding, spatial))] = x
    z = buf.reshape(n, g, c // g, -1)
    wg = np.reshape(w, (g, a.out_channels // g, c // g, -1))
    idx, valid = windows(padded, out, a.kernel, a.stride, a.dilation, (0,) * len(padded))
    return z, wg, idx, valid, padded


def _conv_core(xp, a, x, w):
    z, wg, idx, _, _ = _conv_parts(xp, a, x, w)
    out = gather_dot(xp, z, wg, idx)
    return np.reshape(out, (a.shape[0], a.out_channels) + _conv_geometry(a)[2])


def _conv_backward(xp, a, xs, ys, gs, needs):
    x, w, _ = xs
    z, wg, idx, valid, padded = _conv_parts(xp, a, x, w)
    n, c, g = a.shape[0], a.shape[1], a.groups
    v = np.reshape(gs[0], (n, g, a.out_channels // g, -1))
    gx = gw = gb = None
    if needs[0]:
        full = scatter_dot(xp, v, wg, idx, valid, _size(padded)).reshape((n, c) + padded)
        gx = full[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in
                                                     zip(a.padding, a.shape[2:]))]
    if needs[1]:
        gw = np.reshape(weight_dot(xp, v, z, idx), np.shape(w))
    if needs[2]:
        gb = _channel_sum(xp, gs[0], a.out_channels)
    return gx, gw, gb


def _conv_oracle(ctx, a, x, w, b):
    spatial, _, out = _conv_geometry(a)
    cg, og = a.shape[1] // a.groups, a.out_channels // a.groups
    res = []
    for n in range(a.shape[0]):
        for co in range(a.out_channels):
            grp = co // og
            for o in np.ndindex(*out):
                terms = [b[co]]
                for ci in range(cg):
                    for k in np.ndindex(*a.kernel):
                        q = tuple(oa * s + ka * d - p for oa, ka, s, d, p in
                                  zip(o, k, a.stride, a.dilation, a.padding))
                        if all(0 <= qa < m for qa, m in zip(q, spatial)):
                            terms.append(w[(co, ci) + k] * x[(n, grp * cg + ci) + q])
                res.append(ctx.fsum(terms))
    return (mp_array(res, (a.shape[0], a.out_channels) + out),)


_CONV_ATTRS = (A.shape(default=(1, 2, 4), max_rank=4, max_extent=3,
                       doc="(batch, channels, spatial...) of x"),
               A.nat("out_channels", default=2, gen=(0, 3), doc="output channels"),
               A.nats("kernel", default=(2,), max_len=2, max_value=3,
                      doc="kernel extent per spatial axis"),
               A.nats("stride", default=(1,), max_len=2, max_value=3, doc="per spatial axis"),
               A.nats("padding", default=(0,), max_len=2, max_value=2,
                      doc="zeros added at both ends of each spatial axis"),
               A.nats("dilation", default=(1,), max_len=2, max_value=2,
                      doc="spacing of the kernel taps"),
               A.nat("groups", default=1, gen=(0, 2), doc="channel groups"))

define(
    "conv", "conv_pool",
    attributes=_CONV_ATTRS,
    ports=_conv_ports,
    forward=lambda xp, a, x, w, b: xp.add(_conv_core(xp, a, x, w), _bias(b, len(a.shape))),
    backward=_conv_backward,
    jvp=lambda xp, a, xs, ys, ts: xp.add(
        xp.add(_conv_core(xp, a, ts[0], xs[1]), _conv_core(xp, a, xs[0], ts[1])),
        _bias(ts[2], len(a.shape))),
    check=_conv_check,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=_conv_oracle,
    examples={"": {}, "strided": {"shape": (2, 1, 5), "kernel": (3,), "stride": (2,),
                                  "padding": (1,), "dilation": (1,)},
              "2d-groups": {"shape": (1, 2, 3, 3), "out_channels": 2, "kernel": (2, 2),
                            "stride": (1, 2), "padding": (1, 0), "dilation": (1, 1),
                            "groups": 2},
              "dilated": {"shape": (1, 1, 5), "out_channels": 1, "kernel": (2,),
                          "dilation": (2,), "padding": (1,)}},
    notes=("conv(x, weight, bias): PyTorch's convolution (cross-correlation) over the "
           "trailing spatial axes: x (N, C, S...), weight (C_out, C/groups, K...), bias "
           "(C_out); zero padding at both ends; output extent floor((S + 2p - d(k-1) - 1)/s) "
           "+ 1.",
           "Each output is one dot product (window entries times weights, channel-major, "
           "kernel row-major) in the policy order, then one rounded addition of the bias.",
           "Gradients: the input gradient gathers, for each input position, the products of "
           "the window entries that read it (one dot product, zero-padded), the weight "
           "gradient one dot product over batch and windows, the bias gradient a sum."),
    bad_attributes=(({"kernel": (0,)}, "conv: kernel must be > 0 on every pooled axis (got [0])"),
                    ({"stride": (1, 1)}, "conv: stride must have one entry per pooled axis"),
                    ({"groups": 3}, "conv: groups must divide"),
                    ({"kernel": (6,)}, "conv: the dilated kernel must fit the padded input"),
                    ({"shape": (1, 2)}, "conv: shape must be (batch, channels, spatial...)"),
                    ({"shape": (1, 2, 3, 3)}, "conv: kernel must have one entry per spatial"),
                    ({"kernel": (1, 1, 1)}, "conv: kernel has 3 entries, more than the 1"),
                    ({"kernel": ()}, "conv: kernel must have one entry per pooled axis"),
                    ({"stride": (0,)}, "conv: stride must be > 0")),
    certificates=("prepared",),
)


# ----- convTranspose ---------------------------------------------------------------------------
def _ct_geometry(a):
    inner = a.shape[2:]
    out = tuple((n - 1) * s - 2 * p + d * (k - 1) + q + 1 for n, s, p, d, k, q in
                zip(inner, a.stride, a.padding, a.dilation, a.kernel, a.output_padding))
    full = tuple(o + 2 * p for o, p in zip(out, a.padding))
    return inner, out, full


def _ct_check(a):
    if len(a.shape) < 3:
        return f"shape must be (batch, channels, spatial...) of rank >= 3 (got {list(a.shape)})"
    problem = _window_problem(a, len(a.shape) - 2,
                              ("stride", "padding", "dilation", "output_padding"))
    if problem:
        return problem
    if len(a.kernel) != len(a.shape) - 2:
        return (f"kernel must have one entry per spatial axis ({len(a.shape) - 2}, got "
                f"{list(a.kernel)})")
    if a.groups == 0 or a.shape[1] % a.groups or a.out_channels % a.groups:
        return (f"groups must divide the input channels {a.shape[1]} and out_channels "
                f"{a.out_channels} (got {a.groups})")
    if any(q >= max(s, d) for q, s, d in zip(a.output_padding, a.stride, a.dilation)):
        return (f"output_padding must be smaller than stride or dilation (got "
                f"{list(a.output_padding)})")
    _, out, _ = _ct_geometry(a)
    if any(o < 1 for o in out):
        return f"the output extents must be positive (got {list(out)})"
    return None


def _ct_ports(a):
    _, out, _ = _ct_geometry(a)
    weight = (a.shape[1], a.out_channels // max(a.groups, 1)) + tuple(a.kernel)
    return ({"x": value(a.shape), "weight": value(weight), "bias": value((a.out_channels,))},
            {"y": value((a.shape[0], a.out_channels) + out)})


def _ct_parts(a, x, w):
    inner, out, full = _ct_geometry(a)
    n, c, g = a.shape[0], a.shape[1], a.groups
    xg = np.reshape(x, (n, g, c // g, -1))
    wg = np.reshape(w, (g, c // g, a.out_channels // g, -1))
    idx, valid = windows(full, inner, a.kernel, a.stride, a.dilation, (0,) * len(full))
    crop = (slice(None), slice(None)) + tuple(slice(p, p + o) for p, o in zip(a.padding, out))
    return xg, wg, idx, valid, full, crop


def _ct_core(xp, a, x, w):
    xg, wg, idx, valid, full, crop = _ct_parts(a, x, w)
    y = scatter_dot(xp, xg, wg, idx, valid, _size(full))
    return np.reshape(y, (a.shape[0], a.out_channels) + full)[crop]


def _ct_backward(xp, a, xs, ys, gs, needs):
    x, w, _ = xs
    xg, wg, idx, valid, full, crop = _ct_parts(a, x, w)
    n, g = a.shape[0], a.groups
    gfull = xp.constant(0, (n, a.out_channels) + full)
    gfull[crop] = gs[0]
    z = gfull.reshape(n, g, a.out_channels // g, -1)
    gx = np.reshape(gather_dot(xp, z, wg, idx), a.shape) if needs[0] else None
    gw = np.reshape(weight_dot(xp, xg, z, idx), np.shape(w)) if needs[1] else None
    gb = _channel_sum(xp, gs[0], a.out_channels) if needs[2] else None
    return gx, gw, gb


def _ct_oracle(ctx, a, x, w, b):
    inner, out, _ = _ct_geometry(a)
    cg, og = a.shape[1] // a.groups, a.out_channels // a.groups
    terms = {}
    for n in range(a.shape[0]):
        for ci in range(a.shape[1]):
            grp = ci // cg
            for i in np.ndindex(*inner):
                for j in range(og):
                    for k in np.ndindex(*a.kernel):
                        q = tuple(ia * s + ka * d - p for ia, ka, s, d, p in
                                  zip(i, k, a.stride, a.dilation, a.padding))
                        if all(0 <= qa < m for qa, m in zip(q, out)):
                            key = (n, grp * og + j) + q
                            terms.setdefault(key, []).append(x[(n, ci) + i] * w[(ci, j) + k])
    res = [ctx.fsum(terms.get((n, co) + o, []) + [b[co]]) for n in range(a.shape[0])
           for co in range(a.out_channels) for o in np.ndindex(*out)]
    return (mp_array(res, (a.shape[0], a.out_channels) + out),)


define(
    "convTranspose", "conv_pool",
    attributes=_CONV_ATTRS[:6] + (
        A.nats("output_padding", default=(0,), max_len=2, max_value=2,
               doc="extra extent at the high end of each spatial axis"),
        _CONV_ATTRS[6]),
    ports=_ct_ports,
    forward=lambda xp, a, x, w, b: xp.add(_ct_core(xp, a, x, w), _bias(b, len(a.shape))),
    backward=_ct_backward,
    jvp=lambda xp, a, xs, ys, ts: xp.add(
        xp.add(_ct_core(xp, a, ts[0], xs[1]), _ct_core(xp, a, xs[0], ts[1])),
        _bias(ts[2], len(a.shape))),
    check=_ct_check,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=_ct_oracle,
    examples={"": {}, "strided": {"shape": (1, 2, 3), "kernel": (3,), "stride": (2,),
                                  "padding": (1,), "output_padding": (1,)},
              "2d-groups": {"shape": (1, 2, 2, 2), "out_channels": 2, "kernel": (2, 2),
                            "stride": (2, 1), "padding": (0, 0), "dilation": (1, 2),
                            "output_padding": (0, 1), "groups": 2}},
    notes=("convTranspose(x, weight, bias): PyTorch's transposed convolution, the adjoint of "
           "conv in its input: x (N, C, S...), weight (C, C_out/groups, K...), bias (C_out); "
           "output extent (S - 1)s - 2p + d(k-1) + output_padding + 1, padding cropping both "
           "ends.",
           "Each output is one dot product over the (input position, kernel tap, channel) "
           "triples that reach it, zero-padded to a common count, in the policy order; then "
           "one rounded addition of the bias.",
           "output_padding must be smaller than stride or dilation (PyTorch's rule)."),
    bad_attributes=(({"kernel": (0,)}, "convTranspose: kernel must be > 0 on every pooled axis"),
                    ({"output_padding": (1,)},
                     "convTranspose: output_padding must be smaller than stride or dilation"),
                    ({"output_padding": ()},
                     "convTranspose: output_padding must have one entry per pooled axis"),
                    ({"groups": 0}, "convTranspose: groups must divide"),
                    ({"shape": (1, 2, 1), "kernel": (1,), "padding": (1,)},
                     "convTranspose: the output extents must be positive"),
                    ({"shape": (2,)}, "convTranspose: shape must be (batch, channels"),
                    ({"shape": (1, 2, 3, 3)},
                     "convTranspose: kernel must have one entry per spatial axis")),
    certificates=("prepared",),
)


# ----- pool ------------------------------------------------------------------------------------
def pool_extents(a):
    """PyTorch's output extent per pooled axis: floor or ceil((L + 2p - d(k-1) - 1)/s) + 1,
    less one in ceil mode when the last window would start in the right padding."""
    dims = a.shape[len(a.shape) - len(a.kernel):]
    out = []
    for n, k, s, p, d in zip(dims, a.kernel, a.stride, a.padding, a.dilation):
        span = n + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if a.ceil_mode else span // s) + 1
        if a.ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        out.append(o)
    return tuple(dims), tuple(out)


def _pool_geometry(a):
    dims, out = pool_extents(a)
    idx, valid = windows(dims, out, a.kernel, a.stride, a.dilation, a.padding)
    return dims, out, idx, valid


def _pool_check(a):
    problem = _window_problem(a, len(a.shape), ("stride", "padding", "dilation"))
    if problem:
        return problem
    if any(2 * p > k for p, k in zip(a.padding, a.kernel)):
        return (f"padding must be at most half the kernel on every pooled axis (got padding "
                f"{list(a.padding)}, kernel {list(a.kernel)})")
    if a.mode == "average" and any(d != 1 for d in a.dilation):
        return f"average pooling takes no dilation (dilation must be 1, got {list(a.dilation)})"
    dims = a.shape[len(a.shape) - len(a.kernel):]
    if any(n + 2 * p < d * (k - 1) + 1 for n, k, p, d in
           zip(dims, a.kernel, a.padding, a.dilation)):
        return (f"the dilated kernel must fit the padded input (got shape {list(a.shape)}, "
                f"kernel {list(a.kernel)})")
    _, out, idx, valid = _pool_geometry(a)
    if _size(out) and _size(a.kernel) and not valid.any(axis=1).all():
        return "every window must hold an input entry (a window lies in the padding only)"
    return None


def _pool_out(a):
    return a.shape[:len(a.shape) - len(a.kernel)] + pool_extents(a)[1]


def _flat(x, a):
    lead = a.shape[:len(a.shape) - len(a.kernel)]
    return np.reshape(x, (_size(lead), _size(a.shape[len(lead):])))


def pool_divisors(a):
    """The average pool's divisor per window (Python ints): the window clipped to the padded
    input (count_include_pad) or to the input."""
    dims, out = pool_extents(a)
    res = []
    for o in _grid(out):
        total = 1
        for oa, n, k, s, p in zip(o, dims, a.kernel, a.stride, a.padding):
            start = oa * s - p
            end = min(start + k, n + p)
            if not a.count_include_pad:
                start, end = max(start, 0), min(end, n)
            total *= end - start
        res.append(total)
    return res


def _divisor_array(xp, a):
    """The divisors as backend numbers, one per window (each an integer rounded once)."""
    divs = pool_divisors(a)
    return np.concatenate([xp.constant(d, (1,)) for d in divs]) if divs else xp.constant(0, (0,))


def scatter_sum(xp, c, idx, valid, size):
    """out[b, p] = sum of c[b, o, k] over the (o, k) with idx[o, k] = p and valid: the
    adjoint of a window gather, one backend sum per position (exact zeros padding)."""
    b, o, k = c.shape
    if b * size == 0:
        return xp.constant(0, (b, size))
    io, ik = inverse(idx, valid, size)
    flat = io * k + ik                   # the sentinel (o, k) lands on o * k + k: past the end
    slots = o * k + k + 1
    padded = np.concatenate([np.reshape(c, (b, o * k)), xp.constant(0, (b, slots - o * k))],
                            axis=-1)
    return xp.sum(padded[:, flat], axis=-1)


def _max_parts(xp, a, x, y):
    """The windows of x, where each attains its maximum (NaN entries for a NaN maximum) and
    the number of such entries (a backend sum of ones: exact for these window sizes)."""
    _, _, idx, valid = _pool_geometry(a)
    patches = _flat(x, a)[:, idx]
    yb = np.reshape(y, patches.shape[:2])[..., None]
    mask = (xp.equal(patches, yb) | (xp.isnan(patches) & xp.isnan(yb))) & valid
    ones = xp.where(mask, xp.ones_like(patches), xp.zeros_like(patches))
    return patches, mask, xp.sum(ones, axis=-1), idx, valid


def _pool_forward(xp, a, x):
    out = _pool_out(a)
    _, ext, idx, valid = _pool_geometry(a)
    xf = _flat(x, a)
    if xf.shape[0] * _size(ext) == 0:
        return xp.constant(0, out)
    if a.mode == "max":
        # Outside entries repeat the window's first inside one: max ignores repeats.
        return np.reshape(xp.max(xf[:, idx], axis=-1), out)
    patches = _zeros_last(xp, xf)[:, idx + (~valid) * (xf.shape[1] - idx)]
    return np.reshape(xp.divide(xp.sum(patches, axis=-1), _divisor_array(xp, a)), out)


def _pool_linear(xp, a, x, y, v, transpose):
    if _size(_pool_out(a)) == 0:
        return xp.zeros_like(x) if transpose else xp.constant(0, _pool_out(a))
    if a.mode == "average":
        if not transpose:
            return _pool_forward(xp, a, v)
        _, _, idx, valid = _pool_geometry(a)
        share = xp.divide(np.reshape(v, (-1, idx.shape[0])), _divisor_array(xp, a))
        c = xp.where(valid, share[..., None], xp.constant(0, share.shape + (idx.shape[1],)))
        return np.reshape(scatter_sum(xp, c, idx, valid, _flat(x, a).shape[1]), a.shape)
    patches, mask, count, idx, valid = _max_parts(xp, a, x, y)
    zero = xp.zeros_like(patches)
    if not transpose:
        tp = _flat(v, a)[:, idx]
        return np.reshape(xp.divide(xp.sum(xp.where(mask, tp, zero), axis=-1), count),
                          _pool_out(a))
    share = xp.divide(np.reshape(v, count.shape), count)[..., None]
    c = xp.where(mask, share, zero)
    return np.reshape(scatter_sum(xp, c, idx, valid, _flat(x, a).shape[1]), a.shape)


def _pool_oracle(ctx, a, x):
    dims, out = pool_extents(a)
    xf, divs, res = _flat(x, a), pool_divisors(a), []
    for row in xf:
        xr = np.reshape(row, dims)
        for j, o in enumerate(_grid(out)):
            vals = []
            for k in np.ndindex(*a.kernel):
                q = tuple(oa * s + ka * d - p for oa, ka, s, d, p in
                          zip(o, k, a.stride, a.dilation, a.padding))
                if all(0 <= qa < n for qa, n in zip(q, dims)):
                    vals.append(xr[q])
            if a.mode == "average":
                res.append(ctx.fsum(vals) / divs[j])
            elif any(ctx.isnan(v) for v in vals):
                res.append(ctx.nan)
            else:
                res.append(max(vals))
    return (mp_array(res, _pool_out(a)),)


def _pool_kinks(op, x):
    """Ordinary max-pool samples keep the maximum of every window unique."""
    a = op.attrs
    if a.mode != "max" or x.size == 0 or _size(_pool_out(a)) == 0:
        return False
    _, _, idx, valid = _pool_geometry(a)
    patches = np.where(valid, _flat(x, a)[:, idx], -np.inf)
    top = np.sort(patches, axis=-1)
    return bool(top.shape[-1] > 1 and np.any(top[..., -1] - top[..., -2] < 2.0 ** -20))


define(
    "pool", "conv_pool",
    attributes=(A.shape(default=(1, 2, 5), max_rank=4, max_extent=5,
                        doc="the operand; the trailing len(kernel) axes are pooled"),
                A.choice("mode", ("max", "average"), doc="max or average pooling"),
                A.nats("kernel", default=(2,), max_len=2, max_value=3,
                       doc="window extent per pooled axis"),
                A.nats("stride", default=(2,), max_len=2, max_value=3, doc="per pooled axis"),
                A.nats("padding", default=(0,), max_len=2, max_value=2,
                       doc="implicit padding at both ends (at most half the kernel)"),
                A.nats("dilation", default=(1,), max_len=2, max_value=2,
                       doc="spacing of the window taps (max pooling only)"),
                A.flag("ceil_mode", doc="ceil instead of floor in the output extent"),
                A.flag("count_include_pad", default=True,
                       doc="average: the divisor counts padding entries")),
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(_pool_out(a))}),
    forward=_pool_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _pool_linear(xp, a, xs[0], ys[0], gs[0], True),),
    jvp=lambda xp, a, xs, ys, ts: _pool_linear(xp, a, xs[0], ys[0], ts[0], False),
    check=_pool_check,
    proofs=_pooled_axes,
    samples={"ordinary": uniform_sampler(-2, 2, kinks=_pool_kinks),
             "edges": pick_sampler((-1.0, 0.0, 1.0)),
             "special": uniform_sampler(-2, 2, share=0.3)},
    oracle=_pool_oracle,
    examples={"": {}, "average": {"mode": "average"},
              "ceil-pad": {"shape": (1, 1, 5), "kernel": (2,), "stride": (2,),
                           "padding": (1,), "ceil_mode": True},
              "average-ceil": {"mode": "average", "shape": (1, 1, 6), "kernel": (3,),
                               "stride": (2,), "padding": (1,), "ceil_mode": True,
                               "count_include_pad": False},
              "2d-dilated": {"shape": (1, 4, 4), "kernel": (2, 2), "stride": (1, 2),
                             "padding": (1, 0), "dilation": (2, 1)}},
    notes=("pool over the trailing len(kernel) axes (PyTorch's max_pool / avg_pool): output "
           "extent floor((L + 2p - d(k-1) - 1)/s) + 1, with ceil in ceil_mode, less one when "
           "the last window would start in the right padding.  Padding is implicit (never "
           "a value): max ignores it; average divides by the window clipped to the padded "
           "input (count_include_pad) or to the input.",
           "max propagates NaN (IEEE maximum).  Gradient of max: the cotangent is split "
           "equally among the entries of the window that attain the maximum (the spec's tie "
           "rule; PyTorch gives it all to one index); a NaN maximum shares it among the NaN "
           "entries.",
           "average: the window's sum in the policy order, one division by the integer "
           "divisor; no dilation.",
           "The window check: one entry per pooled axis in kernel, stride, padding and "
           "dilation, positive kernel extents, strides and dilations, padding at most half "
           "the kernel, every window holding an input entry."),
    bad_attributes=(({"kernel": (0,)}, "pool: kernel must be > 0 on every pooled axis (got [0])"),
                    ({"stride": (0,)}, "pool: stride must be > 0 on every pooled axis"),
                    ({"stride": (1, 1)}, "pool: stride must have one entry per pooled axis"),
                    ({"kernel": ()}, "pool: kernel must have one entry per pooled axis"),
                    ({"kernel": (2, 2, 2, 2), "stride": (1,) * 4, "padding": (0,) * 4,
                      "dilation": (1,) * 4}, "pool: kernel has 4 entries, more than"),
                    ({"padding": (2,)}, "pool: padding must be at most half the kernel"),
                    ({"mode": "average", "dilation": (2,)},
                     "pool: average pooling takes no dilation"),
                    ({"shape": (1, 1), "kernel": (3,), "padding": (0,)},
                     "pool: the dilated kernel must fit the padded input"),
                    ({"shape": (1, 1, 1), "kernel": (2,), "stride": (1,), "padding": (1,),
                      "dilation": (2,)}, "pool: every window must hold an input entry")),
    certificates=("prepared",
                  convention(f"{TESTS}::test_max_pool_splits_ties_equally",
                             "a window maximum attained by k entries gives each 1/k of the "
                             "cotangent; a NaN maximum shares it among the NaN entries")),
)


# ----- smoothMaxPool ---------------------------------------------------------------------------
def _smooth_check(a):
    problem = _window_problem(a, len(a.shape), ("stride",))
    if problem:
        return problem
    dims = a.shape[len(a.shape) - len(a.kernel):]
    if any(n < k for n, k in zip(dims, a.kernel)):
        return f"the kernel must fit the input (got shape {list(a.shape)}, kernel {list(a.kernel)})"
    return None


def _smooth_geometry(a):
    dims = a.shape[len(a.shape) - len(a.kernel):]
    out = tuple((n - k) // s + 1 for n, k, s in zip(dims, a.kernel, a.stride))
    idx, valid = windows(dims, out, a.kernel, a.stride, (1,) * len(dims), (0,) * len(dims))
    return out, idx, valid


def _smooth_out(a):
    return a.shape[:len(a.shape) - len(a.kernel)] + _smooth_geometry(a)[0]


def _smooth_forward(xp, a, x, beta):
    """(M + log sum exp(beta x - M)) / beta per window, M the window's max of beta x (no
    overflow); the weights exp(beta x - M) / sum are the derivative, kept for the rules."""
    _, idx, _ = _smooth_geometry(a)
    xf = _flat(x, a)
    if xf.shape[0] * idx.shape[0] == 0:
        return saving(xp.constant(0, _smooth_out(a)), weights=None)
    z = xp.multiply(xf[:, idx], beta)
    m = xp.max(z, axis=-1)
    e = xp.exp(xp.subtract(z, m[..., None]))
    s = xp.sum(e, axis=-1)
    y = xp.divide(xp.add(m, xp.log(s)), beta)
    return saving(np.reshape(y, _smooth_out(a)), weights=xp.divide(e, s[..., None]))


def _smooth_linear(xp, a, x, ys, v, transpose):
    weights = ys.saved["weights"]
    if weights is None:
        return xp.zeros_like(x) if transpose else xp.constant(0, _smooth_out(a))
    _, idx, valid = _smooth_geometry(a)
    if transpose:
        c = xp.multiply(weights, np.reshape(v, weights.shape[:2])[..., None])
        return np.reshape(scatter_sum(xp, c, idx, valid, _flat(x, a).shape[1]), a.shape)
    return np.reshape(xp.sum(xp.multiply(weights, _flat(v, a)[:, idx]), axis=-1),
                      _smooth_out(a))


def _smooth_validate(xp, a, x, beta):
    if not xp.isfinite(beta) or xp.equal(beta, xp.zeros_like(beta)):
        return f"beta must be finite and nonzero (got {shown(xp, beta)})"
    return None


def _smooth_oracle(ctx, a, x, beta):
    b = beta[()]
    _, idx, _ = _smooth_geometry(a)
    res = [ctx.log(ctx.fsum(ctx.exp(b * v) for v in row[idx[o]])) / b
           for row in _flat(x, a) for o in range(idx.shape[0])]
    return (mp_array(res, _smooth_out(a)),)


def _beta_draw(rng, fmt, port):
    return rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 4.0)


define(
    "smoothMaxPool", "conv_pool",
    attributes=(A.shape(default=(1, 2, 4), max_rank=4, max_extent=5,
                        doc="the operand; the trailing len(kernel) axes are pooled"),
                A.nats("kernel", default=(2,), max_len=2, max_value=3,
                       doc="window extent per pooled axis"),
                A.nats("stride", default=(1,), max_len=2, max_value=3, doc="per pooled axis")),
    ports=lambda a: ({"x": value(a.shape), "beta": frozen()}, {"y": value(_smooth_out(a))}),
    forward=_smooth_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _smooth_linear(xp, a, xs[0], ys, gs[0], True), None),
    jvp=lambda xp, a, xs, ys, ts: _smooth_linear(xp, a, xs[0], ys, ts[0], False),
    check=_smooth_check,
    proofs=_pooled_axes,
    validate=_smooth_validate,
    samples={"ordinary": uniform_sampler(-2, 2, fixed={"beta": _beta_draw}),
             "edges": uniform_sampler(-2, 2, fixed={"beta": constant_draw(30.0, 60.0)})},
    oracle=_smooth_oracle,
    examples={"": {}, "2d": {"shape": (1, 3, 3), "kernel": (2, 2), "stride": (1, 1)}},
    notes=("smoothMaxPool(x, beta) = (1/beta) log sum over the window of exp(beta x): the "
           "log-sum-exp smooth maximum (a smooth minimum for beta < 0), windows without "
           "padding or dilation over the trailing len(kernel) axes; beta is a frozen scalar.",
           "Computed as (M + log sum exp(beta x - M)) / beta with M the window's maximum of "
           "beta x, so exp never overflows; the sum in the policy order.",
           "validate rejects a zero or nonfinite beta (the spec's rule).",
           "Gradient: the softmax weights of beta x in each window times the cotangent, "
           "summed over the windows that read an entry."),
    bad_attributes=(({"kernel": (0,)},
                     "smoothMaxPool: kernel must be > 0 on every pooled axis (got [0])"),
                    ({"stride": (1, 1)},
                     "smoothMaxPool: stride must have one entry per pooled axis"),
                    ({"kernel": (5,)}, "smoothMaxPool: the kernel must fit the input")),
    bad_inputs=(({}, (np.zeros((1, 2, 4)), 0.0),
                 "smoothMaxPool: beta must be finite and nonzero (got 0)"),
                ({}, (np.zeros((1, 2, 4)), np.inf),
                 "smoothMaxPool: beta must be finite and nonzero (got inf)"),
                ({}, (np.zeros((1, 2, 4)), np.nan),
                 "smoothMaxPool: beta must be finite and nonzero (got nan)")),
    certificates=("prepared",),
)

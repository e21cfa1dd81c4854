"""Convolution (spec: "Convolution and pooling"): conv and convTranspose over the trailing
spatial axes of (batch, channels, spatial...) operands, PyTorch's layouts, and the window
checks pooling shares (pool.py holds pool and smoothMaxPool).

Windows are explicit gathers (index arrays built from the geometry by routes/windows.py:
data movement); every sum is a backend reduction (``xp.dot`` over the window of each output,
``xp.sum`` for average pooling and for the adjoint scatters), so the accumulation policy
applies.  An adjoint scatter (the input gradient of conv, the forward of convTranspose)
gathers, for each input position, the window entries that touch it, padded with exact zeros
to a common count: under the pairwise order those zeros take part in the tree.
"""

from __future__ import annotations

import math

import numpy as np

from .. import attributes as A
from ..helpers import bilinear_tangent
from ..ports import value
from ..registry import define
from ..windows import inside, inverse, scatter_classes, windows
from .reduction import mp_array, uniform_sampler

TESTS = "tests/routes/test_routes_conv_pool.py"


def zeros_last(xp, a):
    """``a`` with one exact zero appended along its last axis (the sentinel slot)."""
    return np.concatenate([a, xp.constant(0, a.shape[:-1] + (1,))], axis=-1)


# Gathered cotangents per dot call of an adjoint scatter at most: a node's working memory
# stays within a few times 2**21 numbers (and the operands the exact products split)
# whatever the image size.
CHUNK = 1 << 21


def size_of(shape):
    return math.prod(shape)


# ----- the three contractions of a grouped convolution ----------------------------------------
def gather_dot(xp, z, w, idx):
    """out[n,g,co,o] = sum over ci, k of w[g,co,ci,k] * z[n,g,ci,idx[o,k]]: z (N,G,Ci,L),
    w (G,Co,Ci,K) -> (N,G,Co,O), one dot product per output."""
    n, g, ci, _ = z.shape
    co, k, o = w.shape[1], w.shape[3], idx.shape[0]
    if ci * k == 0 or size_of((n, g, co, o)) == 0:
        return xp.constant(0, (n, g, co, o))
    p = np.transpose(z[..., idx], (0, 1, 3, 2, 4)).reshape(n, g, 1, o, ci * k)
    return xp.dot(p, np.reshape(w, (1, g, co, 1, ci * k)))


def scatter_dot(xp, v, w, idx, valid, size, keep=None):
    """The adjoint of gather_dot in z: out[n,g,ci,p] = sum over co and the (o, k) with
    idx[o,k] = p of v[n,g,co,o] * w[g,co,ci,k]: v (N,G,Co,O), w (G,Co,Ci,K) -> (N,G,Ci,size),
    or only the positions ``keep`` (flat indices, in their order; the caller's crop).
    Each position's dot product runs over co, then its (o, k) pairs in window order padded
    with exact zeros to M (windows.inverse).  Positions whose pairs use the same offsets in
    the same slots (every interior position of a stride-1 convolution; one class per border
    pattern and stride phase) share their weights: each such class is a matrix product,
    the gathered cotangents against one copy of the weights, the same terms in the same
    order (windows.scatter_classes), in pieces of at most CHUNK gathered cotangents.  A
    backend whose dot is exact (xp.exact_dot) gets one class over all K offsets instead,
    zeros where an offset reaches no window; one whose draws follow its calls (stochastic
    rounding) every position in one call, the crop taken after (_one_call)."""
    n, g, co, _ = v.shape
    ci = w.shape[2]
    keep = np.arange(size) if keep is None else keep
    if size_of((n, g, ci, len(keep))) == 0 or co == 0:
        return xp.constant(0, (n, g, ci, len(keep)))
    if xp.draws_follow_calls:
        return _one_call(xp, v, w, idx, valid, size)[..., keep]
    classes, back = scatter_classes(idx, valid, size, keep, by_offset=xp.exact_dot)
    vz = np.reshape(zeros_last(xp, v), (n, g, -1))          # (N,G,Co*(O+1)), zero slots
    wt = np.transpose(zeros_last(xp, w), (0, 2, 1, 3)).copy()   # (G,Ci,Co,K+1)
    parts = []
    for c in classes:
        b = np.reshape(np.take(wt, c.pattern, axis=-1), (1, g, ci, 1, -1))
        step = max(1, CHUNK // (n * g * b.shape[-1]))
        for lo in range(0, len(c), step):
            a = np.take(vz, c.columns(lo, lo + step, co), axis=-1)     # (N,G,P,Co*M)
            parts.append(xp.dot(np.reshape(a, (n, g, 1) + a.shape[2:]), b))   # (N,G,Ci,P)
    out = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)
    return out[..., back]


def _one_call(xp, v, w, idx, valid, size):
    """scatter_dot of every position in one dot call, each with its own copy of the
    weights (the classes' separate calls would draw other random numbers)."""
    n, g, co, _ = v.shape
    io, ik = inverse(idx, valid, size)
    m = io.shape[1]
    a = np.transpose(zeros_last(xp, v)[..., io], (0, 1, 3, 2, 4)).reshape(n, g, 1, size, co * m)
    b = np.transpose(zeros_last(xp, w)[..., ik], (0, 2, 3, 1, 4)).reshape(1, g, -1, size, co * m)
    return xp.dot(a, b)


def weight_dot(xp, v, z, idx):
    """The adjoint of gather_dot in w: out[g,co,ci,k] = sum over n, o of v[n,g,co,o] *
    z[n,g,ci,idx[o,k]]: v (N,G,Co,O), z (N,G,Ci,L) -> (G,Co,Ci,K)."""
    n, g, co, o = v.shape
    ci, k = z.shape[2], idx.shape[1]
    if n * o == 0 or size_of((g, co, ci, k)) == 0:
        return xp.constant(0, (g, co, ci, k))
    p = np.transpose(z[..., idx], (1, 2, 4, 0, 3)).reshape(g, 1, ci, k, n * o)
    q = np.transpose(v, (1, 2, 0, 3)).reshape(g, co, 1, 1, n * o)
    return xp.dot(p, q)


def _channel_sum(xp, g, channels):
    """sum of g over every axis but 1 (the bias gradient)."""
    axes = (0,) + tuple(range(2, np.ndim(g)))
    if size_of(g.shape) == 0:
        return xp.constant(0, (channels,))
    return np.reshape(xp.sum(g, axis=axes), (channels,))


def _bias(b, rank):
    return np.reshape(b, (1, -1) + (1,) * (rank - 2))


def _biased(core):
    """The forward and tangent rules of y = core(x, w) + b (conv, convTranspose): core is
    bilinear in (x, w), b enters linearly."""
    return dict(
        forward=lambda xp, a, x, w, b: xp.add(core(xp, a, x, w), _bias(b, len(a.shape))),
        jvp=lambda xp, a, xs, ys, ts: xp.add(
            bilinear_tangent(core, xp, a, xs[0], xs[1], ts[0], ts[1]),
            _bias(ts[2], len(a.shape))))


# ----- attribute checks shared by convolution and pooling -------------------------------------
def _axes_problem(a, spatial):
    """The pooled axes must be axes of the shape: a proof attribute (the spec's pooled axes
    are indices below the rank), which decode decides."""
    k = len(a.kernel)
    if k > spatial:
        return (f"kernel has {k} entries, more than the {spatial} spatial axes of shape "
                f"{list(a.shape)}")
    return None


def pooled_axes(a):
    """pool's and smoothMaxPool's proofs: the trailing len(kernel) axes exist.  The window
    itself (one entry per pooled axis, positive extents and strides...) is Op.check's, which
    decode does not run."""
    return _axes_problem(a, len(a.shape))


def window_problem(a, spatial, names):
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


def _channels_problem(a, windows):
    """What conv and convTranspose both require: the rank, the ``windows`` attributes, one
    kernel entry per spatial axis, groups dividing both channel counts; None when all hold."""
    if len(a.shape) < 3:
        return f"shape must be (batch, channels, spatial...) of rank >= 3 (got {list(a.shape)})"
    problem = window_problem(a, len(a.shape) - 2, windows)
    if problem:
        return problem
    if len(a.kernel) != len(a.shape) - 2:
        return (f"kernel must have one entry per spatial axis ({len(a.shape) - 2}, got "
                f"{list(a.kernel)})")
    if a.groups == 0 or a.shape[1] % a.groups or a.out_channels % a.groups:
        return (f"groups must divide the input channels {a.shape[1]} and out_channels "
                f"{a.out_channels} (got {a.groups})")
    return None


def _conv_check(a):
    problem = _channels_problem(a, ("stride", "padding", "dilation"))
    if problem:
        return problem
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
    n, g = a.shape[0], a.groups
    v = np.reshape(gs[0], (n, g, a.out_channels // g, -1))
    gx = gw = gb = None
    if needs[0]:
        inner = inside(padded, a.padding, a.shape[2:])
        gx = scatter_dot(xp, v, wg, idx, valid, size_of(padded), inner).reshape(a.shape)
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

def _channels(a, rank):
    """The channel axis (x [N, C, S...], conv's weight [C_out, C/groups, K...]: axis 1),
    counted from the end; the last axis below rank 2."""
    return 1 - rank if rank >= 2 else -1


define(
    "conv", "conv_pool",
    attributes=_CONV_ATTRS,
    ports=_conv_ports,
    **_biased(_conv_core),
    backward=_conv_backward,
    check=_conv_check,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=_conv_oracle,
    # Each output sums x's input channels times weight's (C/groups per group).
    products={"x": _channels, "weight": _channels},
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
    problem = _channels_problem(a, ("stride", "padding", "dilation", "output_padding"))
    if problem:
        return problem
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
    xg, wg, idx, valid, full, _ = _ct_parts(a, x, w)
    out = _ct_geometry(a)[1]
    y = scatter_dot(xp, xg, wg, idx, valid, size_of(full), inside(full, a.padding, out))
    return np.reshape(y, (a.shape[0], a.out_channels) + out)


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
    **_biased(_ct_core),
    backward=_ct_backward,
    check=_ct_check,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=_ct_oracle,
    # The transpose of conv: it sums x's channels times weight's first axis [C, ...].
    products={"x": _channels, "weight": lambda a, rank: -rank},
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

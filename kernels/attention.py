"""Attention kernels: attentionFromScores and multiheadAttention, forward and gradient, as
launches of the row softmax (kernels.rows), the sequential matmul (kernels.products) and
one row kernel for softmax's pullback, in the order of routes/families/softmax_attention.py.

attentionFromScores (``_from_scores``): w = softmax(s) along the keys (max shift, exp, a
sequential sum, one division per entry: kernels.rows), out = w @ v (each product rounded,
folded in sequential key order: kernels.products).  Gradient: t = g @ v^T,
gs = w * (t - sum(t * w)) (``_softmax_lin``: the products t_j w_j rounded and summed
sequentially, then each difference and product rounded), gv = w^T @ g.

multiheadAttention (``_mha``, ``_attend``): the last axis of q, k and v splits into heads and
the heads move before the queries (``_heads``: data movement, on the host); per (batch, head)
scores = (q @ k^T) * scale (the sequential dot product rounded, then one rounded product
with the frozen scale: the matmul kernel's scaled form), w = softmax(scores), out = w @ v,
and the heads merge back (data movement).  Gradient (``_attend_vjp``):
gs = _softmax_lin(w, g @ v^T) * scale, gq = gs @ k, gk = gs^T @ q, gv = w^T @ g.

Empty extents (the spec's CUDA column says "yes" at every attribute): the kernels serve
every attribute the operator's check accepts (key_count > 0, heads > 0).  On the host, a
launch over no output element launches nothing (``Context.launch``), and an empty
contraction (head_dim 0 in the scores, value_dim 0 in the gradient's g @ v^T, no queries in
w^T @ g and gs^T @ q) is the empty sum +0 without a launch, times the scale where the rule
scales (0 * scale is exact in every format: +-0, or NaN at an infinite or NaN scale).  So
an empty batch or query axis gives empty outputs, and the weights of an empty score row are
softmax's of zeros, computed by the row kernel as usual.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from .base import FEW, Instance, Kernel
from .contract import TRACED, Contract
from .products import make_matmul
from .rows import make_softmax


def make_softmax_lin(P: dict):
    """softmax_lin(w[R, m], t[R, m], out[R, m], scaled, scale, rp): routes' _softmax_lin
    w * (t - sum(t * w)) per row, the sum sequential; then times ``scale`` (rounded) when
    ``scaled`` (multiheadAttention's gs)."""
    add, sub, mul = P["add"], P["subtract"], P["multiply"]

    @cuda.jit
    def softmax_lin(w, t, out, scaled, scale, rp):
        r = cuda.grid(1)
        if r < w.shape[0]:
            m = w.shape[1]
            s = mul(t[r, 0], w[r, 0], rp)
            for j in range(1, m):
                s = add(s, mul(t[r, j], w[r, j], rp), rp)
            for j in range(m):
                v = mul(w[r, j], sub(t[r, j], s, rp), rp)
                out[r, j] = mul(v, scale, rp) if scaled == 1 else v
    return softmax_lin


# ----- host: launches on stacks of matrices (B, rows, columns) ---------------------------------
def _c(a):
    return np.ascontiguousarray(a, dtype=np.float64)


def _t(a):
    """The last two axes swapped (data movement)."""
    return np.swapaxes(a, -1, -2)


def _mm(ctx, x, y, scale=None):
    """x @ y for stacks x[B, n, k], y[B, k, m], times ``scale`` when given; at k = 0 the
    empty sum +0 (times the scale, exactly) without a launch."""
    out = np.empty((x.shape[0], x.shape[1], y.shape[2]))
    if x.shape[2] == 0:
        zeros = np.zeros(out.shape)
        return zeros if scale is None else ctx.round(zeros * scale)
    kern = ctx.compile("matmul", lambda: make_matmul(ctx.P))
    ctx.launch(kern, out.size, _c(x), _c(y), out, 0 if scale is None else 1,
               1.0 if scale is None else scale, ctx.rp)
    return out


def _weights(ctx, s):
    """softmax of a stack s[B, n, m] along its last axis."""
    rows = _c(s).reshape(-1, s.shape[-1])
    out = np.empty_like(rows)
    kern = ctx.compile("softmax", lambda: make_softmax(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, out, 0, ctx.rp)
    return out.reshape(s.shape)


def _lin(ctx, w, t, scale=None):
    """_softmax_lin(w, t) of stacks along the last axis, times ``scale`` when given."""
    wr, tr = _c(w).reshape(-1, w.shape[-1]), _c(t).reshape(-1, t.shape[-1])
    out = np.empty_like(wr)
    kern = ctx.compile("softmax_lin", lambda: make_softmax_lin(ctx.P))
    ctx.launch(kern, wr.shape[0], wr, tr, out, 0 if scale is None else 1,
               1.0 if scale is None else scale, ctx.rp)
    return out.reshape(w.shape)


def _stack(a):
    """[..., n, k] as a stack [B, n, k] (B counted, not inferred: an empty array has no -1)."""
    a = np.asarray(a)
    return a.reshape((int(np.prod(a.shape[:-2], dtype=np.int64)),) + a.shape[-2:])


def _split(a, h):
    """[..., n, h * d] -> [..., h, n, d] (the rule's _heads)."""
    a = np.asarray(a)
    return np.moveaxis(a.reshape(a.shape[:-1] + (h, a.shape[-1] // h)), -2, -3)


def _join(a):
    """[..., h, n, d] -> [..., n, h * d] (the rule's _merge)."""
    a = np.moveaxis(np.asarray(a), -3, -2)
    return a.reshape(a.shape[:-2] + (a.shape[-2] * a.shape[-1],))


def launch_from_scores(o, xs, cotangents, route, ctx):
    s, v = xs
    sb, vb = _stack(s), _stack(v)
    w = _weights(ctx, sb)
    if route == "forward":
        return (_mm(ctx, w, vb).reshape(o.outputs[0].shape),)
    gb = _stack(ctx.cotangents(o, cotangents)[0])
    gs = _lin(ctx, w, _mm(ctx, gb, _t(vb)))
    gv = _mm(ctx, _t(w), gb)
    return gs.reshape(np.shape(s)), gv.reshape(np.shape(v))


def launch_multihead(o, xs, cotangents, route, ctx):
    q, k, v, scale = xs
    h, scale = o.attrs.heads, float(scale)
    qh, kh, vh = (_split(a, h) for a in (q, k, v))
    qb, kb, vb = _stack(qh), _stack(kh), _stack(vh)
    w = _weights(ctx, _mm(ctx, qb, _t(kb), scale))
    if route == "forward":
        return (_join(_mm(ctx, w, vb).reshape(qh.shape[:-1] + vh.shape[-1:])),)
    g = _split(ctx.cotangents(o, cotangents)[0], h)
    gb = _stack(g)
    gs = _lin(ctx, w, _mm(ctx, gb, _t(vb)), scale)
    grads = (_mm(ctx, gs, kb), _mm(ctx, _t(gs), qb), _mm(ctx, _t(w), gb))
    return tuple(_join(gr.reshape(a.shape)) for gr, a in zip(grads, (qh, kh, vh))) + (None,)


# Test instances (kernels.base.Instance): the defaults in every sample kind, a batched or
# single-head layout, and every empty extent.
def _empty(label, **attrs):
    """An empty extent: empty outputs, or the empty sum +0 where a contraction is empty
    (numerics.emulated's reductions refuse empty operands: the cases run, and
    tests/kernels/test_kernels_attention_empty.py checks their values against a model of its own)."""
    return Instance(attrs, label, formats=FEW, kinds=("ordinary",), emulated=False)


KERNELS = (
    Kernel("attentionFromScores", "attention", Contract(TRACED, TRACED, None),
           launch_from_scores,
           tests=(Instance({}), Instance("batch2", kinds=("ordinary",)),
                  _empty("queries0", queries=0), _empty("value_dim0", value_dim=0),
                  _empty("batch2x0", batch=(2, 0)))),
    Kernel("multiheadAttention", "attention", Contract(TRACED, TRACED, None),
           launch_multihead,
           tests=(Instance({}), Instance("heads1-dim2", kinds=("ordinary",)),
                  _empty("queries0", queries=0), _empty("head_dim0", head_dim=0),
                  _empty("value_head_dim0", value_head_dim=0), _empty("batch0", batch=(0,)))),
)

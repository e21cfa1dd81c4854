"""The torch table's structured operators (kernels/torch_calls.py describes the table,
kernels/torch_table.py holds its records): scans and orderings, indexing, data movement,
reductions and products, convolution and pooling, normalization, softmax and attention,
losses.  Imported by kernels/torch_calls.py, after the elementwise entries."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np

from .torch_table import (DIFFERS, Convention, add_exact, as_number, fraction_of, object_array,
                          register, scaled_exact)

# ----- scans and orderings ---------------------------------------------------------------------

register("cumsum", lambda t, a, x: t.cumsum(x, a.axis))
register("cumprod", lambda t, a, x: t.cumprod(x, a.axis))
register("cummax", lambda t, a, x: tuple(t.cummax(x, a.axis)))
register("cummin", lambda t, a, x: tuple(t.cummin(x, a.axis)))
register("sort", lambda t, a, x: tuple(t.sort(x, dim=a.axis, descending=a.descending,
                                              stable=True)))
register("topk", lambda t, a, x: tuple(t.topk(x, a.k, dim=a.axis, largest=a.largest,
                                              sorted=True)))
register("argmax", lambda t, a, x: t.argmax(x, dim=a.axis, keepdim=a.keepdim))
register("argmin", lambda t, a, x: t.argmin(x, dim=a.axis, keepdim=a.keepdim))

# ----- indexing --------------------------------------------------------------------------------

def _layout(t, a, x, idx):
    """(perm, nb, nk, table (nb, nk, nr), flat targets (nb, ni)): gather and scatter's
    layout (routes/families/indexing.py) in torch: batch axes, indexed axes, the rest."""
    rank = len(a.shape)
    rest = [d for d in range(a.batch, rank) if d not in a.axes]
    perm = list(range(a.batch)) + list(a.axes) + rest
    nb = math.prod(a.shape[:a.batch])
    bounds = [a.shape[d] for d in a.axes]
    nk, nr = math.prod(bounds), math.prod(a.shape[d] for d in rest)
    ni = math.prod(a.index_shape)
    comps = idx.reshape(nb, ni, len(a.axes))
    flat = t.zeros((nb, ni), dtype=t.int64)
    for j, bound in enumerate(bounds):
        flat = flat * bound + comps[..., j]
    return perm, nb, nk, nr, x.permute(perm).reshape(nb, nk, nr), flat


def _gather(t, a, x, idx):
    _, nb, _, nr, table, flat = _layout(t, a, x, idx)
    out = table[t.arange(nb)[:, None], flat]            # advanced indexing: aten::index
    rest = [a.shape[d] for d in range(a.batch, len(a.shape)) if d not in a.axes]
    return out.reshape(tuple(a.shape[:a.batch]) + tuple(a.index_shape) + tuple(rest))


_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin"}


def _scatter(t, a, x, idx, up):
    perm, nb, nk, nr, table, flat = _layout(t, a, x, idx)
    lin = (flat + t.arange(nb)[:, None] * nk).reshape(-1, 1).expand(-1, nr)
    src = up.reshape(-1, nr)
    flat_table = table.reshape(nb * nk, nr)
    if a.mode == "replace":
        out = flat_table.scatter(0, lin, src)
    else:
        out = flat_table.scatter_reduce(0, lin, src, _REDUCE[a.mode], include_self=True)
    moved = tuple(a.shape[d] for d in perm)
    inverse = [perm.index(d) for d in range(len(perm))]
    return out.reshape(moved).permute(inverse)


def _scatter_replace_grad(t, a, xs, vs):
    """replace with a repeated target: torch's scatter gives every update of that target its
    cotangent (the rule: the last update only)."""
    if a.mode != "replace" or a.element != "scalar":
        return None
    x, idx, up = xs
    g = np.asarray(vs[0], np.float64)
    rank = len(a.shape)
    rest = [d for d in range(a.batch, rank) if d not in a.axes]
    perm = list(range(a.batch)) + list(a.axes) + rest
    nb = math.prod(a.shape[:a.batch])
    bounds = [a.shape[d] for d in a.axes]
    nk, nr, ni = math.prod(bounds), math.prod(a.shape[d] for d in rest), math.prod(a.index_shape)
    comps = np.asarray(idx, np.int64).reshape(nb, ni, len(a.axes))
    flat = np.zeros((nb, ni), np.int64)
    for j, bound in enumerate(bounds):
        flat = flat * bound + comps[..., j]
    if all(len(set(row)) == len(row) for row in flat.tolist()):
        return None
    gt = np.transpose(g, perm).reshape(nb, nk, nr)
    gu = object_array((nb, ni, nr))
    for b in range(nb):
        for i in range(ni):
            gu[b, i] = [fraction_of(v) for v in gt[b, flat[b, i]]]
    return (None, None, gu.reshape(np.shape(up)))


register("gather", _gather)
register("scatter", _scatter,
         conventions=(Convention("gradient", "scatter replace with a repeated target: torch "
                                 "gives every update of the target its cotangent (the rule: the "
                                 "last update only)", _scatter_replace_grad),))


def _indices(t, a):
    if len(a.shape) == 1:
        return t.arange(a.shape[0], dtype=t.int64)
    grids = t.meshgrid(*[t.arange(n, dtype=t.int64) for n in a.shape], indexing="ij")
    return t.stack(grids, dim=-1)


register("indices", lambda t, a: _indices(t, a), composite=True)
register("indexAt", lambda t, a, x, at: t.index_select(x, a.axis, at.reshape(1)).squeeze(a.axis))
register("slice", lambda t, a, x: x[(slice(None),) * a.axis + (slice(a.start, a.stop, a.step),)])
register("embedding", lambda t, a, w, ids: t.nn.functional.embedding(ids, w))

# ----- data movement ---------------------------------------------------------------------------

def _pad(t, a, x):
    pads = []
    for b, e in zip(reversed(a.before), reversed(a.after)):
        pads += [b, e]
    return t.nn.functional.pad(x, pads, mode="constant", value=0)


register("reshape", lambda t, a, x: x.reshape(a.to))
register("permute", lambda t, a, x: x.permute(a.perm))
register("broadcast", lambda t, a, x: t.broadcast_to(x, a.to))
register("flip", lambda t, a, x: t.flip(x, a.axes))
register("pad", _pad)
register("cat", lambda t, a, *xs: t.cat(xs, dim=a.axis))

# ----- reductions and products ------------------------------------------------------------------

def _reduce(t, a, x):
    axes = list(a.axes)
    if a.op == "sum":
        return t.sum(x, dim=axes, keepdim=a.keepdim)
    if a.op == "max":
        return t.amax(x, dim=axes, keepdim=a.keepdim)
    if a.op == "min":
        return t.amin(x, dim=axes, keepdim=a.keepdim)
    # torch.prod takes one axis: the reduced axes moved last and flattened into one.
    keep = [d for d in range(x.dim()) if d not in axes]
    moved = x.permute(keep + axes).reshape([x.shape[d] for d in keep] + [-1])
    y = t.prod(moved, dim=-1)
    if a.keepdim:
        y = y.reshape([1 if d in axes else x.shape[d] for d in range(x.dim())])
    return y


register("reduce", _reduce)
register("mean", lambda t, a, x: t.mean(x, dim=list(a.axes), keepdim=a.keepdim))
register("contract", lambda t, a, x, y: t.tensordot(x, y, dims=(list(a.x_axes), list(a.y_axes))))
register("matmul", lambda t, a, x, y: t.matmul(x, y))
register("scaledMatmul", lambda t, a, x, y, s: t.matmul(x, y) * s, composite=True)
register("linear", lambda t, a, w, b, x: t.nn.functional.linear(x, w, b))

# ----- convolution and pooling -----------------------------------------------------------------

def _nd(a):
    return len(a.kernel)


def _conv(t, a, x, w, b):
    f = getattr(t.nn.functional, f"conv{_nd(a)}d")
    return f(x, w, b, stride=a.stride, padding=a.padding, dilation=a.dilation, groups=a.groups)


def _conv_t(t, a, x, w, b):
    f = getattr(t.nn.functional, f"conv_transpose{_nd(a)}d")
    return f(x, w, b, stride=a.stride, padding=a.padding, output_padding=a.output_padding,
             groups=a.groups, dilation=a.dilation)


def _pooled(a, x):
    """x as (N, 1, spatial...) for torch's pooling (leading axes flattened), and the shape to
    return to."""
    n = _nd(a)
    lead = tuple(a.shape[:len(a.shape) - n])
    return x.reshape((math.prod(lead), 1) + tuple(a.shape[len(a.shape) - n:])), lead


def _pool(t, a, x, with_indices=False):
    F = t.nn.functional
    xx, lead = _pooled(a, x)
    if a.mode == "max":
        y, idx = getattr(F, f"max_pool{_nd(a)}d")(
            xx, a.kernel, a.stride, a.padding, a.dilation, ceil_mode=a.ceil_mode,
            return_indices=True)
        if with_indices:
            return y.reshape(lead + tuple(y.shape[2:])), idx.reshape(lead + tuple(y.shape[2:]))
    else:
        y = getattr(F, f"avg_pool{_nd(a)}d")(xx, a.kernel, a.stride, a.padding,
                                             ceil_mode=a.ceil_mode,
                                             count_include_pad=a.count_include_pad)
    return y.reshape(lead + tuple(y.shape[2:]))


def _pool_refuses(a):
    if _nd(a) > 3:
        return f"torch pools over 1 to 3 axes (got {_nd(a)})"
    return None


def _pool_tie(route):
    """max pooling with a tie in a window (equal maxima, or NaN entries): torch gives the
    window's whole cotangent to the one entry its kernel keeps, and takes that entry's
    tangent (the entry read from torch's indices; the rule shares among the entries that
    attain the maximum).  The exact values of that convention: each entry receives the sum
    of the cotangents of the windows that keep it; a tied window's tangent is its kept
    entry's."""
    def exact(t, a, xs, vs):
        if a.mode != "max":
            return None
        x = np.asarray(xs[0], np.float64)
        n = _nd(a)
        rows = math.prod(x.shape[:x.ndim - n])
        spatial = x.shape[x.ndim - n:]
        y, idx = _pool(t, a, t.from_numpy(np.ascontiguousarray(x)), with_indices=True)
        idx = idx.numpy().reshape(rows, -1)
        tied = _tied_windows(a, x.reshape(rows, -1), spatial)
        if not tied.any():
            return None
        if route == "tangent":
            tx = np.asarray(vs[0], np.float64).reshape(rows, -1)
            out = object_array(idx.shape)
            for r, w in zip(*np.nonzero(tied)):
                out[r, w] = fraction_of(tx[r, idx[r, w]])
            return (out.reshape(tuple(y.shape)),)
        g = np.asarray(vs[0], np.float64).reshape(rows, -1)
        out = np.empty((rows, math.prod(spatial)), dtype=object)
        out[...] = Fraction(0)
        for r in range(rows):
            for w in range(idx.shape[1]):
                out[r, idx[r, w]] = add_exact(out[r, idx[r, w]], g[r, w])
        return (out.reshape(x.shape),)
    return exact


def _tied_windows(a, rows, spatial):
    """(rows, windows) Booleans: the windows that hold their maximum twice or a NaN (the
    windows recomputed from the pooling geometry, PyTorch's output-size rule)."""
    n = len(spatial)
    outs = []
    for L, k, s, p, d in zip(spatial, a.kernel, a.stride, a.padding, a.dilation):
        span = L + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if a.ceil_mode else span // s) + 1
        if a.ceil_mode and (o - 1) * s >= L + p:
            o -= 1
        outs.append(o)
    tied = np.zeros((rows.shape[0], math.prod(outs)), bool)
    for r in range(rows.shape[0]):
        vals = rows[r].reshape(spatial)
        for w, pos in enumerate(np.ndindex(*outs)):
            entries = []
            for tap in np.ndindex(*a.kernel):
                at = [pos[j] * a.stride[j] - a.padding[j] + tap[j] * a.dilation[j]
                      for j in range(n)]
                if all(0 <= at[j] < spatial[j] for j in range(n)):
                    entries.append(vals[tuple(at)])
            entries = np.asarray(entries)
            tied[r, w] = bool(np.isnan(entries).any() or (entries == entries.max()).sum() > 1)
    return tied


register("conv", _conv, refuses=lambda a: None if _nd(a) <= 3 else
         f"torch convolves over 1 to 3 axes (got {_nd(a)})")
register("convTranspose", _conv_t, refuses=lambda a: None if _nd(a) <= 3 else
         f"torch convolves over 1 to 3 axes (got {_nd(a)})")
register("pool", _pool, refuses=_pool_refuses,
         conventions=(Convention("gradient", "max pooling at a tie (equal maxima or NaN): torch "
                                 "gives the window's cotangent to the one entry its kernel keeps; "
                                 "the rule shares it among the entries at the maximum",
                                 _pool_tie("gradient")),
                      Convention("tangent", "max pooling at a tie (equal maxima or NaN): torch "
                                 "takes the tangent of the one entry its kernel keeps; the rule "
                                 "averages the entries at the maximum", _pool_tie("tangent"))))

# ----- normalization ---------------------------------------------------------------------------

register("layerNorm", lambda t, a, x, w, b, eps: t.nn.functional.layer_norm(
    x, (a.shape[-1],), w, b, eps=as_number(eps)))


def _batch_stats_refuse(a):
    per_channel = math.prod(a.shape) // a.shape[1] if len(a.shape) > 1 and a.shape[1] else 0
    if len(a.shape) < 2:
        return "torch's batch_norm needs (batch, channels, ...) operands"
    if per_channel <= 1:
        return ("torch's batch_norm in training refuses one value per channel (\"Expected "
                "more than 1 value per channel when training\")")
    return None


register("batchNorm", lambda t, a, x, w, b, eps: t.nn.functional.batch_norm(
    x, None, None, w, b, training=True, eps=as_number(eps)), refuses=_batch_stats_refuse)


def _bn_running(t, a, x, w, b, rm, rv, eps):
    moved = x.movedim(a.axis, 0).unsqueeze(0)            # (1, C, rest...)
    y = t.nn.functional.batch_norm(moved, rm, rv, w, b, training=False, eps=as_number(eps))
    return y.squeeze(0).movedim(0, a.axis)


register("batchNormRunning", _bn_running)

# ----- softmax and attention ---------------------------------------------------------------------

def _masked_nan(route):
    """maskedSoftmax where the slice's softmax is NaN in torch: torch's masked_fill(~mask,
    -inf) then softmax gives NaN over a slice with no kept entry (the rule: 0) and at the
    masked entries of a slice whose kept entries hold a NaN or +inf (the rule: exactly 0
    at masked entries); tangents likewise (its gradient there is 0, as the rule's:
    masked_fill's pullback zeroes the masked entries)."""
    def exact(t, a, xs, vs):
        x, mask = np.asarray(xs[0], np.float64), np.asarray(xs[1], bool)
        empty = ~mask.any(axis=a.axis, keepdims=True)
        poisoned = (mask & (np.isnan(x) | (x == np.inf))).any(axis=a.axis, keepdims=True)
        at = np.broadcast_to(empty | poisoned, x.shape) & (~mask | np.broadcast_to(empty,
                                                                                   x.shape))
        if not at.any():
            return None
        out = object_array(x.shape)
        out[at] = math.nan
        return (out,)
    return exact


register("softmax", lambda t, a, x: t.softmax(x, dim=a.axis))
register("logSoftmax", lambda t, a, x: t.log_softmax(x, dim=a.axis))
register("maskedSoftmax", lambda t, a, x, m: t.softmax(x.masked_fill(~m, float("-inf")),
                                                       dim=a.axis),
         composite=True,
         conventions=tuple(Convention(r, "maskedSoftmax: torch's masked_fill(-inf) then softmax "
                                         "gives NaN over a slice with no kept entry and at the "
                                         "masked entries of a slice with a kept NaN or +inf (the "
                                         "rule: 0 there)", _masked_nan(r))
                           for r in ("forward", "tangent")))


def _sdpa(t, q, k, v, scale):
    return t.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)


register("attention", lambda t, a, q, k, v, s: _sdpa(t, q, k, v, as_number(s)))
register("attentionFromScores", lambda t, a, s, v: t.matmul(t.softmax(s, dim=-1), v),
         composite=True)


def _mha(t, a, q, k, v, s):
    """Heads split from the last axis, scaled_dot_product_attention per head (torch's
    multi_head_attention_forward between its projections), heads concatenated back."""
    def split(z, d):
        return z.reshape(z.shape[:-1] + (a.heads, d)).transpose(-3, -2)
    out = _sdpa(t, split(q, a.head_dim), split(k, a.head_dim), split(v, a.value_head_dim),
                as_number(s))
    out = out.transpose(-3, -2)
    return out.reshape(out.shape[:-2] + (a.heads * a.value_head_dim,))


register("multiheadAttention", _mha, composite=True)

# ----- losses ------------------------------------------------------------------------------------

def _class_axis(a):
    return 1 if len(a.shape) >= 2 else 0


def _reduced(t, a, per_elem):
    if a.reduction == "mean":
        return per_elem.mean()
    if a.reduction == "sum":
        return per_elem.sum()
    return per_elem


# torch's guard of the BCE gradient: EPSILON = 1e-12, read as a float32 (aten's loss.cpp).
_BCE_EPS = Fraction(float(np.float32(1e-12)))
# The rule clamps each log at -100 (as torch's forward does): below e^-100 they differ.
_E100 = Fraction(math.exp(-100))


def _bce_near(x):
    """(x as Fractions, where x (1 - x) < torch's epsilon)."""
    xq = np.asarray([Fraction(v) if math.isfinite(v) else v for v in x.reshape(-1)],
                    dtype=object).reshape(x.shape)
    near = np.asarray([isinstance(v, Fraction) and v * (1 - v) < _BCE_EPS
                       for v in xq.reshape(-1)], bool).reshape(x.shape)
    return xq, near


def _bce_grad(t, a, xs, vs):
    """binaryCrossEntropy near 0 and 1: torch's gradient at x is g (x - target) /
    max(x (1 - x), eps), eps = float32(1e-12) (over n under mean), where x (1 - x) < eps
    (the rule differentiates the clamped logs); its gradient at target is
    g (log(1 - x) - log(x)) with unclamped logs (+-inf at 0 and 1), where the rule clamps
    them at -100 (x or 1 - x below e^-100; the logs evaluated at 256 bits)."""
    x, tg = (np.asarray(v, np.float64) for v in xs)
    xq, near = _bce_near(x)
    clamped = np.asarray([isinstance(v, Fraction) and 0 <= v <= 1 and
                          (v < _E100 or 1 - v < _E100) for v in xq.reshape(-1)],
                         bool).reshape(x.shape)
    if not (near | clamped).any():
        return None
    g = np.broadcast_to(np.asarray(vs[0], np.float64), x.shape)
    n = x.size if a.reduction == "mean" else 1
    gx, gt = object_array(x.shape), object_array(x.shape)
    ctx = mpmath.MPContext()
    ctx.prec = 256
    for pos in zip(*np.nonzero(near)):
        v = xq[pos]
        gx[pos] = scaled_exact((v - Fraction(tg[pos])) / max(v * (1 - v), _BCE_EPS) / n, g[pos])
    for pos in zip(*np.nonzero(clamped)):
        v = xq[pos]
        if v in (0, 1):
            gt[pos] = (math.inf if v == 0 else -math.inf) * float(g[pos])
        else:
            xv = ctx.mpf(float(x[pos]))
            gt[pos] = (ctx.log1p(-xv) - ctx.log(xv)) * ctx.mpf(float(g[pos])) / n
    return (gx, gt)


def _bce_tangent(t, a, xs, vs):
    """Its tangent there: torch's forward-mode formula (NaN at x = 0 and 1, the guarded
    quotient near them) has no exact value computed here."""
    x = np.asarray(xs[0], np.float64)
    return (DIFFERS,) if _bce_near(x)[1].any() else None


register("mseLoss", lambda t, a, x, y: t.nn.functional.mse_loss(x, y, reduction=a.reduction))
register("maeLoss", lambda t, a, x, y: t.nn.functional.l1_loss(x, y, reduction=a.reduction))
register("huberLoss", lambda t, a, x, y, d: t.nn.functional.huber_loss(
    x, y, reduction=a.reduction, delta=as_number(d)))
register("poissonLoss", lambda t, a, x, y: t.nn.functional.poisson_nll_loss(
    x, y, log_input=True, full=False, reduction=a.reduction))
def _bce_rejects(a, xs):
    target = np.asarray(xs[1], np.float64)
    if ((target >= 0) & (target <= 1)).all():
        return None
    return ("torch's binary_cross_entropy refuses targets outside [0, 1] (\"all elements of "
            "target should be between 0 and 1\"; the rule does not check them)")


register("binaryCrossEntropy", lambda t, a, x, y: t.nn.functional.binary_cross_entropy(
    x, y, reduction=a.reduction), rejects=_bce_rejects,
         conventions=(Convention("gradient", "binaryCrossEntropy near 0 and 1: torch divides by "
                                 "max(x (1 - x), 1e-12) (the rule differentiates the clamped "
                                 "logs), and its target gradient takes the logs unclamped (+-inf "
                                 "at 0 and 1; the rule clamps at -100)", _bce_grad),
                      Convention("tangent", "binaryCrossEntropy within 1e-12 of 0 or 1: torch's "
                                 "forward-mode formula differs (NaN at 0 and 1)", _bce_tangent)))
register("cosineLoss", lambda t, a, x, y, eps: _reduced(
    t, a, 1 - t.nn.functional.cosine_similarity(x, y, dim=a.axis, eps=as_number(eps))),
         composite=True)
register("crossEntropy", lambda t, a, x, y: t.nn.functional.cross_entropy(
    x, y, reduction=a.reduction))
register("crossEntropyProbabilities", lambda t, a, x, y: t.nn.functional.cross_entropy(
    x, y, reduction=a.reduction))


def _distill(t, a, x, teacher, temp):
    F, T = t.nn.functional, as_number(temp)
    ax = _class_axis(a)
    kl = F.kl_div(F.log_softmax(x / T, dim=ax), F.softmax(teacher / T, dim=ax),
                  reduction="none").sum(dim=ax)
    if a.reduction == "mean":
        kl = kl.sum() / (kl.numel() if kl.dim() else 1)
    elif a.reduction == "sum":
        kl = kl.sum()
    return kl * (T * T)


register("distill", _distill, composite=True,
         refuses=lambda a: None if len(a.shape) <= 2 else
         "torch's kl_div batchmean divides by the batch extent, the rule by the slice count")

# ----- masks, spectral, graph --------------------------------------------------------------------

def _dropout_nonfinite(t, a, xs, vs):
    """A dropped NaN or infinite entry: torch's x * mask * (1/(1-p)) gives NaN (the rule's
    select gives +0)."""
    x, mask = np.asarray(xs[0], np.float64), np.asarray(xs[1], np.float64)
    at = (mask == 0) & ~np.isfinite(x)
    if not at.any():
        return None
    out = object_array(x.shape)
    out[at] = math.nan
    return (out,)


register("dropout", lambda t, a, x, mask, p: x * mask * (1.0 / (1.0 - as_number(p))),
         composite=True,
         conventions=(Convention("forward", "dropout of a NaN or infinite entry: torch's "
                                 "x * mask * scale gives NaN (the rule: +0)",
                                 _dropout_nonfinite),))


def _rfft(t, a, x):
    y = t.fft.rfft(x, dim=a.axis)
    return y.real, y.imag


register("rfft", _rfft)
register("irfft", lambda t, a, re, im: t.fft.irfft(t.complex(re, im), n=a.length, dim=a.axis))
register("detach", lambda t, a, x: x.detach())

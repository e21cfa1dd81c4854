"""Softmax and attention (spec: "Softmax and attention"): softmax, logSoftmax and maskedSoftmax
along one axis, scaled dot-product attention, attention from given scores, and multi-head
attention over heads split from the last axis.

Every softmax subtracts the slice's maximum first (xp.max, exact), so large logits never
overflow: softmax([1000, 0]) in binary64 is [1, exp(-1000)] = [1, 0], not NaN.  Sums,
maxima and products go through the backend's reductions (xp.sum, xp.max, xp.matmul), so
the numerics policy (order, accumulation format) applies.  Numbers (the attention scale)
travel at frozen ports.
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import boolean, frozen, value
from ..registry import Float64, define
from ..rules import saving
from ..samples import into, target

TESTS = "tests/routes/test_routes_softmax_attention.py"


# ----- rules ----------------------------------------------------------------------------------
def _softmax(xp, x, axis):
    """exp(x - max) / sum exp(x - max) along ``axis`` (the max shift: no overflow)."""
    z = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
    e = xp.exp(z)
    return xp.divide(e, xp.sum(e, axis=axis, keepdims=True))


def _softmax_lin(xp, y, v, axis):
    """The Jacobian of softmax at output y applied to v (it is symmetric, so this is also
    the pullback): y * (v - sum(v * y))."""
    return xp.multiply(y, xp.subtract(v, xp.sum(xp.multiply(v, y), axis=axis, keepdims=True)))


def log_softmax(xp, x, axis):
    """(x - max) - log(sum exp(x - max)) along ``axis`` (the losses' cross entropies use it
    too)."""
    z = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
    return xp.subtract(z, xp.log(xp.sum(xp.exp(z), axis=axis, keepdims=True)))


def _log_softmax_lin(xp, y, v, axis, transpose):
    """Tangent v - sum(softmax * v); cotangent v - softmax * sum(v); softmax = exp(y)."""
    p = xp.exp(y)
    if transpose:
        return xp.subtract(v, xp.multiply(p, xp.sum(v, axis=axis, keepdims=True)))
    return xp.subtract(v, xp.sum(xp.multiply(p, v), axis=axis, keepdims=True))


def _masked_softmax(xp, x, mask, axis):
    """Softmax over the kept entries (mask True); masked entries are exactly 0, and a slice
    with no kept entry is all 0.  The shift is the max over kept entries: masked entries are
    replaced by the slice's first kept entry (data movement) before xp.max."""
    first = np.expand_dims(mask.argmax(axis=axis), axis)
    filled = xp.where(mask, x, np.take_along_axis(x, first, axis=axis))
    z = xp.subtract(x, xp.max(filled, axis=axis, keepdims=True))
    zero = xp.zeros_like(x)
    e = xp.where(mask, xp.exp(xp.where(mask, z, zero)), zero)
    # A fully masked slice: 0 / 0 is never selected (the where keeps the exact 0).
    s = xp.sum(e, axis=axis, keepdims=True)
    s = xp.where(mask.any(axis=axis, keepdims=True), s, xp.ones_like(s))
    return xp.where(mask, xp.divide(e, s), zero)


def _masked_lin(xp, mask, y, v, axis):
    zero = xp.zeros_like(y)
    return xp.where(mask, _softmax_lin(xp, y, xp.where(mask, v, zero), axis), zero)


def _attend_saving(xp, q, k, v, scale):
    """The output, with the weights kept for the pullback and the tangent map."""
    out, w = _attend(xp, q, k, v, scale)
    return saving(out, weights=w)


def _t(a):
    """The last two axes swapped (data movement)."""
    return np.swapaxes(a, -1, -2)


def _attend(xp, q, k, v, scale):
    """(output, weights): softmax(scale * q k^T) v over the last two axes."""
    w = _softmax(xp, xp.multiply(xp.matmul(q, _t(k)), scale), -1)
    return xp.matmul(w, v), w


def _attend_jvp(xp, q, k, v, scale, w, tq, tk, tv):
    ts = xp.multiply(xp.add(xp.matmul(tq, _t(k)), xp.matmul(q, _t(tk))), scale)
    return xp.add(xp.matmul(_softmax_lin(xp, w, ts, -1), v), xp.matmul(w, tv))


def _attend_vjp(xp, q, k, v, scale, w, g):
    """(gq, gk, gv) of the output cotangent g."""
    gs = xp.multiply(_softmax_lin(xp, w, xp.matmul(g, _t(v)), -1), scale)
    return xp.matmul(gs, k), xp.matmul(_t(gs), q), xp.matmul(_t(w), g)


def _heads(a, h):
    """[..., n, h * d] -> [..., h, n, d] (data movement)."""
    a = np.asarray(a)
    split = a.reshape(a.shape[:-1] + (h, a.shape[-1] // h))
    return np.moveaxis(split, -2, -3)


def _merge(a):
    """[..., h, n, d] -> [..., n, h * d] (data movement)."""
    a = np.moveaxis(np.asarray(a), -3, -2)
    return a.reshape(a.shape[:-2] + (a.shape[-2] * a.shape[-1],))


# ----- samplers and oracles (data, not rules) -------------------------------------------------
def _draw(rng, fmt, shape, kind):
    """Logits of ``kind``: ordinary uniform in [-4, 4]; edges large logits (+-1000, 700, 710,
    -745, capped at the format's largest finite value), with repeats (ties); special zeros,
    infinities and NaN among ordinary values."""
    n = int(np.prod(shape, dtype=np.int64))
    x = rng.uniform(-4, 4, n)
    if kind == "edges":
        top = float(target(fmt).max_finite)
        big = np.clip([1000.0, -1000.0, 700.0, 710.0, -745.0, 0.0, 1.0], -top, top)
        x = np.where(rng.random(n) < 0.7, big[rng.integers(0, len(big), n)], x)
    elif kind == "special":
        vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
        x = np.where(rng.random(n) < 0.4, vals[rng.integers(0, len(vals), n)], x)
    return into(x, fmt).reshape(shape)


def _rows(a, axis):
    """The slices of ``a`` along ``axis`` as rows (an object array, moved to the end)."""
    moved = np.moveaxis(np.asarray(a, dtype=object), axis, -1)
    return moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, 0), moved.shape


def _mp_softmax_row(ctx, row, log=False):
    """softmax (or log softmax) of one row in mpmath, directly from the definition (no
    shift: mpmath does not overflow).  NaN, +inf or an all -inf row give NaN everywhere; a
    -inf entry gives 0 (log: -inf)."""
    if any(ctx.isnan(v) or v == ctx.inf for v in row) or all(v == -ctx.inf for v in row):
        return [ctx.nan] * len(row)
    total = ctx.fsum(ctx.exp(v) for v in row if v != -ctx.inf)
    if log:
        return [v - ctx.log(total) if v != -ctx.inf else -ctx.inf for v in row]
    return [ctx.exp(v) / total if v != -ctx.inf else ctx.zero for v in row]


def _mp_apply(ctx, x, axis, fn):
    rows, shape = _rows(x, axis)
    out = np.array([fn(list(r)) for r in rows] or np.zeros(rows.shape), dtype=object)
    return np.moveaxis(out.reshape(shape), -1, axis)


def _np_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _np_attend(q, k, v, scale):
    return _np_softmax(np.matmul(q, np.swapaxes(k, -1, -2)) * scale, -1) @ v


def _np_mha(a, q, k, v, scale):
    h = a.heads
    return _merge(_np_attend(_heads(q, h), _heads(k, h), _heads(v, h), scale))


def _axis_check(a):
    rank = len(a.shape)
    if a.axis >= rank:
        return f"axis must be < rank {rank} (got {a.axis})"
    if a.shape[a.axis] == 0:
        return f"the extent of axis {a.axis} must be > 0 (got shape {list(a.shape)})"
    return None


def _sampler(kind):
    def sampler(rng, fmt, op):
        return (_draw(rng, fmt, op.attrs.shape, kind),)
    return sampler


_AXIS_ATTRS = (A.shape(default=(3,)),
               A.nat("axis", 0, gen=(0, 3), doc="the axis the softmax normalizes along"))
_AXIS_BAD = (({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
             ({"shape": (2, 0), "axis": 1}, "the extent of axis 1 must be > 0"))
_AXIS_EXAMPLES = {"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1}}
_SHIFT_NOTE = ("The maximum of each slice (xp.max, exact) is subtracted first, so large "
               "logits never overflow: softmax([1000, 0]) = [1, exp(-1000)] in binary64.")

# ----- softmax --------------------------------------------------------------------------------
define(
    "softmax", "softmax_attention",
    attributes=_AXIS_ATTRS,
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: _softmax(xp, x, a.axis),
    backward=lambda xp, a, xs, ys, gs, needs: (_softmax_lin(xp, ys[0], gs[0], a.axis),),
    jvp=lambda xp, a, xs, ys, ts: _softmax_lin(xp, ys[0], ts[0], a.axis),
    check=_axis_check,
    samples={k: _sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, x: (_mp_apply(ctx, x, a.axis, lambda r: _mp_softmax_row(ctx, r)),),
    float64=Float64(lambda a, x: _np_softmax(x, a.axis),
                    lambda a, xs, gs: (_np_softmax(xs[0], a.axis) * (gs[0] - np.sum(
                        gs[0] * _np_softmax(xs[0], a.axis), axis=a.axis, keepdims=True)),)),
    examples=_AXIS_EXAMPLES,
    bad_attributes=_AXIS_BAD,
    notes=("softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), m = max_j x_j along axis.",
           _SHIFT_NOTE,
           "A NaN or +inf in a slice, or a slice of all -inf, gives NaN in the whole slice "
           "(inf - inf); a -inf entry among finite ones gives exactly 0.",
           "Gradient: y * (g - sum(g * y)) from the forward value y (PyTorch's "
           "softmax_backward_data); the same map gives the tangent."),
    certificates=("derivative", "algebraic", "prepared"),
)

# ----- logSoftmax -----------------------------------------------------------------------------
define(
    "logSoftmax", "softmax_attention",
    attributes=_AXIS_ATTRS,
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: log_softmax(xp, x, a.axis),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _log_softmax_lin(xp, ys[0], gs[0], a.axis, True),),
    jvp=lambda xp, a, xs, ys, ts: _log_softmax_lin(xp, ys[0], ts[0], a.axis, False),
    check=_axis_check,
    samples={k: _sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, x: (_mp_apply(ctx, x, a.axis,
                                        lambda r: _mp_softmax_row(ctx, r, log=True)),),
    float64=Float64(
        lambda a, x: (x - np.max(x, axis=a.axis, keepdims=True)) - np.log(np.sum(
            np.exp(x - np.max(x, axis=a.axis, keepdims=True)), axis=a.axis, keepdims=True)),
        ulps=2),
    examples=_AXIS_EXAMPLES,
    bad_attributes=_AXIS_BAD,
    notes=("logSoftmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m)), m = max_j x_j along axis.",
           _SHIFT_NOTE + "  logSoftmax([1000, 0]) = [0, -1000].",
           "A NaN or +inf in a slice, or a slice of all -inf, gives NaN in the whole slice; a "
           "-inf entry among finite ones gives -inf.",
           "Gradient: g - exp(y) * sum(g) from the forward value y (PyTorch's "
           "log_softmax_backward_data: prepare computes the output once); tangent "
           "t - sum(exp(y) * t)."),
    certificates=("derivative", "algebraic", "prepared"),
)


# ----- maskedSoftmax --------------------------------------------------------------------------
def _masked_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        mask = rng.random(shape) < 0.7
        if kind == "edges" and mask.size:           # a fully masked slice now and then
            mask = np.where(rng.random(shape) < 0.5, False, mask)
        return _draw(rng, fmt, shape, kind), mask
    return sampler


def _mp_masked(ctx, a, x, mask):
    rows, shape = _rows(x, a.axis)
    keep, _ = _rows(mask, a.axis)
    out = []
    for r, k in zip(rows, keep):
        kept = [v for v, b in zip(r, k) if b]
        y = iter(_mp_softmax_row(ctx, kept) if kept else [])
        out.append([next(y) if b else ctx.zero for b in k])
    out = np.array(out, dtype=object) if out else np.zeros(rows.shape, dtype=object)
    return (np.moveaxis(out.reshape(shape), -1, a.axis),)


define(
    "maskedSoftmax", "softmax_attention",
    attributes=_AXIS_ATTRS,
    ports=lambda a: ({"x": value(a.shape), "mask": boolean(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x, mask: _masked_softmax(xp, x, mask, a.axis),
    backward=lambda xp, a, xs, ys, gs, needs: (_masked_lin(xp, xs[1], ys[0], gs[0], a.axis),
                                               None),
    jvp=lambda xp, a, xs, ys, ts: _masked_lin(xp, xs[1], ys[0], ts[0], a.axis),
    check=_axis_check,
    samples={k: _masked_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_mp_masked,
    examples=_AXIS_EXAMPLES,
    bad_attributes=_AXIS_BAD,
    notes=("maskedSoftmax(x, mask): softmax over the entries whose mask is True (PyTorch's "
           "masked_fill(~mask, -inf) then softmax); a masked entry's value (NaN, inf) is "
           "never read and its output is exactly 0.",
           "A slice with no kept entry gives all 0 (not NaN, unlike -inf filling).",
           _SHIFT_NOTE + "  The max is taken over the kept entries only.",
           "Gradient: y * (g - sum(g * y)) over the kept entries, exactly 0 at masked ones "
           "(selected, so an infinite cotangent there gives 0); the mask has no gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_masked_softmax_gives_exact_zeros",
                             "masked entries and fully masked slices give exactly 0 in value, "
                             "tangent and gradient")),
)


# ----- attention ------------------------------------------------------------------------------
def _attn_sampler(kind, names):
    """Value inputs ``names`` (logits-like draws of ``kind``), then the frozen scale
    1/sqrt(dim) rounded into the format (PyTorch's default)."""
    def sampler(rng, fmt, op):
        ins = dict(zip(op.input_names, op.inputs))
        xs = tuple(_draw(rng, fmt, ins[n].shape, kind if kind != "edges" else "ordinary")
                   for n in names)
        if "scale" not in ins:
            return xs
        dim = ins["q"].shape[-1] // op.attrs.get("heads", 1)
        scale = 1.0 / np.sqrt(max(dim, 1))
        if kind == "edges":                       # large scores: the softmax shift matters
            scale = float(min(256.0, float(target(fmt).max_finite) / 64))
        return xs + (np.asarray(into(scale, fmt)),)
    return sampler


def _mp_attend(ctx, q, k, v, scale):
    """softmax(scale q k^T) v over the last two axes, in mpmath from the definitions."""
    q, k, v = (np.asarray(t, dtype=object) for t in (q, k, v))
    lead = q.shape[:-2]
    out = np.empty(lead + (q.shape[-2], v.shape[-1]), dtype=object)
    for b in np.ndindex(*lead):
        for i in range(q.shape[-2]):
            s = [scale * ctx.fsum(q[b + (i, c)] * k[b + (j, c)] for c in range(q.shape[-1]))
                 for j in range(k.shape[-2])]
            w = _mp_softmax_row(ctx, s)
            for c in range(v.shape[-1]):
                out[b + (i, c)] = ctx.fsum(w[j] * v[b + (j, c)] for j in range(k.shape[-2]))
    return out


def _attn_dims(doc_value="dim"):
    return (A.shape("batch", default=(), max_rank=2, max_extent=2,
                    doc="leading (batch) axes shared by every operand"),
            A.nat("queries", 2, gen=(0, 3), doc="the number of queries n"),
            A.nat("key_count", 3, gen=(0, 3), doc="the number of keys m (> 0)"))


def _keys_check(a):
    return None if a.key_count > 0 else f"key_count must be > 0 (got {a.key_count})"


# q k^T sums the head dimension (the last axis of q and k); P v sums over the keys (v's
# axis -2).  The probabilities P = softmax(scale q k^T) are formed inside the operator, so
# they are no operand.
_QKV_PRODUCTS = {"q": -1, "k": -1, "v": -2}

_KEYS_BAD = (({"key_count": 0}, "key_count must be > 0 (got 0)"),)

define(
    "attention", "softmax_attention",
    attributes=_attn_dims() + (
        A.nat("dim", 2, gen=(0, 3), doc="the query and key width d"),
        A.nat("value_dim", 2, gen=(0, 3), doc="the value width"),),
    ports=lambda a: ({"q": value(a.batch + (a.queries, a.dim)),
                      "k": value(a.batch + (a.key_count, a.dim)),
                      "v": value(a.batch + (a.key_count, a.value_dim)), "scale": frozen()},
                     {"out": value(a.batch + (a.queries, a.value_dim))}),
    forward=lambda xp, a, q, k, v, scale: _attend_saving(xp, q, k, v, scale),
    backward=lambda xp, a, xs, ys, gs, needs: _attend_vjp(
        xp, *xs, ys.saved["weights"], gs[0]) + (None,),
    jvp=lambda xp, a, xs, ys, ts: _attend_jvp(xp, *xs, ys.saved["weights"], *ts[:3]),
    check=_keys_check,
    samples={k: _attn_sampler(k, ("q", "k", "v")) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, q, k, v, scale: (_mp_attend(ctx, q, k, v, scale[()]),),
    products=_QKV_PRODUCTS,
    float64=Float64(lambda a, q, k, v, scale: _np_attend(q, k, v, scale)),
    examples={"": {}, "batch2": {"batch": (2,), "queries": 1, "key_count": 2, "dim": 2,
                                 "value_dim": 1}},
    bad_attributes=_KEYS_BAD,
    notes=("attention(q, k, v, scale) = softmax(scale * q k^T) v along the keys "
           "(PyTorch's scaled_dot_product_attention without mask or dropout); scale is a "
           "frozen scalar (PyTorch's default 1/sqrt(dim) is the caller's to supply).",
           _SHIFT_NOTE,
           "prepare keeps the weights w = softmax(scale q k^T) for the pullback: gv = w^T g, "
           "gs = w * (g v^T - rowsum(g v^T * w)), gq = scale gs k, gk = scale gs^T q."),
    certificates=("prepared",),
)


# ----- attentionFromScores --------------------------------------------------------------------
def _from_scores(xp, s, v):
    w = _softmax(xp, s, -1)
    return saving(xp.matmul(w, v), weights=w)


def _mp_from_scores(ctx, a, s, v):
    s, v = np.asarray(s, dtype=object), np.asarray(v, dtype=object)
    out = np.empty(a.batch + (a.queries, a.value_dim), dtype=object)
    for b in np.ndindex(*a.batch):
        for i in range(a.queries):
            w = _mp_softmax_row(ctx, list(s[b + (i,)]))
            for c in range(a.value_dim):
                out[b + (i, c)] = ctx.fsum(w[j] * v[b + (j, c)] for j in range(a.key_count))
    return (out,)


define(
    "attentionFromScores", "softmax_attention",
    attributes=_attn_dims() + (A.nat("value_dim", 2, gen=(0, 3), doc="the value width"),),
    ports=lambda a: ({"scores": value(a.batch + (a.queries, a.key_count)),
                      "v": value(a.batch + (a.key_count, a.value_dim))},
                     {"out": value(a.batch + (a.queries, a.value_dim))}),
    forward=lambda xp, a, s, v: _from_scores(xp, s, v),
    backward=lambda xp, a, xs, ys, gs, needs: (
        _softmax_lin(xp, ys.saved["weights"], xp.matmul(gs[0], _t(xs[1])), -1),
        xp.matmul(_t(ys.saved["weights"]), gs[0])),
    jvp=lambda xp, a, xs, ys, ts: xp.add(
        xp.matmul(_softmax_lin(xp, ys.saved["weights"], ts[0], -1), xs[1]),
        xp.matmul(ys.saved["weights"], ts[1])),
    check=_keys_check,
    samples={k: _attn_sampler(k, ("scores", "v")) for k in ("ordinary", "special")}
    | {"edges": lambda rng, fmt, op: (_draw(rng, fmt, op.inputs[0].shape, "edges"),
                                      _draw(rng, fmt, op.inputs[1].shape, "ordinary"))},
    oracle=_mp_from_scores,
    float64=Float64(lambda a, s, v: _np_softmax(s, -1) @ v,
                    lambda a, xs, gs: (
                        _np_softmax(xs[0], -1) * (gs[0] @ xs[1].swapaxes(-1, -2) - np.sum(
                            gs[0] @ xs[1].swapaxes(-1, -2) * _np_softmax(xs[0], -1), axis=-1,
                            keepdims=True)),
                        _np_softmax(xs[0], -1).swapaxes(-1, -2) @ gs[0])),
    examples={"": {}, "batch2": {"batch": (2,), "queries": 1, "key_count": 2, "value_dim": 1}},
    # P v sums over the keys; the scores enter through softmax, not as a factor.
    products={"v": -2},
    bad_attributes=_KEYS_BAD,
    notes=("attentionFromScores(s, v) = softmax(s) v, the softmax along the keys (the last "
           "axis of s).",
           _SHIFT_NOTE,
           "prepare keeps the weights w = softmax(s) (the spec's example of a prepared node): "
           "gs = w * (g v^T - rowsum(g v^T * w)), gv = w^T g."),
    certificates=("prepared",),
)


# ----- multiheadAttention ---------------------------------------------------------------------
def _mha(xp, a, q, k, v, scale):
    h = a.heads
    out, w = _attend(xp, _heads(q, h), _heads(k, h), _heads(v, h), scale)
    return saving(_merge(out), weights=w)


def _mha_vjp(xp, a, xs, ys, gs):
    h = a.heads
    q, k, v, scale = xs
    grads = _attend_vjp(xp, _heads(q, h), _heads(k, h), _heads(v, h), scale,
                        ys.saved["weights"], _heads(gs[0], h))
    return tuple(_merge(g) for g in grads) + (None,)


def _mha_jvp(xp, a, xs, ys, ts):
    h = a.heads
    q, k, v, scale = xs
    return _merge(_attend_jvp(xp, _heads(q, h), _heads(k, h), _heads(v, h), scale,
                              ys.saved["weights"], *(_heads(t, h) for t in ts[:3])))


def _mp_mha(ctx, a, q, k, v, scale):
    h = a.heads
    return (_merge(_mp_attend(ctx, _heads(q, h), _heads(k, h), _heads(v, h), scale[()])),)


def _mha_check(a):
    if a.heads == 0:
        return "heads must be > 0 (got 0)"
    return _keys_check(a)


define(
    "multiheadAttention", "softmax_attention",
    attributes=_attn_dims() + (
        A.nat("heads", 2, gen=(0, 3), doc="the number of heads h (> 0)"),
        A.nat("head_dim", 1, gen=(0, 2), doc="the query and key width of one head"),
        A.nat("value_head_dim", 1, gen=(0, 2), doc="the value width of one head")),
    ports=lambda a: ({"q": value(a.batch + (a.queries, a.heads * a.head_dim)),
                      "k": value(a.batch + (a.key_count, a.heads * a.head_dim)),
                      "v": value(a.batch + (a.key_count, a.heads * a.value_head_dim)),
                      "scale": frozen()},
                     {"out": value(a.batch + (a.queries, a.heads * a.value_head_dim))}),
    forward=lambda xp, a, q, k, v, scale: _mha(xp, a, q, k, v, scale),
    backward=lambda xp, a, xs, ys, gs, needs: _mha_vjp(xp, a, xs, ys, gs),
    jvp=lambda xp, a, xs, ys, ts: _mha_jvp(xp, a, xs, ys, ts),
    check=_mha_check,
    samples={k: _attn_sampler(k, ("q", "k", "v")) for k in ("ordinary", "edges", "special")},
    oracle=_mp_mha,
    products=_QKV_PRODUCTS,
    float64=Float64(_np_mha),
    examples={"": {}, "heads1-dim2": {"heads": 1, "head_dim": 2, "value_head_dim": 2,
                                      "key_count": 2}},
    bad_attributes=_KEYS_BAD + (({"heads": 0}, "heads must be > 0 (got 0)"),),
    notes=("multiheadAttention(q, k, v, scale): the last axis of q and k splits into heads "
           "blocks of head_dim (of v: value_head_dim), head j attends with its own blocks "
           "(softmax(scale q_j k_j^T) v_j) and the head outputs are concatenated in head "
           "order (PyTorch's multi_head_attention_forward between the in- and "
           "out-projections, which are separate linear operators here).",
           "scale is a frozen scalar shared by every head (PyTorch: 1/sqrt(head_dim)).",
           _SHIFT_NOTE,
           "prepare keeps the weights of every head; the pullback is attention's per head."),
    certificates=("prepared",),
)

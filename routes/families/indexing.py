"""Indexing (spec: "Indexing, with gather over any axes and batch dimensions and scatter as a
replacement, sum, product, maximum or minimum"): gather, scatter, indices, indexAt, slice,
embedding.

gather and scatter share one layout.  The operand ``x`` of ``shape`` has ``batch`` leading
batch axes B, the indexed ``axes`` K (distinct, after the batch axes) and the remaining axes
R in order.  The index tensor has shape B + ``index_shape`` and holds tuples over K (one
integer when K is one axis; component j indexes axes[j], in the listed order).  gather
returns B + index_shape + R: ``out[b, i, r] = x[b, K = index[b, i], r]``; scatter folds
``updates`` of that shape into a copy of x at the same places, the updates of a repeated
target folded in the row-major order of the index tensor (the spec's policy for a runtime
scatter).

Index arithmetic is numpy on shapes (data movement); values only move, except where a fold
(scatter's sum, product, maximum, minimum, and every pullback that sums repeated targets)
combines them with the backend's elementwise primitives, sequentially in that order.
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..errors import RouteError
from ..ports import index, value
from ..registry import define
from .scan_order import axis_check, element_jvp, nonempty_axis_check, samplers

TESTS = "tests/routes/test_routes_indexing.py"
_ELEMENT = A.choice("element", W.ELEMENTS, doc="the element sort of the data: the model's "
                    "scalar, Booleans or words (moved without gradients)")
_MODES = ("replace", "sum", "prod", "max", "min")


def _elem(a):
    return a.get("element", "scalar")


def _zeros(xp, a, shape):
    """Zeros of the element sort (backend zeros for the scalar)."""
    if _elem(a) == "scalar":
        return xp.constant(0, shape)
    return np.zeros(shape, dtype=W.dtype(W.element_port(_elem(a), ())) if _elem(a) != "bool"
                    else bool)


# ----- the gather/scatter layout -------------------------------------------------------------
def _rest(a):
    return [d for d in range(a.batch, len(a.shape)) if d not in a.axes]


def _bounds(a):
    return tuple(a.shape[d] for d in a.axes)


def _index_port(a):
    return index(_bounds(a), a.shape[:a.batch] + a.index_shape)


def _gathered_shape(a):
    return a.shape[:a.batch] + a.index_shape + tuple(a.shape[d] for d in _rest(a))


def _layout_check(a):
    rank = len(a.shape)
    if a.batch > rank:
        return f"batch must be <= rank {rank} (got {a.batch})"
    if not a.axes:
        return "axes must name at least one axis (got [])"
    if len(set(a.axes)) != len(a.axes):
        return f"axes must be distinct (got {list(a.axes)})"
    bad = [d for d in a.axes if not a.batch <= d < rank]
    if bad:
        return (f"axes must lie in [batch, rank) = [{a.batch}, {rank}) (got {bad[0]})")
    if any(a.shape[d] == 0 for d in a.axes) and np.prod(a.index_shape, dtype=np.int64) > 0:
        return f"indexed axes must have positive extents (got shape {list(a.shape)})"
    return None


def _count(shape):
    """The number of entries of ``shape`` (a Python int)."""
    n = 1
    for m in shape:
        n *= m
    return n


def _flat(a, idx):
    """(perm, nB, nK, nR, flat targets [nB, nI]) for index tensor ``idx``."""
    perm = list(range(a.batch)) + list(a.axes) + _rest(a)
    nb, nk = _count(a.shape[:a.batch]), _count(_bounds(a))
    nr, ni = _count([a.shape[d] for d in _rest(a)]), _count(a.index_shape)
    comps = np.asarray(idx).astype("int64").reshape(nb, ni, len(a.axes))
    flat = np.zeros((nb, ni), "int64")
    for j, bound in enumerate(_bounds(a)):          # row-major over the indexed axes
        flat = flat * bound + comps[..., j]
    return perm, nb, nk, nr, flat


def _to_table(a, x, perm, nb, nk, nr):
    return np.transpose(x, perm).reshape(nb, nk, nr)


def _from_table(a, t, perm):
    moved = tuple(a.shape[d] for d in perm)
    return np.transpose(np.reshape(t, moved), [perm.index(d) for d in range(len(perm))])


def _gather(a, x, idx):
    perm, nb, nk, nr, flat = _flat(a, idx)
    t = _to_table(a, np.asarray(x), perm, nb, nk, nr)
    return t[np.arange(nb)[:, None], flat, :].reshape(_gathered_shape(a))


def _fold_into(xp, table, flat, ups, combine):
    """table[b, flat[b, i]] = combine(table[b, flat[b, i]], ups[b, i]) in row-major (b, i)
    order; returns a new table."""
    out = table.copy()
    for b in range(flat.shape[0]):
        for i in range(flat.shape[1]):
            k = flat[b, i]
            out[b, k] = combine(out[b, k], ups[b, i])
    return out


def _add_into(xp, like_table, flat, ups):
    """Backend zeros of like_table's shape plus ups summed at their targets (row-major;
    the first contribution replaces the zero)."""
    out = xp.zeros_like(like_table).copy()
    seen = np.zeros(flat.shape[:1] + (out.shape[1],), bool)
    for b in range(flat.shape[0]):
        for i in range(flat.shape[1]):
            k = flat[b, i]
            out[b, k] = xp.add(out[b, k], ups[b, i]) if seen[b, k] else ups[b, i]
            seen[b, k] = True
    return out


def _gather_backward(xp, a, x, idx, g):
    perm, nb, nk, nr, flat = _flat(a, idx)
    ups = np.reshape(g, (nb, flat.shape[1], nr))
    return _from_table(a, _add_into(xp, _to_table(a, x, perm, nb, nk, nr), flat, ups), perm)


_LAYOUT_ATTRS = (A.shape(doc="the shape of the operand x"),
                 A.nats("axes", (0,), doc="the indexed axes of x (after the batch axes)"),
                 A.nat("batch", 0, gen=(0, 2), doc="leading batch axes shared by x and the "
                       "index tensor"),
                 A.shape("index_shape", (4,), max_rank=2, max_extent=3,
                         doc="the shape of the index tensor after its batch axes"))
_LAYOUT_EXAMPLES = {"": {}, "batch": {"shape": (2, 3), "axes": (1,), "batch": 1,
                                      "index_shape": (2,)},
                    "two-axes": {"shape": (2, 3, 2), "axes": (1, 0), "index_shape": (2,)}}
_LAYOUT_BAD = (({"shape": (2, 3), "batch": 3}, "batch must be <= rank 2 (got 3)"),
               ({"axes": ()}, "axes must name at least one axis"),
               ({"shape": (2, 3), "axes": (1, 1)}, "axes must be distinct (got [1, 1])"),
               ({"shape": (2, 3), "batch": 1, "axes": (0,)},
                "axes must lie in [batch, rank) = [1, 2) (got 0)"),
               ({"shape": (0, 2)}, "indexed axes must have positive extents"))


def _gather_oracle(ctx, a, x, idx):
    x, idx = np.asarray(x, dtype=object), np.asarray(idx)
    out = np.empty(_gathered_shape(a), dtype=object)
    nb, ni = a.batch, len(a.index_shape)
    rest = _rest(a)
    for pos in np.ndindex(*out.shape):
        b, i, r = pos[:nb], pos[nb:nb + ni], pos[nb + ni:]
        tup = idx[b + i]
        tup = [int(tup)] if len(a.axes) == 1 else [int(v) for v in tup]
        src = [0] * len(a.shape)
        src[:nb] = b
        for d, v in zip(a.axes, tup):
            src[d] = v
        for d, v in zip(rest, r):
            src[d] = v
        out[pos] = x[tuple(src)]
    return (out,)


define(
    "gather", "indexing",
    attributes=_LAYOUT_ATTRS + (_ELEMENT,),
    ports=lambda a: ({"x": W.element_port(_elem(a), a.shape), "index": _index_port(a)},
                     {"y": W.element_port(_elem(a), _gathered_shape(a))}),
    forward=lambda xp, a, x, idx: _gather(a, x, idx),
    jvp=element_jvp(lambda xp, a, xs, ys, ts: _gather(a, ts[0], xs[1])),
    backward=lambda xp, a, xs, ys, gs, needs: (_gather_backward(xp, a, xs[0], xs[1], gs[0]),
                                               None),
    check=_layout_check,
    samples=samplers(),
    oracle=_gather_oracle,
    examples={**_LAYOUT_EXAMPLES, "int8": {"element": "int8"}, "bool": {"element": "bool"}},
    bad_attributes=_LAYOUT_BAD,
    notes=("gather: y[b, i, r] = x[b, axes = index[b, i], r] (batch axes b, index positions "
           "i, the remaining axes r in order after them).",
           "Gradient: the cotangents of entries that read the same source are summed into "
           "it sequentially in the row-major order of the index tensor; the tangent is "
           "gathered.  element bool / int*: moved as data, no gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_gather_gradient_sums_repeated_indices_in_order",
                             "repeated indices sum their cotangents in row-major order of "
                             "the index tensor")),
)


# ----- scatter ----------------------------------------------------------------------------------
def _scatter_check(a):
    bad = _layout_check(a)
    if bad:
        return bad
    if _elem(a) == "bool" and a.mode != "replace":
        return f"element bool scatters only by replacement (got mode {a.mode})"
    return None


def _combine(xp, a):
    """The fold of scatter's mode on one target's values (the element's arithmetic)."""
    if a.mode == "replace":
        return lambda old, new: new
    elem = _elem(a)
    if elem == "scalar":
        prim = {"sum": xp.add, "prod": xp.multiply, "max": xp.maximum, "min": xp.minimum}
        return prim[a.mode]
    port = W.element_port(elem, ())
    fn = {"sum": W.add, "prod": W.multiply, "max": W.maximum, "min": W.minimum}[a.mode]
    return lambda old, new: fn(old, new, port)


def _scatter_parts(a, x, idx, u):
    perm, nb, nk, nr, flat = _flat(a, idx)
    table = _to_table(a, np.asarray(x), perm, nb, nk, nr)
    ups = np.reshape(u, (nb, flat.shape[1], nr))
    return perm, table, flat, ups


def _scatter(xp, a, x, idx, u):
    perm, table, flat, ups = _scatter_parts(a, x, idx, u)
    return _from_table(a, _fold_into(xp, table, flat, ups, _combine(xp, a)), perm)


def _writers(flat, nk):
    """{(b, k): [i, ...]} the updates of each target in fold order."""
    out = {}
    for b in range(flat.shape[0]):
        for i in range(flat.shape[1]):
            out.setdefault((b, flat[b, i].item()), []).append(i)
    return out


def _scatter_linear(xp, a, xs, ys):
    """(table pieces, per-target linear maps) shared by jvp and backward: for each written
    target the sources (x itself as -1, then the updates) and their coefficient vectors
    (``weights``, read by ``_weigh``) in the tangent map ty = sum_j w_j t_j, so the pullback
    gives source j the weight w_j applied to g."""
    x, idx, u = xs
    perm, table, flat, ups = _scatter_parts(a, x, idx, u)
    yt = _to_table(a, np.asarray(ys[0]), perm, *table.shape)
    maps = {}
    for (b, k), its in _writers(flat, table.shape[1]).items():
        srcs = [-1] + its
        vals = [table[b, k]] + [ups[b, i] for i in its]
        one = xp.ones_like(vals[0])
        if a.mode == "replace":
            w = [None] * (len(srcs) - 1) + [True]
        elif a.mode == "sum":
            w = [True] * len(srcs)
        elif a.mode == "prod":
            # w_j = (f_0 ... f_{j-1}) (f_{j+1} ... f_m): prefix times suffix, no division.
            pre, run = [one], vals[0]
            for v in vals[1:]:
                pre.append(run)
                run = xp.multiply(run, v)
            w = [xp.multiply(p, s) for p, s in zip(pre, _suffixes(xp, vals))]
        else:
            r = yt[b, k]
            tied = [np.asarray((xp.equal(v, r)) | (xp.isnan(v) & xp.isnan(r))) for v in vals]
            # At least one source equals the result (or is its NaN), so count >= 1.
            count = xp.asarray(np.stack(tied).sum(axis=0))
            w = [(t, count) for t in tied]
        maps[(b, k)] = (srcs, w)
    return perm, table, flat, ups, maps


def _weigh(xp, w, v):
    """A weight of _scatter_linear applied to v: None selects zero, True passes v, (mask,
    count) passes v / count where mask holds (an even share: one rounding), else w * v."""
    if w is None:
        return xp.zeros_like(v)
    if w is True:
        return v
    if isinstance(w, tuple):
        mask, count = w
        return xp.where(mask, xp.divide(v, count), xp.zeros_like(v))
    return xp.multiply(w, v)


def _suffixes(xp, vals):
    """s_j = f_{j+1} ... f_m (1 for the last)."""
    out, run = [xp.ones_like(vals[0])], None
    for v in vals[:0:-1]:
        run = v if run is None else xp.multiply(v, run)
        out.append(run)
    return out[::-1]


def _scatter_jvp(xp, a, xs, ys, ts):
    perm, table, flat, ups, maps = _scatter_linear(xp, a, xs, ys)
    tx = _to_table(a, np.asarray(ts[0]), perm, *table.shape).copy()
    tu = np.reshape(ts[2], ups.shape)
    for (b, k), (srcs, w) in maps.items():
        terms = [_weigh(xp, wj, tx[b, k] if s < 0 else tu[b, s]) for s, wj in zip(srcs, w)]
        total = terms[0]
        for term in terms[1:]:
            total = xp.add(total, term)
        tx[b, k] = total
    return _from_table(a, tx, perm)


def _scatter_no_jvp(a):
    """The attributes without a forward mode (spec: scatter has a forward mode "at some
    attributes"): max and min of scalars.  Where sources tie, the result is the maximum of
    their values, whose directional derivative is the maximum of their tangents: no linear
    tangent map exists there.  The pullback's even split among ties is a convention of the
    reverse mode only.  replace and sum are linear, prod a polynomial: forward mode."""
    if a.mode in ("max", "min") and _elem(a) == "scalar":
        return (f"mode {a.mode} is not differentiable where sources tie (a tangent would be "
                f"the {a.mode}imum of the tied tangents, not linear in them)")
    return None


def _scatter_tangent(xp, a, xs, ys, ts):
    """The forward mode where ``_scatter_no_jvp`` allows one (Rule checks it first; this
    refuses a direct call elsewhere)."""
    reason = _scatter_no_jvp(a)
    if reason:
        raise RouteError(f"scatter: no forward mode at these attributes: {reason}")
    return element_jvp(_scatter_jvp)(xp, a, xs, ys, ts)


def _scatter_backward(xp, a, xs, ys, gs, needs):
    perm, table, flat, ups, maps = _scatter_linear(xp, a, xs, ys)
    g = _to_table(a, np.asarray(gs[0]), perm, *table.shape)
    gx = g.copy()
    gu = xp.zeros_like(ups).copy()
    for (b, k), (srcs, w) in maps.items():
        for s, wj in zip(srcs, w):
            if s < 0:
                gx[b, k] = _weigh(xp, wj, g[b, k])
            else:
                gu[b, s] = _weigh(xp, wj, g[b, k])
    return _from_table(a, gx, perm), None, np.reshape(gu, np.shape(xs[2]))


def _scatter_oracle(ctx, a, x, idx, u):
    x, idx, u = (np.asarray(v, dtype=object) for v in (x, idx, u))
    out = x.copy()
    nb, ni = a.batch, len(a.index_shape)
    rest = _rest(a)
    gathered = _gathered_shape(a)

    def fold(old, new):
        if a.mode == "replace":
            return new
        if _elem(a) != "scalar":
            port = W.element_port(_elem(a), ())
            v = {"sum": lambda: old + new, "prod": lambda: old * new,
                 "max": lambda: max(old, new), "min": lambda: min(old, new)}[a.mode]()
            v %= 1 << port.width
            return v - (1 << port.width) if port.signed and v >= 1 << (port.width - 1) else v
        if a.mode in ("max", "min") and (ctx.isnan(old) or ctx.isnan(new)):
            return ctx.nan
        return {"sum": lambda: old + new, "prod": lambda: old * new,
                "max": lambda: max(old, new), "min": lambda: min(old, new)}[a.mode]()

    for pos in np.ndindex(*gathered):                 # row-major: index order, then r
        b, i, r = pos[:nb], pos[nb:nb + ni], pos[nb + ni:]
        tup = idx[b + i]
        tup = [int(tup)] if len(a.axes) == 1 else [int(v) for v in tup]
        dst = [0] * len(a.shape)
        dst[:nb] = b
        for d, v in zip(a.axes, tup):
            dst[d] = v
        for d, v in zip(rest, r):
            dst[d] = v
        dst = tuple(dst)
        old, new = out[dst], u[pos]
        if _elem(a) not in ("scalar", "bool"):
            old, new = int(old), int(new)
        out[dst] = fold(old, new)
    return (out,)


def _scatter_ports(a):
    p = W.element_port(_elem(a), a.shape)
    return ({"x": p, "index": _index_port(a),
             "updates": W.element_port(_elem(a), _gathered_shape(a))}, {"y": p})


define(
    "scatter", "indexing",
    attributes=_LAYOUT_ATTRS + (A.choice("mode", _MODES, doc="how an update combines with "
                                         "its target"), _ELEMENT),
    ports=_scatter_ports,
    forward=lambda xp, a, x, idx, u: _scatter(xp, a, x, idx, u),
    jvp=_scatter_tangent,
    no_jvp=_scatter_no_jvp,
    backward=_scatter_backward,
    check=_scatter_check,
    samples=samplers(),
    oracle=_scatter_oracle,
    examples={"": {}, "batch": _LAYOUT_EXAMPLES["batch"],
              "prod-two-axes": {**_LAYOUT_EXAMPLES["two-axes"], "mode": "prod"},
              "max": {"mode": "max"}, "min": {"mode": "min"},
              "sum-batch": {"mode": "sum", "shape": (2, 3), "axes": (1,), "batch": 1,
                            "index_shape": (2,)},
              "int8-sum": {"mode": "sum", "element": "int8"},
              "bool": {"element": "bool"}},
    bad_attributes=_LAYOUT_BAD + (({"element": "bool", "mode": "sum"},
                                   "element bool scatters only by replacement (got mode sum)"),),
    notes=("scatter: y = x with each update folded into its target x[b, axes = index[b, i], "
           "r] in the row-major order of the index tensor: replace (the last update wins), "
           "sum, prod, max or min with x's own entry first (PyTorch's include_self=True); "
           "max/min propagate NaN (IEEE maximum/minimum), -0 and +0 compare equal.",
           "Each fold is one elementwise primitive of the backend (storage format), so in a "
           "low-precision format the order of repeated targets decides the value.",
           "Gradient: replace: the cotangent goes to the last update of a target (none to x "
           "there or to the overwritten updates); sum: to x and every update; prod: the "
           "product of the other factors (no division, exact at zeros); max/min: shared "
           "evenly among the sources equal to the result, x included (PyTorch's "
           "scatter_reduce).  element bool (replace only) / int*: no gradient.",
           "Forward mode at some attributes (the spec's Gradient column): replace, sum and "
           "prod, and every word or Boolean element (no tangent there); none at max and min "
           "of scalars, which are not differentiable where sources tie (the even split is "
           "the pullback's convention only)."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_scatter_folds_repeated_targets_in_row_major_order",
                             "repeated targets are folded in the row-major order of the "
                             "index tensor (bfloat16 sums show it)", route="forward"),
                  convention(f"{TESTS}::test_scatter_max_shares_the_gradient_among_ties",
                             "max/min: sources equal to the result share the cotangent "
                             "evenly; replace: the last update takes it")),
)


# ----- indices ----------------------------------------------------------------------------------
def _indices(a):
    """Each position's own index tuple (one integer per position at rank 1), row-major."""
    if len(a.shape) == 1:
        return np.arange(a.shape[0], dtype="int64")
    grids = np.indices(a.shape, dtype="int64")
    return np.moveaxis(grids, 0, -1) if len(a.shape) else grids.reshape(0)


def _indices_oracle(ctx, a):
    out = [list(pos) for pos in np.ndindex(*a.shape)]
    arr = np.array(out, dtype=np.int64).reshape(index(a.shape, a.shape).array_shape)
    return (arr,)


define(
    "indices", "indexing",
    attributes=(A.shape(doc="the shape whose positions are enumerated"),),
    ports=lambda a: ({}, {"index": index(a.shape, a.shape)}),
    forward=lambda xp, a: _indices(a),
    samples=samplers(),
    oracle=_indices_oracle,
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    notes=("indices(shape): at every position its own index tuple (the integer itself at "
           "rank 1), an index tensor below the extents of shape; no input, no gradient.",),
    certificates=(convention(f"{TESTS}::test_indices_enumerates_positions",
                             "each position holds its own index tuple, row-major"),),
)


# ----- indexAt ----------------------------------------------------------------------------------
def _drop(shape, axis):
    return tuple(n for d, n in enumerate(shape) if d != axis)


def _index_at(x, i, axis):
    return np.take(np.asarray(x), np.asarray(i).item(), axis=axis)


def _index_at_backward(xp, a, xs, ys, gs, needs):
    gx = np.moveaxis(xp.zeros_like(xs[0]).copy(), a.axis, 0)
    gx[np.asarray(xs[1]).item()] = gs[0]
    return np.moveaxis(gx, 0, a.axis), None


def _index_at_oracle(ctx, a, x, i):
    x = np.asarray(x, dtype=object)
    out = np.empty(_drop(a.shape, a.axis), dtype=object)
    for pos in np.ndindex(*out.shape):
        src = pos[:a.axis] + (int(i),) + pos[a.axis:]
        out[pos] = x[src]
    return (out,)


define(
    "indexAt", "indexing",
    attributes=(A.shape(), A.nat("axis", doc="the axis indexed")),
    ports=lambda a: ({"x": value(a.shape), "at": index((a.shape[a.axis],))},
                     {"y": value(_drop(a.shape, a.axis))}),
    forward=lambda xp, a, x, i: _index_at(x, i, a.axis),
    jvp=lambda xp, a, xs, ys, ts: _index_at(ts[0], xs[1], a.axis),
    backward=_index_at_backward,
    check=nonempty_axis_check,
    samples=samplers(),
    oracle=_index_at_oracle,
    examples={"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1}},
    bad_attributes=(({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
                    ({"shape": ()}, "shape must have rank >= 1"),
                    ({"shape": (0, 2)}, "axis 0 must have a positive extent")),
    notes=("indexAt: the sub-tensor of x at the runtime index `at` along axis (torch.select "
           "with a tensor index); the axis is removed.",
           "Gradient: the cotangent placed at that index, zeros elsewhere."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_index_at_known_answer",
                             "the gradient is the cotangent at the selected index and zero "
                             "elsewhere")),
)


# ----- slice ----------------------------------------------------------------------------------
def _slice_shape(a):
    n = len(range(a.start, a.stop, a.step)) if a.step >= 1 else 0
    return tuple(n if d == a.axis else m for d, m in enumerate(a.shape))


def _slice_check(a):
    bad = axis_check(a)
    if bad:
        return bad
    if a.step < 1:
        return f"step must be >= 1 (got {a.step})"
    extent = a.shape[a.axis]
    if not a.start <= a.stop <= extent:
        return (f"start and stop must satisfy start <= stop <= {extent} (got start "
                f"{a.start}, stop {a.stop})")
    return None


def _slicer(a):
    return (slice(None),) * a.axis + (slice(a.start, a.stop, a.step),)


def _slice_backward(xp, a, xs, ys, gs, needs):
    gx = xp.zeros_like(xs[0]).copy()
    gx[_slicer(a)] = gs[0]
    return (gx,)


def _slice_oracle(ctx, a, x):
    x = np.asarray(x, dtype=object)
    out = np.empty(_slice_shape(a), dtype=object)
    for pos in np.ndindex(*out.shape):
        src = list(pos)
        src[a.axis] = a.start + a.step * pos[a.axis]
        out[pos] = x[tuple(src)]
    return (out,)


define(
    "slice", "indexing",
    attributes=(A.shape(default=(4,)), A.nat("axis", doc="the axis sliced"),
                A.nat("start", 1), A.nat("stop", 4), A.nat("step", 2, gen=(0, 3)), _ELEMENT),
    ports=lambda a: ({"x": W.element_port(_elem(a), a.shape)},
                     {"y": W.element_port(_elem(a), _slice_shape(a))}),
    forward=lambda xp, a, x: np.asarray(x)[_slicer(a)].copy(),
    jvp=element_jvp(lambda xp, a, xs, ys, ts: np.asarray(ts[0])[_slicer(a)].copy()),
    backward=_slice_backward,
    check=_slice_check,
    samples=samplers(),
    oracle=_slice_oracle,
    examples={"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1, "start": 0, "stop": 3,
                                     "step": 1},
              "uint8": {"element": "uint8"}},
    bad_attributes=(({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
                    ({"shape": ()}, "shape must have rank >= 1"),
                    ({"step": 0}, "step must be >= 1 (got 0)"),
                    ({"start": 3, "stop": 2},
                     "start and stop must satisfy start <= stop <= 4 (got start 3, stop 2)")),
    notes=("slice: x[start:stop:step] along axis (Python's slice, steps >= 1).",
           "Gradient: the cotangent placed at the sliced positions, zeros elsewhere.  element "
           "bool / int*: moved as data, no gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_slice_known_answer",
                             "the pullback places the cotangent at the sliced positions"),
                  roundoff(0, statement="exact: every output is an input entry")),
)


# ----- embedding --------------------------------------------------------------------------------
def _embedding_check(a):
    if a.num == 0:
        return "num must be >= 1 (got 0)"
    return None


def _embedding_backward(xp, a, xs, ys, gs, needs):
    w, ids = xs
    ni = _count(a.shape)
    flat = np.asarray(ids).astype("int64").reshape(1, ni)
    table = np.asarray(w).reshape(1, a.num, a.dim)
    ups = np.reshape(gs[0], (1, ni, a.dim))
    return np.reshape(_add_into(xp, table, flat, ups), (a.num, a.dim)), None


def _embedding_oracle(ctx, a, w, ids):
    w, ids = np.asarray(w, dtype=object), np.asarray(ids)
    out = np.empty(a.shape + (a.dim,), dtype=object)
    for pos in np.ndindex(*out.shape):
        out[pos] = w[int(ids[pos[:-1]]), pos[-1]]
    return (out,)


define(
    "embedding", "indexing",
    attributes=(A.nat("num", 3, gen=(0, 4), doc="the rows of the table"),
                A.nat("dim", 2, gen=(0, 3), doc="the width of a row"),
                A.shape(doc="the shape of the index tensor")),
    ports=lambda a: ({"weight": value((a.num, a.dim)), "ids": index((a.num,), a.shape)},
                     {"y": value(a.shape + (a.dim,))}),
    forward=lambda xp, a, w, ids: np.asarray(w)[np.asarray(ids).astype("int64")],
    jvp=lambda xp, a, xs, ys, ts: np.asarray(ts[0])[np.asarray(xs[1]).astype("int64")],
    backward=_embedding_backward,
    check=_embedding_check,
    samples=samplers(),
    oracle=_embedding_oracle,
    examples={"": {"shape": (4,)}, "2x2": {"shape": (2, 2), "num": 2, "dim": 3}},
    bad_attributes=(({"num": 0}, "num must be >= 1 (got 0)"),),
    notes=("embedding: y[i, :] = weight[ids[i], :] (no padding index, no max_norm).",
           "Gradient: the cotangent rows of repeated ids are summed into their weight row "
           "sequentially, in the row-major order of ids; unused rows get zeros."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_embedding_sums_repeated_ids_in_order",
                             "repeated ids sum their cotangent rows in row-major order")),
)

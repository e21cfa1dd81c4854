"""Scans and orderings (spec: "Scans and orderings, of which cummax, cummin, sort, topk, argmax
and argmin return indices"): cumsum, cumprod, cummax, cummin, sort, topk, argmax, argmin.

Every operator works along one ``axis`` of an operand of attribute ``shape`` (rank >= 1).
cumsum and cumprod run their running value in the backend's accumulation format (PyTorch
accumulates half and bfloat16 scans in a wider type) and round each prefix once into
storage.  Orderings compare with the backend's comparisons only: NaN is the largest value
(PyTorch's sort and topk), -0 and +0 are equal, and equal entries keep their order (stable).

The module also holds the samplers the indexing and movement families share
(``port_sampler``): one array per input port, values of the target format at scalar ports,
indices below the bounds at index ports, words or Booleans at the others.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention
from ..ports import frozen, index, value
from ..registry import Float64, define
from ..rules import shown
from ..samples import SPECIALS, extremes, into

TESTS = "tests/routes/test_routes_scan_order.py"


# ----- shared samplers --------------------------------------------------------------------------
def scalar_draw(rng, fmt, kind, shape):
    """Values of ``fmt`` at ``shape``: ordinary uniform in [-4, 4]; edges small dyadic values
    with ties and both zeros; special the specials and extremes of the format mixed in."""
    n = int(np.prod(shape, dtype=np.int64))
    if kind == "ordinary":
        x = rng.uniform(-4, 4, n)
    elif kind == "edges":
        x = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0])[rng.integers(0, 6, n)]
    else:
        vals = np.asarray(SPECIALS + extremes(fmt), dtype=np.float64)
        x = np.where(rng.random(n) < 0.6, vals[rng.integers(0, len(vals), n)],
                     rng.uniform(-4, 4, n))
    return into(x, fmt).reshape(shape)


def port_sampler(kind, values=None):
    """A sampler of ``kind`` for any ports: ``values(rng, fmt, kind, shape)`` (default
    ``scalar_draw``) at scalar ports, uniform indices at index ports, words.sample else."""
    values = values or scalar_draw

    def sampler(rng, fmt, op):
        out = []
        for p in op.inputs:
            if p.scalar:
                out.append(values(rng, fmt, kind, p.shape))
            elif p.kind == "index":
                shape = p.array_shape
                comps = [rng.integers(0, max(b, 1), p.shape) for b in p.bounds]
                out.append(comps[0].astype(np.int64) if len(p.bounds) == 1 else
                           np.stack(comps, -1).astype(np.int64).reshape(shape))
            else:
                out.append(W.sample(rng, p))
        return tuple(out)
    return sampler


def samplers(values=None):
    """{kind: port_sampler(kind, values)} for the three kinds."""
    return {k: port_sampler(k, values) for k in ("ordinary", "edges", "special")}


def axis_check(a, name="axis"):
    """The message when ``a.shape`` has rank 0 or ``a[name]`` is not below the rank."""
    rank = len(a.shape)
    if rank == 0:
        return "shape must have rank >= 1 (got [])"
    if a[name] >= rank:
        return f"{name} must be < rank {rank} (got {a[name]})"
    return None


def nonempty_axis_check(a):
    """axis_check, and the axis must have an entry to pick (argmax, argmin, indexAt)."""
    bad = axis_check(a)
    if bad:
        return bad
    if a.shape[a.axis] == 0:
        return f"axis {a.axis} must have a positive extent (got shape {list(a.shape)})"
    return None


def to_rows(x, axis):
    """An object/number array as a list of Python lists along ``axis`` (oracles)."""
    m = np.moveaxis(np.asarray(x, dtype=object), axis, -1)
    return m.reshape(-1, m.shape[-1]).tolist(), m.shape


def from_rows(rows, shape, axis, dtype=object):
    """The inverse of to_rows (``shape`` the moved shape, last axis possibly changed)."""
    out = np.array(rows, dtype=dtype).reshape(shape)
    return np.moveaxis(out, -1, axis)


def element_jvp(jvp):
    """The forward mode of an operator with an element argument: ``jvp`` at the scalar; at
    Booleans or words there is no value port, so no tangent (rules.zero_tangents' None)."""
    def forward_mode(xp, a, xs, ys, ts):
        if a.get("element", "scalar") != "scalar":
            return tuple(None for _ in ys)
        return jvp(xp, a, xs, ys, ts)
    return forward_mode


# ----- comparisons with NaN as the largest value ------------------------------------------------
def _before(xp, a, b, descending):
    """a strictly before b in the order: ascending with NaN last, descending NaN first."""
    na, nb = xp.isnan(a), xp.isnan(b)
    if descending:
        return xp.greater(a, b) | (na & ~nb)
    return xp.less(a, b) | (~na & nb)


def _sort_index(xp, x, axis, descending):
    """The stable sorting permutation along ``axis`` (numpy int64, x's shape): the rank of
    entry i is #{j before i} + #{j < i equal to i}, computed with comparisons only."""
    m = np.moveaxis(x, axis, -1)
    n = m.shape[-1]
    a, b = m[..., :, None], m[..., None, :]            # [..., i, j]
    a, b = np.broadcast_arrays(a, b)
    jb = np.asarray(_before(xp, b, a, descending))      # j before i
    ib = np.asarray(_before(xp, a, b, descending))
    earlier = np.arange(n)[None, :] < np.arange(n)[:, None]
    rank = jb.sum(-1) + ((~jb & ~ib) & earlier).sum(-1)
    # The inverse of the rank permutation (index arithmetic on integers, not values).
    return np.moveaxis(rank.argsort(axis=-1, kind="stable"), -1, axis)


def _take(x, idx, axis):
    return np.take_along_axis(x, idx, axis=axis)


def _add_at(xp, like, g, idx, axis):
    """Zeros of ``like``'s shape plus g[..., i] at idx[..., i] along ``axis``; repeated targets
    summed with xp.add in increasing i (the first contribution replaces the zero)."""
    gm, im = np.moveaxis(g, axis, -1), np.moveaxis(idx, axis, -1)
    n = np.shape(like)[axis]
    acc = np.moveaxis(xp.zeros_like(like), axis, -1).copy()
    seen = np.zeros(acc.shape, bool)
    for i in range(gm.shape[-1]):
        for j in range(n):
            hit = im[..., i] == j
            if not hit.any():
                continue
            gi = gm[..., i]
            summed = xp.add(acc[..., j], gi)
            acc[..., j] = xp.where(hit & seen[..., j], summed,
                                   xp.where(hit, gi, acc[..., j]))
            seen[..., j] |= hit
    return np.moveaxis(acc, -1, axis)


def _mp_key(ctx, descending):
    """An oracle's comparison of mpf values: NaN largest; equal values compare equal."""
    def cmp(p, q):
        (_, a), (_, b) = p, q
        na, nb = ctx.isnan(a), ctx.isnan(b)
        if na or nb:
            c = 0 if na and nb else (1 if na else -1)
        else:
            c = (a > b) - (a < b)
        return -c if descending else c
    return functools.cmp_to_key(cmp)


def _oracle_order(ctx, x, axis, descending):
    """(sorted values, stable permutation) along ``axis`` with Python's stable sort."""
    rows, shape = to_rows(x, axis)
    perms = [[i for i, _ in sorted(enumerate(r), key=_mp_key(ctx, descending))] for r in rows]
    vals = [[r[i] for i in p] for r, p in zip(rows, perms)]
    return from_rows(vals, shape, axis), from_rows(perms, shape, axis, np.int64)


# ----- cumsum, cumprod -----------------------------------------------------------------------
def _scan(xp, x, axis, prim, reverse=False):
    """Inclusive prefix combination along ``axis`` with the accumulator's ``prim``, each prefix
    rounded once into storage (numerics.Backend.scan)."""
    return xp.scan(prim, x, axis, reverse)


_AXIS_ATTRS = (A.shape(), A.nat("axis", doc="the axis scanned or ordered"))
_EXAMPLES = {"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1}}
_BAD_AXIS = (({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
             ({"shape": ()}, "shape must have rank >= 1"))


def _oracle_scan(f):
    def oracle(ctx, a, x):
        rows, shape = to_rows(x, a.axis)
        out = []
        for r in rows:
            acc, vals = None, []
            for v in r:
                acc = v if acc is None else f(acc, v)
                vals.append(acc)
            out.append(vals)
        return (from_rows(out, shape, a.axis),)
    return oracle


define(
    "cumsum", "scan_order",
    attributes=_AXIS_ATTRS,
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: _scan(xp, x, a.axis, "add"),
    jvp=lambda xp, a, xs, ys, ts: _scan(xp, ts[0], a.axis, "add"),
    backward=lambda xp, a, xs, ys, gs, needs: (_scan(xp, gs[0], a.axis, "add", reverse=True),),
    check=axis_check,
    samples=samplers(),
    oracle=_oracle_scan(lambda p, q: p + q),
    # numpy's cumsum runs sequentially in binary64: bit for bit the strict policy's order.
    float64=Float64(lambda a, x: np.cumsum(x, axis=a.axis),
                    lambda a, xs, gs: (np.flip(np.cumsum(np.flip(gs[0], a.axis), axis=a.axis),
                                               a.axis),)),
    examples=_EXAMPLES,
    bad_attributes=_BAD_AXIS,
    notes=("y[i] = x[0] + ... + x[i] along axis, added sequentially in the policy's "
           "accumulation format (PyTorch's widened accumulation type), each prefix rounded "
           "once into storage.",
           "Gradient: the reversed cumulative sum of the cotangent (same accumulation); the "
           "tangent is the cumulative sum of the tangent."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_cumsum_accumulates_in_the_accumulation_format",
                             "the running sum is held in the policy's accumulation format and "
                             "each prefix rounded once into storage", route="forward")),
)


def _cumprod_jvp(xp, a, xs, ys, ts):
    """ty[i] = ty[i-1] x[i] + y[i-1] t[i] (y[-1] = 1, ty[-1] = 0): no division, so zeros of x
    are handled."""
    x, y, t = (np.moveaxis(v, a.axis, -1) for v in (xs[0], ys[0], ts[0]))
    if x.shape[-1] == 0:
        return np.asarray(ts[0]).copy()
    out = [t[..., 0]]
    for i in range(1, x.shape[-1]):
        out.append(xp.add(xp.multiply(out[-1], x[..., i]), xp.multiply(y[..., i - 1], t[..., i])))
    return np.moveaxis(np.stack(out, -1), -1, a.axis)


def _cumprod_backward(xp, a, xs, ys, gs, needs):
    """The adjoint of the tangent recursion: s[i] = g[i] + x[i+1] s[i+1], grad[i] = s[i] y[i-1]
    (grad[0] = s[0])."""
    x, y, g = (np.moveaxis(v, a.axis, -1) for v in (xs[0], ys[0], gs[0]))
    n = x.shape[-1]
    if n == 0:
        return (np.asarray(gs[0]).copy(),)
    s = [None] * n
    s[n - 1] = g[..., n - 1]
    for i in range(n - 2, -1, -1):
        s[i] = xp.add(g[..., i], xp.multiply(x[..., i + 1], s[i + 1]))
    grad = [s[0]] + [xp.multiply(s[i], y[..., i - 1]) for i in range(1, n)]
    return (np.moveaxis(np.stack(grad, -1), -1, a.axis),)


def _small(rng, fmt, kind, shape):
    """cumprod's values: magnitudes near 1 so products stay in range."""
    if kind == "ordinary":
        n = int(np.prod(shape, dtype=np.int64))
        return into(rng.uniform(-2, 2, n), fmt).reshape(shape)
    return scalar_draw(rng, fmt, kind, shape)


define(
    "cumprod", "scan_order",
    attributes=_AXIS_ATTRS,
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: _scan(xp, x, a.axis, "multiply"),
    jvp=_cumprod_jvp,
    backward=_cumprod_backward,
    check=axis_check,
    samples=samplers(_small),
    oracle=_oracle_scan(lambda p, q: p * q),
    float64=Float64(lambda a, x: np.cumprod(x, axis=a.axis)),
    examples=_EXAMPLES,
    bad_attributes=_BAD_AXIS,
    notes=("y[i] = x[0] * ... * x[i] along axis, multiplied sequentially in the policy's "
           "accumulation format, each prefix rounded once into storage.",
           "Gradient without division (exact at zeros of x): the tangent follows ty[i] = "
           "ty[i-1] x[i] + y[i-1] t[i]; the pullback is its adjoint, s[i] = g[i] + x[i+1] "
           "s[i+1], grad[i] = s[i] y[i-1]."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_cumprod_gradient_at_a_zero",
                             "the gradient is the product of the other factors, also where "
                             "x has zeros (no division)")),
)


# ----- cummax, cummin -------------------------------------------------------------------------
def _cumext(xp, x, axis, greater):
    """(running extremum, index) along ``axis``: x[i] takes over where it is NaN or, the
    running value not being NaN, x[i] >= it (<= for cummin): ties take the latest index, as
    PyTorch's cummax/cummin."""
    m = np.moveaxis(x, axis, -1)
    n = m.shape[-1]
    if n == 0:
        return np.asarray(x).copy(), np.zeros(np.shape(x), "int64")
    best, idx = m[..., 0], np.zeros(m.shape[:-1], "int64")
    vals, idxs = [best], [idx]
    cmp = xp.greater_equal if greater else xp.less_equal
    for i in range(1, n):
        xi = m[..., i]
        take = np.asarray(xp.isnan(xi) | (~xp.isnan(best) & cmp(xi, best)))
        best = xp.where(take, xi, best)
        idx = idx.copy()
        idx[take] = i
        vals.append(best)
        idxs.append(idx)
    return (np.moveaxis(np.stack(vals, -1), -1, axis),
            np.moveaxis(np.stack(idxs, -1), -1, axis).astype("int64"))


def _cumext_oracle(greater):
    def oracle(ctx, a, x):
        rows, shape = to_rows(x, a.axis)
        vals, idxs = [], []
        for r in rows:
            bv, bi, vr, ir = None, 0, [], []
            for i, v in enumerate(r):
                if bv is None or ctx.isnan(v) or (not ctx.isnan(bv) and
                                                  (v >= bv if greater else v <= bv)):
                    bv, bi = v, i
                vr.append(bv)
                ir.append(bi)
            vals.append(vr)
            idxs.append(ir)
        return from_rows(vals, shape, a.axis), from_rows(idxs, shape, a.axis, np.int64)
    return oracle


for _name, _greater in (("cummax", True), ("cummin", False)):
    define(
        _name, "scan_order",
        attributes=_AXIS_ATTRS,
        ports=lambda a: ({"x": value(a.shape)},
                         {"values": value(a.shape),
                          "indices": index((a.shape[a.axis],), a.shape)}),
        forward=(lambda gr: lambda xp, a, x: _cumext(xp, x, a.axis, gr))(_greater),
        jvp=lambda xp, a, xs, ys, ts: (_take(ts[0], ys[1], a.axis), None),
        backward=lambda xp, a, xs, ys, gs, needs: (
            _add_at(xp, xs[0], gs[0], ys[1], a.axis),),
        check=axis_check,
        samples=samplers(),
        oracle=_cumext_oracle(_greater),
        examples=_EXAMPLES,
        bad_attributes=_BAD_AXIS,
        notes=(f"{_name}: the running {'maximum' if _greater else 'minimum'} along axis and "
               "the index it was taken from.  Ties take the latest index (PyTorch's "
               f"{'>=' if _greater else '<='}); a NaN takes over and stays (its latest index).",
               "Gradient: the cotangent of values[i] goes to x[indices[i]] (summed where "
               "several outputs share a source, in increasing i); the tangent is "
               "t[indices[i]]."),
        certificates=("prepared",
                      convention(f"{TESTS}::test_{_name}_ties_take_the_latest_index",
                                 "at a tie the latest entry is the source: it receives the "
                                 "cotangent")),
    )


# ----- sort, topk ------------------------------------------------------------------------------
def _sort(xp, a, x):
    idx = _sort_index(xp, x, a.axis, a.descending)
    return _take(x, idx, a.axis), idx


define(
    "sort", "scan_order",
    attributes=_AXIS_ATTRS + (A.flag("descending", doc="largest first"),),
    ports=lambda a: ({"x": value(a.shape)},
                     {"values": value(a.shape), "indices": index((a.shape[a.axis],), a.shape)}),
    forward=_sort,
    jvp=lambda xp, a, xs, ys, ts: (_take(ts[0], ys[1], a.axis), None),
    backward=lambda xp, a, xs, ys, gs, needs: (_add_at(xp, xs[0], gs[0], ys[1], a.axis),),
    check=axis_check,
    samples=samplers(),
    oracle=lambda ctx, a, x: _oracle_order(ctx, x, a.axis, a.descending),
    examples={**_EXAMPLES, "descending": {"shape": (4,), "descending": True}},
    bad_attributes=_BAD_AXIS,
    notes=("Stable sort along axis (PyTorch's stable=True): equal entries keep their order, "
           "ascending or descending; -0 and +0 are equal; NaN is the largest value (last "
           "ascending, first descending).",
           "Gradient: the cotangent of values[i] goes to x[indices[i]] (a permutation); the "
           "tangent is t[indices[i]]."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_sort_is_stable_at_ties",
                             "tied entries keep their input order and each receives the "
                             "cotangent of its own output position")),
)


def _topk_shape(a):
    return tuple(a.k if d == a.axis else n for d, n in enumerate(a.shape))


def _topk_check(a):
    bad = axis_check(a)
    if bad:
        return bad
    if a.k > a.shape[a.axis]:
        return f"k must be <= the extent {a.shape[a.axis]} of axis {a.axis} (got {a.k})"
    return None


def _topk_order(xp, a, x):
    return _sort_index(xp, x, a.axis, a.largest)


def _topk(xp, a, x):
    idx = np.take(_topk_order(xp, a, x), range(a.k), axis=a.axis)
    return _take(x, idx, a.axis), idx


def _topk_validate(xp, a, x):
    """Refuse inputs where entries tied across the selection boundary would decide which
    ones are selected (the k-th and the (k+1)-th in order compare equal)."""
    n = np.shape(x)[a.axis]
    if a.k == 0 or a.k == n:
        return None
    order = _topk_order(xp, a, x)
    kth = _take(x, np.take(order, [a.k - 1], axis=a.axis), a.axis)
    nxt = _take(x, np.take(order, [a.k], axis=a.axis), a.axis)
    tied = ~np.asarray(_before(xp, kth, nxt, a.largest))
    if tied.any():
        return (f"x has entries tied at the selection boundary along axis {a.axis} "
                f"(positions {a.k} and {a.k + 1} of the order both hold "
                f"{shown(xp, kth[tied][:1])[1:-1]}): the selection would depend on their order")
    return None


def _topk_sampler(kind):
    """topk's samples: no tie across the selection boundary in any format.  The selected
    group is drawn above (largest) or below (smallest) every entry of the other group; at
    edges and special, ties (and NaN, the largest value) occur inside a group only."""
    def sampler(rng, fmt, op):
        a = op.attrs
        n = a.shape[a.axis]
        moved = (n,) + tuple(m for d, m in enumerate(a.shape) if d != a.axis)
        rest = int(np.prod(moved[1:], dtype=np.int64))
        f_max = extremes(fmt)[0]
        high = {"edges": [2.0, 3.0], "special": [np.nan, 3.0, f_max]}.get(kind)
        low = {"edges": [0.0, -0.0, -1.0], "special": [0.0, -0.0, -f_max]}.get(kind)
        n_high = a.k if a.largest else n - a.k
        cols = []
        for _ in range(rest):
            if kind == "ordinary":                  # distinct values of every format
                col = (rng.permutation(n) - n // 2) * 0.5 + 0.25
            else:
                col = np.concatenate([np.array(high)[rng.integers(0, len(high), n_high)],
                                      np.array(low)[rng.integers(0, len(low), n - n_high)]])
                col = col[rng.permutation(n)]
            cols.append(into(col, fmt))
        m = np.stack(cols, -1).reshape(moved) if rest else np.zeros(moved)
        return (np.moveaxis(m, 0, a.axis),)
    return sampler


define(
    "topk", "scan_order",
    attributes=_AXIS_ATTRS + (A.nat("k", 2, doc="how many entries are selected"),
                              A.flag("largest", True, doc="select the largest (else the "
                                                          "smallest) entries")),
    ports=lambda a: ({"x": value(a.shape)},
                     {"values": value(_topk_shape(a)),
                      "indices": index((a.shape[a.axis],), _topk_shape(a))}),
    forward=_topk,
    jvp=lambda xp, a, xs, ys, ts: (_take(ts[0], ys[1], a.axis), None),
    backward=lambda xp, a, xs, ys, gs, needs: (_add_at(xp, xs[0], gs[0], ys[1], a.axis),),
    check=_topk_check,
    validate=_topk_validate,
    samples={k: _topk_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=lambda ctx, a, x: tuple(np.take(v, range(a.k), axis=a.axis)
                                   for v in _oracle_order(ctx, x, a.axis, a.largest)),
    examples={"": {"shape": (4,)}, "2x3-axis1": {"shape": (2, 3), "axis": 1, "k": 1},
              "smallest": {"shape": (4,), "largest": False, "k": 3}},
    bad_attributes=_BAD_AXIS + (({"shape": (3,), "k": 4},
                                 "k must be <= the extent 3 of axis 0 (got 4)"),),
    bad_inputs=(({"shape": (4,), "k": 2}, ([3.0, 1.0, 1.0, 0.0],),
                 "topk: x has entries tied at the selection boundary along axis 0 "
                 "(positions 2 and 3 of the order both hold 1)"),
                ({"shape": (3,), "k": 1, "largest": False}, ([-0.0, 2.0, 0.0],),
                 "tied at the selection boundary")),
    notes=("topk selects the k largest (or smallest) entries along axis, in order (sorted), "
           "ties inside the selection in input order; NaN is the largest value.",
           "validate refuses inputs where tied entries would decide the selection (the k-th "
           "and (k+1)-th entries in order are equal, -0 and +0 included): PyTorch leaves that "
           "choice to the kernel.",
           "Gradient: the cotangent of values[i] goes to x[indices[i]], zero to the "
           "unselected entries; the tangent is t[indices[i]]."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_topk_refuses_a_tie_at_the_boundary",
                             "a tie across the selection boundary is refused; ties inside "
                             "the selection keep input order")),
)


# ----- argmax, argmin ----------------------------------------------------------------------------
def _reduced_shape(a):
    return tuple(1 if d == a.axis else n for d, n in enumerate(a.shape)) if a.keepdim else \
        tuple(n for d, n in enumerate(a.shape) if d != a.axis)


def _arg(xp, a, x, descending):
    """The first index of the extremum along axis; NaN counts as the extremum (PyTorch)."""
    m = np.moveaxis(x, a.axis, -1)
    best, idx = m[..., 0], np.zeros(m.shape[:-1], "int64")
    for i in range(1, m.shape[-1]):
        xi = m[..., i]
        na, nb = xp.isnan(xi), xp.isnan(best)
        better = (xp.greater(xi, best) if descending else xp.less(xi, best)) | (na & ~nb)
        better = np.asarray(better)
        best, idx = xp.where(better, xi, best), idx.copy()
        idx[better] = i
    return np.reshape(idx, _reduced_shape(a)).astype("int64")


def _arg_oracle(descending):
    def oracle(ctx, a, x):
        rows, shape = to_rows(x, a.axis)
        out = []
        for r in rows:
            nans = [i for i, v in enumerate(r) if ctx.isnan(v)]
            if nans:
                out.append(nans[0])
                continue
            best = max(r) if descending else min(r)
            out.append(next(i for i, v in enumerate(r) if v == best))
        return (np.array(out, dtype=np.int64).reshape(_reduced_shape(a)),)
    return oracle


for _name, _desc in (("argmax", True), ("argmin", False)):
    define(
        _name, "scan_order",
        attributes=_AXIS_ATTRS + (A.flag("keepdim", doc="keep the reduced axis (extent 1)"),),
        ports=lambda a: ({"x": frozen(a.shape)},
                         {"index": index((a.shape[a.axis],), _reduced_shape(a))}),
        forward=(lambda d: lambda xp, a, x: _arg(xp, a, x, d))(_desc),
        check=nonempty_axis_check,
        samples=samplers(),
        oracle=_arg_oracle(_desc),
        examples={"": {}, "2x3-axis1-keepdim": {"shape": (2, 3), "axis": 1, "keepdim": True}},
        bad_attributes=_BAD_AXIS + (({"shape": (2, 0), "axis": 1},
                                     "axis 1 must have a positive extent"),),
        notes=(f"{_name}: the first index of the {'largest' if _desc else 'smallest'} entry "
               "along axis (ties: the first); a NaN counts as the extremum, so the first NaN's "
               "index is returned (PyTorch); -0 and +0 are equal.",
               "x sits at a frozen port: the result is an index, with no gradient."),
        certificates=(convention(f"{TESTS}::test_{_name}_takes_the_first_tie_and_nan",
                                 "ties give the first index; a NaN wins, the first one"),),
    )

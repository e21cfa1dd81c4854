"""Reductions and contractions (spec: "Reductions and contractions, reduce being a sum,
product, maximum or minimum over any axes"): reduce, mean and contract.

Every sum goes through the backend's reductions (``xp.sum``, ``xp.prod``, ``xp.dot``,
``xp.matmul``), so the accumulation policy (sequential, pairwise or blocked order, the
accumulation format, fma) decides the rounding.  The samplers at the top are shared by the
product, conv_pool and normalization families.
"""

from __future__ import annotations

import math

import numpy as np

from .. import attributes as A
from ..certs import apriori, convention
from ..ports import value
from ..registry import define
from ..samples import SPECIALS, extremes, into

TESTS = "tests/routes/test_routes_reduction.py"


# ----- samplers shared by the families of this part -------------------------------------------
def uniform_sampler(lo=-2.0, hi=2.0, fixed=None, share=0.0, kinks=None):
    """A sampler filling every scalar input with values uniform in [lo, hi] rounded into the
    format; ``fixed`` maps an input name to ``draw(rng, fmt, port) -> array`` (frozen
    parameters), ``share`` mixes special values (zeros, infinities, NaN, the format's
    extremes) into the value ports, ``kinks(op, *xs) -> bool`` asks for a redraw (ties of a
    maximum: float64 numpy on sample data, not a rule)."""
    fixed = fixed or {}

    def sampler(rng, fmt, op):
        for _ in range(100):
            out = []
            for name, port in zip(op.input_names, op.inputs):
                if name in fixed:
                    out.append(np.asarray(into(fixed[name](rng, fmt, port), fmt)))
                    continue
                x = rng.uniform(lo, hi, port.shape)
                if share and port.kind == "value":
                    vals = np.asarray(SPECIALS + extremes(fmt), dtype=np.float64)
                    hit = rng.random(port.shape) < share
                    x = np.where(hit, vals[rng.integers(0, len(vals), port.shape)], x)
                out.append(np.asarray(into(x, fmt)).reshape(port.shape))
            if kinks is None or not kinks(op, *out):
                return tuple(out)
        raise RuntimeError(f"{op.name}: samples keep landing on kinks in {fmt}")
    return sampler


def pick_sampler(values):
    """A sampler drawing every scalar input from ``values`` (ties and zeros: edge samples of
    maxima, whose gradients follow the tie convention)."""
    def sampler(rng, fmt, op):
        vals = np.asarray(values, dtype=np.float64)
        return tuple(np.asarray(into(vals[rng.integers(0, len(vals), p.shape)], fmt))
                     .reshape(p.shape) for p in op.inputs)
    return sampler


def constant_draw(lo, hi):
    """A draw of a frozen parameter uniform in [lo, hi] at its port's shape."""
    return lambda rng, fmt, port: rng.uniform(lo, hi, port.shape)


def mp_array(values, shape):
    """An object array of ``shape`` from a flat list of mpmath numbers."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


# ----- axis bookkeeping ----------------------------------------------------------------------
def axes_problem(axes, rank, what="axes") -> str | None:
    """The message for axes outside the rank or repeated, or None."""
    bad = [ax for ax in axes if ax >= rank]
    if bad:
        return f"{what} must be < rank {rank} (got {list(axes)})"
    if len(set(axes)) != len(axes):
        return f"{what} must be distinct (got {list(axes)})"
    return None


def to_last(x, axes):
    """``x`` with ``axes`` moved last and flattened into one axis: (kept..., n)."""
    x = np.asarray(x)
    keep = [ax for ax in range(x.ndim) if ax not in axes]
    moved = np.transpose(x, keep + list(axes))
    return moved.reshape(moved.shape[:len(keep)] + (-1,))


def from_last(v, shape, axes):
    """The inverse of ``to_last``: (kept..., n) back to ``shape``."""
    keep = [ax for ax in range(len(shape)) if ax not in axes]
    order = keep + list(axes)
    moved = np.reshape(v, tuple(shape[ax] for ax in order))
    return np.transpose(moved, [order.index(ax) for ax in range(len(shape))])


def kept_shape(shape, axes, keepdim):
    return tuple(1 if ax in axes else n for ax, n in enumerate(shape) if keepdim or ax not in axes)


def spread(v, shape, axes):
    """A reduced array (either keepdim form) broadcast back over ``shape`` (a copy)."""
    ones = tuple(1 if ax in axes else n for ax, n in enumerate(shape))
    return np.broadcast_to(np.reshape(v, ones), shape).copy()


def _axes_in_rank(a) -> str | None:
    """reduce's and mean's proofs: every axis is an axis of the shape.  Distinct axes are
    Op.check's (the spec: "Op.check checks the attributes that the types do not, such as
    ... distinct axes for reduce and mean"), so a decoded reduce with a repeated axis is an
    operator value that invoke refuses."""
    bad = [ax for ax in a.axes if ax >= len(a.shape)]
    return f"axes must be < rank {len(a.shape)} (got {list(a.axes)})" if bad else None


def _named_axes_problem(a):
    """reduce and mean take at least one axis, each an axis of the shape."""
    if not a.axes:
        return "axes must name at least one axis (got [])"
    return axes_problem(a.axes, len(a.shape))


# ----- reduce ----------------------------------------------------------------------------------
def _reduce_check(a):
    problem = _named_axes_problem(a)
    if problem:
        return problem
    if a.op in ("max", "min") and any(a.shape[ax] == 0 for ax in a.axes):
        return (f"{a.op} needs a positive extent on every reduced axis (got shape "
                f"{list(a.shape)}, axes {list(a.axes)})")
    return None


def _reduce_ports(a):
    return {"x": value(a.shape)}, {"y": value(kept_shape(a.shape, a.axes, a.keepdim))}


def _extreme_mask(xp, x, y, a):
    """Where x attains the reduction's max/min, a NaN result counting every NaN entry, and
    the number of such entries per group spread over x (a backend sum of ones: exact while
    the count is below 2**p, far above these windows)."""
    yb = spread(y, a.shape, a.axes)
    mask = xp.equal(x, yb) | (xp.isnan(x) & xp.isnan(yb))
    ones = xp.where(mask, xp.ones_like(x), xp.zeros_like(x))
    return mask, spread(xp.sum(ones, axis=a.axes), a.shape, a.axes)


def _others(xp, x, a):
    """For each entry, the product of the other entries of its group (no division: zeros are
    fine), shaped like x."""
    flat = to_last(x, a.axes)
    n = flat.shape[-1]
    cols = []
    for i in range(n):
        rest = np.concatenate([flat[..., :i], flat[..., i + 1:]], axis=-1)
        cols.append(xp.prod(rest, axis=-1) if n > 1 else xp.ones_like(flat[..., 0]))
    return from_last(np.stack(cols, axis=-1), a.shape, a.axes)


def _reduce_forward(xp, a, x):
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    if np.size(x) == 0 or any(a.shape[ax] == 0 for ax in a.axes):
        return xp.constant(1 if a.op == "prod" else 0, shape)
    f = {"sum": xp.sum, "prod": xp.prod, "max": xp.max, "min": xp.min}[a.op]
    return np.reshape(f(x, axis=a.axes), shape)


def _sum_groups(xp, a, v):
    """v summed over the reduced axes (the output's shape; zeros over empty groups)."""
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    if np.size(v) == 0:
        return xp.constant(0, shape)
    return np.reshape(xp.sum(v, axis=a.axes), shape)


def _reduce_linear(xp, a, x, y, v, transpose):
    """The tangent map (transpose False: v a tangent of x) or the pullback (True: v a
    cotangent of y)."""
    if a.op == "sum":
        return spread(v, a.shape, a.axes) if transpose else _sum_groups(xp, a, v)
    if a.op == "prod":
        others = _others(xp, x, a) if np.size(x) else xp.zeros_like(x)
        if transpose:
            return xp.multiply(spread(v, a.shape, a.axes), others)
        return _sum_groups(xp, a, xp.multiply(v, others))
    mask, count = _extreme_mask(xp, x, y, a)
    zero = xp.zeros_like(x)
    if transpose:
        share = xp.divide(spread(v, a.shape, a.axes), count)
        return xp.where(mask, share, zero)
    return _sum_groups(xp, a, xp.divide(xp.where(mask, v, zero), count))


def _reduce_oracle(ctx, a, x):
    flat = to_last(x, a.axes)
    rows = int(np.prod(flat.shape[:-1], dtype=np.int64))
    out = []
    for row in flat.reshape(rows, flat.shape[-1]):
        vals = list(row)
        if a.op == "sum":
            out.append(ctx.fsum(vals) if vals else ctx.zero)
        elif a.op == "prod":
            p = ctx.one
            for v in vals:
                p = p * v
            out.append(p)
        elif any(ctx.isnan(v) for v in vals):
            out.append(ctx.nan)
        else:
            out.append(max(vals) if a.op == "max" else min(vals))
    return (mp_array(out, kept_shape(a.shape, a.axes, a.keepdim)),)


def _reduce_kinks(op, x):
    """Ordinary samples of max/min keep the extreme of each group unique."""
    if op.attrs.op not in ("max", "min") or x.size == 0:
        return False
    flat = np.sort(to_last(x, op.attrs.axes), axis=-1)
    return bool(np.any(np.diff(flat, axis=-1) < 2.0 ** -20)) if flat.shape[-1] > 1 else False


define(
    "reduce", "reduction",
    attributes=(A.shape(default=(2, 3)),
                A.choice("op", ("sum", "prod", "max", "min"), doc="the reduction"),
                A.nats("axes", default=(1,), doc="the reduced axes, distinct"),
                A.flag("keepdim", doc="keep each reduced axis with extent 1")),
    ports=_reduce_ports,
    forward=_reduce_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _reduce_linear(xp, a, xs[0], ys[0], gs[0], True),),
    jvp=lambda xp, a, xs, ys, ts: _reduce_linear(xp, a, xs[0], ys[0], ts[0], False),
    check=_reduce_check,
    proofs=_axes_in_rank,
    samples={"ordinary": uniform_sampler(-2, 2, kinks=_reduce_kinks),
             "edges": pick_sampler((-1.0, 0.0, 0.5, 1.0)),
             "special": uniform_sampler(-2, 2, share=0.3)},
    oracle=_reduce_oracle,
    examples={"": {}, "prod": {"op": "prod", "axes": (0,)},
              "max": {"op": "max", "shape": (2, 2, 2), "axes": (2, 0), "keepdim": True},
              "min": {"op": "min", "axes": (0, 1)}},
    notes=("reduce(x) over the distinct, non-empty list of axes: sum, prod, max or min; "
           "keepdim keeps the reduced axes with extent 1.  sum and prod over an empty axis "
           "give 0 and 1; max and min need a positive extent (check).",
           "sum and prod accumulate in the backend's policy order (sequential, pairwise, "
           "blocked:K) and accumulation format.",
           "max/min propagate NaN (IEEE maximum/minimum).  Gradient of max/min: the cotangent "
           "is split equally among the entries that attain the result (ties; NaN entries "
           "when the result is NaN), the spec's tie rule for max.  PyTorch's amax does the "
           "same; its max(dim) gives all to one index.",
           "Gradient of prod: the product of the other entries (no division, exact at zeros)."),
    bad_attributes=(({"axes": (1, 1)}, "reduce: axes must be distinct (got [1, 1])"),
                    ({"axes": (2,)}, "reduce: axes must be < rank 2 (got [2])"),
                    ({"axes": ()}, "reduce: axes must name at least one axis"),
                    ({"op": "max", "shape": (2, 0)},
                     "reduce: max needs a positive extent on every reduced axis")),
    certificates=("algebraic", "prepared",
                  convention(f"{TESTS}::test_reduce_max_splits_ties_equally",
                             "a max/min attained by k entries gives each 1/k of the cotangent; "
                             "a NaN result shares it among the NaN entries"),
                  apriori("sum: gamma_k(u_A) sum|x| (k the depth of the policy's order) plus "
                          "the final rounding into storage; max/min exact (routes/apriori.py)")),
)


# ----- mean ------------------------------------------------------------------------------------
def _mean_check(a):
    problem = _named_axes_problem(a)
    if problem:
        return problem
    if any(a.shape[ax] == 0 for ax in a.axes):
        return (f"the reduced axes must have positive extents (got shape {list(a.shape)}, "
                f"axes {list(a.axes)})")
    return None


def _count(a):
    return math.prod(a.shape[ax] for ax in a.axes)


def _mean_forward(xp, a, x):
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    if np.size(x) == 0:
        return xp.constant(0, shape)
    return xp.divide(np.reshape(xp.sum(x, axis=a.axes), shape), xp.constant(_count(a), shape))


define(
    "mean", "reduction",
    attributes=(A.shape(default=(2, 3)),
                A.nats("axes", default=(1,), doc="the averaged axes, distinct"),
                A.flag("keepdim", doc="keep each averaged axis with extent 1")),
    ports=_reduce_ports,
    forward=_mean_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        xp.divide(spread(gs[0], a.shape, a.axes), xp.constant(_count(a), a.shape)),),
    jvp=lambda xp, a, xs, ys, ts: _mean_forward(xp, a, ts[0]),
    check=_mean_check,
    proofs=_axes_in_rank,
    samples={"ordinary": uniform_sampler(-2, 2), "special": uniform_sampler(-2, 2, share=0.3)},
    oracle=lambda ctx, a, x: (mp_array(
        [ctx.fsum(list(r)) / r.size for r in to_last(x, a.axes).reshape(-1, _count(a))],
        kept_shape(a.shape, a.axes, a.keepdim)),),
    examples={"": {}, "all": {"shape": (2, 2, 3), "axes": (0, 2), "keepdim": True}},
    notes=("mean(x) = sum(x over axes) / n, n the number of averaged entries: the sum in the "
           "backend's policy order, then one division by the integer n (rounded once).",
           "The averaged axes must be distinct and non-empty (no 0/0 NaN as PyTorch's).",
           "Gradient: the cotangent divided by n, spread over the group."),
    bad_attributes=(({"axes": (0, 0)}, "mean: axes must be distinct (got [0, 0])"),
                    ({"axes": (3,)}, "mean: axes must be < rank 2 (got [3])"),
                    ({"axes": ()}, "mean: axes must name at least one axis"),
                    ({"shape": (2, 0)}, "mean: the reduced axes must have positive extents")),
    certificates=("prepared",
                  apriori("E_s/n + u (sum|x| + E_s)/n + eta, E_s the sum's bound, when n is a "
                          "value of the format (routes/apriori.py)")),
)


# ----- contract --------------------------------------------------------------------------------
def _contract_check(a):
    if len(a.x_axes) != len(a.y_axes):
        return (f"x_axes and y_axes must pair up (got {len(a.x_axes)} and {len(a.y_axes)} "
                f"axes)")
    problem = axes_problem(a.x_axes, len(a.x_shape), "x_axes") or \
        axes_problem(a.y_axes, len(a.y_shape), "y_axes")
    if problem:
        return problem
    for i, j in zip(a.x_axes, a.y_axes):
        if a.x_shape[i] != a.y_shape[j]:
            return (f"contracted extents must agree (x axis {i} has {a.x_shape[i]}, y axis {j} "
                    f"has {a.y_shape[j]})")
    return None


def _free(shape, axes):
    return tuple(n for ax, n in enumerate(shape) if ax not in axes)


def _out_shape(a):
    return _free(a.x_shape, a.x_axes) + _free(a.y_shape, a.y_axes)


def _as_matrix(x, axes):
    """(free, contracted) matrix of x."""
    flat = to_last(x, axes)
    return flat.reshape(-1, flat.shape[-1])


def matmul2(xp, p, q):
    """p @ q for 2-D arrays through the backend; an empty inner dimension gives zeros."""
    if p.shape[1] == 0 or p.shape[0] == 0 or q.shape[1] == 0:
        return xp.constant(0, (p.shape[0], q.shape[1]))
    return xp.matmul(p, q)


def _contract(xp, a, x, y):
    xm, ym = _as_matrix(x, a.x_axes), _as_matrix(y, a.y_axes)
    return np.reshape(matmul2(xp, xm, ym.T), _out_shape(a))


def _contract_backward(xp, a, xs, ys, gs, needs):
    x, y = xs
    xm, ym = _as_matrix(x, a.x_axes), _as_matrix(y, a.y_axes)
    g = np.reshape(gs[0], (xm.shape[0], ym.shape[0]))
    gx = from_last(matmul2(xp, g, ym), a.x_shape, a.x_axes) if needs[0] else None
    gy = from_last(matmul2(xp, g.T, xm), a.y_shape, a.y_axes) if needs[1] else None
    return gx, gy


def _contract_oracle(ctx, a, x, y):
    xm, ym = _as_matrix(x, a.x_axes), _as_matrix(y, a.y_axes)
    out = [ctx.fsum(xm[i, k] * ym[j, k] for k in range(xm.shape[1])) if xm.shape[1]
           else ctx.zero for i in range(xm.shape[0]) for j in range(ym.shape[0])]
    return (mp_array(out, _out_shape(a)),)


define(
    "contract", "reduction",
    attributes=(A.shape("x_shape", default=(2, 3), doc="the shape of x"),
                A.shape("y_shape", default=(3, 2), doc="the shape of y"),
                A.nats("x_axes", default=(1,), doc="the contracted axes of x"),
                A.nats("y_axes", default=(0,), doc="the contracted axes of y, paired with "
                       "x_axes in order")),
    ports=lambda a: ({"x": value(a.x_shape), "y": value(a.y_shape)},
                     {"z": value(_out_shape(a))}),
    forward=_contract,
    backward=_contract_backward,
    jvp=lambda xp, a, xs, ys, ts: xp.add(_contract(xp, a, ts[0], xs[1]),
                                         _contract(xp, a, xs[0], ts[1])),
    check=_contract_check,
    samples={"ordinary": uniform_sampler(-2, 2)},
    oracle=_contract_oracle,
    # tensordot sums over the paired axes; the last of them stands for the contraction
    # (with none paired, an outer product, the last axis).
    products={"x": lambda a, rank: a.x_axes[-1] - rank if a.x_axes else -1,
              "y": lambda a, rank: a.y_axes[-1] - rank if a.y_axes else -1},
    examples={"": {}, "two-axes": {"x_shape": (2, 3, 2), "y_shape": (2, 3),
                                   "x_axes": (2, 1), "y_axes": (0, 1)},
              "outer": {"x_shape": (2,), "y_shape": (3,), "x_axes": (), "y_axes": ()}},
    notes=("contract(x, y) is numpy's tensordot: z[free x..., free y...] = sum over the paired "
           "axes (x_axes[i] with y_axes[i]) of x * y, one dot product per output through the "
           "backend's matmul (policy order, accumulation format, fma).",
           "No paired axes: the outer product.  A zero contracted extent gives zeros."),
    bad_attributes=(({"x_axes": (1, 0)}, "contract: x_axes and y_axes must pair up"),
                    ({"x_axes": (2,)}, "contract: x_axes must be < rank 2 (got [2])"),
                    ({"y_axes": (1,)}, "contract: contracted extents must agree"),
                    ({"x_shape": (3, 3), "y_shape": (3, 3), "x_axes": (0, 0),
                      "y_axes": (0, 1)}, "contract: x_axes must be distinct")),
    certificates=("derivative", "prepared"),
)

"""Data movement kernels: gather, scatter, indexAt, slice, reshape, permute, broadcast, cat
and detach (rules: routes/families/indexing.py, movement.py, graph.py).

Numerics.  Moving a value rounds nothing: the rules move entries with numpy (``np.reshape``,
``np.transpose``, ``np.broadcast_to``, ``np.concatenate``, fancy indexing) on the values
they read, and those were rounded once into the format when read (kernels.launch._read,
``xp.asarray`` in the rule), so the output bits are input bits: -0 stays -0 where the format
has it (a format without -0 never delivers one), NaN stays NaN (returned canonical).  The
zeros a pullback fills in are ``xp.zeros_like``: +0 in every format.  Hence the exact
contract: no primitive, one "rounding" (none), bitwise in every mode, 0 ulp.

Design.  The host computes, with numpy on index arrays, the flat source position of every
output entry (the rule's own movement applied to ``arange``), -1 for a filled zero; one
generic device kernel, ``take``, moves the values (one thread per output entry).  Where a
rule combines values, the host lists for every output entry its contributions in the rule's
order (a CSR table) and the ``fold`` kernel combines them with the device primitives, one
thread per output entry:

- scatter (indexing._fold_into): the target starts from x's entry, then its updates in the
  row-major order of the index tensor: ``replace`` (the last wins), ``max`` and ``min``
  (IEEE maximum/minimum, exact: the result is one of the operands).  ``sum`` and ``prod``
  would round (add, multiply): the table holds one contract per operator, and theirs would
  withdraw the exact claim of replace/max/min, so they are not served here;
- gather's pullback (indexing._add_into): a source with no reader gets +0, otherwise its
  first cotangent, then ``add`` of the next ones in the row-major order of the index tensor;
- broadcast's pullback (movement._broadcast_adjoint, ``xp.sum`` under the strict policy:
  ``Backend._sequential``, acc = first copy, acc = acc + next copy in row-major order of the
  summed axes, a single copy returned unrounded): the same fold.

Only ``element="scalar"`` is served where the operator has an ``element`` attribute (Boolean
and word movement has no kernel).
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from .base import DIRECTED, Instance, Kernel, flat
from .contract import TRACED, Contract

# Fold codes of the ``fold`` kernel.
REPLACE, ADD, MAXIMUM, MINIMUM = 0, 1, 2, 3
_SCATTER_CODE = {"replace": REPLACE, "max": MAXIMUM, "min": MINIMUM}


# ----- device kernels ---------------------------------------------------------------------------
def make_take():
    """take(src, idx, out): out[i] = src[idx[i]], +0 where idx[i] < 0 (a filled zero)."""
    @cuda.jit
    def take(src, idx, out):
        i = cuda.grid(1)
        if i < out.size:
            k = idx[i]
            if k >= 0:
                out[i] = src[k]
            else:
                out[i] = 0.0
    return take


def make_fold(P: dict):
    """fold(src, base, ptr, items, code, out, rp): out[j] starts from src[base[j]] (base >= 0)
    or else from its first contribution (+0 without any), then combines the contributions
    src[items[t]], t in [ptr[j], ptr[j+1]), in that order with the primitive of ``code``."""
    add, mx, mn = P["add"], P["maximum"], P["minimum"]

    @cuda.jit
    def fold(src, base, ptr, items, code, out, rp):
        j = cuda.grid(1)
        if j < out.size:
            s = ptr[j]
            e = ptr[j + 1]
            acc = 0.0
            if base[j] >= 0:
                acc = src[base[j]]
            elif s < e:
                acc = src[items[s]]
                s += 1
            for t in range(s, e):
                v = src[items[t]]
                if code == REPLACE:
                    acc = v
                elif code == ADD:
                    acc = add(acc, v, rp)
                elif code == MAXIMUM:
                    acc = mx(acc, v, rp)
                else:
                    acc = mn(acc, v, rp)
            out[j] = acc
    return fold


def _take(ctx, src, idx):
    """Values of the flat ``src`` at the host-computed positions ``idx`` (any shape)."""
    idx = np.asarray(idx, dtype=np.int64)
    out = np.empty(idx.size)
    kern = ctx.compile("movement-take", make_take)
    ctx.launch(kern, idx.size, flat(src), np.ascontiguousarray(idx.reshape(-1)), out)
    return out.reshape(idx.shape)


def _fold(ctx, src, base, targets, code):
    """``len(base)`` outputs folded from the flat ``src``, whose last ``len(targets)`` entries
    are the contributions: the t-th of them goes to output targets[t], and the contributions
    of one output are combined in increasing t (a stable sort keeps that order)."""
    src = flat(src)
    base = np.ascontiguousarray(base, dtype=np.int64).reshape(-1)
    targets = np.asarray(targets, dtype=np.int64).reshape(-1)
    first = src.size - targets.size               # contributions are the tail of src
    order = np.argsort(targets, kind="stable")
    items = np.ascontiguousarray(order + first, dtype=np.int64)
    counts = np.bincount(targets, minlength=base.size)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out = np.empty(base.size)
    kern = ctx.compile("movement-fold", lambda: make_fold(ctx.P))
    if items.size == 0:
        items = np.zeros(1, dtype=np.int64)       # never read: numba wants a non-empty array
    ctx.launch(kern, base.size, src, base, ptr, items, code, out, ctx.rp)
    return out


def _positions(shape):
    """The row-major flat position of every entry of ``shape``."""
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


# ----- gather and scatter (indexing's layout) ----------------------------------------------------
def _layout(a, index):
    """Positions in x of every gathered entry: shape B + index_shape + R, where the entry at
    (b, i, r) is x[b, axes = index[b, i], r] (indexing._gather on positions)."""
    rank = len(a.shape)
    rest = [d for d in range(a.batch, rank) if d not in a.axes]
    perm = list(range(a.batch)) + list(a.axes) + rest
    bounds = [a.shape[d] for d in a.axes]
    nb = int(np.prod(a.shape[:a.batch], dtype=np.int64))
    nk = int(np.prod(bounds, dtype=np.int64))
    nr = int(np.prod([a.shape[d] for d in rest], dtype=np.int64))
    ni = int(np.prod(a.index_shape, dtype=np.int64))
    comps = np.asarray(index).astype(np.int64).reshape(nb, ni, len(a.axes))
    key = np.zeros((nb, ni), dtype=np.int64)
    for j, bound in enumerate(bounds):             # row-major over the indexed axes
        key = key * bound + comps[..., j]
    table = np.transpose(_positions(a.shape), perm).reshape(nb, nk, nr)
    out_shape = a.shape[:a.batch] + tuple(a.index_shape) + tuple(a.shape[d] for d in rest)
    return table[np.arange(nb)[:, None], key, :].reshape(out_shape)


def launch_gather(o, xs, cotangents, route, ctx):
    x, index = xs
    src = _layout(o.attrs, index)
    if route == "forward":
        return (_take(ctx, x, src),)
    (g,) = ctx.cotangents(o, cotangents)
    # _add_into: +0 where no entry reads x, else the readers' cotangents summed in order.
    gx = _fold(ctx, g, np.full(x.size, -1), src, ADD)
    return gx.reshape(x.shape), None


def launch_scatter(o, xs, cotangents, route, ctx):
    x, index, updates = xs
    targets = _layout(o.attrs, index)              # update (b, i, r) folds into x there
    src = np.concatenate([flat(x), flat(updates)])
    y = _fold(ctx, src, np.arange(x.size), targets, _SCATTER_CODE[o.attrs.mode])
    return (y.reshape(x.shape),)


# ----- indexAt and slice -------------------------------------------------------------------------
def launch_index_at(o, xs, cotangents, route, ctx):
    a = o.attrs
    x, at = xs
    src = np.take(_positions(a.shape), np.asarray(at).item(), axis=a.axis)
    if route == "forward":
        return (_take(ctx, x, src),)
    (g,) = ctx.cotangents(o, cotangents)
    # The cotangent at the selected index, +0 elsewhere (_index_at_backward).
    idx = np.moveaxis(np.full(a.shape, -1, dtype=np.int64), a.axis, 0)
    idx[np.asarray(at).item()] = _positions(g.shape)
    return _take(ctx, g, np.moveaxis(idx, 0, a.axis)), None


def _slicer(a):
    return (slice(None),) * a.axis + (slice(a.start, a.stop, a.step),)


def launch_slice(o, xs, cotangents, route, ctx):
    a = o.attrs
    if route == "forward":
        return (_take(ctx, xs[0], _positions(a.shape)[_slicer(a)]),)
    (g,) = ctx.cotangents(o, cotangents)
    idx = np.full(a.shape, -1, dtype=np.int64)     # +0 outside the slice (_slice_backward)
    idx[_slicer(a)] = _positions(g.shape)
    return (_take(ctx, g, idx),)


# ----- reshape, permute, broadcast, cat, detach --------------------------------------------------
def launch_reshape(o, xs, cotangents, route, ctx):
    a = o.attrs
    if route == "forward":                         # row-major order kept
        return (_take(ctx, xs[0], _positions(a.to)),)
    (g,) = ctx.cotangents(o, cotangents)
    return (_take(ctx, g, _positions(a.shape)),)


def launch_permute(o, xs, cotangents, route, ctx):
    a = o.attrs
    if route == "forward":
        return (_take(ctx, xs[0], np.transpose(_positions(a.shape), a.perm)),)
    (g,) = ctx.cotangents(o, cotangents)           # the inverse permutation
    return (_take(ctx, g, np.transpose(_positions(g.shape), np.argsort(a.perm))),)


def launch_broadcast(o, xs, cotangents, route, ctx):
    a = o.attrs
    src = np.broadcast_to(_positions(a.shape), a.to)
    if route == "forward":
        return (_take(ctx, xs[0], src),)
    (g,) = ctx.cotangents(o, cotangents)
    # The copies of each entry summed sequentially in row-major order (a single copy
    # unrounded, none at all +0).
    gx = _fold(ctx, g, np.full(int(np.prod(a.shape, dtype=np.int64)), -1), src, ADD)
    return (gx.reshape(a.shape),)


def launch_cat(o, xs, cotangents, route, ctx):
    a = o.attrs
    starts = np.concatenate([[0], np.cumsum([x.size for x in xs])]).astype(np.int64)
    # Each input's entries at their offset in the packed inputs, joined along the axis.
    src = np.concatenate([starts[i] + _positions(x.shape) for i, x in enumerate(xs)],
                         axis=a.axis)
    if route == "forward":
        return (_take(ctx, np.concatenate([flat(x) for x in xs]), src),)
    (g,) = ctx.cotangents(o, cotangents)
    # Input i's block of the cotangent: where src says g's entry came from input i.
    where = np.empty(src.size, dtype=np.int64)
    where[src.reshape(-1)] = np.arange(src.size)
    grads = _take(ctx, g, where)
    return tuple(grads[starts[i]:starts[i + 1]].reshape(x.shape) for i, x in enumerate(xs))


def launch_detach(o, xs, cotangents, route, ctx):
    if route == "forward":
        return (_take(ctx, xs[0], _positions(xs[0].shape)),)
    ctx.cotangents(o, cotangents)                  # shapes checked; x is detached: no gradient
    return (None,)


# ----- the table ---------------------------------------------------------------------------------
_SCALAR = lambda a: a.get("element", "scalar") == "scalar"            # noqa: E731
_EXACT = Contract(TRACED, TRACED, single=None)
_ADJOINT_SUM = Contract(TRACED, TRACED, single=None)

# Test instances (kernels.base.Instance): the defaults and the common layouts in every format;
# the exact routes in the directed modes too, where they agree bit for bit.
def _tests(*attrs, directed=None):
    """An instance per mapping or example label of ``attrs``, in every format; ``directed``:
    the default instance's route ("forward" on special samples in bfloat16 and float8,
    "gradient" on ordinary ones in binary16) in the directed modes."""
    out = tuple(Instance(a) for a in ({},) + attrs)
    if directed == "forward":
        out += (Instance({}, formats=("bfloat16", "float8_e4m3fn"), kinds=("special",),
                         routes=("forward",), modes=DIRECTED),)
    elif directed == "gradient":
        out += (Instance({}, formats=("binary16",), kinds=("ordinary",), routes=("gradient",),
                         modes=DIRECTED),)
    return out


def _scatter_tests():
    """replace, max and min at the default and a 3-D layout; a batched scatter."""
    out = ()
    for mode in ("replace", "max", "min"):
        out += (Instance({"mode": mode}, mode),
                Instance({"mode": mode, "shape": (2, 3, 2), "axes": (1,), "index_shape": (3,)},
                         f"{mode}-2x3x2"))
    return out + (Instance("batch"),
                  Instance({"mode": "max"}, formats=("bfloat16", "float8_e4m3fn"),
                           kinds=("special",), routes=("forward",), modes=DIRECTED))


KERNELS = (
    Kernel("gather", "movement", _ADJOINT_SUM, launch_gather, _SCALAR,
           tests=_tests("batch", {"shape": (2, 3, 2), "axes": (2,), "index_shape": (2, 2)},
                        directed="forward")),
    # replace, max and min: every output is x's entry or an update (exact folds).
    Kernel("scatter", "movement", Contract(TRACED, None, None),
           launch_scatter, lambda a: _SCALAR(a) and a.mode in _SCATTER_CODE,
           tests=_scatter_tests()),
    Kernel("indexAt", "movement", _EXACT, launch_index_at,
           tests=_tests("2x3-axis1", directed="gradient")),
    Kernel("slice", "movement", _EXACT, launch_slice, _SCALAR,
           tests=_tests("2x3-axis1", {"shape": (3, 4), "axis": 1, "start": 1, "stop": 4,
                                      "step": 2}, directed="forward")),
    Kernel("reshape", "movement", _EXACT, launch_reshape, _SCALAR,
           tests=_tests("flatten", directed="gradient")),
    Kernel("permute", "movement", _EXACT, launch_permute, _SCALAR,
           tests=_tests("rank3", directed="forward")),
    Kernel("broadcast", "movement", _ADJOINT_SUM, launch_broadcast, _SCALAR,
           tests=_tests("lead", {"shape": (2, 1), "to": (2, 2, 3)})),
    Kernel("cat", "movement", _EXACT, launch_cat, _SCALAR,
           tests=_tests("2x3-axis1", directed="forward")),
    Kernel("detach", "movement", _EXACT, launch_detach, tests=_tests("2x3")),
)

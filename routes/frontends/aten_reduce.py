"""The aten table's extrema, products, variances and orderings of numbers (the conventions of
routes.frontends.aten).  torch is never imported here; ``cx`` is the capture
(routes.frontends.torch).

- ``amax`` / ``amin`` and the full ``max()`` / ``min()`` are ``reduce`` max / min, whose
  gradient is split equally among the entries that attain the result, as torch's;
- ``max.dim`` / ``min.dim`` give the values and their positions: the positions by
  ``argmax`` / ``argmin`` (the first extremal entry), the values read there (``gather``), so
  the gradient goes to that one entry, as torch's max(dim) gives it;
- ``prod`` is ``reduce`` prod (its gradient the product of the other entries, exact at
  zeros), ``cumprod`` the registered ``cumprod``;
- ``var`` (and ``std``, which torch writes as sqrt(var)) and ``var_mean`` with a
  ``correction`` c: sum((x - mean)^2) / (N - c) over the reduced axes, composed from mean,
  sub, square, sum and div by the integer N - c (torch's kernels order the sums
  differently; the exact value is the same); N - c <= 0 (torch's inf or NaN) is refused;
- ``topk`` and ``sort`` are the registered operators (values, then the positions along the
  axis: an index result, torch's int64).  Both order ties by position, one of the orders
  PyTorch may give (an unstable sort and sorted=False leave it to the kernel); topk
  refuses inputs where a tie decides the selection (its validate).
"""

from __future__ import annotations

import math
from typing import Callable

from . import registrar
from .aten_integers import gather_along
from .aten_tensors import axes_of, axis_of

TABLE: dict[str, Callable] = {}
_entry = registrar(TABLE, "aten table")


@_entry("aten.amax.default", "aten.amin.default", "aten.max.default", "aten.min.default")
def _extremum(cx, a):
    cx.scalar_result()
    shape = cx.shape(a.self)
    if not shape:
        return a.self
    op = "max" if ".amax." in str(cx.node.target) or ".max." in str(cx.node.target) else "min"
    return cx.apply("reduce", a.self, shape=shape, op=op,
                    axes=axes_of(a.get("dim"), len(shape)),
                    keepdim=bool(a.get("keepdim", False)))


@_entry("aten.max.dim", "aten.min.dim")
def _extremum_at(cx, a):
    cx.scalar_result()
    x, shape = a.self, cx.shape(a.self)
    if not shape:
        cx.refuse("max / min of a 0-d tensor along a dim is not translated")
    axis, keep = axis_of(a.dim, len(shape)), bool(a.keepdim)
    largest = str(cx.node.target).startswith("aten.max")
    at = cx.apply("argmax" if largest else "argmin", x, shape=shape, axis=axis, keepdim=True)
    values = gather_along(cx, x, axis, at)
    kept = cx.shape(at)
    if keep:
        return values, at
    out = tuple(n for d, n in enumerate(shape) if d != axis)
    return (cx.move("reshape", values, shape=kept, to=out),
            cx.move("reshape", at, shape=kept, to=out))


@_entry("aten.prod.dim_int", "aten.prod.default")
def _prod(cx, a):
    cx.scalar_result()
    shape = cx.shape(a.self)
    if not shape:
        return a.self
    dim = a.get("dim")
    return cx.apply("reduce", a.self, shape=shape, op="prod",
                    axes=axes_of(None if dim is None else [dim], len(shape)),
                    keepdim=bool(a.get("keepdim", False)))


@_entry("aten.cumprod.default")
def _cumprod(cx, a):
    cx.scalar_result()
    shape = cx.shape(a.self)
    return cx.apply("cumprod", a.self, shape=shape, axis=axis_of(a.dim, len(shape)))


@_entry("aten.var.correction", "aten.var_mean.correction")
def _variance(cx, a):
    cx.scalar_result()
    x, shape = a.self, cx.shape(a.self)
    axes = axes_of(a.get("dim"), len(shape))
    keep = bool(a.get("keepdim", False))
    count = math.prod(shape[d] for d in axes)
    c = 1 if a.get("correction") is None else a.correction
    if not count - c > 0:
        cx.refuse(f"a variance of {count} entries with correction {c} divides by "
                  f"{count - c} (torch gives inf or NaN)")
    m = cx.apply("mean", x, shape=shape, axes=axes, keepdim=True)
    d = cx.apply("sub", x, cx.like(m, shape), shape=shape)
    total = cx.apply("reduce", cx.apply("square", d, shape=shape), shape=shape, op="sum",
                     axes=axes, keepdim=keep)
    out = cx.shape(total)
    var = cx.apply("div", total, cx.like(float(count - c), out), shape=out)
    if str(cx.node.target) != "aten.var_mean.correction":
        return var
    mean = m if keep else cx.move("reshape", m, shape=cx.shape(m), to=out)
    return var, mean


@_entry("aten.topk.default", "aten.sort.default", "aten.sort.stable")
def _order(cx, a):
    cx.scalar_result()
    x, shape = a.self, cx.shape(a.self)
    if not shape:
        cx.refuse("ordering a 0-d tensor is not translated")
    axis = axis_of(a.dim, len(shape))
    if str(cx.node.target).startswith("aten.topk"):
        if not 1 <= a.k <= shape[axis]:
            cx.refuse(f"k = {a.k} outside [1, {shape[axis]}] is not translated")
        return cx.apply("topk", x, shape=shape, axis=axis, k=int(a.k),
                        largest=bool(a.largest))
    return cx.apply("sort", x, shape=shape, axis=axis, descending=bool(a.descending))

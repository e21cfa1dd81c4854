"""The aten table's tensor entries (routes.frontends.aten holds the arithmetic, products,
normalization and attention ones; the same conventions): pass-through and metadata nodes,
dtype conversions, shape and movement, joining and splitting, advanced indexing by
constant indices, comparisons and Boolean connectives, clamping.  torch is never imported
here; ``cx`` is the capture (routes.frontends.torch).

- ``NOOPS``: the checks torch.export inserts (``_assert_tensor_metadata`` after every
  ``.to()``, ``_assert_async``, ``_assert_scalar``, symbolic-size checks): no value, nothing
  computed;
- conversions (``_to_copy``, ``to.dtype``) compute only what is exact: to the same dtype,
  to a floating dtype at least as wide in precision and exponent range (binary16 or
  bfloat16 to binary32, binary32 to binary64: every value is kept), integers or Booleans
  read as numbers (an integer tensor the capture holds as numbers is exact in binary64
  below 2**53; torch's cast to a narrower floating dtype rounds integers beyond its
  precision, 2**24 for binary32, which this reading does not), to bool (``ne(x, 0)``: True
  at NaN, as torch), and index tensors to integers that hold their bound or, through
  ``cast``, to numbers.  A
  conversion that rounds (a narrower float, a float to an integer) is refused;
- movement of index tensors (an ``input_ids`` viewed, sliced or expanded) goes through
  ``encodeIndex`` / ``decodeIndex`` as int64 words (exact);
- ``cat`` leaves out empty operands (torch's rule for the legacy shape (0,), and every
  operand with no entries, as a cache's first update has); ``split`` and
  ``split_with_sizes`` are slices, an empty piece a constant with no entries;
- ``index.Tensor`` with constant indices (torch folds the arange the model built them from)
  is ``gather`` on the flattened operand, at the positions torch's own indexing selects
  from the table of positions (so None, broadcasting and Boolean indices mean what they
  mean in torch); its gradient sums repeated reads, as index's backward accumulates;
- comparisons of scalars (value or frozen) or of Booleans are ``eq`` ... ``ge`` (IEEE);
  ``bitwise_and/or/xor`` and ``logical_*`` of Booleans are ``logicalAnd/Or/Xor``,
  ``bitwise_not`` / ``logical_not`` ``logicalNot``;
- ``clamp`` with number bounds (a missing bound is infinite; ``clamp_min``, ``clamp_max``)
  is ``clamp``: the gradient passes where lo <= x <= hi, as torch's; with tensor bounds
  ``max`` then ``min``; ``hardtanh`` (ReLU6) passes it only strictly inside, as torch's
  hardtanh_backward: select(lo < x < hi, x, clamp(detach(x))).

- operators that only copy entries (``as_strided``, nearest upsampling, ``roll``,
  ``repeat``, pixel and channel shuffles, ``diagonal``, ``index_select`` by constant
  indices) are
  ``gather`` at the positions torch computes on the table of positions
  (cx.by_positions); ``index_select`` by computed indices gathers by them; ``flip`` is
  ``flip``; ``constant_pad_nd`` is ``pad`` (zeros), a slice for negative pads, and for
  another value select(inside, padded, value).

- ``slice_scatter`` (step 1) is select(inside, pad(src), x); ``isnan``, ``isinf``,
  ``isfinite`` are ``isNaN``, ``isInf``, ``isFinite``.

Refused here: conversions that round; slice_scatter with a step; Boolean index tensors the
model computes.
"""

from __future__ import annotations

from typing import Callable

from . import registrar
from .aten_integers import WORD, advanced_index, integral, is_integer, numbers, words, wrap

TABLE: dict[str, Callable] = {}
_entry = registrar(TABLE, "aten table")

NOOPS = frozenset({"aten._assert_tensor_metadata.default", "aten._assert_async.default",
                   "aten._assert_async.msg", "aten._assert_scalar.default",
                   "aten.sym_constrain_range.default",
                   "aten.sym_constrain_range_for_size.default",
                   "aten._functional_assert_async.msg",
                   "aten._functional_assert_scalar.default"})

# (fraction bits, exponent bits) of torch's floating dtypes, by name.
_FLOATS = {"torch.float16": (10, 5), "torch.bfloat16": (7, 8), "torch.float32": (23, 8),
           "torch.float64": (52, 11)}


def axis_of(d, rank):
    """A PyTorch dimension (negative counts from the end) as an axis in [0, rank)."""
    return d + rank if d < 0 else d


def axes_of(dims, rank):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return tuple(sorted(axis_of(d, rank) for d in dims))


def per_axis(v, n):
    """A PyTorch ``int[n]`` argument (one int, or one per axis) as n ints."""
    v = [v] if isinstance(v, int) else list(v)
    return tuple(v * n if len(v) == 1 else v)


def _is_bool(dtype) -> bool:
    return str(dtype) == "torch.bool"


# ----- pass-through and conversions --------------------------------------------------------------
@_entry("aten.clone.default", "aten.contiguous.default", "aten.alias.default",
        "aten.lift_fresh_copy.default", "aten.lift_fresh.default")
def _same(cx, a):
    return a.self


@_entry("aten.copy.default")
def _copy(cx, a):
    """copy(self, src): src broadcast to self's shape, in self's type (integers as words;
    integers into a floating tensor as numbers)."""
    shape, src = cx.shape(a.self), a.src
    if integral(cx.out_dtype):
        src = words(cx, src)
    elif is_integer(cx, src):
        src = numbers(cx, words(cx, src))
    return cx.like(src, shape)


def _widens(source, target) -> bool:
    """Whether every value of floating dtype ``source`` is a value of ``target``."""
    s, t = _FLOATS.get(str(source)), _FLOATS.get(str(target))
    return s is not None and t is not None and t[0] >= s[0] and t[1] >= s[1]


@_entry("aten._to_copy.default", "aten.to.dtype")
def _to_copy(cx, a):
    x, source, target = a.self, cx.dtype(a.self), cx.out_dtype
    if source is None or source == target:
        return x
    kind = cx.kind(x)
    if kind == "integer":                 # words the model computed (aten_integers)
        if _is_bool(target):
            s = cx.shape(x)
            return cx.apply("ne", x, words(cx, 0, s), shape=s, element=WORD)
        return wrap(cx, x, target) if integral(target) else numbers(cx, x)
    if kind == "bool" and integral(target):
        return words(cx, x)
    if _is_bool(target):
        if kind == "bool":
            return x
        if kind == "index":
            cx.refuse("a conversion of indices to bool is not translated")
        s = cx.shape(x)
        return cx.apply("ne", x, cx.like(0.0, s), shape=s)
    if kind == "bool":
        return cx.apply("cast", x, shape=cx.shape(x))     # True 1, False 0: exact
    if kind == "index":
        if target.is_floating_point:
            port = cx.port(x)
            return cx.apply("cast", x, shape=port.shape, source="index", bounds=port.bounds)
        bound = cx.port(x).bounds[0]
        if target.itemsize >= source.itemsize or \
                bound <= 2 ** (8 * target.itemsize - (1 if target.is_signed else 0)):
            return x                         # every index below the bound fits the type
        cx.refuse(f"a conversion of indices below {bound} to {target} is not translated "
                  f"(it wraps)")
    if source.is_floating_point:
        if target.is_floating_point and _widens(source, target):
            return x
        cx.refuse(f"a conversion from {source} to {target} is not translated (it rounds)")
    if target.is_floating_point or target.itemsize >= source.itemsize:
        return x                                           # integers read as numbers
    cx.refuse(f"a conversion from {source} to {target} is not translated (it may wrap)")


# A tensor of the operand's shape, filled: a constant (only the operand's shape is read).
_entry("aten.full_like.default")(lambda cx, a: cx.full(a.fill_value))
_entry("aten.zeros_like.default")(lambda cx, a: cx.full(0))
_entry("aten.ones_like.default")(lambda cx, a: cx.full(1))


# ----- shape and movement ------------------------------------------------------------------------
@_entry("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
        "aten.flatten.using_ints", "aten.unflatten.int", "aten.unsqueeze.default",
        "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _reshape(cx, a):
    x = a.self
    if cx.shape(x) == cx.out_shape:
        return x
    return cx.move("reshape", x, shape=cx.shape(x), to=cx.out_shape)


def _permuted(cx, x, perm):
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return cx.move("permute", x, shape=cx.shape(x), perm=perm)


@_entry("aten.permute.default")
def _permute(cx, a):
    rank = len(cx.shape(a.self))
    return _permuted(cx, a.self, [axis_of(d, rank) for d in a.dims])


@_entry("aten.transpose.int")
def _transpose(cx, a):
    rank = len(cx.shape(a.self))
    perm = list(range(rank))
    i, j = axis_of(a.dim0, rank), axis_of(a.dim1, rank)
    perm[i], perm[j] = perm[j], perm[i]
    return _permuted(cx, a.self, perm)


@_entry("aten.t.default")
def _t(cx, a):
    return _permuted(cx, a.self, [1, 0]) if len(cx.shape(a.self)) == 2 else a.self


@_entry("aten.expand.default")
def _expand(cx, a):
    return cx.like(a.self, cx.out_shape)


def sliced(cx, x, axis, start, stop, step=1):
    """x[start:stop:step] along ``axis`` (bounds already in [0, n]); an empty piece is a
    constant with no entries."""
    shape = cx.shape(x)
    if (start, stop, step) == (0, shape[axis], 1):
        return x
    if stop <= start:
        piece = tuple(0 if d == axis else n for d, n in enumerate(shape))
        return cx.empty(piece, cx.dtype(x))
    return cx.move("slice", x, shape=shape, axis=axis, start=start, stop=stop, step=step)


@_entry("aten.slice.Tensor")
def _slice(cx, a):
    shape = cx.shape(a.self)
    axis = axis_of(a.dim, len(shape))
    n = shape[axis]
    start = 0 if a.start is None else a.start
    stop = n if a.end is None else a.end
    start, stop = (min(max(axis_of(v, n) if v < 0 else v, 0), n) for v in (start, stop))
    return sliced(cx, a.self, axis, start, stop, a.step)


@_entry("aten.slice_scatter.default")
def _slice_scatter(cx, a):
    """x with x[start:end] along ``dim`` replaced by src: select(inside, pad(src), x), an
    exact choice of entries; the gradient of the replaced entries goes to src, the others'
    to x (as torch's slice_scatter backward)."""
    x, src, shape = a.self, a.src, cx.shape(a.self)
    axis = axis_of(a.dim, len(shape))
    n = shape[axis]
    start, stop, step = slice(a.start, a.end, a.step).indices(n)
    if step != 1:
        cx.refuse(f"slice_scatter with step {step} is not translated (only 1)")
    if stop <= start:
        return x
    element = "bool" if cx.kind(x) == "bool" else "scalar"
    if integral(cx.out_dtype):                         # integers: as words
        x, src, element = words(cx, x), words(cx, src), WORD
    before = [0] * len(shape)
    after = [0] * len(shape)
    before[axis], after[axis] = start, n - stop
    inner = cx.shape(src)
    padded = cx.move("pad", cx.like(src, inner), shape=inner, before=before, after=after)
    inside = cx.inside_mask(inner, before, after)
    return cx.apply("select", inside, padded, cx.like(x, shape), shape=shape,
                    element=element)


@_entry("aten.select.int")
def _select(cx, a):
    shape = cx.shape(a.self)
    axis = axis_of(a.dim, len(shape))
    i = axis_of(a.index, shape[axis])
    part = cx.move("slice", a.self, shape=shape, axis=axis, start=i, stop=i + 1, step=1)
    return cx.move("reshape", part, shape=cx.shape(part), to=cx.out_shape)


# ----- joining and splitting ---------------------------------------------------------------------
@_entry("aten.cat.default")
def _cat(cx, a):
    parts = [t for t in a.tensors if 0 not in cx.shape(t)]
    if not parts:
        return cx.empty(cx.out_shape, cx.out_dtype)
    rank = len(cx.out_shape)
    axis = axis_of(a.dim, rank)
    if len(parts) == 1:
        return parts[0]
    kinds = {cx.kind(t) for t in parts}
    if kinds & {"index", "integer"}:                    # integers: joined as words
        return cx.apply("cat", *[words(cx, t) for t in parts], shape=cx.out_shape, axis=axis,
                        sizes=[cx.shape(t)[axis] for t in parts], element=WORD)
    element = "bool" if kinds == {"bool"} else "scalar"
    if element == "scalar" and "bool" in kinds:
        cx.refuse("cat of Booleans with numbers is not translated")
    return cx.apply("cat", *parts, shape=cx.out_shape, axis=axis,
                    sizes=[cx.shape(t)[axis] for t in parts], element=element)


def _pieces(cx, x, axis, sizes):
    out, start = [], 0
    for n in sizes:
        out.append(sliced(cx, x, axis, start, start + n))
        start += n
    return tuple(out)


@_entry("aten.split_with_sizes.default")
def _split_with_sizes(cx, a):
    shape = cx.shape(a.self)
    return _pieces(cx, a.self, axis_of(a.dim, len(shape)), list(a.split_sizes))


@_entry("aten.split.Tensor")
def _split(cx, a):
    shape = cx.shape(a.self)
    axis = axis_of(a.dim, len(shape))
    n, step = shape[axis], a.split_size
    sizes = [min(step, n - s) for s in range(0, n, step)] if step > 0 else [n]
    return _pieces(cx, a.self, axis, sizes or [0])


@_entry("aten.unbind.int")
def _unbind(cx, a):
    shape = cx.shape(a.self)
    axis = axis_of(a.dim, len(shape))
    rest = shape[:axis] + shape[axis + 1:]
    return tuple(cx.move("reshape", p, shape=cx.shape(p), to=rest)
                 for p in _pieces(cx, a.self, axis, [1] * shape[axis]))


# ----- advanced indexing -------------------------------------------------------------------------
@_entry("aten.index.Tensor")
def _index(cx, a):
    """x[indices] with constant index tensors: gather on the flattened x at the positions
    torch's indexing selects from the table of positions; with computed ones
    aten_integers.advanced_index."""
    shape = cx.shape(a.self)
    if any(cx.is_ref(i) for i in a.indices if i is not None):
        return advanced_index(cx, a.self, list(a.indices))
    positions = cx.positions(shape, a.indices)
    count = 1
    for n in shape:
        count *= n
    flat = cx.move("reshape", a.self, shape=shape, to=(count,)) if len(shape) != 1 \
        else a.self
    return cx.move("gather", flat, cx.indices(positions, count), shape=(count,), axes=(0,),
                   batch=0, index_shape=cx.out_shape)


# ----- comparisons and Boolean connectives -------------------------------------------------------
def _comparison(op_name):
    def translate(cx, a):
        s = cx.out_shape
        x, y = a.self, a.other
        if is_integer(cx, x) or is_integer(cx, y):       # integers: compared as words
            if isinstance(y, float) and y.is_integer():
                y = int(y)
            return cx.apply(op_name, words(cx, x, s), words(cx, y, s), shape=s, element=WORD)
        kinds = {cx.kind(v) for v in (x, y)}
        element = "bool" if kinds == {"bool"} else "scalar"
        if element == "scalar" and "bool" in kinds:
            cx.refuse("comparisons of Booleans with numbers are not translated")
        if element == "scalar" and isinstance(y, (int, float)):
            y = float(y)
        return cx.apply(op_name, cx.like(x, s), cx.like(y, s), shape=s, element=element)
    return translate


for _aten in ("eq", "ne", "lt", "le", "gt", "ge"):
    _entry(f"aten.{_aten}.Tensor", f"aten.{_aten}.Scalar")(_comparison(_aten))


def _predicate(op_name):
    """isnan, isinf, isfinite of numbers: Booleans (IEEE's classes)."""
    def translate(cx, a):
        if cx.kind(a.self) != "scalar":
            cx.refuse(f"{op_name} of Booleans or integers is not translated")
        return cx.apply(op_name, a.self, shape=cx.out_shape)
    return translate


for _aten, _op in (("isnan", "isNaN"), ("isinf", "isInf"), ("isfinite", "isFinite")):
    _entry(f"aten.{_aten}.default")(_predicate(_op))


def _connective(op_name):
    def translate(cx, a):
        s = cx.out_shape
        operands = [a.self] + ([a.other] if "other" in a else [])
        if any(cx.kind(v) != "bool" for v in operands):
            cx.refuse("bitwise and logical operators on numbers or integers are not "
                      "translated (only on Booleans)")
        return cx.apply(op_name, *(cx.like(v, s) for v in operands), shape=s)
    return translate


for _aten, _op in (("bitwise_and", "logicalAnd"), ("bitwise_or", "logicalOr"),
                   ("bitwise_xor", "logicalXor"), ("logical_and", "logicalAnd"),
                   ("logical_or", "logicalOr"), ("logical_xor", "logicalXor")):
    _entry(f"aten.{_aten}.Tensor" if _aten.startswith("bitwise") else f"aten.{_aten}.default"
           )(_connective(_op))
_entry("aten.bitwise_not.default", "aten.logical_not.default")(_connective("logicalNot"))


# ----- clamping ----------------------------------------------------------------------------------
def _clamped(cx, x, lo, hi):
    """clamp with number bounds; with tensor bounds (clamp.Tensor: cosine similarity's
    eps) min(max(x, lo), hi), each bound broadcast (the values of torch's clamp; at a tie
    the gradient goes where ``max`` and ``min`` send it)."""
    cx.scalar_result()
    if not all(isinstance(v, (int, float, type(None))) for v in (lo, hi)):
        s = cx.out_shape
        y = cx.like(x, s)
        for op_name, bound in (("max", lo), ("min", hi)):
            if bound is not None:
                bound = float(bound) if isinstance(bound, (int, float)) else bound
                y = cx.apply(op_name, y, cx.like(bound, s), shape=s)
        return y
    lo = -float("inf") if lo is None else float(lo)
    hi = float("inf") if hi is None else float(hi)
    return cx.apply("clamp", x, lo, hi, shape=cx.shape(x))


_entry("aten.clamp.default", "aten.clamp.Tensor")(
    lambda cx, a: _clamped(cx, a.self, a.min, a.max))
_entry("aten.clamp_min.default", "aten.clamp_min.Tensor")(
    lambda cx, a: _clamped(cx, a.self, a.min, None))
_entry("aten.clamp_max.default", "aten.clamp_max.Tensor")(
    lambda cx, a: _clamped(cx, a.self, None, a.max))


@_entry("aten.hardtanh.default")
def _hardtanh(cx, a):
    """hardtanh (ReLU6): clamp's values, but torch's hardtanh_backward passes the gradient
    only strictly inside (min < x < max), where clamp's passes it at the bounds too (a
    ReLU's exact zeros sit on ReLU6's lower bound).  So: select(min < x < max, x,
    clamp(detach(x))): the same values, the gradient only strictly inside, none at NaN."""
    x, s = a.self, cx.shape(a.self)
    lo, hi = float(a.min_val), float(a.max_val)
    inside = cx.apply("logicalAnd", cx.apply("gt", x, cx.like(lo, s), shape=s),
                      cx.apply("lt", x, cx.like(hi, s), shape=s), shape=s)
    clamped = _clamped(cx, cx.apply("detach", x, shape=s), lo, hi)
    return cx.apply("select", inside, x, clamped, shape=s)


# ----- copies by positions, flips, padding ------------------------------------------------------
# Operators that only copy entries of their first operand: a gather at the positions torch
# itself computes on the table of positions (cx.by_positions).
_entry("aten.as_strided.default", "aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec",
       "aten.upsample_nearest3d.vec", "aten.upsample_nearest1d.default",
       "aten.upsample_nearest2d.default", "aten.upsample_nearest3d.default",
       "aten._upsample_nearest_exact1d.vec", "aten._upsample_nearest_exact2d.vec",
       "aten._upsample_nearest_exact3d.vec", "aten.roll.default", "aten.repeat.default",
       "aten.pixel_shuffle.default", "aten.pixel_unshuffle.default",
       "aten.channel_shuffle.default", "aten.diagonal.default")(lambda cx, a: cx.by_positions(a.self if "self" in a
                                                                       else a.input))


@_entry("aten.index_select.default")
def _index_select(cx, a):
    """x.index_select(dim, index): by positions for constant indices, else gather with the
    index tensor (an index port bounded by the axis' extent)."""
    if not cx.is_ref(a.index):
        return cx.by_positions(a.self)
    shape = cx.shape(a.self)
    axis = axis_of(a.dim, len(shape))
    moved = _permuted(cx, a.self, [axis] + [d for d in range(len(shape)) if d != axis])
    front = (shape[axis],) + tuple(n for d, n in enumerate(shape) if d != axis)
    picked = cx.move("gather", moved, cx.indices(a.index, shape[axis]), shape=front,
                     axes=(0,), batch=0, index_shape=cx.shape(a.index))
    back = list(range(1, axis + 1)) + [0] + list(range(axis + 1, len(shape)))
    return _permuted(cx, picked, back)


@_entry("aten.flip.default")
def _flip(cx, a):
    shape = cx.shape(a.self)
    axes = axes_of(list(a.dims), len(shape)) if len(a.dims) else ()
    if not axes:
        return a.self
    return cx.move("flip", a.self, shape=shape, axes=axes)


@_entry("aten.constant_pad_nd.default")
def _constant_pad(cx, a):
    """constant_pad_nd: (before, after) pairs from the last axis backwards; negative ones
    crop (a slice).  ``pad`` adds zeros; another value v is select(inside, padded, v), an
    exact choice of entries."""
    x, shape = a.self, cx.shape(a.self)
    rank = len(shape)
    before, after = [0] * rank, [0] * rank
    for k in range(len(a.pad) // 2):
        before[rank - 1 - k], after[rank - 1 - k] = a.pad[2 * k], a.pad[2 * k + 1]
    for d in range(rank):                       # crops first
        lo, hi = max(-before[d], 0), cx.shape(x)[d] - max(-after[d], 0)
        if (lo, hi) != (0, cx.shape(x)[d]):
            x = sliced(cx, x, d, lo, hi)
    before, after = [max(v, 0) for v in before], [max(v, 0) for v in after]
    if not any(before) and not any(after):
        return x
    kind = cx.kind(x)
    if kind in ("index", "integer"):                   # integers: padded as words
        x, kind = words(cx, x), "integer"
    inner = cx.shape(x)
    padded = cx.move("pad", x, shape=inner, before=before, after=after)
    value = a.value if a.value is not None else 0
    if value == 0 and not (isinstance(value, float) and str(value).startswith("-")):
        return padded
    inside = cx.inside_mask(inner, before, after)
    if kind == "integer":
        return cx.apply("select", inside, padded, words(cx, int(value), cx.out_shape),
                        shape=cx.out_shape, element=WORD)
    fill = cx.like(bool(value) if kind == "bool" else float(value), cx.out_shape)
    return cx.apply("select", inside, padded, fill, shape=cx.out_shape,
                    element="bool" if kind == "bool" else "scalar")

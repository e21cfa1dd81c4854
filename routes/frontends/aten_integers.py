"""Integer tensors a model computes (the conventions of routes.frontends.aten): RoBERTa's
positions counted from ``input_ids``, BART's decoder inputs shifted from the labels, a
loss's labels padded with -100, lengths summed from a mask.  torch is never imported here;
``cx`` is the capture (routes.frontends.torch).

Integer results are int64 words (spec: "Ports And Element Sorts": add, sub, mul, max, min,
the comparisons, select, pad, slice, cat and the movement operators at element int64
compute PyTorch's integer meaning, wrapping, without gradients).  ``words`` reads an
operand as words: an index tensor through ``encodeIndex``, Booleans as select(b, 1, 0), an
integer constant or number as a constant.  A result of a narrower type (int32, int16,
int8, uint8) is wrapped to it after each operation, as PyTorch's arithmetic in that type
wraps: the low bits sign-extended (shift left then arithmetic shift right by 64 - width)
or masked (uint8).  Words are read as indices through ``decodeIndex`` (an embedding, a
gather: a word outside the bound is refused when the graph runs) and as numbers through
``numbers``.

Operations without an element argument are composed exactly from those that have one:

- ``cumsum`` is the scan of Hillis and Steele, log2(n) steps of y + (y shifted by 2^k);
  wrapping addition is associative, so this is the sequential sum bit for bit;
- ``sum`` halves its axes (log2(n) steps of adding the two halves, padded with a zero word
  to an even extent);
- ``gather`` by a computed index reads the flattened operand at positions
  index * stride + (the other coordinates' offset), computed in words; advanced indexing
  by computed index tensors (``logits[arange(n), last]``) likewise;
- ``argmax`` / ``argmin`` of integers: the extremum by halving, then the least position
  holding it.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from . import registrar

TABLE: dict[str, Callable] = {}
_entry = registrar(TABLE, "aten table")

WORD = "int64"
_NARROW = {"torch.int32": 32, "torch.int16": 16, "torch.int8": 8}
_INDEX_BOUND = 2 ** 53           # words read as numbers: binary64 holds them exactly


def integral(dtype) -> bool:
    """Whether torch dtype ``dtype`` is an integer type (not bool, not floating)."""
    return dtype is not None and not dtype.is_floating_point and str(dtype) != "torch.bool" \
        and not dtype.is_complex


def is_integer(cx, v) -> bool:
    """Whether ``v`` holds integers the graph computes (an index or word graph value)."""
    return cx.is_ref(v) and cx.port(v).kind in ("index", "integer")


def words(cx, v, shape=None):
    """``v`` as int64 words (broadcast to ``shape`` when given): a word value as it is, an
    index tensor encoded, Booleans as 1 and 0, an integer constant or number as a
    constant.  Numbers the graph computes are not read as integers (that conversion
    rounds)."""
    if cx.is_ref(v):
        port = cx.port(v)
        if port.kind == "index":
            if len(port.bounds) != 1:
                cx.refuse(f"{port} read as integers is not translated")
            v = cx.apply("encodeIndex", v, shape=port.shape, bounds=port.bounds, element=WORD)
        elif port.kind == "bool":
            s = port.shape
            word = cx.apply("select", v, cx.integers(1, s), cx.integers(0, s), shape=s,
                            element=WORD)
            cx.booleans[word] = v
            v = word
        elif port.kind != "integer":
            cx.refuse("a conversion of numbers to integers is not translated (it rounds)")
    else:
        v = cx.integers(v)
    return v if shape is None else cx.like(v, shape)


def wrap(cx, w, dtype):
    """Words ``w`` wrapped to torch dtype ``dtype`` (PyTorch's arithmetic in that type)."""
    s = cx.shape(w)
    if str(dtype) == "torch.uint8":
        return cx.apply("bitwiseAnd", w, cx.integers(255, s), shape=s, element=WORD)
    bits = _NARROW.get(str(dtype))
    if bits is None:
        return w
    k = cx.integers(64 - bits, s)
    up = cx.apply("bitwiseLeftShift", w, k, shape=s, element=WORD)
    return cx.apply("shiftRightArithmetic", up, k, shape=s, element=WORD)


def numbers(cx, w):
    """Words ``w`` read as numbers, each rounded once into the run's format as torch's
    conversion rounds it: Booleans' words by ``cast`` of the Booleans, other words as the
    difference of their non-negative and negative parts, each decoded as an index below
    2**53 and cast (one part is 0, so the difference is the cast value)."""
    b = cx.booleans.get(w)
    s = cx.shape(w)
    if b is not None:
        return cx.apply("cast", b, shape=s)
    zero = cx.integers(0, s)
    parts = []
    for test, magnitude in (("ge", w), ("lt", cx.apply("neg", w, shape=s, element=WORD))):
        keep = cx.apply(test, w, zero, shape=s, element=WORD)
        part = cx.apply("select", keep, magnitude, zero, shape=s, element=WORD)
        index = cx.apply("decodeIndex", part, shape=s, bounds=(_INDEX_BOUND,), element=WORD)
        parts.append(cx.apply("cast", index, shape=s, source="index",
                              bounds=(_INDEX_BOUND,)))
    return cx.apply("sub", parts[0], parts[1], shape=s)


def binary(cx, a, op_name):
    """add, sub (``alpha`` scaling the second operand), mul, max, min on integers."""
    s = cx.out_shape
    x, y = words(cx, a.self, s), words(cx, a.other, s)
    alpha = a.get("alpha", 1)
    if alpha != 1:
        y = cx.apply("mul", y, cx.integers(alpha, s), shape=s, element=WORD)
    return wrap(cx, cx.apply(op_name, x, y, shape=s, element=WORD), cx.out_dtype)


def _shifted(cx, w, axis, step):
    """w shifted by ``step`` along ``axis`` (zeros in front, the last entries dropped)."""
    s = cx.shape(w)
    head = cx.apply("slice", w, shape=s, axis=axis, start=0, stop=s[axis] - step, step=1,
                    element=WORD)
    before = [0] * len(s)
    before[axis] = step
    return cx.apply("pad", head, shape=cx.shape(head), before=before, after=[0] * len(s),
                    element=WORD)


def scan(cx, w, axis):
    """The cumulative sum of words ``w`` along ``axis`` (Hillis-Steele, above)."""
    s, step = cx.shape(w), 1
    while step < s[axis]:
        w = cx.apply("add", w, _shifted(cx, w, axis, step), shape=s, element=WORD)
        step *= 2
    return w


_FOLD_PAD = {"add": 0, "max": -(1 << 63), "min": (1 << 63) - 1}   # the fold's neutral word


def fold(cx, w, axes, keepdim, op="add"):
    """Words ``w`` folded by ``op`` (add, max, min) over ``axes`` (halving, above)."""
    for axis in axes:
        while cx.shape(w)[axis] > 1:
            s = cx.shape(w)
            n = s[axis]
            if n % 2:                          # one neutral word makes the extent even
                after = [0] * len(s)
                after[axis] = 1
                padded = tuple(m + a for m, a in zip(s, after))
                w = cx.apply("select", cx.inside_mask(s, [0] * len(s), after),
                             cx.apply("pad", w, shape=s, before=[0] * len(s), after=after,
                                      element=WORD),
                             cx.integers(_FOLD_PAD[op], padded), shape=padded, element=WORD)
                s, n = padded, n + 1
            halves = [cx.apply("slice", w, shape=s, axis=axis, start=lo, stop=lo + n // 2,
                               step=1, element=WORD) for lo in (0, n // 2)]
            w = cx.apply(op, *halves, shape=cx.shape(halves[0]), element=WORD)
    if keepdim:
        return w
    s = cx.shape(w)
    kept = tuple(n for d, n in enumerate(s) if d not in axes)
    return cx.apply("reshape", w, shape=s, to=kept, element=WORD)


def total(cx, w, axes, keepdim):
    """The sum of words ``w`` over ``axes``."""
    return fold(cx, w, axes, keepdim, "add")


@_entry("aten.cumsum.default")
def _cumsum(cx, a):
    shape = cx.shape(a.self)
    axis = a.dim + len(shape) if a.dim < 0 else a.dim
    if a.get("dtype") is not None and not integral(cx.out_dtype) and \
            not cx.same_dtype(a.self):
        cx.refuse(f"a cumsum into {a.dtype} is not translated (it rounds)")
    if integral(cx.out_dtype):
        return wrap(cx, scan(cx, words(cx, a.self), axis), cx.out_dtype)
    cx.scalar_result()
    return cx.apply("cumsum", a.self, shape=shape, axis=axis)


@_entry("aten.gather.default")
def _gather(cx, a):
    """torch.gather(x, dim, index)."""
    shape, ishape = cx.shape(a.self), cx.shape(a.index)
    axis = a.dim + len(shape) if a.dim < 0 else a.dim
    if len(ishape) != len(shape) or any(i > n for d, (i, n) in enumerate(zip(ishape, shape))
                                        if d != axis):
        cx.refuse(f"index {list(ishape)} must have the rank of the input {list(shape)} and "
                  f"no larger extent off the gathered axis")
    return gather_along(cx, a.self, axis, a.index)


def gather_along(cx, x, axis, index):
    """y[..i..] = x[..index[..i..] along axis..] (torch.gather; ``index`` of x's rank, no
    larger extent off the axis): the flattened x at positions index * stride(axis) + the
    offset of the other coordinates (words), decoded below x's size; its gradient sums
    repeated reads, as gather's backward."""
    shape, ishape = cx.shape(x), cx.shape(index)
    rank = len(shape)
    count = math.prod(shape)
    if count >= _INDEX_BOUND:
        cx.refuse("gathering from more than 2**53 entries is not translated")
    strides = [math.prod(shape[d + 1:]) for d in range(rank)]
    offset = cx.offsets(ishape, strides, skip=axis)
    along = cx.apply("mul", words(cx, index), cx.integers(strides[axis], ishape),
                     shape=ishape, element=WORD)
    position = cx.apply("add", along, offset, shape=ishape, element=WORD)
    flat_index = cx.apply("decodeIndex", position, shape=ishape, bounds=(count,),
                          element=WORD)
    if is_integer(cx, x) or not cx.is_ref(x) and integral(cx.dtype(x)):
        x, element = words(cx, x), WORD
    else:
        element = cx.element(x)
    flat = cx.apply("reshape", x, shape=shape, to=(count,), element=element) \
        if rank != 1 else x
    return cx.apply("gather", flat, flat_index, shape=(count,), axes=(0,), batch=0,
                    index_shape=ishape, element=element)


@_entry("aten.argmax.default", "aten.argmin.default")
def _argmax(cx, a):
    """argmax / argmin: the registered operator on numbers (an index result); on integers
    the first position holding the extremum, composed from words: the extremum by halving,
    then the least position among those equal to it."""
    largest = str(cx.node.target).startswith("aten.argmax")
    x, shape = a.self, cx.shape(a.self)
    if a.dim is None:
        count = math.prod(shape)
        x = cx.move("reshape", x, shape=shape, to=(count,)) if len(shape) != 1 else x
        shape, axis, keep = (count,), 0, False
    else:
        axis, keep = (a.dim + len(shape) if a.dim < 0 else a.dim), bool(a.keepdim)
    if not is_integer(cx, x) and cx.kind(x) != "bool":
        y = cx.apply("argmax" if largest else "argmin", x, shape=shape, axis=axis,
                     keepdim=keep)
        return y if a.dim is not None or not a.keepdim else cx.move(
            "reshape", y, shape=cx.shape(y), to=cx.out_shape)
    w = words(cx, x)
    best = fold(cx, w, (axis,), True, "max" if largest else "min")
    hit = cx.apply("eq", w, cx.like(best, shape), shape=shape, element=WORD)
    positions = cx.offsets(shape, [1 if d == axis else 0 for d in range(len(shape))],
                           skip=None)
    candidates = cx.apply("select", hit, positions, cx.integers(shape[axis], shape),
                          shape=shape, element=WORD)
    y = fold(cx, candidates, (axis,), keep, "min")
    return y if cx.shape(y) == cx.out_shape else cx.apply(
        "reshape", y, shape=cx.shape(y), to=cx.out_shape, element=WORD)


def advanced_index(cx, x, indices):
    """x[indices] with index tensors the model computes (PyTorch's advanced indexing:
    the index tensors broadcast to one shape B; the indexed axes, moved first, are read at
    the flat position sum_j i_j * stride_j (negative indices count from the end), by
    ``gather``; B takes the indexed axes' place when they are adjacent, else it leads)."""
    shape = cx.shape(x)
    rank = len(shape)
    adv = [j for j, i in enumerate(indices) if i is not None]
    if any(cx.kind(indices[j]) == "bool" or not cx.is_ref(indices[j]) and
           not integral(cx.dtype(indices[j])) for j in adv):
        cx.refuse("Boolean or floating index tensors computed by the model are not "
                  "translated")
    rest = [d for d in range(rank) if d not in adv]
    if adv + rest != list(range(rank)):
        x = cx.move("permute", x, shape=shape, perm=tuple(adv + rest))
    b = tuple(np.broadcast_shapes(*[cx.shape(indices[j]) for j in adv]))
    sizes = [shape[j] for j in adv]
    count = math.prod(sizes)
    position = None
    for k, j in enumerate(adv):
        w = words(cx, indices[j], b)
        n = cx.integers(sizes[k], b)
        negative = cx.apply("lt", w, cx.integers(0, b), shape=b, element=WORD)
        w = cx.apply("select", negative, cx.apply("add", w, n, shape=b, element=WORD), w,
                     shape=b, element=WORD)
        stride = math.prod(sizes[k + 1:])
        if stride != 1:
            w = cx.apply("mul", w, cx.integers(stride, b), shape=b, element=WORD)
        position = w if position is None else cx.apply("add", position, w, shape=b,
                                                        element=WORD)
    index = cx.apply("decodeIndex", position, shape=b, bounds=(count,), element=WORD)
    moved = cx.shape(x)
    flat = (count,) + tuple(moved[len(adv):])
    if moved != flat:
        x = cx.move("reshape", x, shape=moved, to=flat)
    y = cx.move("gather", x, index, shape=flat, axes=(0,), batch=0, index_shape=b)
    first = adv[0]
    if adv == list(range(first, first + len(adv))) and first > 0:
        ys = cx.shape(y)
        nb = len(b)
        perm = tuple(range(nb, nb + first)) + tuple(range(nb)) + \
            tuple(range(nb + first, len(ys)))
        y = cx.move("permute", y, shape=ys, perm=perm)
    return y

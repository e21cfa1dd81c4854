"""The primitive table of the JAX import (spec: "Import Coverage"): jaxpr primitive -> the
registered operators that compute it.  jax is never imported here: an entry receives the
import context ``cx`` (routes.frontends.jax) and the equation's operands, each a ``Ref`` (a
graph value), a ``Const`` (an array: a literal, a const, a folded equation) or an ``Int``
(indices), and returns the equation's value or a tuple of them (one per output).

What an entry may rely on: ``cx.params`` (the equation's parameters), ``cx.out_shape`` /
``cx.out_dtype`` (its first output's), ``cx.shape(v)``, ``cx.like(v, shape)`` (jax's
broadcasting of a rank-0 operand), ``cx.apply(name, *values, **attributes)``,
``cx.index_ref(v, bounds, shape)`` (indices at an index port), ``cx.refuse(reason)``.
An entry marked ``integers`` handles Int operands and integer results itself (the others'
integer results are refused where read); one marked ``lazy`` may receive results that are
refused where read and leave them unread.

Translations beyond one operator each:

- ``dot_general``: ``matmul`` for x[..., k] with y[k, n]; ``contract`` (tensordot) for other
  products without batch dimensions; with batch dimensions, permutes to (batch, free,
  contracted) and (batch, contracted, free), reshapes to matrices, ``matmul``, reshape back;
- ``conv_general_dilated``: ``conv`` in PyTorch's layout (permutes from jax's dimension
  numbers; asymmetric padding is the symmetric part in ``conv`` after a zero ``pad``);
- ``reduce_window_max``: ``pool`` (max) over the windowed axes moved last;
  ``reduce_window_sum`` read by a division by the window size (flax's avg_pool): ``pool``
  (average, padding counted);
- ``gather`` / ``scatter*``: the table's ``gather`` / ``scatter`` layout (batching dimensions
  leading, each indexed axis collapsed, whole slices of the other axes), with permutes into
  jax's output layout; ``embedding`` for rows of a matrix (jnp.take(w, ids, axis=0), w[ids]);
- ``integer_pow``: ``square`` at 2, ``reciprocal`` at -1, else ``pow`` with the exponent as a
  constant; ``mul`` by a rank-0 constant: ``scale``;
- ``cumsum``... with ``reverse``: flip, scan, flip; ``sort`` of one operand, or of an operand
  and an iota (argsort): ``sort`` (values, indices).

Refused here (one line each): conversions that round (a float to a narrower float, floats to
integers); integer arithmetic; a ``select_n`` of more than two cases on data; padding with a
value other than +0 or interior padding; ``lhs_dilation`` and ``batch_group_count``;
gathers and scatters outside the table's layout; sorts on several keys; a dot or a
convolution with a non-default precision or a wider ``preferred_element_type``.

Known difference (the table's convention): lax.clamp sends no gradient to x at the bounds,
the table's clamp sends the whole cotangent there (inclusive bounds, as PyTorch).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from ..graph import Ref
from . import registrar

TABLE: dict[str, Callable] = {}


# ----- the operands an entry receives besides a Ref ----------------------------------------------
class Const:
    """An array the import holds as a constant (a literal, a const, a folded equation) at
    jax's dtype; ``name`` labels its graph constant."""

    def __init__(self, array, name=""):
        self.array, self.name = np.asarray(array), name
        self.refs = {}                         # port -> Ref, once materialized


@dataclasses.dataclass(frozen=True)
class Int:
    """Integer indices: ``ref`` the graph value (an index port; an integer input's word port
    while its bound is unknown), ``shape`` jax's shape of them (the port's with unit axes
    added or removed), ``dtype`` jax's dtype; ``input`` and ``example`` for an integer
    input."""

    ref: Ref
    shape: tuple
    dtype: object
    input: str = ""
    example: object = None


_entry = registrar(TABLE, "jaxpr table", integers=False, lazy=False)


def _is_float(dtype) -> bool:
    return dtype is not None and (dtype.kind == "f" or "float" in dtype.name)


def _floating(cx):
    if not _is_float(cx.out_dtype):
        cx.refuse(f"arithmetic on {cx.out_dtype} values is not translated")


def _squeezed(shape):
    return tuple(n for n in shape if n != 1)


def _int_view(cx, v, shape):
    """Indices ``v`` at jax shape ``shape`` (unit axes added or removed only)."""
    if _squeezed(v.shape) != _squeezed(shape):
        cx.refuse(f"moving indices from {list(v.shape)} to {list(shape)} is not translated "
                  f"(only unit axes may be added or removed)")
    return type(v)(v.ref, tuple(shape), cx.out_dtype, v.input, v.example)


def _reshaped(cx, x, to):
    to = tuple(to)
    s = cx.shape(x)
    if s == to:
        return x
    return cx.apply("reshape", x, shape=s, to=to, element=cx.element(x))


def _permuted(cx, x, perm):
    perm = tuple(int(p) for p in perm)
    if perm == tuple(range(len(perm))):
        return x
    return cx.apply("permute", x, shape=cx.shape(x), perm=perm, element=cx.element(x))


def _is_int(v) -> bool:
    return isinstance(v, Int)


def _is_const(v) -> bool:
    return isinstance(v, Const)


# ----- elementwise ------------------------------------------------------------------------------
_UNARY = {"neg": "neg", "exp": "exp", "exp2": "exp2", "log": "log", "log1p": "log1p",
          "expm1": "expm1", "tanh": "tanh", "logistic": "sigmoid", "sin": "sin", "cos": "cos",
          "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
          "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sqrt": "sqrt",
          "rsqrt": "rsqrt", "cbrt": "cbrt", "abs": "abs", "sign": "sign", "floor": "floor",
          "ceil": "ceil", "erf": "erf", "square": "square"}


def _unary(op_name):
    def translate(cx, x):
        _floating(cx)
        return cx.apply(op_name, x, shape=cx.out_shape)
    return translate


for _prim, _op in _UNARY.items():
    _entry(_prim)(_unary(_op))
# jax.nn.relu: a custom_jvp_call around max(x, 0) (routes.frontends.jax recognizes it).
RELU = _unary("relu")
RELU.integers = RELU.lazy = False


@_entry("round")
def _round(cx, x):
    _floating(cx)
    method = cx.params.get("rounding_method")
    if getattr(method, "name", str(method)) not in ("TO_NEAREST_EVEN", "1"):
        cx.refuse(f"rounding_method={method} is not translated (the table's round ties to "
                  f"even, as jnp.round)")
    return cx.apply("round", x, shape=cx.out_shape)


@_entry("is_finite")
def _is_finite(cx, x):
    return cx.apply("isFinite", x, shape=cx.out_shape)


@_entry("not")
def _not(cx, x):
    if cx.out_dtype != bool:
        cx.refuse("bitwise not on integers is not translated")
    return cx.apply("logicalNot", x, shape=cx.out_shape)


def _binary(op_name):
    def translate(cx, x, y):
        _floating(cx)
        s = cx.out_shape
        if op_name == "mul":
            for a, b in ((x, y), (y, x)):
                if _is_const(b) and b.array.shape == () and s != ():
                    return cx.apply("scale", a, b, shape=s)
        return cx.apply(op_name, cx.like(x, s), cx.like(y, s), shape=s)
    return translate


for _prim, _op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("max", "max"),
                   ("min", "min"), ("pow", "pow"), ("atan2", "atan2"), ("rem", "fmod"),
                   ("nextafter", "nextafter")):
    _entry(_prim)(_binary(_op))                # div: below, with average pooling


def _logic(op_name):
    def translate(cx, x, y):
        if cx.out_dtype != bool:
            cx.refuse("bitwise operations on integers are not translated")
        s = cx.out_shape
        return cx.apply(op_name, cx.like(x, s), cx.like(y, s), shape=s)
    return translate


for _prim, _op in (("and", "logicalAnd"), ("or", "logicalOr"), ("xor", "logicalXor")):
    _entry(_prim)(_logic(_op))


@_entry("integer_pow")
def _integer_pow(cx, x):
    _floating(cx)
    s, y = cx.out_shape, int(cx.params["y"])
    if y == 1:
        return x
    if y == 2:
        return cx.apply("square", x, shape=s)
    if y == -1:
        return cx.apply("reciprocal", x, shape=s)
    return cx.apply("pow", x, cx.like(_const(cx, float(y)), s), shape=s)


def _const(cx, value):
    return Const(np.asarray(value, dtype=np.float64), f"{cx.label}.number")


@_entry("clamp")
def _clamp(cx, lo, x, hi):
    """clamp(lo, x, hi): ``clamp`` with rank-0 constant bounds, else max then min."""
    _floating(cx)
    s = cx.out_shape
    if _is_const(lo) and _is_const(hi) and lo.array.shape == () and hi.array.shape == ():
        return cx.apply("clamp", x, lo, hi, shape=s)
    low = cx.apply("max", cx.like(x, s), cx.like(lo, s), shape=s)
    return cx.apply("min", low, cx.like(hi, s), shape=s)


# ----- comparisons and selection -----------------------------------------------------------------
# Tests of an index i against a constant c that hold for every i >= 0 (or none): the index
# port's check keeps i in [0, bound), so jnp's normalization of negative indices is moot.
_SIGN_TESTS = {"lt": lambda c: False if c <= 0 else None, "ge": lambda c: True if c <= 0 else None,
               "gt": lambda c: True if c < 0 else None, "le": lambda c: False if c < 0 else None}
_MIRROR = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}


def _compare(op_name):
    def translate(cx, x, y):
        s = cx.out_shape
        if _is_int(x) or _is_int(y):
            name = op_name if _is_int(x) else _MIRROR[op_name]
            c = y if _is_int(x) else x
            held = np.unique(c.array) if _is_const(c) else ()
            test = _SIGN_TESTS.get(name)
            answer = test(held[0]) if test is not None and len(held) == 1 else None
            if answer is None:
                return cx.missing("comparisons of indices other than with 0 are not "
                                  "translated")
            return Const(np.full(s, answer), f"{cx.label}.test")
        if cx.in_dtype(0).kind in "iu":
            cx.refuse("comparisons of integers are not translated")
        element = "bool" if cx.in_dtype(0) == bool else "scalar"
        return cx.apply(op_name, cx.like(x, s), cx.like(y, s), shape=s, element=element)
    return translate


for _prim in ("eq", "ne", "lt", "le", "gt", "ge"):
    _entry(_prim, integers=True)(_compare(_prim))


def _read(cx, v):
    if getattr(v, "reason", None) is not None:
        cx.refuse(f"reads a result that is not translated: {v.reason}")
    return v


@_entry("select_n", integers=True, lazy=True)
def _select_n(cx, pred, *cases):
    """cases[pred]: a constant predicate picks its case (the others are not read); a
    Boolean one is ``select(pred, cases[1], cases[0])``."""
    if _is_const(pred):
        held = np.unique(np.asarray(pred.array).astype(np.int64))
        if len(held) == 1:
            return _read(cx, cases[int(held[0])])
    _read(cx, pred)
    for c in cases:
        _read(cx, c)
    if len(cases) != 2 or cx.in_dtype(0) != bool:
        cx.refuse(f"select_n of {len(cases)} cases on an integer predicate is not translated")
    if any(_is_int(c) for c in cases) or cx.out_dtype.kind in "iu":
        cx.refuse("selecting between integers is not translated")
    s = cx.out_shape
    element = "bool" if cx.out_dtype == bool else "scalar"
    return cx.apply("select", cx.like(pred, s), cx.like(cases[1], s), cx.like(cases[0], s),
                    shape=s, element=element)


@_entry("convert_element_type", integers=True)
def _convert(cx, x):
    """Exact conversions: a float widened (or kept), Booleans or indices read as numbers,
    indices to another integer type that holds them."""
    old, new = cx.in_dtype(0), np.dtype(cx.params["new_dtype"])
    if _is_float(old) and _is_float(new):
        if old == new or (np.finfo(new).nmant >= np.finfo(old).nmant and
                          np.finfo(new).maxexp >= np.finfo(old).maxexp and
                          np.finfo(new).minexp <= np.finfo(old).minexp):
            return x
        cx.refuse(f"a conversion from {old} to {new} is not translated (it rounds)")
    if old == bool and _is_float(new):
        return cx.apply("cast", x, shape=cx.out_shape, source="bool")
    if _is_int(x) and new.kind in "iu":
        port = cx.graph.port(x.ref)
        if port.kind == "index" and port.bounds[0] - 1 > np.iinfo(new).max:
            cx.refuse(f"indices below {port.bounds[0]} do not fit {new}")
        return type(x)(x.ref, x.shape, new, x.input, x.example)
    if _is_int(x) and _is_float(new):
        port = cx.graph.port(x.ref)
        if port.kind == "index":
            y = cx.apply("cast", x.ref, shape=port.shape, source="index", bounds=port.bounds)
            return _reshaped(cx, y, cx.out_shape)
        if cx.discover and x.input:
            return _const(cx, np.zeros(cx.out_shape))       # the first pass only
        cx.refuse(f"integer input {x.input} is read as numbers but never as indices (its "
                  f"bound is unknown)")
    if old == new:
        return x
    if new.kind in "iu":                      # read only where used (cond's predicate...)
        return cx.missing(f"a conversion from {old} to {new} is not translated")
    cx.refuse(f"a conversion from {old} to {new} is not translated")


@_entry("copy", "copy_p", "optimization_barrier", integers=True)
def _same(cx, *xs):
    return xs if len(xs) != 1 or cx.eqn.primitive.multiple_results else xs[0]


@_entry("stop_gradient", integers=True)
def _stop_gradient(cx, x):
    if _is_int(x) or cx.out_dtype == bool:
        return x
    return cx.apply("detach", x, shape=cx.out_shape)


@_entry("reduce_precision")
def _reduce_precision(cx, x):
    cx.refuse("reduce_precision rounds; it is not translated")


# ----- movement ---------------------------------------------------------------------------------
@_entry("broadcast_in_dim", integers=True)
def _broadcast_in_dim(cx, x, *dynamic):
    shape, dims = tuple(cx.params["shape"]), tuple(cx.params["broadcast_dimensions"])
    if dynamic:
        cx.refuse("dynamic shapes are not translated")
    if _is_int(x):
        return _int_view(cx, x, shape)
    xs = cx.shape(x)
    aligned = [1] * len(shape)
    for i, d in enumerate(dims):
        aligned[d] = xs[i]
    y = _reshaped(cx, x, aligned)             # broadcast_dimensions increase: a relabelling
    if tuple(aligned) != shape:
        y = cx.apply("broadcast", y, shape=tuple(aligned), to=shape, element=cx.element(x))
    return y


@_entry("reshape", "squeeze", integers=True)
def _reshape(cx, x, *dynamic):
    if cx.eqn.primitive.name == "reshape" and cx.params.get("dimensions") is not None or \
            dynamic:
        cx.refuse("a reshape with dimensions (a transposing reshape) is not translated")
    if _is_int(x):
        return _int_view(cx, x, cx.out_shape)
    return _reshaped(cx, x, cx.out_shape)


@_entry("transpose", integers=True)
def _transpose(cx, x):
    perm = tuple(cx.params["permutation"])
    if _is_int(x):
        if perm != tuple(range(len(perm))):
            cx.refuse("permuting indices is not translated")
        return x
    return _permuted(cx, x, perm)


@_entry("rev")
def _rev(cx, x):
    axes = tuple(sorted(cx.params["dimensions"]))
    if not axes:
        return x
    return cx.apply("flip", x, shape=cx.shape(x), axes=axes, element=cx.element(x))


@_entry("concatenate")
def _concatenate(cx, *xs):
    axis = int(cx.params["dimension"])
    element = "bool" if cx.out_dtype == bool else "scalar"
    if element == "scalar":
        _floating(cx)
    sizes = tuple(cx.shape(x)[axis] for x in xs)
    return cx.apply("cat", *xs, shape=cx.out_shape, axis=axis, sizes=sizes, element=element)


@_entry("stack")
def _stack(cx, *xs):
    """Operands with a unit axis inserted at ``axis``, joined along it (``cat``)."""
    axis, s = int(cx.params["axis"]), cx.out_shape
    element = "bool" if cx.out_dtype == bool else "scalar"
    if element == "scalar":
        _floating(cx)
    one = s[:axis] + (1,) + s[axis + 1:]
    parts = [_reshaped(cx, cx.like(x, s[:axis] + s[axis + 1:]), one) for x in xs]
    return cx.apply("cat", *parts, shape=s, axis=axis, sizes=(1,) * len(xs), element=element)


@_entry("pad")
def _pad(cx, x, value):
    config = [tuple(int(n) for n in c) for c in cx.params["padding_config"]]
    if not _is_const(value) or np.any(value.array != 0) or np.any(np.signbit(value.array)):
        cx.refuse("padding with a value other than +0 is not translated")
    if any(c[2] for c in config) or any(c[0] < 0 or c[1] < 0 for c in config):
        cx.refuse("interior or negative padding is not translated")
    return cx.apply("pad", x, shape=cx.shape(x), before=tuple(c[0] for c in config),
                    after=tuple(c[1] for c in config), element=cx.element(x))


def _sliced(cx, x, starts, stops, steps):
    """``x`` cut to [start, stop) with step on every axis: one ``slice`` per cut axis."""
    for axis, (a, b, c) in enumerate(zip(starts, stops, steps)):
        n = cx.shape(x)[axis]
        if (a, b, c) == (0, n, 1):
            continue
        if b <= a:
            cx.refuse("an empty slice is not translated")
        x = cx.apply("slice", x, shape=cx.shape(x), axis=axis, start=a, stop=b, step=c,
                     element=cx.element(x))
    return x


@_entry("slice")
def _slice(cx, x):
    p = cx.params
    strides = p["strides"] or (1,) * len(p["start_indices"])
    return _sliced(cx, x, p["start_indices"], p["limit_indices"], strides)


@_entry("split")
def _split(cx, x):
    axis, shape = int(cx.params["axis"]), cx.shape(x)
    outs, start = [], 0
    for n in cx.params["sizes"]:
        starts = [0] * len(shape)
        stops = list(shape)
        starts[axis], stops[axis] = start, start + n
        outs.append(_sliced(cx, x, starts, stops, [1] * len(shape)))
        start += n
    return tuple(outs)


@_entry("dynamic_slice", integers=True)
def _dynamic_slice(cx, x, *starts):
    """A slice at constant starts (clamped into the operand, as jax does)."""
    if _is_int(x) or not all(_is_const(s) for s in starts):
        cx.refuse("a slice at computed starts is not translated")
    sizes, shape = cx.params["slice_sizes"], cx.shape(x)
    lo = [min(max(int(s.array), 0), n - k) for s, n, k in zip(starts, shape, sizes)]
    return _sliced(cx, x, lo, [a + k for a, k in zip(lo, sizes)], [1] * len(shape))


# ----- reductions, scans, orderings ---------------------------------------------------------------
def _reduce(op):
    def translate(cx, x):
        _floating(cx)
        axes = tuple(sorted(int(a) for a in cx.params["axes"]))
        if not axes:
            return x
        return cx.apply("reduce", x, shape=cx.shape(x), op=op, axes=axes, keepdim=False)
    return translate


for _prim, _op in (("reduce_sum", "sum"), ("reduce_max", "max"), ("reduce_min", "min"),
                   ("reduce_prod", "prod")):
    _entry(_prim)(_reduce(_op))


def _arg(op_name):
    def translate(cx, x):
        axes = tuple(cx.params["axes"])
        if len(axes) != 1:
            cx.refuse(f"{op_name} over {len(axes)} axes is not translated")
        shape = cx.shape(x)
        if shape[axes[0]] - 1 > np.iinfo(cx.out_dtype).max:
            cx.refuse(f"indices below {shape[axes[0]]} do not fit {cx.out_dtype}")
        ref = cx.apply(op_name, x, shape=shape, axis=int(axes[0]), keepdim=False)
        return cx.indices_of(ref, cx.out_dtype)
    return translate


_entry("argmax", integers=True)(_arg("argmax"))
_entry("argmin", integers=True)(_arg("argmin"))


def _scan(op_name):
    def translate(cx, x):
        _floating(cx)
        axis, s = int(cx.params["axis"]), cx.out_shape
        if cx.params.get("reverse"):
            x = cx.apply("flip", x, shape=s, axes=(axis,), element="scalar")
        y = cx.apply(op_name, x, shape=s, axis=axis)
        y = y[0] if isinstance(y, tuple) else y
        if cx.params.get("reverse"):
            y = cx.apply("flip", y, shape=s, axes=(axis,), element="scalar")
        return y
    return translate


for _prim in ("cumsum", "cumprod", "cummax", "cummin"):
    _entry(_prim)(_scan(_prim))


@_entry("sort", integers=True)
def _sort(cx, x, *rest):
    """One operand: its sorted values; an operand and an iota along the axis (argsort): the
    values and their indices."""
    axis, shape = int(cx.params["dimension"]), cx.shape(x)
    if cx.params.get("num_keys", 1) != 1 or _is_int(x) or not _is_float(cx.in_dtype(0)):
        cx.refuse("sorting on several keys or on integers is not translated")
    iota = None
    if len(rest) == 1 and _is_const(rest[0]):
        at = np.arange(shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
        iota = np.array_equal(rest[0].array, np.broadcast_to(at, shape))
    if rest and not iota:
        cx.refuse("sorting operands along with the keys is not translated (only an iota: "
                  "argsort)")
    values, indices = cx.apply("sort", x, shape=shape, axis=axis, descending=False)
    if not rest:
        return (values,)
    return values, cx.indices_of(indices, cx.in_dtype(1))


@_entry("top_k", integers=True)
def _top_k(cx, x):
    shape = cx.shape(x)
    axis = int(cx.params.get("axis", len(shape) - 1)) % len(shape)
    values, indices = cx.apply("topk", x, shape=shape, axis=axis, k=int(cx.params["k"]),
                               largest=True)
    return values, cx.indices_of(indices, cx.eqn.outvars[1].aval.dtype)


# ----- products and windows -----------------------------------------------------------------------
def _default_precision(cx):
    precision = cx.params.get("precision")
    parts = precision if isinstance(precision, (tuple, list)) else (precision,)
    for p in parts:
        if p is not None and getattr(p, "name", str(p)) != "DEFAULT":
            cx.refuse(f"precision={precision} (not the default) is not translated")
    preferred = cx.params.get("preferred_element_type")
    if preferred is not None and (np.dtype(preferred) != cx.in_dtype(0) or
                                  np.dtype(preferred) != cx.in_dtype(1)):
        cx.refuse(f"preferred_element_type={np.dtype(preferred)} on {cx.in_dtype(0)} and "
                  f"{cx.in_dtype(1)} operands is not translated")


@_entry("dot_general")
def _dot_general(cx, x, y):
    """matmul (x[..., k] by y[k, n]), contract (no batch dimensions), or permutes and
    reshapes around a batched matmul."""
    _floating(cx)
    _default_precision(cx)
    (xc, yc), (xb, yb) = cx.params["dimension_numbers"]
    xc, yc, xb, yb = (tuple(int(d) for d in t) for t in (xc, yc, xb, yb))
    xs, ys = cx.shape(x), cx.shape(y)
    if not xb:
        if len(xs) >= 2 and len(ys) == 2 and xc == (len(xs) - 1,) and yc == (0,):
            return cx.apply("matmul", x, y, x_shape=xs, y_shape=ys)
        return cx.apply("contract", x, y, x_shape=xs, y_shape=ys, x_axes=xc, y_axes=yc)
    xf = tuple(d for d in range(len(xs)) if d not in xc + xb)
    yf = tuple(d for d in range(len(ys)) if d not in yc + yb)
    batch = tuple(xs[d] for d in xb)
    m, k = math.prod(xs[d] for d in xf), math.prod(xs[d] for d in xc)
    n = math.prod(ys[d] for d in yf)
    xm = _reshaped(cx, _permuted(cx, x, xb + xf + xc), batch + (m, k))
    ym = _reshaped(cx, _permuted(cx, y, yb + yc + yf), batch + (k, n))
    z = cx.apply("matmul", xm, ym, x_shape=batch + (m, k), y_shape=batch + (k, n))
    return _reshaped(cx, z, cx.out_shape)


def _inverse(perm):
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


@_entry("conv_general_dilated")
def _conv(cx, x, w):
    """conv in PyTorch's layout (batch, channels, spatial...), weight (out, in/groups,
    kernel...), reached by permutes from jax's dimension numbers."""
    _floating(cx)
    _default_precision(cx)
    p = cx.params
    if p["batch_group_count"] != 1:
        cx.refuse(f"batch_group_count={p['batch_group_count']} is not translated")
    if any(d != 1 for d in p["lhs_dilation"]):
        cx.refuse(f"lhs_dilation={list(p['lhs_dilation'])} (a transposed convolution) is not "
                  f"translated")
    dn = p["dimension_numbers"]
    lhs, rhs, out = (tuple(int(d) for d in s) for s in (dn.lhs_spec, dn.rhs_spec, dn.out_spec))
    pads = [tuple(int(n) for n in q) for q in p["padding"]]
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        cx.refuse(f"negative padding {pads} is not translated")
    x, w = _permuted(cx, x, lhs), _permuted(cx, w, rhs)
    sym = tuple(min(lo, hi) for lo, hi in pads)
    if any(lo != hi for lo, hi in pads):
        x = cx.apply("pad", x, shape=cx.shape(x),
                     before=(0, 0) + tuple(lo - s for (lo, _), s in zip(pads, sym)),
                     after=(0, 0) + tuple(hi - s for (_, hi), s in zip(pads, sym)))
    ws = cx.shape(w)
    bias = Const(np.zeros(ws[0]), f"{cx.label}.bias")
    y = cx.apply("conv", x, w, bias, shape=cx.shape(x), out_channels=ws[0], kernel=ws[2:],
                 stride=tuple(p["window_strides"]), padding=sym,
                 dilation=tuple(p["rhs_dilation"]), groups=int(p["feature_group_count"]))
    return _permuted(cx, y, _inverse(out))


def _window(cx, x, what):
    """(pooled axes, kernel, stride, padding, dilation) of a reduce_window; refuses windows
    the table's pool does not hold."""
    p = cx.params
    dims, strides = tuple(p["window_dimensions"]), tuple(p["window_strides"])
    pads, dilation = [tuple(q) for q in p["padding"]], tuple(p["window_dilation"])
    if any(d != 1 for d in p["base_dilation"]):
        cx.refuse(f"base_dilation={list(p['base_dilation'])} is not translated")
    if any(lo != hi for lo, hi in pads):
        cx.refuse(f"asymmetric padding {pads} of {what} pooling is not translated")
    axes = tuple(d for d in range(len(dims)) if (dims[d], strides[d], pads[d][0],
                                                  dilation[d]) != (1, 1, 0, 1))
    return (axes, tuple(dims[d] for d in axes), tuple(strides[d] for d in axes),
            tuple(pads[d][0] for d in axes), tuple(dilation[d] for d in axes))


def _pool(cx, x, mode, axes, kernel, stride, padding, dilation):
    rank = len(cx.shape(x))
    perm = tuple(d for d in range(rank) if d not in axes) + axes
    moved = _permuted(cx, x, perm)
    y = cx.apply("pool", moved, shape=cx.shape(moved), mode=mode, kernel=kernel,
                 stride=stride, padding=padding, dilation=dilation, ceil_mode=False,
                 count_include_pad=True)
    return _permuted(cx, y, _inverse(perm))


@_entry("reduce_window_max")
def _reduce_window_max(cx, x):
    _floating(cx)
    axes, kernel, stride, padding, dilation = _window(cx, x, "max")
    if not axes:
        return x
    return _pool(cx, x, "max", axes, kernel, stride, padding, dilation)


class WindowSum:
    """A reduce_window_sum waiting for its division by the window size (average pooling);
    refused where anything else reads it."""

    def __init__(self, x, window, reason):
        self.x, self.window, self.reason = x, window, reason


@_entry("reduce_window_sum")
def _reduce_window_sum(cx, x):
    _floating(cx)
    window = _window(cx, x, "average")
    if any(d != 1 for d in window[4]):
        cx.refuse("window_dilation of sum pooling is not translated")
    return WindowSum(x, window, cx.missing("a window sum is translated only when divided by "
                                           "its window size (average pooling)").reason)


@_entry("div", lazy=True)
def _div(cx, x, y):
    _floating(cx)
    _read(cx, y)
    if isinstance(x, WindowSum):
        count = math.prod(x.window[1])
        if not (_is_const(y) and np.all(y.array == count)):
            cx.refuse(x.reason)
        return _pool(cx, x.x, "average", *x.window[:4], x.window[4])
    return _binary("div")(cx, _read(cx, x), y)


# ----- gather and scatter -------------------------------------------------------------------------
def _layout(cx, shape, idx_shape, batching, index_batching, axes, collapsed):
    """(batch count, table index shape) of a gather or scatter in the table's layout;
    refuses the others."""
    nb = len(batching)
    if tuple(batching) != tuple(range(nb)) or tuple(index_batching) != tuple(range(nb)):
        cx.refuse("batching dimensions other than the leading ones are not translated")
    if sorted(collapsed) != sorted(axes) or not axes:
        cx.refuse("gathering slices (axes not collapsed) is not translated")
    if len(idx_shape) < 1 or idx_shape[-1] != len(axes):
        cx.refuse("indices without a trailing index vector are not translated")
    if tuple(idx_shape[:nb]) != tuple(shape[:nb]):
        cx.refuse(f"batch extents differ ({list(idx_shape[:nb])} and {list(shape[:nb])})")
    return nb, tuple(idx_shape[:-1])


def _index_value(cx, idx, bounds, want, nb):
    """(Ref at the index port, its port shape): Const indices reshaped to ``want``; an Int at
    its own port shape, which may differ from ``want`` by unit axes after the batch axes."""
    if _is_const(idx):
        return cx.index_ref(idx, bounds, want), want
    if not _is_int(idx):
        cx.refuse("computed indices are not translated")
    held = cx.graph.port(idx.ref).shape
    if held != want and (_squeezed(held) != _squeezed(want) or held[:nb] != want[:nb]):
        cx.refuse(f"indices of shape {list(held)} where {list(want)} is read")
    if len(bounds) != 1:
        cx.refuse("index tuples from the program's integers are not translated")
    return cx.index_ref(idx, bounds, held), held


@_entry("gather", integers=True)
def _gather(cx, x, idx):
    """gather in the table's layout (B + index + rest), permuted into jax's; embedding for
    rows of a matrix."""
    dn, sizes = cx.params["dimension_numbers"], tuple(cx.params["slice_sizes"])
    shape, axes = cx.shape(x), tuple(int(a) for a in dn.start_index_map)
    nb, want = _layout(cx, shape, cx.shape(idx), dn.operand_batching_dims,
                       dn.start_indices_batching_dims, axes, dn.collapsed_slice_dims)
    rest = [d for d in range(nb, len(shape)) if d not in axes]
    if any(sizes[d] != 1 for d in list(axes) + list(range(nb))) or \
            any(sizes[d] != shape[d] for d in rest):
        cx.refuse(f"slice_sizes={list(sizes)} (partial slices) are not translated")
    if _is_int(x) or cx.out_dtype.kind in "iu":
        cx.refuse("gathering integers is not translated")
    bounds = tuple(shape[a] for a in axes)
    ref, held = _index_value(cx, idx, bounds, want, nb)
    offset = tuple(int(d) for d in dn.offset_dims)
    element = cx.element(x)
    if len(shape) == 2 and nb == 0 and axes == (0,) and offset == (len(want),) and \
            element == "scalar":
        y = cx.apply("embedding", x, ref, num=shape[0], dim=shape[1], shape=held)
        return _reshaped(cx, y, cx.out_shape)
    y = cx.apply("gather", x, ref, shape=shape, axes=axes, batch=nb, index_shape=held[nb:],
                 element=element)
    y = _reshaped(cx, y, want + tuple(shape[d] for d in rest))
    perm, k = [], 0
    for pos in range(len(cx.out_shape)):
        if pos in offset:
            perm.append(len(want) + offset.index(pos))
        else:
            perm.append(k)
            k += 1
    return _permuted(cx, y, perm)


_MODES = {"scatter": "replace", "scatter-add": "sum", "scatter-mul": "prod",
          "scatter-min": "min", "scatter-max": "max"}


def _scatter(cx, x, idx, updates):
    """scatter in the table's layout: the updates permuted from jax's layout (index
    positions, then the window dimensions) into B + index + rest."""
    _floating(cx)
    dn = cx.params["dimension_numbers"]
    shape, axes = cx.shape(x), tuple(int(a) for a in dn.scatter_dims_to_operand_dims)
    nb, want = _layout(cx, shape, cx.shape(idx), dn.operand_batching_dims,
                       dn.scatter_indices_batching_dims, axes, dn.inserted_window_dims)
    window = tuple(int(d) for d in dn.update_window_dims)
    rest = tuple(shape[d] for d in range(nb, len(shape)) if d not in axes)
    us = cx.shape(updates)
    if tuple(us[d] for d in window) != rest:
        cx.refuse(f"update windows {[us[d] for d in window]} that are not whole slices "
                  f"{list(rest)} are not translated")
    ref, held = _index_value(cx, idx, tuple(shape[a] for a in axes), want, nb)
    perm = tuple(d for d in range(len(us)) if d not in window) + window
    u = _reshaped(cx, _permuted(cx, updates, perm), held + rest)
    return cx.apply("scatter", x, ref, u, shape=shape, axes=axes, batch=nb,
                    index_shape=held[nb:], mode=_MODES[cx.eqn.primitive.name])


for _prim in _MODES:
    _entry(_prim, integers=True)(_scatter)

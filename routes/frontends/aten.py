"""The aten table of the PyTorch capture (spec: "Import Coverage"): aten operator -> the
registered operators that compute it.  torch is never imported here: an entry receives the
capture context ``cx`` (routes.frontends.torch) and the operator's arguments bound by name
(``a.self``, ``a.dim``...; defaults filled in from the aten schema), each a ``Ref`` (a graph
value), a ``Const`` (a tensor the capture folded: a buffer, a created tensor) or a Python
literal.  It returns the node's value: a Ref, a Const, or a tuple of them (``Missing`` where
a result has no translation, refused only when something reads it).

What an entry may rely on:

- shapes are attributes: ``cx.out_shape`` is the shape torch recorded for the node's (first)
  result, ``cx.shape(v)`` that of an argument;
- ``cx.apply(name, *values, **attributes)`` appends the registered operator (arguments
  turned into graph values: a Const becomes a graph constant, a number a frozen scalar);
- ``cx.like(v, shape)`` is ``v`` broadcast to ``shape``: implicit broadcasting becomes a
  ``broadcast`` node (leading axes added by the operator itself); a number or a Const is
  folded into a constant of that shape instead;
- ``cx.refuse(reason)`` raises the capture's one-line refusal for this node.

``BOUNDS`` gives, for the operators that read an integer tensor as indices, the bound of the
indices (an integer graph input becomes an index port with that bound).
"""

from __future__ import annotations

import math
from typing import Callable

TABLE: dict[str, Callable] = {}
BOUNDS: dict[str, Callable] = {}


def _entry(*names):
    def register(fn):
        for name in names:
            if name in TABLE:
                raise ValueError(f"aten table: {name} is already translated")
            TABLE[name] = fn
        return fn
    return register


def _axis(d, rank):
    """A PyTorch dimension (negative counts from the end) as an axis in [0, rank)."""
    return d + rank if d < 0 else d


def _axes(dims, rank):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    dims = [dims] if isinstance(dims, int) else dims
    return tuple(sorted(_axis(d, rank) for d in dims))


def _per_axis(v, n):
    """A PyTorch ``int[n]`` argument (one int, or one per axis) as n ints."""
    v = [v] if isinstance(v, int) else list(v)
    return tuple(v * n if len(v) == 1 else v)


# ----- elementwise -------------------------------------------------------------------------------
_UNARY = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "exp": "exp", "log": "log",
          "neg": "neg", "abs": "abs", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "erf": "erf", "silu": "silu",
          "log1p": "log1p", "expm1": "expm1", "square": "square"}


def _unary(op_name):
    def translate(cx, a):
        cx.scalar_result()
        return cx.apply(op_name, a.self, shape=cx.out_shape)
    return translate


for _aten, _op in _UNARY.items():
    _entry(f"aten.{_aten}.default")(_unary(_op))


@_entry("aten.gelu.default")
def _gelu(cx, a):
    return cx.apply("gelu", a.self, shape=cx.out_shape, approximate=a.approximate)


def _binary(op_name):
    """x op y with PyTorch's broadcasting; ``alpha`` (add, sub) scales y first."""
    def translate(cx, a):
        cx.scalar_result()
        s = cx.out_shape
        other = a.other
        alpha = a.get("alpha", 1)
        if alpha != 1:
            if not isinstance(other, (int, float)):
                other = cx.apply("scale", cx.like(other, s), alpha, shape=s)
            else:
                other = other * alpha             # a Python scalar: PyTorch's own product
        if op_name == "mul" and isinstance(other, (int, float)) and not isinstance(other, bool):
            return cx.apply("scale", cx.like(a.self, s), other, shape=s)
        return cx.apply(op_name, cx.like(a.self, s), cx.like(other, s), shape=s)
    return translate


for _aten, _op in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"),
                   ("maximum", "max"), ("minimum", "min")):
    _entry(*[f"aten.{_aten}.{o}" for o in (("Tensor", "Scalar") if _aten in
                                              ("add", "sub", "mul", "div") else ("default",))]
           )(_binary(_op))


@_entry("aten.pow.Tensor_Scalar")
def _pow(cx, a):
    """x ** c: square at 2 and reciprocal at -1 (as PyTorch's kernel special-cases them),
    else pow with the exponent as a constant."""
    cx.scalar_result()
    s = cx.out_shape
    if a.exponent == 2:
        return cx.apply("square", a.self, shape=s)
    if a.exponent == -1:
        return cx.apply("reciprocal", a.self, shape=s)
    return cx.apply("pow", a.self, cx.like(float(a.exponent), s), shape=s)


@_entry("aten.where.self")
def _where(cx, a):
    cx.scalar_result()
    s = cx.out_shape
    return cx.apply("select", cx.like(a.condition, s), cx.like(a.self, s), cx.like(a.other, s),
                    shape=s)


# ----- pass-through and movement -----------------------------------------------------------------
@_entry("aten.clone.default", "aten.contiguous.default", "aten.alias.default",
        "aten.lift_fresh_copy.default", "aten.lift_fresh.default")
def _same(cx, a):
    return a.self


@_entry("aten.copy.default")
def _copy(cx, a):
    if cx.shape(a.src) != cx.shape(a.self):
        cx.refuse("copy with broadcasting is not translated")
    return a.src


@_entry("aten._to_copy.default", "aten.to.dtype")
def _to_copy(cx, a):
    if not cx.same_dtype(a.self):
        cx.refuse(f"a conversion to {cx.out_dtype} is not translated (it rounds)")
    return a.self


@_entry("aten.detach.default")
def _detach(cx, a):
    return cx.apply("detach", a.self, shape=cx.out_shape)


@_entry("aten.dropout.default")
def _dropout(cx, a):
    if a.train and a.p > 0:
        cx.refuse("dropout in training mode draws a random mask; capture the model in "
                  "eval mode")
    return a.input


@_entry("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
        "aten.flatten.using_ints", "aten.unflatten.int", "aten.unsqueeze.default",
        "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _reshape(cx, a):
    x = a.self
    if cx.shape(x) == cx.out_shape:
        return x
    return cx.apply("reshape", x, shape=cx.shape(x), to=cx.out_shape, element=cx.element(x))


def _permuted(cx, x, perm):
    if tuple(perm) == tuple(range(len(perm))):
        return x
    return cx.apply("permute", x, shape=cx.shape(x), perm=perm, element=cx.element(x))


@_entry("aten.permute.default")
def _permute(cx, a):
    rank = len(cx.shape(a.self))
    return _permuted(cx, a.self, [_axis(d, rank) for d in a.dims])


@_entry("aten.transpose.int")
def _transpose(cx, a):
    rank = len(cx.shape(a.self))
    perm = list(range(rank))
    i, j = _axis(a.dim0, rank), _axis(a.dim1, rank)
    perm[i], perm[j] = perm[j], perm[i]
    return _permuted(cx, a.self, perm)


@_entry("aten.t.default")
def _t(cx, a):
    return _permuted(cx, a.self, [1, 0]) if len(cx.shape(a.self)) == 2 else a.self


@_entry("aten.expand.default")
def _expand(cx, a):
    return cx.like(a.self, cx.out_shape)


@_entry("aten.slice.Tensor")
def _slice(cx, a):
    shape = cx.shape(a.self)
    axis = _axis(a.dim, len(shape))
    n = shape[axis]
    start = 0 if a.start is None else a.start
    stop = n if a.end is None else a.end
    start, stop = (min(max(_axis(v, n) if v < 0 else v, 0), n) for v in (start, stop))
    if (start, stop, a.step) == (0, n, 1):
        return a.self
    if stop <= start:
        cx.refuse("an empty slice is not translated")
    return cx.apply("slice", a.self, shape=shape, axis=axis, start=start, stop=stop,
                    step=a.step, element=cx.element(a.self))


@_entry("aten.select.int")
def _select(cx, a):
    shape = cx.shape(a.self)
    axis = _axis(a.dim, len(shape))
    i = _axis(a.index, shape[axis])
    part = cx.apply("slice", a.self, shape=shape, axis=axis, start=i, stop=i + 1, step=1,
                    element=cx.element(a.self))
    return cx.apply("reshape", part, shape=cx.shape(part), to=cx.out_shape,
                    element=cx.element(a.self))


# ----- reductions and products -------------------------------------------------------------------
@_entry("aten.mean.dim", "aten.mean.default")
def _mean(cx, a):
    cx.scalar_result()
    shape = cx.shape(a.self)
    return cx.apply("mean", a.self, shape=shape, axes=_axes(a.get("dim"), len(shape)),
                    keepdim=bool(a.get("keepdim", False)))


@_entry("aten.sum.dim_IntList", "aten.sum.default")
def _sum(cx, a):
    cx.scalar_result()
    shape = cx.shape(a.self)
    return cx.apply("reduce", a.self, shape=shape, op="sum",
                    axes=_axes(a.get("dim"), len(shape)), keepdim=bool(a.get("keepdim", False)))


def _matmul(cx, x, y):
    """x @ y with PyTorch's rules for rank-1 operands (a row, a column, dropped after)."""
    xs, ys = cx.shape(x), cx.shape(y)
    if len(xs) == 1:
        x = cx.apply("reshape", x, shape=xs, to=(1,) + xs)
    if len(ys) == 1:
        y = cx.apply("reshape", y, shape=ys, to=ys + (1,))
    z = cx.apply("matmul", x, y, x_shape=cx.shape(x), y_shape=cx.shape(y))
    if cx.shape(z) != cx.out_shape:
        z = cx.apply("reshape", z, shape=cx.shape(z), to=cx.out_shape)
    return z


@_entry("aten.mm.default", "aten.bmm.default")
def _mm(cx, a):
    return _matmul(cx, a.self, a.mat2)


@_entry("aten.matmul.default")
def _matmul_entry(cx, a):
    return _matmul(cx, a.self, a.other)


@_entry("aten.addmm.default")
def _addmm(cx, a):
    if a.beta != 1 or a.alpha != 1:
        cx.refuse(f"beta and alpha must be 1 (got {a.beta}, {a.alpha})")
    z = _matmul(cx, a.mat1, a.mat2)
    return cx.apply("add", cx.like(a.self, cx.out_shape), z, shape=cx.out_shape)


@_entry("aten.linear.default")
def _linear(cx, a):
    xs, ws = cx.shape(a.input), cx.shape(a.weight)
    if len(ws) != 2 or not xs:
        cx.refuse(f"weight must be a matrix and input at least a vector (got "
                  f"{list(ws)}, {list(xs)})")
    bias = cx.zeros((ws[0],)) if a.bias is None else cx.like(a.bias, (ws[0],))
    return cx.apply("linear", a.weight, bias, a.input, batch=xs[:-1], in_features=ws[1],
                    out_features=ws[0])


# ----- convolution, pooling, normalization -----------------------------------------------------
def _conv(cx, a, transposed=False):
    xs, ws = cx.shape(a.input), cx.shape(a.weight)
    if transposed:
        cx.refuse("transposed convolution is not translated yet")
    if isinstance(a.padding, str):
        cx.refuse(f"padding={a.padding!r} is not translated (give the padding in numbers)")
    n = len(ws) - 2
    if len(xs) != n + 2:
        cx.refuse(f"input must have batch and channel axes (got shape {list(xs)})")
    bias = cx.zeros((ws[0],)) if a.bias is None else a.bias
    return cx.apply("conv", a.input, a.weight, bias, shape=xs, out_channels=ws[0],
                    kernel=ws[2:], stride=_per_axis(a.stride, n),
                    padding=_per_axis(a.padding, n), dilation=_per_axis(a.dilation, n),
                    groups=a.groups)


_entry("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default")(_conv)


@_entry("aten.convolution.default")
def _convolution(cx, a):
    if any(_per_axis(a.output_padding, 1)):
        cx.refuse("output_padding is not translated")
    return _conv(cx, a, transposed=a.transposed)


def _max_pool(cx, a, n):
    if not a.stride:
        stride = _per_axis(a.kernel_size, n)
    else:
        stride = _per_axis(a.stride, n)
    return cx.apply("pool", a.self, shape=cx.shape(a.self), mode="max",
                    kernel=_per_axis(a.kernel_size, n), stride=stride,
                    padding=_per_axis(a.padding, n), dilation=_per_axis(a.dilation, n),
                    ceil_mode=bool(a.ceil_mode))


for _n in (1, 2, 3):
    _entry(f"aten.max_pool{_n}d.default")((lambda n: lambda cx, a: _max_pool(cx, a, n))(_n))
    _entry(f"aten.max_pool{_n}d_with_indices.default")(
        (lambda n: lambda cx, a: (_max_pool(cx, a, n), cx.missing(
            f"the indices of max_pool{n}d_with_indices are not translated")))(_n))


def _avg_pool(cx, a, n):
    if a.get("divisor_override") is not None:
        cx.refuse("divisor_override is not translated")
    stride = _per_axis(a.stride, n) if a.stride else _per_axis(a.kernel_size, n)
    return cx.apply("pool", a.self, shape=cx.shape(a.self), mode="average",
                    kernel=_per_axis(a.kernel_size, n), stride=stride,
                    padding=_per_axis(a.padding, n), dilation=(1,) * n,
                    ceil_mode=bool(a.ceil_mode), count_include_pad=bool(a.count_include_pad))


for _n in (1, 2, 3):
    _entry(f"aten.avg_pool{_n}d.default")((lambda n: lambda cx, a: _avg_pool(cx, a, n))(_n))


def _layer_norm(cx, a):
    xs = cx.shape(a.input)
    if tuple(a.normalized_shape) != xs[-1:]:
        cx.refuse(f"normalized_shape must be the last axis [{xs[-1] if xs else ''}] (got "
                  f"{list(a.normalized_shape)})")
    c = (xs[-1],)
    weight = cx.ones(c) if a.weight is None else a.weight
    bias = cx.zeros(c) if a.bias is None else a.bias
    return cx.apply("layerNorm", a.input, weight, bias, float(a.eps), shape=xs)


_entry("aten.layer_norm.default")(_layer_norm)


@_entry("aten.native_layer_norm.default")
def _native_layer_norm(cx, a):
    missing = cx.missing("the saved mean and rstd of native_layer_norm are not translated")
    return (_layer_norm(cx, a), missing, missing)


def _batch_norm_running(cx, a):
    xs = cx.shape(a.input)
    if len(xs) < 2:
        cx.refuse(f"input must have batch and channel axes (got shape {list(xs)})")
    if a.running_mean is None or a.running_var is None:
        cx.refuse("batch norm without running statistics is not translated")
    c = (xs[1],)
    weight = cx.ones(c) if a.weight is None else a.weight
    bias = cx.zeros(c) if a.bias is None else a.bias
    return cx.apply("batchNormRunning", a.input, weight, bias, a.running_mean, a.running_var,
                    float(a.eps), shape=xs, axis=1)


@_entry("aten.batch_norm.default")
def _batch_norm(cx, a):
    if a.training:
        cx.refuse("batch norm in training mode updates its running statistics in place; "
                  "capture the model in eval mode")
    return _batch_norm_running(cx, a)


@_entry("aten._native_batch_norm_legit_no_training.default")
def _native_batch_norm(cx, a):
    missing = cx.missing("the saved statistics of batch norm are not translated")
    return (_batch_norm_running(cx, a), missing, missing)


# ----- softmax, attention, embedding, losses ------------------------------------------------------
def _softmax(op_name):
    def translate(cx, a):
        cx.scalar_result()
        if a.get("dtype") is not None and not cx.same_dtype(a.self):
            cx.refuse(f"a softmax into {a.dtype} is not translated (it rounds)")
        if a.get("half_to_float"):
            cx.refuse("half_to_float is not translated (it rounds)")
        shape = cx.shape(a.self)
        return cx.apply(op_name, a.self, shape=shape, axis=_axis(a.dim, len(shape)))
    return translate


_entry("aten.softmax.int", "aten._softmax.default")(_softmax("softmax"))
_entry("aten.log_softmax.int", "aten._log_softmax.default")(_softmax("logSoftmax"))


@_entry("aten.scaled_dot_product_attention.default")
def _sdpa(cx, a):
    if a.attn_mask is not None or a.is_causal:
        cx.refuse("attention with a mask (attn_mask or is_causal) is not translated yet")
    if a.dropout_p:
        cx.refuse(f"attention dropout (dropout_p={a.dropout_p}) draws a random mask")
    if a.get("enable_gqa"):
        cx.refuse("grouped-query attention (enable_gqa) is not translated")
    qs, ks, vs = cx.shape(a.query), cx.shape(a.key), cx.shape(a.value)
    if len(qs) < 2 or not qs[:-2] == ks[:-2] == vs[:-2]:
        cx.refuse(f"query, key and value must share their batch axes (got {list(qs)}, "
                  f"{list(ks)}, {list(vs)})")
    # PyTorch's default scale: 1 / sqrt(E) in binary64 (sdp_utils' calculate_scale).
    scale = 1.0 / math.sqrt(qs[-1]) if a.scale is None else float(a.scale)
    return cx.apply("attention", a.query, a.key, a.value, scale, batch=qs[:-2],
                    queries=qs[-2], key_count=ks[-2], dim=qs[-1], value_dim=vs[-1])


@_entry("aten.embedding.default")
def _embedding(cx, a):
    if a.padding_idx is not None and a.padding_idx >= 0:
        cx.refuse(f"padding_idx={a.padding_idx} is not translated (torch gives the padding "
                  f"row no gradient)")
    num, dim = cx.shape(a.weight)
    ids = cx.indices(a.indices, num)
    return cx.apply("embedding", a.weight, ids, num=num, dim=dim, shape=cx.shape(a.indices))


BOUNDS["aten.embedding.default"] = lambda node, arg: (
    node.args[0].meta["val"].shape[0] if len(node.args) > 1 and node.args[1] is arg else None)

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@_entry("aten.cross_entropy_loss.default")
def _cross_entropy(cx, a):
    if a.weight is not None:
        cx.refuse("class weights are not translated")
    if a.label_smoothing:
        cx.refuse(f"label_smoothing={a.label_smoothing} is not translated")
    shape = cx.shape(a.self)
    reduction = _REDUCTIONS[a.reduction]
    if cx.shape(a.target) == shape and cx.is_scalar(a.target):
        return cx.apply("crossEntropyProbabilities", a.self, a.target, shape=shape,
                        reduction=reduction)
    classes = shape[1] if len(shape) >= 2 else shape[0]
    if 0 <= a.ignore_index < classes:
        cx.refuse(f"ignore_index={a.ignore_index} names a class; it is not translated")
    return cx.apply("crossEntropy", a.self, cx.indices(a.target, classes), shape=shape,
                    reduction=reduction)


def _class_bound(node, arg):
    if len(node.args) < 2 or node.args[1] is not arg:
        return None
    shape = node.args[0].meta["val"].shape
    return shape[1] if len(shape) >= 2 else shape[0]


BOUNDS["aten.cross_entropy_loss.default"] = _class_bound

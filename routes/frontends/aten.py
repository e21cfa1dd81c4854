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
- ``cx.full(value)`` is a constant of the node's shape and dtype, ``cx.causal(n, m)`` the
  causal Boolean mask, ``cx.greater(v, number, shape)`` Booleans ``v > number`` (folded for
  a constant, a ``gt`` node otherwise), ``cx.dropout_mask()`` the node's mask input;
- ``cx.refuse(reason)`` raises the capture's one-line refusal for this node.

``BOUNDS`` gives, for the operators that read an integer tensor as indices, the bound of the
indices (an integer graph input becomes an index port with that bound; aten_lookup's).  ``MASKS`` gives,
for the dropout operators, the drop probability p of a node that draws a mask (training
mode, p > 0) or None: routes.frontends.torch makes that mask a graph input
(``cx.dropout_mask()``).

Translations beyond one operator each:

- ``scaled_dot_product_attention`` without a mask is ``attention``; with ``attn_mask`` or
  ``is_causal`` it is scaledMatmul(q, k^T, scale), maskedSoftmax over the keys, matmul with
  v.  A Boolean mask keeps its True entries; is_causal keeps the lower triangle (key <=
  query); a float mask is added to the scores and its -inf entries are masked, so a query
  whose every key is masked gives 0, as PyTorch's _safe_softmax does; with ``enable_gqa``
  each key and value head is repeated for its group of query heads first (reshape,
  broadcast, reshape: exact);
- ``convolution`` with ``transposed`` is ``convTranspose`` (output_padding included);
- group norm is layerNorm (weight 1, bias 0) over each group's entries, then the
  per-channel weight and bias (mul, add);
- batch norm in training mode: ``batchNorm``, and the running statistics' update from mean,
  sub, square, reduce, div, scale and add nodes (routes.frontends.torch returns them);
- ``native_dropout`` / ``dropout`` in training mode: ``dropout`` with the mask input;
- ``elu`` (ELU, SELU, CELU) is ``elu`` then ``scale``; ``leaky_relu`` and RReLU in eval mode
  are ``leakyReLU``; layer norm over several trailing axes views them as one;
- ``linalg_vector_norm`` (F.normalize, cosine similarity, distances): reductions of abs,
  square or pow, ord 2 with a zero gradient at a zero vector, as torch's.

Refused here (one line each; aten_tensors lists its own): a softmax into another dtype,
half_to_float; elu with input_scale; RReLU in training; a norm
of ord <= 0; addmm with beta or alpha other than 1; linear with a weight
that is not a matrix; layer norm over axes other than the last ones; convolution padding given as
a string, output_padding of a convolution that is not transposed; divisor_override; batch
norm without running statistics in eval mode, with momentum=None, or with one value per
channel in training mode; attention dropout (dropout_p > 0), attn_mask together with
is_causal, batch axes that differ between q, k and v, grouped-query attention whose query
heads are not a multiple of its key heads; dropout with p >= 1.

Known difference: a NaN entry of a float attention mask is masked here (``gt(mask, -inf)`` is
false at NaN), where PyTorch gives NaN.
"""

from __future__ import annotations

import math
from typing import Callable

from . import aten_integers, aten_lookup, aten_reduce, aten_resample, aten_tensors, registrar
from .aten_integers import WORD, integral, words
from .aten_tensors import axes_of, axis_of, per_axis

# The tensor entries (shape, movement, conversions, comparisons: aten_tensors), adaptive
# pooling and interpolation (aten_resample), integer ones (aten_integers), embeddings and
# class-index losses (aten_lookup), extrema, products, variances and ordering
# (aten_reduce), then these.
TABLE: dict[str, Callable] = {**aten_tensors.TABLE, **aten_resample.TABLE,
                              **aten_integers.TABLE, **aten_lookup.TABLE, **aten_reduce.TABLE}
BOUNDS: dict[str, Callable] = dict(aten_lookup.BOUNDS)
MASKS: dict[str, Callable] = {}
_entry = registrar(TABLE, "aten table")


# ----- elementwise -------------------------------------------------------------------------------
_UNARY = {"relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "exp": "exp", "log": "log",
          "neg": "neg", "abs": "abs", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "erf": "erf", "silu": "silu",
          "log1p": "log1p", "expm1": "expm1", "square": "square", "sign": "sign",
          "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
          "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
          "log2": "log2", "log10": "log10", "exp2": "exp2", "floor": "floor", "ceil": "ceil",
          "trunc": "trunc", "round": "round", "frac": "frac"}


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


@_entry("aten.elu.default")
def _elu(cx, a):
    """elu (ELU, SELU, CELU's aten form): torch's kernel gives scale * x for x > 0 and
    scale * alpha * expm1(input_scale * x) otherwise, so elu at alpha then ``scale`` by
    scale (SELU's 1.0507...); the same real function, the product rounded once more."""
    cx.scalar_result()
    if a.input_scale != 1:
        cx.refuse(f"input_scale={a.input_scale} is not translated (only 1)")
    s = cx.out_shape
    y = cx.apply("elu", a.self, float(a.alpha), shape=s)
    return y if a.scale == 1 else cx.apply("scale", y, float(a.scale), shape=s)


@_entry("aten.leaky_relu.default")
def _leaky_relu(cx, a):
    cx.scalar_result()
    return cx.apply("leakyReLU", a.self, float(a.negative_slope), shape=cx.out_shape)


@_entry("aten.rrelu_with_noise_functional.default")
def _rrelu(cx, a):
    """RReLU in eval mode is leaky_relu with the slope (lower + upper) / 2 (torch's
    rrelu_with_noise when not training); in training it draws a slope per entry."""
    if a.training:
        cx.refuse("RReLU in training mode draws random slopes; only eval mode is translated")
    slope = (float(a.lower) + float(a.upper)) / 2
    y = cx.apply("leakyReLU", a.self, slope, shape=cx.shape(a.self))
    return y, cx.missing("the noise output of rrelu_with_noise is not translated")


def _binary(op_name):
    """x op y with PyTorch's broadcasting; ``alpha`` (add, sub) scales y first."""
    def translate(cx, a):
        if integral(cx.out_dtype):
            return aten_integers.binary(cx, a, op_name)
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
                   ("remainder", "remainder"), ("maximum", "max"), ("minimum", "min"),
                   ("atan2", "atan2")):
    _entry(*[f"aten.{_aten}.{o}" for o in (("Tensor", "Scalar") if _aten in
                                              ("add", "sub", "mul", "div", "remainder")
                                              else ("default",))]
           )(_binary(_op))


@_entry("aten.div.Tensor_mode", "aten.div.Scalar_mode", "aten.floor_divide.default")
def _divide_rounded(cx, a):
    """div with rounding_mode trunc or floor (``//``): ``div`` at that rounding mode, on
    words for integers (PyTorch's integer quotient; a zero divisor is refused when the
    graph runs), on numbers otherwise."""
    s = cx.out_shape
    mode = a.get("rounding_mode") or "floor"
    if integral(cx.out_dtype):
        return aten_integers.wrap(cx, cx.apply(
            "div", words(cx, a.self, s), words(cx, a.other, s), shape=s, rounding_mode=mode,
            element=WORD), cx.out_dtype)
    cx.scalar_result()
    other = float(a.other) if isinstance(a.other, (int, float)) else a.other
    return cx.apply("div", cx.like(a.self, s), cx.like(other, s), shape=s,
                    rounding_mode=mode)


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
    s = cx.out_shape
    if integral(cx.out_dtype):
        return cx.apply("select", cx.like(a.condition, s), words(cx, a.self, s),
                        words(cx, a.other, s), shape=s, element=WORD)
    cx.scalar_result()
    return cx.apply("select", cx.like(a.condition, s), cx.like(a.self, s), cx.like(a.other, s),
                    shape=s)


# ----- detach and dropout -------------------------------------------------------------------
@_entry("aten.detach.default")
def _detach(cx, a):
    return cx.apply("detach", a.self, shape=cx.out_shape)


def _dropout_p(node):
    """The drop probability of a dropout node that draws a mask (training mode, p > 0), or
    None when it passes its input through (aten's native_dropout: train None is training)."""
    names = ("input", "p", "train")
    bound = dict(zip(names, node.args))
    bound.update(node.kwargs)
    p, train = bound.get("p", 0.5), bound.get("train", True)
    return float(p) if (train is None or train) and p > 0 else None


MASKS["aten.dropout.default"] = MASKS["aten.native_dropout.default"] = _dropout_p


def _dropped(cx, a):
    """dropout(x, mask, p) with the node's mask input (torch.py: ``dropout_mask.<node>``)."""
    cx.scalar_result()
    if a.p >= 1:
        cx.refuse(f"dropout with p={a.p} drops everything; p must lie in [0, 1)")
    return cx.apply("dropout", a.input, cx.dropout_mask(), float(a.p), shape=cx.shape(a.input))


@_entry("aten.dropout.default")
def _dropout(cx, a):
    return _dropped(cx, a) if a.train and a.p > 0 else a.input


@_entry("aten.native_dropout.default")
def _native_dropout(cx, a):
    missing = cx.missing("the mask output of native_dropout is not translated (the graph "
                         "reads the mask as its input dropout_mask.<node>)")
    train = a.train is None or a.train
    return (_dropped(cx, a) if train and a.p > 0 else a.input), missing


# ----- reductions and products -------------------------------------------------------------------
@_entry("aten.mean.dim", "aten.mean.default")
def _mean(cx, a):
    cx.scalar_result()
    shape = cx.shape(a.self)
    return cx.apply("mean", a.self, shape=shape, axes=axes_of(a.get("dim"), len(shape)),
                    keepdim=bool(a.get("keepdim", False)))


@_entry("aten.sum.dim_IntList", "aten.sum.default")
def _sum(cx, a):
    shape = cx.shape(a.self)
    if integral(cx.out_dtype):
        total = aten_integers.total(cx, words(cx, a.self), axes_of(a.get("dim"), len(shape)),
                                    bool(a.get("keepdim", False)))
        return aten_integers.wrap(cx, total, cx.out_dtype)
    cx.scalar_result()
    return cx.apply("reduce", a.self, shape=shape, op="sum",
                    axes=axes_of(a.get("dim"), len(shape)), keepdim=bool(a.get("keepdim", False)))


@_entry("aten.linalg_vector_norm.default")
def _vector_norm(cx, a):
    """linalg_vector_norm (F.normalize, cosine similarity, distances): ord 2 is
    sqrt(sum(x^2)), 1 sum(|x|), inf / -inf max / min |x|, another p > 0
    pow(sum(pow(|x|, p)), 1 / p).  At a zero vector torch's backward gives a zero gradient
    where the chain rule through sqrt would give 0 * inf: ord 2 reads
    select(s > 0, sqrt(select(s > 0, s, 1)), 0) -- the same values, and no gradient where
    s = 0."""
    cx.scalar_result()
    if a.get("dtype") is not None and not cx.same_dtype(a.self):
        cx.refuse(f"a norm into {a.dtype} is not translated (it rounds)")
    x, shape, p = a.self, cx.shape(a.self), float(a.ord)
    axes, keep = axes_of(a.get("dim"), len(shape)), bool(a.keepdim)
    s = cx.out_shape

    def total(op_name, v):
        return cx.apply("reduce", v, shape=shape, op=op_name, axes=axes, keepdim=keep)
    if p in (math.inf, -math.inf):
        return total("max" if p > 0 else "min", cx.apply("abs", x, shape=shape))
    if p == 1:
        return total("sum", cx.apply("abs", x, shape=shape))
    if p == 2:
        squares = total("sum", cx.apply("square", x, shape=shape))
        positive = cx.apply("gt", squares, cx.like(0.0, s), shape=s)
        safe = cx.apply("select", positive, squares, cx.like(1.0, s), shape=s)
        return cx.apply("select", positive, cx.apply("sqrt", safe, shape=s),
                        cx.like(0.0, s), shape=s)
    if not p > 0:
        cx.refuse(f"ord={a.ord} is not translated (only p > 0 and +-inf)")
    powers = cx.apply("pow", cx.apply("abs", x, shape=shape), cx.like(p, shape), shape=shape)
    return cx.apply("pow", total("sum", powers), cx.like(1.0 / p, s), shape=s)


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
    """conv, or convTranspose (weight (C_in, C_out/groups, K...), output_padding) when
    ``transposed``."""
    xs, ws = cx.shape(a.input), cx.shape(a.weight)
    if isinstance(a.padding, str):
        cx.refuse(f"padding={a.padding!r} is not translated (give the padding in numbers)")
    n = len(ws) - 2
    if len(xs) != n + 2:
        cx.refuse(f"input must have batch and channel axes (got shape {list(xs)})")
    out_channels = ws[1] * a.groups if transposed else ws[0]
    bias = cx.zeros((out_channels,)) if a.bias is None else a.bias
    window = dict(shape=xs, out_channels=out_channels, kernel=ws[2:],
                  stride=per_axis(a.stride, n), padding=per_axis(a.padding, n),
                  dilation=per_axis(a.dilation, n), groups=a.groups)
    if transposed:
        return cx.apply("convTranspose", a.input, a.weight, bias,
                        output_padding=per_axis(a.output_padding, n), **window)
    return cx.apply("conv", a.input, a.weight, bias, **window)


_entry("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default")(_conv)


@_entry("aten.convolution.default")
def _convolution(cx, a):
    if not a.transposed and any(per_axis(a.output_padding, 1)):
        cx.refuse("output_padding of a convolution that is not transposed is not translated")
    return _conv(cx, a, transposed=a.transposed)


def _max_pool(cx, a, n):
    if not a.stride:
        stride = per_axis(a.kernel_size, n)
    else:
        stride = per_axis(a.stride, n)
    return cx.apply("pool", a.self, shape=cx.shape(a.self), mode="max",
                    kernel=per_axis(a.kernel_size, n), stride=stride,
                    padding=per_axis(a.padding, n), dilation=per_axis(a.dilation, n),
                    ceil_mode=bool(a.ceil_mode))


for _n in (1, 2, 3):
    _entry(f"aten.max_pool{_n}d.default")((lambda n: lambda cx, a: _max_pool(cx, a, n))(_n))
    _entry(f"aten.max_pool{_n}d_with_indices.default")(
        (lambda n: lambda cx, a: (_max_pool(cx, a, n), cx.missing(
            f"the indices of max_pool{n}d_with_indices are not translated")))(_n))


def _avg_pool(cx, a, n):
    if a.get("divisor_override") is not None:
        cx.refuse("divisor_override is not translated")
    stride = per_axis(a.stride, n) if a.stride else per_axis(a.kernel_size, n)
    return cx.apply("pool", a.self, shape=cx.shape(a.self), mode="average",
                    kernel=per_axis(a.kernel_size, n), stride=stride,
                    padding=per_axis(a.padding, n), dilation=(1,) * n,
                    ceil_mode=bool(a.ceil_mode), count_include_pad=bool(a.count_include_pad))


for _n in (1, 2, 3):
    _entry(f"aten.avg_pool{_n}d.default")((lambda n: lambda cx, a: _avg_pool(cx, a, n))(_n))


def _layer_norm(cx, a):
    """layerNorm over the last axis; over the last k > 1 axes (``normalized_shape`` of k
    extents, LayerNorm([H, W])) the input is viewed with those axes as one, and so are the
    weight and bias: the same statistics over the same entries."""
    xs, norm = cx.shape(a.input), tuple(a.normalized_shape)
    k = len(norm)
    if k == 0 or xs[len(xs) - k:] != norm:
        cx.refuse(f"normalized_shape {list(norm)} must be the last axes of the input "
                  f"{list(xs)}")
    c = (math.prod(norm),)

    def flat(v, fill):
        if v is None:
            return fill(c)
        return cx.apply("reshape", v, shape=norm, to=c) if cx.is_ref(v) and k > 1 else \
            (v if k == 1 else type(v)(v.tensor.reshape(c), v.name))
    x = a.input if k == 1 else cx.apply("reshape", a.input, shape=xs, to=xs[:-k] + c)
    y = cx.apply("layerNorm", x, flat(a.weight, cx.ones), flat(a.bias, cx.zeros),
                 float(a.eps), shape=cx.shape(x))
    return y if k == 1 else cx.apply("reshape", y, shape=cx.shape(x), to=xs)


_entry("aten.layer_norm.default")(_layer_norm)


@_entry("aten.native_layer_norm.default")
def _native_layer_norm(cx, a):
    missing = cx.missing("the saved mean and rstd of native_layer_norm are not translated")
    return (_layer_norm(cx, a), missing, missing)


def _group_norm(cx, x, groups, weight, bias, eps):
    """group norm: the (C / G) x H x W entries of each group normalized by their mean and
    biased variance (layerNorm, weight 1 and bias 0, on x reshaped to (N, G, C/G * HW): the
    normalization torch's group norm computes), reshaped back, then the per-channel affine
    map y * weight + bias."""
    xs = cx.shape(x)
    if len(xs) < 2 or xs[1] % groups:
        cx.refuse(f"channels must be a multiple of the groups (got shape {list(xs)}, "
                  f"{groups} groups)")
    n, c = xs[0], xs[1]
    per = math.prod(xs) // (n * groups)
    grouped = (n, groups, per)
    y = cx.apply("reshape", x, shape=xs, to=grouped)
    y = cx.apply("layerNorm", y, cx.ones((per,)), cx.zeros((per,)), float(eps),
                 shape=grouped)
    y = cx.apply("reshape", y, shape=grouped, to=xs)
    channel = (1, c) + (1,) * (len(xs) - 2)
    if weight is not None:
        w = cx.apply("reshape", weight, shape=(c,), to=channel) if cx.is_ref(weight) \
            else weight
        y = cx.apply("mul", y, cx.like(w, xs), shape=xs)
    if bias is not None:
        b = cx.apply("reshape", bias, shape=(c,), to=channel) if cx.is_ref(bias) else bias
        y = cx.apply("add", y, cx.like(b, xs), shape=xs)
    return y


@_entry("aten.native_group_norm.default")
def _native_group_norm(cx, a):
    missing = cx.missing("the saved mean and rstd of native_group_norm are not translated")
    return (_group_norm(cx, a.input, a.group, a.weight, a.bias, a.eps), missing, missing)


_entry("aten.group_norm.default")(
    lambda cx, a: _group_norm(cx, a.input, a.num_groups, a.weight, a.bias, a.eps))


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
        cx.refuse("aten.batch_norm in training mode is not translated (torch.export gives "
                  "_native_batch_norm_legit_functional, which is)")
    return _batch_norm_running(cx, a)


def _batch_norm_batch(cx, a):
    """batchNorm: normalized by the batch statistics (training mode)."""
    xs = cx.shape(a.input)
    if len(xs) < 2:
        cx.refuse(f"input must have batch and channel axes (got shape {list(xs)})")
    c = (xs[1],)
    weight = cx.ones(c) if a.weight is None else a.weight
    bias = cx.zeros(c) if a.bias is None else a.bias
    return cx.apply("batchNorm", a.input, weight, bias, float(a.eps), shape=xs)


def _running_updates(cx, a):
    """(new running_mean, new running_var): PyTorch's update (batch_norm_cpu_update_stats)
    momentum * batch_mean + (1 - momentum) * running_mean, and the same with the unbiased
    batch variance sum((x - mean)^2) / (n - 1), n the values per channel."""
    x, xs = a.input, cx.shape(a.input)
    axes = (0,) + tuple(range(2, len(xs)))
    c, n = (xs[1],), math.prod(xs[ax] for ax in axes)
    if n < 2:
        cx.refuse(f"one value per channel (shape {list(xs)}): the unbiased batch variance "
                  f"is undefined (torch refuses it in training too)")
    kept = cx.apply("mean", x, shape=xs, axes=axes, keepdim=True)
    dev = cx.apply("sub", x, cx.like(kept, xs), shape=xs)
    ssq = cx.apply("reduce", cx.apply("square", dev, shape=xs), shape=xs, op="sum",
                   axes=axes, keepdim=False)
    var = cx.apply("div", ssq, cx.like(float(n - 1), c), shape=c)
    mean = cx.apply("reshape", kept, shape=cx.shape(kept), to=c)
    m = float(a.momentum)

    def update(batch, running):
        return cx.apply("add", cx.apply("scale", batch, m, shape=c),
                        cx.apply("scale", running, 1.0 - m, shape=c), shape=c)
    return update(mean, a.running_mean), update(var, a.running_var)


@_entry("aten._native_batch_norm_legit_functional.default")
def _batch_norm_functional(cx, a):
    """(y, saved mean, saved rstd, new running_mean, new running_var): in training mode the
    batch statistics normalize and the running statistics are updated (torch.py returns
    the updates after the model's outputs)."""
    missing = cx.missing("the saved statistics of batch norm are not translated")
    if not a.training:
        return (_batch_norm_running(cx, a), missing, missing, a.running_mean, a.running_var)
    if a.momentum is None:
        cx.refuse("momentum=None (a cumulative average) is not translated")
    y = _batch_norm_batch(cx, a)
    return (y, missing, missing) + _running_updates(cx, a)


@_entry("aten._native_batch_norm_legit.no_stats")
def _batch_norm_no_stats(cx, a):
    if not a.training:
        cx.refuse("batch norm without running statistics in eval mode is not translated")
    missing = cx.missing("the saved statistics of batch norm are not translated")
    return (_batch_norm_batch(cx, a), missing, missing)


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
        return cx.apply(op_name, a.self, shape=shape, axis=axis_of(a.dim, len(shape)))
    return translate


_entry("aten.softmax.int", "aten._softmax.default")(_softmax("softmax"))
_entry("aten.log_softmax.int", "aten._log_softmax.default")(_softmax("logSoftmax"))


@_entry("aten.scaled_dot_product_attention.default")
def _sdpa(cx, a):
    if a.dropout_p:
        cx.refuse(f"attention dropout (dropout_p={a.dropout_p}) draws a random mask")
    if a.attn_mask is not None and a.is_causal:
        cx.refuse("attn_mask and is_causal=True together are not translated (torch refuses "
                  "them too)")
    qs, ks, vs = cx.shape(a.query), cx.shape(a.key), cx.shape(a.value)
    if a.get("enable_gqa"):
        # The same bound arguments (their class: attribute access) with k and v grouped.
        a = type(a)(a, key=_grouped(cx, a.key, qs), value=_grouped(cx, a.value, qs))
        ks, vs = cx.shape(a.key), cx.shape(a.value)
    if len(qs) < 2 or not qs[:-2] == ks[:-2] == vs[:-2]:
        cx.refuse(f"query, key and value must share their batch axes (got {list(qs)}, "
                  f"{list(ks)}, {list(vs)})")
    # PyTorch's default scale: 1 / sqrt(E) in binary64 (sdp_utils' calculate_scale).
    scale = 1.0 / math.sqrt(qs[-1]) if a.scale is None else float(a.scale)
    if a.attn_mask is None and not a.is_causal:
        return cx.apply("attention", a.query, a.key, a.value, scale, batch=qs[:-2],
                        queries=qs[-2], key_count=ks[-2], dim=qs[-1], value_dim=vs[-1])
    return _masked_attention(cx, a, qs, ks, vs, scale)


def _grouped(cx, x, qs):
    """Grouped-query attention's keys or values (..., H_kv, S, E) for queries (..., H, S, E):
    each of the H_kv heads repeated H / H_kv times in a row (query head h reads head
    h // (H / H_kv), as torch's enable_gqa does) by reshape, broadcast and reshape, which
    move entries exactly; the gradient sums the copies of each head."""
    xs = cx.shape(x)
    if len(xs) < 3 or len(qs) != len(xs) or qs[-3] % xs[-3]:
        cx.refuse(f"grouped-query attention needs query heads a multiple of key heads (got "
                  f"{list(qs)} and {list(xs)})")
    groups = qs[-3] // xs[-3]
    if groups == 1:
        return x
    lead, heads, tail = xs[:-3], xs[-3], xs[-2:]
    one = cx.apply("reshape", x, shape=xs, to=lead + (heads, 1) + tail)
    wide = cx.apply("broadcast", one, shape=lead + (heads, 1) + tail,
                    to=lead + (heads, groups) + tail)
    return cx.apply("reshape", wide, shape=lead + (heads, groups) + tail,
                    to=lead + (heads * groups,) + tail)


def _masked_attention(cx, a, qs, ks, vs, scale):
    """softmax(scale q k^T + mask) v as scaledMatmul, maskedSoftmax and matmul.  A Boolean
    mask (is_causal: the lower triangle) keeps its True entries; a float mask is added and
    its -inf entries are masked, so that a query whose every key is masked gives 0, as
    PyTorch's _safe_softmax does (a plain softmax of a row of -inf would give NaN)."""
    perm = tuple(range(len(ks) - 2)) + (len(ks) - 1, len(ks) - 2)
    kt = cx.apply("permute", a.key, shape=ks, perm=perm, element="scalar")
    s = qs[:-2] + (qs[-2], ks[-2])
    scores = cx.apply("scaledMatmul", a.query, kt, scale, x_shape=qs, y_shape=cx.shape(kt))
    axis = len(s) - 1
    mask = cx.causal(qs[-2], ks[-2]) if a.is_causal else a.attn_mask
    if cx.element(mask) == "bool":
        keep = cx.like(mask, s)
    else:
        if not cx.is_scalar(mask):
            cx.refuse("attn_mask must be Boolean or floating")
        mask = cx.like(mask, s)
        keep = cx.greater(mask, -math.inf, s)
        scores = cx.apply("add", scores, mask, shape=s)
    w = cx.apply("maskedSoftmax", scores, keep, shape=s, axis=axis)
    return cx.apply("matmul", w, a.value, x_shape=s, y_shape=vs)

"""The torch table: registered operator -> the PyTorch call that computes it (issue 23, "Who
is right: PyTorch's own kernels measured against exact values"), kept beside the CUDA kernel
table (kernels/table.py).  torch is the optional extra ``[torch]``; this module never imports
it: every call receives the torch module as its first argument.

``TABLE`` maps an operator name to a ``Call``:

- ``fn(t, a, *xs) -> tensor | tuple``: the torch call with the attribute mapping, ``t`` the
  torch module, ``a`` the operator's attributes, ``xs`` the inputs in port order as tensors
  (value, frozen and detached ports in the format's dtype, index ports int64, Boolean ports
  bool, word ports their integer dtype); it returns the outputs in port order.  Frozen
  scalars that torch takes as Python numbers (an epsilon, a slope) are read with ``.item()``:
  a format value, exact as a Python float.
- ``composite``: True where torch has no single function for the operator and the call is
  the documented torch idiom built from a few torch calls (``x.masked_fill(~mask, -inf)``
  then softmax, ``matmul(x, y) * scale``); False for one torch function (movement of the
  operands aside).
- ``refuses(a) -> reason | None``: attributes at which torch has no counterpart.
- ``no_jvp``: why forward-mode AD (torch.func.jvp) does not run the call, or None.
- ``rejects(a, xs) -> reason | None``: the inputs (numpy) torch refuses where the rule has
  a value (binary_cross_entropy's targets outside [0, 1]): such draws are left out, and the
  rows say how many and why.
- ``conventions``: ``Convention`` entries, where torch's convention differs from the rule's
  (the rows of the routes concerned get the status ``convention``).

``NO_COUNTERPART`` maps every other registered operator to the reason torch has none.
``of_op(op) -> Call | None`` is the entry of an operator instance (None: no counterpart at
these attributes).

A ``Convention`` says, per draw, where torch's convention differs and what the exact value
of torch's own convention is there: ``exact(t, a, xs, vs) -> None | tuple`` receives the
inputs (numpy), the route's tangents or cotangents (None for the forward route) and returns
None where the draw does not meet the difference, else one entry per port of the route's
side (inputs for gradients, outputs otherwise): None (the rule's exact value holds at every
element), ``DIFFERS`` (torch's convention differs there, its exact value is not computed:
the row is still measured against the rule's), or an object array of the port's shape
holding, per element, the exact value of torch's convention (a Fraction, or a float for inf
and NaN; an mpmath number at 256 bits where a logarithm enters) or None (the rule's).  The
exact values are computed with rationals from format values, never from torch's results;
where the convention is a choice torch makes (the index a max pool keeps), the choice is
read from torch and the value computed exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Convention:
    """A difference between torch's convention and the rule's on one route (module
    docstring): ``route``, ``reason`` (one line), ``exact``."""

    route: str
    reason: str
    exact: Callable


@dataclass(frozen=True)
class Call:
    """One operator's torch counterpart (module docstring)."""

    name: str
    fn: Callable
    composite: bool = False
    refuses: Callable | None = None
    no_jvp: str | None = None
    rejects: Callable | None = None
    conventions: tuple = ()


TABLE: dict[str, Call] = {}


def _call(name, fn, **more):
    if name in TABLE:
        raise ValueError(f"torch_calls: {name} is already in the table")
    TABLE[name] = Call(name, fn, **more)


def _item(v):
    """A frozen scalar (0-d tensor) as a Python float: the format value, exactly.  A number
    passes unchanged (torch_compile passes frozen scalars as numbers, which Dynamo traces
    as symbolic inputs instead of breaking the graph at ``.item()``)."""
    return float(v.item()) if hasattr(v, "dim") else v


# ----- exact values of torch's conventions (rationals from format values) --------------------

def _q(v):
    """A finite float as a Fraction; inf and NaN kept as floats."""
    v = float(v)
    return Fraction(v) if math.isfinite(v) else v


def _objects(shape):
    return np.full(shape, None, dtype=object)


def _scaled(v, g):
    """v (a Fraction or a non-finite float) times a cotangent g, the IEEE way for inf."""
    g = _q(g)
    if isinstance(v, float) or isinstance(g, float):
        return float(v) * float(g)
    return v * g


def _where(mask, value, ports, at=(0,)):
    """A convention's exact function: where ``mask(a, xs)`` holds, the ports ``at`` (of the
    route's side, ``ports`` of them) take ``value(xs, vs)`` (per element arrays of floats:
    NaN, inf, or format values passed through exactly)."""
    def exact(t, a, xs, vs):
        xs = [np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else np.asarray(v)
              for v in xs]
        m = mask(a, xs)
        if not m.any():
            return None
        vals = np.broadcast_to(np.asarray(value(xs, vs), np.float64), m.shape)
        out = [None] * ports
        for j in at:
            o = _objects(m.shape)
            o[m] = [_q(v) for v in vals[m]]
            out[j] = o
        return tuple(out)
    return exact


def _nan(xs, vs):
    return np.nan


def _passes(xs, vs):
    """The cotangent (or tangent) itself."""
    return np.asarray(vs[0], np.float64)


# ----- elementwise arithmetic --------------------------------------------------------------------

_call("add", lambda t, a, x, y: t.add(x, y))
_call("sub", lambda t, a, x, y: t.sub(x, y))
_call("mul", lambda t, a, x, y: t.mul(x, y))
_call("div", lambda t, a, x, y: t.div(x, y, rounding_mode=None if a.rounding_mode == "none"
                                      else a.rounding_mode))
_call("neg", lambda t, a, x: t.neg(x))
_call("abs", lambda t, a, x: t.abs(x))


def _sqrt_clamp(route):
    """clampNegative: torch's sqrt(clamp(x, min=0)) passes g through the clamp at x = 0
    (inclusive at its bound) and divides it by 2 sqrt(0): +-inf (NaN for g = 0); below 0 and
    at NaN its tangent is the clamp's 0 over sqrt's 2 sqrt(x), NaN (its gradient there is 0,
    as the rule's: the clamp's pullback selects).  The rule gives 0 (the flat side)."""
    def exact(t, a, xs, vs):
        if a.mode == "raw":
            return None
        x, v = np.asarray(xs[0], np.float64), np.asarray(vs[0], np.float64)
        at = x == 0
        below = (x < 0) | np.isnan(x) if route == "tangent" else np.zeros(x.shape, bool)
        if not (at | below).any():
            return None
        out = _objects(x.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[at] = [float(q) for q in (v[at] / x[at])]     # x = +-0: sqrt(+-0) = +-0
        out[below] = math.nan
        return (out,)
    return exact


_call("sqrt", lambda t, a, x: t.sqrt(x) if a.mode == "raw" else t.sqrt(t.clamp(x, min=0)),
      conventions=(Convention("gradient", "sqrt at clampNegative: torch's sqrt(clamp(x, "
                              "min=0)) gives x = 0 the gradient g/0 = +-inf (the rule: 0, the "
                              "flat side)", _sqrt_clamp("gradient")),
                   Convention("tangent", "sqrt at clampNegative: torch's tangent is t/0 = "
                              "+-inf at x = 0 and NaN below 0 and at NaN (the rule: 0)",
                              _sqrt_clamp("tangent"))))
_call("rsqrt", lambda t, a, x: t.rsqrt(x))
_call("reciprocal", lambda t, a, x: t.reciprocal(x))
_call("square", lambda t, a, x: t.square(x))
_call("pow", lambda t, a, x, y: t.pow(x, y))
_call("scale", lambda t, a, x, c: t.mul(x, c))
_call("fmod", lambda t, a, x, y: t.fmod(x, y),
      conventions=(Convention("gradient", "fmod at an infinite x: torch's gradient at y is NaN "
                              "(the rule: -trunc(x/y) g, infinite)",
                              _where(lambda a, xs: np.isinf(xs[0]), _nan, 2, (1,))),
                   Convention("tangent", "fmod at an infinite x: torch's tangent is NaN",
                              _where(lambda a, xs: np.isinf(xs[0]), _nan, 1))))
_call("remainder", lambda t, a, x, y: t.remainder(x, y))


def _hypot_nan(a, xs):
    """The origin (0/0) and a NaN operand against a finite one (NaN result)."""
    x, y = xs
    return ((x == 0) & (y == 0)) | np.isnan(np.hypot(x, y))


_call("hypot", lambda t, a, x, y: t.hypot(x, y),
      conventions=(Convention("gradient", "hypot at the origin and at a NaN operand: torch's "
                              "gradient x/hypot is NaN (the rule: the subgradient 0)",
                              _where(_hypot_nan, _nan, 2, (0, 1))),
                   Convention("tangent", "hypot at the origin and at a NaN operand: torch's "
                              "tangent is NaN (the rule: 0)", _where(_hypot_nan, _nan, 1))))
_call("copysign", lambda t, a, x, y: t.copysign(x, y),
      conventions=tuple(Convention(r, "copysign at an infinite or NaN x: torch's derivative "
                                      "result/x is NaN (the rule: +-1 at inf, 0 at NaN)",
                                   _where(lambda a, xs: ~np.isfinite(xs[0]), _nan,
                                          2 if r == "gradient" else 1))
                        for r in ("gradient", "tangent")))
_call("nextafter", lambda t, a, x, y: t.nextafter(x, y))
def _lerp_inf(xs, vs):
    """torch's lerp with an infinite endpoint, in IEEE arithmetic (exact: the results are
    infinities or NaN): x + w (y - x) for |w| < 0.5, y - (y - x)(1 - w) otherwise."""
    x, y, w = xs
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.abs(w) < 0.5, x + w * (y - x), y - (y - x) * (1 - w))


_call("lerp", lambda t, a, x, y, w: t.lerp(x, y, w),
      conventions=(Convention("forward", "lerp with an infinite endpoint: torch's formula "
                              "switches to y - (y - x)(1 - w) at w >= 0.5, so it gives inf "
                              "where x + w (y - x) is inf - inf = NaN (and the other way)",
                              _where(lambda a, xs: np.isinf(xs[0]) | np.isinf(xs[1]),
                                     _lerp_inf, 1)),))
_call("addcmul", lambda t, a, x, t1, t2, c: t.addcmul(x, t1, t2, value=_item(c)))
_call("addcdiv", lambda t, a, x, t1, t2, c: t.addcdiv(x, t1, t2, value=_item(c)))
_call("nanToNum", lambda t, a, x, nan, pos, neg: t.nan_to_num(
    x, nan=_item(nan), posinf=_item(pos), neginf=_item(neg)))
_call("fullLike", lambda t, a, x, c: t.full_like(x, _item(c)))

# ----- transcendental functions ------------------------------------------------------------------

for _name, _fn in (("exp", "exp"), ("exp2", "exp2"), ("expm1", "expm1"), ("log", "log"),
                   ("log2", "log2"), ("log10", "log10"), ("log1p", "log1p"), ("sin", "sin"),
                   ("cos", "cos"), ("tan", "tan"), ("asin", "asin"), ("acos", "acos"),
                   ("atan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"), ("asinh", "asinh"),
                   ("acosh", "acosh"), ("atanh", "atanh"), ("erf", "erf"),
                   ("floor", "floor"), ("ceil", "ceil"), ("round", "round"),
                   ("trunc", "trunc"), ("frac", "frac")):
    _call(_name, (lambda f: lambda t, a, x: getattr(t, f)(x))(_fn))
# atan2's first port is the numerator, as torch.atan2(input, other).
_call("atan2", lambda t, a, x, y: t.atan2(x, y))


def _sign_nan(t, a, xs, vs):
    """torch.sign(NaN) is 0 (the rule: NaN)."""
    x = np.asarray(xs[0], np.float64)
    at = np.isnan(x)
    if not at.any():
        return None
    out = _objects(x.shape)
    out[at] = Fraction(0)
    return (out,)


_call("sign", lambda t, a, x: t.sign(x),
      conventions=(Convention("forward", "sign(NaN): torch gives 0 (the rule: NaN)",
                              _sign_nan),))

# ----- extrema ----------------------------------------------------------------------------------

def _max_conv(route):
    """maximum/minimum where torch's convention differs from the rule's: a NaN operand (torch
    gives both operands the whole cotangent, and the tangent ty; the rule splits both in
    half) and a tie of signed zeros (torch splits it in half, where the rule orders -0 below
    +0 and gives the larger zero everything)."""
    def exact(t, a, xs, vs):
        if a.element != "scalar":
            return None
        x, y = (np.asarray(v, np.float64) for v in xs)
        nan = np.isnan(x) | np.isnan(y)
        zeros = (x == y) & (np.signbit(x) != np.signbit(y))
        if not (nan | zeros).any():
            return None
        if route == "gradient":
            g = np.asarray(vs[0], np.float64)
            gx = _objects(x.shape)
            gx[nan] = [_q(v) for v in g[nan]]
            gx[zeros] = [_scaled(Fraction(1, 2), v) for v in g[zeros]]
            return (gx, gx.copy())
        tx, ty = (np.asarray(v, np.float64) for v in vs)
        out = _objects(x.shape)
        out[nan] = [_q(v) for v in ty[nan]]
        out[zeros] = [_scaled(Fraction(1, 2), _add(p, q)) for p, q in zip(tx[zeros], ty[zeros])]
        return (out,)
    return exact


def _add(p, q):
    p, q = _q(p), _q(q)
    return float(p) + float(q) if isinstance(p, float) or isinstance(q, float) else p + q


def _fmax_tie(name, route):
    """fmax/fmin where the operands compare equal (+0 and -0 included) or are both NaN:
    torch's gradient gives x the whole cotangent (the rule splits it in half, or orders the
    zeros); its tangent is ty at an fmax tie, tx at an fmin tie and tx where both are NaN
    (the rule: the half sum)."""
    def exact(t, a, xs, vs):
        x, y = (np.asarray(v, np.float64) for v in xs)
        tie, both = x == y, np.isnan(x) & np.isnan(y)
        at = tie | both
        if not at.any():
            return None
        if route == "tangent":
            tx, ty = (np.asarray(v, np.float64) for v in vs)
            pick = np.where(tie & (name == "fmax"), ty, tx)
            out = _objects(x.shape)
            out[at] = [_q(v) for v in pick[at]]
            return (out,)
        first, second = _objects(x.shape), _objects(x.shape)
        first[at] = [_q(v) for v in np.asarray(vs[0], np.float64)[at]]
        second[at] = Fraction(0)
        return (first, second)
    return exact


for _name, _fn in (("max", "maximum"), ("min", "minimum")):
    _call(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_fn),
          conventions=tuple(Convention(r, f"{_name} with a NaN operand: torch gives both "
                                          f"operands the whole cotangent and the tangent ty "
                                          f"(the rule: half each, the half sum); at a tie of "
                                          f"-0 and +0 torch splits in half (the rule orders "
                                          f"the zeros)", _max_conv(r))
                            for r in ("gradient", "tangent")))
for _name in ("fmax", "fmin"):
    _call(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_name),
          conventions=(
              Convention("gradient", f"{_name} at a tie (x == y, -0 == +0, or both NaN): torch "
                                     f"gives x the whole cotangent (the rule splits it in "
                                     f"half)", _fmax_tie(_name, "gradient")),
              Convention("tangent", f"{_name} at a tie: torch's tangent is "
                                    f"{'ty' if _name == 'fmax' else 'tx'} (tx where both are "
                                    f"NaN; the rule: the half sum)",
                         _fmax_tie(_name, "tangent"))))
_call("clamp", lambda t, a, x, lo, hi: t.clamp(x, min=_item(lo), max=_item(hi)))

# ----- activations -----------------------------------------------------------------------------

def _threshold_nan(name, rule, ports):
    """relu and elu at NaN: torch's threshold test (x <= 0 is false at NaN) passes the
    cotangent (tangent) through; the rule gives ``rule``."""
    return tuple(Convention(r, f"{name} at NaN: torch's threshold test passes the "
                               f"{'cotangent' if r == 'gradient' else 'tangent'} through "
                               f"(the rule: {rule})",
                            _where(lambda a, xs: np.isnan(xs[0]), _passes,
                                   ports if r == "gradient" else 1))
                 for r in ("gradient", "tangent"))


_call("relu", lambda t, a, x: t.nn.functional.relu(x), conventions=_threshold_nan("relu", "0", 1))
_call("elu", lambda t, a, x, alpha: t.nn.functional.elu(x, alpha=_item(alpha)),
      conventions=_threshold_nan("elu", "NaN", 2))
_call("sigmoid", lambda t, a, x: t.sigmoid(x))
_call("tanh", lambda t, a, x: t.tanh(x))
_call("softplus", lambda t, a, x, beta, th: t.nn.functional.softplus(
    x, beta=_item(beta), threshold=_item(th)))
_call("silu", lambda t, a, x: t.nn.functional.silu(x))
_call("gelu", lambda t, a, x: t.nn.functional.gelu(x, approximate=a.approximate))
_call("leakyReLU", lambda t, a, x, s: t.nn.functional.leaky_relu(x, negative_slope=_item(s)))

# ----- comparisons, logic, casts ---------------------------------------------------------------

for _name, _fn in (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"),
                   ("ge", "ge"), ("logicalAnd", "logical_and"), ("logicalOr", "logical_or"),
                   ("logicalXor", "logical_xor")):
    _call(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_fn))
for _name, _fn in (("isNaN", "isnan"), ("isInf", "isinf"), ("isFinite", "isfinite"),
                   ("logicalNot", "logical_not")):
    _call(_name, (lambda f: lambda t, a, x: getattr(t, f)(x))(_fn))
_call("select", lambda t, a, c, x, y: t.where(c, x, y))
# The dtype argument ``d`` of a conversion: the value ports' dtype (the format's).
_call("cast", lambda t, a, x, d=None: x.to(d))

# ----- integer words ---------------------------------------------------------------------------

for _name, _fn in (("bitwiseAnd", "bitwise_and"), ("bitwiseOr", "bitwise_or"),
                   ("bitwiseXor", "bitwise_xor"), ("bitwiseLeftShift", "bitwise_left_shift")):
    _call(_name, (lambda f: lambda t, a, x, y: getattr(t, f)(x, y))(_fn))
_call("bitwiseNot", lambda t, a, x: t.bitwise_not(x))
_call("shiftRightArithmetic", lambda t, a, x, n: t.bitwise_right_shift(x, n),
      refuses=lambda a: None if a.element.startswith("int") else
      "torch shifts unsigned words right logically (no arithmetic shift of a uint pattern)")
_call("shiftRightLogical", lambda t, a, x, n: t.bitwise_right_shift(x, n),
      refuses=lambda a: None if a.element.startswith("uint") else
      "torch shifts signed words right arithmetically (no logical shift of an int pattern)")


def _bitcast(t, a, x, d=None):
    words = {"int8": t.int8, "int16": t.int16, "int32": t.int32, "int64": t.int64,
             "uint8": t.uint8, "uint16": t.uint16, "uint32": t.uint32, "uint64": t.uint64}
    to = d if a.target == "scalar" else words[a.target]
    if x.element_size() != t.empty((), dtype=to).element_size():
        raise ValueError(f"bitcast: {x.dtype} words and {to} differ in width")
    return x.view(to)


_call("bitcast", _bitcast)
_call("encodeIndex", lambda t, a, i, d=None: i.to(_word(t, a.element)))
_call("decodeIndex", lambda t, a, w, d=None: w.to(t.int64))


def _word(t, name):
    return getattr(t, name)


# ----- scans and orderings ---------------------------------------------------------------------

_call("cumsum", lambda t, a, x: t.cumsum(x, a.axis))
_call("cumprod", lambda t, a, x: t.cumprod(x, a.axis))
_call("cummax", lambda t, a, x: tuple(t.cummax(x, a.axis)))
_call("cummin", lambda t, a, x: tuple(t.cummin(x, a.axis)))
_call("sort", lambda t, a, x: tuple(t.sort(x, dim=a.axis, descending=a.descending,
                                           stable=True)))
_call("topk", lambda t, a, x: tuple(t.topk(x, a.k, dim=a.axis, largest=a.largest,
                                           sorted=True)))
_call("argmax", lambda t, a, x: t.argmax(x, dim=a.axis, keepdim=a.keepdim))
_call("argmin", lambda t, a, x: t.argmin(x, dim=a.axis, keepdim=a.keepdim))

# ----- indexing --------------------------------------------------------------------------------

def _layout(t, a, x, idx):
    """(perm, nb, nk, table (nb, nk, nr), flat targets (nb, ni)): gather and scatter's
    layout (routes/families/indexing.py) in torch: batch axes, indexed axes, the rest."""
    rank = len(a.shape)
    rest = [d for d in range(a.batch, rank) if d not in a.axes]
    perm = list(range(a.batch)) + list(a.axes) + rest
    nb = math.prod(a.shape[:a.batch])
    bounds = [a.shape[d] for d in a.axes]
    nk, nr = math.prod(bounds), math.prod(a.shape[d] for d in rest)
    ni = math.prod(a.index_shape)
    comps = idx.reshape(nb, ni, len(a.axes))
    flat = t.zeros((nb, ni), dtype=t.int64)
    for j, bound in enumerate(bounds):
        flat = flat * bound + comps[..., j]
    return perm, nb, nk, nr, x.permute(perm).reshape(nb, nk, nr), flat


def _gather(t, a, x, idx):
    _, nb, _, nr, table, flat = _layout(t, a, x, idx)
    out = table[t.arange(nb)[:, None], flat]            # advanced indexing: aten::index
    rest = [a.shape[d] for d in range(a.batch, len(a.shape)) if d not in a.axes]
    return out.reshape(tuple(a.shape[:a.batch]) + tuple(a.index_shape) + tuple(rest))


_REDUCE = {"sum": "sum", "prod": "prod", "max": "amax", "min": "amin"}


def _scatter(t, a, x, idx, up):
    perm, nb, nk, nr, table, flat = _layout(t, a, x, idx)
    lin = (flat + t.arange(nb)[:, None] * nk).reshape(-1, 1).expand(-1, nr)
    src = up.reshape(-1, nr)
    flat_table = table.reshape(nb * nk, nr)
    if a.mode == "replace":
        out = flat_table.scatter(0, lin, src)
    else:
        out = flat_table.scatter_reduce(0, lin, src, _REDUCE[a.mode], include_self=True)
    moved = tuple(a.shape[d] for d in perm)
    inverse = [perm.index(d) for d in range(len(perm))]
    return out.reshape(moved).permute(inverse)


def _scatter_replace_grad(t, a, xs, vs):
    """replace with a repeated target: torch's scatter gives every update of that target its
    cotangent (the rule: the last update only)."""
    if a.mode != "replace" or a.element != "scalar":
        return None
    x, idx, up = xs
    g = np.asarray(vs[0], np.float64)
    rank = len(a.shape)
    rest = [d for d in range(a.batch, rank) if d not in a.axes]
    perm = list(range(a.batch)) + list(a.axes) + rest
    nb = math.prod(a.shape[:a.batch])
    bounds = [a.shape[d] for d in a.axes]
    nk, nr, ni = math.prod(bounds), math.prod(a.shape[d] for d in rest), math.prod(a.index_shape)
    comps = np.asarray(idx, np.int64).reshape(nb, ni, len(a.axes))
    flat = np.zeros((nb, ni), np.int64)
    for j, bound in enumerate(bounds):
        flat = flat * bound + comps[..., j]
    if all(len(set(row)) == len(row) for row in flat.tolist()):
        return None
    gt = np.transpose(g, perm).reshape(nb, nk, nr)
    gu = _objects((nb, ni, nr))
    for b in range(nb):
        for i in range(ni):
            gu[b, i] = [_q(v) for v in gt[b, flat[b, i]]]
    return (None, None, gu.reshape(np.shape(up)))


_call("gather", _gather)
_call("scatter", _scatter,
      conventions=(Convention("gradient", "scatter replace with a repeated target: torch "
                              "gives every update of the target its cotangent (the rule: the "
                              "last update only)", _scatter_replace_grad),))


def _indices(t, a):
    if len(a.shape) == 1:
        return t.arange(a.shape[0], dtype=t.int64)
    grids = t.meshgrid(*[t.arange(n, dtype=t.int64) for n in a.shape], indexing="ij")
    return t.stack(grids, dim=-1)


_call("indices", lambda t, a: _indices(t, a), composite=True)
_call("indexAt", lambda t, a, x, at: t.index_select(x, a.axis, at.reshape(1)).squeeze(a.axis))
_call("slice", lambda t, a, x: x[(slice(None),) * a.axis + (slice(a.start, a.stop, a.step),)])
_call("embedding", lambda t, a, w, ids: t.nn.functional.embedding(ids, w))

# ----- data movement ---------------------------------------------------------------------------

def _pad(t, a, x):
    pads = []
    for b, e in zip(reversed(a.before), reversed(a.after)):
        pads += [b, e]
    return t.nn.functional.pad(x, pads, mode="constant", value=0)


_call("reshape", lambda t, a, x: x.reshape(a.to))
_call("permute", lambda t, a, x: x.permute(a.perm))
_call("broadcast", lambda t, a, x: t.broadcast_to(x, a.to))
_call("flip", lambda t, a, x: t.flip(x, a.axes))
_call("pad", _pad)
_call("cat", lambda t, a, *xs: t.cat(xs, dim=a.axis))

# ----- reductions and products ------------------------------------------------------------------

def _reduce(t, a, x):
    axes = list(a.axes)
    if a.op == "sum":
        return t.sum(x, dim=axes, keepdim=a.keepdim)
    if a.op == "max":
        return t.amax(x, dim=axes, keepdim=a.keepdim)
    if a.op == "min":
        return t.amin(x, dim=axes, keepdim=a.keepdim)
    # torch.prod takes one axis: the reduced axes moved last and flattened into one.
    keep = [d for d in range(x.dim()) if d not in axes]
    moved = x.permute(keep + axes).reshape([x.shape[d] for d in keep] + [-1])
    y = t.prod(moved, dim=-1)
    if a.keepdim:
        y = y.reshape([1 if d in axes else x.shape[d] for d in range(x.dim())])
    return y


_call("reduce", _reduce)
_call("mean", lambda t, a, x: t.mean(x, dim=list(a.axes), keepdim=a.keepdim))
_call("contract", lambda t, a, x, y: t.tensordot(x, y, dims=(list(a.x_axes), list(a.y_axes))))
_call("matmul", lambda t, a, x, y: t.matmul(x, y))
_call("scaledMatmul", lambda t, a, x, y, s: t.matmul(x, y) * s, composite=True)
_call("linear", lambda t, a, w, b, x: t.nn.functional.linear(x, w, b))

# ----- convolution and pooling -----------------------------------------------------------------

def _nd(a):
    return len(a.kernel)


def _conv(t, a, x, w, b):
    f = getattr(t.nn.functional, f"conv{_nd(a)}d")
    return f(x, w, b, stride=a.stride, padding=a.padding, dilation=a.dilation, groups=a.groups)


def _conv_t(t, a, x, w, b):
    f = getattr(t.nn.functional, f"conv_transpose{_nd(a)}d")
    return f(x, w, b, stride=a.stride, padding=a.padding, output_padding=a.output_padding,
             groups=a.groups, dilation=a.dilation)


def _pooled(a, x):
    """x as (N, 1, spatial...) for torch's pooling (leading axes flattened), and the shape to
    return to."""
    n = _nd(a)
    lead = tuple(a.shape[:len(a.shape) - n])
    return x.reshape((math.prod(lead), 1) + tuple(a.shape[len(a.shape) - n:])), lead


def _pool(t, a, x, with_indices=False):
    F = t.nn.functional
    xx, lead = _pooled(a, x)
    if a.mode == "max":
        y, idx = getattr(F, f"max_pool{_nd(a)}d")(
            xx, a.kernel, a.stride, a.padding, a.dilation, ceil_mode=a.ceil_mode,
            return_indices=True)
        if with_indices:
            return y.reshape(lead + tuple(y.shape[2:])), idx.reshape(lead + tuple(y.shape[2:]))
    else:
        y = getattr(F, f"avg_pool{_nd(a)}d")(xx, a.kernel, a.stride, a.padding,
                                             ceil_mode=a.ceil_mode,
                                             count_include_pad=a.count_include_pad)
    return y.reshape(lead + tuple(y.shape[2:]))


def _pool_refuses(a):
    if _nd(a) > 3:
        return f"torch pools over 1 to 3 axes (got {_nd(a)})"
    return None


def _pool_tie(route):
    """max pooling with a tie in a window (equal maxima, or NaN entries): torch gives the
    window's whole cotangent to the one entry its kernel keeps, and takes that entry's
    tangent (the entry read from torch's indices; the rule shares among the entries that
    attain the maximum).  The exact values of that convention: each entry receives the sum
    of the cotangents of the windows that keep it; a tied window's tangent is its kept
    entry's."""
    def exact(t, a, xs, vs):
        if a.mode != "max":
            return None
        x = np.asarray(xs[0], np.float64)
        n = _nd(a)
        rows = math.prod(x.shape[:x.ndim - n])
        spatial = x.shape[x.ndim - n:]
        y, idx = _pool(t, a, t.from_numpy(np.ascontiguousarray(x)), with_indices=True)
        idx = idx.numpy().reshape(rows, -1)
        tied = _tied_windows(a, x.reshape(rows, -1), spatial)
        if not tied.any():
            return None
        if route == "tangent":
            tx = np.asarray(vs[0], np.float64).reshape(rows, -1)
            out = _objects(idx.shape)
            for r, w in zip(*np.nonzero(tied)):
                out[r, w] = _q(tx[r, idx[r, w]])
            return (out.reshape(tuple(y.shape)),)
        g = np.asarray(vs[0], np.float64).reshape(rows, -1)
        out = np.empty((rows, math.prod(spatial)), dtype=object)
        out[...] = Fraction(0)
        for r in range(rows):
            for w in range(idx.shape[1]):
                out[r, idx[r, w]] = _add(out[r, idx[r, w]], g[r, w])
        return (out.reshape(x.shape),)
    return exact


def _tied_windows(a, rows, spatial):
    """(rows, windows) Booleans: the windows that hold their maximum twice or a NaN (the
    windows recomputed from the pooling geometry, PyTorch's output-size rule)."""
    n = len(spatial)
    outs = []
    for L, k, s, p, d in zip(spatial, a.kernel, a.stride, a.padding, a.dilation):
        span = L + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if a.ceil_mode else span // s) + 1
        if a.ceil_mode and (o - 1) * s >= L + p:
            o -= 1
        outs.append(o)
    tied = np.zeros((rows.shape[0], math.prod(outs)), bool)
    for r in range(rows.shape[0]):
        vals = rows[r].reshape(spatial)
        for w, pos in enumerate(np.ndindex(*outs)):
            entries = []
            for tap in np.ndindex(*a.kernel):
                at = [pos[j] * a.stride[j] - a.padding[j] + tap[j] * a.dilation[j]
                      for j in range(n)]
                if all(0 <= at[j] < spatial[j] for j in range(n)):
                    entries.append(vals[tuple(at)])
            entries = np.asarray(entries)
            tied[r, w] = bool(np.isnan(entries).any() or (entries == entries.max()).sum() > 1)
    return tied


_call("conv", _conv, refuses=lambda a: None if _nd(a) <= 3 else
      f"torch convolves over 1 to 3 axes (got {_nd(a)})")
_call("convTranspose", _conv_t, refuses=lambda a: None if _nd(a) <= 3 else
      f"torch convolves over 1 to 3 axes (got {_nd(a)})")
_call("pool", _pool, refuses=_pool_refuses,
      conventions=(Convention("gradient", "max pooling at a tie (equal maxima or NaN): torch "
                              "gives the window's cotangent to the one entry its kernel keeps; "
                              "the rule shares it among the entries at the maximum",
                              _pool_tie("gradient")),
                   Convention("tangent", "max pooling at a tie (equal maxima or NaN): torch "
                              "takes the tangent of the one entry its kernel keeps; the rule "
                              "averages the entries at the maximum", _pool_tie("tangent"))))

# ----- normalization ---------------------------------------------------------------------------

_call("layerNorm", lambda t, a, x, w, b, eps: t.nn.functional.layer_norm(
    x, (a.shape[-1],), w, b, eps=_item(eps)))


def _batch_stats_refuse(a):
    per_channel = math.prod(a.shape) // a.shape[1] if len(a.shape) > 1 and a.shape[1] else 0
    if len(a.shape) < 2:
        return "torch's batch_norm needs (batch, channels, ...) operands"
    if per_channel <= 1:
        return ("torch's batch_norm in training refuses one value per channel (\"Expected "
                "more than 1 value per channel when training\")")
    return None


_call("batchNorm", lambda t, a, x, w, b, eps: t.nn.functional.batch_norm(
    x, None, None, w, b, training=True, eps=_item(eps)), refuses=_batch_stats_refuse)


def _bn_running(t, a, x, w, b, rm, rv, eps):
    moved = x.movedim(a.axis, 0).unsqueeze(0)            # (1, C, rest...)
    y = t.nn.functional.batch_norm(moved, rm, rv, w, b, training=False, eps=_item(eps))
    return y.squeeze(0).movedim(0, a.axis)


_call("batchNormRunning", _bn_running)

# ----- softmax and attention ---------------------------------------------------------------------

def _masked_nan(route):
    """maskedSoftmax where the slice's softmax is NaN in torch: torch's masked_fill(~mask,
    -inf) then softmax gives NaN over a slice with no kept entry (the rule: 0) and at the
    masked entries of a slice whose kept entries hold a NaN or +inf (the rule: exactly 0
    at masked entries); tangents likewise (its gradient there is 0, as the rule's:
    masked_fill's pullback zeroes the masked entries)."""
    def exact(t, a, xs, vs):
        x, mask = np.asarray(xs[0], np.float64), np.asarray(xs[1], bool)
        empty = ~mask.any(axis=a.axis, keepdims=True)
        poisoned = (mask & (np.isnan(x) | (x == np.inf))).any(axis=a.axis, keepdims=True)
        at = np.broadcast_to(empty | poisoned, x.shape) & (~mask | np.broadcast_to(empty,
                                                                                   x.shape))
        if not at.any():
            return None
        out = _objects(x.shape)
        out[at] = math.nan
        return (out,)
    return exact


_call("softmax", lambda t, a, x: t.softmax(x, dim=a.axis))
_call("logSoftmax", lambda t, a, x: t.log_softmax(x, dim=a.axis))
_call("maskedSoftmax", lambda t, a, x, m: t.softmax(x.masked_fill(~m, float("-inf")),
                                                    dim=a.axis),
      composite=True,
      conventions=tuple(Convention(r, "maskedSoftmax: torch's masked_fill(-inf) then softmax "
                                      "gives NaN over a slice with no kept entry and at the "
                                      "masked entries of a slice with a kept NaN or +inf (the "
                                      "rule: 0 there)", _masked_nan(r))
                        for r in ("forward", "tangent")))


def _sdpa(t, q, k, v, scale):
    return t.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)


_call("attention", lambda t, a, q, k, v, s: _sdpa(t, q, k, v, _item(s)))
_call("attentionFromScores", lambda t, a, s, v: t.matmul(t.softmax(s, dim=-1), v),
      composite=True)


def _mha(t, a, q, k, v, s):
    """Heads split from the last axis, scaled_dot_product_attention per head (torch's
    multi_head_attention_forward between its projections), heads concatenated back."""
    def split(z, d):
        return z.reshape(z.shape[:-1] + (a.heads, d)).transpose(-3, -2)
    out = _sdpa(t, split(q, a.head_dim), split(k, a.head_dim), split(v, a.value_head_dim),
                _item(s))
    out = out.transpose(-3, -2)
    return out.reshape(out.shape[:-2] + (a.heads * a.value_head_dim,))


_call("multiheadAttention", _mha, composite=True)

# ----- losses ------------------------------------------------------------------------------------

def _class_axis(a):
    return 1 if len(a.shape) >= 2 else 0


def _reduced(t, a, per_elem):
    if a.reduction == "mean":
        return per_elem.mean()
    if a.reduction == "sum":
        return per_elem.sum()
    return per_elem


DIFFERS = "differs"     # a convention's port where torch's exact value is not computed


# torch's guard of the BCE gradient: EPSILON = 1e-12, read as a float32 (aten's loss.cpp).
_BCE_EPS = Fraction(float(np.float32(1e-12)))
# The rule clamps each log at -100 (as torch's forward does): below e^-100 they differ.
_E100 = Fraction(math.exp(-100))


def _bce_near(x):
    """(x as Fractions, where x (1 - x) < torch's epsilon)."""
    xq = np.asarray([Fraction(v) if math.isfinite(v) else v for v in x.reshape(-1)],
                    dtype=object).reshape(x.shape)
    near = np.asarray([isinstance(v, Fraction) and v * (1 - v) < _BCE_EPS
                       for v in xq.reshape(-1)], bool).reshape(x.shape)
    return xq, near


def _bce_grad(t, a, xs, vs):
    """binaryCrossEntropy near 0 and 1: torch's gradient at x is g (x - target) /
    max(x (1 - x), eps), eps = float32(1e-12) (over n under mean), where x (1 - x) < eps
    (the rule differentiates the clamped logs); its gradient at target is
    g (log(1 - x) - log(x)) with unclamped logs (+-inf at 0 and 1), where the rule clamps
    them at -100 (x or 1 - x below e^-100; the logs evaluated at 256 bits)."""
    import mpmath
    x, tg = (np.asarray(v, np.float64) for v in xs)
    xq, near = _bce_near(x)
    clamped = np.asarray([isinstance(v, Fraction) and 0 <= v <= 1 and
                          (v < _E100 or 1 - v < _E100) for v in xq.reshape(-1)],
                         bool).reshape(x.shape)
    if not (near | clamped).any():
        return None
    g = np.broadcast_to(np.asarray(vs[0], np.float64), x.shape)
    n = x.size if a.reduction == "mean" else 1
    gx, gt = _objects(x.shape), _objects(x.shape)
    ctx = mpmath.MPContext()
    ctx.prec = 256
    for pos in zip(*np.nonzero(near)):
        v = xq[pos]
        gx[pos] = _scaled((v - Fraction(tg[pos])) / max(v * (1 - v), _BCE_EPS) / n, g[pos])
    for pos in zip(*np.nonzero(clamped)):
        v = xq[pos]
        if v in (0, 1):
            gt[pos] = (math.inf if v == 0 else -math.inf) * float(g[pos])
        else:
            xv = ctx.mpf(float(x[pos]))
            gt[pos] = (ctx.log1p(-xv) - ctx.log(xv)) * ctx.mpf(float(g[pos])) / n
    return (gx, gt)


def _bce_tangent(t, a, xs, vs):
    """Its tangent there: torch's forward-mode formula (NaN at x = 0 and 1, the guarded
    quotient near them) has no exact value computed here."""
    x = np.asarray(xs[0], np.float64)
    return (DIFFERS,) if _bce_near(x)[1].any() else None


_call("mseLoss", lambda t, a, x, y: t.nn.functional.mse_loss(x, y, reduction=a.reduction))
_call("maeLoss", lambda t, a, x, y: t.nn.functional.l1_loss(x, y, reduction=a.reduction))
_call("huberLoss", lambda t, a, x, y, d: t.nn.functional.huber_loss(
    x, y, reduction=a.reduction, delta=_item(d)))
_call("poissonLoss", lambda t, a, x, y: t.nn.functional.poisson_nll_loss(
    x, y, log_input=True, full=False, reduction=a.reduction))
def _bce_rejects(a, xs):
    target = np.asarray(xs[1], np.float64)
    if ((target >= 0) & (target <= 1)).all():
        return None
    return ("torch's binary_cross_entropy refuses targets outside [0, 1] (\"all elements of "
            "target should be between 0 and 1\"; the rule does not check them)")


_call("binaryCrossEntropy", lambda t, a, x, y: t.nn.functional.binary_cross_entropy(
    x, y, reduction=a.reduction), rejects=_bce_rejects,
      conventions=(Convention("gradient", "binaryCrossEntropy near 0 and 1: torch divides by "
                              "max(x (1 - x), 1e-12) (the rule differentiates the clamped "
                              "logs), and its target gradient takes the logs unclamped (+-inf "
                              "at 0 and 1; the rule clamps at -100)", _bce_grad),
                   Convention("tangent", "binaryCrossEntropy within 1e-12 of 0 or 1: torch's "
                              "forward-mode formula differs (NaN at 0 and 1)", _bce_tangent)))
_call("cosineLoss", lambda t, a, x, y, eps: _reduced(
    t, a, 1 - t.nn.functional.cosine_similarity(x, y, dim=a.axis, eps=_item(eps))),
      composite=True)
_call("crossEntropy", lambda t, a, x, y: t.nn.functional.cross_entropy(
    x, y, reduction=a.reduction))
_call("crossEntropyProbabilities", lambda t, a, x, y: t.nn.functional.cross_entropy(
    x, y, reduction=a.reduction))


def _distill(t, a, x, teacher, temp):
    F, T = t.nn.functional, _item(temp)
    ax = _class_axis(a)
    kl = F.kl_div(F.log_softmax(x / T, dim=ax), F.softmax(teacher / T, dim=ax),
                  reduction="none").sum(dim=ax)
    if a.reduction == "mean":
        kl = kl.sum() / (kl.numel() if kl.dim() else 1)
    elif a.reduction == "sum":
        kl = kl.sum()
    return kl * (T * T)


_call("distill", _distill, composite=True,
      refuses=lambda a: None if len(a.shape) <= 2 else
      "torch's kl_div batchmean divides by the batch extent, the rule by the slice count")

# ----- masks, spectral, graph --------------------------------------------------------------------

def _dropout_nonfinite(t, a, xs, vs):
    """A dropped NaN or infinite entry: torch's x * mask * (1/(1-p)) gives NaN (the rule's
    select gives +0)."""
    x, mask = np.asarray(xs[0], np.float64), np.asarray(xs[1], np.float64)
    at = (mask == 0) & ~np.isfinite(x)
    if not at.any():
        return None
    out = _objects(x.shape)
    out[at] = math.nan
    return (out,)


_call("dropout", lambda t, a, x, mask, p: x * mask * (1.0 / (1.0 - _item(p))), composite=True,
      conventions=(Convention("forward", "dropout of a NaN or infinite entry: torch's "
                              "x * mask * scale gives NaN (the rule: +0)",
                              _dropout_nonfinite),))


def _rfft(t, a, x):
    y = t.fft.rfft(x, dim=a.axis)
    return y.real, y.imag


_call("rfft", _rfft)
_call("irfft", lambda t, a, re, im: t.fft.irfft(t.complex(re, im), n=a.length, dim=a.axis))
_call("detach", lambda t, a, x: x.detach())


# ----- operators without a counterpart ------------------------------------------------------------

NO_COUNTERPART = {
    "cbrt": "torch has no cube root (x.pow(1/3) is NaN below 0 and 1/3 is not a third)",
    "safeDiv": "no torch function: the guarded division is the caller's composition",
    "safeInv": "no torch function: the guarded reciprocal is the caller's composition",
    "safeLog": "no torch function: the guarded logarithm is the caller's composition",
    "smoothAbs": "no torch function: sqrt(x^2 + eps) is the caller's composition",
    "populationCount": "torch has no population count of integer words",
    "countLeadingZeros": "torch has no count of leading zeros",
    "mulhi": "torch has no high half of a word product",
    "smoothMaxPool": "torch has no log-sum-exp pooling",
    "hingeLoss": "torch has no binary hinge loss (hinge_embedding_loss is another function: x "
                 "for y = 1, max(0, margin - x) for y = -1)",
    "logCoshLoss": "torch has no log-cosh loss",
    "topKMask": "no torch function; its content is the tie order, which torch.topk leaves to "
                "the kernel",
    "bernoulliMask": "torch's generators draw other numbers than the counter-based SplitMix64 "
                     "draws: nothing to compare",
    "randUniform": "torch's generators draw other numbers than the counter-based SplitMix64 "
                   "draws: nothing to compare",
    "randn": "torch's generators draw other numbers than the counter-based Box-Muller draws: "
             "nothing to compare",
    "selectiveScan": "Mamba's selective scan is not part of torch (mamba_ssm's kernel)",
    "custom": "a custom node runs its own program",
}

# Operators whose calls take the format's dtype as the keyword ``d`` (conversions).
CONVERSIONS = ("cast", "bitcast", "encodeIndex", "decodeIndex")


def names() -> tuple:
    """The operators with a torch counterpart, in table order."""
    return tuple(TABLE)


def of_op(op) -> Call | None:
    """The torch entry of ``op`` (a routes Op, or an operator name), or None where torch has
    no counterpart (no entry, or ``refuses`` gives a reason at these attributes)."""
    if isinstance(op, str):
        return TABLE.get(op)
    c = TABLE.get(op.name)
    if c is None or (c.refuses is not None and c.refuses(op.attrs)):
        return None
    return c


def missing(op) -> str | None:
    """Why torch has no counterpart of the operator instance ``op``, or None."""
    c = TABLE.get(op.name)
    if c is None:
        return NO_COUNTERPART.get(op.name, f"no torch counterpart of {op.name} in the table")
    return c.refuses(op.attrs) if c.refuses is not None else None

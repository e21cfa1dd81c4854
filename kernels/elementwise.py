"""Elementwise kernels: one thread per element, each body the operator's rule
(routes/families/elementwise.py, transcendental.py, extrema.py, activation.py) spelt with the
device primitives of kernels.primitives, in the rule's order of primitives.

``ELEMENTWISE`` maps an operator name to an ``Entry``: arity (value inputs), the frozen
scalar ports, the forward body and the gradient bodies (one per value input); the contract
is computed from the trace of the rule each body spells (kernels/trace.py).  A
factory receives the flavour's primitive table ``P`` and the device decorator and returns
device functions ``f(x[, y], c0, c1, rp)`` (``c0``, ``c1`` the frozen scalars, 0 where
unused) and gradients ``g(x[, y], v, c0, c1, rp)`` (``v`` the cotangent).  Selections
(``where`` in a rule) are plain branches on comparisons, which round nothing.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from typing import Callable, NamedTuple

from roundoff_coverage.routes.families.activation import GELU_C, RSQRT2, RSQRT2PI, SQRT_2_OVER_PI

from .base import DIRECTED, Instance, Kernel, flat
from .contract import TRACED, Contract


class Entry(NamedTuple):
    arity: int                        # value inputs (1 or 2)
    frozen: tuple                     # names of frozen scalar ports, in port order
    forward: Callable                 # factory(P, dev) -> device function
    gradient: Callable | None         # factory(P, dev) -> tuple of device functions
    accepts: Callable = lambda attrs: True   # the attributes this kernel implements
    tests: tuple = ()                 # test instances besides _VECTOR (kernels.base.Instance)


# Test instances: every entry on a vector of 10 in every format, kind and route; the
# directed modes (the emulated flavour in every mode) for one entry of each kind of body;
# a vector of 3 for the entries whose operator names other modules' kernels reuse as compile
# keys (the simulator tests run these first, so the keys must not collide).
_VECTOR = Instance({"shape": (10,)})
_DIRECTED = Instance({"shape": (10,)}, formats=("bfloat16", "binary16", "float8_e4m3fn"),
                     kinds=("ordinary",), routes=("forward",), modes=DIRECTED)
_SHORT = Instance({"shape": (3,)}, formats=("bfloat16",), kinds=("ordinary",),
                  routes=("forward",))


# ----- arithmetic ------------------------------------------------------------------------------
def _add(P, dev):
    add = P["add"]
    return dev(lambda x, y, c0, c1, rp: add(x, y, rp))


def _add_grad(P, dev):
    ident = dev(lambda x, y, v, c0, c1, rp: v)
    return ident, ident


def _sub(P, dev):
    sub = P["subtract"]
    return dev(lambda x, y, c0, c1, rp: sub(x, y, rp))


def _sub_grad(P, dev):
    neg = P["negative"]
    return (dev(lambda x, y, v, c0, c1, rp: v), dev(lambda x, y, v, c0, c1, rp: neg(v, rp)))


def _mul(P, dev):
    mul = P["multiply"]
    return dev(lambda x, y, c0, c1, rp: mul(x, y, rp))


def _mul_grad(P, dev):
    mul = P["multiply"]
    return (dev(lambda x, y, v, c0, c1, rp: mul(v, y, rp)),
            dev(lambda x, y, v, c0, c1, rp: mul(x, v, rp)))


def _div(P, dev):
    div = P["divide"]
    return dev(lambda x, y, c0, c1, rp: div(x, y, rp))


def _div_grad(P, dev):
    # (tx - out ty) / y as routes' _div_d: v / y, and -((v * out) / y) with out = x / y.
    div, mul, neg = P["divide"], P["multiply"], P["negative"]
    return (dev(lambda x, y, v, c0, c1, rp: div(v, y, rp)),
            dev(lambda x, y, v, c0, c1, rp: neg(div(mul(v, div(x, y, rp), rp), y, rp), rp)))


def _neg(P, dev):
    neg = P["negative"]
    return dev(lambda x, c0, c1, rp: neg(x, rp))


def _neg_grad(P, dev):
    neg = P["negative"]
    return (dev(lambda x, v, c0, c1, rp: neg(v, rp)),)


def _abs(P, dev):
    ab = P["abs"]
    return dev(lambda x, c0, c1, rp: ab(x, rp))


def _abs_grad(P, dev):
    neg = P["negative"]

    @dev
    def g(x, v, c0, c1, rp):
        # sign(x) v by selection; 0 at +-0 and NaN (routes' _abs_d).
        if x > 0.0:
            return v
        if x < 0.0:
            return neg(v, rp)
        return 0.0
    return (g,)


def _sqrt(P, dev):
    sq = P["sqrt"]

    @dev
    def f(x, c0, c1, rp):
        # c0 = 1: clampNegative, sqrt(where(x < 0, 0, x)); NaN fails x < 0 and stays.
        if c0 == 1.0 and x < 0.0:
            return sq(0.0, rp)
        return sq(x, rp)
    return f


def _sqrt_grad(P, dev):
    sq, mul, div = P["sqrt"], P["multiply"], P["divide"]

    @dev
    def g(x, v, c0, c1, rp):
        # (v * 0.5) / y (raw); at clampNegative 0 where x <= 0 or NaN (routes' _sqrt_d).
        if c0 == 1.0 and not x > 0.0:
            return 0.0
        return div(mul(v, 0.5, rp), sq(x, rp), rp)
    return (g,)


def _reciprocal(P, dev):
    div = P["divide"]
    return dev(lambda x, c0, c1, rp: div(1.0, x, rp))


def _reciprocal_grad(P, dev):
    div, mul, neg = P["divide"], P["multiply"], P["negative"]

    @dev
    def g(x, v, c0, c1, rp):
        y = div(1.0, x, rp)                       # -(v * y^2), square = y * y rounded once
        return neg(mul(v, mul(y, y, rp), rp), rp)
    return (g,)


def _scale(P, dev):
    mul = P["multiply"]
    return dev(lambda x, c0, c1, rp: mul(c0, x, rp))


def _scale_grad(P, dev):
    mul = P["multiply"]
    return (dev(lambda x, v, c0, c1, rp: mul(c0, v, rp)),)


# ----- transcendental ----------------------------------------------------------------------------
def _unary(prim):
    def factory(P, dev):
        f = P[prim]
        return dev(lambda x, c0, c1, rp: f(x, rp))
    return factory


def _exp_grad(P, dev):
    ex, mul = P["exp"], P["multiply"]
    return (dev(lambda x, v, c0, c1, rp: mul(v, ex(x, rp), rp)),)


def _log_grad(P, dev):
    div = P["divide"]
    return (dev(lambda x, v, c0, c1, rp: div(v, x, rp)),)


def _sin_grad(P, dev):
    mul, cos = P["multiply"], P["cos"]
    return (dev(lambda x, v, c0, c1, rp: mul(v, cos(x, rp), rp)),)


def _cos_grad(P, dev):
    mul, sin, neg = P["multiply"], P["sin"], P["negative"]
    return (dev(lambda x, v, c0, c1, rp: neg(mul(v, sin(x, rp), rp), rp)),)


def _safe_log(P, dev):
    log, mx = P["log"], P["maximum"]
    return dev(lambda x, c0, c1, rp: log(mx(x, c0, rp), rp))


def _safe_log_grad(P, dev):
    div = P["divide"]

    @dev
    def g(x, v, c0, c1, rp):
        # v / x where x > eps, +0 elsewhere and at NaN (routes' _safe_log_d: the guarded
        # entries divide by 1 and are then discarded by the selection).
        if x > c0:
            return div(v, x, rp)
        return 0.0
    return (g,)


# ----- extrema -----------------------------------------------------------------------------------
def _max(P, dev):
    mx = P["maximum"]
    return dev(lambda x, y, c0, c1, rp: mx(x, y, rp))


def _min(P, dev):
    mn = P["minimum"]
    return dev(lambda x, y, c0, c1, rp: mn(x, y, rp))


def _share(P, dev):
    mul = P["multiply"]

    @dev
    def share(a, b, v, rp):
        # a's share of v in max(a, b): all where a > b, none where a < b, half at a tie or
        # a NaN (routes' extrema._share).
        if a > b:
            return v
        if a < b:
            return 0.0
        return mul(v, 0.5, rp)
    return share


def _max_grad(P, dev):
    share = _share(P, dev)
    return (dev(lambda x, y, v, c0, c1, rp: share(x, y, v, rp)),
            dev(lambda x, y, v, c0, c1, rp: share(y, x, v, rp)))


def _min_grad(P, dev):
    share = _share(P, dev)
    return (dev(lambda x, y, v, c0, c1, rp: share(y, x, v, rp)),
            dev(lambda x, y, v, c0, c1, rp: share(x, y, v, rp)))


def _clamp(P, dev):
    mx, mn = P["maximum"], P["minimum"]
    return dev(lambda x, c0, c1, rp: mn(mx(x, c0, rp), c1, rp))


def _clamp_grad(P, dev):
    @dev
    def g(x, v, c0, c1, rp):
        # Inclusive at the bounds; NaN fails both comparisons (routes' extrema._inside).
        if x >= c0 and x <= c1:
            return v
        return 0.0
    return (g,)


# ----- activations -------------------------------------------------------------------------------
def _relu(P, dev):
    mx = P["maximum"]
    return dev(lambda x, c0, c1, rp: mx(x, 0.0, rp))


def _relu_grad(P, dev):
    @dev
    def g(x, v, c0, c1, rp):
        if x > 0.0:
            return v
        return 0.0
    return (g,)


def _sigmoid_fn(P, dev):
    ex, neg, add, div = P["exp"], P["negative"], P["add"], P["divide"]
    # 1 / (1 + exp(-x)), activation._sigmoid's order.
    return dev(lambda x, rp: div(1.0, add(1.0, ex(neg(x, rp), rp), rp), rp))


def _sigmoid(P, dev):
    s = _sigmoid_fn(P, dev)
    return dev(lambda x, c0, c1, rp: s(x, rp))


def _sigmoid_grad(P, dev):
    s, mul, sub = _sigmoid_fn(P, dev), P["multiply"], P["subtract"]

    @dev
    def g(x, v, c0, c1, rp):
        y = s(x, rp)                               # v * (y * (1 - y))
        return mul(v, mul(y, sub(1.0, y, rp), rp), rp)
    return (g,)


def _silu(P, dev):
    s, mul = _sigmoid_fn(P, dev), P["multiply"]
    return dev(lambda x, c0, c1, rp: mul(x, s(x, rp), rp))


def _silu_grad(P, dev):
    s, mul, sub, add = _sigmoid_fn(P, dev), P["multiply"], P["subtract"], P["add"]

    @dev
    def g(x, v, c0, c1, rp):
        sx = s(x, rp)                              # v * (s * (1 + x * (1 - s)))
        return mul(v, mul(sx, add(1.0, mul(x, sub(1.0, sx, rp), rp), rp), rp), rp)
    return (g,)


def _tanh_grad(P, dev):
    th, mul, sub = P["tanh"], P["multiply"], P["subtract"]

    @dev
    def g(x, v, c0, c1, rp):
        y = th(x, rp)                              # v * (1 - y * y)
        return mul(v, sub(1.0, mul(y, y, rp), rp), rp)
    return (g,)


def _softplus(P, dev):
    mul, ex, l1p, div = P["multiply"], P["exp"], P["log1p"], P["divide"]

    @dev
    def f(x, c0, c1, rp):
        # c0 = beta, c1 = threshold (frozen ports): x where beta x > threshold (NaN fails the
        # comparison), else log1p(exp(beta x)) / beta (activation._softplus's order).
        bx = mul(c0, x, rp)
        if bx > c1:
            return x
        return div(l1p(ex(bx, rp), rp), c0, rp)
    return f


def _softplus_grad(P, dev):
    mul, s = P["multiply"], _sigmoid_fn(P, dev)

    @dev
    def g(x, v, c0, c1, rp):
        bx = mul(c0, x, rp)                        # v where beta x > threshold, else
        if bx > c1:                                # v * sigmoid(beta x) (_softplus_d)
            return v
        return mul(v, s(bx, rp), rp)
    return (g,)


# gelu's literals as decimal strings (activation's own), read by xp.full_like: each rounded
# once into the format.  On the device: the binary64 nearest of the literal rounded into the
# format by one multiplication by 1, which gives the same value as rounding the literal
# itself in every format and mode of the kernels (no binary64 nearest of these literals lies
# on a point or a midpoint of a grid of precision <= 25: tests/kernels/test_kernels_movement.py).
_GELU_LITERALS = (float(RSQRT2), float(RSQRT2PI), float(SQRT_2_OVER_PI), float(GELU_C))


def _literal(P, dev):
    mul = P["multiply"]
    return dev(lambda c, rp: mul(c, 1.0, rp))


def _gelu_parts(P, dev):
    """cdf(x) = 0.5 (1 + erf(x / sqrt 2)) (approximate none) and tanh_parts(x) = (c,
    sigmoid(2 z)), z = sqrt(2/pi) (x + c x^3) (activation._gelu_tanh_parts), in the rule's
    order of primitives; 1 (ones_like) is exact in every format."""
    mul, add, erf, lit = P["multiply"], P["add"], P["erf"], _literal(P, dev)
    s = _sigmoid_fn(P, dev)
    r2, k, c3 = _GELU_LITERALS[0], _GELU_LITERALS[2], _GELU_LITERALS[3]

    @dev
    def cdf(x, rp):
        return mul(lit(0.5, rp), add(1.0, erf(mul(x, lit(r2, rp), rp), rp), rp), rp)

    @dev
    def tanh_parts(x, rp):
        c = lit(c3, rp)
        inner = mul(lit(k, rp), add(x, mul(c, mul(x, mul(x, x, rp), rp), rp), rp), rp)
        return c, s(add(inner, inner, rp), rp)
    return cdf, tanh_parts


def _gelu(P, dev):
    mul = P["multiply"]
    cdf, tanh_parts = _gelu_parts(P, dev)

    @dev
    def f(x, c0, c1, rp):
        # c0 = 1: approximate tanh, x sigmoid(2 z); else x Phi(x) (activation._gelu).
        if c0 == 1.0:
            return mul(x, tanh_parts(x, rp)[1], rp)
        return mul(x, cdf(x, rp), rp)
    return f


def _gelu_grad(P, dev):
    mul, add, sub, neg, ex = (P["multiply"], P["add"], P["subtract"], P["negative"],
                              P["exp"])
    lit = _literal(P, dev)
    cdf, tanh_parts = _gelu_parts(P, dev)
    rpi, k = _GELU_LITERALS[1], _GELU_LITERALS[2]

    @dev
    def g(x, v, c0, c1, rp):
        if c0 == 1.0:
            # v (s + 2x (s (1 - s)) z'), z' = sqrt(2/pi) (1 + 3 (c x^2)) (activation._gelu_d).
            c, s = tanh_parts(x, rp)
            dinner = mul(lit(k, rp), add(1.0, mul(lit(3.0, rp), mul(c, mul(x, x, rp), rp),
                                                  rp), rp), rp)
            right = mul(add(x, x, rp), mul(mul(s, sub(1.0, s, rp), rp), dinner, rp), rp)
            return mul(v, add(s, right, rp), rp)
        # v (Phi(x) + x phi(x)), phi(x) = exp(-0.5 (x x)) / sqrt(2 pi).
        pdf = mul(lit(rpi, rp), ex(mul(neg(lit(0.5, rp), rp), mul(x, x, rp), rp), rp), rp)
        return mul(v, add(cdf(x, rp), mul(x, pdf, rp), rp), rp)
    return (g,)


_SCALAR = lambda a: a.get("element", "scalar") == "scalar"       # noqa: E731

ELEMENTWISE = {
    "add": Entry(2, (), _add, _add_grad, _SCALAR, tests=(_DIRECTED, _SHORT)),
    "sub": Entry(2, (), _sub, _sub_grad, _SCALAR),
    "mul": Entry(2, (), _mul, _mul_grad, _SCALAR, tests=(_DIRECTED, _SHORT)),
    "div": Entry(2, (), _div, _div_grad, lambda a: a.rounding_mode == "none" and _SCALAR(a),
                 tests=(_DIRECTED,)),
    "neg": Entry(1, (), _neg, _neg_grad, _SCALAR),
    "abs": Entry(1, (), _abs, _abs_grad),
    "sqrt": Entry(1, (), _sqrt, _sqrt_grad, tests=(
        _DIRECTED, Instance({"shape": (10,), "mode": "clampNegative"}, "clampNegative",
                            kinds=("special",)))),
    "reciprocal": Entry(1, (), _reciprocal, _reciprocal_grad),
    "scale": Entry(1, ("factor",), _scale, _scale_grad, tests=(_SHORT,)),
    "safeLog": Entry(1, ("eps",), _safe_log, _safe_log_grad),
    "exp": Entry(1, (), _unary("exp"), _exp_grad, tests=(_DIRECTED,)),
    "log": Entry(1, (), _unary("log"), _log_grad),
    "sin": Entry(1, (), _unary("sin"), _sin_grad, tests=(_DIRECTED,)),
    "cos": Entry(1, (), _unary("cos"), _cos_grad),
    "max": Entry(2, (), _max, _max_grad, _SCALAR),
    "min": Entry(2, (), _min, _min_grad, _SCALAR),
    "clamp": Entry(1, ("lo", "hi"), _clamp, _clamp_grad),
    "relu": Entry(1, (), _relu, _relu_grad, tests=(_DIRECTED,)),
    "sigmoid": Entry(1, (), _sigmoid, _sigmoid_grad, tests=(_DIRECTED,)),
    "silu": Entry(1, (), _silu, _silu_grad),
    "tanh": Entry(1, (), _unary("tanh"), _tanh_grad),
    # Both approximations in one entry: the traced primitives are their union.
    "gelu": Entry(1, (), _gelu, _gelu_grad, tests=(
        Instance({"shape": (6,)}), Instance({"shape": (6,), "approximate": "tanh"}, "6-tanh"))),
    "softplus": Entry(1, ("beta", "threshold"), _softplus, _softplus_grad,
                      tests=(Instance({"shape": (6,)}),)),
}


def attribute_scalars(name, attrs) -> tuple[float, float]:
    """Constants a body reads from the attributes (c0 of sqrt: 1 at clampNegative)."""
    if name == "sqrt":
        return (1.0 if attrs.mode == "clampNegative" else 0.0), 0.0
    if name == "gelu":                                # c0 of gelu: 1 at approximate tanh
        return (1.0 if attrs.approximate == "tanh" else 0.0), 0.0
    return 0.0, 0.0


def make_kernels(entry: Entry, P: dict, simulated: bool):
    """(forward kernel, gradient kernel or None) of ``entry`` for the primitive table ``P``.
    Kernels: forward(x[, y], out, c0, c1, rp); gradient(x[, y], v, out0[, out1], c0, c1, rp)."""
    dev = cuda.jit(device=True)
    f = entry.forward(P, dev)
    if entry.arity == 1:
        @cuda.jit
        def fwd(x, out, c0, c1, rp):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = f(x[i], c0, c1, rp)
    else:
        @cuda.jit
        def fwd(x, y, out, c0, c1, rp):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = f(x[i], y[i], c0, c1, rp)
    if entry.gradient is None:
        return fwd, None
    gs = entry.gradient(P, dev)
    if entry.arity == 1:
        g0 = gs[0]

        @cuda.jit
        def grad(x, v, out0, c0, c1, rp):
            i = cuda.grid(1)
            if i < out0.size:
                out0[i] = g0(x[i], v[i], c0, c1, rp)
    else:
        g0, g1 = gs

        @cuda.jit
        def grad(x, y, v, out0, out1, c0, c1, rp):
            i = cuda.grid(1)
            if i < out0.size:
                out0[i] = g0(x[i], y[i], v[i], c0, c1, rp)
                out1[i] = g1(x[i], y[i], v[i], c0, c1, rp)
    return fwd, grad


def launch(o, xs, cotangents, route, ctx):
    """An elementwise kernel over the flat elements (module docstring of kernels.base)."""
    e = ELEMENTWISE[o.name]
    fwd, grad = ctx.compile(("elementwise", o.name),
                            lambda: make_kernels(e, ctx.P, ctx.simulated))
    values = [flat(x) for x in xs[:e.arity]]
    frozen = [float(x) for x in xs[e.arity:]]
    c0, c1 = attribute_scalars(o.name, o.attrs)
    if frozen:
        c0 = frozen[0]
    if len(frozen) > 1:
        c1 = frozen[1]
    shape = o.outputs[0].shape
    n = values[0].size
    if route == "forward":
        out = np.empty(n)
        ctx.launch(fwd, n, *values, out, c0, c1, ctx.rp)
        return (out.reshape(shape),)
    (v,) = ctx.cotangents(o, cotangents)
    grads = [np.empty(n) for _ in range(e.arity)]
    ctx.launch(grad, n, *values, flat(v), *grads, c0, c1, ctx.rp)
    return tuple(g.reshape(x.shape) for g, x in zip(grads, xs)) + (None,) * len(e.frozen)


# The contract of every elementwise kernel is its rule's trace (kernels/trace.py): the
# primitives of each route, and whether the forward route rounds once (sigmoid, silu, gelu
# and softplus are compositions; every other entry is one rounding or none).
KERNELS = tuple(
    Kernel(name, "elementwise",
           Contract(TRACED, TRACED if e.gradient is not None else None, single=None),
           launch, e.accepts, tests=(_VECTOR,) + e.tests)
    for name, e in ELEMENTWISE.items())

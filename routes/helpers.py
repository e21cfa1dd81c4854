"""Declaration helpers for the common shapes of operators, so that one operator is one short
block (see routes/families/__init__.py for the guide).

- ``unary_elementwise(name, family, f, d, ...)``: y = f(x) elementwise on one value port.
  ``d(xp, x, y, v)`` is the derivative at x applied to v; the Jacobian is diagonal, so the
  same map gives the tangent (v = t) and the cotangent (v = g), and it may reuse the output y
  (exp's derivative is y itself).
- ``binary_elementwise(name, family, f, dx, dy, ...)``: out = f(x, y) with partial maps
  ``dx(xp, x, y, out, v)``, ``dy(...)``; with ``words=`` it also takes the spec's element
  argument (scalar, bool, int8 ... uint64) and computes Booleans and words exactly (no
  gradient).
- ``elementwise_oracle(f)``: an oracle from a scalar mpmath function ``f(ctx, *xs)``.
"""

from __future__ import annotations

import numpy as np

from . import attributes as A
from . import words as W
from .ports import value
from .registry import Float64, define


def elementwise_oracle(f):
    """``oracle(ctx, a, *xs)`` applying the scalar mpmath function ``f(ctx, *xs)`` to every
    element (object arrays of mpf in, a tuple of one object array out)."""
    def oracle(ctx, a, *xs):
        out = np.frompyfunc(lambda *v: f(ctx, *v), len(xs), 1)(*xs)
        return (np.asarray(out, dtype=object),)
    return oracle


def unary_elementwise(name, family, f, d, *, domain, oracle=None, float64=None,
                      **more):
    """Declare y = f(x) on one value port of attribute ``shape``.  ``f(xp, x)``, ``d(xp, x,
    y, v)`` as in the module docstring; ``domain`` a samples.Domain; ``oracle(ctx, x)`` a
    scalar mpmath function; ``float64 = (forward(x), backward(x, g))`` numpy functions on
    float64 arrays (backward may be None).  Other keywords go to ``define`` (``examples``
    defaults to the default shape and a 2x3 one)."""
    if float64 is not None:
        fwd, bwd = float64[:2]
        float64 = Float64(lambda a, x: fwd(x),
                          None if bwd is None else lambda a, xs, gs: (bwd(xs[0], gs[0]),),
                          *float64[2:])
    more.setdefault("examples", {"": {}, "2x3": {"shape": (2, 3)}})
    return define(
        name, family,
        attributes=(A.shape(),),
        ports=lambda a: ({"x": value(a.shape)}, {"y": value(a.shape)}),
        forward=lambda xp, a, x: f(xp, x),
        backward=lambda xp, a, xs, ys, gs, needs: (d(xp, xs[0], ys[0], gs[0]),),
        jvp=lambda xp, a, xs, ys, ts: d(xp, xs[0], ys[0], ts[0]),
        samples=domain.samplers(),
        oracle=None if oracle is None else elementwise_oracle(oracle),
        float64=float64,
        **more)


def binary_elementwise(name, family, f, dx, dy, *, domain, words=None, oracle=None,
                       word_oracle=None, float64=None, **more):
    """Declare out = f(x, y) on two value ports of attribute ``shape``.  ``f(xp, x, y)``,
    ``dx(xp, x, y, out, v)`` and ``dy(...)`` the partial derivatives applied to v.  With
    ``words`` (a routes.words function ``(a, b, port)``) the operator also has the attribute
    ``element`` and ``word_oracle(p, q)`` on Python ints / bools is its independent oracle.
    ``float64 = (forward(x, y), backward(x, y, g) -> (gx, gy))`` numpy functions.  The
    default ``examples`` add a 2x3 shape and, with words, the elements int8, uint64, bool."""
    attributes = (A.shape(),)
    if words is not None:
        attributes += (A.choice("element", W.ELEMENTS, doc="the element sort of the "
                                "operands: the model's scalar, Booleans or words"),)

    def elem(a):
        return a.get("element", "scalar")

    def ports(a):
        p = W.element_port(elem(a), a.shape)
        return {"x": p, "y": p}, {"out": p}

    def forward(xp, a, x, y):
        if elem(a) == "scalar":
            return f(xp, x, y)
        return words(x, y, W.element_port(elem(a), a.shape))

    def backward(xp, a, xs, ys, gs, needs):
        (x, y), out, g = xs, ys[0], gs[0]
        return (dx(xp, x, y, out, g) if needs[0] else None,
                dy(xp, x, y, out, g) if needs[1] else None)

    def jvp(xp, a, xs, ys, ts):
        (x, y), out = xs, ys[0]
        return xp.add(dx(xp, x, y, out, ts[0]), dy(xp, x, y, out, ts[1]))

    def full_oracle(ctx, a, x, y):
        if elem(a) == "scalar":
            return elementwise_oracle(oracle)(ctx, a, x, y)
        return (_word_oracle(word_oracle, x, y, W.element_port(elem(a), a.shape)),)

    if float64 is not None:
        fwd, bwd = float64[:2]
        float64 = Float64(lambda a, x, y: fwd(x, y),
                          None if bwd is None else lambda a, xs, gs: bwd(*xs, gs[0]),
                          *float64[2:])
    more.setdefault("examples", {"": {}, "2x3": {"shape": (2, 3)}} if words is None else
                    {"": {}, "2x3": {"shape": (2, 3)}, "int8": {"element": "int8"},
                     "uint64": {"element": "uint64"}, "bool": {"element": "bool"}})
    return define(name, family, attributes=attributes, ports=ports, forward=forward,
                  backward=backward, jvp=jvp, samples=domain.samplers(),
                  oracle=None if oracle is None else full_oracle, float64=float64, **more)


def _word_oracle(f, x, y, port):
    """f on Python ints (bools), reduced into ``port``'s words: an independent check of the
    uint64 wrap-around arithmetic of routes.words."""
    def one(p, q):
        v = f(p, q)
        if port.kind == "bool":
            return bool(v)
        v %= 1 << port.width
        return v - (1 << port.width) if port.signed and v >= 1 << (port.width - 1) else v
    out = [one(p, q) for p, q in zip(np.asarray(x).reshape(-1).tolist(),
                                      np.asarray(y).reshape(-1).tolist())]
    return np.array(out, dtype=object).reshape(np.shape(x))

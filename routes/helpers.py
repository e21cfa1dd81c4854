"""Declaration helpers for the common shapes of operators, so that one operator is one short
block (see routes/families/__init__.py for the guide).

- ``unary_elementwise(name, family, f, d, ...)``: y = f(x) elementwise on one value port.
  ``d(xp, x, y, v)`` is the derivative at x applied to v; the Jacobian is diagonal, so the
  same map gives the tangent (v = t) and the cotangent (v = g), and it may reuse the output y
  (exp's derivative is y itself).
- ``binary_elementwise(name, family, f, dx, dy, ...)``: out = f(x, y) with partial maps
  ``dx(xp, x, y, out, v)``, ``dy(...)``; with ``words=`` it also takes the spec's element
  argument (scalar, bool, int8 ... uint64) and computes Booleans and words exactly (no
  gradient).  ``unary_elementwise`` takes ``words=`` the same way.
- ``bilinear_tangent(product, xp, a, x, y, tx, ty)``: the tangent of a bilinear product
  (matmul, conv, convTranspose).
- ``elementwise_oracle(f)``: an oracle from a scalar mpmath function ``f(ctx, *xs)``;
  ``word_values(f, port, *xs)`` the independent oracle of words (Python integers).
- ``element_samplers(samplers, draw)``: samplers that draw Boolean or word operands with
  ``draw`` (nonzero divisors, non-negative exponents).

At an element other than the scalar, a capability the scalar's rule needs is not read (words
are data), and ``bool_reason`` states why an operator has no rule at Booleans (PyTorch
refuses it there): the registry's no-rule-at-attributes mechanism, examples without bool.
"""

from __future__ import annotations

import numpy as np

from . import attributes as A
from . import words as W
from .registry import Float64, define


ELEMENT = A.choice("element", W.ELEMENTS, doc="the element sort of the operands: the model's "
                                              "scalar, Booleans or words")


def _elem(a):
    return a.get("element", "scalar")


def _element_pieces(more, bool_reason, examples):
    """Fill ``more`` (define's keywords) for an operator with the element argument: the
    capability read at the scalar only, no rule at bool when ``bool_reason``, and the default
    examples (bool left out where there is no rule)."""
    needs = more.get("needs")
    if needs is not None:
        more["needs"] = lambda a: None if _elem(a) != "scalar" else \
            (needs(a) if callable(needs) else needs)
    if bool_reason is not None:
        own = more.get("no_rule")
        more["no_rule"] = lambda a: bool_reason if _elem(a) == "bool" else \
            (own(a) if own else None)
        examples = {k: v for k, v in examples.items() if v.get("element") != "bool"}
    more.setdefault("examples", examples)


def element_samplers(samplers, draw):
    """``samplers`` ({kind: sampler}) whose inputs at a Boolean or word element are
    ``draw(rng, port) -> operands`` (every operand at ``port``) instead."""
    def wrap(sampler):
        def at_element(rng, fmt, op):
            port = op.inputs[0]
            return sampler(rng, fmt, op) if port.scalar else tuple(draw(rng, port))
        return at_element
    return {kind: wrap(s) for kind, s in samplers.items()}


def elementwise_oracle(f):
    """``oracle(ctx, a, *xs)`` applying the scalar mpmath function ``f(ctx, *xs)`` to every
    element (object arrays of mpf in, a tuple of one object array out)."""
    def oracle(ctx, a, *xs):
        out = np.frompyfunc(lambda *v: f(ctx, *v), len(xs), 1)(*xs)
        return (np.asarray(out, dtype=object),)
    return oracle


def unary_elementwise(name, family, f, d, *, domain, oracle=None, float64=None,
                      words=None, word_oracle=None, bool_reason=None, **more):
    """Declare y = f(x) on one value port of attribute ``shape``.  ``f(xp, x)``, ``d(xp, x,
    y, v)`` as in the module docstring; ``domain`` a samples.Domain; ``oracle(ctx, x)`` a
    scalar mpmath function; ``float64 = (forward(x), backward(x, g))`` numpy functions on
    float64 arrays (backward may be None).  With ``words`` (a routes.words function ``(a,
    port)``) the operator also has the attribute ``element`` and ``word_oracle(p)`` on Python
    ints is its independent oracle there; ``bool_reason`` as in the module docstring.  Other
    keywords go to ``define`` (``examples`` defaults to the default shape and a 2x3 one, with
    words also int8, uint64 and bool)."""
    if float64 is not None:
        fwd, bwd = float64[:2]
        float64 = Float64(lambda a, x: fwd(x),
                          None if bwd is None else lambda a, xs, gs: (bwd(xs[0], gs[0]),),
                          *float64[2:])
    shape = {"": {}, "2x3": {"shape": (2, 3)}}
    attributes = (A.shape(),)
    if words is None:
        more.setdefault("examples", shape)
    else:
        attributes += (ELEMENT,)
        _element_pieces(more, bool_reason, {**shape, "int8": {"element": "int8"},
                                            "uint64": {"element": "uint64"},
                                            "bool": {"element": "bool"}})

    def port(a):
        return W.element_port(_elem(a), a.shape)

    def forward(xp, a, x):
        return f(xp, x) if _elem(a) == "scalar" else words(x, port(a))

    def full_oracle(ctx, a, x):
        if _elem(a) == "scalar":
            return elementwise_oracle(oracle)(ctx, a, x)
        return (word_values(word_oracle, port(a), x),)

    return define(
        name, family,
        attributes=attributes,
        ports=lambda a: ({"x": port(a)}, {"y": port(a)}),
        forward=forward,
        backward=lambda xp, a, xs, ys, gs, needs: (d(xp, xs[0], ys[0], gs[0]),),
        jvp=lambda xp, a, xs, ys, ts: d(xp, xs[0], ys[0], ts[0]),
        samples=domain.samplers(),
        oracle=None if oracle is None else full_oracle,
        float64=float64,
        **more)


def binary_elementwise(name, family, f, dx, dy, *, domain, words=None, oracle=None,
                       word_oracle=None, word_draw=None, bool_reason=None, float64=None,
                       zero_tangent_adds_nothing=False, **more):
    """Declare out = f(x, y) on two value ports of attribute ``shape``.  ``f(xp, x, y)``,
    ``dx(xp, x, y, out, v)`` and ``dy(...)`` the partial derivatives applied to v.  With
    ``words`` (a routes.words function ``(a, b, port)``) the operator also has the attribute
    ``element`` and ``word_oracle(p, q)`` on Python ints / bools is its independent oracle;
    ``word_draw(rng, port) -> (x, y)`` draws its word operands (default: routes.words.sample
    each) and ``bool_reason`` is as in the module docstring.
    ``zero_tangent_adds_nothing``: in the tangent, each term is 0 where its tangent is 0,
    even where its partial derivative is NaN or infinite -- forward mode with symbolic
    zeros (torch's ZeroTensor, JAX's Zero) along an input that has no tangent (a graph
    constant): pow's x ** 3.0 at x < 0, whose partial in the exponent is NaN.
    ``float64 = (forward(x, y), backward(x, y, g) -> (gx, gy))`` numpy functions.  The
    default ``examples`` add a 2x3 shape and, with words, the elements int8, uint64, bool."""
    attributes = (A.shape(),)
    if words is not None:
        attributes += (ELEMENT,)
    elem = _elem

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
        terms = [d(xp, x, y, out, t) for d, t in ((dx, ts[0]), (dy, ts[1]))]
        if zero_tangent_adds_nothing:
            terms = [xp.where(xp.equal(t, xp.zeros_like(t)), xp.zeros_like(v), v)
                     for v, t in zip(terms, ts)]
        return xp.add(*terms)

    def full_oracle(ctx, a, x, y):
        if elem(a) == "scalar":
            return elementwise_oracle(oracle)(ctx, a, x, y)
        return (word_values(word_oracle, W.element_port(elem(a), a.shape), x, y),)

    if float64 is not None:
        fwd, bwd = float64[:2]
        float64 = Float64(lambda a, x, y: fwd(x, y),
                          None if bwd is None else lambda a, xs, gs: bwd(*xs, gs[0]),
                          *float64[2:])
    samples = domain.samplers()
    if words is None:
        more.setdefault("examples", {"": {}, "2x3": {"shape": (2, 3)}})
    else:
        _element_pieces(more, bool_reason, {"": {}, "2x3": {"shape": (2, 3)},
                                            "int8": {"element": "int8"},
                                            "uint64": {"element": "uint64"},
                                            "bool": {"element": "bool"}})
        if word_draw is not None:
            samples = element_samplers(samples, word_draw)
    return define(name, family, attributes=attributes, ports=ports, forward=forward,
                  backward=backward, jvp=jvp, samples=samples,
                  oracle=None if oracle is None else full_oracle, float64=float64, **more)


def bilinear_tangent(product, xp, a, x, y, tx, ty):
    """The tangent of a bilinear product B(x, y) (matmul, conv, convTranspose): B(tx, y) +
    B(x, ty), the two terms added in that order -- the product rule, which is exact for a
    bilinear map (JAX's rule for bilinear primitives).  ``product(xp, a, x, y)``."""
    return xp.add(product(xp, a, tx, y), product(xp, a, x, ty))


def word_values(f, port, *xs):
    """f on Python ints (bools) elementwise over ``xs``, reduced into ``port``'s words: an
    independent check of the uint64 wrap-around arithmetic of routes.words."""
    def one(*vs):
        v = f(*vs)
        if port.kind == "bool":
            return bool(v)
        v %= 1 << port.width
        return v - (1 << port.width) if port.signed and v >= 1 << (port.width - 1) else v
    out = [one(*vs) for vs in zip(*(np.asarray(x).reshape(-1).tolist() for x in xs))]
    return np.array(out, dtype=object).reshape(np.shape(xs[0]))

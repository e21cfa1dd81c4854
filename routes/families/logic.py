"""The logic family (spec: "Comparisons, predicates and logic"): the IEEE comparisons eq ...
ge on frozen scalars, Booleans or words (the element argument, Op.NumericElement), the
predicates isNaN, isInf, isFinite, the Boolean connectives logicalNot ... logicalXor, select
(torch.where) on a Boolean condition, and cast, which reads Booleans or indices as scalars.

Comparisons, predicates and connectives have no value input: no gradient, and the trivial
forward mode of routes.rules (no tangent at a Boolean output).  select differentiates its
data ports by selection; cast has a value output whose tangent is zero (its input is data).
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..ports import boolean, frozen, index, value
from ..registry import define
from ..rules import zero_tangents
from ..samples import Domain, pick, special, uniform

TESTS = "tests/routes/test_routes_logic.py"


def _element_attr(choices=W.ELEMENTS):
    return A.choice("element", choices, doc="the element sort of the operands: the model's "
                                            "scalar (the default), Booleans or words")


# ----- comparisons -------------------------------------------------------------------------------
# (name, backend primitive / numpy ufunc name, Python operator on ordered non-NaN values)
COMPARISONS = (
    ("eq", "equal", lambda p, q: p == q),
    ("ne", "not_equal", lambda p, q: p != q),
    ("lt", "less", lambda p, q: p < q),
    ("le", "less_equal", lambda p, q: p <= q),
    ("gt", "greater", lambda p, q: p > q),
    ("ge", "greater_equal", lambda p, q: p >= q),
)

# Ties and signed zeros: each draw picks from a small set, so equal operands are common.
_TIES = pick((-2.0, -1.0, -0.0, 0.0, 1.0, 1.5), 2)


def _comparison(name, prim, relation):
    def ports(a):
        p = W.element_port(a.element, a.shape, scalar="frozen")
        return {"x": p, "y": p}, {"out": boolean(a.shape)}

    def forward(xp, a, x, y):
        if a.element == "scalar":
            return getattr(xp, prim)(x, y)
        return W.compare(prim, x, y, W.element_port(a.element, a.shape))

    def oracle(ctx, a, x, y):
        def one(p, q):
            if a.element == "scalar" and (ctx.isnan(p) or ctx.isnan(q)):
                return name == "ne"             # NaN is unordered: only ne holds
            return bool(relation(p, q))
        flat = [one(p, q) for p, q in zip(np.asarray(x).reshape(-1).tolist(),
                                          np.asarray(y).reshape(-1).tolist())]
        return (np.array(flat, dtype=bool).reshape(np.shape(x)),)

    define(
        name, "logic",
        attributes=(A.shape(), _element_attr()),
        ports=ports, forward=forward,
        samples=Domain(ordinary=uniform(-4, 4, 2), edges=_TIES,
                       special=special(_TIES, 2)).samplers(),
        oracle=oracle,
        # Rank 2 through the words (cheap): the scalar instance is the costly one.
        examples={"": {}, "int8-2x3": {"element": "int8", "shape": (2, 3)},
                  "uint64": {"element": "uint64"}, "bool": {"element": "bool"}},
        notes=(f"{name}: the IEEE 754 comparison of frozen scalars (no gradient): NaN is "
               "unordered, so every comparison with a NaN operand is false except ne, which "
               "is true; -0 == +0; -inf and +inf compare as the extremes.",
               "element bool: False < True; element int*/uint*: the order of the word type "
               "(signed or unsigned); the output is Booleans."),
        certificates=(convention(f"{TESTS}::test_comparisons_follow_ieee_on_nan_zeros_and_"
                                 f"infinities", "IEEE comparison: NaN unordered (only ne true), "
                                 "-0 == +0"),
                      convention(f"{TESTS}::test_word_comparisons_follow_the_type_order",
                                 "words compare in their type's order, Booleans False < True")),
    )


for _name, _prim, _rel in COMPARISONS:
    _comparison(_name, _prim, _rel)


# ----- predicates -------------------------------------------------------------------------------
def _predicate(name, prim, test, statement):
    define(
        name, "logic",
        attributes=(A.shape(),),
        ports=lambda a: ({"x": frozen(a.shape)}, {"out": boolean(a.shape)}),
        forward=lambda xp, a, x: getattr(xp, prim)(x),
        samples=Domain(ordinary=uniform(-4, 4), special=special(uniform(-4, 4))).samplers(),
        oracle=lambda ctx, a, x: (np.array([bool(test(ctx, v)) for v in
                                            np.asarray(x).reshape(-1).tolist()],
                                           dtype=bool).reshape(np.shape(x)),),
        examples={"": {}, "2x3": {"shape": (2, 3)}},
        notes=(f"{name}: {statement} of a frozen scalar (no gradient); the format's extremes "
               "are finite, and formats without inf or NaN (float8_e4m3fn has no inf) "
               "simply never give those values.",),
        certificates=(convention(f"{TESTS}::test_predicates_classify_special_values",
                                 f"{name} on +-0, +-inf, NaN and the format's extremes"),),
    )


_predicate("isNaN", "isnan", lambda ctx, v: ctx.isnan(v), "true exactly at NaN")
_predicate("isInf", "isinf", lambda ctx, v: ctx.isinf(v), "true exactly at +inf and -inf")
_predicate("isFinite", "isfinite", lambda ctx, v: not (ctx.isnan(v) or ctx.isinf(v)),
           "true exactly where the value is neither infinite nor NaN")


# ----- Boolean connectives ----------------------------------------------------------------------
def _connective(name, ufunc, f, table):
    arity = ufunc.nin
    names = ("x", "y")[:arity]

    def oracle(ctx, a, *xs):
        flat = [bool(f(*vs)) for vs in zip(*(np.asarray(x).reshape(-1).tolist() for x in xs))]
        return (np.array(flat, dtype=bool).reshape(np.shape(xs[0])),)

    define(
        name, "logic",
        attributes=(A.shape(),),
        ports=lambda a: ({n: boolean(a.shape) for n in names}, {"out": boolean(a.shape)}),
        forward=lambda xp, a, *xs: ufunc(*xs),            # Booleans are data: numpy
        samples=Domain(ordinary=uniform(-4, 4)).samplers(),
        oracle=oracle,
        examples={"": {}, "2x3": {"shape": (2, 3)}},
        notes=(f"{name}: {table} on Booleans (no gradient).",),
        certificates=(convention(f"{TESTS}::test_connectives_match_their_truth_tables",
                                 f"{name} is {table}"),),
    )


_connective("logicalNot", np.logical_not, lambda p: not p,
            "not: True -> False, False -> True")
_connective("logicalAnd", np.logical_and, lambda p, q: p and q,
            "and: True only for (True, True)")
_connective("logicalOr", np.logical_or, lambda p, q: p or q,
            "or: False only for (False, False)")
_connective("logicalXor", np.logical_xor, lambda p, q: p != q,
            "xor: True where the operands differ")


# ----- select -----------------------------------------------------------------------------------
def _select_ports(a):
    p = W.element_port(a.element, a.shape)
    return {"cond": boolean(a.shape), "x": p, "y": p}, {"out": p}


def _select_backward(xp, a, xs, ys, gs, needs):
    cond, g = xs[0], gs[0]
    zero = xp.zeros_like(g)
    return (None, xp.where(cond, g, zero) if needs[1] else None,
            xp.where(cond, zero, g) if needs[2] else None)


define(
    "select", "logic",
    attributes=(A.shape(), _element_attr()),
    ports=_select_ports,
    forward=lambda xp, a, cond, x, y: xp.where(cond, x, y),
    backward=_select_backward,
    jvp=lambda xp, a, xs, ys, ts: xp.where(xs[0], ts[1], ts[2]),
    samples=Domain(ordinary=uniform(-4, 4, 2), special=special(uniform(-4, 4, 2), 2)).samplers(),
    oracle=lambda ctx, a, cond, x, y: (np.where(cond, x, y),),
    examples={"": {}, "int8-2x3": {"element": "int8", "shape": (2, 3)},
              "uint64": {"element": "uint64"}, "bool": {"element": "bool"}},
    notes=("select(cond, x, y) is torch.where: x where cond, y elsewhere, elementwise; the "
           "condition is a Boolean port; the data ports are those of the element argument "
           "(value ports at the default scalar, bool or word ports otherwise).",
           "Gradient by selection, not multiplication: x receives the cotangent where cond and "
           "0 elsewhere, y the rest, so an inf or NaN cotangent never leaks into the branch "
           "not taken; tangent: tx where cond, ty elsewhere.  Bool and word elements have no "
           "gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_select_sends_the_gradient_to_the_selected_branch",
                             "the selected branch receives the whole cotangent, the other 0",
                             inputs=(1, 2)),
                  roundoff(0, statement="exact: each output is one of the operands")),
)


# ----- cast -------------------------------------------------------------------------------------
def _cast_check(a):
    if a.source == "bool" and a.bounds:
        return f"bounds must be empty for source bool (got {list(a.bounds)})"
    if a.source == "index" and not a.bounds:
        return "bounds must list at least one bound for source index (got [])"
    return None


def _cast_in(a):
    return boolean(a.shape) if a.source == "bool" else index(a.bounds, a.shape)


def _cast_forward(xp, a, x):
    if a.source == "bool":
        return xp.where(x, xp.ones_like(x), xp.zeros_like(x))
    # Each index is an integer, read (rounded once where the format cannot hold it) as
    # the backend's number: Python ints, so no binary64 step comes first.
    return xp.asarray(np.asarray(x).astype(object))


def _cast_sampler(rng, fmt, op):
    port = op.inputs[0]
    if port.kind == "bool":
        return (rng.random(port.shape) < 0.5,)
    comps = [rng.integers(0, max(b, 1), port.shape) for b in port.bounds]
    out = comps[0] if len(comps) == 1 else np.stack(comps, axis=-1)
    return (out.astype(np.int64),)


define(
    "cast", "logic",
    attributes=(A.shape(), A.choice("source", ("bool", "index"),
                                    doc="what is read as scalars: Booleans or index tuples"),
                A.nats("bounds", doc="the index port's bounds (source index; empty for bool)")),
    ports=lambda a: ({"x": _cast_in(a)}, {"y": value(_cast_in(a).array_shape)}),
    forward=_cast_forward,
    jvp=zero_tangents,
    check=_cast_check,
    samples={"ordinary": _cast_sampler},
    oracle=lambda ctx, a, x: (np.array([ctx.mpf(int(v)) for v in np.asarray(x).reshape(-1)],
                                       dtype=object).reshape(np.shape(x)),),
    examples={"": {}, "2x3": {"shape": (2, 3)}, "index": {"source": "index", "bounds": (5,)},
              "index2": {"source": "index", "bounds": (3, 300)}},
    bad_attributes=(({"source": "bool", "bounds": (3,)}, "bounds must be empty"),
                    ({"source": "index"}, "bounds must list at least one bound")),
    notes=("source bool: True reads as 1 and False as 0 (exact in every format).",
           "source index: each component is read as the scalar of that integer, rounded once "
           "into the format where it is not representable (300 is 304 in float8_e4m3fn); "
           "k > 1 bounds give an output of shape + [k] (the index port's array layout).",
           "No value input: no gradient; the forward mode gives a zero tangent."),
    certificates=(convention(f"{TESTS}::test_cast_reads_booleans_and_indices_as_scalars",
                             "True is 1, False is 0, an index its integer; zero tangent"),),
)

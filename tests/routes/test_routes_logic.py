"""The logic family's conventions, pinned with hand-written tables: IEEE comparisons at NaN,
signed zeros and infinities; word and Boolean orders; the predicates on special values; the
truth tables of the connectives; select's gradient by selection; cast's readings.  Every
expected value is a literal from the stated convention (or Python's own int / bool
operators), never the code under test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError

NAN, INF = math.nan, math.inf

BACKENDS = {
    "reference": lambda: numerics.reference(64),
    "bfloat16": lambda: numerics.emulated("bfloat16"),
    "binary128": lambda: numerics.emulated("binary128"),
    "float64": lambda: numerics.native("float64"),
    "float32": lambda: numerics.native("float32"),
}

# IEEE 754 comparison table by hand: (x, y, eq, ne, lt, le, gt, ge).
IEEE_TABLE = [
    (1.0, 2.0, False, True, True, True, False, False),
    (2.0, 1.0, False, True, False, False, True, True),
    (1.5, 1.5, True, False, False, True, False, True),
    (-0.0, 0.0, True, False, False, True, False, True),
    (0.0, -0.0, True, False, False, True, False, True),
    (-INF, INF, False, True, True, True, False, False),
    (INF, INF, True, False, False, True, False, True),
    (-INF, -INF, True, False, False, True, False, True),
    (INF, 3.0, False, True, False, False, True, True),
    (NAN, 1.0, False, True, False, False, False, False),
    (1.0, NAN, False, True, False, False, False, False),
    (NAN, NAN, False, True, False, False, False, False),
    (NAN, INF, False, True, False, False, False, False),
    (-0.0, NAN, False, True, False, False, False, False),
]
NAMES = ("eq", "ne", "lt", "le", "gt", "ge")


@pytest.mark.parametrize("backend", BACKENDS)
def test_comparisons_follow_ieee_on_nan_zeros_and_infinities(backend):
    xp = BACKENDS[backend]()
    n = len(IEEE_TABLE)
    x = np.array([r[0] for r in IEEE_TABLE])
    y = np.array([r[1] for r in IEEE_TABLE])
    for k, name in enumerate(NAMES):
        o = routes.op(name, shape=(n,))
        (got,) = routes.invoke(o, [x, y], xp)
        assert got.dtype == bool
        assert got.tolist() == [r[2 + k] for r in IEEE_TABLE], name
        # No gradient and no forward mode (the spec's "no value input").
        rule = o.rule(xp)
        assert rule.backward([x, y], [None]) == (None, None)
        assert not rule.has_jvp


def test_comparisons_on_rationals():
    xp = numerics.exact()
    x, y = np.array([1.0, 0.5, -3.0]), np.array([1.0, 0.25, 2.0])
    want = {"eq": [True, False, False], "ne": [False, True, True],
            "lt": [False, False, True], "le": [True, False, True],
            "gt": [False, True, False], "ge": [True, True, False]}
    for name in NAMES:
        (got,) = routes.invoke(routes.op(name, shape=(3,)), [x, y], xp)
        assert got.tolist() == want[name], name


def _relation(name):
    return {"eq": lambda p, q: p == q, "ne": lambda p, q: p != q,
            "lt": lambda p, q: p < q, "le": lambda p, q: p <= q,
            "gt": lambda p, q: p > q, "ge": lambda p, q: p >= q}[name]


@pytest.mark.parametrize("element", ["int8", "uint8"])
@pytest.mark.parametrize("name", NAMES)
def test_word_comparisons_follow_the_type_order(name, element):
    # Exhaustive over all pairs of 8-bit words, against Python's int order.
    lo, hi = (-128, 127) if element == "int8" else (0, 255)
    pairs = list(itertools.product(range(lo, hi + 1), repeat=2))
    x = np.array([p for p, _ in pairs], dtype=element)
    y = np.array([q for _, q in pairs], dtype=element)
    o = routes.op(name, shape=(len(pairs),), element=element)
    (got,) = routes.invoke(o, [x, y], numerics.native("float64"))
    rel = _relation(name)
    assert got.tolist() == [rel(p, q) for p, q in pairs]


@pytest.mark.parametrize("name", NAMES)
def test_word_comparisons_at_64_bits_and_booleans(name):
    rel = _relation(name)
    big = [(2**63 - 1, -2**63), (-1, 0), (-2**63, -2**63), (5, 2**62)]
    x = np.array([p for p, _ in big], dtype=np.int64)
    y = np.array([q for _, q in big], dtype=np.int64)
    (got,) = routes.invoke(routes.op(name, shape=(4,), element="int64"), [x, y],
                           numerics.reference(64))
    assert got.tolist() == [rel(p, q) for p, q in big]
    ubig = [(2**64 - 1, 0), (2**63, 2**63 - 1), (7, 7), (0, 2**64 - 1)]
    x = np.array([p for p, _ in ubig], dtype=np.uint64)
    y = np.array([q for _, q in ubig], dtype=np.uint64)
    (got,) = routes.invoke(routes.op(name, shape=(4,), element="uint64"), [x, y],
                           numerics.reference(64))
    assert got.tolist() == [rel(p, q) for p, q in ubig]
    bools = list(itertools.product([False, True], repeat=2))
    x, y = np.array([p for p, _ in bools]), np.array([q for _, q in bools])
    (got,) = routes.invoke(routes.op(name, shape=(4,), element="bool"), [x, y],
                           numerics.native("float32"))
    assert got.tolist() == [rel(int(p), int(q)) for p, q in bools]   # False < True


@pytest.mark.parametrize("backend", BACKENDS)
def test_predicates_classify_special_values(backend):
    xp = BACKENDS[backend]()
    x = np.array([0.0, -0.0, INF, -INF, NAN, 1.5, -2.0, 1e-300 if backend != "bfloat16"
                  else 2.0 ** -133])
    want = {"isNaN": [False, False, False, False, True, False, False, False],
            "isInf": [False, False, True, True, False, False, False, False],
            "isFinite": [True, True, False, False, False, True, True, True]}
    for name, expected in want.items():
        (got,) = routes.invoke(routes.op(name, shape=(8,)), [x], xp)
        assert got.tolist() == expected, name


def test_predicates_in_a_format_without_infinities():
    # float8_e4m3fn has no inf: inf rounds to NaN on the way in (fn overflow gives NaN),
    # and its largest finite value 448 is finite.
    xp = numerics.emulated("float8_e4m3fn")
    x = np.array([448.0, -448.0, NAN])
    assert routes.invoke(routes.op("isFinite", shape=(3,)), [x], xp)[0].tolist() == \
        [True, True, False]
    assert routes.invoke(routes.op("isInf", shape=(3,)), [x], xp)[0].tolist() == \
        [False, False, False]


def test_connectives_match_their_truth_tables():
    xp = numerics.native("float64")
    p = np.array([False, False, True, True])
    q = np.array([False, True, False, True])
    assert routes.invoke(routes.op("logicalNot", shape=(4,)), [p], xp)[0].tolist() == \
        [True, True, False, False]
    for name, want in (("logicalAnd", [False, False, False, True]),
                       ("logicalOr", [False, True, True, True]),
                       ("logicalXor", [False, True, True, False])):
        (got,) = routes.invoke(routes.op(name, shape=(4,)), [p, q], xp)
        assert got.dtype == bool and got.tolist() == want, name


def test_connectives_refuse_non_boolean_inputs():
    o = routes.op("logicalAnd", shape=(2,))
    with pytest.raises(RouteError, match="logicalAnd: input x expects bool"):
        routes.invoke(o, [np.array([1.0, 0.0]), np.array([True, False])],
                      numerics.native("float64"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_select_sends_the_gradient_to_the_selected_branch(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("select", shape=(4,)).rule(xp)
    cond = np.array([True, False, True, False])
    x, y = np.array([1.0, 2.0, NAN, 4.0]), np.array([-1.0, -2.0, -3.0, INF])
    (out,) = rule.forward([cond, x, y])
    assert np.array_equal(xp.to_float64(out), [1.0, -2.0, NAN, INF], equal_nan=True)
    # An infinite cotangent never leaks into the branch not taken (selection, not 0 * inf).
    g = np.array([INF, 3.0, 5.0, -INF])
    gc, gx, gy = rule.backward([cond, x, y], [g])
    assert gc is None
    assert np.array_equal(xp.to_float64(gx), [INF, 0.0, 5.0, 0.0])
    assert np.array_equal(xp.to_float64(gy), [0.0, 3.0, 0.0, -INF])
    (t,) = rule.jvp([cond, x, y], [None, np.array([1.0, 2.0, 3.0, 4.0]),
                                   np.array([-1.0, -2.0, -3.0, -4.0])])
    assert np.array_equal(xp.to_float64(t), [1.0, -2.0, 3.0, -4.0])


def test_select_moves_words_and_booleans():
    xp = numerics.native("float32")
    cond = np.array([True, False, False])
    (out,) = routes.invoke(routes.op("select", shape=(3,), element="uint64"),
                           [cond, np.array([2**64 - 1, 1, 2], dtype=np.uint64),
                            np.array([0, 2**63, 5], dtype=np.uint64)], xp)
    assert out.dtype == np.uint64 and out.tolist() == [2**64 - 1, 2**63, 5]
    (out,) = routes.invoke(routes.op("select", shape=(3,), element="bool"),
                           [cond, np.array([False, True, True]), np.array([True, False, True])],
                           xp)
    assert out.tolist() == [False, False, True]
    rule = routes.op("select", shape=(3,), element="int8").rule(xp)
    xs = [cond, np.array([1, 2, 3], np.int8), np.array([4, 5, 6], np.int8)]
    assert rule.backward(xs, [None]) == (None, None, None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cast_reads_booleans_and_indices_as_scalars(backend):
    xp = BACKENDS[backend]()
    o = routes.op("cast", shape=(3,))
    (y,) = routes.invoke(o, [np.array([True, False, True])], xp)
    assert np.array_equal(xp.to_float64(y), [1.0, 0.0, 1.0])
    # Forward mode: no value input, so the tangent of the value output is zero.
    (t,) = o.rule(xp).jvp([np.array([True, False, True])], [None])
    assert np.array_equal(xp.to_float64(t), [0.0, 0.0, 0.0])
    o = routes.op("cast", shape=(2,), source="index", bounds=(3, 300))
    (y,) = routes.invoke(o, [np.array([[2, 255], [0, 17]])], xp)         # bfloat16: exact
    assert np.array_equal(xp.to_float64(y), [[2.0, 255.0], [0.0, 17.0]])
    assert o.outputs[0].shape == (2, 2)


def test_cast_rounds_an_index_once_into_the_format():
    # 299 in float8_e4m3fn (3 fraction bits): neighbours 288 and 320, nearest 288;
    # 300 likewise 288 (304 is the midpoint of 288 and 320).
    xp = numerics.emulated("float8_e4m3fn")
    o = routes.op("cast", shape=(3,), source="index", bounds=(400,))
    (y,) = routes.invoke(o, [np.array([299, 17, 304])], xp)
    # 17 = 10001b needs 5 bits: ties to even 16; 304 is the tie of 288 and 320: even 320.
    assert np.array_equal(xp.to_float64(y), [288.0, 16.0, 320.0])


def test_cast_checks_its_bounds():
    with pytest.raises(RouteError, match="cast: bounds must be empty for source bool"):
        routes.op("cast", bounds=(2,)).check()
    with pytest.raises(RouteError, match="cast: bounds must list at least one bound"):
        routes.op("cast", source="index").check()

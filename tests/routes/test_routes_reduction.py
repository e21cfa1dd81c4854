"""reduce, mean and contract: known answers over the rationals, the accumulation order's
effect in bfloat16 against a rational simulation written here, and the tie convention of
max/min.  Expected numbers come from Fractions, hand computation or the stated convention."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from conftest import round_bits


def q(a):
    """An array of backend numbers as Fractions (exact backend) in a nested list."""
    return np.asarray(a, dtype=object).tolist()


def ex(o, *xs):
    return o.rule(numerics.exact()).forward([np.asarray(x, dtype=np.float64) for x in xs])


# ----- known answers ---------------------------------------------------------------------------
X23 = np.array([[1.0, -2.0, 3.0], [4.0, 0.5, -6.0]])


@pytest.mark.parametrize("op,axes,keepdim,want", [
    ("sum", (1,), False, [Fraction(2), Fraction(-3, 2)]),
    ("sum", (0, 1), False, Fraction(1, 2)),
    ("prod", (0,), True, [[Fraction(4), Fraction(-1), Fraction(-18)]]),
    ("max", (1,), True, [[Fraction(3)], [Fraction(4)]]),
    ("min", (1, 0), False, Fraction(-6)),
])
def test_reduce_known_answers(op, axes, keepdim, want):
    (y,) = ex(routes.op("reduce", shape=(2, 3), op=op, axes=axes, keepdim=keepdim), X23)
    assert q(y) == want


def test_reduce_over_an_empty_axis_gives_the_identity():
    (s,) = ex(routes.op("reduce", shape=(2, 0), op="sum", axes=(1,)), np.zeros((2, 0)))
    (p,) = ex(routes.op("reduce", shape=(2, 0), op="prod", axes=(1,)), np.zeros((2, 0)))
    assert q(s) == [0, 0] and q(p) == [1, 1]


def test_prod_gradient_is_the_product_of_the_others_even_at_zeros():
    o = routes.op("reduce", shape=(4,), op="prod", axes=(0,))
    x = np.array([2.0, 0.0, 3.0, 0.0])
    (g,) = o.rule(numerics.exact()).backward([x], [np.array(1.0)])
    assert q(g) == [0, 0, 0, 0]
    x = np.array([2.0, 0.0, 3.0, -0.5])
    (g,) = o.rule(numerics.exact()).backward([x], [np.array(2.0)])
    assert q(g) == [0, -6, 0, 0]
    (g,) = o.rule(numerics.exact()).backward([np.array([2.0, 5.0, 3.0, -0.5])], [np.array(1.0)])
    assert q(g) == [Fraction(-15, 2), -3, -5, 30]


def test_mean_known_answer_and_gradient():
    o = routes.op("mean", shape=(2, 3), axes=(0, 1))
    (y,) = ex(o, X23)
    assert q(y) == Fraction(1, 12)
    (g,) = o.rule(numerics.exact()).backward([X23], [np.array(3.0)])
    assert q(g) == [[Fraction(1, 2)] * 3] * 2


def test_contract_is_tensordot():
    x = np.arange(12, dtype=np.float64).reshape(2, 3, 2) - 5
    y = np.arange(6, dtype=np.float64).reshape(2, 3) * 0.5
    o = routes.op("contract", x_shape=(2, 3, 2), y_shape=(2, 3), x_axes=(2, 1), y_axes=(0, 1))
    (z,) = ex(o, x, y)
    want = [sum(Fraction(x[i, j, k]) * Fraction(y[k, j]) for j in range(3) for k in range(2))
            for i in range(2)]
    assert q(z) == want
    outer = routes.op("contract", x_shape=(2,), y_shape=(3,), x_axes=(), y_axes=())
    (z,) = ex(outer, [1.0, -2.0], [3.0, 4.0, 0.5])
    assert q(z) == [[3, 4, Fraction(1, 2)], [-6, -8, -1]]


# ----- the accumulation order decides the rounding ---------------------------------------------
def bf16(v: Fraction) -> Fraction:
    """v rounded to nearest even into bfloat16's 8-bit significand (normal range)."""
    return round_bits(v, 8)


def sequential(xs):
    acc = xs[0]
    for v in xs[1:]:
        acc = bf16(acc + v)
    return acc


def pairwise(xs):
    while len(xs) > 1:
        nxt = [bf16(xs[i] + xs[i + 1]) for i in range(0, len(xs) - 1, 2)]
        xs = nxt + ([xs[-1]] if len(xs) % 2 else [])
    return xs[0]


def test_bfloat16_sum_order_effect_against_rational_simulation():
    # 1 + 2**-8 is a tie in bfloat16 (ulp(1) = 2**-7) and rounds to even: the sequential sum
    # loses every small term; pairwise adds the small terms first.
    x = [1.0] + [2.0 ** -8] * 7
    xs = [Fraction(v) for v in x]
    exact = sum(xs)
    seq, pair = sequential(xs), pairwise(xs)
    # By hand: pairwise levels [1, 2**-7, 2**-7, 2**-7] -> [1 + 2**-7, 2**-6] -> 1 + 3 * 2**-7.
    assert (seq, pair, exact) == (1, Fraction(131, 128), Fraction(263, 256))
    o = routes.op("reduce", shape=(8,), axes=(0,))
    got_seq = o.rule(numerics.emulated("bfloat16")).forward([np.array(x)])[0]
    got_pair = o.rule(numerics.emulated("bfloat16", policy="pairwise")).forward([np.array(x)])[0]
    assert Fraction(float(got_seq)) == seq == 1
    assert Fraction(float(got_pair)) == pair
    assert pair != seq and abs(pair - exact) < abs(seq - exact)
    # The mean divides the same sums once by 8 (exact in binary).
    m = routes.op("mean", shape=(8,), axes=(0,))
    got = m.rule(numerics.emulated("bfloat16", policy="pairwise")).forward([np.array(x)])[0]
    assert Fraction(float(got)) == pair / 8


def test_blocked_order_and_fp32_accumulation_against_simulation():
    rng = np.random.default_rng(11)
    x = [float(Fraction(int(v), 64)) for v in rng.integers(-512, 512, 64)]
    xs = [bf16(Fraction(v)) for v in x]
    x = [float(v) for v in xs]
    o = routes.op("reduce", shape=(64,), axes=(0,))
    # blocked:32: two sequential block sums, then their sum.
    want = bf16(sequential(xs[:32]) + sequential(xs[32:]))
    got = o.rule(numerics.emulated("bfloat16", policy="blocked32")).forward([np.array(x)])[0]
    assert Fraction(float(got)) == want
    # binary32 accumulation: these dyadic terms add exactly; one rounding at the end.
    got = o.rule(numerics.emulated("bfloat16", policy="fp32_accumulate")).forward(
        [np.array(x)])[0]
    assert Fraction(float(got)) == bf16(sum(xs))


def test_contract_accumulates_under_the_policy():
    # dot([1, 2**-8, 2**-8, 2**-8], ones): the same tie as the sum.
    x = np.array([[1.0, 2.0 ** -8, 2.0 ** -8, 2.0 ** -8]])
    y = np.ones((4, 1))
    o = routes.op("contract", x_shape=(1, 4), y_shape=(4, 1), x_axes=(1,), y_axes=(0,))
    seq = o.rule(numerics.emulated("bfloat16")).forward([x, y])[0]
    pair = o.rule(numerics.emulated("bfloat16", policy="pairwise")).forward([x, y])[0]
    assert float(seq[0, 0]) == 1.0 and float(pair[0, 0]) == 1.0 + 2.0 ** -7


# ----- conventions -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["exact", "reference", "bfloat16", "float64"])
def test_reduce_max_splits_ties_equally(backend):
    xp = {"exact": numerics.exact, "reference": lambda: numerics.reference(64),
          "bfloat16": lambda: numerics.emulated("bfloat16"),
          "float64": lambda: numerics.native("float64")}[backend]()
    o = routes.op("reduce", shape=(2, 3), op="max", axes=(1,))
    x = np.array([[2.0, 5.0, 5.0], [1.0, 1.0, 1.0]])
    rule = o.rule(xp)
    (g,) = rule.backward([x], [np.array([4.0, 3.0])])
    assert np.asarray(xp.to_float64(g), dtype=np.float64).tolist() == [[0, 2, 2], [1, 1, 1]]
    (t,) = rule.jvp([x], [np.array([[9.0, 1.0, 3.0], [3.0, 0.0, 6.0]])])
    assert np.asarray(xp.to_float64(t), dtype=np.float64).tolist() == [2, 3]
    mn = routes.op("reduce", shape=(2, 3), op="min", axes=(0, 1)).rule(xp)
    (g,) = mn.backward([x], [np.array(6.0)])
    assert np.asarray(xp.to_float64(g), dtype=np.float64).tolist() == [[0, 0, 0], [2, 2, 2]]
    if backend != "exact":
        xn = np.array([[2.0, np.nan, np.nan], [1.0, -np.inf, 0.0]])
        (y,) = rule.forward([xn])
        (g,) = rule.backward([xn], [np.array([4.0, 3.0])])
        y, g = (np.asarray(xp.to_float64(v), dtype=np.float64) for v in (y, g))
        assert np.isnan(y[0]) and y[1] == 1.0
        assert g.tolist() == [[0, 2, 2], [3, 0, 0]]


# ----- checks -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,attrs,text", [
    ("reduce", {"shape": (2, 3), "axes": (1, 1)}, "reduce: axes must be distinct (got [1, 1])"),
    ("mean", {"shape": (2, 3), "axes": (0, 0)}, "mean: axes must be distinct (got [0, 0])"),
    ("reduce", {"shape": (2, 3), "op": "min", "axes": (0,), "keepdim": True}, None),
    ("contract", {"x_shape": (2, 3), "y_shape": (2, 3), "x_axes": (1,), "y_axes": (0,)},
     "contract: contracted extents must agree (x axis 1 has 3, y axis 0 has 2)"),
])
def test_checks_name_the_operator_and_argument(name, attrs, text):
    o = routes.op(name, **attrs)
    if text is None:
        o.check()
        return
    with pytest.raises(RouteError) as err:
        o.check()
    assert str(err.value) == text


def test_keepdim_and_axes_give_the_output_shape():
    for shape in [(2, 3), (2, 1, 3), (1, 2, 2)]:
        for k in range(1, len(shape) + 1):
            for axes in itertools.permutations(range(len(shape)), k):
                for keep in (False, True):
                    o = routes.op("reduce", shape=shape, axes=axes, keepdim=keep)
                    want = tuple(1 if i in axes else n for i, n in enumerate(shape)
                                 if keep or i not in axes)
                    assert o.outputs[0].shape == want
                    (y,) = o.rule(numerics.native("float64")).forward([np.ones(shape)])
                    assert np.shape(y) == want
                    assert np.all(np.asarray(y) == math.prod(shape[i] for i in axes))

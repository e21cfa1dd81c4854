"""matmul, scaledMatmul and linear: known answers over the rationals (hand-written loops
with Fractions), broadcast batch prefixes, the accumulation policy's effect in bfloat16, and
the gradients' known answers."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import certs
from roundoff_coverage.routes.errors import RouteError
from conftest import fr


def loop_matmul(p, q):
    """p @ q for 2-D Fraction arrays by the definition."""
    return [[sum((p[i, k] * q[k, j] for k in range(p.shape[1])), Fraction(0))
             for j in range(q.shape[1])] for i in range(p.shape[0])]


def test_matmul_broadcasts_batch_prefixes():
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 5, (2, 1, 2, 3)) / 4.0
    y = rng.integers(-4, 5, (3, 3, 2)) / 2.0
    o = routes.op("matmul", x_shape=(2, 1, 2, 3), y_shape=(3, 3, 2))
    assert o.outputs[0].shape == (2, 3, 2, 2)
    (z,) = o.rule(numerics.exact()).forward([x, y])
    for b0 in range(2):
        for b1 in range(3):
            assert z[b0, b1].tolist() == loop_matmul(fr(x[b0, 0]), fr(y[b1]))


def test_matmul_gradients_sum_over_broadcast_axes():
    x = np.array([[[1.0, 2.0]]])                  # (1, 1, 2)
    y = np.array([[[1.0], [0.5]], [[-1.0], [3.0]]])  # (2, 2, 1)
    o = routes.op("matmul", x_shape=(1, 1, 2), y_shape=(2, 2, 1))
    g = np.array([[[2.0]], [[1.0]]])              # (2, 1, 1)
    gx, gy = o.rule(numerics.exact()).backward([x, y], [g])
    # gx = sum over the batch of g_b * y_b^T = 2 * [1, 0.5] + 1 * [-1, 3] = [1, 4]
    assert gx.tolist() == [[[1, 4]]]
    # gy_b = x^T g_b
    assert gy.tolist() == [[[2], [4]], [[1], [2]]]


def test_matmul_with_an_empty_inner_extent_is_zero():
    o = routes.op("matmul", x_shape=(2, 0), y_shape=(0, 3))
    (z,) = o.rule(numerics.exact()).forward([np.zeros((2, 0)), np.zeros((0, 3))])
    assert z.tolist() == [[0] * 3] * 2


def test_scaled_matmul_rounds_the_product_then_scales():
    # bfloat16: the dot 1 + 2**-8 ties to 1 (even), then 1 * 1.5 = 1.5.  Scaling the
    # operands first would round 1.5 + 1.5 * 2**-8 up to 1.5 + 2**-7 (above half an ulp).
    x = np.array([[1.0, 2.0 ** -8]])
    y = np.array([[1.0], [1.0]])
    o = routes.op("scaledMatmul", x_shape=(1, 2), y_shape=(2, 1))
    (z,) = o.rule(numerics.emulated("bfloat16")).forward([x, y, np.array(1.5)])
    assert float(z[0, 0]) == 1.5
    (z,) = o.rule(numerics.exact()).forward([x, y, np.array(1.5)])
    assert z[0, 0] == Fraction(3, 2) * (1 + Fraction(1, 256))
    gx, gy, gs = o.rule(numerics.exact()).backward([x, y, np.array(1.5)], [np.array([[2.0]])])
    assert gx.tolist() == [[3, 3]] and gy.tolist() == [[3], [Fraction(3, 256)]] and gs is None


def test_matmul_accumulation_format_changes_the_result():
    # One row of 1 followed by eight 2**-9: bfloat16 accumulation drops each small term
    # (1 + 2**-9 rounds to 1); binary32 accumulation keeps them and rounds once at the end
    # (1 + 2**-6 is a bfloat16 number).
    x = np.array([[1.0] + [2.0 ** -9] * 8])
    y = np.ones((9, 1))
    o = routes.op("matmul", x_shape=(1, 9), y_shape=(9, 1))
    strict = o.rule(numerics.emulated("bfloat16")).forward([x, y])[0]
    wide = o.rule(numerics.emulated("bfloat16", policy="fp32_accumulate")).forward([x, y])[0]
    assert float(strict[0, 0]) == 1.0
    assert float(wide[0, 0]) == 1.0 + 2.0 ** -6


def test_linear_known_answer_and_gradients():
    w = np.array([[1.0, -1.0, 2.0], [0.5, 0.0, 1.0]])
    b = np.array([0.25, -1.0])
    x = np.array([[[1.0, 2.0, 3.0]], [[-1.0, 0.0, 4.0]]])      # batch (2, 1)
    o = routes.op("linear", batch=(2, 1), in_features=3, out_features=2)
    rule = o.rule(numerics.exact())
    (y,) = rule.forward([w, b, x])
    # Row 1: [1 - 2 + 6 + 0.25, 0.5 + 3 - 1] = [5.25, 2.5]; row 2: [-1 + 8 + 0.25, -0.5 + 4 - 1]
    assert y.tolist() == [[[Fraction(21, 4), Fraction(5, 2)]], [[Fraction(29, 4), Fraction(5, 2)]]]
    g = np.array([[[1.0, 2.0]], [[0.0, -1.0]]])
    gw, gb, gx = rule.backward([w, b, x], [g])
    assert gb.tolist() == [1, 1]
    assert gw.tolist() == [[1, 2, 3], [3, 4, 2]]           # sum over rows of g^T x
    assert gx.tolist() == [[[2, -1, 4]], [[Fraction(-1, 2), 0, -1]]]   # g @ w


def test_linear_certificate_concerns_input_two_only():
    (alg,) = [c for c in routes.certificates("linear") if c.kind == "algebraic"]
    assert alg.inputs == (2,) and "(inputs [2])" in str(alg)
    assert routes.op("linear").input_names[2] == "x"
    assert alg.evidence == (certs.STANDARD["algebraic"][0].replace("{id}", "linear"),)


@pytest.mark.parametrize("attrs,text", [
    ({"x_shape": (2, 3), "y_shape": (2, 3)},
     "matmul: inner extents must agree (x_shape ends in 3, y_shape has 2 rows)"),
    ({"x_shape": (3,), "y_shape": (3, 2)}, "matmul: x_shape must have rank >= 2 (got [3])"),
    ({"x_shape": (2, 2, 3), "y_shape": (3, 3, 2)},
     "matmul: batch prefixes must broadcast (got [2] and [3])"),
])
def test_matmul_checks(attrs, text):
    with pytest.raises(RouteError) as err:
        routes.op("matmul", **attrs).check()
    assert str(err.value) == text

"""layerNorm, batchNorm and batchNormRunning: known answers over the rationals (inputs whose
variance plus eps is a perfect square, so rsqrt is exact), known gradients from the
derivative written out by hand, mpmath values, the constant-row convention and validate."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from conftest import mp_context

F = Fraction


def test_layer_norm_known_answer_exact():
    o = routes.op("layerNorm", shape=(2, 4))
    x = np.array([[0.0, 0.0, 6.0, 6.0], [1.0, 3.0, 1.0, 3.0]])
    # Row 0: mean 3, variance 9; row 1: mean 2, variance 1; eps 0.
    w, b = np.array([1.0, 2.0, 0.5, 1.0]), np.array([0.0, 1.0, 0.0, -1.0])
    (y,) = o.rule(numerics.exact()).forward([x, w, b, np.array(0.0)])
    assert y.tolist() == [[-1, -1, F(1, 2), 0], [-1, 3, F(-1, 2), 0]]
    # eps 7 on row 0: variance + eps = 16, 1/sigma = 1/4.
    (y,) = o.rule(numerics.exact()).forward([x[:1].repeat(2, 0), np.ones(4), np.zeros(4),
                                             np.array(7.0)])
    assert y[0].tolist() == [F(-3, 4), F(-3, 4), F(3, 4), F(3, 4)]


def test_layer_norm_gradient_known_answer():
    # y0 = (x0 - mu)/sigma: dy0/dx0 = (1 - 1/n)/sigma - (x0-mu)^2/(n sigma^3) = 1/4 - 1/12,
    # dy0/dx1 = -1/(n sigma) - (x0-mu)(x1-mu)/(n sigma^3) = -1/12 - 1/12, dy0/dx2 = 0 (n = 4,
    # sigma = 3, x - mu = [-3, -3, 3, 3]).
    o = routes.op("layerNorm", shape=(4,))
    x = np.array([0.0, 0.0, 6.0, 6.0])
    gx, gw, gb, geps = o.rule(numerics.exact()).backward(
        [x, np.ones(4), np.zeros(4), np.array(0.0)], [np.array([1.0, 0.0, 0.0, 0.0])])
    assert gx.tolist() == [F(1, 6), F(-1, 6), 0, 0]
    assert gw.tolist() == [-1, 0, 0, 0] and gb.tolist() == [1, 0, 0, 0] and geps is None
    # Invariance to shift and scale: cotangents 1 and x_hat give no input gradient.
    for g in (np.ones(4), np.array([-1.0, -1.0, 1.0, 1.0])):
        (gx, *_) = o.rule(numerics.exact()).backward(
            [x, np.ones(4), np.zeros(4), np.array(0.0)], [g])
        assert gx.tolist() == [0, 0, 0, 0]


def test_layer_norm_matches_mpmath_with_weight_bias_and_eps():
    ctx = mp_context(220)
    o = routes.op("layerNorm", shape=(3,))
    x, w, b, eps = [1.0, 2.0, 4.0], [0.5, -1.0, 2.0], [0.25, 0.0, -1.0], 0.125
    (y,) = o.rule(numerics.reference(200)).forward([np.array(x), np.array(w), np.array(b),
                                                    np.array(eps)])
    mu = ctx.mpf(7) / 3
    var = sum((ctx.mpf(v) - mu) ** 2 for v in x) / 3
    for got, v, wi, bi in zip(y, x, w, b):
        want = (v - mu) / ctx.sqrt(var + ctx.mpf(eps)) * wi + bi
        assert abs(ctx.mpf(got) - want) < ctx.mpf(2) ** -190


def test_constant_row_gives_the_bias():
    o = routes.op("layerNorm", shape=(1, 3))
    (y,) = o.rule(numerics.exact()).forward([np.full((1, 3), 5.0), np.array([2.0, 3.0, 4.0]),
                                             np.array([1.0, -1.0, 0.5]), np.array(0.25)])
    assert y.tolist() == [[1, -1, F(1, 2)]]


def test_batch_norm_uses_per_channel_batch_statistics():
    o = routes.op("batchNorm", shape=(2, 2, 2))
    # Channel 0 holds {0, 6, 0, 6} (mean 3, variance 9), channel 1 {1, 1, 3, 3} (mean 2, var 1).
    x = np.array([[[0.0, 6.0], [1.0, 1.0]], [[0.0, 6.0], [3.0, 3.0]]])
    (y,) = o.rule(numerics.exact()).forward([x, np.array([1.0, 2.0]), np.array([0.0, 0.5]),
                                             np.array(0.0)])
    assert y.tolist() == [[[-1, 1], [F(-3, 2), F(-3, 2)]], [[-1, 1], [F(5, 2), F(5, 2)]]]


def test_batch_norm_running_known_answer_and_gradient():
    o = routes.op("batchNormRunning", shape=(2, 3), axis=1)
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    w, b = np.array([2.0, 1.0, 3.0]), np.array([0.0, 1.0, -1.0])
    rm, rv, eps = np.array([1.0, 0.0, -1.0]), np.array([3.75, 0.75, 8.75]), np.array(0.25)
    rule = o.rule(numerics.exact())
    # running_var + eps = [4, 1, 9]: 1/sigma = [1/2, 1, 1/3].
    (y,) = rule.forward([x, w, b, rm, rv, eps])
    assert y.tolist() == [[0, 3, 3], [3, 6, 6]]
    grads = rule.backward([x, w, b, rm, rv, eps], [np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]])])
    gx, gw, gb = grads[:3]
    assert gx.tolist() == [[1, 2, 3], [-1, 0, 1]]
    # x_hat = [[0, 2, 4/3], [3/2, 5, 7/3]]
    assert gw.tolist() == [F(-3, 2), 4, 4 + F(7, 3)] and gb.tolist() == [0, 2, 4]
    assert grads[3:] == (None, None, None)


def test_batch_norm_running_along_axis_zero():
    o = routes.op("batchNormRunning", shape=(2, 2), axis=0)
    (y,) = o.rule(numerics.exact()).forward(
        [np.array([[1.0, 3.0], [0.0, 2.0]]), np.ones(2), np.zeros(2), np.array([1.0, 2.0]),
         np.array([4.0, 1.0]), np.array(0.0)])
    assert y.tolist() == [[0, 1], [-2, 0]]


@pytest.mark.parametrize("name", ["layerNorm", "batchNorm"])
def test_eps_is_validated(name):
    o = routes.op(name, shape=(2, 3))
    args = [np.zeros((2, 3)), np.ones(3), np.zeros(3)]
    with pytest.raises(RouteError) as err:
        routes.invoke(o, args + [np.array(-0.5)], numerics.native("float64"))
    assert str(err.value) == f"{name}: eps must be finite and >= 0 (got -0.5)"


def test_running_statistics_are_validated():
    o = routes.op("batchNormRunning", shape=(1, 2))
    base = [np.zeros((1, 2)), np.ones(2), np.zeros(2), np.zeros(2)]
    with pytest.raises(RouteError, match="running_var must be finite and >= 0"):
        routes.invoke(o, base + [np.array([1.0, np.inf]), np.array(0.1)],
                      numerics.native("float64"))
    with pytest.raises(RouteError, match=r"running_var \+ eps must be > 0"):
        routes.invoke(o, base + [np.array([0.0, 1.0]), np.array(0.0)],
                      numerics.native("float64"))
    (y,) = routes.invoke(o, base + [np.array([0.0, 1.0]), np.array(1.0)],
                         numerics.native("float64"))
    assert y.tolist() == [[0.0, 0.0]]

"""Known answers and conventions of the losses: exact rationals where the loss is rational
(mse, mae, huber, hinge under numerics.exact()), hand-computed log-sum-exps and mpmath at
300 bits written here from the definitions, never the rules' own output."""

from __future__ import annotations

import math
from fractions import Fraction as Q

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from conftest import CTX, arr, f64, near


def exact(values):
    return [Q(v) for v in np.ravel(values).tolist()]


# ----- reductions (exact rationals) -----------------------------------------------------------
@pytest.mark.parametrize("reduction,value,grad", [
    ("mean", [Q(14, 3)], [Q(2, 3), Q(4, 3), Q(2)]),
    ("sum", [Q(14)], [Q(2), Q(4), Q(6)]),
    ("none", [Q(1), Q(4), Q(9)], [Q(2), Q(4), Q(6)]),
])
def test_mse_reductions_are_pytorchs(reduction, value, grad):
    xp = numerics.exact()
    rule = routes.op("mseLoss", reduction=reduction).rule(xp)
    x, t = arr(1, 2, 3), arr(0, 0, 0)
    assert exact(rule.forward([x, t])[0]) == value
    g = arr(1) if reduction != "none" else arr(1, 1, 1)
    gx, gt = rule.backward([x, t], [g])
    assert exact(gx) == grad and exact(gt) == [-v for v in grad]


def test_mae_gradient_at_the_kink_is_zero():
    for xp in (numerics.exact(), numerics.native("float64"), numerics.emulated("bfloat16")):
        rule = routes.op("maeLoss", reduction="sum").rule(xp)
        x, t = arr(2, -1, 0.5), arr(2, 1, 0.5)
        assert f64(xp, rule.forward([x, t])[0]) == 2.0
        gx, gt = rule.backward([x, t], [arr(3)])
        assert np.array_equal(f64(xp, gx), [0, -3, 0]) and np.array_equal(f64(xp, gt), [0, 3, 0])
        assert f64(xp, rule.jvp([x, t], [arr(1, 1, 1), arr(0, 0, 0)])[0]) == -1.0


def test_huber_at_delta_is_continuous():
    # d = +-delta: both branches give delta^2 / 2 and the slope +-delta.
    xp = numerics.exact()
    rule = routes.op("huberLoss", reduction="none", shape=(4,)).rule(xp)
    x, t = arr(1, -1, 0.5, 3), arr(0, 0, 0, 0)
    assert exact(rule.forward([x, t, np.float64(1)])[0]) == [Q(1, 2), Q(1, 2), Q(1, 8), Q(5, 2)]
    gx, _, _ = rule.backward([x, t, np.float64(1)], [arr(1, 1, 1, 1)])
    assert exact(gx) == [Q(1), Q(-1), Q(1, 2), Q(1)]
    wide = routes.op("huberLoss", reduction="none", shape=(2,)).rule(xp)
    assert exact(wide.forward([arr(2, 1), arr(0, 0), np.float64(2)])[0]) == [Q(2), Q(1, 2)]
    assert exact(wide.backward([arr(2, 1), arr(0, 0), np.float64(2)], [arr(1, 1)])[0]) == [2, 1]


def test_huber_refuses_a_nonpositive_delta():
    o = routes.op("huberLoss")
    with pytest.raises(routes.RouteError, match="huberLoss: delta must be > 0 .got -1."):
        o.rule(numerics.native("float64")).validate([arr(0, 0, 0), arr(0, 0, 0),
                                                    np.array(-1.0)])


def test_hinge_gradient_at_the_hinge_point_is_zero():
    xp = numerics.exact()
    rule = routes.op("hingeLoss", reduction="none", shape=(4,)).rule(xp)
    x, y, margin = arr(1, 0.5, -2, -0.5), arr(1, 1, -1, -1), np.float64(1)
    assert exact(rule.forward([x, y, margin])[0]) == [0, Q(1, 2), 0, Q(1, 2)]
    gx, gy, gm = rule.backward([x, y, margin], [arr(1, 1, 1, 1)])
    assert exact(gx) == [0, -1, 0, 1] and gy is None and gm is None


# ----- log-domain losses against hand-computed values -----------------------------------------
def test_poisson_and_log_cosh_known_values():
    xp = numerics.native("float64")
    p = routes.op("poissonLoss", reduction="none", shape=(2,)).rule(xp)
    assert near(f64(xp, p.forward([arr(0, 1), arr(1, 2)])[0]), [1.0, math.e - 2], ulps=1)
    lc = routes.op("logCoshLoss", reduction="none", shape=(3,)).rule(xp)
    got = f64(xp, lc.forward([arr(1, 1e-5, 800), arr(0, 0, 0)])[0])
    want = [float(CTX.log(CTX.cosh(CTX.mpf(v)))) for v in (1, 1e-5, 800)]
    assert near(got, want, ulps=2)                   # 800: no overflow of cosh; 1e-5: ~5e-11


def test_bce_clamps_the_logs_at_minus_100():
    xp = numerics.native("float64")
    rule = routes.op("binaryCrossEntropy", reduction="none", shape=(3,)).rule(xp)
    x, t = arr(0, 1, 0.5), arr(1, 0, 1)
    assert near(f64(xp, rule.forward([x, t])[0]), [100.0, 100.0, math.log(2)], ulps=1)
    gx, gt = rule.backward([x, t], [arr(1, 1, 1)])
    # Clamped terms contribute 0; at x = 1/2, t = 1: -t / x = -2; target: log(1-x) - log x.
    assert np.array_equal(f64(xp, gx), [0.0, 0.0, -2.0])
    assert np.array_equal(f64(xp, gt), [0.0 + 100.0, -100.0 - 0.0, 0.0])


def test_bce_refuses_inputs_outside_the_unit_interval():
    o = routes.op("binaryCrossEntropy")
    with pytest.raises(routes.RouteError, match=r"binaryCrossEntropy: x must lie in \[0, 1\]"):
        routes.invoke(o, [arr(0.5, -0.25, 1), arr(0, 0, 0)], numerics.native("float64"))


# ----- cross entropies ------------------------------------------------------------------------
def _lse(row):
    return CTX.log(CTX.fsum(CTX.exp(CTX.mpf(v)) for v in row))


def test_cross_entropy_against_hand_computed_log_sum_exp():
    xp = numerics.reference(256)
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    t = np.array([2, 1])
    got = f64(xp, routes.op("crossEntropy").rule(xp).forward([x, t])[0])
    # Row 0: log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2); row 1: log 3.
    want = (CTX.log(1 + CTX.exp(-1) + CTX.exp(-2)) + CTX.log(3)) / 2
    assert near(got, float(want), ulps=0.5)
    grad = f64(xp, routes.op("crossEntropy").rule(xp).backward([x, t], [arr(1)])[0])
    assert near(grad[1], [1 / 6, -1 / 3, 1 / 6], ulps=2)      # (softmax - onehot) / 2


def test_cross_entropy_large_logits_do_not_overflow():
    xp = numerics.native("float64")
    o = routes.op("crossEntropy", shape=(3,), reduction="sum")
    got = f64(xp, o.rule(xp).forward([arr(1000, 0, -1000), np.array(1)])[0])
    assert got == 1000.0                            # log(e^1000 + 1 + e^-1000) - 0 in binary64
    got = f64(xp, o.rule(xp).forward([arr(1000, 999, -1000), np.array(0)])[0])
    assert near(got, float(CTX.log1p(CTX.exp(-1))), ulps=1)


def test_cross_entropy_with_one_hot_probabilities_matches_indices():
    xp = numerics.native("float64")
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.25]])
    hot = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    got = f64(xp, routes.op("crossEntropyProbabilities").rule(xp).forward([x, hot])[0])
    want = (_lse(x[0]) - 3 + _lse(x[1]) - CTX.mpf(0.5)) / 2
    assert near(got, float(want), ulps=2)
    gt = f64(xp, routes.op("crossEntropyProbabilities").rule(xp).backward([x, hot],
                                                                          [arr(1)])[1])
    assert near(gt[0], [float((_lse(x[0]) - v) / 2) for v in x[0]], ulps=2)


def test_distill_is_zero_when_student_equals_teacher_and_matches_kl():
    xp = numerics.reference(256)
    o = routes.op("distill", shape=(1, 2), reduction="sum")
    x = np.array([[0.0, math.log(2.0)]])
    rule = o.rule(xp)
    same = rule.forward([x, x, np.float64(2)])[0]
    assert abs(f64(xp, same)) < 1e-70
    assert np.all(np.abs(f64(xp, rule.backward([x, x, np.float64(2)], [arr(1)])[0])) < 1e-70)
    # teacher [0, 0] (p = [1/2, 1/2]), student [0, ln 2] at T = 1: KL = log(3 / 2) - ln 2 / 2.
    got = f64(xp, rule.forward([x, np.zeros((1, 2)), np.float64(1)])[0])
    ln2 = CTX.mpf(math.log(2.0))
    want = CTX.log(1 + CTX.exp(ln2)) - CTX.log(2) - ln2 / 2
    assert near(got, float(want), ulps=0.5)


def test_distill_teacher_gets_no_gradient_and_temperature_is_checked():
    o = routes.op("distill", shape=(1, 2))
    xp = numerics.native("float64")
    grads = o.rule(xp).backward([np.zeros((1, 2)), np.ones((1, 2)), np.float64(2)], [arr(1)])
    assert grads[1] is None and grads[2] is None
    with pytest.raises(routes.RouteError, match="distill: temperature must be > 0 .got -1."):
        o.rule(xp).validate([np.zeros((1, 2)), np.zeros((1, 2)), np.array(-1.0)])


def test_cosine_loss_known_values():
    xp = numerics.native("float64")
    rule = routes.op("cosineLoss", shape=(3, 2), reduction="none").rule(xp)
    x = np.array([[1.0, 0.0], [3.0, 4.0], [0.0, 0.0]])
    t = np.array([[0.0, 1.0], [6.0, 8.0], [1.0, 1.0]])
    # Orthogonal: 1; parallel: 0; a zero vector (norm clamped at eps): 1.
    assert np.array_equal(f64(xp, rule.forward([x, t, np.array(1e-8)])[0]), [1.0, 0.0, 1.0])
    gx = f64(xp, rule.backward([x, t, np.array(1e-8)], [arr(1, 1, 1)])[0])
    # d(1 - cos)/dx at x = [1, 0], t = [0, 1]: -(t - cos x) / (|x| |t|) = [0, -1].
    assert near(gx[0], [0.0, -1.0], ulps=1)

"""Known answers and conventions of the softmax and attention operators.  Expected values are
hand-computed (softmax of [0, ln 2] is [1/3, 2/3]) or mpmath at 300 bits written here from
the definitions, never the rules' own output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from conftest import CTX, f64, near

LN2 = math.log(2.0)                       # the binary64 nearest ln 2: an input, not an answer


def mp_softmax(row):
    """softmax of a row of floats at 300 bits, from the definition."""
    e = [CTX.exp(CTX.mpf(v)) for v in row]
    s = CTX.fsum(e)
    return [float(v / s) for v in e]


# ----- softmax and logSoftmax -----------------------------------------------------------------
@pytest.mark.parametrize("backend", ["float64", "reference"])
def test_softmax_of_zero_and_ln2_is_one_third_two_thirds(backend):
    xp = numerics.native("float64") if backend == "float64" else numerics.reference(256)
    y = f64(xp, routes.op("softmax", shape=(2,)).rule(xp).forward([np.array([0.0, LN2])])[0])
    assert near(y, [1 / 3, 2 / 3], ulps=1)
    assert near(y, mp_softmax([0.0, LN2]), ulps=0.5 if backend == "reference" else 1)


def test_softmax_gradient_at_zero_and_ln2():
    # y = [1/3, 2/3], g = [1, 0]: y * (g - <g, y>) = [1/3 * 2/3, 2/3 * -1/3] = [2/9, -2/9].
    xp = numerics.reference(256)
    rule = routes.op("softmax", shape=(2,)).rule(xp)
    x = np.array([0.0, LN2])
    grad = f64(xp, rule.backward([x], [np.array([1.0, 0.0])])[0])
    y = mp_softmax([0.0, LN2])
    want = [y[0] * (1 - y[0]), -y[1] * y[0]]
    assert near(grad, want, ulps=1) and near(grad, [2 / 9, -2 / 9], ulps=4)


@pytest.mark.parametrize("fmt", ["float64", "bfloat16-emulated"])
def test_softmax_of_large_logits_does_not_overflow(fmt):
    xp = numerics.native("float64") if fmt == "float64" else numerics.emulated("bfloat16")
    x = np.array([1000.0, 0.0])
    y = f64(xp, routes.op("softmax", shape=(2,)).rule(xp).forward([x])[0])
    assert np.array_equal(y, [1.0, 0.0])        # exp(-1000) underflows to 0; no inf / inf
    ly = f64(xp, routes.op("logSoftmax", shape=(2,)).rule(xp).forward([x])[0])
    assert np.array_equal(ly, [0.0, -1000.0])


def test_log_softmax_matches_mpmath_along_axis1():
    xp = numerics.native("float64")
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]])
    got = f64(xp, routes.op("logSoftmax", shape=(2, 3), axis=1).rule(xp).forward([x])[0])
    for row, g in zip(x, got):
        lse = CTX.log(CTX.fsum(CTX.exp(CTX.mpf(v)) for v in row))
        assert near(g, [float(CTX.mpf(v) - lse) for v in row], ulps=2)


def test_softmax_of_minus_inf_entry_is_exactly_zero_and_nan_spreads():
    xp = numerics.native("float64")
    rule = routes.op("softmax", shape=(3,)).rule(xp)
    y = f64(xp, rule.forward([np.array([-np.inf, 0.0, LN2])])[0])
    assert y[0] == 0.0 and near(y[1:], [1 / 3, 2 / 3], ulps=1)
    assert np.isnan(f64(xp, rule.forward([np.array([np.nan, 0.0, 1.0])])[0])).all()


# ----- maskedSoftmax --------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["float64", "reference", "bfloat16"])
def test_masked_softmax_gives_exact_zeros(backend):
    xp = {"float64": lambda: numerics.native("float64"),
          "reference": lambda: numerics.reference(64),
          "bfloat16": lambda: numerics.emulated("bfloat16")}[backend]()
    rule = routes.op("maskedSoftmax", shape=(2, 3), axis=1).rule(xp)
    x = np.array([[0.0, LN2, np.nan], [5.0, -np.inf, 7.0]])
    mask = np.array([[True, True, False], [False, False, False]])
    y = f64(xp, rule.forward([x, mask])[0])
    assert np.array_equal(y[0, 2:], [0.0]) and np.array_equal(y[1], [0.0, 0.0, 0.0])
    tol = 1 if backend != "bfloat16" else 2.0 ** 45          # bfloat16: 8 bits
    assert near(y[0, :2], [1 / 3, 2 / 3], ulps=tol)
    # Cotangents and tangents at masked entries (even infinite) give exactly 0.
    g = np.array([[1.0, 0.0, np.inf], [np.inf, 1.0, 2.0]])
    grad = f64(xp, rule.backward([x, mask], [g])[0])
    assert np.array_equal(grad[0, 2:], [0.0]) and np.array_equal(grad[1], [0.0, 0.0, 0.0])
    assert near(grad[0, :2], [2 / 9, -2 / 9], ulps=8 if backend != "bfloat16" else 2.0 ** 46)
    tan = f64(xp, rule.jvp([x, mask], [g, None])[0])
    assert np.array_equal(tan[0, 2:], [0.0]) and np.array_equal(tan[1], [0.0, 0.0, 0.0])


def test_masked_softmax_equals_softmax_of_the_kept_entries():
    xp = numerics.reference(256)
    x = np.array([0.5, 100.0, -1.0, 2.0])
    mask = np.array([True, False, True, True])
    y = f64(xp, routes.op("maskedSoftmax", shape=(4,)).rule(xp).forward([x, mask])[0])
    kept = mp_softmax([0.5, -1.0, 2.0])
    assert near(y, [kept[0], 0.0, kept[1], kept[2]], ulps=0.5)


# ----- attention ------------------------------------------------------------------------------
def test_attention_known_answer():
    # scores = 1 * [1] [0, ln 2]^T = [0, ln 2] -> weights [1/3, 2/3]; v = [3, 6] -> 1 + 4 = 5.
    xp = numerics.reference(256)
    o = routes.op("attention", queries=1, key_count=2, dim=1, value_dim=1)
    q, k, v = np.array([[1.0]]), np.array([[0.0], [LN2]]), np.array([[3.0], [6.0]])
    out = f64(xp, o.rule(xp).forward([q, k, v, np.array(1.0)])[0])
    w = mp_softmax([0.0, LN2])
    assert near(out, [[3 * w[0] + 6 * w[1]]], ulps=0.5) and near(out, [[5.0]], ulps=4)


def test_attention_scale_multiplies_the_scores():
    # scale 2 on scores [0, ln 2 / 2]: the same weights [1/3, 2/3] as above.
    xp = numerics.native("float64")
    o = routes.op("attention", queries=1, key_count=2, dim=1, value_dim=1)
    q, k, v = np.array([[1.0]]), np.array([[0.0], [LN2 / 2]]), np.array([[3.0], [6.0]])
    out = f64(xp, o.rule(xp).forward([q, k, v, np.array(2.0)])[0])
    assert near(out, [[5.0]], ulps=4)


def test_attention_from_scores_and_its_gradient_at_v():
    xp = numerics.reference(256)
    o = routes.op("attentionFromScores", queries=1, key_count=2, value_dim=2)
    s, v = np.array([[0.0, LN2]]), np.array([[3.0, 1.0], [6.0, -1.0]])
    rule = o.rule(xp)
    out = f64(xp, rule.forward([s, v])[0])
    w = mp_softmax([0.0, LN2])
    assert near(out, [[3 * w[0] + 6 * w[1], w[0] - w[1]]], ulps=1)
    gs, gv = rule.backward([s, v], [np.array([[1.0, 0.0]])])
    assert near(f64(xp, gv), [[w[0], 0.0], [w[1], 0.0]], ulps=0.5)
    # d out_0 / d s = w * (v_0 - <w, v_0>) = [1/3 (3 - 5), 2/3 (6 - 5)] = [-2/3, 2/3].
    assert near(f64(xp, gs), [[-2 / 3, 2 / 3]], ulps=8)


def test_multihead_attention_concatenates_heads_in_order():
    # Head 0 attends with scores [0, ln 2], head 1 with equal scores [0, 0].
    xp = numerics.reference(256)
    o = routes.op("multiheadAttention", queries=1, key_count=2, heads=2, head_dim=1,
                  value_head_dim=1)
    q = np.array([[1.0, 1.0]])
    k = np.array([[0.0, 0.0], [LN2, 0.0]])
    v = np.array([[3.0, 10.0], [6.0, 20.0]])
    out = f64(xp, o.rule(xp).forward([q, k, v, np.array(1.0)])[0])
    w = mp_softmax([0.0, LN2])
    assert near(out, [[3 * w[0] + 6 * w[1], 15.0]], ulps=1)

"""routes.crown: CROWN's backward sweep encloses the real values and is never looser than IBP.

Oracles: the reference backend (numerics.reference) on the graph at the corners and at
random points of the input box; for an affine network, its exact range over the box
(center +- |W| radius in exact rationals), which the sweep must hold and nearly reach.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from conftest import INSTANCES

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import ports as P
from roundoff_coverage.routes.bounds import CROWN_ARMS

REFERENCE = numerics.reference(100)


def mlp(rng, sizes, activation="relu", batch=1):
    """A graph of linear layers (weights and biases as constants) with ``activation``
    between them, input x of shape (batch, sizes[0])."""
    g = routes.Graph(x=P.value((batch, sizes[0])))
    h = g.input("x")
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = g.constant(rng.normal(size=(b, a)) / np.sqrt(a))
        c = g.constant(rng.normal(size=(b,)) * 0.1)
        h = g.apply(routes.op("linear", batch=(batch,), in_features=a, out_features=b), w, c, h)
        if activation and i < len(sizes) - 2:
            h = g.apply(routes.op(activation, shape=(batch, b)), h)
    return g.output(h)


def reference_values(rng, g, lo, hi, n=24):
    """The graph's output under the reference at the box's two extreme corners, random
    corners and random points, as float64 rows (each within the reference's 100 bits of
    its real value)."""
    pts = [lo, hi] + [np.where(rng.random(lo.shape) < 0.5, lo, hi) for _ in range(n // 2)]
    pts += [lo + (hi - lo) * rng.random(lo.shape) for _ in range(n // 2)]
    out = []
    for x in pts:
        (y,) = g.run([x], REFERENCE)
        out.append(np.vectorize(float, otypes=[np.float64])(np.asarray(y, dtype=object)))
    return np.array(out)


def assert_within(inner, outer):
    """Box ``inner`` lies inside box ``outer``, entry by entry."""
    (ilo, ihi), (olo, ohi) = inner, outer
    assert (ilo >= olo).all() and (ihi <= ohi).all(), (ilo, ihi, olo, ohi)


def test_crown_encloses_and_is_tighter_than_ibp_on_a_relu_mlp():
    """A 4-16-16-3 ReLU network on a box of radius 0.1: CROWN's output box lies inside
    IBP's, is less than half as wide in total, and holds the reference's values at corners
    and random points (strictly inside by the reference's accuracy)."""
    rng = np.random.default_rng(0)
    g = mlp(rng, [4, 16, 16, 3])
    x = rng.normal(size=(1, 4))
    lo, hi = x - 0.1, x + 0.1
    (ilo,), (ihi,) = routes.ibp(g, [lo], [hi])
    (clo,), (chi,) = routes.crown(g, [lo], [hi])
    assert_within((clo, chi), (ilo, ihi))
    assert (chi - clo).sum() < 0.5 * (ihi - ilo).sum()
    ys = reference_values(rng, g, lo, hi)
    assert (ys >= clo).all() and (ys <= chi).all(), (ys.min(0), ys.max(0), clo, chi)


def test_crown_of_an_affine_network_is_its_exact_range():
    """Two linear layers without activation: the range over the box is center +- |W2 W1| r
    exactly; CROWN holds it and is within 1e-12 of it (binary64 slack only), while IBP,
    which loses the cancellation between the layers, is wider."""
    rng = np.random.default_rng(1)
    g = mlp(rng, [3, 5, 2], activation=None)
    w1, b1, w2, b2 = (np.asarray(c) for c in g.constants)
    x = rng.normal(size=(1, 3))
    r = np.array([[0.25, 0.5, 0.125]])
    lo, hi = x - r, x + r

    def fr(a):
        return np.vectorize(Fraction, otypes=[object])(a)
    w = fr(w2).dot(fr(w1))
    center = w.dot(fr(x[0])) + fr(w2).dot(fr(b1)) + fr(b2)
    spread = np.abs(w).dot(fr(r[0]))
    exact_lo, exact_hi = center - spread, center + spread
    (clo,), (chi,) = routes.crown(g, [lo], [hi])
    (ilo,), (ihi,) = routes.ibp(g, [lo], [hi])
    for j in range(2):
        assert Fraction(clo[0, j]) <= exact_lo[j] and exact_hi[j] <= Fraction(chi[0, j])
        assert float(exact_lo[j]) - clo[0, j] < 1e-12 and chi[0, j] - float(exact_hi[j]) < 1e-12
    assert ((ihi - ilo) > (chi - clo) + 1e-6).all()


def test_crown_through_an_operator_without_an_arm_discharges_against_its_box():
    """tanh has no CROWN arm: the sweep discharges at its box; the result still holds the
    reference's values and lies inside IBP's box."""
    rng = np.random.default_rng(2)
    g = mlp(rng, [3, 6, 2], activation="tanh")
    x = rng.normal(size=(1, 3))
    lo, hi = x - 0.2, x + 0.2
    (clo,), (chi,) = routes.crown(g, [lo], [hi])
    (ilo,), (ihi,) = routes.ibp(g, [lo], [hi])
    assert_within((clo, chi), (ilo, ihi))
    ys = reference_values(rng, g, lo, hi)
    assert (ys >= clo).all() and (ys <= chi).all()


def test_crown_sweep_ends_at_gather_and_keeps_the_ibp_box():
    """The sweep ends at gather (spec): two linear layers read through gather keep exactly
    their IBP box (no sweep row survives), while the same layers read directly are
    tightened by the sweep."""
    lo = np.random.default_rng(3).normal(size=(4,)) - 0.3
    boxes = ([lo], [lo + 0.6])
    results = {}
    for through_gather in (True, False):
        g = routes.Graph(x=P.value((4,)))
        h = g.input("x")
        if through_gather:
            idx = g.constant(np.array([2, 0, 1, 3]), port=P.index((4,), (4,)))
            h = g.apply(routes.op("gather", shape=(4,), index_shape=(4,)), h, idx)
        h = g.apply(routes.op("reshape", shape=(4,), to=(1, 4)), h)
        for a, b in ((4, 4), (4, 2)):
            w = g.constant(np.random.default_rng(5 + a + b).normal(size=(b, a)))
            c = g.constant(np.zeros(b))
            h = g.apply(routes.op("linear", batch=(1,), in_features=a, out_features=b), w, c, h)
        g.output(h)
        results[through_gather] = routes.crown(g, *boxes), routes.ibp(g, *boxes)
    ((clo,), (chi,)), ((ilo,), (ihi,)) = results[True]
    assert np.array_equal(clo, ilo) and np.array_equal(chi, ihi)
    ((clo,), (chi,)), ((ilo,), (ihi,)) = results[False]
    assert ((chi - clo) < (ihi - ilo)).all()


def test_crown_handles_relu_of_relu_and_mccormick_products():
    """relu(relu(x)) needs the inner relaxation before the outer input is refined; x * y of
    two varying boxes goes through McCormick's planes: both hold the reference's values
    and lie inside IBP's boxes."""
    g = routes.Graph(x=P.value((3,)), y=P.value((3,)))
    a = g.apply(routes.op("relu", shape=(3,)), g.apply(routes.op("sub", shape=(3,)),
                                                        g.input("x"), g.input("y")))
    b = g.apply(routes.op("relu", shape=(3,)), a)
    m = g.apply(routes.op("mul", shape=(3,)), b, g.input("y"))
    g.output(g.apply(routes.op("reduce", shape=(3,), op="sum", axes=(0,)),
                     g.apply(routes.op("add", shape=(3,)), m, g.input("x"))))
    lows = [np.array([-1.0, 0.5, -2.0]), np.array([0.25, -1.0, 0.5])]
    highs = [np.array([1.0, 1.5, -1.0]), np.array([0.75, 1.0, 1.5])]
    (clo,), (chi,) = routes.crown(g, lows, highs)
    (ilo,), (ihi,) = routes.ibp(g, lows, highs)
    assert_within((clo, chi), (ilo, ihi)) and chi - clo < ihi - ilo
    rng = np.random.default_rng(4)
    for _ in range(40):
        xs = [np.where(rng.random(3) < 0.5, lo, hi) if rng.random() < 0.5 else
              lo + (hi - lo) * rng.random(3) for lo, hi in zip(lows, highs)]
        (v,) = g.run(xs, REFERENCE)
        assert float(clo) <= v <= float(chi)


CROWN_INSTANCES = [(tid, o) for tid, o in INSTANCES
                   if o.name in CROWN_ARMS and all(p.scalar for p in o.inputs)]


@pytest.mark.parametrize("tid,op", CROWN_INSTANCES, ids=[t for t, _ in CROWN_INSTANCES])
def test_crown_of_one_operator_encloses_and_is_within_ibp(tid, op):
    """Every operator with a CROWN arm, alone: once with every input varying and once with
    every input but the first a point (constant weights, where the affine arm applies to
    matmul, linear and conv): the box lies inside IBP's and holds the reference's values
    at corners and random points."""
    rng = np.random.default_rng(sum(map(ord, tid)))
    xs = [np.asarray(x, dtype=np.float64) for x in op.samples(rng, None, "ordinary")]
    for vary in (range(len(xs)), (0,)):
        r = [(np.abs(x) + 1) * 0.1 * (i in vary) for i, x in enumerate(xs)]
        lows, highs = [x - d for x, d in zip(xs, r)], [x + d for x, d in zip(xs, r)]
        clo, chi = routes.crown(op, lows, highs)
        ilo, ihi = routes.ibp(op, lows, highs)
        for box, ibox in zip(zip(clo, chi), zip(ilo, ihi)):
            assert_within(box, ibox)
        rule = op.rule(REFERENCE)
        for k in range(8):
            pt = [np.where(rng.random(lo.shape) < 0.5, lo, hi) if k % 2 else
                  lo + (hi - lo) * rng.random(lo.shape) for lo, hi in zip(lows, highs)]
            for y, lo, hi in zip(rule.forward(pt), clo, chi):
                y = np.asarray(y, dtype=object)
                assert all(float(lo[i]) <= y[i] <= float(hi[i]) for i in np.ndindex(*y.shape))


def test_crown_refuses_bad_boxes_with_one_line():
    with pytest.raises(routes.RouteError, match=r"^crown: relu: input x: low exceeds high"):
        routes.crown(routes.op("relu", shape=(1,)), [np.array([1.0])], [np.array([0.0])])
    g = routes.Graph(x=P.value((3,)))
    g.output(g.apply(routes.op("cbrt"), g.input("x")))
    with pytest.raises(routes.RouteError, match=r"^crown: graph node 0 \(cbrt\): cbrt has no"):
        routes.crown(g, [np.zeros(3)], [np.ones(3)])

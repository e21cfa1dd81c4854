"""routes.bounds: interval bound propagation, the certificate checker and the enclosure
certificates.

Oracle: numerics.reference(200), the rule in (all but) real arithmetic, evaluated at the
corners and at random points of random boxes around each operator's sample inputs: every
real value it gives must lie in the IBP box (exact comparisons of mpmath values with the
box's binary64 ends).  A NaN real value is outside the operator's domain, where no box
claims anything.  One test function covers every registered instance whose operator has an
IBP arm, so a new arm is tested when it lands.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from conftest import INSTANCES

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import ports as P
from roundoff_coverage.routes.bounds import CHECKER, CROWN_ARMS, ENCLOSURES, IBP_ARMS
from roundoff_coverage.routes.vocabulary import VOCABULARY

IBP_INSTANCES = [(tid, o) for tid, o in INSTANCES
                 if o.name in IBP_ARMS and o.no_rule_reason() is None]
CHECKER_INSTANCES = [(tid, o) for tid, o in IBP_INSTANCES if o.name in CHECKER]
REFERENCE = numerics.reference(200)


def _seed(text: str) -> int:
    return sum(ord(c) * (i + 1) for i, c in enumerate(text))


def random_boxes(rng, op, xs, exponents=(-24, 1)):
    """Boxes around the inputs ``xs``: at a scalar port each entry x gets
    [x - a (|x| + 1) 2**e, x + b (|x| + 1) 2**e], e uniform in ``exponents``, a and b
    uniform in [0, 1), a fifth of the entries points (infinite x: the point; NaN x: the
    point 0, since a box holds numbers); other ports their exact arrays."""
    lows, highs = [], []
    for x, p in zip(xs, op.inputs):
        if not p.scalar:
            lows.append(np.asarray(x))
            highs.append(np.asarray(x))
            continue
        x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=np.inf,
                          neginf=-np.inf)
        with np.errstate(over="ignore"):
            r = (np.abs(x) + 1) * 2.0 ** rng.uniform(*exponents, x.shape)
        r = np.where(np.isfinite(x) & (rng.random(x.shape) > 0.2),
                     np.minimum(r, np.finfo(np.float64).max), 0.0)
        with np.errstate(over="ignore"):
            lows.append(x - r * rng.random(x.shape))
            highs.append(x + r * rng.random(x.shape))
    return lows, highs


def points(rng, op, lows, highs, interior=2):
    """The all-low and all-high corners, two random corners and ``interior`` uniform points
    of the boxes (exact arrays at the other ports)."""
    def at(pick):
        return [pick(lo, hi) if p.scalar else lo for lo, hi, p in zip(lows, highs, op.inputs)]
    out = [at(lambda lo, hi: lo), at(lambda lo, hi: hi)]
    out += [at(lambda lo, hi: np.where(rng.random(lo.shape) < 0.5, lo, hi)) for _ in range(2)]
    out += [at(lambda lo, hi: _inside(lo, hi, rng.random(lo.shape))) for _ in range(interior)]
    return out


def _inside(lo, hi, t):
    """lo + (hi - lo) t kept in [lo, hi] (lo where an infinite end leaves no number between)."""
    with np.errstate(all="ignore"):
        v = np.clip(lo + (hi - lo) * t, lo, hi)
    return np.where(np.isfinite(v), v, lo)


def escapes(op, boxes, inputs) -> list:
    """The outputs of ``op`` at ``inputs`` under the reference that lie outside ``boxes``
    ((lows, highs) per output), one line each."""
    out = []
    ys = op.rule(REFERENCE).forward(inputs)
    for name, port, y, lo, hi in zip(op.output_names, op.outputs, ys, *boxes):
        if not port.scalar:
            if not (np.array_equal(np.asarray(y), lo) and np.array_equal(lo, hi)):
                out.append(f"output {name}: exact {np.asarray(y)!r}, box ends {lo!r} {hi!r}")
            continue
        y = np.asarray(y, dtype=object)
        for idx in np.ndindex(*y.shape):
            v = y[idx]
            if mpmath.isnan(v):
                continue                      # outside the domain: no claim
            if not float(lo[idx]) <= v <= float(hi[idx]):
                out.append(f"output {name}{list(idx)}: real value {mpmath.nstr(v, 20)} outside "
                           f"[{lo[idx]!r}, {hi[idx]!r}]")
    return out


def assert_encloses(op, rng, lows, highs, interior=2):
    boxes = routes.ibp(op, lows, highs)
    for k, pt in enumerate(points(rng, op, lows, highs, interior)):
        bad = escapes(op, boxes, pt)
        assert not bad, f"point {k}: {bad[0]} ({len(bad)} escape)"
    return boxes


# ----- the tables are the spec's Bounds column ------------------------------------------------
def test_the_arm_tables_are_the_specs_bounds_column():
    """IBP_ARMS, CHECKER, CROWN_ARMS and ENCLOSURES name exactly the operators whose Bounds
    cell lists IBP, checker, CROWN and enclosure (17 checker, 82 IBP, 13 CROWN, 7
    enclosures), and every named operator is registered."""
    def spec(word):
        return {r.operator for r in VOCABULARY if word in r.bound_propagations}
    assert set(IBP_ARMS) == spec("IBP") and len(IBP_ARMS) == 82
    assert set(CHECKER) == spec("checker") and len(CHECKER) == 17
    assert set(CROWN_ARMS) == spec("CROWN") and len(CROWN_ARMS) == 13
    assert set(ENCLOSURES) == spec("enclosure") and len(ENCLOSURES) == 7
    assert set(IBP_ARMS) <= set(routes.names())


# ----- IBP encloses the real values ---------------------------------------------------------
@pytest.mark.parametrize("tid,op", IBP_INSTANCES, ids=[t for t, _ in IBP_INSTANCES])
def test_ibp_boxes_enclose_reference_values(tid, op):
    """Random boxes (radii from 2**-24 to 2 times |x| + 1, some points) around the ordinary
    samples and around the edge samples (kinks, ties, thresholds) where the operator has
    them: the reference's real value at the corners and at random points lies in the
    output box."""
    rng = np.random.default_rng(_seed(tid))
    for kind in ("ordinary", "edges"):
        if kind in op.decl.samples:
            xs = op.samples(rng, None, kind)
            assert_encloses(op, rng, *random_boxes(rng, op, xs))


@pytest.mark.parametrize("tid,op", IBP_INSTANCES, ids=[t for t, _ in IBP_INSTANCES])
def test_ibp_of_point_boxes_is_finite_and_tight(tid, op):
    """At point boxes (the ordinary samples themselves) every output box is finite and
    within 2**-30 (1 + |lo| + |hi|) wide: the arms round outward, they do not give up."""
    rng = np.random.default_rng(_seed(tid) + 1)
    xs = [np.asarray(x, dtype=np.float64) if p.scalar else np.asarray(x)
          for x, p in zip(op.samples(rng, None, "ordinary"), op.inputs)]
    lows, highs = routes.ibp(op, xs, xs)
    for name, port, lo, hi in zip(op.output_names, op.outputs, lows, highs):
        if not port.scalar:                   # words and Booleans: the exact array
            assert np.array_equal(lo, hi), (name, lo, hi)
            continue
        assert np.isfinite(lo).all() and np.isfinite(hi).all(), (name, lo, hi)
        assert (hi - lo <= 2.0 ** -30 * (1 + np.abs(lo) + np.abs(hi))).all(), (name, lo, hi)


def test_outward_rounding_on_hand_cases():
    """0.1 + 0.2 and 0.1 * 3 are not binary64 values: the point box of the sum is the two
    neighbours around the exact rational (TwoSum rounds outward only when inexact), the
    product's is within one ulp of it on each side; exp(1) holds e (300 bits); an exact
    operation (relu, sub of exact ends) is not widened; softmax of [0, 0] holds 1/2."""
    def point(name, *values, **attrs):
        xs = [np.array([v]) for v in values]
        lo, hi = routes.ibp(routes.op(name, shape=(1,), **attrs), xs, xs)
        return lo[0][0], hi[0][0]

    lo, hi = point("add", 0.1, 0.2)
    exact = Fraction(0.1) + Fraction(0.2)
    assert Fraction(lo) < exact < Fraction(hi) and hi == np.nextafter(lo, np.inf)
    lo, hi = point("mul", 0.1, 3.0)
    exact = Fraction(0.1) * 3
    assert Fraction(lo) < exact < Fraction(hi)
    assert hi <= np.nextafter(np.nextafter(lo, np.inf), np.inf)
    lo, hi = point("exp", 1.0)
    with mpmath.workprec(300):
        assert lo < hi and mpmath.mpf(lo) < mpmath.e < mpmath.mpf(hi)
    assert hi - lo < 2.0 ** -30
    (rlo,), (rhi,) = routes.ibp(routes.op("relu", shape=(2,)), [np.array([-1.0, -3.0])],
                                [np.array([2.0, -1.0])])
    assert rlo.tolist() == [0.0, 0.0] and rhi.tolist() == [2.0, 0.0]
    (slo,), (shi,) = routes.ibp(routes.op("sub", shape=(1,)), [np.array([1.0]), np.array([0.5])],
                                [np.array([2.0]), np.array([1.0])])
    assert (slo[0], shi[0]) == (0.0, 1.5)
    (mlo,), (mhi,) = routes.ibp(routes.op("softmax", shape=(2,), axis=0), [np.zeros(2)],
                                [np.zeros(2)])
    assert (mlo <= 0.5).all() and (mhi >= 0.5).all() and (mhi - mlo < 2.0 ** -30).all()


def test_ibp_of_branching_operators_splits_the_box_at_the_branch():
    """leakyReLU on [-2, 3] with slope 0.25 is [-0.5, 3] (each piece on its side, not the
    hull of both pieces over the whole box; the product one ulp outward); sign on [-1, 2]
    is [-1, 1]; floor division of [1, 2] by [1, 1] is [1, 2] (the exact quotients decide, not 1 - ulp); remainder of
    [5.5, 6.5] by 4 is [1.5, 2.5] up to the product's outward ulp (one step), of [4, 4.5]
    by 4 within [0, 0.5] (the exact quotient 1 decides the step) and of [3, 5] by 4
    [0, 4] (across a jump)."""
    lo, hi = routes.ibp(routes.op("leakyReLU", shape=(1,)),
                        [np.array([-2.0]), np.array(0.25)], [np.array([3.0]), np.array(0.25)])
    assert (lo[0][0], hi[0][0]) == (np.nextafter(-0.5, -np.inf), 3.0)
    lo, hi = routes.ibp(routes.op("sign", shape=(1,)), [np.array([-1.0])], [np.array([2.0])])
    assert (lo[0][0], hi[0][0]) == (-1.0, 1.0)
    lo, hi = routes.ibp(routes.op("div", shape=(1,), rounding_mode="floor"),
                        [np.array([1.0]), np.array([1.0])], [np.array([2.0]), np.array([1.0])])
    assert (lo[0][0], hi[0][0]) == (1.0, 2.0)
    rem = routes.op("remainder", shape=(3,))
    four = np.full(3, 4.0)
    (lo,), (hi,) = routes.ibp(rem, [np.array([5.5, 4.0, 3.0]), four],
                              [np.array([6.5, 4.5, 5.0]), four])
    assert (lo <= [1.5, 0.0, 0.0]).all() and (hi >= [2.5, 0.5, 4.0]).all()
    assert np.allclose(lo, [1.5, 0.0, 0.0], rtol=0, atol=2.0 ** -48)
    assert np.allclose(hi, [2.5, 0.5, 4.0], rtol=0, atol=2.0 ** -48)


def test_ibp_through_a_graph_goes_node_by_node():
    """Graph y = leakyReLU(exp(x) * c, s): the constant c as a point box, the frozen input s
    as its given box; the graph's box is the composition of the operators' boxes and
    encloses the reference's values at random points."""
    g = routes.Graph(x=P.value((3,)), s=P.frozen())
    c = g.constant(np.array([0.5, -1.0, 2.0]))
    e = g.apply(routes.op("exp", shape=(3,)), g.input("x"))
    m = g.apply(routes.op("mul", shape=(3,)), e, c)
    g.output(g.apply(routes.op("leakyReLU", shape=(3,)), m, g.input("s")))
    xlo, xhi = np.array([-1.0, 0.0, 0.5]), np.array([0.5, 0.25, 1.0])
    slo, shi = np.array(0.01), np.array(0.2)
    (glo,), (ghi,) = routes.ibp(g, [xlo, slo], [xhi, shi])
    (elo,), (ehi,) = routes.ibp(routes.op("exp", shape=(3,)), [xlo], [xhi])
    cc = np.array([0.5, -1.0, 2.0])
    (mlo,), (mhi,) = routes.ibp(routes.op("mul", shape=(3,)), [elo, cc], [ehi, cc])
    (llo,), (lhi,) = routes.ibp(routes.op("leakyReLU", shape=(3,)), [mlo, slo], [mhi, shi])
    assert np.array_equal(glo, llo) and np.array_equal(ghi, lhi)
    rng = np.random.default_rng(7)
    for _ in range(10):
        x, s = rng.uniform(xlo, xhi), rng.uniform(slo, shi)
        (y,) = g.run([x, np.array(s)], REFERENCE)
        assert all(float(glo[i]) <= y[i] <= float(ghi[i]) for i in range(3))


def test_ibp_refuses_bad_boxes_with_one_line():
    """Every refusal is one RouteError line naming the operator (or graph node) and input."""
    relu, gather = routes.op("relu", shape=(2,)), routes.op("gather")
    cases = [
        (relu, [np.array([1.0, 0.0])], [np.array([0.0, 1.0])],
         "ibp: relu: input x: low exceeds high at entry (0,) (1.0 > 0.0)"),
        (relu, [np.array([np.nan, 0.0])], [np.array([1.0, 1.0])],
         "ibp: relu: input x: low is NaN at entry (0,)"),
        (relu, [np.zeros(3)], [np.zeros(3)], "ibp: relu: input x expects value[2] (got low"),
        (gather, [np.zeros(3), np.array([0, 1, 2, 0])], [np.ones(3), np.array([0, 1, 2, 1])],
         "ibp: gather: input index is a index port, whose low and high must be the same "
         "exact array (they differ at entry (3,))"),
        (routes.op("cbrt"), [np.zeros(3)], [np.ones(3)], "ibp: cbrt has no IBP arm"),
    ]
    for op, lows, highs, text in cases:
        with pytest.raises(routes.RouteError) as info:
            routes.ibp(op, lows, highs)
        assert str(info.value).startswith(text) and "\n" not in str(info.value), info.value
    g = routes.Graph(x=P.value((3,)))
    g.output(g.apply(routes.op("cbrt"), g.input("x")))
    with pytest.raises(routes.RouteError, match=r"^ibp: graph node 0 \(cbrt\): cbrt has no IBP"):
        routes.ibp(g, [np.zeros(3)], [np.ones(3)])


# ----- the checker ----------------------------------------------------------------------------
@pytest.mark.parametrize("tid,op", CHECKER_INSTANCES, ids=[t for t, _ in CHECKER_INSTANCES])
def test_checker_accepts_the_ibp_box_and_rejects_a_shrunk_one(tid, op):
    """The IBP box passes; a box lowered below its upper end at one entry fails with one
    line naming the output entry (a word output: a wrong word)."""
    rng = np.random.default_rng(_seed(tid) + 2)
    lows, highs = random_boxes(rng, op, op.samples(rng, None, "ordinary"), (-12, -2))
    enc_lo, enc_hi = routes.ibp(op, lows, highs)
    assert routes.bound_problem(op, lows, highs, enc_lo, enc_hi) is None
    routes.check_bound(op, lows, highs, enc_lo, enc_hi)
    name, lo, hi = op.output_names[0], enc_lo[0], enc_hi[0]
    if lo.size == 0:
        return
    idx = tuple(int(i) for i in np.unravel_index(rng.integers(lo.size), lo.shape))
    shrunk = hi.copy()
    if op.outputs[0].scalar:
        shrunk[idx] = np.nextafter(hi[idx], -np.inf) if hi[idx] == lo[idx] else \
            lo[idx] + (hi[idx] - lo[idx]) / 2
        want = f"check_bound: {op.name}: output {name}{list(idx)}: the claimed high "
    else:
        shrunk[idx] = shrunk[idx] ^ 1
        want = f"check_bound: {op.name}: output {name}{list(idx)}: the claim "
    problem = routes.bound_problem(op, lows, highs, enc_lo, (shrunk,) + enc_hi[1:])
    assert problem is not None and problem.startswith(want) and "\n" not in problem, problem
    with pytest.raises(routes.RouteError) as info:
        routes.check_bound(op, lows, highs, enc_lo, (shrunk,) + enc_hi[1:])
    assert str(info.value) == problem


def test_checker_names_the_entry_and_the_gap():
    """relu on [[-1, 1], [-2, 2]] claimed within [[0, 0], [1, 1.5]]: entry [1] falls short
    by 0.5 on the high side; a low above the enclosure and a NaN claim fail likewise."""
    relu, lows, highs = routes.op("relu", shape=(2,)), [np.array([-1.0, -2.0])], \
        [np.array([1.0, 2.0])]
    assert routes.bound_problem(relu, lows, highs, [np.zeros(2)], [np.array([1.0, 1.5])]) == \
        ("check_bound: relu: output y[1]: the claimed high 1.5 lies below the real values' "
         "upper enclosure 2.0 by 0.5")
    assert routes.bound_problem(relu, lows, highs, [np.array([0.25, 0.5])],
                                [np.array([1.0, 2.0])]) == \
        ("check_bound: relu: output y[0]: the claimed low 0.25 lies above the real values' "
         "lower enclosure 0.0 by 0.25 (1 more entries fail)")
    assert routes.bound_problem(relu, lows, highs, [np.array([np.nan, 0.0])],
                                [np.array([1.0, 2.0])]) == \
        "check_bound: relu: output y[0]: the claim is NaN"


def test_check_bound_refuses_operators_without_a_checker_arm():
    with pytest.raises(routes.RouteError, match=r"^check_bound: exp has no checker arm"):
        routes.check_bound(routes.op("exp"), [np.zeros(3)], [np.ones(3)], [np.ones(3)],
                           [np.full(3, 3.0)])


# ----- enclosure certificates ------------------------------------------------------------------
def test_enclosure_certificates_are_registered_for_the_specs_operators():
    have = {n for n in routes.names() for c in routes.certificates(n) if c.kind == "enclosure"}
    assert have == set(ENCLOSURES)


@pytest.mark.parametrize("name", ENCLOSURES)
def test_enclosure_certificate_holds(name):
    """The enclosure certificate's claim for every example of the operator: boxes of radii
    from 2**-40 to 4 times |x| + 1 around ordinary and magnitude samples, the reference's
    real value at the corners and at 8 random points inside the output box."""
    rng = np.random.default_rng(_seed(name) + 3)
    for attrs in routes.declaration(name).examples.values():
        op = routes.op(name, **attrs)
        if op.no_rule_reason() is not None:
            continue
        kinds = ("ordinary", "magnitudes") if any(p.differentiable for p in op.inputs) \
            else ("ordinary",)
        for kind in kinds:
            for exponents in ((-40, -20), (-20, -4), (-4, 2)):
                xs = op.samples(rng, None, kind)
                assert_encloses(op, rng, *random_boxes(rng, op, xs, exponents), interior=8)


def test_ibp_through_the_captured_test_models_encloses_their_values():
    """The captured models of the capture tests (tests/torch_models.py): boxes of radius
    2**-8 |x| + 2**-10 around every float input (arguments and parameters), index inputs
    exact; the graph's IBP boxes enclose the reference's values (200 bits) at the boxes'
    corners and at random points.  A model with an operator the spec gives no IBP arm is
    refused in one line naming it."""
    pytest.importorskip("torch")
    import torch_models
    rng = np.random.default_rng(11)
    enclosed, refused = 0, []
    for key, (model, args) in torch_models.models().items():
        g = routes.from_torch(*torch_models.in_float64(model, args))
        xs = [np.asarray(x) for x in g.example_inputs]
        flt = [p.kind in ("value", "frozen") for p in g.inputs]
        lows = [x - (2.0 ** -8 * np.abs(x) + 2.0 ** -10) if f else x for x, f in zip(xs, flt)]
        highs = [x + (2.0 ** -8 * np.abs(x) + 2.0 ** -10) if f else x for x, f in zip(xs, flt)]
        try:
            glo, ghi = routes.ibp(g, lows, highs)
        except routes.RouteError as exc:
            assert "\n" not in str(exc) and ("IBP" in str(exc) or "arm" in str(exc)), exc
            refused.append(key)
            continue
        enclosed += 1
        points = [lows, highs] + [[rng.uniform(lo, hi) if f else lo for lo, hi, f in
                                   zip(lows, highs, flt)] for _ in range(3)]
        for point in points:
            ys = g.run(point, REFERENCE)
            for y, lo, hi in zip(ys, glo, ghi):
                y = np.asarray(y, dtype=object).reshape(-1)
                assert all(float(lo.reshape(-1)[i]) <= y[i] <= float(hi.reshape(-1)[i])
                           for i in range(y.size)), key
    assert enclosed >= 4, refused

"""numerics.bounding: the per-sample enclosures hold and are tight.

Oracles are independent of the module: exact values from the rule under
numerics.reference(300) (mpmath at 300 bits) or mpmath directly, computed values from
numerics.emulated.  For every route checked, where the bound is available: the emulated value
lies in C, the exact value in E, so |emulated - exact| <= error_bound.  Deliberately wrong
implementations (an extra rounding; storage-format accumulation against a binary32 policy)
exceed the bound, and single operations and sums are bounded about as tightly as the
standard model allows.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.numerics import bounds
from roundoff_coverage.numerics.bounding import DTYPE, BoundingBackend
from roundoff_coverage.numerics.policy import Policy
from conftest import CTX, EXAMPLES

FMT = "bfloat16"
REFERENCE = numerics.reference(300)
# The reference rounds each primitive to 300 bits: an "exact" value within 2**-200 relative of
# the real one is still far inside any binary64 enclosure that is not a point.
SLACK = CTX.ldexp(1, -200)


def _registry_cases():
    """Every operator of the registry at every declared example."""
    return [pytest.param(name, attrs, id=f"{name}-{label or 'default'}-forward")
            for name, label, attrs in EXAMPLES]


def _check_route(o, bk, em, draws=2, kind="ordinary"):
    """(elements, available, failures) of the forward route over ``draws`` samples."""
    rule, emulated_rule = o.rule(bk), o.rule(em)
    total = available = 0
    failures = []
    for k in range(draws):
        xs = o.samples(np.random.default_rng(k), FMT, kind)
        bk.reset()
        ys = rule.forward(xs)
        undecided = bk.undecided
        computed = emulated_rule.forward(xs)
        exact = o.rule(REFERENCE).forward(xs)
        for y, c, e in zip(ys, computed, exact):
            y = np.asarray(y)
            if y.dtype != DTYPE:                  # Booleans, indices, words: no enclosure
                continue
            clo, chi, elo, ehi = bk.split(y)
            bound = bk.error_bound(y)
            c = np.asarray(c, dtype=np.float64).reshape(-1)
            e = np.asarray(e, dtype=object).reshape(-1)
            total += y.size
            if undecided:
                continue
            for i in np.flatnonzero(np.isfinite(bound).reshape(-1)):
                available += 1
                ex, slack = e[i], abs(e[i]) * SLACK
                lo, hi = CTX.mpf(elo.flat[i]), CTX.mpf(ehi.flat[i])
                checks = {"computed in C": clo.flat[i] <= c[i] <= chi.flat[i],
                          "exact in E": lo - slack <= ex <= hi + slack,
                          "error <= bound": abs(CTX.mpf(c[i]) - ex) <= bound.flat[i] + slack}
                bad = [key for key, ok in checks.items() if not ok]
                if bad:
                    failures.append((k, i, bad, y.flat[i], c[i], ex))
    return total, available, failures


@pytest.mark.parametrize("name,attrs", _registry_cases())
def test_forward_enclosures_hold_and_are_mostly_available(name, attrs):
    o = routes.op(name, **attrs)
    bk = numerics.bounding(FMT)
    if o.rule(bk) is None:
        pytest.skip(f"{name}: no rule under {bk.name}")
    total, available, failures = _check_route(o, bk, numerics.emulated(FMT))
    assert not failures, failures[:3]
    assert available >= 0.9 * total, f"{name}: bound available on {available} of {total}"


POLICY_OPS = [("reduce", {}), ("reduce", {"op": "prod", "axes": (0,)}), ("mean", {}),
              ("contract", {}), ("matmul", {}), ("linear", {}), ("softmax", {}),
              ("layerNorm", {}), ("crossEntropy", {})]
SETTINGS = [("nearest_even", "fp32_accumulate"), ("toward_zero", None),
            ("toward_zero", "fp32_accumulate_fma"), ("stochastic", None),
            ("nearest_even", "pairwise"), ("upward", "blocked32"),
            ("nearest_even", Policy(FMT, compute="binary32", accumulate="binary32"))]


@pytest.mark.parametrize("mode,policy", SETTINGS,
                         ids=[f"{m}-{getattr(p, 'label', p)}" for m, p in SETTINGS])
@pytest.mark.parametrize("name,attrs", POLICY_OPS,
                         ids=[f"{n}-{a.get('op', 'default')}" for n, a in POLICY_OPS])
def test_enclosures_follow_the_policy_and_mode(name, attrs, mode, policy):
    o = routes.op(name, **attrs)
    bk = numerics.bounding(FMT, mode, policy)
    em = numerics.emulated(FMT, mode, policy, seed=3)
    total, available, failures = _check_route(o, bk, em, draws=2)
    assert not failures, failures[:3]
    assert available >= 0.9 * total


def test_a_compute_format_rounds_twice():
    # Storage bfloat16 (p = 8), compute e8m8 (p = 9): rounding to 9 bits first makes ties
    # that round again, so the double rounding often differs from a single one.
    policy = Policy(FMT, compute=formats.BinaryFormat(8, 8))
    rng = np.random.default_rng(10)
    x, y = (formats.round_to(rng.uniform(1, 2, 4000), FMT) for _ in range(2))
    computed = numerics.emulated(FMT, policy=policy).multiply(x, y)
    inside = []
    for bk in (numerics.bounding(FMT, policy=policy), numerics.bounding(FMT)):
        clo, chi, _, _ = bk.split(bk.multiply(bk.asarray(x), bk.asarray(y)))
        inside.append((clo <= computed) & (computed <= chi))
    assert inside[0].all()
    assert (~inside[1]).mean() > 0.01          # a single rounding misses double roundings


# ----- deliberately wrong implementations violate the bound -----------------------------------

def _mp(v):
    return CTX.mpf(float(v))


def _violations(computed, exact, bound):
    return np.array([abs(_mp(c) - e) > _mp(b) for c, e, b in
                     zip(np.ravel(computed), np.ravel(exact), np.ravel(bound))])


def test_an_extra_rounding_to_a_coarser_format_violates_the_exp_bound():
    rng = np.random.default_rng(11)
    x = formats.round_to(rng.uniform(-6, 6, 2000), FMT)
    bk = numerics.bounding(FMT)
    bound = bk.error_bound(bk.exp(bk.asarray(x)))
    exact = [CTX.exp(_mp(v)) for v in x]
    right = numerics.emulated(FMT).exp(x)
    # bfloat16's exp rounded once more into a format with 4 fewer fraction bits (e8m3).
    wrong = formats.round_to(right, formats.BinaryFormat(8, 3))
    assert not _violations(right, exact, bound).any()
    assert _violations(wrong, exact, bound).mean() > 0.5


def test_storage_accumulation_violates_the_binary32_accumulation_bound():
    rng = np.random.default_rng(12)
    x = formats.round_to(rng.uniform(0, 1, (32, 256)), FMT)
    bk = numerics.bounding(FMT, policy="fp32_accumulate")
    bound = bk.error_bound(bk.sum(bk.asarray(x), axis=1))
    exact = [CTX.fsum(_mp(v) for v in row) for row in x]           # exact at 300 bits
    right = numerics.emulated(FMT, policy="fp32_accumulate").sum(x, axis=1)
    wrong = numerics.emulated(FMT, policy="strict").sum(x, axis=1)  # bfloat16 running sums
    assert not _violations(right, exact, bound).any()
    assert _violations(wrong, exact, bound).mean() > 0.75


def test_a_rounding_mode_other_than_the_bounded_one_violates_the_bound():
    rng = np.random.default_rng(13)
    x, y = (formats.round_to(rng.uniform(-4, 4, 2000), FMT) for _ in range(2))
    bk = numerics.bounding(FMT, "nearest_even")
    bound = bk.error_bound(bk.divide(bk.asarray(x), bk.asarray(y)))
    exact = [_mp(a) / _mp(b) for a, b in zip(x, y)]
    wrong = numerics.emulated(FMT, "upward").divide(x, y)
    assert _violations(wrong, exact, bound).mean() > 0.2


# ----- tightness --------------------------------------------------------------------------------

def _wide_values(rng, n):
    """bfloat16 values of both signs over most of the exponent range, subnormals included."""
    mag = np.exp2(rng.uniform(-140, 60, n))
    return formats.round_to(np.where(rng.random(n) < 0.5, -mag, mag), FMT)


@pytest.mark.parametrize("mode,ulps", [("nearest_even", 0.5), ("toward_zero", 1.0),
                                       ("odd", 1.0)])
@pytest.mark.parametrize("op", ["add", "multiply"])
def test_one_operation_is_bounded_by_half_an_ulp_of_its_exact_value(op, mode, ulps):
    rng = np.random.default_rng(14)
    x, y = _wide_values(rng, 4000), _wide_values(rng, 4000)
    x[:1000] = y[:1000] * rng.uniform(0.5, 2, 1000)        # cancellations in add
    x = formats.round_to(x, FMT)
    bk = numerics.bounding(FMT, mode)
    bound = bk.error_bound(getattr(bk, op)(bk.asarray(x), bk.asarray(y)))
    exact = x + y if op == "add" else x * y     # exact in binary64: 8-bit significands
    computed = getattr(numerics.emulated(FMT, mode), op)(x, y)
    limit = ulps * formats.ulp(exact, FMT) * (1 + 2.0 ** -20) + float(bounds.eta(FMT, mode))
    assert (bound <= limit).all()
    assert (bound >= np.abs(computed - exact)).all()
    assert (bound > 0).mean() > 0.5


@pytest.mark.parametrize("n", [16, 256])
def test_a_sequential_sum_is_bounded_by_measured_error_and_by_the_standard_model(n):
    rng = np.random.default_rng(15)
    x = formats.round_to(rng.uniform(-1, 2, (24, n)), FMT)
    bk = numerics.bounding(FMT)
    bound = bk.error_bound(bk.sum(bk.asarray(x), axis=1))
    computed = numerics.emulated(FMT).sum(x, axis=1)
    exact = np.array([float(sum(Fraction(v) for v in row)) for row in x])   # exact in binary64
    a_priori = bounds.sum_bound(np.abs(x).sum(axis=1), n, FMT)
    assert (bound >= np.abs(computed - exact)).all()
    assert (bound <= a_priori * (1 + 2.0 ** -20)).all()
    # per-sample bounds are far below the worst case on random data
    assert np.median(bound / a_priori) < 0.5


# ----- non-monotone primitives: the enclosure holds the range over the whole interval ---------

def _boxes(rng, n, lo, hi, width):
    a = rng.uniform(lo, hi, n)
    return a, a + rng.uniform(0, width, n)


def _grid(a, b, extra=()):
    pts = list(np.linspace(a, b, 9)) + [p for p in extra if a <= p <= b]
    return [CTX.mpf(float(p)) for p in pts]


_PI = mpmath.mpf(mpmath.pi)
_CRIT = [float(k * _PI / 2) for k in range(-20, 21)]
RANGE_CASES = {
    "sin": (lambda x: CTX.sin(x), (-12, 12, 4)), "cos": (lambda x: CTX.cos(x), (-12, 12, 4)),
    "tan": (lambda x: CTX.tan(x), (-4, 4, 1)), "cosh": (lambda x: CTX.cosh(x), (-3, 3, 3)),
    "abs": (abs, (-3, 3, 3)), "square": (lambda x: x * x, (-3, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(RANGE_CASES))
def test_unary_enclosure_holds_the_range_over_the_interval(name):
    f, (lo, hi, width) = RANGE_CASES[name]
    rng = np.random.default_rng(16)
    a, b = _boxes(rng, 150, lo, hi, width)
    bk = numerics.bounding("binary32")
    y = getattr(bk, name)(BoundingBackend.pack(a, b, a, b))
    _, _, elo, ehi = bk.split(y)
    checked = 0
    for i in range(a.size):
        if not np.isfinite(elo[i]):
            continue                                         # tan across a pole: unbounded
        for p in _grid(a[i], b[i], _CRIT + [0.0]):
            assert CTX.mpf(elo[i]) <= f(p) <= CTX.mpf(ehi[i]), (name, a[i], b[i], p)
            checked += 1
    assert checked > 500
    # away from critical points the enclosure is the image of the endpoints, not a hull
    assert np.nanmedian(ehi - elo) < 10 * width


def _c_trunc(q):
    return CTX.floor(q) if q >= 0 else CTX.ceil(q)      # C's fmod quotient (mpmath's fmod is
                                                        # Python's %, with y's sign)


BINARY_RANGE = {
    "pow": (lambda x, y: CTX.power(x, y), (0.2, 3), (-2, 2)),
    "atan2": (lambda y, x: CTX.atan2(y, x), (-2, 2), (0.1, 3)),
    "hypot": (lambda x, y: CTX.hypot(x, y), (-2, 2), (-2, 2)),
    "fmod": (lambda x, y: x - _c_trunc(x / y) * y, (-9, 9), (1, 3)),
    "remainder": (lambda x, y: x - CTX.nint(x / y) * y, (-9, 9), (-3, -1)),
    "copysign": (lambda x, y: abs(x) if y >= 0 else -abs(x), (-2, 2), (-2, 2)),
}


@pytest.mark.parametrize("name", sorted(BINARY_RANGE))
def test_binary_enclosure_holds_the_range_over_the_box(name):
    f, xr, yr = BINARY_RANGE[name]
    rng = np.random.default_rng(17)
    xa, xb = _boxes(rng, 80, xr[0], xr[1], 1.0)
    ya, yb = _boxes(rng, 80, yr[0], yr[1], 1.0)
    bk = numerics.bounding("binary32")
    y = getattr(bk, name)(BoundingBackend.pack(xa, xb, xa, xb),
                          BoundingBackend.pack(ya, yb, ya, yb))
    _, _, elo, ehi = bk.split(y)
    assert np.isfinite(elo).mean() > 0.5
    for i in np.flatnonzero(np.isfinite(elo)):
        for p in _grid(xa[i], xb[i], [0.0])[::2]:
            for q in _grid(ya[i], yb[i], [0.0])[::2]:
                assert CTX.mpf(elo[i]) <= f(p, q) <= CTX.mpf(ehi[i]), (name, p, q)


# ----- where the bound is unavailable ------------------------------------------------------------

def test_overflow_division_by_an_interval_with_zero_and_domain_errors_are_unavailable():
    bk = numerics.bounding(FMT)
    big = bk.asarray(np.array([3e38, 1.0]))
    assert np.isinf(bk.error_bound(bk.multiply(big, big)))[0]
    assert np.isfinite(bk.error_bound(bk.multiply(big, big)))[1]
    around_zero = BoundingBackend.pack([-1e-3], [1e-3], [-1e-3], [1e-3])
    assert np.isinf(bk.error_bound(bk.divide(bk.constant(1, (1,)), around_zero))).all()
    assert np.isinf(bk.error_bound(bk.log(around_zero))).all()
    assert np.isinf(bk.error_bound(bk.sqrt(around_zero))).all()
    assert np.isfinite(bk.error_bound(bk.square(around_zero))).all()


def test_a_comparison_the_enclosures_cannot_decide_marks_the_evaluation_undecided():
    bk = numerics.bounding(FMT, policy="fp32_accumulate")
    x = bk.asarray(np.array([1.0, 2.0]))
    one_third = bk.divide(bk.constant(1, (2,)), bk.constant(3, (2,)))
    assert list(bk.less(one_third, x)) == [True, True] and not bk.undecided
    # 3 * (1/3) is 1 in bfloat16 but not exactly 1: equal(., 1) is undecided.
    three = bk.multiply(one_third, bk.constant(3, (2,)))
    bk.equal(three, x)
    assert bk.undecided
    bk.reset()
    assert not bk.undecided
    bk.accumulator().undecided = True                 # shared with the accumulator
    assert bk.undecided


def test_constants_enclose_the_literal_and_round_it_like_the_emulated_backend():
    bk = numerics.bounding(FMT)
    c = bk.constant("0.1", (2,))
    clo, chi, elo, ehi = bk.split(c)
    assert clo[0] == chi[0] == numerics.emulated(FMT).constant("0.1", ())
    assert Fraction(elo[0]) < Fraction(1, 10) < Fraction(ehi[0])
    clo, chi, _, _ = bk.split(numerics.bounding(FMT, "stochastic").constant("0.1"))
    assert clo < 0.1 < chi and formats.next_up(clo, FMT) == chi


@pytest.mark.parametrize("name,attrs", _registry_cases())
def test_forward_enclosures_hold_on_edge_and_special_samples(name, attrs):
    """Large, tiny and special inputs: wherever a bound is available it holds (availability
    is not required: infinities and NaN make a bound unavailable by design)."""
    o = routes.op(name, **attrs)
    bk = numerics.bounding(FMT)
    if o.rule(bk) is None:
        pytest.skip(f"{name}: no rule under {bk.name}")
    for kind in o.decl.samples:
        if kind != "ordinary":
            _, _, failures = _check_route(o, bk, numerics.emulated(FMT), draws=1, kind=kind)
            assert not failures, (kind, failures[:3])

"""The conventions the entries state where the mathematics is undefined (STYLE rule 7), pinned
under every backend: exact rationals, the mpmath reference, an emulated format and native
numpy.  Expected values are literals from the stated convention, not from the code."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from conftest import BACKENDS, arr, f64s

NAN, INF = math.nan, math.inf

FINITE_BACKENDS = list(BACKENDS)                 # exact has no NaN or inf
IEEE_BACKENDS = ["reference", "bfloat16", "float64"]


@pytest.mark.parametrize("backend", FINITE_BACKENDS)
def test_relu_subgradient_at_zero_is_zero_finite(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("relu", shape=(4,)).rule(xp)
    x, g = arr(0.0, -1.0, 2.0, 0.5), arr(3.0, 3.0, 3.0, -1.0)
    assert np.array_equal(f64s(xp, rule.backward([x], [g]))[0], arr(0, 0, 3, -1))
    assert np.array_equal(f64s(xp, rule.jvp([x], [g]))[0], arr(0, 0, 3, -1))


@pytest.mark.parametrize("backend", IEEE_BACKENDS)
def test_relu_subgradient_at_zero_is_zero(backend):
    # Selection, not multiplication: an infinite cotangent where x <= 0 or NaN gives 0.
    xp = BACKENDS[backend]()
    rule = routes.op("relu", shape=(5,)).rule(xp)
    x, g = arr(0.0, -0.0, -1.0, NAN, 2.0), arr(1.0, INF, INF, 1.0, INF)
    assert np.array_equal(f64s(xp, rule.backward([x], [g]))[0], arr(0, 0, 0, 0, INF))
    y = f64s(xp, rule.forward([x]))[0]
    assert np.array_equal(y, arr(0, 0, 0, NAN, 2), equal_nan=True)


def _check_tie_split(backend, name):
    """max and min split the cotangent in half at a tie, and take the mean of the tangents."""
    xp = BACKENDS[backend]()
    rule = routes.op(name, shape=(4,)).rule(xp)
    x, y, g = arr(1.0, 0.0, -2.0, 3.0), arr(1.0, 0.0, -2.0, 1.0), arr(1.0, 2.0, 4.0, 8.0)
    big = name == "max"                  # the last place is no tie: x wins under max, y under min
    gx, gy = f64s(xp, rule.backward([x, y], [g]))
    assert np.array_equal(gx, arr(0.5, 1, 2, 8 if big else 0))
    assert np.array_equal(gy, arr(0.5, 1, 2, 0 if big else 8))
    # The tangent under the same convention: (tx + ty) / 2 at a tie.
    t = f64s(xp, rule.jvp([x, y], [arr(1, 0, 2, 1), arr(0, 4, 2, 1)]))[0]
    assert np.array_equal(t, arr(0.5, 2, 2, 1))


def _check_nan_propagation(backend, name):
    """max and min give NaN where either input is NaN, and its whole gradient to each side."""
    xp = BACKENDS[backend]()
    rule = routes.op(name, shape=(3,)).rule(xp)
    x, y, g = arr(NAN, 1.0, NAN), arr(1.0, NAN, NAN), arr(2.0, 4.0, 8.0)
    assert np.isnan(f64s(xp, rule.forward([x, y]))[0]).all()
    gx, gy = f64s(xp, rule.backward([x, y], [g]))
    assert np.array_equal(gx, arr(1, 2, 4)) and np.array_equal(gy, arr(1, 2, 4))


@pytest.mark.parametrize("backend", FINITE_BACKENDS)
def test_clamp_passes_the_gradient_at_the_bounds_finite(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("clamp", shape=(5,)).rule(xp)
    x, lo, hi = arr(-1.0, 2.0, -3.0, 5.0, 0.5), np.float64(-1.0), np.float64(2.0)   # rank 0
    g = arr(1.0, 2.0, 4.0, 8.0, 16.0)
    gx, glo, ghi = f64s(xp, rule.backward([x, lo, hi], [g]))
    assert np.array_equal(gx, arr(1, 2, 0, 0, 16)) and glo is None and ghi is None
    assert np.array_equal(f64s(xp, rule.forward([x, lo, hi]))[0], arr(-1, 2, -1, 2, 0.5))


@pytest.mark.parametrize("backend", IEEE_BACKENDS)
def test_clamp_passes_the_gradient_at_the_bounds(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("clamp", shape=(4,)).rule(xp)
    x, lo, hi = arr(NAN, INF, -INF, 1.0), np.float64(-INF), np.float64(1.0)
    g = arr(1.0, 2.0, 4.0, 8.0)
    assert np.array_equal(f64s(xp, rule.forward([x, lo, hi]))[0], arr(NAN, 1, -INF, 1),
                          equal_nan=True)
    # NaN x: no gradient; -inf at the infinite lower bound and 1 at the upper bound: all of it.
    assert np.array_equal(f64s(xp, rule.backward([x, lo, hi], [g]))[0], arr(0, 0, 4, 8))


def _check_fext(backend, name):
    xp = BACKENDS[backend]()
    rule = routes.op(name, shape=(5,)).rule(xp)
    x, y = arr(NAN, 1.0, NAN, 2.0, 3.0), arr(1.0, NAN, NAN, 2.0, 1.0)
    g = arr(2.0, 4.0, 8.0, 16.0, 32.0)
    big = name == "fmax"
    out = f64s(xp, rule.forward([x, y]))[0]
    assert np.array_equal(out, arr(1, 1, NAN, 2, 3 if big else 1), equal_nan=True)
    gx, gy = f64s(xp, rule.backward([x, y], [g]))
    assert np.array_equal(gx, arr(0, 4, 4, 8, 32 if big else 0))
    assert np.array_equal(gy, arr(2, 0, 4, 8, 0 if big else 32))


def _test_of(check, name, backends):
    """A test of ``check(backend, name)`` under each of ``backends``: the certificates name
    these tests as their evidence, one test per operator."""
    @pytest.mark.parametrize("backend", backends)
    def test(backend):
        check(backend, name)
    return test


test_max_splits_a_tie_in_half = _test_of(_check_tie_split, "max", FINITE_BACKENDS)
test_max_propagates_nan_and_splits_its_gradient = _test_of(_check_nan_propagation, "max",
                                                           IEEE_BACKENDS)
test_min_splits_a_tie_in_half = _test_of(_check_tie_split, "min", FINITE_BACKENDS)
test_min_propagates_nan_and_splits_its_gradient = _test_of(_check_nan_propagation, "min",
                                                           IEEE_BACKENDS)
test_fmax_ignores_nan_in_value_and_gradient = _test_of(_check_fext, "fmax", IEEE_BACKENDS)
test_fmin_ignores_nan_in_value_and_gradient = _test_of(_check_fext, "fmin", IEEE_BACKENDS)


@pytest.mark.parametrize("backend", IEEE_BACKENDS)
def test_abs_subgradient_at_zero_is_zero(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("abs", shape=(4,)).rule(xp)
    x, g = arr(0.0, -0.0, -2.0, 3.0), arr(INF, 1.0, 4.0, 8.0)
    assert np.array_equal(f64s(xp, rule.backward([x], [g]))[0], arr(0, 0, -4, 8))
    assert np.array_equal(f64s(xp, rule.jvp([x], [g]))[0], arr(0, 0, -4, 8))


@pytest.mark.parametrize("backend", FINITE_BACKENDS)
def test_sqrt_clamp_negative_gradient_is_zero_at_and_below_zero(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("sqrt", shape=(3,), mode="clampNegative").rule(xp)
    x, g = arr(0.0, -1.0, 4.0), arr(1.0, 1.0, 8.0)
    assert np.array_equal(f64s(xp, rule.forward([x]))[0], arr(0, 0, 2))
    assert np.array_equal(f64s(xp, rule.backward([x], [g]))[0], arr(0, 0, 2))


@pytest.mark.parametrize("backend", FINITE_BACKENDS)
def test_hypot_gradient_at_the_origin_is_zero(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("hypot", shape=(2,)).rule(xp)
    x, y, g = arr(0.0, 3.0), arr(0.0, 4.0), arr(5.0, 5.0)
    gx, gy = f64s(xp, rule.backward([x, y], [g]))
    assert np.array_equal(gx, arr(0, 3)) and np.array_equal(gy, arr(0, 4))


@pytest.mark.parametrize("backend", FINITE_BACKENDS)
def test_copysign_gradient(backend):
    xp = BACKENDS[backend]()
    rule = routes.op("copysign", shape=(3,)).rule(xp)
    x, y, g = arr(0.0, 2.0, -2.0), arr(-1.0, -1.0, -1.0), arr(4.0, 4.0, 4.0)
    gx, gy = f64s(xp, rule.backward([x, y], [g]))
    assert np.array_equal(gx, arr(0, -4, 4)) and np.array_equal(gy, arr(0, 0, 0))


@pytest.mark.parametrize("backend", IEEE_BACKENDS)
def test_pow_gradient_masks(backend):
    # y = 0: x^0 = 1 is constant in x, so x's gradient is 0 (not 0 * x^-1 = NaN at x = 0);
    # x = 0, y >= 0: 0^y is flat in y, so y's gradient is 0 (not 0 * log 0).
    xp = BACKENDS[backend]()
    rule = routes.op("pow", shape=(3,)).rule(xp)
    x, y, g = arr(0.0, 0.0, 2.0), arr(0.0, 2.0, 3.0), arr(1.0, 1.0, 1.0)
    assert np.array_equal(f64s(xp, rule.forward([x, y]))[0], arr(1, 0, 8))
    gx, gy = rule.backward([x, y], [g])
    assert np.array_equal(f64s(xp, [gx])[0], arr(0, 0, 12))       # 3 * 2^2
    assert np.array_equal(f64s(xp, [gy])[0][:2], arr(0, 0))


@pytest.mark.parametrize("backend", IEEE_BACKENDS)
def test_remainder_signs(backend):
    # Python's %: the result takes the divisor's sign; a zero result the divisor's zero.
    xp = BACKENDS[backend]()
    rule = routes.op("remainder", shape=(6,)).rule(xp)
    x, y = arr(5.0, -5.0, 5.0, -5.0, 6.0, -6.0), arr(3.0, 3.0, -3.0, -3.0, -3.0, 3.0)
    out = f64s(xp, rule.forward([x, y]))[0]
    assert np.array_equal(out, arr(2, 1, -1, -2, 0, 0))
    if backend != "reference":                    # mpmath has one unsigned zero
        assert np.array_equal(np.signbit(out), [False, False, True, True, True, False])
    fmod = f64s(xp, routes.op("fmod", shape=(6,)).rule(xp).forward([x, y]))[0]
    assert np.array_equal(fmod, arr(2, -2, 2, -2, 0, 0))


@pytest.mark.parametrize("fmt", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_nextafter_walks_the_format(fmt):
    # Oracle: every finite value of the format, decoded from every bit pattern and sorted.
    from roundoff_coverage import formats
    f = formats.get(fmt)
    vals = formats.decode(np.arange(1 << f.bits, dtype=np.uint64), f)
    vals = np.unique(vals[np.isfinite(vals)])                     # -0 and +0 merge
    xp = numerics.emulated(fmt)
    rule = routes.op("nextafter", shape=(vals.size - 2,)).rule(xp)
    inner = vals[1:-1]
    # Toward the extremes (inf would become NaN in a format without infinities).
    up = rule.forward([inner, np.full_like(inner, vals[-1])])[0]
    down = rule.forward([inner, np.full_like(inner, vals[0])])[0]
    zero = inner == 0
    assert np.array_equal(up[~zero], vals[2:][~zero]) and np.array_equal(down[~zero],
                                                                        vals[:-2][~zero])
    assert np.array_equal(rule.forward([inner, inner])[0], inner)
    tiny = float(f.min_subnormal)
    z = routes.op("nextafter", shape=(3,)).rule(xp).forward([arr(0.0, 0.0, -0.0),
                                                             arr(1.0, -1.0, 0.0)])[0]
    assert np.array_equal(z, arr(tiny, -tiny, 0.0)) and not np.signbit(z[2])
    assert routes.op("nextafter").rule(numerics.reference(64)) is None


@pytest.mark.parametrize("backend", FINITE_BACKENDS)
def test_guarded_forms_below_the_guard(backend):
    # At and below the guard eps the guarded input's gradient is 0 (the flat side of
    # max(d, eps)); above it the ordinary derivative.
    xp = BACKENDS[backend]()
    eps = np.asarray(0.25)
    x, g = arr(-1.0, 0.0, 0.25, 2.0), arr(1.0, 1.0, 1.0, 1.0)
    if backend != "exact":                       # log has no rational value
        log = routes.op("safeLog", shape=(4,)).rule(xp)
        assert np.array_equal(f64s(xp, log.backward([x, eps], [g]))[0], arr(0, 0, 0, 0.5))
    inv = routes.op("safeInv", shape=(4,)).rule(xp)
    assert np.array_equal(f64s(xp, inv.forward([x, eps]))[0], arr(4, 4, 4, 0.5))
    assert np.array_equal(f64s(xp, inv.backward([x, eps], [g]))[0], arr(0, 0, 0, -0.25))
    div = routes.op("safeDiv", shape=(4,)).rule(xp)
    num = arr(1.0, 1.0, 1.0, 1.0)
    assert np.array_equal(f64s(xp, div.forward([num, x, eps]))[0], arr(4, 4, 4, 0.5))
    gx, gy = f64s(xp, div.backward([num, x, eps], [g])[:2])
    assert np.array_equal(gx, arr(4, 4, 4, 0.5)) and np.array_equal(gy, arr(0, 0, 0, -0.25))

"""numerics.metrics and numerics.bounds: errors on hand-made cases with known answers,
special-value conventions, summaries against numpy, and standard-model bounds against
simulated low-precision sums (each partial sum rounded with formats.round_to) measured
exactly with Fractions."""

import json
import math
import zlib
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.numerics import bounds, metrics
from roundoff_coverage.numerics.metrics import CLASSES
from conftest import mp_context

FORMATS = ["bfloat16", "binary16", "float8_e4m3fn", "binary32"]
CTX = mp_context(200)                         # a local context, never mpmath.mp


def _code(name):
    return CLASSES.index(name)


def _ulp(x, fmt):
    """Independent ulp of a positive Fraction: 2**max(e - p + 1, qmin)."""
    f = formats.get(fmt)
    e = math.floor(math.log2(x)) if x else f.qmin
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    return Fraction(2) ** max(e - f.precision + 1, f.qmin)


# ----- ulp error on known cases ----------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_ulp_error_is_half_at_midpoints_and_quarter_between(fmt):
    f = formats.get(fmt)
    for lo in [1.0, 1.5, 2.0 ** f.emin * 1.25, -3.0]:
        lo = float(formats.round_to(np.array([lo]), f)[0])
        hi = float(formats.next_up(np.array([lo]), f)[0])
        mid, quarter = (lo + hi) / 2, lo + (hi - lo) / 4
        assert metrics.ulp_error(np.array([lo, hi]), np.array([mid, mid]), f).tolist() == \
            [-0.5, 0.5]
        assert metrics.ulp_error(np.array([lo, hi]), np.array([quarter] * 2), f).tolist() == \
            [-0.25, 0.75]


@pytest.mark.parametrize("fmt", FORMATS)
def test_ulp_error_takes_the_ulp_at_the_exact_value_across_a_binade(fmt):
    p = formats.get(fmt).precision
    k = 2
    below = 2.0 ** k - 2.0 ** (k - p - 2)      # a quarter ulp below 2**k (ulp there 2**(k-p))
    above = 2.0 ** k + 2.0 ** (k - p - 1)      # a quarter ulp above (ulp there 2**(k-p+1))
    err = metrics.ulp_error(np.array([2.0 ** k, 2.0 ** k]), np.array([below, above]), fmt)
    assert err.tolist() == [0.25, -0.25]
    # Measured at the computed value the first would read 0.125: the definition matters.


@pytest.mark.parametrize("fmt", FORMATS)
def test_ulp_error_in_the_subnormal_range_uses_the_subnormal_quantum(fmt):
    f = formats.get(fmt)
    tiny = f.min_subnormal
    computed = np.array([3 * tiny, 0.0, -tiny, f.min_normal])
    exact = np.array([3.25 * tiny, 0.5 * tiny, -1.5 * tiny, f.min_normal - 0.25 * tiny])
    assert metrics.ulp_error(computed, exact, f).tolist() == [-0.25, -0.5, 0.5, 0.25]


def test_ulp_error_matches_the_definition_on_random_values():
    rng = np.random.default_rng(1)
    for fmt in FORMATS:
        x = rng.standard_normal(2000) * 2.0 ** rng.integers(-12, 5, 2000)
        c = formats.round_to(x * (1 + rng.uniform(-0.05, 0.05, x.size)), fmt)
        c = np.clip(c, -formats.get(fmt).max_finite, formats.get(fmt).max_finite)
        expected = [float((Fraction(ci) - Fraction(xi)) / _ulp(abs(Fraction(xi)), fmt))
                    for ci, xi in zip(c, x)]
        assert metrics.ulp_error(c, x, fmt).tolist() == expected


def test_high_precision_exact_values_keep_the_fraction_of_an_ulp():
    # binary32 result 1 + 2**-23 against 1 + 2**-24 + 2**-70: 0.5 - 2**-47 ulp.  Through
    # float64 the exact value loses its 2**-70 and the error would read exactly 0.5.
    exact = CTX.mpf(1) + CTX.mpf(2) ** -24 + CTX.mpf(2) ** -70
    computed = np.array([1 + 2.0 ** -23])
    want = 0.5 - 2.0 ** -47
    ratio = Fraction(2 ** 70 + 2 ** 46 + 1, 2 ** 70)
    mpfr = gmpy2.mpfr(gmpy2.mpq(ratio.numerator, ratio.denominator), 200)
    for x in [exact, mpfr, ratio, gmpy2.mpq(ratio.numerator, ratio.denominator)]:
        assert metrics.ulp_error(computed, np.array([x], dtype=object), "binary32")[0] == want
    assert metrics.ulp_error(computed, np.array([float(exact)]), "binary32")[0] == 0.5
    # Relative and absolute errors on the same pair, correctly rounded.
    obj = np.array([exact], dtype=object)
    d = Fraction(2 ** -24) - Fraction(1, 2 ** 70)
    assert metrics.absolute_error(computed, obj, "binary32")[0] == float(d)
    assert metrics.relative_error(computed, obj, "binary32")[0] == \
        float(d / Fraction(2 ** 70 + 2 ** 46 + 1, 2 ** 70))


def test_object_and_float64_paths_agree_on_float64_exact_values():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(500) * 2.0 ** rng.integers(-140, 130, 500)
    x[:5] = [np.inf, -np.inf, np.nan, 0.0, 3.5e38]
    c = formats.round_to(x, "bfloat16", "toward_zero")
    c[5:10] = [np.inf, np.nan, 0.0, -0.0, 1.0]
    a, b = metrics.measure(c, x, "bfloat16"), metrics.measure(c, x.astype(object), "bfloat16")
    for key in ("ulp", "abs", "bits", "codes"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    # The float64 relative error rounds twice (difference, quotient): within 1 ulp.
    np.testing.assert_allclose(a.rel, b.rel, rtol=2 ** -52, atol=0)


def test_long_pairs_are_measured_in_blocks_with_the_definition_s_errors(monkeypatch):
    # Blocks of 7 elements cut through random values (the Fraction oracle of the test above)
    # and, three times over, the special cases of the IEEE convention test below.
    monkeypatch.setattr(metrics, "MEASURE_BLOCK", 7)
    rng = np.random.default_rng(5)
    x = rng.standard_normal(40) * 2.0 ** rng.integers(-12, 5, 40)
    c = np.clip(formats.round_to(x * (1 + rng.uniform(-0.05, 0.05, x.size)), "binary16"),
                -65504.0, 65504.0)
    nan, inf = np.nan, np.inf
    special_c = [nan, nan, inf, -inf, inf, inf, 65504.0, inf, 65504.0, 1.0, 65504.0]
    special_x = [nan, 1.0, inf, -inf, 65520.0, 65505.0, 65505.0, 1e9, 1e9, nan, inf]
    special_ulp = [0.0, nan, 0.0, 0.0, 0.5, 31 / 32, -1 / 32, 0.0, -1.0, nan, nan]
    special_codes = ["ok", "nan_from_finite", "ok", "ok", "overflow_to_inf",
                     "overflow_to_inf", "overflow_to_max", "overflow_to_inf",
                     "overflow_to_max", "missed_nan", "overflow_to_max"]
    computed = np.concatenate([c, np.tile(special_c, 3)])
    exact = np.concatenate([x, np.tile(special_x, 3)])
    m = metrics.measure(computed, exact, "binary16")
    want = [float((Fraction(ci) - Fraction(xi)) / _ulp(abs(Fraction(xi)), "binary16"))
            for ci, xi in zip(c, x)]
    np.testing.assert_array_equal(m.ulp, want + special_ulp * 3)
    assert m.abs[:40].tolist() == [float(Fraction(ci) - Fraction(xi)) for ci, xi in zip(c, x)]
    assert [CLASSES[k] for k in m.codes[40:]] == special_codes * 3
    assert m.rel.shape == m.bits.shape == (73,)
    assert metrics.measure(computed, exact, "binary16", absolute=False).abs is None


def test_signed_and_broadcast_arguments():
    err = metrics.ulp_error(np.array([[-1.0], [1.0]]), np.array([-1.0 - 2.0 ** -9, 1.0]),
                            "bfloat16")
    assert err.shape == (2, 2)
    assert err.tolist() == [[0.25, -2.0 * 128], [2.0 * 128 + 0.25, 0.0]]


# ----- special values ----------------------------------------------------------------------

def test_special_value_convention_in_an_ieee_format():
    f = formats.get("binary16")              # max 65504, ulp there 32, Omega = 65536
    nan, inf = np.nan, np.inf
    computed = np.array([nan, nan, inf, -inf, inf, inf, 65504.0, inf, 65504.0, 1.0, 65504.0])
    exact = np.array([nan, 1.0, inf, -inf, 65520.0, 65505.0, 65505.0, 1e9, 1e9, nan, inf])
    err = metrics.ulp_error(computed, exact, f)
    assert err[[0, 2, 3, 7]].tolist() == [0.0] * 4
    assert np.isnan(err[[1, 9, 10]]).all()
    # At the overflow threshold max + ulp/2, inf is the correctly rounded result (0.5 ulp).
    assert err[4] == 0.5
    assert err[5] == (65536 - 65505) / 32 and err[6] == -1 / 32
    assert err[8] == -1.0                    # saturating where RN overflows: a whole ulp
    codes = metrics.classify(computed, exact, f)
    assert [CLASSES[k] for k in codes] == [
        "ok", "nan_from_finite", "ok", "ok", "overflow_to_inf", "overflow_to_inf",
        "overflow_to_max", "overflow_to_inf", "overflow_to_max", "missed_nan",
        "overflow_to_max"]


def test_fn_formats_overflow_to_nan_and_saturating_formats_to_max():
    e4 = formats.get("float8_e4m3fn")         # max 448, step 32 there, Omega = 480
    err = metrics.ulp_error(np.array([np.nan, np.nan, np.nan, 448.0]),
                            np.array([470.0, 1e6, np.inf, 1e6]), e4)
    assert err[0] == 10 / 32 and err[1] == 0.0 and err[2] == 0.0 and err[3] == -1.0
    assert [CLASSES[k] for k in metrics.classify(np.array([np.nan, np.nan]),
                                                 np.array([470.0, np.inf]), e4)] == \
        ["overflow_to_nan", "nan_from_inf"]
    fp4 = formats.get("float4_e2m1fn")        # finite encoding: overflow saturates at 6
    err = metrics.ulp_error(np.array([6.0, 6.0, 6.0]), np.array([100.0, np.inf, 6.5]), fp4)
    assert err.tolist() == [0.0, 0.0, 0.0]
    assert metrics.classify(np.array([6.0]), np.array([np.inf]), fp4)[0] == \
        _code("overflow_to_max")


def test_classify_names_every_class():
    f = "binary16"
    cases = {
        "ok": (1.0, 1.0),
        "nan_from_finite": (np.nan, 1.0),
        "overflow_to_inf": (np.inf, 1e5),
        "overflow_to_max": (65504.0, 1e5),
        "underflow_to_zero": (0.0, 1e-9),
        "wrong_zero_sign": (0.0, -0.0),
        "inf_sign": (np.inf, -np.inf),
        "missed_nan": (1.0, np.nan),
        "missed_inf": (1.0, np.inf),
    }
    computed = np.array([c for c, _ in cases.values()])
    exact = np.array([x for _, x in cases.values()])
    codes = metrics.classify(computed, exact, f)
    assert [CLASSES[k] for k in codes] == list(cases)
    e4 = "float8_e4m3fn"
    assert [CLASSES[k] for k in metrics.classify(np.array([np.nan, np.nan]),
                                                 np.array([500.0, -np.inf]), e4)] == \
        ["overflow_to_nan", "nan_from_inf"]
    assert set(CLASSES) == set(cases) | {"overflow_to_nan", "nan_from_inf"}
    counts = metrics.summarize_classes(codes)
    assert list(counts) == list(CLASSES) and counts["ok"] == 1 and sum(counts.values()) == 9


def test_zero_sign_conventions():
    f = "binary16"
    computed = np.array([0.0, -0.0, 0.0, -0.0, 0.0])
    exact = np.array([-1e-9, -1e-9, 1e-9, 0.0, 0.0], dtype=np.float64)
    assert [CLASSES[k] for k in metrics.classify(computed, exact, f)] == \
        ["wrong_zero_sign", "underflow_to_zero", "underflow_to_zero", "wrong_zero_sign", "ok"]
    # Exact zeros without a sign (Fraction, mpmath) and one-zero formats never count.
    unsigned = np.array([Fraction(0), CTX.mpf(0)], dtype=object)
    assert metrics.classify(np.array([-0.0, -0.0]), unsigned, f).tolist() == [0, 0]
    assert metrics.classify(np.array([0.0]), np.array([-1e-9]), "float8_e4m3fnuz")[0] == \
        _code("underflow_to_zero")
    assert metrics.ulp_error(np.array([-0.0]), np.array([0.0]), f)[0] == 0.0


def test_relative_error_conventions():
    r = metrics.relative_error(np.array([0.0, 1.0, -1.0, 1.5, np.nan]),
                               np.array([0.0, 0.0, 0.0, 1.0, 1.0]), "binary16")
    assert r[:4].tolist() == [0.0, np.inf, -np.inf, 0.5] and np.isnan(r[4])


# ----- bits of error -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_error_bits_on_known_cases(fmt):
    f = formats.get(fmt)
    one = 1.0
    up1 = float(formats.next_up(np.array([one]), f)[0])
    up3 = float(formats.from_ordinal(formats.ordinal(np.array([one]), f) + 3, f)[0])
    t = f.min_subnormal
    computed = np.array([one, up1, up3, t, one, f.max_finite])
    exact = np.array([one, one, one, -t, one + 3 * (up1 - one) / 8, 2 * f.max_finite])
    bits = metrics.error_bits(computed, exact, f)
    # 0 when correctly rounded; log2(2) for a neighbour; log2(4) three values away; across
    # zero the ordinals of +-t are +-1; max_finite where RN overflows (to inf, or to the
    # NaN of e4m3fn) is one value short.
    assert bits.tolist() == [0.0, 1.0, 2.0, math.log2(3), 0.0, 1.0]


def test_error_bits_of_inf_against_overflow_and_of_unmeasurable_pairs():
    b = metrics.error_bits(np.array([np.inf, np.nan, np.nan]), np.array([1e9, np.nan, 1.0]),
                           "binary16")
    assert b[0] == 0.0 and b[1] == 0.0 and np.isnan(b[2])


# ----- summaries --------------------------------------------------------------------------

def test_summary_matches_numpy_and_is_json_ready():
    rng = np.random.default_rng(3)
    e = rng.standard_normal(10001) * 0.3
    e[::97] = np.nan
    s = metrics.summary(e)
    ok = e[~np.isnan(e)]
    assert s["count"] == ok.size and s["nan_count"] == np.isnan(e).sum()
    assert s["p99"] == np.percentile(np.abs(ok), 99)
    assert s["max"] == np.abs(ok).max() and s["mean"] == np.abs(ok).mean()
    assert s["max_signed"] == ok.max() and s["min_signed"] == ok.min()
    assert sum(s["histogram"]["counts"]) == ok.size
    json.dumps(s, allow_nan=False)
    assert all(type(v) in (int, float, str, dict) for v in s.values())


@pytest.mark.parametrize("block", [None, 3], ids=["one-block", "blocks-of-3"])
def test_histogram_bins_are_fixed_and_merge(block, monkeypatch):
    if block:                  # the histogram counted a block at a time
        monkeypatch.setattr(metrics, "MEASURE_BLOCK", block)
    errors = np.array([0.0, 2.0 ** -11, 2.0 ** -10, 0.5, -0.5, 0.75, 1.0, 2.0 ** 20, np.inf])
    s = metrics.summary(errors)
    assert errors[3] == 0.5 and errors[4] == -0.5            # the caller's array unchanged
    edges, counts = s["histogram"]["edges"], s["histogram"]["counts"]
    assert edges == list(metrics.HIST_EDGES) and edges[0] == 0.0 and edges[-1] == 2.0 ** 20
    assert len(counts) == len(edges)

    def bin_of(v):
        return edges.index(v)

    assert counts[0] == 2                      # 0 and 2**-11
    assert counts[bin_of(2.0 ** -10)] == 1
    assert counts[bin_of(0.5)] == 3 and counts[bin_of(1.0)] == 1
    assert counts[-1] == 2                     # 2**20 and inf
    assert s["zero_count"] == 1
    assert s["p99"] == math.inf and s["max"] == math.inf
    assert metrics.summary([1.0] * 199 + [np.inf])["p99"] == 1.0
    a, b = metrics.summary([0.1, -0.3]), metrics.summary([0.2, np.nan, 4.0])
    m = metrics.merge_summaries([a, b])
    whole = metrics.summary([0.1, -0.3, 0.2, np.nan, 4.0])
    for key in ("count", "nan_count", "zero_count", "max", "max_signed", "min_signed",
                "histogram"):
        assert m[key] == whole[key], key
    assert m["mean"] == pytest.approx(whole["mean"])
    assert metrics.summary([])["max"] is None


# ----- bounds: constants --------------------------------------------------------------------

def test_unit_roundoff_and_eta_by_mode():
    bf = formats.get("bfloat16")
    assert bounds.unit_roundoff(bf) == Fraction(1, 256)
    assert bounds.eta(bf) == Fraction(1, 2 ** 134)
    for mode in ["toward_zero", "upward", "downward", "odd", "stochastic"]:
        assert bounds.unit_roundoff(bf, mode) == Fraction(1, 128)
        assert bounds.eta(bf, mode) == Fraction(1, 2 ** 133)
    assert bounds.unit_roundoff("binary16", "nearest_away") == Fraction(1, 2048)
    with pytest.raises(ValueError, match="rounding mode"):
        bounds.unit_roundoff(bf, "sideways")


def test_gamma_is_exact_for_binary16_and_refuses_nu_at_least_one():
    u = bounds.unit_roundoff("binary16")
    assert bounds.gamma(3, u) == Fraction(3, 2045)
    assert bounds.gamma(0, u) == 0
    assert bounds.gamma(2047, u) == Fraction(2047, 1)
    with pytest.raises(ValueError, match="undefined"):
        bounds.gamma(2048, u)
    with pytest.raises(ValueError, match="undefined"):
        bounds.gamma(5000, 2.0 ** -11)
    g = bounds.gamma(3, 2.0 ** -11)             # a float u: a float rounded up
    assert Fraction(g) >= Fraction(3, 2045) > Fraction(float(np.nextafter(g, 0)))


def test_sum_depth_of_each_order():
    assert bounds.sum_depth(10, "sequential") == 9
    assert [bounds.sum_depth(n, "pairwise") for n in (1, 2, 3, 4, 5, 1024)] == [0, 1, 2, 2, 3, 10]
    assert bounds.sum_depth(10, "blocked:4") == 3 + 2
    assert bounds.sum_depth(3, "blocked:4") == 2


def test_bounds_round_up_against_exact_arithmetic():
    rng = np.random.default_rng(4)
    s = rng.uniform(0, 10, 200)
    got = bounds.sum_bound(s, 37, "binary16", "upward")
    g = bounds.gamma(36, bounds.unit_roundoff("binary16", "upward"))
    for b, v in zip(got, s):
        assert Fraction(b) >= g * Fraction(v)
    exact_path = bounds.sum_bound(s.astype(object), 37, "binary16", "upward")
    assert np.all(got >= exact_path) and np.all(got <= exact_path * (1 + 1e-14))
    assert bounds.sum_bound(np.array([0.0]), 5, "binary16")[0] == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        bounds.sum_bound(np.array([-1.0]), 5, "binary16")


# ----- bounds against simulated sums ---------------------------------------------------------

def _add(a, b, fmt, mode):
    """a + b rounded once into fmt: formats.round_to of the float64 sum when that sum is
    exact (TwoSum error 0), else formats.round_exact of the exact sum (a float64 rounding
    first would be a double rounding, wrong in directed modes)."""
    s = a + b
    bb = s - a
    if (a - (s - bb)) + (b - bb) == 0:
        return float(formats.round_to(np.array([s]), fmt, mode)[0])
    return formats.round_exact(Fraction(a) + Fraction(b), fmt, mode).to_float()


def _order_sum(values, fmt, mode, order):
    """Sum of format values in ``order``, each partial sum rounded once."""
    def add(a, b):
        return _add(a, b, fmt, mode)

    def seq(v):
        acc = v[0]
        for t in v[1:]:
            acc = add(acc, t)
        return acc

    if order == "sequential":
        return seq(values)
    if order == "pairwise":
        v = list(values)
        while len(v) > 1:
            v = [add(v[i], v[i + 1]) for i in range(0, len(v) - 1, 2)] + \
                ([v[-1]] if len(v) % 2 else [])
        return v[0]
    k = int(order.split(":")[1])
    return seq([seq(values[i:i + k]) for i in range(0, len(values), k)])


@pytest.mark.parametrize("order", ["sequential", "pairwise", "blocked:8"])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "upward"])
def test_bfloat16_sums_never_exceed_sum_bound(mode, order):
    rng = np.random.default_rng(zlib.crc32(f"{mode}-{order}".encode()))
    worst = 0.0
    for trial in range(60):
        n = int(rng.integers(2, 120))
        scale = 2.0 ** rng.integers(-30, 30, n) if trial % 2 else np.ones(n)
        x = formats.round_to(rng.standard_normal(n) * scale + (trial % 3 == 0), "bfloat16")
        got = _order_sum(list(x), "bfloat16", mode, order)
        err = abs(Fraction(got) - sum(Fraction(v) for v in x))
        b = bounds.sum_bound(np.array([sum(abs(Fraction(v)) for v in x)], dtype=object), n,
                             "bfloat16", mode, order)[0]
        assert err <= Fraction(b), (trial, n)
        worst = max(worst, float(err) / b if b else 0.0)
    assert worst > 0.01                        # the bound is exercised, not vacuous


def test_sum_bound_is_nearly_attained_on_adversarial_data():
    # 1 followed by n-1 values just below half an ulp of 1 (2**-8 in bfloat16): every
    # addition rounds back to 1, so all of them are lost.
    n = 20
    small = 255 * 2.0 ** -16                   # 0.996 * 2**-8, a bfloat16 value
    x = [1.0] + [small] * (n - 1)
    assert formats.round_to(np.array(x), "bfloat16").tolist() == x
    got = _order_sum(x, "bfloat16", "nearest_even", "sequential")
    assert got == 1.0
    err = abs(Fraction(got) - sum(Fraction(v) for v in x))
    b = bounds.sum_bound(np.array([sum(x)]), n, "bfloat16")[0]
    assert err <= Fraction(b) and float(err) / b > 0.8


def _dot(x, y, fmt, mode):
    acc = float(formats.round_to(np.array([x[0] * y[0]]), fmt, mode)[0])
    for a, b in zip(x[1:], y[1:]):
        # a * b of two narrow-format values is exact in binary64: one rounding.
        p = float(formats.round_to(np.array([a * b]), fmt, mode)[0])
        acc = _add(acc, p, fmt, mode)
    return acc


@pytest.mark.parametrize("mode", ["nearest_even", "downward"])
def test_bfloat16_dot_products_never_exceed_dot_bound(mode):
    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(1, 60))
        lo = -75 if trial % 3 == 0 else -10       # every third trial: products underflow
        x = formats.round_to(rng.standard_normal(n) * 2.0 ** rng.integers(lo, lo + 10, n),
                             "bfloat16")
        y = formats.round_to(rng.standard_normal(n) * 2.0 ** rng.integers(lo, lo + 10, n),
                             "bfloat16")
        got = _dot(list(x), list(y), "bfloat16", mode)
        exact = sum(Fraction(a) * Fraction(b) for a, b in zip(x, y))
        b = bounds.dot_bound(bounds.abs_dot_upper(x, y), n, "bfloat16", mode)
        assert abs(Fraction(got) - exact) <= Fraction(float(b)), trial


def test_dot_bound_needs_its_underflow_term():
    # 2**-67 squared is 2**-134 = eta(bfloat16): a tie between 0 and the smallest subnormal
    # that rounds to 0, an error of eta that no relative term of size gamma*2**-134 covers.
    x = np.array([2.0 ** -67])
    got = _dot(list(x), list(x), "bfloat16", "nearest_even")
    err = Fraction(2) ** -134 - Fraction(got)
    assert got == 0.0 and err == bounds.eta("bfloat16")
    assert err <= Fraction(float(bounds.dot_bound(x * x, 1, "bfloat16")[0]))
    assert err > bounds.gamma(1, bounds.unit_roundoff("bfloat16")) * Fraction(2) ** -134


def test_mixed_precision_sum_and_dot_with_binary32_accumulation():
    rng = np.random.default_rng(6)
    assert bounds.products_exact("binary16", "binary32")
    assert not bounds.products_exact("bfloat16", "binary32")
    for trial in range(30):
        n = int(rng.integers(2, 200))
        x = formats.round_to(rng.standard_normal(n), "bfloat16")
        acc = x[0]
        for v in x[1:]:                         # binary32 partial sums, one rounding each
            acc = _add(acc, v, "binary32", "nearest_even")
        got = float(formats.round_to(np.array([acc]), "bfloat16")[0])
        err = abs(Fraction(got) - sum(Fraction(v) for v in x))
        b = bounds.sum_bound(bounds.abs_sum_upper(x), n, "bfloat16", accumulate="binary32")
        assert err <= Fraction(float(b))
        # binary16 products are exact in binary32: the bound has no product term.
        h = formats.round_to(rng.standard_normal(n), "binary16")
        acc = 0.0
        for a, c in zip(h, h[::-1]):            # products exact in binary64 and binary32
            acc = _add(acc, a * c, "binary32", "nearest_even")
        got = float(formats.round_to(np.array([acc]), "binary16")[0])
        err = abs(Fraction(got) - sum(Fraction(a) * Fraction(c) for a, c in zip(h, h[::-1])))
        b = bounds.dot_bound(bounds.abs_dot_upper(h, h[::-1]), n, "binary16",
                             accumulate="binary32")
        assert err <= Fraction(float(b))
    with pytest.raises(ValueError, match="must contain"):
        bounds.sum_bound(np.array([1.0]), 3, "binary32", accumulate="bfloat16")


def test_matmul_bound_is_dot_bound_of_abs_products():
    rng = np.random.default_rng(7)
    a = formats.round_to(rng.standard_normal((3, 5)), "bfloat16")
    b = formats.round_to(rng.standard_normal((5, 4)), "bfloat16")
    got = bounds.matmul_bound(np.abs(a), np.abs(b), "bfloat16")
    for i in range(3):
        for j in range(4):
            exact_dot = sum(abs(Fraction(a[i, k]) * Fraction(b[k, j])) for k in range(5))
            want = bounds.dot_bound(np.array([exact_dot], dtype=object), 5, "bfloat16")[0]
            assert want <= got[i, j] <= want * (1 + 1e-12)


@pytest.mark.parametrize("fmt", ["bfloat16", "binary16", "float8_e4m3fn"])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "upward", "odd"])
def test_elementwise_bound_covers_one_rounding(fmt, mode):
    rng = np.random.default_rng(8)
    f = formats.get(fmt)
    x = rng.uniform(-1, 1, 4000) * 2.0 ** rng.integers(f.qmin - 2, f.emax, 4000)
    r = formats.round_to(x, f, mode)
    ok = np.isfinite(r) & (np.abs(x) <= f.max_finite)
    err = np.abs(r - x)[ok]                    # exact: both are float64 of nearby magnitude
    b = bounds.elementwise_bound(np.abs(x[ok]), f, mode)
    assert np.all(err <= b)
    ulps = np.abs(metrics.ulp_error(r[ok], x[ok], f))
    assert ulps.max() <= bounds.elementwise_ulp_bound(mode)

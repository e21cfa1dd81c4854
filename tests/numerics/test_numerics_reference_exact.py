"""numerics.reference and numerics.exact against independent oracles: MPFR (gmpy2) at higher
precision for every rounded primitive, numpy's IEEE binary64 for special values, Python's
Fractions for exact arithmetic, reductions and matmul; resolve() on hard, exact and
unresolvable cases."""

import math
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.numerics.backend import CapabilityError
from roundoff_coverage.numerics.exact import ExactDivisionByZero, ExactnessError, exact
from roundoff_coverage.numerics.reference import reference
from roundoff_coverage.numerics.resolve import resolve

PREC = 100
ORACLE = gmpy2.context(precision=400, emin=gmpy2.get_emin_min(), emax=gmpy2.get_emax_max())


def mpf_fraction(x):
    """An mpmath mpf's exact value, read through its public man_exp (an unsigned mantissa);
    a float (the reference keeps float inputs as float64 arrays) exactly."""
    if isinstance(x, float):
        return Fraction(x)
    man, exp = x.man_exp
    return (-1 if x < 0 else 1) * Fraction(int(man)) * Fraction(2) ** int(exp)


def ulps_off(got, want, prec):
    """|got - want| in ulps of a prec-bit number at want (gmpy2 mpfr want, mpf got)."""
    g = mpf_fraction(got)
    w = Fraction(*want.as_integer_ratio())
    if w == 0:
        return 0.0 if g == 0 else math.inf
    top = math.floor(math.log2(abs(float(w)))) if abs(float(w)) > 0 else -10 ** 6
    return float(abs(g - w) / Fraction(2) ** (top - prec + 1))


def rng_for(name):
    return np.random.default_rng(sum(map(ord, name)))


def mags(rng, n, lo, hi, signed=True):
    x = 10.0 ** rng.uniform(lo, hi, n)
    return x * rng.choice([-1.0, 1.0], n) if signed else x


# Each rounded primitive: the MPFR function and a generator of inputs in its domain (mixing
# tiny magnitudes, where cancellation tests expm1/log1p/sin, with ordinary ones).
UNARY_ORACLES = {
    "exp": (gmpy2.exp, lambda r, n: np.r_[r.uniform(-50, 50, n), mags(r, n, -30, 0)]),
    "exp2": (gmpy2.exp2, lambda r, n: np.r_[r.uniform(-60, 60, n), mags(r, n, -30, 0)]),
    "expm1": (gmpy2.expm1, lambda r, n: np.r_[r.uniform(-30, 30, n), mags(r, n, -40, 0)]),
    "log": (gmpy2.log, lambda r, n: mags(r, 2 * n, -30, 30, False)),
    "log2": (gmpy2.log2, lambda r, n: mags(r, 2 * n, -30, 30, False)),
    "log10": (gmpy2.log10, lambda r, n: mags(r, 2 * n, -30, 30, False)),
    "log1p": (gmpy2.log1p, lambda r, n: np.r_[r.uniform(-0.999, 20, n), mags(r, n, -40, -1)]),
    "sin": (gmpy2.sin, lambda r, n: np.r_[r.uniform(-100, 100, n), mags(r, n, -30, 0)]),
    "cos": (gmpy2.cos, lambda r, n: r.uniform(-100, 100, 2 * n)),
    "tan": (gmpy2.tan, lambda r, n: np.r_[r.uniform(-100, 100, n), mags(r, n, -30, 0)]),
    "asin": (gmpy2.asin, lambda r, n: np.r_[r.uniform(-1, 1, n), mags(r, n, -30, -1)]),
    "acos": (gmpy2.acos, lambda r, n: r.uniform(-1, 1, 2 * n)),
    "atan": (gmpy2.atan, lambda r, n: np.r_[r.uniform(-100, 100, n), mags(r, n, -30, 0)]),
    "sinh": (gmpy2.sinh, lambda r, n: np.r_[r.uniform(-50, 50, n), mags(r, n, -30, 0)]),
    "cosh": (gmpy2.cosh, lambda r, n: r.uniform(-50, 50, 2 * n)),
    "tanh": (gmpy2.tanh, lambda r, n: np.r_[r.uniform(-20, 20, n), mags(r, n, -30, 0)]),
    "asinh": (gmpy2.asinh, lambda r, n: np.r_[r.uniform(-1e3, 1e3, n), mags(r, n, -30, 0)]),
    "acosh": (gmpy2.acosh, lambda r, n: 1 + mags(r, 2 * n, -12, 3, False)),
    "atanh": (gmpy2.atanh, lambda r, n: np.r_[r.uniform(-1, 1, n), mags(r, n, -30, -1)]),
    "erf": (gmpy2.erf, lambda r, n: np.r_[r.uniform(-6, 6, n), mags(r, n, -30, 0)]),
    "cbrt": (gmpy2.cbrt, lambda r, n: mags(r, 2 * n, -30, 30)),
    "rsqrt": (gmpy2.rec_sqrt, lambda r, n: mags(r, 2 * n, -30, 30, False)),
}


@pytest.mark.parametrize("name", sorted(UNARY_ORACLES))
def test_reference_unary_within_one_ulp_of_mpfr(name):
    oracle, gen = UNARY_ORACLES[name]
    xs = gen(rng_for(name), 60)
    got = getattr(reference(PREC), name)(np.asarray(xs))
    with gmpy2.context(ORACLE):
        worst = max(ulps_off(g, oracle(gmpy2.mpfr(float(x))), PREC) for g, x in zip(got, xs))
    assert worst <= 1.0, f"{name}: {worst} ulp at {PREC} bits"


BINARY_ORACLES = {
    "pow": (lambda x, y: x ** y, lambda r, n: (mags(r, n, -5, 5, False), r.uniform(-20, 20, n))),
    "hypot": (gmpy2.hypot, lambda r, n: (mags(r, n, -20, 20), mags(r, n, -20, 20))),
    "atan2": (gmpy2.atan2, lambda r, n: (mags(r, n, -20, 20), mags(r, n, -20, 20))),
}


@pytest.mark.parametrize("name", sorted(BINARY_ORACLES))
def test_reference_binary_within_one_ulp_of_mpfr(name):
    oracle, gen = BINARY_ORACLES[name]
    xs, ys = gen(rng_for(name), 100)
    got = getattr(reference(PREC), name)(xs, ys)
    with gmpy2.context(ORACLE):
        worst = max(ulps_off(g, oracle(gmpy2.mpfr(float(x)), gmpy2.mpfr(float(y))), PREC)
                    for g, x, y in zip(got, xs, ys))
    assert worst <= 1.0, f"{name}: {worst} ulp"


@pytest.mark.parametrize("prec", [11, 24, 100])
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "sqrt", "fma"])
def test_reference_basic_ops_are_correctly_rounded(name, prec):
    rng = rng_for(name + str(prec))
    x, y, z = (mags(rng, 200, -10, 10) for _ in range(3))
    if name == "sqrt":
        x = np.abs(x)
    rb = reference(prec)
    args = {"sqrt": (x,), "fma": (x, y, z)}.get(name, (x, y))
    got = getattr(rb, name)(*args)
    ctx = gmpy2.context(precision=prec, round=gmpy2.RoundToNearest,
                        emin=gmpy2.get_emin_min(), emax=gmpy2.get_emax_max())
    ops = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b,
           "multiply": lambda a, b: a * b, "divide": lambda a, b: a / b,
           "sqrt": gmpy2.sqrt, "fma": gmpy2.fma}
    with gmpy2.context(ctx):
        for i, g in enumerate(got):
            want = ops[name](*[gmpy2.mpfr(float(a[i]), 53) for a in args])
            assert mpf_fraction(g) == Fraction(*want.as_integer_ratio()), (name, i)


def test_reference_fma_rounds_once():
    # (1 + 2**-30)(1 - 2**-30) - 1 = -2**-60 exactly; a rounded product at 53 bits gives 0.
    rb = reference(53)
    a, b = rb.asarray(1 + 2.0 ** -30), rb.asarray(1 - 2.0 ** -30)
    assert rb.to_float64(rb.fma(a, b, rb.asarray(-1.0))) == -(2.0 ** -60)
    assert rb.to_float64(rb.add(rb.multiply(a, b), rb.asarray(-1.0))) == 0.0


GRID = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 2.5, -3.5, 1e300, -1e-300, np.inf,
                 -np.inf, np.nan])
NUMPY_UNARY = {
    "negative": np.negative, "abs": np.abs, "square": np.square, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt, "reciprocal": lambda x: 1 / x,
    "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": np.vectorize(math.erf), "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "trunc": np.trunc,
}


def same_ieee_class(got, want):
    """NaN where numpy has NaN, the same infinities, finite values within 1e-13 (zeros of
    either sign equal: the reference's zero is unsigned)."""
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.all((got[ok] == want[ok]) | np.isclose(got[ok], want[ok], rtol=1e-13, atol=0))


@pytest.mark.parametrize("name", sorted(NUMPY_UNARY))
def test_reference_unary_special_values_match_ieee(name):
    with np.errstate(all="ignore"):
        want = NUMPY_UNARY[name](GRID)
    got = reference(64).to_float64(getattr(reference(64), name)(GRID))
    same_ieee_class(got, want)


PAIR = np.array([0.0, 0.5, 1.0, -1.0, 2.5, -3.0, np.inf, -np.inf, np.nan])
NUMPY_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "atan2": np.arctan2, "pow": np.power, "hypot": np.hypot, "fmod": np.fmod,
    "copysign": np.copysign, "maximum": np.maximum, "minimum": np.minimum, "fmax": np.fmax,
    "fmin": np.fmin,
    "remainder": np.vectorize(lambda x, y: float(gmpy2.remainder(x, y))),
}


@pytest.mark.parametrize("name", sorted(NUMPY_BINARY))
def test_reference_binary_special_values_match_ieee(name):
    x, y = np.meshgrid(PAIR, PAIR)
    with np.errstate(all="ignore"):
        want = NUMPY_BINARY[name](x, y)
    rb = reference(64)
    same_ieee_class(rb.to_float64(getattr(rb, name)(x, y)), want)


def test_reference_documented_conventions():
    rb = reference(80)
    f = lambda name, *a: rb.to_float64(getattr(rb, name)(*[np.asarray(v) for v in a]))
    assert np.isnan(f("sqrt", -1.0)) and np.isnan(f("log", -1.0)) and np.isnan(f("asin", 2.0))
    assert f("log", 0.0) == -np.inf and np.isnan(f("divide", 0.0, 0.0))
    assert np.isnan(f("subtract", np.inf, np.inf)) and np.isnan(f("multiply", 0.0, np.inf))
    assert f("divide", -3.0, 0.0) == -np.inf and f("reciprocal", 0.0) == np.inf
    assert f("cbrt", -27.0) == -3.0 and f("cbrt", -8e-300) == -2e-100
    assert list(f("round", np.array([0.5, 1.5, 2.5, -2.5, -3.5]))) == [0, 2, 2, -2, -4]
    assert f("fmod", -7.5, 2.0) == -1.5 and f("remainder", 7.0, 2.0) == -1.0
    assert f("remainder", 5.0, 2.0) == 1.0 and f("remainder", -5.0, 2.0) == -1.0
    assert f("copysign", 2.0, 0.0) == 2.0 and f("copysign", 2.0, -0.0) == 2.0
    assert np.isnan(f("maximum", np.nan, 1.0)) and f("fmax", np.nan, 1.0) == 1.0
    assert f("pow", -8.0, 3.0) == -512.0 and np.isnan(f("pow", -8.0, 1 / 3))
    assert f("atan2", 0.0, -1.0) == math.pi and f("hypot", np.inf, np.nan) == np.inf
    cmp = rb.less(np.array([np.nan, 1.0]), np.array([1.0, 2.0]))
    assert cmp.tolist() == [False, True]
    assert rb.not_equal(np.nan, np.nan) and not rb.equal(np.nan, np.nan)
    assert rb.isnan(np.array([np.nan, 1.0])).tolist() == [True, False]
    assert rb.isinf(np.array([-np.inf, 1.0])).tolist() == [True, False]


def test_reference_inputs_are_exact_and_constants_round_once():
    rb = reference(24)
    assert mpf_fraction(rb.asarray(0.1).item()) == Fraction(0.1)          # 53 bits kept
    assert mpf_fraction(rb.asarray(2 ** 80 + 1).item()) == 2 ** 80 + 1
    with gmpy2.context(precision=300):
        big = gmpy2.mpfr("1.5") + gmpy2.mpfr(2) ** -250
    assert mpf_fraction(rb.asarray(big).item()) == Fraction(3, 2) + Fraction(1, 2 ** 250)
    assert mpf_fraction(rb.constant("0.1").item()) == Fraction(float(np.float32(0.1)))
    assert mpf_fraction(rb.constant(0.1).item()) == Fraction(float(np.float32(0.1)))
    assert rb.constant(Fraction(1, 3), (2, 3)).shape == (2, 3)
    # Arithmetic rounds once to 24 bits: 0.1 + 0 is float32(0.1).
    assert rb.to_float64(rb.add(rb.asarray(0.1), rb.asarray(0.0))) == float(np.float32(0.1))
    import mpmath
    assert mpmath.mp.prec == 53                         # the global context is untouched


@pytest.mark.parametrize("mode", ["nearest_even", "upward", "toward_zero", "odd"])
def test_reference_cast_rounds_exactly_into_formats(mode):
    rng = np.random.default_rng(7)
    x = mags(rng, 300, -45, 45)
    rb = reference(64)
    got = rb.cast(rb.asarray(x), "bfloat16", mode)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, formats.round_to(x, "bfloat16", mode))
    values, flags = rb.cast(rb.asarray(x), "binary16", mode, with_flags=True)
    assert flags.dtype == np.uint8 and flags.shape == x.shape
    wide = rb.cast(rb.exp(rb.asarray(1.0)), "binary128")
    assert isinstance(wide.item(), rb.ctx.mpf)


def test_reference_to_float64_rounds_wide_values_to_nearest_even():
    # Values of up to 199 bits (ties at 54 bits among them) from 2**-1100 to 2**1030:
    # rounded to binary64 as MPFR rounds them (gmpy2's IEEE binary64 context, subnormals
    # and overflow included).
    rng = np.random.default_rng(11)
    rb = reference(200)
    want, values = [], []
    for k in range(3000):
        bits = int(rng.integers(1, 200))
        man = int(rng.integers(0, 2 ** 62)) << max(bits - 62, 0) | 1
        man &= (1 << bits) - 1 if bits > 1 else 1
        man |= 1
        if k % 10 == 0:                                    # a tie: 54 odd bits
            man, bits = (int(rng.integers(2 ** 52, 2 ** 53)) << 1) | 1, 54
        e = int(rng.integers(-1100, 1030)) - bits
        q = Fraction(man) * Fraction(2) ** e * (-1 if k % 3 == 0 else 1)
        values.append(rb.divide(rb.asarray(q.numerator), rb.asarray(q.denominator)).item())
        with gmpy2.context(gmpy2.ieee(64)):
            want.append(float(gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator))))
    got = rb.to_float64(np.array(values, dtype=object))
    np.testing.assert_array_equal(got, np.array(want))


def test_capability_refusals_name_the_capability():
    rb, ex = reference(64), exact()
    one = np.array([1.0])
    with pytest.raises(CapabilityError, match="NextAfter"):
        rb.nextafter(one, one)
    for name, cap in [("erf", "Erf"), ("asin", "InverseTrig"), ("atan", "InverseTrig"),
                      ("cbrt", "Cbrt"), ("nextafter", "NextAfter")]:
        args = (one, one) if name == "nextafter" else (one,)
        with pytest.raises(CapabilityError, match=cap):
            getattr(ex, name)(*args)
    assert not ex.supports("atan2") and ex.supports("fmod") and rb.supports("erf")


# ----- exact ---------------------------------------------------------------------------------
F = Fraction


def test_exact_rational_identities():
    ex = exact()
    a = ex.asarray([F(1, 3), F(-2, 7), 0.1])
    b = ex.asarray([F(1, 6), F(3, 5), F(1, 10)])
    assert ex.add(a, b).tolist() == [F(1, 2), F(11, 35), F(0.1) + F(1, 10)]
    assert ex.multiply(a, ex.reciprocal(a)).tolist() == [1, 1, 1]
    assert ex.divide(ex.subtract(a, b), b).tolist() == [1, F(-2, 7) / F(3, 5) - 1,
                                                       F(0.1) * 10 - 1]
    assert ex.fma(a, b, a).tolist() == [x * y + x for x, y in zip(a, b)]
    assert ex.sqrt(ex.asarray([F(9, 4), 0, 16])).tolist() == [F(3, 2), 0, 4]
    assert ex.rsqrt(ex.asarray(F(4, 9))).item() == F(3, 2)
    assert ex.hypot(ex.asarray(3), ex.asarray(4)).item() == 5
    assert ex.pow(ex.asarray(F(2, 3)), ex.asarray(-3)).item() == F(27, 8)
    assert ex.square(ex.asarray(F(-3, 2))).item() == F(9, 4)
    assert ex.round(ex.asarray([F(5, 2), F(7, 2), F(-5, 2), F(1, 3)])).tolist() == [2, 4, -2, 0]
    assert ex.floor(ex.asarray(F(-1, 3))).item() == -1
    assert ex.ceil(ex.asarray(F(-1, 3))).item() == 0
    assert ex.trunc(ex.asarray(F(-7, 2))).item() == -3
    assert ex.copysign(ex.asarray(0), ex.asarray(-1)).item() == 0
    assert ex.copysign(ex.asarray(2), ex.asarray(F(-1, 9))).item() == -2
    assert ex.maximum(a, b).tolist() == [max(x, y) for x, y in zip(a, b)]


def test_exact_fmod_and_remainder_agree_with_ieee_on_floats():
    rng = np.random.default_rng(3)
    x, y = mags(rng, 300, -5, 5), mags(rng, 300, -3, 3)
    ex = exact()
    fm = ex.fmod(ex.asarray(x), ex.asarray(y))
    rm = ex.remainder(ex.asarray(x), ex.asarray(y))
    # Both are exact in binary64 (Sterbenz-like: the result fits the inputs' grid).
    assert [F(math.fmod(a, b)) for a, b in zip(x, y)] == fm.tolist()
    assert [F(math.remainder(a, b)) for a, b in zip(x, y)] == rm.tolist()


@pytest.mark.parametrize("name", ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin",
                                  "cos", "tan", "sinh", "cosh", "tanh", "asinh", "acosh",
                                  "atanh"])
def test_exact_refuses_transcendental_primitives_by_name(name):
    with pytest.raises(ExactnessError, match=rf"exact: {name} has no exact rational value; "
                                             r"use numerics.reference\(prec\)"):
        getattr(exact(), name)(np.array([1.0]))


def test_exact_refuses_irrational_roots_division_by_zero_and_non_finite_inputs():
    ex = exact()
    with pytest.raises(ExactnessError, match=r"sqrt\(2\) is irrational"):
        ex.sqrt(ex.asarray(2))
    with pytest.raises(ExactnessError, match="not real"):
        ex.sqrt(ex.asarray(-4))
    with pytest.raises(ExactnessError, match="non-integer exponent"):
        ex.pow(ex.asarray(4), ex.asarray(0.5))
    with pytest.raises(ZeroDivisionError, match="division by zero") as err:
        ex.divide(ex.asarray(1), ex.asarray(0))
    assert isinstance(err.value, ValueError) and isinstance(err.value, ExactDivisionByZero)
    with pytest.raises(ValueError):
        ex.reciprocal(ex.asarray(0))
    with pytest.raises(ExactnessError, match="fmod"):
        ex.fmod(ex.asarray(1), ex.asarray(0))
    for bad in (np.nan, np.inf):
        with pytest.raises(ExactnessError, match="not a rational"):
            ex.asarray(np.array([1.0, bad]))
    assert not ex.isnan(ex.asarray([1, 2])).any() and ex.isfinite(ex.asarray([1])).all()


def test_exact_conversions():
    ex = exact()
    assert ex.asarray(np.array([0.1], dtype=np.float32)).item() == F(float(np.float32(0.1)))
    assert ex.constant("0.1").item() == F(1, 10) and ex.constant(0.1).item() == F(0.1)
    assert ex.asarray(gmpy2.mpq(1, 3)).item() == F(1, 3)
    assert ex.to_float64(ex.asarray([F(1, 3)])).tolist() == [1 / 3]
    assert ex.cast(ex.asarray(F(1, 3)), "bfloat16", "upward") == float(
        formats.round_exact(F(1, 3), "bfloat16", "upward").to_float())
    assert ex.cast(ex.asarray(F(1, 3)), "binary128").item() == \
        formats.round_exact(F(1, 3), "binary128").to_fraction()


def random_fractions(rng, shape):
    n = int(np.prod(shape))
    vals = [F(float(v)) for v in mags(rng, n, -8, 8)]
    vals = [v + F(int(k), int(d)) for v, k, d in zip(vals, rng.integers(-9, 9, n),
                                                      rng.integers(1, 50, n))]
    out = np.empty(n, dtype=object)
    out[:] = vals
    return out.reshape(shape)


@pytest.mark.parametrize("order", ["sequential", "pairwise", "blocked:4", "blocked:16"])
def test_exact_reductions_equal_python_sum_in_every_order(order):
    rng = np.random.default_rng(11)
    x = random_fractions(rng, (5, 37))
    ex = exact(order)
    assert ex.sum(x).item() == sum(x.reshape(-1))
    assert ex.sum(x, axis=1).tolist() == [sum(row) for row in x]
    assert ex.sum(x, axis=0, keepdims=True).shape == (1, 37)
    assert ex.prod(x[0]).item() == math.prod(x[0])
    assert ex.max(x, axis=1).tolist() == [max(row) for row in x]
    assert ex.min(x).item() == min(x.reshape(-1))


@pytest.mark.parametrize("order,fma", [("sequential", False), ("pairwise", False),
                                       ("blocked:3", True)])
def test_exact_matmul_equals_nested_loops(order, fma):
    rng = np.random.default_rng(5)
    a, b = random_fractions(rng, (2, 3, 7)), random_fractions(rng, (7, 4))
    got = exact(order, fma).matmul(a, b)
    want = [[[sum(a[k, i, t] * b[t, j] for t in range(7)) for j in range(4)] for i in range(3)]
            for k in range(2)]
    assert got.tolist() == want
    v = random_fractions(rng, (7,))
    assert exact(order).dot(v, v).item() == sum(t * t for t in v)


def test_reference_sum_is_exact_at_high_precision_and_close_at_low():
    rng = np.random.default_rng(2)
    x = mags(rng, 200, -15, 15)
    exact_sum = sum(F(v) for v in x)
    assert mpf_fraction(reference(400).sum(x).item()) == exact_sum
    for order in ("sequential", "pairwise", "blocked:8"):
        s = mpf_fraction(reference(64, order).sum(x).item())
        # Higham's bound: gamma_(n-1) sum|x_i| with u = 2**-64, n = 200.
        u = Fraction(2) ** -64
        bound = 199 * u / (1 - 199 * u) * sum(F(abs(v)) for v in x)
        assert abs(s - exact_sum) <= bound
    m = reference(300).matmul(np.ones((2, 3)) * 0.1, np.ones((3, 2)))
    assert mpf_fraction(m[0, 0]) == 3 * F(0.1)


# ----- resolve ---------------------------------------------------------------------------------
MPFR_MODES = {"nearest_even": gmpy2.RoundToNearest, "upward": gmpy2.RoundUp,
              "downward": gmpy2.RoundDown, "toward_zero": gmpy2.RoundToZero}


def mpfr_binary32(f, x, mode):
    """f(x) at 1000 bits, rounded by MPFR into binary32 (normal range): a float."""
    with gmpy2.context(precision=1000):
        v = f(x)
    ctx = gmpy2.context(precision=24, emin=-148, emax=128, subnormalize=True,
                        round=MPFR_MODES[mode])
    with gmpy2.context(ctx):
        return float(gmpy2.mpfr(v))


def exp_fn(xp, x):
    return xp.exp(x)


# float32 0x1.29b27p+4 = 18.606063842773438: among 10**6 random float32 inputs in [-80, 80],
# the one whose exp lies closest to a binary32 midpoint on the side opposite to where the
# midpoint itself rounds (ties to even go up here, exp(x) is below): 3.1e-6 of a half-ulp
# (MPFR, 200 bits).  At 32 bits exp(x) rounds onto the midpoint, and then up: wrong.
HARD_EXP_F32 = float.fromhex("0x1.29b27p+4")


@pytest.mark.parametrize("mode", sorted(MPFR_MODES))
def test_resolve_escalates_a_near_midpoint_exp_in_binary32(mode):
    x = np.array([HARD_EXP_F32, 1.0, -3.25], dtype=np.float32)
    res = resolve(exp_fn, [x], "binary32", mode, start_prec=32)
    assert res.resolved.all() and res.certified.all()
    want = [mpfr_binary32(gmpy2.exp, gmpy2.mpfr(float(v)), mode) for v in x]
    assert res.rounded.tolist() == want
    if mode == "nearest_even":
        assert res.prec == 64
        rb = reference(32)
        assert rb.cast(rb.exp(x[:1]), "binary32").item() != want[0]     # the trap


# Targets a hair (2**-200) beside a binary32 boundary, on the side where the boundary's own
# rounding is wrong: the midpoint 1 + 2**-24 ties down to 1 (nearest_even), the value
# 1 + 2**-23 rounds to itself (downward, upward).  x = log(target) at 400 bits puts exp(x)
# within 2**-390 of the target: about 200 bits are needed to decide.
CONSTRUCTED = [("nearest_even", 2 ** -24, 1), ("downward", 2 ** -23, -1),
               ("toward_zero", 2 ** -23, -1), ("upward", 2 ** -23, 1)]


@pytest.mark.parametrize("mode,offset,side", CONSTRUCTED)
def test_resolve_decides_constructed_cases_that_need_hundreds_of_bits(mode, offset, side):
    with gmpy2.context(precision=400):
        target = 1 + gmpy2.mpfr(offset) + side * gmpy2.mpfr(2) ** -200
        x = gmpy2.log(target)
    res = resolve(exp_fn, [np.array([x], dtype=object)], "binary32", mode)
    assert res.resolved.all() and res.certified.all() and res.prec >= 256
    assert res.rounded.tolist() == [mpfr_binary32(gmpy2.exp, x, mode)]


RESOLVE_UNARY = {
    "exp": (gmpy2.exp, -20, 20), "exp2": (gmpy2.exp2, -20, 20), "expm1": (gmpy2.expm1, -5, 5),
    "log": (gmpy2.log, 1e-3, 100), "log2": (gmpy2.log2, 1e-3, 100),
    "log10": (gmpy2.log10, 1e-3, 100), "log1p": (gmpy2.log1p, -0.9, 5),
    "sin": (gmpy2.sin, -10, 10), "cos": (gmpy2.cos, -10, 10), "tan": (gmpy2.tan, -10, 10),
    "asin": (gmpy2.asin, -1, 1), "acos": (gmpy2.acos, -1, 1), "atan": (gmpy2.atan, -10, 10),
    "sinh": (gmpy2.sinh, -5, 5), "cosh": (gmpy2.cosh, -5, 5), "tanh": (gmpy2.tanh, -5, 5),
    "asinh": (gmpy2.asinh, -5, 5), "acosh": (gmpy2.acosh, 1, 10),
    "atanh": (gmpy2.atanh, -0.99, 0.99), "erf": (gmpy2.erf, -3, 3),
    "cbrt": (gmpy2.cbrt, -10, 10), "sqrt": (gmpy2.sqrt, 0, 10),
    "rsqrt": (gmpy2.rec_sqrt, 0.01, 10),
}


@pytest.mark.parametrize("name", sorted(RESOLVE_UNARY))
def test_resolve_certifies_every_primitive_correctly_in_binary32_and_bfloat16(name):
    f, lo, hi = RESOLVE_UNARY[name]
    x = np.random.default_rng(len(name)).uniform(lo, hi, 12).astype(np.float32)
    x = np.r_[x, np.float32([0, 1, 0.5, 2, 8])]
    x = x[(x >= lo) & (x <= hi)]
    for fmt, mpfr_fmt in [("binary32", (24, -148, 128)), ("bfloat16", (8, -132, 128))]:
        for mode in ("nearest_even", "upward", "toward_zero"):
            res = resolve(lambda xp, a: getattr(xp, name)(a), [x], fmt, mode, start_prec=24)
            assert res.resolved.all() and res.certified.all()
            p, emin, emax = mpfr_fmt
            with gmpy2.context(precision=1000):
                exact_values = [f(gmpy2.mpfr(float(v))) for v in x]
            ctx = gmpy2.context(precision=p, emin=emin, emax=emax, subnormalize=True,
                                round=MPFR_MODES[mode])
            with gmpy2.context(ctx):
                want = [float(gmpy2.mpfr(v)) for v in exact_values]
            assert res.rounded.tolist() == want, (fmt, mode)


@pytest.mark.parametrize("fn,x,fmt,mode,want", [
    (lambda xp, x: xp.exp(x), 0.0, "binary32", "upward", 1.0),
    (lambda xp, x: xp.exp(x), 0.0, "binary32", "downward", 1.0),
    (lambda xp, x: xp.sqrt(x), 4.0, "binary16", "downward", 2.0),
    (lambda xp, x: xp.log2(x), 8.0, "bfloat16", "upward", 3.0),
    (lambda xp, x: xp.cbrt(x), -27.0, "binary32", "upward", -3.0),
    (lambda xp, x: xp.hypot(x, xp.constant(4, x.shape)), 3.0, "binary32", "toward_zero", 5.0),
    (lambda xp, x: xp.pow(x, xp.constant(0.5, x.shape)), 9.0, "binary32", "downward", 3.0),
    (lambda xp, x: xp.expm1(x), 0.0, "binary32", "downward", 0.0),
    (lambda xp, x: xp.cos(x), 0.0, "binary64", "upward", 1.0),
])
def test_resolve_certifies_exact_results_on_rounding_boundaries(fn, x, fmt, mode, want):
    res = resolve(fn, [np.array([x])], fmt, mode)
    assert res.resolved.all() and res.certified.all()
    assert res.rounded.tolist() == [want]


def test_resolve_reports_unresolvable_elements_instead_of_guessing():
    tiny = np.array([Fraction(1, 2 ** 3000), Fraction(0), Fraction(1, 2)], dtype=object)
    res = resolve(exp_fn, [tiny], "binary32", "upward", max_prec=256)
    # exp(2**-3000) > 1 rounds upward to 1 + 2**-23, but no enclosure below 3000 bits excludes
    # 1: unresolved, NaN.  exp(0) = 1 and exp(1/2) are certified.
    assert res.resolved.tolist() == [False, True, True]
    assert np.isnan(res.rounded[0]) and res.bits[0] is None
    assert res.rounded[1] == 1.0
    assert res.rounded[2] == mpfr_binary32(gmpy2.exp, gmpy2.mpfr(0.5), "upward")
    assert res.prec == 256
    # Under nearest the same input is decided: 1 + 2**-3000 rounds to 1 at any precision.
    near = resolve(exp_fn, [tiny[:1]], "binary32", "nearest_even", max_prec=256)
    assert near.resolved.all() and near.rounded.tolist() == [1.0]


def test_resolve_without_intervals_uses_agreement_and_says_uncertified():
    # fmod of a non-point interval is not enclosed: the fallback agrees across precisions.
    fn = lambda xp, x: xp.fmod(xp.exp(x), xp.constant(1, x.shape))
    res = resolve(fn, [np.array([1.0, 2.0])], "binary32", "nearest_even")
    assert res.resolved.all() and not res.certified.any()
    want = [math.e - 2, math.exp(2) - 7]
    assert res.rounded.tolist() == [float(np.float32(w)) for w in want]
    # NaN results (no enclosure) are stable and resolved, uncertified.
    nan = resolve(lambda xp, x: xp.sqrt(x), [np.array([-1.0])], "binary32")
    assert nan.resolved.all() and not nan.certified.any() and np.isnan(nan.rounded[0])
    # A fallback value sitting on a boundary (fmod(exp(2**-3000), 2) = 1 at every precision
    # below 3000 bits) under a directed mode cannot be told from its neighbours: unresolved.
    tiny = np.array([Fraction(1, 2 ** 3000)], dtype=object)
    fn2 = lambda xp, x: xp.fmod(xp.exp(x), xp.constant(2, x.shape))
    edge = resolve(fn2, [tiny], "binary32", "upward", max_prec=512)
    assert not edge.resolved.any() and np.isnan(edge.rounded[0])


def test_resolve_handles_reductions_and_wide_formats():
    x = np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]])
    res = resolve(lambda xp, a: xp.sum(xp.exp(a), axis=1), [x], "binary128")
    assert res.resolved.all() and res.certified.all() and res.rounded.shape == (2,)
    with gmpy2.context(precision=1000):
        exact_sums = [sum(gmpy2.exp(gmpy2.mpfr(float(v))) for v in row) for row in x]
    ctx = gmpy2.context(precision=113, emin=-16493, emax=16384, subnormalize=True)
    with gmpy2.context(ctx):
        want = [gmpy2.mpfr(s) for s in exact_sums]
    assert list(res.rounded) == want
    assert reference(64).resolve is resolve


@pytest.mark.parametrize("fmt", ["bfloat16", "binary16", "binary32", "float8_e4m3fn"])
def test_cast_through_round_to_odd_is_the_correct_rounding(fmt):
    # cast rounds wide values to odd into binary64 and then into the format (p <= 51):
    # every mode must give formats.round_exact of the exact rational value.
    from fractions import Fraction

    from roundoff_coverage import formats
    from roundoff_coverage.numerics import reference
    rng = np.random.default_rng(5)
    bk = reference(90)
    num = rng.standard_normal(3000) * np.exp2(rng.integers(-150, 140, 3000))
    x = bk.divide(bk.asarray(num), bk.asarray(rng.choice([3.0, 7.0, 1.0 + 2.0 ** -40], 3000)))
    exact = [Fraction(int(v.man_exp[0])) * Fraction(2) ** int(v.man_exp[1]) *
             (-1 if v < 0 else 1) for v in x]
    for mode in ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd"):
        got = bk.cast(x, fmt, mode)
        want = np.array([formats.round_exact(q, fmt, mode).to_float() for q in exact])
        assert np.array_equal(got, want, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(want))

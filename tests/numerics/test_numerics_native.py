"""numerics.native measures numpy itself: each primitive is checked against an oracle that
does not use numpy's arithmetic (MPFR through gmpy2, Python's math module, formats.round_to),
and the behaviours the module documents (two-rounding rsqrt and fma, float32 accumulation of
float16 sums, ml_dtypes' float32 detour) are pinned by tests that would fail if they changed."""

import math
import zlib

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.numerics.backend import BINARY, TERNARY, UNARY, CapabilityError
from roundoff_coverage.numerics.native import native

FLOATS = ("float32", "float64")
FMT = {"float16": "binary16", "float32": "binary32", "float64": "binary64",
       "bfloat16": "bfloat16"}
# MPFR contexts that round correctly into the format (gmpy2.ieee sets emin, emax, subnormalize).
CTX = {"float32": gmpy2.ieee(32), "float64": gmpy2.ieee(64),
       "bfloat16": gmpy2.context(precision=8, emin=-132, emax=128, subnormalize=True)}


def signed_logspace(rng, n, lo, hi, signs=True):
    """n values with log2 |x| uniform in [lo, hi], random signs."""
    x = np.exp2(rng.uniform(lo, hi, n))
    return x * rng.choice([-1.0, 1.0], n) if signs else x


def ulps_apart(a, b, dtype):
    """Distance in representable values of the format (consecutive values are 1 apart)."""
    fmt = FMT[dtype]
    return np.abs(formats.ordinal(a, fmt) - formats.ordinal(b, fmt))


def mpfr_map(dtype, fn, *cols):
    """The correctly rounded fn(*args) per element, as float64."""
    ctx = CTX[dtype]
    f = getattr(ctx, fn)
    return np.array([float(f(*args)) for args in zip(*(c.tolist() for c in cols))])


# ----- correctly rounded arithmetic -----------------------------------------------------------
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_float32_basic_ops_equal_float64_result_rounded_into_binary32(op):
    # float64 of float32 values: products exact, +,-,/ double rounding innocuous (2*24+2 <= 53).
    xp, rng = native("float32"), np.random.default_rng(11)
    x = xp.asarray(signed_logspace(rng, 200_000, -140, 120))
    y = xp.asarray(signed_logspace(rng, 200_000, -140, 120))
    want = formats.round_to(getattr(np, op)(x.astype(np.float64), y.astype(np.float64)),
                            "binary32")
    got = getattr(xp, op)(x, y)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.astype(np.float64), want)


@pytest.mark.parametrize("op", ["sqrt", "square", "reciprocal"])
def test_float32_unary_ops_are_correctly_rounded(op):
    xp, rng = native("float32"), np.random.default_rng(12)
    x = xp.asarray(signed_logspace(rng, 100_000, -140, 120, signs=op != "sqrt"))
    x64 = x.astype(np.float64)
    exact = {"sqrt": np.sqrt, "square": np.square, "reciprocal": np.reciprocal}[op](x64)
    np.testing.assert_array_equal(getattr(xp, op)(x).astype(np.float64),
                                  formats.round_to(exact, "binary32"))


@pytest.mark.parametrize("op,fn", [("add", "add"), ("subtract", "sub"), ("multiply", "mul"),
                                   ("divide", "div"), ("sqrt", "sqrt")])
def test_float64_basic_ops_match_mpfr(op, fn):
    xp, rng = native("float64"), np.random.default_rng(13)
    x = signed_logspace(rng, 3000, -1070, 1000, signs=op != "sqrt")
    y = signed_logspace(rng, 3000, -1070, 1000)
    args = (x,) if op == "sqrt" else (x, y)
    got = getattr(xp, op)(*(xp.asarray(a) for a in args))
    np.testing.assert_array_equal(got, mpfr_map("float64", fn, *args))


# ----- transcendental functions: a few ulps, not correctly rounded ----------------------------
def _domain(name, dtype, rng, n):
    big = 80 if dtype == "float32" else 700
    u = lambda lo, hi: rng.uniform(lo, hi, n)                      # noqa: E731
    return {
        "exp": (u(-big, big),), "exp2": (u(-1.4 * big, 1.4 * big),),
        "expm1": (signed_logspace(rng, n, -30, 6),), "cbrt": (signed_logspace(rng, n, -100, 100),),
        "log": (signed_logspace(rng, n, -100, 100, False),),
        "log2": (signed_logspace(rng, n, -100, 100, False),),
        "log10": (signed_logspace(rng, n, -100, 100, False),),
        "log1p": (np.concatenate([u(-0.99, 1), signed_logspace(rng, n, -30, 60, False)]),),
        "sin": (u(-100, 100),), "cos": (u(-100, 100),), "tan": (u(-100, 100),),
        "asin": (u(-1, 1),), "acos": (u(-1, 1),), "atanh": (u(-0.999, 0.999),),
        "atan": (signed_logspace(rng, n, -30, 30),), "asinh": (signed_logspace(rng, n, -30, 30),),
        "acosh": (1 + signed_logspace(rng, n, -20, 40, False),),
        "sinh": (u(-50, 50),), "cosh": (u(-50, 50),), "tanh": (u(-10, 10),),
        "atan2": (signed_logspace(rng, n, -20, 20), signed_logspace(rng, n, -20, 20)),
        "pow": (u(0.1, 10), u(-30, 30)),
        "hypot": (signed_logspace(rng, n, -60, 60), signed_logspace(rng, n, -60, 60)),
    }[name]


TRANSCENDENTAL = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                  "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                  "cbrt", "atan2", "pow", "hypot")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", TRANSCENDENTAL)
def test_transcendental_within_4_ulps_of_correct_rounding(name, dtype):
    xp, rng = native(dtype), np.random.default_rng(zlib.crc32(f"{name}-{dtype}".encode()))
    args = [xp.asarray(a) for a in _domain(name, dtype, rng, 400)]
    got = getattr(xp, name)(*args)
    assert got.dtype == np.dtype(dtype)
    want = mpfr_map(dtype, name, *(a.astype(np.float64) for a in args))
    assert ulps_apart(got.astype(np.float64), want, dtype).max() <= 4


# ----- exact primitives -----------------------------------------------------------------------
EXACT = {
    "negative": lambda x: -x, "abs": abs, "floor": math.floor, "ceil": math.ceil,
    "trunc": math.trunc, "round": round,                 # Python's round: ties to even
    "copysign": math.copysign, "fmod": math.fmod,
    "maximum": max, "minimum": min, "fmax": max, "fmin": min,
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_primitive_equals_python(name, dtype):
    xp, rng = native(dtype), np.random.default_rng(21)
    x = signed_logspace(rng, 3000, -20, 30)
    x[:6] = [0.5, 1.5, 2.5, -0.5, -2.5, 3.5]              # ties of round
    y = signed_logspace(rng, 3000, -20, 30)
    fn = EXACT[name]
    args = (x,) if name in UNARY else (x, y)
    args = [xp.asarray(a) for a in args]
    want = [float(fn(*vals)) for vals in zip(*(a.astype(np.float64).tolist() for a in args))]
    np.testing.assert_array_equal(getattr(xp, name)(*args).astype(np.float64), want)


def test_round_is_ties_to_even():
    xp = native("float32")
    got = xp.round(xp.asarray(np.array([0.5, 1.5, 2.5, -0.5, -1.5])))
    np.testing.assert_array_equal(got, [0.0, 2.0, 2.0, -0.0, -2.0])
    assert np.signbit(got[3])


@pytest.mark.parametrize("dtype", FLOATS)
def test_nextafter_steps_one_format_value(dtype):
    xp, rng = native(dtype), np.random.default_rng(22)
    x = xp.asarray(signed_logspace(rng, 2000, -120, 120))
    up = xp.nextafter(x, xp.constant("inf", x.shape))
    down = xp.nextafter(x, xp.constant("-inf", x.shape))
    fmt = FMT[dtype]
    np.testing.assert_array_equal(up.astype(np.float64), formats.next_up(x.astype(np.float64), fmt))
    np.testing.assert_array_equal(down.astype(np.float64),
                                  formats.next_down(x.astype(np.float64), fmt))


# ----- IEEE remainder -------------------------------------------------------------------------
def _remainder_cases(rng, n):
    x = signed_logspace(rng, n, -1070, 1020)
    y = signed_logspace(rng, n, -1070, 1020)
    # y with 30 significant bits and q < 2**20: x = (q + 1/2) y is exact, a tie.
    near = np.ldexp(rng.integers(1, 2 ** 30, n).astype(np.float64), rng.integers(-90, 60, n))
    q = np.floor(rng.uniform(0, 2 ** 20, n))
    ties = (q + 0.5) * near
    special = [(0.0, 1.0), (-0.0, 1.0), (1.0, math.inf), (-3.0, -math.inf), (5e-324, 1e-323),
               (1.5e-323, 1e-323), (1.7e308, 1.0e308), (1.7e308, -1.6e308),
               (-1.7e308, 1.7e308), (8.98846567431158e307, 1.797e308), (7.0, 2.0), (5.0, 2.0),
               (-7.0, 2.0), (2.5, 1.0), (3.5, 1.0), (-2.5, -1.0)]
    sx, sy = zip(*special)
    return (np.concatenate([x, ties, x[:n // 2] * 1e-6, sx]),
            np.concatenate([y, near, x[n // 2:n] * 1e-6 + 1e-300, sy]))


def test_ieee_remainder_equals_math_remainder_in_float64():
    xp = native("float64")
    x, y = _remainder_cases(np.random.default_rng(31), 20_000)
    got = xp.remainder(xp.asarray(x), xp.asarray(y))
    want = np.array([math.remainder(a, b) for a, b in zip(x.tolist(), y.tolist())])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))   # zeros keep x's sign


def test_ieee_remainder_exceptional_operands_give_nan():
    xp = native("float64")
    got = xp.remainder(xp.asarray([math.inf, 1.0, math.nan, 1.0]),
                       xp.asarray([1.0, 0.0, 1.0, math.nan]))
    assert np.isnan(got).all()


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                   "float4_e2m1fn", "float6_e3m2fn"])
def test_ieee_remainder_exhaustive_on_small_formats(dtype):
    # Every pair of values; y near max_finite makes 2|r| overflow (NaN in fn, saturated in
    # finite formats), which the construction never computes.
    xp = native(dtype)
    v = np.arange(1 << ml_dtypes.finfo(xp.dtype).bits, dtype=np.uint8).view(xp.dtype)
    v = v[np.isfinite(v.astype(np.float64))]
    x, y = (a.ravel() for a in np.meshgrid(v, v))
    got = xp.remainder(x, y).astype(np.float64)
    keep = y.astype(np.float64) != 0
    want = np.array([math.remainder(a, b) for a, b in
                     zip(x[keep].astype(np.float64).tolist(), y[keep].astype(np.float64).tolist())])
    np.testing.assert_array_equal(got[keep], want)


@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"])
def test_ieee_remainder_in_narrow_dtypes_equals_math_remainder(dtype):
    xp, rng = native(dtype), np.random.default_rng(32)
    fmt = formats.get(FMT[dtype])
    lo, hi = np.log2(fmt.min_subnormal), np.log2(fmt.max_finite)
    x = xp.asarray(signed_logspace(rng, 20_000, lo, hi))
    y = xp.asarray(signed_logspace(rng, 20_000, lo, hi))
    # y with 4 significant bits and q < 8: x = (q + 1/2) y has at most 8 bits, a tie.
    near = xp.asarray(np.ldexp(rng.integers(8, 16, 2_000).astype(np.float64),
                               rng.integers(-10, 6, 2_000)))
    ties = xp.asarray((np.floor(rng.uniform(0, 8, 2_000)) + 0.5) * near.astype(np.float64))
    x, y = np.concatenate([x, ties]), np.concatenate([y, near])
    got = xp.remainder(x, y).astype(np.float64)
    want = [math.remainder(a, b) for a, b in
            zip(x.astype(np.float64).tolist(), y.astype(np.float64).tolist())]
    np.testing.assert_array_equal(got, want)


# ----- numpy's stand-ins: two roundings -------------------------------------------------------
def test_fma_rounds_twice_like_numpy_code():
    xp = native("float32")
    a = xp.constant(1 + 2.0 ** -12)
    c = xp.constant(-(1 + 2.0 ** -11))
    # a*a = 1 + 2**-11 + 2**-24: a tie in binary32, rounded to 1 + 2**-11, so a*a + c = 0;
    # a fused multiply-add would give 2**-24.
    assert xp.fma(a, a, c) == 0
    assert not xp.fma_fused
    rng = np.random.default_rng(41)
    x, y, z = (xp.asarray(signed_logspace(rng, 1000, -10, 10)) for _ in range(3))
    np.testing.assert_array_equal(xp.fma(x, y, z), xp.add(xp.multiply(x, y), z))


def test_rsqrt_is_one_over_sqrt_with_two_roundings():
    xp, rng = native("float32"), np.random.default_rng(42)
    x = xp.asarray(signed_logspace(rng, 3000, -100, 100, signs=False))
    got = xp.rsqrt(x).astype(np.float64)
    np.testing.assert_array_equal(got, xp.divide(xp.ones_like(x), xp.sqrt(x)))
    correct = mpfr_map("float32", "rec_sqrt", x.astype(np.float64))
    apart = ulps_apart(got, correct, "float32")
    assert apart.max() <= 2 and apart.max() >= 1          # not correctly rounded, but close


# ----- NaN conventions and capabilities -------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_maximum_propagates_nan_and_fmax_ignores_it(dtype):
    xp = native(dtype)
    a = xp.asarray([math.nan, 1.0, math.nan])
    b = xp.asarray([2.0, math.nan, math.nan])
    assert np.isnan(xp.maximum(a, b).astype(np.float64)).all()
    assert np.isnan(xp.minimum(a, b).astype(np.float64)).all()
    np.testing.assert_array_equal(xp.fmax(a, b).astype(np.float64), [2.0, 1.0, math.nan])
    np.testing.assert_array_equal(xp.fmin(a, b).astype(np.float64), [2.0, 1.0, math.nan])
    assert np.isnan(xp.max(a).astype(np.float64))


def test_erf_is_refused_as_a_missing_capability():
    xp = native("float64")
    assert not xp.supports("erf") and "Erf" not in xp.capabilities
    assert xp.capabilities == {"Rounding", "InverseTrig", "Cbrt", "NextAfter", "Bits"}
    with pytest.raises(CapabilityError, match="erf.*Erf"):
        xp.erf(xp.constant(0.5, (3,)))


# ----- reductions: numpy's order --------------------------------------------------------------
def _numpy_pairwise(x):
    """numpy's pairwise_sum (umath loops_utils.h): blocks of <= 128 with 8 accumulators."""
    t, n = x.dtype.type, len(x)
    if n < 8:
        acc = t(0)
        for v in x:
            acc = t(acc + v)
        return acc
    if n <= 128:
        r = list(x[:8])
        i = 8
        while i < n - n % 8:
            r = [t(r[j] + x[i + j]) for j in range(8)]
            i += 8
        acc = t(t(t(r[0] + r[1]) + t(r[2] + r[3])) + t(t(r[4] + r[5]) + t(r[6] + r[7])))
        for v in x[i:]:
            acc = t(acc + v)
        return acc
    half = n // 2 - (n // 2) % 8
    return t(_numpy_pairwise(x[:half]) + _numpy_pairwise(x[half:]))


def test_float32_sum_is_numpys_pairwise_order_along_the_axis_and_sequential_across():
    xp, rng = native("float32"), np.random.default_rng(51)
    assert xp.reduction_order == "numpy" and xp.policy is None
    for n in (5, 8, 100, 129, 1000, 4099):
        x = xp.asarray(signed_logspace(rng, n, -10, 10))
        assert xp.sum(x) == _numpy_pairwise(x)
    m = xp.asarray(signed_logspace(rng, 300 * 17, -10, 10).reshape(300, 17))
    seq = m[0]
    for row in m[1:]:
        seq = xp.add(seq, row)
    np.testing.assert_array_equal(xp.sum(m, axis=0), seq)


# ml_dtypes 0.7 changed two native behaviours: float64 -> bfloat16 casts round once
# (before: through float32, twice), and its add reduction of -0s gives -0 (before: numpy's
# identity +0 came first).
ML_DTYPES_07 = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) >= (0, 7)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_sum_of_negative_zeros_is_positive_zero_where_numpy_starts_from_plus_zero(dtype):
    # IEEE: -0 + -0 = -0, and the primitive agrees; np.sum starts from its identity +0, but
    # ml_dtypes' reduction from 0.7 on does not (the IEEE sum, -0).
    xp = native(dtype)
    z = xp.constant("-0", (4,))
    assert np.signbit(xp.add(z[0], z[1]))
    assert bool(np.signbit(xp.sum(z))) == (dtype == "bfloat16" and ML_DTYPES_07)


def test_float16_sum_prod_and_dot_accumulate_in_float32_and_round_once():
    xp = native("float16")
    x = xp.asarray([2048.0] + [1.0] * 1000)
    # float32 running sum 3048 (exact), rounded once: 3048 is a binary16 value.  A float16
    # running sum would stay at 2048 (2048 + 1 is a tie, rounded to even).
    assert xp.sum(x) == 3048
    seq = x[0]
    for v in x[1:]:
        seq = xp.add(seq, v)
    assert seq == 2048
    ones = xp.ones_like(xp.asarray(np.zeros(3000)))
    assert xp.dot(ones, ones) == 3000 and xp.matmul(ones, ones) == 3000
    p = xp.asarray([1.001] * 3000)
    acc = np.float32(1)
    for v in p.astype(np.float32):
        acc = np.float32(acc * v)
    assert xp.prod(p) == acc.astype(np.float16)


def test_bfloat16_sum_is_sequential_in_bfloat16_but_matmul_accumulates_in_float32():
    xp = native("bfloat16")
    ones = xp.ones_like(xp.asarray(np.zeros(1000)))
    # 256 + 1 is a tie in bfloat16 (8-bit significand): the running sum stops at 256.
    assert xp.sum(ones).astype(np.float64) == 256
    assert xp.dot(ones, ones).astype(np.float64) == 1000
    rng = np.random.default_rng(52)
    a = xp.asarray(rng.standard_normal((6, 40)))
    b = xp.asarray(rng.standard_normal((40, 5)))
    got = xp.matmul(a, b)
    assert got.dtype == xp.dtype
    want = formats.round_to(a.astype(np.float64) @ b.astype(np.float64), "bfloat16")
    assert ulps_apart(got.astype(np.float64), want, "bfloat16").max() <= 1


# ----- bfloat16 and float8 storage types ------------------------------------------------------
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_bfloat16_basic_ops_are_correctly_rounded(op):
    # ml_dtypes computes in float32 and rounds into bfloat16: innocuous (2*8 + 2 <= 24).
    xp, rng = native("bfloat16"), np.random.default_rng(61)
    x = xp.asarray(signed_logspace(rng, 50_000, -120, 120))
    y = xp.asarray(signed_logspace(rng, 50_000, -120, 120))
    exact = getattr(np, op)(x.astype(np.float64), y.astype(np.float64))
    np.testing.assert_array_equal(getattr(xp, op)(x, y).astype(np.float64),
                                  formats.round_to(exact, "bfloat16"))


def test_bfloat16_exp_is_within_one_ulp_of_correct_rounding():
    xp, rng = native("bfloat16"), np.random.default_rng(62)
    x = xp.asarray(rng.uniform(-80, 80, 5000))
    got = xp.exp(x)
    assert got.dtype == xp.dtype
    want = mpfr_map("bfloat16", "exp", x.astype(np.float64))
    assert ulps_apart(got.astype(np.float64), want, "bfloat16").max() <= 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2fnuz"])
def test_every_primitive_but_erf_has_an_ml_dtypes_loop(dtype):
    xp = native(dtype)
    x = xp.asarray([0.5, 0.75, 1.5])
    arity = {n: 1 for n in UNARY} | {n: 2 for n in BINARY} | {n: 3 for n in TERNARY}
    for name, k in arity.items():
        if name == "erf":
            continue
        assert getattr(xp, name)(*([x] * k)).dtype == xp.dtype, name


# ----- dtypes, conversions, promotion ---------------------------------------------------------
@pytest.mark.parametrize("spec,dtype", [("float32", np.float32), ("binary16", np.float16),
                                        (np.float64, np.float64), (np.dtype("float16"), np.float16),
                                        ("bf16", ml_dtypes.bfloat16),
                                        ("e4m3fn", ml_dtypes.float8_e4m3fn)])
def test_dtype_specs_resolve(spec, dtype):
    assert native(spec).dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", [n for n in formats.CATALOG if hasattr(ml_dtypes, n)])
def test_ml_dtypes_type_agrees_with_the_catalog_format(name):
    xp, fmt = native(name), formats.CATALOG[name]
    info = ml_dtypes.finfo(xp.dtype)
    assert float(info.max) == fmt.max_finite
    assert float(info.smallest_subnormal) == fmt.min_subnormal


@pytest.mark.parametrize("spec", ["tf32", "binary128", "e5m10-sat", np.int32])
def test_formats_without_a_native_type_are_refused(spec):
    with pytest.raises(ValueError, match="native"):
        native(spec)


def test_other_dtypes_are_refused_instead_of_promoted():
    xp = native("float32")
    x = xp.constant(1, (3,))
    with pytest.raises(TypeError, match="float64"):
        xp.add(x, np.ones(3))
    with pytest.raises(TypeError, match="float64"):
        xp.multiply(x, 0.1)
    zero_d = xp.add(xp.constant(1), xp.constant(2))
    assert isinstance(zero_d, np.ndarray) and zero_d.dtype == np.float32 and zero_d == 3
    assert isinstance(xp.sum(x), np.ndarray)


def test_float16_cast_from_float64_rounds_once_correctly():
    xp, rng = native("float16"), np.random.default_rng(71)
    x = signed_logspace(rng, 100_000, -26, 17)
    np.testing.assert_array_equal(xp.asarray(x).astype(np.float64),
                                  formats.round_to(x, "binary16"))


def test_bfloat16_cast_from_float64_rounds_as_ml_dtypes_does_but_constants_round_once():
    xp = native("bfloat16")
    x = 1 + 2.0 ** -8 + 2.0 ** -30          # just above a bfloat16 tie, below a binary32 one
    # ml_dtypes before 0.7: float64 -> float32 gives 1 + 2**-8 (a tie), then to even: 1.
    # From 0.7: one rounding, up (the correct result).
    expected = 1 + 2.0 ** -7 if ML_DTYPES_07 else 1.0
    assert xp.asarray(np.array([x])).astype(np.float64)[0] == expected
    assert float(formats.round_to(np.array([x]), "bfloat16")[0]) == 1 + 2.0 ** -7
    assert xp.constant(x).astype(np.float64) == 1 + 2.0 ** -7


def test_constants_and_exact_inputs_round_once_into_the_format():
    from fractions import Fraction
    xp = native("float32")
    assert xp.constant("0.1") == np.float32(formats.round_exact("0.1", "binary32").to_float())
    assert xp.constant(Fraction(1, 3), (2,)).shape == (2,)
    big = 2 ** 80 + 2 ** 56 + 1                  # above the binary32 tie only by the final 1
    assert xp.asarray([big]).astype(np.float64)[0] == 2.0 ** 80 + 2.0 ** 57


def test_cast_rounds_once_into_another_native_dtype():
    xp, rng = native("float32"), np.random.default_rng(72)
    x = xp.asarray(signed_logspace(rng, 50_000, -26, 17))
    got = xp.cast(x, "binary16")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.astype(np.float64),
                                  formats.round_to(x.astype(np.float64), "binary16"))
    with pytest.raises(ValueError, match="nearest even"):
        xp.cast(x, "binary16", mode="toward_zero")

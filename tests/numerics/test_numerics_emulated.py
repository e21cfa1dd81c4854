"""The emulated backend against MPFR: + - * / sqrt fma in value and flags, all five IEEE
modes, the common formats, on random and hard operands; every transcendental primitive in
binary16 exhaustively against the correctly rounded value.  Where the backend itself computes
through MPFR (binary128, binary256; binary64's fma and directed modes), against exact
rationals rounded by formats.round_exact and against mpmath instead."""

import math
import random
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from mpfr_oracle import FormatOracle
from conftest import mp_context

INEXACT, UNDERFLOW, OVERFLOW, DIVZERO, INVALID = 1, 2, 4, 8, 16
FORMATS = ["binary16", "binary32", "binary64", "bfloat16", "float8_e5m2", "float8_e4m3fn",
           "float8_e4m3fnuz", "float8_e5m2fnuz"]
EXACT = gmpy2.context(precision=3000, round=gmpy2.RoundToZero, emin=gmpy2.get_emin_min(),
                      emax=gmpy2.get_emax_max())
EXACT_DOWN = gmpy2.context(EXACT, round=gmpy2.RoundDown)
OPS = {"add": ("add", 2), "subtract": ("sub", 2), "multiply": ("mul", 2), "divide": ("div", 2),
       "sqrt": ("sqrt", 1), "fma": ("fma", 3)}


def oracle(op, args, fmt_oracle, mode):
    """MPFR at 3000 bits, rounded to odd, then rounded into the format by the test oracle;
    invalid and divide-by-zero from MPFR's own flags."""
    method, _ = OPS[op]
    EXACT.clear_flags()
    xs = [gmpy2.mpfr(float(a), 53) for a in args]
    r = getattr(EXACT, method)(*xs)
    extra = 0
    if gmpy2.is_nan(r) and not any(gmpy2.is_nan(x) for x in xs):
        extra |= INVALID
    if EXACT.divzero:
        extra |= DIVZERO
    if gmpy2.is_zero(r) and mode == "downward" and op in ("add", "subtract", "fma"):
        r = getattr(EXACT_DOWN, method)(*xs)        # IEEE 6.3: exact zero sums under RD
    elif EXACT.inexact and not gmpy2.is_zero(r):
        m, _ = r.as_mantissa_exp()
        if m % 2 == 0:
            r = EXACT.next_above(r) if r > 0 else EXACT.next_below(r)
    value, flags = fmt_oracle.round(r, mode)
    if extra & INVALID and fmt_oracle.encoding == "finite":
        value = 0.0
    return value, flags | extra


def operands(fmt, n, seed):
    """Random format values of every magnitude plus the hard cases."""
    rng = np.random.default_rng(seed)
    lo, hi = math.log2(fmt.min_subnormal), math.log2(fmt.max_finite)
    with np.errstate(over="ignore"):          # binary64: 2**1024 is inf, rounded as such
        x = formats.round_to(np.exp2(rng.uniform(lo, hi + 1, n)) * rng.choice([-1, 1], n), fmt)
        y = formats.round_to(np.exp2(rng.uniform(lo, hi + 1, n)) * rng.choice([-1, 1], n), fmt)
    near = formats.round_to(x * (1 + rng.integers(-4, 5, n) * fmt.unit_roundoff), fmt)
    top, tiny, mn = fmt.max_finite, fmt.min_subnormal, fmt.min_normal
    half_ulp = float(formats.ulp(np.array([1.0]), fmt)[0]) / 2
    special = [
        (1.0, half_ulp), (1.0, 3 * half_ulp), (1.0, -half_ulp / 2), (1.5, half_ulp),   # ties
        (top, top), (top, float(formats.ulp(np.array([top]), fmt)[0]) / 2), (-top, -top),
        (top, 1.0), (top, 2.0), (mn, -tiny), (mn, mn), (tiny, tiny), (tiny, 0.5),
        (mn, 0.5), (mn * 1.5, 0.5), (3 * tiny, 0.5), (1.0, 1.0), (1.0, -1.0), (0.0, 0.0),
        (-0.0, -0.0), (0.0, -0.0), (-0.0, 0.0), (np.inf, 1.0), (np.inf, -np.inf),
        (np.inf, np.inf), (np.nan, 1.0), (1.0, np.nan), (0.0, np.inf), (-1.0, 0.0),
        (1.0, 0.0), (-4.0, 1.0), (top, mn), (tiny, top), (3.0, 7.0),
    ]
    sx, sy = np.array(special).T
    sx = formats.round_to(sx, fmt)
    sy = formats.round_to(sy, fmt)
    xs = np.concatenate([x, x, sx, -sx])
    ys = np.concatenate([y, near, sy, sy])
    zs = np.concatenate([near, y, sy, -sx])
    return xs, ys, zs


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("mode", formats.IEEE_MODES)
def test_arithmetic_matches_mpfr_in_value_and_flags(name, mode):
    fmt = formats.get(name)
    bk = numerics.emulated(fmt, mode)
    orc = FormatOracle(fmt)
    xs, ys, zs = operands(fmt, 300, seed=len(name) * 31 + len(mode))
    bad = []
    for op, (_, arity) in OPS.items():
        args = (xs, ys, zs)[:arity]
        got, flags = getattr(bk, op)(*args, with_flags=True)
        plain = getattr(bk, op)(*args)          # the compiled values-only path
        assert np.array_equal(plain.view(np.int64), got.view(np.int64)), op
        for i in range(xs.size):
            want, wflags = oracle(op, [a[i] for a in args], orc, mode)
            g = float(got[i])
            same = (math.isnan(g) and math.isnan(want)) or (
                g == want and math.copysign(1, g) == math.copysign(1, want))
            if not same or int(flags[i]) != wflags:
                bad.append((op, [float(a[i]) for a in args], g, int(flags[i]), want, wflags))
    assert bad[:5] == []


UNARY_TRANSCENDENTAL = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos",
                        "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                        "acosh", "atanh", "erf", "cbrt", "rsqrt", "sqrt"]
MPFR_NAME = {"rsqrt": "rec_sqrt"}


def _binary16_context(mode):
    rnd = {"nearest_even": gmpy2.RoundToNearest, "toward_zero": gmpy2.RoundToZero,
           "upward": gmpy2.RoundUp, "downward": gmpy2.RoundDown}[mode]
    # binary16: p = 11; MPFR exponents of 2**-24 and of the top binade: -23 and 16.
    return gmpy2.context(precision=11, emin=-23, emax=16, subnormalize=True, round=rnd)


@pytest.mark.parametrize("mode", ["nearest_even", "upward", "toward_zero"])
def test_every_transcendental_exhaustively_in_binary16(mode):
    fmt = formats.get("binary16")
    x = formats.decode(np.arange(1 << 16, dtype=np.uint64), fmt)
    bk = numerics.emulated(fmt, mode)
    ctx = _binary16_context(mode)
    xs = [gmpy2.mpfr(v, 53) for v in x.tolist()]
    for name in UNARY_TRANSCENDENTAL:
        got = getattr(bk, name)(x)
        fn = getattr(ctx, MPFR_NAME.get(name, name))
        want = np.array([float(fn(v)) for v in xs])
        same = (got == want) & (np.signbit(got) == np.signbit(want)) | \
            (np.isnan(got) & np.isnan(want))
        wrong = np.flatnonzero(~same)
        assert wrong.size == 0, (name, x[wrong[:5]], got[wrong[:5]], want[wrong[:5]])


def test_transcendental_flags_exhaustively_in_binary16_nearest():
    fmt = formats.get("binary16")
    x = formats.decode(np.arange(1 << 16, dtype=np.uint64), fmt)
    x = x[~np.isnan(x)]
    bk = numerics.emulated(fmt)
    orc = FormatOracle(fmt)
    ctx = gmpy2.context(precision=200, round=gmpy2.RoundToZero)
    for name in ["exp", "log", "sin", "tanh", "erf", "rsqrt", "atanh", "acosh"]:
        got, flags = getattr(bk, name)(x, with_flags=True)
        fn = getattr(ctx, MPFR_NAME.get(name, name))
        bad = 0
        for i, v in enumerate(x.tolist()):
            ctx.clear_flags()
            r = fn(gmpy2.mpfr(v, 53))
            extra = (INVALID if gmpy2.is_nan(r) else 0) | (DIVZERO if ctx.divzero else 0)
            if ctx.inexact and not gmpy2.is_zero(r) and not gmpy2.is_nan(r):
                if r.as_mantissa_exp()[0] % 2 == 0:      # round to odd at 200 bits
                    r = ctx.next_above(r) if r > 0 else ctx.next_below(r)
            _, wflags = orc.round(r, "nearest_even")
            bad += int(flags[i]) != (wflags | extra)
        assert bad == 0, name


@pytest.mark.parametrize("name", ["atan2", "pow", "hypot"])
@pytest.mark.parametrize("mode", ["nearest_even", "downward"])
def test_binary_transcendentals_random_binary16_and_bfloat16(name, mode):
    for fname, ctx_args in [("binary16", (11, -23, 16)), ("bfloat16", (8, -132, 128))]:
        fmt = formats.get(fname)
        rng = np.random.default_rng(17)
        a = formats.round_to(rng.standard_normal(4000) * np.exp2(rng.integers(-6, 6, 4000)), fmt)
        b = formats.round_to(rng.standard_normal(4000) * np.exp2(rng.integers(-3, 4, 4000)), fmt)
        if name == "pow":
            a = np.abs(a)
        got = getattr(numerics.emulated(fmt, mode), name)(a, b)
        rnd = gmpy2.RoundToNearest if mode == "nearest_even" else gmpy2.RoundDown
        p, emin, emax = ctx_args
        ctx = gmpy2.context(precision=p, emin=emin, emax=emax, subnormalize=True, round=rnd)
        fn = getattr(ctx, name)
        want = np.array([float(fn(gmpy2.mpfr(u, 53), gmpy2.mpfr(v, 53)))
                         for u, v in zip(a.tolist(), b.tolist())])
        ok = (got == want) | (np.isnan(got) & np.isnan(want))
        assert ok.all(), (fname, a[~ok][:3], b[~ok][:3], got[~ok][:3], want[~ok][:3])


# ----- arithmetic through MPFR: the oracle is exact rationals -----------------------------------
# binary128 and binary256 compute every primitive through MPFR (numerics/mpfr_path.py), binary64
# its fma and every directed mode.  The oracle: the exact result in Fractions, rounded once by
# formats.round_exact (Python integers, no MPFR); sqrt's irrational results are bracketed by
# integer square roots (math.isqrt) first; transcendental values come from mpmath.
MPFR_FORMATS = ["binary64", "binary128", "binary256"]
EXACT_OPS = {"add": lambda x, y: x + y, "subtract": lambda x, y: x - y,
             "multiply": lambda x, y: x * y, "divide": lambda x, y: x / y,
             "fma": lambda x, y, z: x * y + z}


def operand_fractions(fmt, n, seed):
    """Three lists of finite nonzero values of ``fmt`` as Fractions: random p-bit significands
    at exponents near 0 (sums that round) and across the whole range (overflow, subnormal
    results), then ties, the top of the range and the bottom of the subnormals."""
    rng = random.Random(seed)
    p = fmt.precision

    def value(e):
        m = (rng.getrandbits(p - 1) | 1 << (p - 1)) * rng.choice((-1, 1))
        return formats.round_exact(Fraction(m) * Fraction(2) ** (e - p + 1), fmt).to_fraction()

    def draw():
        e = rng.randint(-p, p) if rng.random() < 0.6 else rng.randint(fmt.qmin + p - 1, fmt.emax)
        return value(e)

    cols = [[draw() for _ in range(n)] for _ in range(3)]
    one, half_ulp = Fraction(1), Fraction(1, 2 ** p)          # ulp(1) = 2**(1 - p)
    top = (2 ** p - 1) * Fraction(2) ** (fmt.emax - p + 1)      # (2 - 2**(1 - p)) 2**emax
    tiny = Fraction(2) ** fmt.qmin
    hard = [(one, half_ulp, one), (one + 2 * half_ulp, half_ulp, -one),   # ties to even
            (one, 3 * half_ulp, -half_ulp), (top, top, -top), (top, Fraction(2), top),
            (tiny, Fraction(1, 2), tiny), (3 * tiny, Fraction(1, 2), -tiny),
            (Fraction(2) ** fmt.emin, Fraction(3, 4), tiny), (one, one, -one),
            (Fraction(3), Fraction(3), Fraction(-9))]
    for col, extra in zip(cols, zip(*hard)):
        col.extend(extra)
    return cols


def exact_rounding(value, fmt, mode, sum_of_terms):
    """(bits, flags) of the exact Fraction ``value`` rounded once into ``fmt``; an exact zero
    sum is -0 under downward rounding and +0 otherwise (IEEE 754-2019, 6.3)."""
    if value == 0 and sum_of_terms:
        r = formats.round_exact("-0" if mode == "downward" else "0", fmt, mode)
    else:
        r = formats.round_exact(value, fmt, mode)
    return r.bits, r.flags


def sqrt_rounding(x, fmt, mode):
    """(bits, flags) of sqrt(x) rounded once into ``fmt``, for a Fraction x > 0: exact when x
    is the square of a rational (numerator and denominator both squares), otherwise from
    lo < sqrt(x) < hi, hi - lo <= 2**-k sqrt(x) with k = 2p + 64.  A rounding boundary of the
    format is a dyadic m of at most p + 1 bits; m**2 != x, and x - m**2, a multiple of the
    last unit of m**2, keeps sqrt(x) about 2**-(2p + 4) sqrt(x) away from m: no boundary
    lies between lo and hi (asserted: both ends round alike)."""
    n, d, k = x.numerator, x.denominator, 2 * fmt.precision + 64
    s = math.isqrt((n * d) << (2 * k))                    # sqrt(n/d) = sqrt(n d) / d
    lo = Fraction(s, d << k)
    if s * s == (n * d) << (2 * k):
        return exact_rounding(lo, fmt, mode, False)
    a, b = (formats.round_exact(v, fmt, mode) for v in (lo, Fraction(s + 1, d << k)))
    assert a.bits == b.bits, (x, mode)
    return a.bits, formats.INEXACT          # sqrt never leaves the range of these formats


@pytest.mark.parametrize("name", MPFR_FORMATS)
@pytest.mark.parametrize("mode", formats.IEEE_MODES)
def test_mpfr_arithmetic_is_the_exact_result_rounded_once(name, mode):
    """+ - * / fma sqrt bit for bit and flag for flag against the exact rational result
    rounded by formats.round_exact."""
    fmt = formats.get(name)
    bk = numerics.emulated(fmt, mode)
    cols = operand_fractions(fmt, 60, seed=len(name) * 7 + len(mode))
    args = [bk.asarray(np.array(c, dtype=object)) for c in cols]
    bad = []
    for op, f in EXACT_OPS.items():
        arity = 3 if op == "fma" else 2
        got, flags = getattr(bk, op)(*args[:arity], with_flags=True)
        got_bits = formats.encode(got, fmt)
        for i, xs in enumerate(zip(*cols[:arity])):
            want = exact_rounding(f(*xs), fmt, mode, op in ("add", "subtract", "fma"))
            if (int(got_bits[i]), int(flags[i])) != want:
                bad.append((op, xs, got[i], int(flags[i]), want))
    squares = [Fraction(9, 16), Fraction(4) ** math.ceil(fmt.qmin / 2)]   # exact roots
    roots = [abs(v) for v in cols[0]] + squares
    got, flags = bk.sqrt(bk.asarray(np.array(roots, dtype=object)), with_flags=True)
    for i, (x, b) in enumerate(zip(roots, formats.encode(got, fmt))):
        if (int(b), int(flags[i])) != sqrt_rounding(x, fmt, mode):
            bad.append(("sqrt", x, got[i], int(flags[i]), sqrt_rounding(x, fmt, mode)))
    assert bad[:3] == []


@pytest.mark.parametrize("name", MPFR_FORMATS)
def test_mpfr_transcendentals_match_mpmath(name):
    """exp, log and sin of a few values against mpmath at 600 bits, independent of MPFR,
    rounded by formats.round_exact: the mpmath value moved by 2**-590 of itself either way
    must round alike, and so must the backend's."""
    fmt = formats.get(name)
    bk = numerics.emulated(fmt)
    ctx = mp_context(600)
    xs = [Fraction(1), Fraction(3, 8), Fraction(1024001, 1024)]          # dyadic: exact inputs
    for fn in ("exp", "log", "sin"):
        got = formats.encode(getattr(bk, fn)(bk.asarray(np.array(xs, dtype=object))), fmt)
        for x, b in zip(xs, got):
            v = getattr(ctx, fn)(ctx.mpf(x.numerator) / x.denominator)
            ends = [v * (1 + s * ctx.ldexp(1, -590)) for s in (-1, 1)]
            want = {formats.round_exact(Fraction((-1) ** sign * int(m)) * Fraction(2) ** int(e),
                                        fmt).bits
                    for sign, m, e, _ in (end._mpf_ for end in ends)}     # (-1)**sign m 2**e
            assert want == {int(b)}, (fn, x)


def test_stochastic_mode_uses_exact_results():
    """Stochastic rounding of 1 + 1 * 2**-10 (exact in binary64) into bfloat16: up with
    probability (2**-10) / 2**-7 = 1/8, reproducible per seed."""
    n = 20000
    bk = numerics.emulated("bfloat16", "stochastic", seed=1)
    ones = np.ones(n)
    r = bk.add(ones, np.full(n, 2.0 ** -10))
    frac = np.mean(r > 1)
    assert abs(frac - 0.125) < 5 * math.sqrt(0.125 * 0.875 / n)
    again = numerics.emulated("bfloat16", "stochastic", seed=1).add(ones, np.full(n, 2.0 ** -10))
    assert np.array_equal(r, again)


def test_reductions_follow_the_policy_order_and_accumulation_format():
    # 1 followed by 1000 terms of 2**-9: in bfloat16 each addition to 1 is a tie-or-less and
    # is lost sequentially, kept pairwise, and kept exactly in a binary32 accumulator.
    x = np.concatenate([[1.0], np.full(1000, 2.0 ** -9)])
    seq = numerics.emulated("bfloat16").sum(x)
    pw = numerics.emulated("bfloat16", policy="pairwise").sum(x)
    acc = numerics.emulated("bfloat16", policy="fp32_accumulate").sum(x)
    exact = 1 + 1000 * 2.0 ** -9
    assert seq == 1.0
    assert float(formats.round_to(np.array([exact]), "bfloat16")[0]) == acc
    assert abs(pw - exact) < abs(seq - exact)
    blocked = numerics.emulated("bfloat16", policy=numerics.Policy(
        "bfloat16", order="blocked:32")).sum(x)
    assert abs(blocked - exact) < abs(seq - exact)


def test_matmul_and_dot_are_exact_in_a_wide_accumulator():
    rng = np.random.default_rng(3)
    a = formats.round_to(rng.standard_normal((4, 16)), "bfloat16")
    b = formats.round_to(rng.standard_normal((16, 3)), "bfloat16")
    # Products of bfloat16 values are exact in binary64, and 16 of them sum exactly too
    # (their exponents span less than 53 bits here): the binary64-accumulated matmul is
    # the exact one, rounded once.
    policy = numerics.Policy("bfloat16", accumulate="binary64")
    got = numerics.emulated("bfloat16", policy=policy).matmul(a, b)
    exact = [[sum(gmpy2.mpq(*float(a[i, k]).as_integer_ratio()) *
                  gmpy2.mpq(*float(b[k, j]).as_integer_ratio()) for k in range(16))
              for j in range(3)] for i in range(4)]
    want = np.array([[formats.round_exact(v, "bfloat16").to_float() for v in row]
                     for row in exact])
    assert np.array_equal(got, want)
    fused = numerics.emulated("bfloat16", policy=numerics.Policy("bfloat16", fma=True))
    plain = numerics.emulated("bfloat16")
    d1, d2 = fused.dot(a[0], b[:, 0]), plain.dot(a[0], b[:, 0])
    assert np.isfinite(d1) and np.isfinite(d2)


def test_capabilities_and_bad_arguments():
    bk = numerics.emulated("binary16")
    assert bk.capabilities == frozenset(numerics.CAPABILITIES)
    with pytest.raises(ValueError, match="rounding mode must be one of"):
        numerics.emulated("binary16", "nearest")
    with pytest.raises(ValueError, match="unknown policy"):
        numerics.emulated("binary16", policy="fast")
    with pytest.raises(ValueError, match="storage format must be binary16"):
        numerics.emulated("binary16", policy=numerics.Policy("bfloat16"))
    with pytest.raises(ValueError, match="reduction order must be"):
        numerics.Policy("bfloat16", order="random")


@pytest.mark.parametrize("fname", ["bfloat16", "binary32"])
@pytest.mark.parametrize("mode", ["nearest_even", "upward"])
def test_unary_transcendentals_random_wide_range_binary32_bfloat16(fname, mode):
    """Inputs over the whole range (so exp, sinh, cosh overflow and underflow binary64 and the
    format): the screened paths and their stand-ins agree with MPFR."""
    fmt = formats.get(fname)
    rng = np.random.default_rng(23)
    x = formats.round_to(rng.standard_normal(3000) * np.exp2(rng.uniform(-30, 12, 3000)), fmt)
    x = np.concatenate([x, formats.round_to(np.array([800.0, -800.0, 1e30, -1e30, 88.7, -103.9,
                                                      0.0, -0.0]), fmt)])
    rnd = gmpy2.RoundToNearest if mode == "nearest_even" else gmpy2.RoundUp
    ctx = gmpy2.context(precision=fmt.precision, emin=fmt.qmin + 1, emax=fmt.emax + 1,
                        subnormalize=True, round=rnd)
    bk = numerics.emulated(fmt, mode)
    xs = [gmpy2.mpfr(v, 53) for v in x.tolist()]
    for name in ["exp", "exp2", "expm1", "sinh", "cosh", "log", "log1p", "sin", "tanh", "erf",
                 "atan", "asinh", "cbrt", "rsqrt"]:
        got = getattr(bk, name)(x)
        fn = getattr(ctx, MPFR_NAME.get(name, name))
        want = np.array([float(fn(v)) for v in xs])
        same = ((got == want) & (np.signbit(got) == np.signbit(want))) | \
            (np.isnan(got) & np.isnan(want))
        assert same.all(), (name, x[~same][:4], got[~same][:4], want[~same][:4])


def test_sticky_flags_collect_every_rounding_including_the_accumulators():
    """track_flags / raised / clear_flags: IEEE status flags over a whole computation.
    Oracles by hand: bfloat16's largest value is (2 - 2**-7) * 2**127, binary32's is
    (2 - 2**-23) * 2**127, so twice the former overflows the binary32 accumulator."""
    big = float(formats.get("bfloat16").max_finite)
    be = numerics.emulated("bfloat16", policy="fp32_accumulate")
    assert be.raised() is None                            # not tracking yet
    be.track_flags()
    be.add(np.array([1.0]), np.array([1.0]))              # 2: exact
    assert be.raised() == 0
    be.sum(np.array([big, big]))                          # overflow in the binary32 accumulator
    assert set(formats.flag_names(be.raised())) == {"overflow", "inexact"}
    be.clear_flags()
    assert be.raised() == 0
    be.sqrt(np.array([-1.0]))
    assert formats.flag_names(be.raised()) == ["invalid"]
    # Tracking changes no value.
    x = np.linspace(-3, 3, 101)
    assert np.array_equal(be.exp(x), numerics.emulated("bfloat16").exp(x))

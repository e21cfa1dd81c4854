"""numerics.exact_products against exact rationals: every entry of exact_matmul / exact_dot
equals the Fraction sum of the Fraction products; to_float64 equals Python's correctly rounded
float(Fraction); to_mpf equals mpmath's own correct rounding of the rational
(libmp.from_rational).  Random bfloat16, binary32 and binary64 matrices, and adversarial ones:
cancellation to zero, 1e300 with 1e-300 and subnormals in one row, k = 4096, digits at their
bound, ties, overflow, signed zeros, NaN and inf.  Then the reference backend's matmul and dot
on top of it."""

import math
import sys
from fractions import Fraction

import gmpy2
import ml_dtypes
import numpy as np
import pytest
from mpmath.libmp import fnan, finf, fninf, from_rational, round_nearest

from roundoff_coverage.numerics import exact_products as ep
from roundoff_coverage.numerics.reference import reference

F = Fraction
MAX = sys.float_info.max
TINY = 5e-324


# ----- oracles ------------------------------------------------------------------------------
def exact_matmul_oracle(a, b):
    """Fraction matmul with numpy's shape rules (a, b float64, finite)."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.empty(batch + (a2.shape[-2], b2.shape[-1]), dtype=object)
    for idx in np.ndindex(out.shape):
        row, col = a2[idx[:-1]], b2[idx[:-2] + (slice(None), idx[-1])]
        out[idx] = sum((F(x) * F(y) for x, y in zip(row.tolist(), col.tolist())), F(0))
    shape = batch + ((a.shape[-2],) if a.ndim > 1 else ()) + ((b.shape[-1],) if b.ndim > 1
                                                               else ())
    return out.reshape(shape)


def exact_dot_oracle(a, b):
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape[:-1], dtype=object)
    for idx in np.ndindex(out.shape):
        out[idx] = sum((F(x) * F(y) for x, y in zip(a[idx].tolist(), b[idx].tolist())), F(0))
    return out


def fractions_of(x: ep.ExactSums):
    n, e = x.integers()
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = F(int(n[idx])) * F(2) ** int(e[idx])
    return out


def nearest_float(q: Fraction) -> float:
    """Python's float(Fraction): int / int true division, correctly rounded (subnormals
    included); it raises where the rounded value overflows."""
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


def same_floats(got, want):
    """Bitwise equality of float64 arrays (signed zeros and NaN included)."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return g.shape == w.shape and np.array_equal(g.view(np.int64), w.view(np.int64))


def check_exact(x, want, precs=(8, 24, 53, 113)):
    """x's entries equal the Fractions ``want``; to_float64 and to_mpf round them as the
    oracles do (nonzero entries; zeros are checked by the signed-zero tests)."""
    assert x.shape == want.shape
    got = fractions_of(x)
    assert got.tolist() == want.tolist()
    flo = ep.to_float64(x)
    for idx in np.ndindex(want.shape):
        q = want[idx]
        assert same_floats(flo[idx], nearest_float(q)) if q != 0 else flo[idx] == 0
    for p in precs:
        mp = ep.to_mpf(x, p)
        for idx in np.ndindex(want.shape):
            q = want[idx]
            assert mp[idx]._mpf_ == from_rational(q.numerator, q.denominator, p, round_nearest)
    exact = ep.to_mpf(x, None)
    for idx in np.ndindex(want.shape):
        man, e = exact[idx].man_exp
        assert (-1 if exact[idx] < 0 else 1) * F(int(man)) * F(2) ** int(e) == want[idx]


# ----- value generators ---------------------------------------------------------------------
def values(rng, shape, fmt, decades=3):
    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-decades, decades, shape)
    if fmt == "bfloat16":
        return x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    if fmt == "binary32":
        return x.astype(np.float32).astype(np.float64)
    return x


FORMATS = ("bfloat16", "binary32", "binary64")


# ----- random matrices ----------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_exact_matmul_equals_fraction_sums(fmt):
    rng = np.random.default_rng(sum(map(ord, fmt)))
    a, b = values(rng, (7, 45), fmt), values(rng, (45, 6), fmt)
    x = ep.exact_matmul(a, b)
    assert not x.wide
    check_exact(x, exact_matmul_oracle(a, b))


@pytest.mark.parametrize("fmt", FORMATS)
def test_exact_dot_equals_fraction_sums_with_broadcasting(fmt):
    rng = np.random.default_rng(1 + sum(map(ord, fmt)))
    a, b = values(rng, (3, 1, 33), fmt), values(rng, (4, 33), fmt)
    x = ep.exact_dot(a, b)
    assert x.shape == (3, 4)
    check_exact(x, exact_dot_oracle(a, b))


@pytest.mark.parametrize("shapes", [((2, 1, 3, 5), (4, 5, 2)), ((5,), (5, 3)), ((3, 5), (5,)),
                                    ((5,), (5,)), ((2, 3, 4), (4,))],
                         ids=lambda s: "x".join(map(str, s[0])) + "-" + "x".join(map(str, s[1])))
@pytest.mark.parametrize("max_slices", [8, 1], ids=["fast", "slow"])
def test_exact_matmul_shapes_follow_numpy_on_both_paths(shapes, max_slices):
    rng = np.random.default_rng(3)
    a, b = values(rng, shapes[0], "binary64"), values(rng, shapes[1], "binary64")
    x = ep.exact_matmul(a, b, max_slices=max_slices)
    assert x.shape == np.matmul(a, b).shape
    assert bool(x.wide) == (max_slices == 1)          # binary64 rows need several slices
    check_exact(x, exact_matmul_oracle(a, b), precs=(24,))


def test_blas_sized_binary64_product_is_exact():
    # Large enough for OpenBLAS's blocked kernels (k = 300 > its 256-deep panels): any
    # blocking and order of the exact integer partial sums gives the same result.
    rng = np.random.default_rng(9)
    a, b = values(rng, (40, 300), "binary64", 2), values(rng, (300, 24), "binary64", 2)
    x = ep.exact_matmul(a, b)
    assert x.limbs.shape[0] >= 5 and not x.wide
    check_exact(x, exact_matmul_oracle(a, b), precs=(53,))


def test_wide_spread_binary64_rows_use_many_slices_exactly():
    # Magnitudes over 20 decades: spans of ~120 bits, six 22-bit slices per side.
    rng = np.random.default_rng(4)
    a, b = values(rng, (6, 40), "binary64", 10), values(rng, (40, 5), "binary64", 10)
    x = ep.exact_matmul(a, b)
    assert x.limbs.shape[0] > 6 and not x.wide
    check_exact(x, exact_matmul_oracle(a, b), precs=(53, 200))


def test_rows_and_columns_needing_extra_slices_alone():
    # One row of a and one column of b span ~40 bits more than the rest: their later slices
    # are multiplied on their own (the restricted slice products).
    rng = np.random.default_rng(8)
    a, b = values(rng, (8, 30), "bfloat16", 1), values(rng, (30, 5), "bfloat16", 1)
    a[3, 4], b[7, 2] = 2.0 ** -40, -(2.0 ** -45)
    x = ep.exact_matmul(a, b)
    assert x.limbs.shape[0] == 4 and not x.wide
    check_exact(x, exact_matmul_oracle(a, b))


# ----- adversarial --------------------------------------------------------------------------
def test_cancellation_to_exact_zero_and_to_a_tiny_remainder():
    rng = np.random.default_rng(5)
    h = values(rng, (3, 20), "binary64", 8)
    tail = np.array([[0.0], [0.0], [2.0 ** -60]])          # row 2 keeps a tiny remainder
    a = np.concatenate([h, -h, tail], axis=1)             # each row cancels against ones
    b = np.ones((41, 2))
    b[:, 1] = 3.0
    x = ep.exact_matmul(a, b)
    want = exact_matmul_oracle(a, b)
    check_exact(x, want)
    assert want[0, 0] == 0 and same_floats(ep.to_float64(x)[0], [0.0, 0.0])   # +0, not -0


def test_huge_tiny_and_subnormal_magnitudes_in_one_row():
    row = [1e300, 1e-300, -3.5e-310, TINY, MAX, -MAX, 2.0 ** -1022, 1.0, -1e300, 7e-320]
    a = np.array([row, row[::-1], [1.0] * 10])
    b = np.array([row[::-1], [2.0 ** -600] * 10, row, [-1.0] * 10]).T
    x = ep.exact_matmul(a, b)
    assert x.wide                                          # the slow exact path
    check_exact(x, exact_matmul_oracle(a, b), precs=(24, 53, 3000))
    y = ep.exact_dot(np.array(row), np.array(row))         # products up to 2**2048
    check_exact(y, exact_dot_oracle(np.array(row), np.array(row)), precs=(53,))


def test_products_below_the_subnormal_range_round_to_signed_zero():
    a = np.array([[1e-300], [-1e-300], [3 * TINY]])
    b = np.array([[1e-300, 0.5]])
    x = ep.exact_matmul(a, b)
    check_exact(x, exact_matmul_oracle(a, b))
    # 1e-600 rounds to +0, -1e-600 to -0 (the sign of the exact value), 1.5 * TINY ties to
    # the even 2 * TINY.
    assert same_floats(ep.to_float64(x), [[0.0, 5e-301], [-0.0, -5e-301], [0.0, 2 * TINY]])


def test_long_inner_dimension_4096():
    rng = np.random.default_rng(6)
    a, b = values(rng, (2, 4096), "binary32"), values(rng, (4096, 3), "binary32")
    a[1, :2048], a[1, 2048:] = a[0, :2048], -a[0, :2048]   # row 1 against column 0: cancels
    b[2048:, 0] = b[:2048, 0]
    check_exact(ep.exact_matmul(a, b), exact_matmul_oracle(a, b), precs=(24, 64))
    assert ep.slice_width(4096) == 20                      # 4096 * 2**40 = 2**52 <= 2**53


def test_digits_at_their_bound_keep_every_partial_sum_exact():
    # 1 - 2**-53 has 53 one bits: every digit is 2**beta - 1, every product the largest, and
    # the k = 4096 products sum to just below 2**53 in each slice matmul.
    k = 4096
    v = 1.0 - 2.0 ** -53
    a, b = np.full((2, k), v), np.full((k, 2), -v)
    b[0, 1] = 1.0
    check_exact(ep.exact_matmul(a, b), exact_matmul_oracle(a, b), precs=(53, 160))


@pytest.mark.parametrize("a,b,want", [
    ([1.0, 2.0 ** -53], [1.0, 1.0], 1.0),                          # tie: to even
    ([1.0 + 2.0 ** -52, 2.0 ** -53], [1.0, 1.0], 1.0 + 2.0 ** -51),  # tie: up to even
    ([1.0, 2.0 ** -53, 2.0 ** -90], [1.0, 1.0, 1.0], 1.0 + 2.0 ** -52),   # above the tie
    ([TINY, TINY], [1.0, 0.5], 2 * TINY),                          # 1.5 * TINY: tie, up
    ([TINY], [0.5], 0.0),                                          # 0.5 * TINY: tie, down
    ([MAX, 2.0 ** 970], [1.0, 1.0], math.inf),           # tie at the top: even is 2**1024
    ([MAX, 2.0 ** 969], [1.0, 1.0], MAX),
], ids=["tie-even", "tie-up", "sticky", "subnormal-tie-up", "subnormal-tie-zero",
        "overflow-tie", "below-overflow"])
def test_nearest_float64_ties_and_overflow(a, b, want):
    x = ep.exact_dot(np.array(a), np.array(b))
    assert ep.to_float64(x).item() == want
    assert nearest_float(fractions_of(x).item()) == want


@pytest.mark.parametrize("a,b,want", [
    ([-0.0, -0.0], [1.0, 2.0], -0.0),        # every term -0: -0
    ([-0.0, 0.0], [1.0, 2.0], 0.0),          # -0 + +0 = +0
    ([-0.0], [-3.0], 0.0),                   # the product is +0
    ([0.0, 0.0], [-1.0, -0.0], -0.0),        # +0 * -1 and +0 * -0 are both -0
    ([1.0, -1.0], [5.0, 5.0], 0.0),          # cancellation: +0 under rounding to nearest
    ([1e-300, -1e-300], [-1e-300, -1e-300], 0.0),
], ids=["all-negative", "mixed", "positive-product", "negative-zero-operand", "cancel",
        "cancel-tiny"])
def test_signed_zero_convention_of_an_exact_zero(a, b, want):
    """IEEE 754 6.3 under rounding to nearest: an exact zero sum is +0 unless every term is
    -0 (the convention of exact_products' docstring)."""
    x = ep.exact_dot(np.array(a), np.array(b))
    assert same_floats(ep.to_float64(x), want)
    m = ep.exact_matmul(np.array([a]), np.array([b]).T)
    assert same_floats(ep.to_float64(m), [[want]])
    assert ep.to_mpf(x, 53).item() == 0


def random_bits(rng, shape):
    """Uniformly random binary64 bit patterns (every exponent, subnormals), NaN and inf
    replaced by 1."""
    x = rng.integers(0, 2 ** 63, shape, dtype=np.int64).view(np.float64)
    x = np.where(rng.random(shape) < 0.5, -x, x)
    return np.where(np.isfinite(x), x, 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_random_bit_patterns_of_any_exponent(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(4):
        m, k, n = rng.integers(1, 6, 3)
        a, b = random_bits(rng, (m, k)), random_bits(rng, (k, n))
        if rng.random() < 0.5:                  # some rows of ordinary magnitudes
            a[0] = values(rng, k, "binary64")
            b[:, 0] = values(rng, k, "binary32")
        x = ep.exact_matmul(a, b, max_slices=int(rng.choice([1, 4, 8])))
        check_exact(x, exact_matmul_oracle(a, b), precs=(53,))


def test_signed_zeros_of_random_zero_sums_follow_the_convention():
    rng = np.random.default_rng(7)
    pool = np.array([-0.0, 0.0, 1.0, -1.0, 2.0, -0.5])
    for _ in range(10):
        m, k, n = rng.integers(1, 5, 3)
        a = rng.choice(pool, (m, k), p=[0.3, 0.3, 0.1, 0.1, 0.1, 0.1])
        b = rng.choice(pool, (k, n), p=[0.3, 0.3, 0.1, 0.1, 0.1, 0.1])
        got = ep.to_float64(ep.exact_matmul(a, b))
        for i in range(m):
            for j in range(n):
                terms = [x * y for x, y in zip(a[i].tolist(), b[:, j].tolist())]
                q = sum((F(t) for t in terms), F(0))
                neg = all(t == 0 and math.copysign(1.0, t) < 0 for t in terms)
                want = float(q) if q != 0 else (-0.0 if neg else 0.0)
                assert same_floats(got[i, j], want)


def test_empty_inner_dimension_gives_positive_zero():
    x = ep.exact_matmul(np.zeros((2, 0)), np.zeros((0, 3)))
    assert same_floats(ep.to_float64(x), np.zeros((2, 3)))


def real_extension(row, col):
    """The entry the real extension gives (terms in binary64: moderate finite values only)."""
    terms = [x * y for x, y in zip(row, col)]
    if any(math.isnan(t) for t in terms) or (math.inf in terms and -math.inf in terms):
        return math.nan
    infs = [t for t in terms if math.isinf(t)]
    return infs[0] if infs else None


def test_nan_and_inf_follow_the_real_extension():
    inf, nan = math.inf, math.nan
    a = np.array([[inf, 1.0, 2.0], [inf, -inf, 1.0], [nan, 1.0, 1.0], [0.0, 1.0, 2.0],
                  [-inf, 3.0, 0.0], [1.0, 2.0, 3.0]])
    b = np.array([[1.0, 0.0, -2.0, inf, 1.0], [2.0, 1.0, 1.0, 1.0, inf],
                  [1.0, 1.0, 1.0, -inf, 1.0]])
    x = ep.exact_matmul(a, b)
    got = ep.to_float64(x)
    mp = ep.to_mpf(x, 24)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            want = real_extension(a[i].tolist(), b[:, j].tolist())
            if want is None:
                q = sum((F(u) * F(v) for u, v in zip(a[i], b[:, j])), F(0))
                assert got[i, j] == nearest_float(q)
                assert mp[i, j]._mpf_ == from_rational(q.numerator, q.denominator, 24, "n")
            elif math.isnan(want):
                assert math.isnan(got[i, j]) and mp[i, j]._mpf_ == fnan
            else:
                assert got[i, j] == want and mp[i, j]._mpf_ == (finf if want > 0 else fninf)


def test_validation_names_the_function_and_the_shapes():
    with pytest.raises(ValueError, match=r"exact_matmul: inner dimensions differ \(3 and 4\)"):
        ep.exact_matmul(np.ones((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"exact_dot: need equal last dimensions"):
        ep.exact_dot(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match=r"max_slices must be an integer in \[1, 256\]"):
        ep.exact_matmul(np.ones((2, 3)), np.ones((3, 2)), max_slices=0)


# ----- the reference backend on top ---------------------------------------------------------
@pytest.mark.parametrize("prec", [24, 64, 200])
def test_reference_matmul_and_dot_are_correctly_rounded(prec):
    rng = np.random.default_rng(prec)
    a = values(rng, (4, 30), "bfloat16").astype(ml_dtypes.bfloat16)
    b = values(rng, (30, 3), "binary32").astype(np.float32)
    bk = reference(prec)
    got = bk.matmul(bk.asarray(a), bk.asarray(b))
    want = exact_matmul_oracle(a.astype(np.float64), b.astype(np.float64))
    for idx in np.ndindex(want.shape):
        q = want[idx]
        assert got[idx]._mpf_ == from_rational(q.numerator, q.denominator, prec, "n")
    d = bk.dot(a[:3].astype(np.float64), b.T.astype(np.float64))
    for i in range(3):
        q = exact_dot_oracle(a[i].astype(np.float64), b[:, i].astype(np.float64)).item()
        assert d[i]._mpf_ == from_rational(q.numerator, q.denominator, prec, "n")


def test_reference_matmul_beats_stepwise_rounding():
    # 1 + 2**-30 - 1 at 24 bits: a stepwise sum loses 2**-30, the exact one keeps it.
    bk = reference(24)
    got = bk.matmul(np.array([[1.0, 2.0 ** -30, -1.0]]), np.ones((3, 1)))
    assert got[0, 0] == bk.asarray(2.0 ** -30).item()


def _exact_mpf(v) -> F:
    """An mpf's exact value as a Fraction (man_exp's mantissa is unsigned); a float (the
    reference keeps float inputs as float64) exactly."""
    if isinstance(v, float):
        return F(v)
    man, e = v.man_exp
    return F(int(man)) * F(2) ** int(e) * (-1 if v < 0 else 1)


def _wide_operand(bk, rng, shape, spread):
    """Values of ~prec bits: binary64 values divided by 3 (or 7) at the backend's precision,
    with magnitudes over 2**+-spread."""
    num = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    den = rng.choice([3.0, 7.0, 1.0], shape)
    return bk.divide(bk.asarray(num), bk.asarray(den))


@pytest.mark.parametrize("prec", [72, 144, 300])
def test_reference_contractions_of_wide_operands_are_exact_then_rounded_once(prec):
    # Operands beyond binary64 (results of earlier primitives at prec bits) are cut into
    # binary64 pieces; every entry must be the exact sum of products rounded once to prec
    # (Fraction oracle), the same for dot.
    rng = np.random.default_rng(prec)
    bk = reference(prec)
    a = _wide_operand(bk, rng, (2, 3, 9), 40)
    b = _wide_operand(bk, rng, (9, 4), 3)
    b[0, 0] = bk.asarray(0.0).item()

    def rounded(q):
        return from_rational(q.numerator, q.denominator, prec, "n")

    got = bk.matmul(a, b)
    for idx in np.ndindex(got.shape):
        q = sum((_exact_mpf(a[idx[0], idx[1], k]) * _exact_mpf(b[k, idx[2]])
                 for k in range(9)), F(0))
        assert got[idx]._mpf_ == rounded(q)
    d = bk.dot(a[0], b.T[:3])
    for i in range(3):
        q = sum((_exact_mpf(a[0, i, k]) * _exact_mpf(b[k, i]) for k in range(9)), F(0))
        assert d[i]._mpf_ == rounded(q)


def test_reference_wide_operands_outside_binary64_pieces_take_the_stepwise_path():
    # An operand of 2**2000 / 3 has no binary64 pieces: the policy's sequential sum at prec
    # bits, each product and addition rounded (MPFR as the oracle); NaN and inf likewise.
    bk = reference(100)
    big = bk.divide(bk.asarray(2.0 ** 1000), bk.asarray(3.0))
    big = bk.multiply(big, bk.asarray(2.0 ** 1000)).item()
    y = np.array([1.0, 2.0 ** -70, -1.0])
    got = bk.dot(np.array([big] * 3, dtype=object), y).item()
    with gmpy2.context(precision=100):
        t = gmpy2.mpfr(2) ** 2000 / 3
        acc = t * gmpy2.mpfr(y[0])
        for v in y[1:]:
            acc = acc + t * gmpy2.mpfr(v)
    assert _exact_mpf(got) == F(*acc.as_integer_ratio())
    third = bk.divide(bk.asarray(np.ones(2)), bk.asarray(np.full(2, 3.0)))
    inf = bk.asarray(np.array([np.inf, 1.0]))
    assert bk.dot(third, inf).item() == bk.asarray(np.inf).item()

"""``round_to`` / ``round_encode`` on input that is not float64: every element is rounded
once, from its exact value.  Oracle: MPFR (tests/mpfr_oracle.py) fed the exact value (an
exact mpfr, or for a non-dyadic Fraction its round-to-odd far beyond the format's
precision, which every rounding to p <= 1898 bits rounds as it rounds the Fraction)."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage import formats
from mpfr_oracle import MODES7, FormatOracle
from rounding_checks import same

SMALL = ("binary32", "bfloat16", "binary16")


def exact_mpfr(q) -> gmpy2.mpfr:
    """The real ``q`` (int, Fraction) as an mpfr: exact when it has at most 1900 significant
    bits, otherwise truncated to 1899 bits with a 1 appended (round to odd)."""
    q = Fraction(q)
    z = gmpy2.mpfr(gmpy2.mpq(q.numerator, q.denominator), 1899)   # nearest; fixed below
    m, e = z.as_mantissa_exp()
    back = Fraction(int(m)) * Fraction(2) ** int(e)
    if back == q:
        return z
    if abs(back) > abs(q):                 # step back towards zero: truncation
        m -= 1 if m > 0 else -1
    m = 2 * int(m) + (1 if m > 0 else -1)
    e = int(e) - 1
    num, den = (m << e, 1) if e >= 0 else (m, 1 << -e)
    return gmpy2.mpfr(gmpy2.mpq(num, den), 1901)


@functools.lru_cache(maxsize=None)
def _format_oracle(fmt: str) -> FormatOracle:
    return FormatOracle(formats.get(fmt))


def oracle(value, fmt, mode):
    """(float, flags) of rounding the real ``value`` once into ``fmt``."""
    if isinstance(value, float):
        return _format_oracle(fmt).round(value, mode)
    if value == 0:
        return _format_oracle(fmt).round(0.0, mode)
    return _format_oracle(fmt).round(exact_mpfr(value), mode)


def check(values, x, fmt, modes=MODES7, encode=True):
    """round_to(x) and round_encode(x) against the oracle on ``values`` (the exact reals of
    x's elements, flat); returns the mismatches."""
    bad = []
    for mode in modes:
        got, flags = formats.round_to(x, fmt, mode, with_flags=True)
        got, flags = got.reshape(-1), flags.reshape(-1)
        enc = formats.decode(formats.round_encode(x, fmt, mode), fmt).reshape(-1) \
            if encode else got
        for i, v in enumerate(values):
            want, wflags = oracle(v, fmt, mode)
            if not same(float(got[i]), want) or flags[i] != wflags or not same(enc[i], want):
                bad.append((fmt, mode, v, float(got[i]), int(flags[i]), want, wflags))
    return bad


# 2**62 + 2**54 + 1 lies just above a bfloat16 midpoint (2**62 + 2**54); float64 rounds it
# onto the midpoint, which then rounds to even (down): the double rounding this test pins.
# 2**62 + 2**38 + 1 does the same in binary32.
BIG_INTS = [2**62 + 2**54 + 1, 2**62 + 2**38 + 1, -(2**62 + 2**54 + 1), 2**53 + 1,
            2**63 - 1, -2**63, 3, -7, 0, 2**53, (2**52 + 1) * 1024 + 511]


def test_int64_beyond_2_53_rounds_once_from_the_exact_integer():
    x = np.array(BIG_INTS, dtype=np.int64)
    assert check(BIG_INTS, x, "binary32") == []
    assert check(BIG_INTS, x, "bfloat16") == []
    assert check(BIG_INTS, x, "binary16") == []


@pytest.mark.parametrize("v, fmt, mode", [(2**62 + 2**54 + 1, "bfloat16", "nearest_even"),
                                          (2**62 + 2**38 + 1, "binary32", "nearest_even"),
                                          (2**62 + 2**54 + 1, "binary32", "upward"),
                                          (2**62 + 2**54 + 1, "binary32", "odd")])
def test_int64_value_that_float64_double_rounds_wrongly_is_now_right(v, fmt, mode):
    # The oracle itself shows that rounding float64(v) gives another value ...
    assert oracle(float(v), fmt, mode)[0] != oracle(v, fmt, mode)[0]
    # ... and round_to gives the single rounding, from every integer container.
    want = oracle(v, fmt, mode)[0]
    for x in (np.array([v], dtype=np.int64), np.array([v], dtype=np.uint64), [v], v,
              np.array([Fraction(v)], dtype=object), [v, 1.5]):
        got = formats.round_to(x, fmt, mode).reshape(-1)
        assert got[0] == want, (type(x), got, want)


def test_uint64_near_2_64_rounds_once():
    vals = [2**64 - 1, 2**64 - 2**40 + 1, 2**64 - 2**39 - 1, 2**63 + 2**39 + 1, 2**63 + 1,
            2**63, 12345, 2**53 + 3]
    x = np.array(vals, dtype=np.uint64)
    for fmt in SMALL:
        assert check(vals, x, fmt) == []


def test_python_list_of_big_ints_that_numpy_makes_float64_rounds_once():
    vals = [-1, 2**63 + 2**39 + 1, 2**62 + 2**38 + 1]
    assert np.asarray(vals).dtype == np.float64           # numpy rounded them already
    assert check(vals, vals, "binary32", encode=True) == []
    big = [2**70 + 2**46 + 1, -(2**80) - 1]                # object dtype
    assert check(big, big, "binary32") == []


FRACTIONS = [Fraction(1, 3), Fraction(-2, 7), Fraction(10**30, 3), Fraction(1, 3 * 2**140),
             Fraction(-5, 2**150) + Fraction(1, 10**60),
             # just above the binary16 midpoint 1 + 2**-11; float64 rounds onto it
             1 + Fraction(1, 2**11) + Fraction(1, 2**60),
             # just below the bfloat16 midpoint 1 + 3 * 2**-8 (ties go up, to 1 + 2**-6);
             # float64 rounds up onto it
             1 + Fraction(3, 2**8) - Fraction(1, 2**70),
             Fraction(65519, 1) + Fraction(1, 10**20), Fraction(1, 10**400), Fraction(0)]


def test_object_array_of_fractions_rounds_once():
    x = np.array(FRACTIONS, dtype=object)
    for fmt in SMALL:
        assert check(FRACTIONS, x, fmt) == []
    # The two midpoint cases: a float64 intermediate would have gone wrong.
    assert oracle(float(FRACTIONS[5]), "binary16", "nearest_even")[0] != \
        oracle(FRACTIONS[5], "binary16", "nearest_even")[0]
    assert oracle(float(FRACTIONS[6]), "bfloat16", "nearest_even")[0] != \
        oracle(FRACTIONS[6], "bfloat16", "nearest_even")[0]


def test_fraction_into_binary64_is_pythons_correctly_rounded_float():
    qs = [Fraction(1, 3), Fraction(-10**30, 7), Fraction(1, 10**320), Fraction(2**1100, 3)]
    got = formats.round_to(np.array(qs, dtype=object), "binary64")
    # Fraction.__float__ rounds correctly (nearest even); 2**1100/3 overflows to inf.
    want = [float(q) for q in qs[:3]] + [math.inf]
    assert [float(g) for g in got] == want


def test_mixed_object_array_of_ints_gmpy2_numbers_and_decimal_strings():
    items = [2**64 + 1, gmpy2.mpz(2**62 + 2**54 + 1), gmpy2.mpq(1, 3), "0.1", "-2.5e-3",
             gmpy2.mpfr("0.1", 200), 0.1, np.float32(0.1), np.int64(2**62 + 2**54 + 1)]
    exact = [Fraction(2**64 + 1), Fraction(2**62 + 2**54 + 1), Fraction(1, 3), Fraction(1, 10),
             Fraction(-25, 10000), Fraction(*gmpy2.mpfr("0.1", 200).as_integer_ratio()),
             0.1, float(np.float32(0.1)), Fraction(2**62 + 2**54 + 1)]
    x = np.array(items, dtype=object)
    for fmt in ("bfloat16", "binary32", "binary64"):
        assert check(exact, x, fmt, encode=fmt != "binary64") == []
    # A decimal string is read as its decimal value, not as the nearest binary64 value
    # (which upward and downward would both leave alone).
    up = formats.round_to(np.array(["0.1"]), "binary64", "upward")[0]
    down = formats.round_to(np.array(["0.1"]), "binary64", "downward")[0]
    assert (up, down) == (oracle(Fraction(1, 10), "binary64", "upward")[0],
                          oracle(Fraction(1, 10), "binary64", "downward")[0])
    assert up > down


def _narrow_inputs(dtype, n=800):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n) * np.exp2(rng.uniform(-30, 18, n))
    x = np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 1e-7]])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("fmt", ["bfloat16", "binary16", "float8_e4m3fn", "float8_e5m2"])
def test_narrow_float_input_rounds_as_its_exact_value(dtype, fmt):
    x = _narrow_inputs(dtype)
    values = [float(v) for v in x.astype(np.float32).tolist()]   # exact: all fit binary32
    assert check(values, x, fmt, modes=("nearest_even", "nearest_away", "toward_zero",
                                        "upward", "odd")) == []


def test_bool_and_small_int_arrays_round_as_their_values():
    b = np.array([True, False])
    assert check([1.0, 0.0], b, "float8_e4m3fn") == []
    i = np.array([-129, 255, 4097, 2**31 - 1], dtype=np.int32)
    assert check([-129, 255, 4097, 2**31 - 1], i, "bfloat16") == []


WIDE_LONGDOUBLE = np.finfo(np.longdouble).nmant > 52


@pytest.mark.skipif(not WIDE_LONGDOUBLE, reason="longdouble is binary64 on this platform")
@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_longdouble_rounds_once_from_its_exact_value():
    one = np.longdouble(1)
    x = np.array([one + one / 2**60, one + one / 2**11 + one / 2**62, -(one + one / 2**24
                  + one / 2**63), np.longdouble("1e4000"), np.longdouble("1e-4000"), 0.5,
                  np.longdouble("nan")], dtype=np.longdouble)
    vals = [Fraction(*v.as_integer_ratio()) if np.isfinite(v) else float(v) for v in x]
    for fmt in SMALL:
        assert check(vals, x, fmt) == []
    # longdouble scalars read exactly by round_exact too
    assert formats.round_exact(x[1], "binary16", "nearest_even").to_float() == 1 + 2**-10


def test_stochastic_exact_path_agrees_with_fast_path_elementwise():
    rng = np.random.default_rng(5)
    f = rng.standard_normal(3000) * np.exp2(rng.uniform(-140, 20, 3000))
    obj = np.array([Fraction(v) for v in f.tolist()], dtype=object)    # every one exact path
    for fmt in ("bfloat16", "binary16", "float8_e4m3fn"):
        for seed, offset in ((1, 0), (2**64 - 5, 12345)):
            fast = formats.round_to(f, fmt, "stochastic", seed=seed, offset=offset)
            slow = formats.round_to(obj, fmt, "stochastic", seed=seed, offset=offset)
            assert np.array_equal(fast.view(np.int64), slow.view(np.int64))
            enc = formats.round_encode(obj, fmt, "stochastic", seed=seed, offset=offset)
            assert np.array_equal(formats.encode(fast, fmt), enc)
    # And each stochastic result is one of the value's two neighbours in the format.
    big = np.array([2**62 + 2**54 + 1 + k * 2**40 for k in range(200)], dtype=np.int64)
    got = formats.round_to(big, "bfloat16", "stochastic", seed=9)
    for v, g in zip(big.tolist(), got.tolist()):
        lo, hi = oracle(v, "bfloat16", "toward_zero")[0], oracle(v, "bfloat16", "upward")[0]
        assert g in (lo, hi)


def test_out_is_honoured_on_the_exact_path():
    x = np.array([2**62 + 2**54 + 1, 1], dtype=np.int64)
    buf = np.full(2, -1.0)
    got = formats.round_to(x, "bfloat16", out=buf)
    assert np.shares_memory(got, buf)
    assert buf.tolist() == [oracle(2**62 + 2**54 + 1, "bfloat16", "nearest_even")[0], 1.0]


@pytest.mark.parametrize("bad", [np.array([1 + 2j]), 1j, [1.0, 2j],
                                 np.array([1j], dtype=np.complex64)])
def test_complex_input_is_refused_with_one_line_saying_what_is_accepted(bad):
    for fn in (formats.round_to, formats.round_encode):
        with pytest.raises(ValueError, match=r"complex .*real numbers: float64") as e:
            fn(bad, "bfloat16")
        assert "\n" not in str(e.value)


def test_complex_element_of_object_array_and_non_numbers_are_refused():
    with pytest.raises(ValueError, match=r"round_to: element 1: complex .* is complex"):
        formats.round_to(np.array([1, 1 + 1j], dtype=object), "bfloat16")
    with pytest.raises(ValueError, match=r"round_to: cannot round datetime64"):
        formats.round_to(np.array(["2020-01-01"], dtype="datetime64[D]"), "bfloat16")
    with pytest.raises(ValueError, match=r"round_encode: element 0: 'abc' is not a decimal"):
        formats.round_encode(["abc"], "bfloat16")


def test_non_binary64_input_into_binary128_is_refused_float64_input_is_not():
    with pytest.raises(formats.FormatError, match="round_to: binary128 .*round_exact"):
        formats.round_to(np.array([Fraction(1, 3)], dtype=object), "binary128")
    assert formats.round_to(np.array([1, 2], dtype=np.int64), "binary128").tolist() == [1, 2]

"""Cross-checks against other libraries' single roundings: numpy's float64 -> float32 and
float64 -> float16 casts, and ml_dtypes' float32 -> bfloat16 / float8 / float6 / float4 casts.
ml_dtypes' float64 -> bfloat16 cast rounded twice (through float32) before ml_dtypes 0.7:
we are right where it was not; from 0.7 it rounds once and agrees everywhere."""

import gmpy2
import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage import formats


def _inputs(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.uniform(-160, 140, n))
    return np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0,
                               65519.999, 2.0 ** -25, 3.4028235e38, 3.4028236e38, 1e-46]])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("name, dtype", [("binary32", np.float32), ("binary16", np.float16)])
def test_matches_numpy_cast_from_float64(name, dtype):
    x = _inputs(2_000_000, 1)
    ours = formats.round_to(x, name)
    theirs = x.astype(dtype).astype(np.float64)
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs))


ML = ["bfloat16", "float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
      "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float6_e2m3fn",
      "float6_e3m2fn", "float4_e2m1fn"]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("name", ML)
def test_matches_ml_dtypes_single_rounding_from_float32(name):
    x32 = _inputs(1_000_000, 2).astype(np.float32)
    fmt = formats.get(name)
    if not fmt.has_nan:
        # ml_dtypes turns NaN into -0 in these formats; we give +0 and flag invalid.
        x32 = x32[~np.isnan(x32)]
    x = x32.astype(np.float64)
    ours = formats.round_to(x, fmt)
    theirs = x32.astype(getattr(ml_dtypes, name)).astype(np.float64)
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.array_equal(np.signbit(ours[~np.isnan(ours)]), np.signbit(theirs[~np.isnan(theirs)]))


# ml_dtypes before 0.7 cast float64 -> bfloat16 through float32 (two roundings); 0.7 rounds
# once, correctly.
ML_DTYPES_07 = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) >= (0, 7)


def test_ml_dtypes_float64_to_bfloat16_double_rounding_is_wrong_and_we_are_right():
    # 1 + 2**-8 is the midpoint of bfloat16's 1 and 1 + 2**-7; x lies just above it, so the
    # correct rounding is up.  Rounded to float32 first, x becomes the midpoint itself and
    # ties-to-even then goes down to 1 (ml_dtypes before 0.7).
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -30])
    with gmpy2.context(precision=8, round=gmpy2.RoundToNearest):
        exact = float(gmpy2.mpfr(float(x[0])) + 0)
    assert exact == 1 + 2.0 ** -7
    assert float(formats.round_to(x, "bfloat16")[0]) == exact
    theirs = float(x.astype(ml_dtypes.bfloat16).astype(np.float64)[0])
    assert theirs == (exact if ML_DTYPES_07 else 1.0)


def test_ml_dtypes_float64_double_rounding_count_is_small_but_nonzero_before_0_7():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1_000_000)
    ours = formats.round_to(x, "bfloat16")
    theirs = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    wrong = np.flatnonzero(ours != theirs)
    if ML_DTYPES_07:
        assert wrong.size == 0
        return
    assert 0 < wrong.size < 1000
    # Every disagreement is one where float32 landed exactly on a bfloat16 midpoint.
    mid32 = x[wrong].astype(np.float32).astype(np.float64)
    assert np.all(formats.round_to(mid32, "bfloat16", "toward_zero") != mid32)

"""Every bit pattern of every format of at most 16 bits: decode/encode round trips, and
every value, midpoint and near-midpoint between neighbours rounded in every mode by the fast
path agrees with the exact path, and the exact path agrees with MPFR."""

import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage import formats
from mpfr_oracle import MODES7
from rounding_checks import gap_points, three_way

CATALOG_SMALL = [name for name, f in formats.CATALOG.items() if f.bits <= 16]
# Options and encodings the catalog does not exercise: saturation, flush to zero, custom
# biases, an IEEE 4-bit format, a one-bit significand.
VARIANTS = ["e5m2-sat", "e4m3fn-sat", "e4m3fnuz-sat", "e3m4-ftz", "e5m2fnuz-ftz", "e3m2",
            "e2m1", "e4m0finite", "e3m1fn", "e4m3b4fn", "e2m3b0finite", "e4m3fn-ftz-sat"]
ALL_SMALL = CATALOG_SMALL + VARIANTS
MODES = MODES7 + ("stochastic",)

# Independent decoders: numpy's float16 and ml_dtypes' types read a bit pattern themselves.
INDEPENDENT = {"binary16": np.float16, "bfloat16": ml_dtypes.bfloat16}
INDEPENDENT.update({name: getattr(ml_dtypes, name) for name in CATALOG_SMALL
                    if hasattr(ml_dtypes, name)})


def _patterns(fmt):
    return np.arange(1 << fmt.bits, dtype=np.uint64)


@pytest.mark.parametrize("name", ALL_SMALL)
def test_decode_encode_round_trip_every_pattern(name):
    fmt = formats.get(name)
    bits = _patterns(fmt)
    vals = formats.decode(bits, fmt)
    nan = np.isnan(vals)
    assert nan.sum() == (1 << fmt.bits) - fmt.finite_count - 2 * fmt.has_inf
    again = formats.encode(vals[~nan], fmt)
    assert np.array_equal(again, bits[~nan])
    # Ordinals count values: consecutive finite values are one apart.
    finite = formats.values(fmt)
    ords = formats.ordinal(finite, fmt)
    assert np.all(np.diff(ords)[np.diff(finite) > 0] == 1)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
@pytest.mark.parametrize("name", sorted(INDEPENDENT))
def test_decode_matches_numpy_and_ml_dtypes(name):
    fmt = formats.get(name)
    bits = _patterns(fmt)
    storage = np.uint16 if fmt.bits > 8 else np.uint8
    theirs = bits.astype(storage).view(INDEPENDENT[name]).astype(np.float64)
    ours = formats.decode(bits, fmt)
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.array_equal(np.signbit(ours[~np.isnan(ours)]), np.signbit(theirs[~np.isnan(theirs)]))


@pytest.mark.parametrize("name", ALL_SMALL)
def test_every_gap_point_in_every_mode_fast_exact_mpfr(name):
    fmt = formats.get(name)
    points = gap_points(fmt)
    assert three_way(points, fmt, MODES) == []

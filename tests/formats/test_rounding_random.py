"""Random and adversarial binary64 inputs for bfloat16, binary16, binary32, tf32 and every
float8/6/4 format, all modes: fast path == exact path == MPFR.  ROUNDOFF_RANDOM_N sets the
inputs per format (default 12,000: 168,000 inputs, 1.3 million roundings per path)."""

import os
import zlib

import numpy as np
import pytest

from roundoff_coverage import formats
from mpfr_oracle import MODES7
from rounding_checks import three_way

N = int(os.environ.get("ROUNDOFF_RANDOM_N", "12000"))
NAMES = ["bfloat16", "binary16", "binary32", "tf32"] + [
    name for name in formats.CATALOG if name.startswith(("float8", "float6", "float4"))]


def adversarial_inputs(fmt, n, seed):
    """A mix: log-uniform magnitudes over the whole range (and beyond it), points a few
    binary64 ulps from the format's values and midpoints, the overflow threshold, the
    subnormal range, and raw binary64 bit patterns."""
    rng = np.random.default_rng(seed)
    k = n // 6
    lo, hi = np.log2(fmt.min_subnormal) - 3, np.log2(fmt.max_finite) + 2
    mags = np.exp2(rng.uniform(lo, hi, k)) * rng.choice([-1.0, 1.0], k)
    grid = formats.round_to(mags, fmt, "toward_zero")
    step = formats.ulp(grid, fmt)
    near_grid = grid + np.sign(mags) * step * rng.choice([0.0, 0.5, 1.0], k)
    jitter = rng.integers(-3, 4, k) * np.abs(near_grid) * 2.0 ** -52
    near = near_grid + jitter
    top = fmt.max_finite
    top_step = float(formats.ulp(top, fmt))
    overflow = top + top_step * rng.choice([0.25, 0.5, 0.75, 1.0, 1.5], k) \
        * (1 + rng.integers(-2, 3, k) * 2.0 ** -52)
    sub = rng.uniform(-2, 2, k) * fmt.min_normal
    raw = rng.integers(0, 1 << 63, k, dtype=np.int64).view(np.float64)
    raw = np.where(rng.random(k) < 0.5, raw, -raw)
    rest = n - 5 * k
    normal = rng.standard_normal(rest) * np.exp2(rng.integers(-8, 8, rest))
    return np.concatenate([mags, near, overflow, sub, raw, normal])


@pytest.mark.parametrize("name", NAMES)
def test_random_and_adversarial_inputs_all_modes(name):
    fmt = formats.get(name)
    x = adversarial_inputs(fmt, N, seed=zlib.crc32(name.encode()))
    assert x.size == N
    assert three_way(x, fmt, MODES7 + ("stochastic",)) == []


@pytest.mark.parametrize("name", NAMES + ["binary64", "e4m0finite", "e5m2fnuz-ftz"])
def test_round_encode_is_encode_of_round_to(name):
    """round_encode (storage patterns in one pass, with and without flags) gives the patterns
    of round_to's values, in every mode, and the same flags."""
    fmt = formats.get(name)
    x = adversarial_inputs(formats.get("bfloat16") if fmt.bits > 32 else fmt, 60_000,
                           seed=zlib.crc32(name.encode()) + 1)
    for mode in MODES7 + ("stochastic",):
        values, flags = formats.round_to(x, fmt, mode, with_flags=True, seed=5)
        want = formats.encode(values, fmt)
        got = formats.round_encode(x, fmt, mode, seed=5)
        got_f, got_flags = formats.round_encode(x, fmt, mode, with_flags=True, seed=5)
        assert np.array_equal(got.astype(np.uint64), want), mode
        assert np.array_equal(got_f.astype(np.uint64), want), mode
        assert np.array_equal(got_flags, flags), mode

"""Formats: derived constants against published values, spec parsing and its errors,
exact rounding of every kind of real, neighbours and ulps, stochastic rounding."""

import os
import subprocess
import sys
import textwrap
from fractions import Fraction

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.formats import FormatError

# Published maxima and smallest values (IEEE 754-2019 table 3.5, OCP 8-bit FP spec, OCP MX
# spec, ml_dtypes' finfo); exact literals, not derived by this code.
KNOWN = {
    "binary16": (65504, Fraction(1, 2**24), Fraction(1, 2**14), 11),
    "bfloat16": (Fraction(2**8 - 1) * 2**120, Fraction(1, 2**133), Fraction(1, 2**126), 8),
    "binary32": (Fraction(2**24 - 1) * 2**104, Fraction(1, 2**149), Fraction(1, 2**126), 24),
    "float8_e5m2": (57344, Fraction(1, 2**16), Fraction(1, 2**14), 3),
    "float8_e4m3fn": (448, Fraction(1, 2**9), Fraction(1, 2**6), 4),
    "float8_e4m3fnuz": (240, Fraction(1, 2**10), Fraction(1, 2**7), 4),
    "float8_e5m2fnuz": (57344, Fraction(1, 2**17), Fraction(1, 2**15), 3),
    "float6_e2m3fn": (Fraction(15, 2), Fraction(1, 8), 1, 4),
    "float6_e3m2fn": (28, Fraction(1, 16), Fraction(1, 4), 3),
    "float4_e2m1fn": (6, Fraction(1, 2), 1, 2),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_derived_constants_match_published_values(name):
    fmt = formats.get(name)
    top, tiny, normal, p = KNOWN[name]
    assert fmt.max_finite_exact == top
    assert fmt.min_subnormal_exact == tiny
    assert fmt.min_normal_exact == normal
    assert fmt.precision == p
    assert fmt.unit_roundoff_exact == Fraction(1, 2**p)
    assert fmt.eta_exact == tiny / 2


def test_finite_counts_by_enumeration():
    for name, fmt in formats.CATALOG.items():
        if fmt.bits <= 16:
            bits = np.arange(1 << fmt.bits, dtype=np.uint64)
            assert np.isfinite(formats.decode(bits, fmt)).sum() == fmt.finite_count, name
    assert formats.get("binary32").finite_count == 2**32 - 2**24


def test_spec_forms_and_aliases():
    assert formats.get("e5m10") is formats.CATALOG["binary16"]
    assert formats.get("half") is formats.CATALOG["binary16"]
    assert formats.get("E4M3FN") is formats.CATALOG["float8_e4m3fn"]
    assert formats.get("e2m1fn") is formats.CATALOG["float4_e2m1fn"]      # ml_dtypes' name
    assert formats.get("exp_bits=5,man_bits=2,encoding=fnuz,bias=16") == formats.get("float8_e5m2fnuz")
    custom = formats.get("e4m3b11fnuz")
    assert custom == formats.CATALOG["float8_e4m3b11fnuz"] and custom.max_finite == 30
    sat = formats.get("e5m2-sat")
    assert sat.saturate and formats.get(sat.spec) == sat
    for fmt in formats.CATALOG.values():
        assert formats.get(fmt.spec) == fmt


@pytest.mark.parametrize("spec, message", [
    ("bfloat61", "close: bfloat16"),
    ("binary17", "close: binary16"),
    ("e0m3", "exp_bits must be in [1, 24]"),
    ("e30m3", "exp_bits must be in [1, 24]"),
    ("e5m5000", "man_bits must be in [0, 4096]"),
    ("e1m3", "no normal binade"),
    ("e5m0", "ieee encoding needs man_bits >= 1"),
    ("exp_bits=5", "missing man_bits"),
    ("exp_bits=5,man_bits=x", "man_bits must be an integer"),
    ("exp_bits=5,man_bits=2,encoding=weird", "encoding must be one of"),
    ("exp_bits=5,man_bits=2,size=3", "unknown key 'size'"),
])
def test_bad_specs_give_one_line_errors(spec, message):
    with pytest.raises(FormatError) as info:
        formats.get(spec)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_formats_file(tmp_path):
    path = tmp_path / "f.toml"
    path.write_text(textwrap.dedent("""
        [formats.tiny_sat]
        exp_bits = 3
        man_bits = 2
        saturate = true
        [formats.e4m3_b9]
        exp_bits = 4
        man_bits = 3
        bias = 9
        encoding = "fnuz"
    """))
    known = formats.load_formats_file(path)
    assert known["tiny_sat"].saturate and known["tiny_sat"].max_finite == 14
    assert formats.get("e4m3_b9", known).max_finite == 1.875 * 2 ** 6
    assert formats.round_to([1e9], known["tiny_sat"])[0] == 14
    path.write_text("[formats.x]\nexp_bits = 3\n")
    with pytest.raises(FormatError, match="missing man_bits"):
        formats.load_formats_file(path)
    path.write_text("[formats.x\n")
    with pytest.raises(FormatError, match="not valid TOML"):
        formats.load_formats_file(path)


def _mpfr_round(x, p, emin_mpfr, emax_mpfr, rnd):
    """MPFR's rounding of a rational or decimal into a binary format (subnormals emulated)."""
    with gmpy2.context(precision=p, emin=emin_mpfr, emax=emax_mpfr, subnormalize=True, round=rnd):
        return gmpy2.mpfr(x)


MPFR_MODES = {"nearest_even": gmpy2.RoundToNearest, "toward_zero": gmpy2.RoundToZero,
              "upward": gmpy2.RoundUp, "downward": gmpy2.RoundDown}


@pytest.mark.parametrize("name", ["binary128", "binary256", "binary32", "bfloat16"])
def test_exact_path_rationals_any_width_match_mpfr(name):
    fmt = formats.get(name)
    rng = np.random.default_rng(7)
    for _ in range(300):
        num = int(rng.integers(1, 2**62)) * (1 if rng.random() < 0.5 else -1)
        den = int(rng.integers(1, 2**62))
        scale = int(rng.integers(fmt.qmin - 10, fmt.emax + 2))
        q = Fraction(num, den) * Fraction(2) ** scale
        for mode, rnd in MPFR_MODES.items():
            ours = formats.round_exact(q, fmt, mode)
            theirs = _mpfr_round(gmpy2.mpq(q.numerator, q.denominator), fmt.precision,
                                 fmt.qmin + 1, fmt.emax + 1, rnd)
            if gmpy2.is_infinite(theirs):
                assert ours.flags & formats.OVERFLOW
                continue
            assert ours.to_mpfr() == theirs, (name, mode, q)


def test_exact_path_reads_every_kind_of_real():
    b32 = formats.get("binary32")
    tenth = formats.round_exact("0.1", b32).to_fraction()
    assert tenth == Fraction(13421773, 2**27)
    assert formats.round_exact(Fraction(1, 10), b32).to_fraction() == tenth
    assert formats.round_exact(gmpy2.mpq(1, 10), b32).to_fraction() == tenth
    assert formats.round_exact(gmpy2.mpfr("0.1", 200), b32).to_fraction() == tenth
    assert formats.round_exact(0.1, b32).to_fraction() == tenth
    assert formats.round_exact(10**40, b32).flags == formats.OVERFLOW | formats.INEXACT
    assert formats.round_exact("-0", b32).to_float() == 0.0
    assert str(formats.round_exact("-0", b32).to_float()) == "-0.0"
    assert formats.round_exact("-inf", "float8_e4m3fn").flags == formats.INVALID
    nan = formats.round_exact("nan", "float4_e2m1fn")
    assert nan.to_float() == 0.0 and nan.flags == formats.INVALID
    assert formats.round_exact("1e-50", b32, "upward").to_float() == 2.0 ** -149
    with pytest.raises(ValueError, match="not a decimal number"):
        formats.round_exact("0x1p3", b32)
    with pytest.raises(ValueError, match="rounding mode must be one of"):
        formats.round_exact(1, b32, "nearest")


def test_wide_formats_decode_to_mpfr_and_round_trip():
    b128 = formats.get("binary128")
    third = formats.round_exact(Fraction(1, 3), b128)
    with gmpy2.context(precision=113):
        assert third.to_mpfr() == gmpy2.mpfr(1) / 3
    bits = formats.encode(np.array([1.5, -2.0 ** -1074]), b128)
    assert bits[0] == 0x3FFF8 << 108
    back = formats.decode(bits, b128)
    assert back[0] == 1.5 and back[1] == gmpy2.mpfr(-2.0 ** -1074)
    x = np.array([1e300, -5e-324, np.inf, np.nan])
    assert np.array_equal(formats.round_to(x, b128), x, equal_nan=True)


def test_neighbours_and_ulp_agree_with_enumeration():
    for name in ["bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"]:
        fmt = formats.get(name)
        v = formats.values(fmt, signed_zeros=False)
        assert np.array_equal(formats.next_up(v[:-1], fmt), v[1:])
        assert np.array_equal(formats.next_down(v[1:], fmt), v[:-1])
        assert formats.next_up(v[-1:], fmt)[0] == np.inf
        # For x >= 0, ulp(x) is the spacing of x's binade: the gap to the next value.
        pos = v[v >= 0][:-1]
        gaps = np.diff(v[v >= 0])
        assert np.array_equal(formats.ulp(pos, fmt), gaps)
    assert formats.ulp(np.array([1.0]), "binary32")[0] == 2.0 ** -23
    assert formats.ulp(np.array([0.0]), "binary16")[0] == 2.0 ** -24


def test_encode_refuses_values_not_in_the_format():
    with pytest.raises(ValueError, match="not a value of binary16"):
        formats.encode(np.array([0.1]), "binary16")
    with pytest.raises(ValueError, match="not a value of float8_e4m3fn"):
        formats.encode(np.array([np.inf]), "float8_e4m3fn")


def test_round_to_errors():
    with pytest.raises(ValueError, match="rounding mode must be one of"):
        formats.round_to([1.0], "binary16", "up")
    with pytest.raises(FormatError, match="use formats.round_exact"):
        formats.round_to([1.0], "e15m20")
    with pytest.raises(ValueError, match="seed must be an integer"):
        formats.round_to([1.0], "binary16", "stochastic", seed=-1)


def test_stochastic_rounding_is_unbiased_and_reproducible():
    fmt = formats.get("bfloat16")
    n = 400_000
    for frac in (0.3, 0.5, 0.875):
        x = np.full(n, 1.0 + frac * 2.0 ** -7)
        r = formats.round_to(x, fmt, "stochastic", seed=11)
        assert set(np.unique(r)) == {1.0, 1.0 + 2.0 ** -7}
        up = np.mean(r > 1.0)
        sigma = np.sqrt(frac * (1 - frac) / n)
        assert abs(up - frac) < 5 * sigma
        assert abs(r.mean() - x[0]) < 5 * sigma * 2.0 ** -7
    x = np.random.default_rng(5).standard_normal(10_000)
    a = formats.round_to(x, fmt, "stochastic", seed=3)
    assert np.array_equal(a, formats.round_to(x, fmt, "stochastic", seed=3))
    assert not np.array_equal(a, formats.round_to(x, fmt, "stochastic", seed=4))
    # Chunked with offsets: the same bits as rounding the whole array.
    parts = [formats.round_to(x[i:i + 999], fmt, "stochastic", seed=3, offset=i)
             for i in range(0, x.size, 999)]
    assert np.array_equal(np.concatenate(parts), a)
    # Negative values: probability of the lower (more negative) neighbour is the distance up.
    neg = formats.round_to(np.full(n, -(1.0 + 0.25 * 2.0 ** -7)), fmt, "stochastic", seed=9)
    assert abs(np.mean(neg < -1.0) - 0.25) < 5 * np.sqrt(0.25 * 0.75 / n)


def test_same_source_compiles_for_the_cuda_simulator():
    """The scalar routine compiled as a CUDA device function (simulator) gives the bits of
    round_to in every mode (the kernels issue runs it on a real GPU)."""
    script = textwrap.dedent("""
        import os
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        import numpy as np
        from numba import cuda
        from roundoff_coverage import formats
        from roundoff_coverage.formats.kernel import make_rounder
        from roundoff_coverage.formats.fast import round_params
        round_bits, round_in_range = make_rounder(cuda.jit(device=True))[:2]

        @cuda.jit
        def kernel(xb, out, fl, p, qmin, emax, mtop, params, mode, seed):
            i = cuda.grid(1)
            if i < xb.size:
                b = xb[i]
                e = (b >> 52) & 0x7FF
                if p >= 2 and e >= qmin + p + 1022 and e <= emax + 1022:
                    r, f = round_in_range(b, 53 - p, mode, seed, i)
                else:
                    r, f = round_bits(b, p, qmin, emax, mtop, params, mode, seed, i)
                out[i] = r
                fl[i] = f

        rng = np.random.default_rng(1)
        x = np.concatenate([rng.standard_normal(60) * 10.0 ** rng.integers(-8, 8, 60),
                            [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-320, 65520.0, 464.0]])
        for name in ["bfloat16", "binary16", "float8_e4m3fn", "float4_e2m1fn", "binary64"]:
            fmt = formats.get(name)
            for m, mode in enumerate(formats.MODES):
                out = np.zeros(x.size, np.int64)
                fl = np.zeros(x.size, np.int64)
                kernel[2, 64](x.view(np.int64), out, fl, *round_params(fmt), m, 12345)
                ref, rf = formats.round_to(x, fmt, mode, with_flags=True, seed=12345)
                assert np.array_equal(out, ref.view(np.int64)), (name, mode)
                assert np.array_equal(fl, rf), (name, mode)
        print("agree")
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=root, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "agree" in out.stdout


def test_holds_matches_exhaustive_rounding():
    # holds(narrow) says rounding narrow's values into the wider format is the identity; the
    # oracle rounds every value of narrow (signed zeros, inf and NaN where it has them) in
    # every mode and compares bit for bit.
    names = ["float4_e2m1fn", "float6_e3m2fn", "float8_e4m3fn", "float8_e4m3fnuz",
             "float8_e5m2", "binary16", "bfloat16", "binary32"]
    flushing = formats.BinaryFormat(8, 23, flush_subnormals=True, name="binary32-ftz")
    wide = [formats.get(n) for n in names] + [formats.get("binary64"), flushing]
    seen = {True: 0, False: 0}
    for narrow in (formats.get(n) for n in names[:-1]):
        vals = formats.values(narrow)
        if narrow.encoding == "ieee":
            vals = np.concatenate([vals, [np.inf, -np.inf, np.nan]])
        elif narrow.encoding == "fn":
            vals = np.concatenate([vals, [np.nan]])
        for w in wide:
            same = all(np.array_equal(formats.round_to(vals, w, mode, seed=3).view(np.int64),
                                      vals.view(np.int64)) for mode in formats.MODES)
            assert w.holds(narrow) == same, (w.label, narrow.label)
            seen[same] += 1
    assert seen[True] >= 10 and seen[False] >= 10

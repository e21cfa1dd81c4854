"""``assert_ulp_close`` (reports/testing.py) and its pytest plugin (reports/pytest_plugin.py).

Oracles independent of the code under test: exact rationals built from each format's
definition (1.5 is 2**0 * (1 + 2**-1): exponent field = bias, top fraction bit set, and the
next value down is 1.5 - 2**-man_bits); ml_dtypes' conversions, whose round-to-nearest-even
from float32 is the single rounding of a value exact in float32, and its bit patterns;
truncation by clearing low bits of float32 words (an error in [0, 1) ulp); brute-force
nearest search over every value of a float8 format with Fractions; an 11-bit mpmath context.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.reports import assert_ulp_close
from conftest import mp_context

ROOT = Path(__file__).resolve().parents[2]
NARROW = [name for name, f in formats.CATALOG.items()
          if f.fits_binary64 and f.man_bits >= 1 and f.emax >= 1]


def failure(*args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        assert_ulp_close(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize("name", NARROW + ["binary128"])
def test_one_ulp_off_fails_at_half_and_passes_at_one(name):
    fmt = formats.get(name)
    m = fmt.man_bits
    exact = [Fraction(1), Fraction(3, 2), Fraction(3, 2) - Fraction(1, 2**m)]
    wide = not fmt.fits_binary64
    actual = np.array([Fraction(1), Fraction(3, 2), Fraction(3, 2)], dtype=object) if wide \
        else np.array([1.0, 1.5, 1.5])
    assert_ulp_close(actual, exact, fmt, max_ulp=1)
    assert_ulp_close(actual[:2], exact[:2], name, max_ulp=0)
    text = failure(actual, exact, name, max_ulp=0.5)
    # 1.5: sign 0, exponent field = bias (2**0), fraction 1 followed by m - 1 zeros; the
    # exact value 1.5 - 2**-m lies in the same binade [1, 2), whose ulp is 2**-m: error +1.
    bits = (fmt.bias << m) | (1 << (m - 1))
    assert f"1 of 3 elements not within 0.5 ulp in {fmt.label}" in text
    shown = "3/2 (~1.5)" if wide else "1.5"
    assert f"worst at index (2,): actual {shown} (bits 0x{bits:0{(fmt.bits + 3) // 4}x})" in text
    assert f"exact {exact[2]}," in text or f"exact {exact[2]} (~" in text   # n/d, or n
    assert "error +1 ulp" in text


def test_float8_message_names_element_bits_exact_and_error():
    # e4m3fn around 1: ulp 2**-3.  1.375 is 1 ulp above 1.25; ml_dtypes gives its bits.
    actual = np.array([[0.5, 1.375], [448.0, -2.0]])
    exact = np.array([[Fraction(1, 2), Fraction(5, 4)], [Fraction(448), Fraction(-2)]],
                     dtype=object)
    text = failure(actual, exact, formats.get("float8_e4m3fn"), max_ulp=0.5, msg="my kernel")
    word = int(np.array([1.375], dtype=ml_dtypes.float8_e4m3fn).view(np.uint8)[0])
    assert text.startswith("my kernel: 1 of 4 elements not within 0.5 ulp in float8_e4m3fn")
    assert f"worst at index (0, 1): actual 1.375 (bits 0x{word:02x}), exact 5/4" in text
    assert "error +1 ulp" in text


def _e4m3fn_values():
    """Every finite float8_e4m3fn value (ml_dtypes decodes the 256 bit patterns)."""
    vals = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return sorted({Fraction(v) for v in vals if np.isfinite(v)})


def _nearest_even(q, values):
    """The value nearest to q, ties to the one with an even last fraction bit."""
    best = min(values, key=lambda v: abs(v - q))
    ties = [v for v in values if abs(v - q) == abs(best - q)]
    if len(ties) == 1:
        return ties[0]
    word = {v: int(np.array([float(v)], dtype=ml_dtypes.float8_e4m3fn).view(np.uint8)[0])
            for v in ties}
    return next(v for v in ties if word[v] % 2 == 0)


def test_exhaustive_float8_correctly_rounded_passes_and_next_value_fails():
    values = _e4m3fn_values()
    exact = [v * Fraction(3, 5) for v in values]          # never a float64, rarely a tie
    rounded = [_nearest_even(q, values) for q in exact]
    actual = np.array([float(r) for r in rounded])
    ex = np.array(exact, dtype=object)
    assert_ulp_close(actual, ex, "float8_e4m3fn", max_ulp=0.5)
    # Move every result one value away from exact (up where it rounded down): each error is
    # then in (0.5, 1.5] ulp -- fails at 0.5, passes at 1.5.
    index = {v: i for i, v in enumerate(values)}
    moved = []
    for q, r in zip(exact, rounded):
        i = index[r] + (1 if r <= q else -1)
        moved.append(float(values[min(max(i, 0), len(values) - 1)]))
    text = failure(np.array(moved), ex, "float8_e4m3fn", max_ulp=0.5)
    assert f"of {len(values)} elements not within 0.5 ulp" in text
    assert_ulp_close(np.array(moved), ex, "float8_e4m3fn", max_ulp=1.5)


def test_exhaustive_bfloat16_rounding_versus_truncation():
    words = np.arange(2**16, dtype=np.uint32) << 16          # every bfloat16 as float32 bits
    x = words.view(np.float32)
    x = x[np.isfinite(x)].astype(np.float64)
    exact = x * 0.75            # 10 significant bits at most: exact in float32 and float64
    nearest = exact.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    assert_ulp_close(nearest, exact, "bfloat16", max_ulp=0.5)
    # Truncation: clear the 16 low bits of the float32 word; error in [0, 1) ulp.
    chopped = ((exact.astype(np.float32).view(np.uint32) >> 16) << 16).view(np.float32)
    chopped = chopped.astype(np.float64)
    text = failure(chopped, exact, "bfloat16", max_ulp=0.5)
    assert "not within 0.5 ulp in bfloat16" in text
    assert_ulp_close(chopped, exact, "bfloat16", max_ulp=1)


def test_mpmath_and_integer_exact_values():
    ctx11 = mp_context(11)                     # a local context at binary16's precision
    ctx = mp_context(100)
    xs = [ctx.mpf(k) / 8 for k in range(-24, 25)]
    exact = np.array([ctx.exp(x) for x in xs], dtype=object)
    actual = np.array([float(ctx11.exp(ctx11.mpf(x))) for x in xs])  # one rounding to 11 bits
    assert_ulp_close(actual, exact, "binary16")
    # Integers are exact; 2**70 overflows binary16, and inf is its correct rounding.
    assert_ulp_close(np.array([1.0, 1024.0, np.inf]), np.array([1, 1024, 2**70], dtype=object),
                     "binary16")
    assert_ulp_close(3.0, 3, "float8_e5m2", max_ulp=0)


def test_special_values():
    assert_ulp_close(np.array([np.nan, np.inf, -np.inf, -0.0]),
                     np.array([np.nan, np.inf, -np.inf, 0.0]), "binary16", max_ulp=0)
    text = failure(np.array([1.0, np.nan]), np.array([1.0, 2.0]), "bfloat16")
    assert "worst at index (1,): actual nan (bits 0x7fc0), exact 2.0" in text
    assert "error not measurable (nan_from_finite)" in text
    text = failure(np.array([np.inf]), np.array([-np.inf]), "binary16")
    assert "actual inf (bits 0x7c00), exact -inf, error not measurable (inf_sign)" in text
    text = failure(np.array([1.0]), np.array([np.inf]), "binary16")
    assert "error not measurable (missed_inf)" in text
    text = failure(np.array([2.0]), np.array([np.nan]), "float8_e4m3fn")
    assert "(missed_nan)" in text


@pytest.mark.parametrize("args, words", [
    ((np.array([1.1]), 1.1, "bfloat16"), "is not a value of bfloat16"),
    ((np.array([np.inf]), np.inf, "float8_e4m3fn"), "is not a value of float8_e4m3fn"),
    ((np.ones(2), np.ones(3), "binary16"), "do not broadcast"),
    ((1.0, 1.0, "binary16", -0.5), "max_ulp must be a number >= 0"),
])
def test_arguments_that_cannot_be_compared_are_value_errors(args, words):
    with pytest.raises(ValueError, match=None) as info:
        assert_ulp_close(*args)
    assert words in str(info.value)


def test_pytest_plugin_fixture_in_a_users_test_run(tmp_path):
    """A user's test file that asks for the fixture: one test passes, one fails with the
    worst element in pytest's report."""
    (tmp_path / "test_user.py").write_text(textwrap.dedent("""
        import numpy as np

        def test_good(assert_ulp_close):
            assert_ulp_close(np.array([0.5, 1.5]), [0.5, 1.5], "float8_e4m3fn", max_ulp=0)

        def test_bad(assert_ulp_close):
            assert_ulp_close(np.array([1.125]), [1.0], "float8_e4m3fn", max_ulp=0.5)
    """))
    # The plugin as pytest finds it for the installed package: its entry point (pytest11).
    from importlib.metadata import entry_points
    assert any(ep.value == "roundoff_coverage.reports.pytest_plugin"
               for ep in entry_points(group="pytest11"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_user.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "1 of 1 element not within 0.5 ulp in float8_e4m3fn" in out
    assert "actual 1.125 (bits 0x39), exact 1.0, error +1 ulp" in out


def test_plugin_module_imports_nothing_heavy():
    code = ("import sys, roundoff_coverage.reports.pytest_plugin; "
            "print(sorted(m for m in ('numpy', 'numba', 'roundoff_coverage.numerics', 'pandas') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_entry_point_is_declared():
    import tomllib
    with open(ROOT / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert project["entry-points"]["pytest11"] == {"roundoff_coverage": "roundoff_coverage.reports.pytest_plugin"}

"""roundoff-coverage measure: functions this project did not write, against exact values.

Oracles are independent of numerics.screen and numerics.resolve: MPFR through gmpy2 (a
context with the format's precision and exponent range, subnormals on) gives the correctly
rounded value of every input, and mpmath at 200 bits the exact value an ulp error is taken
from, with the ulp of the format computed here from its definition.
"""

from __future__ import annotations

import json
import math

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.engine import measure
from roundoff_coverage.reports.cli import main
from conftest import mp_context, mpfr_context, one_error

CTX = mp_context(200)


def _cr_exp(x: float, fmt) -> float:
    """exp(x) correctly rounded into ``fmt`` by MPFR."""
    with mpfr_context(fmt) as ctx:
        return float(ctx.exp(gmpy2.mpfr(x)))


def _ulp_error(computed: float, x: float, fmt) -> float:
    """(computed - exp(x)) / ulp(exp(x)), exp by mpmath at 200 bits, ulp from the format's
    definition (2**max(e - p + 1, qmin) for 2**e <= |v| < 2**(e+1))."""
    v = CTX.exp(CTX.mpf(x))
    e = int(CTX.floor(CTX.log(v, 2)))
    q = max(min(e, fmt.emax) - fmt.precision + 1, fmt.qmin)
    return float((CTX.mpf(computed) - v) / CTX.ldexp(1, q))


def _finite_values(fmt):
    return formats.values(fmt)


# ----- known errors are found exactly ----------------------------------------------------------

def _correct_exp16(x):
    """A correctly rounded binary16 exp (MPFR), as a plain vectorized Python function."""
    return np.array([_cr_exp(float(v), formats.get("binary16")) if np.isfinite(v) else np.exp(v)
                     for v in np.asarray(x, dtype=np.float64)])


@pytest.fixture(scope="module")
def exp16_table():
    """{float16 bits: correctly rounded exp} for every pattern (MPFR)."""
    fmt = formats.get("binary16")
    x = formats.decode(np.arange(1 << 16, dtype=np.uint64), fmt)
    with np.errstate(all="ignore"):
        return x, _correct_exp16(x)


def test_a_correctly_rounded_function_measures_at_most_half_an_ulp(exp16_table):
    x, y = exp16_table
    lookup = {float(a): float(b) for a, b in zip(x, y) if not np.isnan(a)}

    def exp16(v):
        return np.array([lookup.get(float(a), math.nan) for a in v])
    o = measure.measure(exp16, "binary16", samples=None, reference="exp")
    r = o.row
    assert r["samples"] == 1 << 16 and r["exhaustive"]
    assert r["incorrectly_rounded"] == 0
    assert 0.49 < r["max_ulp"] <= 0.5


def test_a_perturbed_function_is_found_exactly(exp16_table):
    """One ulp up on 40 known finite inputs: exactly those are not correctly rounded, and
    the maximum error is the largest of theirs, computed here with mpmath."""
    fmt = formats.get("binary16")
    x, y = exp16_table
    rng = np.random.default_rng(5)
    finite = np.flatnonzero(np.isfinite(y) & (y > 0) & (y < 60000) & np.isfinite(x))
    bad = set(rng.choice(finite, 40, replace=False).tolist())
    lookup = {}
    for i, (a, b) in enumerate(zip(x, y)):
        if not np.isnan(a):
            lookup[float(a)] = float(np.nextafter(np.float16(b), np.float16(np.inf))) \
                if i in bad else float(b)

    def perturbed(v):
        return np.array([lookup.get(float(a), math.nan) for a in v])
    r = measure.measure(perturbed, "binary16", samples=None, reference="exp").row
    assert r["incorrectly_rounded"] == 40
    errs = {i: _ulp_error(lookup[float(x[i])], float(x[i]), fmt) for i in bad}
    worst = max(errs, key=lambda i: abs(errs[i]))
    assert abs(r["max_ulp"] - abs(errs[worst])) < 1e-12
    assert int(r["worst"]["inputs"]["x"], 16) == worst


def test_numpy_float16_exp_exhaustively_against_mpfr(exp16_table):
    fmt = formats.get("binary16")
    x, cr = exp16_table
    with np.errstate(all="ignore"):
        got = np.exp(x.astype(np.float16)).astype(np.float64)
    fin = np.isfinite(x)
    wrong = int(np.count_nonzero(fin & (got != cr) & ~(np.isnan(got) & np.isnan(cr))))
    errs = [abs(_ulp_error(g, v, fmt)) for g, v in zip(got[fin], x[fin])
            if np.isfinite(g) and g != 0]
    r = measure.measure("numpy.exp", "binary16", samples=None).row
    assert r["samples"] == 1 << 16 and r["incorrectly_rounded"] == wrong
    assert abs(r["max_ulp"] - max(errs)) < 1e-9
    assert r["exceptional"]["overflow_to_inf"] > 0 and r["unmeasured"] == 0


def test_libm_expf_samples_against_mpfr():
    fmt = formats.get("binary32")
    m = measure.Measurement("libm:expf", "binary32", "exp", 1, 20000, 3)
    o = measure.measure("libm:expf", "binary32", samples=20000, seed=3)
    (x,) = measure.inputs(m, 0)
    x = x.copy()
    t = measure.target("libm:expf", fmt)
    got = np.array(t.call([x]))
    cr = np.array([_cr_exp(float(v), fmt) if not np.isnan(v) else math.nan for v in x])
    wrong = int(np.count_nonzero((got != cr) & ~(np.isnan(got) & np.isnan(cr))))
    assert o.row["samples"] == 20000 and o.row["incorrectly_rounded"] == wrong
    ok = np.isfinite(x) & np.isfinite(got) & (got != 0)
    top = max(abs(_ulp_error(g, v, fmt)) for g, v in zip(got[ok], x[ok]))
    assert abs(o.row["max_ulp"] - top) < 1e-9


def test_binary_function_exhaustively_in_float8():
    """float8_e4m3fn products through ml_dtypes (a float32 product, rounded once): every pair,
    errors against exact rationals."""
    from fractions import Fraction
    fmt = formats.get("float8_e4m3fn")
    r = measure.measure("numpy.multiply", fmt, samples=None).row
    assert r["samples"] == 1 << 16
    v = _finite_values(fmt)
    top = Fraction(0)
    for a in v:
        for b in v:
            exact = Fraction(float(a)) * Fraction(float(b))
            if exact == 0 or abs(exact) > Fraction(float(fmt.max_finite)):
                continue
            got = Fraction(float(formats.round_to(np.array([float(a) * float(b)]), fmt)[0]))
            e = math.floor(math.log2(abs(exact)))
            q = max(e - fmt.precision + 1, fmt.qmin)
            top = max(top, abs(got - exact) / Fraction(2) ** q)
    assert r["incorrectly_rounded"] == 0
    assert r["max_ulp"] == pytest.approx(float(top), abs=1e-12)


# ----- the run: determinism, checkpoints, errors ---------------------------------------------

def test_jobs_do_not_change_the_file_and_resume_finishes_it(tmp_path, monkeypatch):
    base = dict(samples=2 * measure.CHUNK + 7, seed=1)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    measure.measure("numpy.exp", "bfloat16", out=str(a), jobs=1, **base)
    measure.measure("numpy.exp", "bfloat16", out=str(b), jobs=2, **base)
    assert a.read_bytes() == b.read_bytes()
    # Interrupted (Ctrl-C in this process) when the second chunk arrives: the checkpoint
    # keeps the first, --resume runs the rest.
    real = measure.compact
    calls = []

    def stop_second(summ):
        calls.append(summ)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(summ)
    monkeypatch.setattr(measure, "compact", stop_second)
    c = tmp_path / "c.json"
    o = measure.measure("numpy.exp", "bfloat16", out=str(c), jobs=1, **base)
    assert o.interrupted and not c.exists()
    monkeypatch.setattr(measure, "compact", real)
    o = measure.measure("numpy.exp", "bfloat16", out=str(c), jobs=1, resume=True, **base)
    assert o.resumed == 1 and o.ran == 2
    assert c.read_bytes() == a.read_bytes()
    doc = json.loads(a.read_text())
    assert doc["meta"]["selection"]["samples"] == base["samples"]
    assert doc["rows"][0]["implementation"] == "numpy.exp"


@pytest.mark.parametrize("argv,words", [
    (["numpy.nothing"], ["not a numpy ufunc"]),
    (["numpy.exp", "--format", "binary128"], ["no dtype"]),
    (["libnosuchlib:f"], ["cannot load library"]),
    (["libm:expf", "--reference", "nosuch"], ["unknown reference", "exp"]),
    (["numpy.add", "--exhaustive"], ["at most 2**32"]),
    (["json:dumps"], ["no reference function", "--reference"]),
    (["numpy.exp", "--samples", "0"], ["--samples"]),
])
def test_bad_targets_exit_2_with_one_line(capsys, tmp_path, argv, words):
    status = main(["measure", *argv, "--out", str(tmp_path / "m.json"), "--quiet"])
    assert status == 2
    one_error(capsys.readouterr().err, *words)


def test_cli_writes_a_results_file_that_load_reads(capsys, tmp_path):
    from roundoff_coverage import reports
    out = tmp_path / "m.json"
    assert main(["measure", "numpy.log", "--format", "bfloat16", "--exhaustive", "--jobs", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not correctly rounded" in text and "max error" in text
    df = reports.load(out)
    assert len(df) == 1 and df.iloc[0]["samples"] == 1 << 16
    # Against MPFR over every pattern: log of a negative number is NaN, of 0 -inf.
    fmt = formats.get("bfloat16")
    import ml_dtypes
    x = formats.decode(np.arange(1 << 16, dtype=np.uint64), fmt)
    with np.errstate(all="ignore"):
        got = np.log(x.astype(ml_dtypes.bfloat16)).astype(np.float64)
    wrong = 0
    with mpfr_context(fmt) as ctx:
        for a, g in zip(x, got):
            want = float(ctx.log(gmpy2.mpfr(float(a)))) if not np.isnan(a) else math.nan
            wrong += not (g == want or (math.isnan(g) and math.isnan(want)))
    assert df.iloc[0]["incorrectly_rounded"] == wrong


def test_the_screen_agrees_with_mpmath_on_every_decided_input():
    """numerics.screen on numpy's binary16 sin, every input: each decided error equals the
    mpmath one to 1e-9 ulp, and its correct-rounding verdict MPFR's."""
    from roundoff_coverage.numerics import screen
    fmt = formats.get("binary16")
    x = formats.decode(np.arange(0, 1 << 16, 7, dtype=np.uint64), fmt)
    with np.errstate(all="ignore"):
        t = np.sin(x.astype(np.float16)).astype(np.float64)
    s = screen.screen(screen.REFERENCES["sin"], fmt, [x], t)
    for i in np.flatnonzero((s.code != screen.RESOLVE) & np.isfinite(x) & (x != 0)):
        v = CTX.sin(CTX.mpf(float(x[i])))
        e = int(CTX.floor(CTX.log(abs(v), 2)))
        q = max(min(e, fmt.emax) - fmt.precision + 1, fmt.qmin)
        want = float((CTX.mpf(float(t[i])) - v) / CTX.ldexp(1, q))
        tol = 1e-9 if s.cr[i] != 3 else abs(want) + 1e-9        # near 2**k: an upper bound
        assert abs(s.err[i] - want) <= tol or (s.cr[i] == 3 and abs(s.err[i]) >= abs(want))
        with mpfr_context(fmt) as ctx:
            cr = float(ctx.sin(gmpy2.mpfr(float(x[i]))))
        assert (s.cr[i] in (1, 3)) == (cr == t[i]), (x[i], t[i], cr)

"""measure --scheme: a quantizer this project did not write, against a scaled format's
definition (engine/quantizers.py).

The oracle is independent of formats.quantize: an MXFP8 E4M3 quantizer written here from the
OCP MX v1.0 specification (Algorithm 1 of Rouhani et al., arXiv:2310.10537) in plain numpy,
with exact power-of-two scaling and its own e4m3fn rounding.  It must measure no difference;
its deliberately wrong variants (a ceil scale rule, no saturation, flushed subnormals, ties
away from zero) must measure exactly the differences the oracle counts between each variant
and the correct one, in the right categories (scales, elements, dequantized values).
"""

from __future__ import annotations

import inspect
import json
import textwrap

import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage.engine import quantizers, results
from roundoff_coverage.reports.cli import measure as cli_measure
from conftest import one_error, run_cli

SCHEME = "mxfp8_e4m3"
BLOCK = 32                 # elements per scale (MX v1.0)
EMAX_ELEM = 8              # exponent of e4m3's largest normal value
# e4m3fn: the top exponent code is finite and only its mantissa 111 is NaN, so
# max = (2 - 2**-2) * 2**8 = 448; bias 7: the least normal is 2**(1 - 7).
E4M3_MAX = 448.0
E4M3_EMIN = -6
E4M3_MBITS = 3
E8M0_MIN, E8M0_MAX = -127, 127          # scales 2**-127 .. 2**127 (0xFF is NaN)


# ----- the oracle: MXFP8 E4M3 from the specification ------------------------------------------

def _round_e4m3(q, *, ties="even", saturate=True, flush=False):
    """Exact quotients ``q`` (float64) rounded to e4m3fn values: to nearest with ties to even
    (or away from zero), overflow to +-448 (saturate) or NaN, subnormal results kept (or
    flushed to zero); the sign of zero kept."""
    a = np.abs(q)
    e = np.maximum(np.frexp(a)[1] - 1, E4M3_EMIN)           # floor(log2 a), exactly
    quantum = np.ldexp(1.0, e - E4M3_MBITS)
    n = a / quantum                                           # exact: a power of two
    r = np.rint(n) if ties == "even" else np.floor(n + 0.5)   # rint: half to even
    v = r * quantum
    if flush:
        v = np.where(v < 2.0 ** E4M3_EMIN, 0.0, v)
    v = np.where(v > E4M3_MAX, E4M3_MAX if saturate else np.nan, v)
    return np.copysign(v, q)


def mx_e4m3(x, *, rule="floor", ties="even", saturate=True, flush=False, dequantize=False):
    """(elements, scales) of ``x`` in MXFP8 E4M3, blocks of 32 along the last axis (the last
    one partial): X = 2**(floor(log2 amax) - 8) (or ceil), clamped below to 2**-127, NaN above
    2**127 or for a block holding an Inf or NaN (its elements 0); an all-zero block gets
    2**-127; P = x / X rounded to e4m3."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    nb = -(-n // BLOCK)
    pad = np.zeros(x.shape[:-1] + (nb * BLOCK,))
    pad[..., :n] = x
    blocks = pad.reshape(x.shape[:-1] + (nb, BLOCK))
    bad = ~np.isfinite(blocks).all(axis=-1)
    amax = np.max(np.abs(np.where(bad[..., None], 0.0, blocks)), axis=-1)
    m, e = np.frexp(amax)                                     # amax = m * 2**e, m in [0.5, 1)
    k = e - 1 + ((m != 0.5) if rule == "ceil" else 0)
    shared = np.maximum(k - EMAX_ELEM, E8M0_MIN)
    scale = np.where(amax == 0, 2.0 ** E8M0_MIN, np.ldexp(1.0, shared))
    scale = np.where(bad | (shared > E8M0_MAX), np.nan, scale)
    with np.errstate(invalid="ignore"):
        elems = _round_e4m3(blocks / scale[..., None], ties=ties, saturate=saturate,
                            flush=flush)
    elems = np.where(np.isnan(scale)[..., None], 0.0, elems)
    elems = elems.reshape(pad.shape)[..., :n]
    if dequantize:
        return elems * np.repeat(scale, BLOCK, axis=-1)[..., :n]
    return elems, scale


def correct(x):
    return mx_e4m3(x)


def correct_values(x):
    return mx_e4m3(x, dequantize=True)


WRONG = {
    "ceil": dict(rule="ceil"),
    "nosat": dict(saturate=False),
    "flush": dict(flush=True),
    "half_away": dict(ties="away"),
}


def _same(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


def _expected(variant: dict, dtype="float32") -> dict:
    """What comparing ``variant`` with the correct quantizer on the measurement's inputs
    gives: counts of scales, elements (in blocks whose correct scale is not NaN) and
    dequantized values that differ, and the largest difference in ulps of e4m3 at the
    block's scale (inf where one value is not finite and the other is)."""
    out = dict.fromkeys(("scales", "elements", "values", "same_scale"), 0)
    out["ulp"], out["by_case"] = 0.0, {}
    for case in quantizers.cases(SCHEME, dtype=dtype):
        e0, s0 = mx_e4m3(case.x)
        e1, s1 = mx_e4m3(case.x, **variant)
        n = case.x.shape[-1]
        full0 = np.repeat(s0, BLOCK, axis=-1)[..., :n]
        full1 = np.repeat(s1, BLOCK, axis=-1)[..., :n]
        live = ~np.isnan(full0)
        ediff = live & ~_same(e0, e1)
        d0, d1 = e0 * full0, e1 * full1
        vdiff = ~_same(d0, d1)
        finite = np.isfinite(d0) & np.isfinite(d1)
        quantum = np.ldexp(1.0, np.maximum(np.frexp(np.abs(e0))[1] - 1, E4M3_EMIN)
                           - E4M3_MBITS)
        with np.errstate(invalid="ignore"):
            ulp = np.where(vdiff, np.where(finite, np.abs(d1 - d0) / (quantum * full0),
                                           np.inf), 0.0)
        out["scales"] += int((~_same(s0, s1)).sum())
        out["elements"] += int(ediff.sum())
        out["same_scale"] += int((ediff & _same(full0, full1)).sum())
        out["values"] += int(vdiff.sum())
        out["ulp"] = max(out["ulp"], float(ulp.max()))
        by = out["by_case"].setdefault(case.name, 0)
        out["by_case"][case.name] = by + int(ediff.sum())
    return out


# ----- the inputs are what they claim ---------------------------------------------------------

def test_the_adversarial_cases_hold_what_they_are_named_for():
    """Checked against the oracle's scales: ties are odd multiples of half an e4m3 quantum
    after scaling (normal and subnormal ranges), element-max holds +-448 * scale and values
    past 464 * scale (saturated), and the other cases their special values."""
    by = {c.name: c.x for c in quantizers.cases(SCHEME) if c.index == 0}
    assert set(by) == set(quantizers.CASES)
    assert all(x.dtype == np.float32 for x in by.values())
    x = by["ties"].astype(np.float64)
    _, s = mx_e4m3(x)
    q = np.abs(x / np.repeat(s, BLOCK, axis=-1)[..., :x.shape[-1]])
    quantum = np.ldexp(1.0, np.maximum(np.frexp(q)[1] - 1, E4M3_EMIN) - E4M3_MBITS)
    tie = (q / quantum) % 1 == 0.5
    blocks = s.size
    assert tie.sum() == x.size - blocks                  # every slot but one anchor a block
    assert (tie & (q < 2.0 ** E4M3_EMIN)).sum() > 20 and (tie & (q > 256)).sum() > 20
    x = by["element-max"].astype(np.float64)
    _, s = mx_e4m3(x)
    q = np.abs(x / np.repeat(s, BLOCK, axis=-1)[..., :x.shape[-1]])
    assert (q == E4M3_MAX).sum() > 100 and (q > 464).sum() > 10
    assert np.isposinf(by["inf-nan"]).any() and np.isneginf(by["inf-nan"]).any() \
        and np.isnan(by["inf-nan"]).any()
    zero = by["zero-blocks"][:, :3 * BLOCK].reshape(-1, 3, BLOCK)
    assert (zero == 0).all(axis=-1).any() and np.signbit(zero[zero == 0]).any()
    tiny = np.abs(by["input-subnormal"])
    assert ((tiny > 0) & (tiny < np.finfo(np.float32).smallest_normal)).sum() > 500
    assert by["partial-block"].shape[-1] % BLOCK != 0 and by["normal"].shape[-1] % BLOCK != 0


# ----- a correct quantizer measures nothing ---------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target", [correct, correct_values], ids=["pair", "dequantized"])
def test_a_correct_quantizer_measures_no_difference(target, dtype):
    row = quantizers.measure_quantizer(target, SCHEME, dtype=dtype).row
    d = row["quantizer"]
    assert row["values_differ"] == 0 and row["max_ulp"] == 0 and d["max_abs"] == 0
    assert row["samples"] == sum(c.x.size for c in quantizers.cases(SCHEME, dtype=dtype))
    if target is correct:
        assert d["returns"] == "pair"
        assert row["scales_differ"] == 0 and row["elements_differ"] == 0
        assert d["zero_signs_differ"] == 0 and d["first"] == [] and row["worst"] is None
    else:
        assert d["returns"] == "dequantized"
        assert row["scales_differ"] is None and row["elements_differ"] is None


def _e8m0_codes(scales):
    """E8M0 codes of power-of-two scales: log2(s) + 127, NaN as 0xFF."""
    codes = np.where(np.isnan(scales), 0xFF, np.frexp(np.nan_to_num(scales, nan=1.0))[1] + 126)
    return codes.astype(np.uint8)


FORMS = {
    "float8-elements-e8m0-codes": lambda e, s, x: (e.astype(ml_dtypes.float8_e4m3fn),
                                                   _e8m0_codes(s)),
    "e4m3-codes-and-a-list": lambda e, s, x: [e.astype(ml_dtypes.float8_e4m3fn)
                                              .view(np.uint8), s],
    "per-element-scales": lambda e, s, x: (e, np.repeat(s, BLOCK, axis=-1)[..., :x.shape[-1]]),
    "flattened": lambda e, s, x: (e.reshape(-1), s.reshape(-1)),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_of_a_correct_result_is_read_alike(form):
    """Elements as ml_dtypes float8 values or e4m3 codes, scales as E8M0 codes or one per
    element, flattened arrays, a list: all read as the same values."""
    row = quantizers.measure_quantizer(lambda x: FORMS[form](*mx_e4m3(x), x), SCHEME).row
    assert (row["scales_differ"], row["elements_differ"], row["values_differ"]) == (0, 0, 0)


def test_the_block_axis_is_followed():
    """Blocks along axis 0: the oracle (blocks along the last axis) on the transpose."""
    row = quantizers.measure_quantizer(lambda x: tuple(a.T for a in mx_e4m3(x.T)), SCHEME,
                                       shape=(112, 8), axis=0).row
    assert (row["scales_differ"], row["elements_differ"], row["values_differ"]) == (0, 0, 0)
    assert row["attrs"]["axis"] == [0]
    wrong = quantizers.measure_quantizer(lambda x: mx_e4m3(x.T)[0].T, SCHEME, shape=(112, 8),
                                         axis=0, returns="dequantized")
    assert wrong.row["values_differ"] > 0


# ----- wrong quantizers are caught, counted and categorized -----------------------------------

@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_quantizer_measures_the_differences_the_oracle_counts(name):
    variant = WRONG[name]
    row = quantizers.measure_quantizer(lambda x: mx_e4m3(x, **variant), SCHEME).row
    want = _expected(variant)
    d = row["quantizer"]
    assert (row["scales_differ"], row["elements_differ"], row["values_differ"]) == \
        (want["scales"], want["elements"], want["values"])
    assert d["elements_differ_same_scale"] == want["same_scale"]
    assert row["max_ulp"] == want["ulp"]
    assert {k: c["elements_differ"] for k, c in d["cases"].items()} == want["by_case"]
    assert row["values_differ"] > 0 and len(d["first"]) == quantizers.FIRST
    if name == "ceil":          # every difference follows from a scale
        assert row["scales_differ"] > 0 and d["elements_differ_same_scale"] == 0
    else:                       # an element rounding: the scales agree
        assert row["scales_differ"] == 0
        assert d["elements_differ_same_scale"] == row["elements_differ"] > 0


def test_each_wrong_rounding_shows_in_the_case_made_for_it():
    cases = {name: quantizers.measure_quantizer(lambda x, v=v: mx_e4m3(x, **v), SCHEME)
             .row["quantizer"]["cases"] for name, v in WRONG.items() if name != "ceil"}
    # No saturation: 480 * scale and up become NaN, an infinite difference.
    assert cases["nosat"]["element-max"]["nonfinite_differ"] > 0
    assert cases["flush"]["element-subnormal"]["elements_differ"] > 100
    # Ties away from zero differ at ties only: one ulp, never in random normal data here.
    assert cases["half_away"]["ties"]["elements_differ"] > 100
    assert cases["half_away"]["ties"]["max_ulp"] == 1.0
    assert cases["half_away"]["normal"]["elements_differ"] == 0


def test_a_wrong_dequantizing_target_counts_values_only():
    row = quantizers.measure_quantizer(lambda x: mx_e4m3(x, flush=True, dequantize=True),
                                       SCHEME).row
    want = _expected(WRONG["flush"])
    assert row["values_differ"] == want["values"] and row["max_ulp"] == want["ulp"]
    assert row["elements_differ"] is None and row["scales_differ"] is None


def test_a_reproducer_names_the_block_and_its_contents():
    row = quantizers.measure_quantizer(lambda x: mx_e4m3(x, ties="away"), SCHEME).row
    first = row["quantizer"]["first"][0]
    x = next(c.x for c in quantizers.cases(SCHEME)
             if (c.name, c.index) == (first["case"], first["tensor"]))
    r, c = first["index"]
    assert first["block"] == [r, c // BLOCK] and first["x"] == float(x[r, c])
    lo = c // BLOCK * BLOCK
    assert first["block_x"] == x[r, lo:lo + BLOCK].astype(np.float64).tolist()
    e, s = mx_e4m3(x)
    assert first["want"]["elements"] == e[r, lo:lo + BLOCK].tolist()
    assert first["want"]["scale"] == s[r, c // BLOCK] == first["got"]["scale"]
    assert first["got"]["element"] == mx_e4m3(x, ties="away")[0][r, c] != e[r, c]


# ----- the command line -----------------------------------------------------------------------

MODULE = textwrap.dedent("""
    import time
    import numpy as np

    def raises(x):
        raise RuntimeError("boom")

    def short(x):
        return x[:3], np.ones(3)

    def hangs(x):
        time.sleep(60)

    def words(x):
        return np.array(["a"] * x.size)

    def nan_flood(x):
        return np.full_like(x, np.nan)
""")


@pytest.fixture
def target_dir(tmp_path, monkeypatch):
    (tmp_path / "qbad.py").write_text(MODULE)
    # The oracle's own source, as a module the worker process imports.
    constants = {k: globals()[k] for k in ("BLOCK", "EMAX_ELEM", "E4M3_MAX", "E4M3_EMIN",
                                           "E4M3_MBITS", "E8M0_MIN", "E8M0_MAX")}
    (tmp_path / "qgood.py").write_text(
        "import numpy as np\n" + "".join(f"{k} = {v!r}\n" for k, v in constants.items())
        + "".join(inspect.getsource(f) for f in (_round_e4m3, mx_e4m3, correct)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_command_line_writes_a_results_row_and_a_table(target_dir, capsys):
    status, out, _ = run_cli(capsys, "measure", "qgood.py:correct", "--scheme", SCHEME,
                             "--out", "q.json")
    assert status == 0
    assert "all" in out and "elements that differ where the scales agree: 0" in out
    doc = results.check(results.read("q.json"), "q.json")
    (row,) = doc["rows"]
    assert row["op"] == "qgood.py:correct" and row["format"] == SCHEME
    assert (row["scales_differ"], row["elements_differ"], row["values_differ"]) == (0, 0, 0)
    assert doc["meta"]["selection"]["samples"] == row["samples"] > 0
    assert "--scheme mxfp8_e4m3" in doc["meta"]["command"]
    json.dumps(doc)


@pytest.mark.parametrize("argv,words", [
    (["qbad.py:raises"], ["the target qbad.py:raises raised RuntimeError: boom",
                          "(case normal, tensor 0)"]),
    (["qbad.py:short"], ["returned elements of shape (3, 112) for an input of shape (8, 112)"]),
    (["qbad.py:words"], ["returned values of dtype <U1"]),
    (["qbad.py:hangs", "--timeout", "1"], ["did not return within 1 s", "killed"]),
    (["qbad.py:nothing"], ["qbad.py has no callable nothing"]),
    (["numpy.exp"], ["a quantizer target is a Python function"]),
    (["qgood.py:correct", "--returns", "dequantized"], ["returned a tuple of 2, not the "
                                                        "dequantized values"]),
    (["qgood.py:correct", "--exhaustive"], ["--exhaustive is not an option of a quantizer"]),
    (["qgood.py:correct", "--format", "bfloat16"], ["binary32 or binary64"]),
])
def test_a_bad_target_or_request_exits_2_with_one_line(target_dir, capsys, argv, words):
    status, _, err = run_cli(capsys, "measure", *argv, "--scheme", SCHEME, "--out", "q.json")
    assert status == 2
    one_error(err, *words)
    assert not (target_dir / "q.json").exists()


def test_a_nan_flood_is_measured_not_refused(target_dir, capsys):
    status, out, _ = run_cli(capsys, "measure", "qbad.py:nan_flood", "--scheme", SCHEME,
                             "--out", "q.json", "--quiet")
    assert status == 0
    row = results.read("q.json")["rows"][0]
    finite = sum(int(np.isfinite(correct_values(c.x)).sum())
                 for c in quantizers.cases(SCHEME))
    assert row["values_differ"] == row["quantizer"]["nonfinite_differ"] == finite
    assert row["max_ulp"] == "inf"


def test_quantizer_options_need_a_scheme_and_the_cli_constants_match(capsys):
    status, _, err = run_cli(capsys, "measure", "numpy.exp", "--returns", "pair")
    assert status == 2
    one_error(err, "--returns is an option of a quantizer measurement")
    assert cli_measure.RETURNS == quantizers.RETURNS
    assert cli_measure.TIMEOUT == quantizers.TIMEOUT


def test_importable_reads_python_files_and_modules_and_leaves_libraries(tmp_path):
    """engine/targets.py's resolver, which measure and measure --scheme share."""
    from roundoff_coverage.engine.targets import MeasureError, importable
    (tmp_path / "twice.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    assert importable(f"{tmp_path / 'twice.py'}:twice")(3) == 6
    assert importable("libm:cosf") is None and importable("./libnothing.so:f") is None
    with pytest.raises(MeasureError, match=r"nothing\.py: no such Python file"):
        importable(f"{tmp_path / 'nothing.py'}:f")
    with pytest.raises(MeasureError, match=r"broken\.py failed: ZeroDivisionError"):
        importable(f"{tmp_path / 'broken.py'}:f")

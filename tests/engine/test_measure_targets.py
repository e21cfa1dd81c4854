"""roundoff-coverage measure on targets far off, raising, or named by path, through the
command line in a subprocess (``python -P -m roundoff_coverage``: like the console script,
the working directory is not on sys.path).

Oracles are independent of numerics.screen, numerics.resolve and numerics.metrics: mpmath at
200 bits gives exp, the ulp error follows metrics' documented convention written out here
(computed +-inf stands for +-Omega = 2**(emax+1), the exact value is clamped into
[-Omega, Omega], ulp(v) = 2**max(min(e, emax) - p + 1, qmin)), and MPFR through gmpy2 the
correctly rounded values.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.engine import measure
from conftest import mp_context, mpfr_context

CTX = mp_context(200)
SMALL_CHUNK = 1024                # set by the target module: 2500 samples are three chunks

# The targets, as source: written into the target module and exec'd here for the oracle.
FUNCTIONS = textwrap.dedent("""
    import numpy as np

    def huge(x):
        return np.full_like(x, 1e30)

    def inf(x):
        return np.full_like(x, np.inf)

    def nan(x):
        return np.full_like(x, np.nan)

    def noise(x):
        # Pseudo-random float32 bits, a function of the input's bits (so the same in any
        # process and any chunk): a multiplicative hash, then an xorshift.
        b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        h = (b * np.uint64(2654435761) + np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF)
        h ^= h >> np.uint64(15)
        return h.astype(np.uint32).view(np.float32).astype(x.dtype)

    def raises(x):
        raise RuntimeError("boom")

    def words(x):
        return ["a"] * x.size

    def short(x):
        return x[:3]

    def expf(x):
        return np.exp(x)
""")
# Every process that builds the target (the parent and each worker) imports this module
# first, so all of them cut the inputs into SMALL_CHUNK chunks and --jobs 2 uses workers.
MODULE = (f"from roundoff_coverage.engine import measure as _measure\n"
          f"_measure.CHUNK = {SMALL_CHUNK}\n" + FUNCTIONS)
NS: dict = {}
exec(FUNCTIONS, NS)


def _env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def _cli(cwd, *argv, timeout=600):
    """Run ``roundoff-coverage measure ARGV --quiet --out m.json`` in ``cwd``: (completed
    process, the results row or None)."""
    p = subprocess.run([sys.executable, "-P", "-m", "roundoff_coverage", "measure", *argv,
                        "--quiet", "--out", "m.json"], cwd=cwd, env=_env(),
                       capture_output=True, text=True, timeout=timeout)
    out = os.path.join(cwd, "m.json")
    row = json.load(open(out))["rows"][0] if p.returncode == 0 else None
    return p, row


def _fresh_python(cwd, code):
    """``python -P -c code`` in ``cwd``, as _cli's commands run (no PYTHONPATH): a fresh
    interpreter, so no other test's imports count."""
    return subprocess.run([sys.executable, "-P", "-c", code], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def module_dir(tmp_path):
    (tmp_path / "targets.py").write_text(MODULE)
    return tmp_path


def _inputs(monkeypatch, spec, fmt, reference, arity, samples, seed=0, chunk=SMALL_CHUNK):
    """The sampled inputs of a measurement cut into ``chunk`` chunks (copies)."""
    monkeypatch.setattr(measure, "CHUNK", chunk)
    m = measure.Measurement(spec, fmt, reference, arity, samples, seed)
    parts = [[x.copy() for x in measure.inputs(m, j)] for j in range(m.chunks())]
    return [np.concatenate([p[k] for p in parts]) for k in range(arity)]


# ----- the oracle: metrics' convention for exp, written out ------------------------------------

def _exact_exp(x: float):
    """exp(x) at 200 bits; None for NaN."""
    if math.isnan(x):
        return None
    if x == -math.inf:
        return CTX.mpf(0)
    if x == math.inf:
        return CTX.inf
    return CTX.exp(CTX.mpf(x))


def _classify(c: float, v, fmt):
    """(ulp error or NaN, class) of computed ``c`` against exact ``v`` (metrics.CLASSES)."""
    omega = CTX.ldexp(1, fmt.emax + 1)
    if v is None:
        return (0.0, "ok") if math.isnan(c) else (math.nan, "missed_nan")
    if CTX.isinf(v):
        if c == math.copysign(math.inf, v):
            return 0.0, "ok"
        if math.isinf(c):
            return math.nan, "inf_sign"
        if math.isnan(c):
            return math.nan, "nan_from_inf"
        if abs(c) == fmt.max_finite and (c > 0) == (v > 0):
            return math.nan, "overflow_to_max"
        return math.nan, "missed_inf"
    beyond = abs(v) > fmt.max_finite
    if math.isnan(c):
        return math.nan, ("overflow_to_nan" if beyond else "nan_from_finite")
    cv = CTX.mpf(c) if math.isfinite(c) else math.copysign(1, c) * omega
    vc = max(-omega, min(omega, v))
    if vc == 0:
        q = fmt.qmin
    else:
        e = int(CTX.floor(CTX.log(abs(vc), 2)))
        q = max(min(e, fmt.emax) - fmt.precision + 1, fmt.qmin)
    err = float((cv - vc) / CTX.ldexp(1, q))
    if math.isinf(c):
        cls = "overflow_to_inf"
    elif c == 0 and v == 0 and math.copysign(1, c) < 0:
        cls = "wrong_zero_sign"                   # exp's exact zero (of -inf) is +0
    elif c == 0 and v != 0:
        cls = "wrong_zero_sign" if math.copysign(1, c) < 0 else "underflow_to_zero"
    elif beyond and abs(c) == fmt.max_finite:
        cls = "overflow_to_max"
    else:
        cls = "ok"
    return err, cls


def _cr(fn, args, fmt) -> float:
    """fn(*args) correctly rounded into ``fmt`` by MPFR (C99 special values)."""
    with mpfr_context(fmt) as ctx:
        return float(getattr(ctx, fn)(*(gmpy2.mpfr(a) for a in args)))


def _wrong(got, cr) -> int:
    """Results that are not the correctly rounded value (zeros of both signs one value)."""
    return int(np.count_nonzero((got != cr) & ~(np.isnan(got) & np.isnan(cr))))


def _bin(a: float) -> int:
    """metrics.HIST_EDGES bin of |error| a: [0, 2**-10), then [2**k, 2**(k+1)) at k + 11,
    the last [2**20, inf]."""
    if a < 2.0 ** -10:
        return 0
    return 31 if a >= 2.0 ** 20 else math.floor(math.log2(a)) + 11


def _expected(x, c, fmt):
    """The row fields the oracle derives: max |error|, unmeasured, exceptional, histogram,
    incorrectly rounded."""
    errs, classes = zip(*(_classify(float(ci), _exact_exp(float(xi)), fmt)
                          for xi, ci in zip(x, c)))
    errs = np.array(errs)
    ok = ~np.isnan(errs)
    hist = [0] * 32
    for a in np.abs(errs[ok]):
        hist[_bin(float(a))] += 1
    exceptional = {}
    for k in classes:
        if k != "ok":
            exceptional[k] = exceptional.get(k, 0) + 1
    cr = np.array([_cr("exp", [float(v)], fmt) for v in x])
    return {"max_ulp": float(np.max(np.abs(errs[ok]))), "unmeasured": int((~ok).sum()),
            "exceptional": exceptional, "histogram": hist, "incorrectly_rounded": _wrong(c, cr)}


# ----- far-off targets are measured to completion ---------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name, jobs", [("huge", 1), ("inf", 1), ("nan", 1), ("noise", 1),
                                        ("noise", 2)])
def test_far_off_targets_are_measured_and_binned_like_the_oracle(module_dir, monkeypatch,
                                                                 name, jobs):
    """exp's outputs replaced by 1e30, inf, NaN or random bits (binary32, 2500 samples): no
    heap corruption from an error beyond 2**63 / 1024 ulp, and every number of the row is
    the oracle's -- the maximum error, the exceptional classes, the unmeasured count and the
    histogram (huge errors in the last bin).  In worker processes (--jobs 2) for the random
    bits, which hold every class at once; the infinite error of the worker path is
    test_an_infinite_error_in_binary64_is_inf_in_the_last_bin's."""
    fmt = formats.get("binary32")
    spec, n = f"targets:{name}", 2500
    p, row = _cli(module_dir, spec, "--reference", "exp", "--samples", str(n), "--jobs",
                  str(jobs))
    assert p.returncode == 0, p.stderr
    (x,) = _inputs(monkeypatch, spec, "binary32", "exp", 1, n)
    with np.errstate(invalid="ignore"):         # float32 signaling NaNs widened
        c = NS[name](x.astype(np.float32)).astype(np.float64)
    want = _expected(x, c, fmt)
    assert row["samples"] == n and row["status"] == "ok"
    assert row["unmeasured"] == want["unmeasured"]
    assert row["exceptional"] == want["exceptional"]
    assert row["histogram"] == want["histogram"]
    assert row["incorrectly_rounded"] == want["incorrectly_rounded"]
    assert float(row["max_ulp"]) == pytest.approx(want["max_ulp"], rel=1e-9)
    if name == "huge":                  # 1e30 for exp(x) < 2**-149: 1e30 * 2**149 ulp
        assert float(row["max_ulp"]) == pytest.approx(float(np.float32(1e30)) * 2.0 ** 149,
                                                      rel=1e-12)
        assert want["histogram"][-1] == n - want["unmeasured"]
    if name == "nan":                   # every input but NaN ones is unmeasured
        assert row["unmeasured"] == int(np.count_nonzero(~np.isnan(x)))


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_an_infinite_error_in_binary64_is_inf_in_the_last_bin(module_dir, monkeypatch, jobs):
    """binary64 has no wider type for its errors: inf for exp(x) = 1 errs by 2**1024 /
    2**-52 ulp, beyond binary64, so the error is inf (measured exactly, not screened) and
    lands in the last bin; the row is the oracle's all the same."""
    fmt = formats.get("binary64")
    spec, n = "targets:inf", 2500
    p, row = _cli(module_dir, spec, "--format", "binary64", "--reference", "exp",
                  "--samples", str(n), "--jobs", str(jobs))
    assert p.returncode == 0, p.stderr
    (x,) = _inputs(monkeypatch, spec, "binary64", "exp", 1, n)
    want = _expected(x, np.full(n, np.inf), fmt)
    assert want["max_ulp"] == math.inf
    assert row["samples"] == n and row["max_ulp"] == "inf" and row["mean_ulp"] == "inf"
    assert row["unmeasured"] == want["unmeasured"]
    assert row["exceptional"] == want["exceptional"]
    assert row["histogram"] == want["histogram"]
    assert row["incorrectly_rounded"] == want["incorrectly_rounded"]


# ----- C functions: wrong arity, paths ----------------------------------------------------------

def _libm():
    path = ctypes.util.find_library("m")
    if path is None:
        pytest.skip("no libm")
    return ctypes.CDLL(path)


@pytest.mark.slow
def test_a_c_function_of_the_wrong_arity_measures_what_it_computes(tmp_path, monkeypatch):
    """expf called as a function of two arguments (--arity 2 against pow) ignores the
    second: the row counts exactly the results that are not MPFR's pow(x, y)."""
    fmt = formats.get("binary32")
    spec, n = "libm:expf", 3000
    p, row = _cli(tmp_path, spec, "--arity", "2", "--reference", "pow", "--samples", str(n),
                  "--jobs", "1")
    assert p.returncode == 0, p.stderr
    x, y = _inputs(monkeypatch, spec, "binary32", "pow", 2, n, chunk=measure.CHUNK)
    expf = _libm().expf
    expf.argtypes, expf.restype = [ctypes.c_float], ctypes.c_float
    got = np.array([expf(float(a)) for a in x])
    cr = np.array([_cr("pow", [float(a), float(b)], fmt) for a, b in zip(x, y)])
    assert row["samples"] == n and row["status"] == "ok"
    assert row["incorrectly_rounded"] == _wrong(got, cr)


@pytest.mark.slow
def test_a_c_function_reading_a_missing_argument_is_measured_to_the_end(tmp_path):
    """atan2 declared unary (--arity 1 against atan) reads its second argument from
    whatever the register holds: the outputs are garbage, the run completes and the row
    accounts for every input (measured ones in the histogram, the others unmeasured)."""
    n = 3000
    p, row = _cli(tmp_path, "libm:atan2", "--arity", "1", "--reference", "atan",
                  "--samples", str(n), "--jobs", "1")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert row["samples"] == n and row["status"] == "ok"
    assert sum(row["histogram"]) + row["unmeasured"] == n


@pytest.fixture
def libtiny(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "tiny.c"
    src.write_text("#include <math.h>\ndouble f(double x) { return exp(x); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(tmp_path / "libtiny.so"),
                    str(src), "-lm"], check=True, capture_output=True)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("form", ["./libtiny.so", "libtiny.so", "absolute"])
def test_a_library_named_by_its_path_is_measured(libtiny, monkeypatch, form):
    """``./libtiny.so:f`` (the README's form), a file in the working directory and an
    absolute path load the library (never import_module): the row counts exactly the
    results of its f that are not MPFR's exp."""
    fmt = formats.get("binary64")
    lib = str(libtiny / "libtiny.so") if form == "absolute" else form
    spec, n = f"{lib}:f", 300
    p, row = _cli(libtiny, spec, "--format", "binary64", "--reference", "exp",
                  "--samples", str(n), "--jobs", "1")
    assert p.returncode == 0, p.stderr
    (x,) = _inputs(monkeypatch, spec, "binary64", "exp", 1, n, chunk=measure.CHUNK)
    f = ctypes.CDLL(str(libtiny / "libtiny.so")).f
    f.argtypes, f.restype = [ctypes.c_double], ctypes.c_double
    got = np.array([f(float(a)) for a in x])
    cr = np.array([_cr("exp", [float(a)], fmt) for a in x])
    assert row["samples"] == n and row["implementation"] == spec
    assert row["incorrectly_rounded"] == _wrong(got, cr)


def test_a_path_is_never_imported_as_a_module(tmp_path, monkeypatch):
    """A missing ``./x.so`` is a library that cannot be loaded, not a TypeError of
    import_module; the spec names the path."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(measure.MeasureError, match=r"cannot load library '\./nosuch\.so'"):
        measure.target("./nosuch.so:f", "binary32", reference="exp")


# ----- module targets: the working directory, raising targets -----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_module_in_the_working_directory_imports_without_pythonpath(module_dir,
                                                                      monkeypatch, jobs):
    """targets.py in the working directory, no PYTHONPATH, cwd not on sys.path (-P): the
    parent and the workers import it; the row counts exactly the results of numpy's
    float32 exp that are not MPFR's."""
    fmt = formats.get("binary32")
    spec, n = "targets:expf", 2500
    p, row = _cli(module_dir, spec, "--samples", str(n), "--jobs", str(jobs))
    assert p.returncode == 0, p.stderr
    (x,) = _inputs(monkeypatch, spec, "binary32", "exp", 1, n)
    with np.errstate(all="ignore"):
        got = np.exp(x.astype(np.float32)).astype(np.float64)
    cr = np.array([_cr("exp", [float(a)], fmt) for a in x])
    assert row["samples"] == n and row["attrs"]["reference"] == "exp"
    assert row["incorrectly_rounded"] == _wrong(got, cr)


def test_a_module_target_that_never_imports_torchvision_does_not_import_torch(module_dir):
    """torchvision is prepared (engine.targets.prepare_torchvision, which imports torch) only
    when something imports it: a module target that does not is resolved without torch.
    A fresh interpreter, so no other test's imports count."""
    code = ("import sys\n"
            "from roundoff_coverage.engine import targets\n"
            "assert callable(targets.importable('targets:expf'))\n"
            "print('torch' in sys.modules, 'torchvision' in sys.modules)\n")
    p = _fresh_python(module_dir, code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False"]


def test_preparing_torchvision_beside_the_import_hook_declares_once(tmp_path):
    """A module target installed the hook, then something prepares torchvision directly
    (the zoo tests do): preparing looks torchvision up, which must not run the hook's
    preparation a second time (torch refuses a schema declared twice); torchvision's own
    layers import and run afterwards."""
    import importlib.util
    if importlib.util.find_spec("torch") is None or \
            importlib.util.find_spec("torchvision") is None:
        pytest.skip("torch or torchvision is not installed")
    code = ("from roundoff_coverage.engine import targets\n"
            "targets.prepare_torchvision_on_import()\n"
            "targets.prepare_torchvision()\n"
            "targets.prepare_torchvision_on_import()\n"
            "import torch, torchvision\n"
            "from torchvision.ops import MLP\n"
            "print(MLP(4, [3])(torch.ones(2, 4)).shape)\n")
    p = _fresh_python(tmp_path, code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "torch.Size([2, 3])"


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("name,message", [
    ("raises", r"the target targets:raises raised RuntimeError: boom \(on chunk [0-2]\)"),
    ("words", r"the target targets:words returned list, not numbers \(ValueError: could not "
              r"convert string to float: 'a'; on chunk [0-2]\)"),
    # 2500 samples in chunks of 1024, 1024 and 452: with two workers any chunk may be the
    # first to fail, so its size is one of the two.
    ("short", r"the target targets:short returned 3 values for (1024|452) inputs \(on chunk "
              r"[0-2]\): it must work elementwise"),
])
def test_a_failing_target_exits_2_with_one_line(module_dir, name, message, jobs):
    """The target's own exception (or a result that is not one number per input), in this
    process or in a worker: exit 2, one line on stderr, no traceback, no results file."""
    p, _ = _cli(module_dir, f"targets:{name}", "--reference", "exp", "--samples", "2500",
                "--jobs", str(jobs))
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert re.fullmatch(r"roundoff-coverage: error: " + message, lines[0]), lines[0]
    assert not (module_dir / "m.json").exists()


def test_a_raising_callable_is_a_measure_error():
    def boom(x):
        raise ZeroDivisionError("no")
    with pytest.raises(measure.MeasureError) as info:
        measure.measure(boom, "bfloat16", samples=100, reference="exp")
    assert str(info.value) == "the target python:boom raised ZeroDivisionError: no (on chunk 0)"

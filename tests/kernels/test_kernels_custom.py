"""Custom-operation programs on the device (kernels.custom): the kernel generated from a
program agrees with the CPU evaluator (routes.custom.Program.eval under numerics.emulated)
bit for bit, failures included (the same exception class and message, for the smallest
failing output index); requests outside the device's limits run the evaluator with a
diagnostic; unknown devices and a missing device are refused in one line.

Every device case runs in one subprocess under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM
must be set before numba is imported); the expected values come from the evaluator in this
process.  One more subprocess, without the simulator, compiles the generated kernels for
the real CUDA target (PTX for sm_90, no GPU needed) and checks the instructions.
"""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage.kernels import custom as K
from roundoff_coverage.kernels.errors import KernelError
from roundoff_coverage.routes import custom as C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FORMATS = ("binary64", "binary32", "bfloat16", "binary16", "float8_e4m3fn")
PRIMS = tuple(sorted(K.DEVICE_PRIMITIVES))

_SCRIPT = textwrap.dedent("""
    import os, sys, pickle, time
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from roundoff_coverage.kernels import custom
    cases = pickle.load(open(sys.argv[1], "rb"))
    out, t = {}, time.time()
    for key, (program, inputs, shape, fmt, mode, limit) in cases.items():
        try:
            r = custom.run(program, inputs, shape, "cuda", fmt, mode, limit)
            out[key] = ("ok", r.values, r.device, r.diagnostic)
        except Exception as exc:
            cls = type(exc)
            out[key] = ("error", f"{cls.__module__}.{cls.__qualname__}", str(exc))
    pickle.dump(out, open(sys.argv[2], "wb"))
    print(f"{len(cases)} cases in {time.time() - t:.1f} s")
""")


def simulate(cases: dict, folder) -> dict:
    """{key: ("ok", values, device, diagnostic) or ("error", class, message)} of
    kernels.custom.run(..., device="cuda") on each case, in one simulator subprocess."""
    src, dst = os.path.join(str(folder), "cases.pkl"), os.path.join(str(folder), "out.pkl")
    with open(src, "wb") as f:
        pickle.dump(cases, f)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, src, dst], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print("simulator:", proc.stdout.strip())
    with open(dst, "rb") as f:
        return pickle.load(f)


def evaluate(program, inputs, shape, fmt, mode="nearest_even", limit=C.WORD):
    """("ok", values) or ("error", class, message) of the CPU evaluator itself."""
    xp = numerics.emulated(fmt, mode)
    try:
        y = program.eval(xp, [xp.asarray(np.asarray(x)) for x in inputs], shape, limit)
    except C.CustomError as exc:
        cls = type(exc)
        return ("error", f"{cls.__module__}.{cls.__qualname__}", str(exc))
    return ("ok", np.asarray(xp.to_float64(y), dtype=np.float64).reshape(shape))


def same(a, b):
    """Bit for bit, any NaN equal to any NaN (payloads are not compared)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all((a.view(np.int64) == b.view(np.int64))
                                              | (np.isnan(a) & np.isnan(b))))


# ----- programs ---------------------------------------------------------------------------------
def R(operand, address):
    return C.Read(operand, address)


def I(op, a, b):                                                     # noqa: E743
    return C.Idx(op, a, b)


def A(name, *args):
    return C.Apply(name, *args)


O, N = C.Out, C.Nat


def affine():
    # y[i] = a * x[i] + b, a read from a one-element operand, b a decimal literal.
    return C.Program("affine", A("add", A("multiply", R(1, N(0)), R(0, O())), C.Const("0.1")))


def stencil(n):
    # y[i] = x[(i - 1) mod n] + x[(i + 1) mod n]: at i = 0, 0 - 1 wraps to 2**64 - 1, which
    # is n - 1 modulo a power of two n.
    left = R(0, I("mod", I("sub", O(), N(1)), N(n)))
    right = R(0, I("mod", I("add", O(), N(1)), N(n)))
    return C.Program("stencil", A("add", left, right))


def transpose(rows, cols):
    # y of shape (cols, rows) from x of shape (rows, cols): y[j, i] = x[i, j], with
    # j = k div rows, i = k mod rows for the flat output index k.
    j, i = I("div", O(), N(rows)), I("mod", O(), N(rows))
    return C.Program("transpose", R(0, I("add", I("mul", i, N(cols)), j)))


def gather(n):
    # y[i] = x[(5 i + 3) mod n] (a permutation for n prime to 5), scaled by a Cast index.
    address = I("mod", I("add", I("mul", O(), N(5)), N(3)), N(n))
    return C.Program("gather", A("multiply", R(0, address), C.Cast(I("add", O(), N(1)))))


def mixture():
    # Every device primitive at least once, on two operands and literals.
    x, y = R(0, O()), R(1, I("mod", O(), N(3)))
    body = A("divide",
             A("maximum", A("sqrt", A("abs", x)), A("square", A("negative", y))),
             A("subtract", A("minimum", x, C.Const(-2)), C.Const("0.3")))
    return C.Program("mixture", body)


def words(base, step):
    # Cast of the words base + step i (mod 2**64): single roundings of 54- to 64-bit words.
    return C.Program("words", C.Cast(I("add", N(base), I("mul", O(), N(step)))))


HAND = [
    ("affine", affine(), lambda r: [r.normal(0, 4, 9), [1.75]], (9,)),
    ("stencil", stencil(8), lambda r: [r.normal(0, 3, 8)], (8,)),
    ("transpose", transpose(3, 4), lambda r: [r.normal(0, 2, (3, 4))], (4, 3)),
    ("gather", gather(7), lambda r: [r.normal(0, 2, 7)], (7,)),
    ("mixture", mixture(), lambda r: [np.r_[r.normal(0, 3, 6), 0.0, -0.0, np.inf, np.nan],
                                      [0.5, -3.0, 1e-3]], (10,)),
]

# Words near and above 2**53: ties of binary64 (2**53 + 1), ties of binary32 and bfloat16
# with a sticky bit just below or above (2**60 + 2**36 -+ 1, 2**60 + 2**52 -+ 1), and the
# top of the range (2**64 - 1 rounds up to 2**64 in every format with the range; binary16
# and float8_e4m3fn overflow on every word beyond 2**53).
WORDS = [(2 ** 53 - 2, 1), (2 ** 60 + 2 ** 36 - 2, 1), (2 ** 60 + 2 ** 52 - 2, 1),
         (2 ** 64 - 5, 1), (2 ** 63 - 2 ** 39, 2 ** 38 + 1), (2 ** 56 + 2 ** 47, 2 ** 47 - 1)]


def random_index(rng, depth):
    if depth == 0 or rng.random() < 0.35:
        if rng.random() < 0.6:
            return O()
        words = [0, 1, 2, 3, 7, 2 ** 32, 2 ** 63, 2 ** 64 - 1,
                 int(rng.integers(0, 2 ** 63)) * 2 + 1]
        return N(words[int(rng.integers(len(words)))])
    return I(str(rng.choice(C.INDEX_OPS)), random_index(rng, depth - 1),
             random_index(rng, depth - 1))


def random_value(rng, depth, sizes):
    r = rng.random()
    if depth == 0 or r < 0.25:
        kind = rng.choice(["read", "read", "const", "cast"])
        if kind == "read":
            k = int(rng.integers(len(sizes)))              # in bounds: mod the operand's size
            return R(k, I("mod", random_index(rng, 2), N(sizes[k])))
        if kind == "const":
            return C.Const(str(rng.choice(["0.1", "-2.5", "3", "1e-3", "65504", "-0", "7"])))
        return C.Cast(random_index(rng, 2))
    name = str(rng.choice(PRIMS))
    arity = 1 if name in ("negative", "abs", "sqrt", "square") else 2
    return A(name, *(random_value(rng, depth - 1, sizes) for _ in range(arity)))


def random_inputs(rng, sizes):
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 3e38, 65519.0])
    out = []
    for n in sizes:
        x = rng.normal(0, 1, n) * 2.0 ** rng.integers(-8, 9, n)
        pick = rng.random(n) < 0.15
        x[pick] = rng.choice(specials, int(pick.sum()))
        out.append(x)
    return out


def random_cases(seed, count):
    rng = np.random.default_rng(seed)
    cases = []
    for j in range(count):
        sizes = (5, 7)
        body = random_value(rng, 4, sizes)
        cases.append((f"random{j}", C.Program(f"random{j}", body), random_inputs(rng, sizes),
                      (int(rng.integers(4, 10)),)))
    return cases


# Failure cases: (key, program, inputs, shape, limit).
XS = [[1.0, 2.0, 3.0], [5.0, 6.0]]
FAILURES = [
    # i * i: indices 0..3 read in bounds, 4..7 fail (addresses 16..49): index 4 is raised.
    ("bounds-middle", C.Program("mid", R(0, I("mul", O(), O()))), [np.arange(10.0)], (8,),
     C.WORD),
    # a failure beyond the first simulator block of 32 threads only
    ("bounds-late", C.Program("late", R(0, O())), [np.arange(35.0)], (40,), C.WORD),
    # index 2 fails twice; the first read in the tree's order is reported.
    ("bounds-order", C.Program("order", A("add", R(0, I("mul", O(), N(2))),
                                          R(1, I("sub", N(1), O())))), XS, (3,), C.WORD),
    # a wrapped address 2**64 - 1 in the message
    ("bounds-wrap", C.Program("wrap", A("add", R(1, O()), R(0, I("sub", O(), N(1))))), XS,
     (2,), C.WORD),
    ("operand", C.Program("prog", R(2, O())), XS, (1,), C.WORD),
    # a successful read of x0, then the missing operand 5 at index 0
    ("operand-after", C.Program("after", A("multiply", R(0, O()), R(5, O()))), XS, (2,),
     C.WORD),
    # operand checked before bounds: x0's address 0 - 1 would be out of bounds too
    ("operand-first", C.Program("first", A("add", R(3, I("sub", O(), N(1))),
                                           R(0, I("sub", O(), N(1))))), XS, (1,), C.WORD),
    ("empty-operand", C.Program("hollow", R(0, O())), [np.zeros(0)], (2,), C.WORD),
    ("size-limit", C.Program("big", R(0, O())), [[1.0, 2.0, 3.0, 4.0]], (4,), 3),
    ("size-word", C.Program("big", R(0, O())), [[1.0]], (2 ** 32, 2 ** 32, 2), C.WORD),
    ("empty", C.Program("empty", R(9, O())), [[1.0]], (2, 0), C.WORD),
    ("at-limit", C.Program("big", R(0, O())), [[1.0, 2.0, 3.0]], (3,), 3),
]

# Requests outside the device's limits: (key, program, fmt, mode).
EXP = C.Program("expo", A("exp", A("multiply", R(0, O()), C.Const("0.5"))))
FMA = C.Program("fused", A("fma", R(0, O()), R(0, O()), C.Const("0.1")))
FALLBACKS = [
    ("exp", EXP, "binary32", "nearest_even"),
    ("fma", FMA, "bfloat16", "nearest_even"),
    ("upward", affine(), "binary32", "upward"),
    ("toward-zero", words(2 ** 60 + 2 ** 36 + 1, 3), "bfloat16", "toward_zero"),
    ("binary128", mixture(), "binary128", "nearest_even"),
    ("e8m30", affine(), "e8m30", "nearest_even"),
]


def _fallback_inputs(program):
    return {"affine": [np.linspace(-3, 3, 6), [1.1]], "mixture": [np.linspace(-3, 3, 6),
                                                                  [0.5, -3.0, 1e-3]]} \
        .get(program.name, [np.linspace(-3, 3, 6)])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    cases, rng = {}, np.random.default_rng(2024)
    for fmt in FORMATS:
        for key, program, make, shape in HAND:
            cases[f"{key}-{fmt}"] = (program, make(rng), shape, fmt, "nearest_even", C.WORD)
        for j, (base, step) in enumerate(WORDS):
            cases[f"words{j}-{fmt}"] = (words(base, step), [], (6,), fmt, "nearest_even",
                                        C.WORD)
        for key, program, inputs, shape in random_cases(100 + FORMATS.index(fmt), 6):
            cases[f"{key}-{fmt}"] = (program, inputs, shape, fmt, "nearest_even", C.WORD)
    for key, program, inputs, shape, limit in FAILURES:
        cases[f"fail-{key}"] = (program, inputs, shape, "binary32", "nearest_even", limit)
    for key, program, fmt, mode in FALLBACKS:
        cases[f"fallback-{key}"] = (program, _fallback_inputs(program), (6,), fmt, mode,
                                    C.WORD)
    return cases, simulate(cases, tmp_path_factory.mktemp("custom"))


def _agrees(case, got):
    program, inputs, shape, fmt, mode, limit = case
    want = evaluate(program, inputs, shape, fmt, mode, limit)
    if want[0] == "error":
        assert got == want
        return
    assert got[0] == "ok", got
    assert same(got[1], want[1]), (got[1], want[1])


# ----- agreement ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_hand_written_programs_agree_bit_for_bit(results, fmt):
    cases, got = results
    for key, *_ in HAND:
        k = f"{key}-{fmt}"
        _agrees(cases[k], got[k])
        assert got[k][2] == "simulator" and got[k][3] is None, (k, got[k])


@pytest.mark.parametrize("fmt", FORMATS)
def test_casts_of_long_words_are_one_rounding(results, fmt):
    cases, got = results
    for j in range(len(WORDS)):
        k = f"words{j}-{fmt}"
        _agrees(cases[k], got[k])
        assert got[k][2] == "simulator", got[k]


def test_word_cases_cover_ties_and_sticky_bits():
    # The words test the round to odd where it matters: in each format with the range for
    # them, some word's rounding to nearest binary64 and then into the format (a double
    # rounding) differs from its one rounding into the format.
    cased = [base + step * i for base, step in WORDS for i in range(6)]
    for fmt in ("binary32", "bfloat16"):
        assert any(formats.round_exact(float(w), fmt).to_float()
                   != formats.round_exact(w, fmt).to_float() for w in cased), fmt


@pytest.mark.parametrize("fmt", FORMATS)
def test_random_programs_agree_bit_for_bit(results, fmt):
    cases, got = results
    keys = [k for k in cases if k.startswith("random") and k.endswith(f"-{fmt}")]
    assert len(keys) == 6
    for k in keys:
        _agrees(cases[k], got[k])
        assert got[k][2] == "simulator" and got[k][3] is None, (k, got[k])


def test_the_comparison_can_fail():
    one = np.array([1.0, np.nan, -0.0])
    assert same(one, np.array([1.0, -np.nan, -0.0]))
    assert not same(one, np.array([1.0, np.nan, 0.0]))
    assert not same(one, np.array([np.nextafter(1.0, 2.0), np.nan, -0.0]))


# ----- failures ----------------------------------------------------------------------------------
def test_failures_raise_the_evaluators_error(results):
    cases, got = results
    for key, *_ in FAILURES:
        k = f"fail-{key}"
        _agrees(cases[k], got[k])
    assert got["fail-bounds-middle"][2] == ("custom mid: address 16 is out of bounds for "
                                            "operand 0 of size 10")
    assert got["fail-bounds-late"][2] == ("custom late: address 35 is out of bounds for "
                                          "operand 0 of size 35")
    assert got["fail-bounds-order"][2] == ("custom order: address 4 is out of bounds for "
                                           "operand 0 of size 3")
    assert got["fail-bounds-wrap"][2] == (f"custom wrap: address {2 ** 64 - 1} is out of "
                                          f"bounds for operand 0 of size 3")
    assert got["fail-operand"][:2] == ("error", "roundoff_coverage.routes.custom.OperandError")
    assert got["fail-operand-after"][2] == ("custom after: operand 5 does not exist (the "
                                            "program has 2 operands)")
    assert got["fail-operand-first"][1] == "roundoff_coverage.routes.custom.OperandError"
    assert got["fail-size-limit"][1:] == ("roundoff_coverage.routes.custom.SizeError",
                                          "custom big: output size 4 exceeds the unsigned "
                                          "addressing limit 3")
    assert got["fail-size-word"][1] == "roundoff_coverage.routes.custom.SizeError"
    empty = got["fail-empty"]
    assert empty[0] == "ok" and empty[1].shape == (2, 0) and empty[2] == "simulator"
    assert got["fail-at-limit"][0] == "ok" and list(got["fail-at-limit"][1]) == [1, 2, 3]


# ----- fallbacks ---------------------------------------------------------------------------------
def test_outside_the_limits_runs_the_evaluator_with_a_diagnostic(results):
    cases, got = results
    for key, *_ in FALLBACKS:
        k = f"fallback-{key}"
        _agrees(cases[k], got[k])
        _, _, device, diagnostic = got[k]
        assert device == "cpu", (k, device)
        assert diagnostic and "\n" not in diagnostic and "CPU evaluator" in diagnostic, k
    assert "exp is not bitwise" in got["fallback-exp"][3]
    assert "fma is not bitwise" in got["fallback-fma"][3]
    assert "(got upward)" in got["fallback-upward"][3]
    assert "binary128" in got["fallback-binary128"][3]
    assert "e8m30 is outside" in got["fallback-e8m30"][3]


def test_outside_names_the_reason():
    assert K.outside(affine(), formats.get("binary32"), "nearest_even") is None
    assert K.outside(EXP, formats.get("binary16"), "nearest_even").startswith("exp is not")
    assert "stochastic" in K.outside(affine(), formats.get("bfloat16"), "stochastic")
    assert "nearest even only" in K.outside(affine(), formats.get("binary64"), "upward")


# ----- devices -----------------------------------------------------------------------------------
def test_cpu_device_is_the_evaluator():
    x = np.linspace(-2, 2, 9)
    for fmt in ("binary32", "bfloat16", "binary128"):
        r = K.run(affine(), [x, [1.75]], (9,), "cpu", fmt)
        assert r.device == "cpu" and r.diagnostic is None and r.values.dtype == np.float64
        assert same(r.values, evaluate(affine(), [x, [1.75]], (9,), fmt)[1])
    with pytest.raises(C.BoundsError, match="address 3 is out of bounds"):
        K.run(C.Program("p", R(0, I("add", O(), N(2)))), [[1.0, 2.0, 3.0]], (3,))


def test_an_unknown_device_is_refused_in_one_line():
    with pytest.raises(KernelError) as err:
        K.run(affine(), [[1.0], [2.0]], (1,), device="tpu")
    assert str(err.value) == ("kernels: unknown device 'tpu' for a custom program "
                              "(accepted: cpu, cuda)")


_NO_DEVICE = textwrap.dedent("""
    from numba import cuda
    if cuda.is_available():
        print("gpu")
        raise SystemExit
    from roundoff_coverage.routes import custom as C
    from roundoff_coverage.kernels import custom, KernelError
    try:
        custom.run(C.Program("p", C.Read(0, C.Out())), [[1.0]], (1,), "cuda")
    except KernelError as exc:
        print("KernelError:", exc)
""")


def test_cuda_without_gpu_or_simulator_is_the_device_error():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", _NO_DEVICE], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.strip()
    if out == "gpu":
        pytest.skip("a CUDA GPU is available here")
    assert out.count("\n") == 0, out
    assert out.startswith("KernelError: kernels: no CUDA GPU is available and the CUDA "
                          "simulator is off"), out


# ----- the generated source ----------------------------------------------------------------------
def test_generated_source_has_no_arithmetic_on_values():
    for program in [affine(), stencil(8), transpose(3, 4), gather(7), mixture(),
                    words(2 ** 60, 3)] + [c[1] for c in random_cases(5, 10)]:
        text = K.source(program)
        tree = ast.parse(text)
        ops = [type(n).__name__ for n in ast.walk(tree)
               if isinstance(n, (ast.BinOp, ast.UnaryOp, ast.AugAssign, ast.BoolOp))]
        assert not ops, (ops, text)
        # Values come only from reads, literals, Casts and the flavour's primitives.
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                assert n.func.id.startswith(("P_", "I_", "W_")), ast.unparse(n)
            elif isinstance(n, ast.Call):
                assert ast.unparse(n) in ("cuda.grid(1)", "np.uint64(t)"), ast.unparse(n)
        names = {n.func.id[2:] for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id.startswith("P_")}
        assert names == set(K.primitives(program.body)), text


def test_source_depends_on_structure_not_literals():
    a = K.plan(words(5, 7))
    b = K.plan(words(2 ** 64 - 1, 2 ** 40))
    assert a.source == b.source and a.nats == (5, 7) and b.nats == (2 ** 64 - 1, 2 ** 40)
    assert K.plan(affine()).operands == (1, 0) and K.plan(affine()).consts == ("0.1",)


_PTX = textwrap.dedent("""
    import re, types, sys
    import numba
    import numba.cuda.dispatcher as D
    from numba import cuda
    from roundoff_coverage.routes import custom as C
    from roundoff_coverage.kernels import custom
    from roundoff_coverage.kernels.primitives import build
    # Compile for sm_90 without a GPU: device functions ask the current device for its
    # compute capability.
    D.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    sys.path[:0] = ["tests", "tests/kernels"]     # the shared helpers, then this file
    from test_kernels_custom import mixture, words, stencil
    f8, u8, i8 = numba.float64, numba.uint64, numba.int64
    for program in (mixture(), words(3, 5), stencil(8)):
        p = custom.plan(program)
        sig = (f8[::1], u8[:, ::1]) + (f8[::1],) * len(p.operands) + \\
            (i8[::1], u8[::1], u8[::1], f8[::1], i8[::1])
        for flav in ("binary64", "binary32", "emulated"):
            k = custom._compile(p, build(flav, False), flav, False)
            try:
                ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
            except Exception as exc:
                if "nvvm" in type(exc).__name__.lower() or "NVVM" in str(exc):
                    print("no-nvvm")
                    raise SystemExit
                raise
            print(program.name, flav, " ".join(sorted(set(re.findall(
                r"\\b(?:fma|cvt|add|sub|mul|div|rem|sqrt)\\.[a-z0-9.]+", ptx)))))
""")


def test_generated_kernels_compile_for_the_gpu_without_fma_or_ftz():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", _PTX], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    if "no-nvvm" in proc.stdout or "libNVVM cannot be found" in proc.stderr:
        pytest.skip("no NVVM to compile PTX here")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 9, proc.stdout
    for line in lines:
        instrs = line.split()[2:]
        assert not [s for s in instrs if s.startswith("fma") or ".ftz" in s], line
        # Index words stay unsigned: no conversion of a signed word to a float, unsigned
        # division and remainder only.
        assert not [s for s in instrs if s.startswith("cvt.") and ".f" in s and ".s64" in s]
        assert not [s for s in instrs if s.startswith(("div.s", "rem.s"))], line

"""Kernels of the losses (kernels.losses: mseLoss, huberLoss, crossEntropy, distill) and of the
masks and draws (kernels.draws: dropout, topKMask, bernoulliMask, randUniform): properties of
their simulator cases beyond the contract (tests/kernels/test_kernels_contracts.py checks every case,
crossEntropy's refused target among them); the device SplitMix64 words against Python
integers; the contracts; the GPU build's PTX where NVVM is installed.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from roundoff_coverage import kernels
from roundoff_coverage import numerics
from roundoff_coverage import routes
from kernel_harness import (DIRECTED, check as _check, flipped, _pack, ptx as compile_ptx,
                            python, same, unpack)

LOSSES = ("mseLoss", "huberLoss", "crossEntropy", "distill")
KEY_MAX = 2 ** 64 - 1


def test_draws_are_bitwise_in_every_mode(simulated):
    """The draws' contract claims bitwise agreement in nearest even only (its primitive is a
    multiply); the multiply by 1 of an exact binary64 dyadic is the one rounding of the
    dyadic in every mode, so randUniform, bernoulliMask and topKMask agree bit for bit in
    the directed modes too (the emulated flavour rounds the binary64 value once)."""
    cases, results = simulated
    checked = 0
    for c in cases:
        if c["mode"] == "nearest_even" or c["op"].name not in ("randUniform", "bernoulliMask",
                                                               "topKMask"):
            continue
        got = unpack(results[c["id"]]["outputs"][0])
        want = c["op"].rule(numerics.emulated(c["fmt"], c["mode"])).forward(c["xs"])[0]
        assert same(got, want).all(), c["id"]
        checked += 1
    assert checked == 3 * 3 * len(DIRECTED)


def test_check_fails_on_a_wrong_bit(simulated):
    """The comparison can fail: one flipped low bit in a kernel output is caught."""
    cases, results = simulated
    for name in ("mseLoss", "crossEntropy", "randUniform"):
        c = next(c for c in cases if c["op"].name == name and c["fmt"] == "bfloat16"
                 and c["route"] == "forward" and c["mode"] == "nearest_even"
                 and not c["instance"].refuses)
        with pytest.raises(AssertionError):
            _check(c, flipped(results[c["id"]]))


def test_a_wrong_mask_entry_is_caught(simulated):
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == "topKMask" and c["fmt"] == "bfloat16")
    got = json.loads(json.dumps(results[c["id"]]))
    out = unpack(got["outputs"][0])
    out.reshape(-1)[0] = 1.0 - out.reshape(-1)[0]
    got["outputs"][0] = _pack(out)
    with pytest.raises(AssertionError):
        _check(c, got)


def test_kernels_serve_every_attribute_and_no_other_operator():
    """No attribute restriction: every reduction, rank and key; the operators of these
    families without a CUDA entry have no kernel."""
    for name in LOSSES:
        for red in ("mean", "sum", "none"):
            assert kernels.of_op(routes.op(name, reduction=red)).name == name
    assert kernels.of_op(routes.op("topKMask", shape=(2, 3), axis=1, k=0)).name == "topKMask"
    assert kernels.of_op(routes.op("randUniform", key=KEY_MAX)).name == "randUniform"
    for name in ("crossEntropyProbabilities", "randn", "maeLoss", "cosineLoss"):
        assert kernels.of_op(name) is None
        assert kernels.of_op(routes.op(name)) is None


def test_contracts():
    assert kernels.of_op("crossEntropy").routes == ("forward", "gradient")
    assert kernels.of_op("mseLoss").routes == ("forward", "gradient")
    assert kernels.of_op("huberLoss").routes == ("forward", "gradient")
    assert kernels.of_op("distill").routes == ("forward", "gradient")
    assert kernels.of_op("dropout").routes == ("forward", "gradient")
    for name in ("topKMask", "bernoulliMask", "randUniform"):
        assert kernels.of_op(name).routes == ("forward",)
    assert kernels.of_op("crossEntropy").claim("forward", "bfloat16").agreement == "screened"
    assert kernels.of_op("crossEntropy").claim("gradient", "binary64").agreement == "none"
    assert kernels.of_op("mseLoss").claim("gradient", "binary16") == ("bitwise", None, 0.0)
    assert kernels.of_op("topKMask").claim("forward", "float8_e4m3fn", "odd") == \
        ("bitwise", 0.0, 0.0)
    assert kernels.of_op("randUniform").claim("forward", "bfloat16").max_ulp == 0.5
    assert kernels.of_op("bernoulliMask").claim("forward", "bfloat16").max_ulp is None


# ----- the generator ---------------------------------------------------------------------------
def _splitmix_python(key, counter):
    """SplitMix64 with Python integers, reduced modulo 2**64 after every step (Vigna's
    splitmix64.c: the state advanced counter + 1 times from the key, then the finalizer)."""
    m = 2 ** 64
    z = (key + (counter + 1) * 0x9E3779B97F4A7C15) % m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % m
    return z ^ (z >> 31)


_WORDS = textwrap.dedent("""
    import os, sys, json, warnings
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    warnings.simplefilter("ignore", RuntimeWarning)     # numpy's uint64 wrap-around
    from roundoff_coverage import kernels
    from roundoff_coverage.kernels.draws import device_words
    pairs = json.loads(sys.argv[1])
    keys = [int(k) for k, c in pairs]
    counters = [int(c) for k, c in pairs]
    out = device_words(keys, counters)
    rows = {"words": [str(int(w)) for w in out]}
    from roundoff_coverage import routes
    o = routes.op("randUniform", shape=(5,), key=2 ** 64 - 1)
    rows["uniform"] = [float(v).hex() for v in kernels.run(o, [], "binary64")[0][0]]
    print(json.dumps(rows))
""")


def test_device_splitmix_words_match_python_integers():
    """The device's uint64 SplitMix64 (in the simulator, where numpy scalars would promote
    mixed int64 / uint64 operands to float64 too) against exact Python integer arithmetic,
    keys and counters at the ends of the range included; and randUniform's binary64 draws
    under key 2**64 - 1 against k / 2**53 from the Python words."""
    keys = (0, 1, 7, 42, 2 ** 32 + 3, 2 ** 63, 2 ** 63 - 1, KEY_MAX)
    counters = (0, 1, 2, 1000, 2 ** 32 + 5, 2 ** 63, KEY_MAX - 1, KEY_MAX)
    pairs = [(k, c) for k in keys for c in counters]
    proc = python(_WORDS, json.dumps([[str(k), str(c)] for k, c in pairs]),
                  NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    words = [int(w) for w in got["words"]]
    for (k, c), w in zip(pairs, words):
        assert w == _splitmix_python(k, c), (k, c, w)
    # Under one key the words are distinct (the state steps by an odd constant and the
    # finalizer is a bijection): nothing collapsed.
    for i in range(len(keys)):
        row = words[i * len(counters):(i + 1) * len(counters)]
        assert len(set(row)) == len(row)
    want = [float((_splitmix_python(KEY_MAX, i) >> 11) / 2 ** 53).hex() for i in range(5)]
    assert got["uniform"] == want


# ----- the GPU build ---------------------------------------------------------------------------
_PTX = """
    from roundoff_coverage.kernels import draws, losses
    u = numba.uint64
    v, rp, m = f[::1], i[::1], f[:, ::1]
    out = {}
    out["words"] = cuda.compile_ptx(draws._words_kernel.py_func, (u[::1], u[::1], u[::1]),
                                    cc=(9, 0))[0]
    out["topk"] = cuda.compile_ptx(draws.topk_kernel.py_func, (m, m, i), cc=(9, 0))[0]
    for flav in ("binary64", "emulated"):
        P = build(flav, False)
        uniform, _ = draws.make_draws(P)
        out[flav + "-uniform"] = cuda.compile_ptx(uniform.py_func, (v, u[::1], rp),
                                                  cc=(9, 0))[0]
        terms, grad = losses.make_pointwise(P)
        out[flav + "-mse-grad"] = cuda.compile_ptx(
            grad.py_func, (v, v, v, v, v, i, f, i, f, rp), cc=(9, 0))[0]
        total = losses.make_total(P)
        out[flav + "-total"] = cuda.compile_ptx(total.py_func, (v, v, i, f, rp), cc=(9, 0))[0]
    ce, ce_grad, _, _ = losses.make_rows(build("binary64", False))
    out["binary64-ce-grad"] = cuda.compile_ptx(ce_grad.py_func, (m, i[::1], v, m, i, f, f, rp),
                                               cc=(9, 0))[0]
    print(json.dumps(out))
"""


def test_gpu_build_compiles_with_integer_splitmix_and_no_fma():
    """The GPU build compiles with NVVM; the SplitMix64 words are pure 64-bit integer code
    (no floating-point instruction: no promotion of mixed int64 / uint64 operands to
    float64), and the sums and products stay separately rounded (no fma)."""
    ptx = compile_ptx(_PTX)
    for key, text in ptx.items():
        assert ".entry" in text, key
        # libdevice's exp and log use fma inside their polynomial (within their documented
        # ulp bounds): only kernels without a transcendental primitive can be fma-free.
        if key != "binary64-ce-grad":
            assert "fma." not in text, f"{key}: FMA contraction in the PTX"
    words = ptx["words"]
    assert ".f64" not in words and ".f32" not in words, "floating point in the words kernel"
    assert "mul.lo.s64" in words or "mul.lo.u64" in words
    assert "xor.b64" in words and "shr.u64" in words
    # The draw: the word's top 53 bits converted from an unsigned integer, exactly.
    assert "cvt.rn.f64.u64" in ptx["binary64-uniform"]
    assert "mul.rn.f64" in ptx["binary64-mse-grad"] and "add.rn.f64" in ptx["binary64-total"]
    assert "add.rn.f64" in ptx["binary64-ce-grad"] and "mul.rn.f64" in ptx["binary64-ce-grad"]

"""The kernel table, contracts, device selection and gpu_check's command line; the check of
the simulator cases (tests/kernels/test_kernels_contracts.py runs every case the table declares)
can fail; the GPU build of the elementwise, matmul and reduce kernels (PTX).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from roundoff_coverage import kernels
from roundoff_coverage import routes
from roundoff_coverage.routes.vocabulary import VOCABULARY
from roundoff_coverage.kernels import gpu_check
from kernel_harness import (FORMATS, ROOT, check as _check, flipped, ptx as compile_ptx,
                            python)


def test_check_fails_on_a_wrong_bit(simulated):
    """The comparison can fail: one flipped low bit in a kernel output is caught."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == "add" and c["fmt"] == "bfloat16")
    with pytest.raises(AssertionError):
        _check(c, flipped(results[c["id"]]))


def test_kernels_exist_exactly_for_operators_with_a_cuda_entry():
    # The spec's CUDA column as routes.vocabulary copies it from shared/spec/operators.tsv
    # (a clone of this repository alone has no shared/ folder).
    cuda = {row[1]: row[3] for row in VOCABULARY}
    for name in kernels.names():
        assert cuda[name] in ("yes", "at some attributes"), name
        assert name in routes.names()
    for name in routes.names():
        if cuda.get(name, "no") == "no":
            assert kernels.of_op(name) is None, name


def test_of_op_returns_none_without_a_kernel():
    assert kernels.of_op("tan") is None
    assert kernels.of_op(routes.op("tan")) is None
    assert kernels.of_op("no-such-operator") is None
    assert kernels.of_op(routes.op("div", rounding_mode="floor")) is None
    assert kernels.of_op(routes.op("add", element="int8")) is None
    assert kernels.of_op(routes.op("div")).name == "div"
    assert kernels.of_op(routes.op("reduce", op="max")).kind == "reduce"


def test_every_contract_has_its_fields_and_claims():
    for name in kernels.names():
        k = kernels.of_op(name)
        con = k.contract
        assert con.order in ("fixed", "implementation_defined")
        assert isinstance(con.fma, bool) and isinstance(con.ftz, bool)
        assert con.policy == "strict"
        for route in k.routes:
            for fmt in FORMATS:
                claim = k.claim(route, fmt)
                assert claim.agreement in ("bitwise", "screened", "none")
                assert claim.max_ulp is None or claim.max_ulp >= 0
    assert kernels.of_op("add").claim("forward", "bfloat16").max_ulp == 0.5
    assert kernels.of_op("add").claim("forward", "bfloat16", "upward").max_ulp \
        == 1 + 2.0 ** (8 - 52)
    assert kernels.of_op("exp").claim("forward", "binary64").max_ulp == 1.0
    assert kernels.of_op("exp").claim("forward", "bfloat16").agreement == "screened"
    assert kernels.of_op("relu").claim("forward", "float8_e4m3fn", "odd") == \
        ("bitwise", 0.0, 0.0)
    assert kernels.of_op("matmul").claim("forward", "binary32").max_ulp is None
    assert kernels.of_op("softmax").routes == ("forward", "gradient")


def test_formats_and_modes_outside_the_kernels_are_refused_in_one_line():
    from roundoff_coverage.kernels.contract import flavour
    for fmt, mode, fragment in (("binary64", "upward", "nearest even only"),
                                ("bfloat16", "stochastic", "stochastic"),
                                ("binary128", "nearest_even", "outside"),
                                ("e8m30", "nearest_even", "outside")):
        with pytest.raises(kernels.KernelError, match=fragment) as info:
            flavour(fmt, mode)
        assert "\n" not in str(info.value)
    assert flavour("binary32", "nearest_even") == "binary32"
    assert flavour("binary32", "upward") == "emulated"


def test_device_without_gpu_or_simulator_is_a_one_line_error():
    proc = python(textwrap.dedent("""
        from roundoff_coverage import kernels
        try:
            kernels.device()
        except kernels.KernelError as exc:
            print("ERR", exc)
        else:
            print("OK")
    """))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert line.startswith("ERR kernels: no CUDA GPU"), line
    assert "NUMBA_ENABLE_CUDASIM=1" in line and "\n" not in line


def test_simulator_set_after_numba_import_is_refused():
    proc = python(textwrap.dedent("""
        import os, numba, kernels
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        try:
            kernels.device()
        except kernels.KernelError as exc:
            print("ERR", exc)
    """))
    assert "after numba was imported" in proc.stdout, proc.stdout + proc.stderr[-2000:]


def test_gpu_check_parses_its_arguments():
    args = gpu_check.parse(["--out", "r.json", "--size", "100", "--formats", "bfloat16,binary32"])
    assert (args.out, args.size, args.formats, args.seed) == \
        ("r.json", 100, ("bfloat16", "binary32"), 0)
    for argv, fragment in ((["--size", "3"], "--out"), (["--out", "r", "--size", "0"], "--size"),
                           (["--out", "r", "--formats", "nope"], "--formats"),
                           (["--out", "r", "--seed", "-1"], "--seed")):
        with pytest.raises(SystemExit, match=fragment):
            gpu_check.parse(argv)
    assert gpu_check.instance("matmul", 4096).attrs.x_shape == (64, 64)
    assert gpu_check.instance("matmul", 10).attrs.x_shape == (2, 64)
    assert gpu_check.instance("relu", 10).attrs.shape == (10,)


def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path):
    out = tmp_path / "gpu.json"
    for env in ({}, {"NUMBA_ENABLE_CUDASIM": "1"}):
        proc = subprocess.run([sys.executable, "-m", "roundoff_coverage.kernels.gpu_check", "--out", str(out)],
                              capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={**{k: v for k, v in os.environ.items()
                                      if k != "NUMBA_ENABLE_CUDASIM"}, **env})
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "GPU" in proc.stderr
        assert not out.exists()


_PTX = """
    from roundoff_coverage.kernels.elementwise import ELEMENTWISE, make_kernels
    from roundoff_coverage.kernels.products import make_matmul
    from roundoff_coverage.kernels.rows import make_reduce
    v, rp = f[::1], i[::1]
    out = {}
    for flav in ("binary64", "binary32", "emulated"):
        P = build(flav, False)
        fwd = make_kernels(ELEMENTWISE["mul"], P, False)[0]
        out[flav + "-mul"] = cuda.compile_ptx(fwd.py_func, (v, v, v, f, f, rp), cc=(9, 0))[0]
        mm = make_matmul(P)
        out[flav + "-matmul"] = cuda.compile_ptx(mm.py_func, (f[:, :, ::1],) * 3 + (i, f, rp),
                                                 cc=(9, 0))[0]
        red = make_reduce(P)
        out[flav + "-reduce"] = cuda.compile_ptx(red.py_func, (f[:, ::1], v, i, rp),
                                                 cc=(9, 0))[0]
    print(json.dumps(out))
"""


def test_gpu_build_compiles_to_ptx_without_fma_contraction():
    """The GPU build (libdevice bit casts and _rn intrinsics) compiles with NVVM, and the
    multiply-then-add of matmul and of sums stays two rounded operations: no fma in the PTX
    (plain a * b + c would be contracted: FACTS, numba's CUDA target)."""
    ptx = compile_ptx(_PTX)
    for key, text in ptx.items():
        assert ".entry" in text, key
        assert "fma." not in text, f"{key}: FMA contraction in the PTX"
    assert "mul.rn.f64" in ptx["binary64-matmul"] and "add.rn.f64" in ptx["binary64-matmul"]
    assert "mul.rn.f32" in ptx["binary32-matmul"]


_GPU_CHECK = textwrap.dedent("""
    import json, os
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    import numpy as np
    from roundoff_coverage import kernels
    from roundoff_coverage.kernels import gpu_check
    rng = np.random.default_rng(0)
    rows = [gpu_check.measure(name, "bfloat16", route, 8, rng)
            for name in kernels.names() for route in kernels.of_op(name).routes]
    print(json.dumps(rows))
""")


def test_gpu_check_measures_every_kernel_and_route():
    """gpu_check's measurement (what it runs on a GPU) in the simulator at a tiny size: one
    row per kernel and route, every contract held, against the exact reference."""
    proc = python(_GPU_CHECK, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {r["op"] for r in rows} == set(kernels.names())
    for r in rows:
        # detach's pullback is no gradient at all (its input is detached): nothing to measure.
        assert r["device"] == "simulator", r
        assert r["samples"] > 0 or (r["op"], r["route"]) == ("detach", "gradient"), r
        assert r["held"] is True, r
        if r["agreement"] == "bitwise":
            assert r["differ_from_emulated"] == 0, r


def test_every_operator_with_a_cuda_entry_has_a_kernel():
    """The spec's CUDA column (routes.vocabulary): every operator marked ``yes`` or ``at some
    attributes`` has a kernel serving its default attributes, and a forward route."""
    cuda = {row[1]: row[3] for row in VOCABULARY}
    for name, entry in cuda.items():
        if entry in ("yes", "at some attributes"):
            k = kernels.of_op(routes.op(name))
            assert k is not None, name
            assert "forward" in k.routes, name
    # The gradient routes the issue asks for at least.
    for name in ("add", "mul", "exp", "relu", "gelu", "softplus", "matmul", "linear", "softmax",
                 "layerNorm", "crossEntropy"):
        assert "gradient" in kernels.of_op(name).routes, name

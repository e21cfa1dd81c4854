"""Kernels of the data movement module (gather, scatter, indexAt, slice, reshape, permute,
broadcast, cat, detach) and the gelu and softplus elementwise kernels: properties of their
simulator cases beyond the contract (tests/kernels/test_kernels_contracts.py checks every case); the
attributes the kernels refuse; the contracts; gelu's literals rounded on the device; gather
and scatter over two axes through their launchers; the GPU build (PTX).
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import kernels
from roundoff_coverage import routes
from roundoff_coverage.kernels import elementwise, movement
from roundoff_coverage.kernels.contract import flavour
from kernel_harness import (check as _check, flipped, ptx as compile_ptx, python,
                            unpack)


def test_fills_and_signed_zeros_move_unchanged(simulated):
    """Movement copies bits: -0 in and -0 out (e4m3fn has -0), and a slice pullback's filled
    zeros are +0, as the rule's zeros_like."""
    cases, results = simulated
    seen = 0
    for c in cases:
        if c["op"].name != "permute" or c["route"] != "forward":
            continue
        x = np.ravel(c["xs"][0])
        y = unpack(results[c["id"]]["outputs"][0]).reshape(-1)
        neg_zero = (x == 0) & np.signbit(x)
        assert np.sum((y == 0) & np.signbit(y)) == np.sum(neg_zero), c["id"]
        seen += int(neg_zero.any())
    assert seen > 0
    c = next(c for c in cases if c["op"].name == "slice" and c["route"] == "gradient")
    g = unpack(results[c["id"]]["outputs"][0]).reshape(-1)
    assert np.all(np.signbit(g[[0, 2]]) == 0) and np.all(g[[0, 2]] == 0)


def test_check_fails_on_a_wrong_bit(simulated):
    """The comparison can fail: one flipped low bit in a moved value is caught."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == "permute" and c["fmt"] == "bfloat16"
             and c["route"] == "forward" and c["mode"] == "nearest_even")
    with pytest.raises(AssertionError):
        _check(c, flipped(results[c["id"]]))


def test_of_op_returns_none_at_unsupported_attributes():
    assert kernels.of_op(routes.op("scatter", mode="sum")) is None
    assert kernels.of_op(routes.op("scatter", mode="prod")) is None
    assert kernels.of_op(routes.op("gather", element="int8")) is None
    assert kernels.of_op(routes.op("slice", element="uint8")) is None
    assert kernels.of_op(routes.op("reshape", element="bool")) is None
    assert kernels.of_op(routes.op("cat", element="int8")) is None
    assert kernels.of_op(routes.op("scatter", mode="max")).kind == "movement"
    assert kernels.of_op(routes.op("gelu", approximate="tanh")).kind == "elementwise"
    assert kernels.of_op(routes.op("indexAt")).name == "indexAt"


def test_contracts_claim_exact_movement():
    for k in movement.KERNELS:
        assert k.claim("forward", "float8_e4m3fn", "odd") == ("bitwise", 0.0, 0.0), k.name
        assert k.claim("forward", "binary64") == ("bitwise", 0.0, 0.0), k.name
    # Pullbacks that sum copies round: bitwise in nearest even only, no ulp bound.
    for name in ("gather", "broadcast"):
        k = kernels.of_op(name)
        assert k.claim("gradient", "bfloat16") == ("bitwise", None, 0.0)
        assert k.claim("gradient", "bfloat16", "upward").agreement == "none"
    assert kernels.of_op("slice").claim("gradient", "bfloat16", "upward") == \
        ("bitwise", None, 0.0)
    assert kernels.of_op("scatter").routes == ("forward",)
    for name in ("gelu", "softplus"):
        k = kernels.of_op(name)
        assert k.routes == ("forward", "gradient")
        assert k.claim("forward", "bfloat16").agreement == "screened"
        assert k.claim("forward", "bfloat16").max_ulp is None


def test_gelu_literals_round_on_the_device_as_the_rule_rounds_them():
    """The device rounds the binary64 nearest of each literal into the format (one
    multiplication by 1); the rule rounds the decimal literal itself (xp.full_like).  Equal
    in every format and deterministic mode the kernels serve."""
    literals = dict(zip(("RSQRT2", "RSQRT2PI", "SQRT_2_OVER_PI", "GELU_C"),
                        elementwise._GELU_LITERALS))
    from roundoff_coverage.routes.families import activation
    checked = 0
    for name in formats.CATALOG:
        for mode in formats.modes.MODES[:-1]:
            try:
                flav = flavour(name, mode)
            except kernels.KernelError:
                continue
            fmt = formats.get(name)
            for attr, value in literals.items():
                text = getattr(activation, attr)
                assert float(text) == value
                want = formats.round_exact(text, fmt, mode).to_float()
                if flav == "binary32":
                    got = float(np.float32(value))
                else:
                    got = float(formats.round_to(np.array([value]), fmt, mode)[0])
                assert np.float64(got).view(np.int64) == np.float64(want).view(np.int64), \
                    (name, mode, attr)
                checked += 1
    assert checked > 100


_DIRECT = textwrap.dedent("""
    import os, sys
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    import numpy as np
    from roundoff_coverage import formats, numerics, routes
    from roundoff_coverage.kernels import movement
    from roundoff_coverage.kernels.base import Context
    from roundoff_coverage.kernels.primitives import build, rounding_params
    from kernel_harness import same
    rng = np.random.default_rng(3)
    fmt = formats.get("bfloat16")
    ctx = Context(fmt, "nearest_even", "emulated", True, build("emulated", True),
                  rounding_params(fmt, "nearest_even"))
    bad = 0
    for o, launch in ((routes.op("gather", shape=(2, 3, 2), axes=(1, 0), index_shape=(2, 2)),
                       movement.launch_gather),
                      (routes.op("scatter", shape=(2, 3, 2), axes=(1, 0), index_shape=(3,),
                                 mode="max"), movement.launch_scatter)):
        rule = o.rule(numerics.emulated(fmt))
        for kind in ("ordinary", "special"):
            xs = o.samples(rng, fmt, kind)
            routes_ = ("forward", "gradient") if o.name == "gather" else ("forward",)
            for route in routes_:
                cots = (formats.round_to(rng.uniform(-2, 2, o.outputs[0].shape), fmt)
                        .reshape(o.outputs[0].shape),)
                got = launch(o, xs, cots, route, ctx)
                want = rule.forward(xs) if route == "forward" else rule.backward(xs, cots)
                bad += int(not np.all(same(np.ravel(got[0]), np.ravel(want[0]))))
    print("BAD", bad)
""")


def test_gather_and_scatter_over_two_axes_by_their_launchers():
    """Index tuples over two axes, through the launchers directly."""
    proc = python(_DIRECT, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "BAD 0", proc.stdout


_PTX = """
    from roundoff_coverage.kernels.elementwise import ELEMENTWISE, make_kernels
    from roundoff_coverage.kernels.movement import make_fold, make_take
    v, iv = f[::1], i[::1]
    flav = sys.argv[1]
    P = build(flav, False)
    out = {"take": cuda.compile_ptx(make_take().py_func, (v, iv, v), cc=(9, 0))[0],
           "fold": cuda.compile_ptx(make_fold(P).py_func, (v, iv, iv, iv, i, v, iv),
                                    cc=(9, 0))[0]}
    for name in ("gelu", "softplus"):
        fwd, grad = make_kernels(ELEMENTWISE[name], P, False)
        out[name] = cuda.compile_ptx(fwd.py_func, (v, v, f, f, iv), cc=(9, 0))[0]
        out[name + "-grad"] = cuda.compile_ptx(grad.py_func, (v, v, v, f, f, iv), cc=(9, 0))[0]
    print(json.dumps(out))
"""


@pytest.mark.parametrize("flav", ("emulated", "binary64", "binary32"))
def test_gpu_build_compiles_to_ptx_without_fma_contraction(flav):
    """The GPU build of take, fold, gelu and softplus compiles with NVVM (no fma in the
    movement kernels)."""
    ptx = compile_ptx(_PTX, flav)
    for key, text in ptx.items():
        assert ".entry" in text, key
    # take and fold do no arithmetic of their own besides the _rn primitives.  gelu's and
    # softplus's PTX holds fma instructions, but inside libdevice's exp, erf, log1p (exp
    # alone compiles to 14): the functions' own ulp bounds cover them; the kernel's products
    # and sums are _rn intrinsics, never contracted.
    for key in ("take", "fold"):
        assert "fma." not in ptx[key], f"{key}: FMA contraction in the PTX"

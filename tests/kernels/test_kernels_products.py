"""Kernels of the products (kernels.products: matmul, scaledMatmul and linear), of convolution
and pooling (kernels.conv: conv, convTranspose, pool, smoothMaxPool) and of the spectral
operators (kernels.spectral: rfft, irfft, selectiveScan): properties of their simulator cases
beyond the contract (tests/kernels/test_kernels_contracts.py checks every case), the table entries
and claims, the GPU build's PTX where NVVM is installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import kernels
from roundoff_coverage import numerics
from roundoff_coverage import routes
from kernel_harness import (check as _check, flavour_ptx, flipped as _flipped, same,
                            unpack)


def test_twiddle_free_transforms_are_bitwise_in_binary64(simulated):
    """At lengths 1, 2 and 4 every twiddle is an exact 0 or +-1 (no cos or sin is evaluated),
    so even the binary64 kernels agree bit for bit with the rule: the DFT sums, the signs
    of the -S half, irfft's doubling and division."""
    cases, results = simulated
    seen = 0
    for c in cases:
        a = c["op"].attrs
        if c["op"].name not in ("rfft", "irfft") or c["fmt"] != "binary64" \
                or c["route"] != "forward":
            continue
        n = a.shape[a.axis] if c["op"].name == "rfft" else a.length
        if n not in (1, 2, 4):
            continue
        emu = c["op"].rule(numerics.emulated("binary64")).forward(c["xs"])
        for got, e in zip(results[c["id"]]["outputs"], emu):
            assert same(unpack(got), e).all(), c["id"]
        seen += 1
    assert seen >= 6


@pytest.mark.parametrize("name,route", [("conv", "forward"), ("linear", "gradient"),
                                        ("matmul", "gradient"), ("pool", "forward")])
def test_check_fails_on_a_wrong_bit(simulated, name, route):
    """The comparison can fail: one flipped low bit in a kernel output is caught."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == name and c["fmt"] == "bfloat16"
             and c["route"] == route and c["xs"][0].size and "special" not in c["id"]
             and np.isfinite(unpack(results[c["id"]]["outputs"][0]).reshape(-1)[:1]).all())
    _check(c, results[c["id"]])
    with pytest.raises(AssertionError):
        _check(c, _flipped(results[c["id"]]))


def test_table_entries_routes_and_claims():
    for name in ("matmul", "scaledMatmul", "linear"):
        assert kernels.of_op(name).routes == ("forward", "gradient")
        assert kernels.of_op(name).contract.primitives("gradient") == frozenset({"multiply", "add"})
    for name in ("conv", "convTranspose", "pool", "smoothMaxPool", "rfft", "irfft",
                 "selectiveScan"):
        assert kernels.of_op(name).routes == ("forward", "gradient")
    assert kernels.of_op("linear").claim("gradient", "bfloat16") == ("bitwise", None, 0.0)
    assert kernels.of_op("conv").claim("forward", "float8_e4m3fn").agreement == "bitwise"
    assert kernels.of_op("pool").claim("forward", "binary64").agreement == "bitwise"
    assert kernels.of_op("pool").claim("forward", "bfloat16", "upward").agreement == "none"
    assert kernels.of_op("rfft").claim("forward", "bfloat16").agreement == "screened"
    assert kernels.of_op("rfft").claim("forward", "binary64").agreement == "none"
    assert kernels.of_op("selectiveScan").claim("forward", "binary32").agreement == "screened"
    assert kernels.of_op("smoothMaxPool").claim("forward", "binary16").max_ulp is None


def test_every_attribute_combination_is_served():
    """The kernels replay the rules' own gathers, so every attribute combination the rules
    accept has a kernel (no ``accepts`` restriction; the table's test instances are each
    checked to be served when the cases are built)."""
    for attrs in ({"mode": "average", "ceil_mode": True, "count_include_pad": False,
                   "padding": (1,)}, {"dilation": (2,), "padding": (1,)}):
        assert kernels.of_op(_op("pool", **attrs)).name == "pool"
    assert kernels.of_op(_op("conv", shape=(1, 4, 3), groups=2, out_channels=2)) is not None


def _op(name, **attrs):
    o = routes.op(name, **attrs)
    o.check()
    return o


_PTX = """
    from roundoff_coverage.kernels import conv as cv, products as pr, rows, spectral as sp
    v, iv, m2, i2 = f[::1], i[::1], f[:, ::1], i[:, ::1]
    sigs = {"scale": (rows.make_by_scalar, (v, v, f, i, iv)),
            "linear": (pr.make_linear, (m2, m2, v, m2, iv)),
            "conv": (cv.make_gather_dot, (v, v, v, i2, iv, i, v, iv)),
            "conv_transpose": (cv.make_scatter_dot, (v, v, v, i2, i2, iv, iv, i, v, iv)),
            "window": (cv.make_window, (v, i2, i2, i, v, i, v, iv)),
            "smooth": (cv.make_smooth, (v, i2, i, f, v, iv)),
            "twiddle": (sp.make_twiddle, (v, iv, f, v, iv)),
            "dft": (sp.make_dft, (m2, m2, m2, i, f, iv)),
            "scan": (sp.make_scan, (m2,) * 7 + (iv,))}
"""


def test_gpu_build_compiles_to_ptx():
    """Every kernel of the three modules compiles for the GPU in the three flavours, and the
    ones without transcendental functions have no fma in their PTX (libdevice's exp, log,
    cos and sin use fma inside themselves)."""
    ptx = flavour_ptx(_PTX)
    for key, text in ptx.items():
        assert ".entry" in text, key
        if key.split("-")[1] in ("scale", "linear", "conv", "conv_transpose", "window", "dft"):
            assert "fma." not in text, f"{key}: FMA contraction in the PTX"
    assert "mul.rn.f64" in ptx["binary64-conv"] and "add.rn.f64" in ptx["binary64-dft"]
    assert "mul.rn.f32" in ptx["binary32-linear"]

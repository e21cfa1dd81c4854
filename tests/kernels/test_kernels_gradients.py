"""Gradient kernels of reduce (kernels.rows), conv, convTranspose, pool, smoothMaxPool
(kernels.conv), rfft, irfft and selectiveScan (kernels.spectral): properties of their
simulator cases beyond the contract (tests/kernels/test_kernels_contracts.py checks every case: every
example of each operator, geometry edges, ties, signed zeros, infinities and NaN); the
routes and gradient contracts; the GPU build of the gradient kernels (PTX) where NVVM is
installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import kernels
from kernel_harness import (check as _check, flavour_ptx, flipped,
                            unpack)

NAMES = ("reduce", "conv", "convTranspose", "pool", "smoothMaxPool", "rfft", "irfft",
         "selectiveScan")


def test_tie_count_rounds_in_float8(simulated):
    """18 tied maxima: the rule's count (a float8 sum of ones) stops at 16, and so does the
    kernel's: each entry gets g / 16."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == "reduce" and c["op"].attrs.shape == (2, 18)
             and c["fmt"] == "float8_e4m3fn")
    out = unpack(results[c["id"]]["outputs"][0])
    g = c["cots"][0].reshape(-1)
    want = formats.round_to(g / 16.0, formats.get("float8_e4m3fn"))
    assert (out[0] == want[0]).all() and (out[1] == want[1]).all()


@pytest.mark.parametrize("name", NAMES)
def test_check_fails_on_a_wrong_bit(simulated, name):
    """One flipped bfloat16-visible bit in a gradient output is caught."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == name and c["fmt"] == "bfloat16"
             and c["route"] == "gradient" and c["kind"] == "ordinary" and c["xs"][0].size > 1
             and np.any(unpack(results[c["id"]]["outputs"][0]) != 0))
    _check(c, results[c["id"]])
    with pytest.raises(AssertionError):
        _check(c, flipped(results[c["id"]], nonzero=True))


def test_routes_and_gradient_contracts():
    for name in NAMES:
        k = kernels.of_op(name)
        assert k.routes == ("forward", "gradient"), name
    assert kernels.of_op("reduce").contract.primitives("gradient") == frozenset(
        {"add", "multiply", "maximum", "minimum", "divide"})
    assert kernels.of_op("conv").contract.primitives("gradient") == frozenset({"multiply", "add"})
    assert kernels.of_op("pool").claim("gradient", "float8_e4m3fn").agreement == "bitwise"
    assert kernels.of_op("pool").claim("gradient", "bfloat16", "upward").agreement == "none"
    assert kernels.of_op("reduce").claim("gradient", "binary64").agreement == "bitwise"
    assert kernels.of_op("smoothMaxPool").claim("gradient", "bfloat16").agreement == \
        "screened"
    assert kernels.of_op("rfft").claim("gradient", "binary64").agreement == "none"
    assert kernels.of_op("selectiveScan").claim("gradient", "binary16").max_ulp is None


_PTX = """
    from roundoff_coverage.kernels import conv as cv, rows, spectral as sp
    v, iv, m2, i2, m3 = f[::1], i[::1], f[:, ::1], i[:, ::1], f[:, :, ::1]
    sigs = {"reduce_grad": (rows.make_reduce_grad, (m2, v, m2, i, iv)),
            "gather_dot": (cv.make_gather_dot, (v, v, v, i2, iv, i, v, iv)),
            "scatter_dot": (cv.make_scatter_dot, (v, v, v, i2, i2, iv, iv, i, v, iv)),
            "weight_dot": (cv.make_weight_dot, (v, v, i2, iv, v, iv)),
            "channel_sum": (cv.make_channel_sum, (v, iv, v, iv)),
            "pool_share": (cv.make_pool_share, (v, v, i2, i2, i, v, i, v, v, iv)),
            "pool_scatter": (cv.make_pool_scatter, (v, v, v, i2, i, i, i, v, iv)),
            "scatter_terms": (cv.make_scatter_terms, (v, i2, i2, i, i, v, iv)),
            "smooth_terms": (cv.make_smooth_terms, (v, v, i2, i, f, v, iv)),
            "scan_grad": (sp.make_scan_grad, (m2, m2, m2, m3, m2, m3, m3, m2, m2, m2, iv)),
            "scan_sums": (sp.make_scan_sums, (m2, m2, m2, m3, m3, m2, m2, iv))}
"""


def test_gpu_build_compiles_to_ptx_without_fma_contraction():
    """The new gradient kernels compile with NVVM in the three flavours, and those without
    a transcendental primitive have no fma in their PTX (libdevice's exp uses fma inside)."""
    ptx = flavour_ptx(_PTX)
    assert len(ptx) == 33
    for key, text in ptx.items():
        assert ".entry" in text, key
        if key.split("-")[1] not in ("smooth_terms", "scan_grad"):
            assert "fma." not in text, f"{key}: FMA contraction in the PTX"
    assert "mul.rn.f64" in ptx["binary64-scatter_dot"]
    assert "add.rn.f32" in ptx["binary32-channel_sum"]
    assert "div.rn.f64" in ptx["binary64-reduce_grad"]

"""Gradient kernels of reduce (kernels.rows), conv, convTranspose, pool, smoothMaxPool
(kernels.conv), rfft, irfft and selectiveScan (kernels.spectral) in numba's CUDA simulator
against ``o.rule(numerics.emulated(fmt, mode)).backward`` (tests/kernel_harness.py: one
simulator subprocess, each case checked against its kernel's contract), on tiny instances:
every example of each operator, geometry edges, ties (max and min, the shares of a tied
maximum, a tie count rounded in float8_e4m3fn), signed zeros, infinities and NaN; the
routes and contracts; the GPU build of the new kernels (PTX) where NVVM is installed.
"""

from __future__ import annotations


import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import kernels
from kernel_harness import (FEW, FORMATS, case as _case, check as _check, examples as _examples,
                            flavour_ptx, flipped, op as _op, simulated_fixture,
                            special_inputs as _special_inputs, unpack)

NAMES = ("reduce", "conv", "convTranspose", "pool", "smoothMaxPool", "rfft", "irfft",
         "selectiveScan")


def _instances():
    """(op, formats): every example in every format, further layouts in fewer formats."""
    out = []
    for name in NAMES:
        out += [(o, FORMATS) for o in _examples(name)]
    more = [
        _op("reduce", shape=(3, 4), op="sum", axes=(1,)),
        _op("reduce", shape=(3, 4), op="prod", axes=(1,)),
        _op("reduce", shape=(3, 4), op="max", axes=(1,)),
        _op("reduce", shape=(2, 3, 2), op="prod", axes=(0, 2), keepdim=True),
        _op("reduce", shape=(2, 3, 2), op="min", axes=(2, 1)),
        _op("reduce", shape=(2, 3, 2), op="sum", axes=(0, 1, 2)),
        _op("reduce", shape=(3, 1), op="prod", axes=(1,)),           # no other entry: 1
        _op("reduce", shape=(2, 0), op="sum", axes=(1,)),            # empty
        _op("reduce", shape=(0, 3), op="prod", axes=(1,)),
        _op("conv", shape=(1, 2, 3, 3), out_channels=2, kernel=(2, 2), stride=(2, 1),
            padding=(1, 1), dilation=(1, 2), groups=2),
        _op("conv", shape=(2, 2, 3), out_channels=1, kernel=(3,), stride=(2,), padding=(2,),
            dilation=(1,), groups=1),
        _op("conv", shape=(1, 4, 3), out_channels=2, kernel=(1,), groups=2),
        _op("convTranspose", shape=(1, 1, 3), out_channels=2, kernel=(2,), stride=(3,),
            padding=(1,), dilation=(2,), output_padding=(2,), groups=1),
        _op("convTranspose", shape=(2, 2, 2, 1), out_channels=2, kernel=(2, 3), stride=(1, 2),
            padding=(1, 1), dilation=(1, 1), output_padding=(0, 1), groups=1),
        _op("pool", shape=(1, 4, 5), kernel=(3, 2), stride=(2, 2), padding=(1, 1),
            dilation=(1, 2), ceil_mode=True),
        _op("pool", shape=(2, 6), kernel=(3,), stride=(1,), padding=(1,)),  # overlapping
        _op("pool", mode="average", shape=(2, 4, 4), kernel=(3, 2), stride=(2, 1),
            padding=(1, 1), dilation=(1, 1), ceil_mode=True, count_include_pad=True),
        _op("pool", mode="average", shape=(1, 1, 5, 3), kernel=(2, 3), stride=(3, 1),
            padding=(1, 1), dilation=(1, 1), count_include_pad=False),
        _op("smoothMaxPool", shape=(2, 5), kernel=(3,), stride=(2,)),
        _op("smoothMaxPool", shape=(1, 4, 3), kernel=(2, 3), stride=(1, 1)),
        _op("rfft", shape=(5,)), _op("rfft", shape=(4, 2), axis=0), _op("rfft", shape=(1,)),
        _op("irfft", shape=(1,), length=1), _op("irfft", shape=(3, 2), axis=0, length=5),
        _op("irfft", shape=(2,), length=2),
        _op("selectiveScan", length=1, channels=2, state=2),
        _op("selectiveScan", length=3, channels=1, state=3),
    ]
    out += [(o, FEW) for o in more]
    return out


def _cases():
    rng = np.random.default_rng(11)
    cases = []
    for o, fmts in _instances():
        for fmt in fmts:
            for kind in o.decl.samples:
                cases.append(_case(o, fmt, "nearest_even", "gradient", kind, rng))
    # Specials where the samplers have none: padding zeros times infinities, -0 shares and
    # cotangents, NaN maxima shared among NaN entries.
    for o in (_examples("conv")[1], _examples("conv")[2], _examples("convTranspose")[1],
              _examples("convTranspose")[2], _op("pool", shape=(2, 6), kernel=(3,),
                                                 stride=(1,), padding=(1,)),
              _examples("pool")[1], _op("reduce", shape=(3, 4), op="prod", axes=(1,)),
              _op("reduce", shape=(4, 3), op="max", axes=(0,))):
        for fmt in ("binary32", "bfloat16"):
            cases.append(_case(o, fmt, "nearest_even", "gradient", "special", rng,
                               inputs=_special_inputs(o, rng)))
    # Ties: 18 equal entries (a count of 18 is 16 in float8_e4m3fn, 17 rounds to 16), -0 and
    # +0 tied in a maximum, a window maximum tied within and across windows.
    ties = [(_op("reduce", shape=(2, 18), op="max", axes=(1,)),
             (np.concatenate([np.zeros((1, 18)), np.full((1, 18), -1.5)]),)),
            (_op("reduce", shape=(2, 3), op="min", axes=(1,)),
             (np.array([[0.0, -0.0, 1.0], [2.0, 2.0, 2.0]]),)),
            (_op("pool", shape=(1, 2, 5), kernel=(3,), stride=(1,), padding=(1,)),
             (np.array([[[1.0, 1.0, 0.5, 1.0, 1.0], [0.0, -0.0, 0.0, -1.0, -0.0]]]),)),
            (_op("reduce", shape=(1, 3), op="prod", axes=(1,)),
             (np.array([[0.0, 0.0, -2.0]]),))]
    for o, xs in ties:
        for fmt in ("bfloat16", "float8_e4m3fn"):
            cases.append(_case(o, fmt, "nearest_even", "gradient", "ties", rng, inputs=xs))
    return cases


simulated = simulated_fixture(_cases, "kernels-gradients")


def test_every_gradient_kernel_meets_its_contract_in_the_simulator(simulated):
    """Every case: bitwise (or screened) agreement with the rule's pullback under
    numerics.emulated, as the kernel's gradient contract states; only binary64 cases of the
    transcendental kernels go uncompared."""
    cases, results = simulated
    compared = {}
    for c in cases:
        compared[c["op"].name] = compared.get(c["op"].name, 0) + _check(c, results[c["id"]])
    assert set(compared) == set(NAMES)
    assert all(n > 0 for n in compared.values()), compared
    assert sum(compared.values()) >= 0.85 * len(cases)


def test_gradients_are_returned_at_every_value_port(simulated):
    cases, results = simulated
    for c in cases:
        outs = [unpack(g) for g in results[c["id"]]["outputs"]]
        assert [o is None for o in outs] == [not p.differentiable for p in c["op"].inputs]
        for o, p in zip(outs, c["op"].inputs):
            assert o is None or o.shape == p.shape, c["id"]


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
             and "ordinary" in c["id"] and c["xs"][0].size > 1
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

"""Kernels of the products (kernels.products: matmul, scaledMatmul and linear, forward and
gradient), of convolution and pooling (kernels.conv: conv, convTranspose, pool,
smoothMaxPool) and of the spectral operators (kernels.spectral: rfft, irfft, selectiveScan)
in numba's CUDA simulator against numerics.emulated (tests/kernel_harness.py: one simulator
subprocess, each case checked against its kernel's contract); the table entries and claims;
the GPU build's PTX where NVVM is installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import kernels
from roundoff_coverage import numerics
from kernel_harness import (FEW, FORMATS, case as _case, check as _check, examples as _examples,
                            flavour_ptx, flipped as _flipped, op as _op, same,
                            simulated_fixture, special_inputs as _special_inputs, unpack)


def _instances():
    """(op, formats): every example of every operator in every format; further shapes and
    attributes (edges of the geometry, broadcasting, empty extents) in fewer formats."""
    out = []
    for name in ("matmul", "scaledMatmul", "linear", "conv", "convTranspose", "pool",
                 "smoothMaxPool", "rfft", "irfft", "selectiveScan"):
        out += [(o, FORMATS) for o in _examples(name)]
    more = [
        # products: stretched and added batch axes (sums in the gradient), empty extents.
        _op("matmul", x_shape=(1, 2, 3), y_shape=(2, 3, 2)),
        _op("matmul", x_shape=(3, 2, 2), y_shape=(2, 1)),
        _op("matmul", x_shape=(2, 3), y_shape=(3, 0)),
        _op("matmul", x_shape=(0, 3), y_shape=(3, 2)),
        _op("scaledMatmul", x_shape=(2, 0), y_shape=(0, 2)),
        _op("scaledMatmul", x_shape=(2, 2, 3), y_shape=(1, 3, 1)),
        _op("linear", batch=(0,)),
        _op("linear", batch=(3,), in_features=1, out_features=0),
        _op("linear", batch=(1, 2), in_features=4, out_features=1),
        # convolution: 2-D with stride, padding, dilation and groups together.
        _op("conv", shape=(1, 2, 3, 3), out_channels=2, kernel=(2, 2), stride=(2, 1),
            padding=(1, 1), dilation=(1, 2), groups=2),
        _op("conv", shape=(2, 2, 3), out_channels=1, kernel=(3,), stride=(2,), padding=(2,),
            dilation=(1,), groups=1),
        _op("convTranspose", shape=(1, 1, 3), out_channels=2, kernel=(2,), stride=(3,),
            padding=(1,), dilation=(2,), output_padding=(2,), groups=1),
        _op("convTranspose", shape=(2, 2, 2, 1), out_channels=2, kernel=(2, 3), stride=(1, 2),
            padding=(1, 1), dilation=(1, 1), output_padding=(0, 1), groups=1),
        # pooling: 2-D max with padding, dilation and ceil mode; average in every mode.
        _op("pool", shape=(1, 4, 5), kernel=(3, 2), stride=(2, 2), padding=(1, 1),
            dilation=(1, 2), ceil_mode=True),
        _op("pool", mode="average", shape=(2, 4, 4), kernel=(3, 2), stride=(2, 1),
            padding=(1, 1), dilation=(1, 1), ceil_mode=True, count_include_pad=True),
        _op("pool", mode="average", shape=(1, 1, 5, 3), kernel=(2, 3), stride=(3, 1),
            padding=(1, 1), dilation=(1, 1), count_include_pad=False),
        _op("smoothMaxPool", shape=(2, 5), kernel=(3,), stride=(2,)),
        _op("smoothMaxPool", shape=(1, 4, 3), kernel=(2, 3), stride=(2, 1)),
        # spectral: odd, even and degenerate lengths, other axes.
        _op("rfft", shape=(5,)), _op("rfft", shape=(8, 2), axis=0), _op("rfft", shape=(1,)),
        _op("rfft", shape=(2, 6), axis=1),
        _op("irfft", shape=(1,), length=1), _op("irfft", shape=(5,), length=8),
        _op("irfft", shape=(4, 2), axis=0, length=7), _op("irfft", shape=(2,), length=2),
        _op("selectiveScan", length=4, channels=3, state=3),
    ]
    out += [(o, FEW) for o in more]
    return out


def _cases():
    rng = np.random.default_rng(7)
    # Elementwise kernels (scale, mul, add) compile under their operator names in the same
    # process first: these kernels' compile keys must not collide with them.
    cases = [_case(_op(name, shape=(3,)), "bfloat16", "nearest_even", "forward", "ordinary",
                   rng) for name in ("scale", "mul", "add")]
    for o, fmts in _instances():
        k = kernels.of_op(o)
        # linear's rule cannot pull back through out_features = 0 (np.reshape(g, (-1, 0))).
        rts = ("forward",) if o.name == "linear" and o.attrs.out_features == 0 else k.routes
        for fmt in fmts:
            for kind in o.decl.samples:
                for route in rts:
                    cases.append(_case(o, fmt, "nearest_even", route, kind, rng))
    # Specials where the operator's samplers have none: padding zeros times infinities,
    # signed zero sums, NaN through the dot products.
    for o in (_op("matmul", x_shape=(2, 3), y_shape=(3, 2)),
              _op("scaledMatmul", x_shape=(1, 3), y_shape=(3, 2)),
              _op("linear"), _examples("conv")[1], _examples("conv")[2],
              _examples("convTranspose")[1], _examples("convTranspose")[2]):
        for fmt in ("binary32", "bfloat16"):
            for route in kernels.of_op(o).routes:
                cases.append(_case(o, fmt, "nearest_even", route, "special", rng,
                                   inputs=_special_inputs(o, rng)))
    # A negative scale: 0 * scale of an empty product is -0, g * scale flips signs.
    o = _op("scaledMatmul", x_shape=(2, 0), y_shape=(0, 2))
    xs = (np.zeros((2, 0)), np.zeros((0, 2)), np.asarray(-0.75))
    cases.append(_case(o, "bfloat16", "nearest_even", "forward", "negative-scale", rng,
                       inputs=xs))
    o = _op("scaledMatmul")
    xs = o.samples(rng, formats.get("bfloat16"), "ordinary")[:2] + (np.asarray(-1.25),)
    cases.append(_case(o, "bfloat16", "nearest_even", "gradient", "negative-scale", rng,
                       inputs=xs))
    return cases


simulated = simulated_fixture(_cases, "kernels-products")


def test_every_kernel_meets_its_contract_in_the_simulator(simulated):
    """Every case: bitwise (or screened) agreement with numerics.emulated as the kernel's
    contract states; binary64 cases of the transcendental kernels are not compared (the
    device's binary64 cos, sin, exp, log are not correctly rounded: no claim)."""
    cases, results = simulated
    compared = 0
    for c in cases:
        compared += _check(c, results[c["id"]])
    assert compared >= 0.85 * len(cases)
    assert {c["op"].name for c in cases} == {
        "scale", "mul", "add", "matmul", "scaledMatmul", "linear", "conv", "convTranspose",
        "pool", "smoothMaxPool", "rfft", "irfft", "selectiveScan"}


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
    accept has a kernel (no ``accepts`` restriction)."""
    for o, _ in _instances():
        assert kernels.of_op(o) is not None, o
    for attrs in ({"mode": "average", "ceil_mode": True, "count_include_pad": False,
                   "padding": (1,)}, {"dilation": (2,), "padding": (1,)}):
        assert kernels.of_op(_op("pool", **attrs)).name == "pool"
    assert kernels.of_op(_op("conv", shape=(1, 4, 3), groups=2, out_channels=2)) is not None


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

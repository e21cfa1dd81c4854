"""Kernels of mean, the softmax gradients (kernels.rows), layerNorm, batchNorm,
batchNormRunning (kernels.norms), attentionFromScores and multiheadAttention
(kernels.attention): the check of their simulator cases can fail (tests/kernels/test_kernels_contracts.py
checks every case); the attributes these kernels serve; their contracts; their GPU build
(PTX, no FMA contraction).
"""

from __future__ import annotations

import pytest

from roundoff_coverage import kernels
from roundoff_coverage import routes
from kernel_harness import (check as _check, flavour_ptx, flipped)


@pytest.mark.parametrize("name", ["layerNorm", "multiheadAttention", "softmax"])
def test_check_fails_on_a_wrong_bit(simulated, name):
    """One flipped bfloat16-visible bit in a gradient output is caught."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == name and c["fmt"] == "bfloat16"
             and c["route"] == "gradient" and c["xs"][0].size > 1 and c["instance"].emulated)
    with pytest.raises(AssertionError):
        _check(c, flipped(results[c["id"]], nonzero=True))


def test_attention_kernels_serve_empty_extents():
    """The spec's CUDA column says "yes" for both at every attribute: empty extents included
    (their values: tests/kernels/test_kernels_attention_empty.py)."""
    op = routes.op
    for o in (op("multiheadAttention", head_dim=0), op("multiheadAttention", queries=0),
              op("multiheadAttention", value_head_dim=0),
              op("multiheadAttention", batch=(0,)),
              op("attentionFromScores", queries=0), op("attentionFromScores", value_dim=0),
              op("attentionFromScores", batch=(2, 0))):
        assert kernels.of_op(o).kind == "attention", o.attrs
    assert kernels.of_op(op("multiheadAttention")).name == "multiheadAttention"
    assert kernels.of_op(op("attentionFromScores", batch=(2,))).kind == "attention"


def test_contracts_list_the_primitives_of_both_routes():
    for name in ("mean", "softmax", "logSoftmax", "layerNorm", "batchNorm",
                 "batchNormRunning", "attentionFromScores", "multiheadAttention"):
        k = kernels.of_op(name)
        assert k.routes == ("forward", "gradient"), name
        assert k.contract.primitives("forward") <= k.contract.primitives("gradient") or name == "mean", name
    assert kernels.of_op("mean").claim("forward", "bfloat16").agreement == "bitwise"
    assert kernels.of_op("mean").claim("gradient", "binary64").agreement == "bitwise"
    assert kernels.of_op("layerNorm").claim("gradient", "bfloat16").agreement == "screened"
    assert kernels.of_op("layerNorm").claim("forward", "binary64").agreement == "none"
    assert kernels.of_op("softmax").contract.primitives("gradient") == \
        kernels.of_op("softmax").contract.primitives("forward") | {"multiply"}


_PTX = """
    from roundoff_coverage.kernels import attention, norms, rows
    v, m, rp = f[::1], f[:, ::1], i[::1]
    sigs = {"mean": (rows.make_mean, (m, v, f, rp)),
            "softmax_grad": (rows.make_softmax_grad, (m, m, m, i, rp)),
            "param_sums": (norms.make_param_sums, (m, m, v, v, rp)),
            "softmax_lin": (attention.make_softmax_lin, (m, m, m, i, f, rp)),
            "batch_norm_grad": (norms.make_batch_norm_grad, (m,) * 5 + (f, f, rp)),
            "running_grad": (norms.make_running_grad, (v,) * 7 + (f, rp))}
"""


def test_gpu_build_compiles_to_ptx_without_fma_contraction():
    """The GPU build of the new kernels compiles with NVVM, and those without a
    transcendental primitive keep every product and sum two rounded operations (no fma in
    the PTX), in the three precision flavours."""
    ptx = flavour_ptx(_PTX)
    for key, text in ptx.items():
        assert ".entry" in text, key
        # libdevice's exp, log and rsqrt use fma inside their own evaluation: only kernels
        # without a transcendental primitive can be checked for contraction this way.
        if key.split("-")[1] in ("mean", "param_sums", "softmax_lin"):
            assert "fma." not in text, f"{key}: FMA contraction in the PTX"
    assert "binary64-batch_norm_grad" in ptx and "binary32-running_grad" in ptx

"""Kernels of mean, the softmax gradients (kernels.rows), layerNorm, batchNorm,
batchNormRunning (kernels.norms), attentionFromScores and multiheadAttention
(kernels.attention) in numba's CUDA simulator against numerics.emulated, on tiny instances
(tests/kernel_harness.py: one simulator subprocess, each case checked against its kernel's
contract); the attributes these kernels refuse; their GPU build (PTX, no FMA contraction).
"""

from __future__ import annotations


import numpy as np
import pytest

from roundoff_coverage import kernels
from roundoff_coverage import routes
from kernel_harness import (FORMATS, case as _case, check as _check, flavour_ptx, flipped,
                            route_cases, simulated_fixture, unpack)


def _instances():
    """(op, kinds) at tiny sizes: the defaults and one other layout of each operator."""
    op = routes.op
    return [
        (op("mean", shape=(3, 4), axes=(1,)), ("ordinary", "special")),
        (op("mean", shape=(2, 3, 2), axes=(0, 2), keepdim=True), ("ordinary",)),
        (op("softmax", shape=(2, 3), axis=0), ("ordinary", "special")),
        (op("logSoftmax", shape=(3, 2), axis=1), ("ordinary", "edges")),
        (op("layerNorm", shape=(2, 3)), ("ordinary", "edges")),
        (op("layerNorm", shape=(4,)), ("ordinary",)),
        (op("layerNorm", shape=(2, 2, 2)), ("ordinary",)),
        (op("batchNorm", shape=(3, 2)), ("ordinary", "edges")),
        (op("batchNorm", shape=(2, 2, 2)), ("ordinary",)),
        (op("batchNormRunning", shape=(2, 3), axis=1), ("ordinary",)),
        (op("batchNormRunning", shape=(2, 2, 2), axis=0), ("ordinary",)),
        (op("batchNormRunning", shape=(3,), axis=0), ("ordinary",)),
        (op("attentionFromScores"), ("ordinary", "edges", "special")),
        (op("attentionFromScores", batch=(2,), queries=1, key_count=2, value_dim=1),
         ("ordinary",)),
        (op("multiheadAttention"), ("ordinary", "edges", "special")),
        (op("multiheadAttention", heads=1, head_dim=2, value_head_dim=2, key_count=2),
         ("ordinary",)),
    ]


def _cases():
    rng = np.random.default_rng(7)
    cases = route_cases(_instances(), FORMATS, rng)
    # Outside nearest even mean's contract claims no agreement (kernels.contract), but the
    # kernel runs in every deterministic mode.
    o = routes.op("mean", shape=(2, 3), axes=(1,))
    for mode in ("toward_zero", "upward"):
        cases.append(_case(o, "bfloat16", mode, "forward", "ordinary", rng))
    return cases


simulated = simulated_fixture(_cases, "kernels_norms")


def test_every_kernel_meets_its_contract_in_the_simulator(simulated):
    cases, results = simulated
    compared = {}
    for c in cases:
        ok = _check(c, results[c["id"]])
        compared[c["op"].name] = compared.get(c["op"].name, 0) + ok
    # Every operator is compared bit for bit somewhere (binary64 with a transcendental
    # primitive claims no agreement; the screen excludes almost nothing).
    assert set(compared) == {o.name for o, _ in _instances()}
    assert all(n > 0 for n in compared.values()), compared
    assert sum(compared.values()) >= 0.7 * len(cases)


def test_gradients_are_returned_at_every_value_port(simulated):
    cases, results = simulated
    for c in cases:
        if c["route"] != "gradient":
            continue
        outs = [unpack(g) for g in results[c["id"]]["outputs"]]
        assert [o is None for o in outs] == [not p.differentiable for p in c["op"].inputs]
        for o, p in zip(outs, c["op"].inputs):
            assert o is None or o.shape == p.shape, c["id"]


@pytest.mark.parametrize("name", ["layerNorm", "multiheadAttention", "softmax"])
def test_check_fails_on_a_wrong_bit(simulated, name):
    """One flipped bfloat16-visible bit in a gradient output is caught."""
    cases, results = simulated
    c = next(c for c in cases if c["op"].name == name and c["fmt"] == "bfloat16"
             and c["route"] == "gradient" and c["xs"][0].size > 1)
    with pytest.raises(AssertionError):
        _check(c, flipped(results[c["id"]], nonzero=True))


def test_attention_kernels_serve_empty_extents():
    """The spec's CUDA column says "yes" for both at every attribute: empty extents included
    (their values: tests/test_kernels_attention_empty.py)."""
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

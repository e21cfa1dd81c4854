"""Kernel contracts and the traces of their rules (kernels/trace.py, numerics.recording).

Every kernel's contract is computed from the trace of its rule but those of the two kernels
that draw (bernoulliMask, randUniform), which compute their values from the key outside the
rule's primitives (a multiply by 2**-53, exact) and list them.  A traced contract is the
trace itself, so what is checked is the premise it rests on, against the kernels' own code:
the device primitives an elementwise kernel's bodies look up in the primitive table
(kernels/elementwise.py, recorded when the factories run) are those the trace of its rule
names.  The other kernels' agreement with their rules is checked bit for bit by the
simulator tests (tests/kernels/test_kernels*.py); the listed contracts are checked against the trace
here, and the claims the traced contracts make are pinned."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import kernels, routes
from roundoff_coverage.kernels import trace
from roundoff_coverage.kernels.contract import TRACED
from roundoff_coverage.kernels.elementwise import ELEMENTWISE
from roundoff_coverage.numerics.recording import RecordingBackend

# Kernels whose values come from a random key, not from the rule's primitives.
DRAWS = ("bernoulliMask", "randUniform")


def _kernels():
    return [kernels.of_op(n) for n in kernels.names()]


def test_recording_sees_every_primitive_a_rule_calls_in_order():
    # softmax along the last axis: the maximum, the shift, exp, the sum, the division.
    o = routes.op("softmax", shape=(2, 3), axis=1)
    bk = RecordingBackend("binary32", policy="strict")
    o.rule(bk).forward((np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]]),))
    assert bk.trace[:2] == ["maximum", "maximum"]            # a sequential fold of 3
    assert bk.seen == {"maximum", "subtract", "exp", "add", "divide"}


@pytest.mark.parametrize("k", [k for k in _kernels() if k.name in DRAWS],
                         ids=lambda k: k.name)
def test_a_listed_contract_agrees_with_the_trace_of_its_rule(k):
    c = k.contract
    fwd = trace.primitives(k.name, "forward", k.accepts)
    assert c.forward != TRACED
    assert fwd <= c.forward and c.forward <= {"multiply", "subtract", "divide"}
    if "gradient" in k.routes:
        traced = trace.primitives(k.name, "gradient", k.accepts)
        assert c.gradient <= traced, sorted(c.gradient - traced)
        assert traced - c.gradient <= fwd, sorted(traced - c.gradient - fwd)


class _Looked(dict):
    """A primitive table that records the names a kernel factory looks up (each lookup
    gives a stand-in: the factory only builds closures, nothing runs)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __getitem__(self, name):
        self.names.add(name)
        return lambda *args: 0.0


def _looked_up(factory) -> frozenset:
    table = _Looked()
    factory(table, lambda f: f)           # the device decorator: none needed to build
    return frozenset(table.names)


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_an_elementwise_kernel_spells_the_primitives_of_its_rules_trace(name):
    k, e = kernels.of_op(name), ELEMENTWISE[name]
    assert k.contract.forward == TRACED
    traced = trace.primitives(name, "forward", k.accepts)
    assert _looked_up(e.forward) == traced, sorted(_looked_up(e.forward) ^ traced)
    if e.gradient is not None:
        # The gradient bodies recompute what they need of the forward pass: within the
        # gradient's trace, which includes the forward pass.
        grad = _looked_up(e.gradient)
        assert grad <= trace.primitives(name, "gradient", k.accepts), sorted(grad)


def test_traced_single_rounding_claims():
    once = {n: kernels.of_op(n).contract.rounds_once() for n in
            ("add", "exp", "neg", "clamp", "safeLog", "sigmoid", "silu", "gelu", "softplus")}
    assert once == {"add": True, "exp": True, "neg": True, "clamp": True, "safeLog": True,
                    "sigmoid": False, "silu": False, "gelu": False, "softplus": False}
    # One rounding: a data-independent bound (half an ulp and the libdevice error of exp).
    assert kernels.of_op("exp").claim("forward", "bfloat16").max_ulp == \
        pytest.approx(0.5 + 2 ** (8 - 51))
    assert kernels.of_op("sigmoid").claim("forward", "bfloat16").max_ulp is None

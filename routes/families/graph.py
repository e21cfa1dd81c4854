"""Graph structure (spec: "Graph structure"): detach and custom.

detach reads a recorded value at a detached port and returns it at a value port: the forward
map is the identity and its parent receives no contribution (PyTorch's detach).

custom is the node whose program lives outside the operator value (spec: "A custom node ...
carries a name and the shapes of its inputs and output, and the node's checked program lives
in its graph's payload").  Its attributes are exactly those: ``program`` (the name, text;
``name`` is the operator's own), ``inputs``
(the input shapes) and ``shape`` (the output's).  The rule of a node with a program is
``routes.custom.bind(op, program, pullback).rule(backend)``; the plain registry entry runs
routes.custom.ZEROS (every entry 0, no reads) with a zero pullback, because every registered
operator value must have a forward map for the registry's tests.
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from .. import custom as C
from ..certs import convention, roundoff
from ..ports import detached, value
from ..registry import Float64, define
from ..rules import zero_tangents
from ..samples import Domain, into, uniform

CUSTOM_TESTS = "tests/routes/test_routes_custom.py"

define(
    "detach", "graph",
    attributes=(A.shape(),),
    ports=lambda a: ({"x": detached(a.shape)}, {"y": value(a.shape)}),
    forward=lambda xp, a, x: x,
    jvp=zero_tangents,
    samples=Domain(ordinary=uniform(-4, 4)).samplers(),
    oracle=lambda ctx, a, x: (x,),
    float64=Float64(lambda a, x: x),
    examples={"": {}, "2x3": {"shape": (2, 3)}},
    notes=("detach(x) = x; x sits at a detached port, so its parent receives no contribution "
           "and the tangent of the output is zero (a convention: the map is not "
           "differentiated).  The output is a value port: it may feed differentiated "
           "operators downstream.",),
    certificates=(convention(f"{CUSTOM_TESTS}::test_detach_passes_values_and_stops_gradients",
                             "identity forward; no contribution to the input, zero tangent"),
                  roundoff(0, statement="exact: the output is the input")),
)


def _custom_ports(a):
    return ({f"x{i}": value(s) for i, s in enumerate(a.inputs)}, {"y": value(a.shape)})


def _custom_samples(rng, fmt, op):
    return tuple(into(rng.uniform(-4, 4, p.shape), fmt) for p in op.inputs)


define(
    "custom", "graph",
    attributes=(A.text("program", "zeros", doc="the node's name: the name of its program"),
                A.shapes("inputs", (), doc="the shape of each input"),
                A.shape(doc="the output's shape")),
    ports=_custom_ports,
    forward=lambda xp, a, *xs: C.ZEROS.eval(xp, xs, a.shape),
    backward=lambda xp, a, xs, ys, gs, needs: C.zero_pullback(xp, xs, ys[0], gs[0]),
    samples={"ordinary": _custom_samples},
    oracle=lambda ctx, a, *xs: (np.full(a.shape, ctx.mpf(0), dtype=object),),
    examples={"": {}, "two-inputs": {"program": "pairSum", "inputs": ((2,), (2, 2)),
                                      "shape": (2,)}},
    notes=("custom: the rule comes from the node's program (routes.custom.bind); its pullback "
           "is the caller's policy, not a derivative of the program, and there is no forward "
           "mode.  Reads are checked row-major reads by operand number and unsigned address; "
           "an invalid operand and an out-of-bounds address are distinct errors.",
           "The plain entry (no program attached) runs the program ZEROS: every output entry "
           "0, no reads, a zero pullback."),
    certificates=(convention(f"{CUSTOM_TESTS}::test_bound_rule_uses_the_supplied_pullback",
                             "the pullback is the caller's policy, returned as given"),),
)

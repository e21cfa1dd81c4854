"""``invoke(op, inputs, backend)``: run one operator with the spec's staged checks
("Checking And Invoking"): the attributes (``op.check``), each input against its port, the
existence of a rule under the backend, the rule's value-domain ``validate``, then
``prepare``.  Every failure is one RouteError line naming the operator and the argument.
"""

from __future__ import annotations

import numpy as np

from .errors import RouteError


def check_inputs(op, inputs, read=True) -> tuple:
    """``inputs`` as a tuple after checking their number and each one against its port;
    ``read`` False: the scalar ones are a backend's numbers already (a graph's values, in
    the backend's own representation), whose shape alone is checked."""
    inputs = tuple(inputs)
    names = op.input_names
    if len(inputs) != len(names):
        plural = "input" if len(names) == 1 else "inputs"
        raise RouteError(f"{op.name}: expects {len(names)} {plural} ({', '.join(names)}) "
                         f"(got {len(inputs)})")
    for name, port, x in zip(names, op.inputs, inputs):
        bad = port.mismatch(x) if read or not port.scalar else \
            None if np.shape(x) == port.array_shape else f"got shape {list(np.shape(x))}"
        if bad:
            raise RouteError(f"{op.name}: input {name} expects {port} ({bad})")
    return inputs


def rule_for(op, backend):
    """``op.rule(backend)``, or RouteError with the reason there is none (the operator's
    ``no_rule`` at these attributes, or the capability the backend lacks)."""
    rule = op.rule(backend)
    if rule is None:
        reason = op.decl.no_rule(op.attrs) if op.decl.no_rule is not None else None
        if reason:                              # no rule at these attributes, any backend
            why = reason if isinstance(reason, str) else "none is registered there"
            raise RouteError(f"{op.name}: no rule at these attributes: {why}")
        raise RouteError(f"{op.name}: no rule under {backend.name}: it needs capability "
                         f"{op.need}, which the backend does not supply")
    return rule


def checked_rule(op, inputs, backend):
    """The rule of ``op`` under ``backend`` after the first stages: the attributes, each
    input against its port, the rule's existence, its validate."""
    op.check()
    inputs = check_inputs(op, inputs)
    rule = rule_for(op, backend)
    rule.validate(inputs)
    return rule


def invoke_maps(op, inputs, backend, needs_grad=None, read=True, keep=None):
    """(outputs, pullback, pushforward) after the staged checks (Rule.maps); ``needs_grad``
    one flag per input (default all off), a flag on a non-value port is refused; ``read``
    False: the inputs are ``backend``'s numbers already (a graph's values), read no
    second time; ``keep`` as in Rule.maps."""
    op.check()
    inputs = check_inputs(op, inputs, read)
    flags = (False,) * len(inputs) if needs_grad is None else tuple(needs_grad)
    if len(flags) != len(inputs):
        raise RouteError(f"{op.name}: needs_grad has {len(flags)} flags for {len(inputs)} "
                         f"inputs")
    for name, port, flag in zip(op.input_names, op.inputs, flags):
        if flag and not port.differentiable:
            raise RouteError(f"{op.name}: input {name} is a {port.kind} port, which receives "
                             f"no gradient (needs_grad must be false there)")
    rule = rule_for(op, backend)
    rule.validate(inputs, read)
    return rule.maps(inputs, flags, read, keep)


def invoke_prepared(op, inputs, backend, needs_grad=None):
    """(outputs, pullback) after the staged checks (``invoke_maps``)."""
    return invoke_maps(op, inputs, backend, needs_grad)[:2]


def invoke(op, inputs, backend) -> tuple:
    """The outputs of ``op`` on ``inputs`` under ``backend``, after the staged checks."""
    return invoke_prepared(op, inputs, backend)[0]

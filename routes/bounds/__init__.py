"""Bound propagation (spec: "Bounds"): interval bound propagation, CROWN's backward sweep and
the certificate checker, each with arms keyed by the spec's operator names.

- ``ibp(op_or_graph, lows, highs) -> (lows, highs)`` (routes.bounds.ibp): boxes enclosing
  the real values of every output for every input in the given boxes, outward rounded;
  arms in ``IBP_ARMS``;
- ``crown(op_or_graph, lows, highs) -> (lows, highs)`` (routes.bounds.crown): the backward
  sweep of linear relaxations, never looser than IBP; arms in ``CROWN_ARMS``, ReLU relaxed
  by the forward pass, the sweep ending at ``ENDS``;
- ``check_bound(op, lows, highs, claimed_lows, claimed_highs)`` and ``bound_problem(...)``
  (routes.bounds.checker): a claimed output box checked against the operator's real
  values; arms in ``CHECKER``;
- ``domain_bound(op, lows, highs, fmt, mode, policy, route, budget, ...) -> DomainBound``
  (routes.bounds.domain): roundoff over a domain, a bound in ulps on the error of a route
  under a format, mode and policy at every format-valued input in the boxes, the box
  bisected into at most ``budget`` pieces (routes.bounds.tracking: enclosures of the exact
  value, the computed value and their difference).

Boxes: one float64 array per port for each end (routes.bounds.boxes), the exact array as
both ends at an index, bool or integer port.  Importing the package registers the
``enclosure`` certificates of ``ENCLOSURES`` (registry.extend_certificates), backed by
tests/routes/test_routes_ibp.py.  ``has_arm(propagation, name)`` is what routes.vocabulary_computed's
Bounds column reads.
"""

from __future__ import annotations

from .. import certs
from ..registry import extend_certificates
from .checker import CHECKER, bound_problem, check_bound
from .crown import CROWN_ARMS, ENDS, crown
from .domain import DomainBound, domain_bound
from .ibp import IBP_ARMS, ibp

PROPAGATION_ARMS = {"checker": CHECKER, "IBP": frozenset(IBP_ARMS), "CROWN": CROWN_ARMS}

# The operators whose enclosure certificate the spec registers (its Bounds cells ending in
# "enclosure").
ENCLOSURES = ("add", "sub", "mul", "abs", "sqrt", "relu", "softmax")


def has_arm(propagation: str, name: str) -> bool:
    """Whether ``propagation`` (checker, IBP, CROWN) has an arm for operator ``name``."""
    return name in PROPAGATION_ARMS[propagation]


for _name in ENCLOSURES:
    extend_certificates(_name, (certs.enclosure(
        "the IBP arm's boxes enclose the real forward value at every input of the input "
        "boxes, outward rounded in binary64 (routes.bounds)"),))

__all__ = ["CHECKER", "CROWN_ARMS", "DomainBound", "ENCLOSURES", "ENDS", "IBP_ARMS",
           "PROPAGATION_ARMS", "bound_problem", "check_bound", "crown", "domain_bound",
           "has_arm", "ibp"]

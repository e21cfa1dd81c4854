"""The operator vocabulary computed from the code: ``computed(has_entry)``, every cell read
from the declarations (needs, no_rule, the ports, the forward mode), the registered
certificates and the bound-propagation arms (``ARMS``), in the spec's phrasing ("every
scalar", "Rounding at some attributes", "no value input; forward mode", ...), one
routes.vocabulary ``Row`` per operator.  The CUDA column comes from the kernel table, which
routes may not import: the caller passes ``has_entry(op) -> bool``
(kernels.table.vocabulary() passes the kernel table's).  tests/routes/test_vocabulary_computed.py
compares the computed table with the spec's (routes.vocabulary) and holds the intended
differences as data.

A cell says whether its property holds at every attribute, at some or at none (the spec's
"A cell says whether its property holds at every attribute, at some or at none"), read at
``attribute_points(name)``: the defaults, the examples and their one-attribute variations,
with the element at the model's scalar.
"""

from __future__ import annotations

from typing import Callable

from .bounds import has_arm as bounds_has_arm
from .errors import RouteError
from .registry import certificates, declaration, names, op
from .vocabulary import Row

# The bound propagations in the spec's order (the certificate checker, interval propagation,
# CROWN's backward sweep).  ARMS[propagation](name) says whether it has an arm for operator
# ``name``: routes.bounds's tables (CHECKER, IBP_ARMS, CROWN_ARMS).
PROPAGATIONS = ("checker", "IBP", "CROWN")


def _arms_of(propagation: str) -> Callable[[str], bool]:
    def has_arm(name: str) -> bool:
        return bounds_has_arm(propagation, name)
    return has_arm


ARMS: dict[str, Callable[[str], bool]] = {p: _arms_of(p) for p in PROPAGATIONS}

# The certificate kinds the Gradient column names: what the pullback's or the forward mode's
# map is (certs.KINDS).  prepared (the prepared pullback equals the dense one), roundoff and
# enclosure (forward values) say nothing about that map; `roundoff-coverage ops --certs`
# lists them.
GRADIENT_KINDS = ("algebraic", "convention", "derivative")


def attribute_points(name: str) -> tuple:
    """The instances of operator ``name`` whose facts make its computed cells: the default
    attributes and every declared example, each also with one attribute moved to each of its
    enumerable values (every choice, both flags, a bounded number's bounds, a 0 in one entry
    of a shape or list), the element at the model's scalar where the operator has that choice
    (the spec: "with its element argument at the model's scalar where it has one"); only
    instances whose attributes pass the check, each once, in that order."""
    decl = declaration(name)
    defaults = {at.name: at.default for at in decl.attributes}
    pinned = {at.name: "scalar" for at in decl.attributes
              if at.name == "element" and "scalar" in at.choices}
    out = {}
    for example in ({}, *decl.examples.values()):
        base = {**defaults, **dict(example)}
        for attrs in [base] + [{**base, at.name: v} for at in decl.attributes
                               for v in _variants(at, base[at.name])]:
            try:
                o = op(name, **{**attrs, **pinned})
                if o.problem() is None:
                    o.inputs                                   # the ports exist here
                    out.setdefault(o, None)
            except RouteError:
                continue
    return tuple(out)


def _variants(at, value) -> tuple:
    """The enumerable values of attribute ``at`` around ``value`` (attribute_points)."""
    if at.wire == "enum":
        return at.choices
    if at.wire == "bool":
        return (False, True)
    if at.wire in ("nat", "int"):
        lo = 0 if at.wire == "nat" and at.lo is None else at.lo
        return tuple(v for v in (lo, at.hi) if v is not None)
    if at.wire in ("shape", "nats"):
        return tuple(value[:i] + (0,) + value[i + 1:] for i in range(len(value)))
    return ()


def _extent(flags) -> str:
    """``every``, ``some`` or ``none``: at how many of the points a property holds."""
    flags = list(flags)
    return "none" if not any(flags) else "every" if all(flags) else "some"


def rule_cell(points) -> str:
    """The Rule column at ``points`` (one operator's instances): the capability the rule reads
    (Op.need; "every scalar": none), "at some attributes" where it reads it at some points
    only, then "; no rule at some attributes" where ``no_rule`` gives a reason at some."""
    ruled = [o for o in points if o.no_rule_reason() is None]
    if not ruled:
        return "no rule"
    needs = [o.need for o in ruled]
    caps = sorted({n for n in needs if n is not None})
    cell = ", ".join(c if all(n == c for n in needs) else f"{c} at some attributes"
                     for c in caps) or "every scalar"
    return cell + ("; no rule at some attributes" if len(ruled) < len(points) else "")


def gradient_cell(points, certs) -> str:
    """The Gradient column at ``points`` with the operator's certificates ``certs``: the
    GRADIENT_KINDS of the pullback's certificates at each value input ("no certificate";
    "inputs 0 and 1: ...; input 2: ..." where they differ; "no value input" without one),
    then "forward mode" where the rule has one (a rule, and Op.has_jvp there), with the
    kinds of the forward mode's certificates in parentheses, "at some attributes" where it
    has one at some points only."""
    values = sorted({i for o in points for i, p in enumerate(o.inputs) if p.differentiable})
    parts = []
    if not values:
        parts.append("no value input")
    else:
        groups: dict = {}
        for i in values:
            kinds = tuple(sorted({c.kind for c in certs if c.route == "gradient"
                                  and c.kind in GRADIENT_KINDS
                                  and (c.inputs is None or i in c.inputs)}))
            groups.setdefault(kinds, []).append(i)
        words = {k: ", ".join(k) or "no certificate" for k in groups}
        parts += [words[k] for k in groups] if len(groups) == 1 else \
            [f"{_positions(ins)}: {words[k]}" for k, ins in groups.items()]
    # No rule, no forward mode: decodeIndex has one "at some attributes", where it has a rule.
    extent = _extent(o.no_rule_reason() is None and o.has_jvp for o in points)
    if extent != "none":
        tangent = sorted({c.kind for c in certs if c.route == "tangent"
                          and c.kind in GRADIENT_KINDS})
        parts.append("forward mode" + (f" ({', '.join(tangent)})" if tangent else "")
                     + (" at some attributes" if extent == "some" else ""))
    return "; ".join(parts)


def _positions(inputs) -> str:
    """``input 2``, ``inputs 0 and 1``, ``inputs 0, 1 and 3``."""
    if len(inputs) == 1:
        return f"input {inputs[0]}"
    return f"inputs {', '.join(map(str, inputs[:-1]))} and {inputs[-1]}"


def bounds_cell(name: str, certs) -> str:
    """The Bounds column: the PROPAGATIONS with an arm for ``name`` (ARMS), "; enclosure"
    where an enclosure certificate is registered; "none" without either."""
    arms = ", ".join(p for p in PROPAGATIONS if p in ARMS and ARMS[p](name))
    enclosure = "enclosure" if any(c.kind == "enclosure" for c in certs) else ""
    return "; ".join(filter(None, (arms, enclosure))) or "none"


def cuda_cell(points, has_entry: Callable) -> str:
    """The CUDA column: ``yes`` where ``has_entry(op)`` holds at every point, ``at some
    attributes`` at some, ``no`` at none."""
    return {"every": "yes", "some": "at some attributes", "none": "no"}[
        _extent(has_entry(o) for o in points)]


def computed_row(name: str, has_entry: Callable) -> Row:
    """The row of operator ``name`` computed from the code; ``has_entry(op) -> bool`` says
    whether the kernel table has an entry for an instance (kernels.table.vocabulary)."""
    decl = declaration(name)
    points = attribute_points(name)
    certs = certificates(name)
    return Row(decl.family, name, rule_cell(points), cuda_cell(points, has_entry),
               gradient_cell(points, certs), bounds_cell(name, certs))


def computed(has_entry: Callable) -> tuple:
    """Every registered operator's row computed from the code (``computed_row``), in the
    order of ``routes.names()``."""
    return tuple(computed_row(name, has_entry) for name in names())

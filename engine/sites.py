"""What a model run measures (its sites), and the exact values' stand-ins it reads.

A site is one quantity of the graph's sweeps: a node's output value (forward) or tangent,
the cotangent a node's output receives, its pullback's contribution to an argument's
gradient, and the whole model's outputs and input gradients.  Each is measured against the
exact trace, ``propagated`` (the whole run in the format) and ``local`` (the node alone on
exact reads rounded into the format).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.routes.graph import INPUT, Ref

from . import reference

ROUTES = ("forward", "tangent", "gradient")
LOCAL, PROPAGATED = "local", "propagated"


# ----- what is measured ------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    """One unit of a model run: a format, a rounding mode and a policy."""

    format: str
    mode: str
    policy: str


@dataclass(frozen=True)
class Site:
    """One measured quantity: ``route``, ``node`` (index, or -1 for the whole model),
    ``port`` (an output name; an argument name for gradients), and where its values are in
    a trace: ``where`` ("values", "tangents", "cotangents" or "contributions") and ``ref``
    (a Ref, or (node, argument index) for contributions)."""

    route: str
    node: int
    port: str
    where: str
    ref: object


def sites(graph, routes) -> list:
    """Every quantity a model run measures, node by node in execution order, the whole
    model's outputs and input gradients first.  On the gradient route a node has the
    cotangent its output receives (port ``d<output>``, the sum of its consumers'
    contributions: propagated only) and its pullback's output for each argument."""
    out = []
    for j, (ref, port) in enumerate(zip(graph.output_refs, graph.outputs)):
        if port.kind != "value":
            continue
        name = graph.output_names[j]
        if "forward" in routes:
            out.append(Site("forward", -1, name, "values", ref))
        if "tangent" in routes:
            out.append(Site("tangent", -1, name, "tangents", ref))
    if "gradient" in routes:
        for i, (name, port) in enumerate(zip(graph.input_names, graph.inputs)):
            if port.kind == "value":
                out.append(Site("gradient", -1, name, "cotangents", Ref(INPUT, i)))
    for k, node in enumerate(graph.nodes):
        op = node.op
        for j, (name, port) in enumerate(zip(op.output_names, op.outputs)):
            if port.kind != "value":
                continue
            if "forward" in routes:
                out.append(Site("forward", k, name, "values", Ref(k, j)))
            if "tangent" in routes:
                out.append(Site("tangent", k, name, "tangents", Ref(k, j)))
            if "gradient" in routes:          # the cotangent the node's output receives
                out.append(Site("gradient", k, f"d{name}", "cotangents", Ref(k, j)))
        if "gradient" in routes:
            for i, (name, port) in enumerate(zip(op.input_names, op.inputs)):
                if port.kind == "value":
                    out.append(Site("gradient", k, name, "contributions", (k, i)))
    return out


def value_at(trace, site):
    """The values of ``site`` in ``trace`` (None where the trace has none)."""
    return getattr(trace, site.where).get(site.ref)


def rounder_of(fmt):
    ref = numerics.reference(reference.start(fmt))

    def rnd(v):
        """An exact value rounded to nearest into fmt (float64); others unchanged."""
        if v is None:
            return None
        a = np.asarray(v)
        return ref.cast(a, fmt) if a.dtype == object else a
    return rnd


# An exact sum of binary32 values (2**-149 .. 2**128: 24 + 277 bits) with room for 2**19
# terms: a local cotangent read summing the quantized contributions of several consumers.
EXACT_SUM_PREC = 320


B64 = formats.get("binary64")

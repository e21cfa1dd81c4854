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
from roundoff_coverage.numerics.double_double import DD, odd53
from roundoff_coverage.numerics.resolve import Compact, compact
from roundoff_coverage.routes.graph import INPUT, Ref

from . import reference
from .lazy_exact import LazyExact

ROUTES = ("forward", "tangent", "gradient")
LOCAL, PROPAGATED = "local", "propagated"
# The four kinds of values of a trace (routes.graph.Trace).
TRACE_KINDS = ("values", "cotangents", "contributions", "tangents")


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


def node_reads(g, tr, want_grad, want_tan, value, cotangent, only=None) -> list:
    """Per node, what it reads in the trace ``tr`` as GraphRule.alone takes it (arguments,
    gradient flags, output cotangents, argument tangents): each argument and tangent as
    ``value(ref, v, kind)`` gives it (kind "value" or "tangent"), each output's cotangent as
    ``cotangent(ref)``; ``only``: the nodes to read for (None for the others; all by
    default)."""
    out = []
    for k, node in enumerate(g.nodes):
        if only is not None and k not in only:
            out.append(None)
            continue
        op = node.op
        flags = tuple(want_grad and p.differentiable and (k, i) in tr.contributions
                      for i, p in enumerate(op.inputs))
        cts = [cotangent(Ref(k, j)) for j in range(len(op.outputs))] if any(flags) else None
        ts = [value(r, tr.tangents.get(r), "tangent") if p.differentiable else None
              for r, p in zip(node.args, op.inputs)] if want_tan else None
        out.append(([value(r, tr.values[r], "value") for r in node.args], flags, cts, ts))
    return out


def value_at(trace, site):
    """The values of ``site`` in ``trace`` (None where the trace has none)."""
    return getattr(trace, site.where).get(site.ref)


def compacts_of(trace, what, pieces) -> dict:
    """{id(array): (array, its Compact)} of the exact arrays of ``trace`` at the sites
    ``what``, from ``pieces`` (numerics.resolve.compact of each, in that order; the arrays
    with no Compact form left out): what the rows, the rounded reads and the summary read
    of an exact value instead of its mpf entries."""
    out = {}
    for site, c in zip(what, pieces):
        a = value_at(trace, site)
        if isinstance(c, Compact) and a is not None:
            out[id(a)] = (a, c)
    return out


def exact_numbers(tr, known=None) -> tuple:
    """``tr`` with its double-double arrays as arrays of their exact values (LazyExact
    where they have a Compact form, else object arrays of floats and mpf), and {id:
    (array, Compact)} of those (compacts_of); an array held under several keys is converted
    once.  ``known``: {id(array): its Compact} made already (numerics.resolve.compact),
    taken instead of a second copy."""
    copies, done, known = {}, {}, known or {}
    for kind in TRACE_KINDS:
        part = getattr(tr, kind)
        for key, a in part.items():
            if not (isinstance(a, np.ndarray) and a.dtype == DD):
                continue
            if id(a) not in done:
                new = c = known[id(a)] if id(a) in known else compact(a)
                if isinstance(c, Compact):
                    new = LazyExact(c)
                    copies[id(new)] = (new, c)
                done[id(a)] = (a, new)
            part[key] = done[id(a)][1]
    return tr, copies


def compact_of(compacts, a):
    """The Compact of exact array ``a`` in ``compacts`` (compacts_of), or None."""
    hit = compacts.get(id(a)) if compacts and a is not None else None
    return hit[1] if hit is not None and hit[0] is a else None


def nearest64(a, compacts, ref) -> np.ndarray:
    """The nearest binary64 of each exact value of array ``a``, flat: its Compact's hi where
    ``compacts`` (compacts_of) has one, else ``ref``'s (a numerics.reference) rounding."""
    c = compact_of(compacts, a)
    return c.hi.reshape(-1) if c is not None else \
        ref.to_float64(np.asarray(a, dtype=object)).reshape(-1)


def rounder_of(fmt):
    ref = numerics.reference(reference.start(fmt))
    fmt = formats.get(fmt)
    odd = fmt.fits_binary64 and fmt.precision <= 51

    def rnd(v, compacts=None):
        """An exact value rounded to nearest into fmt (float64); others unchanged.  From
        its Compact where ``compacts`` has one (rounded to odd at 53 bits, then into fmt:
        the exact value's rounding, double_double.odd53)."""
        if v is None:
            return None
        c = compact_of(compacts, v) if odd else None
        if c is not None:
            return formats.round_to(odd53(c.hi, c.lo), fmt)
        a = np.asarray(v)
        return ref.cast(a, fmt) if a.dtype == object else a
    return rnd


# An exact sum of binary32 values (2**-149 .. 2**128: 24 + 277 bits) with room for 2**19
# terms: a local cotangent read summing the quantized contributions of several consumers.
EXACT_SUM_PREC = 320


B64 = formats.get("binary64")


def whole_name(site) -> str:
    """A whole-model site's node label in the rows: output:<name> or input:<name>."""
    return f"{'input' if site.where == 'cotangents' else 'output'}:{site.port}"

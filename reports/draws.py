"""The sample inputs of a task and its routes evaluated on them.

``draw(task, o, fmt) -> Draws``: the declaration's samplers, one RNG per sample kind seeded
from (seed, operator, attributes, format, kind) -- not from the mode, policy or
implementation, so those compare on the same points -- ``draws`` draws per kind, already
rounded into the format at scalar ports (routes/samples.py).  Elementwise instances draw once
per kind at ``draws`` times their size (same distribution, one evaluation).  Exhaustive
tasks (the first example of an operator; runner.plan) feed every finite value of the format
to the one value input instead.  Tangents and cotangents: standard normal values rounded
once (nearest even) into the format, from RNGs of their own.

``run_routes(rule, draws, wanted)``: every draw's forward values, output tangents and input
gradients under a rule (Rule.routes), with the IEEE flags each route raised.
"""

from __future__ import annotations

import numpy as np

from roundoff_coverage import formats, routes

from .task import Task, batchable, exhaustible, rng_for

class Draws:
    """The sample inputs of a task: ``inputs`` (one tuple per draw), ``kinds`` (the sample
    kind of each draw), ``tangents``/``cotangents`` per draw, ``elementwise`` (one element of
    an input at position i goes with element i of the outputs)."""

    def __init__(self, o, inputs, kinds, elementwise, fmt, task):
        self.op, self.inputs, self.kinds, self.elementwise = o, inputs, kinds, elementwise
        trng, crng = (rng_for(task.seed, task.op, task.attrs, task.format, r)
                      for r in ("tangent", "gradient"))
        self.tangents = [_linear(trng, o.inputs, fmt) for _ in inputs]
        self.cotangents = [_linear(crng, o.outputs, fmt) for _ in inputs]


def _subset(self, keep):
    """The same draws restricted to the indices ``keep`` (the reference's precision loop)."""
    sub = object.__new__(Draws)
    sub.op, sub.elementwise = self.op, self.elementwise
    sub.inputs = [self.inputs[k] for k in keep]
    sub.kinds = [self.kinds[k] for k in keep]
    sub.tangents = [self.tangents[k] for k in keep]
    sub.cotangents = [self.cotangents[k] for k in keep]
    return sub


Draws.subset = _subset


def _linear(rng, ports, fmt):
    """Standard normal values rounded once into ``fmt`` at value ports, None elsewhere."""
    out = []
    for p in ports:
        if not p.differentiable:
            out.append(None)
            continue
        x = rng.standard_normal(p.shape)
        out.append(np.asarray(formats.round_to(x, fmt) if fmt.fits_binary64 else x))
    return tuple(out)


def draw(task: Task, o, fmt) -> Draws:
    """The task's sample inputs (see the module docstring)."""
    if task.exhaustive and exhaustible(o, fmt):
        values = formats.values(fmt)
        big = o.replace(shape=(values.size,))
        base = big.samples(rng_for(task.seed, task.op, task.attrs, task.format, "ordinary"),
                           fmt.name, "ordinary")
        xs = tuple(values if p.differentiable else x for x, p in zip(base, big.inputs))
        return Draws(big, [xs], ["exhaustive"], True, fmt, task)
    kinds = [k for k in sample_kinds(o) if not task.kinds or k in task.kinds] or ["ordinary"]
    size = int(np.prod(o.attrs["shape"], dtype=np.int64)) if "shape" in o.attrs else 0
    if batchable(o) and size > 0 and task.draws > 1:
        big = o.replace(shape=(size * task.draws,))
        inputs = [big.samples(rng_for(task.seed, task.op, task.attrs, task.format, k),
                              _fmt_name(fmt), k) for k in kinds]
        return Draws(big, inputs, kinds, True, fmt, task)
    inputs, labels = [], []
    for k in kinds:
        rng = rng_for(task.seed, task.op, task.attrs, task.format, k)
        for _ in range(task.draws):
            inputs.append(o.samples(rng, _fmt_name(fmt), k))
            labels.append(k)
    return Draws(o, inputs, labels, batchable(o), fmt, task)


def sample_kinds(o) -> list:
    """The sample kinds a task of ``o`` draws: the declared ones, then the derived
    ``magnitudes`` (log-uniform across the format's range) where ``o`` has value inputs."""
    reg = routes.registry
    derived = "ordinary" in o.decl.samples and any(p.differentiable for p in o.inputs)
    return [k for k in reg.SAMPLE_KINDS
            if k in o.decl.samples or (derived and k in reg.DERIVED_KINDS)]


def _fmt_name(fmt):
    return fmt if fmt.name not in formats.CATALOG else fmt.name


# ----- evaluating routes -----------------------------------------------------------------------

def run_routes(rule, d: Draws, wanted, flags=None) -> dict:
    """{route: [per-draw outputs] or Exception}: forward values, output tangents, input
    gradients (each a tuple per port) of every draw under ``rule``: Rule.routes, one forward
    evaluation per draw for the three routes.

    ``flags``, a dict, receives {route: IEEE flags raised} when the backend keeps sticky
    flags (``track_flags``): the OR over every draw of the flags of the route's whole
    evaluation -- the forward pass's for every route, plus the pullback's or the tangent
    map's own (IEEE 754-2019 7.1 status flags, cleared before each draw)."""
    out = {r: [] for r in wanted}
    xp = rule.xp
    sticky = flags is not None and hasattr(xp, "track_flags")
    if sticky:
        xp.track_flags()
        flags.update(dict.fromkeys(wanted, 0))
    for xs, ts, cs in zip(d.inputs, d.tangents, d.cotangents):
        todo = [r for r in wanted if not isinstance(out[r], Exception)]
        seen = _Flags(xp, flags) if sticky else None
        try:
            got = rule.routes(xs, todo, ts, cs, before=seen.before if sticky else None)
        except Exception as exc:                          # noqa: BLE001 (the forward pass)
            return {r: exc for r in wanted}
        finally:
            if sticky:
                seen.done()
        for r in todo:
            if isinstance(got[r], Exception):
                out[r] = got[r]
            else:
                out[r].append(got[r])
    return out


class _Flags:
    """Per route of one draw, the sticky flags of the forward pass and of the route's own
    evaluation (Rule.routes calls ``before`` between them)."""

    def __init__(self, xp, flags):
        self.xp, self.flags, self.base, self.route = xp, flags, None, None

    def _collect(self):
        if self.base is None:
            self.base = self.xp.raised()                     # the forward pass's
        elif self.route is not None:
            self.flags[self.route] |= self.base | self.xp.raised()

    def before(self, route):
        self._collect()
        self.xp.clear_flags()
        self.route = route

    def done(self):
        self._collect()
        self.xp.clear_flags()

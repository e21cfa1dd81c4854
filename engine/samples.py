"""The samples a run measures: a coverage task's draws and a model run's inputs.

Coverage tasks: ``draw(task, o, fmt) -> Draws``: the declaration's samplers, one RNG per
sample kind seeded from (seed, operator, attributes, format, kind) -- not from the mode,
policy or implementation, so those compare on the same points -- ``draws`` draws per kind,
already rounded into the format at scalar ports (routes/samples.py).  Elementwise instances
draw once per kind at ``draws`` times their size (same distribution, one evaluation).
Exhaustive tasks (the first example of an operator; runner.plan) feed every finite value of
the format to the one value input instead.  Tangents and cotangents: standard normal values
rounded once (nearest even) into the format, from RNGs of their own.  A scaled format's
draws are quantized afterwards (engine/quantize.py).

Model runs: the graph's inputs per sample (the example inputs, draws around them, or the
user's arrays: ``--inputs``), the directions its tangents and cotangents take, and the
graph with its float constants in the run's format.

Sample 0 is the example; each later sample draws every value input around it,
x + SPREAD * std(x) * N(0, 1), seeded; index, Boolean and frozen inputs (token ids,
masks, positions: from_torch's integer inputs) are kept as the example gives them, and
given ones (``--inputs``) must fit their ports (ids below their bound).
Cotangents are 1 for a scalar output (a loss), else N(0, 1) rounded into the format;
tangents N(0, 1) per value input, rounded into the format.
"""

from __future__ import annotations

import copy

import numpy as np

from roundoff_coverage import formats, routes

from .task import Task, batchable, exhaustible, rng_for, scaling

SPREAD = 0.1                       # draws around the example: x + SPREAD * std(x) * N(0, 1)


class ModelError(ValueError):
    """Bad input to a model run (one-line message)."""


def is_float_port(port) -> bool:
    return port.kind in ("value", "frozen")


def sample_inputs(graph, samples: int, seed: int, given: dict | None = None,
                  around: list | None = None) -> list:
    """Per sample, one array per graph input (float64 for float ports, not yet rounded):
    ``given`` {input name: array, or a stack of arrays with one more leading axis} replaces
    those inputs (its stack size is the sample count); the rest are the example inputs
    (sample 0) and draws around them; ``around``: one array per input standing for the
    example inputs (draws around a sample of another set)."""
    names, ports = graph.input_names, graph.inputs
    example = graph.example_inputs if around is None else around
    given = dict(given or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ModelError(f"--inputs: no graph input {unknown[0]!r} (inputs: "
                         f"{', '.join(names)})")
    stacks = {}
    for name, port in zip(names, ports):
        if name not in given:
            continue
        a = np.asarray(given[name])
        if a.shape == tuple(port.shape):
            a = a[None]
        if a.shape[1:] != tuple(port.shape):
            raise ModelError(f"--inputs: {name} has shape {list(a.shape)}; the graph expects "
                             f"{list(port.shape)} (or a stack of them)")
        if not is_float_port(port):
            # ids, masks and Booleans are data: each given one must fit its port (ids
            # below their bound, integers for an index port, Booleans for a Boolean one).
            for one in a:
                bad = port.mismatch(one if port.kind != "frozen" else one.astype(np.float64))
                if bad:
                    raise ModelError(f"--inputs: {name}: {bad} (the graph expects {port})")
        stacks[name] = a
    sizes = {a.shape[0] for a in stacks.values()}
    if len(sizes) > 1:
        raise ModelError(f"--inputs: the stacks have different sample counts "
                         f"({', '.join(str(s) for s in sorted(sizes))}); give one count")
    if example is None and len(stacks) < len(names):
        missing = [n for n in names if n not in stacks]
        raise ModelError(f"the graph has no example inputs: give {missing[0]} (and every "
                         f"input) with --inputs")
    count = sizes.pop() if sizes else samples
    rng = np.random.default_rng([seed, 0x6D6F64656C])
    out = []
    for s in range(count):
        xs = []
        for i, (name, port) in enumerate(zip(names, ports)):
            if name in stacks:
                xs.append(_typed(stacks[name][s], port))
                continue
            x = _typed(np.asarray(example[i]), port)
            if s > 0 and port.kind == "value" and x.size:
                scale = float(np.std(x)) or float(np.max(np.abs(x))) or 1.0
                x = x + SPREAD * scale * rng.standard_normal(x.shape)
            xs.append(x)
        out.append(xs)
    return out


def _typed(a, port):
    return np.asarray(a, dtype=np.float64) if is_float_port(port) else np.asarray(a)


def in_format(graph, fmt):
    """A copy of ``graph`` whose float constants are rounded once (nearest even) into fmt."""
    g = copy.copy(graph)
    g.constants = [formats.round_to(np.asarray(c, dtype=np.float64), fmt)
                   if is_float_port(p) else c
                   for c, p in zip(graph.constants, graph.constant_ports)]
    return g


def prepared(graph, fmt, samples, seed, tangents=True) -> tuple:
    """(graph, inputs, directions) of a run in ``fmt``: ``graph`` with its float constants
    rounded into fmt (in_format), each sample's float inputs rounded into fmt, and each
    sample's (cotangents, tangents) (tangent_directions; ``tangents`` False: None for
    each input, for a run without the tangent route)."""
    g = in_format(graph, fmt)
    xs = [[formats.round_to(x, fmt) if is_float_port(p) else x for x, p in zip(s, g.inputs)]
          for s in samples]
    return g, xs, [tangent_directions(g, fmt, x, seed, s, tangents)
                   for s, x in enumerate(xs)]


def tangent_directions(graph, fmt, xs, seed, s, tangents=True):
    """(cotangents per output, tangents per input) of sample ``s``, rounded into fmt; the
    tangents None with ``tangents`` False (a run without the tangent route: a tangent is
    as large as its input, a model's parameters included).  The cotangents are drawn
    first, so they do not depend on it."""
    rng = np.random.default_rng([seed, s, 0x636F74])
    cots = []
    for port in graph.outputs:
        if port.kind != "value":
            cots.append(None)
        elif tuple(port.shape) == ():
            cots.append(np.float64(1.0))
        else:
            cots.append(formats.round_to(rng.standard_normal(port.shape), fmt))
    tans = [formats.round_to(rng.standard_normal(np.shape(x)), fmt)
            if p.kind == "value" and tangents else None for x, p in zip(xs, graph.inputs)]
    return cots, tans


# ----- a coverage task's draws ----------------------------------------------------------------

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
    if batchable(o) and size > 0 and task.draws > 1 and scaling(task) is None:
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

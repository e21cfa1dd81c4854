"""A task of the coverage run: what is measured and the frame of its rows.

``Task`` is one operator instance under one format, mode, policy and implementation with
the routes asked for; ``route_ports`` the ports a route measures; ``base_row`` and
``status_rows`` the rows before (or instead of) measurement; ``batchable`` and
``exhaustible`` which sampling an operator gets (reports/draws.py).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from roundoff_coverage import formats, numerics, routes

from .rows import empty as empty_row

ROUTES = ("forward", "tangent", "gradient")
# Families whose operators act element by element on ports of one shape (draws batch).
BATCH_FAMILIES = ("elementwise", "transcendental", "rounding", "extrema", "activation", "logic")
# Families whose one-value-input operators are enumerated exhaustively in small formats.
EXHAUSTIVE_FAMILIES = ("elementwise", "transcendental", "rounding", "activation")
EXHAUSTIVE_MAX_BITS = 16



@dataclass(frozen=True)
class Task:
    """One operator instance under one format, mode, policy and implementation; ``routes``
    the route kinds to measure; ``draws`` sampler draws per sample kind.

    ``format`` and ``policy`` are the rows' labels; ``fmt`` (the BinaryFormat) and
    ``accumulation`` (the numerics Policy; None where the implementation follows its
    library's own order, as native numpy does) are resolved from them once, where the task
    is made (planning), and travel with it to the workers."""

    op: str
    instance: str
    attrs: tuple                  # ((name, value), ...) in declaration order
    format: str
    mode: str
    policy: str
    implementation: str
    routes: tuple
    draws: int
    seed: int
    exhaustive: bool = False
    kinds: tuple = ()             # sample kinds drawn (empty: every kind, evaluate.sample_kinds)
    fmt: formats.BinaryFormat = field(default=None, compare=False, repr=False)
    accumulation: numerics.Policy | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.fmt is None:
            object.__setattr__(self, "fmt", formats.get(self.format))
        if self.accumulation is None and numerics.policy.is_name(self.policy):
            object.__setattr__(self, "accumulation",
                               numerics.policy.preset(self.policy, self.fmt))

    @property
    def key(self) -> str:
        """The task's identity in checkpoints (the routes are part of the run's fingerprint)."""
        return "|".join((self.op, attrs_text(self.attrs), self.format, self.mode, self.policy,
                         self.implementation, "exhaustive" if self.exhaustive else "sampled"))

    def build(self):
        return routes.op(self.op, **dict(self.attrs))


def attrs_text(attrs) -> str:
    """Attributes ((name, value) pairs) as one text, the wire codec's (routes.attributes_text:
    ``axes=[1],shape=[2,3]``)."""
    return routes.attributes_text({k: jsonable(v) for k, v in attrs})


def jsonable(v):
    """An attribute value as JSON data (tuples become lists)."""
    if isinstance(v, tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def rng_for(seed: int, *parts) -> np.random.Generator:
    """A generator seeded from ``seed`` and a CRC-32 of ``parts``: the same stream in any
    process, whatever order tasks run in."""
    return np.random.default_rng([seed, zlib.crc32(repr(parts).encode())])

# ----- which evaluation a task gets ------------------------------------------------------------

def batchable(o) -> bool:
    """Whether draws of ``o`` can be made as one draw of a longer vector: an elementwise
    family, a ``shape`` attribute, every port of that shape or rank 0."""
    if o.family not in BATCH_FAMILIES or "shape" not in o.attrs:
        return False
    shape = tuple(o.attrs["shape"])
    ports = o.inputs + o.outputs
    return all(p.shape in (shape, ()) for p in ports) and any(p.shape == shape for p in ports)


def exhaustible(o, fmt) -> bool:
    """Whether ``--exhaustive`` enumerates ``o`` in ``fmt``: one value input, an elementwise
    family, a ``shape`` attribute, a format of at most 16 bits."""
    values = [p for p in o.inputs if p.differentiable]
    return (o.family in EXHAUSTIVE_FAMILIES and len(values) == 1 and "shape" in o.attrs
            and batchable(o) and formats.get(fmt).bits <= EXHAUSTIVE_MAX_BITS)


def one_line(exc, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----- ports of a route ------------------------------------------------------------------------

def route_ports(o, route):
    """[(index, name, port)] a route measures: every output (forward), the value outputs
    (tangent), the value inputs (gradient)."""
    if route == "forward":
        return list(zip(range(len(o.outputs)), o.output_names, o.outputs))
    if route == "tangent":
        return [(i, n, p) for i, (n, p) in enumerate(zip(o.output_names, o.outputs))
                if p.differentiable]
    return [(i, n, p) for i, (n, p) in enumerate(zip(o.input_names, o.inputs))
            if p.differentiable]


def status_rows(task, o, route, status, reason, need=None):
    """Rows of ``route`` with ``status`` and ``reason`` and no metrics: one per measured port,
    or one per port of the route's side where nothing is measured."""
    ports = route_ports(o, route) if o is not None else []
    if status == "not_differentiable" or not ports:
        names = ([n for n in (o.output_names if route != "gradient" else o.input_names)]
                 if o is not None else [])
        ports = [(None, n, None) for n in names] or [(None, "-", None)]
    return [base_row(task, route, name, status, reason, need) for _, name, _ in ports]


def base_row(task, route, port, status, reason=None, need=None) -> dict:
    """A row with every field (reports/rows.py), the metrics empty (``exhaustive`` false:
    nothing enumerated; ``_rows`` marks the rows whose draws were every finite value of the
    format)."""
    return empty_row(op=task.op, instance=task.instance,
                     attrs={k: jsonable(v) for k, v in task.attrs}, route=route, port=port,
                     format=task.format, mode=task.mode, policy=task.policy,
                     implementation=task.implementation, status=status, reason=reason,
                     need=need)

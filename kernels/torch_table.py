"""The torch table's records (kernels/torch_calls.py describes the table): ``Call``,
``Convention``, ``TABLE`` with ``register``, and the helpers the entries share (frozen
scalars as numbers, exact values of torch's conventions with rationals).  The entry modules
(kernels/torch_calls_elementwise.py, kernels/torch_calls_structured.py) register into
``TABLE``; kernels/torch_calls.py imports them in table order."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Convention:
    """A difference between torch's convention and the rule's on one route (module
    docstring): ``route``, ``reason`` (one line), ``exact``."""

    route: str
    reason: str
    exact: Callable


@dataclass(frozen=True)
class Call:
    """One operator's torch counterpart (module docstring)."""

    name: str
    fn: Callable
    composite: bool = False
    refuses: Callable | None = None
    no_jvp: str | None = None
    rejects: Callable | None = None
    conventions: tuple = ()


TABLE: dict[str, Call] = {}
DIFFERS = "differs"     # a convention's port where torch's exact value is not computed


def register(name, fn, **more):
    if name in TABLE:
        raise ValueError(f"torch_calls: {name} is already in the table")
    TABLE[name] = Call(name, fn, **more)


def as_number(v):
    """A frozen scalar (0-d tensor) as a Python float: the format value, exactly.  A number
    passes unchanged (torch_compile passes frozen scalars as numbers, which Dynamo traces
    as symbolic inputs instead of breaking the graph at ``.item()``)."""
    return float(v.item()) if hasattr(v, "dim") else v


# ----- exact values of torch's conventions (rationals from format values) --------------------

def fraction_of(v):
    """A finite float as a Fraction; inf and NaN kept as floats."""
    v = float(v)
    return Fraction(v) if math.isfinite(v) else v


def object_array(shape):
    return np.full(shape, None, dtype=object)


def scaled_exact(v, g):
    """v (a Fraction or a non-finite float) times a cotangent g, the IEEE way for inf."""
    g = fraction_of(g)
    if isinstance(v, float) or isinstance(g, float):
        return float(v) * float(g)
    return v * g


def add_exact(p, q):
    p, q = fraction_of(p), fraction_of(q)
    return float(p) + float(q) if isinstance(p, float) or isinstance(q, float) else p + q

"""Ports: the element sort and shape of one input or output of an operator (spec: "Ports And
Element Sorts").

Kinds:

- ``value``: the model's scalar; receives a gradient (and carries a tangent) when its parent
  needs one.  Only value ports carry tangents and cotangents.
- ``frozen``: the scalar read without differentiating it: a numeric attribute (epsilon, a
  slope, clamp bounds) or an operand the operator does not differentiate.
- ``detached``: reads a recorded node without sending it a contribution (PyTorch's detach).
- ``index``: index tuples below ``bounds`` (one bound per component).  With one bound the
  array holds integers of ``shape``; with k > 1 bounds it holds ``shape + (k,)`` integers.
- ``bool``: Booleans.
- ``integer``: words of ``width`` bits, two's complement when ``signed``.

Arrays: value, frozen and detached ports hold numbers a backend reads with ``asarray``
(float, integer or ml_dtypes arrays, or the backend's own object arrays); index and integer
ports hold numpy integer arrays; bool ports numpy bool arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("value", "frozen", "detached", "index", "bool", "integer")
SCALAR_KINDS = ("value", "frozen", "detached")       # hold the model's scalar


@dataclass(frozen=True)
class Port:
    """One port: ``kind`` (KINDS), ``shape`` (tuple of non-negative ints); ``bounds`` for
    index ports, ``signed`` and ``width`` for integer ports (None otherwise)."""

    kind: str
    shape: tuple = ()
    bounds: tuple | None = None
    signed: bool | None = None
    width: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"port: kind must be one of {', '.join(KINDS)} (got {self.kind!r})")
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if (self.bounds is not None) != (self.kind == "index"):
            raise ValueError(f"port: bounds belong to index ports only (kind {self.kind})")
        if self.bounds is not None:
            object.__setattr__(self, "bounds", tuple(int(b) for b in self.bounds))
        if (self.width is not None) != (self.kind == "integer") or \
                (self.signed is not None) != (self.kind == "integer"):
            raise ValueError(f"port: signed and width belong to integer ports only "
                             f"(kind {self.kind})")
        if self.kind == "integer" and not 1 <= self.width <= 64:
            raise ValueError(f"port: integer width must be in [1, 64] (got {self.width})")

    @property
    def differentiable(self) -> bool:
        """Whether the port carries tangents and cotangents (value ports only)."""
        return self.kind == "value"

    @property
    def scalar(self) -> bool:
        """Whether the port holds the model's scalar (value, frozen, detached)."""
        return self.kind in SCALAR_KINDS

    @property
    def array_shape(self) -> tuple:
        """The shape of an array at this port (index ports with k > 1 bounds add an axis)."""
        if self.kind == "index" and len(self.bounds) != 1:
            return self.shape + (len(self.bounds),)
        return self.shape

    def __str__(self):
        dims = "[" + ",".join(map(str, self.shape)) + "]"
        if self.kind == "index":
            return "index<" + ",".join(map(str, self.bounds)) + ">" + dims
        if self.kind == "integer":
            return ("int" if self.signed else "uint") + str(self.width) + dims
        return self.kind + dims

    def mismatch(self, array) -> str | None:
        """Why ``array`` cannot sit at this port (a short phrase), or None when it can."""
        a = np.asarray(array)
        kind = a.dtype.kind
        # ml_dtypes floats (bfloat16, float8...) are numpy void-kind types of their own module;
        # a backend's structured numbers (double-double pairs, enclosures) have named fields.
        if self.scalar and kind not in "fiuO" and a.dtype.names is None and \
                not a.dtype.type.__module__.startswith("ml_dtypes"):
            return f"got a {a.dtype} array"
        if self.kind in ("index", "integer") and kind not in "iu":
            return f"got a {a.dtype} array, not integers"
        if self.kind == "bool" and kind != "b":
            return f"got a {a.dtype} array, not Booleans"
        if a.shape != self.array_shape:
            return f"got shape {list(a.shape)}"
        if self.kind == "index" and a.size:
            comps = a.reshape(-1, len(self.bounds))
            for j, bound in enumerate(self.bounds):
                bad = (comps[:, j] < 0) | (comps[:, j] >= bound)
                if bad.any():
                    return f"got index {int(comps[bad, j][0])} outside [0, {bound})"
        if self.kind == "integer" and a.size:
            lo, hi = word_range(self.signed, self.width)
            # Compare as Python ints: uint64 and int64 do not mix exactly in numpy.
            out = [v for v in (int(a.min()), int(a.max())) if not lo <= v <= hi]
            if out:
                return f"got word {out[0]} outside [{lo}, {hi}]"
        return None


def word_range(signed: bool, width: int) -> tuple[int, int]:
    """The least and greatest word of ``width`` bits (two's complement when ``signed``)."""
    return (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)


def value(shape=()) -> Port:
    """A value port: the model's scalar, differentiated."""
    return Port("value", shape)


def frozen(shape=()) -> Port:
    """A frozen port: the model's scalar, never differentiated (numeric attributes)."""
    return Port("frozen", shape)


def detached(shape=()) -> Port:
    """A detached port: reads a node's value without sending it a contribution."""
    return Port("detached", shape)


def index(bounds, shape=()) -> Port:
    """An index port: index tuples whose component j lies in [0, bounds[j])."""
    return Port("index", shape, bounds=tuple(bounds))


def boolean(shape=()) -> Port:
    """A Boolean port."""
    return Port("bool", shape)


def integer(signed: bool, width: int, shape=()) -> Port:
    """An integer port of ``width``-bit words, two's complement when ``signed``."""
    return Port("integer", shape, signed=bool(signed), width=int(width))

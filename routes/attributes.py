"""Typed attributes of an operator: shapes, naturals, integers, flags, choices, lists of
naturals, names and lists of shapes, each with a default and a range.  Numbers that are scalars of the model (epsilon,
slopes, clamp bounds) are never attributes: they travel as frozen inputs.

An ``Attr`` converts a user's value into its canonical form (``coerce``), writes and reads it
as one typed wire field (``to_field`` / ``from_field``: ``["shape", [2, 3]]``,
``["nat", 1]``, ``["int", -1]``, ``["bool", true]``, ``["enum", "trunc"]``,
``["nats", [0, 1]]``, ``["text", "myKernel"]``, ``["shapes", [[2, 3], [3]]]``), and gives the ranges a generator should draw from (``gen``).
Constraints that relate several attributes (axis < rank) belong to the operator's ``check``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .errors import RouteError

WIRE_TYPES = ("shape", "nat", "int", "bool", "enum", "nats", "text", "shapes")
# A text attribute (a custom node's name): an identifier-like word, so records stay tidy.
_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _is_int(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, np.integer)


@dataclass(frozen=True)
class Attr:
    """One attribute: ``name``, ``wire`` type (WIRE_TYPES), ``default``; ``lo``/``hi`` bound
    ints and naturals (inclusive, None: unbounded) and ``choices`` enums.  ``gen`` is the
    range a generator draws from: (lo, hi) for numbers, (max_rank, max_extent) for shapes
    and lists.  ``doc`` says what it means."""

    name: str
    wire: str
    default: object
    lo: int | None = None
    hi: int | None = None
    choices: tuple = ()
    gen: tuple = ()
    doc: str = ""

    def coerce(self, value, op: str):
        """``value`` in canonical form (tuples for shapes and lists), or RouteError
        ``"<op>: <name> must be ... (got ...)"``."""
        bad = RouteError(f"{op}: {self.name} must be {self.expected()} (got {value!r})")
        if self.wire in ("shape", "nats"):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise bad
            items = tuple(value)
            if not all(_is_int(n) and n >= 0 for n in items):
                raise bad
            return tuple(int(n) for n in items)
        if self.wire == "shapes":
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise bad
            items = tuple(value)
            if not all(not isinstance(s, (str, bytes)) and hasattr(s, "__iter__") and
                       all(_is_int(n) and n >= 0 for n in s) for s in items):
                raise bad
            return tuple(tuple(int(n) for n in s) for s in items)
        if self.wire == "text":
            if not isinstance(value, str) or not _TEXT.fullmatch(value):
                raise bad
            return value
        if self.wire == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise bad
            return bool(value)
        if self.wire == "enum":
            if value not in self.choices or not isinstance(value, str):
                raise bad
            return value
        if not _is_int(value):
            raise bad
        value = int(value)
        lo = 0 if self.wire == "nat" and self.lo is None else self.lo
        if (lo is not None and value < lo) or (self.hi is not None and value > self.hi):
            raise bad
        return value

    def expected(self) -> str:
        """What a valid value is, in words."""
        if self.wire == "shape":
            return "a list of non-negative integers"
        if self.wire == "nats":
            return "a list of non-negative integers"
        if self.wire == "shapes":
            return "a list of shapes (lists of non-negative integers)"
        if self.wire == "text":
            return ("a name of 1 to 64 letters, digits, '_', '.' or '-' starting with a letter "
                    "or '_'")
        if self.wire == "bool":
            return "true or false"
        if self.wire == "enum":
            return "one of " + ", ".join(self.choices)
        lo = 0 if self.wire == "nat" and self.lo is None else self.lo
        if lo is not None and self.hi is not None:
            return f"an integer in [{lo}, {self.hi}]"
        if lo is not None:
            return f"an integer >= {lo}"
        if self.hi is not None:
            return f"an integer <= {self.hi}"
        return "an integer"

    def to_field(self, value) -> list:
        """The wire field of a canonical value: [wire type, JSON value]."""
        if self.wire == "shapes":
            return [self.wire, [list(v) for v in value]]
        return [self.wire, list(value) if self.wire in ("shape", "nats") else value]

    def from_field(self, field, op: str):
        """The canonical value of a wire field, or RouteError naming the mismatch."""
        if not (isinstance(field, (list, tuple)) and len(field) == 2):
            raise RouteError(f"{op}: field {self.name} must be a [type, value] pair "
                             f"(got {field!r})")
        wire, raw = field
        if wire != self.wire:
            raise RouteError(f"{op}: field {self.name} must have type {self.wire} "
                             f"(got {wire!r})")
        if self.wire in ("shape", "nats", "shapes") and not isinstance(raw, list):
            raise RouteError(f"{op}: field {self.name} must hold a list (got {raw!r})")
        if self.wire == "shapes" and not all(isinstance(v, list) for v in raw):
            raise RouteError(f"{op}: field {self.name} must hold a list of lists (got {raw!r})")
        return self.coerce(raw, op)


def shape(name: str = "shape", default=(3,), max_rank: int = 3, max_extent: int = 4,
          doc: str = "the shape of the operand") -> Attr:
    """A shape attribute (the ports are computed from it)."""
    return Attr(name, "shape", tuple(default), gen=(max_rank, max_extent), doc=doc)


def nat(name: str, default: int = 0, hi: int | None = None, gen=(0, 4), doc: str = "") -> Attr:
    """A natural number (an axis, a count)."""
    return Attr(name, "nat", default, lo=0, hi=hi, gen=gen, doc=doc)


def integer(name: str, default: int = 0, lo=None, hi=None, gen=(-4, 4), doc: str = "") -> Attr:
    """A signed integer (an offset, a negative axis)."""
    return Attr(name, "int", default, lo=lo, hi=hi, gen=gen, doc=doc)


def flag(name: str, default: bool = False, doc: str = "") -> Attr:
    """A Boolean switch (descending, keepdim)."""
    return Attr(name, "bool", default, doc=doc)


def choice(name: str, choices, default=None, doc: str = "") -> Attr:
    """One of a fixed list of strings (a mode: rounding_mode, approximate)."""
    choices = tuple(choices)
    return Attr(name, "enum", choices[0] if default is None else default, choices=choices,
                doc=doc)


def nats(name: str, default=(), max_len: int = 3, max_value: int = 4, doc: str = "") -> Attr:
    """A list of naturals (reduce axes, kernel sizes)."""
    return Attr(name, "nats", tuple(default), gen=(max_len, max_value), doc=doc)


def text(name: str, default: str, doc: str = "") -> Attr:
    """A name (a custom node's): letters, digits, '_', '.', '-'."""
    return Attr(name, "text", default, doc=doc)


def shapes(name: str, default=(), max_len: int = 3, max_rank: int = 3, max_extent: int = 4,
           doc: str = "") -> Attr:
    """A list of shapes (a custom node's input shapes)."""
    return Attr(name, "shapes", tuple(tuple(s) for s in default), gen=(max_len, max_rank,
                                                                         max_extent), doc=doc)

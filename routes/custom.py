"""Custom-operation programs (spec: custom-operations.txt, and "A custom node ... Op.customRule"):
a small expression language evaluated once per output entry, its checked reads, its errors,
and ``bind``, which makes the rule of a ``custom`` operator from a program and a pullback.

The language, a tree of frozen dataclasses:

- index expressions (unsigned 64-bit words, arithmetic modulo 2**64; a division or remainder
  by zero gives 0, as Lean's UInt64): ``Out()`` the output's row-major flat index, ``Nat(n)``,
  ``Idx(op, a, b)`` with op in add, sub, mul, div, mod;
- value expressions (the backend's numbers): ``Read(operand, address)`` reads input
  ``operand`` at row-major ``address`` (an index expression), ``Const(literal)`` a decimal
  string or integer rounded once by the backend, ``Cast(index)`` an index word as a number,
  ``Apply(name, *args)`` a backend primitive (UNARY, BINARY or fma).

``Program(name, body).eval(xp, inputs, shape)`` evaluates ``body`` at output indices 0, 1, ...
in increasing order and stops at the first failure, raising it:

- ``OperandError``: a read names an operand the inputs do not have;
- ``BoundsError``: an address at or beyond the operand's size (the unsigned bounds check);
- ``SizeError``: the output has more entries than the unsigned addressing holds (2**64, or a
  smaller ``limit``), refused before any read.

An empty output makes no reads.  Within one entry the reads run in the tree's left-to-right
order.  ``bind(op, program, pullback)`` returns an operator whose rule runs the program as
its forward map; its pullback is the caller's policy ``pullback(xp, xs, y, g) -> gradient
per input``, with no claim that it is a derivative of the program (there is no forward mode).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from roundoff_coverage.numerics.backend import BINARY, TERNARY, UNARY

from .errors import RouteError
from .registry import Op

WORD = 1 << 64                       # UInt64.size: the unsigned addressing's range
INDEX_OPS = ("add", "sub", "mul", "div", "mod")


class CustomError(RouteError):
    """A failure while evaluating a custom program; the message names the program."""


class OperandError(CustomError):
    """A read of an operand number the inputs do not have."""


class BoundsError(CustomError):
    """A read at an address at or beyond the operand's size."""


class SizeError(CustomError):
    """An output with more entries than unsigned 64-bit addressing holds."""


# ----- the language ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Out:
    """The output entry's row-major flat index."""


@dataclass(frozen=True)
class Nat:
    """An unsigned word literal (reduced modulo 2**64)."""

    value: int


@dataclass(frozen=True)
class Idx:
    """Unsigned arithmetic on index words: op in add, sub, mul, div, mod (modulo 2**64)."""

    op: str
    a: object
    b: object

    def __post_init__(self):
        if self.op not in INDEX_OPS:
            raise ValueError(f"custom: index operation must be one of {', '.join(INDEX_OPS)} "
                             f"(got {self.op!r})")


@dataclass(frozen=True)
class Read:
    """Input ``operand`` at row-major ``address`` (an index expression)."""

    operand: int
    address: object

    def __post_init__(self):
        if isinstance(self.operand, bool) or not isinstance(self.operand, int) or \
                self.operand < 0:
            raise ValueError(f"custom: operand must be a natural number (got {self.operand!r})")


@dataclass(frozen=True)
class Const:
    """A literal (decimal string or integer) rounded once into the backend's numbers."""

    literal: object


@dataclass(frozen=True)
class Cast:
    """An index word as a number of the backend (rounded once)."""

    index: object


@dataclass(frozen=True)
class Apply:
    """A backend primitive on value expressions."""

    name: str
    args: tuple

    def __init__(self, name, *args):
        arity = 1 if name in UNARY else 2 if name in BINARY else 3 if name in TERNARY else None
        if arity is None:
            raise ValueError(f"custom: {name!r} is not a backend primitive")
        if len(args) != arity:
            raise ValueError(f"custom: {name} takes {arity} arguments (got {len(args)})")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", tuple(args))


INDEX_NODES = (Out, Nat, Idx)
VALUE_NODES = (Read, Const, Cast, Apply)


def _check_tree(e, want_index: bool):
    if want_index:
        if not isinstance(e, INDEX_NODES):
            raise ValueError(f"custom: expected an index expression (got {e!r})")
        if isinstance(e, Idx):
            _check_tree(e.a, True)
            _check_tree(e.b, True)
        return
    if not isinstance(e, VALUE_NODES):
        raise ValueError(f"custom: expected a value expression (got {e!r})")
    if isinstance(e, Read):
        _check_tree(e.address, True)
    elif isinstance(e, Cast):
        _check_tree(e.index, True)
    elif isinstance(e, Apply):
        for arg in e.args:
            _check_tree(arg, False)


@dataclass(frozen=True)
class Program:
    """A named custom program: ``body`` a value expression, checked for well-formedness at
    construction (operand numbers and addresses are checked when it runs)."""

    name: str
    body: object

    def __post_init__(self):
        _check_tree(self.body, False)

    def eval(self, xp, inputs, shape, limit: int = WORD):
        """The output of ``shape``: ``body`` at each flat index in increasing order; the
        first failure is raised (module docstring).  ``inputs`` are backend arrays."""
        size = int(np.prod(shape, dtype=object)) if len(shape) else 1
        if size > limit:
            raise SizeError(f"custom {self.name}: output size {size} exceeds the unsigned "
                            f"addressing limit {limit}")
        flats = [np.asarray(x).reshape(-1) for x in inputs]
        out = xp.constant(0, (size,))
        for i in range(size):
            out[i] = self._value(xp, self.body, flats, i)[()]
        return out.reshape(tuple(shape))

    def _index(self, e, i) -> int:
        if isinstance(e, Out):
            return i % WORD
        if isinstance(e, Nat):
            return e.value % WORD
        a, b = self._index(e.a, i), self._index(e.b, i)
        if e.op == "add":
            return (a + b) % WORD
        if e.op == "sub":
            return (a - b) % WORD
        if e.op == "mul":
            return (a * b) % WORD
        if b == 0:
            return 0
        return a // b if e.op == "div" else a % b

    def _value(self, xp, e, flats, i):
        if isinstance(e, Read):
            address = self._index(e.address, i)
            return np.asarray(self.read(flats, e.operand, address))
        if isinstance(e, Const):
            return xp.constant(e.literal)
        if isinstance(e, Cast):
            return xp.constant(self._index(e.index, i))
        args = [self._value(xp, a, flats, i) for a in e.args]
        return getattr(xp, e.name)(*args)

    def read(self, flats, operand: int, address: int):
        """The checked row-major read: OperandError, then BoundsError, else the entry."""
        if operand >= len(flats):
            raise OperandError(f"custom {self.name}: operand {operand} does not exist (the "
                               f"program has {len(flats)} operands)")
        size = flats[operand].size
        if address >= size:
            raise BoundsError(f"custom {self.name}: address {address} is out of bounds for "
                              f"operand {operand} of size {size}")
        return flats[operand][address]


# The program of a plain ``custom`` registry entry (routes.op("custom", ...)): every output
# entry 0, with no reads.  The registry's tests need a forward map for every operator value,
# and an operator value carries no program (the program lives in its graph's payload), so the
# entry runs this one; ``bind`` attaches a real program.
ZEROS = Program("zeros", Const(0))


def zero_pullback(xp, xs, y, g):
    """The default pullback policy: zero at every input."""
    return tuple(xp.zeros_like(x) for x in xs)


def bind(op, program: Program, pullback=None):
    """The ``custom`` operator ``op`` with ``program`` as its forward map and ``pullback``
    (``pullback(xp, xs, y, g) -> gradient per input``; None: a backward pass is refused) as
    its pullback policy.  The result is an operator (same record, ports and checks) whose
    ``rule(backend)`` runs them."""
    if op.name != "custom":
        raise RouteError(f"custom: bind takes a custom operator (got {op.name})")
    if not isinstance(program, Program):
        raise RouteError(f"custom: bind takes a Program (got {type(program).__name__})")
    if program.name != op.attrs.program:
        raise RouteError(f"custom: the node is named {op.attrs.program!r} but the program "
                         f"{program.name!r}")

    def forward(xp, a, *xs):
        return program.eval(xp, xs, a.shape)

    def backward(xp, a, xs, ys, gs, needs):
        if pullback is None:
            raise RouteError(f"custom {program.name}: no pullback was supplied")
        grads = tuple(pullback(xp, xs, ys[0], gs[0]))
        if len(grads) != len(xs):
            raise RouteError(f"custom {program.name}: the pullback returned {len(grads)} "
                             f"gradients for {len(xs)} inputs")
        return grads

    decl = dataclasses.replace(op.decl, forward=forward, backward=backward, jvp=None)
    return Op(decl, op.attrs)

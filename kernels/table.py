"""The kernel table: operator name -> ``Kernel`` (its contract, the attributes it serves),
and ``of_op(op)`` for an operator instance or a name.

Only operators whose row in the spec's CUDA table (shared/spec/operators.tsv, column
``cuda_entry``; routes.vocabulary) is ``yes`` or ``at some attributes`` have kernels; an
operator or an attribute combination without one gives None, never a substitute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .contract import Contract
from .elementwise import ELEMENTWISE

_ALL = lambda attrs: True                                      # noqa: E731


@dataclass(frozen=True)
class Kernel:
    """One operator's kernel.  ``kind``: elementwise, reduce, softmax or matmul (the launch
    shape); ``contract``: kernels.contract.Contract; ``accepts(attrs)``: whether the kernel
    implements these attributes (div's rounding_mode none only, add's scalar element...)."""

    name: str
    kind: str
    contract: Contract
    accepts: Callable = _ALL

    @property
    def routes(self) -> tuple:
        return self.contract.routes

    def claim(self, route, fmt, mode="nearest_even"):
        return self.contract.claim(route, fmt, mode)


def _elementwise_kernels():
    composite = ("sigmoid", "silu")
    out = {}
    for name, e in ELEMENTWISE.items():
        out[name] = Kernel(name, "elementwise",
                           Contract(e.forward_prims,
                                    e.gradient_prims if e.gradient is not None else None,
                                    single=name not in composite),
                           e.accepts)
    return out


_f = frozenset
TABLE = {
    **_elementwise_kernels(),
    # reduce: sum and prod in sequential order (many roundings), max and min exact.
    "reduce": Kernel("reduce", "reduce",
                     Contract(_f({"add", "multiply", "maximum", "minimum"}), None, False)),
    "softmax": Kernel("softmax", "softmax",
                      Contract(_f({"maximum", "subtract", "exp", "add", "divide"}), None,
                               False)),
    "logSoftmax": Kernel("logSoftmax", "softmax",
                         Contract(_f({"maximum", "subtract", "exp", "add", "log"}), None,
                                  False)),
    "matmul": Kernel("matmul", "matmul", Contract(_f({"multiply", "add"}), None, False)),
    "scaledMatmul": Kernel("scaledMatmul", "matmul",
                           Contract(_f({"multiply", "add"}), None, False)),
}


def names() -> tuple:
    """The operators with a kernel, in table order."""
    return tuple(TABLE)


def of_op(op) -> Kernel | None:
    """The kernel of ``op`` (a routes Op, or an operator name: the kernel of that operator
    at the attributes it serves), or None when there is none."""
    if isinstance(op, str):
        return TABLE.get(op)
    k = TABLE.get(op.name)
    if k is None or not k.accepts(op.attrs):
        return None
    return k

"""The kernel table: operator name -> ``Kernel`` (kernels.base: its contract, the attributes
it serves, its launcher), and ``of_op(op)`` for an operator instance or a name.

Only operators whose row in the spec's CUDA table (shared/spec/operators.tsv, column
``cuda_entry``; routes.vocabulary) is ``yes`` or ``at some attributes`` have kernels; an
operator or an attribute combination without one gives None, never a substitute.  Each kernel
module defines ``KERNELS``; ``MODULES`` lists them in table order.
"""

from __future__ import annotations

import importlib

from roundoff_coverage.routes.vocabulary_computed import computed

from .base import Kernel

MODULES = ("elementwise", "rows", "products", "movement", "norms", "attention", "losses",
           "draws", "conv", "spectral")

TABLE = {k.name: k for m in MODULES
         for k in importlib.import_module(f"{__package__}.{m}").KERNELS}


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


def has_entry(op) -> bool:
    """Whether the table has a kernel for the operator instance ``op`` (a routes Op)."""
    return of_op(op) is not None


def vocabulary() -> tuple:
    """The operator vocabulary computed from the code, every column (routes.vocabulary.Row,
    in the order of routes.names()): routes.vocabulary_computed.computed's cells, the CUDA
    column from this table (``yes``: a kernel at every attribute point, ``at some
    attributes``, ``no``)."""
    return computed(has_entry)

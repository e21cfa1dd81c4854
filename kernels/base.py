"""What every kernel module builds on: ``Kernel`` (one table entry: its contract, the
attributes it serves and its host launcher) and ``Context`` (what a launcher receives: the
format, mode, precision flavour, primitive table, rounding parameters, and the helpers that
compile, launch and read cotangents).

A kernel module (elementwise, rows, products...) defines ``KERNELS``, a tuple of ``Kernel``;
kernels.table collects them.  A launcher ``launch(o, xs, cotangents, route, ctx)`` receives the
operator instance, its inputs read as the rule reads them (one float64 array of values of
the format per input port) and returns one float64 array per output port (forward) or per
input port (gradient; None at ports without one).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from roundoff_coverage import formats

from .contract import Contract
from .errors import KernelError

_ALL = lambda attrs: True                                      # noqa: E731
_compiled = {}


@dataclass(frozen=True)
class Kernel:
    """One operator's kernel.  ``kind``: the launch shape (elementwise, reduce, softmax,
    matmul...); ``contract``: kernels.contract.Contract; ``accepts(attrs)``: whether the kernel
    implements these attributes (div's rounding_mode none only, add's scalar element...);
    ``launch``: the host launcher (module docstring); ``sized(size)``: the operator instance
    of about ``size`` elements gpu_check measures (None: elementwise kernels take a vector
    of ``size``, the others the operator's default instance, see ``at_size``)."""

    name: str
    kind: str
    contract: Contract
    launch: Callable
    accepts: Callable = _ALL
    sized: Callable | None = None

    def __post_init__(self):
        # The contract knows its kernel's operator and attributes (a traced contract traces
        # that rule at those attributes).
        object.__setattr__(self, "contract", dataclasses.replace(
            self.contract, op=self.name, accepts=self.accepts))

    @property
    def routes(self) -> tuple:
        return self.contract.routes

    def at_size(self, size: int):
        """The instance measured at about ``size`` elements (gpu_check)."""
        from roundoff_coverage import routes
        if self.sized is not None:
            return self.sized(size)
        if self.kind == "elementwise":
            return routes.op(self.name, shape=(size,))
        return routes.op(self.name)

    def claim(self, route, fmt, mode="nearest_even"):
        return self.contract.claim(route, fmt, mode)


@dataclass(frozen=True)
class Context:
    """One launch's settings: ``fmt`` (a BinaryFormat), ``mode``, ``flavour`` (binary64,
    binary32 or emulated), ``simulated``, ``P`` (kernels.primitives.build) and ``rp``
    (kernels.primitives.rounding_params)."""

    fmt: object
    mode: str
    flavour: str
    simulated: bool
    P: dict
    rp: np.ndarray

    def compile(self, key, make):
        """``make()``, compiled once per process for (key, flavour, simulator or GPU).  One key
        names one kernel factory across modules (the shared matmul, reduce and softmax row
        kernels are reused under their names): a module's own kernels take keys prefixed
        with the module (``"conv.pool"``, ``("elementwise", name)``)."""
        k = (key, self.flavour, self.simulated)
        if k not in _compiled:
            _compiled[k] = make()
        return _compiled[k]

    def launch(self, kernel, n, *args):
        """``kernel`` over ``n`` work items, one thread each: blocks of 128 on a GPU; in the
        simulator, where each thread is a Python thread, blocks of at most 32."""
        if n == 0:
            return
        threads = min(32, n) if self.simulated else 128
        # numba copies array arguments back after the launch: read-only views get a copy.
        args = [np.array(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a
                for a in args]
        kernel[(n + threads - 1) // threads, threads](*args)

    def round(self, a):
        """``a`` as float64 values of the format (rounded once under the mode)."""
        a = np.asarray(a, dtype=np.float64)
        return formats.round_to(a, self.fmt, self.mode).reshape(a.shape)

    def cotangents(self, o, cotangents):
        """One float64 array of values of the format per value output port of ``o`` (zeros
        where ``cotangents`` has None, or is None; None at other ports), shapes checked
        (KernelError, one line)."""
        cots = (None,) * len(o.outputs) if cotangents is None else tuple(cotangents)
        if len(cots) != len(o.outputs):
            raise KernelError(f"kernels: {o.name} expects {len(o.outputs)} cotangents "
                              f"(got {len(cots)})")
        out = []
        for c, p, name in zip(cots, o.outputs, o.output_names):
            if not p.differentiable:
                out.append(None)
            elif c is None:
                out.append(np.zeros(p.shape))
                continue
            if tuple(np.shape(c)) != tuple(p.shape):
                raise KernelError(f"kernels: {o.name}: cotangent of {name} must have shape "
                                  f"{list(p.shape)} (got {list(np.shape(c))})")
            out.append(self.round(c))
        return tuple(out)


def flat(a):
    """``a`` as a C-contiguous float64 vector."""
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)

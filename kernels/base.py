"""What every kernel module builds on: ``Kernel`` (one table entry: its contract, the
attributes it serves and its host launcher) and ``Context`` (what a launcher receives: the
format, mode, precision flavour, primitive table, rounding parameters, and the helpers that
compile, launch and read cotangents).

A kernel module (elementwise, rows, products...) defines ``KERNELS``, a tuple of ``Kernel``;
kernels.table collects them.  A launcher ``launch(o, xs, cotangents, route, ctx)`` receives the
operator instance, its inputs read as the rule reads them (one float64 array of values of
the format per input port) and returns one float64 array per output port (forward) or per
input port (gradient; None at ports without one).

Each kernel carries its test instances as data, beside it in its module (``Kernel.tests``, a
tuple of ``Instance``: operator instances, formats, modes, sample kinds, routes and, where
the samplers have none, input makers), as a declaration carries its examples: the simulator
tests (tests/kernel_harness.py) build every case from the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage import routes

from .contract import Contract
from .errors import KernelError

_ALL = lambda attrs: True                                      # noqa: E731
_compiled = {}

# The formats the tests run kernels in: binary64 and binary32 (their own flavours), and the
# emulated flavour at 8, 11 and 4 bits of precision (bfloat16, binary16, float8_e4m3fn).
FORMATS = ("binary64", "binary32", "bfloat16", "binary16", "float8_e4m3fn")
FEW = ("binary64", "bfloat16", "float8_e4m3fn")        # one of each flavour but binary32
FEW32 = ("binary32", "bfloat16", "float8_e4m3fn")      # binary32 instead of binary64
# Deterministic modes besides nearest even that tests add where a contract differs by mode.
DIRECTED = ("toward_zero", "upward", "nearest_away", "odd")
# Special values: signed zeros, infinities, NaN and a few exact finite values.
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.5, 0.5])


@dataclass(frozen=True)
class Instance:
    """Test instances of one kernel, as data: the kernel's operator at ``attrs`` (a mapping,
    the label of one example of the operator's declaration, or None: each example the
    kernel serves), run in the simulator in every format of ``formats``, mode of ``modes``,
    sample kind of ``kinds`` (None: every kind the declaration samples) and route of
    ``routes`` (None: the kernel's), each run checked against the kernel's contract.

    ``inputs(o, rng, fmt)``, when given, makes the inputs (one array per input port; ``fmt``
    a BinaryFormat) instead of the operator's sampler, and ``kinds`` only name the cases
    (``special_values``, ``fixed``).  ``label``: the instance's key in test ids (default: the
    example's label, the label an earlier instance gave the same operator instance,
    ``default`` at the operator's defaults, else the first output's shape, ``2x4``).
    ``refuses``: the kernel refuses these inputs with a one-line KernelError starting so
    (no values to check).  ``emulated`` False: numerics.emulated cannot evaluate the rule
    here (empty extents its reductions refuse); the cases run and their ports are checked,
    their values against a model of their own (tests/kernels/test_kernels_attention_empty.py)."""

    attrs: Mapping | str | None = None
    label: str = ""
    formats: tuple = FORMATS
    kinds: tuple | None = None
    routes: tuple | None = None
    modes: tuple = ("nearest_even",)
    inputs: Callable | None = None
    refuses: str = ""
    emulated: bool = True


def special_values(o, rng, fmt):
    """Inputs of ``o`` drawn from SPECIALS at every value port (other ports from the
    operator's ordinary sampler in binary32): padding zeros times infinities, signed zero
    sums, NaN through products, where the operator's own samplers have none."""
    base = o.samples(rng, formats.get("binary32"), "ordinary")
    return tuple(SPECIALS[rng.integers(0, len(SPECIALS), np.shape(x))].reshape(np.shape(x))
                 if p.kind == "value" else x for x, p in zip(base, o.inputs))


def fixed(*arrays):
    """An ``Instance.inputs`` that gives ``arrays`` (one per input port) whatever the draw."""
    arrays = tuple(np.asarray(a) for a in arrays)
    return lambda o, rng, fmt: arrays


@dataclass(frozen=True)
class Kernel:
    """One operator's kernel.  ``kind``: the launch shape (elementwise, reduce, softmax,
    matmul...); ``contract``: kernels.contract.Contract; ``accepts(attrs)``: whether the kernel
    implements these attributes (div's rounding_mode none only, add's scalar element...);
    ``launch``: the host launcher (module docstring); ``sized(size)``: the operator instance
    of about ``size`` elements gpu_check measures (None: elementwise kernels take a vector
    of ``size``, the others the operator's default instance, see ``at_size``); ``tests``:
    its test instances (``Instance``; the default: every example the kernel serves, in every
    format, sample kind and route)."""

    name: str
    kind: str
    contract: Contract
    launch: Callable
    accepts: Callable = _ALL
    sized: Callable | None = None
    tests: tuple = field(default=(Instance(),), compare=False)

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

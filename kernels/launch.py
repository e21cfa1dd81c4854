"""``run(op, inputs, fmt, mode, route)``: one route of one operator instance on the device.

Callable from any process (a coverage worker per task): everything it needs travels as
plain arguments, and the compiled kernels are cached per process, keyed by (kernel, precision
flavour, simulator or GPU).  Inputs are read as the rule reads them (``Rule._read``): scalar
ports rounded once into the format under the mode, on the host, so the device only ever sees
values of the format.  Arrays travel as binary64 whatever the format (values of the format
are binary64 numbers exactly).  Every NaN result is returned as the canonical quiet NaN, as
the emulated backend writes it (NaN signs and payloads are not compared).
"""

from __future__ import annotations

import warnings

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes

from . import contract as C
from . import selection as D
from .base import Context
from .errors import KernelError
from .primitives import build, rounding_params
from .table import of_op


def run(op, inputs, fmt, mode: str = "nearest_even", route: str = "forward",
        cotangents=None):
    """(outputs, device) of ``route`` of ``op`` (a routes Op or an operator name at its
    default attributes) on ``inputs`` (one array per input port) in ``fmt`` under ``mode``.

    forward: a tuple with one float64 array per output port.  gradient: a tuple with one
    float64 array per input port (None at frozen ports), from ``cotangents`` (one per output
    port; None means zeros).  ``device`` is ``"cuda:<name>"`` or ``"simulator"``.
    KernelError (one line) where no kernel, device, format or mode serves the request;
    routes.RouteError for inputs the rule refuses."""
    dev = D.device()
    o = routes.op(op) if isinstance(op, str) else op
    o.check()
    k = of_op(o)
    if k is None:
        raise KernelError(f"kernels: no kernel for {o.name} at these attributes")
    fmt = formats.get(fmt)
    flav = C.flavour(fmt, mode)
    k.contract.primitives(route)                     # KernelError for a route without kernel
    xs = _read(o, inputs, fmt, mode)
    rule = o.rule(numerics.emulated(fmt, mode))
    if rule is not None:
        rule.validate(xs)
    sim = dev == D.SIMULATOR
    ctx = Context(fmt, mode, flav, sim, build(flav, sim), rounding_params(fmt, mode))
    with warnings.catch_warnings():
        # The simulator evaluates on numpy scalars: inf and NaN results warn there.
        warnings.simplefilter("ignore", RuntimeWarning)
        out = k.launch(o, xs, cotangents, route, ctx)
    return tuple(None if a is None else np.where(np.isnan(a), np.nan, a) for a in out), dev


def _read(o, inputs, fmt, mode):
    inputs = tuple(inputs)
    if len(inputs) != len(o.inputs):
        raise KernelError(f"kernels: {o.name} expects {len(o.inputs)} inputs "
                          f"({', '.join(o.input_names)}) (got {len(inputs)})")
    # Scalar (number) ports rounded once into the format; index, mask and key ports as given.
    xs = tuple(formats.round_to(np.asarray(x, dtype=np.float64), fmt, mode)
               .reshape(np.shape(x)) if p.scalar else np.asarray(x)
               for x, p in zip(inputs, o.inputs))
    for x, p, name in zip(xs, o.inputs, o.input_names):
        if tuple(np.shape(x)) != tuple(p.array_shape):
            raise KernelError(f"kernels: {o.name}: input {name} must have shape "
                              f"{list(p.array_shape)} (got {list(np.shape(x))})")
    return xs

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

import formats
import numerics
import routes
from routes.families.reduction import kept_shape, to_last

from . import contract as C
from . import selection as D
from .elementwise import ELEMENTWISE, attribute_scalars, make_kernels
from .errors import KernelError
from .primitives import build, rounding_params
from .products import make_matmul
from .rows import make_reduce, make_softmax, reduce_code
from .table import of_op

_compiled = {}


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
    P = build(flav, sim)
    rp = rounding_params(fmt, mode)
    with warnings.catch_warnings():
        # The simulator evaluates on numpy scalars: inf and NaN results warn there.
        warnings.simplefilter("ignore", RuntimeWarning)
        if k.kind == "elementwise":
            out = _elementwise(o, k, xs, cotangents, fmt, mode, P, rp, flav, sim, route)
        elif k.kind == "reduce":
            out = (_reduce(o, xs[0], P, rp, flav, sim),)
        elif k.kind == "softmax":
            out = (_softmax(o, xs[0], P, rp, flav, sim),)
        else:
            out = (_matmul(o, xs, P, rp, flav, sim),)
    return tuple(None if a is None else np.where(np.isnan(a), np.nan, a) for a in out), dev


def _read(o, inputs, fmt, mode):
    inputs = tuple(inputs)
    if len(inputs) != len(o.inputs):
        raise KernelError(f"kernels: {o.name} expects {len(o.inputs)} inputs "
                          f"({', '.join(o.input_names)}) (got {len(inputs)})")
    xs = tuple(formats.round_to(np.asarray(x, dtype=np.float64), fmt, mode)
               .reshape(np.shape(x)) for x in inputs)
    for x, p, name in zip(xs, o.inputs, o.input_names):
        if tuple(np.shape(x)) != tuple(p.shape):
            raise KernelError(f"kernels: {o.name}: input {name} must have shape "
                              f"{list(p.shape)} (got {list(np.shape(x))})")
    return xs


def _kernel(key, make):
    if key not in _compiled:
        _compiled[key] = make()
    return _compiled[key]


def _launch(kernel, n, sim, *args):
    """One thread per work item: blocks of 128 on a GPU; in the simulator, where each thread
    is a Python thread, blocks of at most 32."""
    if n == 0:
        return
    threads = min(32, n) if sim else 128
    # numba copies array arguments back after the launch: read-only views get a copy.
    args = [np.array(a) if isinstance(a, np.ndarray) and not a.flags.writeable else a
            for a in args]
    kernel[(n + threads - 1) // threads, threads](*args)


def _flat(a):
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)


def _elementwise(o, k, xs, cotangents, fmt, mode, P, rp, flav, sim, route):
    e = ELEMENTWISE[o.name]
    fwd, grad = _kernel((o.name, flav, sim), lambda: make_kernels(e, P, sim))
    values = [_flat(x) for x in xs[:e.arity]]
    frozen = [float(x) for x in xs[e.arity:]]
    c0, c1 = attribute_scalars(o.name, o.attrs)
    if frozen:
        c0 = frozen[0]
    if len(frozen) > 1:
        c1 = frozen[1]
    shape = o.outputs[0].shape
    n = values[0].size
    if route == "forward":
        out = np.empty(n)
        _launch(fwd, n, sim, *values, out, c0, c1, rp)
        return (out.reshape(shape),)
    cots = tuple(cotangents) if cotangents is not None else (None,)
    if len(cots) != 1:
        raise KernelError(f"kernels: {o.name} expects 1 cotangent (got {len(cots)})")
    v = np.zeros(n) if cots[0] is None else _flat(formats.round_to(
        np.asarray(cots[0], dtype=np.float64), fmt, mode))
    grads = [np.empty(n) for _ in range(e.arity)]
    _launch(grad, n, sim, *values, v, *grads, c0, c1, rp)
    return tuple(g.reshape(x.shape) for g, x in zip(grads, xs)) + (None,) * len(e.frozen)


def _reduce(o, x, P, rp, flav, sim):
    a = o.attrs
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    if x.size == 0 or any(a.shape[ax] == 0 for ax in a.axes):
        return np.full(shape, 1.0 if a.op == "prod" else 0.0)
    flat = to_last(x, a.axes)
    rows = np.ascontiguousarray(flat.reshape(-1, flat.shape[-1]), dtype=np.float64)
    out = np.empty(rows.shape[0])
    kern = _kernel(("reduce", flav, sim), lambda: make_reduce(P))
    _launch(kern, rows.shape[0], sim, rows, out, reduce_code(a.op), rp)
    return out.reshape(shape)


def _softmax(o, x, P, rp, flav, sim):
    axis = o.attrs.axis
    moved = np.moveaxis(x, axis, -1)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64)
    out = np.empty_like(rows)
    kern = _kernel(("softmax", flav, sim), lambda: make_softmax(P))
    _launch(kern, rows.shape[0], sim, rows, out, 1 if o.name == "logSoftmax" else 0, rp)
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def _matmul(o, xs, P, rp, flav, sim):
    a = o.attrs
    x, y = xs[0], xs[1]
    batch = np.broadcast_shapes(a.x_shape[:-2], a.y_shape[:-2])
    m, kk, n = a.x_shape[-2], a.x_shape[-1], a.y_shape[-1]
    shape = tuple(batch) + (m, n)
    if kk == 0:
        return np.zeros(shape)
    xb = np.ascontiguousarray(np.broadcast_to(x, batch + (m, kk)).reshape(-1, m, kk))
    yb = np.ascontiguousarray(np.broadcast_to(y, batch + (kk, n)).reshape(-1, kk, n))
    out = np.empty((xb.shape[0], m, n))
    scaled = o.name == "scaledMatmul"
    scale = float(xs[2]) if scaled else 1.0
    kern = _kernel(("matmul", flav, sim), lambda: make_matmul(P))
    _launch(kern, out.size, sim, xb, yb, out, 1 if scaled else 0, scale, rp)
    return out.reshape(shape)

"""Row kernels: reduce (sum, prod, max, min), softmax and logSoftmax, one thread per output
row, every loop in sequential order (element 0 first), which is the emulated backend's
"strict" policy: ``Backend._sequential`` folds acc = x[0], then acc = op(acc, x[j]) for
j = 1, 2, ... (numerics/backend.py).  The host moves the reduced axes last and flattens them
(data movement, routes.families.reduction.to_last), so a kernel sees a C-contiguous
(rows, n) array.  A fixed order per output element is what makes the result reproducible
and comparable bit for bit; the error of a sequential sum is gamma_(n-1) sum|x_i| (Higham
2002, 4.2), which routes.apriori bounds per sample.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from routes.families.reduction import kept_shape, to_last

from .base import Kernel
from .contract import Contract

REDUCE_OPS = ("sum", "prod", "max", "min")
_CODE = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def reduce_code(op: str) -> int:
    return _CODE[op]


def make_reduce(P: dict):
    """reduce(x[rows, n], out[rows], code, rp): n >= 1."""
    add, mul, mx, mn = P["add"], P["multiply"], P["maximum"], P["minimum"]

    @cuda.jit
    def reduce(x, out, code, rp):
        r = cuda.grid(1)
        if r < out.size:
            acc = x[r, 0]
            for j in range(1, x.shape[1]):
                v = x[r, j]
                if code == 0:
                    acc = add(acc, v, rp)
                elif code == 1:
                    acc = mul(acc, v, rp)
                elif code == 2:
                    acc = mx(acc, v, rp)
                else:
                    acc = mn(acc, v, rp)
            out[r] = acc
    return reduce


def make_softmax(P: dict):
    """softmax(x[rows, n], out[rows, n], log, rp): routes' _softmax (log = 0) and
    log_softmax (log = 1): m = max (exact, NaN-propagating), z = x - m rounded, e = exp(z),
    s = sequential sum of e; softmax e / s, logSoftmax z - log(s)."""
    add, sub, div, mx, ex, lg = (P["add"], P["subtract"], P["divide"], P["maximum"],
                                 P["exp"], P["log"])

    @cuda.jit
    def softmax(x, out, log, rp):
        r = cuda.grid(1)
        if r < x.shape[0]:
            n = x.shape[1]
            m = x[r, 0]
            for j in range(1, n):
                m = mx(m, x[r, j], rp)
            s = 0.0
            for j in range(n):
                z = sub(x[r, j], m, rp)
                e = ex(z, rp)
                s = e if j == 0 else add(s, e, rp)
                out[r, j] = e if log == 0 else z
            if log == 0:
                for j in range(n):
                    out[r, j] = div(out[r, j], s, rp)
            else:
                ls = lg(s, rp)
                for j in range(n):
                    out[r, j] = sub(out[r, j], ls, rp)
    return softmax


def launch_reduce(o, xs, cotangents, route, ctx):
    a = o.attrs
    x = xs[0]
    shape = kept_shape(a.shape, a.axes, a.keepdim)
    if x.size == 0 or any(a.shape[ax] == 0 for ax in a.axes):
        return (np.full(shape, 1.0 if a.op == "prod" else 0.0),)
    moved = to_last(x, a.axes)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64)
    out = np.empty(rows.shape[0])
    kern = ctx.compile("reduce", lambda: make_reduce(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, out, reduce_code(a.op), ctx.rp)
    return (out.reshape(shape),)


def launch_softmax(o, xs, cotangents, route, ctx):
    axis = o.attrs.axis
    moved = np.moveaxis(xs[0], axis, -1)
    rows = np.ascontiguousarray(moved.reshape(-1, moved.shape[-1]), dtype=np.float64)
    out = np.empty_like(rows)
    kern = ctx.compile("softmax", lambda: make_softmax(ctx.P))
    ctx.launch(kern, rows.shape[0], rows, out, 1 if o.name == "logSoftmax" else 0, ctx.rp)
    return (np.moveaxis(out.reshape(moved.shape), -1, axis),)


_f = frozenset
KERNELS = (
    # reduce: sum and prod in sequential order (many roundings), max and min exact.
    Kernel("reduce", "reduce",
           Contract(_f({"add", "multiply", "maximum", "minimum"}), None, False), launch_reduce),
    Kernel("softmax", "softmax",
           Contract(_f({"maximum", "subtract", "exp", "add", "divide"}), None, False),
           launch_softmax),
    Kernel("logSoftmax", "softmax",
           Contract(_f({"maximum", "subtract", "exp", "add", "log"}), None, False),
           launch_softmax),
)

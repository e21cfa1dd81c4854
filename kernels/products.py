"""matmul and scaledMatmul: one thread per output entry (b, i, j), the dot product in
sequential k order with every product rounded before it is added (no FMA), as the emulated
backend's strict policy computes it (``Backend._contract``: the rounded products folded
acc = p_0, acc = acc + p_k).  The host broadcasts the batch prefixes (data movement), so a
kernel sees x[B, m, k] and y[B, k, n] with k >= 1.  The dot product's error is bounded by
gamma_k sum|x_i y_i| (Higham 2002, 3.1), routes.apriori's matmul formula.
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from .base import Kernel
from .contract import Contract


def make_matmul(P: dict):
    """matmul(x[B, m, k], y[B, k, n], out[B, m, n], scaled, scale, rp): out = x @ y, then
    out * scale rounded once when ``scaled`` (scaledMatmul's rule)."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def matmul(x, y, out, scaled, scale, rp):
        t = cuda.grid(1)
        m, n = out.shape[1], out.shape[2]
        if t < out.size:
            b = t // (m * n)
            i = (t // n) % m
            j = t % n
            acc = mul(x[b, i, 0], y[b, 0, j], rp)
            for k in range(1, x.shape[2]):
                acc = add(acc, mul(x[b, i, k], y[b, k, j], rp), rp)
            if scaled == 1:
                acc = mul(acc, scale, rp)
            out[b, i, j] = acc
    return matmul


def launch(o, xs, cotangents, route, ctx):
    a = o.attrs
    x, y = xs[0], xs[1]
    batch = np.broadcast_shapes(a.x_shape[:-2], a.y_shape[:-2])
    m, kk, n = a.x_shape[-2], a.x_shape[-1], a.y_shape[-1]
    shape = tuple(batch) + (m, n)
    if kk == 0:
        return (np.zeros(shape),)
    xb = np.ascontiguousarray(np.broadcast_to(x, batch + (m, kk)).reshape(-1, m, kk))
    yb = np.ascontiguousarray(np.broadcast_to(y, batch + (kk, n)).reshape(-1, kk, n))
    out = np.empty((xb.shape[0], m, n))
    scaled = o.name == "scaledMatmul"
    scale = float(xs[2]) if scaled else 1.0
    kern = ctx.compile("matmul", lambda: make_matmul(ctx.P))
    ctx.launch(kern, out.size, xb, yb, out, 1 if scaled else 0, scale, ctx.rp)
    return (out.reshape(shape),)


KERNELS = tuple(Kernel(name, "matmul",
                       Contract(frozenset({"multiply", "add"}), None, False), launch)
                for name in ("matmul", "scaledMatmul"))

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
from numba import cuda


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

"""Spectral kernels: rfft, irfft (explicit DFT sums) and selectiveScan, forward and gradient
routes.

The rules mirrored (routes/families/spectral.py):

- Twiddles (``twiddles``): for the integer m = k t mod n, the quadrant q = 4m // n, the rest
  4m mod n, a reflection when 2 rest > n, and a = rest (n - rest on a reflection, so
  a <= n/2) are exact integer arithmetic, done on the host.  phi = PI a / (2n) is one
  rational literal the rule hands to ``xp.constant``: rounded once into the format on the host
  (formats.round_exact, what the emulated backend's ``constant`` does; never through a
  binary64 intermediate, which could round twice).  The device evaluates cos(phi) and
  sin(phi) with its cos and sin primitives (a = 0 gives exactly 1 and 0, as the rule's
  table), swaps them on a reflection and applies the quadrant by exact negations and
  selections, in the rule's ``where`` order.
- rfft: ``xp.matmul(x, [C, -S])`` along the moved axis: per output one dot product
  sum_t x_t M[t, k] (products x * M in that order, folded sequentially, no FMA).  The -S half
  is the negated sine.
- irfft: the imaginary parts at k = 0 (and k = n/2 for even n) replaced by +0 (a selection),
  ``xp.matmul([re, im], W)`` with W's rows w_k cos, then -(w_k sin), w_k = 2 (one rounded
  product 2 * v, the rule's ``xp.multiply(two, ...)``) except at the ignored ends; then one
  division by the constant n.
- selectiveScan: one thread per channel d, sequential in t: h = drive at t = 0, else
  exp(delta A) h + drive with drive = (delta x) B; y[t, d] = sum_n C[t, n] h[d, n] folded
  sequentially (``Backend._sequential``).  The state h[d, :] lives in a global scratch row.
- Gradients: rfft's [g_re, g_im] @ [C, -S]^T and irfft's (g @ W^T) / n with the ignored
  imaginary parts +0 (the same device matrices, transposed on the host); selectiveScan's
  reverse recurrence ``_scan_backward`` per channel (states recomputed into scratch), then
  the sums over channels of gB and gC per (t, n).

cos, sin and exp are transcendental device primitives: the contracts list them, so agreement
with numerics.emulated is "screened" in the emulated formats and binary32 and not claimed in
binary64 (kernels.contract).
"""

from __future__ import annotations

from fractions import Fraction

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from roundoff_coverage import formats
from roundoff_coverage.routes.families.spectral import PI

from .base import FEW, Instance, Kernel
from .contract import TRACED, Contract

# Bits of a twiddle entry's code (host integers): quadrant (2 bits), reflection, a = 0,
# sine instead of cosine, doubled (irfft's w_k = 2), negated (the -S half).
_SWAP, _ZERO, _SINE, _DOUBLE, _NEGATE = 4, 8, 16, 32, 64


# ----- device kernels --------------------------------------------------------------------------
def make_twiddle(P: dict):
    """twiddle(phi[E], code[E], two, out[E], rp): one DFT matrix entry per thread (codes
    above): cos or sin of q pi/2 +- phi, optionally 2 * v rounded, optionally negated."""
    mul, neg, cos, sin = P["multiply"], P["negative"], P["cos"], P["sin"]

    @cuda.jit
    def twiddle(phi, code, two, out, rp):
        e = cuda.grid(1)
        if e < out.size:
            cc = code[e]
            cp, sp = 1.0, 0.0
            if (cc // _ZERO) % 2 == 0:
                cp = cos(phi[e], rp)
                sp = sin(phi[e], rp)
            c, s = cp, sp
            if (cc // _SWAP) % 2 == 1:
                c, s = sp, cp
            q = cc % 4
            # cos(q pi/2 + angle), sin(q pi/2 + angle) by exact negations and selections.
            if q == 0:
                cv, sv = c, s
            elif q == 1:
                cv, sv = neg(s, rp), c
            elif q == 2:
                cv, sv = neg(c, rp), neg(s, rp)
            else:
                cv, sv = s, neg(c, rp)
            v = sv if (cc // _SINE) % 2 == 1 else cv
            if (cc // _DOUBLE) % 2 == 1:
                v = mul(two, v, rp)
            if (cc // _NEGATE) % 2 == 1:
                v = neg(v, rp)
            out[e] = v
    return twiddle


def make_dft(P: dict):
    """dft(z[R, K], w[K, J], out[R, J], divide, dn, rp): out = z @ w (K >= 1, sequential
    dot products, z * w products), then / dn rounded once when ``divide``."""
    add, mul, div = P["add"], P["multiply"], P["divide"]

    @cuda.jit
    def dft(z, w, out, divide, dn, rp):
        t = cuda.grid(1)
        n = out.shape[1]
        if t < out.size:
            r = t // n
            j = t % n
            acc = mul(z[r, 0], w[0, j], rp)
            for k in range(1, z.shape[1]):
                acc = add(acc, mul(z[r, k], w[k, j], rp), rp)
            if divide == 1:
                acc = div(acc, dn, rp)
            out[r, j] = acc
    return dft


def make_scan(P: dict):
    """scan(x[L, D], delta[L, D], A[D, N], B[L, N], C[L, N], h[D, N], y[L, D], rp): routes'
    _scan_forward, one thread per channel (h: scratch state)."""
    add, mul, ex = P["add"], P["multiply"], P["exp"]

    @cuda.jit
    def scan(x, delta, A, B, C, h, y, rp):
        d = cuda.grid(1)
        if d < x.shape[1]:
            nstate = A.shape[1]
            for t in range(x.shape[0]):
                sx = mul(delta[t, d], x[t, d], rp)
                for n in range(nstate):
                    drive = mul(sx, B[t, n], rp)
                    if t == 0:
                        h[d, n] = drive
                    else:
                        decay = ex(mul(delta[t, d], A[d, n], rp), rp)
                        h[d, n] = add(mul(decay, h[d, n], rp), drive, rp)
                acc = mul(C[t, 0], h[d, 0], rp)
                for n in range(1, nstate):
                    acc = add(acc, mul(C[t, n], h[d, n], rp), rp)
                y[t, d] = acc
    return scan


def make_scan_grad(P: dict):
    """scan_grad(x, delta, A, gy[L, D], hs[L, D, N], gh[L, D, N], gx, gd[L, D], gA[D, N], rp):
    routes' _scan_backward for channel d (one thread each): the forward states recomputed
    into hs (as ``make_scan``), then t = L-1 .. 0: gh = gh + gy[t, d] * C[t] (the running
    cotangent of the state, kept per t in gh), gs = sum_n gh * B[t] sequentially,
    gx = gs * delta, gd = gs * x, and for t > 0: gz = (gh * h[t-1]) * decay[t],
    gd += sum_n gz * A sequentially, the gA term gz * delta folded in t order L-1, L-2, ...
    from its first, gh = gh * decay[t].  gA is +0 when L = 1.  C and B come in cb[2, L, N]."""
    add, mul, ex = P["add"], P["multiply"], P["exp"]

    @cuda.jit
    def scan_grad(x, delta, A, cb, gy, hs, gh, gx, gd, gA, rp):
        d = cuda.grid(1)
        if d < x.shape[1]:
            nstate, length = A.shape[1], x.shape[0]
            for t in range(length):
                sx = mul(delta[t, d], x[t, d], rp)
                for n in range(nstate):
                    drive = mul(sx, cb[1, t, n], rp)
                    if t == 0:
                        hs[t, d, n] = drive
                    else:
                        decay = ex(mul(delta[t, d], A[d, n], rp), rp)
                        hs[t, d, n] = add(mul(decay, hs[t - 1, d, n], rp), drive, rp)
            for n in range(nstate):
                gA[d, n] = 0.0
            for t in range(length - 1, -1, -1):
                for n in range(nstate):
                    from_y = mul(gy[t, d], cb[0, t, n], rp)
                    if t == length - 1:
                        gh[t, d, n] = from_y
                    else:
                        gh[t, d, n] = add(gh[t, d, n], from_y, rp)
                gs = mul(gh[t, d, 0], cb[1, t, 0], rp)
                for n in range(1, nstate):
                    gs = add(gs, mul(gh[t, d, n], cb[1, t, n], rp), rp)
                gx[t, d] = mul(gs, delta[t, d], rp)
                gdt = mul(gs, x[t, d], rp)
                if t > 0:
                    acc = 0.0
                    for n in range(nstate):
                        decay = ex(mul(delta[t, d], A[d, n], rp), rp)
                        gz = mul(mul(gh[t, d, n], hs[t - 1, d, n], rp), decay, rp)
                        term = mul(gz, A[d, n], rp)
                        acc = term if n == 0 else add(acc, term, rp)
                        ga = mul(gz, delta[t, d], rp)
                        gA[d, n] = ga if t == length - 1 else add(gA[d, n], ga, rp)
                        gh[t - 1, d, n] = mul(gh[t, d, n], decay, rp)
                    gdt = add(gdt, acc, rp)
                gd[t, d] = gdt
    return scan_grad


def make_scan_sums(P: dict):
    """scan_sums(x, delta, gy, hs, gh, gB[L, N], gC[L, N], rp): routes' _scan_backward's sums
    over the channels, one thread per (t, n), d in order: gC = sum_d gy[t, d] * h[t, d, n],
    gB = sum_d gh[t, d, n] * (delta[t, d] * x[t, d])."""
    add, mul = P["add"], P["multiply"]

    @cuda.jit
    def scan_sums(x, delta, gy, hs, gh, gB, gC, rp):
        r = cuda.grid(1)
        if r < gB.size:
            nstate = gB.shape[1]
            t, n = r // nstate, r % nstate
            c = mul(gy[t, 0], hs[t, 0, n], rp)
            b = mul(gh[t, 0, n], mul(delta[t, 0], x[t, 0], rp), rp)
            for d in range(1, x.shape[1]):
                c = add(c, mul(gy[t, d], hs[t, d, n], rp), rp)
                b = add(b, mul(gh[t, d, n], mul(delta[t, d], x[t, d], rp), rp), rp)
            gB[t, n] = b
            gC[t, n] = c
    return scan_sums


# ----- host: twiddle codes and constants (integers and one rounding per literal) ---------------
def _constant(ctx, literal):
    """``xp.constant(literal)``: the exact literal rounded once into the format."""
    return formats.round_exact(literal, ctx.fmt, ctx.mode).to_float()


def twiddle_codes(ctx, m, n, sine, double, negate):
    """(phi, code) per entry of the integer array ``m`` (routes' ``twiddles`` index
    arithmetic); ``sine``, ``double``, ``negate``: Boolean arrays broadcasting with m."""
    m = np.asarray(m) % n
    quadrant, rest = (4 * m) // n, (4 * m) % n
    swap = 2 * rest > n
    a = rest + swap * (n - 2 * rest)
    table = {v: _constant(ctx, PI * Fraction(v, 2 * n)) for v in set(a.reshape(-1).tolist())
             if v != 0}
    phi = np.asarray([table.get(v, 0.0) for v in a.reshape(-1).tolist()],
                     dtype=np.float64).reshape(a.shape)
    code = (quadrant + _SWAP * swap + _ZERO * (a == 0) + _SINE * np.asarray(sine)
            + _DOUBLE * np.asarray(double) + _NEGATE * np.asarray(negate))
    return phi, np.ascontiguousarray(code, dtype=np.int64)


def twiddle_matrix(ctx, m, n, sine, double, negate):
    """The DFT matrix entries for ``m`` on the device (float64, m's shape)."""
    phi, code = twiddle_codes(ctx, m, n, sine, double, negate)
    out = np.empty(code.size)
    kern = ctx.compile("spectral.twiddle", lambda: make_twiddle(ctx.P))
    ctx.launch(kern, out.size, phi.reshape(-1), code.reshape(-1), _constant(ctx, 2), out,
               ctx.rp)
    return out.reshape(code.shape)


def rfft_matrix(ctx, n):
    """[C, -S] of shape (n, 2h), h = n // 2 + 1 (routes' ``_rfft_matrix``)."""
    h = n // 2 + 1
    m = np.arange(n)[:, None] * np.arange(h)[None, :]
    mm = np.concatenate([m, m], axis=1)
    sine = np.concatenate([np.zeros((n, h), bool), np.ones((n, h), bool)], axis=1)
    return twiddle_matrix(ctx, mm, n, sine, False, sine)


def ignored(n):
    """Imaginary parts irfft ignores: k = 0 and, for even n, k = n / 2."""
    h = n // 2 + 1
    return (np.arange(h) == 0) | ((n % 2 == 0) & (np.arange(h) == n // 2))


def irfft_matrix(ctx, n):
    """(2h, n): rows w_k cos, then -(w_k sin) (routes' ``_irfft_matrix``)."""
    h = n // 2 + 1
    m = np.arange(h)[:, None] * np.arange(n)[None, :]
    mm = np.concatenate([m, m], axis=0)
    sine = np.concatenate([np.zeros((h, n), bool), np.ones((h, n), bool)], axis=0)
    twice = np.broadcast_to(~ignored(n)[:, None], (h, n))
    return twiddle_matrix(ctx, mm, n, sine, np.concatenate([twice, twice], axis=0), sine)


def dft(ctx, z, w, dn=None):
    """z[R, K] @ w[K, J] on the device, then / dn when given."""
    z = np.ascontiguousarray(z, dtype=np.float64)
    out = np.empty((z.shape[0], w.shape[1]))
    kern = ctx.compile("spectral.dft", lambda: make_dft(ctx.P))
    ctx.launch(kern, out.size, z, np.ascontiguousarray(w), out, 0 if dn is None else 1,
               1.0 if dn is None else dn, ctx.rp)
    return out


# ----- launchers -------------------------------------------------------------------------------
def launch_rfft(o, xs, cotangents, route, ctx):
    axis, n = o.attrs.axis, o.attrs.shape[o.attrs.axis]
    h = n // 2 + 1
    if route == "gradient":
        # routes' _rfft_backward: [g_re, g_im] @ [C, -S]^T (the same matrix, transposed).
        gre, gim = (np.moveaxis(g, axis, -1) for g in ctx.cotangents(o, cotangents))
        g = np.concatenate([gre, gim], axis=-1)
        gx = dft(ctx, g.reshape(-1, 2 * h), rfft_matrix(ctx, n).T)
        return (np.moveaxis(gx.reshape(g.shape[:-1] + (n,)), -1, axis),)
    x = np.moveaxis(np.asarray(xs[0], dtype=np.float64), axis, -1)
    z = dft(ctx, x.reshape(-1, n), rfft_matrix(ctx, n)).reshape(x.shape[:-1] + (2 * h,))
    return np.moveaxis(z[..., :h], -1, axis), np.moveaxis(z[..., h:], -1, axis)


def launch_irfft(o, xs, cotangents, route, ctx):
    axis, n = o.attrs.axis, o.attrs.length
    h = n // 2 + 1
    if route == "gradient":
        # routes' _irfft_backward: (g @ W^T) / n, the ignored imaginary parts +0.
        (g,) = ctx.cotangents(o, cotangents)
        g = np.moveaxis(g, axis, -1)
        z = dft(ctx, g.reshape(-1, n), irfft_matrix(ctx, n).T, _constant(ctx, n))
        z = z.reshape(g.shape[:-1] + (2 * h,))
        im = np.where(ignored(n), 0.0, z[..., h:])
        return np.moveaxis(z[..., :h], -1, axis), np.moveaxis(im, -1, axis)
    re = np.moveaxis(np.asarray(xs[0], dtype=np.float64), axis, -1)
    im = np.moveaxis(np.asarray(xs[1], dtype=np.float64), axis, -1)
    im = np.where(ignored(n), 0.0, im)                    # ignored, even NaN (a selection)
    z = np.concatenate([re, im], axis=-1).reshape(-1, 2 * h)
    y = dft(ctx, z, irfft_matrix(ctx, n), _constant(ctx, n))
    return (np.moveaxis(y.reshape(re.shape[:-1] + (n,)), -1, axis),)


def launch_scan(o, xs, cotangents, route, ctx):
    x, delta, A, B, C = (np.ascontiguousarray(v, dtype=np.float64) for v in xs)
    if route == "gradient":
        (gy,) = ctx.cotangents(o, cotangents)
        gy = np.ascontiguousarray(gy, dtype=np.float64)
        (L, D), N = x.shape, A.shape[1]
        hs, gh = np.zeros((L, D, N)), np.zeros((L, D, N))
        gx, gd, gA = np.empty((L, D)), np.empty((L, D)), np.empty((D, N))
        kern = ctx.compile("spectral.scan_grad", lambda: make_scan_grad(ctx.P))
        ctx.launch(kern, D, x, delta, A, np.ascontiguousarray(np.stack([C, B])), gy, hs, gh,
                   gx, gd, gA, ctx.rp)
        gB, gC = np.empty((L, N)), np.empty((L, N))
        kern = ctx.compile("spectral.scan_sums", lambda: make_scan_sums(ctx.P))
        ctx.launch(kern, L * N, x, delta, gy, hs, gh, gB, gC, ctx.rp)
        return gx, gd, gA, gB, gC
    h = np.zeros(A.shape)
    y = np.empty(x.shape)
    kern = ctx.compile("spectral.selective_scan", lambda: make_scan(ctx.P))
    ctx.launch(kern, x.shape[1], x, delta, A, B, C, h, y, ctx.rp)
    return (y,)


def _few(routes=None, **attrs):
    """A further instance (odd, even and degenerate lengths, other axes) in fewer formats."""
    return Instance(attrs, formats=FEW, routes=routes)


_GRADIENT = ("gradient",)

KERNELS = (
    # The gradients are the transposed DFT matrices' products (irfft's divided by n) and
    # the scan's reverse recurrence: the forward routes' primitives.
    Kernel("rfft", "dft", Contract(TRACED, TRACED, None), launch_rfft,
           tests=(Instance(), _few(shape=(5,)), _few(shape=(8, 2), axis=0), _few(shape=(1,)),
                  _few(shape=(2, 6), axis=1), _few(_GRADIENT, shape=(4, 2), axis=0))),
    Kernel("irfft", "dft", Contract(TRACED, TRACED, None), launch_irfft,
           tests=(Instance(), _few(shape=(1,), length=1), _few(shape=(5,), length=8),
                  _few(shape=(4, 2), axis=0, length=7), _few(shape=(2,), length=2),
                  _few(_GRADIENT, shape=(3, 2), axis=0, length=5))),
    Kernel("selectiveScan", "scan", Contract(TRACED, TRACED, None), launch_scan,
           tests=(Instance(), _few(length=4, channels=3, state=3),
                  _few(_GRADIENT, length=1, channels=2, state=2),
                  _few(_GRADIENT, length=3, channels=1, state=3))),
)

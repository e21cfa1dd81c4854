"""Spectral transforms and the selective scan (spec: "Spectral transforms and the selective
scan"): rfft, irfft (real and imaginary parts at two value ports) and selectiveScan.

The transforms are explicit DFT sums: one backend matmul against a twiddle matrix, so the
accumulation order and format are the numerics policy's.  Twiddles cos(2 pi m / N),
sin(2 pi m / N) are accurate to the backend's working precision:

- m is reduced exactly in integers to an octant: 2 pi m / N = q pi/2 +- phi with
  phi = (pi/2) a / N, 0 <= a <= N/2 (so 0 <= phi <= pi/4), and the quadrant q and the
  reflection are applied as exact negations and swaps of cos and sin;
- phi is one rational literal, PI * a / (2N), where PI is pi to 650 decimal digits (Machin's
  formula in Python integers, below), handed to ``xp.constant`` and so rounded once at the
  backend's precision (650 digits cover the reference backend's escalation up to 2048 bits);
- cos(phi), sin(phi) are the backend's own (phi <= pi/4: no cancellation, relative error a
  few units of the working precision).  a = 0 (angles that are multiples of pi/2) gives the
  exact 0 and +-1, so N in {1, 2, 4} is rational and runs under numerics.exact().
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import value
from ..registry import define
from ..rules import saving
from ..samples import into

SPECTRAL_TESTS = "tests/routes/test_routes_spectral.py"
PI_DIGITS = 650


def _arctan_inv(x: int, scale: int) -> int:
    """arctan(1/x) * scale, truncated, by the alternating series in integers."""
    total, term, k, sign = 0, scale // x, 1, 1
    while term:
        total += sign * (term // k)
        term //= x * x
        k, sign = k + 2, -sign
    return total


def _pi_fraction(digits: int) -> Fraction:
    # Machin: pi = 16 arctan(1/5) - 4 arctan(1/239); 20 guard digits absorb the truncations.
    scale = 10 ** (digits + 20)
    pi = 16 * _arctan_inv(5, scale) - 4 * _arctan_inv(239, scale)
    return Fraction(pi // 10 ** 20, 10 ** digits)


PI = _pi_fraction(PI_DIGITS)


def twiddles(xp, m, n: int):
    """(cos(2 pi m / n), sin(2 pi m / n)) as backend arrays for the integer array ``m``."""
    # Integer index arithmetic (exact): angle = quadrant pi/2 + (pi/2) rest / n.
    m = np.asarray(m) % n
    quadrant, rest = (4 * m) // n, (4 * m) % n
    swap = 2 * rest > n                             # reflect: (pi/2) rest/n = pi/2 - phi
    a = rest + swap * (n - 2 * rest)                # phi = (pi/2) a / n, a <= n/2
    # One cos and one sin call for every distinct nonzero a; a = 0 is exactly (1, 0).
    values = sorted(set(a.reshape(-1).tolist()) - {0})
    where = {v: i + 1 for i, v in enumerate(values)}
    pick = np.asarray([where.get(v, 0) for v in a.reshape(-1).tolist()], dtype=int)
    one, zero = xp.constant(1, (1,)), xp.constant(0, (1,))
    if values:
        phi = np.concatenate([xp.constant(PI * Fraction(v, 2 * n), (1,)) for v in values])
        cos_tab = np.concatenate([one, xp.cos(phi)])
        sin_tab = np.concatenate([zero, xp.sin(phi)])
    else:
        cos_tab, sin_tab = one, zero
    cos_phi, sin_phi = cos_tab[pick].reshape(a.shape), sin_tab[pick].reshape(a.shape)
    c = xp.where(swap, sin_phi, cos_phi)            # cos and sin of (pi/2) rest / n
    s = xp.where(swap, cos_phi, sin_phi)
    neg_c, neg_s = xp.negative(np.stack([c, s]))
    cos = xp.where(quadrant == 0, c, xp.where(quadrant == 1, neg_s,
                                              xp.where(quadrant == 2, neg_c, s)))
    sin = xp.where(quadrant == 0, s, xp.where(quadrant == 1, c,
                                              xp.where(quadrant == 2, neg_s, neg_c)))
    return cos, sin


def _last(x, axis):
    return np.moveaxis(np.asarray(x), axis, -1)


def _back(y, axis):
    return np.moveaxis(np.asarray(y), -1, axis)


# ----- rfft ------------------------------------------------------------------------------------
def _rfft_check(a):
    if len(a.shape) == 0:
        return "shape must have rank >= 1 (got rank 0)"
    if a.axis >= len(a.shape):
        return f"axis must be < rank {len(a.shape)} (got {a.axis})"
    if a.shape[a.axis] == 0:
        return f"shape[axis] must be >= 1 (got {list(a.shape)})"
    return None


def _half_shape(shape, axis, n):
    return tuple(n // 2 + 1 if i == axis else e for i, e in enumerate(shape))


def _rfft_matrix(xp, n):
    """[C, -S] of shape (n, 2m): x @ it gives (Re, Im) of the DFT, m = n // 2 + 1."""
    cos, sin = twiddles(xp, np.arange(n)[:, None] * np.arange(n // 2 + 1)[None, :], n)
    return np.concatenate([cos, xp.negative(sin)], axis=-1)


def _rfft_apply(xp, a, x):
    n = a.shape[a.axis]
    z = xp.matmul(_last(x, a.axis), _rfft_matrix(xp, n))
    m = n // 2 + 1
    return _back(z[..., :m], a.axis), _back(z[..., m:], a.axis)


def _rfft_backward(xp, a, xs, ys, gs, needs):
    n = a.shape[a.axis]
    g = np.concatenate([_last(gs[0], a.axis), _last(gs[1], a.axis)], axis=-1)
    return (_back(xp.matmul(g, np.swapaxes(_rfft_matrix(xp, n), 0, 1)), a.axis),)


def _dft_oracle(ctx, a, x):
    xm = _last(x, a.axis)
    n = xm.shape[-1]
    re = np.empty(xm.shape[:-1] + (n // 2 + 1,), dtype=object)
    im = np.empty(re.shape, dtype=object)
    for idx in np.ndindex(xm.shape[:-1]):
        for k in range(n // 2 + 1):
            re[idx + (k,)] = ctx.fsum(xm[idx + (t,)] * ctx.cospi(ctx.mpf(2 * k * t) / n)
                                      for t in range(n))
            im[idx + (k,)] = -ctx.fsum(xm[idx + (t,)] * ctx.sinpi(ctx.mpf(2 * k * t) / n)
                                       for t in range(n))
    return _back(re, a.axis), _back(im, a.axis)


def _ordinary(rng, fmt, op):
    return tuple(into(rng.uniform(-4, 4, p.shape), fmt) for p in op.inputs)


def _special(rng, fmt, op):
    """Ordinary values with zeros, infinities and NaN mixed in (the format's specials)."""
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    out = []
    for x in _ordinary(rng, fmt, op):
        hit = rng.random(x.shape) < 0.3
        out.append(into(np.where(hit, specials[rng.integers(0, 5, x.shape)], x), fmt))
    return tuple(out)


define(
    "rfft", "spectral",
    attributes=(A.shape(default=(4,)), A.nat("axis", 0, doc="the transformed axis")),
    ports=lambda a: ({"x": value(a.shape)},
                     {"re": value(_half_shape(a.shape, a.axis, a.shape[a.axis])),
                      "im": value(_half_shape(a.shape, a.axis, a.shape[a.axis]))}),
    forward=_rfft_apply,
    backward=_rfft_backward,
    jvp=lambda xp, a, xs, ys, ts: _rfft_apply(xp, a, ts[0]),
    check=_rfft_check,
    samples={"ordinary": _ordinary, "special": _special},
    oracle=_dft_oracle,
    examples={"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1}},
    notes=("rfft: Re y_k = sum_t x_t cos(2 pi k t / n), Im y_k = -sum_t x_t sin(2 pi k t / n), "
           "k = 0 .. n // 2, n = shape[axis] (torch.fft.rfft, norm 'backward'), as one matmul "
           "against the twiddle matrix (module docstring).",
           "Linear: the tangent is rfft of the tangent, the gradient the transposed matrix "
           "applied to (g_re, g_im).  Twiddles at multiples of pi/2 are exact 0 and +-1."),
    bad_attributes=(({"shape": ()}, "rfft: shape must have rank >= 1 (got rank 0)"),
                    ({"axis": 1}, "rfft: axis must be < rank 1 (got 1)"),
                    ({"shape": (0,)}, "rfft: shape[axis] must be >= 1 (got [0])")),
    certificates=("prepared",
                  convention(f"{SPECTRAL_TESTS}::test_twiddles_are_exact_at_quarter_turns",
                             "twiddles at multiples of pi/2 are exactly 0 and +-1",
                             route="forward")),
)


# ----- irfft -----------------------------------------------------------------------------------
def _irfft_check(a):
    if len(a.shape) == 0:
        return "shape must have rank >= 1 (got rank 0)"
    if a.axis >= len(a.shape):
        return f"axis must be < rank {len(a.shape)} (got {a.axis})"
    if a.length < 1:
        return "length must be >= 1 (got 0)"
    if a.shape[a.axis] != a.length // 2 + 1:
        return (f"shape[axis] must be length // 2 + 1 = {a.length // 2 + 1} "
                f"(got {a.shape[a.axis]})")
    return None


def _ignored(n):
    """Imaginary parts irfft ignores: k = 0 and, for even n, k = n / 2."""
    m = n // 2 + 1
    return (np.arange(m) == 0) | ((n % 2 == 0) & (np.arange(m) == n // 2))


def _irfft_matrix(xp, n):
    """(2m, n): rows w_k cos(2 pi k t / n), then -w_k sin(...); w_k = 2 except at the ends."""
    cos, sin = twiddles(xp, np.arange(n // 2 + 1)[:, None] * np.arange(n)[None, :], n)
    twice = ~_ignored(n)[:, None]
    two = xp.constant(2)
    doubled = xp.multiply(two, np.stack([cos, sin]))
    cos, sin = xp.where(twice, doubled[0], cos), xp.where(twice, doubled[1], sin)
    return np.concatenate([cos, xp.negative(sin)], axis=0)


def _irfft_apply(xp, a, re, im):
    n = a.length
    im = _last(im, a.axis)
    im = xp.where(_ignored(n), xp.zeros_like(im), im)          # ignored, even NaN
    z = np.concatenate([_last(re, a.axis), im], axis=-1)
    y = xp.divide(xp.matmul(z, _irfft_matrix(xp, n)), xp.constant(n))
    return _back(y, a.axis)


def _irfft_backward(xp, a, xs, ys, gs, needs):
    n, m = a.length, a.length // 2 + 1
    g = xp.divide(xp.matmul(_last(gs[0], a.axis), np.swapaxes(_irfft_matrix(xp, n), 0, 1)),
                  xp.constant(n))
    g_im = xp.where(_ignored(n), xp.zeros_like(g[..., m:]), g[..., m:])
    return _back(g[..., :m], a.axis), _back(g_im, a.axis)


def _irfft_out(a):
    return tuple(a.length if i == a.axis else e for i, e in enumerate(a.shape))


def _idft_oracle(ctx, a, re, im):
    rm, imm = _last(re, a.axis), _last(im, a.axis)
    n = a.length
    out = np.empty(rm.shape[:-1] + (n,), dtype=object)
    for idx in np.ndindex(rm.shape[:-1]):
        for t in range(n):
            terms = []
            for k in range(n):                      # the Hermitian extension X_{n-k} = conj X_k
                j = k if k <= n // 2 else n - k
                sign = 1 if k <= n // 2 else -1
                x_re = rm[idx + (j,)]
                x_im = 0 if _ignored(n)[j] else sign * imm[idx + (j,)]
                ang = ctx.mpf(2 * k * t) / n
                terms.append(x_re * ctx.cospi(ang) - x_im * ctx.sinpi(ang))
            out[idx + (t,)] = ctx.fsum(terms) / n
    return (_back(out, a.axis),)


define(
    "irfft", "spectral",
    attributes=(A.shape(default=(3,)), A.nat("axis", 0, doc="the transformed axis"),
                A.nat("length", 4, gen=(0, 8), doc="the output length n along axis; the "
                      "input holds n // 2 + 1 coefficients there")),
    ports=lambda a: ({"re": value(a.shape), "im": value(a.shape)}, {"y": value(_irfft_out(a))}),
    forward=_irfft_apply,
    backward=_irfft_backward,
    jvp=lambda xp, a, xs, ys, ts: _irfft_apply(xp, a, *ts),
    check=_irfft_check,
    samples={"ordinary": _ordinary, "special": _special},
    oracle=_idft_oracle,
    examples={"": {}, "n5": {"shape": (3,), "length": 5},
              "2x3-axis1": {"shape": (2, 3), "axis": 1, "length": 4}},
    notes=("irfft: y_t = (1/n) sum_{k<n} X_k e^(2 pi i k t / n) over the Hermitian extension "
           "of the n // 2 + 1 coefficients (re, im) (torch.fft.irfft with n = length, norm "
           "'backward'); the input must hold exactly length // 2 + 1 coefficients.",
           "The imaginary parts at k = 0 and, for even n, k = n / 2 are ignored (as cuFFT and "
           "pocketfft do): they get no gradient and a NaN there does not propagate.",
           "One matmul against the weighted twiddle matrix, then one division by n."),
    bad_attributes=(({"shape": ()}, "irfft: shape must have rank >= 1 (got rank 0)"),
                    ({"axis": 1}, "irfft: axis must be < rank 1 (got 1)"),
                    ({"length": 0, "shape": (1,)}, "irfft: length must be >= 1 (got 0)"),
                    ({"length": 6}, "irfft: shape[axis] must be length // 2 + 1 = 4 (got 3)")),
    certificates=("prepared",
                  convention(f"{SPECTRAL_TESTS}::test_irfft_ignores_the_imaginary_ends",
                             "the imaginary parts at k = 0 and k = n/2 are ignored",
                             route="forward")),
)


# ----- selectiveScan ---------------------------------------------------------------------------
def _scan_check(a):
    for name in ("length", "channels", "state"):
        if a[name] < 1:
            return f"{name} must be >= 1 (got 0)"
    return None


def _scan_ports(a):
    L, D, N = a.length, a.channels, a.state
    return ({"x": value((L, D)), "delta": value((L, D)), "A": value((D, N)), "B": value((L, N)),
             "C": value((L, N))}, {"y": value((L, D))})


def _scan_forward(xp, a, x, delta, A_, B, C):
    hs, decays, ys = [], [], []
    for t in range(a.length):
        decay = xp.exp(xp.multiply(delta[t][:, None], A_))                   # (D, N)
        drive = xp.multiply(xp.multiply(delta[t], x[t])[:, None], B[t][None, :])
        h = drive if t == 0 else xp.add(xp.multiply(decay, hs[-1]), drive)
        hs.append(h)
        decays.append(decay)
        ys.append(xp.sum(xp.multiply(C[t][None, :], h), axis=1))
    return saving(np.stack(ys), h=np.stack(hs), decay=np.stack(decays))


def _scan_jvp(xp, a, xs, ys, ts):
    x, delta, A_, B, C = xs
    tx, td, tA, tB, tC = ts
    h, decay = ys.saved["h"], ys.saved["decay"]
    out, th = [], None
    for t in range(a.length):
        s = xp.multiply(delta[t], x[t])
        ts_ = xp.add(xp.multiply(td[t], x[t]), xp.multiply(delta[t], tx[t]))
        tdrive = xp.add(xp.multiply(ts_[:, None], B[t][None, :]),
                        xp.multiply(s[:, None], tB[t][None, :]))
        if t == 0:
            th = tdrive
        else:
            tz = xp.add(xp.multiply(td[t][:, None], A_), xp.multiply(delta[t][:, None], tA))
            th = xp.add(xp.add(xp.multiply(decay[t], th),
                               xp.multiply(xp.multiply(decay[t], tz), h[t - 1])), tdrive)
        out.append(xp.sum(xp.add(xp.multiply(tC[t][None, :], h[t]),
                                 xp.multiply(C[t][None, :], th)), axis=1))
    return np.stack(out)


def _scan_backward(xp, a, xs, ys, gs, needs):
    x, delta, A_, B, C = xs
    gy = gs[0]
    h, decay = ys.saved["h"], ys.saved["decay"]
    L = a.length
    gx, gd, gB, gC = [None] * L, [None] * L, [None] * L, [None] * L
    gA_terms = []
    gh = None
    for t in reversed(range(L)):
        from_y = xp.multiply(gy[t][:, None], C[t][None, :])
        gh = from_y if gh is None else xp.add(gh, from_y)
        gC[t] = xp.sum(xp.multiply(gy[t][:, None], h[t]), axis=0)
        s = xp.multiply(delta[t], x[t])
        gB[t] = xp.sum(xp.multiply(gh, s[:, None]), axis=0)
        gs_ = xp.sum(xp.multiply(gh, B[t][None, :]), axis=1)
        gx[t] = xp.multiply(gs_, delta[t])
        gd[t] = xp.multiply(gs_, x[t])
        if t > 0:
            gz = xp.multiply(xp.multiply(gh, h[t - 1]), decay[t])             # (D, N)
            gd[t] = xp.add(gd[t], xp.sum(xp.multiply(gz, A_), axis=1))
            gA_terms.append(xp.multiply(gz, delta[t][:, None]))
            gh = xp.multiply(gh, decay[t])
    gA = xp.sum(np.stack(gA_terms), axis=0) if gA_terms else xp.zeros_like(A_)
    return np.stack(gx), np.stack(gd), gA, np.stack(gB), np.stack(gC)


def _scan_oracle(ctx, a, x, delta, A_, B, C):
    L, D, N = a.length, a.channels, a.state
    h = [[ctx.mpf(0)] * N for _ in range(D)]
    y = np.empty((L, D), dtype=object)
    for t in range(L):
        for d in range(D):
            for n in range(N):
                h[d][n] = ctx.exp(delta[t, d] * A_[d, n]) * h[d][n] + \
                    delta[t, d] * B[t, n] * x[t, d]
            y[t, d] = ctx.fsum(C[t, n] * h[d][n] for n in range(N))
    return (y,)


def _scan_sampler(rng, fmt, op):
    L, D, N = op.attrs.length, op.attrs.channels, op.attrs.state
    return (into(rng.uniform(-2, 2, (L, D)), fmt), into(rng.uniform(0.125, 1, (L, D)), fmt),
            into(rng.uniform(-2, -0.125, (D, N)), fmt), into(rng.uniform(-2, 2, (L, N)), fmt),
            into(rng.uniform(-2, 2, (L, N)), fmt))


define(
    "selectiveScan", "spectral",
    attributes=(A.nat("length", 3, gen=(0, 4), doc="the sequence length L"),
                A.nat("channels", 2, gen=(0, 3), doc="the channels D"),
                A.nat("state", 2, gen=(0, 3), doc="the state size N")),
    ports=_scan_ports,
    forward=_scan_forward,
    backward=_scan_backward,
    jvp=_scan_jvp,
    check=_scan_check,
    samples={"ordinary": _scan_sampler},
    oracle=_scan_oracle,
    examples={"": {}, "L1": {"length": 1, "channels": 1, "state": 3}},
    notes=("selectiveScan (Mamba's selective scan, one sequence): h_0 = 0, "
           "h_t[d, n] = exp(delta[t, d] A[d, n]) h_{t-1}[d, n] + delta[t, d] B[t, n] x[t, d], "
           "y[t, d] = sum_n C[t, n] h_t[d, n].  delta is used as given (apply softplus "
           "before), no skip term D x (add it with mul and add).",
           "The step t = 0 starts from h = 0 without multiplying by the decay, so exp(delta A) "
           "at t = 0 gets no gradient.  Sums over n (and, in the pullback, over d and t) are "
           "backend reductions; the recurrence is sequential in t."),
    bad_attributes=(({"length": 0}, "selectiveScan: length must be >= 1 (got 0)"),
                    ({"channels": 0}, "selectiveScan: channels must be >= 1 (got 0)"),
                    ({"state": 0}, "selectiveScan: state must be >= 1 (got 0)")),
    certificates=("prepared",
                  convention(f"{SPECTRAL_TESTS}::test_selective_scan_matches_its_recurrence",
                             "the recurrence starts from h = 0; delta is used as given",
                             route="forward")),
)

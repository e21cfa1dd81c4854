"""Shared machinery of the rounding tests: point sets and the three-way comparison
fast path (round_to) == exact path (round_exact) == MPFR oracle."""

from __future__ import annotations

import math

import numpy as np

from roundoff_coverage import formats
from mpfr_oracle import MODES7, FormatOracle

SEED = 20261130


def gap_points(fmt) -> np.ndarray:
    """Every finite value, every midpoint between neighbours and the binary64 numbers just
    either side of it, the same around the overflow threshold, and the specials."""
    v = formats.values(fmt, signed_zeros=True)
    lo, hi = v[:-1], v[1:]
    keep = hi > lo                                   # the -0/+0 pair is no gap
    mid = (lo[keep] + hi[keep]) / 2                  # exact: p <= 53 and no overflow here
    top = fmt.max_finite
    step = float(formats.ulp(top, fmt))
    beyond = np.array([top + step / 2, top + step, top + 1.5 * step, 2 * top, 1e308])
    beyond = np.concatenate([beyond, -beyond])
    centre = np.concatenate([mid, beyond[:6]])
    near = np.concatenate([np.nextafter(centre, -np.inf), np.nextafter(centre, np.inf)])
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 5e-324, -5e-324])
    return np.concatenate([v, mid, near, beyond, special])


def same(a: float, b: float) -> bool:
    """Equal as format values: both NaN, or equal with the same sign (zeros included)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def three_way(points: np.ndarray, fmt, modes=MODES7, oracle: bool = True, limit: int = 5):
    """Mismatches (up to ``limit`` per kind) between the fast path, the exact path and the
    MPFR oracle on every point in every mode."""
    fmt = formats.get(fmt)
    orc = FormatOracle(fmt) if oracle else None
    bad = []
    for mode in modes:
        fast, fflags = formats.round_to(points, fmt, mode, with_flags=True, seed=SEED)
        # Without flags round_to takes another compiled path (two passes): the same bits.
        plain = formats.round_to(points, fmt, mode, seed=SEED)
        differ = np.flatnonzero(plain.view(np.int64) != fast.view(np.int64))
        if differ.size:
            bad.append(("values!=flags path", mode, float(points[differ[0]]),
                        float(plain[differ[0]]), float(fast[differ[0]])))
        for i, x in enumerate(points.tolist()):
            ex = formats.round_exact(x, fmt, mode, seed=SEED, index=i)
            ev = ex.to_float()
            if not same(fast[i], ev) or fflags[i] != ex.flags:
                bad.append(("fast!=exact", mode, x, float(fast[i]), int(fflags[i]), ev, ex.flags))
            if orc is not None and mode != "stochastic":
                ov, of = orc.round(x, mode)
                if not same(ev, ov) or ex.flags != of:
                    bad.append(("exact!=mpfr", mode, x, ev, ex.flags, ov, of))
            if len(bad) >= limit:
                return bad
    return bad

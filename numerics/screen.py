"""The compiled screen of a function's outputs against a binary64 evaluation of its exact value.

``screen(ref, fmt, xs, t) -> Screened``: for inputs ``xs`` (float64 arrays of values of
``fmt``, one per argument) and a function's outputs ``t`` (float64 values of ``fmt``), the
signed ulp error of every output (numerics.metrics' convention, extended format included),
its class (metrics.CLASSES), whether it is the correctly rounded value, and the statistics of
the chunk -- in one compiled pass, for formats of at most 26 bits of precision.

Why a binary64 evaluation decides: the exact value f(x) is approximated by y = f64(x) with
|y - f(x)| <= rel |y|.  For libm's binary64 functions rel = 2**-40 (they are within a few
binary64 ulps, 2**-52 relative; 2**-40 leaves a margin of 4096 of them, as numerics.emulated's
screen does).  The ulp error (t - y) / ulp(y) is then within m = rel |y| / ulp(y) <= rel 2**p
of the exact one (2**-16 ulp for binary32), so an element is decided where that uncertainty
cannot change the answer: its binade, the half-ulp test of correct rounding (|e| < 0.5 - m or
> 0.5 + m), its class.  + - * / sqrt are screened exactly instead: the residual of the
binary64 operation (TwoSum; Dekker's TwoProduct for the product, the division remainder and
the square root) says whether y is the exact value, so ties (|e| = 0.5 exactly, common in
sums of small formats) are decided by the parity of the computed value.

Special values follow C99 Annex F, which glibc's binary64 functions implement exactly: a NaN
from libm is an exact NaN (domain error or NaN input), a non-finite input's result is exact.
A binary64 infinity from finite inputs is an overflow of a finite exact value for the
functions that cannot reach infinity exactly (``overflow`` 1: exp, sinh...; 2: pow with a
nonzero base) and a binary64 zero an underflow for those that cannot reach zero exactly
(``underflow``, likewise); everything the screen cannot decide -- exact zeros and infinities
from finite inputs, elements within the margin of a boundary, formats without infinities
beyond their range -- is left to the caller (``RESOLVE``), which computes it exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from roundoff_coverage import formats

from . import metrics
from .primitives import PRIMITIVES

RESOLVE = 100                       # class code: the screen cannot decide this element
FINE_BINS = 4096                    # |error| in [0, 4) ulp in steps of 1/1024 (for p99)
FINE_STEP = 1024.0
LIBM_REL = 2.0 ** -40
# Kinds of screen: a binary64 function with relative error rel, or an operation screened
# exactly through its residual.
GENERIC, ADD, SUBTRACT, MULTIPLY, DIVIDE, SQRT = 0, 1, 2, 3, 4, 5
_C = {name: i for i, name in enumerate(metrics.CLASSES)}


@dataclass(frozen=True)
class Reference:
    """A mathematical function: its primitive in numerics' backends (``name``), arity, the
    binary64 evaluation ``f64`` (numba-compilable; None for the exact kinds), the screen
    kind, and how a binary64 inf (``overflow``) or 0 (``underflow``) from finite inputs
    reads: 0 decide exactly, 1 always a finite value beyond the range (a nonzero value below
    binary64's), 2 so when the first input is nonzero."""

    name: str
    arity: int
    f64: Callable | None = None
    kind: int = GENERIC
    overflow: int = 0
    underflow: int = 0


def _u(fn):
    return numba.njit(lambda x: fn(x))


def _b(fn):
    return numba.njit(lambda x, y: fn(x, y))


@numba.njit
def _exp2(x):
    return math.pow(2.0, x)


@numba.njit
def _cbrt(x):
    r = abs(x) ** (1.0 / 3.0)
    if r != 0.0 and math.isfinite(r):
        r = r - (r * r * r - abs(x)) / (3.0 * r * r)      # one Newton step: ~1 ulp
    return math.copysign(r, x)


# The basic operations are screened exactly through their residuals; exp2 and cbrt have
# binary64 evaluations of their own (Python 3.11's math has no cbrt); every other primitive
# with a libm function is screened through it (numerics.primitives declares which, and how a
# binary64 inf or 0 from finite inputs reads).
_EXACT_KINDS = {"add": ADD, "subtract": SUBTRACT, "multiply": MULTIPLY, "divide": DIVIDE,
                "sqrt": SQRT}
_OWN64 = {"exp2": _exp2, "cbrt": _cbrt}


def _reference(p) -> Reference:
    if p.name in _EXACT_KINDS:
        return Reference(p.name, p.arity, kind=_EXACT_KINDS[p.name])
    f = _OWN64.get(p.name) or (_u if p.arity == 1 else _b)(getattr(math, p.libm))
    return Reference(p.name, p.arity, f, overflow=p.overflow, underflow=p.underflow)


REFERENCES = {p.name: _reference(p) for p in PRIMITIVES.values()
              if p.name in _EXACT_KINDS or p.name in _OWN64 or p.libm}


# ----- bit casts (numba's scalar .view() builds an array: ~10 ns; these are one instruction)

@intrinsic
def _bits(typingctx, x):
    """The int64 bit pattern of a float64."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, b):
    """The float64 of an int64 bit pattern."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


# ----- error-free transformations ------------------------------------------------------------

@numba.njit
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)                     # Knuth's TwoSum: a + b = s + e


@numba.njit
def _split(a):
    c = 134217729.0 * a                                      # Veltkamp: 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


@numba.njit
def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl  # Dekker: a b = p + e


@numba.njit
def _evaluate(kind, f, x0, x1):
    """(y, r, exact): y the binary64 value; ``exact`` 1 when y is the exact value, 0 when
    not, -1 when unknown (GENERIC, or outside the range where the residual is exact); r the
    exact residual of + and - (y + r is the exact sum), 0 otherwise."""
    if kind == ADD or kind == SUBTRACT:
        y, r = _two_sum(x0, x1 if kind == ADD else -x1)
        ok = math.isfinite(y)
        return y, (r if ok else 0.0), (1 if ok and r == 0.0 else (0 if ok else -1))
    if kind == MULTIPLY:
        y = x0 * x1
        p, e = _two_prod(x0, x1)
        ok = math.isfinite(y) and abs(y) > 2.0 ** -969   # TwoProduct exact above this
        return y, 0.0, (1 if ok and e == 0.0 else (0 if ok else -1))
    if kind == DIVIDE:
        y = x0 / x1
        ok = math.isfinite(y) and y != 0.0 and abs(x0) > 2.0 ** -969 and abs(x0) < 2.0 ** 969
        if ok:
            p, e = _two_prod(y, x1)
            return y, 0.0, (1 if p == x0 and e == 0.0 else 0)
        return y, 0.0, -1
    if kind == SQRT:
        y = math.sqrt(x0) if x0 >= 0.0 else math.nan
        ok = math.isfinite(y) and y != 0.0 and x0 > 2.0 ** -969
        if ok:
            p, e = _two_prod(y, y)
            return y, 0.0, (1 if p == x0 and e == 0.0 else 0)
        return y, 0.0, -1
    return f(x0, x1), 0.0, -1


# ----- the screen ------------------------------------------------------------------------------

def _make_screen(kind, f):
    """The screen kernel of one reference, ``kind`` and ``f`` compiled in as constants (so
    LLVM inlines f and drops the other kinds' branches)."""

    @numba.njit(nogil=True)
    def kernel(rel, overflow, underflow, x0, x1, t, p, qmin, emax, maxf, omega,
                   ieee_inf, err, code, cr, counts, hist, fine, acc):
        """One pass; per element err (NaN: not measurable), code (class or RESOLVE), cr (1
        correctly rounded, 0 not, 2 undecided, 3 correctly rounded with |err| an upper bound).  Statistics over decided elements: counts
        (per class), hist (metrics.HIST_EDGES bins), fine (FINE_BINS + 1 bins), acc = [measured,
        nan count, sum |e|, min e, max e, max |e|, argmax, not correctly rounded, max rel]."""
        n = t.size
        # yc (1 - 2 rel) falls below the power of two 2**eb under yc when yc's fraction field is
        # below about 2 rel 2**52 (1% and one unit of margin).
        near_pow2 = np.int64(2.0 * rel * 2.0 ** 52 * 1.01) + 1
        # Accumulators in locals (acc[...] updates in the loop would go through memory).
        n_meas, n_nan, s_abs, e_min, e_max, a_max, i_max, n_bad, r_max = \
            acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7], acc[8]
        for i in range(n):
            a = x0[i]
            b = x1[i]
            ti = t[i]
            fin_in = math.isfinite(a) and math.isfinite(b)
            y, r, exact = _evaluate(kind, f, a, b)
            e = math.nan
            c = 0
            k = 2
            tiny = False
            if math.isnan(y):
                if math.isnan(ti):                                 # exact NaN, computed NaN
                    e, k = 0.0, 1
                else:
                    c, k = 9, 0                                     # missed_nan
            elif math.isinf(y) and not (fin_in and (overflow == 1 or (overflow == 2 and a != 0.0))):
                if not fin_in and ti == y:
                    e, k = 0.0, 1                                   # exact inf, same inf
                else:
                    c = RESOLVE
            elif y == 0.0 and not (fin_in and (underflow == 1 or (underflow == 2 and a != 0.0))):
                if (not fin_in or exact == 1) and ti == 0.0 and \
                        (math.copysign(1.0, ti) == math.copysign(1.0, y)):
                    e, k = 0.0, 1                                   # exact zero, same zero
                else:
                    c = RESOLVE
            else:
                if y == 0.0:
                    tiny = True                                     # |exact| < 2**-1074
                if math.isnan(ti):
                    # metrics.CLASSES: a NaN for |exact| > max_finite is overflow_to_nan in
                    # every format; 2 rel covers y's error and the rounding of y (1 +- 2 rel).
                    ay = abs(y)
                    if not ieee_inf:
                        c = RESOLVE
                    elif ay > maxf and (exact == 1 or ay * (1.0 - 2.0 * rel) > maxf):
                        c, k = 2, 0                                 # overflow_to_nan
                    elif ay <= maxf and (exact == 1 or ay * (1.0 + 2.0 * rel) <= maxf):
                        c, k = 1, 0                                 # nan_from_finite
                    else:
                        c = RESOLVE
                elif (math.isinf(y) or abs(y) > maxf) and not ieee_inf:
                    c = RESOLVE                                     # beyond a range without inf
                else:
                    yc = min(abs(y), omega)                          # the extended format's clamp
                    neg = y < 0.0 or (y == 0.0 and math.copysign(1.0, y) < 0.0)
                    amb = False
                    if tiny:
                        q = qmin
                    else:
                        yb = _bits(yc)
                        eb = ((yb >> 52) & 0x7FF) - 1023             # floor(log2 yc), yc normal
                        frac = yb & 0xFFFFFFFFFFFFF
                        if exact != 1 and yc < omega and eb - p + 1 > qmin:
                            # Near a power of two the exact value may lie in the other binade:
                            # measure with the smaller ulp of the two, an upper bound of |error|
                            # (at most 2x) that decides "correctly rounded" only.
                            if frac <= near_pow2:
                                eb, amb = eb - 1, True
                            elif frac >= 0xFFFFFFFFFFFFF - near_pow2:
                                amb = True
                        q = max(min(eb, emax) - p + 1, qmin)
                    if c != RESOLVE:
                        # 1/ulp = 2**-q exactly: errors by multiplication, not division.
                        inv = _float(np.int64((1023 - q) << 52)) if -q <= 1023 \
                            else math.ldexp(1.0, -q)
                        te = ti
                        if math.isinf(ti):
                            te = math.copysign(omega, ti)
                            c = 4                                   # overflow_to_inf
                        elif ti == 0.0 and (tiny or y != 0.0):
                            c = 7 if (math.copysign(1.0, ti) < 0.0) != neg else 6
                        elif abs(ti) == maxf and yc > maxf:
                            c = 5                                   # overflow_to_max
                        yv = -yc if neg else yc
                        if tiny:
                            e = te * inv                            # the exact value is ~0
                            m = 0.0
                        elif exact == 1:
                            # y is the exact value; near a tie t is within an ulp of y, so
                            # te - y is exact (Sterbenz) and so is the error.
                            e = (te - yv) * inv
                            m = 0.0
                        elif kind == ADD or kind == SUBTRACT:
                            # The exact value is y + r: only the last operations round.
                            e = ((te - yv) - (r if yc < omega else 0.0)) * inv
                            m = 2.0 ** -50 * abs(e)
                        else:
                            e = (te - yv) * inv
                            m = (rel if kind == GENERIC else 2.0 ** -52) * yc * inv \
                                + 2.0 ** -50 * abs(e)
                        ae = abs(e)
                        if ae < 0.5 - m:
                            k = 1
                        elif amb:
                            c = RESOLVE
                        elif ae > 0.5 + m:
                            k = 0
                        elif exact == 1 and ae == 0.5:
                            k = 1 if (te * inv) % 2.0 == 0.0 else 0  # a tie: to even
                        else:
                            c = RESOLVE
                        if c != RESOLVE and yc != 0.0 and abs(te - yv) > r_max * yc:
                            r_max = abs(te - yv) / yc
                        if amb and k == 1:
                            k = 3                                   # decided, |e| an upper bound
            err[i] = e
            code[i] = c
            cr[i] = k
            if c == RESOLVE:
                continue
            counts[c] += 1
            if k == 0:
                n_bad += 1.0
            if math.isnan(e):
                n_nan += 1.0
                continue
            ae = abs(e)
            n_meas += 1.0
            s_abs += ae
            if e < e_min:
                e_min = e
            if e > e_max:
                e_max = e
            if ae > a_max:
                a_max = ae
                i_max = i
            if ae < 2.0 ** -10:
                hist[0] += 1
            else:                                                   # [2**k, 2**(k+1)): k + 11
                # ae >= 2**-10: biased exponent >= 1013, so the bin is >= 1; inf's is 2047.
                hist[min(((_bits(ae) >> 52) & 0x7FF) - 1012, hist.size - 1)] += 1
            # Compare before converting: int() of a float beyond 2**63 (or of inf) is
            # undefined in LLVM (-2**63 on x86), an index far below the array.
            fine[int(ae * FINE_STEP) if ae < FINE_BINS / FINE_STEP else FINE_BINS] += 1
        acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7], acc[8] = \
            n_meas, n_nan, s_abs, e_min, e_max, a_max, i_max, n_bad, r_max
    return kernel


@numba.njit(nogil=True)
def _select(err, cr, margin, k, keep):
    """The candidates for the largest |error|: elements whose upper bound |e| + margin
    reaches the largest lower bound (|e| - margin; |e|/2 - margin where cr == 3, near a
    power of two).  Up to k of them, the largest first, into ``keep``; returns (count kept,
    lower bound, largest upper bound among those not kept, -inf if none)."""
    lower = -np.inf
    for i in range(err.size):
        a = abs(err[i])
        if a == a:                                       # not NaN
            lo = (a * 0.5 if cr[i] == 3 else a) - margin
            if lo > lower:
                lower = lo
    # A min-heap of (upper, index) of size k: the k largest uppers.
    heap_v = np.empty(k)
    heap_i = np.empty(k, dtype=np.int64)
    n = 0
    dropped = -np.inf
    for i in range(err.size):
        a = abs(err[i])
        if not a == a:
            continue
        up = a + margin
        if up < lower:
            continue
        if n < k:
            j = n
            n += 1
            while j > 0 and heap_v[(j - 1) // 2] > up:     # sift up
                heap_v[j], heap_i[j] = heap_v[(j - 1) // 2], heap_i[(j - 1) // 2]
                j = (j - 1) // 2
            heap_v[j], heap_i[j] = up, i
        elif up > heap_v[0]:
            if heap_v[0] > dropped:
                dropped = heap_v[0]
            j = 0                                          # replace the root, sift down
            while True:
                c = 2 * j + 1
                if c >= k:
                    break
                if c + 1 < k and heap_v[c + 1] < heap_v[c]:
                    c += 1
                if heap_v[c] >= up:
                    break
                heap_v[j], heap_i[j] = heap_v[c], heap_i[c]
                j = c
            heap_v[j], heap_i[j] = up, i
        elif up > dropped:
            dropped = up
    keep[:n] = heap_i[:n]
    return n, lower, dropped


@numba.njit
def _no_f(x, y):
    return math.nan


_KERNELS = {}


def _kernel(ref: Reference):
    """The compiled screen of ``ref`` (f64 wrapped to two arguments: the screen calls
    f(x0, x1)), compiled on first use."""
    if ref.name not in _KERNELS:
        if ref.f64 is None:
            f = _no_f
        elif ref.arity == 1:
            g = ref.f64
            f = numba.njit(lambda x, y: g(x))
        else:
            f = ref.f64
        _KERNELS[ref.name] = _make_screen(ref.kind, f)
    return _KERNELS[ref.name]


class Screened(NamedTuple):
    err: np.ndarray            # float64 signed ulp errors (NaN: not measurable or RESOLVE)
    code: np.ndarray           # int16 class codes (metrics.CLASSES index) or RESOLVE
    cr: np.ndarray             # int8: 1 correctly rounded, 0 not, 2 undecided, 3 correctly
    #                            rounded near a power of two: |err| is an upper bound (<= 2x)
    counts: np.ndarray         # per class, decided elements
    hist: np.ndarray           # metrics.HIST_EDGES bins
    fine: np.ndarray           # FINE_BINS steps of 1/1024 ulp, then the rest
    acc: np.ndarray            # see _screen
    margin: float              # the largest uncertainty of a decided error, in ulps
    cands: np.ndarray          # candidates for the largest |error| (indices; _select)
    lower: float               # the largest lower bound of a decided |error|
    dropped: float             # the largest upper bound of a candidate not kept (or -inf)


def screenable(fmt) -> bool:
    """Whether the binary64 screen resolves ``fmt`` (precision <= 26, within binary64)."""
    fmt = formats.get(fmt)
    return fmt.fits_binary64 and fmt.precision <= 26


def screen(ref: Reference, fmt, xs, t, candidates: int = 64, scratch=None) -> Screened:
    """Screen outputs ``t`` of a function of ``ref`` on inputs ``xs`` (module docstring),
    keeping up to ``candidates`` candidates for the largest error.  ``scratch``: a dict
    whose arrays are reused from call to call (fresh 32 MB arrays cost page faults that
    take longer than the screen itself)."""
    fmt = formats.get(fmt)
    if not screenable(fmt):
        raise ValueError(f"screen: {fmt.label} has more than 26 bits of precision or lies "
                         f"beyond binary64: measure it exactly")
    x0 = np.ascontiguousarray(xs[0], dtype=np.float64).reshape(-1)
    x1 = np.ascontiguousarray(xs[1], dtype=np.float64).reshape(-1) if ref.arity == 2 else x0
    t = np.ascontiguousarray(t, dtype=np.float64).reshape(-1)
    n = t.size
    scratch = {} if scratch is None else scratch
    if scratch.get("err", np.empty(0)).size < n:
        scratch.update(err=np.empty(n), code=np.empty(n, dtype=np.int16),
                       cr=np.empty(n, dtype=np.int8))
    err, code, cr = (scratch[k][:n] for k in ("err", "code", "cr"))
    counts = np.zeros(len(metrics.CLASSES), dtype=np.int64)
    hist = np.zeros(len(metrics.HIST_EDGES), dtype=np.int64)
    fine = np.zeros(FINE_BINS + 1, dtype=np.int64)
    acc = np.array([0.0, 0.0, 0.0, np.inf, -np.inf, -1.0, -1.0, 0.0, 0.0])
    rel = LIBM_REL if ref.kind == GENERIC else 2.0 ** -52
    omega = math.ldexp(float(fmt.top_significand + 1), fmt.emax - fmt.precision + 1)
    ieee_inf = fmt.has_inf and not fmt.saturate
    _kernel(ref)(rel, ref.overflow, ref.underflow, x0, x1, t,
            fmt.precision, fmt.qmin, fmt.emax, float(fmt.max_finite), omega, ieee_inf,
            err, code, cr, counts, hist, fine, acc)
    margin = (rel if ref.kind == GENERIC else 2.0 ** -50) * 2.0 ** fmt.precision
    keep = np.empty(candidates, dtype=np.int64)
    m, lower, dropped = _select(err, cr, margin, candidates, keep)
    return Screened(err, code, cr, counts, hist, fine, acc, margin, keep[:m], lower, dropped)

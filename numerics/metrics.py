"""Error metrics of computed format values against exact values, elementwise, for one format.

Contract: ``ulp_error``, ``relative_error``, ``absolute_error``, ``error_bits`` (float64) and
``classify`` (int8 codes into ``CLASSES``) take ``computed`` -- a float64 array of values of
``fmt`` (or an object array of exact numbers for formats wider than binary64) -- and ``exact``
-- a float64 array, or an object array of mpmath mpf, gmpy2 mpfr/mpq/mpz, Fraction or int --
broadcast them together and return one number per element.  ``measure`` gives them all from
one parse; ``summary`` / ``merge_summaries`` reduce ulp errors to JSON-ready statistics;
``clamp_exact`` brings exact mpf values of any exponent into the range they are read in.

Exactness.  Both arguments are read exactly.  On the float64 path the difference is formed
after scaling both values by the exact power of two 1/ulp, so the ulp error is the correctly
rounded float64 of the true ratio (unless it leaves binary64's range); on the object path (any
object argument) everything is an exact rational (gmpy2 mpq) until one correctly rounded
conversion at the end.  An error of 0.5 - 2**-47 ulp is never reported as 0.5.

Convention for special values ("the extended format").  A format is extended by one value
past its range, Omega = max_finite + ulp(max_finite) (2**(emax+1) for IEEE formats, 480 for
float8_e4m3fn): the value an overflowing rounding to nearest produces before it is encoded.
Then, elementwise:

1. exact NaN: error 0 when computed is NaN, else NaN (class ``missed_nan``).
2. exact +-inf: error 0 when computed is the format's image of it -- the same-signed inf,
   the NaN of a format whose overflow gives NaN (fn, fnuz), +-max_finite of a saturating
   format (finite encoding or ``saturate``) -- else NaN.
3. exact finite: computed +-inf stands for +-Omega; in a format whose overflow gives NaN, a
   computed NaN where |exact| > max_finite stands for Omega with the exact value's sign; any
   other computed NaN gives a NaN error.  The exact value is clamped into [-Omega, Omega]
   ([-max_finite, max_finite] for saturating formats, whose overflow is max_finite by
   definition), and ulp(x) = 2**max(min(e, emax) - p + 1, qmin) for 2**e <= |x| < 2**(e+1)
   (ulp(0) = 2**qmin): the usual ulp, whose exponent stops at the top binade.

With this convention "correctly rounded to nearest" is |ulp error| <= 0.5 and "faithful" is
|ulp error| < 1 across the overflow threshold as well: exact = max_finite + 0.1 ulp computed
as inf is an error of 0.9 ulp, computed as max_finite one of -0.1 ulp.  Relative and absolute
errors use the same extended values; the relative error against an exact zero is 0 for a
computed zero and +-inf otherwise.  NaN errors mean "not measurable": ``classify`` says why.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import gmpy2
import numpy as np
from mpmath import libmp
from mpmath.libmp import finf, fnan, fninf, fzero

from roundoff_coverage import formats

# Kinds of a parsed number.
FINITE, ZERO, INF, NAN = 0, 1, 2, 3

CLASSES = (
    "ok",                 # nothing exceptional (NaN/NaN, inf/same inf, finite/finite in range)
    "nan_from_finite",    # computed NaN, exact finite within the range
    "overflow_to_nan",    # computed NaN, |exact| > max_finite (how fn/fnuz formats overflow)
    "nan_from_inf",       # computed NaN, exact +-inf (the image of inf in fn/fnuz formats)
    "overflow_to_inf",    # computed +-inf, exact finite (correct or spurious: see the error)
    "overflow_to_max",    # |computed| = max_finite, |exact| > max_finite or exact +-inf
    "underflow_to_zero",  # computed zero, exact nonzero finite of the same sign
    "wrong_zero_sign",    # computed zero whose sign differs from a signed exact zero/nonzero
    "inf_sign",           # computed inf, exact inf of the other sign
    "missed_nan",         # computed not NaN, exact NaN
    "missed_inf",         # computed finite (not the saturated image), exact +-inf
)
_CODE = {name: np.int8(i) for i, name in enumerate(CLASSES)}

# Histogram of |error| in ulps: bin i is [EDGES[i], EDGES[i+1]), the last is [2**20, inf].
# Fixed edges, so histograms of different runs line up and add.
HIST_EDGES = (0.0,) + tuple(2.0 ** k for k in range(-10, 21))


# ----- reading numbers exactly ----------------------------------------------------------

def read_exact(v):
    """(kind, negative, sign_known, value) of one number read exactly: ``value`` is a signed
    gmpy2 mpq for finite numbers (0 for zeros) and None for inf and NaN.  ``sign_known`` is
    False for zeros that carry no sign (int, Fraction, mpmath mpf, which has no -0)."""
    mpf = getattr(v, "_mpf_", None)
    if mpf is not None:                                   # mpmath, any context
        if mpf == fnan:
            return NAN, False, False, None
        if mpf == finf or mpf == fninf:
            return INF, mpf == fninf, True, None
        if mpf == fzero:
            return ZERO, False, False, _Q0
        sign, man, exp, _ = mpf                            # (-1)**sign * man * 2**exp
        val = gmpy2.mpq(man << exp, 1) if exp >= 0 else gmpy2.mpq(man, gmpy2.mpz(1) << -exp)
        return FINITE, bool(sign), True, -val if sign else val
    if isinstance(v, np.integer):
        v = int(v)
    real = formats.read_real(v)
    neg = bool(real.sign)
    if real.kind == "nan":
        return NAN, False, False, None
    if real.kind == "inf":
        return INF, neg, True, None
    if real.kind == "zero":
        signed = isinstance(v, (float, np.floating)) or type(v).__name__ == "mpfr"
        return ZERO, neg, signed, _Q0
    val = gmpy2.mpq(real.n, real.d)
    return FINITE, neg, True, -val if neg else val


class _Side:
    """One parsed argument: kind (int8), neg and sign_known (bool), value (float64 array, or
    object array of mpq when ``exact``; 0 where the kind is inf or NaN)."""

    def __init__(self, kind, neg, signed, value, exact):
        self.kind, self.neg, self.signed, self.value, self.exact = kind, neg, signed, value, exact

    @classmethod
    def parse(cls, a):
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.dtype.itemsize <= 8:
            v = a.astype(np.float64)
            kind = np.full(v.shape, FINITE, np.int8)
            kind[v == 0] = ZERO
            kind[np.isinf(v)] = INF
            kind[np.isnan(v)] = NAN
            value = np.where(kind <= ZERO, v, 0.0)
            return cls(kind, np.signbit(v), np.ones(v.shape, bool), value, False)
        if a.dtype.kind not in "biuO":
            raise TypeError(f"metrics: cannot read a {a.dtype} array exactly; give float64 or "
                            f"an object array of exact numbers")
        if a.dtype.kind == "b":
            raise TypeError("metrics: a bool array is not an array of numbers")
        kind = np.empty(a.shape, np.int8)
        neg, signed = np.empty(a.shape, bool), np.empty(a.shape, bool)
        value = np.empty(a.shape, object)
        for idx, v in np.ndenumerate(a):
            k, n, s, val = read_exact(v)
            kind[idx], neg[idx], signed[idx] = k, n, s
            value[idx] = _Q0 if val is None else val
        return cls(kind, neg, signed, value, True)

    def broadcast(self, shape):
        b = [np.broadcast_to(a, shape) for a in (self.kind, self.neg, self.signed, self.value)]
        return _Side(*b, self.exact)

    def as_exact(self):
        if self.exact:
            return self
        value = np.empty(self.value.shape, object)
        for idx, v in np.ndenumerate(self.value):
            value[idx] = gmpy2.mpq(float(v))
        return _Side(self.kind, self.neg, self.signed, value, True)


def _floor_log2(x) -> int:
    """floor(log2(x)) for a positive rational (mpq or Fraction)."""
    n, d = x.numerator, x.denominator
    e = n.bit_length() - d.bit_length()
    if (n << -e if e < 0 else n) < (d << e if e > 0 else d):
        e -= 1
    return e


def _to_float(x) -> float:
    """The correctly rounded float64 of a rational (CPython's int true division rounds
    correctly, subnormals included); +-inf past binary64's range."""
    try:
        return int(x.numerator) / int(x.denominator)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


# ----- the pair of (computed, exact) under the extended-format convention ----------------

class _Pair:
    """Parsed, broadcast arguments and the masks of the convention in the module doc."""

    def __init__(self, computed, exact, fmt):
        self.fmt = fmt = formats.get(fmt)
        c, x = _Side.parse(computed), _Side.parse(exact)
        self.shape = np.broadcast_shapes(c.kind.shape, x.kind.shape)
        c, x = c.broadcast(self.shape), x.broadcast(self.shape)
        if c.exact or x.exact:
            c, x = c.as_exact(), x.as_exact()
        self.c, self.x, self.exact = c, x, c.exact
        self.saturating = fmt.saturate or fmt.encoding == "finite"
        self.overflow_nan = not self.saturating and not fmt.has_inf and fmt.has_nan
        # Omega = (top significand + 1) * 2**(emax - p + 1), one ulp past max_finite.
        self.omega_m, self.omega_q = fmt.top_significand + 1, fmt.emax - fmt.precision + 1
        self.omega = _mpq(Fraction(self.omega_m) * Fraction(2) ** self.omega_q)
        self.clamp = _mpq(fmt.max_finite_exact) if self.saturating else self.omega
        xfin = x.kind <= ZERO
        if self.exact:
            top = _mpq(fmt.max_finite_exact)
            self.beyond = xfin & _objmap(lambda v: abs(v) > top, x.value, bool)
            self.c_max = (c.kind == FINITE) & _objmap(lambda v: abs(v) == top, c.value, bool)
        else:
            self.beyond = xfin & (np.abs(x.value) > fmt.max_finite)
            self.c_max = (c.kind == FINITE) & (np.abs(c.value) == fmt.max_finite)
        same = c.neg == x.neg
        image = ((c.kind == INF) & same) | ((c.kind == NAN) & self.overflow_nan) | \
            (self.c_max & same & self.saturating)
        self.zero_err = ((x.kind == NAN) & (c.kind == NAN)) | ((x.kind == INF) & image)
        self.c_omega = (c.kind == INF) | ((c.kind == NAN) & self.overflow_nan & self.beyond)
        self.measurable = xfin & ((c.kind <= ZERO) | self.c_omega)

    def errors(self, what):
        """float64 errors of kind ``what`` (``ulp``, ``rel``, ``abs``) under the convention."""
        out = np.full(self.shape, np.nan)
        out[self.zero_err] = 0.0
        m = self.measurable
        if m.any():
            out[m] = (self._exact_errors if self.exact else self._float_errors)(m, what)
        return out

    def _omega_sign(self, m):
        # An inf result carries its sign; a NaN standing for overflow takes the exact sign.
        return np.where(self.c.kind[m] == INF, self.c.neg[m], self.x.neg[m])

    def _float_errors(self, m, what):
        fmt, c, x = self.fmt, self.c, self.x
        xv = x.value[m]
        clamp = _to_float(self.clamp)
        if math.isfinite(clamp):
            xv = np.where(np.abs(xv) > clamp, np.copysign(clamp, xv), xv)
        ax = np.abs(xv)
        e = np.minimum(np.frexp(ax)[1].astype(np.int64) - 1, fmt.emax)
        q = np.where(ax == 0, fmt.qmin, np.maximum(e - fmt.precision + 1, fmt.qmin))
        q32 = q.astype(np.int32)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            # x * 2**-q is exact (|x| 2**-q < 2**p); c * 2**-q is exact unless it leaves
            # binary64's range, where the error itself is out of range.  One rounding in d.
            sx = np.ldexp(xv, -q32)
            omega = np.ldexp(float(self.omega_m), (self.omega_q - q).astype(np.int32))
            sc = np.where(self.c_omega[m], np.where(self._omega_sign(m), -omega, omega),
                          np.ldexp(c.value[m], -q32))
            d = sc - sx + 0.0                   # + 0.0: an exact match is +0, never -0
            if what == "ulp":
                return d
            if what == "abs":
                return np.ldexp(d, q32)
            rel = d / np.where(sx == 0, 1.0, sx)
            return np.where(sx == 0, np.where(sc == 0, 0.0, np.copysign(np.inf, sc)), rel)

    def _exact_errors(self, m, what):
        fmt = self.fmt
        cv, xv = self.c.value[m], self.x.value[m]
        omega_neg = self._omega_sign(m)
        c_omega = self.c_omega[m]
        out = np.empty(cv.shape, np.float64)
        for i in range(cv.size):
            x = max(-self.clamp, min(self.clamp, xv[i]))
            c = (-self.omega if omega_neg[i] else self.omega) if c_omega[i] else cv[i]
            d = c - x
            if what == "abs":
                out[i] = _to_float(d)
            elif what == "rel":
                out[i] = _to_float(d / x) if x else (0.0 if d == 0 else math.copysign(math.inf, d))
            else:
                if x == 0:
                    q = fmt.qmin
                else:
                    q = max(min(_floor_log2(abs(x)), fmt.emax) - fmt.precision + 1, fmt.qmin)
                out[i] = _to_float(d * (1 << -q) if q <= 0 else d / (1 << q))
        return out

    def bits(self):
        """log2(1 + |ord(computed) - ord(RN(exact))|) under the convention (see error_bits)."""
        fmt = self.fmt
        if not fmt.fits_binary64:
            raise ValueError(f"error_bits: {fmt.label} values do not fit binary64; ordinals "
                             f"are available for formats that do")
        out = np.full(self.shape, np.nan)
        out[self.zero_err] = 0.0
        m = self.measurable
        if not m.any():
            return out
        top = int(formats.ordinal(np.array([fmt.max_finite]), fmt)[0])
        c_omega, omega_neg = self.c_omega[m], self._omega_sign(m)
        cv = self.c.value[m]
        if self.exact:
            cv = np.array([float(v) for v in cv], dtype=np.float64).reshape(cv.shape)
            rn = np.array([formats.round_exact(max(-self.clamp, min(self.clamp, v)), fmt)
                           .to_float() for v in self.x.value[m]], dtype=np.float64)
        else:
            xv = self.x.value[m]
            clamp = _to_float(self.clamp)
            if math.isfinite(clamp):
                xv = np.where(np.abs(xv) > clamp, np.copysign(clamp, xv), xv)
            rn = formats.round_to(xv, fmt, "nearest_even")
        # The extended format's ordinals: +-Omega (inf, or the overflow NaN of fn/fnuz) is
        # one past max_finite, as the bit pattern of inf is in IEEE formats.
        oc = np.where(c_omega, np.where(omega_neg, -(top + 1), top + 1),
                      formats.ordinal(np.where(c_omega, 0.0, cv), fmt))
        rn_out = ~np.isfinite(rn)
        ox = np.where(rn_out, np.where(self.x.neg[m], -(top + 1), top + 1),
                      formats.ordinal(np.where(rn_out, 0.0, rn), fmt))
        # |oc - ox| without int64 overflow (binary64 ordinals reach 2**63 - 2**52).
        same = (oc >= 0) == (ox >= 0)
        diff = np.where(same, np.abs(oc - np.where(same, ox, 0)).astype(np.uint64),
                        np.abs(oc).astype(np.uint64) + np.abs(ox).astype(np.uint64))
        out[m] = np.log2(1.0 + diff.astype(np.float64))
        return out

    def classify(self):
        """int8 codes into CLASSES; see the comments there (first matching rule wins)."""
        c, x, fmt = self.c, self.x, self.fmt
        codes = np.full(self.shape, _CODE["ok"], np.int8)
        ck, xk = c.kind, x.kind
        xfin = xk <= ZERO
        same = c.neg == x.neg
        # Zero signs are compared only where both are known and the format has -0 (fnuz
        # has one zero, so a negative exact value underflows to +0 correctly).
        sign_wrong = ~same & c.signed & x.signed & fmt.has_negative_zero
        rules = [
            ((xk == NAN) & (ck != NAN), "missed_nan"),
            ((xk == INF) & (ck == INF) & ~same, "inf_sign"),
            ((xk == INF) & (ck == NAN), "nan_from_inf"),
            ((xk == INF) & self.c_max & same, "overflow_to_max"),
            ((xk == INF) & (ck <= ZERO), "missed_inf"),
            (xfin & (ck == NAN) & self.beyond, "overflow_to_nan"),
            (xfin & (ck == NAN), "nan_from_finite"),
            (xfin & (ck == INF), "overflow_to_inf"),
            (xfin & (ck == ZERO) & sign_wrong, "wrong_zero_sign"),
            ((xk == FINITE) & (ck == ZERO), "underflow_to_zero"),
            (self.beyond & self.c_max, "overflow_to_max"),
        ]
        done = np.zeros(self.shape, bool)
        for mask, name in rules:
            hit = mask & ~done
            codes[hit] = _CODE[name]
            done |= hit
        return codes


_Q0 = gmpy2.mpq(0)


def _mpq(x: Fraction):
    return gmpy2.mpq(x.numerator, x.denominator)


def _objmap(f, a, dtype):
    out = np.empty(a.shape, dtype)
    for idx, v in np.ndenumerate(a):
        out[idx] = f(v)
    return out


# ----- public metrics --------------------------------------------------------------------

def ulp_error(computed, exact, fmt) -> np.ndarray:
    """Signed (computed - exact) / ulp(exact) in ulps of ``fmt`` at the exact value, float64;
    special values follow the module doc (0 or NaN; ``classify`` explains)."""
    return _Pair(computed, exact, fmt).errors("ulp")


def relative_error(computed, exact, fmt) -> np.ndarray:
    """Signed (computed - exact) / exact, float64 (within two binary64 roundings on the
    float64 path, correctly rounded on the object path); exact zero: 0 or +-inf."""
    return _Pair(computed, exact, fmt).errors("rel")


def absolute_error(computed, exact, fmt) -> np.ndarray:
    """Signed computed - exact, float64 (correctly rounded unless it leaves binary64's
    normal range)."""
    return _Pair(computed, exact, fmt).errors("abs")


def error_bits(computed, exact, fmt) -> np.ndarray:
    """Bits of error (Herbie's): log2(1 + |ord(computed) - ord(RN(exact))|), float64.

    ord is the format's ordinal (consecutive values differ by 1, both zeros are 0) and RN the
    rounding of the exact value to nearest-even into ``fmt``: 0 bits for the correctly
    rounded result, 1 bit for a neighbour of it, k bits for about 2**k - 1 values away.
    Special values as in the module doc: +-inf (and the overflow NaN of fn/fnuz formats)
    count as one value past +-max_finite; pairs whose ulp error is NaN give NaN (Herbie
    gives the format's width there: ``np.where(np.isnan(b), fmt.bits, b)``).  Formats whose
    values fit binary64 only.
    """
    return _Pair(computed, exact, fmt).bits()


def classify(computed, exact, fmt) -> np.ndarray:
    """int8 code per element, an index into ``CLASSES`` (0 is ``ok``).

    A class names the kind of outcome, not a verdict: ``overflow_to_inf`` is the correct
    result of rounding to nearest past the overflow threshold and ``overflow_to_max`` the
    correct one of rounding toward zero; the ulp error says whether it is right.  Zero signs:
    a computed zero whose sign differs from the exact value's sign (a signed exact zero, or
    a nonzero value) is ``wrong_zero_sign`` (it takes precedence over ``underflow_to_zero``);
    exact zeros without a sign (int, Fraction, mpmath) and formats with one zero (fnuz) never
    give it.
    """
    return _Pair(computed, exact, fmt).classify()


def summarize_classes(codes) -> dict:
    """{class name: count} over every name of ``CLASSES``, in that order (plain ints)."""
    counts = np.bincount(np.asarray(codes, dtype=np.int64).reshape(-1), minlength=len(CLASSES))
    if counts.size > len(CLASSES):
        raise ValueError(f"summarize_classes: codes must lie in [0, {len(CLASSES)})")
    return {name: int(n) for name, n in zip(CLASSES, counts)}


class Measured(NamedTuple):
    """Every metric of one (computed, exact) pair of arrays."""

    ulp: np.ndarray
    rel: np.ndarray
    abs: np.ndarray
    bits: np.ndarray | None
    codes: np.ndarray


# Every measure is elementwise, so a long flat pair is measured this many elements at a
# time: the parse and each kind of error make some twenty temporary arrays, about 150
# bytes an element, which for a model's gradient of 38 M elements would be 5.7 GB at once.
MEASURE_BLOCK = 1 << 20


def measure(computed, exact, fmt, absolute=True) -> Measured:
    """ulp, relative and absolute errors (``absolute`` False: None, not computed), bits of
    error (None for formats beyond binary64) and class codes, from one parse of the
    arguments; two flat arrays of the same length a block of MEASURE_BLOCK elements at a
    time (the same numbers, less memory)."""
    n = np.shape(computed)[0] if np.ndim(computed) == 1 else 0
    if n <= MEASURE_BLOCK or not (isinstance(computed, np.ndarray) and
                                  isinstance(exact, np.ndarray) and exact.shape == (n,)):
        return _measured(computed, exact, fmt, absolute)
    out = None
    for i in range(0, n, MEASURE_BLOCK):
        part = _measured(computed[i:i + MEASURE_BLOCK], exact[i:i + MEASURE_BLOCK], fmt,
                         absolute)
        if out is None:
            out = Measured(*(None if a is None else np.empty(n, a.dtype) for a in part))
        for whole, a in zip(out, part):
            if a is not None:
                whole[i:i + a.size] = a
    return out


def _measured(computed, exact, fmt, absolute) -> Measured:
    """measure of one block."""
    pair = _Pair(computed, exact, fmt)
    return Measured(pair.errors("ulp"), pair.errors("rel"),
                    pair.errors("abs") if absolute else None,
                    pair.bits() if pair.fmt.fits_binary64 else None, pair.classify())


# ----- summaries ---------------------------------------------------------------------------

def summary(errors, unit: str = "ulp") -> dict:
    """JSON-ready statistics of signed errors (NaN excluded and counted in ``nan_count``).

    Keys: ``unit``; ``count`` (non-NaN errors), ``nan_count``, ``zero_count`` (errors exactly
    0); ``max``, ``mean``, ``p99`` of |error| (p99 as numpy's linear-interpolation
    percentile); ``max_signed`` and ``min_signed``; ``histogram`` = {"edges": HIST_EDGES,
    "counts": ...} where bin i counts |error| in [edges[i], edges[i+1]) and the last bin
    [edges[-1], inf].  Statistics of no errors are None.  Plain Python floats and ints.
    """
    # Few temporaries of the errors' length (a model's gradient can have tens of millions):
    # no copy without NaN, the histogram a block at a time, the percentile in place.
    e = np.asarray(errors, dtype=np.float64).reshape(-1)
    nan = np.isnan(e)
    nans = int(nan.sum())
    e = e[~nan] if nans else e
    del nan
    a = np.abs(e)
    edges, counts = np.array(HIST_EDGES), np.zeros(len(HIST_EDGES), dtype=np.int64)
    for i in range(0, a.size, MEASURE_BLOCK):
        bins = np.searchsorted(edges, a[i:i + MEASURE_BLOCK], side="right") - 1
        counts += np.bincount(bins, minlength=len(HIST_EDGES))
    out = {"unit": unit, "count": int(e.size), "nan_count": nans,
           "zero_count": int(a.size - np.count_nonzero(a))}
    if e.size:
        top, mean = float(a.max()), float(a.mean())
        out.update(max=top, mean=mean, p99=_p99(a), max_signed=float(e.max()),
                   min_signed=float(e.min()))
    else:
        out.update(max=None, mean=None, p99=None, max_signed=None, min_signed=None)
    out["histogram"] = {"edges": list(HIST_EDGES), "counts": [int(n) for n in counts]}
    return out


def _p99(a) -> float:
    """numpy's linear-interpolation 99th percentile, also where it meets inf (numpy gives NaN
    there: inf - inf inside its interpolation); ``a`` is reordered in place (no copy)."""
    if np.isfinite(a).all():
        return float(np.percentile(a, 99, overwrite_input=True))
    s = a
    s.sort()
    h = 0.99 * (s.size - 1)
    lo = int(math.floor(h))
    v_lo, v_hi = s[lo], s[min(lo + 1, s.size - 1)]
    if h == lo or v_lo == v_hi:
        return float(v_lo)
    return math.inf if math.isinf(v_hi) else float(v_lo + (h - lo) * (v_hi - v_lo))


def merge_summaries(parts) -> dict:
    """One summary from summaries of disjoint sets of errors (same unit and edges): counts
    and histograms add, max/min combine, means weight by count; ``p99`` becomes the largest
    p99 of the parts (a conservative estimate: percentiles do not merge exactly)."""
    parts = list(parts)
    if not parts:
        return summary([])
    units = {p["unit"] for p in parts}
    if len(units) != 1 or any(p["histogram"]["edges"] != list(HIST_EDGES) for p in parts):
        raise ValueError("merge_summaries: summaries differ in unit or histogram edges")
    full = [p for p in parts if p["count"]]
    out = {"unit": parts[0]["unit"]}
    for key in ("count", "nan_count", "zero_count"):
        out[key] = sum(p[key] for p in parts)
    if full:
        out.update(max=max(p["max"] for p in full), p99=max(p["p99"] for p in full),
                   mean=sum(p["mean"] * p["count"] for p in full) / out["count"],
                   max_signed=max(p["max_signed"] for p in full),
                   min_signed=min(p["min_signed"] for p in full))
    else:
        out.update(max=None, mean=None, p99=None, max_signed=None, min_signed=None)
    out["histogram"] = {"edges": list(HIST_EDGES),
                        "counts": [sum(c) for c in zip(*(p["histogram"]["counts"]
                                                         for p in parts))]}
    return out


def clamp_exact(e, fmt):
    """Exact values with |x| >= 2**(emax+2) replaced by +-2**(emax+2) (metrics clamps them
    to the extended format's +-Omega anyway) and 0 < |x| < 2**(qmin-64) by +-2**(qmin-64):
    their ulp errors, x / 2**qmin away from the computed value's, move by < 2**-64."""
    top, tiny = fmt.emax + 2, fmt.qmin - 64
    flat = np.asarray(e, dtype=object).reshape(-1).copy()
    for i, v in enumerate(flat):
        m = getattr(v, "_mpf_", None)
        if m is None or not m[1]:                      # not mpf, or zero/inf/NaN
            continue
        sign, man, exp, bc = m
        mag = exp + bc - 1                             # floor(log2 |v|)
        if mag >= top or mag < tiny:
            flat[i] = type(v)(libmp.from_man_exp(-1 if sign else 1, top if mag >= top else tiny))
    return flat.reshape(np.shape(e))

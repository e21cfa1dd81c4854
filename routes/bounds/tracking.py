"""``TrackingBackend``: a route's rule run on a box piece, enclosing at once the exact value,
the computed value and the error between them at EVERY input point of the piece.

Numbers are numpy structured arrays of float64 fields (``DTYPE``), so data movement is plain
numpy as the rules expect.  Three intervals per element (and a fourth, R, below), for
every input point x of the piece:

- E = [elo, ehi] holds the exact value e(x): the rule in real arithmetic, as
  numerics.reference computes it;
- C = [clo, chi] holds the computed value c(x): what numerics.emulated(fmt, mode, policy)
  computes at x;
- D = [dlo, dhi] holds c(x) - e(x) at the SAME point x.

numerics.bounding carries E and C only, which is tight at one sample but not over a box:
c(x) - e(x) would range over C - E, twice the width of the piece's image, where the error
is a few ulps.  D keeps the correlation.  A rounded primitive f applied to operands with
exact values e and computed values c = e + d computes fl(f(c)), so

    fl(f(c)) - f(e) = [f(c) - f(e)] + [fl(v) - v],   v = f(c) in F(C):

- the propagated error f(c) - f(e): exact algebra for + - * / fma square reciprocal sqrt
  (a*b: e_a d_b + c_b d_a; a/b: (d_a - (e_a/e_b) d_b) / c_b; sqrt: d / (sqrt c + sqrt e)),
  the mean value theorem for the others: f'(xi) d with xi between e and c, so in the hull H
  of E and C, from an enclosure of the derivative over H (``_SLOPES``; the gradient for the
  binary ones, where the box avoids atan2's branch cut; hypot is 1-Lipschitz in the
  Euclidean norm), and for the exact primitives: -d; |c| - |e| = +-d where the signs are
  known, within +-|d| otherwise (the reverse triangle inequality); max(e + d) - max(e)
  within the hull of the d's (max is monotone and commutes with a common shift).  Where no
  form applies (a derivative unbounded on H, floor, fmod...) the naive F(C) - F(E) serves;
  both are true, and their intersection is taken;
- the rounding error fl(v) - v of one rounding (two under a policy's compute format) of
  v in V = F(C): within ulp(M)/2 in the nearest modes, within ulp(M) in the others (one
  sign for upward, downward and toward zero on one side of 0), M = max |V|, the ulp the
  format's spacing at M, nondecreasing in |v| (formats.ulp; half of it where M is a power
  of two, itself a format value, above the first binade) -- while M does not exceed
  max_finite (beyond, an overflow: C is unbounded, or the saturated max_finite and the
  naive enclosure below) and, in a format that flushes subnormals, M >= 2 min_normal;
  intersected with the naive [fl(lo) - hi, fl(hi) - lo], exactly 0 where v is a format
  value.

A fourth interval R = [rlo, rhi] holds the relative error (c(x) - e(x)) / e(x) where E
excludes 0 (unknown, NaN, elsewhere, without making the element unknown).  The absolute
error D grows with the magnitude of the piece's values, which a product, a quotient or an
exp spread over binades; R does not: exp(e + d) / exp(e) - 1 = exp(d) - 1 turns an
absolute error into a relative one, (1 + r_a)(1 + r_b) - 1 and (1 + r_a) / (1 + r_b) - 1
carry relative errors through products and quotients, a sum of terms of one sign has the
weighted mean of theirs (the weights e_i / sum e in [0, 1]), and one rounding multiplies
by 1 + rho with |rho| <= 2**-p in the nearest modes, 2**(1-p) in the others, where every
|v| lies in the format's normal range (Higham 2002, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., th. 2.2), and within (fl(v) - v) / v anyway.  R and D tighten each
other: R within D / E, D within R E.

Every rounding mode but stochastic is monotone, so C after a rounding is [fl(lo), fl(hi)];
stochastic rounding picks a neighbour, [RD(lo), RU(hi)] (numerics.bounding's argument).
Finally D is intersected with C - E, always true.  E and the intervals of every formula
are numerics.bounding's outward-rounded binary64 interval functions
(``numerics.bounding.interval``), so every enclosure holds as the fundamental theorem of
interval arithmetic says (Moore, Kearfott, Cloud 2009, "Introduction to Interval Analysis",
th. 5.1).  The error form is the first-order analysis of FPTaylor and Daisy (Solovyev et
al. 2015, "Rigorous estimation of floating-point round-off errors with symbolic Taylor
expansions"; Darulova, Kuncak 2014) kept to intervals, with the propagated term exact
where the algebra allows, so no second-order remainder is dropped.

Inputs: a float64 array is read as numerics.emulated reads it (C its rounding into the
format, E the value itself, D their difference); the domain driver (routes.bounds.domain)
packs a box of format values as E = C = the box, D = 0.  An element with a non-finite
field of E, C or D is unknown (every field NaN): nothing is claimed about it.  ``x * x``
of one array is read as the square of each value (the emulated backend rounds the product
once either way), never as a product of two independent points of the piece.

Comparisons decide at E's midpoint and count as undecided where the enclosures C and E of
some point of the piece could decide otherwise.  ``track(shape)`` (a batch of independent
elements, the driver's elementwise mode) keeps undecided comparisons of that shape per
element in ``undecided_at``; any other undecided comparison sets ``undecided`` for the whole
evaluation.  ``reset()`` clears both.

Capabilities: those of numerics.bounding (Rounding, Erf, InverseTrig, Cbrt).  Formats must
fit binary64; fixed-point accumulation policies (which read binary64 values directly) are
refused by the base class.
"""

from __future__ import annotations

import math

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.numerics import Backend
from roundoff_coverage.numerics.backend import EXACT_PRIMITIVES
from roundoff_coverage.numerics.bounding import EnclosureFormats, interval

DTYPE = np.dtype([(k, np.float64) for k in ("elo", "ehi", "clo", "chi", "dlo", "dhi", "rlo",
                                            "rhi")])
FIELDS = DTYPE.names
INF = np.inf
NEAREST = ("nearest_even", "nearest_away")


# ----- interval pairs (lo, hi) of float64 arrays ----------------------------------------------
def _add(a, b):
    return interval("add", a, b)


def _sub(a, b):
    return interval("subtract", a, b)


def _mul(a, b):
    return interval("multiply", a, b)


def _div(a, b):
    return interval("divide", a, b)


def _neg(a):
    return -a[1], -a[0]


def _point(v):
    v = np.float64(v)
    return v, v


def _const(v):
    """A real constant computed in binary64 to within 2 ulps, widened 4 ulps each side."""
    lo = hi = np.float64(v)
    for _ in range(4):
        lo, hi = np.nextafter(lo, -INF), np.nextafter(hi, INF)
    return lo, hi


def _known(a):
    return np.isfinite(a[0]) & np.isfinite(a[1])


def _meet(a, b):
    """The intersection of two enclosures of one set; where one is unknown, the other."""
    ka, kb = _known(a), _known(b)
    lo = np.where(ka & kb, np.maximum(a[0], b[0]), np.where(ka, a[0], b[0]))
    hi = np.where(ka & kb, np.minimum(a[1], b[1]), np.where(ka, a[1], b[1]))
    return lo, hi


def _hull(a, b):
    return np.minimum(a[0], b[0]), np.maximum(a[1], b[1])


def _magnitude(a):
    """max |x| over the interval (NaN stays NaN)."""
    return np.maximum(np.abs(a[0]), np.abs(a[1]))


ONE = _point(1.0)
LN2, LN10 = _const(math.log(2.0)), _const(math.log(10.0))
TWO_OVER_SQRT_PI = _const(2.0 / math.sqrt(math.pi))

# Derivative enclosures over a box H of the rounded unary primitives that are not basic
# (the basic ones have exact error algebra in _propagated): f'(H) from the interval
# functions, unbounded (NaN, inf) where H touches a pole or the domain's edge.
_SLOPES = {
    "exp": lambda h: interval("exp", h),
    "expm1": lambda h: interval("exp", h),
    "exp2": lambda h: _mul(interval("exp2", h), LN2),
    "log": lambda h: interval("reciprocal", h),
    "log2": lambda h: interval("reciprocal", _mul(h, LN2)),
    "log10": lambda h: interval("reciprocal", _mul(h, LN10)),
    "log1p": lambda h: interval("reciprocal", _add(h, ONE)),
    "sin": lambda h: interval("cos", h),
    "cos": lambda h: _neg(interval("sin", h)),
    "tan": lambda h: _add(ONE, interval("square", interval("tan", h))),
    "asin": lambda h: interval("rsqrt", _sub(ONE, interval("square", h))),
    "acos": lambda h: _neg(interval("rsqrt", _sub(ONE, interval("square", h)))),
    "atan": lambda h: interval("reciprocal", _add(ONE, interval("square", h))),
    "sinh": lambda h: interval("cosh", h),
    "cosh": lambda h: interval("sinh", h),
    "tanh": lambda h: _sub(ONE, interval("square", interval("tanh", h))),
    "asinh": lambda h: interval("rsqrt", _add(ONE, interval("square", h))),
    "acosh": lambda h: interval("rsqrt", _sub(interval("square", h), ONE)),
    "atanh": lambda h: interval("reciprocal", _sub(ONE, interval("square", h))),
    "erf": lambda h: _mul(TWO_OVER_SQRT_PI, interval("exp", _neg(interval("square", h)))),
    # rsqrt' = -x**-1.5 / 2 = -rsqrt(x) / (2 x); cbrt' = 1 / (3 cbrt(x)**2).
    "rsqrt": lambda h: _mul(_point(-0.5), _div(interval("rsqrt", h), h)),
    "cbrt": lambda h: interval("reciprocal", _mul(_point(3.0),
                                                  interval("square", interval("cbrt", h)))),
}


def _abs_error(e, c, d):
    """|c| - |e| from c - e in d: d itself where e and c are >= 0, -d where <= 0, within
    [-max|d|, max|d|] otherwise."""
    m = _magnitude(d)
    pos = (e[0] >= 0) & (c[0] >= 0)
    neg = (e[1] <= 0) & (c[1] <= 0)
    return (np.where(pos, d[0], np.where(neg, -d[1], -m)),
            np.where(pos, d[1], np.where(neg, -d[0], m)))


def _propagated(name, E, C, D):
    """An enclosure of f(c) - f(e) for the primitive ``name`` (the module docstring), or
    None where only the naive F(C) - F(E) applies."""
    if name == "add":
        return _add(D[0], D[1])
    if name == "subtract":
        return _sub(D[0], D[1])
    if name == "multiply":
        return _add(_mul(E[0], D[1]), _mul(C[1], D[0]))
    if name == "divide":
        return _div(_sub(D[0], _mul(_div(E[0], E[1]), D[1])), C[1])
    if name == "fma":
        return _add(_add(_mul(E[0], D[1]), _mul(C[1], D[0])), D[2])
    if name == "square":
        return _mul(D[0], _add(E[0], C[0]))
    if name == "reciprocal":
        return _neg(_div(D[0], _mul(E[0], C[0])))
    if name == "sqrt":
        return _div(D[0], _add(interval("sqrt", E[0]), interval("sqrt", C[0])))
    if name == "negative":
        return _neg(D[0])
    if name == "abs":
        return _abs_error(E[0], C[0], D[0])
    if name in ("maximum", "minimum", "fmax", "fmin"):
        return _hull(D[0], D[1])
    if name == "copysign":
        a = _abs_error(E[0], C[0], D[0])
        pos = (E[1][0] > 0) & (C[1][0] > 0)
        neg = (E[1][1] < 0) & (C[1][1] < 0)
        return (np.where(pos, a[0], np.where(neg, -a[1], np.nan)),
                np.where(pos, a[1], np.where(neg, -a[0], np.nan)))
    H = [_hull(e, c) for e, c in zip(E, C)]
    if name in _SLOPES:
        return _mul(_SLOPES[name](H[0]), D[0])
    if name == "hypot":
        m = _add((_magnitude(D[0]),) * 2, (_magnitude(D[1]),) * 2)[1]
        return -m, m
    if name == "atan2":
        return _atan2_error(H, D)
    if name == "pow":
        return _pow_error(E, C, H, D)
    return None


def _atan2_error(H, D):
    """(x dy - y dx) / (x**2 + y**2) over the hull (y, x in H), where the hull avoids the
    branch cut (x <= 0, y = 0) and the origin; unknown elsewhere."""
    (ylo, yhi), (xlo, xhi) = H
    num = _sub(_mul(H[1], D[0]), _mul(H[0], D[1]))
    p = _div(num, _add(interval("square", H[1]), interval("square", H[0])))
    ok = (xlo > 0) | (ylo > 0) | (yhi < 0)
    return np.where(ok, p[0], np.nan), np.where(ok, p[1], np.nan)


def _pow_error(E, C, H, D):
    """x**y: over a positive base, y x**(y-1) dx + x**y log(x) dy; over any base with an
    exact integer exponent n (the same in E and C), n x**(n-1) dx; unknown otherwise."""
    hx, hy = H
    p = interval("pow", hx, hy)
    general = _add(_mul(_div(_mul(hy, p), hx), D[0]), _mul(_mul(p, interval("log", hx)), D[1]))
    positive = hx[0] > 0
    n = E[1][0]
    integer = ((E[1][0] == E[1][1]) & (C[1][0] == n) & (C[1][1] == n) & (D[1][0] == 0)
               & (D[1][1] == 0) & (np.floor(n) == n) & (np.abs(n) < 2.0 ** 52))
    m = n - 1.0                                     # exact: an integer below 2**52
    whole = _mul(_mul((n, n), interval("pow", hx, (m, m))), D[0])
    lo = np.where(positive, general[0], np.where(integer, whole[0], np.nan))
    hi = np.where(positive, general[1], np.where(integer, whole[1], np.nan))
    return lo, hi


def _less_one(a):
    return _sub(a, ONE)


def _unless(ok, a):
    """``a`` where ``ok``, unknown elsewhere."""
    return np.where(ok, a[0], np.nan), np.where(ok, a[1], np.nan)


def _one_sign(a, b):
    """Where two exact enclosures are both > 0 or both < 0."""
    return ((a[0] > 0) & (b[0] > 0)) | ((a[1] < 0) & (b[1] < 0))


def _relative(name, E, D, R):
    """An enclosure of f(c) / f(e) - 1 before the rounding (the module docstring), or None
    where the relative error follows from D / E only."""
    f = [_add(ONE, r) for r in R]
    if name == "multiply":
        return _less_one(_mul(f[0], f[1]))
    if name == "divide":
        return _less_one(_div(f[0], f[1]))
    if name == "square":
        return _less_one(interval("square", f[0]))
    if name == "reciprocal":
        return _less_one(interval("reciprocal", f[0]))
    if name == "sqrt":
        return _less_one(interval("sqrt", f[0]))
    if name == "exp":
        return _less_one(interval("exp", D[0]))
    if name == "exp2":
        return _less_one(interval("exp2", D[0]))
    if name == "negative":
        return R[0]
    # |c| / |e| - 1 = r and the weighted means below need c of e's sign: 1 + r > 0.
    if name == "abs":
        return _unless(R[0][0] > -1, R[0])
    if name in ("add", "subtract", "maximum", "minimum", "fmax", "fmin"):
        b = _neg(E[1]) if name == "subtract" else E[1]
        ok = _one_sign(E[0], b) & (R[0][0] > -1) & (R[1][0] > -1)
        return _unless(ok, _hull(R[0], R[1]))
    return None


def _compose(r, rho):
    """(1 + r)(1 + rho) - 1: a relative error, then a rounding's."""
    return _less_one(_mul(_add(ONE, r), _add(ONE, rho)))


class TrackingBackend(EnclosureFormats, Backend):
    """Enclosures of the exact value (E), the computed value (C) and computed - exact (D)
    over a box piece; see the module docstring."""

    capabilities = frozenset({"Rounding", "Erf", "InverseTrig", "Cbrt"})
    KIND = "tracking"
    STATE = {"undecided": False, "batch": None, "at": None}
    DTYPE = DTYPE

    # ----- undecided comparisons ------------------------------------------------------------
    @property
    def undecided(self) -> bool:
        """Whether a comparison of the evaluation was undecided outside the tracked batch."""
        return self._state["undecided"]

    @property
    def undecided_at(self):
        """The elements of the tracked batch with an undecided comparison (None untracked)."""
        return self._state["at"]

    def track(self, shape) -> None:
        """Keep undecided comparisons of arrays of ``shape`` per element (a batch of
        independent elements); None stops tracking."""
        self._state["batch"] = None if shape is None else tuple(shape)
        self.reset()

    def reset(self) -> None:
        """Clear the undecided marks before a new evaluation."""
        self._state["undecided"] = False
        batch = self._state["batch"]
        self._state["at"] = None if batch is None else np.zeros(batch, dtype=bool)

    def _mark(self, bad) -> None:
        bad = np.asarray(bad, dtype=bool)
        if not bad.any():
            return
        if self._state["batch"] is not None and bad.shape == self._state["batch"]:
            self._state["at"] |= bad
        else:
            self._state["undecided"] = True

    # ----- packing ---------------------------------------------------------------------------
    @staticmethod
    def pack(e, c, d, r=None) -> np.ndarray:
        """Interval pairs (broadcast) as numbers: E, C, D and optionally R, each tightened
        by the others (R within D / E, D within R E); an element with a non-finite end of
        E, C or D, or an empty interval, is unknown (every field NaN); an R that is not
        known is NaN alone."""
        with np.errstate(all="ignore"):
            rd = _div(d, e)
            r = rd if r is None else _meet(r, rd)
            d = _meet(d, _mul(r, e))
        parts = np.broadcast_arrays(*[np.asarray(v, dtype=np.float64)
                                      for v in (*e, *c, *d, *r)])
        out = np.empty(parts[0].shape, dtype=DTYPE)
        bad = np.zeros(parts[0].shape, dtype=bool)
        for key, v in zip(FIELDS, parts):
            out[key] = v
        for i in (0, 2, 4):
            bad |= ~np.isfinite(parts[i]) | ~np.isfinite(parts[i + 1]) \
                | (parts[i] > parts[i + 1])
        unknown_r = ~np.isfinite(parts[6]) | ~np.isfinite(parts[7]) | (parts[6] > parts[7])
        out["rlo"] = np.where(unknown_r, np.nan, parts[6])
        out["rhi"] = np.where(unknown_r, np.nan, parts[7])
        if bad.any():
            out[bad] = (np.nan,) * len(FIELDS)
        return out

    @staticmethod
    def box(lo, hi) -> np.ndarray:
        """The numbers of inputs that are format values in [lo, hi]: E = C = [lo, hi],
        D = 0 (the emulated backend reads a format value unchanged)."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        zero = np.zeros(np.broadcast(lo, hi).shape)
        return TrackingBackend.pack((lo, hi), (lo, hi), (zero, zero), (zero, zero))

    @staticmethod
    def parts(y) -> tuple:
        """((elo, ehi), (clo, chi), (dlo, dhi), (rlo, rhi)) as float64 arrays."""
        y = np.asarray(y)
        f = [np.array(y[k], dtype=np.float64) for k in FIELDS]
        return (f[0], f[1]), (f[2], f[3]), (f[4], f[5]), (f[6], f[7])

    def _as(self, a):
        a = np.asarray(a)
        return a if a.dtype == DTYPE else self.asarray(a)

    # ----- one rounding ----------------------------------------------------------------------
    def _rounding(self, v, fmt, mode=None):
        """(hull of fl(v), enclosure of fl(v) - v, enclosure of (fl(v) - v) / v) for v in
        the interval ``v``, one rounding into ``fmt`` under ``mode`` (the module
        docstring)."""
        mode = mode or self.mode
        lo, hi = v
        down, up = ("downward", "upward") if mode == "stochastic" else (mode, mode)
        with np.errstate(all="ignore"):
            w = formats.round_to(lo, fmt, down), formats.round_to(hi, fmt, up)
            naive = _sub(w, v)
            m = _magnitude(v)
            s = formats.ulp(np.where(np.isfinite(m), m, 0.0), fmt)
            # |v| <= M = 2**k >= 2 min_normal: below M the spacing is half ulp(M), and M
            # itself is a format value (no error).
            s = np.where((np.frexp(m)[0] == 0.5) & (m >= 2 * fmt.min_normal), 0.5 * s, s)
            least = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
        ok = np.isfinite(m) & (m <= fmt.max_finite)
        normal = ok & (least >= fmt.min_normal)
        if fmt.flush_subnormals:
            ok &= m >= 2 * fmt.min_normal
        # Half an ulp in the nearest modes, an ulp in the others (of fixed sign where the
        # mode says); relative: 2**-p and 2**(1-p) over the normal range.
        if mode in NEAREST:
            r, u = (-0.5 * s, 0.5 * s), 2.0 ** -fmt.precision
        elif mode == "upward":
            r, u = (np.zeros_like(s), s), 2.0 ** (1 - fmt.precision)
        elif mode == "downward":
            r, u = (-s, np.zeros_like(s)), 2.0 ** (1 - fmt.precision)
        elif mode == "toward_zero":
            r = (np.where(hi <= 0, 0.0, -s), np.where(lo >= 0, 0.0, s))
            u = 2.0 ** (1 - fmt.precision)
        else:                                       # odd, stochastic: either neighbour
            r, u = (-s, s), 2.0 ** (1 - fmt.precision)
        err = _meet(naive, _unless(ok, r))
        with np.errstate(all="ignore"):
            rho = _meet(_div(err, v), _unless(normal, (np.full_like(s, -u), np.full_like(s, u))))
        return w, err, rho

    def _round_twice(self, v):
        """A rounded primitive's result (hull, absolute and relative rounding errors): into
        the policy's compute format first when it is not the storage format, then into the
        storage format."""
        if self.policy.compute == self.fmt:
            return self._rounding(v, self.fmt)
        v, err, rho = self._rounding(v, self.policy.compute)
        w, r, rho2 = self._rounding(v, self.fmt)
        return w, _add(err, r), _compose(rho, rho2)

    # ----- conversion ------------------------------------------------------------------------
    def asarray(self, x):
        """Exact inputs as numerics.emulated reads them: E the value (enclosed in binary64
        when it is not a binary64 value), C its rounding into the format, D = C - E."""
        x = self._exact_input(x)
        if x.dtype == DTYPE:
            return x
        if x.dtype == object:
            e = [np.empty(x.shape) for _ in range(2)]
            c = [np.empty(x.shape) for _ in range(2)]
            for idx, v in np.ndenumerate(x):
                for j in (0, 1):
                    e[j][idx], c[j][idx] = self._literal(v, j)
            return self.pack(e, c, _sub(c, e))
        x = x.astype(np.float64)
        c, d, _ = self._rounding((x, x), self.fmt)
        return self.pack((x, x), c, d)

    def _literal(self, v, j):
        """(E end, C end) of a literal: j = 0 the lower ends, 1 the upper."""
        e = formats.round_exact(v, "binary64", ("downward", "upward")[j]).to_float()
        mode = ("downward", "upward")[j] if self.mode == "stochastic" else self.mode
        return e, formats.round_exact(v, self.fmt, mode).to_float()

    def constant(self, literal, shape=()):
        (elo, clo), (ehi, chi) = self._literal(literal, 0), self._literal(literal, 1)
        e, c = (np.full(shape, elo), np.full(shape, ehi)), (np.full(shape, clo),
                                                          np.full(shape, chi))
        return self.pack(e, c, _sub(c, e))

    def cast(self, a, fmt, mode=None, with_flags=False):
        """C rounded once more into ``fmt`` under ``mode``: the rounding error joins D."""
        if with_flags:
            raise ValueError(f"{self.name}: enclosures carry no IEEE flags")
        e, c, d, r = self.parts(self._as(a))
        w, err, rho = self._rounding(c, formats.get(fmt), mode)
        return self.pack(e, w, _meet(_add(d, err), _sub(w, e)), _compose(r, rho))

    # ----- primitives ------------------------------------------------------------------------
    def _apply(self, name, *arrays, with_flags=False):
        if with_flags:
            raise ValueError(f"{self.name}: enclosures carry no IEEE flags")
        if name == "multiply" and arrays[0] is arrays[1]:
            # x * x of one array: the square of each value, not a product of two
            # independent points of the box (the emulated backend rounds x*x once either way).
            name, arrays = "square", arrays[:1]
        xs = np.broadcast_arrays(*[self._as(a) for a in arrays])
        E, C, D, R = zip(*[self.parts(x) for x in xs])
        with np.errstate(all="ignore"):
            e = interval(name, *E)
            v = interval(name, *C)
            p = _propagated(name, E, C, D)
            naive = _sub(v, e)
            p = naive if p is None else _meet(p, naive)
            rel = _relative(name, E, D, R)
            if name in EXACT_PRIMITIVES:
                c, d = v, p
            else:
                c, err, rho = self._round_twice(v)
                d = _add(p, err)
                rel = None if rel is None else _compose(rel, rho)
            d = _meet(d, _sub(c, e))
        return self.pack(e, c, d, rel)

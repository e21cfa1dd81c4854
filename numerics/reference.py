"""reference(prec) -> ReferenceBackend: real arithmetic on mpmath numbers at ``prec`` bits, each
primitive rounded once (to nearest); resolve(fn, inputs, fmt) escalates the precision until
every result's rounding into ``fmt`` is settled, certified by interval arithmetic where it can.

Numbers are mpmath ``mpf`` of a LOCAL ``mpmath.MPContext`` (mpmath.mp is never touched) in
numpy object arrays.  Conventions (this is a real-number reference, not an IEEE emulation):

- Inputs are exact: ``asarray`` reads floats, ints, gmpy2 mpfr and dyadic Fractions exactly,
  whatever ``prec`` is (an mpf carries its own mantissa); a non-dyadic rational or decimal
  string is rounded once to ``prec`` bits.  ``constant`` rounds its literal once to ``prec``.
- Primitives with an exact result in the inputs' own bits (negative, abs, copysign, maximum,
  minimum, fmax, fmin, floor, ceil, round, trunc) return it unrounded; the others are
  evaluated with 32 guard bits and rounded once to ``prec``; +, -, *, /, sqrt, fma are
  correctly rounded, the transcendental ones as accurate as mpmath's guarded evaluation (an
  error a little above 0.5 ulp is possible, not more than 1 ulp in practice).
- Zeros are unsigned (mpmath has one zero): x/0 = +-inf by the sign of x (0 read as +0),
  1/0 = +inf, atan2(0, -1) = pi, copysign(x, 0) = |x|.
- IEEE's special values otherwise: sqrt(-1), log(-1), asin(2), 0/0, inf - inf, 0 * inf give
  NaN; log(0) = -inf; atanh(+-1) = +-inf; pow follows C99's special cases (pow(x, 0) = 1,
  pow(1, y) = 1, pow(-8, 1/3) = NaN); hypot(inf, NaN) = inf; maximum/minimum propagate NaN,
  fmax/fmin ignore it.  Domain errors never raise: a complex mpmath result becomes NaN.
- Capabilities: Rounding, Erf, InverseTrig, Cbrt.  NextAfter and Bits are absent (a real has
  no next value and no bit pattern): the base class refuses them with CapabilityError.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np
from mpmath import libmp
from mpmath.libmp import libmpi
from mpmath.libmp import fnan, finf, fninf, fone, fzero, round_ceiling, round_floor, round_nearest

from roundoff_coverage import formats

from .backend import Backend
from .primitives import PRIMITIVES
from .exact import OrderPolicy, elementwise

GUARD = 32          # extra bits for every rounded primitive before its one rounding to prec
_RN = round_nearest
_CMP = {"equal": lambda x, y: x == y, "not_equal": lambda x, y: x != y,
        "less": lambda x, y: x < y, "less_equal": lambda x, y: x <= y,
        "greater": lambda x, y: x > y, "greater_equal": lambda x, y: x >= y}


# ----- raw mpf values: (sign, man, exp, bc) tuples, value (-1)**sign * man * 2**exp -----------
def _is_nan(r):
    return r == fnan


def _is_inf(r):
    return r == finf or r == fninf


def _special(r):
    return r == fnan or r == finf or r == fninf


def _neg(r):
    return r[0] == 1                                     # -inf included, NaN and 0 excluded


def read_raw(x, prec: int, rnd=_RN):
    """One number as a raw mpf: exact for dyadic values (floats, ints, mpfr, mpf, dyadic
    Fractions), rounded once to ``prec`` bits under ``rnd`` otherwise."""
    if hasattr(x, "_mpf_"):
        return x._mpf_
    if isinstance(x, np.integer):
        x = int(x)
    real = formats.read_real(x)
    if real.kind == "nan":
        return fnan
    if real.kind == "inf":
        return fninf if real.sign else finf
    if real.kind == "zero":
        return fzero
    n = -real.n if real.sign else real.n
    if real.d & (real.d - 1) == 0:                       # a power of two: dyadic, exact
        return libmp.from_man_exp(n, 1 - real.d.bit_length())
    return libmp.from_rational(n, real.d, prec, rnd)


def raw_real(r, fmt=None, clamp=False):
    """A raw mpf as something formats.round_exact reads exactly.  With ``clamp``, magnitudes
    far outside ``fmt``'s range are replaced by ones that round identically in every
    deterministic mode: |x| < 2**(qmin-1) (below half the least subnormal) by 2**(qmin-2), and
    |x| >= 2**(emax+2) (past every finite value) by 2**(emax+2).  This keeps exp(-1e6) at
    2048 bits from becoming a 1.4-million-bit Fraction."""
    if r == fnan:
        return "nan"
    if r == finf:
        return "inf"
    if r == fninf:
        return "-inf"
    sign, man, exp, bc = r
    if not man:
        return 0
    if clamp:
        top = exp + bc - 1                               # 2**top <= |x| < 2**(top+1)
        if top <= fmt.qmin - 2:
            man, exp = 1, fmt.qmin - 2
        elif top >= fmt.emax + 2:
            man, exp = 1, fmt.emax + 2
    man = -int(man) if sign else int(man)
    return man << exp if exp >= 0 else Fraction(man, 1 << -exp)


def round_raw(r, fmt, mode, index=0, seed=0) -> formats.Rounded:
    """A raw mpf rounded once into ``fmt`` under ``mode`` (formats.round_exact)."""
    return formats.round_exact(raw_real(r, fmt, clamp=mode != "stochastic"), fmt, mode,
                               seed=seed, index=index)


def _int_pair(x, y):
    """Integers X, Y and an exponent e with x = X*2**e, y = Y*2**e (finite raw x, y)."""
    (sx, mx, ex, _), (sy, my, ey, _) = x, y
    e = min(ex, ey)
    X, Y = int(mx) << (ex - e), int(my) << (ey - e)
    return (-X if sx else X), (-Y if sy else Y), e


def _trunc(r):
    return libmp.mpf_ceil(r) if _neg(r) else libmp.mpf_floor(r)


def fmod_raw(x, y, prec=0, rnd=_RN):
    """C fmod: x - trunc(x/y)*y, exact on the common binary grid of x and y, then rounded."""
    if _special(x) or _is_nan(y) or y == fzero:
        return fnan
    if _is_inf(y) or x == fzero:
        return x
    X, Y, e = _int_pair(x, y)
    r = abs(X) % abs(Y)
    return libmp.from_man_exp(-r if X < 0 else r, e, prec, rnd)


def remainder_raw(x, y, prec=0, rnd=_RN):
    """IEEE remainder: x - n*y with n = x/y rounded to nearest, ties to even; exact."""
    if _special(x) or _is_nan(y) or y == fzero:
        return fnan
    if _is_inf(y) or x == fzero:
        return x
    X, Y, e = _int_pair(x, y)
    q, r = divmod(abs(X), abs(Y))
    if 2 * r > abs(Y) or (2 * r == abs(Y) and q % 2 == 1):
        r -= abs(Y)
    return libmp.from_man_exp(-r if X < 0 else r, e, prec, rnd)


# ----- the backend ------------------------------------------------------------------------
class ReferenceBackend(Backend):
    """mpmath numbers at ``prec`` bits; see the module docstring for the conventions."""

    capabilities = frozenset({"Rounding", "Erf", "InverseTrig", "Cbrt"})

    def __init__(self, prec: int = 256, order: str = "sequential", fma: bool = False):
        if int(prec) != prec or prec < 2:
            raise ValueError(f"reference: prec must be an integer >= 2 bits (got {prec!r})")
        self.prec = int(prec)
        self.name = f"reference({self.prec})"
        self.policy = OrderPolicy(order, fma)
        self.ctx = mpmath.MPContext()
        self.ctx.prec = self.prec
        self._wide = mpmath.MPContext()                 # guarded evaluation context
        self._wide.prec = self.prec + GUARD
        self._mpf = self.ctx.mpf
        self._table = self._build_table()

    # -- numbers --
    def _mk(self, r):
        return self.ctx.make_mpf(r)

    def _num(self, x):
        return x if type(x) is self._mpf else self._mk(read_raw(x, self.prec))

    def _round(self, r):
        return self._mk(libmp.mpf_pos(r, self.prec, _RN))

    def _guarded(self, fname):
        """Element function: mpmath's ``fname`` at prec + GUARD bits, rounded once; a complex
        result (outside the real domain) or a domain error is NaN."""
        f = getattr(self._wide, fname)

        def g(*xs):
            try:
                v = f(*xs)
            except (libmp.ComplexResult, ValueError, ZeroDivisionError):
                return self._mk(fnan)
            return self._round(v._mpf_) if hasattr(v, "_mpf_") else self._mk(fnan)
        return g

    def _build_table(self):
        p, mk = self.prec, self._mk
        t = {name: self._guarded(name) for name in (
            "exp", "expm1", "log", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
            "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf")}
        atan2 = self._guarded("atan2")
        t.update({
            "add": lambda x, y: mk(libmp.mpf_add(x._mpf_, y._mpf_, p, _RN)),
            "subtract": lambda x, y: mk(libmp.mpf_sub(x._mpf_, y._mpf_, p, _RN)),
            "multiply": lambda x, y: mk(libmp.mpf_mul(x._mpf_, y._mpf_, p, _RN)),
            "divide": lambda x, y: mk(self._div(x._mpf_, y._mpf_, p)),
            # fma: the exact product (prec 0 = no rounding), one rounding of the sum.
            "fma": lambda x, y, z: mk(libmp.mpf_add(libmp.mpf_mul(x._mpf_, y._mpf_),
                                                    z._mpf_, p, _RN)),
            "negative": lambda x: mk(libmp.mpf_neg(x._mpf_)),
            "abs": lambda x: mk(libmp.mpf_abs(x._mpf_)),
            "square": lambda x: mk(libmp.mpf_mul(x._mpf_, x._mpf_, p, _RN)),
            "reciprocal": lambda x: mk(self._div(fone, x._mpf_, p)),
            "sqrt": lambda x: mk(fnan if _neg(x._mpf_) else libmp.mpf_sqrt(x._mpf_, p, _RN)),
            "rsqrt": self._rsqrt, "cbrt": self._cbrt, "exp2": self._exp2, "log2": self._log2,
            "pow": self._pow, "hypot": self._hypot,
            # mpmath's atan2(NaN, inf) is not NaN: propagate NaN first.
            "atan2": lambda y, x: mk(fnan) if _is_nan(y._mpf_) or _is_nan(x._mpf_) else
            atan2(y, x),
            "floor": lambda x: mk(libmp.mpf_floor(x._mpf_)),
            "ceil": lambda x: mk(libmp.mpf_ceil(x._mpf_)),
            "round": lambda x: mk(libmp.mpf_nint(x._mpf_)),       # ties to even
            "trunc": lambda x: mk(_trunc(x._mpf_)),
            "fmod": lambda x, y: mk(fmod_raw(x._mpf_, y._mpf_, p)),
            "remainder": lambda x, y: mk(remainder_raw(x._mpf_, y._mpf_, p)),
            # copysign: an unsigned zero or a NaN y counts as positive.
            "copysign": lambda x, y: mk(libmp.mpf_neg(libmp.mpf_abs(x._mpf_)) if _neg(y._mpf_)
                                        else libmp.mpf_abs(x._mpf_)),
            "maximum": lambda x, y: self._pick(x, y, max, propagate=True),
            "minimum": lambda x, y: self._pick(x, y, min, propagate=True),
            "fmax": lambda x, y: self._pick(x, y, max, propagate=False),
            "fmin": lambda x, y: self._pick(x, y, min, propagate=False),
        })
        return t

    @staticmethod
    def _div(a, b, p):
        if b == fzero:
            # Unsigned zero read as +0: x/0 = +-inf by x's sign, 0/0 and NaN/0 = NaN.
            return fnan if a == fzero or a == fnan else (fninf if _neg(a) else finf)
        return libmp.mpf_div(a, b, p, _RN)

    def _pick(self, x, y, f, propagate):
        nx, ny = _is_nan(x._mpf_), _is_nan(y._mpf_)
        if nx or ny:
            return self._mk(fnan) if propagate or (nx and ny) else (y if nx else x)
        return f(x, y)

    def _rsqrt(self, x):
        r = x._mpf_
        if r == fzero:
            return self._mk(finf)
        if _neg(r) or r == fnan:
            return self._mk(fnan)
        w = self.prec + GUARD
        return self._round(libmp.mpf_div(fone, libmp.mpf_sqrt(r, w, _RN), w, _RN))

    def _cbrt(self, x):
        # The real cube root: odd, so cbrt(-8) = -2 (mpmath's cbrt is the principal complex one).
        r = x._mpf_
        if _special(r) or r == fzero:
            return x
        c = libmp.mpf_cbrt(libmp.mpf_abs(r), self.prec + GUARD, _RN)
        return self._round(libmp.mpf_neg(c) if _neg(r) else c)

    def _exp2(self, x):
        r = x._mpf_
        if _special(r):
            return self._mk(fzero if r == fninf else r)
        if libmp.mpf_floor(r) == r:
            return self._round(libmp.mpf_shift(fone, int(libmp.to_int(r))))  # 2**k exactly
        # exp(x ln 2): the product's relative error grows by |x|, so add its bits.
        w = self.prec + GUARD + max(0, r[2] + r[3])
        return self._round(libmp.mpf_exp(libmp.mpf_mul(r, libmp.mpf_ln2(w), w, _RN), w, _RN))

    def _log2(self, x):
        r = x._mpf_
        if r == fzero:
            return self._mk(fninf)
        if _neg(r) or _special(r):
            return self._mk(fnan if _neg(r) else r)
        if r[1] == 1:
            return self._round(libmp.from_int(r[2]))              # log2(2**k) = k exactly
        w = self.prec + GUARD
        return self._round(libmp.mpf_div(libmp.mpf_log(r, w), libmp.mpf_ln2(w), w, _RN))

    def _hypot(self, x, y):
        a, b = x._mpf_, y._mpf_
        if _is_inf(a) or _is_inf(b):
            return self._mk(finf)                                  # even with a NaN
        return self._round(libmp.mpf_hypot(a, b, self.prec + GUARD, _RN)) \
            if not (_is_nan(a) or _is_nan(b)) else self._mk(fnan)

    def _pow(self, x, y):
        """pow with C99's special cases (F.10.4.4), zeros read as +0."""
        a, b, mk = x._mpf_, y._mpf_, self._mk
        if b == fzero or a == fone:
            return mk(fone)
        if a == fnan or b == fnan:
            return mk(fnan)
        integral = not _is_inf(b) and libmp.mpf_floor(b) == b
        odd = integral and int(libmp.to_int(b)) % 2 == 1
        if _is_inf(b):
            m = libmp.mpf_cmp(libmp.mpf_abs(a), fone)
            if m == 0:
                return mk(fone)
            return mk(finf if (m > 0) == (b == finf) else fzero)
        if a == fzero:
            return mk(finf if _neg(b) else fzero)
        if _is_inf(a):
            if _neg(b):
                return mk(fzero)
            return mk(fninf if a == fninf and odd else finf)
        if _neg(a):
            if not integral:
                return mk(fnan)
            v = libmp.mpf_pow_int(libmp.mpf_neg(a), int(libmp.to_int(b)), self.prec + GUARD, _RN)
            return self._round(libmp.mpf_neg(v) if odd else v)
        if integral:
            return self._round(libmp.mpf_pow_int(a, int(libmp.to_int(b)), self.prec + GUARD, _RN))
        return self._guarded("power")(x, y)

    def _apply(self, name, *arrays):
        f, num = self._table[name], self._num
        return elementwise(lambda *xs: f(*[num(x) for x in xs]), *arrays)

    # -- conversion --
    def asarray(self, x):
        """Numbers as mpf, exactly where dyadic (see the module docstring)."""
        return elementwise(self._num, np.asarray(x, dtype=object))

    def constant(self, literal, shape=()):
        """``literal`` rounded once (to nearest) to ``prec`` bits, filling ``shape``."""
        return np.full(shape, self._round(read_raw(literal, self.prec)), dtype=object)

    def to_float64(self, a) -> np.ndarray:
        """Each value rounded once to the nearest binary64 (zeros are +0.0)."""
        return self.cast(a, "binary64")

    def cast(self, a, fmt, mode=None, with_flags=False):
        """Each value rounded once into ``fmt`` under ``mode`` (formats.round_exact): float64
        for formats that fit binary64, exact mpf otherwise; ``with_flags`` adds uint8 flags."""
        fmt = formats.get(fmt)
        mode = mode or "nearest_even"
        arr = np.asarray(a, dtype=object)
        flat = [self._num(v)._mpf_ for v in arr.reshape(-1)]
        rounded = [round_raw(r, fmt, mode, index=i) for i, r in enumerate(flat)]
        flags = np.array([r.flags for r in rounded], dtype=np.uint8).reshape(arr.shape)
        if fmt.fits_binary64:
            out = np.array([r.to_float() for r in rounded], dtype=np.float64).reshape(arr.shape)
        else:
            out = np.empty(arr.shape, dtype=object)
            out.reshape(-1)[:] = [self._mk(read_raw(r.to_mpfr(), self.prec)) for r in rounded]
        return (out, flags) if with_flags else out

    # -- comparisons and predicates --
    def _compare(self, name, a, b):
        op, num = _CMP[name], self._num

        def g(x, y):
            x, y = num(x), num(y)
            if _is_nan(x._mpf_) or _is_nan(y._mpf_):
                return name == "not_equal"                     # unordered
            return op(x, y)
        return elementwise(g, a, b, dtype=bool)

    def _predicate(self, name, a):
        test = {"isnan": _is_nan, "isinf": _is_inf,
                "isfinite": lambda r: not _special(r)}[name]
        return elementwise(lambda x: test(self._num(x)._mpf_), np.asarray(a, dtype=object),
                           dtype=bool)


def reference(prec: int = 256, order: str = "sequential", fma: bool = False) -> ReferenceBackend:
    """The mpmath reference backend at ``prec`` bits (order/fma: reductions' evaluation order)."""
    return ReferenceBackend(prec, order, fma)


# ----- intervals for resolve(): (lo, hi) enclosures of the exact real at each element --------
class _Undecidable(Exception):
    """The interval evaluation cannot continue (a comparison straddles, a cast is asked)."""


class _Box:
    """An enclosure [lo, hi] (raw mpf endpoints, finite) of one element's exact value."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi


_GT, _LT = libmp.mpf_gt, libmp.mpf_lt


def _domain_test(p):
    """Whether a raw mpf lies in primitive ``p``'s declared domain (numerics.primitives)."""
    lo, lo_closed, hi, hi_closed = p.domain
    lo = None if lo is None else libmp.from_float(lo)
    hi = None if hi is None else libmp.from_float(hi)
    return lambda e: ((lo is None or (libmp.mpf_ge(e, lo) if lo_closed else _GT(e, lo))) and
                      (hi is None or (libmp.mpf_le(e, hi) if hi_closed else _LT(e, hi))))


# Monotone primitives enclosed from guarded point values: name -> (increasing, domain test)
# (cosh on |x|: even, monotone on [0, inf)).
_MONOTONE = {p.name: (p.increasing, _domain_test(p)) for p in PRIMITIVES.values()
             if p.monotone}
_ZERO_AT_ZERO = tuple(p.name for p in PRIMITIVES.values() if 0.0 in p.zero_at)
_ONE_AT_ZERO = tuple(p.name for p in PRIMITIVES.values() if 0.0 in p.one_at)
_ZERO_AT_ONE = tuple(p.name for p in PRIMITIVES.values() if 1.0 in p.zero_at)


def _exact_point(name, e, v):
    """f(e) when it is known to be exact (v: the guarded point value), else None."""
    if e == fzero and name in _ZERO_AT_ZERO:
        return fzero
    if e == fzero and name in _ONE_AT_ZERO:
        return fone
    if e == fone and name in _ZERO_AT_ONE:
        return fzero
    integral = libmp.mpf_floor(e) == e
    if name == "exp2" and integral:
        return libmp.mpf_shift(fone, int(libmp.to_int(e)))
    if name == "log2" and e[1] == 1 and not _neg(e):
        return libmp.from_int(e[2])
    if name == "log10" and integral and _GT(e, fzero) and e[2] + e[3] < 4096:
        n = int(libmp.to_int(e))
        k = len(str(n)) - 1
        return libmp.from_int(k) if 10 ** k == n else None
    if name == "cbrt" and libmp.mpf_mul(libmp.mpf_mul(v, v), v) == e:
        return v                                          # verified: v**3 == e exactly
    return None


class _IntervalBackend(Backend):
    """Numbers are _Box enclosures (None: unknown, e.g. NaN/inf or outside a domain).

    mpmath's directed roundings are exact for +, -, *, /, sqrt and integer powers (libmpf
    computes those exactly or checks the remainder) and are used as they are, through libmpi.
    Its transcendental functions are NOT reliably directed: they round an approximation, so
    exp(x) = 1 + 2**-23 + 2**-200 came back with a 64-bit upper bound of 1 + 2**-23.  Every
    transcendental enclosure is therefore built from values at prec + GUARD bits and widened
    outward by 2**-(prec+8) of each end (2**24 ulps of that evaluation), except at the points
    where the value is known exactly (_exact_point): monotone functions from their endpoints,
    sin/cos/tan through libmpi's case analysis, pow and atan2 from the box's corners (both are
    monotone along each edge of a box clear of their singularities).  That trusts mpmath's
    functions to be accurate to 2**24 ulps, which they exceed by far.  floor, ceil, round,
    trunc, maximum, minimum, fmax, fmin map endpoints (monotone); fmod and remainder only of
    two points (exact)."""

    capabilities = ReferenceBackend.capabilities

    def __init__(self, prec):
        self.prec = prec
        self.name = f"interval({prec})"
        self.policy = OrderPolicy()
        self._point = ReferenceBackend(prec + GUARD)
        p, w, I = prec, prec + GUARD, libmpi
        self._table = {
            "add": lambda s, t: I.mpi_add(s, t, p), "subtract": lambda s, t: I.mpi_sub(s, t, p),
            "multiply": lambda s, t: I.mpi_mul(s, t, p),
            "divide": lambda s, t: None if _holds_zero(t) else I.mpi_div(s, t, p),
            "fma": lambda s, t, u: I.mpi_add(I.mpi_mul(s, t), u, p),    # exact product
            "negative": I.mpi_neg, "abs": I.mpi_abs, "square": lambda s: I.mpi_square(s, p),
            "sqrt": lambda s: None if _neg(s[0]) else I.mpi_sqrt(s, p),
            "rsqrt": lambda s: I.mpi_div(I.mpi_one, I.mpi_sqrt(s, p + 20), p)
            if _GT(s[0], fzero) else None,
            "reciprocal": lambda s: None if _holds_zero(s) else I.mpi_div(I.mpi_one, s, p),
            "sin": lambda s: self._widen(s, "sin", I.mpi_sin(s, w)),
            "cos": lambda s: self._widen(s, "cos", I.mpi_cos(s, w)),
            "tan": lambda s: self._widen(s, "tan", I.mpi_tan(s, w)),
            "cosh": lambda s: self._monotone("cosh", I.mpi_abs(s)),
            "pow": self._pow, "atan2": self._atan2,
            "hypot": lambda s, t: I.mpi_sqrt(
                I.mpi_add(I.mpi_square(s, p + 20), I.mpi_square(t, p + 20), p + 20), p),
            "floor": lambda s: (libmp.mpf_floor(s[0]), libmp.mpf_floor(s[1])),
            "ceil": lambda s: (libmp.mpf_ceil(s[0]), libmp.mpf_ceil(s[1])),
            "round": lambda s: (libmp.mpf_nint(s[0]), libmp.mpf_nint(s[1])),
            "trunc": lambda s: (_trunc(s[0]), _trunc(s[1])),
            "fmod": lambda s, t: _on_points(fmod_raw, s, t),
            "remainder": lambda s, t: _on_points(remainder_raw, s, t),
            "copysign": lambda s, t: I.mpi_abs(s) if not _neg(t[0]) else
            I.mpi_neg(I.mpi_abs(s)) if _neg(t[1]) else None,
        }
        for name in ("maximum", "fmax", "minimum", "fmin"):
            f = _max if "max" in name else _min
            self._table[name] = lambda s, t, f=f: (f(s[0], t[0]), f(s[1], t[1]))
        for name in _MONOTONE:
            self._table.setdefault(name, lambda s, name=name: self._monotone(name, s))

    def _outward(self, v, down):
        """v moved outward by 2**-(prec+8) of itself, rounded outward to prec bits."""
        if v == fzero:
            return v                     # mpmath returns 0 only for an exact zero
        margin = libmp.mpf_shift(fone, v[2] + v[3] - 1 - self.prec - 8)
        return libmp.mpf_sub(v, margin, self.prec, round_floor) if down else \
            libmp.mpf_add(v, margin, self.prec, round_ceiling)

    def _widen(self, s, name, r):
        if s[0] == s[1]:
            x = _exact_point(name, s[0], None)
            if x is not None:
                return x, x
        return self._outward(r[0], True), self._outward(r[1], False)

    def _value(self, name, *ends):
        """The point value of ``name`` at raw ``ends``, rounded to prec + GUARD bits."""
        return self._point._table[name](*[self._point._mk(e) for e in ends])._mpf_

    def _monotone(self, name, s):
        increasing, inside = _MONOTONE[name]
        if not (inside(s[0]) and inside(s[1])):
            return None
        ends = []
        for e, down in ((s[0], increasing), (s[1], not increasing)):
            v = self._value(name, e)
            x = _exact_point(name, e, v)
            if x is None and (_special(v) or v == fzero):
                return None
            ends.append(self._outward(v, down) if x is None else x)
        return tuple(ends) if increasing else (ends[1], ends[0])

    def _corners(self, name, s, t, exact):
        """f over the box s x t from its four corners (f monotone along each edge)."""
        lo = hi = None
        for a in (s[0], s[1]):
            for b in (t[0], t[1]):
                x = exact(a, b)
                v = self._value(name, a, b) if x is None else x
                if _special(v) or (x is None and v == fzero):
                    return None
                down, up = (x, x) if x is not None else \
                    (self._outward(v, True), self._outward(v, False))
                lo = down if lo is None or _LT(down, lo) else lo
                hi = up if hi is None or _GT(up, hi) else hi
        return lo, hi

    def _pow(self, s, t):
        if t[0] == t[1] and libmp.mpf_floor(t[0]) == t[0]:
            n = int(libmp.to_int(t[0]))      # integer powers: libmpf rounds them rigorously
            return None if n < 0 and _holds_zero(s) else libmpi.mpi_pow_int(s, n, self.prec)
        if t[0] == t[1] == libmp.fhalf:
            return None if _neg(s[0]) else libmpi.mpi_sqrt(s, self.prec)
        if not _GT(s[0], fzero):
            return None
        return self._corners("pow", s, t, lambda a, b: fone if a == fone else None)

    def _atan2(self, y, x):
        if _holds_zero(x) and _holds_zero(y):
            return None                                        # the origin: undefined
        if _neg(x[0]) and _neg(y[0]) and not _neg(y[1]):
            return None                                        # crosses the branch cut
        return self._corners("atan2", y, x,
                             lambda b, a: fzero if b == fzero and _GT(a, fzero) else None)

    def _box(self, x):
        if x is None or type(x) is _Box:
            return x
        if hasattr(x, "_mpf_"):
            lo = hi = x._mpf_
        else:
            lo, hi = read_raw(x, self.prec, round_floor), read_raw(x, self.prec, round_ceiling)
        return None if _special(lo) or _special(hi) else _Box(lo, hi)

    def _apply(self, name, *arrays):
        f = self._table[name]

        def g(*xs):
            boxes = [self._box(x) for x in xs]
            if any(b is None for b in boxes):
                return None
            try:
                r = f(*[(b.lo, b.hi) for b in boxes])
            except (libmp.ComplexResult, ValueError, ZeroDivisionError):
                return None
            return None if r is None or _special(r[0]) or _special(r[1]) else _Box(*r)
        return elementwise(g, *arrays)

    def asarray(self, x):
        return elementwise(self._box, np.asarray(x, dtype=object))

    def constant(self, literal, shape=()):
        # The exact literal enclosed (the point backend rounds it to prec: both tend to it).
        return np.full(shape, self._box(literal), dtype=object)

    def _compare(self, name, a, b):
        def g(x, y):
            x, y = self._box(x), self._box(y)
            if x is None or y is None:
                raise _Undecidable(name)
            lt, gt = _LT(x.hi, y.lo), _GT(x.lo, y.hi)          # certainly x < y, x > y
            eq = x.lo == x.hi == y.lo == y.hi                  # certainly x == y
            known = {"less": (lt, gt or eq), "greater": (gt, lt or eq),
                     "less_equal": (lt or eq, gt), "greater_equal": (gt or eq, lt),
                     "equal": (eq, lt or gt), "not_equal": (lt or gt, eq)}[name]
            if not (known[0] or known[1]):
                raise _Undecidable(name)
            return known[0]
        return elementwise(g, a, b, dtype=bool)

    def _predicate(self, name, a):
        if any(self._box(x) is None for x in np.asarray(a, dtype=object).reshape(-1)):
            raise _Undecidable(name)
        return np.full(np.shape(a), name == "isfinite", dtype=bool)

    def to_float64(self, a):
        raise _Undecidable("to_float64")

    def cast(self, a, fmt, mode=None, with_flags=False):
        raise _Undecidable("cast")


def _max(x, y):
    return y if _LT(x, y) else x


def _min(x, y):
    return y if _LT(y, x) else x


def _holds_zero(s):
    return not _GT(s[0], fzero) and not _LT(s[1], fzero)


def _on_points(f, s, t):
    return (f(s[0], t[0]),) * 2 if s[0] == s[1] and t[0] == t[1] else None


def _intervals(fn, inputs, prec):
    """fn evaluated on enclosures at ``prec``: an object array of _Box/None, or None when the
    evaluation could not be carried out on intervals."""
    bk = _IntervalBackend(prec)
    try:
        return np.asarray(fn(bk, *[bk.asarray(x) for x in inputs]), dtype=object)
    except _Undecidable:
        return None


# ----- resolve: escalate precision until the rounding into a format is settled -------------
@dataclass
class Resolution:
    """What resolve() found.  values: mpf at the final precision ``prec``; bits: the format's
    bit patterns (Python ints, None where unresolved); rounded: float64 values (NaN where
    unresolved) for formats that fit binary64, else gmpy2 mpfr (None where unresolved);
    resolved, certified: bool arrays."""

    values: np.ndarray
    rounded: np.ndarray
    bits: np.ndarray
    resolved: np.ndarray
    certified: np.ndarray
    prec: int
    fmt: formats.BinaryFormat
    mode: str


def resolve(fn, inputs, fmt, mode="nearest_even", start_prec=64, max_prec=2048, seed=0):
    """fn(backend, *arrays) -> array, rounded into ``fmt`` under ``mode``, with the precision
    doubled from ``start_prec`` (up to ``max_prec``) until every element is settled.

    ``inputs`` reach ``fn`` through the backend's ``asarray`` (exactly); literals from
    ``constant`` are enclosed exactly.  At each precision fn runs on mpf points
    (ReferenceBackend) and on enclosures (_IntervalBackend).  An element is
    - certified when both ends of its enclosure round to the same format value: every real
      inside then does too, rounding being monotone in every mode.  The enclosures are
      rigorous for +, -, *, /, sqrt, fma, hypot, integer powers; transcendental bounds are
      widened by 2**24 ulps of a guarded evaluation, so they trust mpmath that far (mpmath's
      own "directed" transcendental roundings are not reliable: see _IntervalBackend).
      A zero-width enclosure is an exact result and certifies itself: exp(0) = 1 under
      ``upward``, sqrt(4) under ``downward``, log2(8), cbrt(-27), hypot(3, 4), cos(0).
    - resolved but not certified, only where no enclosure exists (NaN or inf on the way, a
      comparison or an fmod of non-points that intervals cannot decide): the point values
      round to the same format value at two successive precisions and do not lie on a
      rounding boundary (a format value under directed modes, a midpoint under nearest ones).
    - unresolved (resolved=False, rounded NaN or None) after ``max_prec`` otherwise: a value
      within about 2**-max_prec of a boundary, or an exact result on a boundary reached by a
      path whose enclosure is not a point (exp(log(2)) = 2 under ``upward``; 1 + tiny where
      every precision tried sees 1).  Never a silently wrong value.
    ``seed`` is the stochastic-rounding seed (the draw of element i is formats' (seed, i)).
    """
    fmt = formats.get(fmt)
    formats.mode_code(mode)
    if not 2 <= start_prec <= max_prec:
        raise ValueError(f"resolve: need 2 <= start_prec <= max_prec (got {start_prec}, "
                         f"{max_prec})")
    prec, prev = int(start_prec), None
    while True:
        bk = ReferenceBackend(prec)
        values = np.asarray(fn(bk, *[bk.asarray(x) for x in inputs]), dtype=object)
        boxes = _intervals(fn, inputs, prec)
        flat = values.reshape(-1)
        boxes = [None] * flat.size if boxes is None else boxes.reshape(-1)
        if prev is None:
            bits = np.full(flat.shape, None, dtype=object)
            resolved, certified = np.zeros(flat.shape, bool), np.zeros(flat.shape, bool)
        cur = [round_raw(v._mpf_, fmt, mode, i, seed) for i, v in enumerate(flat)]
        for i in np.flatnonzero(~certified):
            if boxes[i] is not None:
                lo, hi = (round_raw(e, fmt, mode, i, seed) for e in (boxes[i].lo, boxes[i].hi))
                ok = _key(lo) == _key(hi)
                # Zeros of both signs are one real: an unsigned zero reads as +0.
                bits[i] = (lo.bits if lo.bits == hi.bits else round_raw(fzero, fmt, mode).bits) \
                    if ok else None
                resolved[i] = certified[i] = ok
                continue
            ok = prev is not None and _key(cur[i]) == _key(prev[i]) and \
                not _on_boundary(flat[i]._mpf_, fmt, mode, prec, i, seed)
            resolved[i], bits[i] = ok, (cur[i].bits if ok else None)
        if resolved.all() or prec >= max_prec:
            break
        prev, prec = cur, min(2 * prec, max_prec)
    return _resolution(values, bits, resolved, certified, prec, fmt, mode)


def _key(r):
    """Rounded values compared as reals (both zeros equal); inf and NaN by their bits."""
    f = r.to_fraction()
    return ("bits", r.bits) if f is None else ("value", f)


def _on_boundary(r, fmt, mode, prec, index, seed):
    """Whether the rounding into fmt jumps at (or within a hair of) the real r: values just
    below and just above it, by 2**-8 of both an ulp at prec and a quantum of fmt, round
    differently."""
    if _special(r):
        return False
    top = fmt.qmin if r == fzero else min(max(r[2] + r[3] - 1, fmt.qmin - 2), fmt.emax + 2)
    x = raw_real(r, fmt, clamp=True)
    eps = Fraction(2) ** (top - max(prec, fmt.precision) - 8)
    below, above = (formats.round_exact(x + s * eps, fmt, mode, seed=seed, index=index)
                    for s in (-1, 1))
    return _key(below) != _key(above)


def _resolution(values, bits, resolved, certified, prec, fmt, mode):
    shape = values.shape
    if fmt.fits_binary64:
        rounded = np.array([np.nan if b is None else formats.Rounded(fmt, b, 0).to_float()
                            for b in bits], dtype=np.float64)
    else:
        rounded = np.empty(bits.shape, dtype=object)
        rounded[:] = [None if b is None else formats.Rounded(fmt, b, 0).to_mpfr() for b in bits]
    return Resolution(values, rounded.reshape(shape), bits.reshape(shape),
                      resolved.reshape(shape), certified.reshape(shape), prec, fmt, mode)


ReferenceBackend.resolve = staticmethod(resolve)

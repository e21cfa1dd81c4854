"""Interval enclosures of the exact real of a rule's outputs, element by element, for
``numerics.resolve``: the rule evaluated on boxes (lo, hi) of mpmath raw values.

mpmath's directed roundings are exact for +, -, *, /, sqrt and integer powers (libmpf
computes those exactly or checks the remainder) and are used as they are, through libmpi.
Its transcendental functions are NOT reliably directed: they round an approximation, so
exp(x) = 1 + 2**-23 + 2**-200 came back with a 64-bit upper bound of 1 + 2**-23.  Every
transcendental enclosure is therefore built from values at prec + GUARD bits and widened
outward (see IntervalBackend), except at the points where the value is known exactly
(_exact_point, from the declarations of numerics.primitives).
"""

from __future__ import annotations

import numpy as np
from mpmath import libmp
from mpmath.libmp import fone, fzero, libmpi, round_ceiling, round_floor

from .backend import Backend
from .exact import OrderPolicy, elementwise
from .primitives import PRIMITIVES
from .reference import (GUARD, ReferenceBackend, fmod_raw, neg_raw, read_raw, remainder_raw,
                        special_raw, trunc_raw)


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
    if name == "log2" and e[1] == 1 and not neg_raw(e):
        return libmp.from_int(e[2])
    if name == "log10" and integral and _GT(e, fzero) and e[2] + e[3] < 4096:
        n = int(libmp.to_int(e))
        k = len(str(n)) - 1
        return libmp.from_int(k) if 10 ** k == n else None
    if name == "cbrt" and libmp.mpf_mul(libmp.mpf_mul(v, v), v) == e:
        return v                                          # verified: v**3 == e exactly
    return None


class IntervalBackend(Backend):
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
            "sqrt": lambda s: None if neg_raw(s[0]) else I.mpi_sqrt(s, p),
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
            "trunc": lambda s: (trunc_raw(s[0]), trunc_raw(s[1])),
            "fmod": lambda s, t: _on_points(fmod_raw, s, t),
            "remainder": lambda s, t: _on_points(remainder_raw, s, t),
            "copysign": lambda s, t: I.mpi_abs(s) if not neg_raw(t[0]) else
            I.mpi_neg(I.mpi_abs(s)) if neg_raw(t[1]) else None,
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
            if x is None and (special_raw(v) or v == fzero):
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
                if special_raw(v) or (x is None and v == fzero):
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
            return None if neg_raw(s[0]) else libmpi.mpi_sqrt(s, self.prec)
        if not _GT(s[0], fzero):
            return None
        return self._corners("pow", s, t, lambda a, b: fone if a == fone else None)

    def _atan2(self, y, x):
        if _holds_zero(x) and _holds_zero(y):
            return None                                        # the origin: undefined
        if neg_raw(x[0]) and neg_raw(y[0]) and not neg_raw(y[1]):
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
        return None if special_raw(lo) or special_raw(hi) else _Box(lo, hi)

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
            return None if r is None or special_raw(r[0]) or special_raw(r[1]) else _Box(*r)
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


def enclosures(fn, inputs, prec):
    """fn evaluated on enclosures at ``prec``: an object array of _Box/None, or None when the
    evaluation could not be carried out on intervals."""
    bk = IntervalBackend(prec)
    try:
        return np.asarray(fn(bk, *[bk.asarray(x) for x in inputs]), dtype=object)
    except _Undecidable:
        return None

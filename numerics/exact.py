"""exact(order="sequential") -> ExactBackend: rational arithmetic on Fractions, no rounding at all.

Numbers are ``fractions.Fraction`` in numpy object arrays.  Every primitive whose exact result
is rational returns it: +, -, *, /, fma, negative, abs, square, reciprocal, pow with an integer
exponent, maximum/minimum/fmax/fmin, copysign, floor/ceil/round (ties to even)/trunc, fmod (C)
and remainder (IEEE).  sqrt, rsqrt and hypot return the exact root when it is rational and
raise ``ExactnessError`` otherwise.  Transcendental primitives (exp, log, sin, ..., erf, pow
with a non-integer exponent) always raise ``ExactnessError``: a rational backend has no value
to give, and it never approximates.

Rationals have no infinity, NaN or signed zero: NaN/inf inputs are refused, x/0 raises
``ExactDivisionByZero`` (a ValueError and a ZeroDivisionError), copysign(0, -1) = 0.
Capabilities: Rounding only.  Erf and InverseTrig belong to transcendental primitives; Cbrt
and NextAfter / Bits are refused by the base class (a rational has no next value, no bit
pattern, and an irrational cube root in general).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from roundoff_coverage import formats

from .backend import Backend
from .policy import block_size
from .primitives import TRANSCENDENTAL, named


class ExactnessError(ValueError):
    """A primitive whose exact result is not a rational number (or does not exist)."""


class ExactDivisionByZero(ExactnessError, ZeroDivisionError):
    """x / 0 in a backend without infinities."""


@dataclass(frozen=True)
class OrderPolicy:
    """The part of a ``Policy`` that a format-free backend (exact, reference) uses: the
    reduction order and whether dot/matmul fuse products.  Storage, compute and accumulation
    formats do not exist here (None): nothing is rounded into a format."""

    order: str = "sequential"
    fma: bool = False
    storage = None
    compute = None
    accumulate = None

    def __post_init__(self):
        block_size(self.order, 1)       # validates the order's spelling

    @property
    def label(self) -> str:
        return self.order + (",fma" if self.fma else "")


_MAX_BITS = 1 << 24          # refuse exact results larger than 16 Mbit (pow(2, 1e300))
_TRANSCENDENTAL = named(TRANSCENDENTAL)     # no rational value (numerics.primitives)


def _refuse(name):
    def f(*args):
        raise ExactnessError(f"exact: {name} has no exact rational value; use "
                             f"numerics.reference(prec)")
    return f


def _root(x: Fraction, k: int, name: str) -> Fraction:
    """The exact k-th root of x when it is rational (numerator and denominator in lowest
    terms are both perfect k-th powers); ExactnessError otherwise."""
    neg = x < 0
    if neg and k % 2 == 0:
        raise ExactnessError(f"exact: {name} of a negative number ({x}) is not real")
    n, d = abs(x.numerator), x.denominator
    rn, rd = _iroot(n, k), _iroot(d, k)
    if rn ** k != n or rd ** k != d:
        raise ExactnessError(f"exact: {name}({x}) is irrational; use numerics.reference(prec)")
    return Fraction(-rn if neg else rn, rd)


def _iroot(n: int, k: int) -> int:
    """floor(n ** (1/k)) for n >= 0 (Newton's method on integers)."""
    if k == 2:
        return math.isqrt(n)
    if n < 2:
        return n
    r = 1 << -(-n.bit_length() // k)          # 2**ceil(bits/k) >= the root
    while True:
        s = ((k - 1) * r + n // r ** (k - 1)) // k
        if s >= r:
            return r
        r = s


def _divide(x, y):
    if y == 0:
        raise ExactDivisionByZero(f"exact: division by zero ({x} / 0); rationals have no "
                                  f"infinity")
    return x / y


def _pow(x, y):
    if y.denominator != 1:
        raise ExactnessError(f"exact: pow with a non-integer exponent ({y}) has no exact "
                             f"rational value in general; use numerics.reference(prec)")
    if x == 0 and y < 0:
        raise ExactDivisionByZero(f"exact: pow(0, {y}) divides by zero")
    size = abs(int(y)) * max(abs(x.numerator).bit_length(), x.denominator.bit_length())
    if abs(x) != 1 and x != 0 and size > _MAX_BITS:
        raise ExactnessError(f"exact: pow({x}, {y}) has about {size} bits, more than the "
                             f"{_MAX_BITS} this backend writes out")
    return x ** int(y)      # Fraction ** int is exact (pow(0, 0) = 1 as in IEEE)


def _round_even(x: Fraction) -> Fraction:
    # Python's round() on a Fraction rounds half to even (Fraction.__round__).
    return Fraction(round(x))


def _trunc(x: Fraction) -> Fraction:
    return Fraction(math.trunc(x))


def _fmod(x, y):
    # C fmod: x - trunc(x/y)*y; the result has the sign of x and |r| < |y|.
    if y == 0:
        raise ExactnessError(f"exact: fmod({x}, 0) is undefined (NaN in IEEE arithmetic)")
    return x - math.trunc(x / y) * y


def _remainder(x, y):
    # IEEE remainder: x - n*y with n = x/y rounded to the nearest integer, ties to even;
    # |r| <= |y|/2.
    if y == 0:
        raise ExactnessError(f"exact: remainder({x}, 0) is undefined (NaN in IEEE arithmetic)")
    return x - round(x / y) * y


def _copysign(x, y):
    # Zero has no sign among the rationals: a zero y counts as positive.
    return -abs(x) if y < 0 else abs(x)


def _hypot(x, y):
    return _root(x * x + y * y, 2, "hypot")


def _rsqrt(x):
    return _divide(Fraction(1), _root(x, 2, "rsqrt"))


_OPS = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "divide": _divide,
    "fma": lambda x, y, z: x * y + z,
    "negative": lambda x: -x,
    "abs": abs,
    "square": lambda x: x * x,
    "reciprocal": lambda x: _divide(Fraction(1), x),
    "sqrt": lambda x: _root(x, 2, "sqrt"),
    "rsqrt": _rsqrt,
    "cbrt": lambda x: _root(x, 3, "cbrt"),     # reachable only with the Cbrt capability
    "hypot": _hypot,
    "pow": _pow,
    "maximum": max,
    "minimum": min,
    "fmax": max,            # no NaN among the rationals: fmax == maximum
    "fmin": min,
    "copysign": _copysign,
    "floor": lambda x: Fraction(math.floor(x)),
    "ceil": lambda x: Fraction(math.ceil(x)),
    "round": _round_even,
    "trunc": _trunc,
    "fmod": _fmod,
    "remainder": _remainder,
}
_OPS.update({name: _refuse(name) for name in _TRANSCENDENTAL})


def elementwise(f, *arrays, dtype=object):
    """f applied element by element with numpy broadcasting; a 0-d array for scalars.  numpy's
    floating-point warnings are off: nothing here computes in binary64 (a NaN input only
    passes through a comparison, which would otherwise raise the 'invalid' flag)."""
    with np.errstate(all="ignore"):
        out = np.frompyfunc(f, len(arrays), 1)(*arrays)
    return np.asarray(out, dtype=dtype)


def to_fraction(x) -> Fraction:
    """One number (int, Fraction, float, numpy scalar, gmpy2 mpz/mpq/mpfr, decimal string,
    mpmath mpf) as an exact Fraction; NaN and inf raise ExactnessError."""
    if type(x) is Fraction:
        return x
    if hasattr(x, "_mpf_"):                       # mpmath mpf: sign, mantissa, exponent
        x = _mpf_fraction(x._mpf_)
        if isinstance(x, Fraction):
            return x
    if isinstance(x, np.integer):
        x = int(x)
    try:
        real = formats.read_real(x)
    except ValueError as err:
        raise ExactnessError(f"exact: {err}") from None
    if real.kind in ("nan", "inf"):
        raise ExactnessError(f"exact: {x!r} is not a rational number (no NaN or inf here)")
    if real.kind == "zero":
        return Fraction(0)
    return Fraction(-real.n if real.sign else real.n, real.d)


def _mpf_fraction(raw):
    sign, man, exp, bc = raw
    if not man:
        # mpmath's special values: zero (bc 0), nan (bc -1), +inf (bc -2), -inf (bc -3).
        return Fraction(0) if bc == 0 else "nan" if bc == -1 else "-inf" if sign else "inf"
    man = -int(man) if sign else int(man)
    return Fraction(man << exp) if exp >= 0 else Fraction(man, 1 << -exp)


class ExactBackend(Backend):
    """Rational arithmetic; see the module docstring for what is exact and what raises."""

    name = "exact"
    capabilities = frozenset({"Rounding"})
    exact_dot = True                 # rational sums: every order gives the same number

    def __init__(self, order: str = "sequential", fma: bool = False):
        self.policy = OrderPolicy(order, fma)

    def _apply(self, name, *arrays):
        op = _OPS[name]
        return elementwise(lambda *xs: op(*[to_fraction(x) for x in xs]), *arrays)

    def asarray(self, x):
        """Numbers as Fractions, exactly (floats are dyadic rationals: Fraction(float))."""
        return elementwise(to_fraction, np.asarray(x, dtype=object))

    def constant(self, literal, shape=()):
        """``literal`` exactly ('0.1' is 1/10, the float 0.1 is its binary64 value)."""
        return np.full(shape, to_fraction(literal), dtype=object)

    def to_float64(self, a) -> np.ndarray:
        """Each value rounded once to the nearest binary64 (overflow gives +-inf)."""
        return self.cast(a, "binary64")

    def _compare(self, name, a, b):
        op = {"equal": lambda x, y: x == y, "not_equal": lambda x, y: x != y,
              "less": lambda x, y: x < y, "less_equal": lambda x, y: x <= y,
              "greater": lambda x, y: x > y, "greater_equal": lambda x, y: x >= y}[name]
        return elementwise(lambda x, y: op(to_fraction(x), to_fraction(y)), a, b, dtype=bool)

    def _predicate(self, name, a):
        # Every rational is finite.
        return np.full(np.shape(a), name == "isfinite", dtype=bool)

    def cast(self, a, fmt, mode=None, with_flags=False):
        """Each value rounded once into ``fmt`` (formats.round_exact).  Returns float64 for
        formats that fit binary64, else Fractions (an overflow to inf/NaN then raises
        ExactnessError); ``with_flags`` adds the uint8 IEEE flags."""
        fmt = formats.get(fmt)
        mode = mode or "nearest_even"
        arr = np.asarray(a, dtype=object)
        flat = arr.reshape(-1)
        rounded = [formats.round_exact(to_fraction(v), fmt, mode, index=i)
                   for i, v in enumerate(flat)]
        flags = np.array([r.flags for r in rounded], dtype=np.uint8).reshape(arr.shape)
        if fmt.fits_binary64:
            out = np.array([r.to_float() for r in rounded], dtype=np.float64).reshape(arr.shape)
        else:
            values = []
            for v, r in zip(flat, rounded):
                f = r.to_fraction()
                if f is None:
                    raise ExactnessError(f"exact: cast of {v} into {fmt.label} gives inf or NaN, "
                                         f"which is not a rational number")
                values.append(f)
            out = np.empty(arr.shape, dtype=object)
            out.reshape(-1)[:] = values
        return (out, flags) if with_flags else out


def exact(order: str = "sequential", fma: bool = False) -> ExactBackend:
    """The exact rational backend; ``order`` (sequential, pairwise, blocked:K) and ``fma``
    only decide the evaluation order of reductions, dot and matmul, which cannot change an
    exact result."""
    return ExactBackend(order, fma)

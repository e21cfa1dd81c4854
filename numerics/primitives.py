"""The primitive table: every fact about an elementwise primitive, declared once.

A route rule calls the backend's primitives (numerics/backend.py); every backend, the
measure screen, MPFR's path and the CUDA kernels' device primitives and contracts read what
they need of a primitive from its declaration here, never from a table of their own.  A new
primitive is one ``Primitive`` below plus its implementations; tests/numerics/test_numerics_primitives.py
fails when a backend claims a primitive (by its capabilities) and has no implementation.

The facts, per primitive:

- ``arity`` and ``needs`` (the capability of the spec's "Scalar Capabilities" it reads:
  Rounding, Erf, InverseTrig, Cbrt, NextAfter);
- ``kind``: ``exact`` (the result is one of the operands' values or a value of the operands'
  format: negation, extrema, floor..., fmod and remainder by Sterbenz-like arguments, Muller
  et al., Handbook of Floating-Point Arithmetic, 2018, sec. 4.3), ``basic`` (IEEE 754's
  correctly rounded operations whose exact residual is computable in binary64: + - * /
  sqrt fma and their squares and reciprocals), ``algebraic`` (correctly rounded by MPFR but
  with no exact residual: rsqrt, cbrt, hypot, pow; exact on rationals only where a root is
  rational), ``transcendental`` (no rational value but at trivial points), ``neighbour``
  (nextafter: a value of the number format itself);
- ``ufunc``: numpy's function (the native backend; binary64 evaluations);
- ``libm``: the name in Python's ``math`` (measure's binary64 screen);
- ``mpfr``: the gmpy2 context method (MPFR's correctly rounded function);
- monotonicity: ``increasing`` True / False on ``domain`` (lo, lo closed, hi, hi closed;
  None: unbounded), ``even`` when it is monotone on |x| only (cosh), ``image`` a loose
  enclosure of the range used for clamping enclosures;
- exact points: ``zero_at`` / ``one_at`` the arguments where the value is exactly 0 / 1;
- ``overflow``: how a binary64 infinity from finite inputs reads (0: decide exactly; 1: the
  exact value is finite and beyond binary64's range; 2: so when the first input is
  nonzero), ``underflow``: likewise for a binary64 zero (1: never zero; 2: never zero when
  the first input is nonzero);
- ``device_ulp``: on a CUDA device, the bound in binary64 ulps of libdevice's
  double-precision function (CUDA C++ Programming Guide, "Mathematical Functions") for the
  device primitives that are not exact or basic; ``device``: a device primitive of
  kernels/primitives.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EXACT, BASIC, ALGEBRAIC, TRANSCENDENTAL, NEIGHBOUR = (
    "exact", "basic", "algebraic", "transcendental", "neighbour")
KINDS = (EXACT, BASIC, ALGEBRAIC, TRANSCENDENTAL, NEIGHBOUR)
CAPABILITIES = ("Rounding", "Erf", "InverseTrig", "Cbrt", "NextAfter", "Bits")
INF = math.inf
REAL = (None, False, None, False)            # the domain of the whole real line


@dataclass(frozen=True)
class Primitive:
    """One elementwise primitive (see the module docstring for each field)."""

    name: str
    arity: int
    kind: str
    needs: str | None = None
    ufunc: object = None
    libm: str | None = None
    mpfr: str | None = None
    increasing: bool | None = None
    domain: tuple = REAL
    even: bool = False
    image: tuple = (-INF, INF)
    zero_at: tuple = ()
    one_at: tuple = ()
    overflow: int = 0
    underflow: int = 0
    device_ulp: int | None = None
    device: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"primitive {self.name}: unknown kind {self.kind!r}")
        if self.needs is not None and self.needs not in CAPABILITIES:
            raise ValueError(f"primitive {self.name}: unknown capability {self.needs!r}")

    @property
    def monotone(self) -> bool:
        return self.increasing is not None


def _p(*args, **kw) -> Primitive:
    return Primitive(*args, **kw)


_POS = (0.0, False, None, False)             # (0, inf)
_UNIT = (-1.0, True, 1.0, True)              # [-1, 1]
# Images for clamping: asin and atan lie within +-pi/2 < 2, acos in [0, pi] within [0, 4].
_DECLARED = (
    # ----- exact -------------------------------------------------------------------------
    _p("negative", 1, EXACT, ufunc=np.negative, device=True),
    _p("abs", 1, EXACT, ufunc=np.abs, device=True),
    _p("copysign", 2, EXACT, ufunc=np.copysign),
    _p("maximum", 2, EXACT, ufunc=np.maximum, device=True),      # NaN-propagating
    _p("minimum", 2, EXACT, ufunc=np.minimum, device=True),
    _p("fmax", 2, EXACT, ufunc=np.fmax),                         # NaN-ignoring
    _p("fmin", 2, EXACT, ufunc=np.fmin),
    # round is ties-to-even (torch.round; numpy's rint).
    _p("floor", 1, EXACT, needs="Rounding", ufunc=np.floor),
    _p("ceil", 1, EXACT, needs="Rounding", ufunc=np.ceil),
    _p("round", 1, EXACT, needs="Rounding", ufunc=np.rint),
    _p("trunc", 1, EXACT, needs="Rounding", ufunc=np.trunc),
    # fmod truncates the quotient (C fmod); remainder is IEEE's (quotient to nearest).
    _p("fmod", 2, EXACT, needs="Rounding", ufunc=np.fmod, mpfr="fmod"),
    _p("remainder", 2, EXACT, needs="Rounding", mpfr="remainder"),
    _p("nextafter", 2, NEIGHBOUR, needs="NextAfter", ufunc=np.nextafter),
    # ----- basic: correctly rounded with an exact residual ------------------------------------
    _p("add", 2, BASIC, ufunc=np.add, mpfr="add", device=True),
    _p("subtract", 2, BASIC, ufunc=np.subtract, mpfr="sub", device=True),
    _p("multiply", 2, BASIC, ufunc=np.multiply, mpfr="mul", device=True),
    _p("divide", 2, BASIC, ufunc=np.divide, mpfr="div", device=True),
    _p("fma", 3, BASIC, mpfr="fma"),
    _p("square", 1, BASIC, ufunc=np.square, mpfr="square", device=True),
    _p("reciprocal", 1, BASIC, ufunc=np.reciprocal),
    _p("sqrt", 1, BASIC, ufunc=np.sqrt, mpfr="sqrt", device=True),
    # ----- algebraic: correctly rounded by MPFR, no exact residual ------------------------------
    # rsqrt is MPFR's rec_sqrt; on the device 1 / sqrt(a), two correctly rounded operations,
    # within 1.5 ulp: claimed 2.
    _p("rsqrt", 1, ALGEBRAIC, mpfr="rec_sqrt", increasing=False, domain=_POS,
       image=(0.0, INF), device_ulp=2, device=True),
    _p("cbrt", 1, ALGEBRAIC, needs="Cbrt", ufunc=np.cbrt, mpfr="cbrt", increasing=True,
       zero_at=(0.0,)),
    _p("hypot", 2, ALGEBRAIC, ufunc=np.hypot, libm="hypot", mpfr="hypot", overflow=1),
    # pow: 0**y = inf for y < 0 is exact, not an overflow (hence 2); x**y underflows only
    # for x != 0.
    _p("pow", 2, ALGEBRAIC, ufunc=np.power, libm="pow", mpfr="pow", overflow=2, underflow=2),
    # ----- transcendental ----------------------------------------------------------------
    _p("exp", 1, TRANSCENDENTAL, ufunc=np.exp, libm="exp", mpfr="exp", increasing=True,
       image=(0.0, INF), one_at=(0.0,), overflow=1, underflow=1, device_ulp=1, device=True),
    _p("exp2", 1, TRANSCENDENTAL, ufunc=np.exp2, mpfr="exp2", increasing=True,
       image=(0.0, INF), one_at=(0.0,), overflow=1, underflow=1),
    _p("expm1", 1, TRANSCENDENTAL, ufunc=np.expm1, libm="expm1", mpfr="expm1",
       increasing=True, image=(-1.0, INF), zero_at=(0.0,), overflow=1, device_ulp=1,
       device=True),
    _p("log", 1, TRANSCENDENTAL, ufunc=np.log, libm="log", mpfr="log", increasing=True,
       domain=_POS, zero_at=(1.0,), device_ulp=1, device=True),
    _p("log2", 1, TRANSCENDENTAL, ufunc=np.log2, libm="log2", mpfr="log2", increasing=True,
       domain=_POS, zero_at=(1.0,)),
    _p("log10", 1, TRANSCENDENTAL, ufunc=np.log10, libm="log10", mpfr="log10",
       increasing=True, domain=_POS, zero_at=(1.0,)),
    _p("log1p", 1, TRANSCENDENTAL, ufunc=np.log1p, libm="log1p", mpfr="log1p",
       increasing=True, domain=(-1.0, False, None, False), zero_at=(0.0,), device_ulp=1,
       device=True),
    _p("sin", 1, TRANSCENDENTAL, ufunc=np.sin, libm="sin", mpfr="sin", zero_at=(0.0,),
       device_ulp=2, device=True),
    _p("cos", 1, TRANSCENDENTAL, ufunc=np.cos, libm="cos", mpfr="cos", one_at=(0.0,),
       device_ulp=2, device=True),
    _p("tan", 1, TRANSCENDENTAL, ufunc=np.tan, libm="tan", mpfr="tan", zero_at=(0.0,)),
    _p("asin", 1, TRANSCENDENTAL, needs="InverseTrig", ufunc=np.arcsin, libm="asin",
       mpfr="asin", increasing=True, domain=_UNIT, image=(-2.0, 2.0), zero_at=(0.0,)),
    _p("acos", 1, TRANSCENDENTAL, needs="InverseTrig", ufunc=np.arccos, libm="acos",
       mpfr="acos", increasing=False, domain=_UNIT, image=(0.0, 4.0), zero_at=(1.0,)),
    _p("atan", 1, TRANSCENDENTAL, needs="InverseTrig", ufunc=np.arctan, libm="atan",
       mpfr="atan", increasing=True, image=(-2.0, 2.0), zero_at=(0.0,)),
    _p("atan2", 2, TRANSCENDENTAL, needs="InverseTrig", ufunc=np.arctan2, libm="atan2",
       mpfr="atan2"),
    _p("sinh", 1, TRANSCENDENTAL, ufunc=np.sinh, libm="sinh", mpfr="sinh", increasing=True,
       zero_at=(0.0,), overflow=1, device_ulp=2, device=True),
    # cosh is even: monotone on |x|, enclosed from |box|.
    _p("cosh", 1, TRANSCENDENTAL, ufunc=np.cosh, libm="cosh", mpfr="cosh", increasing=True,
       domain=(0.0, True, None, False), even=True, image=(1.0, INF), one_at=(0.0,),
       overflow=1, underflow=1),
    _p("tanh", 1, TRANSCENDENTAL, ufunc=np.tanh, libm="tanh", mpfr="tanh", increasing=True,
       image=(-1.0, 1.0), zero_at=(0.0,), device_ulp=2, device=True),
    _p("asinh", 1, TRANSCENDENTAL, ufunc=np.arcsinh, libm="asinh", mpfr="asinh",
       increasing=True, zero_at=(0.0,)),
    _p("acosh", 1, TRANSCENDENTAL, ufunc=np.arccosh, libm="acosh", mpfr="acosh",
       increasing=True, domain=(1.0, True, None, False), image=(0.0, INF), zero_at=(1.0,)),
    _p("atanh", 1, TRANSCENDENTAL, ufunc=np.arctanh, libm="atanh", mpfr="atanh",
       increasing=True, domain=(-1.0, False, 1.0, False), zero_at=(0.0,)),
    _p("erf", 1, TRANSCENDENTAL, needs="Erf", libm="erf", mpfr="erf", increasing=True,
       image=(-1.0, 1.0), zero_at=(0.0,), device_ulp=2, device=True),
)

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _DECLARED}

# The spellings route rules use, grouped by arity, in declaration order.
UNARY = tuple(p.name for p in _DECLARED if p.arity == 1)
BINARY = tuple(p.name for p in _DECLARED if p.arity == 2)
TERNARY = tuple(p.name for p in _DECLARED if p.arity == 3)
ELEMENTWISE = UNARY + BINARY + TERNARY
NEEDS = {p.name: p.needs for p in _DECLARED if p.needs}


def named(kind: str | None = None, **facts) -> tuple:
    """The names of the primitives of ``kind`` (any when None) whose fields equal ``facts``
    (``device=True``, ``overflow=1``...), in declaration order."""
    return tuple(p.name for p in _DECLARED if (kind is None or p.kind == kind)
                 and all(getattr(p, k) == v for k, v in facts.items()))


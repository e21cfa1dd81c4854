"""Rounding (spec: the rounding family): floor, ceil, round (ties to even), trunc, frac and
sign.  Their derivative is 0 almost everywhere (frac: 1); at the jumps the rules take the
one-sided value of the pieces (0 for the step functions, 1 for frac)."""

from __future__ import annotations

import numpy as np

from ..certs import roundoff
from ..helpers import unary_elementwise
from ..samples import Domain, extremes, pick, uniform


def _near_integer(x):
    """Kinks: inputs within 2**-20 of an integer (or of a half-integer for round)."""
    return np.abs(x - np.round(x)) < 2.0 ** -20


def _near_half(x):
    return np.abs(np.abs(x - np.trunc(x)) - 0.5) < 2.0 ** -20


def _edges(f):
    """Integers, half-integers (ties), signed zeros, values just off them and the extremes."""
    pts = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 3.0, -3.0]
    off = [2.0 ** -k for k in range(1, f.precision + 2)]
    return pts + [p + s * o for p in (1.0, -1.0, 2.5, -2.5) for o in off for s in (-1, 1)] + \
        list(extremes(f))


def _integral(op):
    """``op`` (floor, ceil, round, trunc) applied to finite x only; +-inf and NaN pass
    through unchanged (the emulated backends' exact path takes finite values only)."""
    def f(xp, x):
        ok = xp.isfinite(x)
        return xp.where(ok, getattr(xp, op)(xp.where(ok, x, xp.zeros_like(x))), x)
    return f


def _zero(xp, x, y, v):
    return xp.zeros_like(v)


def _exact(what):
    return roundoff(0, statement=f"exact: {what} is representable in the format")


def _mp_trunc(ctx, x):
    return ctx.floor(x) if x >= 0 else ctx.ceil(x)


def _mp(fn):
    def oracle(ctx, x):
        if ctx.isnan(x):
            return ctx.nan
        if ctx.isinf(x):
            return x
        return fn(ctx, x)
    return oracle


_DOMAIN = Domain(ordinary=uniform(-8, 8), kinks=_near_integer, edges=pick(_edges))
_JUMPS = ("Gradient: 0 everywhere, also at the jumps (the integers) and at NaN/inf (a "
          "zeros_like, so an infinite cotangent gives 0, not NaN); PyTorch's convention.")

_KINKS = {"round": Domain(ordinary=uniform(-8, 8),
                          kinks=lambda x: _near_half(x) | _near_integer(x), edges=pick(_edges))}
# The four roundings to an integer: name, the mpmath oracle, numpy's function, their notes.
# Gradient 0 everywhere (the jumps included), PyTorch's convention.
_TO_INTEGER = (
    ("floor", lambda ctx, x: ctx.floor(x), np.floor,
     ("floor(x): the largest integer <= x; floor(+-0) = +-0, floor(+-inf) = +-inf, NaN gives "
      "NaN.", _JUMPS)),
    ("ceil", lambda ctx, x: ctx.ceil(x), np.ceil,
     ("ceil(x): the smallest integer >= x; ceil(+-0) = +-0, ceil(-0.5) = -0 where the backend "
      "has signed zeros, ceil(+-inf) = +-inf, NaN gives NaN.", _JUMPS)),
    ("round", lambda ctx, x: ctx.nint(x), np.round,
     ("round(x): the nearest integer, ties to even (torch.round, IEEE roundToIntegral"
      "TiesToEven): round(0.5) = 0, round(1.5) = 2, round(-2.5) = -2; +-inf and NaN pass "
      "through.",
      "Gradient: 0 everywhere, also at the jumps (the half-integers) and at NaN/inf "
      "(zeros_like; PyTorch's convention).")),
    ("trunc", _mp_trunc, np.trunc,
     ("trunc(x): x rounded toward zero; trunc(+-0) = +-0, trunc(+-inf) = +-inf, NaN gives "
      "NaN.", _JUMPS)),
)

for _name, _oracle, _numpy, _notes in _TO_INTEGER:
    unary_elementwise(
        _name, "rounding",
        f=_integral(_name), d=_zero, needs="Rounding",
        oracle=_mp(_oracle),
        float64=(_numpy, lambda x, g: np.zeros_like(g)),
        domain=_KINKS.get(_name, _DOMAIN),
        notes=_notes,
        certificates=("prepared", _exact(f"the integer {_name}(x)")),
    )

unary_elementwise(
    "frac", "rounding",
    f=lambda xp, x: xp.subtract(x, _integral("trunc")(xp, x)),  # inf - inf: NaN
    d=lambda xp, x, y, v: v, needs="Rounding",
    oracle=lambda ctx, x: ctx.nan if not ctx.isfinite(x) else x - _mp_trunc(ctx, x),
    float64=(lambda x: x - np.trunc(x), lambda x, g: g),
    domain=_DOMAIN,
    notes=("frac(x) = x - trunc(x) (PyTorch's frac): the sign of x, |frac(x)| < 1; "
           "frac(+-inf) = NaN (inf - inf), NaN gives NaN.",
           "Gradient: the cotangent itself (derivative 1) everywhere, also at the jumps "
           "(the nonzero integers), as PyTorch."),
    certificates=("prepared",
                  _exact("x - trunc(x) (Sterbenz: the difference of x and a nearby integer)")),
)


def _sign(xp, x):
    z = xp.zeros_like(x)
    return xp.where(xp.greater(x, z), xp.full_like(x, "1"),
                    xp.where(xp.less(x, z), xp.full_like(x, "-1"), x))


unary_elementwise(
    "sign", "rounding",
    f=_sign, d=_zero,
    oracle=lambda ctx, x: ctx.nan if ctx.isnan(x) else ctx.sign(x),
    float64=(lambda x: np.where(x > 0, 1.0, np.where(x < 0, -1.0, x)),
             lambda x, g: np.zeros_like(g)),
    domain=Domain(ordinary=uniform(-4, 4), kinks=lambda x: np.abs(x) < 2.0 ** -20,
                  edges=pick(lambda f: [0.0, -0.0, float(f.min_subnormal),
                                        -float(f.min_subnormal)] + list(extremes(f)))),
    notes=("sign(x): +1 for x > 0, -1 for x < 0, x itself at +-0 (the zero keeps its sign) "
           "and at NaN (NaN -> NaN); +-inf give +-1.",
           "Gradient: 0 everywhere, also at the jump x = 0 and at NaN (zeros_like; PyTorch's "
           "convention)."),
    certificates=("prepared", roundoff(0, statement="exact: -1, 0 or +1")),
)

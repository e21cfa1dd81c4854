"""numerics.primitives: every declared fact of a primitive is checked against mpmath at
high precision, and every backend implements every primitive it claims by its
capabilities."""

from __future__ import annotations

import math

import gmpy2
import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics import primitives as P
from roundoff_coverage.numerics.exact import ExactnessError
from conftest import CTX, mp


# mpmath's spelling of each primitive at one or more real arguments.
EXACT_F = {
    "negative": lambda x: -x, "abs": abs, "copysign": lambda x, y: abs(x) * CTX.sign(y),
    "maximum": max, "minimum": min, "fmax": max, "fmin": min, "floor": CTX.floor,
    "ceil": CTX.ceil, "round": lambda x: CTX.nint(x), "trunc": lambda x: CTX.sign(x) * CTX.floor(abs(x)),
    "fmod": lambda x, y: x - y * (CTX.sign(x / y) * CTX.floor(abs(x / y))),
    "remainder": lambda x, y: x - y * CTX.nint(x / y),
    "add": lambda x, y: x + y, "subtract": lambda x, y: x - y, "multiply": lambda x, y: x * y,
    "divide": lambda x, y: x / y, "fma": lambda x, y, z: x * y + z, "square": lambda x: x * x,
    "reciprocal": lambda x: 1 / x, "sqrt": CTX.sqrt, "rsqrt": lambda x: 1 / CTX.sqrt(x),
    "cbrt": lambda x: CTX.sign(x) * CTX.cbrt(abs(x)), "hypot": CTX.hypot, "pow": CTX.power, "exp": CTX.exp,
    "exp2": lambda x: CTX.power(2, x), "expm1": CTX.expm1, "log": CTX.log,
    "log2": lambda x: CTX.log(x, 2), "log10": CTX.log10, "log1p": CTX.log1p, "sin": CTX.sin,
    "cos": CTX.cos, "tan": CTX.tan, "asin": CTX.asin, "acos": CTX.acos, "atan": CTX.atan,
    "atan2": CTX.atan2, "sinh": CTX.sinh, "cosh": CTX.cosh, "tanh": CTX.tanh, "asinh": CTX.asinh,
    "acosh": CTX.acosh, "atanh": CTX.atanh, "erf": CTX.erf,
}
# Arguments inside every domain (acosh's is [1, inf): it gets its own).
ARGS = {1: (0.625,), 2: (0.625, 0.375), 3: (0.625, 0.375, 0.125)}
OWN_ARGS = {"acosh": (1.625,)}


def _args(p):
    return OWN_ARGS.get(p.name, ARGS[p.arity])


def _inside(p, x: float) -> bool:
    """Whether x lies in p's declared domain (lo, lo closed, hi, hi closed)."""
    lo, lo_closed, hi, hi_closed = p.domain
    if lo is not None and not (x >= lo if lo_closed else x > lo):
        return False
    return hi is None or (x <= hi if hi_closed else x < hi)


def test_the_table_covers_every_primitive_of_the_backend_protocol():
    assert set(P.PRIMITIVES) == set(EXACT_F) | {"nextafter"}
    assert len(P.ELEMENTWISE) == len(set(P.ELEMENTWISE)) == len(P.PRIMITIVES)


@pytest.mark.parametrize("name", [n for n in P.PRIMITIVES if n != "nextafter"])
def test_numpy_libm_and_mpfr_names_compute_the_declared_function(name):
    p = P.PRIMITIVES[name]
    args = _args(p)
    exact = EXACT_F[name](*[CTX.mpf(a) for a in args])
    tol = 4 * 2.0 ** -52 * max(abs(float(exact)), 2.0 ** -1022)
    if p.ufunc is not None:
        assert abs(float(p.ufunc(*args)) - float(exact)) <= tol
    if p.libm is not None:
        assert abs(getattr(math, p.libm)(*args) - float(exact)) <= tol
    if p.mpfr is not None:
        ctx = gmpy2.context(precision=200)
        got = getattr(ctx, p.mpfr)(*[gmpy2.mpfr(a) for a in args])
        assert abs(CTX.mpf(str(got)) - exact) <= CTX.mpf(2) ** -190 * max(abs(exact), 1)


@pytest.mark.parametrize("name", [n for n, p in P.PRIMITIVES.items() if p.monotone])
def test_monotonicity_domain_and_image_hold_at_points_of_the_domain(name):
    p = P.PRIMITIVES[name]
    lo, lo_closed, hi, hi_closed = p.domain
    a = (lo if lo is not None else -8.0) + (0 if lo_closed and lo is not None else 1e-3)
    b = (hi if hi is not None else 8.0) - (0 if hi_closed and hi is not None else 1e-3)
    xs = [CTX.mpf(a) + (CTX.mpf(b) - a) * k / 16 for k in range(17)]
    ys = [EXACT_F[name](x) for x in xs]
    pairs = list(zip(ys, ys[1:]))
    assert all((y1 > y0) if p.increasing else (y1 < y0) for y0, y1 in pairs), name
    assert all(p.image[0] <= y <= p.image[1] for y in ys)
    assert all(_inside(p, float(x)) for x in xs)
    for outside in ((lo - 0.5,) if lo is not None else ()) + ((hi + 0.5,) if hi is not None else ()):
        assert not _inside(p, outside)
        with CTX.workprec(300):
            try:
                v = EXACT_F[name](CTX.mpf(outside))
            except (ValueError, ZeroDivisionError):
                continue
        assert isinstance(v, CTX.mpc) or not CTX.isfinite(v) or p.even


@pytest.mark.parametrize("name", [n for n, p in P.PRIMITIVES.items() if p.zero_at or p.one_at])
def test_declared_exact_points_are_exact(name):
    p = P.PRIMITIVES[name]
    for x in p.zero_at:
        assert EXACT_F[name](CTX.mpf(x)) == 0
    for x in p.one_at:
        assert EXACT_F[name](CTX.mpf(x)) == 1


@pytest.mark.parametrize("name", [n for n, p in P.PRIMITIVES.items() if p.overflow or
                                  p.underflow])
@pytest.mark.filterwarnings("ignore:overflow encountered", "ignore:divide by zero")
def test_overflow_and_underflow_facts(name):
    p = P.PRIMITIVES[name]
    big = {1: (1100.0,), 2: (1.5e308, 1.5e308) if name == "hypot" else (10.0, 400.0)}[p.arity]
    if p.overflow:
        assert math.isinf(float(p.ufunc(*big)))         # binary64 overflows...
        assert CTX.isfinite(EXACT_F[name](*[CTX.mpf(v) for v in big]))   # ...the value is finite
    if p.underflow:
        small = {1: (-1100.0,), 2: (10.0, -400.0)}[p.arity]
        if name == "cosh":
            small = (0.0,)
        assert EXACT_F[name](*[CTX.mpf(v) for v in small]) != 0
    if p.overflow == 2 or p.underflow == 2:
        # 0 ** -1 is an exact infinity and 0 ** 1 an exact zero: decided, not by range.
        assert float(p.ufunc(0.0, -1.0)) == math.inf and float(p.ufunc(0.0, 1.0)) == 0.0


def test_device_facts():
    for p in P.PRIMITIVES.values():
        assert p.device_ulp is None or p.device
        assert not p.device or p.kind in (P.EXACT, P.BASIC) or p.device_ulp is not None
    from roundoff_coverage.kernels import contract, primitives as K
    assert set(K.NAMES) == set(P.named(device=True))
    assert contract.TRANSCENDENTAL | contract.EXACT | contract.CORRECTLY_ROUNDED == set(K.NAMES)
    with pytest.raises(Exception, match="missing \\['abs'"):
        K._named({n: None for n in K.NAMES if n != "abs"})


BACKENDS = {
    "reference": lambda: numerics.reference(80),
    "exact": numerics.exact,
    "emulated-bfloat16": lambda: numerics.emulated("bfloat16"),
    "emulated-binary32-upward": lambda: numerics.emulated("binary32", "upward"),
    "native-binary32": lambda: numerics.native("binary32"),
    "native-binary64": lambda: numerics.native("binary64"),
}


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_backend_implements_every_primitive_it_claims(backend):
    bk = BACKENDS[backend]()
    claimed = [n for n in P.ELEMENTWISE if bk.supports(n)]
    assert len(claimed) >= 40
    for name in claimed:
        p = P.PRIMITIVES[name]
        xs = [bk.asarray(np.array([a])) for a in _args(p)]
        try:
            got = getattr(bk, name)(*xs)
        except ExactnessError:
            # The exact backend's one refusal: a value with no rational form (exp(5/8),
            # sqrt(5/8)).
            assert backend == "exact" and p.kind not in (P.EXACT, P.NEIGHBOUR), name
            continue
        if name == "nextafter":
            continue
        want = EXACT_F[name](*[CTX.mpf(a) for a in _args(p)])
        value = mp(got[0])
        # Every backend is within a few units of its precision (bfloat16: 2**-8).
        assert abs(value - want) <= 2.0 ** -7 * max(abs(want), 1), (backend, name)
    refused = [n for n in P.ELEMENTWISE if not bk.supports(n)]
    for name in refused:
        with pytest.raises(numerics.CapabilityError, match=name):
            getattr(bk, name)(*[bk.asarray(np.array([0.5]))] * P.PRIMITIVES[name].arity)


def test_emulated_rounds_each_claimed_primitive_correctly_in_bfloat16():
    bk = numerics.emulated("bfloat16")
    bf16 = formats.get("bfloat16")
    for name in P.ELEMENTWISE:
        p = P.PRIMITIVES[name]
        if not bk.supports(name) or name == "nextafter":
            continue
        got = float(getattr(bk, name)(*[np.array([a]) for a in _args(p)])[0])
        want = formats.round_exact(str(EXACT_F[name](*[CTX.mpf(a) for a in _args(p)])),
                                   bf16).to_float()
        assert got == want, name

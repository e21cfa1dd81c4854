"""The device primitives kernels are written against, one set per precision flavour.

A kernel body calls ``add(a, b, rp)``, ``exp(a, rp)``, ``maximum(a, b, rp)``... and never
does arithmetic itself, so one body compiles for every flavour (the rule of an operator
is written once against ``xp`` in the same way).  Values travel as binary64 numbers that are
values of the format; ``rp`` is the int64 array of rounding parameters of the format
(formats.fast.round_params and the mode code, see ``rounding_params``).

Flavours:

- ``binary64``: the device's binary64 arithmetic.  + - * / sqrt are IEEE's correctly rounded
  operations, called through libdevice's ``__nv_dadd_rn``-style intrinsics on the GPU,
  which the compiler never contracts into an FMA (plain ``a * b + c`` is contracted by
  default: CUDA C++ Programming Guide, "Floating Point Standard"; NVVM's default
  -fma=1).  exp, log, sin, cos, tanh are libdevice's (not correctly rounded; CUDA C++
  Programming Guide, "Mathematical Functions": double exp and log within 1 ulp, sin, cos,
  tanh within 2 ulp); in the simulator they are numpy's.
- ``binary32``: the device's binary32 + - * / sqrt (``__nv_fadd_rn``... IEEE, correctly
  rounded, no flush to zero: numba compiles without fastmath, so -ftz=0, -prec-div=1,
  -prec-sqrt=1).  Transcendental functions are evaluated in binary64 and converted to binary32
  by one round to nearest even (better than libdevice's binary32 ``expf``, within 2 ulp).
- ``emulated``: every primitive is evaluated in binary64 and rounded once into the format by
  formats.kernel's rounding routine compiled as a CUDA device function (the same source the
  emulated backend's CPU path runs).  For + - * / sqrt of values of a format of precision
  p <= 25, the binary64 result rounded to nearest even into the format is the correctly
  rounded result: double rounding is innocuous when 53 >= 2p + 2 (Figueroa, "When is double
  rounding innocuous?", SIGNUM 1995), given that no binary64 intermediate overflows or
  underflows (``emulation_range_ok``).  In other modes it is not: the binary64 rounding may
  land on a point of the format's grid the exact value was not on, so the result is within
  1 ulp (directed, odd) or 0.5 ulp (nearest away) plus 2**(p-53) ulp of the exact one.

The GPU and simulator builds differ only where the simulator cannot run the GPU's code:
bit casts (libdevice's ``double_as_longlong`` returns NaN in the simulator) and the ``_rn``
intrinsics (the simulator never contracts, so plain operators on numpy scalars are the same
IEEE operations).
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda
from numba.cuda import libdevice as ld

from roundoff_coverage import formats
from roundoff_coverage.formats.fast import round_params
from roundoff_coverage.formats.kernel import make_rounder
from roundoff_coverage.numerics.primitives import named

from .errors import KernelError

FLAVOURS = ("binary64", "binary32", "emulated")

_cache = {}


def rounding_params(fmt, mode: str) -> np.ndarray:
    """int64 [p, qmin, emax, top significand, params bits, mode code] of ``fmt`` (a
    BinaryFormat) under ``mode``: what the emulated flavour's rounding reads."""
    return np.array(list(round_params(fmt)) + [formats.mode_code(mode)], dtype=np.int64)


def emulation_range_ok(fmt) -> bool:
    """Whether binary64 holds every intermediate of a primitive on values of ``fmt`` without
    overflow or loss to underflow, and the double rounding argument applies (p <= 25): the
    products and quotients of two values lie in [2**(2 qmin), 2**(2 emax + 2)] and
    [2**(qmin - emax - 1), 2**(emax + 1 - qmin)], which must sit inside binary64's normal
    range [2**-1022, 2**1024)."""
    lo, hi = fmt.qmin, fmt.emax + 1
    return (fmt.precision <= 25 and 2 * hi <= 1023 and 2 * lo >= -1022
            and hi - lo <= 1023 and lo - hi >= -1022)


def build(flavour: str, simulated: bool) -> dict:
    """{name: device function} of ``flavour`` for the simulator or the GPU (cached)."""
    key = (flavour, simulated)
    if key not in _cache:
        _cache[key] = _build(flavour, simulated)
    return _cache[key]


def _build(flavour, simulated):
    dev = cuda.jit(device=True)
    f64 = _binary64_ops(simulated, dev)
    if flavour == "binary64":
        ops = _native64(f64, dev)
    elif flavour == "binary32":
        ops = _native32(f64, simulated, dev)
    else:
        ops = _emulated(f64, simulated, dev)
    ops["select_max"], ops["select_min"] = f64["max"], f64["min"]
    return ops


def _binary64_ops(simulated, dev):
    """Unrounded binary64 building blocks: the correctly rounded + - * / sqrt without FMA
    contraction, libm-quality exp log sin cos tanh, IEEE maximum / minimum, bit casts."""
    if simulated:
        # numpy scalars, never Python floats: x / 0.0 on Python floats raises, math.exp(800)
        # raises OverflowError; numpy gives IEEE's inf and NaN.
        def f2b(x):
            return np.float64(x).view(np.int64)

        def b2f(b):
            return np.int64(b).view(np.float64)

        def add(a, b):
            return np.float64(a) + np.float64(b)

        def sub(a, b):
            return np.float64(a) - np.float64(b)

        def mul(a, b):
            return np.float64(a) * np.float64(b)

        def div(a, b):
            return np.float64(a) / np.float64(b)

        def sqrt(a):
            return np.sqrt(np.float64(a))
        exp, log, sin, cos, tanh = np.exp, np.log, np.sin, np.cos, np.tanh
        expm1, log1p, sinh = np.expm1, np.log1p, np.sinh

        def erf(a):
            return np.float64(math.erf(a))

        def rsqrt(a):
            return np.float64(1.0) / np.sqrt(np.float64(a))
        fadd, fsub, fmul, fdiv = (lambda a, b: np.float32(a) + np.float32(b),
                                  lambda a, b: np.float32(a) - np.float32(b),
                                  lambda a, b: np.float32(a) * np.float32(b),
                                  lambda a, b: np.float32(a) / np.float32(b))

        def fsqrt(a):
            return np.sqrt(np.float32(a))
    else:
        f2b, b2f = ld.double_as_longlong, ld.longlong_as_double
        add, mul, div, sqrt = ld.dadd_rn, ld.dmul_rn, ld.ddiv_rn, ld.dsqrt_rn
        # libdevice has no dsub_rn: IEEE 754 defines x - y as x + (-y), signed zeros
        # included (5.4.1), and the negation is exact.
        sub = (lambda g: dev(lambda a, b: g(a, -b)))(add)
        fadd, fsub, fmul, fdiv, fsqrt = ld.fadd_rn, ld.fsub_rn, ld.fmul_rn, ld.fdiv_rn, ld.fsqrt_rn
        exp, log, sin, cos, tanh = math.exp, math.log, math.sin, math.cos, math.tanh
        expm1, log1p, sinh, erf = math.expm1, math.log1p, math.sinh, math.erf
        # 1 / sqrt(a), two correctly rounded operations (within 1.5 ulp), as in the
        # simulator: libdevice's __nv_rsqrt is PTX rsqrt.approx.f64, whose accuracy the
        # documentation does not state as tightly.
        rsqrt = (lambda d, s: dev(lambda a: d(1.0, s(a))))(ld.ddiv_rn, ld.dsqrt_rn)
        _f32 = np.float32

        def _wrap2(g):
            return dev(lambda a, b: g(_f32(a), _f32(b)))
        fadd, fsub, fmul, fdiv = _wrap2(fadd), _wrap2(fsub), _wrap2(fmul), _wrap2(fdiv)
        fsqrt = (lambda g: dev(lambda a: g(_f32(a))))(fsqrt)

    nan = math.nan

    @dev
    def ieee_max(a, b):
        """IEEE 754-2019 maximum: NaN if either is NaN; -0 < +0."""
        if a != a or b != b:
            return nan
        if a > b:
            return a
        if a < b:
            return b
        return b if math.copysign(1.0, a) < 0 else a

    @dev
    def ieee_min(a, b):
        if a != a or b != b:
            return nan
        if a < b:
            return a
        if a > b:
            return b
        return a if math.copysign(1.0, a) < 0 else b

    return {"f2b": f2b, "b2f": b2f, "add": add, "sub": sub, "mul": mul, "div": div,
            "sqrt": sqrt, "exp": exp, "log": log, "sin": sin, "cos": cos, "tanh": tanh,
            "expm1": expm1, "log1p": log1p, "sinh": sinh, "erf": erf, "rsqrt": rsqrt,
            "fadd": fadd, "fsub": fsub, "fmul": fmul, "fdiv": fdiv, "fsqrt": fsqrt,
            "max": ieee_max, "min": ieee_min}


# The device primitives, as numerics.primitives declares them (``device=True``).
NAMES = named(device=True)


def _named(fns: dict) -> dict:
    """``fns`` when it implements every declared device primitive and nothing else."""
    if set(fns) != set(NAMES):
        raise KernelError(f"device primitives: missing {sorted(set(NAMES) - set(fns))}, "
                          f"undeclared {sorted(set(fns) - set(NAMES))}")
    return fns


def _native64(f, dev):
    add, sub, mul, div, sqrt = f["add"], f["sub"], f["mul"], f["div"], f["sqrt"]
    exp, log, sin, cos, tanh, mx, mn = f["exp"], f["log"], f["sin"], f["cos"], f["tanh"], \
        f["max"], f["min"]
    expm1, log1p, sinh, erf, rsqrt = f["expm1"], f["log1p"], f["sinh"], f["erf"], f["rsqrt"]
    return _named({
        "negative": dev(lambda a, rp: -a), "abs": dev(lambda a, rp: abs(a)),
        "sqrt": dev(lambda a, rp: sqrt(a)),
        "exp": dev(lambda a, rp: exp(a)), "log": dev(lambda a, rp: log(a)),
        "sin": dev(lambda a, rp: sin(a)), "cos": dev(lambda a, rp: cos(a)),
        "tanh": dev(lambda a, rp: tanh(a)),
        "add": dev(lambda a, b, rp: add(a, b)), "subtract": dev(lambda a, b, rp: sub(a, b)),
        "multiply": dev(lambda a, b, rp: mul(a, b)),
        "divide": dev(lambda a, b, rp: div(a, b)),
        "maximum": dev(lambda a, b, rp: mx(a, b)), "minimum": dev(lambda a, b, rp: mn(a, b)),
        "square": dev(lambda a, rp: mul(a, a)), "expm1": dev(lambda a, rp: expm1(a)),
        "log1p": dev(lambda a, rp: log1p(a)), "sinh": dev(lambda a, rp: sinh(a)),
        "erf": dev(lambda a, rp: erf(a)), "rsqrt": dev(lambda a, rp: rsqrt(a))})


def _native32(f, simulated, dev):
    fadd, fsub, fmul, fdiv, fsqrt = f["fadd"], f["fsub"], f["fmul"], f["fdiv"], f["fsqrt"]
    exp, log, sin, cos, tanh, mx, mn = f["exp"], f["log"], f["sin"], f["cos"], f["tanh"], \
        f["max"], f["min"]
    expm1, log1p, sinh, erf, rsqrt = f["expm1"], f["log1p"], f["sinh"], f["erf"], f["rsqrt"]
    f32, f64 = np.float32, np.float64
    # Transcendental: the binary64 value (within 2 binary64 ulps) rounded once to nearest
    # even into binary32 by the conversion.
    return _named({
        "negative": dev(lambda a, rp: -a), "abs": dev(lambda a, rp: abs(a)),
        "sqrt": dev(lambda a, rp: f64(fsqrt(a))),
        "exp": dev(lambda a, rp: f64(f32(exp(f64(a))))),
        "log": dev(lambda a, rp: f64(f32(log(f64(a))))),
        "sin": dev(lambda a, rp: f64(f32(sin(f64(a))))),
        "cos": dev(lambda a, rp: f64(f32(cos(f64(a))))),
        "tanh": dev(lambda a, rp: f64(f32(tanh(f64(a))))),
        "add": dev(lambda a, b, rp: f64(fadd(a, b))),
        "subtract": dev(lambda a, b, rp: f64(fsub(a, b))),
        "multiply": dev(lambda a, b, rp: f64(fmul(a, b))),
        "divide": dev(lambda a, b, rp: f64(fdiv(a, b))),
        "maximum": dev(lambda a, b, rp: mx(a, b)), "minimum": dev(lambda a, b, rp: mn(a, b)),
        "square": dev(lambda a, rp: f64(fmul(a, a))),
        "expm1": dev(lambda a, rp: f64(f32(expm1(f64(a))))),
        "log1p": dev(lambda a, rp: f64(f32(log1p(f64(a))))),
        "sinh": dev(lambda a, rp: f64(f32(sinh(f64(a))))),
        "erf": dev(lambda a, rp: f64(f32(erf(f64(a))))),
        "rsqrt": dev(lambda a, rp: f64(f32(rsqrt(f64(a)))))})


def _emulated(f, simulated, dev):
    round_bits, round_in_range = make_rounder(dev)[:2]
    f2b, b2f = f["f2b"], f["b2f"]
    add, sub, mul, div, sqrt = f["add"], f["sub"], f["mul"], f["div"], f["sqrt"]
    exp, log, sin, cos, tanh, mx, mn = f["exp"], f["log"], f["sin"], f["cos"], f["tanh"], \
        f["max"], f["min"]

    @dev
    def rnd(v, rp):
        """v rounded once into the format under the mode (formats.kernel's routine; the
        in-range shortcut for results that are normal and cannot overflow, as
        formats.fast does)."""
        b = f2b(v)
        p = rp[0]
        e = (b >> 52) & 0x7FF
        if p >= 2 and e >= rp[1] + p + 1022 and e <= rp[2] + 1022:
            r = round_in_range(b, 53 - p, rp[5], 0, 0)[0]
        else:
            r = round_bits(b, p, rp[1], rp[2], rp[3], rp[4], rp[5], 0, 0)[0]
        return b2f(r)

    @dev
    def exp_beyond(a, rp):
        """exp(a), with binary64's overflow to inf and underflow to 0 on finite a replaced by
        2**(emax+2) and 2**(qmin-2): the exact value lies beyond the format's range (below
        half its smallest subnormal), so these stand-ins round as it does in every mode
        (numerics.emulated does the same for every primitive declared ``overflow=1`` /
        ``underflow=1`` in numerics.primitives)."""
        y = exp(a)
        if a != a or a == math.inf or a == -math.inf:
            return y
        if y == math.inf:
            return b2f((rp[2] + 2 + 1023) << 52)
        if y == 0.0:
            return b2f((rp[1] - 2 + 1023) << 52)
        return y

    @dev
    def overflow_beyond(y, a, rp):
        """y = f(a) of expm1 or sinh, with binary64's overflow to +-inf on finite a replaced
        by +-2**(emax+2): the exact value lies beyond the format's range, so the stand-in
        rounds as it does (numerics.primitives' ``overflow=1``)."""
        if (y == math.inf or y == -math.inf) and a == a and a != math.inf and a != -math.inf:
            return math.copysign(b2f((rp[2] + 2 + 1023) << 52), y)
        return y

    expm1, log1p, sinh, erf, rsqrt = f["expm1"], f["log1p"], f["sinh"], f["erf"], f["rsqrt"]

    # Exact primitives are rounded too: the rounding maps -0 to +0 in formats without -0
    # (fnuz) and NaN to the format's image of it, as the emulated backend's exact path does.
    return _named({
        "negative": dev(lambda a, rp: rnd(-a, rp)), "abs": dev(lambda a, rp: rnd(abs(a), rp)),
        "sqrt": dev(lambda a, rp: rnd(sqrt(a), rp)),
        "exp": dev(lambda a, rp: rnd(exp_beyond(a, rp), rp)),
        "log": dev(lambda a, rp: rnd(log(a), rp)),
        "sin": dev(lambda a, rp: rnd(sin(a), rp)), "cos": dev(lambda a, rp: rnd(cos(a), rp)),
        "tanh": dev(lambda a, rp: rnd(tanh(a), rp)),
        "add": dev(lambda a, b, rp: rnd(add(a, b), rp)),
        "subtract": dev(lambda a, b, rp: rnd(sub(a, b), rp)),
        "multiply": dev(lambda a, b, rp: rnd(mul(a, b), rp)),
        "divide": dev(lambda a, b, rp: rnd(div(a, b), rp)),
        "maximum": dev(lambda a, b, rp: rnd(mx(a, b), rp)),
        "minimum": dev(lambda a, b, rp: rnd(mn(a, b), rp)),
        "square": dev(lambda a, rp: rnd(mul(a, a), rp)),
        "expm1": dev(lambda a, rp: rnd(overflow_beyond(expm1(a), a, rp), rp)),
        "log1p": dev(lambda a, rp: rnd(log1p(a), rp)),
        "sinh": dev(lambda a, rp: rnd(overflow_beyond(sinh(a), a, rp), rp)),
        "erf": dev(lambda a, rp: rnd(erf(a), rp)), "rsqrt": dev(lambda a, rp: rnd(rsqrt(a), rp))})

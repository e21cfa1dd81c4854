"""A kernel's contract: what it promises about its numbers, per route, format and mode.

Fields of ``Contract``:

- ``order``: ``fixed`` (every output element is computed by the same sequence of primitives
  on every run and device: here the rule's own sequence, sequential in reductions) or
  ``implementation_defined`` (none of the phase-1 kernels);
- ``fma``: whether products may be fused with a following addition.  False for every kernel
  here: the binary64 and binary32 flavours call libdevice's ``_rn`` intrinsics, which NVVM
  never contracts, and the emulated flavour rounds every product into the format (a bit
  cast) before any addition;
- ``ftz``: whether subnormal operands or results are flushed to zero by the device.  False:
  numba compiles without fastmath (-ftz=0); a format that flushes by definition
  (``flush_subnormals``) is flushed by the rounding, as numerics.emulated does;
- ``policy``: the numerics policy the kernel reproduces (``strict``: storage = compute =
  accumulation format, sequential order, no FMA);
- ``forward`` / ``gradient``: the primitives each route performs, from which the claims are
  derived (``claim``), and ``single``, whether the forward route rounds once: ``TRACED``
  (and None) for every kernel but those that draw, computed from the trace of the kernel's
  rule (kernels/trace.py, numerics.recording), which the kernel reproduces primitive by
  primitive.

Claims, for a route in a format and mode (``Claim``):

- ``agreement`` with ``numerics.emulated(fmt, mode, "strict")`` evaluating the operator's
  rule: ``bitwise`` (the same binary64 bits, NaN payloads aside), ``screened`` (bitwise
  except where the exact value of a transcendental primitive lies within ``margin``
  (relative) of a rounding boundary of the format, where the device's binary64 exp/log/sin/
  cos/tanh, which are not correctly rounded, may round the other way), or ``none``;
- ``max_ulp``: a data-independent bound on |computed - exact| in ulps of the format
  (numerics.metrics' ulp error against the exact reference) for kernels whose route is one
  rounding; None where the error depends on the data (sums, products, compositions:
  routes.apriori's bounds apply, since the kernel performs the rule's primitives in the
  rule's order).

Where each number comes from:
- + - * / sqrt in binary64 and binary32 are IEEE's correctly rounded operations: 0.5 ulp,
  bitwise equal to the emulated backend in round to nearest even.
- Emulated formats (p <= 25, range inside binary64: kernels.primitives.emulation_range_ok):
  round to nearest even of the binary64 result is the correct rounding (Figueroa 1995:
  innocuous when 53 >= 2p + 2), hence 0.5 ulp and bitwise agreement.  Other modes round a
  binary64 value within 2**-53 (relative) of the exact one: 1 ulp (directed, odd) or 0.5
  ulp (ties away) plus 2**(p-53) ulp, claimed as 2**(p-52).
- Transcendental primitives: libdevice's binary64 exp, expm1, log and log1p are within 1
  binary64 ulp, sin, cos, tanh, sinh and erf within 2 (CUDA C++ Programming Guide,
  "Mathematical Functions", double-precision table; the simulator's numpy/glibc values are
  within these too); rsqrt is 1 / sqrt(a), two correctly rounded operations, within 1.5
  (claimed 2) on the GPU and in the simulator.  A binary64 value within k ulp, i.e.
  k 2**-52 relative, rounded into a p-bit format is within 0.5 + k 2**(p-51) ulp (nearest)
  or 1 + k 2**(p-51) ulp (other modes) of the exact value; in binary64 itself the claim is
  k ulp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from roundoff_coverage import formats
from roundoff_coverage.numerics import primitives as P
from roundoff_coverage.numerics.primitives import named

from . import trace
from .errors import KernelError
from .primitives import emulation_range_ok

# The device primitives by what their result is (numerics.primitives declares each): exact,
# IEEE's correctly rounded operations, and those evaluated within ``device_ulp`` binary64
# ulps by libdevice (CUDA C++ Programming Guide, "Mathematical Functions").
EXACT = frozenset(named(P.EXACT, device=True))
CORRECTLY_ROUNDED = frozenset(named(P.BASIC, device=True))
DEVICE64_ULP = {p.name: p.device_ulp for p in P.PRIMITIVES.values()
                if p.device and p.device_ulp is not None}
TRANSCENDENTAL = frozenset(DEVICE64_ULP)
# Relative distance from a rounding boundary beyond which a screened claim is bitwise: far
# above the 2 * 2**-52 of the binary64 evaluations (and of a binary64 look at the exact value).
SCREEN_MARGIN = 2.0 ** -44
ORDERS = ("fixed", "implementation_defined")
ROUTES = ("forward", "gradient")


class Claim(NamedTuple):
    agreement: str            # "bitwise", "screened" or "none"
    max_ulp: float | None     # data-independent ulp bound against the exact value, or None
    margin: float             # relative margin of a "screened" agreement (0 otherwise)


def flavour(fmt, mode: str) -> str:
    """The precision flavour kernels run ``fmt`` in under ``mode`` (kernels.primitives), or
    KernelError naming what is outside the kernels' range."""
    fmt = formats.get(fmt)
    formats.mode_code(mode)
    if mode == "stochastic":
        raise KernelError(f"kernels: stochastic rounding is not implemented on the device "
                          f"(format {fmt.label})")
    if fmt == formats.CATALOG["binary64"]:
        if mode != "nearest_even":
            raise KernelError(f"kernels: binary64 kernels use the device's binary64 "
                              f"arithmetic, which rounds to nearest even only (got {mode})")
        return "binary64"
    if fmt == formats.CATALOG["binary32"] and mode == "nearest_even":
        return "binary32"
    if not fmt.fits_binary64 or not emulation_range_ok(fmt):
        raise KernelError(f"kernels: {fmt.label} is outside the emulated kernels' range "
                          f"(precision <= 25 bits and products and quotients inside "
                          f"binary64's normal range)")
    return "emulated"


# A contract's primitives (or its single-rounding claim) computed from the trace of the
# kernel's rule (kernels/trace.py) instead of listed.
TRACED = "traced"


@dataclass(frozen=True)
class Contract:
    forward: frozenset | str            # primitives of the forward route, or TRACED
    gradient: frozenset | str | None    # primitives of the gradient route (None: no kernel)
    single: bool | None                 # the forward route is one rounding (None: traced)
    order: str = "fixed"
    fma: bool = False
    ftz: bool = False
    policy: str = "strict"
    op: str = ""                        # the kernel's operator and the attributes it serves:
    accepts: Callable | None = None     # what a traced contract traces (kernels.base.Kernel)

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(f"contract: order must be one of {ORDERS} (got {self.order!r})")

    @property
    def routes(self) -> tuple:
        return ("forward",) if self.gradient is None else ROUTES

    def primitives(self, route: str) -> frozenset:
        if route not in self.routes:
            raise KernelError(f"kernels: no {route} kernel (routes: {', '.join(self.routes)})")
        listed = self.forward if route == "forward" else self.gradient
        if listed != TRACED:
            return listed
        return trace.primitives(self.op, route, self.accepts)

    def rounds_once(self) -> bool:
        """Whether the forward route rounds at most once per element (listed, or traced)."""
        if self.single is not None:
            return self.single
        return trace.rounds_once(self.op, self.accepts)

    def claim(self, route: str, fmt, mode: str = "nearest_even") -> Claim:
        """The claim for ``route`` in ``fmt`` under ``mode`` (see the module doc)."""
        fmt = formats.get(fmt)
        flav = flavour(fmt, mode)
        prims = self.primitives(route)
        agreement, margin = _agreement(prims, flav, mode, self)
        bound = _max_ulp(prims, flav, fmt, mode) if route == "forward" and self.rounds_once() \
            else None
        return Claim(agreement, bound, margin)

    def max_ulp(self, route: str, fmt, mode: str = "nearest_even") -> float | None:
        return self.claim(route, fmt, mode).max_ulp


def _agreement(prims, flav, mode, contract):
    if contract.order != "fixed" or contract.fma or contract.ftz:
        return "none", 0.0
    if prims <= EXACT:
        return "bitwise", 0.0
    if mode != "nearest_even":
        return "none", 0.0
    if prims & TRANSCENDENTAL:
        return ("none", 0.0) if flav == "binary64" else ("screened", SCREEN_MARGIN)
    return "bitwise", 0.0


def _max_ulp(prims, flav, fmt, mode):
    rounding = prims - EXACT
    if not rounding:
        return 0.0
    (prim,) = rounding
    p = fmt.precision
    nearest = mode in ("nearest_even", "nearest_away")
    if prim in CORRECTLY_ROUNDED:
        if mode == "nearest_even":
            return 0.5
        return (0.5 if nearest else 1.0) + 2.0 ** (p - 52)
    k = DEVICE64_ULP[prim]
    if flav == "binary64":
        return float(k)
    return (0.5 if nearest else 1.0) + k * 2.0 ** (p - 51)

"""``emulated(fmt, mode, policy)``: every primitive is the exact result rounded once into the
format (transcendental ones included), with IEEE flags per element on request.

Numbers are float64 arrays when the format fits binary64, object arrays of gmpy2 mpfr
otherwise (binary128, binary256).  Three paths give the same bits; the cheapest one that is
provably exact is taken:

- compiled error-free transformations (numerics.eft) for + - * / sqrt fma when p <= 26;
- binary64 itself under round-to-nearest-even: the hardware's + - * / sqrt are the correctly
  rounded operations (IEEE 754), so numpy's float64 arithmetic is exact-then-rounded;
- transcendental primitives in formats of at most 26 bits: a binary64 evaluation y whose
  error is far below 2**-40 |y|, accepted where y - d and y + d (d = 2**-40 |y|) round to the
  same value and flags; the rest go to MPFR (the ambiguous ones: results near a rounding
  boundary, exact results, zeros, infinities, NaNs);
- everything else, element by element through MPFR (numerics.mpfr_path).

Sums, products, dot products, matmul and scans (Backend._fold, _contract, _prefix) run
compiled (numerics.products) wherever that gives the generic path's bits: deterministic
modes, accumulator formats within numerics.eft's range or binary64 under
round-to-nearest-even, no flag tracking, primitives nobody intercepts (a subclass such as
RecordingBackend that overrides them sees every call, as before).  So do numerics.policy's
accelerator models (Backend._hardware_contract: two-level promotion, fixed-point alignment)
under the same conditions, fixed-point alignment with storage and accumulator formats
within numerics.eft's range.

Stochastic rounding draws its bits from (seed, call number, element index): the same
sequence of calls gives the same results.
"""

from __future__ import annotations

import math

import gmpy2
import numba
import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats.fast import round_params, threads_for

from . import eft, products, tensor_cores
from .backend import CAPABILITIES, Backend
from .mpfr_path import MpfrPath
from .policy import for_backend
from .primitives import ALGEBRAIC, EXACT, NEIGHBOUR, PRIMITIVES, TRANSCENDENTAL, named

_EFT_OPS = {"add": eft.ADD, "subtract": eft.SUBTRACT, "multiply": eft.MULTIPLY,
            "divide": eft.DIVIDE, "sqrt": eft.SQRT, "fma": eft.FMA}
_NUMPY_ARITH = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
                "divide": np.divide, "sqrt": np.sqrt}


@numba.vectorize(["float64(float64)"], cache=True)
def _erf64(x):
    return math.erf(x)


# binary64 evaluations for the screened path: numpy's function of every algebraic and
# transcendental primitive (numerics.primitives), erf compiled from libm's and rsqrt as
# 1 / sqrt.
_OWN64 = {"erf": _erf64, "rsqrt": lambda x: 1.0 / np.sqrt(x)}
_FLOAT64 = {n: _OWN64.get(n) or PRIMITIVES[n].ufunc
            for n in named(ALGEBRAIC) + named(TRANSCENDENTAL)}
# Functions whose binary64 evaluation on finite inputs reaches inf only by overflow, and
# those whose exact value is never 0 (so a binary64 0 is an underflow).
_OVERFLOWING = named(overflow=1)
_NEVER_ZERO = named(underflow=1)
# Relative error allowed for numpy's binary64 results: libm functions are within a few
# binary64 ulps (2**-52); 2**-40 leaves a margin of 4096 ulps.
_SCREEN = 2.0 ** -40


def emulated(fmt, mode: str = "nearest_even", policy=None, seed: int = 0) -> "EmulatedBackend":
    """The emulated backend of storage format ``fmt`` under ``mode``; ``policy`` is a Policy,
    a preset name (numerics.policy.PRESETS) or None (strict)."""
    return EmulatedBackend(fmt, mode, policy, seed)


class EmulatedBackend(Backend):
    capabilities = frozenset(CAPABILITIES)

    def __init__(self, fmt, mode="nearest_even", policy=None, seed=0):
        self.fmt = formats.get(fmt)
        formats.mode_code(mode)
        self.mode = mode
        self.policy = policy = for_backend(policy, self.fmt, "emulated")
        self.seed = seed
        self.calls = 0
        self.name = f"emulated({self.fmt.label},{mode},{policy.label})"
        self._wide = not self.fmt.fits_binary64
        self._mpfr = MpfrPath(self.fmt, mode)
        self._acc = None
        self._compute = None
        self._sticky = None          # [OR of the flags raised] while tracking (track_flags)

    # ----- helpers -------------------------------------------------------------------------
    def _next_seed(self):
        """A seed per call for stochastic rounding (a 64-bit mix of seed and call number)."""
        self.calls += 1
        if self.mode != "stochastic":
            return 0
        z = (self.seed * 0x9E3779B97F4A7C15 + self.calls * 0xBF58476D1CE4E5B9) % (1 << 64)
        return z

    def _rounder(self):
        """The backend whose format results are first rounded into (the compute format)."""
        if self.policy.compute == self.fmt:
            return self
        if self._compute is None:
            self._compute = EmulatedBackend(self.policy.compute, self.mode, None, self.seed)
        return self._compute

    # ----- sticky IEEE flags -----------------------------------------------------------------
    def track_flags(self) -> "EmulatedBackend":
        """Start collecting IEEE status flags (IEEE 754-2019 7.1: raised flags stay raised
        until cleared): from now on every rounding of this backend and of its accumulator
        ORs its flags into one word, read with ``raised()``.  The primitives then take
        their with-flags paths (slower: transcendental screening rounds both neighbours)."""
        self._sticky = [0]
        if self._acc is not None:
            self._acc._sticky = self._sticky
        return self

    def raised(self) -> int | None:
        """The flags raised since the last ``clear_flags`` (bits of formats.modes), None
        when not tracking."""
        return None if self._sticky is None else self._sticky[0]

    def clear_flags(self) -> None:
        if self._sticky is not None:
            self._sticky[0] = 0

    def _raise(self, flags):
        if self._sticky is not None and flags is not None and np.size(flags):
            self._sticky[0] |= int(np.bitwise_or.reduce(np.asarray(flags).reshape(-1)))

    # ----- conversion ----------------------------------------------------------------------
    def asarray(self, x):
        if self._wide:
            x = np.asarray(x, dtype=object)
            out = np.empty(x.shape, dtype=object)
            for idx, v in np.ndenumerate(x):
                out[idx] = formats.round_exact(v, self.fmt, self.mode).to_mpfr()
            return out
        # round_to reads any real input exactly (int64 beyond 2**53, Fractions...): one
        # rounding, never a binary64 intermediate first.
        return formats.round_to(x, self.fmt, self.mode, seed=self._next_seed())

    def constant(self, literal, shape=()):
        r = formats.round_exact(literal, self.fmt, self.mode)
        if self._wide:
            out = np.empty(shape, dtype=object)
            out.fill(r.to_mpfr())
            return out
        return np.full(shape, r.to_float())

    def to_float64(self, a):
        if self._wide:
            return np.vectorize(float, otypes=[np.float64])(a)
        return np.asarray(a, dtype=np.float64)

    def cast(self, a, fmt, mode=None, with_flags=False):
        """Values of this backend rounded once into ``fmt`` (float64 results)."""
        target = formats.get(fmt)
        mode = mode or self.mode
        if self._wide or not target.fits_binary64:
            path = MpfrPath(target, mode)
            vals, flags = path.apply("plus", [a])
        else:
            vals, flags = formats.round_to(np.asarray(a, dtype=np.float64), target, mode,
                                           with_flags=True, seed=self._next_seed())
        self._raise(flags)
        return (vals, flags) if with_flags else vals

    @property
    def draws_follow_calls(self) -> bool:
        return self.mode == "stochastic"

    def accumulator(self):
        acc = self.policy.accumulate
        if acc == self.fmt:
            return self
        if self._acc is None:
            self._acc = EmulatedBackend(acc, self.mode, None, self.seed)
            self._acc._sticky = self._sticky
        return self._acc

    def sibling(self, fmt):
        return EmulatedBackend(fmt, self.mode, None, self.seed)

    def to_storage_exact(self, v):
        return self.cast(np.asarray(v, dtype=np.float64), self.fmt)

    def to_storage(self, a, source):
        if source is self or (source.fmt == self.fmt):
            return a
        if self._wide or source._wide or self._sticky is not None:
            return self.cast(a, self.fmt)
        if self.fmt.holds(source.fmt):
            # Every value of the source format is one of ours (bfloat16 or float8 into a
            # binary32 accumulator): the rounding is the identity; its seed is drawn all
            # the same, so that later stochastic roundings draw what they always drew.
            self._next_seed()
            return np.array(a, dtype=np.float64)
        return formats.round_to(np.asarray(a, dtype=np.float64), self.fmt, self.mode,
                                seed=self._next_seed())

    # ----- sums and products (numerics.products) -------------------------------------------
    def _products_strategy(self, bk, fused):
        """numerics.products' strategy for folds with ``bk``'s primitives (self, the
        accumulator or a narrow sibling), or None where the generic path must run:
        stochastic rounding (its draws follow the call sequence), flag tracking, formats
        wider than binary64, a compute format other than bk's own (two roundings per
        primitive), or primitives a subclass overrides (it watches every call)."""
        if bk._sticky is not None or bk._wide or bk.policy.compute != bk.fmt or _hooked(bk):
            return None
        return products.strategy(bk.fmt, bk.mode, fused)

    def _fold(self, op, x, bk):
        how = self._products_strategy(bk, False) if op in ("add", "multiply") else None
        if how is None or np.size(x) == 0:
            return super()._fold(op, x, bk)
        order = self.policy.order
        bk.calls += products.fold_calls(np.shape(x)[-1], order)   # the generic path's count
        return products.fold(x, op, bk.fmt, bk.mode, order, how)

    def _prefix(self, op, w, bk, reverse):
        how = self._products_strategy(bk, False)
        if how is None:
            return super()._prefix(op, w, bk, reverse)
        bk.calls += w.shape[-1] - 1                               # the generic path's count
        return products.scan(w, op, bk.fmt, bk.mode, reverse, how)

    def _contract(self, a, b):
        if self.policy.hardware:
            # Backend._contract hands an accelerator's accumulation to _hardware_contract.
            return super()._contract(a, b)
        acc = self.accumulator()
        how = self._products_strategy(acc, self.policy.fma)
        lay = products.layout(a, b) if how is not None and a.size else None
        if lay is None:
            # Nothing shared between outputs, or no fast strategy: the generic path, whose
            # fold of the products is compiled in turn where it can be.
            return super()._contract(a, b)
        # Each distinct operand value rounded into the accumulator once (a deterministic
        # rounding: the same values as rounding the broadcast operands).
        left, right = acc.to_storage(lay.left, self), acc.to_storage(lay.right, self)
        acc.calls += products.contract_calls(a.shape[-1], self.policy.order, self.policy.fma)
        total = products.contract(lay, left, right, acc.fmt, acc.mode, self.policy.order,
                                  self.policy.fma, how)
        return self.to_storage(total, acc)

    def _hardware_contract(self, a, b, acc):
        """Backend._hardware_contract, compiled (numerics.products' fixed_point and runs)
        where that gives the generic path's bits: a nonempty k, and _products_strategy's
        conditions for this backend, the accumulator and the narrow format; fixed_point also
        needs products.fixed_point_exact.  The generic path elsewhere."""
        p = self.policy
        total = None
        if p.tensor_core is None and a.shape[-1] and \
                self._products_strategy(self, False) is not None:
            total = self._fixed_point(a, b, acc) if p.fixed_point is not None else \
                self._promoted(a, b, acc)
        if total is None:
            return super()._hardware_contract(a, b, acc)
        return self.to_storage(total, acc)

    def _tensor_core_dot(self, a, b, acc):
        """Backend._tensor_core_dot as one batched kernel over the operands' distinct values
        (products.layout) instead of every broadcast row."""
        if not (a.shape[-1] and a.size):
            return super()._tensor_core_dot(a, b, acc)
        core = tensor_cores.tensor_core(self.policy.tensor_core)
        lay = products.layout(a, b, unshared=True)
        left, fin = tensor_cores.operands(core, self.fmt, lay.left)
        right, _ = tensor_cores.operands(core, self.fmt, lay.right)
        return acc.asarray(lay.assemble(core.matmul(left, right, fin)))

    def _fixed_point(self, a, b, acc):
        """Backend._fixed_point_dot compiled, or None where it cannot be."""
        p = self.policy
        if self._products_strategy(acc, False) is None or \
                not products.fixed_point_exact(self.fmt, acc.fmt, p.fixed_point, p.block):
            return None
        lay = products.layout(a, b, unshared=True)
        acc.calls += -(-a.shape[-1] // p.block)       # a rounding per block, as generic
        return products.fixed_point(lay, p.fixed_point, p.block, acc.fmt, acc.mode)

    def _promoted(self, a, b, acc):
        """Two-level accumulation compiled, or None where it cannot be: the runs in the
        narrow format (products.runs), each rounded into the accumulator, then folded there
        in order (products.fold) as Backend._hardware_contract's loop does."""
        p = self.policy
        inner = self.sibling(p.inner)
        how, how_acc = self._products_strategy(inner, p.fma), self._products_strategy(acc, False)
        if how is None or how_acc is None:
            return None
        lay = products.layout(a, b, unshared=True)
        left, right = inner.to_storage(lay.left, self), inner.to_storage(lay.right, self)
        sums = acc.to_storage(products.runs(lay, left, right, inner.fmt, inner.mode, p.promote,
                                            p.fma, how), inner)
        # The generic path's calls: a rounding of each run into the accumulator (one made
        # above, none where the formats agree) and an add for each run but the first.
        acc.calls += (sums.shape[-1] - 1) * (1 if inner.fmt == acc.fmt else 2)
        return lay.assemble(products.fold(sums, "add", acc.fmt, acc.mode, "sequential",
                                          how_acc))

    # ----- comparisons -----------------------------------------------------------------------
    def _compare(self, name, a, b):
        return getattr(np, name)(a, b)

    def _predicate(self, name, a):
        if self._wide:
            test = {"isnan": lambda v: bool(v != v), "isinf": lambda v: bool(abs(v) == math.inf),
                    "isfinite": lambda v: bool(v == v and abs(v) != math.inf)}[name]
            return np.vectorize(test, otypes=[bool])(a)
        return getattr(np, name)(a)

    # ----- primitives ------------------------------------------------------------------------
    def _apply(self, name, *arrays, with_flags=False):
        rounder = self._rounder()
        want = with_flags or self._sticky is not None
        vals, flags = rounder._primitive(name, arrays, want)
        if rounder is not self:
            sticky, self._sticky = self._sticky, None      # flags of the cast join below
            try:
                vals, more = self.cast(vals, self.fmt, with_flags=True)
            finally:
                self._sticky = sticky
            flags = flags | more if flags is not None else None
        self._raise(flags)
        return (vals, flags) if with_flags else vals

    def _primitive(self, name, arrays, with_flags):
        seed = self._next_seed()
        if PRIMITIVES[name].kind in (EXACT, NEIGHBOUR):
            return self._exact_op(name, arrays, with_flags)
        if name == "square":
            return self._primitive("multiply", (arrays[0], arrays[0]), with_flags)
        if name == "reciprocal":
            return self._primitive("divide", (self.ones_like(arrays[0]), arrays[0]), with_flags)
        if not self._wide:
            # Rounding to odd keeps every deterministic mode's decision, not the stochastic
            # threshold: stochastic rounding takes the MPFR path.
            if name in _EFT_OPS and eft.supported(self.fmt) and self.mode != "stochastic":
                return self._eft(name, arrays, with_flags, seed)
            if name in _NUMPY_ARITH and self.fmt == formats.CATALOG["binary64"] \
                    and self.mode == "nearest_even" and not with_flags:
                with np.errstate(all="ignore"):
                    v = _NUMPY_ARITH[name](*arrays)
                return np.where(np.isnan(v), np.nan, v), None      # the canonical NaN
            if name in _FLOAT64 and self.fmt.precision <= 26 and self.mode != "stochastic" \
                    and self.fmt.fits_binary64:
                return self._screened(name, arrays, with_flags, seed)
        vals, flags = self._mpfr.apply(name, arrays, seed)
        return vals, (flags if with_flags else None)

    def _eft(self, name, arrays, with_flags, seed):
        arrays = _broadcast64(arrays)
        shape = arrays[0].shape
        flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
        while len(flat) < 3:
            flat.append(flat[0])
        out = np.empty(flat[0].size, dtype=np.int64)
        flags = np.empty(out.size if with_flags else 1, dtype=np.uint8)
        p, qmin, emax, mtop, params = round_params(self.fmt)
        s = seed - (1 << 64) if seed >= 1 << 63 else seed
        eft.apply_rounded(_EFT_OPS[name], flat[0], flat[1], flat[2], out, flags, with_flags,
                          p, qmin, emax, mtop, params, formats.mode_code(self.mode), s, 0)
        vals = out.view(np.float64).reshape(shape)
        return vals, (flags.reshape(shape) if with_flags else None)

    def _screened(self, name, arrays, with_flags, seed):
        """binary64 evaluation accepted where provably rounding like the exact value: a
        compiled screen for results in the normal range (values only), then round_to of
        y -+ d with flags for the rest, then MPFR for what is still undecided."""
        arrays = _broadcast64(arrays)
        shape = arrays[0].shape
        arrays = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
        with np.errstate(all="ignore"):
            y = np.asarray(_FLOAT64[name](*arrays), dtype=np.float64).reshape(-1)
        vals = np.empty(y.size)
        flags = np.zeros(y.size, dtype=np.uint8)
        if with_flags:
            todo = np.arange(y.size)
        else:
            ok = np.empty(y.size, dtype=np.bool_)
            p, qmin, emax, _, _ = round_params(self.fmt)
            with threads_for(y.size):
                eft.screen_in_range(y, vals.view(np.int64), ok, p, qmin, emax,
                                    formats.mode_code(self.mode), _SCREEN)
            todo = np.flatnonzero(~ok)
        if todo.size:
            t = y[todo]
            finite_in = np.all([np.isfinite(a[todo]) for a in arrays], axis=0)
            if name in _OVERFLOWING:
                # binary64 overflowed on finite inputs: the exact value lies beyond 2**1024,
                # so any stand-in beyond the format's range rounds the same way.
                huge = np.ldexp(1.0, self.fmt.emax + 2)
                t = np.where(finite_in & np.isinf(t), np.copysign(huge, t), t)
            if name in _NEVER_ZERO:
                # binary64 underflowed to 0: the exact value is positive and below 2**-1074,
                # so any stand-in below half the format's smallest subnormal rounds the same.
                t = np.where(finite_in & (t == 0), np.ldexp(1.0, self.fmt.qmin - 2), t)
            with np.errstate(all="ignore"):
                d = np.abs(t) * _SCREEN
                lo, lof = formats.round_to(t - d, self.fmt, self.mode, with_flags=True)
                hi, hif = formats.round_to(t + d, self.fmt, self.mode, with_flags=True)
            good = np.isfinite(t) & (t != 0) & (lo.view(np.int64) == hi.view(np.int64)) \
                & (lof == hif)
            if with_flags:
                # An exact result would be flagged inexact: send values on the grid to MPFR.
                good &= formats.round_to(t, self.fmt, "toward_zero") != t
            vals[todo[good]] = lo[good]
            flags[todo[good]] = lof[good]
            bad = todo[~good]
            if bad.size:
                fixed, fixed_flags = self._mpfr.apply(name, [a[bad] for a in arrays], seed)
                vals[bad] = fixed
                flags[bad] = fixed_flags
        return vals.reshape(shape), (flags.reshape(shape) if with_flags else None)

    def _exact_op(self, name, arrays, with_flags):
        """Primitives whose exact result is a value of the format (or a plain neighbour)."""
        if self._wide or name in ("fmod", "remainder"):
            if name in ("fmod", "remainder"):
                vals, flags = self._mpfr.apply(name, arrays)
                return vals, (flags if with_flags else None)
            return self._exact_wide(name, arrays, with_flags)
        a = [np.asarray(x, dtype=np.float64) for x in arrays]
        flags = None
        if name == "negative":
            v = -a[0]
        elif name == "abs":
            v = np.abs(a[0])
        elif name == "copysign":
            v = np.copysign(a[0], a[1])
        elif name in ("floor", "ceil", "trunc"):
            v = getattr(np, name)(a[0])
        elif name == "round":
            v = np.rint(a[0])                          # ties to even, as torch.round
        elif name in ("maximum", "minimum"):
            v = _ieee_extremum(a[0], a[1], name == "maximum", propagate_nan=True)
        elif name in ("fmax", "fmin"):
            v = _ieee_extremum(a[0], a[1], name == "fmax", propagate_nan=False)
        else:                                          # nextafter in the format
            v, flags = _next_after(a[0], a[1], self.fmt)
        # fnuz has no -0 and NaN canonicalisation: one exact rounding pass keeps the format.
        v, f2 = formats.round_to(v, self.fmt, self.mode, with_flags=True)
        if with_flags:
            flags = f2 if flags is None else flags | f2
        return v, flags

    def _exact_wide(self, name, arrays, with_flags):
        a = np.broadcast_arrays(*[np.asarray(x, dtype=object) for x in arrays])
        fn = {
            "negative": lambda x: -x, "abs": abs,
            "copysign": lambda x, y: gmpy2.copy_sign(x, y),
            "floor": gmpy2.floor, "ceil": gmpy2.ceil, "trunc": gmpy2.trunc,
            "round": gmpy2.rint,
            "maximum": lambda x, y: _wide_extremum(x, y, True, True),
            "minimum": lambda x, y: _wide_extremum(x, y, False, True),
            "fmax": lambda x, y: _wide_extremum(x, y, True, False),
            "fmin": lambda x, y: _wide_extremum(x, y, False, False),
            "nextafter": lambda x, y: x if x == y or x != x else
            (gmpy2.next_above(x) if y > x else gmpy2.next_below(x)),
        }[name]
        with gmpy2.context(precision=self.fmt.precision, round=gmpy2.RoundToNearest):
            v = np.vectorize(fn, otypes=[object])(*a)
        flags = np.zeros(v.shape, dtype=np.uint8) if with_flags else None
        return v, flags


# The methods through which the generic reductions reach a backend's primitives: a subclass
# overriding one of them (RecordingBackend) keeps the generic path.
_PRIMITIVE_HOOKS = ("_apply", "_primitive", "add", "multiply", "fma")


def _hooked(bk) -> bool:
    """Whether bk's class overrides one of _PRIMITIVE_HOOKS."""
    return any(getattr(type(bk), n) is not getattr(EmulatedBackend, n) for n in _PRIMITIVE_HOOKS)


def _broadcast64(arrays):
    """float64 arrays of one broadcast shape.  Only the ones that need it are broadcast:
    numpy marks every output of np.broadcast_arrays as warn-on-write, which numba reports
    (FutureWarning) when such an array reaches a compiled loop."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    return [a if a.shape == shape else np.broadcast_to(a, shape).copy() for a in arrays]


def _ieee_extremum(a, b, is_max, propagate_nan):
    """IEEE 754-2019 maximum/minimum (NaN-propagating) or maximumNumber/minimumNumber
    (NaN-ignoring, fmax/fmin); -0 < +0 in both."""
    a, b = np.broadcast_arrays(a, b)
    if is_max:
        pick_a = (a > b) | ((a == b) & ~np.signbit(a))
    else:
        pick_a = (a < b) | ((a == b) & np.signbit(a))
    v = np.where(pick_a, a, b)
    an, bn = np.isnan(a), np.isnan(b)
    if propagate_nan:
        return np.where(an | bn, np.nan, v)
    return np.where(an, b, np.where(bn, a, v))


def _wide_extremum(x, y, is_max, propagate_nan):
    if x != x or y != y:
        if propagate_nan:
            return x if x != x else y
        return y if x != x else x
    if x == y:
        neg_x = str(x).startswith("-")
        if is_max:
            return y if neg_x else x
        return x if neg_x else y
    return (x if x > y else y) if is_max else (x if x < y else y)


def _next_after(x, y, fmt):
    """C nextafter in the format: the neighbour of x toward y (y itself when x == y), with
    C's overflow and underflow signals."""
    x, y = np.broadcast_arrays(x, y)
    up = formats.next_up(x, fmt)
    down = formats.next_down(x, fmt)
    v = np.where(x == y, y, np.where(y > x, up, down))
    v = np.where(np.isnan(x) | np.isnan(y), np.nan, v)
    flags = np.zeros(v.shape, dtype=np.uint8)
    moved = (x != y) & np.isfinite(x) & ~np.isnan(y)
    flags[moved & np.isinf(v)] = formats.OVERFLOW | formats.INEXACT
    flags[moved & (np.abs(v) < fmt.min_normal)] = formats.UNDERFLOW | formats.INEXACT
    return v, flags

"""native(dtype) -> NativeBackend: numbers are numpy arrays of one dtype, every primitive is what
numpy (or ml_dtypes) actually computes, so the workbench can measure numpy itself.

Nothing here corrects numpy.  ``dtype``: float16 / float32 / float64 (a name, a numpy type or
dtype, or a format name such as ``binary32``), or an ml_dtypes storage type (``bfloat16``,
``float8_e4m3fn``, ... any catalog format ml_dtypes defines).  Values stay in the dtype: an
argument of another dtype (a float64 array, a Python float) is refused with TypeError,
because numpy would promote it silently and the result would no longer be native.

What numpy does, per dtype (numpy 2.x, ml_dtypes 0.5+; pinned by tests/numerics/test_numerics_native.py):

- float32/float64: the C library or numpy's SIMD loops.  +, -, *, /, sqrt are correctly
  rounded (IEEE 754); transcendental functions are within a few ulps, not correctly rounded.
- float16: each ufunc converts to float32, computes there and rounds once to float16.
  For +, -, *, /, sqrt that double rounding is innocuous (2*11 + 2 <= 24); exp & co. are not
  always correctly rounded (shared/FACTS.md).
- ml_dtypes (bfloat16, float8, float6, float4): ml_dtypes registers a loop for every
  primitive used here; each converts to float32, calls the float32 C function and rounds
  once into the dtype (ml_dtypes/_src/ufuncs.h).  That float32 detour IS the native
  behaviour.  A primitive with no loop raises CapabilityError rather than computing elsewhere.

Primitives numpy lacks, and what stands in for them:

- ``rsqrt`` is ``1 / sqrt(x)``: two roundings, what numpy code writes.
- ``fma`` is ``a * b + c``: two roundings (numpy has no fused multiply-add, and numpy code
  writes exactly this).  ``fma_fused`` is False so bounds know.
- ``remainder`` is IEEE 754's (quotient rounded to nearest, ties to even), not np.remainder
  (Python's floored modulo).  It is exact, and is built from exact steps: r = fmod(x, y)
  (exact), then r -/+ |y| where |r| > |y|/2 or at a tie with an odd truncated quotient (exact
  by Sterbenz's lemma).  Every native value is bit-identical to the IEEE remainder.
- ``erf``: numpy has none, so the backend lacks the Erf capability (CapabilityError).

Reductions are numpy's own (``reduction_order = "numpy"``, ``policy_label = "numpy"``;
``policy`` is None because no Policy order describes them):

- ``sum`` (np.sum) along a contiguous axis is pairwise: blocks of at most 128 summed with 8
  interleaved accumulators, halves split at multiples of 8; across a non-contiguous axis it is
  sequential.  float16 accumulates in float32 inside one inner loop and rounds once at the
  end.  ml_dtypes types are summed sequentially, each step rounded into the dtype (from
  ml_dtypes 0.7 a sum of -0s is -0, as IEEE addition gives; before, numpy's identity +0).
- ``prod`` likewise (float16 in float32, rounded once); ``max``/``min`` propagate NaN.
- ``dot`` (np.vecdot) and ``matmul`` (np.matmul): BLAS order for float32/64 (machine
  dependent); float16 multiplies and accumulates in float32 sequentially and rounds once.
  numpy has no vecdot/matmul loop for ml_dtypes types: it promotes the operands to float32,
  BLAS computes in float32 and returns float32, and the backend rounds that once into the
  dtype with astype, as numpy code storing ``(a @ b).astype(bfloat16)`` does.

Conversions: ``asarray`` of numeric arrays is numpy's ``astype`` (float64 -> float16 rounds
once, correctly; ml_dtypes before 0.7 rounds float64 -> bfloat16 through float32, two
roundings, and 0.7 once: native either way, and kept).  Literals (``constant``) and exact numbers (Fraction, int beyond int64, decimal
strings) are rounded once, correctly, with ``formats.round_exact``.  Only round-to-nearest-even
exists natively; numpy's floating-point warnings are suppressed (overflow and invalid are
expected results here); per-element IEEE flags are not observable through numpy.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from roundoff_coverage import formats

from .backend import Backend, CapabilityError
from .primitives import PRIMITIVES

# The numpy ufunc for each primitive that is one ufunc call (numerics.primitives).
UFUNCS = {p.name: p.ufunc for p in PRIMITIVES.values() if p.ufunc is not None}
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less,
           "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal}
PREDICATE = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}

# numpy's own binary floating types, by catalog name.
_NUMPY_TYPES = {"binary16": np.float16, "binary32": np.float32, "binary64": np.float64}


def resolve(spec) -> tuple[np.dtype, formats.BinaryFormat]:
    """(numpy dtype, catalog format) of a dtype spec: numpy float16/32/64 or an ml_dtypes
    floating type, given as a name, format name, numpy type, dtype or BinaryFormat.
    ValueError when no numpy or ml_dtypes type stores that format."""
    if isinstance(spec, (np.dtype, type)):
        try:
            spec = np.dtype(spec).name
        except TypeError as exc:
            raise ValueError(f"native: {spec!r} is not a numpy dtype") from exc
    try:
        fmt = formats.get(spec)
    except formats.FormatError as exc:
        raise ValueError(f"native: {exc}") from exc
    # Match fields, not names: a -sat or -ftz variant is not the ml_dtypes type.
    name = next((n for n, f in formats.CATALOG.items() if f == fmt), None)
    if name in _NUMPY_TYPES:
        return np.dtype(_NUMPY_TYPES[name]), formats.CATALOG[name]
    if name is not None and hasattr(ml_dtypes, name):
        return np.dtype(getattr(ml_dtypes, name)), formats.CATALOG[name]
    raise ValueError(f"native: no numpy or ml_dtypes type stores {fmt.label} (native dtypes: "
                     f"float16, float32, float64 and the ml_dtypes floating types)")


@functools.lru_cache(maxsize=4096)
def _rounded_literal(key, fmt) -> float:
    """The literal rounded once (nearest even) into fmt, as a float64 holding it exactly."""
    return formats.round_exact(key[1], fmt).to_float()


def _literal_key(literal):
    """A hashable, exactly readable form of a literal (numpy scalars widened exactly)."""
    if isinstance(literal, np.integer):
        literal = int(literal)
    elif isinstance(literal, np.generic) and not isinstance(literal, np.bool_):
        literal = float(literal)            # every numpy/ml_dtypes float widens exactly
    return (type(literal), literal)


class NativeBackend(Backend):
    """numpy arrays of ``dtype``; each primitive is numpy's (see the module docstring)."""

    capabilities = frozenset({"Rounding", "InverseTrig", "Cbrt", "NextAfter", "Bits"})
    policy = None                   # no Policy order describes numpy's (see the docstring)
    policy_label = "numpy"          # the results' ``policy`` column for native rows
    reduction_order = "numpy"
    fma_fused = False

    def __init__(self, dtype):
        self.dtype, self.format = resolve(dtype)
        self.name = f"native({self.dtype.name})"
        self.is_ml_dtypes = self.dtype.type not in _NUMPY_TYPES.values()

    def __repr__(self):
        return self.name

    # ----- argument discipline ---------------------------------------------------------------
    def _own(self, x, what):
        a = np.asarray(x)
        if a.dtype != self.dtype:
            raise TypeError(f"{self.name}: {what} got {a.dtype} values; pass this backend's "
                            f"numbers (asarray/constant first): numpy would promote them "
                            f"silently and the result would not be native {self.dtype.name}")
        return a

    def _out(self, out, what):
        out = np.asarray(out)
        if out.dtype != self.dtype:
            raise RuntimeError(f"{self.name}: numpy returned {out.dtype} for {what}; "
                               f"the native result must stay {self.dtype.name}")
        return out

    # ----- elementwise -----------------------------------------------------------------------
    def _apply(self, name, *arrays, with_flags=False):
        if with_flags:
            raise ValueError(f"{self.name}: per-element IEEE flags are not observable through "
                             f"numpy (with_flags=True is for emulated backends)")
        args = [self._own(a, name) for a in arrays]
        with np.errstate(all="ignore"):
            if name == "rsqrt":
                # No rsqrt in numpy: 1 / sqrt(x), two roundings, as numpy code writes it.
                out = np.divide(self._one(), self._ufunc("sqrt")(args[0]))
            elif name == "fma":
                # No fma in numpy: a * b + c, two roundings (fma_fused = False).
                out = np.add(np.multiply(args[0], args[1]), args[2])
            elif name == "remainder":
                out = self._ieee_remainder(*args)
            else:
                out = self._ufunc(name)(*args)
        return self._out(out, name)

    def _ufunc(self, name):
        ufunc = UFUNCS[name]

        def call(*args):
            try:
                out = ufunc(*args)
            except TypeError as exc:        # numpy: no loop for these input types
                raise CapabilityError(f"{self.name}: numpy has no {ufunc.__name__} loop for "
                                      f"{self.dtype.name} ({exc})") from exc
            if np.asarray(out).dtype != self.dtype:
                # A loop found only through a cast computes elsewhere: not this dtype's.
                raise CapabilityError(f"{self.name}: numpy has no {ufunc.__name__} loop for "
                                      f"{self.dtype.name}; it computed in "
                                      f"{np.asarray(out).dtype}")
            return out
        return call

    def _one(self):
        return self.constant(1)

    def _ieee_remainder(self, x, y):
        """IEEE 754 remainder x - n*y, n = x/y rounded to nearest (ties even); exact."""
        r = np.fmod(x, y)                          # exact, |r| < |y|, sign of x
        ar, ay = np.abs(r), np.abs(y)
        # d = |y| - |r| is exact when |r| >= |y|/2 (Sterbenz); when |r| < |y|/2 the rounded d
        # still exceeds |r| (|y|/2 is a format value between them, or y is an odd multiple of
        # the subnormal quantum q below 2**(emin+1), where every multiple of q up to |y| is a
        # value, so d is exact), so comparing |r| with d decides without computing 2|r|,
        # which can overflow (to NaN in fn formats, to max_finite in finite ones).
        d = np.subtract(ay, ar)
        # At a tie x = (q + 1/2) y with q < 2**(p-1), so x - r = q*y and q = (x - r)/y are
        # exact; q is odd iff fmod(q, 2) == 1.
        q = np.abs(np.divide(np.subtract(x, r), y))
        odd = np.equal(np.fmod(q, self.constant(2)), self._one())
        flip = np.greater(ar, d) | (np.equal(ar, d) & odd)
        # sign(r) (|r| - |y|): exact by Sterbenz (|y|/2 <= |r| < |y| wherever flip holds).
        return np.where(flip, np.subtract(r, np.copysign(ay, r)), r)

    # ----- comparisons and predicates ----------------------------------------------------------
    def _compare(self, name, a, b):
        with np.errstate(all="ignore"):
            return np.asarray(COMPARE[name](self._own(a, name), self._own(b, name)))

    def _predicate(self, name, a):
        return np.asarray(PREDICATE[name](self._own(a, name)))

    # ----- conversion --------------------------------------------------------------------------
    def asarray(self, x):
        """Numbers as this dtype: numeric arrays by numpy's astype (native casts, see the
        module docstring); objects (Fraction, big int, decimal string, gmpy2) rounded once,
        correctly, into the format."""
        a = np.asarray(x)
        if a.dtype.kind in "biuf" or a.dtype.type.__module__.startswith("ml_dtypes"):
            with np.errstate(all="ignore"):
                return a.astype(self.dtype)
        flat = [_rounded_literal(_literal_key(v), self.format) for v in a.ravel().tolist()]
        return np.asarray(flat, dtype=np.float64).reshape(a.shape).astype(self.dtype)

    def constant(self, literal, shape=()):
        """``shape`` filled with ``literal`` rounded once (nearest even) into the format.
        numpy code writing ``np.float32(0.1)`` rounds through float64 first; a rule's literal
        is a real number, so it is rounded once, as the protocol asks."""
        value = _rounded_literal(_literal_key(literal), self.format)
        return np.full(shape, value, dtype=np.float64).astype(self.dtype)

    def to_float64(self, a) -> np.ndarray:
        """The values as float64 (exact: every native dtype widens exactly)."""
        return np.asarray(a).astype(np.float64)

    def cast(self, a, fmt, mode=None, with_flags=False):
        """``a`` as the native dtype of ``fmt`` by numpy's astype (one rounding, nearest even;
        ml_dtypes targets go through float32 from float64 sources)."""
        if mode not in (None, "nearest_even"):
            raise ValueError(f"{self.name}: native casts round to nearest even only "
                             f"(got mode {mode!r})")
        if with_flags:
            raise ValueError(f"{self.name}: per-element IEEE flags are not observable "
                             f"through numpy")
        dtype, _ = resolve(fmt)
        with np.errstate(all="ignore"):
            return self._own(a, "cast").astype(dtype)

    # ----- reductions: numpy's own --------------------------------------------------------------
    def sum(self, a, axis=None, keepdims=False):
        return self._np_reduce(np.sum, "sum", a, axis, keepdims)

    def prod(self, a, axis=None, keepdims=False):
        return self._np_reduce(np.prod, "prod", a, axis, keepdims)

    def max(self, a, axis=None, keepdims=False):
        return self._np_reduce(np.max, "max", a, axis, keepdims)

    def min(self, a, axis=None, keepdims=False):
        return self._np_reduce(np.min, "min", a, axis, keepdims)

    def _np_reduce(self, fn, what, a, axis, keepdims):
        a = self._own(a, what)
        if axis is not None and not isinstance(axis, (int, np.integer)):
            axis = tuple(int(ax) for ax in axis)
        with np.errstate(all="ignore"):
            return self._out(fn(a, axis=axis, keepdims=keepdims), what)

    def dot(self, a, b):
        """sum_i a[..., i] * b[..., i] with broadcast leading axes: np.vecdot."""
        return self._contract(np.vecdot, "dot", a, b)

    def matmul(self, a, b):
        """a @ b with numpy's shape rules: np.matmul."""
        return self._contract(np.matmul, "matmul", a, b)

    def _contract(self, fn, what, a, b):
        a, b = self._own(a, what), self._own(b, what)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(a, b))
            if self.is_ml_dtypes and out.dtype == np.float32:
                # numpy promoted to float32 (no ml_dtypes loop): round the float32 result
                # once into the dtype, as numpy code storing it does.
                out = out.astype(self.dtype)
        return self._out(out, what)


def native(dtype) -> NativeBackend:
    """A backend computing exactly as numpy does in ``dtype`` (see the module docstring)."""
    return NativeBackend(dtype)

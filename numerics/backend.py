"""The backend protocol: what a route rule may call, written once against ``xp``.

A backend's numbers live in numpy arrays (float64, or object arrays of mpmath / gmpy2 /
Fraction numbers), so data movement (reshape, transpose, indexing, concatenate) is plain
numpy for every backend.  Arithmetic goes through the backend's primitives only:

- elementwise (``ELEMENTWISE``): Array-API spellings, arrays in, arrays out, broadcasting;
  backends that can report IEEE flags take ``with_flags=True`` and then return
  (values, uint8 flags) (bits in formats.modes);
- ``constant(literal, shape)``: a literal rounded once into the backend's numbers;
- reductions ``sum``, ``prod``, ``max``, ``min`` over axes, ``dot``, ``matmul``, with the
  accumulation order and format of the backend's policy (``numerics.policy``);
- ``cast(a, fmt)``: one rounding into another format.

Each backend declares the capabilities it supplies (the spec's Rounding, Erf, InverseTrig,
Cbrt, NextAfter, Bits); a primitive that needs a missing one raises ``CapabilityError``
naming both, never an approximation.
"""

from __future__ import annotations

import numpy as np

from . import tensor_cores
from .policy import Policy, block_size
from .primitives import (BINARY, CAPABILITIES, ELEMENTWISE, EXACT, NEEDS, TERNARY, UNARY,
                         named)

__all__ = ["BINARY", "CAPABILITIES", "ELEMENTWISE", "NEEDS", "TERNARY", "UNARY",
           "EXACT_PRIMITIVES", "COMPARISONS", "PREDICATES", "Backend", "CapabilityError"]

# The primitives' names, arities, capabilities and kinds: numerics/primitives.py declares
# each once.  round is ties-to-even (torch.round); fmod truncates (C fmod), remainder is
# IEEE's (quotient rounded to nearest).
EXACT_PRIMITIVES = named(EXACT)
COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
PREDICATES = ("isnan", "isinf", "isfinite")


class CapabilityError(LookupError):
    """A primitive the backend does not supply; the message names both."""


class Backend:
    """Base of every backend.  Subclasses set ``name``, ``capabilities`` and ``policy`` and
    implement ``_apply(name, *arrays)`` for the elementwise primitives, ``asarray``,
    ``constant``, ``to_float64``, ``_compare``, ``_predicate`` and ``cast``.  Reductions, dot
    and matmul are built here from the primitives and the policy's order."""

    name = "backend"
    capabilities: frozenset = frozenset()
    policy: Policy | None = None
    # True where dot's result depends only on the multiset of its products (exact sums):
    # a caller may then reorder the terms and add or drop exact zeros.
    exact_dot: bool = False
    # True where a rounding's random draws follow the sequence of calls and the elements'
    # places in each (stochastic rounding): splitting one call into several changes them.
    draws_follow_calls: bool = False

    # ----- capability gate -----------------------------------------------------------------
    def supports(self, primitive: str) -> bool:
        need = NEEDS.get(primitive)
        return need is None or need in self.capabilities

    def _require(self, primitive: str):
        need = NEEDS.get(primitive)
        if need is not None and need not in self.capabilities:
            raise CapabilityError(f"{self.name}: {primitive} needs capability {need}, which this "
                                  f"backend does not supply")

    def _apply(self, name, *arrays):
        raise NotImplementedError(f"{type(self).__name__} must implement _apply")

    # ----- conversion ---------------------------------------------------------------------
    def asarray(self, x):
        """Numbers (float64 arrays, ints, Fractions...) as this backend's numbers, each
        rounded once where the backend rounds."""
        raise NotImplementedError

    def constant(self, literal, shape=()):
        """An array of ``shape`` filled with ``literal`` (int, Fraction, decimal string or
        float) rounded once into this backend's numbers."""
        raise NotImplementedError

    def to_float64(self, a) -> np.ndarray:
        raise NotImplementedError

    def zeros_like(self, a):
        return self.constant(0, np.shape(a))

    def ones_like(self, a):
        return self.constant(1, np.shape(a))

    def full_like(self, a, literal):
        return self.constant(literal, np.shape(a))

    def where(self, cond, a, b):
        return np.where(cond, a, b)

    # ----- comparisons and predicates (numpy bool arrays) ------------------------------------
    def _compare(self, name, a, b):
        raise NotImplementedError

    def _predicate(self, name, a):
        raise NotImplementedError

    # ----- reductions ------------------------------------------------------------------------
    def accumulator(self) -> "Backend":
        """The backend that holds running sums (the policy's accumulation format)."""
        return self

    def to_storage(self, a, source: "Backend"):
        """Values of ``source`` (e.g. the accumulator) rounded once into this backend."""
        return a

    def sum(self, a, axis=None, keepdims=False):
        return self._reduce("add", a, axis, keepdims)

    def prod(self, a, axis=None, keepdims=False):
        return self._reduce("multiply", a, axis, keepdims)

    def max(self, a, axis=None, keepdims=False):
        return self._reduce("maximum", a, axis, keepdims, exact=True)

    def min(self, a, axis=None, keepdims=False):
        return self._reduce("minimum", a, axis, keepdims, exact=True)

    def _reduce(self, op, a, axis, keepdims, exact=False):
        a = np.asarray(a)
        axes = tuple(range(a.ndim)) if axis is None else \
            tuple(ax % a.ndim for ax in np.atleast_1d(axis))
        if len(set(axes)) != len(axes):
            raise ValueError(f"{self.name}: reduction axes must be distinct (got {axis})")
        keep = [ax for ax in range(a.ndim) if ax not in axes]
        moved = np.transpose(a, keep + list(axes))
        lead = moved.shape[:len(keep)]
        flat = moved.reshape(lead + (-1,))
        if flat.shape[-1] == 0:
            raise ValueError(f"{self.name}: reduction over an empty axis")
        if exact:
            out = self._fold(op, flat, self)
        else:
            acc = self.accumulator()
            out = self.to_storage(self._fold(op, acc.to_storage(flat, self), acc), acc)
        if keepdims:
            shape = [1 if ax in axes else n for ax, n in enumerate(a.shape)]
            out = np.reshape(out, shape)
        return out

    def _fold(self, op, x, bk: "Backend"):
        """Combine x along its last axis with bk's primitive ``op`` in the policy's order."""
        f = getattr(bk, op)
        order = self.policy.order if self.policy is not None else "sequential"
        k = block_size(order, x.shape[-1])
        if order == "pairwise":
            # Level by level: adjacent pairs (0,1), (2,3), ...; an odd last element moves up
            # unchanged.  Depth ceil(log2 n), the exponent of the pairwise bound.
            while x.shape[-1] > 1:
                n = x.shape[-1]
                paired = f(x[..., 0:n - 1:2], x[..., 1:n:2])
                x = np.concatenate([paired, x[..., n - 1:]], axis=-1) if n % 2 else paired
            return x[..., 0]
        if k is not None and x.shape[-1] > k:
            n = x.shape[-1]
            blocks = [self._sequential(f, x[..., i:min(i + k, n)]) for i in range(0, n, k)]
            return self._sequential(f, np.stack(blocks, axis=-1))
        return self._sequential(f, x)

    @staticmethod
    def _sequential(f, x):
        acc = x[..., 0]
        for i in range(1, x.shape[-1]):
            acc = f(acc, x[..., i])
        return acc

    def scan(self, op, x, axis=-1, reverse=False):
        """Inclusive prefix combination of ``x`` along ``axis`` with the accumulator's ``op``
        (add: cumsum, multiply: cumprod): y[i] = x[0] op ... op x[i], from the last element
        back when ``reverse`` (y[i] = x[i] op ... op x[n-1]).  The running value is held in
        the accumulation format and each prefix rounded once into storage; an empty axis
        gives a copy of ``x``."""
        if op not in ("add", "multiply"):
            raise ValueError(f"{self.name}: scan op must be add or multiply (got {op!r})")
        x = np.asarray(x)
        if x.shape[axis] == 0:
            return x.copy()
        acc = self.accumulator()
        w = np.moveaxis(acc.to_storage(x, self), axis, -1)
        return np.moveaxis(self.to_storage(self._prefix(op, w, acc, reverse), acc), -1, axis)

    def _prefix(self, op, w, bk: "Backend", reverse):
        """The prefixes of ``w`` along its last axis (n >= 1) with bk's primitive ``op``, one
        call per step in order (from the end when ``reverse``): an array of w's shape."""
        f = getattr(bk, op)
        n = w.shape[-1]
        out, run = [None] * n, None
        for i in (range(n - 1, -1, -1) if reverse else range(n)):
            run = w[..., i] if run is None else f(run, w[..., i])
            out[i] = run
        return np.stack(out, -1)

    @property
    def policy_label(self) -> str:
        """The policy's name for results (``implementation_defined`` where the backend
        follows its library's own order, as native numpy does)."""
        label = getattr(self.policy, "label", None)
        return label if label else "implementation_defined"

    def dot(self, a, b):
        """sum_i a[..., i] * b[..., i] (broadcast leading axes), products and sums under the
        policy: fma=True folds each product into the running sum with one rounding."""
        a, b = np.asarray(a), np.asarray(b)
        if a.shape[-1:] != b.shape[-1:]:
            raise ValueError(f"{self.name}: dot needs equal last dimensions (got {a.shape} and "
                             f"{b.shape})")
        a, b = np.broadcast_arrays(a, b)
        return self._contract(a, b)

    def matmul(self, a, b):
        """a @ b with numpy's matmul shape rules (batch axes broadcast)."""
        a, b = np.asarray(a), np.asarray(b)
        squeeze_a, squeeze_b = a.ndim == 1, b.ndim == 1
        if squeeze_a:
            a = a[None, :]
        if squeeze_b:
            b = b[:, None]
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"{self.name}: matmul inner dimensions differ "
                             f"({a.shape[-1]} and {b.shape[-2]})")
        # (..., m, 1, k) against (..., 1, n, k): a dot product per output element.
        left = a[..., :, None, :]
        right = np.swapaxes(b, -1, -2)[..., None, :, :]
        left, right = np.broadcast_arrays(left, right)
        out = self._contract(left, right)
        if squeeze_a:
            out = out[..., 0, :]
        if squeeze_b:
            out = out[..., 0]
        return out

    def _contract(self, a, b):
        acc = self.accumulator()
        if self.policy is not None and getattr(self.policy, "hardware", False):
            return self._hardware_contract(a, b, acc)
        if a.shape[-1] == 0:                   # an empty inner dimension: the empty sum, +0
            return self.to_storage(acc.asarray(np.zeros(a.shape[:-1])), acc)
        a, b = acc.to_storage(a, self), acc.to_storage(b, self)
        fused = self.policy is not None and self.policy.fma
        order = self.policy.order if self.policy is not None else "sequential"
        if fused:            # Policy refuses fma with the pairwise order
            k = block_size(order, a.shape[-1]) or a.shape[-1]
            chunks = []
            for i in range(0, a.shape[-1], k):
                run = acc.multiply(a[..., i], b[..., i])
                for j in range(i + 1, min(i + k, a.shape[-1])):
                    run = acc.fma(a[..., j], b[..., j], run)
                chunks.append(run)
            total = self._sequential(acc.add, np.stack(chunks, axis=-1))
        else:
            total = self._fold("add", acc.multiply(a, b), acc)
        return self.to_storage(total, acc)

    # ----- how accelerators accumulate (Policy.promote, Policy.fixed_point) -------------------
    def sibling(self, fmt) -> "Backend":
        """A backend of this kind in format ``fmt`` under the same mode (strict policy): the
        narrow accumulator of two-level accumulation."""
        raise NotImplementedError(f"{self.name}: no backend of another format")

    def _hardware_contract(self, a, b, acc):
        p = self.policy
        if p.tensor_core is not None:
            return self.to_storage(self._tensor_core_dot(a, b, acc), acc)
        if p.inner is not None:
            # Two-level: runs of ``promote`` products accumulated in the narrow format (each
            # product rounded into it, then added: FMA when the policy fuses), each run's sum
            # rounded into the accumulator and added to the running total there.
            inner = self.sibling(p.inner)
            x, y = inner.to_storage(a, self), inner.to_storage(b, self)
            total = None
            for i in range(0, a.shape[-1], p.promote):
                run = inner.multiply(x[..., i], y[..., i])
                for j in range(i + 1, min(i + p.promote, a.shape[-1])):
                    run = inner.fma(x[..., j], y[..., j], run) if p.fma else \
                        inner.add(run, inner.multiply(x[..., j], y[..., j]))
                run = acc.to_storage(run, inner)
                total = run if total is None else acc.add(total, run)
            if total is None:                  # an empty inner dimension: the empty sum, +0
                total = acc.asarray(np.zeros(a.shape[:-1]))
            return self.to_storage(total, acc)
        return self.to_storage(self._fixed_point_dot(a, b, acc), acc)

    def _tensor_core_dot(self, a, b, acc):
        """Policy.tensor_core: a GPU's matrix unit (numerics.tensor_cores) on the operands as
        it reads them, each output's products in chained block FMAs from c = +0; the
        binary32 results in ``acc``'s numbers."""
        core = tensor_cores.tensor_core(self.policy.tensor_core)
        x, fin = tensor_cores.operands(core, self.fmt, self.to_float64(a))
        y, _ = tensor_cores.operands(core, self.fmt, self.to_float64(b))
        x, y = np.broadcast_arrays(x, y)
        total = np.zeros(x.shape[:-1])         # an empty inner dimension: the empty sum, +0
        if x.shape[-1] and total.size:
            k = x.shape[-1]
            total = core.fma(x.reshape(-1, k), y.reshape(-1, k), total.reshape(-1),
                             fin).reshape(total.shape)
        return acc.asarray(total)

    def _fixed_point_dot(self, a, b, acc):
        """Policy.fixed_point on float64 values: the products exact in binary64 (storage
        precision p with 2p <= 53), each block's terms (the running sum and ``block``
        products) truncated toward zero to multiples of 2**(e - B), e the largest exponent
        among them, summed (exact: fewer than 4097 terms of at most B + 1 bits) and rounded
        once into the accumulator."""
        p = self.policy
        if 2 * self.fmt.precision > 53 or not self.fmt.fits_binary64:
            raise ValueError(f"{self.name}: fixed_point needs products exact in binary64 "
                             f"(storage precision at most 26 bits; got {self.fmt.label})")
        x = np.asarray(self.to_float64(a), dtype=np.float64)
        y = np.asarray(self.to_float64(b), dtype=np.float64)
        x, y = np.broadcast_arrays(x, y)
        with np.errstate(invalid="ignore", over="ignore"):
            prods = x * y
        total = np.zeros(prods.shape[:-1])
        for i in range(0, prods.shape[-1], p.block):
            terms = np.concatenate([total[..., None], prods[..., i:i + p.block]], axis=-1)
            total = acc.to_storage_exact(_aligned_sum(terms, p.fixed_point))
        return total

    def to_storage_exact(self, v):
        """float64 values (exact reals) rounded once into this backend's format."""
        raise NotImplementedError(f"{self.name}: no rounding of exact binary64 values")

    # ----- casts ---------------------------------------------------------------------------
    def cast(self, a, fmt, mode=None, with_flags=False):
        raise NotImplementedError


def _elementwise(name, arity):
    def method(self, *args, **kwargs):
        if len(args) != arity:
            raise TypeError(f"{name} takes {arity} arrays ({len(args)} given)")
        self._require(name)
        return self._apply(name, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"Elementwise {name} ({arity} arrays, broadcasting)."
    return method


def _comparison(name):
    def method(self, a, b):
        return self._compare(name, a, b)
    method.__name__ = name
    return method


def _predicate(name):
    def method(self, a):
        return self._predicate(name, a)
    method.__name__ = name
    return method


for _n in UNARY:
    setattr(Backend, _n, _elementwise(_n, 1))
for _n in BINARY:
    setattr(Backend, _n, _elementwise(_n, 2))
for _n in TERNARY:
    setattr(Backend, _n, _elementwise(_n, 3))
for _n in COMPARISONS:
    setattr(Backend, _n, _comparison(_n))
for _n in PREDICATES:
    setattr(Backend, _n, _predicate(_n))


def _aligned_sum(terms, bits):
    """Sum along the last axis of float64 ``terms`` after truncating each toward zero to a
    multiple of 2**(e - bits), e = floor(log2) of the largest |term| of its row: the exact
    sum of the truncated terms (every one an integer multiple of that quantum of magnitude
    below 2**(bits + 1), so binary64 adds them exactly in any order).  Rows holding an inf or
    NaN give their IEEE sum; zeros add as IEEE adds them (an exact zero sum is +0 under rounding to
    nearest, IEEE 754 6.3: the running sum starts at +0)."""
    big = np.max(np.abs(terms), axis=-1)
    finite = np.isfinite(big)
    safe = np.where(finite & (big > 0), big, 1.0)
    e = np.frexp(safe)[1] - 1
    # The quantum 2**(e - bits) may be below binary64's least subnormal: then every term
    # (a multiple of 2**-1074) is already a multiple of it and truncation keeps it.
    q = np.ldexp(1.0, np.maximum(e - bits, -1074))[..., None]
    with np.errstate(invalid="ignore", over="ignore"):
        kept = np.trunc(terms / q) * q
        out = np.sum(kept, axis=-1)
        raw = np.sum(terms, axis=-1)
    return np.where(finite, out, raw)

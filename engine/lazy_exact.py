"""Exact values made when read: a LazyExact holds a Compact (numerics/resolve.py: hi + lo,
two binary64 numbers a value) and gives its exact values as Python floats (lo 0) or mpf
(double_double.exact_sums) one at a time; a model run's rows read the stand-ins and only a
few exact values (the worst element, zero errors to confirm), so a trace's mpf objects (~1
us each, a million in a small transformer block) are never made.  ``flat_exact`` and
``joined_exact`` are the row builder's flattening and joining, lazy where they can be;
``picked`` and ``joined`` select and join flat arrays (binary64 or LazyExact) without a
copy where nothing is left out or there is one part."""

from __future__ import annotations

import mpmath
import numpy as np

from roundoff_coverage.numerics.double_double import exact_sums
from roundoff_coverage.numerics.resolve import Compact

from .reference import DD_BITS

# The context of the mpf values made from double-double pairs: exact at its precision, so
# arithmetic a consumer does on them (mpf operators) rounds no lower than double-double.
_DD_CTX = mpmath.MPContext()
_DD_CTX.prec = DD_BITS


class LazyExact:
    """The exact values hi + lo of a Compact as an array of numbers made when read (module
    docstring): indexing by masks and index arrays, reshape and ``concatenate`` stay lazy;
    an element is a float or an mpf; numpy's conversion (``np.asarray``) makes every
    value, once."""

    __slots__ = ("compact", "_made")
    dtype = np.dtype(object)

    def __init__(self, c: Compact):
        self.compact, self._made = c, None

    shape = property(lambda self: self.compact.hi.shape)
    ndim = property(lambda self: self.compact.hi.ndim)
    size = property(lambda self: self.compact.hi.size)

    def __len__(self):
        return len(self.compact.hi)

    def __array__(self, dtype=None, copy=None):
        if self._made is None:
            self._made = exact_sums(self.compact.hi, self.compact.lo, _DD_CTX)
        return self._made if dtype in (None, object) else self._made.astype(dtype)

    def __getitem__(self, key):
        h, lo = self.compact.hi[key], self.compact.lo[key]
        if np.ndim(h) == 0:
            return float(h) if lo == 0 else exact_sums(np.array([h]), np.array([lo]),
                                                       _DD_CTX)[0]
        return LazyExact(Compact(h, lo))

    def reshape(self, *shape):
        return LazyExact(Compact(self.compact.hi.reshape(*shape),
                                 self.compact.lo.reshape(*shape)))

    def tolist(self):
        return np.asarray(self).tolist()

    @staticmethod
    def concatenate(parts):
        """The parts (LazyExact, flat) joined, lazily (the part itself where there is one)."""
        if len(parts) == 1:
            return parts[0]
        return LazyExact(Compact(np.concatenate([p.compact.hi for p in parts]),
                                 np.concatenate([p.compact.lo for p in parts])))


def flat_exact(a):
    """Exact values flat: a LazyExact stays lazy, anything else an array (np.asarray)."""
    return a.reshape(-1) if isinstance(a, LazyExact) else np.asarray(a).reshape(-1)


def joined_exact(parts):
    """Flat exact arrays (flat_exact) joined; lazily where every part is lazy."""
    if parts and all(isinstance(p, LazyExact) for p in parts):
        return LazyExact.concatenate(parts)
    return np.concatenate([np.asarray(p, dtype=object) for p in parts])


def picked(a, mask):
    """``a[mask]``, ``a`` itself where the mask keeps every element (a row's arrays are
    read, never written: no copy of a tensor of 38 M elements for nothing)."""
    return a if mask.all() else a[mask]


def joined(parts):
    """Flat arrays joined; the one array itself where there is one (a sample)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)

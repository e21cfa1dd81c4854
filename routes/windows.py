"""Window geometry: the index arrays of convolution and pooling windows, computed from the
operators' attributes (shapes, kernel, stride, dilation, padding) and never from values.

``windows`` gives, for each output window and kernel offset, the flat index of the input
entry it reads; ``inverse`` turns that around (for each input position, the (window, offset)
pairs reading it, in window order, padded with a sentinel to a common count M);
``scatter_classes`` groups the positions whose pairs use the same offsets in the same slots,
so that an adjoint scatter (conv's input gradient, convTranspose's forward) is one matrix
product per class with one copy of the weights (routes/families/conv_pool.py), or, for
backends whose dot products do not depend on the order of their terms, makes one class
whose slots are the K offsets, each reading the one window that reads the position there
(or the zero slot).
The families and kernels/conv.py's CUDA kernels read the same arrays.
"""

from __future__ import annotations

import collections
import functools
import itertools
from dataclasses import dataclass

import numpy as np


def grid(dims):
    """Every index tuple of ``dims`` in row-major order (pure Python)."""
    return list(itertools.product(*(range(n) for n in dims)))


def grid_array(dims) -> np.ndarray:
    """grid(dims) as an int64 array (prod(dims), len(dims))."""
    if not dims:
        return np.zeros((1, 0), dtype=np.int64)
    return np.indices(dims, dtype=np.int64).reshape(len(dims), -1).T


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def windows(in_dims, out_dims, kernel, stride, dilation, padding):
    """(idx, valid) of shape (O, K): for output window o and kernel offset k (row-major), the
    flat index into ``in_dims`` of o*stride + k*dilation - padding and whether it is inside;
    an outside entry's index is the window's first inside one (0 when none).  Read-only
    arrays, cached: every sweep of a model asks again for the same geometries."""
    return _windows(*(tuple(int(v) for v in t) for t in
                      (in_dims, out_dims, kernel, stride, dilation, padding)))


@functools.lru_cache(maxsize=128)
def _windows(in_dims, out_dims, kernel, stride, dilation, padding):
    outs, offs = grid_array(out_dims), grid_array(kernel)
    flat = np.zeros((len(outs), len(offs)), dtype=np.int64)
    valid = np.ones((len(outs), len(offs)), dtype=bool)
    for a, n in enumerate(in_dims):
        q = (outs[:, a, None] * stride[a] + offs[None, :, a] * dilation[a] - padding[a])
        valid &= (q >= 0) & (q < n)
        flat = flat * n + q
    first = np.zeros(len(outs), dtype=np.int64)
    if len(offs):
        seen = valid.any(axis=1)
        first[seen] = flat[np.arange(len(outs)), valid.argmax(axis=1)][seen]
    idx = np.where(valid, flat, first[:, None])
    return _frozen(idx), _frozen(valid)


def inverse(idx, valid, size):
    """(io, ik) of shape (size, M): for each input position, the (window, offset) pairs whose
    index is that position, in window order, padded with the sentinel (O, K); M >= 1."""
    valid = np.asarray(valid, dtype=bool)
    n_out, n_off = valid.shape
    o, k = np.nonzero(valid)                     # row-major: by window, then offset
    p = np.asarray(idx, dtype=np.int64)[o, k]
    by = np.argsort(p, kind="stable")            # each position's pairs in window order
    o, k, p = o[by], k[by], p[by]
    counts = np.bincount(p, minlength=size)
    m = max(1, int(counts.max(initial=0)))
    slot = np.arange(len(p)) - np.repeat(np.cumsum(counts) - counts, counts)
    io = np.full((size, m), n_out, dtype=np.int64)
    ik = np.full((size, m), n_off, dtype=np.int64)
    io[p, slot], ik[p, slot] = o, k
    return _frozen(io), _frozen(ik)


def inside(dims, padding, inner) -> np.ndarray:
    """The flat indices into ``dims`` of the region padding[a] <= q[a] < padding[a] +
    inner[a] on every axis, row-major: what is left once the padding is cropped."""
    if not len(dims):
        return np.zeros(1, dtype=np.int64)
    at = grid_array(tuple(inner)) + np.asarray(padding, dtype=np.int64)
    return np.ravel_multi_index(tuple(at.T), tuple(dims))


@dataclass(frozen=True)
class ScatterClass:
    """Positions of an adjoint scatter whose dot products read the same offsets in the same
    slots: ``io`` (P, M), the window each position's slot reads (O: the zero slot);
    ``pattern`` (M,), the offset of each slot (K: the zero slot); ``slots``: O + 1."""
    io: np.ndarray
    pattern: np.ndarray
    slots: int

    def __len__(self):
        return len(self.io)

    def columns(self, lo: int, hi: int, channels: int) -> np.ndarray:
        """(hi - lo, Co*M): for positions lo..hi-1 of the class, the flat index of every
        (co, slot) term's cotangent in the (Co, O + 1) cotangents whose last entry per
        channel is the zero slot."""
        at = (np.arange(channels) * self.slots)[None, :, None] + self.io[lo:hi, None, :]
        return at.reshape(len(at), -1)


_PLANS: collections.OrderedDict = collections.OrderedDict()
_PLANS_KEPT = 64


def scatter_classes(idx, valid, size, keep, by_offset=False) -> tuple[list, np.ndarray]:
    """(the ScatterClass of the positions ``keep`` (flat indices into ``size``), the
    permutation that puts the classes' positions, concatenated, back in keep's order).
    ``by_offset``: one class whose slots are the K offsets in order, each reading the one
    window whose offset k reads the position (at most one: idx[o, k] = p fixes o) or the
    zero slot, for dot products that do not depend on the order of their terms.  Kept for
    the read-only arrays of ``windows`` (every sweep of a model asks again): the entry holds
    them, so their ids name them while it lives."""
    keep = np.asarray(keep, dtype=np.int64)
    if idx.flags.writeable or valid.flags.writeable:
        return _scatter_classes(idx, valid, size, keep, by_offset)
    key = (id(idx), id(valid), size, keep.tobytes(), by_offset)
    hit = _PLANS.get(key)
    if hit is None:
        hit = _PLANS[key] = (idx, valid, _scatter_classes(idx, valid, size, keep, by_offset))
        if len(_PLANS) > _PLANS_KEPT:
            _PLANS.popitem(last=False)
    _PLANS.move_to_end(key)
    return hit[2]


def _scatter_classes(idx, valid, size, keep, by_offset):
    n_out, k = idx.shape
    if by_offset:
        o, kk = np.nonzero(valid)
        reads = np.full((size, k), n_out, dtype=np.int64)
        reads[idx[o, kk], kk] = o
        return ([ScatterClass(_frozen(reads[keep]), _frozen(np.arange(k)), n_out + 1)],
                _frozen(np.arange(len(keep))))
    io, ik = inverse(idx, valid, size)
    io, ik = io[keep], ik[keep]
    patterns, cls = np.unique(ik, axis=0, return_inverse=True)
    cls = np.reshape(cls, -1)
    order = np.argsort(cls, kind="stable")
    bounds = np.searchsorted(cls[order], np.arange(len(patterns) + 1))
    return ([ScatterClass(_frozen(io[order[bounds[c]:bounds[c + 1]]]), _frozen(pattern.copy()),
                          n_out + 1) for c, pattern in enumerate(patterns)],
            _frozen(np.argsort(order)))

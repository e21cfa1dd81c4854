"""routes/windows.py: the window index arrays against their definitions enumerated here
position by position (loops over every window, offset and input position), and the scatter
classes: a partition of the kept positions whose every member reads what the definition
says, in window order, padded to M."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from roundoff_coverage.routes import windows as W


def _geometries(count, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        nd = int(rng.integers(1, 3))
        dims = tuple(int(v) for v in rng.integers(1, 8, nd))
        kernel = tuple(int(v) for v in rng.integers(1, 4, nd))
        stride = tuple(int(v) for v in rng.integers(1, 4, nd))
        dilation = tuple(int(v) for v in rng.integers(1, 3, nd))
        padding = tuple(int(v) for v in rng.integers(0, 3, nd))
        outs = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, s, d, p in
                     zip(dims, kernel, stride, dilation, padding))
        if min(outs) >= 1:
            out.append((dims, outs, kernel, stride, dilation, padding))
    return out


def _flat(q, dims):
    return int(np.ravel_multi_index(q, dims)) if dims else 0


def _pairs_by_position(idx, valid, size):
    """{position: [(o, k) in window order]} from (idx, valid), by loops."""
    pairs = {p: [] for p in range(size)}
    for o in range(idx.shape[0]):
        for k in range(idx.shape[1]):
            if valid[o, k]:
                pairs[int(idx[o, k])].append((o, k))
    return pairs


@pytest.mark.parametrize("geometry", _geometries(40))
def test_windows_and_inverse_follow_their_definitions(geometry):
    dims, outs, kernel, stride, dilation, padding = geometry
    idx, valid = W.windows(dims, outs, kernel, stride, dilation, padding)
    assert not idx.flags.writeable and not valid.flags.writeable
    for o, oq in enumerate(itertools.product(*(range(n) for n in outs))):
        first = None
        for k, kq in enumerate(itertools.product(*(range(n) for n in kernel))):
            q = tuple(a * s + b * d - p for a, b, s, d, p in
                      zip(oq, kq, stride, dilation, padding))
            inside = all(0 <= a < n for a, n in zip(q, dims))
            assert valid[o, k] == inside
            if inside:
                assert idx[o, k] == _flat(q, dims)
                first = idx[o, k] if first is None else first
        assert all(idx[o, k] == (0 if first is None else first)
                   for k in range(idx.shape[1]) if not valid[o, k])
    size = int(np.prod(dims))
    io, ik = W.inverse(idx, valid, size)
    pairs = _pairs_by_position(idx, valid, size)
    m = max([1] + [len(v) for v in pairs.values()])
    assert io.shape == ik.shape == (size, m)
    for p, got in pairs.items():
        padded = got + [(idx.shape[0], idx.shape[1])] * (m - len(got))
        assert list(zip(io[p].tolist(), ik[p].tolist())) == padded


@pytest.mark.parametrize("geometry", _geometries(30, seed=5))
def test_scatter_classes_partition_the_kept_positions(geometry):
    dims, outs, kernel, stride, dilation, _ = geometry
    padded = tuple(n + 2 for n in dims)
    outs = tuple((n - d * (k - 1) - 1) // s + 1 for n, k, s, d in
                 zip(padded, kernel, stride, dilation))
    if min(outs) < 1:
        return
    idx, valid = W.windows(padded, outs, kernel, stride, dilation, (0,) * len(dims))
    size, (n_out, n_off) = int(np.prod(padded)), idx.shape
    keep = W.inside(padded, (1,) * len(dims), dims)
    assert keep.tolist() == [_flat(tuple(a + 1 for a in q), padded)
                             for q in itertools.product(*(range(n) for n in dims))]
    pairs = _pairs_by_position(idx, valid, size)
    m = max([1] + [len(v) for v in pairs.values()])
    channels = 2
    for by_offset in (False, True):
        classes, back = W.scatter_classes(idx, valid, size, keep, by_offset)
        rows = np.concatenate([c.io for c in classes])[back]
        patterns = np.concatenate([np.broadcast_to(c.pattern, c.io.shape)
                                   for c in classes])[back]
        assert len(rows) == len(keep)
        for p, row, pattern in zip(keep, rows, patterns):
            read = [(int(o), int(k)) for o, k in zip(row, pattern)
                    if o != n_out and k != n_off]
            if by_offset:                 # every offset in order; the window reading p there
                assert pattern.tolist() == list(range(n_off))
                assert sorted(read) == sorted(pairs[int(p)])
                assert all(idx[o, k] == p for o, k in read)
            else:                         # the pairs in window order, then the zero slots
                assert read == pairs[int(p)]
                assert len(row) == m and all(k == n_off for k in pattern[len(read):])
                assert all(o == n_out for o in row[len(read):])
        for c in classes:
            cols = c.columns(0, len(c), channels)
            assert cols.shape == (len(c), channels * len(c.pattern))
            assert (cols.reshape(len(c), channels, -1) ==
                    np.arange(channels)[None, :, None] * (n_out + 1) + c.io[:, None, :]).all()

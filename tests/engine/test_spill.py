"""engine/spill.py: arrays moved to an unlinked temporary file and read back through
read-only maps, the same bits, out of the process's allocations."""

from __future__ import annotations

import hashlib
import os
import sys
import tracemalloc

import numpy as np
import pytest

from roundoff_coverage.engine import spill


def _digest(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_spilled_arrays_keep_their_bits_shape_and_dtype_and_are_read_only(tmp_path):
    rng = np.random.default_rng(0)
    big = rng.standard_normal((300, 700))                     # 1.6 MiB
    arrays = [big, big.T,                                     # a view, not contiguous
              rng.integers(-5, 5, (1 << 18,), dtype=np.int64),
              (rng.standard_normal(1 << 15) > 0),             # bool, 32 KiB: kept
              rng.standard_normal(10).astype(np.float32),     # small: kept as it is
              np.array([1, "a"], dtype=object), big]          # object: kept; big again
    want = [(_digest(a), a.shape, a.dtype) for a in arrays]
    s = spill.Spill(tmp_path)
    assert os.listdir(tmp_path) == []                         # unlinked at once
    out = s.put(arrays)
    assert [(_digest(a), a.shape, a.dtype) for a in out] == want
    assert out[6] is out[0]                                   # one copy of one array
    assert all(out[i] is arrays[i] for i in (3, 4, 5))
    assert all(not out[i].flags.writeable for i in (0, 1, 2))
    with pytest.raises(ValueError):
        out[0][0, 0] = 1.0
    # A second batch maps after the first; both stay readable after a release.
    more = s.put([rng.standard_normal(1 << 18)])
    s.release()
    assert [(_digest(a), a.shape, a.dtype) for a in out] == want
    assert more[0].shape == (1 << 18,) and np.isfinite(more[0]).all()
    assert s.written >= 2 * big.nbytes + 2 * (1 << 21)            # big, big.T, two 2 MiB


def test_a_spilled_array_leaves_the_process_s_allocations(tmp_path):
    tracemalloc.start()
    try:
        a = np.random.default_rng(1).standard_normal(1 << 23)    # 64 MiB
        digest = _digest(a)
        before = tracemalloc.get_traced_memory()[0]
        (b,) = spill.Spill(tmp_path).put([a])
        del a
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert before - after > 60 << 20
    assert _digest(b) == digest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm")
def _resident() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_release_gives_the_read_pages_back(tmp_path):
    s = spill.Spill(tmp_path)
    (b,) = s.put([np.ones(1 << 23)])                         # 64 MiB
    assert float(b.sum()) == 1 << 23                          # every page read
    read = _resident()
    s.release()
    assert read - _resident() > 48 << 20
    assert float(b.sum()) == 1 << 23                          # read again from the file


def test_done_gives_back_the_pages_of_the_arrays_named_only(tmp_path):
    s = spill.Spill(tmp_path)
    (a,) = s.put([np.ones(1 << 23)])                         # 64 MiB, one map
    (b,) = s.put([np.full(1 << 23, 2.0)])                    # another
    assert float(a.sum()) == 1 << 23 and float(b.sum()) == 1 << 24
    read = _resident()
    s.done([a[::2], np.ones(3), None])                     # a view of a's map
    dropped = read - _resident()
    assert 48 << 20 < dropped < 80 << 20                      # a's pages, not b's
    assert float(a.sum()) == 1 << 23 and float(b.sum()) == 1 << 24


def test_nbytes_counts_each_numeric_array_once():
    a = np.zeros(100)
    assert spill.nbytes([a, a, np.zeros(3, np.int8), np.array([None]), 3.0]) == 803


def test_the_policy_spills_past_its_room_and_an_array_of_the_file_is_not_written_again():
    over = spill.Over(room=10 << 20)
    over.release()                                             # nothing spilled: nothing to do
    assert over.need(10 << 20) is None and over.file is None
    file = over.need((10 << 20) + 1)
    assert file is not None and over.need(0) is file           # from then on
    (a,) = file.put([np.arange(1 << 18, dtype=np.float64)])
    written = file.written
    view = a.reshape(512, 512)[::2]
    (b,) = file.put([view])
    assert b is view and file.written == written
    over.release()
    assert float(b[-1, -1]) == (1 << 18) - 512 - 1


class _Full:
    """A spill file on a disk with no room: writes fail as ENOSPC does."""

    def __init__(self, file):
        self.file = file

    def __getattr__(self, name):
        return getattr(self.file, name)

    def write(self, data):
        raise OSError(28, "No space left on device")


def test_arrays_that_cannot_be_written_stay_in_memory(tmp_path):
    s = spill.Spill(tmp_path)
    (kept,) = s.put([np.ones(1 << 18)])
    s._file = _Full(s._file)
    a = np.arange(1 << 18, dtype=np.float64)
    out = s.put([a, kept])
    assert out[0] is a and out[1] is kept and a.flags.writeable
    assert s._file.seek(0, os.SEEK_END) == 1 << 21                 # nothing half-written
    s.release()
    assert float(kept.sum()) == 1 << 18

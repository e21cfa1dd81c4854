"""Arrays moved out of a model run's memory into a file (issue: "Models at scale": spill to
disk when a graph's values do not fit).

Policy (engine/model.py measure, class ``Over``): a run whose two exact traces in
double-double would hold more than ``1 / SPILL_SHARE`` of the memory available when it
started stores every array of at least ``SPILL_MIN`` bytes of its sweeps in one temporary
file as the sweeps make them (routes.graph.GraphRule.trace's ``store``: ``put`` and
``done``), and reads them back through read-only memory maps; a smaller run whose settled
exact traces, and then with the emulated ones, still pass that share writes them there
once made.  The values are the same bits (the results do not depend on whether a run
spilled); what the later phases read comes back from the page cache or the disk instead
of anonymous memory.  After each node's step of a stored sweep (``done``: the maps of the
arrays it read) and after each site's rows, each run of local errors, the attribution and
each keep experiment (``release``: every map) the run drops the pages it has mapped
(madvise MADV_DONTNEED), so the process holds what one step reads, not every trace; the
kernel keeps or evicts the file's pages as memory allows.

The file is made in the system's temporary folder (TMPDIR) and unlinked at once: it takes
disk only while the run holds its maps, and nothing is left behind by a run that is killed.
Arrays that cannot be written there (a full disk) stay in memory: the run goes on as if it
had not spilled them.
"""

from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

# Spill when the traces hold more than this share of the memory available at the start.
SPILL_SHARE = 4
# Arrays smaller than this stay in memory (a map and a write each are not worth it).  64 KiB:
# a GPT-2 small's activations of 128 x 768 are 768 KiB in binary64, and a layer has dozens
# of them with their cotangents; at 1 MiB a two-layer, 2,000-word GPT-2 small held 1.94
# GiB at its peak, at 64 KiB 1.67 GiB, rows the same (benchmarks/bench_model_scale.py).
SPILL_MIN = 1 << 16


def nbytes(arrays) -> int:
    """The bytes of the distinct numeric arrays among ``arrays``."""
    seen = {}
    for a in arrays:
        if isinstance(a, np.ndarray) and a.dtype != object:
            seen[id(a)] = a.nbytes
    return sum(seen.values())


class Over:
    """The policy for one configuration: ``need(held)`` is the Spill to write to once the
    arrays held pass ``room`` bytes (and from then on), else None; ``release`` gives back
    the pages read of what was spilled."""

    def __init__(self, room: int):
        self.room, self.file = room, None

    def need(self, held: int):
        if self.file is None and held > self.room:
            self.file = Spill()
        return self.file

    def release(self) -> None:
        if self.file is not None:
            self.file.release()


class Spill:
    """One unlinked temporary file that arrays are written to (``put``) and read back from
    through read-only maps."""

    def __init__(self, folder=None):
        fd, path = tempfile.mkstemp(prefix="roundoff-spill-", dir=folder)
        os.unlink(path)
        self._file = os.fdopen(fd, "w+b")
        self._maps, self._ids = [], set()
        self.written = 0

    def put(self, arrays) -> list:
        """Each array of ``arrays`` of at least SPILL_MIN bytes written to the file and read
        back as a read-only array of the same dtype, shape and bits (an array given twice
        is written once); the others as they are."""
        big = {id(a): a for a in arrays if isinstance(a, np.ndarray) and a.dtype != object
               and a.nbytes >= SPILL_MIN and not self._holds(a)}
        if not big:
            return list(arrays)
        start = self._file.seek(0, os.SEEK_END)
        where = {}
        try:
            for key, a in big.items():
                # Each array at a page boundary, so a release drops whole pages of it.
                at = -(-self._file.tell() // mmap.PAGESIZE) * mmap.PAGESIZE
                self._file.seek(at)
                self._file.write(np.ascontiguousarray(a).data)
                where[key] = at - start
            self._file.flush()
            # One map of what this call wrote (an offset must be a multiple of the
            # allocation granularity: the start of the file's last page at most).
            base = start - start % mmap.ALLOCATIONGRANULARITY
            size = self._file.tell() - base
            m = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ, offset=base)
        except OSError:                          # no room on the disk: kept in memory
            self._file.truncate(start)
            return list(arrays)
        self._maps.append(m)
        self._ids.add(id(m))
        self.written += size
        out, made = [], {}
        for a in arrays:
            key = id(a)
            if key not in big:
                out.append(a)
                continue
            if key not in made:
                made[key] = np.frombuffer(m, dtype=a.dtype, count=a.size,
                                          offset=start - base + where[key]).reshape(a.shape)
            out.append(made[key])
        return out

    def _holds(self, a) -> bool:
        """Whether ``a`` is read from this file already (a view of one of its maps)."""
        m = _map_of(a)
        return m is not None and id(m) in self._ids

    def done(self, arrays) -> None:
        """Drop this process's pages of the maps that hold ``arrays`` (those read from this
        file; others are let be): a node's step that read them is over
        (routes.graph.GraphRule.trace's ``store``)."""
        if not hasattr(mmap, "MADV_DONTNEED"):
            return
        seen = set()
        for a in arrays:
            m = _map_of(a)
            if m is not None and id(m) in self._ids and id(m) not in seen:
                seen.add(id(m))
                m.madvise(mmap.MADV_DONTNEED)

    def release(self) -> None:
        """Drop this process's pages of the whole file (they are read again when next used;
        where the system has no madvise, the kernel alone decides)."""
        if hasattr(mmap, "MADV_DONTNEED"):
            for m in self._maps:
                m.madvise(mmap.MADV_DONTNEED)


def _map_of(a):
    """The memory map array ``a`` is a view of (np.frombuffer's base), or None."""
    while isinstance(a, np.ndarray):
        a = a.base
    a = a.obj if isinstance(a, memoryview) else a
    return a if isinstance(a, mmap.mmap) else None

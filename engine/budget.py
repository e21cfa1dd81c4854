"""Memory and disk plans: a run or a measurement that cannot fit this machine is refused
before any work, with one line saying what it needs and what fits.

The figures are estimates from measurements on this project's machines (2 cores, 24 GiB),
rounded up:

- a coverage run holds one task per worker at a time; a task keeps its draws and every
  route's computed and exact values in memory, about ``RUN_BYTES_PER_ELEMENT`` per input or
  output element of every draw of every sample kind (exp with 30,000 draws of its two
  instances over 4 kinds: 1.08 M elements, +1.03 GB peak; matmul: 1.1 KB per element), on
  top of ``WORKER_BASE`` per worker (numba, the operator table, mpmath);
- a measurement holds one chunk of ``CHUNK`` inputs per worker (about
  ``MEASURE_BYTES_PER_INPUT`` each: the inputs, outputs, errors and classes, the
  screen's scratch arrays), and in the parent about ``MEASURE_BYTES_PER_CHUNK`` per chunk
  (the set of finished chunks); its checkpoint takes at most ``CHECKPOINT_BYTES_PER_CHUNK``
  of disk per chunk (the summary, with up to 64 candidates for the largest error).
"""

from __future__ import annotations

import os
import tempfile

from . import spill

RUN_BYTES_PER_ELEMENT = 2048
WORKER_BASE = 400 << 20
MEASURE_BYTES_PER_INPUT = 96
MEASURE_BYTES_PER_CHUNK = 128
CHECKPOINT_BYTES_PER_CHUNK = 16 << 10
# A model run holds each value element (inputs and parameters, constants, every node's
# outputs) several times over: the exact trace's double-double numbers, the emulated run's,
# the keep experiments' tapes, and for a run of nodes at a time each node alone on its
# rounded reads and the rows' stand-ins.  Bytes per element and sample, by route, at most
# the peaks of the large models measured on 2 cores (peak RSS less the ~400 MiB of the
# imports, per element, forward and gradients, the sixteenth session): torchvision's
# ResNet-18 at 224x224 (19.6 M elements) 118 B, a one-layer GPT-2 small shape with 2,000
# words (20.5 M) 126 B, with its 50,257 (63.8 M) 256 B.  Small models cost more an element
# (the README block, 468 K elements: 816 B with gradients in an earlier session), but
# they fit anywhere.  An estimate, so that a run that cannot fit is refused at once
# instead of failing after hours, never refusing one that fits.
MODEL_BYTES_PER_ELEMENT = {"forward": 128, "gradient": 128, "tangent": 64}
# A run whose exact traces would pass its share of the memory stores its sweeps in a file as
# they are made (engine/spill.py): its peak is about one node's work on its largest value
# (the exact products' digit slices, a row's stand-ins, errors and classes), so it holds
# about STREAM_BASE (torch, the captured model, the compilations), STREAM_BYTES_PER_ELEMENT
# per value element and sample (arrays under spill.SPILL_MIN, the keep experiments'
# binary64 copies of the whole model's values) and STREAM_NODE_BYTES per element of its
# largest value; its file about SPILL_BYTES_PER_ELEMENT per value element and
# SPILL_NODE_BYTES per element of the largest (what the largest node's pullback keeps).
# Measured on 2 cores with GPT-2 small shapes, forward and gradients, one sample (the
# nineteenth session; elements, largest value, peak RSS, disk): two layers with 2,000
# words 38.0 M, 2.36 M, 1.51 GB, 4.24 GB; one layer with its 50,257 words 63.8 M, 38.6 M,
# 6.66 GB, 10.4 GB; twelve layers 256 M, 38.6 M, 6.4 GB (sampled), 31.2 GB.  The memory
# fitted to the first two and rounded up (the third estimated at 7.5 GB), the disk to
# the last two (the first estimated at 4.3 GB).
STREAM_BASE = 1 << 30
STREAM_BYTES_PER_ELEMENT = 4
STREAM_NODE_BYTES = 140
SPILL_BYTES_PER_ELEMENT = 112
SPILL_NODE_BYTES = 96
# A model run holds each input element many times over (the rounded samples, every node's
# value in the emulated and the exact run, the exact run's mpmath numbers at about 100 bytes
# for binary64's 8): the arrays of --inputs may take at most this share of the memory.
MODEL_INPUTS_SHARE = 16


class BudgetError(ValueError):
    """A request that cannot fit this machine (one-line message)."""


def available_memory() -> int:
    """Bytes of memory available to new work: MemAvailable of /proc/meminfo, else the
    physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 1 << 62                       # unknown: do not refuse on a guess


def free_disk(path) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing folder)."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        st = os.statvfs(folder)
    except (OSError, AttributeError):
        return 1 << 62
    return st.f_bavail * st.f_frsize


def size_text(n: float) -> str:
    """Bytes in binary units, two significant figures and more: ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} EiB"


def check_measure(total: int, chunk: int, workers: int, out=None) -> None:
    """BudgetError when ``total`` inputs in chunks of ``chunk`` on ``workers`` processes
    need more memory than is available, or a checkpoint at ``out`` more disk than is free."""
    chunks = -(-total // chunk)
    memory = available_memory()
    fixed = workers * (WORKER_BASE + chunk * MEASURE_BYTES_PER_INPUT)
    need = fixed + chunks * MEASURE_BYTES_PER_CHUNK
    fits = [max(0, int(0.95 * memory - fixed) // MEASURE_BYTES_PER_CHUNK)]
    what = [f"needs about {size_text(need)} of memory ({size_text(memory)} available)"]
    over = need > memory
    if out is not None:
        disk = free_disk(out)
        ckpt = chunks * CHECKPOINT_BYTES_PER_CHUNK
        fits.append(int(0.95 * disk) // CHECKPOINT_BYTES_PER_CHUNK)
        what.append(f"its checkpoint about {size_text(ckpt)} of disk ({size_text(disk)} free)")
        over = over or ckpt > disk
    if over:
        most = min(fits) * chunk
        raise BudgetError(f"{total} samples ({chunks} chunks of {chunk} inputs) "
                          f"{' and '.join(what)}: at most about {most:.3g} samples fit "
                          f"this machine with {workers} worker(s)")


def check_run(largest: tuple, jobs: int) -> None:
    """BudgetError when the largest task, ``(label, elements, draws)`` -- the input and
    output elements of all its draws and sample kinds, and its draws per kind -- cannot
    fit ``jobs`` workers' share of the available memory."""
    label, elements, draws = largest
    memory = available_memory()
    need = jobs * (WORKER_BASE + elements * RUN_BYTES_PER_ELEMENT)
    if need <= memory:
        return
    per_draw = max(1, elements // max(draws, 1))
    # 5% below the limit: the available memory moves while the machine works.
    most = max(0, int(0.95 * memory / jobs - WORKER_BASE) // (per_draw * RUN_BYTES_PER_ELEMENT))
    raise BudgetError(f"--samples {draws}: the largest task ({label}) needs about "
                      f"{size_text(need / jobs)} per worker, {size_text(need)} for {jobs} "
                      f"worker(s), and {size_text(memory)} is available: at most about "
                      f"--samples {most} fits (or fewer --jobs)")


def check_model_inputs(declared: int, path, largest: str) -> None:
    """BudgetError when the arrays of a model run's ``--inputs`` file ``path``, ``declared``
    bytes as their headers give them (``largest``: the largest, named), exceed
    1/MODEL_INPUTS_SHARE of the available memory."""
    limit = available_memory() // MODEL_INPUTS_SHARE
    if declared > limit:
        raise BudgetError(f"--inputs {path}: its arrays declare {size_text(declared)} "
                          f"({largest}), more than the {size_text(limit)} a model run can "
                          f"take here (1/{MODEL_INPUTS_SHARE} of the available memory); give "
                          f"fewer or smaller samples")


def check_model(elements: int, samples: int, largest: str, routes=("forward",),
                workers: int = 1, largest_elements: int = 0) -> None:
    """BudgetError when ``samples`` samples of a model whose values (inputs, constants,
    node outputs) hold ``elements`` elements each (``largest``: the largest, named, of
    ``largest_elements``) cannot fit the available memory: first as one binary64 copy (a
    bound no run goes below; an artifact declaring huge shapes fails here instead of in
    the middle of the run), then by the estimate for ``routes`` on ``workers`` processes,
    each measuring one configuration: MODEL_BYTES_PER_ELEMENT, or for a run that stores
    its sweeps as it makes them (``stores``) STREAM_BYTES_PER_ELEMENT and
    STREAM_NODE_BYTES, with its file's disk in the temporary folder; ``workers`` 0: the
    work runs elsewhere (a Dask cluster), only the first test."""
    need, available = 8 * elements * samples, available_memory()
    some = f"{samples} sample{'s need' if samples != 1 else ' needs'}"
    if need > available:
        raise BudgetError(f"the model's values hold {elements} elements a sample (largest: "
                          f"{largest}): {some} at least {size_text(need)} in binary64 "
                          f"alone, more than the "
                          f"{size_text(available)} available; give fewer --samples or a "
                          f"smaller model")
    if not workers:
        return
    if stores(elements, samples, routes, available):
        _check_stored(elements, samples, largest, largest_elements, workers, available, some)
        return
    per = sum(MODEL_BYTES_PER_ELEMENT[r] for r in set(routes))
    need = workers * (WORKER_BASE + per * elements * samples)
    if need <= available:
        return
    # 5% below the limit: the available memory moves while the machine works.
    most = int(0.95 * available / workers - WORKER_BASE) // max(per * elements, 1)
    raise BudgetError(f"the model's values hold {elements} elements a sample (largest: "
                      f"{largest}), and a model run of {'+'.join(sorted(set(routes)))} "
                      f"holds about {per} bytes per element and sample (the exact values, "
                      f"the emulated run, each node alone): {some} about "
                      f"{size_text(need)} on {_workers(workers)}, more than the "
                      f"{size_text(available)} available; {_fits(most)} (give fewer "
                      f"--samples or --jobs, fewer --routes, or a smaller model or input)")


def stores(elements: int, samples: int, routes, available: int) -> bool:
    """Whether a model run stores its sweeps in a file as it makes them: its two exact
    traces in double-double (16 bytes an element of every value, and for gradients of a
    cotangent and a contribution, for tangents of a tangent) pass 1/SPILL_SHARE of the
    available memory (engine/model.py measure's test, with the graph's value count)."""
    kinds = 1 + 2 * ("gradient" in routes) + ("tangent" in routes)
    return 2 * 16 * elements * samples * kinds > available // spill.SPILL_SHARE


def _check_stored(elements, samples, largest, largest_elements, workers, available, some):
    each = STREAM_BYTES_PER_ELEMENT * elements + STREAM_NODE_BYTES * largest_elements
    need = workers * (STREAM_BASE + each * samples)
    folder = tempfile.gettempdir()
    file = SPILL_BYTES_PER_ELEMENT * elements + SPILL_NODE_BYTES * largest_elements
    disk, free = workers * file * samples, free_disk(os.path.join(folder, "x"))
    what = (f"the model's values hold {elements} elements a sample (largest: {largest}), "
            f"more than fit in memory: the run stores its sweeps in a file as it makes them "
            f"(in {folder}, TMPDIR)")
    if need > available:
        most = int(0.95 * available / workers - STREAM_BASE) // max(each, 1)
        raise BudgetError(f"{what} and holds about {size_text(STREAM_BASE)}, "
                          f"{STREAM_BYTES_PER_ELEMENT} bytes per element and "
                          f"{STREAM_NODE_BYTES} per element of the largest: "
                          f"{some} about {size_text(need)} on {_workers(workers)}, more than "
                          f"the {size_text(available)} available; {_fits(most)} (give "
                          f"fewer --samples or --jobs, or a smaller model or input)")
    if disk > free:
        most = int(0.95 * free / workers) // max(file, 1)
        raise BudgetError(f"{what}: {some} about {size_text(disk)} of disk there on "
                          f"{_workers(workers)}, and {size_text(free)} is free; "
                          f"{_fits(most)} (set TMPDIR to a folder with more room, or give "
                          f"fewer --samples or --jobs)")


def _workers(n: int) -> str:
    return f"{n} worker{'s' if n != 1 else ''}"


def _fits(most: int) -> str:
    return f"at most {most} sample{'s fit' if most != 1 else ' fits'}" if most > 0 else \
        "not one sample fits"
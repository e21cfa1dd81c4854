"""Executors: where the work units of a coverage run or of a measurement are computed.

A work unit is ``(key, args)``; ``fn(*args)`` computes it (a module-level function, so worker
processes import it by name).  An executor is a generator yielding ``(key, result)`` in the
order units *finish*; the caller (engine/orchestrate.py, for engine/runner.py and
engine/measure.py) checkpoints each one as it arrives, drives the progress bar, and the run
restores a deterministic order before writing, so the results file never depends on the
executor, the number of workers or the finishing order.

``local(fn, units, jobs, ...)``: this machine's worker processes (concurrent.futures over
forkserver), or this process when one worker is enough.  An exception in a unit propagates:
the units of this project turn their own failures into data (error rows), so one reaching
here is a bug, or a user's target that raised (measure).  A worker that dies ends the run at
once with ``WorkerDied`` naming the unit it was computing.

``dask(fn, units, scheduler=..., workers=..., retries=1)``: a Dask cluster (``distributed``,
the optional extra ``roundoff-coverage[dask]``, imported only here).  With an address it joins
an existing scheduler; without one it starts a ``LocalCluster`` of ``workers`` processes with
one thread each.  Faults are the cluster's business up to a point: Dask reschedules the units
of a worker that dies (at most ``distributed.scheduler.allowed-failures`` deaths per unit,
then the run ends with ``WorkerDied``, as on the local executor); ``retries`` reruns a unit
that raised; a unit that still fails is yielded as ``Failed`` with a one-line message and the
run goes on.  Losing the scheduler itself ends the run with ``ExecutorError`` (finished units
stay in the caller's checkpoint).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

LOCAL, DASK = "local", "dask"
EXECUTORS = (LOCAL, DASK)
INSTALL = "pip install 'roundoff-coverage[dask]'"
CONNECT_TIMEOUT = 20              # s to reach a scheduler, and to wait for its first worker
BATCH_MAX = 8                     # units per pool item at most (local executor, batched)


class ExecutorError(ValueError):
    """The executor cannot run: Dask missing, a scheduler out of reach, workers that cannot
    import this package (one-line message)."""


@dataclass(frozen=True)
class Failed:
    """A unit that failed on every attempt the executor allowed; ``message`` is one line."""

    message: str


def one_line(exc, limit: int = 300) -> str:
    """``Type: message`` of an exception on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def announcer(stream=None):
    """A function writing one line about the run (the Dask dashboard) to ``stream``
    (default stderr), prefixed like the progress lines."""
    def announce(line):
        out = stream or sys.stderr
        out.write(f"roundoff-coverage: {line}\n")
        out.flush()
    return announce


# ----- local -----------------------------------------------------------------------------------

EVALUATE = f"{__package__}.evaluate"      # the module workers preload by default


def local(fn, units, jobs: int, *, serial: bool = False, inline=None, initializer=None,
          initargs=(), preload: str = EVALUATE, batched: bool = False, isolate: bool = False,
          name=str):
    """Yield ``(key, fn(*args))`` for every unit as it finishes.  In this process (with
    ``inline`` in place of ``fn`` when given) when ``serial``, or when ``jobs <= 1`` or there
    is one unit and not ``isolate``; else over a pool of at most ``jobs`` processes started
    with ``initializer``.  ``isolate``: always in worker processes, so that code which may
    crash (a user's target) cannot take this process with it.  ``units`` may be a lazy
    iterable: at most two pool items per worker are in flight, so memory does not grow with
    the number of units.  ``batched``: several units per pool item (see ``batches``; reads
    ``units`` whole).  A worker that dies (a signal, a segfault, the kernel's OOM killer)
    ends the iteration at once with WorkerDied naming the unit, ``name(key)``, it was
    computing; the units already yielded are the caller's to keep."""
    units = iter(units)
    if serial:
        call = inline or fn
        for key, args in units:
            yield key, call(*args)
        return
    head = list(itertools.islice(units, 2))
    if not isolate and (jobs <= 1 or len(head) <= 1):
        call = inline or fn
        for key, args in itertools.chain(head, units):
            yield key, call(*args)
        return
    if not head:
        return
    if batched:
        everything = head + list(units)
        workers = min(jobs, len(everything))
        items = iter(batches(everything, workers))
    else:
        workers = max(1, jobs) if len(head) > 1 else 1
        items = ([u] for u in itertools.chain(head, units))
    with tempfile.TemporaryDirectory(prefix="roundoff-coverage-units-") as track:
        pool = ProcessPoolExecutor(workers, mp_context=pool_context(preload),
                                   initializer=initializer, initargs=initargs)
        pending = {}
        try:
            while True:
                for batch in itertools.islice(items, 2 * workers - len(pending)):
                    try:
                        pending[pool.submit(_run_batch, fn, batch, track)] = batch
                    except BrokenProcessPool:
                        # A worker died after the last results came in: the pool refuses
                        # new work before any future says so.
                        raise WorkerDied(_death(pool, track, pending, batch, name)) from None
                if not pending:
                    break
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                # Results first: a unit that finished just before a worker died is kept.
                for fut in sorted(finished, key=lambda f: f.exception() is not None):
                    batch = pending.pop(fut)
                    try:
                        done = fut.result()
                    except BrokenProcessPool:
                        raise WorkerDied(_death(pool, track, pending, batch, name)) from None
                    yield from done
        except BaseException:
            _stop(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            # Release the pool's semaphores now: an interrupted run exits right after, and
            # the resource tracker would report them as leaked.
            del pool
            gc.collect()


class WorkerDied(ExecutorError):
    """A worker process of the local executor died while computing a unit."""


def _run_batch(fn, batch, track):
    """The results of a pool item; before each unit, its key goes to the file ``track/<pid>``,
    which names the unit should this process die in it."""
    out = []
    path = os.path.join(track, str(os.getpid()))
    for key, args in batch:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(key))
        out.append((key, fn(*args)))
    return out


def _death(pool, track, pending, batch, name) -> str:
    """One line: which worker died how, and the unit it was computing."""
    procs = dict(getattr(pool, "_processes", None) or {})
    time.sleep(0.1)                    # the exit status of a process killed a moment ago
    codes = {pid: p.exitcode for pid, p in procs.items()}
    # The pool terminates (SIGTERM) its other workers once one dies: the culprit is the one
    # that ended another way; failing that, any that ended.
    dead = [pid for pid, c in codes.items() if c not in (None, 0, -signal.SIGTERM)] or \
        [pid for pid, c in codes.items() if c not in (None, 0)]
    how = "died"
    units = []
    for pid in dead:
        code = codes[pid]
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and
               -code in signal.valid_signals() else f"exited with status {code}")
        if code == -signal.SIGKILL:
            how += " (out of memory?)"
        with contextlib.suppress(OSError, ValueError):
            with open(os.path.join(track, str(pid)), encoding="utf-8") as fh:
                units.append(name(json.loads(fh.read())))
    if units:
        where = f"while computing {', '.join(units)}"
    else:
        keys = [k for b in [batch, *pending.values()] for k, _ in b]
        where = f"while computing one of {', '.join(name(k) for k in keys[:4])}" + \
            (", ..." if len(keys) > 4 else "")
    return (f"a worker process {how} {where}; the units finished before are kept in the "
            f"checkpoint: rerun with --resume")


def _stop(pool):
    """Terminate the workers of ``pool`` now (an interrupt, or an error in a unit): the
    executor's shutdown would otherwise wait for the units they are computing."""
    for p in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            p.terminate()


def batches(units, jobs: int) -> list:
    """Pool items of up to BATCH_MAX units, dealt round-robin from ``units`` (the callers sort
    them most expensive first, so every item mixes one expensive unit with cheap ones);
    about 16 items per worker, so the last ones still balance the load."""
    size = max(1, min(BATCH_MAX, len(units) // (jobs * 16) or 1))
    count = -(-len(units) // size)
    return [units[j::count] for j in range(count)]


def pool_context(preload=EVALUATE):
    """forkserver where it exists: workers fork from a clean server that has imported the
    operator table (fork from a parent whose numba thread pool is running is unsafe)."""
    # An interrupted run terminates the pool while its queue locks are alive; the resource
    # tracker (started with the parent's -W options) would then warn about them on exit.
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    if quiet not in sys.warnoptions:
        sys.warnoptions.append(quiet)
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([preload])
        return ctx
    return multiprocessing.get_context("spawn")


# ----- dask ------------------------------------------------------------------------------------

def require():
    """The ``distributed`` module; ExecutorError naming the pip command when it is missing."""
    try:
        import distributed
    except ImportError:
        raise ExecutorError(f"--executor dask needs Dask's distributed scheduler, which is "
                            f"not installed: {INSTALL}") from None
    return distributed


def dask(fn, units, *, scheduler: str | None = None, workers: int | None = None,
         retries: int = 1, announce=None, name=str):
    """Yield ``(key, result)`` for every unit as it finishes on a Dask cluster, the result
    being ``fn(*args)`` or ``Failed(message)`` when the unit raised on 1 + ``retries``
    attempts; WorkerDied, naming the unit (``name(key)``), when every worker that ran it
    died in it (``KilledWorker``).  ``scheduler``: an address
    (``tcp://HOST:PORT``); None starts a LocalCluster of ``workers`` processes (default: the
    cores), one thread each.  ``announce(line)`` receives the dashboard address when the
    cluster has a dashboard.  Leaving the generator early (Ctrl-C, SIGTERM in the caller)
    cancels the units still queued."""
    units = list(units)
    if not units:
        return
    distributed = require()
    cluster = client = None
    pending = {}
    try:
        cluster, client = _connect(distributed, scheduler, workers)
        _check_workers(client, scheduler)
        link = _dashboard(client)
        if link and announce is not None:
            announce(f"Dask dashboard: {link}")
        # Submission order is Dask's priority order: the callers list expensive units first.
        for key, args in units:
            fut = client.submit(_guarded, fn, *args, pure=False, retries=retries)
            pending[fut] = key
        for fut in distributed.as_completed(list(pending), loop=client.loop):
            key = pending.pop(fut)
            yield key, _result(fut, key, scheduler, name)
    finally:
        if pending:
            client.cancel(list(pending))
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


def _connect(distributed, scheduler, workers):
    """(cluster or None, client): a LocalCluster and its client, or a client of
    ``scheduler``; ExecutorError when the scheduler cannot be reached."""
    if scheduler is None:
        # Processes, one thread each: the units hold the GIL most of the time, and numba's
        # default threading layer must not be entered by two threads of one process at once.
        # Port 0: a free port for the dashboard, so two runs on one machine do not collide.
        cluster = distributed.LocalCluster(
            n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
            dashboard_address=":0", silence_logs=logging.CRITICAL)
        try:
            return cluster, distributed.Client(cluster, set_as_default=False)
        except BaseException:
            cluster.close()
            raise
    try:
        return None, distributed.Client(scheduler, timeout=CONNECT_TIMEOUT,
                                        set_as_default=False)
    except (OSError, ValueError, TypeError) as exc:
        raise ExecutorError(f"cannot reach the Dask scheduler at {scheduler}: "
                            f"{one_line(exc)}") from None


def _check_workers(client, scheduler):
    """Wait for a first worker, then check that every worker runs this package's version:
    another version may measure differently, and a worker without it fails every unit."""
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
    except (TimeoutError, OSError):
        raise ExecutorError(f"the Dask scheduler at {scheduler} has no workers (none joined "
                            f"within {CONNECT_TIMEOUT} s)") from None
    mine = version()
    try:
        theirs = client.run(version)
    except Exception as exc:                                   # noqa: BLE001 (remote error)
        raise ExecutorError(f"the Dask workers cannot run roundoff-coverage ({one_line(exc)}): "
                            f"install it on every worker") from None
    wrong = sorted(f"{w} has {v}" for w, v in theirs.items() if v != mine)
    if wrong:
        raise ExecutorError(f"the Dask workers must run roundoff-coverage {mine}, like this "
                            f"machine: {'; '.join(wrong)}")


def version() -> str:
    """This package's installed version (what the workers must match)."""
    from importlib.metadata import PackageNotFoundError, version as dist_version
    try:
        return dist_version("roundoff-coverage")
    except PackageNotFoundError:
        return "not installed"


def _dashboard(client) -> str | None:
    """The dashboard address, None when the scheduler serves none (bokeh not installed)."""
    try:
        return client.dashboard_link or None
    except (KeyError, AttributeError, ValueError):
        return None


# One unit at a time per worker process, whatever the worker's thread count: numba's parallel
# loops (formats/fast.py) run on a threading layer that aborts the process when two threads
# enter it at once.  A worker with several threads still runs correctly, only no faster.
_UNIT_LOCK = threading.Lock()


def _guarded(fn, *args):
    """``fn(*args)`` on a Dask worker: alone in its process, numba on one thread (the
    cluster's parallelism is its processes)."""
    import numba
    with _UNIT_LOCK:
        numba.set_num_threads(1)
        return fn(*args)


def _result(fut, key, scheduler, name=str):
    """The result of a completed future, Failed for an error; ExecutorError when the cluster
    dropped the unit (cancelled: the scheduler went away or restarted)."""
    if fut.status in ("finished", "lost"):
        # A result lost with its worker before it was fetched ("lost": the worker that held
        # it died after the unit finished) is recomputed while this client holds the future:
        # result() waits for it.
        try:
            return fut.result()
        except Exception:                                      # noqa: BLE001 (see below)
            if fut.status != "error":
                raise ExecutorError(_dropped(key, scheduler, fut.status)) from None
    if fut.status == "error":
        exc = fut.exception()
        if type(exc).__name__ == "KilledWorker":
            # Dask reran the unit on fresh workers (distributed.scheduler.allowed-failures)
            # and every one died in it: the unit kills its process, like a local worker's.
            raise WorkerDied(f"every Dask worker that ran {name(key)} died in it "
                             f"(KilledWorker); the units finished before are kept in the "
                             f"checkpoint: rerun with --resume")
        return Failed(f"on the Dask cluster: {one_line(exc)}")
    raise ExecutorError(_dropped(key, scheduler, fut.status))


def _dropped(key, scheduler, status) -> str:
    return (f"the Dask scheduler ({scheduler or 'the local cluster'}) dropped unit {key} "
            f"({status}); finished units are kept in the checkpoint: rerun with --resume")

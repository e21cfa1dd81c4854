"""One orchestration for the coverage run (engine/runner.py) and ``measure``
(engine/measure.py): work units on an executor, a checkpoint, a progress bar, signals and
the atomic write of the results file.

A caller plans its units -- ``(key, args)``, a lazy iterable, ``fn(*args)`` computes one --
and reads back what an interrupted run of the same selection kept (``resumed``); it decides
which of those still count, then ``orchestrate`` runs the rest on an ``Executor`` (this
machine's processes or a Dask cluster, engine/executors.py).  Each unit that finishes is
folded into the caller's state (``fold``), appended to the checkpoint
``<out>.partial.jsonl`` and counted on the bar.  SIGTERM (raised here as ``Interrupted``)
and Ctrl-C stop the run and keep every line already in the checkpoint; a checkpoint is
closed (fsync) whatever happens.  ``finish`` writes the results file atomically and removes
the checkpoint.

What stays with the callers: the units (tasks, chunks), their order and weight on the bar,
what a unit's result adds up to (rows, a Tally), what a unit that failed on the cluster
becomes, a memory plan, and whether a resumed checkpoint is rewritten with the units kept
(run: it drops units of another plan) or appended to (measure).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable

from . import executors, results
from .plan import Outcome


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised in the parent so a killed run keeps its checkpoint.  A
    KeyboardInterrupt, like Ctrl-C, and for the same reason: a unit run in this process
    turns its own failures (``except Exception``) into error rows, and a SIGTERM turned into
    an error row would end the run "successfully" without the work it stopped."""


def raise_interrupt(signum, frame):
    raise Interrupted()


def init_worker():
    """Worker setup: one numba thread (the rounding loops are parallel=True; on the small
    arrays of a unit the thread pool costs ~7 ms a call on a busy machine, 40x the work),
    and Ctrl-C left to the parent, which stops the pool."""
    import numba
    numba.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ----- checkpoint ------------------------------------------------------------------------------

def checkpoint_path(out) -> str:
    return f"{out}.partial.jsonl"


def read_checkpoint(path, fingerprint) -> dict:
    """{task key: rows} of a checkpoint written by a run with this fingerprint.  A damaged
    unit line -- torn by a kill in mid-write, text or binary junk -- is skipped: that unit is
    simply computed again.  ValueError (one line naming the file and what to do) when the
    file cannot be read, its head line is damaged, or it belongs to another run."""
    fix = "remove it or run without --resume"
    try:
        with open(path, "rb") as fh:
            lines = fh.read().split(b"\n")
    except OSError as exc:
        raise ValueError(f"cannot read checkpoint {path}: {exc.strerror or exc}; {fix}") \
            from None
    done = {}
    if not lines[0].strip():
        return done
    try:
        head = json.loads(lines[0].decode("utf-8"))
    except (ValueError, RecursionError):              # not UTF-8, not JSON, nested too deep
        head = None
    if not isinstance(head, dict):
        raise ValueError(f"checkpoint {path} is damaged (its first line is not a checkpoint "
                         f"head); {fix}")
    if head.get("checkpoint") != results.SCHEMA:
        raise ValueError(f"{path} is not a roundoff-coverage checkpoint; {fix}")
    if head.get("fingerprint") != fingerprint:
        raise ValueError(f"checkpoint {path} belongs to a different selection or seed "
                         f"({head.get('command')}); {fix}")
    for line in lines[1:]:
        try:
            rec = json.loads(line.decode("utf-8"))
            if isinstance(rec["task"], str):
                done[rec["task"]] = rec["rows"]
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
    return done


def resumed(out, fingerprint, resume: bool) -> dict:
    """{unit key: record} kept in the checkpoint of ``out`` when ``resume`` and there is
    one (read_checkpoint), else empty."""
    path = checkpoint_path(out)
    if resume and os.path.exists(path):
        return read_checkpoint(path, fingerprint)
    return {}


class Checkpoint:
    """The checkpoint file of a run: a head line (fingerprint, command), then one line per
    finished unit (``add(key, rows)``), flushed as it finishes; ``read_checkpoint`` reads
    it back.  ``sel``: anything with ``fingerprint()`` and ``command()``.  A new file holds
    the units of ``keep``; ``append``: go on writing the existing file of ``path``, whose
    head ``read_checkpoint`` has checked (nothing kept in memory for it)."""

    def __init__(self, path, sel, keep: dict, append: bool = False):
        self.path = path
        if append:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(size - 1, 0))
                torn = size > 0 and fh.read(1) != b"\n"
            self.fh = open(path, "a", encoding="utf-8")
            if torn:                     # a line cut by a kill: end it, never extend it
                self.fh.write("\n")
            return
        self.fh = open(path, "w", encoding="utf-8")
        self._line({"checkpoint": results.SCHEMA, "fingerprint": sel.fingerprint(),
                    "command": sel.command()})
        for key, rows in keep.items():
            self.add(key, rows)

    def _line(self, rec):
        self.fh.write(json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n")
        self.fh.flush()

    def add(self, key, rows):
        self._line({"task": key, "rows": rows})

    def close(self):
        if not self.fh.closed:
            os.fsync(self.fh.fileno())
            self.fh.close()


# ----- progress --------------------------------------------------------------------------------

class Progress:
    """A bar with an ETA on a terminal (stderr), plain log lines otherwise (every 10% or
    30 s).  The ETA weighs units by their estimated cost (``work``, e.g. runner.cost)."""

    def __init__(self, total, done=0, stream=None, quiet=False, work=1.0, unit="tasks"):
        self.stream = stream or sys.stderr
        self.unit = unit
        self.total, self.done, self.start = total, done, time.perf_counter()
        self.work, self.worked = max(work, 1e-9), 0.0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.quiet = quiet
        self.last_log, self.last_step = self.start, -1

    def update(self, n=1, work=1.0):
        self.done += n
        self.worked += work
        if self.quiet:
            return
        now = time.perf_counter()
        spent = now - self.start
        left = spent * (self.work - self.worked) / self.worked if self.worked > 0 else None
        eta = "--:--" if left is None else f"{int(left) // 60:02d}:{int(left) % 60:02d}"
        if self.tty:
            width = 30
            fill = int(width * self.done / max(self.total, 1))
            self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total}"
                              f" {self.unit}  {spent:.0f} s  ETA {eta} ")
            if self.done >= self.total:
                self.stream.write("\n")
            self.stream.flush()
            return
        step = int(10 * self.done / max(self.total, 1))
        if step != self.last_step or now - self.last_log > 30 or self.done >= self.total:
            self.last_step, self.last_log = step, now
            self.stream.write(f"roundoff-coverage: {self.done}/{self.total} {self.unit}, "
                              f"{spent:.0f} s, ETA {eta}\n")
            self.stream.flush()


class Phases:
    """Progress inside one long unit of work (a model run's configuration, which may take
    minutes): ``phases(name, done, total, where)`` is called as the work goes.  Silent for
    the unit's first ``delay`` seconds (a short unit prints nothing); then a line on stderr
    when a phase starts and at most every ``every`` seconds within it, with the phase's ETA
    from its share of ``total`` done (a cost the caller weighs its steps by, e.g. the
    elements a node computes) and ``where`` (e.g. "node 37/69")."""

    def __init__(self, label, stream=None, every=30.0, delay=10.0):
        self.label, self.stream, self.every = label, stream or sys.stderr, every
        self.born = time.perf_counter()
        self.delay = delay
        self.phase, self.start, self.last = None, self.born, None

    def __call__(self, name, done=0.0, total=None, where=""):
        now = time.perf_counter()
        if name != self.phase:
            self.phase, self.start, self.last = name, now, None
        if now - self.born < self.delay or \
                (self.last is not None and now - self.last < self.every):
            return
        spent = now - self.start
        eta = ""
        if total and done > 0 and self.last is not None:
            left = spent * max(total - done, 0.0) / done
            eta = f", ETA {int(left) // 60:02d}:{int(left) % 60:02d}"
        self.last = now
        text = f"{name}{f', {where}' if where else ''}"
        if spent >= 1:
            text += f", {spent:.0f} s{eta}"
        self.stream.write(f"roundoff-coverage: {self.label}: {text}\n")
        self.stream.flush()


# ----- executor --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Executor:
    """Where the units run: ``kind`` local (``jobs`` processes) or dask (the cluster at
    ``scheduler``, or a LocalCluster of ``jobs`` workers).  ``name(key)``: a unit in a
    worker-death message; ``failed(key, message)``: the result standing for a unit that
    failed on the cluster.  The rest are the local executor's options (executors.local):
    ``serial`` runs every unit in this process (with ``inline`` in place of ``fn``),
    ``isolate`` always in workers, ``batched`` several units per pool item."""

    kind: str = executors.LOCAL
    scheduler: str | None = None
    jobs: int = 1
    name: Callable = str
    failed: Callable | None = None
    serial: bool = False
    inline: Callable | None = None
    initializer: Callable | None = init_worker
    preload: str = executors.EVALUATE
    batched: bool = False
    isolate: bool = False

    def results(self, fn, units, announce=None):
        """Yield ``(key, fn(*args))`` of every unit as it finishes; a unit that failed on
        the cluster (executors.Failed) yields ``failed(key, message)``."""
        if self.kind == executors.DASK:
            for key, got in executors.dask(fn, units, scheduler=self.scheduler,
                                           workers=self.jobs, announce=announce,
                                           name=self.name):
                yield key, (self.failed(key, got.message) if isinstance(got, executors.Failed)
                            else got)
            return
        yield from executors.local(fn, units, self.jobs, serial=self.serial, inline=self.inline,
                                   initializer=self.initializer, preload=self.preload,
                                   batched=self.batched, isolate=self.isolate, name=self.name)


# ----- the run ---------------------------------------------------------------------------------

def orchestrate(fn, units, executor: Executor, fold, *, checkpoint: Checkpoint | None,
                bar: Progress, outcome: Outcome, record=None, weight=None) -> Outcome:
    """Run ``units`` with ``fn`` on ``executor``, counting them in ``outcome.ran``.  Each
    result, as it arrives: ``fold(key, result)``, then ``record(result)`` (default: the
    result) added to ``checkpoint`` under ``str(key)``, then ``bar`` advanced by
    ``weight(key)`` (default 1).  SIGTERM and Ctrl-C end it with ``outcome.interrupted``;
    the checkpoint is closed in any case.  Other exceptions (executors.WorkerDied,
    ExecutorError, an error in a unit) propagate."""
    ran = outcome
    old_term = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        announce = executors.announcer(bar.stream) if not bar.quiet else None
        for key, got in executor.results(fn, units, announce):
            fold(key, got)
            if checkpoint is not None:
                checkpoint.add(str(key), got if record is None else record(got))
            ran.ran += 1
            bar.update(1, 1.0 if weight is None else weight(key))
    except KeyboardInterrupt:                            # Ctrl-C, or SIGTERM: Interrupted
        ran.interrupted = True
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if checkpoint is not None:
            checkpoint.close()
    return ran


def finish(out, document: dict, csv=None) -> None:
    """Write the results file ``out`` (and ``csv``) atomically (engine/results.py), then
    remove its checkpoint."""
    results.write(out, document, csv=csv)
    with contextlib.suppress(FileNotFoundError):
        os.remove(checkpoint_path(out))

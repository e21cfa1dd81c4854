"""The coverage run: plan the tasks of a selection, run them on an executor (this machine's
processes or a Dask cluster, reports/executors.py) with a checkpoint, and write the results
file.

``Selection`` holds what a run covers (operators, formats, modes, routes, policies,
implementations, draws, seed, exhaustive).  ``plan(selection) -> [Task]``; ``run(selection,
out, jobs, ...) -> Outcome`` executes the tasks (reports/evaluate.py measures one), appends
each finished task's rows to the checkpoint ``<out>.partial.jsonl`` as it finishes, writes
the results file atomically (reports/results.py) and removes the checkpoint.  An interrupted
run (Ctrl-C, SIGTERM, a kill) keeps every line already in the checkpoint; ``resume=True``
skips the tasks found there, whichever executor wrote them.  Results do not depend on
``jobs``, the executor or the order in which tasks finish: each task's random streams are
seeded from (seed, its key) and rows are sorted before writing.

Default operator instances: each declaration's examples, plus growth sizes where the
operator exists -- reduce (sum) and mean over 16, 256 and 4096 elements (4 rows of them at
once), matmul with inner dimension 16, 256 and 1024 (2 x k times k x 2) -- drawn once, ordinary
samples only (they are the expensive tasks).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes

from . import budget, executors, results
from .evaluate import PHASES, evaluate
from .draws import sample_kinds
from .task import ROUTES, Task, batchable, status_rows

DEFAULT_FORMATS = ("bfloat16", "binary16", "float8_e4m3fn", "float8_e5m2", "binary32")
DEFAULT_DRAWS = 3
IMPLEMENTATIONS = ("emulated", "native", "cuda")
# Growth instances: (operator, label, attributes); draws capped at GROWTH_DRAWS.
GROWTH = tuple(
    [("reduce", f"sum-n{n}", {"shape": (4, n), "op": "sum", "axes": (1,)}) for n in (16, 256, 4096)]
    + [("mean", f"n{n}", {"shape": (4, n), "axes": (1,)}) for n in (16, 256, 4096)]
    + [("matmul", f"k{k}", {"x_shape": (2, k), "y_shape": (k, 2)}) for k in (16, 256, 1024)])
GROWTH_DRAWS = 1
GROWTH_KINDS = ("ordinary",)


@dataclass(frozen=True)
class Selection:
    """What a run covers; names are canonical (formats by catalog label)."""

    ops: tuple = ()
    formats: tuple = DEFAULT_FORMATS
    modes: tuple = ("nearest_even",)
    routes: tuple = ROUTES
    policies: tuple = ("strict",)
    implementations: tuple = ("emulated",)
    draws: int = DEFAULT_DRAWS
    seed: int = 0
    exhaustive: bool = False

    def __post_init__(self):
        # Operators in registry order, so the same set gives the same fingerprint and file.
        order = {n: i for i, n in enumerate(routes.names())}
        ops = tuple(self.ops) or routes.names()
        object.__setattr__(self, "ops", tuple(sorted(dict.fromkeys(ops),
                                                     key=lambda n: order.get(n, len(order)))))
        for key in ("formats", "modes", "routes", "policies", "implementations"):
            object.__setattr__(self, key, tuple(getattr(self, key)))

    def command(self) -> str:
        """The canonical command line of this selection (what the results' meta records;
        options that do not change the results, --jobs, --out, --resume, are left out)."""
        parts = ["roundoff-coverage run"]
        if tuple(self.ops) != routes.names():
            parts.append("--ops " + ",".join(self.ops))
        for flag, value, default in (
                ("--formats", self.formats, DEFAULT_FORMATS), ("--modes", self.modes,
                                                               ("nearest_even",)),
                ("--routes", self.routes, ROUTES), ("--policies", self.policies, ("strict",)),
                ("--implementations", self.implementations, ("emulated",))):
            if tuple(value) != default:
                parts.append(f"{flag} {','.join(value)}")
        parts.append(f"--samples {self.draws} --seed {self.seed}")
        if self.exhaustive:
            parts.append("--exhaustive")
        return " ".join(parts)

    def describe(self) -> dict:
        """The selection as the results file's meta records it."""
        return {"ops": list(self.ops), "formats": list(self.formats), "modes": list(self.modes),
                "routes": list(self.routes), "policies": list(self.policies),
                "implementations": list(self.implementations), "samples": self.draws,
                "exhaustive": self.exhaustive}

    def fingerprint(self) -> str:
        """A hash of everything that decides the rows (checkpoints must match it)."""
        text = json.dumps([list(self.ops), list(self.formats), list(self.modes),
                           list(self.routes), list(self.policies), list(self.implementations),
                           self.draws, self.seed, self.exhaustive, results.SCHEMA])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def instances(name: str):
    """(label, attributes, draw cap, sample kinds) of the default instances of operator
    ``name`` (no cap and every kind for the declaration's examples)."""
    decl = routes.declaration(name)
    out = [(label or "default", dict(attrs), None, ()) for label, attrs in decl.examples.items()]
    out += [(label, dict(attrs), GROWTH_DRAWS, GROWTH_KINDS) for op, label, attrs in GROWTH
            if op == name]
    return out


def plan(sel: Selection) -> list[Task]:
    """Every task of the selection, in a deterministic order."""
    tasks = []
    for name in sel.ops:
        for first, (label, attrs, cap, kinds) in enumerate(instances(name)):
            o = routes.op(name, **attrs)
            canon = tuple(o.attrs.items())
            draws = min(sel.draws, cap) if cap else sel.draws
            for fmt in sel.formats:
                for impl in sel.implementations:
                    policies = ("numpy",) if impl == "native" else sel.policies
                    for mode in sel.modes:
                        for policy in policies:
                            tasks.append(Task(name, label, canon, fmt, mode, policy, impl,
                                              tuple(sel.routes), draws, sel.seed,
                                              sel.exhaustive and first == 0, kinds))
    return tasks


def cost(task: Task) -> float:
    """A rough cost estimate in units of one small evaluation: evaluations per route (one
    per sample kind for batched elementwise instances, one per draw otherwise) times a size
    factor; used to start the expensive tasks first and to weigh the ETA."""
    try:
        o = task.build()
        n = sum(int(max(1, _size(p.shape))) for p in o.inputs + o.outputs)
        kinds = len([k for k in sample_kinds(o)
                     if not task.kinds or k in task.kinds]) or 1
        calls, size = (kinds, n * task.draws) if batchable(o) else (kinds * task.draws, n)
    except Exception:                                         # noqa: BLE001
        calls, size = 1, 1
    return len(task.routes) * calls * (1 + size / 200)


def footprint(task: Task) -> int:
    """The input and output elements a task holds at once: every port of every draw of
    every sample kind (the whole format for an exhaustive task); what its memory grows
    with (reports/budget.py)."""
    try:
        o = task.build()
        n = sum(int(max(1, _size(p.shape))) for p in o.inputs + o.outputs)
        kinds = len([k for k in sample_kinds(o) if not task.kinds or k in task.kinds]) or 1
    except Exception:                                         # noqa: BLE001 (an error row)
        return 0
    if task.exhaustive:
        return (1 << min(formats.get(task.format).bits, 16)) * len(o.inputs + o.outputs)
    return n * kinds * task.draws


def _size(shape):
    s = 1
    for n in shape:
        s *= n
    return s


# ----- workers ---------------------------------------------------------------------------------

def _init_worker():
    """Worker setup: one numba thread (the rounding loops are parallel=True; on the small
    arrays of a task the thread pool costs ~7 ms a call on a busy machine, 40x the work),
    and Ctrl-C left to the parent, which stops the pool."""
    import numba
    numba.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _unit(task: Task, execute=None):
    """(rows, phases) of one task, on whichever executor runs it: ``execute`` (tests) or
    evaluate, numba on one thread (the run's parallelism is its processes), and the peak
    resident set of the process so far in ``phases["peak_kib"]``."""
    import resource

    import numba
    numba.set_num_threads(1)
    rows, phases = (execute or evaluate)(task)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss      # KiB on Linux
    return rows, dict(phases, peak_kib=peak)


class Interrupted(Exception):
    """SIGTERM, raised in the parent so a killed run keeps its checkpoint."""


def raise_interrupt(signum, frame):
    raise Interrupted()


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
    30 s).  The ETA weighs tasks by their estimated cost (runner.cost)."""

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


# ----- the run ---------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What ``run`` did: rows written, tasks run and resumed, phase seconds (summed over
    workers), wall seconds, whether it was interrupted."""

    rows: list = field(default_factory=list)
    ran: int = 0
    resumed: int = 0
    total: int = 0
    phases: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    wall: float = 0.0
    peak_kib: int = 0          # largest resident set of a worker (the parent with jobs=1)
    interrupted: bool = False
    out: str = ""


def run(sel: Selection, out, jobs: int | None = None, resume: bool = False, csv=None,
        progress: bool = True, stream=None, execute=None, executor: str = "local",
        scheduler: str | None = None) -> Outcome:
    """Run the selection, checkpointing into ``<out>.partial.jsonl``; write ``out`` (and
    ``csv``) at the end.  ``executor``: ``local`` (``jobs`` processes) or ``dask`` (the
    cluster at ``scheduler``, or a LocalCluster of ``jobs`` workers; reports/executors.py).
    ``execute(task) -> (rows, phases)`` replaces ``evaluate`` (tests: in this process with
    the local executor, shipped by value to the workers with dask).  ValueError for a
    checkpoint of another run; executors.ExecutorError when Dask cannot run."""
    t0 = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    tasks = plan(sel)
    ckpt_path = checkpoint_path(out)
    done = {}
    if resume and os.path.exists(ckpt_path):
        done = read_checkpoint(ckpt_path, sel.fingerprint())
    keys = {t.key for t in tasks}
    done = {k: v for k, v in done.items() if k in keys}
    costs = {t.key: cost(t) for t in tasks if t.key not in done}
    if execute is None and scheduler is None:         # this machine's memory
        biggest = max((t for t in tasks if t.key not in done), key=footprint, default=None)
        if biggest is not None:
            budget.check_run((f"{biggest.op} {biggest.instance} in {biggest.format}",
                              footprint(biggest), biggest.draws), min(jobs, len(costs)))
    todo = sorted((t for t in tasks if t.key not in done), key=lambda t: -costs[t.key])
    outcome = Outcome(resumed=len(done), total=len(tasks), out=str(out))
    ckpt = Checkpoint(ckpt_path, sel, done)
    bar = Progress(len(tasks), len(done), stream, quiet=not progress,
                   work=sum(costs.values()))
    collected = dict(done)
    old_term = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        announce = executors.announcer(stream) if progress else None
        for key, rows, phases in _execute(todo, jobs, execute, executor, scheduler, announce):
            ckpt.add(key, rows)
            collected[key] = rows
            for p in PHASES:
                outcome.phases[p] += phases.get(p, 0.0)
            outcome.peak_kib = max(outcome.peak_kib, int(phases.get("peak_kib", 0)))
            outcome.ran += 1
            bar.update(1, costs[key])
    except (KeyboardInterrupt, Interrupted):
        outcome.interrupted = True
    finally:
        signal.signal(signal.SIGTERM, old_term)
        ckpt.close()
    if outcome.interrupted:
        outcome.wall = time.perf_counter() - t0
        return outcome
    outcome.rows = [r for rows in collected.values() for r in rows]
    results.write(out, results.document(outcome.rows, sel), csv=csv)
    with contextlib.suppress(FileNotFoundError):
        os.remove(ckpt_path)
    outcome.wall = time.perf_counter() - t0
    if not outcome.peak_kib:
        import resource
        outcome.peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return outcome


def _execute(todo, jobs, execute=None, executor="local", scheduler=None, announce=None):
    """Yield (key, rows, phases) of every task as it finishes, on ``executor``; a task that
    failed on the cluster (executors.Failed) yields error rows with the failure's message,
    one per route, as evaluate does for a task that cannot start."""
    units = [(t.key, (t, execute)) for t in todo]
    if executor == executors.DASK:
        tasks = {t.key: t for t in todo}
        for key, got in executors.dask(_unit, units, scheduler=scheduler, workers=jobs,
                                       announce=announce, name=_unit_name):
            if isinstance(got, executors.Failed):
                task = tasks[key]
                got = ([r for route in task.routes
                        for r in status_rows(task, None, route, "error", got.message)], {})
            yield (key, *got)
        return
    # A test's ``execute`` is a closure: it runs here, pickle cannot send it to the pool.
    for key, got in executors.local(_unit, units, jobs, serial=execute is not None,
                                    initializer=_init_worker, preload=executors.EVALUATE,
                                    batched=True, name=_unit_name):
        yield (key, *got)


def _unit_name(key) -> str:
    return f"task {key}"


def check_selection(sel: Selection) -> None:
    """ValueError (one line) for names the run cannot use."""
    for f in sel.formats:
        formats.get(f)
    for m in sel.modes:
        formats.mode_code(m)
    for p in sel.policies:
        if p not in numerics.PRESETS:
            raise ValueError(f"unknown policy {p!r}; presets are {', '.join(numerics.PRESETS)}")
    for i in sel.implementations:
        if i not in IMPLEMENTATIONS:
            raise ValueError(f"unknown implementation {i!r} (choose from "
                             f"{', '.join(IMPLEMENTATIONS)})")

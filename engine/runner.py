"""The coverage run: plan the tasks of a selection, run them on an executor (this machine's
processes or a Dask cluster, engine/executors.py) with a checkpoint, and write the results
file (the orchestration is engine/orchestrate.py, shared with ``measure``).

``Selection`` holds what a run covers (operators, formats, modes, routes, policies,
implementations, draws, seed, exhaustive).  ``plan(selection) -> [Task]``; ``run(selection,
out, jobs, ...) -> Outcome`` executes the tasks (engine/evaluate.py measures one), appends
each finished task's rows to the checkpoint ``<out>.partial.jsonl`` as it finishes, writes
the results file atomically (engine/results.py) and removes the checkpoint.  An interrupted
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

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import ClassVar

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes

from . import budget, executors, implementations, orchestrate, reference, results
from .evaluate import PHASES, evaluate
from .samples import sample_kinds
from .task import ROUTES, Task, batchable, status_rows
# The checkpoint and progress of a run (engine/orchestrate.py), under the names run's
# callers know.
from .orchestrate import Checkpoint, Progress, checkpoint_path, read_checkpoint
from .plan import Outcome

__all__ = ["Selection", "DEFAULT_FORMATS", "DEFAULT_DRAWS", "GROWTH",
           "instances", "plan", "cost", "footprint", "run", "check_selection",
           "Checkpoint", "Progress", "checkpoint_path", "read_checkpoint"]

DEFAULT_FORMATS = ("bfloat16", "binary16", "float8_e4m3fn", "float8_e5m2", "binary32")
DEFAULT_DRAWS = 3
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
    # User-defined scaled formats (--formats-file): ((label, ScaledFormat), ...); the tasks
    # carry them, so workers need no file.
    schemes: tuple = ()
    # Each emulated forward row also gets the bound of its roundoff over the box of its
    # ordinary draws (engine/evaluate.py, routes.bounds.domain).
    domain_bounds: bool = False
    reference_text: ClassVar[str] = reference.COVERAGE

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
        if self.domain_bounds:
            parts.append("--domain-bounds")
        return " ".join(parts)

    def describe(self) -> dict:
        """The selection as the results file's meta records it."""
        return {"ops": list(self.ops), "formats": list(self.formats), "modes": list(self.modes),
                "routes": list(self.routes), "policies": list(self.policies),
                "implementations": list(self.implementations), "samples": self.draws,
                "exhaustive": self.exhaustive} | (
                    {"domain_bounds": True} if self.domain_bounds else {})

    def fingerprint(self) -> str:
        """A hash of everything that decides the rows (checkpoints must match it)."""
        parts = [list(self.ops), list(self.formats), list(self.modes), list(self.routes),
                 list(self.policies), list(self.implementations), self.draws, self.seed,
                 self.exhaustive, results.SCHEMA]
        if self.schemes:                  # a user scheme's definition decides its rows too
            parts.append([[label, repr(s)] for label, s in self.schemes])
        if self.domain_bounds:
            parts.append("domain_bounds")
        text = json.dumps(parts)
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
    schemes = dict(sel.schemes)
    for name in sel.ops:
        for first, (label, attrs, cap, kinds) in enumerate(instances(name)):
            o = routes.op(name, **attrs)
            canon = tuple(o.attrs.items())
            draws = min(sel.draws, cap) if cap else sel.draws
            for fmt in sel.formats:
                for impl in sel.implementations:
                    policies = implementations.named(impl).policy_labels(sel.policies)
                    for mode in sel.modes:
                        for policy in policies:
                            tasks.append(Task(name, label, canon, fmt, mode, policy, impl,
                                              tuple(sel.routes), draws, sel.seed,
                                              sel.exhaustive and first == 0, kinds,
                                              scheme=schemes.get(fmt),
                                              domain_bounds=sel.domain_bounds))
    return tasks


def _sizes(task: Task):
    """(operator, elements of one draw over every port, sample kinds drawn), or None for a
    task whose operator cannot be built (it becomes an error row)."""
    try:
        o = task.build()
        n = sum(int(max(1, _size(p.shape))) for p in o.inputs + o.outputs)
        kinds = len([k for k in sample_kinds(o) if not task.kinds or k in task.kinds]) or 1
    except Exception:                                         # noqa: BLE001 (an error row)
        return None
    return o, n, kinds


def cost(task: Task) -> float:
    """A rough cost estimate in units of one small evaluation: evaluations per route (one
    per sample kind for batched elementwise instances, one per draw otherwise) times a size
    factor; used to start the expensive tasks first and to weigh the ETA."""
    sizes = _sizes(task)
    if sizes is None:
        calls, size = 1, 1
    else:
        o, n, kinds = sizes
        calls, size = (kinds, n * task.draws) if batchable(o) else (kinds * task.draws, n)
    return len(task.routes) * calls * (1 + size / 200)


def footprint(task: Task) -> int:
    """The input and output elements a task holds at once: every port of every draw of
    every sample kind (the whole format for an exhaustive task); what its memory grows
    with (engine/budget.py)."""
    sizes = _sizes(task)
    if sizes is None:
        return 0
    o, n, kinds = sizes
    if task.exhaustive:
        return (1 << min(task.fmt.bits, 16)) * len(o.inputs + o.outputs)
    return n * kinds * task.draws


def _size(shape):
    s = 1
    for n in shape:
        s *= n
    return s


# ----- workers ---------------------------------------------------------------------------------

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


# ----- the run ---------------------------------------------------------------------------------


def run(sel: Selection, out, jobs: int | None = None, resume: bool = False, csv=None,
        progress: bool = True, stream=None, execute=None, executor: str = "local",
        scheduler: str | None = None) -> Outcome:
    """Run the selection, checkpointing into ``<out>.partial.jsonl``; write ``out`` (and
    ``csv``) at the end.  ``executor``: ``local`` (``jobs`` processes) or ``dask`` (the
    cluster at ``scheduler``, or a LocalCluster of ``jobs`` workers; engine/executors.py).
    ``execute(task) -> (rows, phases)`` replaces ``evaluate`` (tests: in this process with
    the local executor, shipped by value to the workers with dask).  ValueError for a
    checkpoint of another run; executors.ExecutorError when Dask cannot run."""
    t0 = time.perf_counter()
    jobs = jobs or os.cpu_count() or 1
    tasks = plan(sel)
    keys = {t.key for t in tasks}
    done = {k: v for k, v in orchestrate.resumed(out, sel.fingerprint(), resume).items()
            if k in keys}
    costs = {t.key: cost(t) for t in tasks if t.key not in done}
    if execute is None and scheduler is None:         # this machine's memory
        sized = [(footprint(t), t) for t in tasks if t.key not in done]
        if sized:
            elements, big = max(sized, key=lambda s: s[0])
            budget.check_run((f"{big.op} {big.instance} in {big.format}", elements, big.draws),
                             min(jobs, len(costs)))
    todo = sorted((t for t in tasks if t.key not in done), key=lambda t: -costs[t.key])
    outcome = Outcome(resumed=len(done), total=len(tasks), out=str(out),
                      phases=dict.fromkeys(PHASES, 0.0))
    collected = dict(done)

    def fold(key, got):
        rows, phases = got
        collected[key] = rows
        for p in PHASES:
            outcome.phases[p] += phases.get(p, 0.0)
        outcome.peak_kib = max(outcome.peak_kib, int(phases.get("peak_kib", 0)))

    units = [(t.key, (t, execute)) for t in todo]
    # A resumed checkpoint is written anew, holding the kept tasks of this plan only.
    orchestrate.orchestrate(
        _unit, units, _executor(todo, jobs, execute, executor, scheduler), fold,
        checkpoint=Checkpoint(checkpoint_path(out), sel, done),
        bar=Progress(len(tasks), len(done), stream, quiet=not progress,
                     work=sum(costs.values())),
        outcome=outcome, record=lambda got: got[0], weight=costs.__getitem__)
    if outcome.interrupted:
        outcome.wall = time.perf_counter() - t0
        return outcome
    outcome.rows = [r for rows in collected.values() for r in rows]
    orchestrate.finish(out, results.document(outcome.rows, sel), csv=csv)
    outcome.wall = time.perf_counter() - t0
    if not outcome.peak_kib:
        import resource
        outcome.peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return outcome


def _executor(todo, jobs, execute=None, executor="local", scheduler=None):
    """The orchestrate.Executor of the tasks ``todo``: a task that failed on the cluster
    (executors.Failed) becomes error rows with the failure's message, one per route, as
    evaluate makes for a task that cannot start."""
    tasks = {t.key: t for t in todo}

    def failed(key, message):
        task = tasks[key]
        return ([r for route in task.routes
                 for r in status_rows(task, None, route, "error", message)], {})
    # A test's ``execute`` is a closure: it runs here, pickle cannot send it to the pool.
    return orchestrate.Executor(executor, scheduler, jobs, name=_unit_name, failed=failed,
                                serial=execute is not None, preload=executors.EVALUATE,
                                batched=True)


def _unit_name(key) -> str:
    return f"task {key}"


def check_selection(sel: Selection) -> None:
    """ValueError (one line) for names the run cannot use (a scaled format is measured as
    a storage format: engine/task.py)."""
    known = dict(sel.schemes)
    for f in sel.formats:
        fmt = known.get(f) or formats.get(f)
        if not isinstance(fmt, formats.ScaledFormat) and not fmt.fits_binary64:
            raise ValueError(f"format {fmt.label}: the coverage run measures formats that "
                             f"fit binary64")
    for m in sel.modes:
        formats.mode_code(m)
    for p in sel.policies:
        numerics.preset(p, "bfloat16")        # ValueError naming the policy
    known = implementations.names()
    for i in sel.implementations:
        if i not in known:
            raise ValueError(f"unknown implementation {i!r} (choose from "
                             f"{', '.join(known)})")

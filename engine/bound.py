"""``roundoff-coverage bound``: each route's bound over an input box (routes.bounds.domain),
with the largest error measured at points drawn inside the same box next to it.

``BoundSelection`` holds what a bound run covers (operators, formats, modes, policies,
routes, the box, the budget of pieces, samples, seed); ``plan(sel) -> [Task]`` one task per
operator instance (the operator's first example, as the coverage run's exhaustive task
takes it), format, mode and policy, implementation ``emulated`` (the model the bound is
of); ``evaluate(task, box, budget) -> [Bounded]`` one per (route, port): its row, the pieces
of the bound's partition and the samples above the bound; ``run(sel, out, ...)`` the tasks
on the engine's orchestration (engine/orchestrate.py: worker processes, a checkpoint beside
``out``, resume), as the coverage run's.

The domain: every value input (a differentiable port) ranges over the format's values in
the box [lo, hi] entry by entry; the other inputs keep the operator's ordinary sample
(seeded from the run's seed, operator, attributes and format, as the coverage run draws
it); the tangents and cotangents are fixed, one standard normal draw rounded into the format
(seeded), the same at every point.  The sampled points: the two corners (every entry lo,
every entry hi), then points whose entries are drawn uniformly in [lo, hi] and rounded to
nearest into the format (values inside the box: its ends are format values after
routes.bounds.domain.snap); ``samples`` draws, batched into one longer instance for the
elementwise operators (reports/task.batchable), which the bound covers element by element.
They are measured like the coverage run's (reports/measuring.measure_port, the reference of
numerics.settle), and each sample's |ulp error| is compared with the bound of its element:
above it by more than the measurement's own resolution (2**-30 ulp: the exact value is read
through binary64) is a violation, which would be a bug of the bound or of the emulated
backend.

Rows (engine/rows.py) carry the sampled statistics, ``domain_bound`` (the largest bound
over the port's elements, ulp; inf where none holds) and ``box`` ([lo, hi]).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass

import numpy as np

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.routes.bounds import domain_bound

from . import orchestrate, reference, results
from .orchestrate import Checkpoint, Progress, checkpoint_path
from .plan import Outcome
from .implementations.base import run_routes, subject_rule
from .samples import Draws
from .measuring import measure_port, per_sample, worst_case
from .task import Task, base_row, batchable, one_line, rng_for, route_ports, status_rows

ROUTES = ("forward", "tangent", "gradient")
DEFAULT_BUDGET, DEFAULT_SAMPLES = 64, 256
# Measured errors are read through the exact value's binary64 stand-in: a sample counts as a
# violation when it exceeds its bound by more than this many ulps (relative and absolute).
SLACK = 2.0 ** -30


@dataclass(frozen=True)
class BoundSelection:
    """What a bound run covers; the results file's meta records it."""

    ops: tuple
    formats: tuple = ("bfloat16",)
    modes: tuple = ("nearest_even",)
    policies: tuple = ("strict",)
    routes: tuple = ROUTES
    box: tuple = (-1.0, 1.0)
    budget: int = DEFAULT_BUDGET
    samples: int = DEFAULT_SAMPLES
    seed: int = 0
    reference_text: str = reference.BOUND

    def command(self) -> str:
        parts = ["roundoff-coverage bound", "--ops " + ",".join(self.ops),
                 f"--box={self.box[0]!r},{self.box[1]!r}", "--format " + ",".join(self.formats)]
        for flag, value, default in (("--modes", self.modes, ("nearest_even",)),
                                     ("--policies", self.policies, ("strict",)),
                                     ("--routes", self.routes, ROUTES)):
            if tuple(value) != default:
                parts.append(f"{flag} {','.join(value)}")
        parts.append(f"--budget {self.budget} --samples {self.samples} --seed {self.seed}")
        return " ".join(parts)

    def describe(self) -> dict:
        return {"ops": list(self.ops), "formats": list(self.formats),
                "modes": list(self.modes), "policies": list(self.policies),
                "routes": list(self.routes), "box": list(self.box), "budget": self.budget,
                "samples": self.samples}

    def fingerprint(self) -> str:
        """A hash of everything that decides the rows (a checkpoint must match it)."""
        parts = [list(self.ops), list(self.formats), list(self.modes), list(self.policies),
                 list(self.routes), [repr(v) for v in self.box], self.budget, self.samples,
                 self.seed, self.reference_text, results.SCHEMA]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def instance(name: str) -> tuple:
    """(label, attributes) of the operator's first example (its defaults without one)."""
    decl = routes.declaration(name)
    for label, attrs in decl.examples.items():
        return label or "default", dict(attrs)
    return "default", {}


def plan(sel: BoundSelection) -> list:
    """One Task per operator instance, format, mode and policy (implementation emulated)."""
    tasks = []
    for name in sel.ops:
        label, attrs = instance(name)
        canon = tuple(routes.op(name, **attrs).attrs.items())
        for fmt in sel.formats:
            for mode in sel.modes:
                for policy in sel.policies:
                    tasks.append(Task(name, label, canon, fmt, mode, policy, "emulated",
                                      tuple(sel.routes), sel.samples, sel.seed))
    return tasks


@dataclass
class Bounded:
    """One row of a bound run with what the row does not hold: ``pieces`` of the bound's
    partition, ``violations`` (samples above their element's bound)."""

    row: dict
    pieces: int = 0
    violations: int = 0


# ----- the run ----------------------------------------------------------------------------------
def run(sel: BoundSelection, out, jobs: int | None = None, resume: bool = False,
        progress: bool = True, stream=None) -> tuple[Outcome, list]:
    """Every task of ``plan(sel)`` on ``jobs`` processes (default: every core), each
    finished task's records kept in the checkpoint ``<out>.partial.jsonl``; the results file
    ``out`` written at the end (engine/orchestrate.py, as the coverage run).  (Outcome,
    [Bounded] in plan order); ``outcome.interrupted`` when SIGTERM or Ctrl-C stopped it, the
    checkpoint kept for ``resume``.  A special file ``out`` (/dev/null, a FIFO) is streamed
    into at the end and no checkpoint is kept (there is nowhere beside it to keep one).
    ValueError (one line) for a checkpoint of another run."""
    t0 = time.perf_counter()
    tasks = plan(sel)
    by_key = {t.key: t for t in tasks}
    stream_out = results.special_file(out) is not None
    if stream_out and resume:
        raise ValueError(f"--resume: {out} is {results.special_file(out)}, beside which no "
                         f"checkpoint is kept; give a file path")
    done = {k: v for k, v in orchestrate.resumed(out, sel.fingerprint(), resume).items()
            if k in by_key}
    collected = dict(done)
    outcome = Outcome(resumed=len(done), total=len(tasks), out=str(out))

    def failed(key, message):
        task = by_key[key]
        return [{"row": r, "pieces": 0, "violations": 0} for route in task.routes
                for r in status_rows(task, None, route, "error", message)]

    units = [(t.key, (t, sel.box, sel.budget)) for t in tasks if t.key not in done]
    orchestrate.orchestrate(
        _unit, units,
        orchestrate.Executor(jobs=jobs or os.cpu_count() or 1, name=lambda k: f"task {k}",
                             failed=failed, preload=__name__),
        collected.__setitem__,
        checkpoint=None if stream_out else Checkpoint(checkpoint_path(out), sel, done),
        bar=Progress(len(tasks), len(done), stream, quiet=not progress), outcome=outcome)
    outcome.wall = time.perf_counter() - t0
    if outcome.interrupted:
        return outcome, []
    bounded = [Bounded(**rec) for t in tasks for rec in collected[t.key]]
    outcome.rows = [b.row for b in bounded]
    orchestrate.finish(out, results.document(outcome.rows, sel))
    return outcome, bounded


def _unit(task: Task, box, budget: int) -> list:
    """evaluate's Bounded as JSON records (the checkpoint's lines)."""
    return [{"row": b.row, "pieces": b.pieces, "violations": b.violations}
            for b in evaluate(task, tuple(box), budget)]


# ----- one task ---------------------------------------------------------------------------------
def evaluate(task: Task, box, budget: int) -> list:
    """[Bounded] of every route and port of ``task`` over ``box`` (lo, hi); a failure is an
    error row, never an exception."""
    try:
        o = task.build()
        o.check()
    except Exception as exc:                                  # noqa: BLE001
        return [Bounded(r) for route in task.routes
                for r in status_rows(task, None, route, "error", one_line(exc))]
    out = []
    setup = _Setup(task, o, box)
    for route in task.routes:
        problem = _unmeasured(o, route)
        if problem:
            out += [Bounded(r) for r in status_rows(task, o, route, "not_differentiable",
                                                    problem)]
            continue
        try:
            out += _route(task, setup, route, budget)
        except Exception as exc:                              # noqa: BLE001
            out += [Bounded(r) for r in status_rows(task, o, route, "error",
                                                    one_line(exc))]
    return out


def _unmeasured(o, route) -> str | None:
    """Why ``route`` of ``o`` has nothing to measure (the coverage run's statuses)."""
    if route != "forward" and not any(p.differentiable for p in o.inputs):
        return "no value input"
    if route == "tangent" and not o.has_jvp:
        return o.no_jvp_reason() or "no forward-mode rule is registered"
    if route == "gradient" and o.decl.backward is None:
        return "no pullback"
    if not route_ports(o, route):
        return "no value output"
    return None


class _Setup:
    """The inputs of one task's domain: boxes, the fixed inputs, tangents, cotangents."""

    def __init__(self, task, o, box):
        fmt = task.fmt
        name = fmt.name if fmt.name in formats.CATALOG else fmt
        base = o.samples(rng_for(task.seed, task.op, task.attrs, task.format, "ordinary"),
                         name, "ordinary")
        lo, hi = (float(v) for v in box)
        self.o, self.fmt, self.base = o, fmt, base
        self.lows = [np.full(p.shape, lo) if p.differentiable else x
                     for p, x in zip(o.inputs, base)]
        self.highs = [np.full(p.shape, hi) if p.differentiable else x
                      for p, x in zip(o.inputs, base)]
        trng, crng = (rng_for(task.seed, task.op, task.attrs, task.format, "box", r)
                      for r in ("tangent", "gradient"))
        self.tangents = tuple(self._linear(trng, p) for p in o.inputs)
        self.cotangents = tuple(self._linear(crng, p) for p in o.outputs)
        self.elementwise = batchable(o)

    def _linear(self, rng, p):
        if not p.differentiable:
            return None
        return formats.round_to(rng.standard_normal(p.shape), self.fmt)

    def draws(self, task, bound, samples) -> Draws:
        """The sampled points (module docstring) as Draws of kind ``box``, the fixed
        tangents and cotangents in every draw."""
        o, fmt = self.o, self.fmt
        rng = rng_for(task.seed, task.op, task.attrs, task.format, "box", "points")
        lows, highs = bound.lows, bound.highs
        size = int(np.prod(o.attrs["shape"], dtype=np.int64)) if "shape" in o.attrs else 0
        if self.elementwise and size > 0:
            n = samples + 2
            big = o.replace(shape=(size * n,))
            xs = tuple(self._points(rng, p, lo, hi, n) if p.differentiable else
                       _tile(x, p, o.attrs["shape"], n)
                       for p, x, lo, hi in zip(o.inputs, self.base, lows, highs))
            d = Draws(big, [xs], ["box"], True, fmt, task)
            d.tangents = [tuple(_tile(t, p, o.attrs["shape"], n)
                                for t, p in zip(self.tangents, o.inputs))]
            d.cotangents = [tuple(_tile(c, p, o.attrs["shape"], n)
                                  for c, p in zip(self.cotangents, o.outputs))]
            return d
        inputs = []
        for k in range(samples + 2):
            inputs.append(tuple(
                (lo if k == 0 else hi if k == 1 else _uniform(rng, lo, hi, fmt))
                if p.differentiable else x
                for p, x, lo, hi in zip(o.inputs, self.base, lows, highs)))
        d = Draws(o, inputs, ["box"] * len(inputs), False, fmt, task)
        d.tangents = [self.tangents] * len(inputs)
        d.cotangents = [self.cotangents] * len(inputs)
        return d

    def _points(self, rng, p, lo, hi, n):
        """n points of one element's box, each repeated over the instance's elements: the
        corners lo and hi first."""
        lo, hi = np.asarray(lo).reshape(-1), np.asarray(hi).reshape(-1)
        size = lo.size
        pts = [lo, hi] + [_uniform(rng, lo, hi, self.fmt) for _ in range(n - 2)]
        return np.concatenate(pts).reshape(size * n)


def _uniform(rng, lo, hi, fmt):
    """Uniform reals in [lo, hi] (format values) rounded to nearest into the format: inside."""
    x = rng.uniform(lo, hi)
    return np.clip(formats.round_to(np.asarray(x, dtype=np.float64), fmt), lo, hi)


def _tile(v, port, shape, n):
    """A fixed input of an elementwise instance repeated for n points (rank 0 unchanged)."""
    if v is None or tuple(port.shape) != tuple(shape):
        return v
    return np.tile(np.asarray(v).reshape(-1), n)


def _route(task, setup, route, budget) -> list:
    """The Outcomes of one route: its domain bound, the sampled errors, the rows."""
    o, fmt = setup.o, setup.fmt
    bound = domain_bound(o, setup.lows, setup.highs, fmt, task.mode, task.accumulation,
                         route, budget, setup.tangents, setup.cotangents, setup.elementwise)
    d = setup.draws(task, bound, task.draws)
    em = subject_rule(d.op, numerics.emulated(fmt, task.mode, task.accumulation, seed=task.seed))
    got = run_routes(em, d, [route])[route]
    if isinstance(got, Exception):
        raise got
    exact, prec = _reference(d, fmt, route)
    by_port = dict(zip(bound.ports, bound.ulps))
    out = []
    for i, name, port in route_ports(d.op, route):
        row = base_row(task, route, name, "ok")
        row["ref_prec"] = prec
        row["box"] = [float(v) for v in _box_of(setup, bound)]
        comp, where = _joined(got, i, port.scalar)
        ex, _ = _joined(exact, i, False)
        kinds, inputs = per_sample(d, where)
        ulp = measure_port(row, comp, ex, fmt, None, kinds=kinds, inputs=inputs)
        bad = 0
        if ulp is not None:
            size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
            row["worst"] = worst_case(d, ulp, where, comp, ex, route, fmt, size)
        if name in by_port and ulp is not None:
            per = np.asarray(by_port[name], dtype=np.float64).reshape(-1)
            row["domain_bound"] = float(per.max()) if per.size else 0.0
            # Element e of a longer elementwise instance is element e mod n of the box's.
            b = per[np.array([e for _, e in where], dtype=np.int64) % max(per.size, 1)] \
                if per.size else np.zeros(0)
            a = np.abs(np.asarray(ulp, dtype=np.float64))
            over = ~np.isnan(a) & (a > b * (1 + SLACK) + SLACK)
            bad = int(over.sum())
            row["violations"] = bad
        out.append(Bounded(row, bound.pieces, bad))
    return out


def _box_of(setup, bound):
    """The box [lo, hi] of the value inputs after shrinking to format values."""
    ends = [(float(np.min(lo)), float(np.max(hi))) for p, lo, hi in
            zip(setup.o.inputs, bound.lows, bound.highs) if p.differentiable and np.size(lo)]
    if not ends:
        return [0.0, 0.0]
    return [min(e[0] for e in ends), max(e[1] for e in ends)]


def _joined(per_draw, i, scalar):
    """Port ``i`` of every draw flattened and joined, with (draw, element) of each entry;
    float64 at scalar ports of computed values, the objects as they are otherwise."""
    parts, where = [], []
    for k, ys in enumerate(per_draw):
        a = np.asarray(ys[i], dtype=np.float64) if scalar else np.asarray(ys[i])
        parts.append(a.reshape(-1))
        where += [(k, j) for j in range(parts[-1].size)]
    return (np.concatenate(parts) if parts else np.zeros(0)), where


def _reference(d, fmt, route):
    """(per-draw exact values of ``route``, the highest precision needed) by
    the reference policy (engine/reference.py)."""
    def fn(prec, items):
        got = run_routes(subject_rule(d.op, numerics.reference(prec)), d.subset(items),
                         [route])[route]
        if isinstance(got, Exception):
            raise got
        return list(got)
    s = reference.settle(fn, len(d.inputs), fmt)
    return s.values, max(s.precs) if s.precs else reference.start(fmt)

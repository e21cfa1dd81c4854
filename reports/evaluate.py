"""One task of the coverage run, evaluated and measured: ``evaluate(task) -> (rows, phases)``.

A task is one operator instance under one (format, mode, policy, implementation) with the
routes asked for; it yields one row per (route, port) (reports/rows.py).  The routes of a
task share their sample inputs, so forward, tangent and gradient errors of a row set are
measured on the same points.

Steps, each timed into a phase (``sampling``, ``evaluation``, ``reference``, ``bounds``,
``measurement``):

1. Inputs: reports/draws.py (``draw``), as the implementation selects them.
2. The routes under the implementation (reports/implementations.py: emulated, native,
   cuda), which says first which routes it cannot measure (status rows).
3. The reference: the same rule under ``numerics.reference`` on the same rounded inputs,
   tangents and cotangents, by the precision loop of ``numerics.settle``: every draw at
   p + 64 bits and at twice that (p the format's precision), and again at twice the
   precision, up to 2048 bits, for the draws whose exact values moved by more than 2**-32
   ulp between the last two (cancellation inside the rule is the usual cause).  Each row's
   ``ref_prec`` is the highest precision its draws needed.
4. Metrics and bounds: reports/measuring.py, the bounds of the emulated model where the
   implementation says they apply.
"""

from __future__ import annotations

import time

import numpy as np

from roundoff_coverage import numerics

from . import implementations
from .draws import Draws, draw, run_routes, sample_kinds
from .measuring import (REPRO_MAX_ELEMENTS, Bounds, _apriori, _bound, _concat, by_magnitude,
                        interval_bounds, measure_port, per_sample, worst_case)
from .task import (BATCH_FAMILIES, EXHAUSTIVE_FAMILIES, EXHAUSTIVE_MAX_BITS, ROUTES, Task,
                   attrs_text, base_row, batchable, exhaustible, jsonable, one_line, rng_for,
                   route_ports, status_rows)

# The coverage run's names, in one place for its readers (runner, tests): the task, its
# draws, measurement and the driver.
__all__ = ["evaluate", "PHASES", "REF_EXTRA", "MAX_REF_PREC", "Task", "ROUTES",
           "BATCH_FAMILIES", "EXHAUSTIVE_FAMILIES", "EXHAUSTIVE_MAX_BITS", "attrs_text",
           "jsonable", "rng_for", "one_line", "route_ports", "base_row", "status_rows",
           "batchable", "exhaustible", "Draws", "draw", "sample_kinds", "run_routes",
           "REPRO_MAX_ELEMENTS", "Bounds", "measure_port", "per_sample", "by_magnitude",
           "worst_case", "interval_bounds"]

# The reference starts at the format's precision + REF_EXTRA bits and doubles until settled
# (numerics.settle), at most MAX_REF_PREC bits.
REF_EXTRA, MAX_REF_PREC = 64, 2048
PHASES = ("sampling", "evaluation", "reference", "bounds", "measurement")


class _Timer:
    def __init__(self):
        self.t = dict.fromkeys(PHASES, 0.0)

    def __call__(self, phase):
        timer = self

        class _Span:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.t[phase] += time.perf_counter() - self.t0
        return _Span()


# ----- the task --------------------------------------------------------------------------------

def evaluate(task: Task):
    """(rows, phase seconds) of one task; every failure becomes a row, never an exception."""
    timer = _Timer()
    try:
        o = task.build()
        o.check()
        fmt = task.fmt
    except Exception as exc:                                  # noqa: BLE001
        return [r for route in task.routes
                for r in status_rows(task, None, route, "error", one_line(exc))], timer.t
    rows, pending = [], []
    values_in = any(p.differentiable for p in o.inputs)
    for route in task.routes:
        if route != "forward" and not values_in:
            rows += status_rows(task, o, route, "not_differentiable", "no value input")
        elif route == "tangent" and not o.has_jvp:
            rows += status_rows(task, o, route, "not_differentiable",
                                o.no_jvp_reason() or "no forward-mode rule is registered")
        elif route == "gradient" and o.decl.backward is None:
            rows += status_rows(task, o, route, "not_differentiable", "no pullback")
        elif not route_ports(o, route):
            rows += status_rows(task, o, route, "not_differentiable", "no value output")
        else:
            pending.append(route)
    if not pending:
        return rows, timer.t
    ref_prec = fmt.precision + REF_EXTRA
    try:
        impl = implementations.of(task, o, fmt)
        problems = impl.problems(pending)
    except Exception as exc:                                  # noqa: BLE001
        impl, problems = None, dict.fromkeys(pending, ("error", one_line(exc), None))
    reference = o.rule(numerics.reference(ref_prec))
    if reference is None:
        problems = {r: problems.get(r) or (
            "no_rule", f"the reference lacks capability {o.need}: no exact value to measure "
                       f"against", o.need) for r in pending}
    for route in pending:
        if route in problems:
            rows += status_rows(task, o, route, *problems[route])
    pending = [r for r in pending if r not in problems]
    if not pending:
        return rows, timer.t
    try:
        with timer("sampling"):
            d = impl.select(draw(task, o, fmt))
    except Exception as exc:                                  # noqa: BLE001
        for route in pending:
            rows += status_rows(task, o, route, "error", f"sampling: {one_line(exc)}")
        return rows, timer.t
    rows += _measure_routes(task, impl, d, fmt, pending, reference, timer)
    return rows, timer.t


def _measure_routes(task, impl, d, fmt, pending, reference, timer):
    rows = []
    with timer("evaluation"):
        got = impl.evaluate(d, pending)
    ok = [r for r in pending if not isinstance(got[r], Exception)]
    with timer("reference"):
        if d.op is not reference.op:            # batched draws: a longer instance
            reference = d.op.rule(reference.xp)
        ref = run_routes(reference, d, ok)
        exact, precs = _settle(d, fmt, [r for r in ok if not isinstance(ref[r], Exception)],
                               ref, reference.xp.prec)
    bounded = [r for r in ok if impl.model_task(r) is not None]
    with timer("bounds"):
        interval = interval_bounds(impl.model_task(bounded[0]), d, fmt, bounded) \
            if bounded else {}
    for route in pending:
        if isinstance(got[route], Exception):
            rows += status_rows(task, d.op, route, "error", one_line(got[route]))
            continue
        if isinstance(ref[route], Exception):
            rows += status_rows(task, d.op, route, "error", f"reference: {one_line(ref[route])}")
            continue
        if isinstance(exact, Exception):
            rows += status_rows(task, d.op, route, "error", f"reference: {one_line(exact)}")
            continue
        model = impl.model_task(route)
        with timer("bounds"):
            b = Bounds() if model is None else \
                Bounds(_bound(model, route),
                       _apriori(model, d, fmt) if route == "forward" else None,
                       interval.get(route))
        with timer("measurement"):
            measured = _rows(task, d, fmt, impl.numbers, route, got[route], exact[route],
                             max(precs), b)
        impl.annotate(route, measured)
        rows += measured
    return rows


def _settle(d, fmt, routes, first, start):
    """({route: per-draw exact values}, per-draw precision) of the routes by numerics.settle
    from ``start`` bits, ``first`` holding the values at start; an Exception in place of the
    first when a route fails at a higher precision."""
    def fn(prec, items):
        again = run_routes(d.op.rule(numerics.reference(prec)), d.subset(items), routes)
        for r in routes:
            if isinstance(again[r], Exception):
                raise again[r]
        return [tuple(again[r][j] for r in routes) for j in range(len(items))]
    n = len(d.inputs)
    try:
        s = numerics.settle(fn, n, fmt, start, MAX_REF_PREC,
                            first=[tuple(first[r][k] for r in routes) for k in range(n)])
    except Exception as exc:                                  # noqa: BLE001
        return exc, [start]
    return {r: [v[i] for v in s.values] for i, r in enumerate(routes)}, s.precs or [start]


def _rows(task, d, fmt, backend, route, got, ref, prec, bounds):
    out = []
    for j, (i, name, port) in enumerate(route_ports(d.op, route)):
        row = base_row(task, route, name, "ok")
        row["ref_prec"] = prec
        # True only where ``draw`` enumerated the format (Task.exhaustive asks for it, but
        # only `exhaustible` operators and formats are enumerated; the rest are sampled).
        row["exhaustive"] = d.kinds == ["exhaustive"]
        comp, where = _concat(got, i, fmt, backend, port.scalar)
        exact, _ = _concat(ref, i, fmt, None)
        ulp = measure_port(row, comp, exact, fmt, bounds.ulps, *bounds.port(j),
                           *per_sample(d, where))
        if ulp is not None:
            size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
            row["worst"] = worst_case(d, ulp, where, comp, exact, route, fmt, size)
        out.append(row)
    return out

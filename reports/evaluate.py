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
3. The reference: the same rule under ``numerics.reference(p + 64)`` on the same rounded
   inputs, tangents and cotangents (p the format's precision).  Escalation, once: the
   points whose measurement could depend on the reference's own error -- the largest error
   when it exceeds 1 ulp (cancellation inside the rule at p + 64 bits is the usual suspect),
   errors within 2**-40 ulp of a half-integer (an exact value on a rounding boundary), errors
   above the certified bound -- are recomputed at p + 192 bits (only those elements for
   elementwise operators, their whole draws otherwise) and replace the p + 64 values; when
   that moves any error by more than 2**-20 of itself, every draw is recomputed at p + 192.
   ``ref_prec`` is the precision of the bulk of the reference (p + 64, or p + 192 after a
   full recomputation).
4. Metrics and bounds: reports/measuring.py, the bounds of the emulated model where the
   implementation says they apply.
"""

from __future__ import annotations

import time

import numpy as np

from roundoff_coverage import formats, numerics

from . import implementations
from .draws import Draws, draw, run_routes, sample_kinds
from .measuring import (REPRO_MAX_ELEMENTS, Bounds, _apriori, _bound, _concat, by_magnitude,
                        interval_bounds, measure_port, worst_case)
from .task import (BATCH_FAMILIES, EXHAUSTIVE_FAMILIES, EXHAUSTIVE_MAX_BITS, ROUTES, Task,
                   attrs_text, base_row, batchable, exhaustible, jsonable, one_line, rng_for,
                   route_ports, status_rows)

# The coverage run's names, in one place for its readers (runner, tests): the task, its
# draws, measurement and the driver.
__all__ = ["evaluate", "PHASES", "REF_EXTRA", "REF_ESCALATED", "Task", "ROUTES",
           "BATCH_FAMILIES", "EXHAUSTIVE_FAMILIES", "EXHAUSTIVE_MAX_BITS", "attrs_text",
           "jsonable", "rng_for", "one_line", "route_ports", "base_row", "status_rows",
           "batchable", "exhaustible", "Draws", "draw", "sample_kinds", "run_routes",
           "REPRO_MAX_ELEMENTS", "Bounds", "measure_port", "by_magnitude", "worst_case",
           "interval_bounds"]

REF_EXTRA, REF_ESCALATED = 64, 192
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
        fmt = formats.get(task.format)
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
    if o.rule(numerics.reference(ref_prec)) is None:
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
    rows += _measure_routes(task, impl, d, fmt, pending, ref_prec, timer)
    return rows, timer.t


def _measure_routes(task, impl, d, fmt, pending, ref_prec, timer):
    rows = []
    with timer("evaluation"):
        got = impl.evaluate(d, pending)
    ok = [r for r in pending if not isinstance(got[r], Exception)]
    with timer("reference"):
        ref = run_routes(d.op.rule(numerics.reference(ref_prec)), d, ok)
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
        model = impl.model_task(route)
        with timer("bounds"):
            b = Bounds() if model is None else \
                Bounds(_bound(model, route),
                       _apriori(model, d, fmt) if route == "forward" else None,
                       interval.get(route))
        measured = _measure_route(task, d, fmt, impl.numbers, route, got[route], ref[route],
                                  ref_prec, timer, b)
        impl.annotate(route, measured)
        rows += measured
    return rows


def _measure_route(task, d, fmt, backend, route, got, ref, prec, timer, bounds):
    """Rows of one route; the reference spot-checked at p + 192 bits on the draws that hold a
    suspicious error, and recomputed at p + 192 on every draw when the check moves an error
    by more than 2**-20 of itself (module docstring)."""
    bound = bounds.ulps
    with timer("measurement"):
        out, ulps = _rows(task, d, fmt, backend, route, got, ref, prec, bounds)
    hits = {}
    for ulp, where in ulps:
        for k, j in _suspicious(ulp, where, bound):
            hits.setdefault(k, set()).add(j)
    if not hits:
        return out
    hi = fmt.precision + REF_ESCALATED
    check = sorted(hits)
    ref = list(ref)
    with timer("reference"):
        if batchable(d.op):
            # Elementwise: recompute only the suspicious elements.
            for k in check:
                idx = np.array(sorted(hits[k]), dtype=np.int64)
                sub = d.elements(k, idx)            # an instance of len(idx) elements
                again = run_routes(sub.op.rule(numerics.reference(hi)), sub, [route])[route]
                if isinstance(again, Exception):
                    return out
                ref[k] = tuple(_put(a, idx, b) for a, b in zip(ref[k], again[0]))
        else:
            again = run_routes(d.op.rule(numerics.reference(hi)), d.subset(check),
                               [route])[route]
            if isinstance(again, Exception):
                return out
            for k, ys in zip(check, again):
                ref[k] = ys
    with timer("measurement"):
        out2, ulps2 = _rows(task, d, fmt, backend, route, got, ref, prec, bounds)
    moved = any(_moved(a[0], b[0]) for a, b in zip(ulps, ulps2))
    if not moved:
        return out2
    rest = [k for k in range(len(d.inputs)) if k not in check]
    with timer("reference"):
        more = run_routes(d.op.rule(numerics.reference(hi)), d.subset(rest), [route])[route] \
            if rest else []
    if isinstance(more, Exception):
        return out2
    for k, ys in zip(rest, more):
        ref[k] = ys
    with timer("measurement"):
        return _rows(task, d, fmt, backend, route, got, ref, hi, bounds)[0]


def _rows(task, d, fmt, backend, route, got, ref, prec, bounds):
    out, ulps = [], []
    for j, (i, name, port) in enumerate(route_ports(d.op, route)):
        row = base_row(task, route, name, "ok")
        row["ref_prec"] = prec
        # True only where ``draw`` enumerated the format (Task.exhaustive asks for it, but
        # only `exhaustible` operators and formats are enumerated; the rest are sampled).
        row["exhaustive"] = d.kinds == ["exhaustive"]
        comp, where = _concat(got, i, fmt, backend, port.scalar)
        exact, _ = _concat(ref, i, fmt, None)
        ulp = measure_port(row, comp, exact, fmt, bounds.ulps, *bounds.port(j))
        if ulp is not None:
            ulps.append((ulp, where))
            size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
            row["worst"] = worst_case(d, ulp, where, comp, exact, route, fmt, size)
        out.append(row)
    return out, ulps


def _suspicious(ulp, where, bound) -> list:
    """(draw, element) of the errors that may depend on the reference's own error: the
    largest when it exceeds 1 ulp, those within 2**-40 ulp of a half-integer, those above the
    bound."""
    a = np.abs(ulp)
    ok = ~np.isnan(a)
    if not ok.any():
        return []
    hits = np.zeros(a.shape, bool)
    top = np.nanmax(a)
    if top > 1:
        hits |= ok & (a == top)
    with np.errstate(invalid="ignore"):
        fin = ok & np.isfinite(a)
        hits |= fin & (np.abs(a - (np.floor(a) + 0.5)) < 2.0 ** -40)
        if bound is not None:
            hits |= ok & (a > bound)
    return [where[j] for j in np.flatnonzero(hits)]


def _put(a, idx, b):
    """A copy of ``a`` (None stays None) with flat positions ``idx`` set from ``b``."""
    if a is None or b is None:
        return a
    out = np.array(a, copy=True)
    if out.ndim == 0:
        return np.asarray(b, dtype=out.dtype).reshape(())
    flat = out.reshape(-1)
    flat[idx] = np.asarray(b, dtype=out.dtype).reshape(-1)
    return flat.reshape(out.shape)


def _moved(a, b) -> bool:
    """Whether two measurements of the same points differ by more than 2**-20 of the error
    (NaN pattern changes count)."""
    na, nb = np.isnan(a), np.isnan(b)
    if not np.array_equal(na, nb):
        return True
    x, y = a[~na], b[~nb]
    with np.errstate(invalid="ignore"):
        same = (x == y) | (np.abs(x - y) <= 2.0 ** -20 * np.maximum(1.0, np.abs(x)))
    return not bool(same.all())

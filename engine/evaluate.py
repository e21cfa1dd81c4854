"""One task of the coverage run, evaluated and measured: ``evaluate(task) -> (rows, phases)``.

A task is one operator instance under one (format, mode, policy, implementation) with the
routes asked for; it yields one row per (route, port) (engine/rows.py).  The routes of a
task share their sample inputs, so forward, tangent and gradient errors of a row set are
measured on the same points.

Steps, each timed into a phase (``sampling``, ``evaluation``, ``reference``, ``bounds``,
``measurement``):

1. Inputs: engine/samples.py (``draw``), as the implementation selects them.
2. The routes under the implementation (engine/implementations/: emulated, native, cuda,
   torch, torch_compile), which says first which routes it cannot measure (status rows).
3. The reference: the same rule under ``numerics.reference`` on the same rounded inputs,
   tangents and cotangents, by the precision loop of ``numerics.settle``: every draw at
   p + 64 bits and at twice that (p the format's precision), and again at twice the
   precision, up to 2048 bits, for the draws whose exact values moved by more than 2**-32
   ulp between the last two (cancellation inside the rule is the usual cause).  Each row's
   ``ref_prec`` is the highest precision its draws needed.
4. Metrics and bounds: engine/measuring.py, the bounds of the emulated model where the
   implementation says they apply.

A scaled task (a scaled format, engine/task.py) quantizes the draws after step 1
(quantize.quantize_draws: the reference and the implementation both read the dequantized
inputs), computes in binary32 (task.COMPUTE_FORMAT), and in step 4 quantizes each
computed output into the route's scheme along its last axis before measuring it against
the exact value (measuring.measure_scaled_port).  No bounds: the certificates and a priori
bounds are of element formats.  A task the scheme cannot apply to is a ``no_rule`` row
(task.scaled_problem).
"""

from __future__ import annotations

import time

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics.metrics import clamp_exact
from roundoff_coverage.routes import bounds as routes_bounds

from . import implementations, reference
from .implementations.base import run_routes, subject_rule
from .quantize import axis_text, element_scales, quantize_draws, quantize_port, quantize_seed
from .samples import Draws, draw, sample_kinds
from .measuring import (REPRO_MAX_ELEMENTS, Bounds, apriori_bounds, by_magnitude,
                        computed_values, concat_draws, interval_bounds, measure_port,
                        measure_scaled_port, per_sample, recipe_unit, route_bound, worst_case)
from .task import (BATCH_FAMILIES, EXHAUSTIVE_FAMILIES, EXHAUSTIVE_MAX_BITS, ROUTES, Task,
                   attrs_text, base_row, batchable, compute_task, exhaustible, jsonable,
                   one_line, rng_for, route_ports, route_scheme, scaled_problem, scaling,
                   status_rows)

# The coverage run's names, in one place for its readers (runner, tests): the task, its
# draws, measurement and the driver.
__all__ = ["evaluate", "PHASES", "Task", "ROUTES",
           "BATCH_FAMILIES", "EXHAUSTIVE_FAMILIES", "EXHAUSTIVE_MAX_BITS", "attrs_text",
           "jsonable", "rng_for", "one_line", "route_ports", "base_row", "status_rows",
           "batchable", "exhaustible", "Draws", "draw", "sample_kinds", "run_routes",
           "REPRO_MAX_ELEMENTS", "Bounds", "measure_port", "per_sample", "by_magnitude",
           "worst_case", "interval_bounds"]

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
    problem = scaled_problem(task, o)
    if problem is not None:
        return rows + [r for route in pending
                       for r in status_rows(task, o, route, *problem)], timer.t
    ref_prec = reference.start(fmt)
    scaled = scaling(task)
    try:
        # A recipe's product computes in binary32 and stores into the task's format.
        runs = compute_task(task) if scaled == "operands" else task
        impl = implementations.of(runs, o, runs.fmt)
        problems = impl.problems(pending)
    except Exception as exc:                                  # noqa: BLE001
        impl, problems = None, dict.fromkeys(pending, ("error", one_line(exc), None))
    ref_rule = subject_rule(o, numerics.reference(ref_prec))
    if ref_rule is None:
        problems = {r: problems.get(r) or (
            "no_rule", f"the reference lacks capability {o.need}: no exact value to measure "
                       f"against", o.need) for r in pending}
    for route in pending:
        if route in problems:
            rows += status_rows(task, o, route, *problems[route])
    pending = [r for r in pending if r not in problems]
    if not pending:
        return rows, timer.t
    quantized = None
    try:
        with timer("sampling"):
            d = impl.select(draw(task, o, fmt))
            computed_on = d
            if scaled is not None:
                computed_on, quantized = quantize_draws(task, d, pending)
                if scaled == "storage":
                    d = computed_on
    except Exception as exc:                                  # noqa: BLE001
        for route in pending:
            rows += status_rows(task, o, route, "error", f"sampling: {one_line(exc)}")
        return rows, timer.t
    rows += _measure_routes(task, impl, d, fmt, pending, ref_rule, timer, quantized,
                            computed_on)
    return rows, timer.t


def _measure_routes(task, impl, d, fmt, pending, ref_rule, timer, quantized=None,
                    computed_on=None):
    """The rows of the routes ``pending``: the implementation evaluated on ``computed_on``
    (the draws ``d``, or under a recipe their operands quantized), the reference on ``d``."""
    rows = []
    operands = quantized is not None and scaling(task) == "operands"
    with timer("evaluation"):
        got = impl.evaluate(computed_on if computed_on is not None else d, pending)
        if operands:
            got = {r: v if isinstance(v, Exception) else
                   _stored(v, d.op.inputs if r == "gradient" else d.op.outputs, fmt,
                           task.mode, impl.numbers)
                   for r, v in got.items()}
    ok = [r for r in pending if not isinstance(got[r], Exception)]
    with timer("reference"):
        if d.op is not impl.o:             # batched draws: a longer instance
            ref_rule = subject_rule(d.op, ref_rule.xp)
        ref = run_routes(ref_rule, d, ok)
        exact, precs = _settle(d, fmt, [r for r in ok if not isinstance(ref[r], Exception)],
                               ref)
    bounded = [r for r in ok if impl.model_task(r) is not None and quantized is None]
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
        if operands:
            with timer("measurement"):
                measured = _rows(task, d, fmt, None, route, got[route], exact[route],
                                 max(precs), Bounds())
                _recipe_fields(task, route, measured, quantized)
            impl.annotate(route, measured)
            rows += measured
            continue
        if quantized is not None:
            with timer("measurement"):
                measured = _scaled_rows(task, d, fmt, impl.numbers, route, got[route],
                                        exact[route], max(precs), quantized)
            impl.annotate(route, measured)
            rows += measured
            continue
        model = impl.model_task(route)
        with timer("bounds"):
            b = Bounds() if model is None else \
                Bounds(route_bound(model, route),
                       apriori_bounds(model, d, fmt) if route == "forward" else None,
                       interval.get(route))
        with timer("measurement"):
            measured = _rows(task, d, fmt, impl.numbers, route, got[route], exact[route],
                             max(precs), b)
        impl.annotate(route, measured)
        if route == "forward" and task.domain_bounds:
            with timer("bounds"):
                _domain_bounds(task, d, fmt, measured)
        rows += measured
    return rows


DOMAIN_BUDGET = 16          # pieces of the box per element (run --domain-bounds)


def _domain_bounds(task, d, fmt, rows) -> None:
    """``domain_bound`` and ``box`` of the emulated forward rows: the bound of the route's
    roundoff (routes.bounds.domain_bound) over the box of the task's ordinary draws -- entry
    by entry the least and the largest drawn value (for an elementwise operator, whose
    draws are batched into one instance, the least and largest of every element), the other
    inputs fixed where every ordinary draw holds the same array.  The rows' ordinary errors
    lie inside this box, so their max_ulp there cannot exceed the bound (the evaluate
    test).  Nothing is added where there is no ordinary draw, a non-value input varies, or
    the bound cannot be computed (the row's other fields stand)."""
    if task.implementation != "emulated" or task.scheme is not None:
        return
    keep = [i for i, k in enumerate(d.kinds) if k == "ordinary"]
    if not keep:
        return
    lows, highs = [], []
    for j, p in enumerate(d.op.inputs):
        vals = [np.asarray(d.inputs[i][j]) for i in keep]
        if p.differentiable:
            stack = np.stack([v.astype(np.float64) for v in vals])
            lo, hi = stack.min(axis=0), stack.max(axis=0)
            if d.elementwise:
                lo, hi = np.full(lo.shape, lo.min()), np.full(hi.shape, hi.max())
        elif all(np.array_equal(vals[0], v) for v in vals[1:]):
            lo = hi = vals[0]
        else:
            return
        lows.append(lo)
        highs.append(hi)
    try:
        bound = routes_bounds.domain_bound(d.op, lows, highs, fmt, task.mode,
                                           task.accumulation, "forward", DOMAIN_BUDGET,
                                           elementwise=d.elementwise)
    except Exception:                                          # noqa: BLE001 (no bound)
        return
    box = [float(min(np.min(lo) for lo, p in zip(lows, d.op.inputs) if p.differentiable)),
           float(max(np.max(hi) for hi, p in zip(highs, d.op.inputs) if p.differentiable))]
    for row in rows:
        if row["status"] in ("ok", "convention") and row["port"] in bound.ports:
            u = bound.ulps[bound.ports.index(row["port"])]
            row["domain_bound"] = float(np.max(u)) if np.size(u) else 0.0
            row["box"] = box


def _settle(d, fmt, routes, first):
    """({route: per-draw exact values}, per-draw precision) of the routes by the reference
    policy (engine/reference.py), ``first`` holding the values at its start precision; an
    Exception in place of the first when a route fails at a higher precision."""
    def fn(prec, items):
        again = run_routes(subject_rule(d.op, numerics.reference(prec)), d.subset(items),
                           routes)
        for r in routes:
            if isinstance(again[r], Exception):
                raise again[r]
        return [tuple(again[r][j] for r in routes) for j in range(len(items))]
    n, start = len(d.inputs), reference.start(fmt)
    try:
        s = reference.settle(fn, n, fmt,
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
        comp, where = concat_draws(got, i, fmt, backend, port.scalar)
        exact, _ = concat_draws(ref, i, fmt, None)
        ulp = measure_port(row, comp, exact, fmt, bounds.ulps, *bounds.port(j),
                           *per_sample(d, where))
        if ulp is not None:
            size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
            row["worst"] = worst_case(d, ulp, where, comp, exact, route, fmt, size)
        out.append(row)
    return out


def _stored(per_draw, ports, fmt, mode, backend) -> list:
    """A recipe product's route outputs (per draw, one per port of ``ports``) stored: every
    scalar one (computed in binary32) rounded once into the recipe's storage format ``fmt``
    under the task's mode, as a GEMM's epilogue converts its FP32 accumulator; indices
    and Booleans as they are."""
    return [tuple(formats.round_to(computed_values(y, backend.fmt, backend), fmt, mode)
                  if y is not None and p.scalar else y for y, p in zip(ys, ports))
            for ys in per_draw]


def _recipe_fields(task, route, rows, quantized) -> None:
    """A recipe product's rows: the scheme its operands took, their block axes and what
    their quantization did (the rows measure the stored outputs in ulps of the storage
    format, against the exact route on the unquantized operands)."""
    scheme = route_scheme(task, route)
    unit = recipe_unit(task.fmt, route_scheme(task, "forward"), scheme, route)
    for row in rows:
        row.update(scheme=scheme.label, scaled_inputs=quantized.fields(route),
                   scale_axis=quantized.axes(route), error_unit=unit)


def _scaled_rows(task, d, fmt, backend, route, got, ref, prec, quantized):
    """The rows of one route of a scaled task: each value output quantized into the route's
    scheme along its last axis, draw by draw, measured against the exact value in ulps of
    the element format at the exact value's block scale (engine/measuring.py); index,
    Boolean and integer outputs compared exactly.  Every row says the scheme, the block axes
    of the inputs and of its port, and what the quantization of its port and inputs did
    (BlockCounts)."""
    scheme = route_scheme(task, route)
    b64 = formats.get("binary64")          # the reproducer's inputs: dequantized, binary64
    out = []
    for i, name, port in route_ports(d.op, route):
        row = base_row(task, route, name, "ok")
        row.update(ref_prec=prec, scheme=scheme.label,
                   scaled_inputs=quantized.fields(route),
                   scale_axis=f"{quantized.axes(route)}; {name}:{axis_text(scheme, -1)}")
        if not port.scalar:
            comp, _ = concat_draws(got, i, fmt, backend, False)
            exact, _ = concat_draws(ref, i, fmt, None)
            measure_port(row, comp, exact, fmt, None)
            out.append(row)
            continue
        comps, scales, exacts, counts = [], [], [], None
        for k, ys in enumerate(got):
            deq, _, c = quantize_port(computed_values(ys[i], fmt, backend), scheme, -1,
                                      quantize_seed(task, route, name, k))
            # Exact values beyond binary64's range clamped to +-2**1025 and +-2**-1138
            # (they quantize and measure alike: a NaN scale, the least scale), so that no
            # rational of exp(-1e38)'s exponent is formed.
            e = clamp_exact(ref[k][i], b64)
            _, qe, _ = quantize_port(e, scheme, -1, 0, exact=True)
            comps.append(deq.reshape(-1))
            scales.append(element_scales(qe).reshape(-1))
            exacts.append(e)
            if counts is None:
                counts = c
            else:
                counts.add(c)
        _, where = concat_draws(got, i, fmt, backend, True)
        exact, _ = concat_draws([(e,) for e in exacts], 0, fmt, None)
        comp = np.concatenate(comps) if comps else np.zeros(0)
        ulp = measure_scaled_port(row, comp, exact,
                                  np.concatenate(scales) if scales else np.zeros(0),
                                  scheme, fmt, *per_sample(d, where))
        if counts is not None:
            row.update(counts.fields())
        size = int(np.prod(port.shape, dtype=np.int64)) if port.shape else 1
        row["worst"] = worst_case(d, ulp, where, comp, exact, route, b64, size)
        out.append(row)
    return out

"""The ``cuda`` implementation of the coverage run: an operator's kernel (kernels.of_op) on the
device, measured against the exact reference, with its contract checked.

``measure(task, o, fmt, pending, timer) -> rows`` is evaluate.evaluate's step 2-5 for a task
whose implementation is ``cuda``:

- What has no kernel is a status row, not an error: no kernel at these attributes, a route
  the kernel does not have (tangents never: the CUDA tape has no forward mode), a policy
  other than ``strict`` (the kernels reproduce that one), a format or mode outside the
  kernels' range (kernels.contract.flavour) -- ``no_rule`` with the reason.
- The device is whatever ``kernels.device()`` says in the worker: ``cuda:<name>`` on a GPU,
  ``simulator`` under NUMBA_ENABLE_CUDASIM=1 (every row's ``device`` field says which).  The
  simulator runs kernels as Python threads, a correctness check, never a measure of GPU
  accuracy: there the draws are cut to SIMULATOR_DRAWS per sample kind (elementwise
  instances, whose draws are one batch per kind, keep theirs).
- Every draw runs through ``kernels.run`` (forward; gradient with the draw's cotangents) and
  through ``numerics.emulated(format, mode)`` under the strict policy, the model the
  contract refers to; the reference, metrics, worst cases and bounds are evaluate's.  The
  model's bounds (fixed-ulp certificate, routes.apriori, numerics.bounding) apply where the
  contract claims agreement with the model; where it claims none they are not computed.
- ``contract`` in each row: the claim (``agreement``, ``max_ulp``), the kernel's ``order``,
  ``fma``, ``ftz``, ``differing`` (elements whose bits differ from the model's, NaN payloads
  aside) and ``held``: False when a ``bitwise`` or ``screened`` claim meets a differing element
  or the measured max_ulp exceeds a claimed ``max_ulp``, else True.  A ``screened`` claim
  allows a difference only where an exact transcendental value lies within 2**-44 (relative)
  of a rounding boundary, which a run does not decide; such a row reads ``held: false`` with
  its differing elements counted, to be looked at (none has been seen).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from roundoff_coverage import numerics

from . import evaluate as E

SIMULATOR_DRAWS = 2


def _status(task, o, routes, status, reason, need=None):
    return [r for route in routes for r in E._status_rows(task, o, route, status, reason, need)]


def _tiny(d):
    """The draws cut to SIMULATOR_DRAWS per sample kind (batched elementwise draws kept)."""
    if d.elementwise and len(d.inputs) == len(set(d.kinds)):
        return d
    seen, keep = {}, []
    for i, kind in enumerate(d.kinds):
        seen[kind] = seen.get(kind, 0) + 1
        if seen[kind] <= SIMULATOR_DRAWS:
            keep.append(i)
    return d.subset(keep)


def measure(task, o, fmt, pending, timer) -> list:
    """Rows of ``pending`` routes of ``o`` under the cuda implementation (module docstring)."""
    from roundoff_coverage import kernels
    from roundoff_coverage.kernels import contract as C
    k = kernels.of_op(o)
    if k is None:
        return _status(task, o, pending, "no_rule",
                       f"no CUDA kernel for {o.name} at these attributes", "cuda kernel")
    rows, wanted = [], []
    for route in pending:
        if route not in k.routes:
            rows += _status(task, o, [route], "no_rule",
                            f"the {o.name} kernel has no {route} route "
                            f"(kernel routes: {', '.join(k.routes)})", f"cuda {route}")
        else:
            wanted.append(route)
    if not wanted:
        return rows
    if task.policy != k.contract.policy:
        return rows + _status(task, o, wanted, "no_rule",
                              f"the kernels reproduce the {k.contract.policy} policy only "
                              f"(got {task.policy})", f"policy {task.policy}")
    try:
        C.flavour(fmt, task.mode)
        device = kernels.device()
    except kernels.KernelError as exc:
        return rows + _status(task, o, wanted, "no_rule", E.one_line(exc))
    try:
        with timer("sampling"):
            d = E.draw(task, o, fmt)
            if device == "simulator":
                d = _tiny(d)
    except Exception as exc:                                  # noqa: BLE001
        return rows + _status(task, o, wanted, "error", f"sampling: {E.one_line(exc)}")
    model = numerics.emulated(fmt, task.mode, numerics.preset("strict", fmt))
    with timer("evaluation"):
        got = {r: _run(kernels, d, fmt, task.mode, r) for r in wanted}
        emu = E.run_routes(d.op.rule(model), d, wanted)
    ok = [r for r in wanted if not isinstance(got[r], Exception)]
    prec = fmt.precision + E.REF_EXTRA
    with timer("reference"):
        ref = E.run_routes(d.op.rule(numerics.reference(prec)), d, ok)
    as_model = dataclasses.replace(task, implementation="emulated")
    claims = {r: k.claim(r, fmt, task.mode) for r in wanted}
    agreeing = [r for r in ok if claims[r].agreement != "none"]
    with timer("bounds"):
        interval = E.interval_bounds(as_model, d, fmt, agreeing) if agreeing else {}
    for route in wanted:
        if isinstance(got[route], Exception):
            rows += _status(task, d.op, [route], "error", f"kernel: {E.one_line(got[route])}")
            continue
        if isinstance(ref[route], Exception):
            rows += _status(task, d.op, [route], "error",
                            f"reference: {E.one_line(ref[route])}")
            continue
        claim = claims[route]
        bounds = E.Bounds()
        if claim.agreement != "none":
            with timer("bounds"):
                bounds = E.Bounds(E._bound(as_model, route),
                                  E._apriori(as_model, d, fmt) if route == "forward" else None,
                                  interval.get(route))
        measured = E._measure_route(task, d, fmt, model, route, got[route], ref[route], prec,
                                    timer, bounds)
        differing = _differing(got[route], emu[route], d.op, route)
        for row in measured:
            row["device"] = device
            row["contract"] = _verdict(k, claim, row, differing.get(row["port"]))
        rows += measured
    return rows


def _run(kernels, d, fmt, mode, route):
    """Per draw, the kernel's outputs (forward) or input gradients (gradient); the exception
    of the first draw that fails."""
    out = []
    try:
        for xs, cs in zip(d.inputs, d.cotangents):
            ys, _ = kernels.run(d.op, xs, fmt, mode, route,
                                cs if route == "gradient" else None)
            out.append(ys)
    except Exception as exc:                                  # noqa: BLE001 (rows say it)
        return exc
    return out


def _differing(got, emu, o, route):
    """{port name: elements whose binary64 bits differ from the model's} (NaN = NaN), or
    {} when the model's route failed."""
    if isinstance(emu, Exception):
        return {}
    out = {}
    for i, name, port in E.route_ports(o, route):
        n = 0
        for a, b in zip(got, emu):
            x = np.asarray(a[i], dtype=np.float64).reshape(-1)
            y = np.asarray(b[i], dtype=np.float64).reshape(-1)
            same = (x.view(np.int64) == y.view(np.int64)) | (np.isnan(x) & np.isnan(y))
            n += int(x.size - np.count_nonzero(same))
        out[name] = n
    return out


def _verdict(k, claim, row, differing) -> dict:
    held = True
    if claim.agreement in ("bitwise", "screened") and differing:
        held = False
    if claim.max_ulp is not None and row["max_ulp"] is not None \
            and row["max_ulp"] > claim.max_ulp:
        held = False
    c = k.contract
    return {"agreement": claim.agreement, "max_ulp": claim.max_ulp, "order": c.order,
            "fma": c.fma, "ftz": c.ftz, "policy": c.policy, "differing": differing,
            "held": held}

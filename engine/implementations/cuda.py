"""The ``cuda`` implementation of the coverage run: an operator's kernel (kernels.of_op) on the
device, measured against the exact reference, with its contract checked.

``Cuda`` evaluates a task's routes with the operator's kernel; evaluate.evaluate measures
them like any implementation's (base.Implementation, the seam):

- What has no kernel is a status row, not an error: no kernel at these attributes, a route
  the kernel does not have (tangents never: the CUDA tape has no forward mode), a policy
  other than ``strict`` (the kernels reproduce that one), a format or mode outside the
  kernels' range (kernels.contract.flavour) -- ``no_rule`` with the reason.
- The device is whatever ``kernels.device()`` says in the worker (where it says none, the
  run refuses to start: ``unavailable``): ``cuda:<name>`` on a GPU,
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

from .base import run_routes
from ..task import one_line, route_ports
from .base import Implementation

SIMULATOR_DRAWS = 2


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


class Cuda(Implementation):
    """The operator's CUDA kernel on the device (module docstring), its outputs read as the
    strict emulated model's numbers, the model's bounds where the contract claims agreement
    with it."""

    name = "cuda"
    order = 2

    @classmethod
    def unavailable(cls) -> str | None:
        """Why no kernel can run here (neither a GPU nor numba's CUDA simulator under
        NUMBA_ENABLE_CUDASIM=1): asked for CUDA, the run stops before any work instead of
        writing rows that all say so."""
        # numba.cuda (through kernels) is optional: imported only when cuda is asked for.
        from roundoff_coverage import kernels
        try:
            kernels.device()
        except kernels.KernelError as exc:
            return str(exc)
        return None

    def __init__(self, task, o, fmt):
        super().__init__(task, o, fmt)
        # numba.cuda (through kernels) is optional: imported only when a cuda task runs.
        from roundoff_coverage import kernels
        self.kernels, self.kernel = kernels, kernels.of_op(o)
        # The model the kernels reproduce: problems() refuses tasks of another policy.
        self.numbers = numerics.emulated(fmt, task.mode, task.accumulation)
        self.device, self.claims, self.model_out = None, {}, {}

    def problems(self, pending):
        k, o = self.kernel, self.o
        if k is None:
            return dict.fromkeys(pending, ("no_rule", f"no CUDA kernel for {o.name} at these "
                                                      f"attributes", "cuda kernel"))
        out = {r: ("no_rule", f"the {o.name} kernel has no {r} route (kernel routes: "
                              f"{', '.join(k.routes)})", f"cuda {r}")
               for r in pending if r not in k.routes}
        rest = [r for r in pending if r not in out]
        if rest and self.task.policy != k.contract.policy:
            return out | dict.fromkeys(rest, (
                "no_rule", f"the kernels reproduce the {k.contract.policy} policy only (got "
                           f"{self.task.policy})", f"policy {self.task.policy}"))
        if rest:
            C = self.kernels.contract
            try:
                C.flavour(self.fmt, self.task.mode)
                self.device = self.kernels.device()
            except self.kernels.KernelError as exc:
                return out | dict.fromkeys(rest, ("no_rule", one_line(exc), None))
            self.claims = {r: k.claim(r, self.fmt, self.task.mode) for r in rest}
        return out

    def select(self, d):
        return _tiny(d) if self.device == "simulator" else d

    def evaluate(self, d, wanted):
        """The kernel's outputs per route and draw; the model's too (the contract's verdict
        compares them bit for bit)."""
        self.draws = d
        self.kernel_out = {r: _run(self.kernels, d, self.fmt, self.task.mode, r)
                           for r in wanted}
        for r, got in self.kernel_out.items():
            if isinstance(got, Exception):         # the error row says where it failed
                self.kernel_out[r] = RuntimeError(f"kernel: {one_line(got)}")
        self.model_out = run_routes(self.rule_of(d), d, wanted)
        return self.kernel_out

    def model_task(self, route):
        claim = self.claims.get(route)
        if claim is None or claim.agreement == "none":
            return None
        return dataclasses.replace(self.task, implementation="emulated")

    def annotate(self, route, rows):
        differing = _differing(self.kernel_out[route], self.model_out[route], self.draws.op,
                               route)
        for row in rows:
            row["device"] = self.device
            row["contract"] = _verdict(self.kernel, self.claims[route], row,
                                       differing.get(row["port"]))


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
    for i, name, port in route_ports(o, route):
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


IMPLEMENTATIONS = (Cuda,)

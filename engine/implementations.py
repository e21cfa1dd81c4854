"""Implementations under measurement: the one seam through which the coverage run evaluates
a task's routes (shared/ARCHITECTURE.md: reports owns it).

An implementation is a class registered by name in ``IMPLEMENTATIONS``; ``of(task, o,
fmt)`` makes the object that evaluates one task (it may keep state between its steps: the
CUDA kernels' contract verdict needs the model's outputs).  Its methods, in the order
engine/evaluate.py calls them:

- ``problems(routes) -> {route: (status, reason, need)}``: the routes it cannot measure here
  (no rule at these attributes, a mode numpy does not have, no kernel...), reported as
  status rows;
- ``select(draws) -> draws``: the draws it evaluates (all but in the CUDA simulator);
- ``evaluate(draws, routes) -> {route: per-draw outputs, or the exception}``;
- ``numbers``: the backend whose numbers its outputs are (read into float64 by it);
- ``model_task(route) -> Task | None``: the task of the emulated model whose bounds
  (certificates, routes.apriori, numerics.bounding) apply to this route's samples, None
  where no bound applies;
- ``annotate(route, rows)``: fields of its own (flags, device, contract) on a route's rows.

``emulated`` is numerics.emulated (format, mode, policy), the model itself; ``native`` is
numpy in the format's dtype (numerics.native; round to nearest even only); ``cuda`` (in
engine/cuda.py, imported when asked for) is the operator's CUDA kernel; ``torch`` and
``torch_compile`` (engine/torch_impl.py, likewise) are PyTorch's own kernels, eager and
through torch.compile (the optional extra ``[torch]``).
"""

from __future__ import annotations

import functools
import zlib

from roundoff_coverage import formats, numerics

from .draws import run_routes
from .task import one_line


class Implementation:
    """Base of the implementations (module docstring); ``task``, ``o`` (the operator),
    ``fmt`` (the BinaryFormat)."""

    name = "?"

    @classmethod
    def policy_labels(cls, policies) -> tuple:
        """The policy labels of its tasks for the policies asked for (presets of
        numerics.policy, resolved into each task's ``accumulation``)."""
        return tuple(policies)

    def __init__(self, task, o, fmt):
        self.task, self.o, self.fmt = task, o, fmt
        self.numbers = None

    def problems(self, pending) -> dict:
        return {}

    def select(self, d):
        return d

    def evaluate(self, d, wanted) -> dict:
        raise NotImplementedError

    def model_task(self, route):
        return None

    def annotate(self, route, rows) -> None:
        pass

    @functools.cached_property
    def rule(self):
        """The operator's rule under ``numbers``, built once (None where it has none)."""
        return self.o.rule(self.numbers)

    def rule_of(self, d):
        """The rule for draws ``d``: ``rule`` itself, unless the draws are of a longer
        instance (batched elementwise draws, engine/draws.py)."""
        return self.rule if d.op is self.o else d.op.rule(self.numbers)

    def _no_rule(self, pending) -> dict:
        """no_rule for every route when ``o`` has no rule under ``numbers``: the reason the
        declaration gives at these attributes, else the missing capability."""
        if self.rule is not None:
            return {}
        reason = (self.o.decl.no_rule(self.o.attrs) if self.o.decl.no_rule else None) or \
            f"{self.numbers.name} lacks capability {self.o.need}"
        return dict.fromkeys(pending, ("no_rule", reason, self.o.need))


class Emulated(Implementation):
    """numerics.emulated under the task's format, mode and policy, seeded from the task's key
    (stochastic rounding draws the same bits in any process); the IEEE flags each route
    raised go into its rows."""

    name = "emulated"

    def __init__(self, task, o, fmt):
        super().__init__(task, o, fmt)
        self.numbers = numerics.emulated(fmt, task.mode, task.accumulation,
                                         zlib.crc32(task.key.encode()))
        self.raised = {}

    def problems(self, pending):
        return self._no_rule(pending)

    def evaluate(self, d, wanted):
        return run_routes(self.rule_of(d), d, wanted, self.raised)

    def model_task(self, route):
        return self.task

    def annotate(self, route, rows):
        if route in self.raised:
            for row in rows:
                row["flags"] = formats.flag_names(self.raised[route])


class Native(Implementation):
    """numpy in the format's own dtype (numerics.native): float16, float32, float64 and the
    ml_dtypes types; numpy rounds to nearest even only."""

    name = "native"

    @classmethod
    def policy_labels(cls, policies) -> tuple:
        # numpy's reductions follow numpy's own order, whatever policy is asked for: one
        # task, labelled as the backend labels its order (numerics.NativeBackend).
        return (numerics.NativeBackend.policy_label,)

    def __init__(self, task, o, fmt):
        super().__init__(task, o, fmt)
        self.problem = None
        if task.mode != "nearest_even":
            self.problem = ("no_rule", f"numpy rounds to nearest even only (mode {task.mode})",
                            f"mode {task.mode}")
            return
        try:
            self.numbers = numerics.native(fmt.name)
        except (TypeError, ValueError, LookupError) as exc:
            self.problem = ("error", f"native: no numpy dtype for {fmt.label} "
                                     f"({one_line(exc)})", None)

    def problems(self, pending):
        if self.problem is not None:
            return dict.fromkeys(pending, self.problem)
        return self._no_rule(pending)

    def evaluate(self, d, wanted):
        return run_routes(self.rule_of(d), d, wanted)


def _cuda():
    from .cuda import Cuda
    return Cuda


def _torch():
    from .torch_impl import Torch
    return Torch


def _torch_compile():
    from .torch_impl import TorchCompile
    return TorchCompile


# name -> the class, or a function giving it (imported when asked for; torch itself only
# when a task of torch or torch_compile is evaluated).
IMPLEMENTATIONS = {"emulated": Emulated, "native": Native, "cuda": _cuda, "torch": _torch,
                   "torch_compile": _torch_compile}


def named(name: str) -> type:
    """The implementation class called ``name`` (KeyError naming the known ones otherwise)."""
    try:
        cls = IMPLEMENTATIONS[name]
    except KeyError:
        raise KeyError(f"unknown implementation {name!r} (choose from "
                       f"{', '.join(IMPLEMENTATIONS)})") from None
    return cls if isinstance(cls, type) else cls()


def of(task, o, fmt) -> Implementation:
    """The implementation object of ``task`` (KeyError naming the known ones otherwise)."""
    return named(task.implementation)(task, o, fmt)

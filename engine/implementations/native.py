"""The ``native`` implementation: numpy in the format's own dtype (numerics.native)."""

from __future__ import annotations

from roundoff_coverage import numerics

from .base import run_routes
from ..task import one_line
from .base import Implementation


class Native(Implementation):
    """numpy in the format's own dtype (numerics.native): float16, float32, float64 and the
    ml_dtypes types; numpy rounds to nearest even only."""

    name = "native"
    order = 1
    scaled_inputs = True

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
        return self.no_rule(pending)

    def evaluate(self, d, wanted):
        return run_routes(self.rule_of(d), d, wanted)


IMPLEMENTATIONS = (Native,)

"""The ``emulated`` implementation: numerics.emulated, the format's model itself, under the
task's format, mode and policy."""

from __future__ import annotations

import zlib

from roundoff_coverage import formats, numerics

from .base import run_routes
from .base import Implementation


class Emulated(Implementation):
    """numerics.emulated under the task's format, mode and policy, seeded from the task's key
    (stochastic rounding draws the same bits in any process); the IEEE flags each route
    raised go into its rows.  In the model run it is the model itself (engine/model.py runs
    the graph under it): ``graphs`` marks it as a name ``model --implementations`` takes."""

    name = "emulated"
    order = 0
    graphs = True
    scaled_inputs = True

    def __init__(self, task, o, fmt):
        super().__init__(task, o, fmt)
        self.numbers = numerics.emulated(fmt, task.mode, task.accumulation,
                                         zlib.crc32(task.key.encode()))
        self.raised = {}

    def problems(self, pending):
        return self.no_rule(pending)

    def evaluate(self, d, wanted):
        return run_routes(self.rule_of(d), d, wanted, self.raised)

    def model_task(self, route):
        return self.task

    def annotate(self, route, rows):
        if route in self.raised:
            for row in rows:
                row["flags"] = formats.flag_names(self.raised[route])


IMPLEMENTATIONS = (Emulated,)

"""The reference policy of every run: where the exact values' precision starts, how far it
may grow, and the words the results file uses for it.

Every run settles its exact values here (``settle``), by ``numerics.settle``'s loop: each
item at the format's precision + EXTRA bits and at twice that, doubled while two
successive evaluations differ by more than 2**-32 ulp of the format.  Operators (the
coverage run, ``bound``) may double up to MAX_PREC bits; a whole graph's sweeps (model
runs) at most MODEL_DOUBLINGS times: a value whose exact value is 0 reached through
cancellation (the gradient of a key bias of attention: softmax ignores a constant added to
a row of scores) shrinks by 2**-prec at each doubling and never agrees with the next
evaluation; at 4 * (p + 64) bits it lies far below 2**(qmin - 64), where the measurement
clamps exact values (numerics.metrics.clamp_exact), so its measured error is that of an
exact 0, and doubling further would only cost time.
"""

from __future__ import annotations

from .. import numerics

__all__ = ["EXTRA", "MAX_PREC", "MODEL_DOUBLINGS", "start", "settle", "COVERAGE", "MODEL",
           "BOUND"]

EXTRA = 64                 # bits beyond the format's precision at the first evaluation
MAX_PREC = 2048            # the highest precision an operator's reference may reach
MODEL_DOUBLINGS = 2        # a graph's exact run doubles at most twice (module docstring)

COVERAGE = ("numerics.reference by numerics.settle: each draw at format precision + 64 "
            "bits and at twice that, the precision doubled (at most 2048 bits) until "
            "two successive evaluations agree to 2**-32 ulp; ref_prec: the "
            "highest precision a row's draws needed")
MODEL = ("numerics.reference by numerics.settle over every value of the graph's "
         "sweeps: each sample at format precision + 64 bits and at twice that, "
         "doubled at most twice while two evaluations differ by more than 2**-32 ulp")
BOUND = ("routes.bounds.domain over the box, against numerics.reference by "
         "numerics.settle at points drawn in the box (format precision + 64 bits, "
         "doubled until two evaluations agree to 2**-32 ulp, at most 2048 bits)")


def start(fmt) -> int:
    """The precision (bits) of the first evaluation of an exact value in ``fmt``."""
    return fmt.precision + EXTRA


def settle(fn, n, fmt, *, first=None, graph=False):
    """``numerics.settle(fn, n, fmt, ...)`` under this policy: from ``start(fmt)`` bits, up
    to MAX_PREC (an operator) or MODEL_DOUBLINGS doublings (``graph``: a whole graph's
    sweeps).  ``first``: the values at the start precision, when the caller has them."""
    lo = start(fmt)
    hi = lo << MODEL_DOUBLINGS if graph else MAX_PREC
    return numerics.settle(fn, n, fmt, lo, hi, first=first)

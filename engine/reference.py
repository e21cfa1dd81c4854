"""The reference policy of every run: where the exact values' precision starts, how far it
may grow, and the words the results file uses for it.

Every run settles its exact values here (``settle``), by ``numerics.settle``'s loop: each
item at the format's precision + EXTRA bits and at twice that, doubled while two
successive evaluations differ by more than 2**-32 ulp of the format.  Operators (the
coverage run, ``bound``) may double up to MAX_PREC bits; a whole graph's sweeps (model
runs) at most MODEL_DOUBLINGS times, and a graph's values are compared in ulps at no less
than 2**-p of their tensor's scale (``floor``; p the format's precision): the model run's
tensor measures leave the elements below that level out of their ulp statistics
(engine/tensor_measures.py, "cancelled"), and a value whose exact value is 0 reached
through cancellation (the gradient of a key bias of attention: softmax ignores a constant
added to a row of scores) shrinks by 2**-prec at each doubling, so it would never agree
with the next evaluation in its own ulps and would cost the whole graph a third sweep at
4 * (p + 64) bits for nothing.  A value still moving after the last doubling keeps its last
evaluation (the rows' reason says so); an exact 0's residue there lies far below
2**(qmin - 64), where the measurement clamps exact values (numerics.metrics.clamp_exact).

A graph's first evaluation is only compared with the next one (the values kept are the
last evaluation's), so it runs in double-double arithmetic (``first``:
numerics/double_double.py, every primitive accurate to about 2**-100 of its result, beyond
the start precision of formats of up to 36 bits) where the start precision allows: numpy
speed instead of mpmath's per element.  A sweep the double-double numbers cannot hold (a
finite value beyond 2**+-900, a rule that computes outside the backend's primitives) is
evaluated by mpmath at the start precision, as before.

Every node alone on its rounded reads (the local errors' exact values) is evaluated once,
at the precision the graph settled at: its reads are format values near the trace's own,
where the node is no worse conditioned.  Where the graph settled at its second sweep, the
first sweep's agreement with it (to 2**-32 ulp, at no less than 2**-p of each tensor's
scale) is the evidence that the start precision already held every node's values there;
double-double's primitives are at least that accurate (``alone``: to about 2**-100 of
their result against 2**-(p + 64), every rounding of the mpmath evaluation), so the nodes
alone run in double-double too, a node it cannot evaluate by mpmath at the settled
precision.  A graph that needed a third sweep has its nodes alone in mpmath at that
precision.
"""

from __future__ import annotations

from .. import numerics

__all__ = ["EXTRA", "MAX_PREC", "MODEL_DOUBLINGS", "DD_PREC", "start", "settle", "floor",
           "first", "alone", "COVERAGE", "MODEL", "BOUND"]

EXTRA = 64                 # bits beyond the format's precision at the first evaluation
MAX_PREC = 2048            # the highest precision an operator's reference may reach
MODEL_DOUBLINGS = 2        # a graph's exact run doubles at most twice (module docstring)
DD_PREC = 100              # double-double primitives: accurate to about 2**-100 (first)

COVERAGE = ("numerics.reference by numerics.settle: each draw at format precision + 64 "
            "bits and at twice that, the precision doubled (at most 2048 bits) until "
            "two successive evaluations agree to 2**-32 ulp; ref_prec: the "
            "highest precision a row's draws needed")
MODEL = ("numerics.reference by numerics.settle over every value of the graph's "
         "sweeps: each sample at format precision + 64 bits (double-double arithmetic "
         "where that is at most 100 bits) and at twice that, "
         "doubled at most twice while two evaluations differ by more than 2**-32 ulp "
         "(at no less than 2**-p of the tensor's scale); every node alone on its rounded "
         "reads once at the settled precision (double-double where the graph settled at "
         "the second sweep)")
BOUND = ("routes.bounds.domain over the box, against numerics.reference by "
         "numerics.settle at points drawn in the box (format precision + 64 bits, "
         "doubled until two evaluations agree to 2**-32 ulp, at most 2048 bits)")


def start(fmt) -> int:
    """The precision (bits) of the first evaluation of an exact value in ``fmt``."""
    return fmt.precision + EXTRA


def settle(fn, n, fmt, *, first=None, graph=False):
    """``numerics.settle(fn, n, fmt, ...)`` under this policy: from ``start(fmt)`` bits, up
    to MAX_PREC (an operator) or MODEL_DOUBLINGS doublings (``graph``: a whole graph's
    sweeps, compared at no less than ``floor(fmt)`` of each tensor's scale).  ``first``: the
    values at the start precision, when the caller has them."""
    lo = start(fmt)
    if graph:
        return numerics.settle(fn, n, fmt, lo, lo << MODEL_DOUBLINGS, first=first,
                               floor=floor(fmt))
    return numerics.settle(fn, n, fmt, lo, MAX_PREC, first=first)


def floor(fmt) -> float:
    """The share of a tensor's scale below which a graph's exact values are compared in
    ulps at that level (module docstring): 2**-p, the tensor measures' cancellation
    threshold."""
    return 2.0 ** -fmt.precision


def first(prec: int):
    """The backend of a graph's first evaluation at ``prec`` bits: double-double where its
    primitives are that accurate (module docstring), else None (mpmath's reference)."""
    return numerics.double_double() if prec <= DD_PREC else None


def alone(fmt, prec: int):
    """The backend of every node alone on its rounded reads (a model run's local errors)
    after the graph's exact run settled at ``prec`` bits: double-double where that run
    agreed at its second sweep with a first one at start(fmt) <= DD_PREC bits (module
    docstring), else None (mpmath's reference at ``prec``)."""
    return numerics.double_double() if start(fmt) <= DD_PREC and prec <= 2 * start(fmt) \
        else None

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

A graph's sweeps run in double-double arithmetic (numerics/double_double.py: numpy arrays,
every primitive within 2**-100 of its result) where the format's start precision is at most
DD_PREC (formats of up to 36 bits: bfloat16, fp8, binary16, tf32, binary32): the first at
start(fmt) bits (each result rounded to that many bits, as mpmath at that precision
rounds), the second at DD_BITS, the double-double numbers themselves, instead of mpmath per
element at twice the start precision (``ladder``, ``sweep``).  The agreement of the two is
the same evidence as before: a graph whose values move by less than 2**-32 ulp of the format
between per-operation errors of 2**-(p + 64) and 2**-100 amplifies those errors by at most
about 2**32, so the reported double-double values are within about 2**(p - 68) ulp of the
exact ones (2**-44 ulp for binary32's 24 bits), far below the tolerance.  A graph that
moves goes on to mpmath at twice and four times the start precision.  A sweep the
double-double numbers cannot hold (a finite value beyond 2**+-900, a rule that computes
outside the backend's primitives) is evaluated by mpmath at that precision.

Every node alone on its rounded reads (the local errors' exact values) is evaluated once,
at the precision the graph settled at: its reads are format values near the trace's own,
where the node is no worse conditioned.  Where the graph settled at the double-double sweep
or at the one after it, the double-double sweep's agreement is the evidence that
double-double holds every node's values there, so the nodes alone run in double-double too
(``alone``), a node it cannot evaluate by mpmath at the settled precision.  A graph that
needed a third comparison has its nodes alone in mpmath at that precision.
"""

from __future__ import annotations

from .. import numerics

__all__ = ["EXTRA", "MAX_PREC", "MODEL_DOUBLINGS", "DD_PREC", "DD_BITS", "start", "settle",
           "floor", "ladder", "sweep", "alone", "COVERAGE", "MODEL", "BOUND"]

EXTRA = 64                 # bits beyond the format's precision at the first evaluation
MAX_PREC = 2048            # the highest precision an operator's reference may reach
MODEL_DOUBLINGS = 2        # a graph's exact run doubles at most twice (module docstring)
DD_PREC = 100              # double-double primitives: accurate to about 2**-100
DD_BITS = 106              # a double-double sweep's precision, as rows report it

COVERAGE = ("numerics.reference by numerics.settle: each draw at format precision + 64 "
            "bits and at twice that, the precision doubled (at most 2048 bits) until "
            "two successive evaluations agree to 2**-32 ulp; ref_prec: the "
            "highest precision a row's draws needed")
MODEL = ("numerics.settle over every value of the graph's sweeps: each sample at format "
         "precision + 64 bits and in double-double (106 bits; both in double-double "
         "arithmetic where the first is at most 100 bits, else mpmath at twice that), "
         "then mpmath at twice and four times the first precision while two evaluations "
         "differ by more than 2**-32 ulp (at no less than 2**-p of the tensor's scale); "
         "every node alone on its rounded reads once at the settled precision "
         "(double-double where the graph settled at its double-double sweep or the next)")
BOUND = ("routes.bounds.domain over the box, against numerics.reference by "
         "numerics.settle at points drawn in the box (format precision + 64 bits, "
         "doubled until two evaluations agree to 2**-32 ulp, at most 2048 bits)")


def start(fmt) -> int:
    """The precision (bits) of the first evaluation of an exact value in ``fmt``."""
    return fmt.precision + EXTRA


def settle(fn, n, fmt, *, first=None, graph=False, agree=None):
    """``numerics.settle(fn, n, fmt, ...)`` under this policy: from ``start(fmt)`` bits, up
    to MAX_PREC (an operator) or MODEL_DOUBLINGS doublings (``graph``: a whole graph's
    sweeps, compared at no less than ``floor(fmt)`` of each tensor's scale, or by
    ``agree(a, b)`` when given, which must apply that test).  ``first``: the values at the
    start precision, when the caller has them."""
    lo = start(fmt)
    if graph:
        return numerics.settle(fn, n, fmt, lo, lo << MODEL_DOUBLINGS, first=first,
                               floor=floor(fmt), ladder=ladder(fmt), agree=agree)
    return numerics.settle(fn, n, fmt, lo, MAX_PREC, first=first)


def floor(fmt) -> float:
    """The share of a tensor's scale below which a graph's exact values are compared in
    ulps at that level (module docstring): 2**-p, the tensor measures' cancellation
    threshold."""
    return 2.0 ** -fmt.precision


def ladder(fmt) -> list:
    """The precisions of a graph's sweeps after the first (module docstring): DD_BITS where
    double-double holds the start precision, then MODEL_DOUBLINGS doublings of it."""
    lo = start(fmt)
    return ([DD_BITS] if lo <= DD_PREC else []) + \
        [lo << k for k in range(1, MODEL_DOUBLINGS + 1)]


def sweep(fmt, prec: int):
    """The backend of a graph's sweep at ``prec`` bits: double-double (rounded to ``prec``
    bits at the start precision) where ``ladder`` puts it, else None (mpmath's reference at
    ``prec``)."""
    if start(fmt) > DD_PREC or prec not in (start(fmt), DD_BITS):
        return None
    return numerics.double_double(None if prec == DD_BITS else prec)


def alone(fmt, prec: int):
    """The backend of every node alone on its rounded reads (a model run's local errors)
    after the graph's exact run settled at ``prec`` bits: double-double where the graph's
    double-double sweep agreed with the one before or after it (module docstring), else
    None (mpmath's reference at ``prec``)."""
    if start(fmt) > DD_PREC:
        return None
    return numerics.double_double() if prec <= ladder(fmt)[1] else None

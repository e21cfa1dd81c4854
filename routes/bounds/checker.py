"""The certificate checker: a claimed box of a node's output checked against the operator's
real value semantics (spec: "Bounds", TorchLean.CROWN.Op.cert? against Op.evalNode?).

A claim passes when it contains the enclosure of the operator's real values over the input
boxes (the operator's IBP arm, outward rounded), entry by entry; since that enclosure holds
every real value, a passing claim holds them too.  A claim the enclosure does not fit in
fails with one line naming the operator, the output, the first entry and the amount by
which the claim falls short.  At a port that does not hold the model's scalar the claim
must be the exact array.

``CHECKER`` holds the operators whose Bounds cell says checker.
"""

from __future__ import annotations

import numpy as np

from ..errors import RouteError
from .boxes import first_index, read_boxes
from .ibp import transfer

CHECKER = frozenset({"add", "sub", "mul", "safeLog", "sin", "cos", "relu", "sigmoid", "tanh",
                     "softplus", "silu", "cat", "matmul", "scaledMatmul", "linear", "conv",
                     "detach"})


def bound_problem(op, lows, highs, claimed_lows, claimed_highs) -> str | None:
    """None when the claimed boxes (one low and one high array per output of ``op``)
    contain the real values of ``op`` at every input in the boxes ``lows``/``highs`` (one
    array per input), as the enclosure of the operator's IBP arm shows; otherwise the
    one-line reason: which output entry and by how much the claim falls short.  RouteError
    for an operator without a checker arm or a malformed box or claim."""
    if op.name not in CHECKER:
        raise RouteError(f"check_bound: {op.name} has no checker arm (the spec's Bounds "
                         f"column gives one to {', '.join(sorted(CHECKER))})")
    op.check()
    who = f"check_bound: {op.name}"
    boxes = read_boxes(who, op.input_names, op.inputs, lows, highs)
    claimed_lows, claimed_highs = tuple(claimed_lows), tuple(claimed_highs)
    if len(claimed_lows) != len(op.outputs) or len(claimed_highs) != len(op.outputs):
        raise RouteError(f"{who}: expects a claimed low and high for each of its "
                         f"{len(op.outputs)} outputs ({', '.join(op.output_names)})")
    try:
        enclosures = transfer(op, boxes)
    except RouteError as exc:
        raise RouteError(f"{who}: {exc}") from None
    for name, port, (lo, hi), cl, ch in zip(op.output_names, op.outputs, enclosures,
                                              claimed_lows, claimed_highs):
        cl, ch = np.asarray(cl), np.asarray(ch)
        if cl.shape != lo.shape or ch.shape != lo.shape:
            raise RouteError(f"{who}: the claim of output {name} must have shape "
                             f"{list(lo.shape)} (got {list(cl.shape)} and {list(ch.shape)})")
        if not port.scalar:
            for claim in (cl, ch):
                if not np.array_equal(claim, lo):
                    at = first_index(claim != lo)
                    return (f"{who}: output {name}{list(at)}: the claim {claim[at].item()!r} is "
                            f"not the exact value {lo[at].item()!r}")
            continue
        cl, ch = cl.astype(np.float64), ch.astype(np.float64)
        low_bad, high_bad = ~(cl <= lo), ~(ch >= hi)          # NaN claims fail too
        if low_bad.any() or high_bad.any():
            failing = int(np.count_nonzero(low_bad | high_bad))
            more = f" ({failing - 1} more entries fail)" if failing > 1 else ""
            at = first_index(low_bad | high_bad)
            if np.isnan(cl[at]) or np.isnan(ch[at]):
                what = "the claim is NaN"
            elif low_bad[at]:
                what = (f"the claimed low {float(cl[at])!r} lies above the real values' "
                        f"lower enclosure {float(lo[at])!r} by {_gap(cl[at], lo[at])}")
            else:
                what = (f"the claimed high {float(ch[at])!r} lies below the real values' "
                        f"upper enclosure {float(hi[at])!r} by {_gap(hi[at], ch[at])}")
            return f"{who}: output {name}{list(at)}: {what}{more}"
    return None


def _gap(above, below) -> str:
    """above - below as a short decimal (a message, never arithmetic on bounds)."""
    with np.errstate(all="ignore"):
        return "%.6g" % (float(above) - float(below))


def check_bound(op, lows, highs, claimed_lows, claimed_highs) -> None:
    """``bound_problem``, raised: RouteError with its one-line reason when the claim fails."""
    problem = bound_problem(op, lows, highs, claimed_lows, claimed_highs)
    if problem:
        raise RouteError(problem)

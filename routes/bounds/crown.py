"""CROWN: the backward sweep of linear relaxations (spec: "Bounds", TorchLean.CROWN.Op.
backwardRule; Zhang et al. 2018, "Efficient Neural Network Robustness Certification with
General Activation Functions").

For a value z of a graph and rows of coefficients A (shape (K, *z's shape)), the sweep
proves A[k] . z >= b[k] for every input in the input boxes.  It starts with A at z and
visits the nodes from the last to the first, keeping a coefficient (and a bound on its
rounding error, below) at every value it has reached:

- a node whose operator has an arm (``CROWN_ARMS``, the spec's Bounds cell CROWN) passes
  its coefficient to its inputs: the linear operators (add, sub, detach, the movement
  operators slice, reshape, permute, cat, and reduce at op sum) always; matmul,
  scaledMatmul, linear and conv when at most one of the factors they multiply varies (the
  others' boxes are points: constant weights), the coefficient then being the operator's
  own pullback (its adjoint) with the constant part f(0, weights) discharged against its
  box; mul through McCormick's planes (exact when one factor is a point);
- ReLU has no arm: the forward pass relaxes it with alpha slopes (the spec's alphaStep?):
  relu(x) >= alpha x, alpha 1 where u > -l else 0 (CROWN's adaptive choice), and
  relu(x) <= s (x - l), s = u / (u - l) rounded up, on its input's box [l, u];
- without an arm, the sweep discharges the coefficient against the operator's box (every
  other operator, and the graph's constants and inputs at the end): A . y >= min over the
  box of y;
- or the sweep ends (``ENDS``: gather, scatter, pad, flip, contract, logSoftmax, the
  cumulative and sorting operators, custom): a row whose coefficient reaches one of them
  proves nothing, and the value keeps its IBP box there.

The forward pass computes every value's IBP box node by node, and refines by a sweep each
value that a ReLU reads (its relaxation then uses the tighter box) and each output; a
refined box is the sweep's bounds intersected with the IBP box, so CROWN's boxes are never
looser than IBP's.

Soundness in binary64: the coefficients are floats, not the exact products of the
relaxations.  Each pass through an arm bounds the error of its new coefficients
(boxes.product_error: the standard model on the same computation on absolute values), and
before a coefficient A known to within E is used at a value x, the sweep subtracts
sum E |x| over x's box (boxes.slack): A_exact . x >= A . x - E |x|.  Every sum into the
bound is rounded down (boxes.sum_down, dot_lower).
"""

from __future__ import annotations

import numpy as np

from roundoff_coverage.numerics import native

from ..errors import RouteError
from ..graph import Graph, Ref
from .boxes import (INF, U, add_down, dot_lower, down, is_point, mul_up, product_error,
                    read_boxes, slack, up)
from .ibp import as_graph, graph_boxes, transfer

# The factors of each affine arm: input positions multiplied with one another (the arm
# applies when at most one of them varies).  mul (McCormick) and detach have arms of
# their own.
AFFINE = {"add": (), "sub": (), "slice": (), "reshape": (), "permute": (), "cat": (),
          "reduce": (), "matmul": (0, 1), "scaledMatmul": (0, 1, 2), "linear": (0, 2),
          "conv": (0, 1)}
CROWN_ARMS = frozenset(AFFINE) | {"mul", "detach"}
# Operators where the backward sweep ends (spec: "or ends (gather, scatter, pad, flip,
# contract, logSoftmax, the cumulative and sorting operators, and custom)").
ENDS = frozenset({"gather", "scatter", "pad", "flip", "contract", "logSoftmax", "cumsum",
                  "cumprod", "cummax", "cummin", "sort", "topk", "argmax", "argmin",
                  "custom"})


# ----- arms: (coefficient at the output) -> (constant lower bound, per input (A, E) or None)
def _affine(op, A, boxes):
    """An affine operator in its varying inputs (the others' boxes are points): the
    coefficient of input i is J_i^T A, the operator's pullback under native binary64 at the
    constant inputs (zeros at the varying ones), with its error bounded from the same
    pullback of |A| at |constants|; the constant part f(0, constants) is discharged against
    its IBP box.  None where more than one factor varies, or a varying input has no
    gradient port, or a constant is not finite, or reduce is not a sum."""
    if op.name == "reduce" and op.attrs.op != "sum":
        return None
    ports = op.inputs
    fixed = [not p.scalar or is_point(b) for b, p in zip(boxes, ports)]
    if sum(not fixed[i] for i in AFFINE[op.name]) > 1 or \
            not all(np.isfinite(b[0]).all() for b, p, f in zip(boxes, ports, fixed)
                    if f and p.scalar):
        return None
    varying = [i for i, f in enumerate(fixed) if not f]
    if any(not ports[i].differentiable for i in varying):
        return None
    at = [np.zeros(p.array_shape) if i in varying else np.asarray(b[0])
          for i, (b, p) in enumerate(zip(boxes, ports))]
    mags = [np.abs(a) if p.scalar else a for a, p in zip(at, ports)]
    rule = op.rule(native("float64"))
    n = int(np.prod(A.shape[1:], dtype=np.int64))
    coefs = {i: np.empty((A.shape[0],) + ports[i].shape) for i in varying}
    errs = {i: np.empty_like(coefs[i]) for i in varying}
    with np.errstate(all="ignore"):
        for k in range(A.shape[0]):
            g = rule.backward(at, [A[k]])
            m = rule.backward(mags, [np.abs(A[k])])
            for i in varying:
                coefs[i][k] = g[i]
                errs[i][k] = product_error(m[i], n)
    f0 = transfer(op, [(a, a) for a in at])[0]
    return dot_lower(A, *f0), [(coefs[i], errs[i]) if i in coefs else None
                               for i in range(len(ports))]


def _mul(op, A, boxes):
    """z = x y (McCormick 1976): z >= ly x + lx y - lx ly and z <= uy x + lx y - lx uy on
    the box; the lower plane for positive coefficients, the upper for negative.  None when
    an end is infinite or the element is not the model's scalar."""
    if op.attrs.element != "scalar":
        return None
    (lx, ux), (ly, uy) = boxes
    if not all(np.isfinite(v).all() for v in (lx, ux, ly, uy)):
        return None
    pos, neg = np.maximum(A, 0.0), np.minimum(A, 0.0)
    with np.errstate(all="ignore"):
        cx = pos * ly + neg * uy                  # one nonzero product per entry
        cy = A * lx
    const = add_down(dot_lower(pos, -up(lx * ly), -down(lx * ly)),
                     dot_lower(neg, -up(lx * uy), -down(lx * uy)))
    return const, [(cx, product_error(cx, 1)), (cy, product_error(cy, 1))]


def _detach(op, A, boxes):
    """detach passes values unchanged (no gradient, but the same value)."""
    return np.zeros(A.shape[0]), [(A, np.zeros_like(A))]


_ARMS = {**{name: _affine for name in AFFINE}, "mul": _mul, "detach": _detach}


# ----- ReLU's relaxation ----------------------------------------------------------------------
def relu_relaxation(lo, hi) -> tuple:
    """(alpha, s, t, finite) for relu on the box [lo, hi] of its input: relu(x) >= alpha x
    and relu(x) <= s x + t on the box, where ``finite``; identity where lo >= 0, zero where
    hi <= 0.  Unstable entries: alpha 1 where hi > -lo else 0, s = hi / (hi - lo) rounded up
    (a line through (lo, 0) at least as steep as the chord lies above it on the box),
    t = -s lo rounded up."""
    active, inactive = lo >= 0, hi <= 0
    unstable = ~(active | inactive)
    finite = ~unstable | (np.isfinite(lo) & np.isfinite(hi))
    with np.errstate(all="ignore"):
        s = up(hi / down(hi - lo))
        t = mul_up(s, -lo)
    alpha = np.where(active | (unstable & (hi > -lo)), 1.0, 0.0)
    s = np.where(active, 1.0, np.where(unstable & finite, s, 0.0))
    t = np.where(unstable & finite, t, 0.0)
    return alpha, s, t, finite


def _relu(relax, A, out_box):
    """The sweep through a ReLU with its relaxation; entries without a finite relaxation
    are discharged against the ReLU's output box."""
    alpha, s, t, finite = relax
    held = np.where(finite, A, 0.0)
    const = dot_lower(np.where(finite, 0.0, A), *out_box)
    pos, neg = np.maximum(held, 0.0), np.minimum(held, 0.0)
    with np.errstate(all="ignore"):
        c = pos * alpha + neg * s                 # alpha is 0 or 1: only neg * s rounds
    const = add_down(const, dot_lower(neg, t, t))
    return const, [(c, product_error(c, 1))]


# ----- the sweep ------------------------------------------------------------------------------
def _accumulate(coef, ref, A, E):
    """Add the coefficient A (error within E) to what ``ref`` holds: one more rounding,
    within 2 u of the sum."""
    if ref not in coef:
        coef[ref] = (A, E)
        return
    A0, E0 = coef[ref]
    with np.errstate(all="ignore"):
        S = A0 + A
        coef[ref] = (S, up(up(E0 + E) + up(np.abs(S) * (2 * U))))


def sweep(graph: Graph, boxes: dict, relax: dict, target: Ref, A) -> np.ndarray:
    """b with A[k] . z >= b[k] for the value z at ``target`` and every input in the boxes
    (-inf for a row whose sweep ended); ``boxes`` every value's box, ``relax`` the ReLU
    relaxations by node."""
    K = A.shape[0]
    coef = {target: (np.asarray(A, dtype=np.float64), np.zeros(A.shape))}
    bias, alive = np.zeros(K), np.ones(K, dtype=bool)
    for k in reversed(range(len(graph.nodes))):
        node = graph.nodes[k]
        outs = {j: coef.pop(Ref(k, j)) for j in range(len(node.op.outputs)) if Ref(k, j) in coef}
        if not outs:
            continue
        for j, (Aj, Ej) in outs.items():
            bias = add_down(bias, -slack(Ej, *boxes[Ref(k, j)]))
        if node.op.name in ENDS:
            for Aj, _ in outs.values():
                alive &= ~np.any(Aj.reshape(K, -1) != 0, axis=1)
            continue
        pulled = None
        if len(outs) == 1 and 0 in outs and len(node.op.outputs) == 1:
            Aj = outs[0][0]
            if node.op.name == "relu":
                pulled = _relu(relax[k], Aj, boxes[Ref(k, 0)])
            elif node.op.name in _ARMS:
                pulled = _ARMS[node.op.name](node.op, Aj, [boxes[r] for r in node.args])
        if pulled is None:                       # discharge against the node's box
            for j, (Aj, _) in outs.items():
                bias = add_down(bias, dot_lower(Aj, *boxes[Ref(k, j)]))
            continue
        const, per_input = pulled
        bias = add_down(bias, const)
        for ref, got in zip(node.args, per_input):
            if got is not None:
                _accumulate(coef, ref, *got)
    for ref, (Ar, Er) in coef.items():           # graph inputs and constants
        lo, hi = boxes[ref]
        bias = add_down(add_down(bias, -slack(Er, lo, hi)), dot_lower(Ar, lo, hi))
    return np.where(alive, bias, -INF)


def refine(graph, boxes, relax, ref) -> tuple:
    """The box of the value at ``ref`` from two sweeps (A = I and -I), met with its IBP box."""
    lo, hi = boxes[ref]
    n = lo.size
    if n == 0:
        return lo, hi
    eye = np.eye(n).reshape((n,) + lo.shape)
    b = sweep(graph, boxes, relax, ref, np.concatenate([eye, -eye]))
    lower, upper = b[:n].reshape(lo.shape), -b[n:].reshape(lo.shape)
    return np.maximum(lo, lower), np.minimum(hi, upper)


def crown(target, lows, highs) -> tuple:
    """(lows, highs): boxes of every output of ``target`` (an operator or a routes.Graph)
    from CROWN's backward sweep (module docstring), each within the IBP box, for every input
    in the boxes ``lows``/``highs`` (one array per input, the exact array twice at an index,
    bool or integer port); tuples of float64 arrays, one per output.  RouteError (one line)
    on a bad box or a node without an IBP arm."""
    graph = as_graph(target)
    who = "crown: graph" if isinstance(target, Graph) else f"crown: {target.name}"
    given = read_boxes(who, graph.input_names, graph.inputs, lows, highs)
    relu_inputs = {node.args[0] for node in graph.nodes if node.op.name == "relu"}
    relax = {}

    def on_node(k, held):
        node = graph.nodes[k]
        if node.op.name == "relu":               # before a sweep from relu(relu(x))
            relax[k] = relu_relaxation(*held[node.args[0]])
        for j, p in enumerate(node.op.outputs):
            if Ref(k, j) in relu_inputs and p.scalar:
                held[Ref(k, j)] = refine(graph, held, relax, Ref(k, j))

    try:
        held = graph_boxes(graph, given, on_node)
    except RouteError as exc:
        raise RouteError(f"crown: {str(exc).removeprefix('ibp: ')}") from None
    outs = [refine(graph, held, relax, r) if graph.port(r).scalar else held[r]
            for r in graph.output_refs]
    return tuple(lo for lo, _ in outs), tuple(hi for _, hi in outs)

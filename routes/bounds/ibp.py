"""Interval bound propagation (IBP): the arms, one per operator, and their sweep through a
graph (spec: "Bounds", TorchLean.CROWN.Op.ibp?).

An arm maps boxes of an operator's inputs to boxes of its outputs that enclose the real
values the operator takes at every input in the boxes (routes.bounds.boxes: a box is a
pair of float64 arrays lo <= hi, outward rounded).  The real value is the rule's value in
real arithmetic (what numerics.reference computes): softplus's switch to x above its
threshold, the max shift of softmax, the clamp of sqrt's clampNegative are part of it.
Where a box leaves the operator's domain (log of a box reaching below 0, a divisor's box
holding 0), the arm claims nothing about the undefined points and may give the unknown box
(-inf, inf) for the element.  A port that does not hold the model's scalar (index, bool,
integer words) carries its exact array as both ends, and so do such outputs.

``IBP_ARMS`` lists the arms by the spec's operator names, exactly the operators whose
Bounds cell says IBP.  Most arms are ``RULE``: the operator's own rule evaluated on
enclosures (numerics.bounding's exact-value intervals), sound by the fundamental theorem of
interval arithmetic as long as every comparison the rule makes is decided for the whole
box; a comparison left undecided makes every scalar output of that evaluation unknown.  The
operators whose rules branch on their values (sign, the rounded divisions, clampNegative,
remainder, softplus, elu, leakyReLU, bernoulliMask) have arms of their own that split the
box at the branch, and softmax, logSoftmax, maskedSoftmax and layerNorm have tighter ones
than their rules' dependency-laden evaluation gives.  An arm is written like a rule:
``arm(xp, op, *inputs) -> output | tuple``, ``xp`` the enclosure backend, the inputs
enclosures at scalar ports and exact arrays elsewhere.

``ibp(op_or_graph, lows, highs) -> (lows, highs)``: one array per input in, one per output
out.  Through a routes.Graph the boxes go node by node: graph inputs take the given boxes
(frozen inputs included), constants are point boxes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..errors import RouteError
from ..families.random import uniforms
from ..graph import CONSTANT, INPUT, Graph, Ref
from .boxes import (INF, branch, enclose, enclosure_backend, ends, meet, read_boxes, unknown,
                    up)

RULE = "the operator's rule evaluated on enclosures"


# ----- arms of their own ----------------------------------------------------------------------
def _sign(xp, op, x):
    """sign is nondecreasing: [sign(lo), sign(hi)]."""
    lo, hi = ends(x)
    return enclose(np.sign(lo), np.sign(hi))


def _rounded_quotients(x, y, rounding) -> tuple:
    """(least, greatest, same) of rounding(a / b) over the boxes x, y (rounding floor or
    trunc of the exact quotient, the two ends rounded outward into binary64; ``same``
    where they are one integer); (-inf, inf, False) where y's box holds 0 or an end is
    infinite.  Both roundings are nondecreasing and a / b is monotone in each
    argument while b keeps its sign, so the extremes lie at the four corners, where the
    exact rationals decide (a float quotient next to an integer could be floored the wrong
    way)."""
    (xlo, xhi), (ylo, yhi) = ends(x), ends(y)
    ok = np.isfinite(xlo) & np.isfinite(xhi) & ((ylo > 0) | (yhi < 0))
    whole = math.floor if rounding == "floor" else math.trunc
    exact = np.frompyfunc(lambda a, b, good: whole(Fraction(a) / Fraction(b)) if good else 0,
                          3, 1)
    ks = [exact(a, b, ok) for a in (xlo, xhi) for b in (ylo, yhi)]
    least, greatest = np.minimum.reduce(ks), np.maximum.reduce(ks)
    lo = np.frompyfunc(_float_down, 1, 1)(least).astype(np.float64)
    hi = np.frompyfunc(_float_up, 1, 1)(greatest).astype(np.float64)
    same = ok & (least == greatest).astype(bool)
    return np.where(ok, lo, -INF), np.where(ok, hi, INF), same


def _float_down(k: int) -> float:
    """The greatest binary64 value <= the integer k."""
    try:
        f = float(k)
    except OverflowError:
        return float(np.finfo(np.float64).max) if k > 0 else -INF
    return float(np.nextafter(f, -INF)) if f > k else f


def _float_up(k: int) -> float:
    return -_float_down(-k)


def _div(xp, op, x, y):
    """trunc and floor of the exact quotient over the box (``_rounded_quotients``); the
    rule's isfinite guard only keeps inf and NaN quotients, which boxes never hold."""
    a = op.attrs
    if a.element != "scalar" or a.rounding_mode == "none":
        return op.decl.forward(xp, a, x, y)
    return enclose(*_rounded_quotients(x, y, a.rounding_mode)[:2])


def _sqrt(xp, op, x):
    """sqrt, after clampNegative's max(x, 0) (maximum maps the ends)."""
    if op.attrs.mode == "clampNegative":
        x = xp.maximum(x, xp.zeros_like(x))
    return xp.sqrt(x)


def _remainder(xp, op, x, y):
    """x - floor(x / y) y, with y's sign: within [0, hi_y] for y > 0 and [lo_y, 0] for y < 0;
    where every quotient over the box has the same floor k (the exact quotients at the
    corners decide), x - k y over the box, met with that range."""
    a = op.attrs
    if a.element != "scalar":
        return op.decl.forward(xp, a, x, y)
    klo, khi, one_step = _rounded_quotients(x, y, "floor")   # unknown where y holds 0
    one_step &= np.isfinite(klo) & np.isfinite(khi)
    klo, khi = np.where(one_step, klo, 0.0), np.where(one_step, khi, 0.0)
    rlo, rhi = ends(xp.subtract(x, xp.multiply(enclose(klo, khi), y)))
    ylo, yhi = ends(y)
    hlo = np.where(ylo > 0, 0.0, np.where(yhi < 0, ylo, -INF))
    hhi = np.where(ylo > 0, yhi, np.where(yhi < 0, 0.0, INF))
    return enclose(np.where(one_step, np.maximum(rlo, hlo), hlo),
                   np.where(one_step, np.minimum(rhi, hhi), hhi))


def _split_at_zero(xp, x, positive, other):
    """f(x) = positive(x) for x > 0, other(x) for x <= 0: each piece over the part of the box
    on its side (its closure), their hull where the box meets both."""
    lo, hi = ends(x)
    pos = positive(enclose(np.maximum(lo, 0.0), np.maximum(hi, 0.0)))
    neg = other(enclose(np.minimum(lo, 0.0), np.minimum(hi, 0.0)))
    return branch(lo > 0, hi <= 0, pos, neg)


def _leaky_relu(xp, op, x, slope):
    return _split_at_zero(xp, x, lambda p: p, lambda n: xp.multiply(n, slope))


def _elu(xp, op, x, alpha):
    return _split_at_zero(xp, x, lambda p: p, lambda n: xp.multiply(alpha, xp.expm1(n)))


def _softplus(xp, op, x, beta, threshold):
    """x where beta x > threshold, log1p(exp(beta x)) / beta elsewhere: each branch over the
    whole box, their hull where the comparison is undecided."""
    bx = xp.multiply(beta, x)
    smooth = xp.divide(xp.log1p(xp.exp(bx)), beta)
    (blo, bhi), (tlo, thi) = ends(bx), ends(threshold)
    return branch(blo > thi, bhi <= tlo, x, smooth)


def _bernoulli_mask(xp, op, p):
    """1 where the key's draw u is below p: certain where u < lo_p, impossible where
    u >= hi_p, [0, 1] between."""
    a = op.attrs
    u = uniforms(a.key, np.arange(math.prod(a.shape))).reshape(a.shape)
    lo, hi = ends(p)
    one, zero = np.ones(a.shape), np.zeros(a.shape)
    return branch(u < lo, u >= hi, enclose(one, one), enclose(zero, zero))


def _log_others(xp, x_lo, x_hi, keep):
    """Enclosures of L_i = log(1 + sum_{j != i, kept} exp(x_j - x_i)) along the last axis at
    the two corners of the box that make it least (x_i high, x_j low) and greatest: the
    lower end of the first and the upper end of the second.  Shifted by the float
    m_i >= every exponent (log(sum e^d) = m + log(sum e^(d - m)) for any real m): no
    exponential overflows."""
    n = x_lo.shape[-1]
    others = keep[..., None, :] & ~np.eye(n, dtype=bool)          # [..., i, j]
    out = []
    for mine, theirs in ((x_hi, x_lo), (x_lo, x_hi)):
        d = xp.subtract(enclose(theirs, theirs)[..., None, :], enclose(mine, mine)[..., :, None])
        m = np.maximum(np.max(np.where(others, ends(d)[1], -INF), axis=-1, initial=-INF), 0.0)
        mb = enclose(m, m)
        t = xp.exp(xp.subtract(d, mb[..., None]))
        s = xp.add(xp.exp(xp.negative(mb)),
                   xp.sum(xp.where(others, t, xp.zeros_like(t)), axis=-1))
        out.append(ends(xp.add(mb, xp.log(s))))
    return enclose(out[0][0], out[1][1])


def _softmax_family(xp, x, axis, keep, log):
    """softmax_i = exp(-L_i) in [0, 1] and logSoftmax_i = -L_i <= 0 (``_log_others``), along
    ``axis``; entries not kept are exactly 0."""
    shape = np.shape(x)
    if not shape or shape[axis] == 0:
        return x
    lo, hi = (np.moveaxis(e, axis, -1) for e in ends(x))
    keep = np.moveaxis(np.broadcast_to(keep, shape), axis, -1)
    L = _log_others(xp, lo, hi, keep)
    y = meet(xp.negative(L), hi=0.0) if log else meet(xp.exp(xp.negative(L)), 0.0, 1.0)
    zero = np.zeros(lo.shape)
    y = np.where(keep, y, enclose(zero, zero))
    return np.moveaxis(y, -1, axis)


def _softmax(xp, op, x):
    return _softmax_family(xp, x, op.attrs.axis, True, log=False)


def _log_softmax(xp, op, x):
    return _softmax_family(xp, x, op.attrs.axis, True, log=True)


def _masked_softmax(xp, op, x, mask):
    return _softmax_family(xp, x, op.attrs.axis, np.asarray(mask, dtype=bool), log=False)


def _layer_norm(xp, op, x, weight, bias, eps):
    """(x - mu) rsqrt(var + eps) weight + bias over the last axis, with x_i - mu =
    ((n - 1) x_i - sum_{j != i} x_j) / n (each entry once: no dependency), var the mean of
    their squares, and the normalized value clipped to |x_hat| <= sqrt(n - 1) where eps >= 0
    (Samuelson's inequality: |x_i - mu| <= sqrt(n - 1) sigma for the biased sigma)."""
    n = np.shape(x)[-1]
    if np.size(x) == 0:
        return op.decl.forward(xp, op.attrs, x, weight, bias, eps)
    others = xp.sum(xp.where(np.eye(n, dtype=bool), xp.zeros_like(x[..., None, :]),
                             np.broadcast_to(x[..., None, :], np.shape(x) + (n,))), axis=-1)
    d = xp.divide(xp.subtract(xp.multiply(x, xp.constant(n - 1, np.shape(x))), others),
                  xp.constant(n, np.shape(x)))
    var = xp.divide(xp.sum(xp.square(d), axis=-1, keepdims=True),
                    xp.constant(n, np.shape(d)[:-1] + (1,)))
    xhat = xp.multiply(d, xp.rsqrt(xp.add(var, eps)))
    if ends(eps)[0] >= 0:
        limit = up(np.sqrt(float(n - 1)))
        xhat = meet(xhat, -limit, limit)
    return xp.add(xp.multiply(xhat, weight), bias)


# ----- the table --------------------------------------------------------------------------------
# Every operator whose Bounds cell says IBP (shared/spec/operators.tsv), by the spec's name.
IBP_ARMS = {
    # elementwise
    "add": RULE, "sub": RULE, "mul": RULE, "div": _div, "neg": RULE, "abs": RULE,
    "sqrt": _sqrt, "rsqrt": RULE, "reciprocal": RULE, "square": RULE, "scale": RULE,
    "fmod": RULE, "remainder": _remainder, "hypot": RULE, "copysign": RULE, "safeLog": RULE,
    # transcendental
    "exp": RULE, "exp2": RULE, "expm1": RULE, "log": RULE, "log2": RULE, "log10": RULE,
    "log1p": RULE, "sin": RULE, "cos": RULE, "tan": RULE, "asin": RULE, "acos": RULE,
    "atan": RULE, "atan2": RULE, "sinh": RULE, "cosh": RULE, "asinh": RULE, "erf": RULE,
    # rounding
    "floor": RULE, "ceil": RULE, "round": RULE, "trunc": RULE, "frac": RULE, "sign": _sign,
    # extrema
    "max": RULE, "min": RULE, "fmax": RULE, "fmin": RULE, "clamp": RULE,
    # activation
    "relu": RULE, "sigmoid": RULE, "tanh": RULE, "softplus": _softplus, "silu": RULE,
    "gelu": RULE, "elu": _elu, "leakyReLU": _leaky_relu,
    # logic, scan_order, indexing, movement
    "select": RULE, "cumsum": RULE, "gather": RULE, "indexAt": RULE, "slice": RULE,
    "embedding": RULE, "reshape": RULE, "permute": RULE, "broadcast": RULE, "flip": RULE,
    "pad": RULE, "cat": RULE,
    # reduction, product, conv_pool, normalization
    "reduce": RULE, "mean": RULE, "contract": RULE, "matmul": RULE, "scaledMatmul": RULE,
    "linear": RULE, "conv": RULE, "pool": RULE, "layerNorm": _layer_norm,
    "batchNormRunning": RULE,
    # softmax_attention, loss, random, graph
    "softmax": _softmax, "logSoftmax": _log_softmax, "maskedSoftmax": _masked_softmax,
    "mseLoss": RULE, "bernoulliMask": _bernoulli_mask, "randUniform": RULE, "detach": RULE,
}


# ----- one node, a graph ----------------------------------------------------------------------
def transfer(op, boxes) -> list:
    """The output boxes of ``op`` at input ``boxes`` (checked boxes: ``read_boxes``), one
    (lo, hi) per output (the exact array twice at a non-scalar port).  RouteError when the
    operator has no IBP arm, or no rule at its attributes."""
    arm = IBP_ARMS.get(op.name)
    if arm is None:
        raise RouteError(f"{op.name} has no IBP arm (the spec's Bounds column)")
    xp = enclosure_backend()
    xs = [enclose(lo, hi) if p.scalar else lo for (lo, hi), p in zip(boxes, op.inputs)]
    if arm is RULE:
        rule = op.rule(xp)
        if rule is None:
            reason = op.no_rule_reason() or f"it needs capability {op.need}"
            raise RouteError(f"{op.name}: no rule at these attributes ({reason})")
        ys = rule.forward(xs)
    else:
        ys = arm(xp, op, *xs)
        ys = ys if isinstance(ys, tuple) else (ys,)
    out = []
    for y, p in zip(ys, op.outputs):
        if not p.scalar:
            out.append((np.asarray(y), np.asarray(y)))
        elif xp.undecided:
            out.append(unknown(p.shape))
        else:
            lo, hi = ends(y)
            out.append((np.broadcast_to(lo, p.shape).copy(), np.broadcast_to(hi, p.shape).copy()))
    return out


def graph_boxes(graph: Graph, boxes, on_node=None) -> dict:
    """{Ref: box} for every input, constant and node output of ``graph``, node by node from
    the input ``boxes`` (constants are point boxes).  ``on_node(k, boxes)``, if given, is
    called after node k's boxes are in (CROWN refines them there)."""
    held = {Ref(INPUT, i): b for i, b in enumerate(boxes)}
    names = [n or f"constant {i}" for i, n in enumerate(graph.constant_names)]
    points = read_boxes("ibp: graph", names, graph.constant_ports, graph.constants,
                        graph.constants)
    held.update({Ref(CONSTANT, i): b for i, b in enumerate(points)})
    for k, node in enumerate(graph.nodes):
        try:
            outs = transfer(node.op, [held[r] for r in node.args])
        except RouteError as exc:
            raise RouteError(f"ibp: graph node {k} ({node.op.name}): {exc}") from None
        held.update((Ref(k, j), b) for j, b in enumerate(outs))
        if on_node is not None:
            on_node(k, held)
    return held


def as_graph(target) -> Graph:
    """``target`` itself when it is a routes.Graph; an operator as a graph of one node over
    its own input ports (its attributes checked)."""
    if isinstance(target, Graph):
        return target
    target.check()
    g = Graph(**dict(zip(target.input_names, target.inputs)))
    refs = g.apply(target, *[g.input(n) for n in target.input_names])
    return g.output(*(refs if isinstance(refs, tuple) else (refs,)))


def ibp(target, lows, highs) -> tuple:
    """(lows, highs): boxes enclosing the real values of every output of ``target`` (an
    operator or a routes.Graph) for every input in the boxes given by ``lows`` and ``highs``
    (one array per input; the exact array twice at an index, bool or integer port).  Each a
    tuple of float64 arrays, one per output.  RouteError (one line) on a bad box, or an
    operator without an IBP arm or without a rule at its attributes."""
    if isinstance(target, Graph):
        boxes = read_boxes("ibp: graph", target.input_names, target.inputs, lows, highs)
        held = graph_boxes(target, boxes)
        outs = [held[r] for r in target.output_refs]
    else:
        target.check()
        boxes = read_boxes(f"ibp: {target.name}", target.input_names, target.inputs, lows,
                           highs)
        try:
            outs = transfer(target, boxes)
        except RouteError as exc:
            raise RouteError(f"ibp: {exc}") from None
    return tuple(lo for lo, _ in outs), tuple(hi for _, hi in outs)

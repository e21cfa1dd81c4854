"""Data movement (spec: "Data movement"): reshape, permute, broadcast, flip, pad, cat.

Each operator moves entries without arithmetic: the forward map is plain numpy on the arrays
(object arrays of reference / exact numbers included), the tangent map is the same movement
of the tangent, and the pullback the adjoint movement (exactly linear).  Only broadcast's
pullback adds (the cotangents of the copies of one entry, with the backend's reduction in
the policy's order).  The ``element`` argument (spec: Op.Element) moves Booleans or integer
words the same way, without gradients; pad fills with zero (False for Booleans).
"""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from .. import words as W
from ..certs import convention, roundoff
from ..registry import Float64, define
from .scan_order import element_jvp, samplers

TESTS = "tests/routes/test_routes_movement.py"
_ELEMENT = A.choice("element", W.ELEMENTS, doc="the element sort of the data: the model's "
                    "scalar, Booleans or words (moved without gradients)")


def _elem(a):
    return a.get("element", "scalar")


def _port(a, shape):
    return W.element_port(_elem(a), shape)


def _unary_ports(out_shape):
    return lambda a: ({"x": _port(a, a.shape)}, {"y": _port(a, out_shape(a))})


def _by_position(out_shape, source):
    """An oracle: out[pos] = x[source(a, pos)] position by position (independent of numpy's
    movement routines)."""
    def oracle(ctx, a, x):
        x = np.asarray(x, dtype=object)
        out = np.empty(out_shape(a), dtype=object)
        for pos in np.ndindex(*out.shape):
            src = source(a, pos)
            out[pos] = 0 if src is None else x[src]
        return (out,)
    return oracle


def _movement(name, *, out_shape, move, adjoint, source, check=None, bad_attributes=(),
              attributes, examples, notes, convention_test, statement, derivative=False,
              float64=None, exact_roundoff=False):
    """Declare a one-input movement operator: ``move(a, x)`` numpy movement, ``adjoint(xp,
    a, g)`` its adjoint, ``source(a, pos)`` the input position an output position reads
    (None: a filled zero) for the oracle."""
    certificates = (("derivative",) if derivative else ()) + (
        "prepared", convention(f"{TESTS}::{convention_test}", statement)) + (
        (roundoff(0, statement="exact: every output is an input entry or a zero"),)
        if exact_roundoff else ())
    return define(
        name, "movement",
        attributes=attributes + (_ELEMENT,),
        ports=_unary_ports(out_shape),
        forward=lambda xp, a, x: move(a, x, xp),
        jvp=element_jvp(lambda xp, a, xs, ys, ts: move(a, ts[0], xp)),
        backward=lambda xp, a, xs, ys, gs, needs: (adjoint(xp, a, gs[0]),),
        check=check,
        samples=samplers(),
        oracle=_by_position(out_shape, source),
        float64=float64,
        examples={**examples, "int8": {**examples[""], "element": "int8"},
                  "bool": {**examples[""], "element": "bool"}},
        bad_attributes=bad_attributes,
        notes=notes + ("element bool / int*: the same movement of Booleans or words, no "
                       "gradient.",),
        certificates=certificates,
    )


# ----- reshape ----------------------------------------------------------------------------------
def _reshape_check(a):
    n, m = (int(np.prod(s, dtype=np.int64)) for s in (a.shape, a.to))
    if n != m:
        return (f"to must have as many entries as shape (got {list(a.to)} with {m} for "
                f"{list(a.shape)} with {n})")
    return None


def _reshape_source(a, pos):
    flat = 0
    for p, n in zip(pos, a.to):                      # row-major offset of pos in `to`
        flat = flat * n + p
    src = []
    for n in reversed(a.shape):
        src.append(flat % n)
        flat //= n
    return tuple(reversed(src))


_movement(
    "reshape",
    attributes=(A.shape(default=(2, 3)), A.shape("to", (3, 2), doc="the new shape")),
    out_shape=lambda a: a.to,
    move=lambda a, x, xp: np.reshape(np.asarray(x), a.to).copy(),
    adjoint=lambda xp, a, g: np.reshape(np.asarray(g), a.shape).copy(),
    source=_reshape_source,
    check=_reshape_check,
    bad_attributes=(({"shape": (2, 3), "to": (4,)},
                     "to must have as many entries as shape (got [4] with 4 for [2, 3] with 6)"),),
    examples={"": {}, "flatten": {"shape": (2, 1, 2), "to": (4,)}},
    notes=("reshape: the entries in row-major order, laid out in shape `to` (same count).",
           "Gradient: the cotangent reshaped back."),
    convention_test="test_reshape_known_answer",
    statement="entries keep their row-major order; the pullback reshapes back",
)


# ----- permute ----------------------------------------------------------------------------------
def _permute_check(a):
    if sorted(a.perm) != list(range(len(a.shape))):
        return (f"perm must be a permutation of the {len(a.shape)} axes (got "
                f"{list(a.perm)})")
    return None


_movement(
    "permute",
    attributes=(A.shape(default=(2, 3)),
                A.nats("perm", (1, 0), doc="output axis d is input axis perm[d]")),
    out_shape=lambda a: tuple(a.shape[p] for p in a.perm),
    move=lambda a, x, xp: np.transpose(np.asarray(x), a.perm).copy(),
    adjoint=lambda xp, a, g: np.transpose(np.asarray(g), np.argsort(a.perm)).copy(),
    source=lambda a, pos: tuple(pos[list(a.perm).index(d)] for d in range(len(a.shape))),
    check=_permute_check,
    bad_attributes=(({"shape": (2, 3), "perm": (0, 0)},
                     "perm must be a permutation of the 2 axes (got [0, 0])"),),
    examples={"": {}, "rank3": {"shape": (2, 3, 2), "perm": (2, 0, 1)}},
    notes=("permute: y has axis d = x's axis perm[d] (torch.permute).",
           "Gradient: the cotangent permuted by the inverse permutation."),
    convention_test="test_permute_known_answer",
    statement="y[i, j] = x[j, i] for perm [1, 0]; the pullback applies the inverse",
)


# ----- broadcast --------------------------------------------------------------------------------
def _broadcast_check(a):
    lead = len(a.to) - len(a.shape)
    if lead < 0:
        return f"to must have rank >= {len(a.shape)} (got {list(a.to)})"
    for d, n in enumerate(a.shape):
        if n not in (1, a.to[lead + d]):
            return (f"shape {list(a.shape)} does not broadcast to {list(a.to)}: axis {d} has "
                    f"extent {n}, which must be 1 or {a.to[lead + d]}")
    return None


def _broadcast_adjoint(xp, a, g):
    """The sum of the cotangents of the copies of each entry (xp.sum, the policy's order)."""
    lead = len(a.to) - len(a.shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(a.shape)
                                      if n == 1 and a.to[lead + d] != 1)
    g = np.asarray(g)
    if not axes:
        return g.copy()
    if any(a.to[d] == 0 for d in axes):
        return xp.constant(0, a.shape)
    # keepdims leaves extent 1 on every summed axis, so the leading ones drop by reshape.
    return np.reshape(xp.sum(g, axis=axes, keepdims=True), a.shape)


_movement(
    "broadcast",
    attributes=(A.shape(default=(1, 3)), A.shape("to", (2, 3), doc="the target shape")),
    out_shape=lambda a: a.to,
    move=lambda a, x, xp: np.broadcast_to(np.asarray(x), a.to).copy(),
    adjoint=_broadcast_adjoint,
    source=lambda a, pos: tuple(0 if n == 1 else p for p, n in
                                zip(pos[len(a.to) - len(a.shape):], a.shape)),
    check=_broadcast_check,
    bad_attributes=(({"shape": (2, 3), "to": (3,)}, "to must have rank >= 2 (got [3])"),
                    ({"shape": (2,), "to": (3,)},
                     "shape [2] does not broadcast to [3]: axis 0 has extent 2, which must "
                     "be 1 or 3")),
    examples={"": {}, "lead": {"shape": (2,), "to": (3, 2)}},
    notes=("broadcast: numpy's rule (leading axes added, extent-1 axes repeated); the "
           "capture writes PyTorch's implicit broadcasting as this node.",
           "Gradient: the cotangents of the copies summed with the backend's reduction "
           "(sequential/pairwise/blocked as the policy says); the tangent is broadcast."),
    convention_test="test_broadcast_gradient_sums_the_copies",
    statement="the pullback sums the cotangents of every copy of an entry",
)


# ----- flip -------------------------------------------------------------------------------------
def _flip_check(a):
    rank = len(a.shape)
    if len(set(a.axes)) != len(a.axes):
        return f"axes must be distinct (got {list(a.axes)})"
    bad = [d for d in a.axes if d >= rank]
    if bad:
        return f"axes must be < rank {rank} (got {bad[0]})"
    return None


def _flip(a, x):
    return np.flip(np.asarray(x), axis=tuple(a.axes)).copy() if a.axes else np.asarray(x).copy()


_movement(
    "flip",
    attributes=(A.shape(), A.nats("axes", (0,), doc="the reversed axes")),
    out_shape=lambda a: a.shape,
    move=lambda a, x, xp: _flip(a, x),
    adjoint=lambda xp, a, g: _flip(a, g),
    source=lambda a, pos: tuple(n - 1 - p if d in a.axes else p
                                for d, (p, n) in enumerate(zip(pos, a.shape))),
    check=_flip_check,
    bad_attributes=(({"axes": (0, 0)}, "axes must be distinct (got [0, 0])"),
                    ({"axes": (1,)}, "axes must be < rank 1 (got 1)")),
    examples={"": {}, "2x3-axis1": {"shape": (2, 3), "axes": (1,)}},
    notes=("flip: the listed axes reversed (torch.flip).",
           "Gradient: the cotangent flipped the same way (flip is its own adjoint)."),
    float64=Float64(lambda a, x: np.flip(x, axis=tuple(a.axes)),
                    lambda a, xs, gs: (np.flip(gs[0], axis=tuple(a.axes)),)),
    convention_test="test_flip_known_answer",
    exact_roundoff=True,
    statement="the listed axes are reversed; the pullback flips back",
)


# ----- pad --------------------------------------------------------------------------------------
def _pad_check(a):
    rank = len(a.shape)
    if len(a.before) != rank or len(a.after) != rank:
        return (f"before and after must have one entry per axis ({rank}) (got "
                f"{list(a.before)} and {list(a.after)})")
    return None


def _pad_shape(a):
    return tuple(b + n + e for b, n, e in zip(a.before, a.shape, a.after))


def _inner(a):
    return tuple(slice(b, b + n) for b, n in zip(a.before, a.shape))


def _pad(a, x, xp):
    x = np.asarray(x)
    if _elem(a) == "scalar":
        out = xp.constant(0, _pad_shape(a)).copy()
    else:
        out = np.zeros(_pad_shape(a), dtype=x.dtype)
    out[_inner(a)] = x
    return out


_movement(
    "pad",
    attributes=(A.shape(), A.nats("before", (1,), doc="zeros added before each axis"),
                A.nats("after", (2,), doc="zeros added after each axis")),
    out_shape=_pad_shape,
    move=_pad,
    adjoint=lambda xp, a, g: np.asarray(g)[_inner(a)].copy(),
    source=lambda a, pos: (tuple(p - b for p, b in zip(pos, a.before))
                           if all(b <= p < b + n for p, b, n in zip(pos, a.before, a.shape))
                           else None),
    check=_pad_check,
    bad_attributes=(({"shape": (2, 3), "before": (1,), "after": (1, 1)},
                     "before and after must have one entry per axis (2) (got [1] and "
                     "[1, 1])"),),
    examples={"": {}, "2x3": {"shape": (2, 3), "before": (0, 1), "after": (1, 0)}},
    notes=("pad: constant zero padding, before[d] zeros before and after[d] after axis d "
           "(+0 for the scalar, 0 for words, False for Booleans).",
           "Gradient: the cotangent's inner block (the padding receives nothing)."),
    float64=Float64(lambda a, x: np.pad(x, list(zip(a.before, a.after))),
                    lambda a, xs, gs: (gs[0][tuple(slice(b, b + n) for b, n in
                                                   zip(a.before, a.shape))],)),
    convention_test="test_pad_known_answer",
    exact_roundoff=True,
    statement="the padding is +0 and its cotangent is dropped",
    derivative=True,
)


# ----- cat --------------------------------------------------------------------------------------
def _cat_check(a):
    rank = len(a.shape)
    if rank == 0:
        return "shape must have rank >= 1 (got [])"
    if a.axis >= rank:
        return f"axis must be < rank {rank} (got {a.axis})"
    if not a.sizes:
        return "sizes must list at least one input (got [])"
    return None


def _cat_in_shape(a, n):
    return tuple(n if d == a.axis else m for d, m in enumerate(a.shape))


def _cat_out_shape(a):
    return _cat_in_shape(a, sum(a.sizes))


def _cat_ports(a):
    ins = {f"x{i}": _port(a, _cat_in_shape(a, n)) for i, n in enumerate(a.sizes)}
    return ins, {"y": _port(a, _cat_out_shape(a))}


def _cat_forward(xp, a, *xs):
    return np.concatenate([np.asarray(x) for x in xs], axis=a.axis)


def _cat_backward(xp, a, xs, ys, gs, needs):
    out, start = [], 0
    for n in a.sizes:
        out.append(np.take(np.asarray(gs[0]), range(start, start + n), axis=a.axis))
        start += n
    return tuple(out)


def _cat_oracle(ctx, a, *xs):
    out = np.empty(_cat_out_shape(a), dtype=object)
    starts = np.concatenate([[0], np.cumsum(a.sizes)])
    for pos in np.ndindex(*out.shape):
        k = pos[a.axis]
        i = next(j for j in range(len(a.sizes)) if starts[j] <= k < starts[j + 1])
        src = list(pos)
        src[a.axis] = k - starts[i]
        out[pos] = np.asarray(xs[i], dtype=object)[tuple(src)]
    return (out,)


define(
    "cat", "movement",
    attributes=(A.shape(doc="the inputs' shape, whose axis extent sizes replace"),
                A.nat("axis", doc="the joined axis"),
                A.nats("sizes", (1, 2), doc="each input's extent along axis"), _ELEMENT),
    ports=_cat_ports,
    forward=_cat_forward,
    jvp=element_jvp(lambda xp, a, xs, ys, ts: np.concatenate([np.asarray(t) for t in ts],
                                                             axis=a.axis)),
    backward=_cat_backward,
    check=_cat_check,
    samples=samplers(),
    oracle=_cat_oracle,
    examples={"": {}, "2x3-axis1": {"shape": (2, 3), "axis": 1, "sizes": (1, 0, 2)},
              "int8": {"element": "int8"}, "bool": {"element": "bool"}},
    bad_attributes=(({"shape": ()}, "shape must have rank >= 1 (got [])"),
                    ({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
                    ({"sizes": ()}, "sizes must list at least one input (got [])")),
    notes=("cat: the inputs x0, x1, ... joined along axis; input i has extent sizes[i] there "
           "and `shape`'s extents elsewhere (zero extents allowed).",
           "Gradient: each input receives its block of the cotangent.  element bool / int*: "
           "the same joining of Booleans or words, no gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_cat_known_answer",
                             "inputs are joined in order; the pullback splits the cotangent "
                             "into the same blocks")),
)

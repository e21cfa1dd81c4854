"""Losses over slices (spec: "Losses"): crossEntropy (logits and class indices at an index
port), crossEntropyProbabilities (logits and target probabilities), distill (student logits
and a teacher at a detached port, Hinton's distillation loss) and cosineLoss (slices along
an axis), with loss.py's reductions.  The log-softmax inside the cross entropies subtracts
the slice's maximum first; ``logits_loss`` declares a loss of logits as unary_elementwise
declares an elementwise operator.  The family is loss.py's."""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import detached, frozen, index, value
from ..registry import Float64, define
from ..rules import saving, shown
from ..samples import into, target
from .loss import (TESTS, count, mp_reduce, np_reduce, out_port, reduce_terms, reduction_attr,
                   reduction_check, spread_back)
from .softmax_attention import log_softmax


def _class_axis(shape) -> int:
    """PyTorch's class axis: 1 for rank >= 2, else 0."""
    return 1 if len(shape) >= 2 else 0


def _rest(shape, axis) -> tuple:
    return tuple(n for i, n in enumerate(shape) if i != axis)


def _logits_check(a):
    if len(a.shape) == 0:
        return "shape must have rank >= 1 (got [])"
    c = a.shape[_class_axis(a.shape)]
    if c == 0:
        return f"the class axis {_class_axis(a.shape)} must have extent > 0 (got shape " \
               f"{list(a.shape)})"
    return reduction_check(a, _rest(a.shape, _class_axis(a.shape)))


_LOGITS_BAD = (({"shape": ()}, "shape must have rank >= 1 (got [])"),
               ({"shape": (2, 0)}, "the class axis 1 must have extent > 0"),
               ({"shape": (0, 3)}, "reduction mean needs at least one term (got shape [0])"))
_LOGITS_EXAMPLES = {"": {}, "sum-rank1": {"shape": (3,), "reduction": "sum"},
                    "none": {"reduction": "none"}}


def logits_loss(name, inputs, *, forward, backward, jvp, sampler, oracle, notes, **more):
    """Declare a loss of logits ``x`` over the class axis (1, or 0 at rank 1, as PyTorch),
    as unary_elementwise declares an elementwise operator: the shape and reduction
    attributes, the loss port over the other axes, the logits check, the examples, and
    samples of every kind from ``sampler(kind)``; ``inputs(a)`` the input ports."""
    define(
        name, "loss",
        attributes=(A.shape(default=(2, 3), doc="the logits' shape: [N, C, ...] or [C] (class "
                            "axis 1, or 0 at rank 1, as PyTorch)"), reduction_attr()),
        ports=lambda a: (inputs(a), {"loss": out_port(a, _rest(a.shape, _class_axis(a.shape)))}),
        forward=forward, backward=backward, jvp=jvp, check=_logits_check,
        samples={k: sampler(k) for k in ("ordinary", "edges", "special")},
        oracle=oracle, examples=_LOGITS_EXAMPLES, bad_attributes=_LOGITS_BAD, notes=notes,
        **more)



def _logits(rng, fmt, shape, kind):
    """Logits: uniform in [-4, 4]; edges +-1000 among them (the shift matters)."""
    n = count(shape)
    x = rng.uniform(-4, 4, n)
    if kind == "edges":
        top = float(target(fmt).max_finite)
        big = np.clip([1000.0, -1000.0, 0.0], -top, top)
        x = np.where(rng.random(n) < 0.6, big[rng.integers(0, 3, n)], x)
    elif kind == "special":
        vals = np.array([0.0, np.inf, -np.inf, np.nan])
        x = np.where(rng.random(n) < 0.3, vals[rng.integers(0, 4, n)], x)
    return into(x, fmt).reshape(shape)


def _expand(g, axis):
    """Per-slice values broadcast back along ``axis`` (data movement)."""
    return np.expand_dims(g, axis)


def _mp_lse_rows(ctx, x, axis):
    """(rows of x along axis as lists, log-sum-exp of each) in mpmath, from the definition:
    NaN or +inf in a row, or a row of all -inf, gives NaN."""
    moved = np.moveaxis(np.asarray(x, dtype=object), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1]).tolist()
    lse = []
    for r in rows:
        if any(ctx.isnan(v) or v == ctx.inf for v in r) or all(v == -ctx.inf for v in r):
            lse.append(ctx.nan)
        else:
            lse.append(ctx.log(ctx.fsum(ctx.exp(v) for v in r if v != -ctx.inf)))
    return rows, lse, moved.shape[:-1]


def _np_lsm(x, axis):
    z = x - np.max(x, axis=axis, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def _np_cep(a, x, t):
    return np_reduce(a.reduction, -np.sum(t * _np_lsm(x, _class_axis(a.shape)),
                                           axis=_class_axis(a.shape)))


def _np_distill(a, s, teacher, temp):
    ax = _class_axis(a.shape)
    lp, lq = _np_lsm(teacher / temp, ax), _np_lsm(s / temp, ax)
    p = np.exp(lp)
    kl = np.sum(np.where(p > 0, p * lp, 0.0) - p * lq, axis=ax)
    return np_reduce(a.reduction, temp * temp * kl)


def _np_cos(a, x, t, eps):
    ax = a.axis
    dot = np.sum(x * t, axis=ax)
    nx, nt = np.sqrt(np.sum(x * x, axis=ax)), np.sqrt(np.sum(t * t, axis=ax))
    return np_reduce(a.reduction, 1 - dot / (np.maximum(nx, eps) * np.maximum(nt, eps)))


# ----- crossEntropy ---------------------------------------------------------------------------
def _onehot(t, axis, classes):
    """Booleans: True at the target class of each slice (data movement on indices)."""
    return np.moveaxis(np.expand_dims(t, -1) == np.arange(classes), -1, axis)


def _ce_forward(xp, a, x, t):
    ax = _class_axis(a.shape)
    lsm = log_softmax(xp, x, ax)
    picked = np.take_along_axis(lsm, np.expand_dims(t, ax), axis=ax)
    loss = reduce_terms(xp, a.reduction, xp.negative(np.squeeze(picked, axis=ax)))
    return saving(loss, log_softmax=lsm)


def _ce_backward(xp, a, xs, ys, gs, needs):
    x, t = xs
    ax = _class_axis(a.shape)
    p = xp.exp(ys.saved["log_softmax"])
    hot = _onehot(t, ax, a.shape[ax])
    g = _expand(spread_back(xp, a.reduction, gs[0], _rest(a.shape, ax)), ax)
    diff = xp.where(hot, xp.subtract(p, xp.ones_like(p)), p)
    return xp.multiply(diff, g), None


def _ce_jvp(xp, a, xs, ys, ts):
    x, t = xs
    ax = _class_axis(a.shape)
    p = xp.exp(ys.saved["log_softmax"])
    hot = _onehot(t, ax, a.shape[ax])
    tx = ts[0]
    picked = xp.sum(xp.where(hot, tx, xp.zeros_like(tx)), axis=ax)
    return reduce_terms(xp, a.reduction, xp.subtract(xp.sum(xp.multiply(p, tx), axis=ax), picked))


def _ce_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        ax = _class_axis(shape)
        t = rng.integers(0, shape[ax], _rest(shape, ax)).astype(np.int64)
        return _logits(rng, fmt, shape, kind), t
    return sampler


def _mp_ce(ctx, a, x, t):
    ax = _class_axis(a.shape)
    rows, lse, rest = _mp_lse_rows(ctx, x, ax)
    terms = [s - r[int(c)] for r, s, c in zip(rows, lse, np.ravel(t).tolist())]
    return (mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


logits_loss(
    "crossEntropy",
    lambda a: {"x": value(a.shape),
               "target": index((a.shape[_class_axis(a.shape)] if a.shape else 1,),
                               _rest(a.shape, _class_axis(a.shape)))},
    forward=_ce_forward, backward=_ce_backward, jvp=_ce_jvp, sampler=_ce_sampler,
    oracle=_mp_ce,
    notes=("crossEntropy(x, target) = reduction of logsumexp(x_n) - x_n[target_n] over the "
           "class axis (1, or 0 at rank 1), target class indices at an index port "
           "(torch.nn.CrossEntropyLoss without weights, ignore_index or label smoothing); "
           "mean divides by the number of targets.",
           "The log-softmax subtracts each slice's maximum first: logits of 1000 do not "
           "overflow.  A NaN or +inf logit, or a slice of all -inf, gives NaN.",
           "prepare keeps the log-softmax; gradient (softmax(x) - onehot(target)) g (PyTorch's "
           "formula); the indices have no gradient."),
    certificates=("prepared",
                  convention(f"{TESTS}::test_cross_entropy_large_logits_do_not_overflow",
                             "logits of 1000 give the exact log-sum-exp loss, no overflow",
                             route="forward")),
)


# ----- crossEntropyProbabilities --------------------------------------------------------------
def _cep_forward(xp, a, x, t):
    ax = _class_axis(a.shape)
    lsm = log_softmax(xp, x, ax)
    terms = xp.negative(xp.sum(xp.multiply(t, lsm), axis=ax))
    return saving(reduce_terms(xp, a.reduction, terms), log_softmax=lsm)


def _cep_backward(xp, a, xs, ys, gs, needs):
    x, t = xs
    ax = _class_axis(a.shape)
    lsm = ys.saved["log_softmax"]
    g = _expand(spread_back(xp, a.reduction, gs[0], _rest(a.shape, ax)), ax)
    # d/dx of -sum(t * lsm) = softmax * sum(t) - t (PyTorch's formula keeps sum(t)).
    gx = xp.multiply(xp.subtract(xp.multiply(xp.exp(lsm), xp.sum(t, axis=ax, keepdims=True)),
                                 t), g)
    gt = xp.multiply(xp.negative(lsm), g) if needs[1] else None
    return gx, gt


def _cep_jvp(xp, a, xs, ys, ts):
    x, t = xs
    ax = _class_axis(a.shape)
    lsm = ys.saved["log_softmax"]
    tx, tt = ts
    dl = xp.subtract(tx, xp.sum(xp.multiply(xp.exp(lsm), tx), axis=ax, keepdims=True))
    lin = xp.add(xp.multiply(t, dl), xp.multiply(tt, lsm))
    return reduce_terms(xp, a.reduction, xp.negative(xp.sum(lin, axis=ax)))


def _cep_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        ax = _class_axis(shape)
        w = rng.uniform(0.05, 1, shape)
        t = into(w / np.sum(w, axis=ax, keepdims=True), fmt)
        if kind == "edges":                          # one-hot targets: the hard-label case
            t = (w == np.max(w, axis=ax, keepdims=True)).astype(np.float64)
        return _logits(rng, fmt, shape, kind), t
    return sampler


def _mp_cep(ctx, a, x, t):
    ax = _class_axis(a.shape)
    rows, lse, rest = _mp_lse_rows(ctx, x, ax)
    trows = np.moveaxis(np.asarray(t, dtype=object), ax, -1).reshape(len(rows), -1).tolist()
    terms = [ctx.fsum(p * (s - v) for p, v in zip(tr, r)) for r, s, tr in zip(rows, lse, trows)]
    return (mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


logits_loss(
    "crossEntropyProbabilities",
    lambda a: {"x": value(a.shape), "target": value(a.shape)},
    forward=_cep_forward, backward=_cep_backward, jvp=_cep_jvp, sampler=_cep_sampler,
    oracle=_mp_cep, float64=Float64(_np_cep, ulps=4),
    notes=("crossEntropyProbabilities(x, target) = reduction of -sum_c target_c "
           "logSoftmax(x)_c over the class axis (1, or 0 at rank 1): torch.nn.CrossEntropyLoss "
           "with class-probability targets; mean divides by the number of slices.  The "
           "target is not checked to be a distribution.",
           "The log-softmax subtracts each slice's maximum first.  A target of 0 against a "
           "-inf logit gives 0 * -inf = NaN (as PyTorch).",
           "prepare keeps the log-softmax; gradient (softmax(x) sum(target) - target) g at x, "
           "-logSoftmax(x) g at target."),
    certificates=("prepared",),
)


# ----- distill --------------------------------------------------------------------------------
def _distill_parts(xp, a, s, teacher, temp):
    ax = _class_axis(a.shape)
    lp = log_softmax(xp, xp.divide(teacher, temp), ax)
    lq = log_softmax(xp, xp.divide(s, temp), ax)
    return ax, lp, lq, xp.exp(lp)


def _distill_forward(xp, a, s, teacher, temp):
    ax, lp, lq, p = _distill_parts(xp, a, s, teacher, temp)
    # PyTorch's kl_div: xlogy(p, p) - p lq, with xlogy(0, .) = 0 (a -inf teacher logit).
    plogp = xp.where(xp.greater(p, xp.zeros_like(p)), xp.multiply(p, lp), xp.zeros_like(p))
    kl = xp.sum(xp.subtract(plogp, xp.multiply(p, lq)), axis=ax)
    terms = xp.multiply(xp.multiply(temp, temp), kl)
    return saving(reduce_terms(xp, a.reduction, terms), lp=lp, lq=lq)


def _distill_backward(xp, a, xs, ys, gs, needs):
    s, teacher, temp = xs
    ax = _class_axis(a.shape)
    p, q = xp.exp(ys.saved["lp"]), xp.exp(ys.saved["lq"])
    g = _expand(spread_back(xp, a.reduction, gs[0], _rest(a.shape, ax)), ax)
    # d/ds of T^2 sum p (lp - lq) = T (q sum(p) - p).
    d = xp.subtract(xp.multiply(q, xp.sum(p, axis=ax, keepdims=True)), p)
    return xp.multiply(xp.multiply(temp, d), g), None, None


def _distill_jvp(xp, a, xs, ys, ts):
    s, teacher, temp = xs
    ax = _class_axis(a.shape)
    p, q = xp.exp(ys.saved["lp"]), xp.exp(ys.saved["lq"])
    dz = ts[0]
    inner = xp.subtract(xp.multiply(xp.sum(p, axis=ax), xp.sum(xp.multiply(q, dz), axis=ax)),
                        xp.sum(xp.multiply(p, dz), axis=ax))
    return reduce_terms(xp, a.reduction, xp.multiply(temp, inner))


def _distill_validate(xp, a, s, teacher, temp):
    if xp.isnan(temp) or not xp.greater(temp, xp.zeros_like(temp)):
        return f"temperature must be > 0 (got {shown(xp, temp)})"
    return None


def _distill_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        temp = {"ordinary": 2.0, "edges": 0.5, "special": 1.0}[kind]
        return (_logits(rng, fmt, shape, kind), _logits(rng, fmt, shape, kind),
                np.asarray(into(temp, fmt)))
    return sampler


def _mp_distill(ctx, a, s, teacher, temp):
    ax = _class_axis(a.shape)
    temp = temp[()]
    rows_s, lse_s, rest = _mp_lse_rows(ctx, np.asarray(s, dtype=object) / temp, ax)
    rows_t, lse_t, _ = _mp_lse_rows(ctx, np.asarray(teacher, dtype=object) / temp, ax)
    terms = []
    for rs, ls, rt, lt in zip(rows_s, lse_s, rows_t, lse_t):
        lp = [v - lt if v != -ctx.inf else -ctx.inf for v in rt]
        lq = [v - ls for v in rs]
        kl = ctx.fsum((ctx.exp(u) * u if u != -ctx.inf else ctx.zero) - ctx.exp(u) * w
                      for u, w in zip(lp, lq))
        terms.append(ctx.nan if ctx.isnan(lt) or ctx.isnan(ls) else temp * temp * kl)
    return (mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


logits_loss(
    "distill",
    lambda a: {"x": value(a.shape), "teacher": detached(a.shape), "temperature": frozen()},
    forward=_distill_forward, backward=_distill_backward, jvp=_distill_jvp,
    sampler=_distill_sampler, oracle=_mp_distill, validate=_distill_validate,
    float64=Float64(_np_distill, ulps=4),
    bad_inputs=(({}, (np.zeros((2, 3)), np.zeros((2, 3)), 0.0),
                 "distill: temperature must be > 0 (got 0)"),
                ({}, (np.zeros((2, 3)), np.zeros((2, 3)), np.nan),
                 "temperature must be > 0 (got nan)")),
    notes=("distill(x, teacher, T) = reduction of T^2 KL(p || q) over the class axis, "
           "p = softmax(teacher / T), q = softmax(x / T) (Hinton's distillation loss, "
           "PyTorch's T^2 kl_div(log_softmax(x/T), softmax(teacher/T))); mean divides the sum "
           "by the number of slices (kl_div's batchmean for [N, C] logits).",
           "The teacher is read at a detached port (no contribution, as PyTorch's detach); "
           "the temperature at a frozen port; validate refuses T <= 0 and NaN.",
           "Both log-softmaxes subtract the slice's maximum first; the terms are PyTorch's "
           "kl_div, xlogy(p, p) - p log q with xlogy(0, .) = 0, so a teacher probability of "
           "0 (a -inf teacher logit, or underflow) contributes 0.",
           "prepare keeps both log-softmaxes; gradient T (q sum(p) - p) g at x."),
    certificates=("prepared",),
)


# ----- cosineLoss -----------------------------------------------------------------------------
def _cos_parts(xp, a, x, t, eps):
    """(dot, |x|, |t|, max(|x|, eps), max(|t|, eps), cos) along axis, keepdims."""
    ax = a.axis
    dot = xp.sum(xp.multiply(x, t), axis=ax, keepdims=True)
    nx = xp.sqrt(xp.sum(xp.multiply(x, x), axis=ax, keepdims=True))
    nt = xp.sqrt(xp.sum(xp.multiply(t, t), axis=ax, keepdims=True))
    cx, ct = xp.maximum(nx, eps), xp.maximum(nt, eps)
    return dot, nx, nt, cx, ct, xp.divide(dot, xp.multiply(cx, ct))


def _cos_forward(xp, a, x, t, eps):
    *_, c = _cos_parts(xp, a, x, t, eps)
    terms = np.squeeze(xp.subtract(xp.ones_like(c), c), axis=a.axis)
    return reduce_terms(xp, a.reduction, terms)


def _cos_dir(xp, u, w, nu, cu, cw, c, eps):
    """d cos / d u (the other operand w fixed): w / (cu cw) - c [|u| > eps] u / |u|^2 (the
    clamped norm has slope 0; the selection keeps 0 / 0 out)."""
    on = xp.greater(nu, eps)
    nu2 = xp.where(on, xp.multiply(nu, nu), xp.ones_like(nu))
    pull = xp.where(on, xp.divide(c, nu2), xp.zeros_like(nu))
    return xp.subtract(xp.divide(w, xp.multiply(cu, cw)), xp.multiply(pull, u))


def _cos_backward(xp, a, xs, ys, gs, needs):
    x, t, eps = xs
    _, nx, nt, cx, ct, c = _cos_parts(xp, a, x, t, eps)
    g = xp.negative(_expand(spread_back(xp, a.reduction, gs[0], _rest(a.shape, a.axis)),
                            a.axis))
    gx = xp.multiply(_cos_dir(xp, x, t, nx, cx, ct, c, eps), g)
    gt = xp.multiply(_cos_dir(xp, t, x, nt, ct, cx, c, eps), g) if needs[1] else None
    return gx, gt, None


def _cos_jvp(xp, a, xs, ys, ts):
    x, t, eps = xs
    _, nx, nt, cx, ct, c = _cos_parts(xp, a, x, t, eps)
    lin = xp.add(xp.multiply(_cos_dir(xp, x, t, nx, cx, ct, c, eps), ts[0]),
                 xp.multiply(_cos_dir(xp, t, x, nt, ct, cx, c, eps), ts[1]))
    return reduce_terms(xp, a.reduction, xp.negative(xp.sum(lin, axis=a.axis)))


def _cos_sampler(kind):
    def sampler(rng, fmt, op):
        shape = op.attrs.shape
        x, t = rng.uniform(-2, 2, shape), rng.uniform(-2, 2, shape)
        if kind == "edges":
            # Antiparallel and zero slices.  Not parallel ones: 1 - cos = 0 there is the
            # cancellation of two roundings, which no relative comparison can judge.
            per = list(shape)
            per[op.attrs.axis] = 1
            t = x * rng.choice([-1.0, 0.0, -2.0], per)
        elif kind == "special":
            vals = np.array([0.0, np.inf, np.nan])
            x = np.where(rng.random(shape) < 0.3, vals[rng.integers(0, 3, shape)], x)
        return into(x, fmt), into(t, fmt), np.asarray(into(1e-8, fmt))
    return sampler


def _mp_cos(ctx, a, x, t, eps):
    eps = eps[()]
    xm = np.moveaxis(np.asarray(x, dtype=object), a.axis, -1)
    tm = np.moveaxis(np.asarray(t, dtype=object), a.axis, -1)
    rest = xm.shape[:-1]
    terms = []
    for r, w in zip(xm.reshape(-1, xm.shape[-1]).tolist(), tm.reshape(-1, tm.shape[-1]).tolist()):
        nx, nt = ctx.sqrt(ctx.fsum(v * v for v in r)), ctx.sqrt(ctx.fsum(v * v for v in w))
        terms.append(1 - ctx.fsum(u * v for u, v in zip(r, w)) / (max(nx, eps) * max(nt, eps))
                     if not (ctx.isnan(nx) or ctx.isnan(nt)) else ctx.nan)
    return (mp_reduce(ctx, a.reduction, np.array(terms, dtype=object).reshape(rest)),)


def _cos_check(a):
    rank = len(a.shape)
    if a.axis >= rank:
        return f"axis must be < rank {rank} (got {a.axis})"
    return reduction_check(a, _rest(a.shape, a.axis))


define(
    "cosineLoss", "loss",
    attributes=(A.shape(default=(2, 3)),
                A.nat("axis", 1, gen=(0, 3), doc="the axis the cosine is taken along"),
                reduction_attr()),
    ports=lambda a: ({"x": value(a.shape), "target": value(a.shape), "eps": frozen()},
                     {"loss": out_port(a, _rest(a.shape, a.axis))}),
    forward=_cos_forward,
    backward=_cos_backward,
    jvp=_cos_jvp,
    check=_cos_check,
    samples={k: _cos_sampler(k) for k in ("ordinary", "edges", "special")},
    oracle=_mp_cos,
    float64=Float64(_np_cos, ulps=4),
    examples={"": {}, "rank1-sum": {"shape": (3,), "axis": 0, "reduction": "sum"},
              "none": {"reduction": "none"}},
    bad_attributes=(({"shape": (2, 3), "axis": 2}, "axis must be < rank 2 (got 2)"),
                    ({"shape": (0, 3)}, "reduction mean needs at least one term")),
    notes=("cosineLoss(x, target, eps) = reduction of 1 - cos(x, target) over the slices "
           "along axis, cos = sum(x target) / (max(|x|, eps) max(|target|, eps)) (PyTorch's "
           "cosine_similarity, each norm clamped at eps; eps at a frozen port, default "
           "1e-8): CosineEmbeddingLoss with every label +1.",
           "A zero vector gives cos = 0, loss 1; a NaN or inf entry gives NaN.  Near "
           "parallel slices 1 - cos cancels: its error is absolute (a few ulps of 1).",
           "Gradient at x: -(target / (cx ct) - cos x / |x|^2) g, cx = max(|x|, eps); the "
           "second term is 0 where |x| <= eps (the clamp's slope); symmetric at target."),
    certificates=("prepared",),
)

"""The aten table's lookups by indices (the conventions of routes.frontends.aten): embeddings,
embedding bags and class-index losses, with ``BOUNDS``, the bound of the indices each reads
(an integer graph input read there becomes an index port with that bound).  torch is never
imported here; ``cx`` is the capture (routes.frontends.torch).

- ``embedding`` with a ``padding_idx`` reads select(row is padding_idx, detach(weight),
  weight): the same rows, and no gradient into the padding row (as torch);
- ``embedding_bag`` with bags known when the model is captured (a 2-D input, or offsets
  the capture folds): the rows looked up, weighted (``per_sample_weights``), summed per bag
  by a product with the constant 0/1 bag matrix; mean divides by the bag's size (the
  entries not equal to ``padding_idx``; an empty bag gives 0, as torch); max reduces each
  bag's slice;
- cross entropy and NLL of class indices: the registered ``crossEntropy`` where it is the
  whole loss, else composed (``_class_loss``: class weights, ignore_index, label
  smoothing, PyTorch's LossNLL.cpp).
"""

from __future__ import annotations

import math
from typing import Callable

from . import registrar
from .aten_integers import WORD, words

TABLE: dict[str, Callable] = {}
BOUNDS: dict[str, Callable] = {}
_entry = registrar(TABLE, "aten table")


@_entry("aten.embedding.default")
def _embedding(cx, a):
    """embedding; with a padding_idx the rows are select(row is padding_idx, detach(weight),
    weight): the same values (a selection is exact), and no gradient reaches the padding
    row, as torch's embedding_backward gives it none."""
    num, dim = cx.shape(a.weight)
    weight = a.weight
    if a.padding_idx is not None and 0 <= a.padding_idx < num and cx.is_ref(weight):
        rows = cx.padding_rows(num, dim, a.padding_idx)
        frozen = cx.apply("detach", weight, shape=(num, dim))
        weight = cx.apply("select", rows, frozen, weight, shape=(num, dim))
    ids = cx.indices(a.indices, num)
    return cx.apply("embedding", weight, ids, num=num, dim=dim, shape=cx.shape(a.indices))


BOUNDS["aten.embedding.default"] = lambda node, arg: (
    node.args[0].meta["val"].shape[0] if len(node.args) > 1 and node.args[1] is arg else None)

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@_entry("aten.cross_entropy_loss.default")
def _cross_entropy(cx, a):
    shape = cx.shape(a.self)
    reduction = _REDUCTIONS[a.reduction]
    if cx.shape(a.target) == shape and cx.is_scalar(a.target):
        if a.weight is not None or a.label_smoothing:
            cx.refuse("class weights and label smoothing with class probabilities are not "
                      "translated")
        return cx.apply("crossEntropyProbabilities", a.self, a.target, shape=shape,
                        reduction=reduction)
    classes = shape[1] if len(shape) >= 2 else shape[0]
    if a.weight is None and not a.label_smoothing and cx.kind(a.target) == "index":
        # Index targets below the class count never equal an ignore_index outside
        # [0, classes): the registered operator is the whole loss.
        if 0 <= a.ignore_index < classes:
            return _class_loss(cx, a, reduction, from_logits=True)
        return cx.apply("crossEntropy", a.self, cx.indices(a.target, classes), shape=shape,
                        reduction=reduction)
    return _class_loss(cx, a, reduction, from_logits=True)


@_entry("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def _nll_loss(cx, a):
    missing = cx.missing("the total weight output of nll_loss is not translated")
    return _class_loss(cx, a, _REDUCTIONS[a.reduction], from_logits=False), missing


def _class_loss(cx, a, reduction, from_logits):
    """Cross entropy (``from_logits``: log-softmax over the class axis first) or NLL of
    class indices with PyTorch's class weights, ignore_index and label smoothing
    (LossNLL.cpp): per entry -w[t] logp[t], 0 where t == ignore_index; mean divides the
    sum by the sum of w[t] over the entries not ignored; label smoothing eps mixes
    (1 - eps) times that with eps / C times the smoothing loss -sum_c w[c] logp[c] (0
    where ignored; mean: over the same weight sum, or the count without weights).  The
    target is read as int64 words, compared with ignore_index, replaced by class 0 where
    ignored and decoded below the class count; logp[t] is a gather of the flattened
    log-probabilities at position (entry) * C + t."""
    x = a.self
    shape = cx.shape(x)
    cls = 1 if len(shape) >= 2 else 0
    classes = shape[cls]
    if from_logits:
        x = cx.apply("logSoftmax", x, shape=shape, axis=cls)
    # The class axis last, the entries flattened: logp (M, C); targets (M,).
    rest = shape[:cls] + shape[cls + 1:]
    m = math.prod(rest)
    if cls != len(shape) - 1:
        perm = tuple(d for d in range(len(shape)) if d != cls) + (cls,)
        x = cx.apply("permute", x, shape=shape, perm=perm, element="scalar")
    moved = rest + (classes,)
    t = words(cx, a.target)
    if rest != (m,):
        t = cx.apply("reshape", t, shape=rest, to=(m,), element=WORD)
    keep = cx.apply("ne", t, words(cx, int(a.ignore_index), (m,)), shape=(m,), element=WORD)
    safe = cx.apply("select", keep, t, words(cx, 0, (m,)), shape=(m,), element=WORD)
    flat = cx.apply("reshape", x, shape=moved, to=(m * classes,))
    rows = cx.offsets((m,), (classes,), skip=None)          # entry r starts at r * C
    where = cx.apply("add", safe, rows, shape=(m,), element=WORD)
    at = cx.apply("decodeIndex", where, shape=(m,), bounds=(m * classes,), element=WORD)
    picked = cx.apply("gather", flat, at, shape=(m * classes,), axes=(0,), batch=0,
                      index_shape=(m,))
    kept = cx.apply("cast", keep, shape=(m,))              # 1 kept, 0 ignored
    w = kept
    if a.weight is not None:
        index = cx.apply("decodeIndex", safe, shape=(m,), bounds=(classes,), element=WORD)
        chosen = cx.apply("gather", a.weight, index, shape=(classes,), axes=(0,), batch=0,
                          index_shape=(m,))
        w = cx.apply("mul", chosen, kept, shape=(m,))
    losses = cx.apply("neg", cx.apply("mul", picked, w, shape=(m,)), shape=(m,))
    denominator = None

    def reduced(v):
        nonlocal denominator
        if reduction == "none":
            return v if rest == (m,) else cx.apply("reshape", v, shape=(m,), to=rest)
        total = cx.apply("reduce", v, shape=(m,), op="sum", axes=(0,), keepdim=False)
        if reduction == "sum":
            return total
        if denominator is None:
            denominator = cx.apply("reduce", w, shape=(m,), op="sum", axes=(0,),
                                   keepdim=False)
        return cx.apply("div", total, denominator, shape=())
    loss = reduced(losses)
    eps = float(a.get("label_smoothing") or 0.0)
    if not eps:
        return loss
    logp = cx.apply("reshape", flat, shape=(m * classes,), to=(m, classes))
    if a.weight is not None:
        row = cx.apply("reshape", a.weight, shape=(classes,), to=(1, classes)) \
            if cx.is_ref(a.weight) else a.weight
        logp = cx.apply("mul", logp, cx.like(row, (m, classes)), shape=(m, classes))
    smooth = cx.apply("reduce", logp, shape=(m, classes), op="sum", axes=(1,), keepdim=False)
    smooth = cx.apply("neg", cx.apply("mul", smooth, kept, shape=(m,)), shape=(m,))
    s = cx.shape(loss)
    return cx.apply("add", cx.apply("scale", loss, 1.0 - eps, shape=s),
                    cx.apply("scale", reduced(smooth), eps / classes, shape=s), shape=s)


def _class_bound(node, arg):
    if len(node.args) < 2 or node.args[1] is not arg:
        return None
    shape = node.args[0].meta["val"].shape
    return shape[1] if len(shape) >= 2 else shape[0]


BOUNDS["aten.cross_entropy_loss.default"] = BOUNDS["aten.nll_loss_forward.default"] = \
    BOUNDS["aten.nll_loss2d_forward.default"] = _class_bound


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


@_entry("aten.embedding_bag.padding_idx", "aten._embedding_bag.default",
        "aten._embedding_bag_forward_only.default")
def _embedding_bag(cx, a):
    """EmbeddingBag (module docstring): bag b holds entries offsets[b] .. offsets[b + 1] - 1
    of the flat indices (the last to the end, or to the last offset with
    ``include_last_offset``)."""
    if cx.is_ref(a.offsets):
        cx.refuse("offsets computed by the model or given as an input are not translated "
                  "(give the bags as a 2-D input: one bag per row)")
    if a.scale_grad_by_freq:
        cx.refuse("scale_grad_by_freq is not translated")
    mode = _BAG_MODES[int(a.mode)]
    num, dim = cx.shape(a.weight)
    n = cx.shape(a.indices)[0]
    starts = [int(v) for v in a.offsets.tensor.reshape(-1).tolist()]
    ends = starts[1:] + ([] if a.include_last_offset else [n])
    starts = starts[:len(ends)]
    if any(not 0 <= lo <= hi <= n for lo, hi in zip(starts, ends)):
        cx.refuse(f"offsets {starts} do not cut {n} indices into bags")
    pad = a.get("padding_idx")
    pad = None if pad is None or not 0 <= int(pad) < num else int(pad)
    weights = a.per_sample_weights
    if weights is not None and mode != "sum":
        cx.refuse("per_sample_weights are taken in mode sum only (as torch)")
    if mode == "max" and pad is not None:
        cx.refuse("mode max with a padding_idx is not translated")
    ids = cx.indices(a.indices, num)
    rows = cx.apply("embedding", a.weight, ids, num=num, dim=dim, shape=(n,))
    keep = None
    if pad is not None:                                  # padding entries leave their bag
        keep = cx.apply("cast", cx.apply("ne", words(cx, ids), words(cx, pad, (n,)),
                                         shape=(n,), element=WORD), shape=(n,))
    scale = weights if keep is None else keep if weights is None else \
        cx.apply("mul", weights, keep, shape=(n,))
    if scale is not None:
        column = cx.apply("reshape", scale, shape=(n,), to=(n, 1))
        rows = cx.apply("mul", rows, cx.like(column, (n, dim)), shape=(n, dim))
    bags = len(starts)
    if mode == "max":
        parts = [cx.apply("reduce", cx.apply("slice", rows, shape=(n, dim), axis=0, start=lo,
                                             stop=hi, step=1, element="scalar"),
                          shape=(hi - lo, dim), op="max", axes=(0,), keepdim=True)
                 if hi > lo else cx.zeros((1, dim)) for lo, hi in zip(starts, ends)]
        out = parts[0] if bags == 1 else cx.apply("cat", *parts, shape=(bags, dim), axis=0,
                                                   sizes=[1] * bags, element="scalar")
    else:
        member = cx.bag_matrix(starts, ends, n)                # (bags, n) of 0 and 1
        out = cx.apply("matmul", member, rows, x_shape=(bags, n), y_shape=(n, dim))
        if mode == "mean":
            if keep is None:
                size = cx.bag_sizes(starts, ends)              # (bags, 1), at least 1
            else:
                counted = cx.apply("matmul", member, cx.apply("reshape", keep, shape=(n,),
                                                              to=(n, 1)),
                                   x_shape=(bags, n), y_shape=(n, 1))
                size = cx.apply("max", counted, cx.like(1.0, (bags, 1)), shape=(bags, 1))
            out = cx.apply("div", out, cx.like(size, (bags, dim)), shape=(bags, dim))
    missing = cx.missing("the offset2bag, bag_size and max_indices outputs of embedding_bag "
                         "are not translated")
    return out, missing, missing, missing


BOUNDS["aten.embedding_bag.padding_idx"] = BOUNDS["aten._embedding_bag.default"] = \
    BOUNDS["aten._embedding_bag_forward_only.default"] = lambda node, arg: (
        node.args[0].meta["val"].shape[0] if len(node.args) > 1 and node.args[1] is arg
        else None)

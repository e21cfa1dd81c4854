"""Loss kernels: mseLoss, huberLoss, crossEntropy (class indices) and distill, forward and
gradient, each the rule of routes/families/loss.py spelt with the device primitives in the
rule's order of primitives.

Per-term losses, then the reduction (loss.py ``_reduce``):

- pointwise losses (mseLoss, huberLoss): one thread per element computes its term,
  mse ``square(x - t)``; huber with d = x - t, a = |d|: ``0.5 * (d * d)`` where a < delta,
  else ``delta * (a - 0.5 * delta)`` (``_huber``: the selection is a branch, 0.5 the literal
  rounded once on the host);
- crossEntropy and distill: one thread per slice along the class axis (1, or 0 at rank 1;
  the host moves it last and flattens the rest in row-major order: data movement).  The
  log-softmax is routes' ``log_softmax``: m = the sequential maximum (exact, NaN
  propagating), z = x - m, s = the sequential sum of exp(z) (element 0 first), then z - log s.
  crossEntropy's term is -(z_t - log s) at the target class t; distill's is
  (T * T) * kl, kl the sequential sum over classes of where(p > 0, p * lp, 0) - p * lq with
  lp, lq the log-softmaxes of teacher / T and x / T and p = exp(lp) (``_distill_forward``).
  A thread recomputes x / T and z where a later pass needs them: each recomputation performs
  the same primitives on the same operands, so gives the same bits.

The reduction: ``none`` keeps the terms; ``sum`` is the sequential fold acc = term_0,
acc = acc + term_j over the terms in row-major order (xp.sum under the strict policy,
numerics/backend.py ``_sequential``), one thread; ``mean`` divides that sum by the count
rounded once into the format (``xp.constant(count)``, computed on the host).

Gradients (``_spread`` then the rule's backward): the cotangent of a reduced loss is
broadcast to every term (data movement) and, under mean, divided by the rounded count; then
mse 2g (x - t) as ``(g + g) * (x - t)`` (and ``(g + g) * (t - x)`` at the target), huber
``_huber_lin`` (delta * g beyond delta, -(delta * g) below -delta, d * g between: NaN d
falls through to d * g), crossEntropy ``where(hot, p - 1, p) * g`` with p = exp(lsm),
distill ``(T * (q * sum(p) - p)) * g`` with p, q the exponentials of the two log-softmaxes
(the sum sequential over the class axis).  The index target, the detached teacher and the
frozen delta and temperature receive no gradient (None).

Every composition is several roundings (``single=False``): the error of the sums is
data dependent (routes.apriori); the transcendental exp and log make the row losses'
agreement ``screened`` (kernels.contract).
"""

from __future__ import annotations

# numba.cuda at module level: the simulator swaps the module's global `cuda` for its
# per-thread fake inside kernels (a local import would not be swapped).
import numpy as np
from numba import cuda

from .base import DIRECTED, FEW32, Instance, Kernel, flat
from .contract import TRACED, Contract
from .errors import KernelError

MSE, HUBER = 0, 1


# ----- device code -----------------------------------------------------------------------------
def make_total(P: dict):
    """total(terms[n], out[1], mean, count, rp): the sequential sum of the terms, divided by
    ``count`` (the rounded count) when ``mean`` is 1.  One thread; n >= 1."""
    add, div = P["add"], P["divide"]

    @cuda.jit
    def total(terms, out, mean, count, rp):
        if cuda.grid(1) == 0:
            acc = terms[0]
            for j in range(1, terms.size):
                acc = add(acc, terms[j], rp)
            if mean == 1:
                acc = div(acc, count, rp)
            out[0] = acc
    return total


def make_pointwise(P: dict):
    """(terms, gradient) kernels of the pointwise losses, ``code`` MSE or HUBER:
    terms(x, t, out, code, delta, half, rp) and
    gradient(x, t, v, gx, gt, code, delta, mean, count, rp), v the cotangent per term
    (broadcast on the host), divided by ``count`` first when ``mean`` is 1."""
    dev = cuda.jit(device=True)
    add, sub, mul, div = P["add"], P["subtract"], P["multiply"], P["divide"]
    sq, ab, neg = P["square"], P["abs"], P["negative"]

    @dev
    def term(x, t, code, delta, half, rp):
        d = sub(x, t, rp)
        if code == MSE:
            return sq(d, rp)
        a = ab(d, rp)
        if a < delta:
            return mul(half, mul(d, d, rp), rp)
        return mul(delta, sub(a, mul(half, delta, rp), rp), rp)

    @dev
    def huber_lin(d, v, delta, rp):
        # Comparisons round nothing; -delta is exact (negative).
        if d > delta:
            return mul(delta, v, rp)
        if d < neg(delta, rp):
            return neg(mul(delta, v, rp), rp)
        return mul(d, v, rp)

    @cuda.jit
    def terms(x, t, out, code, delta, half, rp):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = term(x[i], t[i], code, delta, half, rp)

    @cuda.jit
    def gradient(x, t, v, gx, gt, code, delta, mean, count, rp):
        i = cuda.grid(1)
        if i < gx.size:
            g = v[i]
            if mean == 1:
                g = div(g, count, rp)
            if code == MSE:
                gg = add(g, g, rp)
                gx[i] = mul(gg, sub(x[i], t[i], rp), rp)
                gt[i] = mul(gg, sub(t[i], x[i], rp), rp)
            else:
                gx[i] = huber_lin(sub(x[i], t[i], rp), g, delta, rp)
                gt[i] = huber_lin(sub(t[i], x[i], rp), g, delta, rp)
    return terms, gradient


def make_rows(P: dict):
    """The row kernels (one thread per slice, rows of a C-contiguous [R, C] array):
    ce(x, t, out, rp), ce_grad(x, t, v, gx, mean, count, one, rp),
    distill(s, te, temp, out, rp), distill_grad(s, te, temp, v, gx, mean, count, rp)."""
    dev = cuda.jit(device=True)
    add, sub, mul, div = P["add"], P["subtract"], P["multiply"], P["divide"]
    mx, ex, lg, neg = P["maximum"], P["exp"], P["log"], P["negative"]

    @dev
    def lse_parts(a, r, temp, by, rp):
        """(m, log s) of routes' log_softmax of row r of a (of a / temp when by is 1)."""
        n = a.shape[1]
        m = a[r, 0] if by == 0 else div(a[r, 0], temp, rp)
        for j in range(1, n):
            v = a[r, j] if by == 0 else div(a[r, j], temp, rp)
            m = mx(m, v, rp)
        s = 0.0
        for j in range(n):
            v = a[r, j] if by == 0 else div(a[r, j], temp, rp)
            e = ex(sub(v, m, rp), rp)
            s = e if j == 0 else add(s, e, rp)
        return m, lg(s, rp)

    @dev
    def lsm(a, r, j, temp, by, m, ls, rp):
        """Element j of row r's log-softmax: (v - m) - log s."""
        v = a[r, j] if by == 0 else div(a[r, j], temp, rp)
        return sub(sub(v, m, rp), ls, rp)

    @cuda.jit
    def ce(x, t, out, rp):
        r = cuda.grid(1)
        if r < x.shape[0]:
            m, ls = lse_parts(x, r, 1.0, 0, rp)
            out[r] = neg(lsm(x, r, t[r], 1.0, 0, m, ls, rp), rp)

    @cuda.jit
    def ce_grad(x, t, v, gx, mean, count, one, rp):
        r = cuda.grid(1)
        if r < x.shape[0]:
            m, ls = lse_parts(x, r, 1.0, 0, rp)
            g = v[r]
            if mean == 1:
                g = div(g, count, rp)
            for j in range(x.shape[1]):
                p = ex(lsm(x, r, j, 1.0, 0, m, ls, rp), rp)
                if j == t[r]:
                    p = sub(p, one, rp)
                gx[r, j] = mul(p, g, rp)

    @cuda.jit
    def distill(s, te, temp, out, rp):
        r = cuda.grid(1)
        if r < s.shape[0]:
            mt, lst = lse_parts(te, r, temp, 1, rp)
            ms, lss = lse_parts(s, r, temp, 1, rp)
            kl = 0.0
            for j in range(s.shape[1]):
                lp = lsm(te, r, j, temp, 1, mt, lst, rp)
                lq = lsm(s, r, j, temp, 1, ms, lss, rp)
                p = ex(lp, rp)
                # PyTorch's xlogy(p, p): 0 where p is not > 0 (a -inf teacher logit).
                plogp = mul(p, lp, rp) if p > 0.0 else 0.0
                d = sub(plogp, mul(p, lq, rp), rp)
                kl = d if j == 0 else add(kl, d, rp)
            out[r] = mul(mul(temp, temp, rp), kl, rp)

    @cuda.jit
    def distill_grad(s, te, temp, v, gx, mean, count, rp):
        r = cuda.grid(1)
        if r < s.shape[0]:
            mt, lst = lse_parts(te, r, temp, 1, rp)
            ms, lss = lse_parts(s, r, temp, 1, rp)
            sp = 0.0
            for j in range(s.shape[1]):
                p = ex(lsm(te, r, j, temp, 1, mt, lst, rp), rp)
                sp = p if j == 0 else add(sp, p, rp)
            g = v[r]
            if mean == 1:
                g = div(g, count, rp)
            for j in range(s.shape[1]):
                p = ex(lsm(te, r, j, temp, 1, mt, lst, rp), rp)
                q = ex(lsm(s, r, j, temp, 1, ms, lss, rp), rp)
                d = sub(mul(q, sp, rp), p, rp)
                gx[r, j] = mul(mul(temp, d, rp), g, rp)
    return ce, ce_grad, distill, distill_grad


# ----- host launchers ----------------------------------------------------------------------------
def _reduced(ctx, terms, how, shape):
    """The terms (float64, any shape) reduced as the rule's ``_reduce``: the loss value."""
    if how == "none":
        return terms.reshape(shape)
    vec = flat(terms)
    out = np.empty(1)
    kern = ctx.compile("losses.total", lambda: make_total(ctx.P))
    mean = 1 if how == "mean" else 0
    ctx.launch(kern, 1, vec, out, mean, _count(ctx, vec.size), ctx.rp)
    return out.reshape(())


def _count(ctx, n):
    """xp.constant(n): the count rounded once into the format."""
    return float(ctx.round(float(n)))


def _spread(ctx, o, cotangents, n):
    """(per-term cotangents as a flat vector of n, mean flag, rounded count): the reduced
    loss's cotangent broadcast (data movement); the division under mean is the kernel's."""
    (v,) = ctx.cotangents(o, cotangents)
    v = np.ascontiguousarray(np.broadcast_to(v, (n,)) if v.ndim == 0 else v.reshape(n),
                             dtype=np.float64)
    mean = 1 if o.attrs.reduction == "mean" else 0
    return v, mean, _count(ctx, n)


def launch_pointwise(o, xs, cotangents, route, ctx):
    a = o.attrs
    code = MSE if o.name == "mseLoss" else HUBER
    x, t = flat(xs[0]), flat(xs[1])
    delta = float(xs[2]) if code == HUBER else 0.0
    half = float(ctx.round(0.5))                         # xp.full_like(d, "0.5")
    terms, grad = ctx.compile("losses.pointwise", lambda: make_pointwise(ctx.P))
    n = x.size
    if route == "forward":
        if n == 0:
            return (np.zeros(o.outputs[0].shape),)
        out = np.empty(n)
        ctx.launch(terms, n, x, t, out, code, delta, half, ctx.rp)
        return (_reduced(ctx, out, a.reduction, a.shape),)
    v, mean, count = _spread(ctx, o, cotangents, n)
    gx, gt = np.empty(n), np.empty(n)
    ctx.launch(grad, n, x, t, v, gx, gt, code, delta, mean, count, ctx.rp)
    return (gx.reshape(a.shape), gt.reshape(a.shape)) + (None,) * (len(xs) - 2)


def _class_axis(shape):
    return 1 if len(shape) >= 2 else 0


def _rows(a, axis):
    """(rows [R, C] C-contiguous float64, the moved shape): the class axis last."""
    moved = np.moveaxis(np.asarray(a, dtype=np.float64), axis, -1)
    return np.ascontiguousarray(moved.reshape(-1, moved.shape[-1])), moved.shape


def _unrows(g, moved_shape, axis):
    return np.moveaxis(g.reshape(moved_shape), -1, axis)


def _targets(o, t, classes):
    """The class indices as int64, one per slice (row-major over the other axes);
    KernelError for an index outside [0, classes)."""
    t = np.asarray(t).reshape(-1)
    if t.size and (t.min() < 0 or t.max() >= classes):
        raise KernelError(f"kernels: {o.name}: target indices must lie in [0, {classes}) "
                          f"(got {int(t.min())}..{int(t.max())})")
    return np.ascontiguousarray(t, dtype=np.int64)


def launch_cross_entropy(o, xs, cotangents, route, ctx):
    a = o.attrs
    ax = _class_axis(a.shape)
    x, moved = _rows(xs[0], ax)
    t = _targets(o, xs[1], a.shape[ax])
    rest = moved[:-1]
    rows = x.shape[0]
    ce, ce_grad, _, _ = ctx.compile("losses.rows", lambda: make_rows(ctx.P))
    if route == "forward":
        if rows == 0:
            return (np.zeros(o.outputs[0].shape),)
        out = np.empty(rows)
        ctx.launch(ce, rows, x, t, out, ctx.rp)
        return (_reduced(ctx, out, a.reduction, rest),)
    v, mean, count = _spread(ctx, o, cotangents, rows)
    gx = np.empty_like(x)
    ctx.launch(ce_grad, rows, x, t, v, gx, mean, count, float(ctx.round(1.0)), ctx.rp)
    return _unrows(gx, moved, ax), None


def launch_distill(o, xs, cotangents, route, ctx):
    a = o.attrs
    ax = _class_axis(a.shape)
    s, moved = _rows(xs[0], ax)
    te, _ = _rows(xs[1], ax)
    temp = float(xs[2])
    rows = s.shape[0]
    _, _, distill, distill_grad = ctx.compile("losses.rows", lambda: make_rows(ctx.P))
    if route == "forward":
        if rows == 0:
            return (np.zeros(o.outputs[0].shape),)
        out = np.empty(rows)
        ctx.launch(distill, rows, s, te, temp, out, ctx.rp)
        return (_reduced(ctx, out, a.reduction, moved[:-1]),)
    v, mean, count = _spread(ctx, o, cotangents, rows)
    gx = np.empty_like(s)
    ctx.launch(distill_grad, rows, s, te, temp, v, gx, mean, count, ctx.rp)
    return _unrows(gx, moved, ax), None, None


# Test instances (kernels.base.Instance): each loss at its defaults in every format and
# sample kind, the other reductions and ranks in fewer formats (FEW32: binary32 as well as the
# emulated flavour), the directed modes.
_DIRECTED = Instance({}, formats=FEW32, kinds=("ordinary",), routes=("forward",), modes=DIRECTED)
_POINTWISE = (Instance({}),
              Instance({"shape": (5,), "reduction": "sum"}, "sum-5", formats=FEW32,
                       kinds=("ordinary", "special")),
              Instance({"shape": (2, 3), "reduction": "none"}, "none-2x3", formats=FEW32,
                       kinds=("ordinary", "edges")))
_ROWS = (Instance({}),
         Instance({"shape": (4,), "reduction": "sum"}, "sum-4", formats=FEW32,
                  kinds=("ordinary", "edges")),
         Instance({"shape": (2, 3, 2), "reduction": "none"}, "none-2x3x2", formats=FEW32,
                  kinds=("ordinary", "special")),
         Instance({"shape": (3, 2), "reduction": "mean"}, "mean-3x2", formats=FEW32,
                  kinds=("edges",)),
         Instance({"shape": (3,), "reduction": "none"}, "none-3", formats=("bfloat16",),
                  kinds=("ordinary",)))


def _bad_target(o, rng, fmt):
    # A class index outside [0, C): the kernel refuses it.
    return np.zeros(o.inputs[0].shape), np.array([0, 3])


KERNELS = (
    Kernel("mseLoss", "loss",
           Contract(TRACED, TRACED, None),
           launch_pointwise, tests=_POINTWISE + (_DIRECTED,)),
    Kernel("huberLoss", "loss",
           Contract(TRACED, TRACED, None),
           launch_pointwise, tests=_POINTWISE),
    Kernel("crossEntropy", "loss",
           Contract(TRACED, TRACED, None),
           launch_cross_entropy,
           tests=_ROWS + (_DIRECTED, Instance({}, formats=("bfloat16",), kinds=("bad-target",),
                                              routes=("forward",), inputs=_bad_target,
                                              refuses="kernels: crossEntropy: target indices "
                                                      "must lie in [0, 3)"))),
    Kernel("distill", "loss",
           Contract(TRACED, TRACED, None),
           launch_distill, tests=_ROWS),
)

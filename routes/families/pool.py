"""Pooling (spec: "Convolution and pooling"): pool (max and average) and smoothMaxPool over
the trailing spatial axes of (batch, channels, spatial...) operands, PyTorch's layouts and
output-size formula (ceil mode included).  Windows are conv_pool.py's explicit gathers; an
average is a backend sum over the window (the accumulation policy applies) divided by the
window's count; max pooling splits a tie's gradient equally.  The family is conv_pool."""

from __future__ import annotations

import numpy as np

from .. import attributes as A
from ..certs import convention
from ..ports import frozen, value
from ..registry import define
from ..rules import saving, shown
from ..windows import grid, inverse, windows
from .conv_pool import TESTS, pooled_axes, size_of, window_problem, zeros_last
from .reduction import constant_draw, mp_array, pick_sampler, uniform_sampler


def pool_extents(a):
    """PyTorch's output extent per pooled axis: floor or ceil((L + 2p - d(k-1) - 1)/s) + 1,
    less one in ceil mode when the last window would start in the right padding."""
    dims = a.shape[len(a.shape) - len(a.kernel):]
    out = []
    for n, k, s, p, d in zip(dims, a.kernel, a.stride, a.padding, a.dilation):
        span = n + 2 * p - d * (k - 1) - 1
        o = (-(-span // s) if a.ceil_mode else span // s) + 1
        if a.ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        out.append(o)
    return tuple(dims), tuple(out)


def _pool_geometry(a):
    dims, out = pool_extents(a)
    idx, valid = windows(dims, out, a.kernel, a.stride, a.dilation, a.padding)
    return dims, out, idx, valid


def _pool_check(a):
    problem = window_problem(a, len(a.shape), ("stride", "padding", "dilation"))
    if problem:
        return problem
    if any(2 * p > k for p, k in zip(a.padding, a.kernel)):
        return (f"padding must be at most half the kernel on every pooled axis (got padding "
                f"{list(a.padding)}, kernel {list(a.kernel)})")
    if a.mode == "average" and any(d != 1 for d in a.dilation):
        return f"average pooling takes no dilation (dilation must be 1, got {list(a.dilation)})"
    # PyTorch's rule (pooling_output_shape, pool2d_shape_check): every output extent at
    # least 1.  In floor mode that is the dilated kernel fitting the padded input; in ceil
    # mode the last window may run past it (a 2x2 window with stride 2 on a 1x1 input: one
    # window holding the one entry, as ResNet-D's ceil-mode average-pool shortcut meets it).
    if any(o < 1 for o in pool_extents(a)[1]):
        return (f"the dilated kernel must fit the padded input (got shape {list(a.shape)}, "
                f"kernel {list(a.kernel)}" + (", ceil_mode: no window starts inside it)"
                                              if a.ceil_mode else ")"))
    _, out, idx, valid = _pool_geometry(a)
    if size_of(out) and size_of(a.kernel) and not valid.any(axis=1).all():
        return "every window must hold an input entry (a window lies in the padding only)"
    return None


def _pool_out(a):
    return a.shape[:len(a.shape) - len(a.kernel)] + pool_extents(a)[1]


def _flat(x, a):
    lead = a.shape[:len(a.shape) - len(a.kernel)]
    return np.reshape(x, (size_of(lead), size_of(a.shape[len(lead):])))


def pool_divisors(a):
    """The average pool's divisor per window (Python ints): the window clipped to the padded
    input (count_include_pad) or to the input."""
    dims, out = pool_extents(a)
    res = []
    for o in grid(out):
        total = 1
        for oa, n, k, s, p in zip(o, dims, a.kernel, a.stride, a.padding):
            start = oa * s - p
            end = min(start + k, n + p)
            if not a.count_include_pad:
                start, end = max(start, 0), min(end, n)
            total *= end - start
        res.append(total)
    return res


def _divisor_array(xp, a):
    """The divisors as backend numbers, one per window (each an integer rounded once)."""
    divs = pool_divisors(a)
    return np.concatenate([xp.constant(d, (1,)) for d in divs]) if divs else xp.constant(0, (0,))


def scatter_sum(xp, c, idx, valid, size):
    """out[b, p] = sum of c[b, o, k] over the (o, k) with idx[o, k] = p and valid: the
    adjoint of a window gather, one backend sum per position (exact zeros padding)."""
    b, o, k = c.shape
    if b * size == 0:
        return xp.constant(0, (b, size))
    io, ik = inverse(idx, valid, size)
    flat = io * k + ik                   # the sentinel (o, k) lands on o * k + k: past the end
    slots = o * k + k + 1
    padded = np.concatenate([np.reshape(c, (b, o * k)), xp.constant(0, (b, slots - o * k))],
                            axis=-1)
    return xp.sum(padded[:, flat], axis=-1)


def _max_parts(xp, a, x, y):
    """The windows of x, where each attains its maximum (NaN entries for a NaN maximum) and
    the number of such entries (a backend sum of ones: exact for these window sizes)."""
    _, _, idx, valid = _pool_geometry(a)
    patches = _flat(x, a)[:, idx]
    yb = np.reshape(y, patches.shape[:2])[..., None]
    mask = (xp.equal(patches, yb) | (xp.isnan(patches) & xp.isnan(yb))) & valid
    ones = xp.where(mask, xp.ones_like(patches), xp.zeros_like(patches))
    return patches, mask, xp.sum(ones, axis=-1), idx, valid


def _pool_forward(xp, a, x):
    out = _pool_out(a)
    _, ext, idx, valid = _pool_geometry(a)
    xf = _flat(x, a)
    if xf.shape[0] * size_of(ext) == 0:
        return xp.constant(0, out)
    if a.mode == "max":
        # Outside entries repeat the window's first inside one: max ignores repeats.
        return np.reshape(xp.max(xf[:, idx], axis=-1), out)
    patches = zeros_last(xp, xf)[:, idx + (~valid) * (xf.shape[1] - idx)]
    return np.reshape(xp.divide(xp.sum(patches, axis=-1), _divisor_array(xp, a)), out)


def _pool_linear(xp, a, x, y, v, transpose):
    if size_of(_pool_out(a)) == 0:
        return xp.zeros_like(x) if transpose else xp.constant(0, _pool_out(a))
    if a.mode == "average":
        if not transpose:
            return _pool_forward(xp, a, v)
        _, _, idx, valid = _pool_geometry(a)
        share = xp.divide(np.reshape(v, (-1, idx.shape[0])), _divisor_array(xp, a))
        c = xp.where(valid, share[..., None], xp.constant(0, share.shape + (idx.shape[1],)))
        return np.reshape(scatter_sum(xp, c, idx, valid, _flat(x, a).shape[1]), a.shape)
    patches, mask, count, idx, valid = _max_parts(xp, a, x, y)
    zero = xp.zeros_like(patches)
    if not transpose:
        tp = _flat(v, a)[:, idx]
        return np.reshape(xp.divide(xp.sum(xp.where(mask, tp, zero), axis=-1), count),
                          _pool_out(a))
    share = xp.divide(np.reshape(v, count.shape), count)[..., None]
    c = xp.where(mask, share, zero)
    return np.reshape(scatter_sum(xp, c, idx, valid, _flat(x, a).shape[1]), a.shape)


def _pool_oracle(ctx, a, x):
    dims, out = pool_extents(a)
    xf, divs, res = _flat(x, a), pool_divisors(a), []
    for row in xf:
        xr = np.reshape(row, dims)
        for j, o in enumerate(grid(out)):
            vals = []
            for k in np.ndindex(*a.kernel):
                q = tuple(oa * s + ka * d - p for oa, ka, s, d, p in
                          zip(o, k, a.stride, a.dilation, a.padding))
                if all(0 <= qa < n for qa, n in zip(q, dims)):
                    vals.append(xr[q])
            if a.mode == "average":
                res.append(ctx.fsum(vals) / divs[j])
            elif any(ctx.isnan(v) for v in vals):
                res.append(ctx.nan)
            else:
                res.append(max(vals))
    return (mp_array(res, _pool_out(a)),)


def _pool_kinks(op, x):
    """Ordinary max-pool samples keep the maximum of every window unique."""
    a = op.attrs
    if a.mode != "max" or x.size == 0 or size_of(_pool_out(a)) == 0:
        return False
    _, _, idx, valid = _pool_geometry(a)
    patches = np.where(valid, _flat(x, a)[:, idx], -np.inf)
    top = np.sort(patches, axis=-1)
    return bool(top.shape[-1] > 1 and np.any(top[..., -1] - top[..., -2] < 2.0 ** -20))


define(
    "pool", "conv_pool",
    attributes=(A.shape(default=(1, 2, 5), max_rank=4, max_extent=5,
                        doc="the operand; the trailing len(kernel) axes are pooled"),
                A.choice("mode", ("max", "average"), doc="max or average pooling"),
                A.nats("kernel", default=(2,), max_len=2, max_value=3,
                       doc="window extent per pooled axis"),
                A.nats("stride", default=(2,), max_len=2, max_value=3, doc="per pooled axis"),
                A.nats("padding", default=(0,), max_len=2, max_value=2,
                       doc="implicit padding at both ends (at most half the kernel)"),
                A.nats("dilation", default=(1,), max_len=2, max_value=2,
                       doc="spacing of the window taps (max pooling only)"),
                A.flag("ceil_mode", doc="ceil instead of floor in the output extent"),
                A.flag("count_include_pad", default=True,
                       doc="average: the divisor counts padding entries")),
    ports=lambda a: ({"x": value(a.shape)}, {"y": value(_pool_out(a))}),
    forward=_pool_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _pool_linear(xp, a, xs[0], ys[0], gs[0], True),),
    jvp=lambda xp, a, xs, ys, ts: _pool_linear(xp, a, xs[0], ys[0], ts[0], False),
    check=_pool_check,
    proofs=pooled_axes,
    samples={"ordinary": uniform_sampler(-2, 2, kinks=_pool_kinks),
             "edges": pick_sampler((-1.0, 0.0, 1.0)),
             "special": uniform_sampler(-2, 2, share=0.3)},
    oracle=_pool_oracle,
    examples={"": {}, "average": {"mode": "average"},
              "ceil-pad": {"shape": (1, 1, 5), "kernel": (2,), "stride": (2,),
                           "padding": (1,), "ceil_mode": True},
              "average-ceil": {"mode": "average", "shape": (1, 1, 6), "kernel": (3,),
                               "stride": (2,), "padding": (1,), "ceil_mode": True,
                               "count_include_pad": False},
              "2d-dilated": {"shape": (1, 4, 4), "kernel": (2, 2), "stride": (1, 2),
                             "padding": (1, 0), "dilation": (2, 1)}},
    notes=("pool over the trailing len(kernel) axes (PyTorch's max_pool / avg_pool): output "
           "extent floor((L + 2p - d(k-1) - 1)/s) + 1, with ceil in ceil_mode, less one when "
           "the last window would start in the right padding.  Padding is implicit (never "
           "a value): max ignores it; average divides by the window clipped to the padded "
           "input (count_include_pad) or to the input.",
           "max propagates NaN (IEEE maximum).  Gradient of max: the cotangent is split "
           "equally among the entries of the window that attain the maximum (the spec's tie "
           "rule; PyTorch gives it all to one index); a NaN maximum shares it among the NaN "
           "entries.",
           "average: the window's sum in the policy order, one division by the integer "
           "divisor; no dilation.",
           "The window check: one entry per pooled axis in kernel, stride, padding and "
           "dilation, positive kernel extents, strides and dilations, padding at most half "
           "the kernel, every window holding an input entry."),
    bad_attributes=(({"kernel": (0,)}, "pool: kernel must be > 0 on every pooled axis (got [0])"),
                    ({"stride": (0,)}, "pool: stride must be > 0 on every pooled axis"),
                    ({"stride": (1, 1)}, "pool: stride must have one entry per pooled axis"),
                    ({"kernel": ()}, "pool: kernel must have one entry per pooled axis"),
                    ({"kernel": (2, 2, 2, 2), "stride": (1,) * 4, "padding": (0,) * 4,
                      "dilation": (1,) * 4}, "pool: kernel has 4 entries, more than"),
                    ({"padding": (2,)}, "pool: padding must be at most half the kernel"),
                    ({"mode": "average", "dilation": (2,)},
                     "pool: average pooling takes no dilation"),
                    ({"shape": (1, 1), "kernel": (3,), "padding": (0,)},
                     "pool: the dilated kernel must fit the padded input"),
                    ({"shape": (1, 1, 1), "kernel": (2,), "stride": (1,), "padding": (1,),
                      "dilation": (2,)}, "pool: every window must hold an input entry")),
    certificates=("prepared",
                  convention(f"{TESTS}::test_max_pool_splits_ties_equally",
                             "a window maximum attained by k entries gives each 1/k of the "
                             "cotangent; a NaN maximum shares it among the NaN entries")),
)


# ----- smoothMaxPool ---------------------------------------------------------------------------
def _smooth_check(a):
    problem = window_problem(a, len(a.shape), ("stride",))
    if problem:
        return problem
    dims = a.shape[len(a.shape) - len(a.kernel):]
    if any(n < k for n, k in zip(dims, a.kernel)):
        return f"the kernel must fit the input (got shape {list(a.shape)}, kernel {list(a.kernel)})"
    return None


def _smooth_geometry(a):
    dims = a.shape[len(a.shape) - len(a.kernel):]
    out = tuple((n - k) // s + 1 for n, k, s in zip(dims, a.kernel, a.stride))
    idx, valid = windows(dims, out, a.kernel, a.stride, (1,) * len(dims), (0,) * len(dims))
    return out, idx, valid


def _smooth_out(a):
    return a.shape[:len(a.shape) - len(a.kernel)] + _smooth_geometry(a)[0]


def _smooth_forward(xp, a, x, beta):
    """(M + log sum exp(beta x - M)) / beta per window, M the window's max of beta x (no
    overflow); the weights exp(beta x - M) / sum are the derivative, kept for the rules."""
    _, idx, _ = _smooth_geometry(a)
    xf = _flat(x, a)
    if xf.shape[0] * idx.shape[0] == 0:
        return saving(xp.constant(0, _smooth_out(a)), weights=None)
    z = xp.multiply(xf[:, idx], beta)
    m = xp.max(z, axis=-1)
    e = xp.exp(xp.subtract(z, m[..., None]))
    s = xp.sum(e, axis=-1)
    y = xp.divide(xp.add(m, xp.log(s)), beta)
    return saving(np.reshape(y, _smooth_out(a)), weights=xp.divide(e, s[..., None]))


def _smooth_linear(xp, a, x, ys, v, transpose):
    weights = ys.saved["weights"]
    if weights is None:
        return xp.zeros_like(x) if transpose else xp.constant(0, _smooth_out(a))
    _, idx, valid = _smooth_geometry(a)
    if transpose:
        c = xp.multiply(weights, np.reshape(v, weights.shape[:2])[..., None])
        return np.reshape(scatter_sum(xp, c, idx, valid, _flat(x, a).shape[1]), a.shape)
    return np.reshape(xp.sum(xp.multiply(weights, _flat(v, a)[:, idx]), axis=-1),
                      _smooth_out(a))


def _smooth_validate(xp, a, x, beta):
    if not xp.isfinite(beta) or xp.equal(beta, xp.zeros_like(beta)):
        return f"beta must be finite and nonzero (got {shown(xp, beta)})"
    return None


def _smooth_oracle(ctx, a, x, beta):
    b = beta[()]
    _, idx, _ = _smooth_geometry(a)
    res = [ctx.log(ctx.fsum(ctx.exp(b * v) for v in row[idx[o]])) / b
           for row in _flat(x, a) for o in range(idx.shape[0])]
    return (mp_array(res, _smooth_out(a)),)


def _beta_draw(rng, fmt, port):
    return rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 4.0)


define(
    "smoothMaxPool", "conv_pool",
    attributes=(A.shape(default=(1, 2, 4), max_rank=4, max_extent=5,
                        doc="the operand; the trailing len(kernel) axes are pooled"),
                A.nats("kernel", default=(2,), max_len=2, max_value=3,
                       doc="window extent per pooled axis"),
                A.nats("stride", default=(1,), max_len=2, max_value=3, doc="per pooled axis")),
    ports=lambda a: ({"x": value(a.shape), "beta": frozen()}, {"y": value(_smooth_out(a))}),
    forward=_smooth_forward,
    backward=lambda xp, a, xs, ys, gs, needs: (
        _smooth_linear(xp, a, xs[0], ys, gs[0], True), None),
    jvp=lambda xp, a, xs, ys, ts: _smooth_linear(xp, a, xs[0], ys, ts[0], False),
    check=_smooth_check,
    proofs=pooled_axes,
    validate=_smooth_validate,
    samples={"ordinary": uniform_sampler(-2, 2, fixed={"beta": _beta_draw}),
             "edges": uniform_sampler(-2, 2, fixed={"beta": constant_draw(30.0, 60.0)})},
    oracle=_smooth_oracle,
    examples={"": {}, "2d": {"shape": (1, 3, 3), "kernel": (2, 2), "stride": (1, 1)}},
    notes=("smoothMaxPool(x, beta) = (1/beta) log sum over the window of exp(beta x): the "
           "log-sum-exp smooth maximum (a smooth minimum for beta < 0), windows without "
           "padding or dilation over the trailing len(kernel) axes; beta is a frozen scalar.",
           "Computed as (M + log sum exp(beta x - M)) / beta with M the window's maximum of "
           "beta x, so exp never overflows; the sum in the policy order.",
           "validate rejects a zero or nonfinite beta (the spec's rule).",
           "Gradient: the softmax weights of beta x in each window times the cotangent, "
           "summed over the windows that read an entry."),
    bad_attributes=(({"kernel": (0,)},
                     "smoothMaxPool: kernel must be > 0 on every pooled axis (got [0])"),
                    ({"stride": (1, 1)},
                     "smoothMaxPool: stride must have one entry per pooled axis"),
                    ({"kernel": (5,)}, "smoothMaxPool: the kernel must fit the input")),
    bad_inputs=(({}, (np.zeros((1, 2, 4)), 0.0),
                 "smoothMaxPool: beta must be finite and nonzero (got 0)"),
                ({}, (np.zeros((1, 2, 4)), np.inf),
                 "smoothMaxPool: beta must be finite and nonzero (got inf)"),
                ({}, (np.zeros((1, 2, 4)), np.nan),
                 "smoothMaxPool: beta must be finite and nonzero (got nan)")),
    certificates=("prepared",),
)

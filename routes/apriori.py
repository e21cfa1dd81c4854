"""A priori roundoff bounds: formulas of the inputs, the format, the mode and the policy.

``formula(o, xs, fmt, mode, policy) -> (bound, magnitude) | None``: an upper bound on
|computed - exact| for every element of the forward output of operator instance ``o`` on
inputs ``xs`` (float64 values of ``fmt``) under numerics.emulated(fmt, mode, policy), and an
upper bound of every intermediate value's magnitude (the model has no overflow: where
magnitude + bound reaches the format's largest value the bound is infinite, not claimed);
None where the formula does not apply (a policy with a compute format other than storage, an operation that is not the
one analysed).  Registered as ``roundoff`` certificates (routes.certs.apriori) next to each
operator; the coverage run checks every sample against them (violations).

The standard model and its constants are numerics.bounds' (Higham 2002, sec. 2.1-2.2;
gamma_k = k u / (1 - k u)):

- sum of n values (reduce sum): gamma_k(u_A) sum|x_i| with k the depth of the policy's order,
  plus the final rounding into storage under a wider accumulation format (bounds.sum_bound).
- max / min: exact selections, bound 0.
- mean = fl(s^ / n) with s^ the computed sum and n rounded into the format (exact when n is
  a value of the format, else no formula): |fl(s^/n) - s/n| <= |s^ - s|/n + u |s^/n| + eta
  <= E_s/n + u (|s| + E_s)/n + eta, E_s the sum's bound.
- |s|, the exact sum's magnitude in the final roundings' terms, is bounded by math.fsum
  (correctly rounded) one binary64 ulp up, not by sum|x|: cancellation keeps it small.
- matmul: per output entry a dot product of length k in the policy's order
  (bounds.matmul_bound: gamma_(k+1)(u_A) sum|x_i y_i| plus the products' underflow n eta_A
  (1 + gamma_k), plus the final rounding into storage).
- under the accelerator policies (numerics.policy: promote, fixed_point) the dot products'
  bounds are bounds.promote_dot_bound and bounds.fixed_point_dot_bound.
- linear = fl(x W^T + b): the dot products' bound E, then one addition of two format values
  (exact below the normal range, so no eta): E + u (|x||W|^T + |b| + E).

Every float64 step of a formula rounds up (bounds' helpers; the last lines add one binary64
ulp), so a formula's value is itself an upper bound of the real one.
"""

from __future__ import annotations

import math

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.numerics import bounds, tensor_cores

FORMULAS = {}


def _formula(name):
    def put(fn):
        FORMULAS[name] = fn
        return fn
    return put


def _plain(policy, fmt):
    """(order, accumulate, fma) of a policy whose primitives round straight into storage;
    None when a compute format other than storage adds a rounding the formulas omit."""
    if policy.compute != fmt:
        return None
    acc = None if policy.accumulate == fmt else policy.accumulate
    return policy.order, acc, policy.fma


def _up(x) -> np.ndarray:
    """x rounded up by one binary64 ulp (a float64 sum of a few terms above)."""
    return np.nextafter(np.asarray(x, dtype=np.float64), np.inf)


def _moved(x, axes):
    """x with ``axes`` last, flattened into one: (kept..., n)."""
    keep = [ax for ax in range(x.ndim) if ax not in axes]
    m = np.transpose(x, keep + list(axes))
    return m.reshape(m.shape[:len(keep)] + (-1,))


def _sum_parts(o, x, fmt, mode, policy):
    """(bound of the sum over o's axes, upper bound of sum|x|, n), shaped like the output."""
    plain = _plain(policy, fmt)
    if plain is None:
        return None
    order, acc, _ = plain
    flat = _moved(np.asarray(x, dtype=np.float64), tuple(o.attrs["axes"]))
    n = flat.shape[-1]
    if n == 0:
        return None
    abs_sum = bounds.abs_sum_upper(flat, axis=-1)
    # |exact sum| for the final rounding's term: math.fsum is the correctly rounded sum, so
    # one binary64 ulp up bounds it (much tighter than sum|x| under cancellation).
    total = np.apply_along_axis(math.fsum, -1, flat) if flat.size else np.zeros(flat.shape[:-1])
    result = _up(np.abs(total))
    result = np.where(np.isfinite(result), result, np.inf)
    e = bounds.sum_bound(abs_sum, n, fmt, mode, order, acc, abs_result=result)
    shape = o.outputs[0].shape
    return e.reshape(shape), abs_sum.reshape(shape), n, result.reshape(shape)


@_formula("reduce")
def reduce_bound(o, xs, fmt, mode, policy):
    op = o.attrs["op"]
    if op in ("max", "min"):                           # one of the inputs, exactly
        shape = o.outputs[0].shape
        mag = np.max(np.abs(_moved(np.asarray(xs[0], dtype=np.float64),
                                   tuple(o.attrs["axes"]))), axis=-1)
        return np.zeros(shape), mag.reshape(shape)     # inf or NaN inputs: no claim
    if op != "sum":
        return None
    parts = _sum_parts(o, xs[0], fmt, mode, policy)
    return None if parts is None else parts[:2]


@_formula("mean")
def mean_bound(o, xs, fmt, mode, policy):
    parts = _sum_parts(o, xs[0], fmt, mode, policy)
    if parts is None:
        return None
    e_s, abs_sum, n, result = parts
    f = formats.get(fmt)
    if float(formats.round_to(np.array([float(n)]), f)[0]) != n:
        return None                                    # n itself is rounded: not analysed
    u = float(bounds.unit_roundoff(f, mode))
    eta = float(bounds.eta(f, mode))
    return _up(_up(_up(e_s / n) * (1 + u)) + _up(u * result / n) + eta), abs_sum


def _dot_bound(abs_x, abs_y, fmt, mode, policy):
    plain = _plain(policy, fmt)
    if plain is None:
        return None
    order, acc, fma = plain
    k = abs_x.shape[-1]
    if policy.tensor_core is not None:           # a GPU's block FMAs
        return _tensor_core_bound(abs_x, abs_y, fmt, mode, policy)
    if policy.inner is not None:                 # two-level accumulation
        return bounds.promote_dot_bound(bounds.abs_matmul_upper(abs_x, abs_y), k, fmt, mode,
                                        policy.inner, policy.promote, policy.accumulate)
    if policy.fixed_point is not None:           # fixed-point alignment per block
        blocks = np.stack([bounds.abs_matmul_upper(abs_x[..., i:i + policy.block],
                                                   abs_y[..., i:i + policy.block, :])
                           for i in range(0, k, policy.block)], axis=-1)
        return bounds.fixed_point_dot_bound(blocks, policy.block, fmt, mode,
                                            policy.fixed_point, policy.accumulate)
    return bounds.matmul_bound(abs_x, abs_y, fmt, mode, order, fma, acc)


def _tensor_core_bound(abs_x, abs_y, fmt, mode, policy):
    """numerics.bounds.tensor_core_dot_bound over the groups along k; None where the unit
    reads the operands in another format (binary32 as tf32: the read itself cuts) or takes
    none of them."""
    core = tensor_cores.tensor_core(policy.tensor_core)
    try:
        fin = tensor_cores.input_format(core, fmt)
    except ValueError:
        return None
    if fin != formats.get(fmt).label:
        return None
    path, least = core.paths[fin], float(formats.get(fin).min_normal)
    # a nonzero operand is aligned at least at its format's least normal exponent
    x, y = (np.where(v != 0, np.maximum(v, least), 0.0) for v in (abs_x, abs_y))
    g = path.group
    blocks = np.stack([bounds.abs_matmul_upper(x[..., i:i + g], y[..., i:i + g, :])
                       for i in range(0, x.shape[-1], g)], axis=-1)
    bits = 23 + min(path.extra, 0) if path.extra is not None else 23
    return bounds.tensor_core_dot_bound(blocks, g, fmt, mode, path.extra, path.rounding, bits)


@_formula("matmul")
def matmul_bound(o, xs, fmt, mode, policy):
    x, y = (np.abs(np.asarray(v, dtype=np.float64)) for v in xs)
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] == 0:
        return None
    e = _dot_bound(x, y, fmt, mode, policy)
    if e is None:
        return None
    shape = o.outputs[0].shape
    return e.reshape(shape), bounds.abs_matmul_upper(x, y).reshape(shape)


@_formula("linear")
def linear_bound(o, xs, fmt, mode, policy):
    w, b, x = (np.abs(np.asarray(v, dtype=np.float64)) for v in xs)
    a = o.attrs
    if a["in_features"] == 0:
        return None
    xm = x.reshape(-1, a["in_features"])
    e = _dot_bound(xm, w.T, fmt, mode, policy)
    if e is None:
        return None
    u = float(bounds.unit_roundoff(formats.get(fmt), mode))
    mag = bounds.abs_matmul_upper(xm, w.T) + b.reshape(1, -1)
    out = _up(_up(e * (1 + u)) + _up(u * _up(mag)))
    shape = o.outputs[0].shape
    return out.reshape(shape), mag.reshape(shape)


def bound(o, xs, fmt, mode, policy):
    """The a priori bound of ``o``'s forward output on ``xs`` (see the module doc), or None.
    Non-finite inputs give an infinite bound for the elements they reach (the model does not
    cover overflow, inf or NaN)."""
    fn = FORMULAS.get(o.name)
    if fn is None:
        return None
    f = formats.get(fmt)
    with np.errstate(all="ignore"):
        try:
            got = fn(o, xs, f, mode, policy)
        except ValueError:
            return None          # gamma_k undefined: k u >= 1 (too many roundings for u)
        if got is None:
            return None
        out, mag = (np.asarray(v, dtype=np.float64) for v in got)
        fits = np.isfinite(out) & (mag + out < float(f.max_finite))
    return np.where(fits, out, math.inf)

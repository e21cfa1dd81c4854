"""The aten table's resampling entries (the conventions of routes.frontends.aten): adaptive
pooling to any output size and linear interpolation (``upsample_linear1d``,
``upsample_bilinear2d``, ``upsample_trilinear3d``).  torch is never imported here; ``cx`` is
the capture (routes.frontends.torch).

- Adaptive pooling uses PyTorch's windows: output cell i along an axis of n inputs and m
  outputs pools inputs floor(i n / m) to ceil((i + 1) n / m) - 1.  Where m divides n every
  window has n / m inputs: one ``pool``.  Otherwise the windows differ in size (and may
  overlap): one ``pool`` per output cell over its slice (an average is its window's sum
  divided by its count, as PyTorch's kernel computes it), the cells joined by ``cat``,
  innermost axis first.  The indices output of adaptive max pooling is not translated.
- Linear interpolation is separable: along each resampled axis the output is a fixed
  linear map of the input, y = A x with A (m, n) holding at most two nonzero weights per
  row.  A is read from PyTorch itself (``cx.interpolation``: its 1-d kernel run in float64
  on the identity, so the source positions, clamping and align_corners are PyTorch's), and
  each axis is a ``contract`` of the input with the constant A, the last axis first (the
  order of PyTorch's kernel, which blends along the width and then the height).  The
  weights are the real function's (computed in binary64, as torch's float64 run computes
  them; a binary32 model's kernel computes them in binary32); zero weights add exact
  zeros, so under any accumulation the sum is that of the two weighted neighbours.
"""

from __future__ import annotations

from typing import Callable

from . import registrar
from .aten_tensors import sliced

TABLE: dict[str, Callable] = {}
_entry = registrar(TABLE, "aten table")


def _adaptive(cx, x, out, mode):
    """Adaptive pooling of ``x`` to the trailing extents ``out`` by windows (above)."""
    shape, n = cx.shape(x), len(out)
    sizes = shape[-n:]
    if any(m <= 0 for m in out):
        cx.refuse(f"output_size {list(out)} must be positive")

    def pool(t, kernel):
        extra = {"count_include_pad": True} if mode == "average" else {}
        return cx.apply("pool", t, shape=cx.shape(t), mode=mode, kernel=kernel,
                        stride=kernel, padding=(0,) * n, dilation=(1,) * n, ceil_mode=False,
                        **extra)
    if all(s % m == 0 for s, m in zip(sizes, out)):
        return pool(x, tuple(s // m for s, m in zip(sizes, out)))
    windows = [[(i * s // m, -(-(i + 1) * s // m)) for i in range(m)]
               for s, m in zip(sizes, out)]
    lead = len(shape) - n

    def cells(t, d):
        """``t`` (already sliced along the axes before ``d``) pooled along axes d.. of the
        window, joined along axis d."""
        if d == n:
            return pool(t, tuple(cx.shape(t)[lead:]))
        parts = [cells(sliced(cx, t, lead + d, lo, hi), d + 1) for lo, hi in windows[d]]
        if len(parts) == 1:
            return parts[0]
        joined = list(cx.shape(parts[0]))
        joined[lead + d] = len(parts)
        return cx.apply("cat", *parts, shape=tuple(joined), axis=lead + d,
                        sizes=[1] * len(parts), element="scalar")
    return cells(x, 0)


@_entry("aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default")
def _adaptive_avg_pool(cx, a):
    cx.scalar_result()
    return _adaptive(cx, a.self, tuple(a.output_size), "average")


@_entry("aten.adaptive_max_pool1d.default", "aten.adaptive_max_pool2d.default",
        "aten.adaptive_max_pool3d.default")
def _adaptive_max_pool(cx, a):
    x, out = a.self, tuple(a.output_size)
    if len(out) == 1:                      # 1-d: pooled as 2-d over a unit height
        s = cx.shape(x)
        wide = cx.apply("reshape", x, shape=s, to=s[:-1] + (1, s[-1]))
        y = _adaptive(cx, wide, (1,) + out, "max")
        y = cx.apply("reshape", y, shape=cx.shape(y), to=s[:-1] + out)
    else:
        y = _adaptive(cx, x, out, "max")
    return y, cx.missing("the indices of adaptive max pooling are not translated")


def _interpolated(cx, a, n):
    """Linear interpolation of the last ``n`` axes (above)."""
    cx.scalar_result()
    x = a.input if "input" in a else a.self
    shape = cx.shape(x)
    out = cx.out_shape[-n:]
    scales = list(a.get("scale_factors") or [])
    if not scales:                                   # the .default forms name them
        keys = ("scales",) if n == 1 else ("scales_d", "scales_h", "scales_w")[3 - n:]
        scales = [a.get(k) for k in keys]
    lead = len(shape) - n
    for d in reversed(range(n)):                     # the last axis first, as PyTorch
        axis, size = lead + d, out[d]
        weights = cx.interpolation(shape[axis], size, bool(a.align_corners),
                                   scales[d])
        now = cx.shape(x)
        y = cx.apply("contract", x, weights, x_shape=now, y_shape=(size, now[axis]),
                     x_axes=(axis,), y_axes=(1,))
        moved = now[:axis] + now[axis + 1:] + (size,)
        if axis != len(now) - 1:                     # the new axis back in its place
            perm = tuple(range(axis)) + (len(now) - 1,) + tuple(range(axis, len(now) - 1))
            y = cx.apply("permute", y, shape=moved, perm=perm, element="scalar")
        x = y
    return x


for _n, _name in ((1, "linear1d"), (2, "bilinear2d"), (3, "trilinear3d")):
    _entry(f"aten.upsample_{_name}.vec", f"aten.upsample_{_name}.default")(
        (lambda n: lambda cx, a: _interpolated(cx, a, n))(_n))

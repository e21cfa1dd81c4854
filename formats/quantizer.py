"""``quantize``: a tensor into a scaled format (formats/scaled.py), exactly or fast.

Two paths, bit for bit the same:

- the exact path (``path="exact"``) reads every element exactly (formats.read_real: ints,
  Fractions, gmpy2 and mpmath numbers, floats, decimal strings) and follows the
  definitions with rationals and ``formats.round_exact``;
- the fast path (``path="fast"``, the default for float64/float32 arrays) runs compiled
  loops (formats/quantizer_fast.py) that reuse formats' scalar rounding routine.

Both build on formats/blocks.py: the result ``Quantized``, the layout and the scale
definitions.

Conventions shared by both (where the sources are silent):

- **Layout.** The block axes are moved last (``np.moveaxis``); a block is a run of k
  elements along the last axis (1-D blocks) or a k0 x k1 tile of the last two (2-D); a
  per-tensor scheme has one block, the whole tensor.  ``axis``: an int (1-D blocks: that
  axis; 2-D blocks: that axis and the one before it) or a tuple of the block's axes.
- **Partial blocks.** A tensor whose length along a block axis is not a multiple of the
  block is treated as padded with zeros, which do not change any amax (as the MX
  reference implementation pads); the padding is never returned.
- **Scales** (formats/scaled.py): from a = amax * 2**margin / tensor_scale; a block holding
  an Inf or NaN, and every block under a NaN tensor scale, has a NaN scale, its elements
  are +0 (code 0) and it dequantizes to NaN.
- **Elements**: P_i = round(V_i / D), D = scale * tensor_scale, one rounding of the exact
  quotient (nearest_even), saturating unless ``nosat``.  ``stochastic``: the rounding of
  the quotient's binary64 round-to-odd value q (q = V_i / D exactly whenever that is a
  binary64 number: always for power-of-two D without underflow), with the draw for
  (seed, flat index of the element in the moved layout): formats' own stochastic rounding
  (formats.round_exact with ``index``), so the probability of rounding up is exact for
  those q and within 2**-50 (relative) otherwise.  Round-to-odd at 53 bits then rounding
  to nearest at p <= 51 bits equals rounding the exact quotient (Boldo and Melquiond,
  "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd",
  IEEE TC 2008), which is how the fast path divides exactly.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from . import quantizer_fast
from .blocks import (Quantized, bits_dtype, block_scale, grid_shape, layout, moved, scale_code,
                     tensor_scale, tiles, unmove)
from .catalog import get
from .exact import read_real, round_exact
from .format import CATALOG
from .scaled import IntElement, ScaledFormat

_BINARY64 = CATALOG["binary64"]
PATHS = ("auto", "fast", "exact")


def quantize(x, scheme, axis=-1, *, seed: int = 0, history=None, path: str = "auto"):
    """Quantize the real array ``x`` into the scaled format ``scheme`` (a ScaledFormat or a
    name ``formats.get`` reads: ``"mxfp8_e4m3"``, ``"nvfp4:rceil"``...); a ``Quantized``.

    ``axis``: the block axis (module doc).  ``seed``: stochastic rounding's draws.
    ``history``: the amax values a ``delayed`` scheme scales by (their max).  ``path``:
    ``"auto"`` (fast for float64/float32/float16/small-integer arrays the fast path can
    take, else exact), ``"fast"`` or ``"exact"``; the two give the same bits.
    """
    fmt = get(scheme)
    if not isinstance(fmt, ScaledFormat):
        raise ValueError(f"quantize: {fmt.label} is an element format, not a scaled format; "
                         f"use formats.round_to, or a scaled format such as mxfp8_e4m3")
    if path not in PATHS:
        raise ValueError(f"quantize: path must be one of {', '.join(PATHS)} (got {path!r})")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) \
            or not 0 <= seed < 1 << 64:
        raise ValueError(f"quantize: seed must be an integer in [0, 2**64) (got {seed!r})")
    hist = _history(fmt, history)
    fast_array = _fast_array(x)
    if path == "fast" or (path == "auto" and fast_array is not None):
        reason = quantizer_fast.unsupported(fmt) if fast_array is not None else \
            "the input is not a float64/float32/float16 or small-integer array"
        if reason is None:
            return quantizer_fast.quantize(fast_array, fmt, _axes(fmt, fast_array.ndim, axis),
                                          int(seed), hist)
        if path == "fast":
            raise ValueError(f"quantize: the fast path cannot take this ({reason}); use "
                             f"path='exact'")
    obj = _object_array(x)
    return _quantize_exact(obj, fmt, _axes(fmt, obj.ndim, axis), int(seed), hist)


def _history(fmt, history):
    """The delayed amax as a Fraction (None: NaN) or False where the scheme takes none."""
    if fmt.amax != "delayed":
        if history is not None:
            raise ValueError(f"quantize: history is for delayed scaling; {fmt.label} uses the "
                             f"current amax (give {fmt.name}:delayed)")
        return False
    values = np.asarray(history, dtype=object).reshape(-1).tolist() \
        if history is not None else []
    if not values:
        raise ValueError(f"quantize: {fmt.label} scales by an amax history: give "
                         f"history=[...] (one or more past amax values)")
    amax = Fraction(0)
    for v in values:
        try:
            r = read_real(v)
        except ValueError as exc:
            raise ValueError(f"quantize: history: {str(exc).removeprefix('round_exact: ')}") \
                from None
        if r.kind in ("nan", "inf"):
            return None
        if r.kind == "finite":
            amax = max(amax, Fraction(r.n, r.d))
    return amax


def _fast_array(x):
    """x as a float64 or float32 array when its values all convert exactly, else None."""
    if type(x) is not np.ndarray:
        return None
    kind, size = x.dtype.kind, x.dtype.itemsize
    if x.dtype in (np.float64, np.float32):
        return x
    if kind == "b" or (kind in "iuf" and size <= 4 and x.dtype != np.float32):
        return x.astype(np.float64)
    return None


def _object_array(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x.astype(object) if x.dtype != object else x
    try:
        return np.array(x, dtype=object)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"quantize: cannot read the input as an array of reals ({exc})") \
            from None


def _axes(fmt: ScaledFormat, ndim: int, axis) -> tuple | None:
    """The block axes, normalized (None for a per-tensor scheme); ValueError otherwise."""
    if fmt.block is None:
        return None
    m = len(fmt.block)
    if ndim < m:
        raise ValueError(f"quantize: {fmt.label} blocks span {m} axes; the input has {ndim}")
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        axes = tuple(range(int(axis) - m + 1, int(axis) + 1))
    elif isinstance(axis, tuple) and len(axis) == m:
        axes = axis
    else:
        raise ValueError(f"quantize: axis must be an int or a tuple of {m} ints for "
                         f"{fmt.label} (got {axis!r})")
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"quantize: axis {axis!r} is out of range for {ndim} axes")
        out.append(a % ndim)
    if len(set(out)) != m or (m == 2 and isinstance(axis, (int, np.integer))
                              and int(axis) % ndim == 0):
        raise ValueError(f"quantize: axis {axis!r} does not give {m} distinct axes of "
                         f"{ndim}")
    return tuple(out)


# ----- the exact path: the definitions (formats/blocks.py) per element, with rationals ------

def _element_exact(fmt: ScaledFormat, real, d: Fraction, seed: int, index: int):
    """(float64 value, pattern) of one element: real / d rounded into the element format."""
    grid = fmt.element_grid
    if real.kind == "nan":
        x = float("nan")
    elif real.kind == "inf":
        x = float("-inf") if real.sign else float("inf")
    elif real.kind == "zero":
        x = -0.0 if real.sign else 0.0
    else:
        x = Fraction(-real.n if real.sign else real.n, real.d) / d
        if fmt.rounding == "stochastic":
            x = round_exact(x, _BINARY64, "odd").to_fraction()
    r = round_exact(x, grid, fmt.rounding, seed=seed, index=index)
    if isinstance(fmt.element, IntElement):
        e = fmt.element
        v = min(max(r.to_fraction(), e.min_value_exact), e.max_finite_exact)
        k = int(v * (1 << e.frac_bits))
        return float(v), k & ((1 << e.bits) - 1)
    return r.to_float(), r.bits


def _quantize_exact(obj: np.ndarray, fmt: ScaledFormat, axes, seed: int, hist) -> Quantized:
    shape = obj.shape
    reals = []
    for v in moved(obj, axes).reshape(-1).tolist():
        try:
            reals.append(read_real(v))
        except ValueError as exc:
            raise ValueError(f"quantize: {str(exc).removeprefix('round_exact: ')}") from None
    bn, rows, cols, kr, kc = layout(shape, fmt, axes)

    def amax_of(items):
        top = Fraction(0)
        for r in items:
            if r.kind in ("nan", "inf"):
                return None
            if r.kind == "finite":
                top = max(top, Fraction(r.n, r.d))
        return top

    margin = Fraction(2) ** fmt.margin
    sg, sg_bits = Fraction(1), None
    if fmt.tensor_scale is not None:
        sg, sg_bits = tensor_scale(fmt, amax_of(reals))
    ntr, ntc = tiles(rows, cols, kr, kc, axes)
    nblocks = bn * ntr * ntc
    scales, scale_bits = [None] * nblocks, [0] * nblocks
    values, bits = [0.0] * len(reals), [0] * len(reals)
    for t in range(nblocks):
        b, rest = divmod(t, ntr * ntc)
        tr, tc = divmod(rest, ntc)
        idx = [(b * rows + r) * cols + c for r in range(tr * kr, min(rows, tr * kr + kr))
               for c in range(tc * kc, min(cols, tc * kc + kc))]
        if fmt.block is None and hist is not False:
            amax = hist
        else:
            amax = amax_of(reals[i] for i in idx)
        a = None if amax is None or sg is None else amax * margin / sg
        s = block_scale(fmt, a)
        scales[t], scale_bits[t] = s, scale_code(fmt, s)
        if s is None:
            continue                                   # elements stay +0, code 0
        d = s * sg
        for i in idx:
            values[i], bits[i] = _element_exact(fmt, reals[i], d, seed, i)
    mshape = moved(np.empty(shape, dtype=np.uint8), axes).shape
    gshape = grid_shape(shape, fmt, axes)
    return Quantized(
        scheme=fmt,
        elements=unmove(np.array(values, dtype=np.float64).reshape(mshape), axes),
        element_bits=unmove(np.array(bits, dtype=bits_dtype(fmt.element.bits))
                            .reshape(mshape), axes),
        scales=unmove(np.array([np.nan if s is None else float(s) for s in scales],
                               dtype=np.float64).reshape(gshape), axes),
        scale_bits=unmove(np.array(scale_bits, dtype=bits_dtype(fmt.scale_bits))
                          .reshape(gshape), axes),
        tensor_scale=None if fmt.tensor_scale is None else
        (float("nan") if sg is None else float(sg)),
        tensor_scale_bits=sg_bits, axis=axes)



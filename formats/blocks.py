"""What both paths of ``formats.quantize`` share (formats/quantizer.py, the exact path and the
entry; formats/quantizer_fast.py, the compiled path): the result ``Quantized``, the block
layout (block axes moved last; rows, columns and tiles) and the scale definitions with
rationals.  The conventions are formats/quantizer.py's module doc.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .exact import round_exact
from .modes import OVERFLOW
from .patterns import Encoder
from .scaled import E8M0_NAN, ScaledFormat


@dataclass(frozen=True, eq=False)
class Quantized:
    """The result of ``quantize``: ``elements`` (float64 values of the element format, x's
    shape), ``element_bits`` (their encodings: the element format's bit patterns; MXINT8:
    the two's-complement byte), ``scales`` (float64, one per block, x's shape with each
    block axis divided by its block, rounded up; NaN for a NaN scale), ``scale_bits``
    (E8M0 codes, or the scale format's patterns), ``tensor_scale`` and
    ``tensor_scale_bits`` (two-level schemes such as NVFP4; else None) and ``axis`` (the
    block axes, None for a per-tensor scheme)."""

    scheme: ScaledFormat
    elements: np.ndarray
    element_bits: np.ndarray
    scales: np.ndarray
    scale_bits: np.ndarray
    tensor_scale: float | None
    tensor_scale_bits: int | None
    axis: tuple | None

    def dequantize(self) -> np.ndarray:
        """element * scale (* tensor_scale) for every element, exact: a float64 array when
        every product is a binary64 number (all the catalog schemes), else an object array
        of Fractions (NaN blocks as float NaN)."""
        full = _expand(self.scales, self.elements.shape, self.scheme, self.axis)
        if self.scheme.products_fit_binary64:
            out = self.elements * full
            return out if self.tensor_scale is None else out * self.tensor_scale
        t = Fraction(1) if self.tensor_scale is None else _fraction(self.tensor_scale)
        out = np.empty(self.elements.shape, dtype=object)
        for i, (e, s) in enumerate(zip(self.elements.reshape(-1).tolist(),
                                       full.reshape(-1).tolist())):
            ft = _fraction(s)
            out.reshape(-1)[i] = (float("nan") if ft is None or t is None
                                  else Fraction(e) * ft * t)
        return out


def _fraction(v):
    return None if v != v else Fraction(v)


# ----- the layout: block axes moved last ------------------------------------------------------

def layout(shape: tuple, fmt: ScaledFormat, axes):
    """(Bn, R, C, kr, kc): the moved array as Bn x R x C and its tiles kr x kc."""
    n = int(np.prod(shape, dtype=np.int64))
    if axes is None:
        return 1, 1, n, 1, max(n, 1)
    if len(axes) == 1:
        c = shape[axes[0]]
        return (n // c if c else 0), 1, c, 1, fmt.block[0]
    r, c = shape[axes[0]], shape[axes[1]]
    return (n // (r * c) if r * c else 0), r, c, fmt.block[0], fmt.block[1]


def tiles(rows: int, cols: int, kr: int, kc: int, axes) -> tuple:
    """Tiles along the rows and the columns (a per-tensor scheme has one, even when empty)."""
    if axes is None:
        return 1, 1
    return -(-rows // kr), -(-cols // kc)


def moved(a: np.ndarray, axes) -> np.ndarray:
    """``a`` with the block axes moved last (a view)."""
    if axes is None:
        return a
    return np.moveaxis(a, axes, tuple(range(-len(axes), 0)))


def grid_shape(shape: tuple, fmt: ScaledFormat, axes) -> tuple:
    """The shape of the scales in the moved layout."""
    if axes is None:
        return (1,) * len(shape)
    rest = tuple(d for i, d in enumerate(shape) if i not in axes)
    return rest + tuple(-(-shape[a] // k) for a, k in zip(axes, fmt.block))


def unmove(a: np.ndarray, axes) -> np.ndarray:
    """Undo ``moved`` (on an array of the moved layout's rank)."""
    if axes is None:
        return a
    return np.moveaxis(a, tuple(range(-len(axes), 0)), axes)


def _expand(scales, shape, fmt, axes) -> np.ndarray:
    """The scale of every element, x's shape."""
    if axes is None:
        return np.broadcast_to(scales, shape)
    s = moved(scales, axes)
    ms = moved(np.empty(shape, dtype=np.uint8), axes).shape
    for j, k in enumerate(fmt.block):
        ax = s.ndim - len(fmt.block) + j
        s = np.repeat(s, k, axis=ax).take(np.arange(ms[ax]), axis=ax)
    return unmove(s, axes)


# ----- the scale definitions, with rationals (the exact path calls them per block; the fast path
# per tensor, once) ----------------------------------------------------------------------------

def _floor_log2(v: Fraction) -> int:
    n, d = v.numerator, v.denominator
    e = n.bit_length() - d.bit_length()
    return e if (n << -e if e < 0 else n) >= (d << e if e > 0 else d) else e - 1


def _pow2(k: int) -> Fraction:
    return Fraction(2) ** k


def scale_code(fmt: ScaledFormat, value: Fraction | None) -> int:
    """The stored pattern of a block scale (None: NaN)."""
    if fmt.is_e8m0:
        return E8M0_NAN if value is None else _floor_log2(value) + 127
    if value is None:
        return Encoder(fmt.scale).nan()
    return round_exact(value, fmt.scale).bits


def block_scale(fmt: ScaledFormat, a: Fraction | None) -> Fraction | None:
    """The scale of a block with a = amax * 2**margin / tensor_scale (None: the block holds an
    Inf or NaN, or the tensor scale is NaN): a Fraction, or None for NaN."""
    if a is None:
        return None
    least, top = fmt.scale_min_exact, fmt.scale_max_exact
    if a == 0:
        return least
    if fmt.rule in ("floor", "ceil"):
        e = _floor_log2(a)
        if fmt.rule == "ceil" and a != _pow2(e):
            e += 1
        value = max(_pow2(e - fmt.emax_elem), least)
        overflow = value > top
    else:
        r = round_exact(a / fmt.element_max_exact, fmt.scale_grid,
                        "upward" if fmt.rule == "rceil" else "nearest_even")
        value = r.to_fraction()
        overflow = bool(r.flags & OVERFLOW) or value is None or value > top
        if not overflow and value == 0:
            value = least
    if overflow:
        return top if fmt.scale_saturate else None
    return value


def tensor_scale(fmt: ScaledFormat, amax: Fraction | None) -> tuple:
    """(value or None for NaN, pattern) of a two-level scheme's tensor scale: amax /
    (scale_max * element_max) rounded to nearest even (NVFP4: amax / (448 * 6) in binary32);
    0 becomes the format's least positive value, an overflow or a non-finite amax NaN."""
    t = fmt.tensor_scale
    if amax is None:
        return None, Encoder(t).nan()
    r = round_exact(amax / (fmt.scale_max_exact * fmt.element_max_exact), t, "nearest_even")
    value = r.to_fraction()
    if value is None or r.flags & OVERFLOW:
        return None, Encoder(t).nan()
    if value == 0:
        value = t.min_subnormal_exact
        return value, round_exact(value, t).bits
    return value, r.bits


def bits_dtype(nbits: int):
    """The smallest unsigned integer type of at least ``nbits`` bits."""
    return next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64)
                if np.dtype(d).itemsize * 8 >= nbits)

"""The input tensors of a quantizer measurement (engine/quantizers.py): a tensor's layout
as blocks of a scaled format, and the random and adversarial cases (``CASES``) built on it,
deterministic in their arguments (``cases``)."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats import ScaledFormat

from . import executors
from .targets import MeasureError

CASES = ("normal", "log-uniform", "huge-value", "zero-blocks", "inf-nan", "element-max",
         "ties", "element-subnormal", "input-subnormal", "partial-block")
RANDOM = ("normal", "log-uniform")         # ``samples`` tensors each; the others once
DTYPES = ("float32", "float64")
MAX_ELEMENTS = 1 << 22                     # per input tensor


# ----- layout: a tensor as its blocks ---------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """A tensor of ``shape`` as ``nb`` blocks of ``kr * kc`` slots (block-major), the block
    axes ``axes`` (normalized by formats.quantize; None: one block, the whole tensor).
    Slots past a partial block's end are padding (``valid`` False)."""

    shape: tuple
    axes: tuple | None
    kr: int
    kc: int

    @classmethod
    def of(cls, shape, scheme: ScaledFormat, axes):
        n = int(np.prod(shape))
        if axes is None:
            return cls(tuple(shape), None, 1, n)
        block = scheme.block
        return cls(tuple(shape), tuple(axes), 1 if len(block) == 1 else block[0], block[-1])

    @property
    def moved_shape(self) -> tuple:
        if self.axes is None:
            return self.shape
        rest = tuple(d for i, d in enumerate(self.shape) if i not in self.axes)
        return rest + tuple(self.shape[a] for a in self.axes)

    @property
    def dims(self) -> tuple:
        """(bn, rows, cols, tile rows, tile columns) of the moved tensor as bn x rows x cols."""
        ms = self.moved_shape
        if self.axes is None:
            return 1, 1, int(np.prod(ms)), 1, 1
        rows = ms[-2] if len(self.axes) == 2 else 1
        cols = ms[-1]
        bn = int(np.prod(ms)) // max(rows * cols, 1)
        return bn, rows, cols, -(-rows // self.kr), -(-cols // self.kc)

    @property
    def nb(self) -> int:
        bn, _, _, tr, tc = self.dims
        return bn * tr * tc

    @property
    def kb(self) -> int:
        return self.kr * self.kc

    def _move(self, a):
        if self.axes is None:
            return a
        return np.moveaxis(a, self.axes, tuple(range(-len(self.axes), 0)))

    def blocks(self, a, fill=0) -> np.ndarray:
        """``a`` (the tensor's shape) as (nb, kb), padding slots ``fill``."""
        bn, rows, cols, tr, tc = self.dims
        m = np.asarray(self._move(a)).reshape(bn, rows, cols)
        out = np.full((bn, tr * self.kr, tc * self.kc), fill, dtype=m.dtype)
        out[:, :rows, :cols] = m
        return out.reshape(bn, tr, self.kr, tc, self.kc).transpose(0, 1, 3, 2, 4) \
            .reshape(self.nb, self.kb)

    def tensor(self, b) -> np.ndarray:
        """The inverse of ``blocks``: (nb, kb) back to the tensor's shape."""
        bn, rows, cols, tr, tc = self.dims
        m = b.reshape(bn, tr, tc, self.kr, self.kc).transpose(0, 1, 3, 2, 4) \
            .reshape(bn, tr * self.kr, tc * self.kc)[:, :rows, :cols].reshape(self.moved_shape)
        if self.axes is None:
            return np.ascontiguousarray(m)
        return np.ascontiguousarray(np.moveaxis(m, tuple(range(-len(self.axes), 0)),
                                                self.axes))

    @property
    def valid(self) -> np.ndarray:
        return self.blocks(np.ones(self.shape, dtype=bool), fill=False)

    def grid_shape(self) -> tuple:
        """The shape of the scales (the tensor's, each block axis divided by its block)."""
        if self.axes is None:
            return (1,) * len(self.shape)
        k = dict(zip(self.axes, (self.kr, self.kc) if len(self.axes) == 2 else (self.kc,)))
        return tuple(-(-d // k[i]) if i in k else d for i, d in enumerate(self.shape))

    def grid(self, s) -> np.ndarray:
        """Scales of ``grid_shape`` as (nb,), in block order."""
        return np.asarray(self._move(np.asarray(s).reshape(self.grid_shape()))).reshape(-1)

    def block_index(self, b: int) -> list:
        """The index in the scales array of block ``b``."""
        ids = np.arange(self.nb).reshape(self._move(np.empty(self.grid_shape())).shape)
        if self.axes is not None:
            ids = np.moveaxis(ids, tuple(range(-len(self.axes), 0)), self.axes)
        return [int(i) for i in np.argwhere(ids == b)[0]]

    def element_index(self, b: int, j: int) -> list:
        flat = self.blocks(np.arange(int(np.prod(self.shape))).reshape(self.shape), fill=-1)
        return [int(i) for i in np.unravel_index(int(flat[b, j]), self.shape)]


def _default_shape(scheme: ScaledFormat) -> tuple:
    """Small tensors whose last block along each block axis is partial."""
    if scheme.block is None:
        return (16, 64)
    if len(scheme.block) == 1:
        k = scheme.block[0]
        return (8, 3 * k + k // 2)
    kr, kc = scheme.block
    return (kr + kr // 2, 2 * kc + kc // 2)


# ----- the inputs -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One input tensor: its case name, its number within the case and the array."""

    name: str
    index: int
    x: np.ndarray = field(repr=False)


class _Gen:
    """What the case generators share: the scheme's element grid, a window of block
    exponents s keeping every value of every case within the dtype's normal range (ties
    included), the random generator, and the definition's scales of anchored blocks."""

    def __init__(self, scheme, layout, dtype, rng, axis, history):
        self.scheme, self.layout, self.dtype, self.rng = scheme, layout, dtype, rng
        self.axis, self.history = axis, history
        grid = scheme.element_grid
        self.p, self.emin, self.qmin = grid.precision, grid.emin, grid.qmin
        self.emax = scheme.emax_elem
        self.top = float(scheme.element_max_exact)
        self.fi = np.finfo(dtype)
        # 2**(qmin - 1 + s) (half the least element quantum) is a normal number of the
        # dtype, and 2**(emax + 2 + s) (past any anchor or tie) is finite.
        self.lo = self.fi.minexp - self.qmin + 1
        self.hi = self.fi.maxexp - self.emax - 3
        if self.lo > self.hi:
            self.lo = self.hi = 0
        self.shape = (layout.nb, layout.kb)
        self.valid = layout.valid

    def exps(self, lo, hi) -> np.ndarray:
        """An integer exponent per block, in [lo, hi] clipped to the safe window, (nb, 1)."""
        lo, hi = max(lo, self.lo), min(hi, self.hi)
        lo, hi = (lo, hi) if lo <= hi else (self.lo, self.lo)
        return self.rng.integers(lo, hi + 1, (self.layout.nb, 1))

    def normal(self, lo=-20, hi=20) -> np.ndarray:
        return self.rng.standard_normal(self.shape) * np.ldexp(1.0, self.exps(lo, hi))

    def signs(self) -> np.ndarray:
        return np.where(self.rng.random(self.shape) < 0.5, -1.0, 1.0)

    def slot(self) -> np.ndarray:
        """A random valid slot of every block."""
        r = self.rng.random(self.shape)
        r[~self.valid] = -1.0
        return np.argmax(r, axis=1)

    def put(self, v, slot, values):
        v[np.arange(self.layout.nb), slot] = values
        return v

    def anchored(self):
        """(values, mask, A, D): one anchor +-A per block at a random slot, every other slot
        0 and in ``mask``; D the definition's scale (times the tensor scale) of each block,
        (nb, 1), which values of magnitude <= A keep.  A = element_max * 2**s * (1 + k/8),
        so that A / element_max, and with it D under every rule, has at most 3 significant
        bits; under a tensor scale the largest anchor is element_max * scale_max * 2**t,
        so that the tensor scale amax / (scale_max * element_max) is 2**t."""
        nb = self.layout.nb
        # s within +-6: blocks 12 binades apart fit every catalog scale format's range.
        a = self.top * np.ldexp(1.0 + self.rng.integers(0, 4, (nb, 1)) / 8,
                                self.exps(-6, 6))
        if self.scheme.tensor_scale is not None:
            unit = self.top * float(self.scheme.scale_max_exact)
            b = int(np.argmax(a[:, 0]))
            a[b, 0] = unit * 2.0 ** math.ceil(math.log2(a[b, 0] / unit))
        slot = self.slot()
        v = self.put(np.zeros(self.shape), slot, a[:, 0] * self.signs()[:, 0])
        q = formats.quantize(self.layout.tensor(v).astype(self.dtype), self.scheme, self.axis,
                             history=self.history)
        d = self.layout.grid(q.scales) * (1.0 if q.tensor_scale is None else q.tensor_scale)
        mask = self.valid.copy()
        mask[np.arange(nb), slot] = False
        return v, mask, a, d[:, None]


def _normal(g: _Gen):
    return g.normal()


def _log_uniform(g: _Gen):
    c = g.exps(g.lo + 12, g.hi - 12)
    return g.signs() * np.exp2(c + g.rng.uniform(-12, 12, g.shape))


def _huge_value(g: _Gen):
    v = g.normal(-20, 20)
    s = np.floor(np.log2(np.max(np.abs(v), axis=1, keepdims=True)))
    up = g.rng.integers(2, g.emax - g.qmin + 9, (g.layout.nb, 1))
    big = np.ldexp(1.0 + g.rng.integers(0, 8, (g.layout.nb, 1)) / 8, (s + up).astype(int))
    return g.put(v, g.slot(), (big * g.signs()[:, :1])[:, 0])


def _zero_blocks(g: _Gen):
    v = g.normal()
    zero = g.rng.random((g.layout.nb, 1)) < 0.5
    zero[0] = True
    negative = g.rng.random((g.layout.nb, 1)) < 0.3
    return np.where(zero, np.where(negative, -0.0, 0.0), v)


def _inf_nan(g: _Gen):
    """Per block in turn: an Inf, a -Inf, a NaN, an Inf and a NaN, none."""
    v = g.normal()
    kind = np.arange(g.layout.nb) % 5
    rows = np.arange(g.layout.nb)
    first, second = g.slot(), g.slot()
    hit = kind < 4
    v[rows[hit], first[hit]] = np.array([np.inf, -np.inf, np.nan, np.inf])[kind[hit]]
    both = (kind == 3) & (second != first)
    v[rows[both], second[both]] = np.nan
    return v


def _element_max(g: _Gen):
    """+-element_max * 2**s in several slots, and per block a largest value among max, the
    overflow tie max + q/2, max + q, ... up to the top of max's binade (q its quantum)."""
    s = g.exps(-20, 20)
    q = 2.0 ** (g.emax - g.p + 1)
    tops = [t for t in (g.top, g.top + q / 2, g.top + q, g.top + 3 * q / 2,
                        2.0 ** (g.emax + 1) - q / 4) if t < 2.0 ** (g.emax + 1)]
    v = g.rng.uniform(-g.top, g.top, g.shape)
    v = np.where(g.rng.random(g.shape) < 0.25, g.top * g.signs(), v)
    top = np.array(tops)[np.arange(g.layout.nb) % len(tops)]
    v = g.put(v, g.slot(), top * g.signs()[:, 0])
    return v * np.ldexp(1.0, s)


def _ties(g: _Gen):
    """Midpoints m of the element grid with |m| * D <= A: exact ties after scaling."""
    v, mask, a, d = g.anchored()
    with np.errstate(all="ignore"):
        room = np.frexp(a / d)[1] - 1                          # floor(log2(A / D))
        m = _midpoints(g, room)
        m = np.where(m * d > a, _midpoints(g, room - 1), m)    # the top binade is partly
        m = np.where(m * d > a, 0.0, m)                        # above A / D
        return np.where(mask, g.signs() * m * d, v)


def _midpoints(g: _Gen, top) -> np.ndarray:
    """Random midpoints of consecutive values of the element grid, exponents (floor(log2))
    uniform in [emin - 1, top] per block (emin - 1: the subnormal range)."""
    e = g.emin - 1 + np.floor(g.rng.random(g.shape) * np.maximum(top - g.emin + 2, 1))
    e = e.astype(int)
    sub = e < g.emin
    half = 1 << (g.p - 1)
    sig = np.where(sub, g.rng.integers(0, half, g.shape),
                   g.rng.integers(half, 2 * half, g.shape))
    # Between sig * 2**(e - p + 1) and (sig + 1) * 2**(e - p + 1), e = emin when subnormal.
    return np.ldexp(2.0 * sig + 1, np.where(sub, g.emin, e) - g.p)


def _element_subnormal(g: _Gen):
    """Values of (0, 2**emin) * D, half of them below twice the least subnormal."""
    v, mask, _, d = g.anchored()
    u = g.rng.random(g.shape)
    near = g.rng.random(g.shape) < 0.5
    m = np.where(near, np.ldexp(u, g.qmin + 1), np.ldexp(u, g.emin))
    with np.errstate(all="ignore"):
        return np.where(mask, g.signs() * m * d, v)


def _input_subnormal(g: _Gen):
    tiny = float(g.fi.smallest_subnormal)
    v = g.signs() * g.rng.integers(1, 1 << g.fi.nmant, g.shape) * tiny
    kind = np.arange(g.layout.nb) % 3               # all subnormal, with min normal, larger
    rows = np.flatnonzero(kind > 0)
    big = np.where(kind[rows] == 1, float(g.fi.smallest_normal),
                   np.ldexp(1.0, g.fi.minexp + 20))
    v[rows, g.slot()[rows]] = big
    return v


def _partial_block(g: _Gen):
    v = g.normal()
    partial = ~np.all(g.valid, axis=1, keepdims=True)
    return np.where(partial, v * 64.0, v)


_GENERATORS = {"normal": _normal, "log-uniform": _log_uniform, "huge-value": _huge_value,
               "zero-blocks": _zero_blocks, "inf-nan": _inf_nan, "element-max": _element_max,
               "ties": _ties, "element-subnormal": _element_subnormal,
               "input-subnormal": _input_subnormal, "partial-block": _partial_block}
_EXACT = ("ties",)                    # values the dtype cannot hold are dropped, not rounded


def _partial_shape(layout: Layout, scheme: ScaledFormat) -> tuple:
    """The shape of ``partial-block``: each block axis one block and a bit more."""
    shape = list(layout.shape)
    for a, k in zip(layout.axes, scheme.block):
        shape[a] = k + k // 2 + 1
    return tuple(shape)


def cases(scheme, *, shape=None, samples: int = 4, seed: int = 0, axis=-1,
          dtype: str = "float32", history=None) -> list:
    """The input tensors of a measurement (``Case`` list, in CASES order; the random cases
    ``samples`` times), deterministic in the arguments.  MeasureError for arguments that
    cannot make them."""
    fmt, shape, dt, layout = setup(scheme, shape, samples, axis, dtype, history)
    out = []
    for name in CASES:
        lay = layout
        if name == "partial-block":
            if layout.axes is None:
                continue
            lay = Layout.of(_partial_shape(layout, fmt), fmt, layout.axes)
        for i in range(samples if name in RANDOM else 1):
            rng = np.random.default_rng([seed, zlib.crc32(name.encode()), i])
            g = _Gen(fmt, lay, dt, rng, layout.axes if layout.axes else axis, history)
            with np.errstate(all="ignore"):
                v = np.where(g.valid, _GENERATORS[name](g), 0.0)
                x = lay.tensor(v)
                cast = x.astype(dt)
                if name in _EXACT:
                    inexact = (cast.astype(np.float64) != x) & ~np.isnan(x)
                    cast = np.where(inexact, 0.0, cast).astype(dt)
            out.append(Case(name, i, cast))
    return out


def setup(scheme, shape, samples, axis, dtype, history):
    """(scheme, shape, dtype, layout) checked; MeasureError naming the argument."""
    try:
        fmt = formats.get(scheme)
    except (formats.FormatError, KeyError, ValueError) as exc:
        raise MeasureError(f"--scheme: {executors.one_line(exc)}") from None
    if not isinstance(fmt, ScaledFormat):
        raise MeasureError(f"--scheme: {fmt.label} is an element format, not a scaled format "
                           f"(mxfp8_e4m3, nvfp4, fp8_e4m3_block128...: roundoff-coverage "
                           f"formats lists them)")
    if fmt.rounding == "stochastic":
        raise MeasureError(f"--scheme {fmt.label}: stochastic rounding draws random bits, "
                           f"which another quantizer cannot match; measure nearest_even")
    if fmt.amax == "delayed" and history is None:
        raise MeasureError(f"--scheme {fmt.label} scales by an amax history: give --history "
                           f"X,X (one or more past amax values)")
    if dtype not in DTYPES:
        raise MeasureError(f"the input dtype must be one of {', '.join(DTYPES)} "
                           f"(got {dtype!r})")
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) \
            or not 1 <= samples <= 10_000:
        raise MeasureError(f"--samples (random tensors of each kind) must be from 1 to "
                           f"10000 (got {samples!r})")
    shape = _default_shape(fmt) if shape is None else tuple(shape)
    if not shape or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1
                        for d in shape) or math.prod(shape) > MAX_ELEMENTS:
        raise MeasureError(f"--shape must be one or more positive lengths with at most "
                           f"{MAX_ELEMENTS} elements (got {shape!r})")
    shape = tuple(int(d) for d in shape)
    try:
        q = formats.quantize(np.zeros(shape, dtype=dtype), fmt, axis, history=history)
    except ValueError as exc:
        raise MeasureError(str(exc)) from None
    return fmt, shape, np.dtype(dtype), Layout.of(shape, fmt, q.axis)

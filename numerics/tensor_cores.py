"""Bit-accurate models of NVIDIA tensor cores: how a GPU's matrix unit adds a dot product.

One multi-term fused operation (a block FMA) computes d = c + sum_k a_k b_k for a group of
K products (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
PeerJ Computer Science 7:e330, 2021; Khattak and Mikaitis, "Accurate models of NVIDIA tensor
cores", arXiv 2512.07004, 2025):

- the products are exact (the inputs are fp16, bf16, tf32, E4M3 or E5M2 values);
- every product and c is aligned to E, the largest exponent among them, where a product's
  exponent is e(a) + e(b) -- e(x) = floor(log2 |x|), subnormal inputs counted at their
  format's least normal exponent -- and c's is e(c) (binary32 subnormals at -126).  The
  product's significand lies in [1, 4): its carry bit sits above E.  A unit with an
  exponent ``floor`` aligns at no less than it: a group of products all below 2**floor
  (c = 0; a nonzero binary32 c has e(c) >= -126) is cut at 2**(floor - 23 - extra), and
  what lies below is lost (Hopper and Blackwell: -133, the published models' value;
  Blackwell's binary16 outputs of fp16 inputs: -15);
- each aligned term is cut (truncated toward zero, sign and magnitude) to a multiple of
  2**(E - 23 - extra): ``extra`` alignment bits below binary32's 23 fraction bits (negative:
  fewer bits than binary32 keeps); the cut terms are summed exactly;
- the sum is normalised and rounded once: toward zero into binary32 (to nearest even into
  binary16 outputs, whose c is binary16); a datapath with negative ``extra`` keeps 23 +
  extra fraction bits in its binary32 output too (Hopper's FP8 outputs have their 10 low
  fraction bits zero);
- longer dot products chain groups in order, each group's result feeding the next as c (the
  recursive summation of block FMAs a GEMM performs along k).

Overflow of the rounded sum gives an infinity under every rounding (the published model's
behaviour: an all-ones exponent field reads as inf); an inf or NaN input gives the IEEE sum of
the raw terms (NaN for inf - inf and inf * 0).  A datapath with ``extra=None`` does not cut:
the group's terms are summed exactly and rounded once (Blackwell's FP8 path: every published
B200 FP8 output is the correctly rounded, to nearest even, sum of its 32 products and c).

The presets hold the parameters those papers publish and that reproduce, bit for bit, every
published GPU output in ../shared/data/tensor-cores (tests/numerics/test_numerics_tensor_cores.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numba
import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats.fast import threads_for

# The input formats a matrix unit takes, by catalog name.
INPUTS = ("binary16", "bfloat16", "tf32", "float8_e4m3fn", "float8_e5m2")
OUTPUTS = ("binary32", "binary16")
_NONE = -(1 << 20)          # the exponent of a zero operand: below every real exponent
_LOWEST = _NONE // 2        # an alignment exponent at most this: every term is zero
_SPECIAL = 1 << 10          # at least the exponent of a term with an inf or NaN operand
_C_FLOOR = -126             # c is aligned by its binary32 exponent, subnormals at -126


@dataclass(frozen=True)
class Datapath:
    """How one input format's products are added: ``group`` products per block FMA,
    ``extra`` alignment bits below binary32's 23 fraction bits (None: no cut, the exact
    sum), the final rounding into binary32 outputs, whether binary16 outputs (rounded
    to nearest even) are modelled, and their own exponent floor (``floor16``; None: the
    unit's, TensorCore.floor)."""

    group: int
    extra: int | None
    rounding: str = "toward_zero"
    binary16: bool = False
    floor16: int | None = None

    def __post_init__(self):
        if isinstance(self.group, bool) or not isinstance(self.group, int) or \
                not 1 <= self.group <= 256:
            raise ValueError(f"tensor core: group must be an integer in 1..256 "
                             f"(got {self.group!r})")
        # At most 257 cut terms below 2**(25 + extra) quanta each: an exact binary64 sum.
        if self.extra is not None and (isinstance(self.extra, bool) or
                                       not isinstance(self.extra, int) or
                                       not -20 <= self.extra <= 20):
            raise ValueError(f"tensor core: extra alignment bits must be an integer in "
                             f"-20..20 or None (got {self.extra!r})")
        if self.floor16 is not None and (isinstance(self.floor16, bool) or
                                         not isinstance(self.floor16, int) or
                                         not self.binary16 or not -300 <= self.floor16 <= 0):
            raise ValueError(f"tensor core: floor16, the exponent floor of binary16 outputs, "
                             f"is an integer in -300..0 on a datapath with binary16 outputs "
                             f"(got {self.floor16!r})")
        if self.rounding not in ("toward_zero", "nearest_even"):
            raise ValueError(f"tensor core: the final rounding is toward_zero or "
                             f"nearest_even (got {self.rounding!r})")


@dataclass(frozen=True)
class TensorCore:
    """A GPU's matrix unit: a Datapath per input format (INPUTS), subnormal inputs and
    outputs kept or flushed to zero, the exponent floor of its alignment (None: none;
    module docstring), and the source of its parameters."""

    name: str
    paths: dict = field(hash=False)
    subnormal_inputs: bool = True
    subnormal_outputs: bool = True
    source: str = ""
    floor: int | None = None

    def __post_init__(self):
        # At most -126, where a nonzero binary32 c aligns anyway (the a priori bound,
        # numerics.bounds.tensor_core_dot_bound, counts the alignment from 2**-126).
        if self.floor is not None and (isinstance(self.floor, bool) or
                                       not isinstance(self.floor, int) or
                                       not -300 <= self.floor <= -126):
            raise ValueError(f"tensor core {self.name}: the exponent floor is an integer in "
                             f"-300..-126 or None (got {self.floor!r})")
        for key, path in self.paths.items():
            if key not in INPUTS or not isinstance(path, Datapath):
                raise ValueError(f"tensor core {self.name}: paths map input formats "
                                 f"({', '.join(INPUTS)}) to Datapath (got {key!r})")

    def path(self, input_format, output_format="binary32") -> Datapath:
        """The datapath for these formats; ValueError when the unit does not take them."""
        fin, fout = _label(input_format), _label(output_format)
        if fin not in self.paths:
            raise ValueError(f"tensor core {self.name}: its matrix unit takes "
                             f"{', '.join(self.paths)} inputs (got {fin})")
        p = self.paths[fin]
        if fout not in OUTPUTS or (fout == "binary16" and not p.binary16):
            outs = "binary32 or binary16" if p.binary16 else "binary32"
            raise ValueError(f"tensor core {self.name}: {fin} inputs give {outs} outputs "
                             f"here (got {fout})")
        return p

    def fma(self, a, b, c, input_format, output_format="binary32") -> np.ndarray:
        """d[i] = c[i] + sum_k a[i, k] b[i, k] as the unit computes it: ``a``, ``b`` float64
        (n, K) of input-format values, ``c`` (n,) of output-format values; K longer than the
        group runs as chained groups.  The (n,) float64 outputs."""
        p = self.path(input_format, output_format)
        a, b = (np.asarray(v, dtype=np.float64) for v in (a, b))
        c = np.asarray(c, dtype=np.float64)
        if a.ndim != 2 or a.shape != b.shape or c.shape != a.shape[:1]:
            raise ValueError(f"tensor core {self.name}: fma takes a and b of one shape "
                             f"(n, K) and c of shape (n,) (got {a.shape}, {b.shape}, "
                             f"{c.shape})")
        fin, fout = formats.get(_label(input_format)), formats.get(_label(output_format))
        for what, v, f in (("a", a, fin), ("b", b, fin), ("c", c, fout)):
            if not _within(v, f):
                raise ValueError(f"tensor core {self.name}: {what} holds values that are "
                                 f"not {f.label} values")
        # A batch of n one-output products: row i alone against column i alone.
        return self._run(a[:, None, :], b[:, None, :], c[:, None, None], fin, fout, p)[:, 0, 0]

    def matmul(self, a, b, input_format) -> np.ndarray:
        """Batched a @ b.T with binary32 outputs and c = +0: ``a`` (nb, m, k), ``b`` (nb, n, k)
        float64 input-format values; (nb, m, n) float64."""
        p = self.path(input_format)
        fin = formats.get(_label(input_format))
        # Products commute: the longer of m and n runs along the kernel's rows of B.
        swap = b.shape[1] < a.shape[1]
        if swap:
            a, b = b, a
        out = self._run(a, b, np.zeros((a.shape[0], a.shape[1], b.shape[1])), fin,
                        formats.get("binary32"), p)
        return np.swapaxes(out, 1, 2) if swap else out

    def _run(self, a, b, c, fin, fout, p: Datapath) -> np.ndarray:
        """The kernel on ``a`` (nb, m, k) and ``b`` (nb, n, k) input-format values from the
        accumulators ``c`` (nb, m, n) of format ``fout``: (nb, m, n) float64."""
        (ea, a), (eb, b) = self._read(a, fin), self._read(b, fin)
        b, eb = (np.ascontiguousarray(np.swapaxes(v, 1, 2)) for v in (b, eb))   # (nb, k, n)
        out = np.ascontiguousarray(c, dtype=np.float64).copy()
        with threads_for(out.size * a.shape[-1]):
            _matmul_kernel(a, ea, b, eb, out, *self._params(p, fout))
        return out

    def _read(self, x, fin):
        """(exponents, values) of input-format values: e(x) for the alignment (subnormals
        at the format's least normal exponent, _NONE for zeros), subnormals flushed to zero
        when the unit does not keep them."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if not self.subnormal_inputs:
            x = np.where(np.abs(x) < fin.min_normal, 0.0 * x, x)
        with np.errstate(invalid="ignore"):
            e = np.maximum(np.frexp(np.where(np.isfinite(x), x, 1.0))[1] - 1, fin.emin)
        e = np.where(np.isfinite(x), e, 1 << 22)      # an inf or NaN operand: _SPECIAL
        return np.where(x == 0, _NONE, e).astype(np.int32), x

    def alignment_floor(self, input_format, output_format="binary32") -> int | None:
        """The exponent floor of the alignment for these formats (module docstring): the
        datapath's floor16 for binary16 outputs where it has one, the unit's otherwise."""
        return self._floor(self.path(input_format, output_format), _label(output_format))

    def _floor(self, p: Datapath, output_label: str) -> int | None:
        if output_label == "binary16" and p.floor16 is not None:
            return p.floor16
        return self.floor

    def _params(self, p: Datapath, fout):
        prec = fout.precision + (min(p.extra, 0) if p.extra is not None and
                                 fout.label == "binary32" else 0)
        nearest = p.rounding == "nearest_even" or fout.label == "binary16"
        floor = self._floor(p, fout.label)
        return (p.group, 0 if p.extra is None else p.extra, p.extra is None, prec, fout.emin,
                fout.emax, nearest, not self.subnormal_outputs,
                _NONE if floor is None else floor)


# The input format a matrix unit reads a run's storage format as: binary32 operands are read
# as tf32 (the unit ignores their 13 low fraction bits: truncation, as the published models
# convert them).
READS = {"binary16": "binary16", "bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn",
         "float8_e5m2": "float8_e5m2", "binary32": "tf32"}


def input_format(core: TensorCore, storage) -> str:
    """The input format the unit reads a storage format's operands in (READS); ValueError
    when it takes no operands of that format."""
    label = _label(storage)
    fin = READS.get(label)
    if fin not in core.paths:
        takes = ", ".join(s if s == f else f"{s} (as {f})" for s, f in READS.items()
                          if f in core.paths)
        raise ValueError(f"tc:{core.name}: its matrix unit takes {takes} operands "
                         f"(got {label})")
    return fin


def operands(core: TensorCore, storage, x) -> tuple[np.ndarray, str]:
    """Values of the storage format as the unit reads them, and its input format's name
    (input_format)."""
    fin = input_format(core, storage)
    x = np.asarray(x, dtype=np.float64)
    return (formats.round_to(x, fin, "toward_zero") if fin != _label(storage) else x), fin


def _label(name) -> str:
    try:
        return formats.get(name).label
    except (KeyError, ValueError, TypeError):
        raise ValueError(f"tensor core: unknown format {name!r}") from None


def _within(v, f) -> bool:
    """Whether every finite element of ``v`` is a value of format ``f``."""
    finite = np.isfinite(v)
    return bool(np.all(formats.round_to(np.where(finite, v, 0.0), f) ==
                       np.where(finite, v, 0.0)))


# ----- the kernel --------------------------------------------------------------------------
@numba.njit(cache=True)
def _round(v, prec, emin, emax, nearest, flush):
    """The exact binary64 value v rounded to ``prec`` significant bits with the exponent
    range [emin, emax] (subnormals below 2**emin): toward zero, or to nearest even; an
    overflow gives an infinity; ``flush`` sends subnormal results to zero."""
    if v == 0.0 or not math.isfinite(v):
        return v
    a = abs(v)
    qe = max(math.frexp(a)[1] - prec, emin - prec + 1)
    x = math.ldexp(a, -qe)                       # exact: a power-of-two scaling
    r = math.floor(x)
    if nearest:
        d = x - r
        if d > 0.5 or (d == 0.5 and r % 2.0 == 1.0):
            r += 1.0
    r = math.ldexp(r, qe)
    if r >= math.ldexp(1.0, emax + 1):
        r = math.inf
    elif flush and r < math.ldexp(1.0, emin):
        r = 0.0
    return math.copysign(r, v)


@numba.njit(inline="always")
def _store(v, prec, emin, emax, nearest, flush):
    """_round, with the common case in a few instructions: a normal binary32 result (an
    exponent in [-126, 127]) toward zero keeps the float64 pattern's top prec - 1 fraction
    bits; to nearest even into 24 bits it is the hardware's float32 conversion."""
    if emin == -126 and emax == 127:
        b = np.float64(v).view(np.int64)
        e = ((b >> 52) & 0x7FF) - 1023
        if -126 <= e <= 127:
            if not nearest:
                return np.int64(b & (np.int64(-1) << (53 - prec))).view(np.float64)
            if prec == 24:
                return np.float64(np.float32(v))
    return _round(v, prec, emin, emax, nearest, flush)


@numba.njit(cache=True)
def _odd_sum(vals, n):
    """The exact sum of vals[:n] (finite binary64 numbers) rounded to odd into binary64
    (Boldo and Melquiond: rounding that once more to nearest into a format of at most 51
    bits gives the correctly rounded sum).  Shewchuk's partials hold the exact sum as
    non-overlapping binary64 numbers, increasing in magnitude."""
    parts = np.empty(n + 1)
    m = 0
    for i in range(n):
        x = vals[i]
        j = 0
        for k in range(m):
            y = parts[k]
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo != 0.0:
                parts[j] = lo
                j += 1
            x = hi
        parts[j] = x
        m = j + 1
    hi = parts[m - 1]
    lo = 0.0
    k = m - 1
    while k > 0:
        k -= 1
        x, y = hi, parts[k]
        hi = x + y
        lo = y - (hi - x)
        if lo != 0.0:
            break
    # hi + lo + parts[:k] is the sum, every remaining part below lo's last bit: the
    # remainder's sign is lo's.  Rounding to odd keeps an odd hi, else steps toward it.
    if lo != 0.0 and (np.float64(hi).view(np.int64) & 1) == 0:
        hi = np.nextafter(hi, math.copysign(math.inf, lo))
    return hi


# Rows of A one parallel task computes: each group's slice of B (group x n values and
# exponents) is read from cache once per _ROWS rows.
_ROWS = 4


@numba.njit(inline="always")
def _power(e):
    """2**e for an integer e in [-1022, 1023], from its binary64 pattern."""
    return np.int64(np.int64(1023 + e) << 52).view(np.float64)


@numba.njit(inline="always")
def _group_top(c, ea, EB, t0, t1, top):
    """top[j]: the alignment exponent of the group t0:t1 of row ``ea`` against column j --
    the largest of c[j]'s exponent (binary32 subnormals at _C_FLOOR; an inf or NaN reads as
    1024, above every finite term: _SPECIAL) and e(a_t) + e(b_tj) (a zero operand's _NONE
    keeps its product out).  Four products per sweep of the row: loads of top amortised."""
    n = top.size
    for j in range(n):
        top[j] = max(((np.float64(c[j]).view(np.int64) >> 52) & 0x7FF) - 1023,
                     _C_FLOOR) if c[j] != 0.0 else _NONE
    t = t0
    while t + 4 <= t1:
        e0, e1, e2, e3 = ea[t], ea[t + 1], ea[t + 2], ea[t + 3]
        b0, b1, b2, b3 = EB[t], EB[t + 1], EB[t + 2], EB[t + 3]
        for j in range(n):
            top[j] = max(max(top[j], max(e0 + b0[j], e1 + b1[j])),
                         max(e2 + b2[j], e3 + b3[j]))
        t += 4
    for u in range(t, t1):
        e0, b0 = ea[u], EB[u]
        for j in range(n):
            top[j] = max(top[j], e0 + b0[j])


@numba.njit(inline="always")
def _group_sum(c, a, B, t0, t1, top, shift, exact, s, scale, lost, floor):
    """top[j] raised to ``floor`` where a term is nonzero (the unit's exponent floor; _NONE:
    none); then s[j]: the group's terms cut toward zero to multiples of q = 2**(top[j] -
    shift), as an integer count of q: a term x contributes trunc(x / q), which is
    int64(x * scale) with scale = 1/q -- a power-of-two scaling (exact; a term below
    2**-1022 after it is lost to the cut anyway) and the conversion's truncation toward
    zero.  Every term is below 2**(top - e + 2), so below 2**(shift + 2) quanta: at most
    257 of them fit int64, and binary64 while shift <= 45.  ``exact``: lost[j] marks a
    group where a term had bits below q (it is summed again exactly)."""
    n = top.size
    for j in range(n):
        if _LOWEST < top[j] < floor:
            top[j] = floor
        sc = _power(shift - min(max(top[j], -900), 900))
        scale[j] = sc
        x = c[j] * sc
        s[j] = np.int64(x)
        if exact:
            lost[j] = np.float64(s[j]) != x
    t = t0
    while t + 4 <= t1:
        a0, a1, a2, a3 = a[t], a[t + 1], a[t + 2], a[t + 3]
        b0, b1, b2, b3 = B[t], B[t + 1], B[t + 2], B[t + 3]
        if exact:
            for j in range(n):
                sc = scale[j]
                x0, x1 = a0 * b0[j] * sc, a1 * b1[j] * sc
                x2, x3 = a2 * b2[j] * sc, a3 * b3[j] * sc
                v0, v1, v2, v3 = np.int64(x0), np.int64(x1), np.int64(x2), np.int64(x3)
                s[j] += (v0 + v1) + (v2 + v3)
                lost[j] |= ((np.float64(v0) != x0) | (np.float64(v1) != x1) |
                            (np.float64(v2) != x2) | (np.float64(v3) != x3))
        else:
            for j in range(n):
                sc = scale[j]
                s[j] += ((np.int64(a0 * b0[j] * sc) + np.int64(a1 * b1[j] * sc)) +
                         (np.int64(a2 * b2[j] * sc) + np.int64(a3 * b3[j] * sc)))
        t += 4
    for u in range(t, t1):
        a0, b0 = a[u], B[u]
        for j in range(n):
            x0 = a0 * b0[j] * scale[j]
            v0 = np.int64(x0)
            s[j] += v0
            if exact:
                lost[j] |= np.float64(v0) != x0
    if exact and t1 - t0 > 32:          # a sum past 2**53 quanta is not a binary64 number
        for j in range(n):
            lost[j] |= abs(s[j]) >= 2 ** 53


@numba.njit(parallel=True, cache=True)
def _matmul_kernel(A, EA, B, EB, out, group, extra, exact, prec, emin, emax, nearest, flush,
                   floor):
    """out[bt, i, :]: the groups of A[bt, i, :] times every column B[bt, :, j] in order (B
    and its exponents EB laid out (nb, k, n)), each a block FMA with the running result as c,
    starting from out's own values (module docstring).  Per group: the alignment exponent
    (_group_top), the cut terms' sum in integer quanta (_group_sum; the loops over the n
    outputs run along contiguous rows of B and vectorize), one rounding; the exact sum by
    _odd_sum where ``exact`` and a term had bits below the 2**(E - 43) quantum; the raw IEEE
    sum only where an inf or NaN operand meets the group."""
    nb, m, n = out.shape
    k = A.shape[2]
    lowest = _LOWEST
    # The quantum 2**(E - shift): 23 + extra bits below the alignment exponent; the exact
    # path's 2**(E - 43) leaves at most 33 terms below 2**45 quanta each exactly summable.
    shift = 43 if exact else 23 + extra
    fast = emin == -126 and emax == 127 and (not nearest or prec == 24)
    keep = np.int64(-1) << (53 - prec)
    blocks = (m + _ROWS - 1) // _ROWS
    for q in numba.prange(nb * blocks):
        bt, i0 = q // blocks, (q % blocks) * _ROWS
        rows = min(i0 + _ROWS, m) - i0
        c = out[bt, i0:i0 + rows].copy()
        top = np.empty(n, np.int32)
        s = np.empty(n, np.int64)
        scale = np.empty(n)
        lost = np.zeros(n, np.bool_)
        nxt = np.empty(n)
        redo = np.empty(n, np.bool_)
        buf = np.empty(group + 1)
        for t0 in range(0, k, group):
            t1 = min(t0 + group, k)
            for r in range(rows):
                i = i0 + r
                cr = c[r]
                _group_top(cr, EA[bt, i], EB[bt], t0, t1, top)
                _group_sum(cr, A[bt, i], B[bt], t0, t1, top, shift, exact, s, scale, lost,
                           floor)
                # The common case in one vectorized sweep: a finite, nonzero sum whose
                # binary32 result is normal, rounded toward zero (its top prec - 1 fraction
                # bits) or to nearest even into 24 bits (the hardware conversion); every other
                # output is marked and done again below from c's old value.
                odd = not fast
                if fast:
                    for j in range(n):
                        v = np.float64(s[j]) * _power(np.int64(min(max(top[j], -900), 900))
                                                      - shift)
                        b = np.float64(v).view(np.int64)
                        e = ((b >> 52) & 0x7FF) - 1023
                        nxt[j] = np.float64(np.float32(v)) if nearest else \
                            np.int64(b & keep).view(np.float64)
                        redo[j] = ((top[j] >= _SPECIAL) | (top[j] <= lowest) | (e < -126) |
                                   (e > 127) | (exact & lost[j]))
                        odd |= redo[j]
                if odd:
                    for j in range(n):
                        if fast and not redo[j]:
                            continue
                        if top[j] >= _SPECIAL:            # an inf or NaN term: the IEEE sum
                            raw = cr[j]
                            for t in range(t0, t1):
                                raw += A[bt, i, t] * B[bt, t, j]
                            nxt[j] = raw
                        elif top[j] <= lowest:            # every term zero
                            nxt[j] = 0.0
                        else:
                            if exact and lost[j]:
                                buf[0] = cr[j]
                                for t in range(t0, t1):
                                    buf[t - t0 + 1] = A[bt, i, t] * B[bt, t, j]
                                v = _odd_sum(buf, t1 - t0 + 1)
                            else:                         # exact: a power-of-two scaling
                                v = np.float64(s[j]) * _power(np.int64(top[j]) - shift)
                            nxt[j] = _store(v, prec, emin, emax, nearest, flush)
                cr[:] = nxt
        out[bt, i0:i0 + rows] = c


# ----- the presets -------------------------------------------------------------------------
_FASI = "Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 7:e330 (2021)"
_KM = "Khattak and Mikaitis, arXiv 2512.07004 (2025)"


def _ampere(name):
    # Ampere: fp16 and bf16 in groups of 8 with 1 extra bit, tf32 in groups of 4.
    return TensorCore(name, {"binary16": Datapath(8, 1, binary16=True),
                             "bfloat16": Datapath(8, 1), "tf32": Datapath(4, 1)},
                      source=_KM)


def _ada(name, fp16_out=True):
    # Ada: Ampere's paths, and FP8 in groups of 16 cut 10 bits short of binary32.
    return TensorCore(name, {"binary16": Datapath(8, 1, binary16=fp16_out),
                             "bfloat16": Datapath(8, 1), "tf32": Datapath(4, 1),
                             "float8_e4m3fn": Datapath(16, -10),
                             "float8_e5m2": Datapath(16, -10)}, source=_KM)


def _hopper(name):
    # Hopper: fp16 and bf16 in groups of 16 with 2 extra bits, tf32 in groups of 8; FP8 in
    # groups of 32 (two interleaved 16-product halves) cut to 13 fraction bits.
    return TensorCore(name, {"binary16": Datapath(16, 2, binary16=True),
                             "bfloat16": Datapath(16, 2), "tf32": Datapath(8, 2),
                             "float8_e4m3fn": Datapath(32, -10),
                             "float8_e5m2": Datapath(32, -10)}, source=_KM, floor=-133)


PRESETS = {
    # Volta: fp16 only, groups of 4, no extra alignment bit.
    "v100": TensorCore("v100", {"binary16": Datapath(4, 0, binary16=True)},
                       source=f"{_FASI}; {_KM}"),
    "a100": _ampere("a100"), "a2": _ampere("a2"), "a30": _ampere("a30"),
    "ada": _ada("ada"),
    "l40s": _ada("l40s", fp16_out=False),    # L40S gives no binary16 outputs of fp16 inputs
    "h100": _hopper("h100"), "h200": _hopper("h200"),
    # Blackwell: Hopper's fp16/bf16/tf32 paths, binary16 outputs aligned at no less than
    # 2**-15 (the published B200 model); FP8 in groups of 32 summed without a cut and
    # rounded to nearest even (every published B200 FP8 output is that sum).
    "b200": TensorCore("b200", {"binary16": Datapath(16, 2, binary16=True, floor16=-15),
                                "bfloat16": Datapath(16, 2), "tf32": Datapath(8, 2),
                                "float8_e4m3fn": Datapath(32, None, "nearest_even"),
                                "float8_e5m2": Datapath(32, None, "nearest_even")},
                       source=_KM, floor=-133),
}


def tensor_core(name: str) -> TensorCore:
    """The preset of a GPU's matrix unit (PRESETS: v100, a100, a2, a30, ada, l40s, h100,
    h200, b200); ValueError naming the presets otherwise."""
    key = str(name).lower()
    if key not in PRESETS:
        raise ValueError(f"unknown tensor core {name!r} (choose from "
                         f"{', '.join(PRESETS)})")
    return PRESETS[key]

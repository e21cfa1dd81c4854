"""Compiled products and reductions of the emulated backend, bit for bit its generic path.

``Backend._fold`` and ``Backend._contract`` (numerics/backend.py) define the results: a sum,
product, dot product or matmul is a fixed sequence of the accumulator's primitives (add,
multiply, fma), each the exact result rounded once, in the policy's order (sequential,
pairwise level by level, blocked:K, split:S; fused chunks with fma).  This module runs
the same sequence compiled, in parallel over blocks of output elements (``numba.prange``
over outputs only, never over the accumulation order), so each output is the same rounded
value.  A dot product over broadcast operands (matmul, conv's window products) becomes a
batched matmul (``layout``): each distinct operand value is read, and rounded into the
accumulator, once.
``strategy`` says where it applies; numerics/emulated.py takes it there and the generic
path everywhere else (stochastic rounding, flag tracking, formats wider than the shortcuts
below, a subclass that watches primitive calls).

The same holds for the accumulations of numerics.policy that are not folds
(Backend._hardware_contract) and for scans (Backend._prefix):

- two-level accumulation (Policy.promote): ``runs`` gives each output's runs of products
  summed in the narrow format, as one batched matmul whose batches are the runs (the run
  axis joins the layout's batch axis); the caller rounds them into the accumulator and folds
  them there (``fold``).
- fixed-point alignment (Policy.fixed_point): ``fixed_point``, a kernel of its own (one
  compiled copy, the mode read at run time): per block of products, the largest exponent,
  then the terms truncated by masking their low bits (the same values as _aligned_sum's
  trunc(x / q) * q), summed, and rounded once by formats.fast.round_one, as
  formats.round_to rounds; ``fixed_point_exact`` says where that gives the generic bits.
- scans (cumsum, cumprod): ``scan``, sequential along the axis and vectorized over the
  other elements: the ``odd`` strategy in a kernel of the same primitives (``_apply``);
  native32 and native64 by numpy's ufunc.accumulate on float32 / float64 (strictly in order,
  each step IEEE's correctly rounded operation).

Operands are values of the accumulator's format, as every primitive of the backend assumes.
How each primitive is evaluated (strategies):

- ``odd`` (formats where numerics.eft is exact: p <= 26, emax <= 500, qmin >= -500; every
  deterministic mode, fused or not).  A product of two p-bit values has at most 2p <= 52
  bits and stays a normal binary64 number in these ranges, so the binary64 product is
  exact and is rounded once.  A sum is compressed by rounding to odd: the binary64 sum and
  the sign of its TwoSum error (Knuth) give the exact sum rounded to odd at 53 bits, which
  rounds into p <= 51 bits as the exact sum does in every nearest and directed mode (Boldo
  & Melquiond, IEEE TC 2008); fma is the exact product then the same compressed sum.
  Under round-to-nearest-even the sum skips TwoSum when p <= 25: rounding the binary64 sum
  of two p-bit values again to p bits is innocuous for + - * / sqrt when 53 >= 2p + 2
  (Figueroa, "When is double rounding innocuous?", SIGNUM 1995).  An exact zero sum takes
  IEEE 754-2019 6.3's sign (-0 under downward rounding unless both operands are +0).
  Each rounding first tries formats.kernel's in-range shortcut (a normal result that
  cannot overflow: a few integer operations, so the loop over output elements vectorizes);
  a block of outputs that met anything else (subnormal or overflowing results, infinities,
  NaN, a -0 in a format without one) is computed again with the complete routine
  (formats.fast.round_one after numerics.eft's exact operation), the same bits.
  Round-to-nearest-even has a kernel of its own, compiled with the mode as a constant;
  the other modes share one that reads the mode at run time (about 2.5 times slower,
  and a kernel costs seconds to compile).
- ``native32``: binary32 accumulation under round-to-nearest-even without fma is plain
  float32 arithmetic: IEEE 754 makes the hardware's float32 + and * the correctly rounded
  operations (numba emits them as single-precision instructions and, without fastmath,
  never contracts a * b + c into an fma).  Were the float32 value computed in binary64 and
  rounded to binary32 instead, Figueroa's bound 53 >= 2 * 24 + 2 would make it the same.
- ``native64``: binary64 accumulation under round-to-nearest-even without fma: the
  hardware's float64 + and *, as the generic path's numpy arithmetic.
- ``narrow32``: formats of p <= 11 bits whose normal range lies inside binary32's
  (bfloat16, binary16, the float8 formats) under round-to-nearest-even without fma: the
  hardware's float32 + and * then an integer rounding of the float32 pattern to p bits.  A
  product of two p-bit values has at most 22 <= 24 bits: exact unless it leaves float32's
  normal range (then the block is computed again; one that underflows to zero in float32
  is below 2**-150, whose rounding to nearest is a zero of the same sign in every such
  format).  The float32 sum rounded again to p bits is the correctly rounded sum: Figueroa's
  24 >= 2p + 2.  The same in-range shortcut as ``odd`` on 32-bit lanes, twice as many per
  vector as binary64's; blocks that leave it are computed again by ``odd``'s complete
  routine in binary64.

Every NaN result is the canonical quiet NaN, as the generic path writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from roundoff_coverage import formats
from roundoff_coverage.formats.fast import (in_range_window, round_in_range, round_one,
                                            round_params, threads_for)

from . import eft
from .eft import ADD, FMA, MULTIPLY, odd_bits
from .policy import block_size

__all__ = ["STRATEGIES", "strategy", "Layout", "layout", "fold", "contract", "fold_calls",
           "contract_calls", "runs", "fixed_point_exact", "fixed_point", "scan"]

STRATEGIES = ("odd", "native32", "native64", "narrow32")
_BINARY32, _BINARY64 = formats.CATALOG["binary32"], formats.CATALOG["binary64"]
_NEAREST_EVEN, _DOWNWARD = 0, 4
_ABS = 0x7FFFFFFFFFFFFFFF
_SIGN = -0x8000000000000000                    # the int64 sign bit
# Output columns per block of the rounding kernels: their vectorized loops run over one
# block's columns.
_WIDTH = 64


def strategy(fmt, mode: str, fused: bool) -> str | None:
    """The strategy (module doc) that evaluates ``fmt``'s add, multiply and (``fused``) fma
    under ``mode`` exactly as the emulated backend's primitives do; None where none does
    (stochastic rounding, formats beyond numerics.eft's range but binary64)."""
    fmt = formats.get(fmt)
    code = formats.mode_code(mode)
    if code == formats.MODES.index("stochastic"):
        # Rounding to odd keeps every deterministic decision, not the stochastic threshold.
        return None
    if code == _NEAREST_EVEN and not fused and fmt == _BINARY32:
        return "native32"
    if code == _NEAREST_EVEN and not fused and fmt == _BINARY64:
        return "native64"
    if code == _NEAREST_EVEN and not fused and 2 <= fmt.precision <= 11 and \
            fmt.emin >= -126 and fmt.emax <= 127:
        return "narrow32"
    return "odd" if eft.supported(fmt) else None


# ----- primitive counts (the generic path's calls, for EmulatedBackend.calls) ---------------
def fold_calls(n: int, order: str) -> int:
    """How many primitive calls Backend._fold makes on n >= 1 terms in ``order``: one per
    level (pairwise), one per term after the first otherwise."""
    if order != "pairwise":
        return n - 1
    levels = 0
    while n > 1:
        n, levels = (n + 1) // 2, levels + 1
    return levels


def contract_calls(k: int, order: str, fused: bool) -> int:
    """How many primitive calls Backend._contract makes on k >= 1 terms, besides the
    roundings into and out of the accumulator: one multiply and the fold, or (fused) a
    multiply or fma per term and an add per chunk after the first."""
    if not fused:
        return 1 + fold_calls(k, order)
    size = block_size(order, k) or k
    return k + (k + size - 1) // size - 1


# ----- the primitives, evaluated per element ---------------------------------------------------
@numba.njit(cache=True, error_model="numpy")
def _exact_round(op, x, y, z, f, mode):
    """The complete routine, right for every input: numerics.eft's exact op(x, y, z) rounded
    to odd, then formats.fast.round_one into the format ``f`` (``_format_tuple``)."""
    b = odd_bits(op, x, y, z, mode == _DOWNWARD)[0]
    return np.int64(round_one(b, f[0], f[1], f[2], f[3], f[4], mode, 0, 0)[0]).view(np.float64)


@numba.njit(inline="always", error_model="numpy")
def _apply(op, x, y, z, f, mode, figueroa, full):
    """(value, ok): op (ADD, MULTIPLY or FMA) of the format values x, y (, z), rounded.
    ``full``: the complete routine.  Otherwise the in-range shortcut, ok False where its
    premises fail (the caller then computes the block again in full).  One flat function:
    numba inlines it at every call site, and nested helpers would multiply the compile
    time."""
    x, y, z = np.float64(x), np.float64(y), np.float64(z)
    if full:
        return _exact_round(op, x, y, z, f, mode), True
    u = x if op == ADD else x * y                   # a product of format values is exact
    v = y if op == ADD else z
    if op == MULTIPLY:
        b = np.float64(u).view(np.int64)
    elif op == ADD and figueroa:
        b = np.float64(u + v).view(np.int64)        # Figueroa 1995: 53 >= 2p + 2
    else:
        # The exact u + v rounded to odd: TwoSum's error err = u + v - s is exact (Knuth),
        # and a nonzero one makes an even s step one binary64 ulp toward it.  Unlike
        # numerics.eft's version, no branches on infinities or NaN (the in-range test sends
        # those to eft's), which keeps the loops vectorizable.
        s = u + v
        bb = s - u
        err = (u - (s - bb)) + (v - bb)
        b = np.float64(s).view(np.int64)
        if err != 0.0 and (b & 1) == 0:
            b += 1 if (err > 0.0) == (s > 0.0) else -1
        if mode == _DOWNWARD and s == 0.0:
            # IEEE 754-2019 6.3: an exact zero sum is -0 under downward rounding unless
            # both operands are +0.
            b = (np.float64(u).view(np.int64) | np.float64(v).view(np.int64)) & _SIGN
    # In range: 2**emin <= |x| < 2**emax (formats.fast.in_range_window).  A zero is its own
    # rounding where the format has both zeros (fnuz turns -0 into +0: not here).  A sum
    # of two format values below 2**emin is exact (a subnormal sum is exact: Hauser, ACM
    # TOPLAS 1996, 3.4.1), a value of the format, which the shortcut keeps: there only the
    # top of the range is checked (f[9] = 0), unless the format flushes subnormals or has
    # no -0 (f[9] = the window's bottom again).
    e = (b >> 52) & 0x7FF
    if op == ADD:
        ok = (e >= f[9]) & (e <= f[6])
    else:
        ok = ((e >= f[5]) & (e <= f[6])) | (((b & _ABS) == 0) & (f[8] != 0))
    return np.int64(round_in_range(b, f[7], mode, 0, 0)[0]).view(np.float64), ok


_ABS32, _EXP32 = np.int32(0x7FFFFFFF), np.int32(0xFF)


@numba.njit(inline="always", error_model="numpy")
def _apply32(op, x, y, g):
    """``narrow32``'s (value, ok) of op (ADD or MULTIPLY) of the format values x, y (float32):
    the float32 result rounded to nearest even at p bits by its pattern (``_narrow_tuple``
    g: the fraction bits dropped, the in-range window of float32 exponent fields, the bottom
    of a sum's window, whether zeros are their own rounding); ok False outside the window,
    as ``_apply``'s shortcut."""
    u, v = np.float32(x), np.float32(y)
    b = np.float32(u + v if op == ADD else u * v).view(np.int32)
    e = (b >> np.int32(23)) & _EXP32
    if op == ADD:
        ok = (e >= g[3]) & (e <= g[2])
    else:
        ok = ((e >= g[1]) & (e <= g[2])) | (((b & _ABS32) == np.int32(0)) & (g[4] != 0))
    # round_in_range's nearest-even carry on the 32-bit pattern (a zero low part adds less
    # than its unit: unchanged).
    add = (np.int32(1) << (g[0] - np.int32(1))) - np.int32(1) + ((b >> g[0]) & np.int32(1))
    r = (b + add) & ~((np.int32(1) << g[0]) - np.int32(1))
    return np.int32(r).view(np.float32), ok


def _narrow_tuple(fmt) -> tuple:
    """``_apply32``'s int32 parameters for ``fmt``: (24 - p, the window's float32 exponent
    fields emin + 127 .. emax + 126 (a normal result that cannot overflow), the bottom of a
    sum's window (0 where a subnormal sum, exact, keeps its value: the format has -0 and
    keeps subnormals), 1 where the format has -0)."""
    lo = fmt.emin + 127
    sums = 0 if fmt.has_negative_zero and not fmt.flush_subnormals else lo
    return tuple(np.int32(v) for v in (24 - fmt.precision, lo, fmt.emax + 126, sums,
                                       int(fmt.has_negative_zero)))


# ----- the kernels ---------------------------------------------------------------------------
# A block of outputs is one output row i of batch bt and up to ``width`` columns j0 ...
# j0 + w - 1; its terms are A[bt, i, t] * B[bt, t, j] (rounded), or B[bt, t, j] itself in a
# fold (has_a False), combined by add (by multiply in a fold with ``mul``).  The strategy and
# the mode are constants of a kernel's closure: numba prunes the branches of the other
# strategies, the rounding's branches fold away, and each loop over a block's columns
# compiles to straight-line code that vectorizes.  With the mode -1 the kernel reads it at
# run time (``mode_arg``), and ``full_arg`` makes it use the complete routine.
# Rows of a block's scratch: the running block, the closed blocks' total, the term of a step,
# then the pairwise stack.
_ACC, _TOT, _TERM, _STACK = 0, 1, 2, 3


def _block_width(native: bool) -> int:
    """Output columns per block.  Hardware arithmetic vectorizes so well that a block's
    bookkeeping per term would dominate narrow blocks."""
    return _WIDTH * (8 if native else 1)


def _make_kernel(native: bool, const_mode: int, figueroa: bool, narrow: bool = False):
    """The kernel: out[bt, i, j] for the blocks ``ids``, in parallel (one block per
    iteration, each in its own order); ok[q] False where block ids[q] left the in-range
    shortcut.  ``blk``: block length of the sequential (one block, blk = k) and blocked:K
    orders (Backend._fold: each block folded from its first term, then the block results
    in order) and of fma's chunks (Backend._contract); 0: the pairwise order.  ``narrow``:
    the ``narrow32`` strategy (``f`` then ``_narrow_tuple``'s; no fma)."""
    width = _block_width(native)

    @numba.njit(parallel=True, cache=True)
    def kernel(A, B, out, ids, blk, fused, has_a, mul, f, mode_arg, full_arg, ok):
        m, n, k = out.shape[1], out.shape[2], B.shape[1]
        nc = (n + width - 1) // width
        depth_max = _STACK + 1
        rest = k
        while rest:
            rest >>= 1
            depth_max += 1
        for q in numba.prange(ids.size):
            bt, i, j0 = ids[q] // (m * nc), (ids[q] // nc) % m, (ids[q] % nc) * width
            # Column indices are unsigned: numba then emits no negative-index wraparound,
            # which would keep the column loops from vectorizing.  Rows are indexed in
            # place: a view per term would cost two atomic reference-count updates.
            u0, uw = np.uint64(j0), np.uint64(min(width, n - j0))
            rows = np.empty((depth_max, width), out.dtype)
            # The mode is read here, inside the parallel loop's body, where a constant one
            # stays a constant (a value from outside arrives as an argument).
            mode = const_mode if const_mode >= 0 else mode_arg
            full = full_arg if const_mode < 0 else False
            good = True
            depth = _STACK                                  # the stack's next free row
            # A sequential dot product (the most common case), each step's product and sum
            # in one pass over the block's columns: the general loop below, without the
            # term's trip through its scratch row.
            direct = blk == k and has_a and not fused and not mul and not native and k > 0
            if direct:
                a = A[bt, i, 0]
                for j in range(uw):
                    if narrow:
                        v, g = _apply32(MULTIPLY, a, B[bt, 0, u0 + j], f)
                    else:
                        v, g = _apply(MULTIPLY, a, B[bt, 0, u0 + j], 0.0, f, mode, figueroa,
                                      full)
                    rows[_TOT, j] = v
                    good &= g
                for t in range(1, k):
                    a = A[bt, i, t]
                    for j in range(uw):
                        if narrow:
                            v, g = _apply32(MULTIPLY, a, B[bt, t, u0 + j], f)
                            w, h = _apply32(ADD, rows[_TOT, j], v, f)
                        else:
                            v, g = _apply(MULTIPLY, a, B[bt, t, u0 + j], 0.0, f, mode,
                                          figueroa, full)
                            w, h = _apply(ADD, rows[_TOT, j], v, 0.0, f, mode, figueroa,
                                          full)
                        rows[_TOT, j] = w
                        good &= g & h
            for t in range(0 if direct else k + 1):
                # The merges owed before term t.  Blocked: the step of term t - 1 (its term
                # in row _TERM), then, where a block closes, its result into the total (the
                # first block is copied).  Pairwise (Backend._fold level by level) as a
                # stack of complete power-of-two subtrees: term t - 1 merged once per
                # trailing one bit of t - 1; at the end the subtrees merge from the right,
                # which is where level by level carries an odd last element up to its
                # partner.
                stepped = blk > 0 and t > 0 and (t - 1) % blk != 0 and not fused
                closes = blk > 0 and t > 0 and (t % blk == 0 or t == k)
                merges = int(stepped) + int(closes and t > blk)
                if blk == 0 and t == k:
                    merges = depth - _STACK - 1
                elif blk == 0 and t > 0:
                    c = t - 1
                    while c & 1:
                        merges += 1
                        c >>= 1
                for r in range(merges):
                    if blk == 0:
                        x, y = depth - 2, depth - 1
                        depth -= 1
                    else:
                        x, y = (_ACC, _TERM) if r == 0 and stepped else (_TOT, _ACC)
                    # ``if native`` on the closure's constant: numba drops the other
                    # strategy's loops before it inlines anything into them.
                    if native:
                        for j in range(uw):
                            rows[x, j] = rows[x, j] * rows[y, j] if mul else \
                                rows[x, j] + rows[y, j]
                    elif narrow:
                        for j in range(uw):
                            v, g = _apply32(MULTIPLY if mul else ADD, rows[x, j], rows[y, j],
                                            f)
                            rows[x, j] = v
                            good &= g
                    elif mul:
                        for j in range(uw):
                            v, g = _apply(MULTIPLY, rows[x, j], rows[y, j], 0.0, f, mode,
                                          figueroa, full)
                            rows[x, j] = v
                            good &= g
                    else:
                        for j in range(uw):
                            v, g = _apply(ADD, rows[x, j], rows[y, j], 0.0, f, mode,
                                          figueroa, full)
                            rows[x, j] = v
                            good &= g
                if closes and t <= blk:
                    for j in range(uw):
                        rows[_TOT, j] = rows[_ACC, j]       # the first block closes
                if t == k:
                    break
                # Term t: pushed (pairwise), a block's first value, a step's term (merged
                # into the block next), or fused into the running block.
                first = blk == 0 or t % blk == 0
                a = A[bt, i, t] if has_a else A[0, 0, 0]
                if fused and has_a and not first:
                    if native or narrow:
                        continue                    # never: no fused native strategy
                    for j in range(uw):
                        v, g = _apply(FMA, a, B[bt, t, u0 + j], rows[_ACC, j], f, mode,
                                      figueroa, full)
                        rows[_ACC, j] = v
                        good &= g
                    continue
                d = depth if blk == 0 else (_ACC if first else _TERM)
                depth += 1 if blk == 0 else 0
                if not has_a:
                    for j in range(uw):
                        rows[d, j] = B[bt, t, u0 + j]
                elif native:
                    for j in range(uw):
                        rows[d, j] = a * B[bt, t, u0 + j]
                elif narrow:
                    for j in range(uw):
                        v, g = _apply32(MULTIPLY, a, B[bt, t, u0 + j], f)
                        rows[d, j] = v
                        good &= g
                else:
                    for j in range(uw):
                        v, g = _apply(MULTIPLY, a, B[bt, t, u0 + j], 0.0, f, mode, figueroa,
                                      full)
                        rows[d, j] = v
                        good &= g
            r = _STACK if blk == 0 else _TOT
            for j in range(uw):
                out[bt, i, u0 + j] = rows[r, j]
            ok[q] = good

    return kernel


_KERNELS: dict = {}


def _kernel(native: bool, mode: int, figueroa: bool, narrow: bool = False):
    key = (native, mode, figueroa, narrow)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernel(*key)
    return _KERNELS[key]


def _format_tuple(fmt) -> tuple:
    """round_params, the in-range window (lo, hi, shift), 1 where zeros round to themselves
    (the format has -0), and the bottom of a sum's window (``_apply``), as one int64 tuple
    for the kernels."""
    p, qmin, emax, mtop, params = round_params(fmt)
    lo, hi, shift = in_range_window.py_func(p, qmin, emax)
    sums = 0 if fmt.has_negative_zero and not fmt.flush_subnormals else lo
    return (p, qmin, emax, mtop, params, lo, hi, shift, int(fmt.has_negative_zero), sums)


@numba.njit(parallel=True, cache=True)
def _transpose(x, out):
    """out[b, t, j] = x[b, j, t]: each output column's terms laid along the rows the kernels
    read, in tiles of 32 x 32 that stay in cache (numpy's transposing copy walks memory
    with a stride and is several times slower)."""
    nb, n, k = x.shape
    tn, tk = (n + 31) // 32, (k + 31) // 32
    for c in numba.prange(nb * tn * tk):
        b, j0, t0 = c // (tn * tk), (c // tk) % tn * 32, c % tk * 32
        for t in range(t0, min(t0 + 32, k)):
            for j in range(j0, min(j0 + 32, n)):
                out[b, t, j] = x[b, j, t]


def _run(how, fmt, mode, order, fused, left, cols, mul):
    """The (nb, m, n) float64 results, NaN canonical, by strategy ``how``: output (b, i, j)
    folds the terms cols[b, j, :] (left None), or the products left[b, i, t] * cols[b, j, t];
    ``left`` and ``cols`` are C-contiguous float64 values of ``fmt``."""
    narrow = how == "narrow32"
    dtype = np.float32 if how in ("native32", "narrow32") else np.float64
    nb, n, k = cols.shape
    B = np.empty((nb, k, n), dtype)
    # A transposing copy streams memory: threads pay from about a million values on.
    with threads_for(B.size >> 6):
        _transpose(cols, B)
    A = np.zeros((1, 1, 1), dtype) if left is None else np.ascontiguousarray(left, dtype)
    out = np.empty((nb, A.shape[1] if left is not None else 1, n), dtype)
    code = formats.mode_code(mode)
    native = how in ("native32", "native64")
    args = (0 if order == "pairwise" else (block_size(order, k) or k), fused, left is not None,
            mul)
    full = _format_tuple(fmt)
    ids = np.arange(out.shape[0] * out.shape[1] * -(-n // _block_width(native)))
    ok = np.ones(ids.size, dtype=np.bool_)
    # Round-to-nearest-even (the default) has its own compiled copy, with Figueroa's sums
    # where p <= 25; the other modes share one that reads the mode at run time, and that
    # copy also computes again, with the complete routine, the blocks that met a result
    # outside the shortcut's range (each copy costs seconds to compile).
    own = native or narrow or (code == _NEAREST_EVEN and fmt.precision <= 25)
    with threads_for(out.size * k):
        _kernel(native, code if own else -1, own and not native, narrow)(
            A, B, out, ids, *args, _narrow_tuple(fmt) if narrow else full, code, False, ok)
    redo = ids[~ok]
    if redo.size:
        if narrow:                   # the complete routine runs on binary64 values
            A, B, out = (v.astype(np.float64) for v in (A, B, out))
        with threads_for(redo.size * _WIDTH * k):
            _kernel(False, -1, False)(A, B, out, redo, *args, full, code, True,
                                      ok[:redo.size])
    res = out.astype(np.float64)
    res[np.isnan(res)] = np.nan
    return res


# ----- entry points ----------------------------------------------------------------------------
def fold(x, op: str, fmt, mode: str, order: str, how: str) -> np.ndarray:
    """Backend._fold of ``x`` (..., n), n >= 1, values of ``fmt``, with fmt's ``op`` (add or
    multiply) under ``mode`` in ``order``, by strategy ``how``: float64 array x.shape[:-1]."""
    if op not in ("add", "multiply"):
        raise ValueError(f"products.fold: op must be add or multiply (got {op!r})")
    x = np.asarray(x)
    lead = x.shape[:-1]
    cols = np.ascontiguousarray(x, dtype=np.float64).reshape(1, -1, x.shape[-1])
    return _run(how, formats.get(fmt), mode, order, False, None, cols,
                op == "multiply").reshape(lead)


@dataclass(frozen=True)
class Layout:
    """A dot product over broadcast operands as a batched matmul.  Each axis of the result
    is a batch axis (both operands vary along it), an m axis (only a varies), an n axis
    (only b), or a replicated one (neither).  ``left`` (nb, m, k) and ``right`` (nb, n, k)
    hold the operands' distinct values (float64 copies); ``assemble`` puts the (nb, m, n)
    results back in the broadcast shape."""

    left: np.ndarray
    right: np.ndarray
    sizes: tuple            # the result's sizes in batch, m, n, replicated axis order
    inverse: tuple          # the permutation back to the result's axis order
    shape: tuple            # the broadcast result shape

    def assemble(self, res: np.ndarray) -> np.ndarray:
        out = np.transpose(res.reshape(self.sizes), self.inverse)
        return np.broadcast_to(out, self.shape).copy()     # C order, 0-d kept


def layout(a, b, unshared: bool = False) -> Layout | None:
    """The batched-matmul layout of the dot products of ``a`` and ``b``, arrays of one shape
    (..., k) as Backend.dot and Backend.matmul broadcast them (a broadcast axis has stride
    0); None when no value is shared between outputs (every axis a batch axis), unless
    ``unshared``: then each output is a batch of one (m = n = 1)."""
    lead, k = a.shape[:-1], len(a.shape) - 1
    kind = []
    for d, size in enumerate(lead):
        va, vb = size > 1 and a.strides[d] != 0, size > 1 and b.strides[d] != 0
        kind.append("b" if va and vb else "m" if va else "n" if vb else "r")
    axes = {c: [d for d in range(k) if kind[d] == c] for c in "bmnr"}
    if not axes["m"] and not axes["n"] and not unshared:
        return None

    def distinct(x, own):
        keep = tuple(slice(None) if kind[d] in ("b", own) else slice(0, 1) for d in range(k))
        rest = [d for d in range(k) if kind[d] not in ("b", own)]
        moved = np.transpose(x[keep + (slice(None),)], axes["b"] + axes[own] + rest + [k])
        # An own copy: a view of np.broadcast_arrays' output makes numba warn (as in
        # numerics.emulated._broadcast64).
        return np.array(moved, dtype=np.float64, order="C").reshape(
            int(np.prod([lead[d] for d in axes["b"]], dtype=np.int64)), -1, x.shape[-1])

    order = axes["b"] + axes["m"] + axes["n"] + axes["r"]
    sizes = tuple(lead[d] for d in order[:len(order) - len(axes["r"])]) + (1,) * len(axes["r"])
    return Layout(distinct(a, "m"), distinct(b, "n"), sizes, tuple(np.argsort(order)), lead)


def contract(lay: Layout, left, right, fmt, mode: str, order: str, fused: bool,
             how: str) -> np.ndarray:
    """Backend._contract's running sums for ``lay`` (from ``layout``), ``left`` and ``right``
    being lay.left and lay.right rounded into the accumulator format ``fmt``: float64 array
    of the broadcast shape, by strategy ``how``.  The loops vectorize over the columns of
    the kernel, the n axes, or the m axes where those are the longer (products commute)."""
    return lay.assemble(_products(left, right, formats.get(fmt), mode, order, fused, how))


def _products(left, right, fmt, mode, order, fused, how):
    """The (nb, m, n) running sums of the batched matmul of left (nb, m, k) and right
    (nb, n, k), values of ``fmt``, by ``_run``."""
    left, right = (np.ascontiguousarray(v, dtype=np.float64) for v in (left, right))
    swap = right.shape[1] < min(left.shape[1], _WIDTH)
    rows, cols = (right, left) if swap else (left, right)
    res = _run(how, fmt, mode, order, fused, rows, cols, False)
    return np.swapaxes(res, 1, 2) if swap else res


# ----- how accelerators accumulate (numerics.policy's promote and fixed_point) ----------------
def runs(lay: Layout, left, right, fmt, mode: str, length: int, fused: bool,
         how: str) -> np.ndarray:
    """Two-level accumulation's inner level (Backend._hardware_contract, Policy.promote) for
    ``lay``: each output's runs of ``length`` consecutive products along k, each run summed
    sequentially in ``fmt`` (products rounded, then added; an fma chain when ``fused``),
    ``left`` and ``right`` being lay.left and lay.right rounded into ``fmt``.  float64
    (nb, m, n, C) in the layout's batched order, C = ceil(k / length) runs, by strategy
    ``how``.  The runs are the batches of one batched matmul (the run axis joins the batch
    axis); a shorter last run is a second one."""
    fmt = formats.get(fmt)
    left, right = (np.ascontiguousarray(v, dtype=np.float64) for v in (left, right))
    (nb, m, k), n = left.shape, right.shape[1]
    full, rest = divmod(k, length)

    def chunked(x):
        c = x[..., :full * length].reshape(nb, x.shape[1], full, length)
        return c.transpose(0, 2, 1, 3).reshape(nb * full, x.shape[1], length)

    parts = []
    if full:
        parts.append(_products(chunked(left), chunked(right), fmt, mode, "sequential", fused,
                               how).reshape(nb, full, m, n))
    if rest:
        parts.append(_products(left[..., full * length:], right[..., full * length:], fmt,
                               mode, "sequential", fused, how)[:, None])
    return np.moveaxis(np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0], 1, -1)


def fixed_point_exact(fmt, acc, bits: int, block: int) -> bool:
    """Whether ``fixed_point`` gives Backend._fixed_point_dot's bits for storage format
    ``fmt`` and accumulator ``acc``: both within numerics.eft's range, so every product and
    running sum is 0, a normal binary64 number, inf or NaN, and no binary64 sum of them
    overflows; and a block's sum of truncated terms is exact in binary64 whatever the order
    (block + 1 terms, each below 2**(bits + 1) quanta: at most 2**53 quanta in all)."""
    fmt, acc = formats.get(fmt), formats.get(acc)
    return eft.supported(fmt) and eft.supported(acc) and \
        (block + 1) * ((1 << (bits + 1)) - 1) <= 1 << 53


@numba.njit(inline="always")
def _truncated(x, base):
    """x (0, a normal binary64 number, inf or NaN) truncated toward zero to a multiple of the
    quantum 2**(base - 1075), sign kept: x's last bit weighs 2**(max(field, 1) - 1075), so
    the c = base - max(field, 1) lowest bits of its pattern fall below the quantum (all of
    its 53 bits when c >= 53: a zero).  The same value as _aligned_sum's trunc(x / q) * q."""
    b = np.float64(x).view(np.int64)
    c = base - max((b >> 52) & 0x7FF, 1)
    mask = _SIGN if c >= 53 else np.int64(-1) << max(c, 0)
    return np.int64(b & mask).view(np.float64)


@numba.njit(parallel=True, cache=True)
def _fixed_point_kernel(A, B, out, bits, block, f, mode):
    """out[bt, i, j] = Backend._fixed_point_dot of A[bt, i, :] and the terms B[bt, :, j]
    (values of a storage format within numerics.eft's range; B as ``_run`` lays it out),
    for blocks of _WIDTH output columns in parallel, each along k in order: per block of
    ``block`` products, the terms (running sum, products: exact in binary64) truncated to
    multiples of 2**(e - bits), e the largest exponent among them, summed (exact) and rounded
    once into the accumulator (``_format_tuple``) under ``mode``; a column meeting an inf or
    NaN takes the IEEE sum of its raw terms instead (no finite sum overflows here, so that
    sum's order does not matter)."""
    m, n, k = out.shape[1], out.shape[2], B.shape[1]
    nc = (n + _WIDTH - 1) // _WIDTH
    for q in numba.prange(out.shape[0] * m * nc):
        bt, i, j0 = q // (m * nc), (q // nc) % m, (q % nc) * _WIDTH
        u0, uw = np.uint64(j0), np.uint64(min(_WIDTH, n - j0))
        total = np.zeros(_WIDTH)                    # the running sum starts at +0
        top = np.empty(_WIDTH, np.int64)
        special = np.empty(_WIDTH, np.bool_)
        s = np.empty(_WIDTH)
        for t0 in range(0, k, block):
            t1 = min(t0 + block, k)
            # floor(log2) of the largest |term|: every finite term is 0 or a normal binary64
            # number, whose floor(log2) is its exponent field less 1023; the field 0x7FF is
            # an inf or NaN.
            for j in range(uw):
                top[j] = (np.float64(total[j]).view(np.int64) >> 52) & 0x7FF
            for t in range(t0, t1):
                a = A[bt, i, t]
                for j in range(uw):
                    top[j] = max(top[j], (np.float64(a * B[bt, t, u0 + j]).view(np.int64)
                                          >> 52) & 0x7FF)
            any_special = False
            for j in range(uw):
                special[j] = top[j] == 0x7FF
                any_special |= special[j]
                # The quantum 2**max(e - bits, -1074) as _truncated's base (its exponent
                # plus 1075); an all-zero block keeps its zeros under any quantum.
                top[j] = max(top[j] - 1023 - bits, -1074) + 1075
                # The sum from +0: an exact zero sum is +0, as numpy's sum gives it.
                s[j] = 0.0 + _truncated(total[j], top[j])
            for t in range(t0, t1):
                a = A[bt, i, t]
                for j in range(uw):
                    s[j] += _truncated(a * B[bt, t, u0 + j], top[j])
            if any_special:
                for j in range(uw):
                    if special[j]:
                        raw = 0.0 + total[j]
                        for t in range(t0, t1):
                            raw += A[bt, i, t] * B[bt, t, u0 + j]
                        s[j] = raw
            for j in range(uw):
                total[j] = np.int64(round_one(np.float64(s[j]).view(np.int64), f[0], f[1],
                                              f[2], f[3], f[4], mode, 0, 0)[0]).view(np.float64)
        for j in range(uw):
            out[bt, i, u0 + j] = total[j]


def fixed_point(lay: Layout, bits: int, block: int, acc, mode: str) -> np.ndarray:
    """Backend._fixed_point_dot for ``lay`` (from ``layout``: lay.left and lay.right hold
    storage values; ``fixed_point_exact`` must hold): the running sums, float64 values of
    the accumulator format ``acc`` in the broadcast shape, NaN canonical, each block's sum
    rounded under ``mode``.  Products commute, so the longer of m and n runs along the
    kernel's columns."""
    left, right = lay.left, lay.right
    swap = right.shape[1] < min(left.shape[1], _WIDTH)
    rows, cols = (right, left) if swap else (left, right)
    nb, n, k = cols.shape
    B = np.empty((nb, k, n))
    with threads_for(B.size >> 6):
        _transpose(cols, B)
    out = np.empty((nb, rows.shape[1], n))
    with threads_for(out.size * k):
        _fixed_point_kernel(rows, B, out, bits, block, _format_tuple(formats.get(acc)),
                            formats.mode_code(mode))
    out[np.isnan(out)] = np.nan
    return lay.assemble(np.swapaxes(out, 1, 2) if swap else out)


# ----- scans (cumsum, cumprod) ------------------------------------------------------------------
def _make_scan_kernel(const_mode: int, figueroa: bool):
    """The scan kernel: out[t, j] = out[t - 1, j] op X[t, j] (from the last row down when
    ``reverse``), the first row copied, for the column blocks ``ids`` in parallel; ``ok``,
    ``mode_arg`` and ``full_arg`` as in ``_make_kernel``."""

    @numba.njit(parallel=True, cache=True)
    def kernel(X, out, ids, mul, reverse, f, mode_arg, full_arg, ok):
        n, r = X.shape
        for q in numba.prange(ids.size):
            j0 = ids[q] * _WIDTH
            u0, uw = np.uint64(j0), np.uint64(min(_WIDTH, r - j0))
            mode = const_mode if const_mode >= 0 else mode_arg
            full = full_arg if const_mode < 0 else False
            good = True
            first = n - 1 if reverse else 0
            for j in range(uw):
                out[first, u0 + j] = X[first, u0 + j]
            for step in range(1, n):
                t, p = (n - 1 - step, n - step) if reverse else (step, step - 1)
                if mul:
                    for j in range(uw):
                        v, g = _apply(MULTIPLY, out[p, u0 + j], X[t, u0 + j], 0.0, f, mode,
                                      figueroa, full)
                        out[t, u0 + j] = v
                        good &= g
                else:
                    for j in range(uw):
                        v, g = _apply(ADD, out[p, u0 + j], X[t, u0 + j], 0.0, f, mode,
                                      figueroa, full)
                        out[t, u0 + j] = v
                        good &= g
            ok[q] = good

    return kernel


_SCAN_KERNELS: dict = {}


def _scan_kernel(mode: int, figueroa: bool):
    key = (mode, figueroa)
    if key not in _SCAN_KERNELS:
        _SCAN_KERNELS[key] = _make_scan_kernel(*key)
    return _SCAN_KERNELS[key]


def scan(x, op: str, fmt, mode: str, reverse: bool, how: str) -> np.ndarray:
    """Backend._prefix of ``x`` (..., n), n >= 1, values of ``fmt``: the inclusive prefixes
    x[..., 0] op ... op x[..., i] (from the end when ``reverse``) with fmt's ``op`` (add or
    multiply) under ``mode``, each step rounded once, by strategy ``how``: float64 array of
    x's shape, NaN canonical.  Sequential along the axis, parallel over the rest."""
    if op not in ("add", "multiply"):
        raise ValueError(f"products.scan: op must be add or multiply (got {op!r})")
    fmt, x = formats.get(fmt), np.asarray(x, dtype=np.float64)
    if how in ("native32", "native64"):
        # IEEE 754's float32 / float64 + and *, each step correctly rounded; ufunc.accumulate
        # combines strictly in order (unlike the pairwise ufunc.reduce).
        v = x.astype(np.float32 if how == "native32" else np.float64)
        with np.errstate(all="ignore"):
            res = (np.multiply if op == "multiply" else np.add).accumulate(
                v[..., ::-1] if reverse else v, axis=-1)
        res = (res[..., ::-1] if reverse else res).astype(np.float64)
    else:
        # The kernel scans along the rows of an (n, r) array, its loops running over a
        # block's columns: the axis first, in place where x lies that way already, through
        # the tiled transpose otherwise.
        moved = np.moveaxis(x, -1, 0)
        tiled = not moved.flags.c_contiguous
        n, r = x.shape[-1], x.size // x.shape[-1]
        X = np.empty((1, n, r)) if tiled else moved.reshape(1, n, r)
        if tiled:
            with threads_for(X.size >> 6):
                _transpose(np.ascontiguousarray(x).reshape(1, r, n), X)
        out = np.empty((n, r))
        code = formats.mode_code(mode)
        args = (op == "multiply", reverse, _format_tuple(fmt), code)
        ids = np.arange(-(-r // _WIDTH))
        ok = np.ones(ids.size, dtype=np.bool_)
        # Round-to-nearest-even with Figueroa's sums (p <= 25) has its own copy; the other
        # modes share one that reads the mode at run time and also computes again, with the
        # complete routine, the blocks that left the shortcut's range (as ``_run``).
        own = code == _NEAREST_EVEN and fmt.precision <= 25
        with threads_for(out.size):
            _scan_kernel(code if own else -1, own)(X[0], out, ids, *args, False, ok)
        redo = ids[~ok]
        if redo.size:
            with threads_for(redo.size * _WIDTH * n):
                _scan_kernel(-1, False)(X[0], out, redo, *args, True, ok[:redo.size])
        if tiled:
            res = np.empty((1, r, n))
            with threads_for(res.size >> 6):
                _transpose(out.reshape(1, n, r), res)
            res = res.reshape(x.shape)
        else:
            res = np.moveaxis(out.reshape(moved.shape), 0, -1)
    res[np.isnan(res)] = np.nan
    return res

"""``round_to``: vectorized rounding of float64 arrays into a format, compiled with numba.

Bit for bit the same as the exact path (``formats.exact``) on every input; the tests prove it
exhaustively on small formats and on millions of random and adversarial inputs.  The loop
runs the scalar routine of ``formats.kernel`` in parallel over elements; the only memory it
allocates is the output (and the flags when asked for).
"""

from __future__ import annotations

import contextlib
import functools

import numba
import numpy as np

from .catalog import get
from .format import BinaryFormat, FormatError
from .kernel import (P_FLUSH, P_HAS_NAN, P_INF_IS_INF, P_INF_IS_NAN, P_OVF_INF, P_OVF_NAN,
                     P_SIGNED_ZERO, make_rounder)
from .modes import mode_code

# The scalar routines compiled for the CPU; other compiled code (numerics) calls them inline.
round_bits, _, _, encode_bits = make_rounder(numba.njit(cache=True))
# The shortcut inlined at the numba-IR level into the loops that call it, so a constant mode
# folds its branches away.
round_in_range = make_rounder(functools.partial(numba.njit, cache=True, inline="always"))[1]


@numba.njit(cache=True)
def round_one(b, p, qmin, emax, mtop, params, mode, seed, index):
    """round_bits, through the in-range shortcut when 2**emin <= |x| < 2**emax (binary64
    exponent field in [emin + 1023, emax + 1022]) and the significand has a fraction bit;
    the same bits either way."""
    e = (b >> 52) & 0x7FF
    if p >= 2 and e >= qmin + p + 1022 and e <= emax + 1022:
        return round_in_range(b, 53 - p, mode, seed, index)
    return round_bits(b, p, qmin, emax, mtop, params, mode, seed, index)


def _make_loop(mode, storage):
    """The array loop for one mode: the mode is a compile-time constant, so the shortcut
    compiles to a handful of branch-free integer operations per element.  ``storage``: write
    the format's own bit patterns (enc = encoding code) instead of binary64 ones."""

    @numba.njit(parallel=True, cache=True)
    def loop(xb, out, flags, want_flags, p, qmin, emax, mtop, params, seed, offset, bias,
             nbits, enc):
        lo, hi, shift = qmin + p + 1022, emax + 1022, 53 - p
        if p < 2:
            hi = -1       # one-bit significands: the kept "last bit" would be an exponent bit
        sbit = np.int64(1) << (nbits - 1)
        rebias = (bias - 1023) << (p - 1)
        for i in numba.prange(xb.size):
            b = xb[i]
            e = (b >> 52) & 0x7FF
            if e >= lo and e <= hi:
                r, f = round_in_range(b, shift, mode, seed, offset + i)
                if storage:
                    # A normal result: the exponent field re-biased, the fraction's top bits.
                    out[i] = (sbit if b < 0 else 0) | ((((r >> 52) & 0x7FF) << (p - 1))
                                                       + rebias) | ((r & 0xFFFFFFFFFFFFF) >> shift)
                else:
                    out[i] = r
            else:
                r, f = round_bits(b, p, qmin, emax, mtop, params, mode, seed, offset + i)
                if storage:
                    out[i] = encode_bits(r, p, qmin, bias, nbits, enc)
                else:
                    out[i] = r
            if want_flags:
                flags[i] = f

    return loop


def _make_values_loop(mode):
    """The loop for values without flags, in two passes.  The mere presence of the full
    routine's call in a loop makes it several times slower, so the first pass rounds the
    in-range elements only, leaves the others' input patterns in place and counts them;
    ``finish`` then rounds the patterns still outside the range (none, for most data).
    A first-pass result that carried to 2**emax is outside the range too; it is a format
    value, and rounding a format value again returns it."""

    @numba.njit(parallel=True, cache=True)
    def values(xb, out, p, qmin, emax, seed, offset):
        lo, hi, shift = qmin + p + 1022, emax + 1022, 53 - p
        if p < 2:
            hi = -1
        outside = 0
        for i in numba.prange(xb.size):
            b = xb[i]
            e = (b >> 52) & 0x7FF
            if e >= lo and e <= hi:
                b = round_in_range(b, shift, mode, seed, offset + i)[0]
            else:
                outside += 1
            out[i] = b
        return outside

    return values


def _make_storage_values_loop(mode):
    """Storage patterns without flags in two passes, as ``_make_values_loop``: here the out
    array cannot hold a binary64 pattern, so the second pass reads the input again."""

    @numba.njit(parallel=True, cache=True)
    def values(xb, out, p, qmin, emax, seed, offset, bias, nbits):
        lo, hi, shift = qmin + p + 1022, emax + 1022, 53 - p
        if p < 2:
            hi = -1
        sbit = np.int64(1) << (nbits - 1)
        rebias = (bias - 1023) << (p - 1)
        outside = 0
        for i in numba.prange(xb.size):
            b = xb[i]
            e = (b >> 52) & 0x7FF
            if e >= lo and e <= hi:
                r = round_in_range(b, shift, mode, seed, offset + i)[0]
                # A normal result: the exponent field re-biased, the fraction's top bits.
                out[i] = (sbit if b < 0 else 0) | ((((r >> 52) & 0x7FF) << (p - 1)) + rebias) \
                    | ((r & 0xFFFFFFFFFFFFF) >> shift)
            else:
                outside += 1
        return outside

    return values


@numba.njit(parallel=True, cache=True)
def _finish_storage(xb, out, p, qmin, emax, mtop, params, mode, seed, offset, bias, nbits,
                    enc):
    """The full routine for the inputs outside the shortcut's range, as storage patterns."""
    lo, hi = qmin + p + 1022, emax + 1022
    if p < 2:
        hi = -1
    for i in numba.prange(xb.size):
        e = (xb[i] >> 52) & 0x7FF
        if e < lo or e > hi:
            r = round_bits(xb[i], p, qmin, emax, mtop, params, mode, seed, offset + i)[0]
            out[i] = encode_bits(r, p, qmin, bias, nbits, enc)


@numba.njit(parallel=True, cache=True)
def finish(out, p, qmin, emax, mtop, params, mode, seed, offset):
    """Round in place every binary64 pattern of ``out`` outside the in-range shortcut's
    range (second pass of the values loops here and in numerics.eft)."""
    lo, hi = qmin + p + 1022, emax + 1022
    if p < 2:
        hi = -1
    for i in numba.prange(out.size):
        e = (out[i] >> 52) & 0x7FF
        if e < lo or e > hi:
            out[i] = round_bits(out[i], p, qmin, emax, mtop, params, mode, seed, offset + i)[0]


# Arrays below this size run on one thread: starting a parallel region (waking the pool's
# threads and meeting at its barrier) costs tens of microseconds on an idle machine and
# milliseconds on a loaded one, while rounding 16k values takes about 100 microseconds.
PARALLEL_MIN = 1 << 14


@contextlib.contextmanager
def threads_for(n: int):
    """Run the compiled loops inside on one thread when ``n`` elements are too few to pay
    for a parallel region (numba's thread count is per calling thread)."""
    if n >= PARALLEL_MIN or numba.get_num_threads() == 1:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(old)


_LOOPS = tuple(_make_loop(mode, False) for mode in range(7))
_VALUE_LOOPS = tuple(_make_values_loop(mode) for mode in range(7))
_STORAGE_LOOPS = tuple(_make_loop(mode, True) for mode in range(7))
_STORAGE_VALUE_LOOPS = tuple(_make_storage_values_loop(mode) for mode in range(7))
_ENCODING_CODES = {"ieee": 0, "fn": 1, "fnuz": 2, "finite": 3}


def round_params(fmt: BinaryFormat) -> tuple[int, int, int, int, int]:
    """(p, qmin, emax, top_significand, params bit field) for the scalar routine."""
    params = 0
    if fmt.has_nan:
        params |= P_HAS_NAN
    if fmt.has_negative_zero:
        params |= P_SIGNED_ZERO
    if fmt.flush_subnormals:
        params |= P_FLUSH
    if fmt.has_inf and not fmt.saturate:
        params |= P_INF_IS_INF | P_OVF_INF
    elif fmt.has_nan and not fmt.saturate:
        params |= P_INF_IS_NAN | P_OVF_NAN
    # Otherwise (finite encoding, or saturate): inf and overflow give +-max_finite.
    return fmt.precision, fmt.qmin, fmt.emax, fmt.top_significand, params


def round_to(x, fmt, mode: str = "nearest_even", *, with_flags: bool = False, seed: int = 0,
             offset: int = 0, out=None):
    """Round float64 values once into ``fmt`` under ``mode``; float64 array of the results.

    ``fmt`` is a BinaryFormat or anything ``formats.get`` takes.  With ``with_flags`` also a
    uint8 array of IEEE flags per element (inexact 1, underflow 2, overflow 4, invalid 16).
    ``stochastic`` mode draws its bits from (seed, offset + flat index), so rounding an array
    in chunks with the right offsets gives the same result as rounding it whole.
    Every NaN result is the canonical quiet NaN.  ``out``: a C-contiguous float64 array of
    x's shape to write the results into (``x`` itself rounds in place); saves allocating.
    """
    fmt = get(fmt)
    code = mode_code(mode)
    x = np.asarray(x, dtype=np.float64)
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 1 << 64:
        raise ValueError(f"round_to: seed must be an integer in [0, 2**64) (got {seed!r})")
    if fmt.contains_binary64 and fmt.has_inf and not fmt.saturate:
        return _round_wide(x, fmt, with_flags)
    if not fmt.fits_binary64:
        raise FormatError(f"round_to: {fmt.label} values do not all fit binary64 and it does not "
                          f"contain binary64; use formats.round_exact")
    xb = np.ascontiguousarray(x).reshape(-1).view(np.int64)
    if out is None:
        bits = np.empty(xb.size, dtype=np.int64)
    elif (not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.shape != x.shape
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"round_to: out must be a writeable C-contiguous float64 array of "
                         f"shape {x.shape}")
    else:
        bits = out.reshape(-1).view(np.int64)
    flags = np.empty(xb.size if with_flags else 1, dtype=np.uint8)
    p, qmin, emax, mtop, params = round_params(fmt)
    seed = seed - (1 << 64) if seed >= 1 << 63 else seed      # as an int64, same bits
    with threads_for(xb.size):
        if with_flags:
            _LOOPS[code](xb, bits, flags, True, p, qmin, emax, mtop, params, seed, offset, 0, 64,
                         0)
        elif _VALUE_LOOPS[code](xb, bits, p, qmin, emax, seed, offset):
            finish(bits, p, qmin, emax, mtop, params, code, seed, offset)
    result = bits.view(np.float64).reshape(x.shape)
    if with_flags:
        return result, flags.reshape(x.shape)
    return result


def round_encode(x, fmt, mode: str = "nearest_even", *, with_flags: bool = False, seed: int = 0,
                 offset: int = 0):
    """Round float64 values into ``fmt`` and return the format's own bit patterns, in one
    pass: the smallest of uint8/16/32/64 that holds ``fmt.bits`` (view a bfloat16 or float8
    result as the ml_dtypes type to get a storage array).  Same rounding as ``round_to``."""
    fmt = get(fmt)
    code = mode_code(mode)
    if fmt.bits > 64 or not fmt.fits_binary64:
        raise FormatError(f"round_encode: {fmt.label} needs more than binary64 or 64 bits; use "
                          f"formats.round_exact and its bits")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 1 << 64:
        raise ValueError(f"round_encode: seed must be an integer in [0, 2**64) (got {seed!r})")
    x = np.asarray(x, dtype=np.float64)
    xb = np.ascontiguousarray(x).reshape(-1).view(np.int64)
    dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64)
                 if np.dtype(d).itemsize * 8 >= fmt.bits)
    out = np.empty(xb.size, dtype=dtype)
    flags = np.empty(xb.size if with_flags else 1, dtype=np.uint8)
    p, qmin, emax, mtop, params = round_params(fmt)
    seed = seed - (1 << 64) if seed >= 1 << 63 else seed
    enc = _ENCODING_CODES[fmt.encoding]
    with threads_for(xb.size):
        if with_flags:
            _STORAGE_LOOPS[code](xb, out, flags, True, p, qmin, emax, mtop, params, seed,
                                 offset, fmt.bias, fmt.bits, enc)
        elif _STORAGE_VALUE_LOOPS[code](xb, out, p, qmin, emax, seed, offset, fmt.bias,
                                        fmt.bits):
            _finish_storage(xb, out, p, qmin, emax, mtop, params, code, seed, offset, fmt.bias,
                            fmt.bits, enc)
    out = out.reshape(x.shape)
    return (out, flags.reshape(x.shape)) if with_flags else out


def _round_wide(x, fmt, with_flags):
    """IEEE formats that contain binary64 (binary128, binary256): every float64 value, inf
    and NaN included, is a value of the format, so rounding is the identity (NaN made
    canonical)."""
    out = np.where(np.isnan(x), np.nan, x)
    if with_flags:
        return out, np.zeros(x.shape, dtype=np.uint8)
    return out

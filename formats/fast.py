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
from .exact import read_real, round_exact
from .format import BinaryFormat, FormatError
from .kernel import (P_FLUSH, P_HAS_NAN, P_INF_IS_INF, P_INF_IS_NAN, P_OVF_INF, P_OVF_NAN,
                     P_SIGNED_ZERO, make_rounder)
from .modes import mode_code

# The scalar routines compiled for the CPU; other compiled code (numerics) calls them inline.
round_bits, _, _, encode_bits = make_rounder(numba.njit(cache=True))
# The shortcut inlined at the numba-IR level into the loops that call it, so a constant mode
# folds its branches away.
round_in_range = make_rounder(functools.partial(numba.njit, cache=True, inline="always"))[1]


@numba.njit(cache=True, inline="always")
def in_range_window(p, qmin, emax):
    """(lo, hi, shift) of the in-range shortcut: a binary64 pattern whose exponent field e
    has lo <= e <= hi (2**(qmin + p - 1) <= |x| < 2**emax: a normal result that cannot
    overflow) rounds by round_in_range, dropping ``shift`` = 53 - p fraction bits.  One-bit
    significands (p < 2) never take it: the kept "last bit" would be an exponent bit."""
    return qmin + p + 1022, (emax + 1022 if p >= 2 else -1), 53 - p


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
        lo, hi, shift = in_range_window(p, qmin, emax)
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
        lo, hi, shift = in_range_window(p, qmin, emax)
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
        lo, hi, shift = in_range_window(p, qmin, emax)
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


_ACCEPTS = ("round_to and round_encode take real numbers: float64 (and float16, float32, "
            "longdouble, ml_dtypes, bool and integer) arrays, or ints, Fractions, gmpy2 numbers, "
            "floats and decimal strings")


def _same_value(u, v) -> bool:
    """Whether numpy's array element ``u`` is exactly the list element ``v`` it came from."""
    if u != u or type(v) is float:
        return True                    # NaN; numpy keeps a float64 exactly
    if isinstance(v, (bool, np.bool_)):
        v = int(v)
    if type(u) is float and type(v) is int:
        return u == v                  # Python compares int and float exactly
    try:
        return read_real(u) == read_real(v)
    except ValueError:
        return False


def _from_sequence(x, a):
    """Object elements of the list ``x`` that ``np.asarray`` rounded (a mixed list of floats
    and big ints becomes float64) or turned into strings: (object array, flat indices)."""
    try:
        o = np.array(x, dtype=object)
    except (TypeError, ValueError):
        return None, None
    if o.shape != a.shape:
        return None, None
    if a.dtype.kind in "US":
        return o, np.arange(o.size)
    flat = a.reshape(-1)
    values = flat.tolist() if a.dtype == np.float64 else list(flat)
    return o, np.array([i for i, (u, v) in enumerate(zip(values, o.reshape(-1).tolist()))
                        if not _same_value(u, v)], dtype=np.intp)


def _as_float64(x, name):
    """Input that is not a float64 array, read for the fast path: (float64 array of x's
    shape, None or (flat indices, elements)).  The float64 array holds every element whose
    conversion is exact; the listed elements are not binary64 values and must be rounded by
    the exact path (each once: never through a binary64 intermediate)."""
    try:
        a = np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{name}: cannot read the input as an array of reals ({reason}); "
                         f"{_ACCEPTS}") from None
    dt, kind = a.dtype, a.dtype.kind
    if kind == "c":
        raise ValueError(f"{name}: complex input ({dt}) is not real; {_ACCEPTS}")
    if isinstance(x, (list, tuple)) and kind in "fUS":
        o, idx = _from_sequence(x, a)
        if o is not None and idx.size:
            f = np.zeros(a.shape) if kind in "US" else a.astype(np.float64)
            return f, (idx, o.reshape(-1)[idx].tolist())
    if dt == np.float64:
        return a, None
    if kind == "b" or (kind in "iuf" and dt.itemsize <= 4) or (kind == "f" and dt.itemsize == 8) \
            or (kind == "V" and dt.fields is None and dt.type.__module__ == "ml_dtypes"
                and dt.itemsize <= 4):
        # Every value of these types is a binary64 value (ml_dtypes: floats of at most 32
        # bits and small ints; a longdouble as wide as binary64).
        return a.astype(np.float64), None
    if kind in "iuf":
        # int64/uint64 beyond 2**53 and wide longdouble: convert, then keep the elements
        # that convert back to themselves (comparisons within one type are exact).
        with np.errstate(over="ignore", invalid="ignore"):
            f = a.astype(np.float64)
            if kind == "f":
                exact = (f.astype(dt) == a) | np.isnan(a)
            else:
                big = f >= 2.0 ** (dt.itemsize * 8 - (kind == "i"))     # beyond the type
                exact = ~big & (np.where(big, 0, f).astype(dt) == a)
        idx = np.flatnonzero(~exact)
        flat = a.reshape(-1)
        return f, (None if idx.size == 0 else
                   (idx, flat[idx].tolist() if kind in "iu" else list(flat[idx])))
    if kind in "OUS":
        flat = a.reshape(-1).tolist()
        if kind == "S":
            flat = [b.decode("ascii", "replace") for b in flat]
        return np.zeros(a.shape), ((np.arange(a.size), flat) if a.size else None)
    raise ValueError(f"{name}: cannot round {dt} values; {_ACCEPTS}")


def _round_listed(listed, fmt, mode, seed, offset, name):
    """Round the listed elements by the exact path (the stochastic draw at offset + flat
    index, as the fast path draws): yields (flat index, Rounded)."""
    for i, v in zip(listed[0].tolist(), listed[1]):
        try:
            yield i, round_exact(v, fmt, mode, seed=seed, index=offset + i)
        except ValueError as e:
            reason = str(e).removeprefix("round_exact: ")
            raise ValueError(f"{name}: element {i}: {reason}") from None


def round_to(x, fmt, mode: str = "nearest_even", *, with_flags: bool = False, seed: int = 0,
             offset: int = 0, out=None):
    """Round real values once into ``fmt`` under ``mode``; float64 array of the results.

    ``x``: float64 values (the compiled fast path); other real arrays whose values are all
    binary64 values (float16, float32, ml_dtypes, bool, integers up to 2**53...) convert
    exactly and take the same path; elements that are not binary64 values (int64/uint64
    beyond 2**53, wide longdouble, object arrays of ints, Fractions, gmpy2 numbers, decimal
    strings) are rounded one by one by ``round_exact``: never twice.  Complex or non-numeric
    input: ValueError.  ``fmt`` is a BinaryFormat or anything ``formats.get`` takes.  With
    ``with_flags`` also a uint8 array of IEEE flags per element (inexact 1, underflow 2,
    overflow 4, invalid 16).
    ``stochastic`` mode draws its bits from (seed, offset + flat index), so rounding an array
    in chunks with the right offsets gives the same result as rounding it whole.
    Every NaN result is the canonical quiet NaN.  ``out``: a C-contiguous float64 array of
    x's shape to write the results into (``x`` itself rounds in place); saves allocating.
    """
    fmt = get(fmt)
    code = mode_code(mode)
    listed = None
    if type(x) is not np.ndarray or x.dtype != np.float64:
        x, listed = _as_float64(x, "round_to")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 1 << 64:
        raise ValueError(f"round_to: seed must be an integer in [0, 2**64) (got {seed!r})")
    if out is not None and (not isinstance(out, np.ndarray) or out.dtype != np.float64
                            or out.shape != x.shape or not out.flags.c_contiguous
                            or not out.flags.writeable):
        raise ValueError(f"round_to: out must be a writeable C-contiguous float64 array of "
                         f"shape {x.shape}")
    bits = (np.empty(x.size, dtype=np.int64) if out is None else
            out.reshape(-1).view(np.int64))
    flags = np.zeros(x.size if with_flags else 1, dtype=np.uint8)
    if fmt.contains_binary64 and fmt.has_inf and not fmt.saturate:
        if listed is not None and not fmt.fits_binary64:
            raise FormatError(f"round_to: {fmt.label} values of input that is not binary64 do "
                              f"not fit the float64 result; use formats.round_exact")
        _round_wide(x, bits.view(np.float64))
    elif not fmt.fits_binary64:
        raise FormatError(f"round_to: {fmt.label} values do not all fit binary64 and it does not "
                          f"contain binary64; use formats.round_exact")
    else:
        xb = np.ascontiguousarray(x).reshape(-1).view(np.int64)
        p, qmin, emax, mtop, params = round_params(fmt)
        iseed = seed - (1 << 64) if seed >= 1 << 63 else seed      # as an int64, same bits
        with threads_for(xb.size):
            if with_flags:
                _LOOPS[code](xb, bits, flags, True, p, qmin, emax, mtop, params, iseed, offset,
                             0, 64, 0)
            elif _VALUE_LOOPS[code](xb, bits, p, qmin, emax, iseed, offset):
                finish(bits, p, qmin, emax, mtop, params, code, iseed, offset)
    if listed is not None:
        values = bits.view(np.float64)
        for i, r in _round_listed(listed, fmt, mode, int(seed), offset, "round_to"):
            values[i] = r.to_float()
            flags[i if with_flags else 0] = r.flags
    result = bits.view(np.float64).reshape(x.shape)
    if with_flags:
        return result, flags.reshape(x.shape)
    return result


def round_encode(x, fmt, mode: str = "nearest_even", *, with_flags: bool = False, seed: int = 0,
                 offset: int = 0):
    """Round real values into ``fmt`` and return the format's own bit patterns, in one
    pass: the smallest of uint8/16/32/64 that holds ``fmt.bits`` (view a bfloat16 or float8
    result as the ml_dtypes type to get a storage array).  Same rounding, and the same
    inputs, as ``round_to``."""
    fmt = get(fmt)
    code = mode_code(mode)
    if fmt.bits > 64 or not fmt.fits_binary64:
        raise FormatError(f"round_encode: {fmt.label} needs more than binary64 or 64 bits; use "
                          f"formats.round_exact and its bits")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 1 << 64:
        raise ValueError(f"round_encode: seed must be an integer in [0, 2**64) (got {seed!r})")
    listed = None
    if type(x) is not np.ndarray or x.dtype != np.float64:
        x, listed = _as_float64(x, "round_encode")
    xb = np.ascontiguousarray(x).reshape(-1).view(np.int64)
    dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64)
                 if np.dtype(d).itemsize * 8 >= fmt.bits)
    out = np.empty(xb.size, dtype=dtype)
    flags = np.empty(xb.size if with_flags else 1, dtype=np.uint8)
    p, qmin, emax, mtop, params = round_params(fmt)
    iseed = seed - (1 << 64) if seed >= 1 << 63 else seed
    enc = _ENCODING_CODES[fmt.encoding]
    with threads_for(xb.size):
        if with_flags:
            _STORAGE_LOOPS[code](xb, out, flags, True, p, qmin, emax, mtop, params, iseed,
                                 offset, fmt.bias, fmt.bits, enc)
        elif _STORAGE_VALUE_LOOPS[code](xb, out, p, qmin, emax, iseed, offset, fmt.bias,
                                        fmt.bits):
            _finish_storage(xb, out, p, qmin, emax, mtop, params, code, iseed, offset,
                            fmt.bias, fmt.bits, enc)
    if listed is not None:
        for i, r in _round_listed(listed, fmt, mode, int(seed), offset, "round_encode"):
            out[i] = r.bits
            flags[i if with_flags else 0] = r.flags
    out = out.reshape(x.shape)
    return (out, flags.reshape(x.shape)) if with_flags else out


def _round_wide(x, out):
    """IEEE formats that contain binary64 (binary128, binary256): every float64 value, inf
    and NaN included, is a value of the format, so rounding is the identity (NaN made
    canonical).  Writes the flat float64 array ``out``."""
    out[...] = x.reshape(-1)
    out[np.isnan(out)] = np.nan

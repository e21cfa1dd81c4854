"""The scalar rounding routine, written once for plain Python, numba.njit and CUDA devices.

``make_rounder(jit)`` compiles the same source with ``jit`` (``numba.njit``,
``numba.cuda.jit(device=True)``, or the identity for plain Python) and returns the routine
``round_bits(b, p, qmin, emax, mtop, params, mode, seed, index) -> (bits, flags)`` that rounds
one binary64 value, given as its int64 bit pattern, into a format and returns the binary64
bit pattern of the result; ``round_in_range``, its shortcut for inputs whose result is a
normal number (a few integer operations); ``stochastic_bits``; and ``encode_bits``, which
turns a result into the format's own bit pattern (storage).  Only int64 arithmetic is used (no float ops, no bit casts), which
is what lets one source run unchanged on all three targets.

The algorithm: a finite nonzero x = M * 2**k (M < 2**53).  With e = floor(log2|x|) the
format's quantum is q = max(e - p + 1, qmin); the rounding keeps trunc = floor(|x| / 2**q)
and decides from the remainder whether to add one (the mode's rule).  Overflow is decided on
that p-bit result, i.e. with an unbounded exponent (IEEE 754-2019, 7.4).  Tininess is
detected after rounding (7.5): the value rounded to p bits with an unbounded exponent lies
below 2**emin; only x in [2**(emin-1), 2**emin) needs a second rounding to tell.
"""

from __future__ import annotations

# Bit layout of binary64.
_FRAC_MASK = (1 << 52) - 1
_HIDDEN = 1 << 52
_QNAN = 0x7FF8000000000000          # the canonical quiet NaN every NaN result is written as

# params bit field (see round_params in fast.py).
P_HAS_NAN = 1         # NaN inputs stay NaN (else: +0 and the invalid flag)
P_INF_IS_INF = 2      # inf inputs stay inf
P_INF_IS_NAN = 4      # inf inputs become NaN (fn, fnuz); neither bit: +-max_finite
P_OVF_INF = 8         # an overflow that rounds away from zero gives +-inf
P_OVF_NAN = 16        # ... gives NaN; neither bit: +-max_finite (finite encoding, saturate)
P_SIGNED_ZERO = 32    # the format has -0 (all but fnuz)
P_FLUSH = 64          # subnormal results become zero

# Flags (formats.modes).
_INEXACT, _UNDERFLOW, _OVERFLOW, _INVALID = 1, 2, 4, 16


def make_rounder(jit):
    """Compile the rounding routine and its random-bit hash with ``jit``; see module doc."""

    @jit
    def mix32(h):
        # "lowbias32" finalizer (Wellons, hash-prospector).  Masking after each product keeps
        # the low 32 bits exact whether the target wraps (numba) or not (Python ints).
        h = h & 0xFFFFFFFF
        h = h ^ (h >> 16)
        h = (h * 0x7FEB352D) & 0xFFFFFFFF
        h = h ^ (h >> 15)
        h = (h * 0x846CA68B) & 0xFFFFFFFF
        h = h ^ (h >> 16)
        return h

    @jit
    def stochastic_bits(seed, index):
        """63 random bits for element ``index`` under ``seed``: a counter-based hash, so the
        result does not depend on chunking or on which thread rounds which element."""
        s0 = seed & 0xFFFFFFFF
        s1 = (seed >> 32) & 0xFFFFFFFF
        c0 = index & 0xFFFFFFFF
        c1 = (index >> 32) & 0xFFFFFFFF
        h = mix32(mix32(mix32(c1 ^ s1 ^ 0x9E3779B9) ^ c0) ^ s0)
        hi = mix32(mix32(h ^ 0x85EBCA6B ^ s1) ^ c0 ^ 0x27D4EB2F)
        return ((hi & 0x7FFFFFFF) << 32) | h

    @jit
    def increment(mode, sign, trunc, rem_vs_half, threshold, rand):
        """1 when the inexact |x| in (trunc, trunc+1) rounds to trunc + 1 under ``mode``.

        rem_vs_half: -1, 0, 1 as the remainder is below, at, above half the quantum.
        threshold: floor(2**63 * remainder / quantum), for stochastic rounding.
        """
        if mode == 0:                                   # nearest, ties to even
            return 1 if rem_vs_half > 0 or (rem_vs_half == 0 and (trunc & 1) == 1) else 0
        if mode == 1:                                   # nearest, ties away from zero
            return 1 if rem_vs_half >= 0 else 0
        if mode == 2:                                   # toward zero
            return 0
        if mode == 3:                                   # upward: away from zero if positive
            return 1 - sign
        if mode == 4:                                   # downward: away from zero if negative
            return sign
        if mode == 5:                                   # to odd: the neighbour with odd last bit
            return 1 - (trunc & 1)
        # Stochastic: up with probability remainder / quantum (to within 2**-63).
        return 1 if rand < threshold else 0

    @jit
    def split(m, shift):
        """(trunc, rem_vs_half, threshold, inexact) of m / 2**shift for shift >= 1, m < 2**53."""
        if shift <= 62:
            trunc = m >> shift
            rem = m & ((1 << shift) - 1)
            half = 1 << (shift - 1)
            c = 1 if rem > half else (0 if rem == half else -1)
            return trunc, c, rem << (63 - shift), rem != 0
        # m < 2**53 <= 2**(shift-1): the whole of m is a remainder below half the quantum.
        t = m >> (shift - 63) if shift < 116 else 0
        return 0, -1, t, m != 0

    @jit
    def round_in_range(b, shift, mode, seed, index):
        """round_bits for an x with 2**emin <= |x| < 2**emax, whose result is a normal
        finite value, for p >= 2: drop the ``shift`` = 53 - p low bits of the pattern, adding first what
        makes the mode's carry (a carry out of the fraction steps the exponent, which is
        the right result at a binade's top).  (bits, inexact flag)."""
        low = b & ((1 << shift) - 1)
        if low == 0:
            return b, 0
        keep = b - low
        if mode == 0:                                   # carry iff low > half, or = half & odd
            add = (1 << (shift - 1)) - 1 + ((b >> shift) & 1)
        elif mode == 1:                                 # carry iff low >= half
            add = 1 << (shift - 1)
        elif mode == 2:
            return keep, _INEXACT
        elif mode == 3:                                 # away from zero when positive
            add = (1 << shift) - 1 if b >= 0 else 0
        elif mode == 4:                                 # away from zero when negative
            add = (1 << shift) - 1 if b < 0 else 0
        elif mode == 5:                                 # the neighbour with the odd last bit
            return keep | (1 << shift), _INEXACT
        else:
            # Stochastic: up iff rand < floor(2**63 * low / 2**shift), i.e. iff the top
            # `shift` random bits R < low; adding 2**shift - 1 - R carries exactly then.
            add = (1 << shift) - 1 - (stochastic_bits(seed, index) >> (63 - shift))
        return (b + add) - ((b + add) & ((1 << shift) - 1)), _INEXACT

    @jit
    def round_bits(b, p, qmin, emax, mtop, params, mode, seed, index):
        """Round the binary64 value with bit pattern ``b`` (int64); see the module doc."""
        sign = (b >> 63) & 1
        expo = (b >> 52) & 0x7FF
        frac = b & _FRAC_MASK
        if expo == 0x7FF:
            if frac != 0:                               # NaN: quiet in, quiet out
                if params & P_HAS_NAN:
                    return _QNAN, 0
                return 0, _INVALID                      # no NaN in the format: +0, invalid
            if params & P_INF_IS_INF:
                return b, 0
            if params & P_INF_IS_NAN:
                return _QNAN, _INVALID
            return max_bits(sign, p, emax, mtop), _INVALID
        if expo == 0 and frac == 0:
            return (b if params & P_SIGNED_ZERO else 0), 0
        if expo == 0:                                   # binary64 subnormal
            m = frac
            k = -1074
            e = -1075
            t = m
            while t != 0:
                t = t >> 1
                e += 1
        else:
            m = frac | _HIDDEN
            k = expo - 1075
            e = expo - 1023
        q = e - p + 1
        if q < qmin:
            q = qmin
        shift = q - k
        if shift <= 0:
            # x lies on the format's grid: nothing to round, only the range to check.
            r = m << (-shift)
            inexact = False
            flags = 0
        else:
            trunc, c, thr, inexact = split(m, shift)
            rand = stochastic_bits(seed, index) if mode == 6 else 0
            r = trunc + increment(mode, sign, trunc, c, thr, rand) if inexact else trunc
            flags = _INEXACT if inexact else 0
        top = 1 << p
        if r == top:                                    # carried into the next binade
            r = r >> 1
            q += 1
        if r == 0:                                      # underflow to zero
            return (sign << 63 if params & P_SIGNED_ZERO else 0), _INEXACT | _UNDERFLOW
        normal = r >= (top >> 1)
        er = q + p - 1                                  # exponent of a normal result
        if normal and (er > emax or (er == emax and r > mtop)):
            away = (mode == 0 or mode == 1 or mode == 6 or (mode == 3 and sign == 0)
                    or (mode == 4 and sign == 1))
            if away and params & P_OVF_INF:
                return (sign << 63) | 0x7FF0000000000000, _OVERFLOW | _INEXACT
            if away and params & P_OVF_NAN:
                return _QNAN, _OVERFLOW | _INEXACT
            return max_bits(sign, p, emax, mtop), _OVERFLOW | _INEXACT
        if inexact and e < qmin + p - 1:
            # e < emin: tiny unless x in [2**(emin-1), 2**emin) rounds up to 2**emin when
            # rounded to p bits with an unbounded exponent.
            tiny = True
            if e == qmin + p - 2:
                su = e - p + 1 - k
                if su <= 0:
                    ru = m << (-su)
                else:
                    tu, cu, thu, inu = split(m, su)
                    rand = stochastic_bits(seed, index) if mode == 6 else 0
                    ru = tu + increment(mode, sign, tu, cu, thu, rand) if inu else tu
                tiny = ru < top
            if tiny:
                flags |= _UNDERFLOW
        if not normal and params & P_FLUSH:
            return (sign << 63 if params & P_SIGNED_ZERO else 0), _INEXACT | _UNDERFLOW
        n = p - 1
        if not normal:
            n = 0
            t = r
            while t > 1:
                t = t >> 1
                n += 1
        return (sign << 63) | compose(r, q, n), flags

    @jit
    def compose(r, q, n):
        """binary64 bits (no sign) of r * 2**q, where 2**n <= r < 2**(n+1), n <= 52, and the
        value is a binary64 number."""
        ex = q + n                                      # r * 2**q in [2**ex, 2**(ex+1))
        if ex < -1022:                                  # binary64 subnormal
            return r << (q + 1074)
        return ((ex + 1023) << 52) | ((r << (52 - n)) & _FRAC_MASK)

    @jit
    def max_bits(sign, p, emax, mtop):
        return (sign << 63) | compose(mtop, emax - p + 1, p - 1)

    @jit
    def encode_bits(r, p, qmin, bias, nbits, enc):
        """The format's own bit pattern of the binary64 pattern ``r`` that round_bits
        returned (a value of the format, or inf / NaN where the format has them).
        enc: 0 ieee, 1 fn, 2 fnuz, 3 finite."""
        wf = p - 1
        sbit = 1 << (nbits - 1)
        sign = (r >> 63) & 1
        ex = (r >> 52) & 0x7FF
        frac = r & _FRAC_MASK
        top = (1 << (nbits - 1 - wf)) - 1               # the all-ones exponent field
        if ex == 0x7FF:
            if frac != 0:                               # NaN
                if enc == 0:
                    return (top << wf) | (1 << (wf - 1))
                if enc == 1:
                    return sbit - 1
                return sbit                             # fnuz: the negative-zero pattern
            return (sbit if sign == 1 else 0) | (top << wf)
        if ex == 0 and frac == 0:
            return sbit if sign == 1 and enc != 2 else 0
        s = sbit if sign == 1 else 0
        if ex == 0:                                     # binary64 subnormal
            m = frac
            k = -1074
        else:
            m = frac | _HIDDEN
            k = ex - 1075
        if ex - 1023 >= qmin + wf:                      # normal in the format
            return s | ((ex - 1023 + bias) << wf) | (frac >> (52 - wf))
        return s | (m >> (qmin - k))                    # subnormal: m * 2**k = M * 2**qmin

    return round_bits, round_in_range, stochastic_bits, encode_bits


def _identity(fn):
    return fn


# The plain-Python build: the exact path shares its random bits, tests compare against it.
py_round_bits, py_round_in_range, py_stochastic_bits, py_encode_bits = make_rounder(_identity)

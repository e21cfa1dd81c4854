"""The compiled path of ``formats.quantize``: the definitions of formats/blocks.py in numba
loops over float64 arrays, bit for bit the same as its exact path.

Per block (one parallel task per block): the amax from the magnitude bits, the scale by the
scheme's rule, then every element.  Per-tensor quantities (a two-level scheme's tensor
scale, a per-tensor scheme's one scale) are single scalars: computed once, exactly, by
formats/blocks.py's rational definitions from the compiled amax.

Exact division: element * scale products are short, but V / D is not a binary64 number
in general.  ``odd_quotient`` divides with integers and returns the binary64 round-to-odd
quotient (Boldo-Melquiond: rounding that to p <= 51 bits, nearest or directed, is the
rounding of the exact quotient).  Power-of-two divisors (MX) subtract from the exponent
field instead; otherwise nearest-even rounding first tries binary64 division, whose
result q = RN53(V/D) rounds like V/D unless q is a midpoint of the element grid (at most
p + 1 significant bits), when it takes ``odd_quotient``.  Rounding itself is formats'
scalar routine (formats/kernel.py, through formats/fast.py): no second rounding routine.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numba
import numpy as np

from .blocks import (Quantized, bits_dtype, block_scale, grid_shape, layout, moved, scale_code,
                     tensor_scale, tiles, unmove)
from .fast import (encode_bits, in_range_window, round_bits, round_in_range, round_params,
                   threads_for)
from .modes import NEAREST_EVEN, OVERFLOW, STOCHASTIC, UPWARD
from .patterns import Encoder
from .scaled import E8M0_NAN, RULES, IntElement, ScaledFormat

_FRAC = (1 << 52) - 1
_HIDDEN = 1 << 52
_MAG = (1 << 63) - 1
_INF = 0x7FF << 52
_MAXF = 0x7FEFFFFFFFFFFFFF
_DIVISOR_BITS = 30          # odd_quotient's divisors: odd parts below 2**30


def _odd_bits(v: Fraction) -> int:
    """Bit length of the odd part of the numerator of a dyadic rational."""
    n = v.numerator
    return (n >> ((n & -n).bit_length() - 1)).bit_length()


def unsupported(fmt: ScaledFormat) -> str | None:
    """Why the fast path cannot take ``fmt`` (None: it can): its divisors must have odd
    parts below 2**30 (scale significand + tensor scale significand, and the element max
    with the tensor scale)."""
    pt = fmt.tensor_scale.precision if fmt.tensor_scale is not None else 1
    ps = 1 if fmt.powers_of_two else fmt.scale.precision
    pm = _odd_bits(fmt.element_max_exact)
    if ps + pt > _DIVISOR_BITS or pm + pt > _DIVISOR_BITS:
        return (f"the scale and tensor scale significands ({ps} + {pt} bits) or the element "
                f"max and the tensor scale ({pm} + {pt}) exceed {_DIVISOR_BITS} bits")
    return None


# ----- scalar helpers, inlined into the loops ----------------------------------------------------

@numba.njit(cache=True, inline="always")
def _bitlen(x):
    """Bit length of the int64 x >= 0."""
    n = 0
    if x >> 32:
        x >>= 32
        n += 32
    if x >> 16:
        x >>= 16
        n += 16
    if x >> 8:
        x >>= 8
        n += 8
    if x >> 4:
        x >>= 4
        n += 4
    if x >> 2:
        x >>= 2
        n += 2
    if x >> 1:
        x >>= 1
        n += 1
    return n + x


@numba.njit(cache=True)
def _divisor(d):
    """(B, eb) with d = B * 2**eb, B odd, for a positive normal binary64 d."""
    db = np.float64(d).view(np.int64)
    b = (db & _FRAC) | _HIDDEN
    eb = ((db >> 52) & 0x7FF) - 1075
    tz = _bitlen(b & -b) - 1
    return b >> tz, eb + tz


@numba.njit(cache=True)
def odd_quotient(vb, b, eb):
    """binary64 bits of v / d rounded to odd (sign kept), d = b * 2**eb with b odd below
    2**30, v finite with bits ``vb``: a 55-bit integer quotient and a sticky remainder."""
    sign = (vb >> 63) & 1
    ex = (vb >> 52) & 0x7FF
    f = vb & _FRAC
    if ex == 0:
        if f == 0:
            return vb                                  # a signed zero
        a, ea = f, -1074
    else:
        a, ea = f | _HIDDEN, ex - 1075
    n = _bitlen(a)
    a <<= 53 - n
    ea -= 53 - n
    q1 = a // b                                        # >= 2**22: 23 to 53 bits
    s = 55 - _bitlen(q1)
    t = (a - q1 * b) << s                              # < 2**62
    q2 = t // b
    big = (q1 << s) | q2                               # in [2**54, 2**55)
    sticky = 1 if (t - q2 * b) != 0 or (big & 3) != 0 else 0
    m = big >> 2
    e = ea - eb - s + 2                                # v / d ~ m * 2**e, m has 53 bits
    if e + 52 > 1023:
        return (sign << 63) | _MAXF                    # to odd: toward zero, then odd
    if e + 52 < -1022:
        sh = -1074 - e                                 # binary64 subnormal: quantum 2**-1074
        if sh > 60:
            m, sticky = 0, 1
        else:
            if m & ((1 << sh) - 1):
                sticky = 1
            m >>= sh
        return (sign << 63) | m | sticky
    return (sign << 63) | ((e + 52 + 1023) << 52) | ((m | sticky) & _FRAC)


@numba.njit(cache=True, inline="always")
def _element(vb, d, b, eb, pow2, p, qmin, emax, mtop, params, lo, hi, shift, bias, nbits, enc,
             frac_bits, elo, ehi, mode, seed, index):
    """(binary64 bits of the element value, element pattern) of v / d under ``mode``;
    d = b * 2**eb, a power of two 2**eb when ``pow2``.  p...params: the element grid's
    rounding parameters, (lo, hi, shift) its in-range window; bias, nbits, enc its code;
    frac_bits > 0 for two's-complement integer elements, clamped to [elo, ehi]."""
    ex = (vb >> 52) & 0x7FF
    if ex == 0x7FF:
        yb = vb                                        # inf / d, NaN
    elif pow2:
        if ex != 0 and ex - eb >= 1 and ex - eb <= 0x7FE:
            yb = vb - (eb << 52)                       # exact: only the exponent changes
        else:
            yb = odd_quotient(vb, b, eb)
    elif mode == STOCHASTIC:
        yb = odd_quotient(vb, b, eb)
    else:
        yb = np.float64(np.int64(vb).view(np.float64) / d).view(np.int64)
        ey = (yb >> 52) & 0x7FF
        # A p-midpoint has at most p + 1 significant bits: low fraction bits all zero.
        if ey == 0 or ey == 0x7FF or (yb & ((1 << (52 - p)) - 1)) == 0:
            yb = odd_quotient(vb, b, eb)
    e = (yb >> 52) & 0x7FF
    if e >= lo and e <= hi:
        r = round_in_range(yb, shift, mode, seed, index)[0]
    else:
        r = round_bits(yb, p, qmin, emax, mtop, params, mode, seed, index)[0]
    if frac_bits:                                      # two's-complement integer elements
        v = min(max(np.int64(r).view(np.float64), elo), ehi) + 0.0     # no -0 in int8
        k = np.int64(v * (1 << frac_bits))
        return np.float64(v).view(np.int64), k & ((1 << nbits) - 1)
    return r, encode_bits(r, p, qmin, bias, nbits, enc)


@numba.njit(cache=True)
def _block_scale(mag, special, ip, smax):
    """The scale of a block whose amax has magnitude bits ``mag`` (formats/blocks.py
    block_scale): a binary64 value, NaN for a NaN scale."""
    rule, emax_elem, kmin, kmax, ssat = ip[0], ip[1], ip[2], ip[3], ip[4]
    if special:
        return np.nan
    if mag == 0:
        return math.ldexp(1.0, kmin)
    if rule <= 1:                                      # floor, ceil: from a's exponent
        yb = odd_quotient(mag, ip[18], ip[19])
        ex = (yb >> 52) & 0x7FF
        frac = yb & _FRAC
        e = ex - 1023 if ex else _bitlen(frac) - 1075
        if rule == 1 and frac != 0 and (ex != 0 or (frac & (frac - 1)) != 0):
            e += 1                                     # not a power of two: round up
        k = e - emax_elem
        if k < kmin:
            k = kmin
        if k > kmax:
            return smax if ssat else np.nan
        return math.ldexp(1.0, k)
    yb = odd_quotient(mag, ip[20], ip[21])             # a / element_max
    r, f = round_bits(yb, ip[6], ip[7], ip[8], ip[9], ip[10], ip[11], 0, 0)
    v = np.int64(r).view(np.float64)
    if (f & OVERFLOW) or v != v or v > smax:
        return smax if ssat else np.nan
    if v == 0:
        return math.ldexp(1.0, kmin)
    return v


@numba.njit(cache=True)
def _scale_code(s, ip):
    if s != s:
        return ip[17]
    sb = np.float64(s).view(np.int64)
    if ip[5]:                                          # E8M0: the biased exponent
        return ((sb >> 52) & 0x7FF) - 1023 + 127
    return encode_bits(sb, ip[12], ip[13], ip[14], ip[15], ip[16])


def _make_loops(mode):

    @numba.njit(parallel=True, cache=True)
    def blocks(xb, bn, rows, cols, kr, kc, sg, smax, ip, ep, elo, ehi, seed,
               vals, codes, svals, scodes):
        """Every block of the moved array (bn x rows x cols, tiles kr x kc)."""
        ntr = (rows + kr - 1) // kr
        ntc = (cols + kc - 1) // kc
        p, qmin, emax, mtop, params = ep[0], ep[1], ep[2], ep[3], ep[4]
        bias, nbits, enc, frac_bits = ep[5], ep[6], ep[7], ep[8]
        lo, hi, shift = in_range_window(p, qmin, emax)
        for t in numba.prange(bn * ntr * ntc):
            bi = t // (ntr * ntc)
            tr = (t % (ntr * ntc)) // ntc
            tc = t % ntc
            r0, r1 = tr * kr, min(rows, tr * kr + kr)
            c0, c1 = tc * kc, min(cols, tc * kc + kc)
            mag = 0
            special = False
            for r in range(r0, r1):
                base = (bi * rows + r) * cols
                for c in range(c0, c1):
                    m = xb[base + c] & _MAG
                    if m >= _INF:
                        special = True
                    elif m > mag:
                        mag = m
            s = _block_scale(mag, special, ip, smax)
            svals[t] = s
            scodes[t] = _scale_code(s, ip)
            if s != s:                                 # a NaN scale: elements +0, code 0
                for r in range(r0, r1):
                    base = (bi * rows + r) * cols
                    for c in range(c0, c1):
                        vals[base + c] = 0
                        codes[base + c] = 0
                continue
            d = s * sg                                 # exact: short significands
            b, eb = _divisor(d)
            pow2 = b == 1
            for r in range(r0, r1):
                base = (bi * rows + r) * cols
                for c in range(c0, c1):
                    i = base + c
                    vals[i], codes[i] = _element(xb[i], d, b, eb, pow2, p, qmin, emax, mtop,
                                                 params, lo, hi, shift, bias, nbits, enc,
                                                 frac_bits, elo, ehi, mode, seed, i)

    @numba.njit(parallel=True, cache=True)
    def flat(xb, d, ep, elo, ehi, seed, vals, codes):
        """Every element under the one divisor d (a per-tensor scheme)."""
        b, eb = _divisor(d)
        pow2 = b == 1
        p, qmin, emax, mtop, params = ep[0], ep[1], ep[2], ep[3], ep[4]
        bias, nbits, enc, frac_bits = ep[5], ep[6], ep[7], ep[8]
        lo, hi, shift = in_range_window(p, qmin, emax)
        for i in numba.prange(xb.size):
            vals[i], codes[i] = _element(xb[i], d, b, eb, pow2, p, qmin, emax, mtop, params,
                                         lo, hi, shift, bias, nbits, enc, frac_bits, elo, ehi,
                                         mode, seed, i)

    return blocks, flat


_LOOPS = {NEAREST_EVEN: _make_loops(NEAREST_EVEN), STOCHASTIC: _make_loops(STOCHASTIC)}


@numba.njit(parallel=True, cache=True)
def amax_bits(xb):
    """(magnitude bits of max |x| over the finite elements, whether any is Inf or NaN)."""
    n = xb.size
    chunks = max(1, min(n, 64))
    tops = np.zeros(chunks, dtype=np.int64)
    specials = np.zeros(chunks, dtype=np.bool_)
    for c in numba.prange(chunks):
        m = 0
        s = False
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            a = xb[i] & _MAG
            if a >= _INF:
                s = True
            elif a > m:
                m = a
        tops[c] = m
        specials[c] = s
    return tops.max(), specials.any()


# ----- the driver ---------------------------------------------------------------------------------

def _split(v: Fraction) -> tuple[int, int]:
    """(B, eb), v = B * 2**eb with B odd, for a positive dyadic rational."""
    n, d = v.numerator, v.denominator
    tz = (n & -n).bit_length() - 1
    return n >> tz, tz - (d.bit_length() - 1)


def _params(fmt: ScaledFormat, sg: Fraction):
    """The parameters of the loops, (ip, ep, elo, ehi).  ip, the scale (int64): 0 rule code,
    1 emax_elem, 2 kmin (least scale 2**kmin), 3 kmax (largest power-of-two scale 2**kmax),
    4 scale_saturate, 5 E8M0, 6-10 the scale grid's rounding parameters, 11 its mode
    (upward for rceil), 12-16 the scale format's code parameters, 17 its NaN code, 18-19
    (b, eb) of sg * 2**-margin (a = amax / that), 20-21 of element_max * sg * 2**-margin.
    ep, the element grid (int64): 0-4 rounding parameters, 5 bias, 6 bits, 7 encoding
    code, 8 fraction bits of integer elements (0 for floats); [elo, ehi] their clamp."""
    grid = fmt.scale_grid
    gp, gq, gemax, gmtop, gparams = round_params(grid)
    s = fmt.scale
    sp, sq, _, _, _ = round_params(s)
    snan = E8M0_NAN if fmt.is_e8m0 else Encoder(s).nan()
    margin = Fraction(2) ** -fmt.margin
    bfl, ebfl = _split(sg * margin)
    brl, ebrl = _split(fmt.element_max_exact * sg * margin)
    enc = {"ieee": 0, "fn": 1, "fnuz": 2, "finite": 3}
    ip = np.array([RULES.index(fmt.rule), fmt.emax_elem, fmt.scale_kmin, _log2(fmt.scale_max_exact),
                   int(fmt.scale_saturate), int(fmt.is_e8m0),
                   gp, gq, gemax, gmtop, gparams, UPWARD if fmt.rule == "rceil" else NEAREST_EVEN,
                   sp, sq, s.bias, s.bits, enc[s.encoding], snan, bfl, ebfl, brl, ebrl],
                  dtype=np.int64)
    eg = fmt.element_grid
    p, qmin, emax, mtop, params = round_params(eg)
    el = fmt.element
    is_int = isinstance(el, IntElement)
    ep = np.array([p, qmin, emax, mtop, params, eg.bias, el.bits, enc[eg.encoding],
                   el.frac_bits if is_int else 0], dtype=np.int64)
    elo = float(el.min_value_exact) if is_int else -np.inf
    ehi = float(el.max_finite_exact) if is_int else np.inf
    return ip, ep, elo, ehi


def _log2(v: Fraction) -> int:
    """floor(log2 v) for a positive integer-valued or power-of-two v."""
    return v.numerator.bit_length() - v.denominator.bit_length()


def quantize(x: np.ndarray, fmt: ScaledFormat, axes, seed: int, hist):
    """formats.quantize on a float64 or float32 array; see formats/quantizer.py."""
    shape = x.shape
    xm = np.ascontiguousarray(moved(x, axes), dtype=np.float64)
    xb = xm.reshape(-1).view(np.int64)
    bn, rows, cols, kr, kc = layout(shape, fmt, axes)
    ntr, ntc = tiles(rows, cols, kr, kc, axes)
    n = xb.size
    iseed = seed - (1 << 64) if seed >= 1 << 63 else seed
    amax_t = False
    with threads_for(n):
        if fmt.tensor_scale is not None or (fmt.block is None and hist is False):
            mag, special = amax_bits(xb) if n else (0, False)
            amax_t = None if special else Fraction(float(np.int64(mag).view(np.float64)))
        sg, sg_bits = Fraction(1), None
        if fmt.tensor_scale is not None:
            sg, sg_bits = tensor_scale(fmt, amax_t)
        vals = np.empty(n, dtype=np.int64)             # every element is written
        codes = np.empty(n, dtype=bits_dtype(fmt.element.bits))
        nblocks = bn * ntr * ntc
        svals = np.full(nblocks, np.nan)
        scodes = np.zeros(nblocks, dtype=np.int64)        # one loop signature
        blocks, flat = _LOOPS[STOCHASTIC if fmt.rounding == "stochastic" else NEAREST_EVEN]
        if sg is None:
            scodes[:] = E8M0_NAN if fmt.is_e8m0 else Encoder(fmt.scale).nan()
            vals[:], codes[:] = 0, 0
        elif fmt.block is None:
            amax = hist if hist is not False else amax_t
            s = block_scale(fmt, None if amax is None else
                            amax * Fraction(2) ** fmt.margin / sg)
            scodes[0] = scale_code(fmt, s)
            if s is None:
                vals[:], codes[:] = 0, 0
            else:
                svals[0] = float(s)
                ip, ep, elo, ehi = _params(fmt, sg)
                if n:
                    flat(xb, float(s * sg), ep, elo, ehi, iseed, vals, codes)
        elif n:
            ip, ep, elo, ehi = _params(fmt, sg)
            blocks(xb, bn, rows, cols, kr, kc, float(sg), float(fmt.scale_max_exact), ip, ep,
                   elo, ehi, iseed, vals, codes, svals, scodes)
    mshape = xm.shape
    gshape = grid_shape(shape, fmt, axes)
    return Quantized(
        scheme=fmt, elements=unmove(vals.view(np.float64).reshape(mshape), axes),
        element_bits=unmove(codes.reshape(mshape), axes),
        scales=unmove(svals.reshape(gshape), axes),
        scale_bits=unmove(scodes.astype(bits_dtype(fmt.scale_bits)).reshape(gshape), axes),
        tensor_scale=None if fmt.tensor_scale is None else
        (float("nan") if sg is None else float(sg)),
        tensor_scale_bits=sg_bits, axis=axes)

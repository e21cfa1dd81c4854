"""double_double(bits=None) -> DoubleDoubleBackend: real arithmetic in double-double numbers
on numpy arrays, for a model run's exact sweeps of its graph at the precisions double-double
holds: every result within 2**-100 of the exact one, or, with
``bits``, rounded further to that many bits (the sweep at the format's precision + 64 bits
that the full-precision one is compared with).

A number is a pair of binary64 numbers, value ``hi + lo`` with ``hi = RN(hi + lo)``, held in
numpy arrays of the structured dtype ``DD`` (fields ``hi`` and ``lo``).  numpy moves such
arrays as any other (reshape, transpose, indexing, concatenate, pad, tril: a zero-filled
entry is the number 0) and refuses arithmetic, ordering and conversion to float on them, so
a rule that computes outside the backend's primitives fails loudly instead of computing on
one half of a number; the caller then evaluates with mpmath.

Accuracy: add, subtract, multiply, divide, sqrt (rsqrt 1 / sqrt), exp, expm1, log, log1p,
tanh and erf are numerics/double_word.py's (its docstring: the algorithms and their
bounds); pow with an integral exponent n, 1 <= |n| <= POW_MAX, is |n| - 1 products
x * x * ... * x (each within a few u**2 of its exact result, u = 2**-53: DWTimesDW of
Joldes, Muller and Popescu 2017), then a division for negative n, so its relative error
is at most about |n| times a product's: POW_MAX = 8 keeps it within 2**-100 (GELU's
x**3, a norm's x**2, x**-1).  The tests hold every one of them to 2**-100 of the exact
result (mpmath at 400 bits, MPFR at 318 for pow, wide exponents, cancellation, the
reductions' edges; observed about 2**-104), beyond the 2**-72 .. 2**-88 that the first
evaluation of a bfloat16 .. binary32 graph asks for (format precision + 64 bits).
``matmul`` and ``dot`` are the exact sums of products (numerics/exact_products.py)
rounded once to double-double.  The other primitives (pow with other exponents) are
mpmath's (numerics/reference.py at PREC = 106 bits) on the exact values, their results
rounded to double-double.

Range: every finite result must be 0 or have 2**-900 <= |hi| <= 2**900 (lo then keeps its
bits, the splitting cannot overflow); NaN and infinities are held (lo 0) where the
reference's conventions give them from NaN or infinite operands, a division by zero or a
root of a negative number (a mask of -inf, a pooling's padding).  Anything else -- an
overflow that mpmath would hold as a large finite number, a value below 2**-900 -- raises
``OutOfRange``, and the caller evaluates that sweep with mpmath instead.

``bits`` (54 .. 105): each result, computed as above, is rounded to nearest at ``bits``
significant bits (lo to a multiple of 2**(e - bits) in hi's binade: one bit fewer just
below a power of two); binary64 inputs stay exact.  Such a sweep errs by about 2**-bits per
operation, as mpmath at ``bits`` does, at numpy's speed.
"""

from __future__ import annotations

import math

import mpmath
import numba
import numpy as np
from mpmath import libmp

from roundoff_coverage import formats

from . import double_word as dw
from .backend import Backend
from .double_word import OutOfRange
from .exact import OrderPolicy
from .exact_products import exact_dot, exact_matmul
from .reference import ReferenceBackend, binary64_raw, read_raw

__all__ = ["DD", "DoubleDoubleBackend", "OutOfRange", "double_double", "exact_values",
           "exact_sums", "odd53"]

DD = np.dtype([("hi", np.float64), ("lo", np.float64)])
PREC = 106              # mpmath's precision for the primitives not computed here
POW_MAX = 8             # pow's integral exponents computed here (module docstring)
# A product's exact sums are made in pieces of at most this many entries (rows of a): their
# limbs and the double-double additions take about 100 bytes an entry while they are made,
# so a language model's output-embedding gradient (50,257 x 768 entries) would hold 4 GB.
PIECE = 1 << 20
# Elementwise primitives on larger operands are computed this many elements at a time: a
# double-double addition makes about four temporaries of its result's size, exp a dozen.
BLOCK = 1 << 20
_BIG, _SMALL = 2.0 ** 900, 2.0 ** -900


def _sums(x):
    """(hi, lo) of exact_products' ExactSums (numerics/exact_products.py): the limbs added
    from the top in double-double, exactly while a partial sum spans at most 106 bits and
    within 3u**2 of it per addition beyond (the limbs below are smaller than its last
    bit); the top limb, which may exceed 2**53, in two exact halves (_limbs_added, one
    compiled pass).  Entries of the slow path (``wide``) one by one; NaN and infinities
    (``special``: sums of non-finite products, the real extension's) as they are."""
    count = x.limbs.shape[0]
    hi, lo = np.zeros(x.shape), np.zeros(x.shape)
    _limbs_added(np.ascontiguousarray(x.limbs.reshape(count, -1)),
                 np.ascontiguousarray(x.exp.reshape(-1)), x.beta, hi.reshape(-1),
                 lo.reshape(-1))
    fh, fl = hi.reshape(-1), lo.reshape(-1)
    for i, (m, e) in x.wide.items():
        if not m:
            fh[i] = fl[i] = 0.0
            continue
        if not -900 <= m.bit_length() + e <= 900:
            raise OutOfRange("double-double: a sum of products outside [2**-900, 2**900]")
        h = float(m)                                         # m rounded to nearest
        fh[i], fl[i] = math.ldexp(h, e), math.ldexp(float(m - int(h)), e)
    special = x.special != 0
    if (x.limbs.any(axis=0) & (hi == 0) & ~special).any():
        raise OutOfRange("double-double: a sum of products below 2**-900")
    return np.where(special, x.special, hi), np.where(special, 0.0, lo)


_two_sum, _fast_two_sum = numba.njit(dw.two_sum), numba.njit(dw.fast_two_sum)


@numba.njit(cache=True)
def _limbs_added(limbs, exp, beta, hi, lo):
    """Each entry's limbs (Q, n) as ``_sums`` adds them, into ``hi``, ``lo``: the terms
    limb * 2**(exp + (Q - 1 - q) * beta), the top limb split at bit 26 (its floor part
    first), each added to the pair by double_word.add's steps."""
    count, n = limbs.shape
    for i in range(n):
        h, l = 0.0, 0.0
        first = limbs[0, i]
        top = first >> 26
        for step in range(count + 1):
            q = max(step - 1, 0)
            limb = top if step == 0 else first - (top << 26) if step == 1 else limbs[q, i]
            y = math.ldexp(float(limb), exp[i] + (count - 1 - q) * beta +
                           (26 if step == 0 else 0))
            # double_word.add(h, l, y, 0.0)
            sh, sl = _two_sum(h, y)
            th, tl = _two_sum(l, 0.0)
            vh, vl = _fast_two_sum(sh, sl + th)
            h, l = _fast_two_sum(vh, tl + vl)
        hi[i], lo[i] = h, l


def exact_values(a, ctx=mpmath.mp):
    """A DD array as an object array of its exact values: Python floats where lo is 0 (NaN
    and infinities included), mpf of ``ctx`` (only made, never rounded in) otherwise."""
    return exact_sums(a["hi"], a["lo"], ctx)


def exact_sums(hi, lo, ctx=mpmath.mp):
    """hi + lo (float64 arrays; lo 0 beside a NaN or an infinity) exactly, as
    ``exact_values`` writes them: each as integer significands (frexp's fraction times
    2**53, exact) over the lower exponent, summed in Python integers, one mpf made (and
    normalised) per entry."""
    h, low = np.ravel(np.asarray(hi, dtype=np.float64)), np.ravel(np.asarray(lo, np.float64))
    out = np.empty(h.size, dtype=object)
    plain = low == 0.0
    if plain.any():
        out[plain] = h[plain].tolist()
    at = np.flatnonzero(~plain)
    if at.size:
        fh, eh = np.frexp(h[at])
        fl, el = np.frexp(low[at])
        base = np.minimum(eh, el)
        man = ((fh * 2.0 ** 53).astype(np.int64).astype(object) << (eh - base).astype(object)) \
            + ((fl * 2.0 ** 53).astype(np.int64).astype(object) << (el - base).astype(object))
        mk, make = ctx.make_mpf, libmp.from_man_exp
        out[at] = [mk(make(m, e)) for m, e in zip(man.tolist(), (base - 53).tolist())]
    return out.reshape(np.shape(hi))


def odd53(hi, lo):
    """hi + lo (hi = RN(hi + lo), finite) rounded to odd at binary64's 53 bits, from which
    any rounding into p <= 51 bits is that of hi + lo itself (Boldo and Melquiond,
    "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd",
    IEEE TC 57(4), 2008).  The value lies strictly between hi and its neighbour toward lo
    (lo != 0); of the two, the one with an odd last bit (hi's significand: frexp's mantissa
    times 2**53; a subnormal hi has lo = 0, lo's bits being binary64 bits below half of
    hi's last)."""
    with np.errstate(invalid="ignore"):
        odd = np.frexp(hi)[0] * 2.0 ** 53 % 2 == 1
    return np.where((lo == 0) | odd, hi, np.nextafter(hi, np.copysign(np.inf, lo)))


def _to_bits(hi, lo, bits):
    """(hi, lo) rounded to ``bits`` significant bits (to nearest): lo to a multiple of
    2**(e - bits), e being hi's binade (|hi| in [2**(e-1), 2**e)), of which hi is a multiple
    already (bits > 53); bits - 1 just below a power of two, where hi rounded up to it."""
    with np.errstate(all="ignore"):
        quantum = np.ldexp(1.0, np.frexp(hi)[1] - bits)
        finite = np.isfinite(hi)
        r = np.where(finite & (lo != 0), np.rint(lo / quantum) * quantum, 0.0)
        return dw.fast_two_sum(hi, r)          # a NaN or infinite hi stays (lo: _checked)


def _pair(hi, lo):
    out = np.empty(np.shape(hi), dtype=DD)
    out["hi"], out["lo"] = hi, lo
    return out


def _checked(hi, lo, ieee=None):
    """The pair as a DD array (zeros +0, as mpmath's one zero; lo 0 beside a NaN or an
    infinity), or OutOfRange for a finite result outside [2**-900, 2**900] or a non-finite
    one that is not marked in ``ieee`` (the IEEE result of non-finite operands or of a
    division by zero, the reference's conventions, as opposed to an overflow)."""
    big = np.abs(hi)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(hi)
        bad = finite & (big != 0) & ((big < _SMALL) | (big > _BIG))
        bad |= ~finite if ieee is None else ~finite & ~ieee
    if bad.any():
        raise OutOfRange(f"double-double: a result outside [2**-900, 2**900] "
                         f"({float(np.asarray(hi)[bad].reshape(-1)[0])!r})")
    return _pair(hi + 0.0, np.where(finite & (big != 0), lo, 0.0))


# The primitives computed here (every other elementwise primitive is mpmath's), and their
# IEEE results on binary64 numbers: a double-double result where an operand is a NaN or an
# infinity (or the divisor is 0, a root's or a logarithm's argument out of its domain) is
# that of the his alone (the reference's conventions: x/0 = +-inf by the sign of x,
# 0 * inf = inf - inf = sqrt(-1) = log(-1) = NaN, log(0) = -inf, maximum and minimum
# propagate NaN, erf(+-inf) = +-1).
_IEEE = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
         "divide": np.divide, "negative": np.negative, "abs": np.abs,
         "maximum": np.maximum, "minimum": np.minimum, "square": np.square,
         "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
         "reciprocal": lambda x: 1.0 / x, "exp": np.exp, "expm1": np.expm1,
         "log": np.log, "log1p": np.log1p, "tanh": np.tanh,
         "erf": lambda x: np.where(np.isnan(x), x, np.sign(x))}
_FUNCTIONS = {"exp": dw.exp, "expm1": dw.expm1, "log": dw.log, "log1p": dw.log1p,
              "tanh": dw.tanh, "erf": dw.erf}


class DoubleDoubleBackend(Backend):
    """Double-double numbers (module docstring); ``bits``: every result rounded further to
    that many bits (module docstring), None for none."""

    capabilities = ReferenceBackend.capabilities
    exact_dot = True                 # dot: exact sums of the products (_exact)

    def __init__(self, bits=None):
        if bits is not None and (int(bits) != bits or not 54 <= bits < PREC):
            raise ValueError(f"double_double: bits must be an integer in [54, {PREC}) or "
                             f"None (got {bits!r})")
        self.bits = None if bits is None else int(bits)
        self.prec = self.bits or PREC
        self.name = "double_double" if bits is None else f"double_double({self.bits})"
        self.policy = OrderPolicy()
        self._mp = ReferenceBackend(PREC)

    def _done(self, hi, lo, ieee=None):
        """A result pair as a DD array (_checked), rounded to ``bits`` where set."""
        if self.bits is not None:
            hi, lo = _to_bits(hi, lo, self.bits)
        return _checked(hi, lo, ieee)

    # -- conversion --
    def asarray(self, x):
        """Numbers as double-double: binary16/32/64 and integer arrays exactly (integers up
        to 2**53), anything else entry by entry through mpmath (rounded to double-double)."""
        arr = np.asarray(x)
        if arr.dtype == DD:
            return arr
        if arr.dtype.kind == "f" and arr.dtype.itemsize <= 8:
            f = arr.astype(np.float64)
            return _checked(f, np.zeros(arr.shape), ~np.isfinite(f))
        if arr.dtype.kind in "iub":
            f = arr.astype(np.float64)
            if np.array_equal(f.astype(arr.dtype), arr):
                return _checked(f, np.zeros(arr.shape))
        return self._from_mp(self._mp.asarray(arr))

    def _from_mp(self, a):
        """An object array of mpf / float entries rounded to double-double."""
        a = np.asarray(a, dtype=object)
        hi, lo = np.empty(a.shape), np.empty(a.shape)
        fh, fl = hi.reshape(-1), lo.reshape(-1)
        for i, v in enumerate(a.reshape(-1).tolist()):      # NaN and infinities as floats
            if type(v) is float:
                fh[i], fl[i] = v, 0.0
                continue
            r = read_raw(v, self.prec)
            h = binary64_raw(r)
            if h is not None:
                fh[i], fl[i] = h, 0.0
                continue
            sign, man, exp, bc = r
            if not man or not -900 <= exp + bc <= 900:
                raise OutOfRange(f"double-double: {mpmath.nstr(mpmath.mpf(r), 8)} is outside "
                                 f"[2**-900, 2**900]")
            h = libmp.to_float(r, rnd="n")                   # nearest binary64
            fh[i], fl[i] = h, libmp.to_float(libmp.mpf_sub(r, libmp.from_float(h)), rnd="n")
        with np.errstate(invalid="ignore"):
            return self._done(*dw.fast_two_sum(hi, lo), ~np.isfinite(hi))

    def _to_mp(self, a):
        """Double-double entries as the reference's numbers (``exact_values``)."""
        return exact_values(self.asarray(a), self._mp.ctx)

    def constant(self, literal, shape=()):
        """``literal`` rounded to double-double (107 bits, then split)."""
        v = self._from_mp(np.array([mpmath.mp.make_mpf(read_raw(literal, 107))],
                                   dtype=object))[0]
        out = np.empty(shape, dtype=DD)
        out[...] = v
        return out

    def to_float64(self, a) -> np.ndarray:
        return self.cast(a, "binary64")

    def where(self, cond, a, b):
        """np.where, in double-double where either side is (integers stay integers)."""
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype == DD or b.dtype == DD:
            a, b = self.asarray(a), self.asarray(b)
        return np.where(cond, a, b)

    def cast(self, a, fmt, mode=None, with_flags=False):
        """Each value rounded once into ``fmt``: through round-to-odd at 53 bits for formats
        of at most 51 bits (Boldo and Melquiond, "Emulation of FMA and correctly rounded
        sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008: then any
        rounding to p <= 51 bits is the rounding of the exact value), hi itself for
        binary64 to nearest (hi = RN(hi + lo)); otherwise mpmath's cast."""
        fmt = formats.get(fmt)
        mode = mode or "nearest_even"
        x = self.asarray(a)
        if not with_flags and mode != "stochastic" and fmt.fits_binary64:
            hi, lo = x["hi"], x["lo"]
            if fmt == formats.get("binary64") and mode == "nearest_even":
                return hi + 0.0
            if fmt.precision <= 51:
                return formats.round_to(odd53(hi, lo), fmt, mode)
        return self._mp.cast(self._to_mp(x), fmt, mode, with_flags)

    # -- arithmetic --
    def _apply(self, name, *arrays):
        """An elementwise primitive; on operands of one shape larger than BLOCK, a block
        of BLOCK elements at a time (each result depends on its own operands alone), so its
        temporaries take a block's memory, not the operands' several times over."""
        if name in _IEEE:
            xs = [self.asarray(a) for a in arrays]
            if xs[0].size > BLOCK and all(x.shape == xs[0].shape for x in xs):
                out = np.empty(xs[0].shape, dtype=DD)
                flat, parts = out.reshape(-1), [x.reshape(-1) for x in xs]
                for i in range(0, flat.size, BLOCK):
                    flat[i:i + BLOCK] = self._apply_whole(name, *(p[i:i + BLOCK]
                                                                  for p in parts))
                return out
        return self._apply_whole(name, *arrays)

    def _apply_whole(self, name, *arrays):
        if name == "pow":
            out = self._integral_pow(*arrays)
            if out is not None:
                return out
        if name not in _IEEE:                   # not computed here: mpmath's
            return self._from_mp(getattr(self._mp, name)(*[self._to_mp(a) for a in arrays]))
        xs = np.broadcast_arrays(*[self.asarray(a) for a in arrays])
        parts = [(x["hi"], x["lo"]) for x in xs]
        ieee = np.zeros(xs[0].shape, dtype=bool)
        for h, _ in parts:
            ieee |= ~np.isfinite(h)
        if name in ("divide", "reciprocal"):
            ieee |= parts[-1][0] == 0
        elif name in ("sqrt", "rsqrt"):
            ieee |= (parts[0][0] < 0) | ((parts[0][0] == 0) & (name == "rsqrt"))
        elif name == "log":
            ieee |= parts[0][0] <= 0
        elif name == "log1p":                   # x <= -1: hi below -1, or -1 and lo <= 0
            xh, xl = parts[0]
            ieee |= (xh < -1) | ((xh == -1) & (xl <= 0))
        with np.errstate(all="ignore"):
            # The functions are computed on finite operands in their domain (0 elsewhere);
            # the arithmetic as it is: max(x, -inf) keeps x's lo.
            hi, lo = self._native(name, parts if name not in _FUNCTIONS else
                                  [(np.where(ieee, 0.0, h), np.where(ieee, 0.0, l))
                                   for h, l in parts])
            if ieee.any():
                his = [h for h, _ in parts]
                if name == "log1p":             # -1 - |lo|: below the domain
                    his = [np.where(his[0] == -1, np.where(parts[0][1] < 0, -2.0, -1.0),
                                    his[0])]
                hi = np.where(ieee, _IEEE[name](*his), hi)
        if name in ("multiply", "square", "divide", "reciprocal"):
            # A product or quotient of nonzero numbers that underflowed to 0.
            nonzero = parts[0][0] != 0
            if name == "multiply":
                nonzero &= parts[1][0] != 0
            if (nonzero & (hi == 0) & ~ieee).any():
                raise OutOfRange(f"double-double: {name} underflows below 2**-900")
        return self._done(hi, lo, ieee)

    def _integral_pow(self, a, b):
        """pow(a, b) where every exponent is an integer n with |n| <= POW_MAX (module
        docstring): n - 1 products from the left, then 1 / x**|n| for negative n; pow(x, 0)
        = 1 (a NaN x included), and a NaN or infinite x, or 0 to a negative power, as
        numpy's pow of hi gives it (zeros are +0 here, as the reference reads them).  None
        where an exponent is not such an integer: mpmath's pow then."""
        x, y = np.broadcast_arrays(self.asarray(a), self.asarray(b))
        n = y["hi"]
        with np.errstate(invalid="ignore"):
            if x.size == 0 or (y["lo"] != 0).any() or not np.isfinite(n).all() or \
                    (np.abs(n) > POW_MAX).any() or (n != np.round(n)).any():
                return None
        xh, xl = x["hi"], x["lo"]
        ieee = ~np.isfinite(xh) | ((xh == 0) & (n < 0))
        ieee &= n != 0
        hi, lo = np.ones(x.shape), np.zeros(x.shape)
        with np.errstate(all="ignore"):
            fh, fl = np.where(ieee, 0.0, xh), np.where(ieee, 0.0, xl)
            for m in np.unique(n).tolist():
                if m == 0:
                    continue
                at = n == m
                ph, pl = fh[at], fl[at]
                rh, rl = ph, pl
                for _ in range(int(abs(m)) - 1):
                    rh, rl = dw.mul(rh, rl, ph, pl)
                if m < 0:
                    rh, rl = dw.div(np.ones(rh.shape), np.zeros(rh.shape), rh, rl)
                hi[at], lo[at] = rh, rl
            if ieee.any():
                hi = np.where(ieee, np.power(xh + 0.0, n), hi)
                lo = np.where(ieee, 0.0, lo)
        # A power of a nonzero number that underflowed to 0 (beyond the range held).
        if ((xh != 0) & (hi == 0) & ~ieee).any():
            raise OutOfRange("double-double: pow underflows below 2**-900")
        return self._done(hi, lo, ieee)

    @staticmethod
    def _native(name, parts):
        """(hi, lo) of a native primitive (module docstring) on finite operands."""
        if name in ("add", "subtract"):
            (xh, xl), (yh, yl) = parts
            return dw.add(xh, xl, yh, yl) if name == "add" else dw.add(xh, xl, -yh, -yl)
        if name in ("multiply", "square"):
            (xh, xl), (yh, yl) = parts if name == "multiply" else parts * 2
            return dw.mul(xh, xl, yh, yl)
        if name in ("divide", "reciprocal"):
            (xh, xl), (yh, yl) = parts if name == "divide" else \
                [(np.ones(parts[0][0].shape), np.zeros(parts[0][0].shape))] + parts
            return dw.div(xh, xl, yh, yl)
        if name == "negative":
            return -parts[0][0], -parts[0][1]
        if name == "abs":
            (xh, xl), = parts
            neg = xh < 0
            return np.where(neg, -xh, xh), np.where(neg, -xl, xl)
        if name in ("maximum", "minimum"):
            (xh, xl), (yh, yl) = parts
            x_more = (xh > yh) | ((xh == yh) & (xl > yl))
            pick = x_more if name == "maximum" else ~x_more
            return np.where(pick, xh, yh), np.where(pick, xl, yl)
        (xh, xl), = parts
        if name in _FUNCTIONS:
            return _FUNCTIONS[name](xh, xl)
        s = dw.sqrt(np.maximum(xh, 0.0), xl)
        if name == "sqrt":
            return s
        return dw.div(np.ones(xh.shape), np.zeros(xh.shape), *s)

    def matmul(self, a, b):
        """a @ b (numpy's shape rules): the exact sums of products rounded to double-double."""
        a, b = self.asarray(a), self.asarray(b)
        if min(a.ndim, b.ndim) == 0 or a.size == 0 or b.size == 0 or \
                a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            return super().matmul(a, b)
        return self._exact(a, b, exact_matmul, -2 if b.ndim > 1 else 0)

    def dot(self, a, b):
        """Dot products along the last axis, the others broadcast: the exact sums rounded
        to double-double; as one batched matmul where the broadcasting makes a product
        of matrices (the order of an exact sum does not matter; BLAS instead of a loop)."""
        a, b = self.asarray(a), self.asarray(b)
        if min(a.ndim, b.ndim) == 0 or a.shape[-1] != b.shape[-1] or a.size == 0 or \
                b.size == 0:
            return super().dot(a, b)
        plan = _matmul_plan(a.shape, b.shape)
        if plan is None:
            return self._exact(a, b, exact_dot, -1)
        pa, (ea, sa), pb, (eb, sb), grouped, back = plan
        out = self._exact(np.transpose(a.reshape(ea), pa).reshape(sa),
                          np.transpose(b.reshape(eb), pb).reshape(sb), exact_matmul, -2)
        return np.transpose(out.reshape(grouped), back)

    def _exact(self, a, b, product, inner_b):
        """The product of a and b (``_exact_piece``), for a matrix product with more than
        PIECE entries in pieces of a's rows: each entry's exact sum reads one row of a and
        one column of b (the slicing scales each row and column by itself), so the pieces
        are the whole product's entries."""
        rows = a.shape[-2] if product is exact_matmul and a.ndim >= 2 else 1
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if b.ndim > 1 else a.shape[:-2]
        across = math.prod(batch) * (b.shape[-1] if b.ndim > 1 else 1)
        step = max(1, PIECE // max(across, 1))
        if rows <= step:
            return self._exact_piece(a, b, product, inner_b)
        parts = [self._exact_piece(a[..., r:r + step, :], b, product, inner_b)
                 for r in range(0, rows, step)]
        return np.concatenate(parts, axis=-2 if b.ndim > 1 else -1)

    def _exact_piece(self, a, b, product, inner_b):
        """The product of (a.hi + a.lo) and (b.hi + b.lo): a's pieces concatenated along
        the contraction axis against b's, lo scaled by 2**53 so that every row of pieces
        spans few bits (exact_products slices by span), one exact product per level of
        scale (hi hi; hi lo + lo hi; lo lo), each rounded to double-double (``_sums``) and
        added in double-double.  Error: at most about 2**-104 of the result plus 2**-156
        of the sum of the |products| (the levels below the first are 2**-52 of it), so
        2**-100 of the result unless the sum cancels by more than 2**56."""
        pa = [a["hi"]] + ([np.ldexp(a["lo"], 53)] if (a["lo"] != 0).any() else [])
        pb = [b["hi"]] + ([np.ldexp(b["lo"], 53)] if (b["lo"] != 0).any() else [])
        hi = lo = None
        for level in range(len(pa) + len(pb) - 1):
            pairs = [(s, level - s) for s in range(len(pa)) if 0 <= level - s < len(pb)]
            left = np.concatenate([pa[s] for s, _ in pairs], axis=-1)
            right = np.concatenate([pb[t] for _, t in pairs], axis=inner_b)
            h, l = _sums(product(left, right))
            h, l = np.ldexp(h, -53 * level), np.ldexp(l, -53 * level)
            with np.errstate(invalid="ignore"):
                hi, lo = (h, l) if hi is None else dw.add(hi, lo, h, l)
        ieee = ~np.isfinite(hi)          # the real extension's NaN and infinities (_sums)
        return self._done(hi, lo, ieee)

    # -- comparisons and predicates --
    def _compare(self, name, a, b):
        x, y = np.broadcast_arrays(self.asarray(a), self.asarray(b))
        xh, xl, yh, yl = x["hi"], x["lo"], y["hi"], y["lo"]
        eq = (xh == yh) & (xl == yl)                  # False beside a NaN: unordered
        less = (xh < yh) | ((xh == yh) & (xl < yl))
        more = (xh > yh) | ((xh == yh) & (xl > yl))
        return {"equal": eq, "not_equal": ~eq, "less": less, "less_equal": less | eq,
                "greater": more, "greater_equal": more | eq}[name]

    def _predicate(self, name, a):
        hi = self.asarray(a)["hi"]
        return {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}[name](hi)


def _matmul_plan(shape_a, shape_b):
    """How dot(a, b) (last axes contracted, the others broadcast) is a batched matmul:
    the leading axes where a and b agree are the batch, those only a spans (b has 1) the
    rows, those only b spans the columns.  (a's axis order, a's shapes before and after,
    b's, the result's grouped shape, the axis order back), or None where there are no
    rows and no columns (a plain batch of dot products)."""
    n = max(len(shape_a), len(shape_b)) - 1
    ea = (1,) * (n + 1 - len(shape_a)) + tuple(shape_a[:-1])
    eb = (1,) * (n + 1 - len(shape_b)) + tuple(shape_b[:-1])
    batch = [i for i in range(n) if ea[i] == eb[i]]
    rows = [i for i in range(n) if ea[i] != eb[i] and eb[i] == 1]
    cols = [i for i in range(n) if ea[i] != eb[i] and ea[i] == 1]
    if not rows and not cols or len(batch) + len(rows) + len(cols) != n:
        return None
    k = shape_a[-1]
    size = lambda axes, e: math.prod(e[i] for i in axes)        # noqa: E731
    nb, nr, nc = size(batch, ea), size(rows, ea), size(cols, eb)
    pa = batch + rows + cols + [n]
    pb = batch + [n] + cols + rows
    grouped = tuple(ea[i] for i in batch) + tuple(ea[i] for i in rows) + \
        tuple(eb[i] for i in cols)
    back = tuple(np.argsort(batch + rows + cols))
    return (pa, (ea + (k,), (nb, nr, k)), pb, (eb + (k,), (nb, k, nc)), grouped, back)


def double_double(bits=None) -> DoubleDoubleBackend:
    """The double-double backend (module docstring); ``bits``: its results rounded to that
    many bits."""
    return DoubleDoubleBackend(bits)

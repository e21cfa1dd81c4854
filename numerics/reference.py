"""reference(prec) -> ReferenceBackend: real arithmetic on mpmath numbers at ``prec`` bits, each
primitive rounded once (to nearest).  numerics/resolve.py escalates the precision until every
result's rounding into a format is settled, certified by the interval arithmetic of
numerics/intervals.py where it can.

Numbers are mpmath ``mpf`` of a LOCAL ``mpmath.MPContext`` (mpmath.mp is never touched) in
numpy object arrays.  An entry that is exactly a binary64 number may be a Python float
instead: ``asarray`` reads a binary16/32/64 array as an object array of floats, and
``constant`` fills with a float when its rounded literal is one (0, 1, 0.5); every primitive
reads such entries as mpf when it needs them.  A model's parameters (millions of binary64
values that mostly feed exact products, which want binary64 operands anyway) are then never
turned into mpmath objects.  The arrays stay object arrays, so an mpf written into one (a
rule filling a copy of its input) is kept, never rounded to binary64.  Conventions (this is a real-number reference, not an IEEE emulation):

- Inputs are exact: ``asarray`` reads floats, ints, gmpy2 mpfr and dyadic Fractions exactly,
  whatever ``prec`` is (an mpf carries its own mantissa); a non-dyadic rational or decimal
  string is rounded once to ``prec`` bits.  ``constant`` rounds its literal once to ``prec``.
- Primitives with an exact result in the inputs' own bits (negative, abs, copysign, maximum,
  minimum, fmax, fmin, floor, ceil, round, trunc) return it unrounded; the others are
  evaluated with 32 guard bits and rounded once to ``prec``; +, -, *, /, sqrt, fma are
  correctly rounded, the transcendental ones as accurate as mpmath's guarded evaluation (an
  error a little above 0.5 ulp is possible, not more than 1 ulp in practice).
- Zeros are unsigned (mpmath has one zero): x/0 = +-inf by the sign of x (0 read as +0),
  1/0 = +inf, atan2(0, -1) = pi, copysign(x, 0) = |x|.
- IEEE's special values otherwise: sqrt(-1), log(-1), asin(2), 0/0, inf - inf, 0 * inf give
  NaN; log(0) = -inf; atanh(+-1) = +-inf; pow follows C99's special cases (pow(x, 0) = 1,
  pow(1, y) = 1, pow(-8, 1/3) = NaN); hypot(inf, NaN) = inf; maximum/minimum propagate NaN,
  fmax/fmin ignore it.  Domain errors never raise: a complex mpmath result becomes NaN.
- dot and matmul: each entry is the exact sum of products rounded once to ``prec``, whatever
  the order and fma policy (the exact sum makes them moot): operands that are binary64
  values (read from float64, bfloat16, binary32, ... arrays, NaN and inf included) go to
  numerics/exact_products.py (BLAS-speed slices); wider finite operands (results of earlier
  primitives) are cut exactly into binary64 pieces first.  Operands with a NaN or inf among
  wider entries, or pieces outside binary64's range, fall back to the base class: the
  policy's order at ``prec`` bits, one rounding per product and per addition.  Sums
  (``sum``) are always that accumulation.
- Capabilities: Rounding, Erf, InverseTrig, Cbrt.  NextAfter and Bits are absent (a real has
  no next value and no bit pattern): the base class refuses them with CapabilityError.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
from mpmath import libmp
from mpmath.libmp import fnan, finf, fninf, fone, fzero, round_nearest

from roundoff_coverage import formats

from .backend import Backend
from .exact import OrderPolicy, elementwise
from .exact_products import exact_dot, exact_matmul, to_mpf

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
GUARD = 32          # extra bits for every rounded primitive before its one rounding to prec
_RN = round_nearest
_CMP = {"equal": lambda x, y: x == y, "not_equal": lambda x, y: x != y,
        "less": lambda x, y: x < y, "less_equal": lambda x, y: x <= y,
        "greater": lambda x, y: x > y, "greater_equal": lambda x, y: x >= y}


# ----- raw mpf values: (sign, man, exp, bc) tuples, value (-1)**sign * man * 2**exp -----------
def _is_nan(r):
    return r == fnan


def _is_inf(r):
    return r == finf or r == fninf


def special_raw(r):
    return r == fnan or r == finf or r == fninf


def neg_raw(r):
    return r[0] == 1                                     # -inf included, NaN and 0 excluded


def read_raw(x, prec: int, rnd=_RN):
    """One number as a raw mpf: exact for dyadic values (floats, ints, mpfr, mpf, dyadic
    Fractions), rounded once to ``prec`` bits under ``rnd`` otherwise."""
    if hasattr(x, "_mpf_"):
        return x._mpf_
    if type(x) is float or isinstance(x, (np.float64, np.float32, np.float16)):
        return libmp.from_float(float(x))                # exact: 53 bits hold any of them
    if isinstance(x, np.integer):
        x = int(x)
    real = formats.read_real(x)
    if real.kind == "nan":
        return fnan
    if real.kind == "inf":
        return fninf if real.sign else finf
    if real.kind == "zero":
        return fzero
    n = -real.n if real.sign else real.n
    if real.d & (real.d - 1) == 0:                       # a power of two: dyadic, exact
        return libmp.from_man_exp(n, 1 - real.d.bit_length())
    return libmp.from_rational(n, real.d, prec, rnd)


def binary64_raw(r):
    """The binary64 value of a raw mpf, or None where it has none: more than 53 significant
    bits (mpmath keeps the mantissa odd, so bc is the true width), below 2**-1074's grid or
    at or above 2**1024.  NaN and +-inf map to themselves, the (unsigned) zero to +0.0."""
    if r == fzero:
        return 0.0
    if special_raw(r):
        return math.nan if r == fnan else (math.inf if r == finf else -math.inf)
    sign, man, exp, bc = r
    if bc > 53 or exp < -1074 or exp + bc > 1024:
        return None
    v = math.ldexp(int(man), exp)                        # exact: representable
    return -v if sign else v


def raw_real(r, fmt=None, clamp=False):
    """A raw mpf as something formats.round_exact reads exactly.  With ``clamp``, magnitudes
    far outside ``fmt``'s range are replaced by ones that round identically in every
    deterministic mode: |x| < 2**(qmin-1) (below half the least subnormal) by 2**(qmin-2), and
    |x| >= 2**(emax+2) (past every finite value) by 2**(emax+2).  This keeps exp(-1e6) at
    2048 bits from becoming a 1.4-million-bit Fraction."""
    if r == fnan:
        return "nan"
    if r == finf:
        return "inf"
    if r == fninf:
        return "-inf"
    sign, man, exp, bc = r
    if not man:
        return 0
    if clamp:
        top = exp + bc - 1                               # 2**top <= |x| < 2**(top+1)
        if top <= fmt.qmin - 2:
            man, exp = 1, fmt.qmin - 2
        elif top >= fmt.emax + 2:
            man, exp = 1, fmt.emax + 2
    man = -int(man) if sign else int(man)
    return man << exp if exp >= 0 else Fraction(man, 1 << -exp)


def _odd_binary64(raws):
    """Raw mpf values rounded to odd into binary64 (truncated to 53 bits, the last bit set
    when that was inexact), or None when one lies outside binary64's normal range.  Rounding
    to odd at 53 bits and then into a format of p <= 51 bits, in any deterministic mode,
    gives the value's correct rounding into it (Boldo and Melquiond, "Emulation of FMA and
    correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008),
    at a fraction of formats.round_exact's cost."""
    def odd(r):
        sign, man, exp, bc = r
        if bc <= 53:
            return r
        cut = bc - 53
        kept = int(man >> cut)
        return sign, kept | (1 if (kept << cut) != man else 0), exp + cut, 53
    return _at_53_bits(raws, odd, -1000, 1023)


def _nearest_binary64(raws):
    """Raw mpf values rounded to nearest even into binary64 (mpmath's own rounding to 53
    bits, then exact), or None when one lies outside binary64's normal range (2**-1022 <=
    |x| < 2**1024 after rounding), where the subnormal grid or overflow needs
    formats.round_exact."""
    return _at_53_bits(raws, lambda r: libmp.mpf_pos(r, 53, _RN) if r[3] > 53 else r,
                       -1021, 1024)


def _at_53_bits(raws, cut, low, high):
    """float64 values of raw mpf values: zeros and specials as they are, the others cut to
    at most 53 bits by ``cut`` (a raw mpf to a raw mpf) and read exactly; None when a cut
    value's exponent + bit count leaves [low, high]."""
    out = np.empty(len(raws))
    for i, r in enumerate(raws):
        if r == fzero:
            out[i] = 0.0
            continue
        if special_raw(r):
            out[i] = math.nan if r == fnan else (math.inf if r == finf else -math.inf)
            continue
        sign, man, exp, bc = cut(r)
        if not low <= exp + bc <= high:
            return None
        v = math.ldexp(int(man), exp)
        out[i] = -v if sign else v
    return out


def round_raw(r, fmt, mode, index=0, seed=0) -> formats.Rounded:
    """A raw mpf rounded once into ``fmt`` under ``mode`` (formats.round_exact)."""
    return formats.round_exact(raw_real(r, fmt, clamp=mode != "stochastic"), fmt, mode,
                               seed=seed, index=index)


def _int_pair(x, y):
    """Integers X, Y and an exponent e with x = X*2**e, y = Y*2**e (finite raw x, y)."""
    (sx, mx, ex, _), (sy, my, ey, _) = x, y
    e = min(ex, ey)
    X, Y = int(mx) << (ex - e), int(my) << (ey - e)
    return (-X if sx else X), (-Y if sy else Y), e


def trunc_raw(r):
    return libmp.mpf_ceil(r) if neg_raw(r) else libmp.mpf_floor(r)


def _remainder_special(x, y):
    """fmod's and remainder's result where no division is done: NaN for x NaN or infinite,
    y NaN or zero; x itself for y infinite or x zero; None otherwise."""
    if special_raw(x) or _is_nan(y) or y == fzero:
        return fnan
    if _is_inf(y) or x == fzero:
        return x
    return None


def fmod_raw(x, y, prec=0, rnd=_RN):
    """C fmod: x - trunc(x/y)*y, exact on the common binary grid of x and y, then rounded."""
    special = _remainder_special(x, y)
    if special is not None:
        return special
    X, Y, e = _int_pair(x, y)
    r = abs(X) % abs(Y)
    return libmp.from_man_exp(-r if X < 0 else r, e, prec, rnd)


def remainder_raw(x, y, prec=0, rnd=_RN):
    """IEEE remainder: x - n*y with n = x/y rounded to nearest, ties to even; exact."""
    special = _remainder_special(x, y)
    if special is not None:
        return special
    X, Y, e = _int_pair(x, y)
    q, r = divmod(abs(X), abs(Y))
    if 2 * r > abs(Y) or (2 * r == abs(Y) and q % 2 == 1):
        r -= abs(Y)
    return libmp.from_man_exp(-r if X < 0 else r, e, prec, rnd)


# add, subtract and multiply: one libmp operation rounded to nearest at the working precision
# (their table entries below), the elementwise loop's hottest operations.
_RAW_ARITHMETIC = {"add": libmp.mpf_add, "subtract": libmp.mpf_sub, "multiply": libmp.mpf_mul}
# exp, erf and tanh (activations, softmax): the libmp functions mpmath's own wrap.
_RAW_GUARDED = {"exp": libmp.mpf_exp, "erf": libmp.mpf_erf, "tanh": libmp.mpf_tanh}


# ----- the backend ------------------------------------------------------------------------
class ReferenceBackend(Backend):
    """mpmath numbers at ``prec`` bits; see the module docstring for the conventions."""

    capabilities = frozenset({"Rounding", "Erf", "InverseTrig", "Cbrt"})

    def __init__(self, prec: int = 256, order: str = "sequential", fma: bool = False):
        if int(prec) != prec or prec < 2:
            raise ValueError(f"reference: prec must be an integer >= 2 bits (got {prec!r})")
        self.prec = int(prec)
        self.name = f"reference({self.prec})"
        self.policy = OrderPolicy(order, fma)
        self.ctx = mpmath.MPContext()
        self.ctx.prec = self.prec
        self._wide = mpmath.MPContext()                 # guarded evaluation context
        self._wide.prec = self.prec + GUARD
        self._mpf = self.ctx.mpf
        self._table = self._build_table()

    # -- numbers --
    def _mk(self, r):
        return self.ctx.make_mpf(r)

    def _num(self, x):
        return x if type(x) is self._mpf else self._mk(read_raw(x, self.prec))

    def _round(self, r):
        return self._mk(libmp.mpf_pos(r, self.prec, _RN))

    def _guarded(self, fname):
        """Element function: mpmath's ``fname`` at prec + GUARD bits, rounded once; a complex
        result (outside the real domain) or a domain error is NaN."""
        f = getattr(self._wide, fname)

        def g(*xs):
            try:
                v = f(*xs)
            except (libmp.ComplexResult, ValueError, ZeroDivisionError):
                return self._mk(fnan)
            return self._round(v._mpf_) if hasattr(v, "_mpf_") else self._mk(fnan)
        return g

    def _build_table(self):
        p, mk = self.prec, self._mk
        t = {name: self._guarded(name) for name in (
            "exp", "expm1", "log", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
            "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf")}
        self._atan2_finite = self._guarded("atan2")
        t.update({
            "add": lambda x, y: mk(libmp.mpf_add(x._mpf_, y._mpf_, p, _RN)),
            "subtract": lambda x, y: mk(libmp.mpf_sub(x._mpf_, y._mpf_, p, _RN)),
            "multiply": lambda x, y: mk(libmp.mpf_mul(x._mpf_, y._mpf_, p, _RN)),
            "divide": lambda x, y: mk(self._div(x._mpf_, y._mpf_, p)),
            # fma: the exact product (prec 0 = no rounding), one rounding of the sum.
            "fma": lambda x, y, z: mk(libmp.mpf_add(libmp.mpf_mul(x._mpf_, y._mpf_),
                                                    z._mpf_, p, _RN)),
            "negative": lambda x: mk(libmp.mpf_neg(x._mpf_)),
            "abs": lambda x: mk(libmp.mpf_abs(x._mpf_)),
            "square": lambda x: mk(libmp.mpf_mul(x._mpf_, x._mpf_, p, _RN)),
            "reciprocal": lambda x: mk(self._div(fone, x._mpf_, p)),
            "sqrt": lambda x: mk(fnan if neg_raw(x._mpf_) else libmp.mpf_sqrt(x._mpf_, p, _RN)),
            "rsqrt": self._rsqrt, "cbrt": self._cbrt, "exp2": self._exp2, "log2": self._log2,
            "pow": self._pow, "hypot": self._hypot,
            "atan2": self._atan2,
            "floor": lambda x: mk(libmp.mpf_floor(x._mpf_)),
            "ceil": lambda x: mk(libmp.mpf_ceil(x._mpf_)),
            "round": lambda x: mk(libmp.mpf_nint(x._mpf_)),       # ties to even
            "trunc": lambda x: mk(trunc_raw(x._mpf_)),
            "fmod": lambda x, y: mk(fmod_raw(x._mpf_, y._mpf_, p)),
            "remainder": lambda x, y: mk(remainder_raw(x._mpf_, y._mpf_, p)),
            # copysign: an unsigned zero or a NaN y counts as positive.
            "copysign": lambda x, y: mk(libmp.mpf_neg(libmp.mpf_abs(x._mpf_)) if neg_raw(y._mpf_)
                                        else libmp.mpf_abs(x._mpf_)),
            "maximum": lambda x, y: self._pick(x, y, max, propagate=True),
            "minimum": lambda x, y: self._pick(x, y, min, propagate=True),
            "fmax": lambda x, y: self._pick(x, y, max, propagate=False),
            "fmin": lambda x, y: self._pick(x, y, min, propagate=False),
        })
        return t

    @staticmethod
    def _div(a, b, p):
        if b == fzero:
            # Unsigned zero read as +0: x/0 = +-inf by x's sign, 0/0 and NaN/0 = NaN.
            return fnan if a == fzero or a == fnan else (fninf if neg_raw(a) else finf)
        return libmp.mpf_div(a, b, p, _RN)

    def _pick(self, x, y, f, propagate):
        nx, ny = _is_nan(x._mpf_), _is_nan(y._mpf_)
        if nx or ny:
            return self._mk(fnan) if propagate or (nx and ny) else (y if nx else x)
        return f(x, y)

    def _rsqrt(self, x):
        r = x._mpf_
        if r == fzero:
            return self._mk(finf)
        if neg_raw(r) or r == fnan:
            return self._mk(fnan)
        w = self.prec + GUARD
        return self._round(libmp.mpf_div(fone, libmp.mpf_sqrt(r, w, _RN), w, _RN))

    def _cbrt(self, x):
        # The real cube root: odd, so cbrt(-8) = -2 (mpmath's cbrt is the principal complex one).
        r = x._mpf_
        if special_raw(r) or r == fzero:
            return x
        c = libmp.mpf_cbrt(libmp.mpf_abs(r), self.prec + GUARD, _RN)
        return self._round(libmp.mpf_neg(c) if neg_raw(r) else c)

    def _exp2(self, x):
        r = x._mpf_
        if special_raw(r):
            return self._mk(fzero if r == fninf else r)
        if libmp.mpf_floor(r) == r:
            return self._round(libmp.mpf_shift(fone, int(libmp.to_int(r))))  # 2**k exactly
        # exp(x ln 2): the product's relative error grows by |x|, so add its bits.
        w = self.prec + GUARD + max(0, r[2] + r[3])
        return self._round(libmp.mpf_exp(libmp.mpf_mul(r, libmp.mpf_ln2(w), w, _RN), w, _RN))

    def _log2(self, x):
        r = x._mpf_
        if r == fzero:
            return self._mk(fninf)
        if neg_raw(r) or special_raw(r):
            return self._mk(fnan if neg_raw(r) else r)
        if r[1] == 1:
            return self._round(libmp.from_int(r[2]))              # log2(2**k) = k exactly
        w = self.prec + GUARD
        return self._round(libmp.mpf_div(libmp.mpf_log(r, w), libmp.mpf_ln2(w), w, _RN))

    def _hypot(self, x, y):
        a, b = x._mpf_, y._mpf_
        if _is_inf(a) or _is_inf(b):
            return self._mk(finf)                                  # even with a NaN
        return self._round(libmp.mpf_hypot(a, b, self.prec + GUARD, _RN)) \
            if not (_is_nan(a) or _is_nan(b)) else self._mk(fnan)

    def _pow(self, x, y):
        """pow with C99's special cases (F.10.4.4), zeros read as +0."""
        a, b, mk = x._mpf_, y._mpf_, self._mk
        if b == fzero or a == fone:
            return mk(fone)
        if a == fnan or b == fnan:
            return mk(fnan)
        integral = not _is_inf(b) and libmp.mpf_floor(b) == b
        odd = integral and int(libmp.to_int(b)) % 2 == 1
        if _is_inf(b):
            m = libmp.mpf_cmp(libmp.mpf_abs(a), fone)
            if m == 0:
                return mk(fone)
            return mk(finf if (m > 0) == (b == finf) else fzero)
        if a == fzero:
            return mk(finf if neg_raw(b) else fzero)
        if _is_inf(a):
            if neg_raw(b):
                return mk(fzero)
            return mk(fninf if a == fninf and odd else finf)
        if neg_raw(a):
            if not integral:
                return mk(fnan)
            v = libmp.mpf_pow_int(libmp.mpf_neg(a), int(libmp.to_int(b)), self.prec + GUARD, _RN)
            return self._round(libmp.mpf_neg(v) if odd else v)
        if integral:
            return self._round(libmp.mpf_pow_int(a, int(libmp.to_int(b)), self.prec + GUARD, _RN))
        return self._guarded("power")(x, y)

    def _apply(self, name, *arrays):
        f, num = self._table[name], self._num
        p, mk, mpf, ff = self.prec, self._mk, self._mpf, libmp.from_float
        # Fast paths on raw mpf tuples (f's own arithmetic, no mpf object per operand).
        if len(arrays) == 1 and name in _RAW_GUARDED:
            # exp, erf, tanh as their guarded table entries compute them (the libmp function
            # at prec + GUARD bits, rounded once), on raw tuples: no mpf objects in between.
            fn, w = _RAW_GUARDED[name], p + GUARD

            def g(x):
                a = x._mpf_ if type(x) is mpf else ff(x) if type(x) is float else \
                    read_raw(x, p)
                try:
                    v = fn(a, w, _RN)
                except (libmp.ComplexResult, ValueError, ZeroDivisionError):
                    return mk(fnan)
                return mk(libmp.mpf_pos(v, p, _RN))
            return elementwise(g, *arrays)
        if len(arrays) == 1:
            return elementwise(lambda x: f(num(x)), *arrays)
        raw = _RAW_ARITHMETIC.get(name)
        if raw is not None and len(arrays) == 2:
            # The hot arithmetic on raw mpf tuples: a binary64 operand is read by
            # from_float (exact), with no mpf object made for it; the same rounding.
            def h(x, y):
                a = x._mpf_ if type(x) is mpf else ff(x) if type(x) is float else \
                    read_raw(x, p)
                b = y._mpf_ if type(y) is mpf else ff(y) if type(y) is float else \
                    read_raw(y, p)
                return mk(raw(a, b, p, _RN))
            return elementwise(h, *arrays)
        return elementwise(lambda *xs: f(*[num(x) for x in xs]), *arrays)

    def _atan2(self, y, x):
        """atan2 with C99's infinite cases (F.10.1.4) reduced to finite ones: mpmath 1.3
        gives NaN for atan2(+-inf, +-inf) where 1.4 gives +-pi/4, and its atan2(NaN, inf)
        is not NaN.  y infinite: the angle of (sign y, sign x or 0); y finite, x = +inf:
        0 (the reference's zero is unsigned); x = -inf: +-pi with the sign of y."""
        ry, rx = y._mpf_, x._mpf_
        if _is_nan(ry) or _is_nan(rx):
            return self.ctx.make_mpf(fnan)
        one, zero = self.ctx.mpf(1), self.ctx.mpf(0)
        if _is_inf(ry):
            x = zero if not _is_inf(rx) else -one if neg_raw(rx) else one
            return self._atan2_finite(-one if neg_raw(ry) else one, x)
        if _is_inf(rx):
            if not neg_raw(rx):
                return zero
            pi = self._atan2_finite(zero, -one)
            return -pi if neg_raw(ry) else pi
        return self._atan2_finite(y, x)

    # -- dot and matmul: exact then rounded once --
    # Operands that are binary64 values go straight to numerics/exact_products.py.  Wider
    # operands (results of earlier primitives at prec bits) are cut exactly into binary64
    # pieces, x = x_0 + x_1 + ... (53-bit fields of the mantissa, _pieces; x_s ~ 2**(-53 s)
    # x), and the product is summed by level L = s + t:
    #     a . b = sum_L 2**(-53 L) sum_{s+t=L} (2**(53 s) a_s) . (2**(53 t) b_t),
    # one exact product per level with its pairs laid side by side along the inner axis.
    # The powers of two are exact and bring every piece of a level to its operand's
    # magnitude, so a level's rows span about 53 bits plus their own spread: a few Ozaki
    # slices each, whatever the precision.  The levels' exact integers are added exactly
    # and rounded once.  Entries whose pieces leave binary64's range, and NaN or inf among
    # wider entries (an inf piece times a zero piece would be NaN), take the base class's
    # accumulation at prec bits in the policy's order.  Sums (xp.sum) stay the policy's
    # accumulation at prec bits: an exact sum rounded once is more accurate, but it lets a
    # rule's cancellation land on the same wrong value at two precisions more often (seen
    # in layerNorm's gradient), which numerics.settle's agreement test cannot see.
    def dot(self, a, b):
        """sum_i a[..., i] * b[..., i], each entry correctly rounded to ``prec`` (exact
        products of binary64 pieces), else the base class's accumulation."""
        a, b = np.asarray(a), np.asarray(b)
        if min(a.ndim, b.ndim) == 0 or a.shape[-1] != b.shape[-1] or a.size == 0 or \
                b.size == 0:
            return super().dot(a, b)
        pa, pb = self._pieces(a), self._pieces(b)
        if pa is None or pb is None:
            return super().dot(a, b)
        return self._levels(pa, pb, exact_dot, -1)

    def matmul(self, a, b):
        """a @ b (numpy's shape rules), each entry correctly rounded to ``prec`` (exact
        products of binary64 pieces), else the base class's accumulation."""
        a, b = np.asarray(a), np.asarray(b)
        if min(a.ndim, b.ndim) == 0 or a.size == 0 or b.size == 0 or \
                a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            return super().matmul(a, b)
        pa, pb = self._pieces(a), self._pieces(b)
        if pa is None or pb is None:
            return super().matmul(a, b)
        return self._levels(pa, pb, exact_matmul, -2 if b.ndim > 1 else 0)

    def _levels(self, pa, pb, product, inner_b):
        """The exact product of sum(pa) and sum(pb) by levels (above), rounded once."""
        if len(pa) == 1 and len(pb) == 1:
            return to_mpf(product(pa[0], pb[0]), self.prec, self.ctx)
        total = None
        for level in range(len(pa) + len(pb) - 1):
            pairs = [(s, level - s) for s in range(len(pa)) if 0 <= level - s < len(pb)]
            left = np.concatenate([np.ldexp(pa[s], 53 * s) for s, _ in pairs], axis=-1)
            right = np.concatenate([np.ldexp(pb[t], 53 * t) for _, t in pairs], axis=inner_b)
            n, e = product(left, right).integers()
            e = e.astype(object) - 53 * level
            total = (n, e) if total is None else _add_exact(total, (n, e))
        n, e = total
        out = np.empty(n.shape, dtype=object)
        out.reshape(-1)[:] = [self._mk(libmp.from_man_exp(int(m), int(x), self.prec, _RN))
                              for m, x in zip(n.reshape(-1), e.reshape(-1))]
        return out

    def _pieces(self, x):
        """x as a list of S float64 arrays summing exactly to it (S = 1 for binary64 values),
        or None when some entry is NaN, infinite or has a piece outside binary64's range.
        An object array that holds one number in several entries (a convolution's windows
        gathered from its input: each entry up to K times) is cut once per number."""
        arr = np.asarray(x)
        if arr.dtype == object and arr.size > 1:
            first = {}
            at = np.fromiter((first.setdefault(id(v), i)
                              for i, v in enumerate(arr.reshape(-1).tolist())),
                             dtype=np.intp, count=arr.size)
            if len(first) < arr.size:
                keep = np.fromiter(first.values(), dtype=np.intp, count=len(first))
                slot = np.empty(arr.size, dtype=np.intp)
                slot[keep] = np.arange(keep.size)
                cut = self._cut(arr.reshape(-1)[keep])
                return None if cut is None else \
                    [p[slot[at]].reshape(arr.shape) for p in cut]
        return self._cut(arr)

    def _cut(self, x):
        """_pieces of every entry of ``x``."""
        direct = self._binary64(x)
        if direct is not None:
            return None if not np.isfinite(direct).all() else [direct]
        mpf, num = self._mpf, self._num
        raws = [v._mpf_ if type(v) is mpf else num(v)._mpf_ for v in np.asarray(x).reshape(-1)]
        sign, man, exp, bc = (np.array(part, dtype=object) for part in zip(*raws))
        bc, exp = bc.astype(np.int64), exp.astype(np.int64)
        if (bc < 0).any():                       # NaN, +-inf: mpmath's specials have bc < 0
            return None
        negative = sign.astype(bool)
        out = []
        for s in range(-(-int(bc.max()) // 53)):
            # Piece s: bits [low, top) of the odd mantissa, top = bc - 53 s, at most 53 bits.
            top = bc - 53 * s
            low = np.maximum(top - 53, 0)
            width = np.maximum(top - low, 0)
            field = ((man >> low.astype(object)) & ((1 << width.astype(object)) - 1))
            field = field.astype(np.float64)                 # exact: below 2**53
            there = field != 0
            if (there & ((exp + low < -1074) | (exp + top > 1024))).any():
                return None                      # not a binary64 piece: the slow path
            piece = np.ldexp(field, np.where(there, exp + low, 0))
            out.append(np.where(negative, -piece, piece).reshape(np.shape(x)))
        return out

    def _binary64(self, x):
        """x as a float64 array when every entry is exactly a binary64 value, else None."""
        arr = np.asarray(x)
        if arr.dtype.kind == "f" and arr.dtype.itemsize <= 8:
            return arr.astype(np.float64)
        if arr.dtype.kind in "iub":
            conv = arr.astype(np.float64)
            return conv if np.array_equal(conv.astype(arr.dtype), arr) else None
        flat = arr.reshape(-1).tolist()
        if set(map(type, flat)) <= {float}:
            # Python floats only (a model's parameters: millions of them, read by every
            # product): numpy converts them exactly, without a Python step per entry.
            return np.array(flat, dtype=np.float64).reshape(arr.shape)
        mpf, num = self._mpf, self._num

        def value(v):
            if type(v) is float:
                return v
            f = binary64_raw(v._mpf_ if type(v) is mpf else num(v)._mpf_)
            if f is None:
                raise _Wide
            return f
        try:
            return np.array([value(v) for v in flat], dtype=np.float64).reshape(arr.shape)
        except _Wide:
            return None

    # -- conversion --
    def asarray(self, x):
        """Numbers as mpf, exactly where dyadic (see the module docstring); a binary16,
        binary32 or binary64 array as an object array of Python floats (exact), read as mpf
        by the primitives; Python floats inside an object array are kept."""
        arr = np.asarray(x)
        if arr.dtype in _FLOATS:
            return arr.astype(np.float64).astype(object)
        mpf, num = self._mpf, self._num
        # Entries that are already the backend's numbers (mpf, or Python floats: exact
        # binary64 values) stay as they are: an array read again by the next rule keeps its
        # floats (turning millions of them into mpf was most of a CNN's exact run).
        return elementwise(lambda v: v if type(v) is mpf or type(v) is float else num(v),
                           np.asarray(x, dtype=object))

    def constant(self, literal, shape=()):
        """``literal`` rounded once (to nearest) to ``prec`` bits, filling ``shape``: a
        Python float where that value is a binary64 number (0, 1, 0.5...), so that padding
        an input with zeros keeps its entries floats for the exact products."""
        r = libmp.mpf_pos(read_raw(literal, self.prec), self.prec, _RN)
        f = binary64_raw(r)
        if f is not None:
            return np.full(shape, f, dtype=object)
        return np.full(shape, self._mk(r), dtype=object)

    def to_float64(self, a) -> np.ndarray:
        """Each value rounded once to the nearest binary64 (zeros are +0.0)."""
        return self.cast(a, "binary64")

    def cast(self, a, fmt, mode=None, with_flags=False):
        """Each value rounded once into ``fmt`` under ``mode`` (formats.round_exact): float64
        for formats that fit binary64, exact mpf otherwise; ``with_flags`` adds uint8 flags."""
        fmt = formats.get(fmt)
        mode = mode or "nearest_even"
        arr = np.asarray(a, dtype=object)
        if not with_flags and mode != "stochastic" and fmt.fits_binary64 and arr.size:
            # Python floats (exact binary64 values: a model's inputs and parameters) are
            # rounded by formats.round_to at once, the other entries one by one below.
            floats = np.fromiter((type(v) is float for v in arr.reshape(-1)), dtype=bool,
                                 count=arr.size)
            if floats.any():
                out = np.empty(arr.size, dtype=np.float64)
                out[floats] = formats.round_to(arr.reshape(-1)[floats].astype(np.float64),
                                               fmt, mode)
                if not floats.all():
                    out[~floats] = self.cast(arr.reshape(-1)[~floats], fmt, mode)
                return out.reshape(arr.shape)
        flat = [self._num(v)._mpf_ for v in arr.reshape(-1)]
        if not with_flags and mode != "stochastic" and fmt.fits_binary64 and \
                fmt.precision <= 51:
            odd = _odd_binary64(flat)
            if odd is not None:
                return formats.round_to(odd, fmt, mode).reshape(arr.shape)
        if not with_flags and mode == "nearest_even" and fmt == formats.get("binary64"):
            near = _nearest_binary64(flat)
            if near is not None:
                return near.reshape(arr.shape)
        rounded = [round_raw(r, fmt, mode, index=i) for i, r in enumerate(flat)]
        flags = np.array([r.flags for r in rounded], dtype=np.uint8).reshape(arr.shape)
        if fmt.fits_binary64:
            out = np.array([r.to_float() for r in rounded], dtype=np.float64).reshape(arr.shape)
        else:
            out = np.empty(arr.shape, dtype=object)
            out.reshape(-1)[:] = [self._mk(read_raw(r.to_mpfr(), self.prec)) for r in rounded]
        return (out, flags) if with_flags else out

    # -- comparisons and predicates --
    def _compare(self, name, a, b):
        op, num = _CMP[name], self._num

        def g(x, y):
            x, y = num(x), num(y)
            if _is_nan(x._mpf_) or _is_nan(y._mpf_):
                return name == "not_equal"                     # unordered
            return op(x, y)
        return elementwise(g, a, b, dtype=bool)

    def _predicate(self, name, a):
        test = {"isnan": _is_nan, "isinf": _is_inf,
                "isfinite": lambda r: not special_raw(r)}[name]
        return elementwise(lambda x: test(self._num(x)._mpf_), np.asarray(a, dtype=object),
                           dtype=bool)


class _Wide(Exception):
    """An entry with no binary64 value (ReferenceBackend._binary64)."""


def _add_exact(x, y):
    """(N, e) + (M, f) exactly, entry by entry (object arrays of Python ints)."""
    (n, e), (m, f) = x, y
    low = np.minimum(e, f)
    return (n << (e - low).astype(object)) + (m << (f - low).astype(object)), low


def reference(prec: int = 256, order: str = "sequential", fma: bool = False) -> ReferenceBackend:
    """The mpmath reference backend at ``prec`` bits (order/fma: reductions' evaluation order)."""
    return ReferenceBackend(prec, order, fma)

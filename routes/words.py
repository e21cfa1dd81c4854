"""Booleans and integer words as element sorts of the numeric operators (spec: the element
argument of add, sub, mul, ..., max, min): ``element`` is ``"scalar"`` (the model's scalar,
the default), ``"bool"`` or a word type ``int8`` ... ``uint64``.

Words are data, not the backend's numbers: their arithmetic is exact modular arithmetic
(two's complement wrap-around, as PyTorch's integer tensors compute) done here with numpy on
uint64 bit patterns, identically under every backend, and has no gradient.  Booleans follow
PyTorch: ``True + True`` is True (or), ``True * False`` is False (and), max is or, min is and.
Subtraction, negation, division, remainder and pow exist for words only (PyTorch refuses
them on Booleans); integer division and remainder take their divisors nonzero and pow its
exponents non-negative (the rules' validate refuses the others).
"""

from __future__ import annotations

import numpy as np

from .ports import Port, boolean, integer, word_range

WORD_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
ELEMENTS = ("scalar", "bool") + WORD_TYPES


def signed_width(element: str) -> tuple[bool, int]:
    """(signed, width) of a word element name such as ``int8`` or ``uint32``."""
    return (not element.startswith("u"), int(element.lstrip("uint")))


def element_port(element: str, shape, scalar: str = "value") -> Port:
    """The port of an operand of sort ``element``: a ``scalar``-kind port (value or frozen)
    for the model's scalar, a bool port, or an integer port."""
    if element == "scalar":
        return Port(scalar, shape)
    if element == "bool":
        return boolean(shape)
    return integer(*signed_width(element), shape)


def dtype(port: Port) -> np.dtype:
    """The numpy dtype that stores words of ``port`` (the narrowest standard width)."""
    width = next(w for w in (8, 16, 32, 64) if w >= port.width)
    return np.dtype(f"{'int' if port.signed else 'uint'}{width}")


def _bits(a) -> np.ndarray:
    """Words as uint64 two's complement bit patterns (exact for every int64/uint64 value)."""
    a = np.asarray(a)
    return a.astype(np.int64).view(np.uint64) if a.dtype.kind == "i" else a.astype(np.uint64)


def _wrap(bits, port: Port) -> np.ndarray:
    """uint64 bit patterns reduced modulo 2**width, read as ``port``'s words."""
    w = port.width
    if w < 64:
        bits = bits & np.uint64((1 << w) - 1)
        if port.signed:                            # sign-extend: (b ^ s) - s, s = 2**(w-1)
            s = np.uint64(1 << (w - 1))
            bits = (bits ^ s) - s
    out = bits.view(np.int64) if port.signed else bits
    return out.astype(dtype(port))


def add(a, b, port: Port) -> np.ndarray:
    """a + b: modulo 2**width for words, or for Booleans."""
    if port.kind == "bool":
        return np.logical_or(a, b)
    with np.errstate(over="ignore"):
        return _wrap(_bits(a) + _bits(b), port)


def multiply(a, b, port: Port) -> np.ndarray:
    """a * b: modulo 2**width for words (the low word of the product), and for Booleans."""
    if port.kind == "bool":
        return np.logical_and(a, b)
    with np.errstate(over="ignore"):
        return _wrap(_bits(a) * _bits(b), port)


def subtract(a, b, port: Port) -> np.ndarray:
    """a - b modulo 2**width (words only: PyTorch refuses subtraction of Booleans)."""
    with np.errstate(over="ignore"):
        return _wrap(_bits(a) - _bits(b), port)


def negative(a, port: Port) -> np.ndarray:
    """-a modulo 2**width (words only): -(-128) is -128 in int8, -1 is 255 in uint8."""
    with np.errstate(over="ignore"):
        return _wrap(np.uint64(0) - _bits(a), port)


def _quotient(a, b, port: Port, floor: bool) -> np.ndarray:
    """The truncated (``floor`` False) or floored quotient of words as a uint64 pattern,
    modulo 2**64.  Signed words divide their magnitudes (as uint64: 2**63 fits) and take the
    sign back; the floored quotient is one less where the signs differ and a remainder is
    left.  A zero divisor (refused by the rules' validate) gives 0."""
    x, y = _bits(a), _bits(b)
    with np.errstate(divide="ignore", over="ignore"):
        if not port.signed:
            return np.where(y == 0, np.uint64(0), x // np.where(y == 0, np.uint64(1), y))
        nx = np.asarray(a).astype(np.int64) < 0
        ny = np.asarray(b).astype(np.int64) < 0
        mx = np.where(nx, np.uint64(0) - x, x)
        my = np.where(ny, np.uint64(0) - y, y)
        my = np.where(my == 0, np.uint64(1), my)
        q = mx // my
        left = mx - q * my != 0
        q = np.where(nx != ny, np.uint64(0) - q, q)
        if floor:
            q = np.where((nx != ny) & left, q - np.uint64(1), q)
        return np.where(y == 0, np.uint64(0), q)


def divide(a, b, port: Port, rounding_mode: str) -> np.ndarray:
    """torch.div of words at ``rounding_mode`` ``trunc`` (toward zero, C's /) or ``floor``
    (Python's //), modulo 2**width: the one quotient that overflows, least // -1 = 2**(w-1),
    wraps to the least word (-128 // -1 is -128 in int8)."""
    return _wrap(_quotient(a, b, port, rounding_mode == "floor"), port)


def remainder(a, b, port: Port) -> np.ndarray:
    """torch.remainder of words, a - floor(a / b) b (Python's %: the divisor's sign; least %
    -1 is 0).  a = q b + r holds exactly, so it holds modulo 2**64 with the wrapped q."""
    with np.errstate(over="ignore"):
        r = _bits(a) - _quotient(a, b, port, True) * _bits(b)
    return _wrap(np.where(_bits(b) == 0, np.uint64(0), r), port)


def power(a, b, port: Port) -> np.ndarray:
    """a ** b modulo 2**width for exponents b >= 0 (0 ** 0 = 1), by square and multiply on
    uint64 patterns: torch.pow's integer kernel, whose products wrap.  A negative exponent
    (refused by the rule's validate) reads as its unsigned pattern."""
    base, e = _bits(a), pattern(b, port)
    out = np.ones_like(base)
    one = np.uint64(1)
    with np.errstate(over="ignore"):
        while (e != 0).any():
            out = np.where((e & one) == one, out * base, out)
            base = base * base
            e = e >> one
    return _wrap(out, port)


def first_index(mask) -> list | None:
    """The index (a list; row-major order) of the first True entry of ``mask``, or None: for
    validate messages that point at the offending element."""
    mask = np.asarray(mask)
    flat = np.flatnonzero(mask)
    if flat.size == 0:
        return None
    return [int(i) for i in np.unravel_index(int(flat[0]), mask.shape)]


def maximum(a, b, port: Port) -> np.ndarray:
    """The greater word (signed or unsigned order); or for Booleans."""
    if port.kind == "bool":
        return np.logical_or(a, b)
    wide = np.int64 if port.signed else np.uint64
    return np.maximum(np.asarray(a).astype(wide), np.asarray(b).astype(wide)).astype(dtype(port))


def minimum(a, b, port: Port) -> np.ndarray:
    """The lesser word; and for Booleans."""
    if port.kind == "bool":
        return np.logical_and(a, b)
    wide = np.int64 if port.signed else np.uint64
    return np.minimum(np.asarray(a).astype(wide), np.asarray(b).astype(wide)).astype(dtype(port))


def sample(rng: np.random.Generator, port: Port) -> np.ndarray:
    """Random words or Booleans at ``port``: a quarter of the entries at the extremes
    (least, greatest, 0, 1, -1), the rest uniform over the whole range."""
    shape = port.array_shape
    if port.kind == "bool":
        return rng.random(shape) < 0.5
    lo, hi = word_range(port.signed, port.width)
    n = int(np.prod(shape, dtype=np.int64))
    # Draw as Python ints: uniform over [lo, hi] even for 64-bit words.
    vals = [int(rng.integers(0, 1 << 62)) * 4 + int(rng.integers(0, 4)) for _ in range(n)]
    vals = [lo + v % (hi - lo + 1) for v in vals]
    extremes = [v for v in (lo, hi, 0, 1, -1) if lo <= v <= hi]
    for i in range(n):
        if rng.random() < 0.25:
            vals[i] = extremes[int(rng.integers(len(extremes)))]
    return np.array(vals, dtype=object).astype(dtype(port)).reshape(shape) if n else \
        np.zeros(shape, dtype=dtype(port))


def sample_nonzero(rng: np.random.Generator, port: Port) -> np.ndarray:
    """``sample`` with every zero word replaced by 1: divisors that integer division and
    remainder accept."""
    w = sample(rng, port)
    return w if port.kind == "bool" else np.where(w == 0, w.dtype.type(1), w)


def sample_exponents(rng: np.random.Generator, port: Port) -> np.ndarray:
    """Non-negative words for integer pow: 60% small (0 ... 2 width + 1, where the powers
    of 2 and 3 pass the width and wrap), the rest ``sample`` with a negative word w replaced
    by -1 - w (its bitwise not), so uniform over [0, greatest]."""
    w = sample(rng, port)
    if port.kind == "bool":
        return w
    w = np.where(w < 0, ~w, w) if port.signed else w
    small = rng.integers(0, 2 * port.width + 2, w.shape).astype(w.dtype)
    return np.where(rng.random(w.shape) < 0.6, small, w).astype(dtype(port))


# ----- bitwise operators, shifts, counts, high products (the integer family) -----------------
# Every function below reads a word as its w-bit two's complement pattern (uint64, the bits
# above w clear), works on patterns, and reads the resulting pattern back as ``port``'s words
# (``_wrap``): one definition for signed and unsigned words, as LLVM's and Lean's BitVec
# operations are defined on bit vectors.

def pattern(a, port: Port) -> np.ndarray:
    """The ``port.width``-bit two's complement patterns of words, as uint64 (bits above the
    width clear): -1 in int8 is 0xFF."""
    bits = _bits(a)
    return bits if port.width == 64 else bits & np.uint64((1 << port.width) - 1)


def bitwise_and(a, b, port: Port) -> np.ndarray:
    """a & b on the patterns."""
    return _wrap(_bits(a) & _bits(b), port)


def bitwise_or(a, b, port: Port) -> np.ndarray:
    """a | b on the patterns."""
    return _wrap(_bits(a) | _bits(b), port)


def bitwise_xor(a, b, port: Port) -> np.ndarray:
    """a ^ b on the patterns."""
    return _wrap(_bits(a) ^ _bits(b), port)


def bitwise_not(a, port: Port) -> np.ndarray:
    """~a: every bit of the pattern flipped (-1 - a for signed words, 2**w - 1 - a for
    unsigned ones)."""
    return _wrap(~_bits(a), port)


def _amount(n, port: Port):
    """(shift amounts read as unsigned patterns, clipped to 63 so numpy's shifts are defined;
    mask of amounts >= width).  A negative signed amount reads as >= width (Lean's
    BitVec.toNat; PyTorch's kernels treat amounts < 0 and >= width alike)."""
    k = pattern(n, port)
    return np.minimum(k, np.uint64(63)), k >= np.uint64(port.width)


def shift_left(a, n, port: Port) -> np.ndarray:
    """a << n modulo 2**width; 0 where the amount n (unsigned) is >= width."""
    k, out = _amount(n, port)
    return _wrap(np.where(out, np.uint64(0), pattern(a, port) << k), port)


def shift_right_logical(a, n, port: Port) -> np.ndarray:
    """The pattern shifted right by n with zeros shifted in; 0 where n >= width."""
    k, out = _amount(n, port)
    return _wrap(np.where(out, np.uint64(0), pattern(a, port) >> k), port)


def shift_right_arithmetic(a, n, port: Port) -> np.ndarray:
    """The pattern shifted right by n with copies of its top bit shifted in (floor(a / 2**n)
    for a read as signed); all copies of the top bit where n >= width.  Unsigned words
    shift their pattern the same way (0x80 >> 1 is 0xC0 in uint8)."""
    k, _ = _amount(n, port)
    signed = _wrap(pattern(a, port), integer(True, port.width)).astype(np.int64)
    # numpy's >> on int64 is arithmetic; a sign-extended w-bit value shifted by >= w - 1
    # is already all copies of its sign, so clipping the amount to 63 changes nothing.
    return _wrap((signed >> k.astype(np.int64)).view(np.uint64), port)


def population_count(a, port: Port) -> np.ndarray:
    """The number of one bits of the pattern, as a word of ``port`` (0 ... width)."""
    return _wrap(np.bitwise_count(pattern(a, port)).astype(np.uint64), port)


def count_leading_zeros(a, port: Port) -> np.ndarray:
    """The number of zero bits above the highest one bit of the width-bit pattern (width for
    0), as a word of ``port``."""
    p = pattern(a, port)
    out = np.full(p.shape, port.width, dtype=np.uint64)
    for i in range(port.width):                   # ascending: the highest set bit wins
        out = np.where((p >> np.uint64(i)) & np.uint64(1) == 1, np.uint64(port.width - 1 - i),
                       out)
    return _wrap(out, port)


def _product128(a, b) -> tuple:
    """(high, low) uint64 halves of the exact 128-bit product of uint64 a and b (32-bit
    limbs: every partial product fits 64 bits)."""
    m = np.uint64(0xFFFFFFFF)
    s = np.uint64(32)
    a0, a1, b0, b1 = a & m, a >> s, b & m, b >> s
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s) + (p01 & m) + (p10 & m)      # < 3 * 2**32: no overflow
    high = p11 + (p01 >> s) + (p10 >> s) + (mid >> s)
    low = (mid << s) | (p00 & m)
    return high, low


def mulhi(a, b, port: Port) -> np.ndarray:
    """The high half of the exact 2w-bit product of two w-bit words: floor(a * b / 2**w),
    signed product for signed words and unsigned product for unsigned ones (CUDA's __mulhi,
    __umulhi, __mul64hi, __umul64hi)."""
    w = port.width
    pa, pb = pattern(a, port), pattern(b, port)
    with np.errstate(over="ignore"):
        high, low = _product128(pa, pb)
        hi = high if w == 64 else (high << np.uint64(64 - w)) | (low >> np.uint64(w))
        if port.signed:
            # a_s = a_u - 2**w [a < 0], so floor(a_s b_s / 2**w) = hi_u - [a<0] b_u - [b<0] a_u
            # modulo 2**w (the subtracted terms are multiples of 2**w before the division).
            top = np.uint64(1 << (w - 1))
            hi = hi - np.where(pa & top != 0, pb, np.uint64(0)) \
                - np.where(pb & top != 0, pa, np.uint64(0))
    return _wrap(hi, port)


def compare(name: str, a, b, port: Port) -> np.ndarray:
    """A comparison (``equal``, ``not_equal``, ``less``, ``less_equal``, ``greater``,
    ``greater_equal``) of Booleans (False < True) or words in their type's order (signed or
    unsigned), as Booleans."""
    if port.kind == "bool":
        a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    else:
        wide = np.int64 if port.signed else np.uint64
        a, b = np.asarray(a).astype(wide), np.asarray(b).astype(wide)
    return np.asarray(getattr(np, name)(a, b), dtype=bool)


def from_pattern(bits, port: Port) -> np.ndarray:
    """uint64 bit patterns (or Python ints) reduced modulo 2**width and read as ``port``'s
    words: the inverse of ``pattern``."""
    return _wrap(np.asarray(bits).astype(np.uint64), port)

"""Booleans and integer words as element sorts of the numeric operators (spec: the element
argument of add, sub, mul, ..., max, min): ``element`` is ``"scalar"`` (the model's scalar,
the default), ``"bool"`` or a word type ``int8`` ... ``uint64``.

Words are data, not the backend's numbers: their arithmetic is exact modular arithmetic
(two's complement wrap-around, as PyTorch's integer tensors compute) done here with numpy on
uint64 bit patterns, identically under every backend, and has no gradient.  Booleans follow
PyTorch: ``True + True`` is True (or), ``True * False`` is False (and), max is or, min is and.
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

"""The integer family against Python integers (unbounded, so two's complement is exact):
exhaustive over every pair of 8-bit words, random 16/32/64-bit words, hand-computed known
answers at the edges (shift amounts >= width and negative, the extreme products of mulhi),
bitcast against hand-decoded interchange patterns, and the index words' round trip and
refusals.  The oracles here are written independently of routes.words and of the entries'
own oracles."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from conftest import wrap

F64 = numerics.native("float64")


def _sar(x, n, signed, w):
    k = n % (1 << w)
    s = wrap(x, True, w)
    return s >> min(k, w)        # Python's >> floors: by >= w it is all sign bits


# Each: (operator, arity, the value as a Python int before the wrap).
PY = {
    "bitwiseAnd": (2, lambda x, y, s, w: x & y),
    "bitwiseOr": (2, lambda x, y, s, w: x | y),
    "bitwiseXor": (2, lambda x, y, s, w: x ^ y),
    "bitwiseNot": (1, lambda x, s, w: -1 - x),
    "bitwiseLeftShift": (2, lambda x, n, s, w: x * 2 ** (n % 2 ** w) if n % 2 ** w < w else 0),
    "shiftRightArithmetic": (2, _sar),
    "shiftRightLogical": (2, lambda x, n, s, w: (x % 2 ** w) // 2 ** (n % 2 ** w)
                          if n % 2 ** w < w else 0),
    "populationCount": (1, lambda x, s, w: sum((x % 2 ** w) >> i & 1 for i in range(w))),
    "countLeadingZeros": (1, lambda x, s, w: next((w - 1 - i for i in range(w - 1, -1, -1)
                                                   if (x % 2 ** w) >> i & 1), w)),
    "mulhi": (2, lambda x, y, s, w: (x * y) // 2 ** w),
}


def run(name, element, *xs):
    o = routes.op(name, shape=np.shape(xs[0]), element=element)
    (out,) = routes.invoke(o, xs, F64)
    assert out.dtype == np.dtype(element)
    return out.tolist()


def expected(name, element, *xs):
    arity, f = PY[name]
    signed, w = not element.startswith("u"), int(element.lstrip("uint"))
    return [wrap(f(*vs, signed, w), signed, w) for vs in zip(*(x.tolist() for x in xs))]


@pytest.mark.parametrize("element", ["int8", "uint8"])
@pytest.mark.parametrize("name", list(PY))
def test_8_bit_operators_match_python_integers_exhaustively(name, element):
    lo, hi = (-128, 127) if element == "int8" else (0, 255)
    words = range(lo, hi + 1)
    if PY[name][0] == 1:
        xs = (np.array(list(words), dtype=element),)
    else:
        pairs = list(itertools.product(words, repeat=2))
        xs = (np.array([p for p, _ in pairs], dtype=element),
              np.array([q for _, q in pairs], dtype=element))
    assert run(name, element, *xs) == expected(name, element, *xs)


@pytest.mark.parametrize("element", ["int16", "uint16", "int32", "uint32", "int64", "uint64"])
@pytest.mark.parametrize("name", list(PY))
def test_wide_operators_match_python_integers(name, element):
    signed, w = not element.startswith("u"), int(element.lstrip("uint"))
    rng = np.random.default_rng(w + signed)
    lo = -(1 << (w - 1)) if signed else 0
    edge = [lo, lo + (1 << w) - 1, 0, 1, (1 << (w - 1)) - 1] + ([-1] if signed else [])

    def draw(n):           # uniform over the 2**w patterns, plus the extremes
        return [wrap(int(rng.integers(0, 1 << 62)) * 4 + int(rng.integers(0, 4)), signed, w)
                for _ in range(n)] + edge
    x = np.array(draw(300), dtype=element)
    y = np.array(draw(300), dtype=element)
    if name in ("bitwiseLeftShift", "shiftRightArithmetic", "shiftRightLogical"):
        y = np.array([k % (w + 3) for k in range(len(x))], dtype=element)
    xs = (x,) if PY[name][0] == 1 else (x, y)
    assert run(name, element, *xs) == expected(name, element, *xs)


def test_shifts_by_width_or_more_and_by_negative_amounts():
    # Hand-computed: int32 -8 = 0xFFFFFFF8.
    x = np.array([-8, -8, -8, -8, 1, 1], dtype=np.int32)
    n = np.array([1, 31, 32, -1, 31, 40], dtype=np.int32)
    assert run("shiftRightArithmetic", "int32", x, n) == [-4, -1, -1, -1, 0, 0]
    assert run("shiftRightLogical", "int32", x, n) == [0x7FFFFFFC, 1, 0, 0, 0, 0]
    assert run("bitwiseLeftShift", "int32", x, n) == [-16, 0, 0, 0, -2 ** 31, 0]
    u = np.array([2 ** 63, 1, 1, 2 ** 64 - 1], dtype=np.uint64)
    k = np.array([63, 63, 64, 2 ** 64 - 1], dtype=np.uint64)
    assert run("bitwiseLeftShift", "uint64", u, k) == [0, 2 ** 63, 0, 0]
    assert run("shiftRightLogical", "uint64", u, k) == [1, 0, 0, 0]
    # Unsigned words shift their pattern arithmetically too: 0x80 >> 1 = 0xC0.
    assert run("shiftRightArithmetic", "uint8", np.array([0x80, 0x80, 0x7F], np.uint8),
               np.array([1, 9, 9], np.uint8)) == [0xC0, 0xFF, 0]


def test_counts_and_high_products_at_64_bits():
    s = np.array([-1, 0, 1, -2 ** 63, 2 ** 63 - 1], dtype=np.int64)
    assert run("populationCount", "int64", s) == [64, 0, 1, 1, 63]
    assert run("countLeadingZeros", "int64", s) == [0, 64, 63, 0, 1]
    t = np.array([-1, -1, 1, -2 ** 63, 2 ** 63 - 1], dtype=np.int64)
    # (-1)(-1) = 1 -> 0; 0 -> 0; 1 -> 0; 2**126 -> 2**62; (2**63-1)**2 >> 64 = 2**62 - 1.
    assert run("mulhi", "int64", s, t) == [0, 0, 0, 2 ** 62, 2 ** 62 - 1]
    assert run("mulhi", "int64", np.array([-1, -5], np.int64),
               np.array([1, 3], np.int64)) == [-1, -1]
    u = np.array([2 ** 64 - 1, 2 ** 32, 3], dtype=np.uint64)
    v = np.array([2 ** 64 - 1, 2 ** 32, 2 ** 63], dtype=np.uint64)
    assert run("mulhi", "uint64", u, v) == [2 ** 64 - 2, 1, 1]


def test_word_operators_have_no_gradient_and_refuse_scalars():
    o = routes.op("bitwiseAnd", shape=(2,), element="int8")
    rule = o.rule(numerics.reference(64))
    xs = [np.array([1, 2], np.int8), np.array([3, 3], np.int8)]
    assert rule.backward(xs, [None]) == (None, None)
    assert not rule.has_jvp                      # the spec: "no value input", no forward mode
    with pytest.raises(RouteError, match="bitwiseAnd: input x expects int8"):
        routes.invoke(o, [np.array([1.0, 2.0]), xs[1]], F64)


BITCAST_CASES = [
    # (backend, word type, pattern, value): decoded by hand from the format's fields.
    ("float32", "int32", 0x3F800000, 1.0),
    ("float32", "uint32", 0xC0000000, -2.0),
    ("float32", "uint32", 0x80000000, -0.0),
    ("float32", "uint32", 0x7F800000, np.inf),
    ("float32", "uint32", 0x00000001, 2.0 ** -149),
    ("float64", "uint64", 0x3FF8000000000000, 1.5),
    ("float64", "int64", -(1 << 63), -0.0),
    ("bfloat16", "uint16", 0x3F80, 1.0),
    ("bfloat16", "int16", 0x4049, 3.140625),          # 2 (1 + 73/128)
    ("e4m3fn", "uint8", 0x7E, 448.0),
    ("e4m3fn", "uint8", 0x01, 2.0 ** -9),
    ("e4m3fn", "int8", -0x48, -1.0),          # 0xB8: sign 1, exponent field 7 (2**0), frac 0
]
BITCAST_BACKENDS = {"float32": lambda: numerics.native("float32"),
                    "float64": lambda: numerics.native("float64"),
                    "bfloat16": lambda: numerics.emulated("bfloat16"),
                    "e4m3fn": lambda: numerics.emulated("float8_e4m3fn")}


@pytest.mark.parametrize("case", BITCAST_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]:#x}")
def test_bitcast_reads_interchange_words(case):
    backend, element, pattern, value = case
    xp = BITCAST_BACKENDS[backend]()
    word = np.array([pattern], dtype=element)
    to_scalar = routes.op("bitcast", shape=(1,), source=element, target="scalar")
    (y,) = routes.invoke(to_scalar, [word], xp)
    got = np.asarray(xp.to_float64(y), dtype=np.float64)
    assert got.tolist() == [value] and np.signbit(got[0]) == np.signbit(value)
    # The tangent of the value output is zero (no value input).
    (t,) = to_scalar.rule(xp).jvp([word], [None])
    assert np.asarray(xp.to_float64(t)).tolist() == [0.0]
    # And back: the value's interchange word is the pattern.
    to_word = routes.op("bitcast", shape=(1,), source="scalar", target=element)
    (w,) = routes.invoke(to_word, [np.array([value])], xp)
    assert w.dtype == np.dtype(element) and w.tolist() == [pattern]


def test_bitcast_nan_patterns_and_word_types():
    xp = numerics.native("float32")
    o = routes.op("bitcast", shape=(2,), source="uint32", target="scalar")
    (y,) = routes.invoke(o, [np.array([0x7FC00000, 0xFF800001], np.uint32)], xp)
    assert np.isnan(y).all()
    # Between word types the pattern is kept, exhaustively over 8 bits.
    o = routes.op("bitcast", shape=(256,), source="int8", target="uint8")
    (y,) = routes.invoke(o, [np.arange(-128, 128).astype(np.int8)], numerics.reference(64))
    assert y.tolist() == [v % 256 for v in range(-128, 128)]
    o = routes.op("bitcast", shape=(2,), source="uint64", target="int64")
    (y,) = routes.invoke(o, [np.array([2 ** 64 - 1, 2 ** 63], np.uint64)], F64)
    assert y.tolist() == [-1, -2 ** 63]


def test_bitcast_needs_bits_and_a_matching_width():
    o = routes.op("bitcast", shape=(1,), source="uint16", target="scalar")
    assert o.need == "Bits" and o.rule(numerics.reference(64)) is None
    assert o.rule(numerics.exact()) is None
    assert routes.op("bitcast", source="int8", target="uint8").need is None
    with pytest.raises(RouteError, match="bitcast: words of width 16 cannot hold the "
                                         "binary32 scalars"):
        routes.invoke(o, [np.array([1], np.uint16)], numerics.native("float32"))
    with pytest.raises(RouteError, match="bitcast: source and target must have the same width"):
        routes.op("bitcast", source="int8", target="int16").check()
    with pytest.raises(RouteError, match="bitcast: source and target must not both be scalar"):
        routes.op("bitcast", source="scalar", target="scalar").check()


def test_index_words_round_trip_and_refuse_misfits():
    idx = np.array([[2, 4], [0, 1]])
    enc = routes.op("encodeIndex", shape=(2,), bounds=(3, 5), element="int8")
    (words,) = routes.invoke(enc, [idx], F64)
    assert words.dtype == np.int8 and words.tolist() == [[2, 4], [0, 1]]
    dec = routes.op("decodeIndex", shape=(2,), bounds=(3, 5), element="int8")
    (back,) = routes.invoke(dec, [words], F64)
    assert back.tolist() == [[2, 4], [0, 1]] and dec.outputs[0].bounds == (3, 5)
    # One bound: the words have the index shape itself.
    one = routes.op("encodeIndex", shape=(3,), bounds=(300,), element="uint8")
    assert one.outputs[0].shape == (3,)
    assert routes.invoke(one, [np.array([0, 255, 17])], F64)[0].tolist() == [0, 255, 17]
    with pytest.raises(RouteError, match=r"^encodeIndex: input index expects components that "
                                         r"uint8 words hold, at most 255 \(got 299\)$"):
        routes.invoke(one, [np.array([0, 299, 17])], F64)
    small = routes.op("decodeIndex", shape=(3,), bounds=(3,), element="int8")
    with pytest.raises(RouteError, match=r"^decodeIndex: input words expects component 0 in "
                                         r"\[0, 3\) \(got 3\)$"):
        routes.invoke(small, [np.array([0, 3, 1], np.int8)], F64)
    with pytest.raises(RouteError, match=r"component 1 in \[0, 5\) \(got -1\)"):
        routes.invoke(dec, [np.array([[0, 0], [2, -1]], np.int8)], F64)
    big = routes.op("decodeIndex", shape=(1,), bounds=(7,), element="uint64")
    with pytest.raises(RouteError, match=r"\(got 18446744073709551615\)"):
        routes.invoke(big, [np.array([2 ** 64 - 1], np.uint64)], F64)
    with pytest.raises(RouteError, match="encodeIndex: bounds must list at least one bound"):
        routes.op("encodeIndex", bounds=()).check()


def test_decode_index_has_no_rule_at_a_zero_bound():
    # A zero bound admits no index: the spec's "no rule at some attributes".
    from roundoff_coverage import numerics
    assert routes.op("decodeIndex", bounds=(3, 0)).rule(numerics.native("float64")) is None
    assert routes.op("decodeIndex", bounds=(3, 1)).rule(numerics.native("float64")) is not None

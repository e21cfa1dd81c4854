"""The integer family (spec: "Integer words"): the bitwise operators, the shifts,
populationCount, countLeadingZeros and mulhi on two's complement words (routes.words: exact,
wrapping, identical under every backend), bitcast (a word read as another sort of the same
width, the scalar's interchange word included), and encodeIndex / decodeIndex (index tuples
to and from words, in the index port's array layout: shape + [k] for k > 1 bounds).

No operator here has a value input, so none has a gradient; routes.rules gives the trivial
forward mode (a zero tangent at the one value output there is: bitcast to the scalar).
The element argument ``element`` (int8 ... uint64) is the sort of every word port.
Oracles are Python integers (unbounded, so two's complement is exact), reduced into the
port's words by ``_reduce``: independent of the uint64 bit tricks of routes.words.
"""

from __future__ import annotations

import numpy as np

from roundoff_coverage import formats

from .. import attributes as A
from .. import words as W
from ..certs import convention
from ..errors import RouteError
from ..ports import index, integer
from ..registry import KnownFailure, define
from ..rules import zero_tangents
from ..samples import Domain, special, uniform

TESTS = "tests/routes/test_routes_integer.py"
EXAMPLES = {"": {}, "2x3": {"shape": (2, 3)}, "int8": {"element": "int8"},
            "uint8": {"element": "uint8"}, "int64": {"element": "int64"},
            "uint64": {"element": "uint64"}}


def _element(default="int32"):
    return A.choice("element", W.WORD_TYPES, default=default,
                    doc="the word type of the operands: int8 ... uint64")


def _port(a, shape=None):
    return integer(*W.signed_width(a.element), a.shape if shape is None else shape)


def _reduce(v: int, port) -> int:
    """A Python int modulo 2**width, read as ``port``'s word (signed: two's complement)."""
    w = port.width
    v %= 1 << w
    return v - (1 << w) if port.signed and v >> (w - 1) else v


def _int_oracle(f):
    """oracle(ctx, a, *xs): f(*Python ints, width) elementwise, reduced into the output."""
    def oracle(ctx, a, *xs):
        port = _port(a)
        flat = [_reduce(f(*vs, port.width), port)
                for vs in zip(*(np.asarray(x).reshape(-1).tolist() for x in xs))]
        return (np.array(flat, dtype=object).reshape(np.shape(xs[0])),)
    return oracle


def _shift_sampler(rng, fmt, op):
    """Words, and shift amounts mostly in [0, width + 2) (uniform words would almost always
    shift everything out), the rest any word (negative and huge amounts)."""
    x_port, n_port = op.inputs
    x = W.sample(rng, x_port)
    small = rng.integers(0, n_port.width + 2, n_port.shape).astype(W.dtype(n_port))
    n = np.where(rng.random(n_port.shape) < 0.75, small, W.sample(rng, n_port))
    return x, n.astype(W.dtype(n_port))


def _word_operator(name, arity, f, oracle, notes, test, statement, samples=None):
    names = ("x", "y")[:arity] if name not in _SHIFTS else ("x", "amount")
    define(
        name, "integer",
        attributes=(A.shape(), _element()),
        ports=lambda a: ({n: _port(a) for n in names}, {"out": _port(a)}),
        forward=lambda xp, a, *xs: f(*xs, _port(a)),
        samples=samples or Domain(ordinary=uniform(-4, 4)).samplers(),
        oracle=_int_oracle(oracle),
        examples=EXAMPLES,
        notes=notes + ("Words are data: exact, identical under every backend; no gradient.",),
        certificates=(convention(f"{TESTS}::{test}", statement),),
    )


_SHIFTS = ("bitwiseLeftShift", "shiftRightArithmetic", "shiftRightLogical")
_EXHAUSTIVE = "test_8_bit_operators_match_python_integers_exhaustively"

_word_operator(
    "bitwiseAnd", 2, W.bitwise_and, lambda p, q, w: p & q,
    ("bitwiseAnd: the and of the two's complement patterns (torch.bitwise_and).",),
    _EXHAUSTIVE, "the and of the patterns, exhaustively over 8-bit words")
_word_operator(
    "bitwiseOr", 2, W.bitwise_or, lambda p, q, w: p | q,
    ("bitwiseOr: the or of the two's complement patterns (torch.bitwise_or).",),
    _EXHAUSTIVE, "the or of the patterns, exhaustively over 8-bit words")
_word_operator(
    "bitwiseXor", 2, W.bitwise_xor, lambda p, q, w: p ^ q,
    ("bitwiseXor: the exclusive or of the two's complement patterns (torch.bitwise_xor).",),
    _EXHAUSTIVE, "the xor of the patterns, exhaustively over 8-bit words")
_word_operator(
    "bitwiseNot", 1, W.bitwise_not, lambda p, w: ~p,
    ("bitwiseNot: every bit flipped: -1 - x for signed words, 2**w - 1 - x for unsigned "
     "ones (torch.bitwise_not).",),
    _EXHAUSTIVE, "every bit flipped, exhaustively over 8-bit words")

_AMOUNT_NOTE = ("The amount is a word of the same type read as its unsigned pattern (Lean's "
                "BitVec.toNat): a negative signed amount is >= width.  Amounts >= width shift "
                "every bit out, as PyTorch's kernels define it (C leaves it undefined).")
_SHIFT_TEST = "test_shifts_by_width_or_more_and_by_negative_amounts"


def _shl(p, n, w):
    k = n % (1 << w)
    return p << k if k < w else 0


def _sar(p, n, w):
    k, s = n % (1 << w), _reduce(p, integer(True, w))   # the pattern read as signed
    return s >> k if k < w else (-1 if s < 0 else 0)


def _shr(p, n, w):
    k, u = n % (1 << w), p % (1 << w)                    # the pattern read as unsigned
    return u >> k if k < w else 0


_word_operator(
    "bitwiseLeftShift", 2, W.shift_left, _shl,
    ("bitwiseLeftShift(x, n): x * 2**n modulo 2**width (bits shifted out are lost); 0 for "
     "amounts >= width.", _AMOUNT_NOTE),
    _SHIFT_TEST, "amounts >= width (negative signed amounts included) give 0",
    samples={"ordinary": _shift_sampler})
_word_operator(
    "shiftRightArithmetic", 2, W.shift_right_arithmetic, _sar,
    ("shiftRightArithmetic(x, n): the pattern shifted right with copies of its top bit "
     "(floor(x / 2**n) for signed words); unsigned words shift their pattern the same way "
     "(0x80 >> 1 = 0xC0 in uint8, LLVM's ashr); amounts >= width give all copies of the top "
     "bit (0 or -1).", _AMOUNT_NOTE),
    _SHIFT_TEST, "amounts >= width (negative signed amounts included) give all copies of the "
    "top bit", samples={"ordinary": _shift_sampler})
_word_operator(
    "shiftRightLogical", 2, W.shift_right_logical, _shr,
    ("shiftRightLogical(x, n): the pattern shifted right with zeros shifted in (floor "
     "division of the unsigned reading by 2**n, read back in the word type); 0 for amounts "
     ">= width.", _AMOUNT_NOTE),
    _SHIFT_TEST, "amounts >= width (negative signed amounts included) give 0",
    samples={"ordinary": _shift_sampler})
_word_operator(
    "populationCount", 1, W.population_count, lambda p, w: bin(p % (1 << w)).count("1"),
    ("populationCount: the number of one bits of the width-bit pattern (0 ... width), as a "
     "word of the same type (popcount(-1) = width for signed words).",),
    _EXHAUSTIVE, "the one bits of the pattern, exhaustively over 8-bit words")
_word_operator(
    "countLeadingZeros", 1, W.count_leading_zeros,
    lambda p, w: w - (p % (1 << w)).bit_length(),
    ("countLeadingZeros: the zero bits above the highest one bit of the width-bit pattern, "
     "width at 0 and 0 for negative signed words, as a word of the same type.",),
    _EXHAUSTIVE, "clz(0) = width, clz of a negative word 0, exhaustively over 8-bit words")
_word_operator(
    "mulhi", 2, W.mulhi, lambda p, q, w: (p * q) >> w,
    ("mulhi(x, y): the high width bits of the exact 2 width-bit product, floor(x y / "
     "2**width): the signed product for signed words, the unsigned one for unsigned words "
     "(CUDA __mulhi / __umulhi / __mul64hi / __umul64hi).",),
    _EXHAUSTIVE, "floor(x y / 2**width) of the exact product, exhaustively over 8-bit words")


# ----- bitcast ----------------------------------------------------------------------------------
_SORTS = ("scalar",) + W.WORD_TYPES


def _sort_port(sort, shape, scalar):
    return W.element_port(sort, shape, scalar=scalar)


def _bitcast_check(a):
    if a.source == "scalar" and a.target == "scalar":
        return "source and target must not both be scalar (got scalar and scalar)"
    if "scalar" not in (a.source, a.target):
        ws, wt = W.signed_width(a.source)[1], W.signed_width(a.target)[1]
        if ws != wt:
            return (f"source and target must have the same width (got {a.source}, {ws} bits, "
                    f"and {a.target}, {wt} bits)")
    return None


def _interchange(xp, words):
    """The binary format whose interchange words the backend's scalars are (the Bits
    capability), checked against the width of the word port ``words``."""
    fmt = getattr(xp, "fmt", None) or getattr(xp, "format", None)
    if not isinstance(fmt, formats.BinaryFormat):
        raise RouteError(f"bitcast: {xp.name} names no binary format for its scalar")
    if fmt.bits != words.width:
        raise RouteError(f"bitcast: words of width {words.width} cannot hold the {fmt.label} "
                         f"scalars of {xp.name} ({fmt.bits} bits)")
    return fmt


def _bitcast_forward(xp, a, x):
    src = _sort_port(a.source, a.shape, "frozen")
    dst = _sort_port(a.target, a.shape, "value")
    if a.target == "scalar":                       # the word's pattern read as a value
        fmt = _interchange(xp, src)
        return xp.asarray(formats.decode(W.pattern(x, src), fmt).reshape(a.shape))
    if a.source == "scalar":                       # the value's interchange word
        fmt = _interchange(xp, dst)
        # to_float64 is exact for every format of at most 64 bits that fits binary64.
        bits = formats.encode(xp.to_float64(x), fmt)
        return W.from_pattern(bits.reshape(a.shape), dst)
    return W.from_pattern(W.pattern(x, src), dst)


_BITCAST_DOMAIN = Domain(ordinary=uniform(-4, 4), special=special(uniform(-4, 4))).samplers()


def _bitcast_sampler(kind):
    """Scalars of the kind (specials: zeros, infinities, NaN, extremes), or any words (their
    patterns cover NaNs, infinities and subnormals of the format alike)."""
    def sampler(rng, fmt, op):
        port = op.inputs[0]
        return _BITCAST_DOMAIN[kind](rng, fmt, op) if port.scalar else (W.sample(rng, port),)
    return sampler


_WIDE = "the default example's 64-bit words match only binary64 scalars; every backend of " \
        "the test (bfloat16, binary128, float8, float32) has another width: the rule refuses"

define(
    "bitcast", "integer",
    attributes=(A.shape(), A.choice("source", _SORTS, default="int64",
                                    doc="the sort read: the scalar or a word type"),
                A.choice("target", _SORTS, default="scalar",
                         doc="the sort of the same width it is read as")),
    ports=lambda a: ({"x": _sort_port(a.source, a.shape, "frozen")},
                     {"y": _sort_port(a.target, a.shape, "value")}),
    forward=_bitcast_forward,
    jvp=zero_tangents,
    needs=lambda a: "Bits" if "scalar" in (a.source, a.target) else None,
    check=_bitcast_check,
    samples={k: _bitcast_sampler(k) for k in ("ordinary", "special")},
    examples={"": {}, "2x3": {"shape": (2, 3)}, "scalar-uint64": {"source": "scalar",
                                                                   "target": "uint64"},
              "int32-uint32": {"source": "int32", "target": "uint32"},
              "uint8-int8": {"source": "uint8", "target": "int8"}},
    bad_attributes=(({"source": "scalar", "target": "scalar"}, "must not both be scalar"),
                    ({"source": "int8", "target": "uint16"}, "must have the same width")),
    known_failures=(KnownFailure("backends", _WIDE, example="bitcast"),
                    KnownFailure("backends", _WIDE, example="bitcast-2x3"),
                    KnownFailure("backends", _WIDE, example="bitcast-scalar-uint64")),
    notes=("bitcast reads each word as another sort of the same width: between word types "
           "the pattern is kept (int8 -1 is uint8 255); to the scalar, the word is the "
           "interchange pattern of the backend's binary format (needs Bits; the word width "
           "must equal the format's, else the rule refuses with a one-line error); from the "
           "scalar, its interchange word.",
           "NaN: every NaN pattern reads as the format's NaN, and a NaN scalar gives the "
           "format's canonical quiet NaN pattern (payloads are not kept); -0 is the sign bit "
           "alone.",
           "No value input: no gradient; the value output (target scalar) has a zero tangent.",
           "numerics.reference and numerics.exact have no Bits (a real has no interchange "
           "word): no rule there at a scalar source or target."),
    certificates=(convention(f"{TESTS}::test_bitcast_reads_interchange_words",
                             "the word is the format's interchange pattern; word types keep "
                             "the pattern"),),
)


# ----- encodeIndex / decodeIndex ------------------------------------------------------------------
def _index_check(a):
    return None if a.bounds else "bounds must list at least one bound (got [])"


def _index_ports(a):
    idx = index(a.bounds, a.shape)
    return idx, _port(a, idx.array_shape)


def _components(a, x):
    """The array as (n, k) components (k the number of bounds)."""
    return np.asarray(x).reshape(-1, len(a.bounds))


def _encode_validate(xp, a, idx):
    hi = _word_max(a)
    comps = _components(a, idx)
    bad = comps > hi
    if bad.any():
        return (f"input index expects components that {a.element} words hold, at most {hi} "
                f"(got {comps[bad][0]})")
    return None


def _word_max(a):
    signed, width = W.signed_width(a.element)
    return (1 << (width - 1)) - 1 if signed else (1 << width) - 1


def _index_sampler(encode):
    def sampler(rng, fmt, op):
        a = op.attrs
        idx_port, word_port = _index_ports(a)
        top = [max(1, min(b, _word_max(a) + 1)) for b in a.bounds]
        comps = np.stack([rng.integers(0, t, idx_port.shape) for t in top], axis=-1)
        comps = comps.reshape(idx_port.array_shape)
        return (comps.astype(np.int64) if encode else comps.astype(W.dtype(word_port)),)
    return sampler


def _decode_validate(xp, a, words):
    comps = _components(a, words)
    for j, b in enumerate(a.bounds):
        col = comps[:, j]
        bad = (col < 0) | (col >= b)
        if bad.any():
            return (f"input words expects component {j} in [0, {b}) (got "
                    f"{col[bad][0]})")
    return None


_INDEX_NOTE = ("The words have the index port's array layout: shape for one bound, shape + "
               "[k] for k > 1 bounds (component j along the last axis).")

define(
    "encodeIndex", "integer",
    attributes=(A.shape(), A.nats("bounds", default=(4,), doc="the index port's bounds"),
                _element()),
    ports=lambda a: ({"index": _index_ports(a)[0]}, {"words": _index_ports(a)[1]}),
    forward=lambda xp, a, idx: np.asarray(idx).astype(W.dtype(_index_ports(a)[1])),
    check=_index_check,
    validate=_encode_validate,
    samples={"ordinary": _index_sampler(True)},
    oracle=lambda ctx, a, idx: (np.array([int(v) for v in np.asarray(idx).reshape(-1)],
                                         dtype=object).reshape(np.shape(idx)),),
    examples={"": {}, "pairs": {"shape": (2,), "bounds": (3, 5)},
              "uint8": {"bounds": (300,), "element": "uint8"},
              "int8": {"shape": (2, 2), "bounds": (2, 128, 4), "element": "int8"}},
    bad_attributes=(({"bounds": ()}, "bounds must list at least one bound"),),
    # The registry test hands bad inputs over as float64 arrays, which invoke refuses at the
    # port before validate runs: the fragment is the part both messages share.
    bad_inputs=(({"bounds": (300,), "element": "int8"}, (np.array([1, 200, 3]),),
                 "encodeIndex: input index expects components that int8 words hold, at most "
                 "127 (got 200)"),),
    notes=("encodeIndex writes each component of an index tuple as a word; validate refuses "
           "a component the word type cannot hold (an index of 200 in int8).", _INDEX_NOTE,
           "No value input: no gradient."),
    certificates=(convention(f"{TESTS}::test_index_words_round_trip_and_refuse_misfits",
                             "components become words; a component above the word type's "
                             "greatest word is refused"),),
)

define(
    "decodeIndex", "integer",
    attributes=(A.shape(), A.nats("bounds", default=(4,), doc="the index port's bounds"),
                _element()),
    ports=lambda a: ({"words": _index_ports(a)[1]}, {"index": _index_ports(a)[0]}),
    forward=lambda xp, a, words: np.asarray(words).astype("int64"),
    # The spec: "no value input; forward mode at some attributes" -- where the rule exists.
    jvp=zero_tangents,
    no_rule=lambda a: "a zero bound admits no index" if 0 in a.bounds else None,
    check=_index_check,
    validate=_decode_validate,
    samples={"ordinary": _index_sampler(False)},
    oracle=lambda ctx, a, words: (np.array([int(v) for v in np.asarray(words).reshape(-1)],
                                           dtype=object).reshape(np.shape(words)),),
    examples={"": {}, "pairs": {"shape": (2,), "bounds": (3, 5)},
              "uint64": {"bounds": (7,), "element": "uint64"},
              "int8": {"shape": (2, 2), "bounds": (2, 128, 4), "element": "int8"}},
    bad_attributes=(({"bounds": ()}, "bounds must list at least one bound"),),
    bad_inputs=(({"bounds": (3,), "element": "int8"}, (np.array([1, 3, 0], "int8"),),
                 "decodeIndex: input words expects component 0 in [0, 3) (got 3)"),
                ({"shape": (1,), "bounds": (3, 5)}, (np.array([[2, -1]], "int32"),),
                 "decodeIndex: input words expects component 1 in [0, 5) (got -1)")),
    notes=("decodeIndex reads each word as a component of an index tuple; validate refuses a "
           "word outside [0, bound) of its component (negative words included).", _INDEX_NOTE,
           "No value input: no gradient.  A zero bound admits no index at all: no rule "
           "there (the spec's attributes without a rule; op.rule gives None)."),
    certificates=(convention(f"{TESTS}::test_index_words_round_trip_and_refuse_misfits",
                             "words become components; a word outside [0, bound) is "
                             "refused"),),
)

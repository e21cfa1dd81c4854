"""The element sorts of sub, neg, div, pow and remainder (spec: "Ports And Element Sorts")
against Python integers: exhaustive over every pair of 8-bit words, random 16/32/64-bit words,
hand-computed answers at the edges (the least word divided by -1, 0^0, the signs of a
remainder), and the refusals (a zero divisor, a negative exponent, true division of words,
Booleans).  Every oracle here restates PyTorch's documented integer semantics on unbounded
Python integers followed by an explicit two's complement wrap; none calls routes.words or an
entry's own oracle."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes.errors import RouteError
from conftest import wrap

F64 = numerics.native("float64")
ELEMENTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def signed_width(element):
    return not element.startswith("u"), int(element.lstrip("uint"))


# torch's documentation restated on Python integers (before the wrap):
# torch.sub: input - other;  torch.neg: -input;
# torch.div(rounding_mode="trunc"): "rounds the results of the division towards zero",
#   (C-style integer division); rounding_mode="floor": "rounds the results of the division
#   down" (Python's //);
# torch.remainder: "Python's modulus operation": a - floor(a / b) b, the sign of the divisor;
# torch.pow: input ** exponent for exponents >= 0.
TORCH = {
    "sub": lambda x, y: x - y,
    "div-trunc": lambda x, y: math.trunc(Fraction(x, y)),
    "div-floor": lambda x, y: math.floor(Fraction(x, y)),
    "remainder": lambda x, y: x - math.floor(Fraction(x, y)) * y,
    "pow": lambda x, y: x ** y,
}


def op_of(key, element, shape):
    name, _, mode = key.partition("-")
    attrs = {"rounding_mode": mode} if mode else {}
    return routes.op(name, shape=shape, element=element, **attrs)


def run(key, element, *xs, backend=F64):
    (out,) = routes.invoke(op_of(key, element, np.shape(xs[0])), xs, backend)
    assert out.dtype == np.dtype(element)
    return out.tolist()


def expected(key, element, x, y):
    signed, w = signed_width(element)
    return [wrap(TORCH[key](p, q), signed, w) for p, q in zip(x.tolist(), y.tolist())]


def admissible(key, p, q):
    """Operands the rule accepts: a nonzero divisor, a non-negative exponent."""
    if key == "sub":
        return True
    return q >= 0 if key == "pow" else q != 0


@pytest.mark.parametrize("element", ["int8", "uint8"])
@pytest.mark.parametrize("key", list(TORCH))
def test_8_bit_word_arithmetic_matches_python_integers_exhaustively(key, element):
    """Every admissible pair of 8-bit words (nonzero divisors, non-negative exponents).
    Spec: "At .bool or .integer signed width the operator moves Booleans or integer
    words as it moves scalars, or computes PyTorch's integer meaning with the functions of
    TorchLean.Word (wrapping +, -, * and negation, the order of the type), without
    gradients." (spec, "Ports And Element Sorts")"""
    lo, hi = (-128, 127) if element == "int8" else (0, 255)
    pairs = [(p, q) for p, q in itertools.product(range(lo, hi + 1), repeat=2)
             if admissible(key, p, q)]
    x = np.array([p for p, _ in pairs], dtype=element)
    y = np.array([q for _, q in pairs], dtype=element)
    assert run(key, element, x, y) == expected(key, element, x, y)


@pytest.mark.parametrize("element", ELEMENTS[2:])
@pytest.mark.parametrize("key", list(TORCH))
def test_wide_word_arithmetic_matches_python_integers(key, element):
    """Random words uniform over the 2**w patterns and the extremes."""
    signed, w = signed_width(element)
    rng = np.random.default_rng(w + signed + len(key))
    lo, hi = (-2 ** (w - 1), 2 ** (w - 1) - 1) if signed else (0, 2 ** w - 1)
    edge = [lo, hi, 0, 1] + ([-1] if signed else [])

    def draw(n):
        return [wrap(int(rng.integers(0, 1 << 62)) * 4 + int(rng.integers(0, 4)), signed, w)
                for _ in range(n)] + edge
    x, y = draw(300), draw(300)
    if key == "pow":              # small exponents, where the powers pass the width
        y = [abs(q) % (2 * w + 2) for q in y]
    y = [q if admissible(key, 0, q) else 1 for q in y]
    xs = np.array(x, dtype=element), np.array(y, dtype=element)
    if key == "pow":
        # Large exponents too: Python's three-argument pow, exact modulo 2**w.
        big = np.array([q % (hi + 1) if signed else q for q in draw(300)], dtype=element)
        got = run("pow", element, xs[0], big)
        assert got == [wrap(pow(p, q, 2 ** w), signed, w)
                       for p, q in zip(x, big.tolist())]
    assert run(key, element, *xs) == expected(key, element, *xs)


@pytest.mark.parametrize("element", ELEMENTS)
def test_sub_and_neg_wrap_around(element):
    """Spec: "At .bool or .integer signed width the operator moves Booleans or integer
    words as it moves scalars, or computes PyTorch's integer meaning with the functions of
    TorchLean.Word (wrapping +, -, * and negation, the order of the type), without
    gradients." (spec, "Ports And Element Sorts")
    Booleans: PyTorch refuses - on them (logicalXor and logicalNot are the Boolean forms), so
    sub and neg have no rule at element bool."""
    signed, w = signed_width(element)
    lo, hi = (-2 ** (w - 1), 2 ** (w - 1) - 1) if signed else (0, 2 ** w - 1)
    x = np.array([lo, hi, 0, 1, lo, hi], dtype=element)
    y = np.array([1, lo, 1, hi, hi, hi], dtype=element)
    # Hand-computed modulo 2**w: lo - 1 = hi; hi - lo = 2**w - 1 (-1 signed, hi unsigned);
    # 0 - 1 = -1 (hi unsigned); 1 - hi = 2 - 2**(w-1) = lo + 2 signed, 2 - 2**w = 2 unsigned;
    # lo - hi = 1 - 2**w = 1 either way; hi - hi = 0.
    want = [hi, -1 if signed else hi, -1 if signed else hi, lo + 2 if signed else 2, 1, 0]
    assert run("sub", element, x, y) == want
    assert run("sub", element, x, y) == expected("sub", element, x, y)
    (neg,) = routes.invoke(routes.op("neg", shape=(4,), element=element),
                           [np.array([lo, hi, 0, 1], dtype=element)], F64)
    # -lo = 2**(w-1) wraps to lo (signed); unsigned: -v = 2**w - v, -0 = 0.
    assert neg.tolist() == ([lo, -hi, 0, -1] if signed else [0, 1, 0, hi])
    for name, arity in (("sub", 2), ("neg", 1)):
        o = routes.op(name, element="bool")
        assert o.rule(F64) is None
        with pytest.raises(RouteError) as err:
            routes.invoke(o, [np.ones(3, bool)] * arity, F64)
        assert str(err.value).startswith(f"{name}: no rule at these attributes: element bool: "
                                         f"PyTorch refuses")


@pytest.mark.parametrize("element", ["int8", "int16", "int32", "int64", "uint8", "uint64"])
def test_integer_div_is_exact_and_refuses_zero(element):
    """Spec: "An integer division or remainder fails its check at a zero divisor, an integer
    true division (div .none) has no rule"; validate: "an integer div with a rounding mode
    and an integer remainder a zero divisor".  trunc rounds toward zero (C's /), floor down
    (Python's //).  least // -1 = 2**(w-1) wraps to the least word: PyTorch's CPU kernel
    gives that for int8 and int16 (C++ promotes them to int) and traps (SIGFPE) for int32
    and int64 (pytorch#127804); here every width wraps, as TorchLean.Word's wrapping
    arithmetic does."""
    signed, w = signed_width(element)
    if signed:
        lo = -2 ** (w - 1)
        x = np.array([7, -7, 7, -7, lo, lo, 6], dtype=element)
        y = np.array([2, 2, -2, -2, -1, 1, -3], dtype=element)
        assert run("div-trunc", element, x, y) == [3, -3, -3, 3, lo, lo, -2]
        assert run("div-floor", element, x, y) == [3, -4, -4, 3, lo, lo, -2]
    else:
        top = 2 ** w - 1
        x = np.array([7, top, top, 0], dtype=element)
        y = np.array([2, 1, top, 5], dtype=element)
        assert run("div-trunc", element, x, y) == [3, top, 1, 0]
        assert run("div-floor", element, x, y) == [3, top, 1, 0]
    for mode in ("trunc", "floor"):
        o = routes.op("div", shape=(3,), rounding_mode=mode, element=element)
        with pytest.raises(RouteError) as err:
            routes.invoke(o, [np.array([1, 2, 3], element), np.array([1, 1, 0], element)], F64)
        assert str(err.value) == "div: y must be a nonzero divisor (got 0 at index [2])"
    true = routes.op("div", element=element)
    assert true.rule(F64) is None and true.rule(numerics.reference(64)) is None
    assert "integer true division" in true.decl.no_rule(true.attrs)
    with pytest.raises(RouteError) as err:
        routes.invoke(true, [np.ones(3, element)] * 2, F64)
    assert str(err.value).startswith("div: no rule at these attributes: integer true division "
                                     "(rounding_mode none): PyTorch promotes")
    assert routes.op("div", element="bool", rounding_mode="floor").rule(F64) is None


@pytest.mark.parametrize("element", ["int8", "int32", "int64", "uint8", "uint64"])
def test_integer_remainder_takes_the_divisors_sign(element):
    """Spec: "An integer division or remainder fails its check at a zero divisor".
    torch.remainder is Python's %: a - floor(a / b) b, with the divisor's sign and |r| < |b|;
    least % -1 is 0 (no overflow: the exact remainder is 0)."""
    signed, w = signed_width(element)
    if signed:
        lo = -2 ** (w - 1)
        x = np.array([5, -5, 5, -5, 6, lo, lo], dtype=element)
        y = np.array([3, 3, -3, -3, -3, -1, 3], dtype=element)
        # -2**(w-1) % 3: 2 = -1 mod 3, so 2**(w-1) = (-1)**(w-1) = -1 (w - 1 odd), and
        # -2**(w-1) = 1 mod 3.
        assert run("remainder", element, x, y) == [2, 1, -1, -2, 0, 0, 1]
    else:
        top = 2 ** w - 1
        x = np.array([5, top, 0], dtype=element)
        y = np.array([3, 2, 7], dtype=element)
        assert run("remainder", element, x, y) == [2, 1, 0]
    o = routes.op("remainder", shape=(2,), element=element)
    with pytest.raises(RouteError) as err:
        routes.invoke(o, [np.array([1, 2], element), np.array([0, 3], element)], F64)
    assert str(err.value) == "remainder: y must be a nonzero divisor (got 0 at index [0])"
    # Words are data: the scalar's Rounding capability is not read, so every backend has
    # the rule (numerics.exact included).
    assert o.need is None and routes.op("remainder").need == "Rounding"
    assert routes.op("remainder", element="bool").rule(F64) is None


@pytest.mark.parametrize("element", ["int8", "int64", "uint8", "uint64"])
def test_integer_pow_wraps_and_refuses_negative_exponents(element):
    """torch.pow on integer tensors: input ** exponent with wrapping products, 0 ** 0 = 1;
    "Integers to negative integer powers are not allowed" (torch's error for a scalar
    exponent), which validate states for every exponent.
    Spec: "At .bool or .integer signed width the operator moves Booleans or integer
    words as it moves scalars, or computes PyTorch's integer meaning with the functions of
    TorchLean.Word (wrapping +, -, * and negation, the order of the type), without
    gradients." (spec, "Ports And Element Sorts")"""
    signed, w = signed_width(element)
    x = np.array([0, 0, 2, 3, 2, 1, 7], dtype=element)
    y = np.array([0, 5, w - 1, 2, w, 100, 0], dtype=element)
    want = [1, 0, 2 ** (w - 1), 9, 0, 1, 1]
    assert run("pow", element, x, y) == [wrap(v, signed, w) for v in want]
    if signed:
        # (-2)**(w-1) = -2**(w-1), the least word; (-1)**odd = -1; (-3)**3 = -27.
        neg = np.array([-2, -1, -3], dtype=element)
        assert run("pow", element, neg, np.array([w - 1, 5, 3], dtype=element)) == \
            [-2 ** (w - 1), -1, -27]
        o = routes.op("pow", shape=(2,), element=element)
        with pytest.raises(RouteError) as err:
            routes.invoke(o, [np.array([2, 3], element), np.array([1, -2], element)], F64)
        assert str(err.value) == ("pow: y must be a non-negative exponent: integers to "
                                  "negative integer powers are not allowed (got -2 at index "
                                  "[1])")
    assert routes.op("pow", element="bool").rule(F64) is None


@pytest.mark.parametrize("backend", [numerics.exact(), numerics.reference(64),
                                     numerics.emulated("bfloat16"), F64],
                         ids=["exact", "reference", "emulated", "native"])
def test_words_are_the_same_under_every_backend_and_have_no_gradient(backend):
    """Spec: "... without gradients": the rule is the same for every backend, backward gives
    None at the word inputs and the forward mode no tangent at the word output."""
    x, y = np.array([-128, 100, 7], np.int8), np.array([-1, 3, -2], np.int8)
    for key, want in (("sub", [-127, 97, 9]), ("div-trunc", [-128, 33, -3]),
                      ("div-floor", [-128, 33, -4]), ("remainder", [0, 1, -1]),
                      ("pow", None)):
        o = op_of(key, "int8", (3,))
        rule = o.rule(backend)
        args = [x, np.array([2, 1, 3], np.int8)] if key == "pow" else [x, y]
        (out,) = rule.forward(args)
        assert out.tolist() == (want or [0, 100, 87])     # 7**3 = 343 = 87 + 256
        assert rule.backward(args, [None]) == (None, None)
        assert rule.jvp(args, [None, None]) == (None,)
    neg = routes.op("neg", shape=(3,), element="int8").rule(backend)
    assert neg.forward([x])[0].tolist() == [-128, -100, -7]
    assert neg.backward([x], [None]) == (None,)


def test_every_numeric_operator_takes_the_element_argument():
    """Spec: "for add, sub, mul, div, neg, pow, remainder, max, min and the comparisons
    (Op.NumericElement), the element argument defaults to .scalar"."""
    for name in ("add", "sub", "mul", "div", "neg", "pow", "remainder", "max", "min",
                 "eq", "ne", "lt", "le", "gt", "ge"):
        assert routes.op(name).attrs.element == "scalar"
        assert str(routes.op(name, element="int8").inputs[0]) == "int8[3]"

"""numerics/double_double.py against mpmath at 400 bits and exact rationals: each native
primitive within 2**-100 of its exact result (wide exponents, cancellation), the exact
products rounded once, casts equal to MPFR's roundings, and what it cannot hold refused."""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import gmpy2
import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage.numerics import reference
from roundoff_coverage.numerics.double_double import (DD, POW_MAX, OutOfRange, double_double,
                                                      exact_values)

from mpfr_oracle import MODES7, FormatOracle

DDB = double_double()
REF = reference(106)
MP = mpmath.MPContext()
# The module (``numerics.double_double`` is its constructor).
dd_module = importlib.import_module("roundoff_coverage.numerics.double_double")
MP.prec = 400


def _numbers(rng, n, span=40):
    """Double-double numbers hi + lo with |lo| up to 2**-55 of hi, exponents over +-span."""
    hi = rng.standard_normal(n) * np.exp2(rng.integers(-span, span, n).astype(float))
    lo = hi * rng.uniform(-1, 1, n) * 2.0 ** -55
    out = np.empty(n, dtype=DD)
    out["hi"], out["lo"] = hi + lo, (hi - (hi + lo)) + lo       # renormalised exactly
    return out


def _exact(a):
    return [MP.mpf(h) + MP.mpf(lo) for h, lo in zip(a["hi"].tolist(), a["lo"].tolist())]


def _worst(got, want):
    """The largest relative error of got (DD) against the mpf values want."""
    rel = [abs(g - w) / abs(w) if w else abs(g) for g, w in zip(_exact(got), want)]
    return max(rel)


EXACT = {"add": lambda x, y: x + y, "subtract": lambda x, y: x - y,
         "multiply": lambda x, y: x * y, "divide": lambda x, y: x / y,
         "square": lambda x: x * x, "reciprocal": lambda x: 1 / x,
         "sqrt": lambda x: MP.sqrt(x), "rsqrt": lambda x: 1 / MP.sqrt(x)}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_each_native_primitive_is_within_2_to_the_minus_100_of_its_exact_result(name):
    rng = np.random.default_rng(len(name))
    f = EXACT[name]
    arity = f.__code__.co_argcount
    xs = [_numbers(rng, 4000) for _ in range(arity)]
    if name in ("sqrt", "rsqrt"):
        xs = [DDB.abs(xs[0])]
    if name == "subtract":
        # Cancellation: y agrees with x in its top 1..100 bits.
        xs[1] = DDB.add(xs[0], DDB.multiply(xs[0], np.exp2(-rng.integers(1, 100, 4000)
                                                            .astype(float))))
    out = getattr(DDB, name)(*xs)
    want = [f(*v) for v in zip(*[_exact(x) for x in xs])]
    assert _worst(out, want) <= 2.0 ** -100
    assert (np.abs(out["lo"]) <= np.abs(np.spacing(out["hi"])) / 2).all()   # normalised


@pytest.mark.parametrize("name", sorted(EXACT) + ["exp", "tanh", "maximum"])
def test_large_operands_are_computed_a_block_at_a_time_with_the_same_results(name,
                                                                           monkeypatch):
    # Blocks of 7 of a 40 x 100 array: the blocks' results joined are the whole
    # computation's, bit for bit, and the exact results within 2**-100 where EXACT has them.
    rng = np.random.default_rng(len(name) + 1)
    arity = 2 if name in ("add", "subtract", "multiply", "divide", "maximum") else 1
    xs = [_numbers(rng, 4000, span=4 if name in ("exp", "tanh") else 40).reshape(40, 100)
          for _ in range(arity)]
    if name in ("sqrt", "rsqrt"):
        xs = [DDB.abs(xs[0])]
    whole = getattr(DDB, name)(*xs)
    monkeypatch.setattr(dd_module, "BLOCK", 7)
    blocked = getattr(DDB, name)(*xs)
    assert blocked.shape == (40, 100) and blocked.tobytes() == whole.tobytes()
    if name in EXACT:
        want = [EXACT[name](*v) for v in zip(*[_exact(x.reshape(-1)) for x in xs])]
        assert _worst(blocked.reshape(-1), want) <= 2.0 ** -100
    # NaN, infinities, division by zero, in blocks of 5 of 63 entries
    x = np.tile(np.array([1.0, -2.0, 0.0, np.inf, -np.inf, np.nan, 3.0, np.inf, 0.0]), 7)
    y = np.tile(np.array([0.0, 0.0, 0.0, 1.0, np.inf, 1.0, np.inf, -np.inf, np.inf]), 7)
    args = (x, y)[:arity]
    monkeypatch.setattr(dd_module, "BLOCK", 5)
    got = getattr(DDB, name)(*args)
    monkeypatch.setattr(dd_module, "BLOCK", 1 << 20)
    assert got.tobytes() == getattr(DDB, name)(*args).tobytes()


def test_exact_primitives_are_exact():
    rng = np.random.default_rng(5)
    x, y = _numbers(rng, 500), _numbers(rng, 500)
    y[:50] = x[:50]
    for name, f in (("negative", lambda a, b: -a), ("abs", lambda a, b: abs(a)),
                    ("maximum", max), ("minimum", min)):
        args = (x,) if name in ("negative", "abs") else (x, y)
        assert _exact(getattr(DDB, name)(*args)) == [f(a, b) for a, b in
                                                     zip(_exact(x), _exact(y))]
    assert DDB.less(x, y).tolist() == [a < b for a, b in zip(_exact(x), _exact(y))]
    assert DDB.equal(x, y).tolist() == [a == b for a, b in zip(_exact(x), _exact(y))]


@pytest.mark.parametrize("piece", [None, 4])
def test_matmul_and_dot_are_the_exact_sums_rounded_once(piece, monkeypatch):
    # piece: products of more entries made in pieces of a's rows (double_double.PIECE).
    if piece:
        monkeypatch.setattr(dd_module, "PIECE", piece)
    rng = np.random.default_rng(6)
    a = _numbers(rng, 7 * 9, 20).reshape(7, 9)
    b = _numbers(rng, 9 * 5, 20).reshape(9, 5)
    # Cancellation: column 0 of b makes row 0's sum nearly vanish.
    b[:, 0] = DDB.negative(DDB.asarray(np.zeros(9)))
    a_ex = [[Fraction(h) + Fraction(lo) for h, lo in zip(r["hi"], r["lo"])] for r in a]
    b_ex = [[Fraction(h) + Fraction(lo) for h, lo in zip(r["hi"], r["lo"])] for r in b]
    got = DDB.matmul(a, b)
    for i in range(7):
        for j in range(5):
            want = sum(a_ex[i][k] * b_ex[k][j] for k in range(9))
            g = Fraction(got["hi"][i, j]) + Fraction(got["lo"][i, j])
            assert abs(g - want) <= abs(want) * Fraction(1, 2 ** 104)
    d = DDB.dot(a[:5], DDB.asarray(np.swapaxes(b, 0, 1)[:, :, None][:5, :, 0]))
    for i in range(5):
        want = sum(a_ex[i][k] * b_ex[k][i] for k in range(9))
        g = Fraction(d["hi"][i]) + Fraction(d["lo"][i])
        assert abs(g - want) <= abs(want) * Fraction(1, 2 ** 104)


@pytest.mark.parametrize("piece", [None, 5])
@pytest.mark.parametrize("shapes", [((2, 3, 1, 4, 6), (1, 3, 5, 4, 6)), ((3, 1, 6), (4, 6)),
                                    ((6,), (3, 6)), ((2, 1, 6), (1, 1, 6))])
def test_a_broadcast_dot_is_the_exact_sums_rounded_once(shapes, piece, monkeypatch):
    # dot's leading axes broadcast into a product of matrices (computed as one matmul),
    # in pieces of rows where ``piece`` is set.
    if piece:
        monkeypatch.setattr(dd_module, "PIECE", piece)
    rng = np.random.default_rng(16)
    a, b = (_numbers(rng, math.prod(s), 20).reshape(s) for s in shapes)
    got = DDB.dot(a, b)
    ea, eb = np.broadcast_arrays(a[..., 0], b[..., 0])
    assert got.shape == ea.shape
    ia = np.broadcast_to(np.arange(a[..., 0].size).reshape(a.shape[:-1]), ea.shape)
    ib = np.broadcast_to(np.arange(b[..., 0].size).reshape(b.shape[:-1]), eb.shape)
    fa, fb = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    for g, i, j in zip(got.reshape(-1), ia.reshape(-1), ib.reshape(-1)):
        want = sum((Fraction(x["hi"]) + Fraction(x["lo"])) * (Fraction(y["hi"]) +
                                                              Fraction(y["lo"]))
                   for x, y in zip(fa[i], fb[j]))
        assert abs(Fraction(g["hi"]) + Fraction(g["lo"]) - want) <= \
            abs(want) * Fraction(1, 2 ** 104)


@pytest.mark.parametrize("fmt", ["bfloat16", "binary16", "float8_e4m3fn", "binary32"])
def test_casts_are_mpfrs_roundings_of_the_exact_values(fmt):
    rng = np.random.default_rng(7)
    f = formats.get(fmt)
    # Ties of the format and their neighbours: hi on a midpoint, lo just above or below.
    mids = formats.round_to(rng.standard_normal(300), f, "nearest_even") * \
        (1 + 2.0 ** -(f.precision))
    x = np.empty(904, dtype=DD)
    x["hi"] = np.concatenate([mids, mids, rng.standard_normal(300),
                              [np.inf, -np.inf, np.nan, 1e300]])
    x["lo"] = np.concatenate([np.abs(mids) * 2.0 ** -70, -np.abs(mids) * 2.0 ** -70,
                              np.zeros(304)])
    oracle = FormatOracle(f)
    with gmpy2.context(precision=300):              # hi + lo exactly (they span < 200 bits)
        exact = [gmpy2.mpfr(h) + gmpy2.mpfr(lo) if np.isfinite(h) else h
                 for h, lo in zip(x["hi"].tolist(), x["lo"].tolist())]
    for mode in MODES7:
        got = DDB.cast(x, fmt, mode)
        want = [oracle.round(v, mode)[0] for v in exact]
        assert [str(v) for v in got.tolist()] == [str(v) for v in want], mode


def test_a_primitive_not_computed_here_is_mpmaths_at_106_bits():
    rng = np.random.default_rng(8)
    x = DDB.multiply(_numbers(rng, 300, 2), np.full(300, 0.5))
    for name in ("sin", "atan"):
        want = [getattr(MP, name)(v) for v in _exact(x)]
        assert _worst(getattr(DDB, name)(x), want) <= 2.0 ** -104


def _thirds(x):
    """x / 3 * 3 in double-double: operands with a nonzero lo."""
    return DDB.multiply(DDB.divide(x, np.full(x.size, 3.0)), np.full(x.size, 3.0))


_LN2 = float(MP.log(2))
_R = np.random.default_rng(15)
# Each function's whole range, its reductions' edges and tiny arguments.
FUNCTION_CASES = {
    "erf": (MP.erf, np.concatenate([
        _R.uniform(-7, 7, 3000), _R.standard_normal(500) * 1e-3, [1e-200, -3e-150],
        (np.arange(-26, 26) + 0.5) * 0.25, np.arange(-26, 26) * 0.25,       # interval edges
        _R.uniform(6, 30, 100), [6.1249999, 6.125, 6.1250001, -27.0]])),    # erfc's side
    "tanh": (MP.tanh, np.concatenate([
        _R.uniform(-45, 45, 2000), _R.standard_normal(500) * 1e-3,
        _R.standard_normal(100) * 2.0 ** -60, np.arange(-60, 60) * _LN2 / 2,
        (np.arange(-60, 60) + 0.5) * _LN2 / 2, [39.99, 40.0, 40.01, -1e-250]])),
    "expm1": (MP.expm1, np.concatenate([
        _R.uniform(-100, 620, 2000), _R.standard_normal(500) * 1e-3,
        _R.standard_normal(100) * 2.0 ** -60, np.arange(-100, 100) * _LN2,
        (np.arange(-100, 100) + 0.5) * _LN2, [-79.9, -80.0, -80.1, -700.0]])),
    "log": (MP.log, np.concatenate([
        np.exp(_R.uniform(-620, 620, 2000)), 1 + _R.standard_normal(500) * 1e-3,
        1 + _R.standard_normal(100) * 2.0 ** -40, [1.0, 2.0, 0.5, 2.0 ** -890, 2.0 ** 890],
        np.sqrt(0.5) * (1 + _R.standard_normal(100) * 1e-12),
        np.sqrt(2.0) * (1 + _R.standard_normal(100) * 1e-12)])),
    "log1p": (MP.log1p, np.concatenate([
        np.exp(_R.uniform(-620, 620, 1000)), -np.exp(_R.uniform(-600, -1e-9, 1000)),
        _R.standard_normal(500) * 1e-3, _R.standard_normal(100) * 2.0 ** -60,
        np.sqrt(0.5) - 1 + _R.standard_normal(100) * 1e-12,
        np.sqrt(2.0) - 1 + _R.standard_normal(100) * 1e-12])),
}


@pytest.mark.parametrize("name", sorted(FUNCTION_CASES))
def test_each_elementary_function_is_within_2_to_the_minus_100_of_mpmath(name):
    f, x = FUNCTION_CASES[name]
    for a in (x, _thirds(x)):
        want = [f(v) for v in _exact(DDB.asarray(a))]
        assert _worst(getattr(DDB, name)(a), want) <= 2.0 ** -100


def test_exp_is_within_2_to_the_minus_100_of_mpmath():
    # Against mpmath at 400 bits: the whole range double-double holds (|x| < 620), near
    # multiples of ln 2 and half-way between them (the reduction's edges), tiny arguments,
    # and operands with a nonzero lo (x / 3 * 3).
    rng = np.random.default_rng(12)
    ln2 = float(MP.log(2))
    x = np.concatenate([rng.uniform(-620, 620, 2000), rng.standard_normal(1000) * 1e-3,
                        rng.standard_normal(300) * 2.0 ** -60, np.arange(-890, 890) * ln2,
                        (np.arange(-890, 890) + 0.5) * ln2, [0.0, -0.0]])
    a = DDB.multiply(DDB.divide(x, np.full(x.size, 3.0)), np.full(x.size, 3.0))
    want = [MP.exp(v) for v in _exact(a)]
    assert _worst(DDB.exp(a), want) <= 2.0 ** -100
    assert _worst(DDB.exp(x), [MP.exp(v) for v in x.tolist()]) <= 2.0 ** -100


def test_what_it_cannot_hold_is_refused():
    with pytest.raises(OutOfRange):                 # an overflow mpmath would hold
        DDB.multiply(np.array([2.0 ** 600]), np.array([2.0 ** 600]))
    with pytest.raises(OutOfRange):
        DDB.exp(np.array([-1000.0]))                # 2**-1443: below the range
    with pytest.raises(OutOfRange):
        DDB.asarray(np.array([2.0 ** -1000]))
    with pytest.raises(OutOfRange):                 # underflows: 2**-1400, not 0
        DDB.multiply(np.array([2.0 ** -700]), np.array([2.0 ** -700]))
    with pytest.raises(OutOfRange):
        DDB.divide(np.array([2.0 ** -700]), np.array([2.0 ** 700]))
    with pytest.raises(OutOfRange):
        DDB.matmul(np.array([[2.0 ** -700]]), np.array([[2.0 ** -700]]))
    with pytest.raises(TypeError):                  # numpy arithmetic on a DD array
        DDB.asarray(np.ones(3)) * 2


def test_nans_and_infinities_follow_the_references_conventions():
    inf, nan = np.inf, np.nan
    x = np.array([1.0, -2.0, 0.0, inf, -inf, nan, 3.0, inf, 0.0])
    y = np.array([0.0, 0.0, 0.0, 1.0, inf, 1.0, inf, -inf, inf])
    for name in ("add", "subtract", "multiply", "divide", "maximum", "minimum"):
        got = getattr(DDB, name)(x, y)
        want = getattr(REF, name)(REF.asarray(x), REF.asarray(y))
        assert [str(float(v)) for v in exact_values(got)] == \
            [str(float(v)) for v in want], name
    for name in ("sqrt", "rsqrt", "reciprocal", "negative", "abs", "exp", "expm1", "log",
                 "log1p", "tanh", "erf"):
        got = getattr(DDB, name)(x)
        want = getattr(REF, name)(REF.asarray(x))
        assert [str(float(v)) for v in exact_values(got)] == \
            [str(float(v)) for v in want], name
    third = DDB.divide(np.ones(2), np.full(2, 3.0))          # a lo beside an infinity
    for got in (DDB.maximum(third, np.array([-inf, -inf])), DDB.minimum(third, np.full(2, inf))):
        assert [Fraction(h) + Fraction(lo) for h, lo in zip(got["hi"], got["lo"])] == \
            [Fraction(third["hi"][0]) + Fraction(third["lo"][0])] * 2
    below = DDB.subtract(np.array([-1.0, -1.0, -1.0]), np.array([2.0 ** -80, 0.0, -2.0 ** -80]))
    got = DDB.log1p(below)                                   # -1 - 2**-80, -1, -1 + 2**-80
    assert np.isnan(got["hi"][0]) and got["hi"][1] == -np.inf and \
        abs(float(exact_values(got)[2]) - float(MP.log(MP.mpf(2) ** -80))) < 1e-12
    for name in ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal"):
        assert getattr(DDB, name)(x, y).tolist() == \
            getattr(REF, name)(REF.asarray(x), REF.asarray(y)).tolist(), name


def test_constants_and_zeros():
    c = DDB.constant("0.1", (3,))
    assert abs(Fraction(c["hi"][0]) + Fraction(c["lo"][0]) - Fraction(1, 10)) <= \
        Fraction(1, 10) * Fraction(1, 2 ** 106)
    z = DDB.subtract(np.array([1.5]), np.array([1.5]))
    assert z["hi"][0] == 0 and not np.signbit(z["hi"][0])     # mpmath's one zero: +0
    assert np.pad(DDB.asarray(np.ones(2)), 1)["hi"].tolist() == [0, 1, 1, 0]


def test_rounded_to_bits_each_result_is_the_double_double_one_rounded_to_nearest():
    # double_double(72): each result is the full double-double result rounded to nearest at
    # 72 significant bits (71 where it lies just below a power of two and hi rounded up to
    # it), against mpmath's rounding of the exact pair; NaN and infinities (a mask's -inf)
    # and binary64 inputs are kept.
    rng = np.random.default_rng(3)
    x = rng.standard_normal(2000) * np.exp2(rng.integers(-40, 40, 2000))
    y = rng.standard_normal(2000)
    full, r72 = double_double(), double_double(72)
    for name, args in (("divide", (x, y)), ("exp", (y,)), ("add", (x / 3, y / 7)),
                       ("sqrt", (np.abs(x),))):
        want = getattr(full, name)(*[full.divide(full.asarray(a), full.asarray(3.0))
                                     if name == "add" else a for a in args])
        got = getattr(r72, name)(*[r72.divide(r72.asarray(a), r72.asarray(3.0))
                                   if name == "add" else a for a in args])
        for h, lo, gh, gl in zip(want["hi"].tolist(), want["lo"].tolist(),
                                 got["hi"].tolist(), got["lo"].tolist()):
            exact = mpmath.mpf(h) + mpmath.mpf(lo)
            g = mpmath.mpf(gh) + mpmath.mpf(gl)
            if name != "add":
                assert g in (_round_bits(exact, 72), _round_bits(exact, 71)), (name, h, lo)
            else:
                # the sum of two rounded quotients: within 2**-70 of the full sum
                assert abs(g - exact) <= abs(exact) * mpmath.mpf(2) ** -70 or exact == 0
    assert np.array_equal(r72.asarray(x)["hi"], x) and not r72.asarray(x)["lo"].any()
    m = r72.constant(-np.inf, (3,))
    assert np.isneginf(r72.add(m, r72.asarray(np.ones(3)))["hi"]).all()
    with pytest.raises(ValueError, match="bits must be an integer"):
        double_double(40)


def _round_bits(v, bits):
    with mpmath.workprec(bits):
        return +v


def test_integral_powers_are_within_2_to_the_minus_100_of_mpfr():
    # pow(x, n), |n| <= POW_MAX, against MPFR at 318 bits (three times double-double's 106):
    # random double-double bases (a nonzero lo) of both signs, bases whose powers reach
    # the ends of the range held (2**+-899), and exponents varying along the array.
    rng = np.random.default_rng(21)
    ns = [n for n in range(-POW_MAX, POW_MAX + 1) if n]
    x = _numbers(rng, 4000, span=100)
    n = rng.choice(ns, 4000).astype(float)
    edge = np.array([2.0 ** (899 / abs(m)) * (1 - 2.0 ** -52) for m in ns] +
                    [2.0 ** (-899 / abs(m)) * (1 + 2.0 ** -52) for m in ns])
    x = np.concatenate([x, DDB.asarray(edge), DDB.asarray(-edge)])
    n = np.concatenate([n, np.array(ns * 4, dtype=float)])
    got = DDB.pow(x, n)
    with gmpy2.context(gmpy2.get_context(), precision=318):
        for g_hi, g_lo, h, lo, m in zip(got["hi"].tolist(), got["lo"].tolist(),
                                        x["hi"].tolist(), x["lo"].tolist(), n.tolist()):
            want = (gmpy2.mpfr(h) + gmpy2.mpfr(lo)) ** int(m)
            err = abs((gmpy2.mpfr(g_hi) + gmpy2.mpfr(g_lo)) - want) / abs(want)
            assert err <= gmpy2.mpfr(2) ** -100, (h, lo, m)
    scalar = DDB.pow(_thirds(np.linspace(-3, 3, 61)), 3.0)            # GELU's x**3
    assert _worst(scalar, [v ** 3 for v in _exact(_thirds(np.linspace(-3, 3, 61)))]) <= \
        2.0 ** -100


def test_other_powers_and_special_bases_follow_the_reference():
    inf, nan = np.inf, np.nan
    x = np.array([0.0, -0.0, 0.0, inf, -inf, -inf, nan, nan, 2.0, -3.0, 0.0])
    n = np.array([3.0, 3.0, -2.0, -1.0, 3.0, 2.0, 0.0, 2.0, 0.0, -3.0, 0.0])
    want = REF.pow(REF.asarray(x), REF.asarray(n))
    assert [str(float(v)) for v in exact_values(DDB.pow(x, n))] == \
        [str(float(v)) for v in want]
    y = DDB.abs(_numbers(np.random.default_rng(4), 300, 4))
    for e in (0.5, 2.5, 9.0, -9.0):                 # mpmath's pow, rounded to double-double
        assert _worst(DDB.pow(y, np.full(300, e)), [v ** e for v in _exact(y)]) <= 2.0 ** -104
    with pytest.raises(OutOfRange):                 # 2**1200 and 2**-1200: beyond the range
        DDB.pow(np.array([2.0 ** 400]), np.array([3.0]))
    with pytest.raises(OutOfRange):
        DDB.pow(np.array([2.0 ** 400]), np.array([-3.0]))
    with pytest.raises(OutOfRange):
        DDB.pow(np.array([2.0 ** -400]), np.array([3.0]))

"""The compiled accelerator accumulations (fixed_point, promote), split_k and scans of the
emulated backend (numerics/products.py) against exact rationals.

The oracle is written here, independent of the code under test: each policy's order step by
step on Python Fractions, every rounding done by ``_rnd`` below (exact-rational rounding with
the special-value rules of shared/FACTS.md, itself checked against formats.round_exact).  Then
bit-identity of the compiled path with the generic one (Backend._hardware_contract,
Backend._prefix) on random inputs, forced by making numerics.products.strategy answer None
(EmulatedBackend._products_strategy asks it), and by RecordingBackend (its hooks)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics import products
from roundoff_coverage.numerics.backend import Backend
from roundoff_coverage.numerics.policy import Policy, preset
from roundoff_coverage.numerics.recording import RecordingBackend

DIRECTED = ("toward_zero", "upward", "downward")
MODES = ("nearest_even",) + DIRECTED
STORAGE = ("bfloat16", "binary16", "float8_e4m3fn", "float8_e5m2")


# ----- the oracle: exact rationals, each rounding written out ---------------------------------
def _floor_log2(a: Fraction) -> int:
    e = a.numerator.bit_length() - a.denominator.bit_length()
    return e if Fraction(2) ** e <= a else e - 1


def _rnd(v, fmt, mode):
    """``v`` (a Fraction, or a float: format values, infinities, NaN, signed zeros) rounded
    once into ``fmt`` under ``mode``: the nearest p-bit neighbours at the binade's quantum
    (the subnormal one below 2**emin); overflow beyond max_finite is inf, NaN (fn) or
    max_finite (saturate) when the mode rounds away from zero, max_finite otherwise; inf in
    is inf, NaN (fn) or max_finite (saturate); a zero result keeps the sign (no -0 in fnuz)."""
    fmt = formats.get(fmt)
    assert not fmt.flush_subnormals
    if isinstance(v, float) and math.isnan(v):
        return math.nan if fmt.has_nan else 0.0
    top = float(fmt.max_finite_exact)
    if isinstance(v, float) and math.isinf(v):
        if fmt.has_inf and not fmt.saturate:
            return v
        return math.nan if fmt.has_nan and not fmt.saturate else math.copysign(top, v)
    neg = v < 0 or (isinstance(v, float) and math.copysign(1.0, v) < 0)
    zero = -0.0 if neg and fmt.has_negative_zero else 0.0
    a = abs(Fraction(v))
    if a == 0:
        return zero
    p, emin = fmt.precision, fmt.qmin + fmt.precision - 1
    q = Fraction(2) ** (max(_floor_log2(a), emin) - p + 1)
    n = a // q
    rem = a - n * q
    up = {"nearest_even": rem > q / 2 or (rem == q / 2 and n % 2 == 1),
          "nearest_away": rem >= q / 2, "toward_zero": False,
          "upward": rem > 0 and not neg, "downward": rem > 0 and neg,
          "odd": rem > 0 and n % 2 == 0}[mode]
    r = (n + up) * q
    if r == 0:
        return zero
    if r > fmt.max_finite_exact:
        away = mode.startswith("nearest") or mode == ("downward" if neg else "upward")
        if away and not fmt.saturate and not fmt.has_inf and fmt.has_nan:
            return math.nan                                       # fn: overflow is NaN
        if away and not fmt.saturate and fmt.has_inf:
            out = math.inf
        else:
            out = top
    else:
        out = float(r)
    return -out if neg else out


def _sign(x) -> bool:
    return x < 0 or (isinstance(x, float) and math.copysign(1.0, x) < 0)


def _mul(x, y):
    """The exact x * y of floats: a Fraction, or IEEE's NaN, infinity or signed zero."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    neg = _sign(x) != _sign(y)
    if math.isinf(x) or math.isinf(y):
        return math.nan if x == 0 or y == 0 else (-math.inf if neg else math.inf)
    r = Fraction(x) * Fraction(y)
    return r if r != 0 else (-0.0 if neg else 0.0)


def _add(x, y, mode):
    """The exact x + y (floats or Fractions): IEEE 754-2019 6.3 gives an exact zero's sign
    (like zeros keep theirs; otherwise -0 under downward rounding, +0 in every other mode)."""
    if any(isinstance(v, float) and math.isnan(v) for v in (x, y)):
        return math.nan
    infs = {v for v in (x, y) if isinstance(v, float) and math.isinf(v)}
    if infs:
        return math.nan if len(infs) == 2 else infs.pop()
    s = Fraction(x) + Fraction(y)
    if s != 0:
        return s
    if x == 0 and y == 0 and _sign(x) == _sign(y):
        return -0.0 if _sign(x) else 0.0
    return -0.0 if mode == "downward" else 0.0


def _step(fmt, mode):
    return lambda run, v: _rnd(_add(run, v, mode), fmt, mode)


def fixed_point_oracle(x, y, policy, mode):
    """Policy.fixed_point: the running sum from +0; per block of ``block`` exact products,
    the terms (running sum, products) truncated toward zero to multiples of
    2**max(e - bits, -1074), e = floor(log2) of the largest |term|, summed exactly (an exact
    zero is +0: a sum of integer multiples, not IEEE's signed zero rule), rounded once into
    the accumulator; a block with an inf or NaN term gives IEEE's sum of its terms."""
    total = 0.0
    for i in range(0, len(x), policy.block):
        terms = [total] + [_mul(u, v) for u, v in zip(x[i:i + policy.block],
                                                     y[i:i + policy.block])]
        specials = [t for t in terms if isinstance(t, float) and not math.isfinite(t)]
        if specials:
            s = math.nan if any(math.isnan(t) for t in specials) or \
                len(set(specials)) == 2 else specials[0]
        else:
            exact = [Fraction(t) for t in terms]
            top = max(abs(t) for t in exact)
            s = Fraction(0)
            if top:
                q = Fraction(2) ** max(_floor_log2(top) - policy.fixed_point, -1074)
                s = sum((abs(t) // q) * q * (-1 if t < 0 else 1) for t in exact)
            s = s if s else 0.0
        total = _rnd(s, policy.accumulate, mode)
    return _rnd(total, policy.storage, mode)


def promote_oracle(x, y, policy, mode):
    """Policy.promote: operands rounded into the narrow format; runs of ``promote`` products,
    each rounded there and added in order (fused: one fma per product after the first);
    each run's sum rounded into the accumulator and added to the total there (+0 for no
    products)."""
    inner, acc = policy.inner, policy.accumulate
    x, y = [_rnd(v, inner, mode) for v in x], [_rnd(v, inner, mode) for v in y]
    total = None
    for i in range(0, len(x), policy.promote):
        run = None
        for u, v in zip(x[i:i + policy.promote], y[i:i + policy.promote]):
            if run is None:
                run = _rnd(_mul(u, v), inner, mode)
            elif policy.fma:
                run = _rnd(_add(_mul(u, v), run, mode), inner, mode)
            else:
                run = _rnd(_add(run, _rnd(_mul(u, v), inner, mode), mode), inner, mode)
        run = _rnd(run, acc, mode)
        total = run if total is None else _step(acc, mode)(total, run)
    return _rnd(0.0 if total is None else total, policy.storage, mode)


def split_oracle(x, y, policy, chunks, mode):
    """split:S: operands rounded into the accumulator; chunks of ceil(k/S) products, each
    summed in order from its first rounded product (fused: fma steps), then the chunk sums
    in order."""
    acc = policy.accumulate
    x, y = [_rnd(v, acc, mode) for v in x], [_rnd(v, acc, mode) for v in y]
    size = -(-len(x) // chunks)
    sums = []
    for i in range(0, len(x), size):
        run = None
        for u, v in zip(x[i:i + size], y[i:i + size]):
            if run is None:
                run = _rnd(_mul(u, v), acc, mode)
            elif policy.fma:
                run = _rnd(_add(_mul(u, v), run, mode), acc, mode)
            else:
                run = _step(acc, mode)(run, _rnd(_mul(u, v), acc, mode))
        sums.append(run)
    total = sums[0]
    for s in sums[1:]:
        total = _step(acc, mode)(total, s)
    return _rnd(total, policy.storage, mode)


def scan_oracle(row, op, policy, mode, reverse):
    """cumsum / cumprod: the values rounded into the accumulator, the running value combined
    there with one rounding per step (from the end when ``reverse``), each prefix rounded
    once into storage."""
    acc = policy.accumulate
    w = [_rnd(v, acc, mode) for v in row]
    out, run = [None] * len(w), None
    for i in (reversed(range(len(w))) if reverse else range(len(w))):
        if run is None:
            run = w[i]
        else:
            exact = _add(run, w[i], mode) if op == "add" else _mul(run, w[i])
            run = _rnd(exact, acc, mode)
        out[i] = _rnd(run, policy.storage, mode)
    return out


def matmul_oracle(a, b, one):
    """a @ b (numpy's broadcast batch axes), each output ``one(row, column)``."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(*out.shape):
        out[idx] = one([float(v) for v in a[idx[:-1]]],
                       [float(v) for v in b[idx[:-2] + (slice(None), idx[-1])]])
    return out


def _same(got, want):
    """Bit for bit (both write NaN as the canonical quiet NaN)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return got.shape == want.shape and np.array_equal(got.view(np.int64), want.view(np.int64))


def _values(fmt, shape, rng, spread=6, specials=0.0):
    """Format values of both signs over 2**-spread ... 2**spread times a normal draw; a
    fraction ``specials`` of them replaced by 0, -0, inf, -inf or NaN as the format has them."""
    fmt = formats.get(fmt)
    x = rng.standard_normal(shape) * np.exp2(rng.uniform(-spread, spread, shape))
    pick = rng.random(shape) < specials
    x[pick] = rng.choice([0.0, -0.0, math.inf, -math.inf, math.nan], pick.sum())
    return formats.round_to(x, fmt)


# ----- the oracle's rounding against formats' exact path --------------------------------------
@pytest.mark.parametrize("name", STORAGE + ("binary32", "e8m13", "e5m4-sat",
                                            "float8_e4m3fnuz"))
def test_oracle_rounding_agrees_with_round_exact(name):
    # Random rationals over the whole range (subnormals, overflow), exact ties, format
    # values and the special floats: two independent roundings must agree.
    fmt = formats.get(name)
    rng = np.random.default_rng(len(name))
    vals = [math.inf, -math.inf, math.nan, 0.0, -0.0, fmt.max_finite, fmt.min_subnormal]
    for _ in range(300):
        e = int(rng.integers(fmt.qmin - 3, fmt.emax + 3))
        v = Fraction(int(rng.integers(1, 1 << 30)), 1 << 29) * Fraction(2) ** e
        vals += [v, -v, Fraction(2 * int(rng.integers(1, 1 << fmt.precision)) + 1,
                                 1 << (fmt.precision + 1)) * Fraction(2) ** e]
    for mode in MODES + ("nearest_away", "odd"):
        for v in vals:
            want = formats.round_exact(v, fmt, mode).to_float()
            assert _same(_rnd(v, fmt, mode), want), (v, mode)


# ----- fixed_point ----------------------------------------------------------------------------
def _fixed_point_policies(fmt):
    return {"fixed_point:14": preset("fixed_point:14", fmt),
            "fixed_point:4:4": preset("fixed_point:4:4", fmt),
            "acc-binary16-fixed6-block3": Policy(fmt, accumulate="binary16", fixed_point=6,
                                                 block=3),
            "acc-e5m4-sat-fixed5-block5": Policy(fmt, accumulate="e5m4-sat", fixed_point=5,
                                                 block=5)}


@pytest.mark.parametrize("name", STORAGE + ("binary32",))
def test_fixed_point_matmul_is_its_order_of_exact_roundings(name):
    # Batch axes where only a varies and where only b does (broadcast), k = 11 (not a
    # multiple of the blocks), a few zeros, infinities and NaN among the operands.
    fmt = formats.get(name)
    rng = np.random.default_rng(len(name))
    a = _values(fmt, (2, 1, 3, 11), rng, specials=0.03)
    b = _values(fmt, (2, 11, 4), rng, specials=0.03)
    for label, policy in _fixed_point_policies(fmt).items():
        for mode in MODES:
            got = numerics.emulated(fmt, mode, policy).matmul(a, b)
            want = matmul_oracle(a, b, lambda x, y: fixed_point_oracle(x, y, policy, mode))
            assert _same(got, want), (label, mode)


def test_fixed_point_subnormal_overflowing_non_finite_and_zero_blocks():
    # bfloat16 operands, blocks of 2, binary32 accumulation.  Rows: products below binary32's
    # normal range (subnormal sums); products beyond binary32's max (inf, or max toward
    # zero, then an infinite running sum); an inf against a NaN; a tiny negative first
    # block (-0 under rounding to nearest) then -0 products (an exact zero sum, +0); an
    # exact cancellation; zeros of both signs only.
    fmt = formats.get("bfloat16")
    tiny, big = 2.0 ** -70, 2.0 ** 100
    a = np.array([[tiny, 3 * tiny, -tiny, tiny, 0.0], [big, big, 1.0, -1.0, 1.0],
                  [math.inf, 1.0, 1.0, math.nan, 1.0], [-tiny, 0.0, -0.0, -0.0, -0.0],
                  [1.0, 1.0, 2.0, -2.0, -0.0], [-0.0, -0.0, 0.0, -0.0, -0.0]])
    a[3, 0] = -2.0 ** -80                       # times tiny: -2**-150, half binary32's least
    b = np.array([[tiny, big], [tiny, big], [2 * tiny, -1.0], [tiny, 2.0], [0.0, -0.0]])
    b2 = np.array([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [1.0, -0.0], [-0.0, 1.0]])
    policy = preset("fixed_point:10:2", fmt)
    for mode in MODES:
        bk = numerics.emulated(fmt, mode, policy)
        for right in (b, b2):
            got = bk.matmul(a, right)
            want = matmul_oracle(a, right, lambda x, y: fixed_point_oracle(x, y, policy, mode))
            assert _same(got, want), mode


def test_fixed_point_dot_of_unshared_vectors_and_empty_k():
    # A 1-d dot (no operand value shared between outputs) and k = 0: the empty sum, +0.
    fmt = formats.get("binary16")
    rng = np.random.default_rng(1)
    x, y = _values(fmt, (37,), rng), _values(fmt, (37,), rng)
    for mode in ("nearest_even", "downward"):
        for name in ("fixed_point:8", "promote:5", "split_k:3"):
            bk = numerics.emulated(fmt, mode, name)
            got = bk.dot(x, y)
            if name.startswith("fixed"):
                want = fixed_point_oracle(list(x), list(y), bk.policy, mode)
            elif name.startswith("promote"):
                want = promote_oracle(list(x), list(y), bk.policy, mode)
            else:
                want = split_oracle(list(x), list(y), bk.policy, 3, mode)
            assert _same(got, want), (name, mode)
            assert _same(bk.matmul(np.ones((2, 0)), np.ones((0, 3))), np.zeros((2, 3)))
    for name in ("strict", "fp32_accumulate", "fp32_accumulate_fma", "pairwise"):
        bk = numerics.emulated(fmt, "downward", name)
        assert _same(bk.matmul(np.ones((2, 0)), np.ones((0, 3))), np.zeros((2, 3)))


# ----- promote --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ("bfloat16", "binary16", "float8_e4m3fn"))
def test_promote_matmul_is_its_order_of_exact_roundings(name):
    # Runs of 4 over k = 3, 8 and 11 (shorter than a run, a multiple, a shorter last run),
    # in e8m13 (the default narrow format), in e4m3 (overflowing runs) and fused.
    fmt = formats.get(name)
    rng = np.random.default_rng(len(name) + 1)
    policies = {"promote:4": preset("promote:4", fmt),
                "promote:4:e4m3": preset("promote:4:e4m3", fmt),
                "promote-fma": Policy(fmt, accumulate="binary32", inner="e8m13", promote=4,
                                      fma=True)}
    for k in (3, 8, 11):
        a = _values(fmt, (1, 3, 3, k), rng, specials=0.03)
        b = _values(fmt, (2, 1, k, 2), rng, specials=0.03)
        for label, policy in policies.items():
            for mode in MODES:
                got = numerics.emulated(fmt, mode, policy).matmul(a, b)
                want = matmul_oracle(a, b, lambda x, y: promote_oracle(x, y, policy, mode))
                assert _same(got, want), (k, label, mode)


def test_promote_subnormal_overflowing_and_cancelling_runs():
    fmt = formats.get("bfloat16")
    tiny, big = 2.0 ** -70, 2.0 ** 60
    a = np.array([[tiny, tiny, -tiny, 3 * tiny, tiny], [big, big, big, 1.0, -1.0],
                  [1.0, -1.0, 2.0, -2.0, -0.0], [-0.0, 0.0, -0.0, math.nan, 1.0]])
    b = np.array([[tiny, 1.0], [-tiny, 1.0], [tiny, big], [tiny, 1.0], [tiny, -0.0]])
    for policy in (preset("promote:2", fmt), preset("promote:2:e5m2", fmt),
                   Policy(fmt, accumulate="binary32", inner="e8m13", promote=3, fma=True)):
        for mode in MODES:
            got = numerics.emulated(fmt, mode, policy).matmul(a, b)
            want = matmul_oracle(a, b, lambda x, y: promote_oracle(x, y, policy, mode))
            assert _same(got, want), (policy, mode)


# ----- split_k --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", STORAGE)
def test_split_k_matmul_is_its_order_of_exact_roundings(name):
    # k = 2 (fewer terms than chunks), 10 (chunks of 4, 4, 2) and 12, plain and fused, in
    # binary32 and in a 16-bit accumulator.
    fmt = formats.get(name)
    rng = np.random.default_rng(len(name) + 2)
    policies = {"split_k:3": (preset("split_k:3", fmt), 3),
                "split3-fma": (Policy(fmt, accumulate="binary32", order="split:3", fma=True), 3),
                "acc-bfloat16-split4": (Policy(fmt, accumulate="bfloat16", order="split:4"), 4)}
    for k in (2, 10, 12):
        a = _values(fmt, (2, 1, 3, k), rng, specials=0.03)
        b = _values(fmt, (2, k, 2), rng, specials=0.03)
        for label, (policy, chunks) in policies.items():
            for mode in MODES:
                got = numerics.emulated(fmt, mode, policy).matmul(a, b)
                want = matmul_oracle(a, b,
                                     lambda x, y: split_oracle(x, y, policy, chunks, mode))
                assert _same(got, want), (k, label, mode)


# ----- scans ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", STORAGE + ("binary32",))
def test_cumsum_and_cumprod_are_their_order_of_exact_roundings(name):
    # Along the last axis and along the first (the kernel's two layouts), forward and
    # reversed (the cumsum pullback), in storage, binary32 and binary16 accumulation.
    fmt = formats.get(name)
    rng = np.random.default_rng(len(name) + 3)
    x = _values(fmt, (3, 2, 9), rng, specials=0.04)
    x[0, 0, 3:6] = [1.0, -1.0, -0.0]                          # a prefix cancelling to zero
    near_one = formats.round_to(rng.uniform(0.5, 2.0, (3, 2, 9)) * rng.choice([-1, 1],
                                                                             (3, 2, 9)), fmt)
    near_one[1, 1, 2] = fmt.min_subnormal                      # products that underflow
    for policy in (preset("strict", fmt), preset("fp32_accumulate", fmt),
                   Policy(fmt, accumulate="binary16")):
        for mode in MODES:
            bk = numerics.emulated(fmt, mode, policy)
            for op, data in (("add", x), ("multiply", near_one)):
                for axis in (-1, 0):
                    for reverse in (False, True):
                        got = bk.scan(op, data, axis, reverse)
                        rows = np.moveaxis(data, axis, -1)
                        want = np.empty(rows.shape)
                        for idx in np.ndindex(*rows.shape[:-1]):
                            want[idx] = scan_oracle(list(rows[idx]), op, policy, mode, reverse)
                        assert _same(got, np.moveaxis(want, -1, axis)), \
                            (policy.label, mode, op, axis, reverse)


def test_scan_overflow_signed_zeros_and_empty_axis():
    fmt = formats.get("bfloat16")
    top = fmt.max_finite
    x = np.array([[top, top, -top, 1.0], [-0.0, -0.0, 0.0, -0.0], [1.0, -1.0, -0.0, math.nan],
                  [math.inf, -math.inf, 1.0, 1.0], [fmt.min_subnormal, fmt.min_subnormal,
                                                    -2 * fmt.min_subnormal, -0.0]])
    for policy in ("strict", "fp32_accumulate"):
        for mode in MODES:
            bk = numerics.emulated(fmt, mode, policy)
            for op in ("add", "multiply"):
                want = [scan_oracle(list(r), op, bk.policy, mode, False) for r in x]
                assert _same(bk.scan(op, x), want), (policy, mode, op)
            assert bk.scan("add", np.ones((2, 0))).shape == (2, 0)
    with pytest.raises(ValueError, match="scan op must be add or multiply"):
        numerics.emulated(fmt).scan("maximum", x)


# ----- the compiled path and the generic one: the same bits -----------------------------------
def _generic(monkeypatch):
    """Force the generic path: no numerics.products strategy for anything."""
    monkeypatch.setattr(products, "strategy", lambda *args, **kwargs: None)


HARDWARE = ("fixed_point:14", "fixed_point:6:8", "promote:128", "promote:16:e4m3", "split_k:4")


@pytest.mark.parametrize("mode", ("nearest_even", "upward"))
def test_compiled_and_generic_paths_give_the_same_bits(monkeypatch, mode):
    # Random bfloat16 and binary16 matmuls (k = 300: runs of 128 with a shorter last one,
    # blocks of 8 and 32) and scans; the same computations with numerics.products.strategy
    # answering None (every compiled path off).  Call counts agree too.
    rng = np.random.default_rng(17)
    cases = []
    for name in ("bfloat16", "binary16"):
        a = _values(name, (2, 24, 300), rng, spread=3, specials=0.002)
        b = _values(name, (300, 20), rng, spread=3, specials=0.002)
        x = _values(name, (40, 33), rng, spread=3, specials=0.01)
        cases += [(name, policy, lambda bk, a=a, b=b: (bk.matmul(a, b),)) for policy in HARDWARE]
        cases += [(name, policy, lambda bk, x=x: (bk.scan("add", x, 0),
                                                 bk.scan("add", x, -1, True),
                                                 bk.scan("multiply", x[:, :4] / 4, -1)))
                  for policy in ("strict", "fp32_accumulate", "split_k:4")]
    fast = []
    for name, policy, run in cases:
        bk = numerics.emulated(name, mode, policy)
        fast.append((run(bk), bk.calls, bk.accumulator().calls))
    _generic(monkeypatch)
    for (name, policy, run), (want, calls, acc_calls) in zip(cases, fast):
        bk = numerics.emulated(name, mode, policy)
        got = run(bk)
        assert len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want)), \
            (name, policy)
        assert (bk.calls, bk.accumulator().calls) == (calls, acc_calls), (name, policy)


def test_recording_backend_keeps_the_generic_path_with_the_same_bits(monkeypatch):
    # RecordingBackend overrides _apply (a primitive hook): its accelerator accumulations and
    # strict scans take the generic path, which must give the compiled path's bits.
    rng = np.random.default_rng(5)
    a, b = _values("bfloat16", (6, 70), rng), _values("bfloat16", (70, 5), rng)
    x = _values("bfloat16", (7, 12), rng)
    for policy in ("fixed_point:14:16", "promote:32"):
        want = numerics.emulated("bfloat16", "downward", policy).matmul(a, b)
        assert _same(RecordingBackend("bfloat16", "downward", policy).matmul(a, b), want)
    rec = RecordingBackend("bfloat16", "nearest_even", "strict")
    assert _same(rec.scan("add", x), numerics.emulated("bfloat16").scan("add", x))
    assert rec.trace.count("add") == 11                   # one add per step, all recorded


def test_compiled_paths_are_taken(monkeypatch):
    def generic(*args, **kwargs):
        raise AssertionError("the generic path ran")

    monkeypatch.setattr(Backend, "_hardware_contract", generic)
    monkeypatch.setattr(Backend, "_prefix", generic)
    monkeypatch.setattr(Backend, "_sequential", staticmethod(generic))
    rng = np.random.default_rng(6)
    a, b = _values("bfloat16", (3, 40), rng), _values("bfloat16", (40, 2), rng)
    for mode in ("nearest_even", "toward_zero"):
        for policy in HARDWARE:
            numerics.emulated("bfloat16", mode, policy).matmul(a, b)
        for policy in ("strict", "fp32_accumulate"):
            numerics.emulated("bfloat16", mode, policy).scan("multiply", a, 0, True)

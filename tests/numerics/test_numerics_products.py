"""The emulated backend's compiled products and reductions (numerics/products.py) against
exact rationals: the policy's order written out below (sequential, pairwise level by level,
blocked:K and split:S, fma's chunks) with every step the exact result (fractions.Fraction,
IEEE 754's rules for infinities, NaN and signed zeros) rounded by formats.round_exact.  Every
deterministic mode, 16-, 8-bit, binary32, binary64 and user formats, each preset policy
and custom ones, with subnormal products, overflow and saturation, NaN and signed zeros
among the inputs.  Then where the compiled path is taken and where the generic one is."""

import math
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics import products
from roundoff_coverage.numerics.backend import Backend
from roundoff_coverage.numerics.emulated import EmulatedBackend
from roundoff_coverage.numerics.policy import Policy, block_size, preset
from roundoff_coverage.numerics.recording import RecordingBackend

MODES = [m for m in formats.MODES if m != "stochastic"]
# The catalog's 16- and 8-bit formats, binary32, and user formats from compact specs: a
# saturating one, and one of p = 26 bits (round-to-nearest-even without Figueroa's shortcut).
FORMATS = ["bfloat16", "binary16", "float8_e4m3fn", "float8_e5m2", "binary32", "e5m4-sat",
           "e6m25"]


def _policies(fmt):
    """The presets, plus blocked fma chunks, split-k and pairwise sums in binary32."""
    named = {name: preset(name, fmt) for name in ("strict", "fp32_accumulate",
                                                    "fp32_accumulate_fma", "pairwise",
                                                    "blocked32")}
    named["acc32-blocked5-fma"] = Policy(fmt, accumulate="binary32", order="blocked:5", fma=True)
    named["acc32-split4"] = Policy(fmt, accumulate="binary32", order="split:4")
    named["acc32-pairwise"] = Policy(fmt, accumulate="binary32", order="pairwise")
    return named


# ----- the oracle: exact operations, each rounded once ------------------------------------------
def _exact(op, x, y, z=None, mode="nearest_even"):
    """The exact x*y, x+y or x*y+z of binary64 values: a Fraction, or a float where IEEE 754
    defines the result by rule: NaN (a NaN operand, 0*inf, inf-inf), an infinity, or a
    zero whose sign 6.3 gives (a product's: the operands' signs; an exact zero sum: the
    common sign of two like zeros, else -0 under downward rounding and +0 otherwise)."""
    if op == "fma":
        return _exact("add", _exact("multiply", x, y), z, mode=mode)
    if any(isinstance(v, float) and math.isnan(v) for v in (x, y)):
        return math.nan
    if op == "multiply":
        sign = -1.0 if (math.copysign(1, x) < 0) != (math.copysign(1, y) < 0) else 1.0
        if math.isinf(x) or math.isinf(y):
            return math.nan if x == 0 or y == 0 else math.copysign(math.inf, sign)
        p = Fraction(x) * Fraction(y)
        return p if p != 0 else math.copysign(0.0, sign)
    if math.isinf(x) or math.isinf(y):
        if math.isinf(x) and math.isinf(y) and x != y:
            return math.nan
        return x if math.isinf(x) else y
    s = Fraction(x) + Fraction(y)
    if s != 0:
        return s
    sx, sy = (math.copysign(1, float(v)) for v in (x, y))
    if x == 0 and y == 0 and sx == sy:
        return math.copysign(0.0, sx)
    return -0.0 if mode == "downward" else 0.0


def _round(v, fmt, mode):
    return formats.round_exact(v, fmt, mode).to_float()


def _step(op, fmt, mode):
    return lambda a, b: _round(_exact(op, a, b, mode=mode), fmt, mode)


def _fold(values, f, order):
    """Backend._fold's order, written out: pairwise pairs (0,1), (2,3), ... level by level,
    an odd last element moving up unchanged; blocked:K folds blocks of K sequentially, then
    the block results (split:S: blocks of ceil(n/S)); sequential folds from the first value."""
    values = list(values)
    if order == "pairwise":
        while len(values) > 1:
            paired = [f(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
            values = paired + values[len(values) - 1:] if len(values) % 2 else paired
        return values[0]
    k = block_size(order, len(values))
    if k is not None and len(values) > k:
        values = [_fold(values[i:i + k], f, "sequential") for i in range(0, len(values), k)]
    acc = values[0]
    for v in values[1:]:
        acc = f(acc, v)
    return acc


def _dot(a, b, policy, mode):
    """One output of dot/matmul under ``policy``: operands rounded into the accumulator,
    products and sums (or fma chunks) there, the result rounded into storage."""
    acc = policy.accumulate
    a = [_round(v, acc, mode) for v in a]
    b = [_round(v, acc, mode) for v in b]
    add = _step("add", acc, mode)
    if policy.fma:
        k = block_size(policy.order, len(a)) or len(a)
        chunks = []
        for i in range(0, len(a), k):
            run = _round(_exact("multiply", a[i], b[i]), acc, mode)
            for j in range(i + 1, min(i + k, len(a))):
                run = _round(_exact("fma", a[j], b[j], run, mode=mode), acc, mode)
            chunks.append(run)
        total = _fold(chunks, add, "sequential")
    else:
        terms = [_round(_exact("multiply", x, y), acc, mode) for x, y in zip(a, b)]
        total = _fold(terms, add, policy.order)
    return _round(total, policy.storage, mode)


def _same(got, want):
    """Bit for bit (both write NaN as the canonical quiet NaN)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return got.shape == want.shape and np.array_equal(got.view(np.int64), want.view(np.int64))


def _values(fmt, shape, rng, specials=True):
    """Format values of both signs over 2**-6 ... 2**6 times a normal draw (sums cancel,
    float8 products overflow); with ``specials``, the first six entries (of the first row)
    are 0, -0, the smallest subnormal, max_finite, inf and NaN, as the format holds them."""
    x = formats.round_to(rng.standard_normal(shape) * np.exp2(rng.uniform(-6, 6, shape)), fmt)
    if specials:
        x.reshape(-1)[:6] = formats.round_to(np.array([0.0, -0.0, fmt.min_subnormal,
                                                       fmt.max_finite, math.inf, math.nan]), fmt)
    return x


# ----- matmul and dot against the oracle ---------------------------------------------------------
@pytest.mark.parametrize("name", FORMATS)
def test_matmul_is_the_policy_order_of_exact_roundings(name):
    fmt = formats.get(name)
    rng = np.random.default_rng(len(name))
    for label, policy in _policies(fmt).items():
        # Specials in row 0 of a only: the kernels compute a row of outputs at a time, and
        # rows 1 and 2 stay on the in-range shortcut.
        specials = label in ("strict", "fp32_accumulate_fma", "acc32-pairwise")
        a, b = _values(fmt, (3, 37), rng, specials), _values(fmt, (2, 37), rng, False).T
        for mode in MODES:
            got = numerics.emulated(fmt, mode, policy).matmul(a, b)
            want = [[_dot(a[i], b[:, j], policy, mode) for j in range(2)] for i in range(3)]
            assert _same(got, want), (label, mode)


def test_binary64_accumulation_is_float64_arithmetic():
    fmt = formats.get("binary64")
    rng = np.random.default_rng(7)
    a, b = _values(fmt, (2, 19), rng), _values(fmt, (3, 19), rng).T
    for order in ("sequential", "pairwise"):
        policy = Policy(fmt, order=order)
        got = numerics.emulated(fmt, "nearest_even", policy).matmul(a, b)
        want = [[_dot(a[i], b[:, j], policy, "nearest_even") for j in range(3)]
                for i in range(2)]
        assert _same(got, want), order


def test_subnormal_overflowing_nan_and_zero_products_in_bfloat16():
    # Rows: products below 2**-126 (bfloat16 subnormals); products beyond max (inf, or max
    # toward zero); a NaN; zeros of both signs; terms that cancel exactly (-0 under
    # downward rounding, IEEE 754-2019 6.3).  One row per matmul: the kernels compute a row
    # of outputs at a time, and a row with one such result is computed again in full.
    fmt = formats.get("bfloat16")
    tiny, big = 2.0 ** -70, 2.0 ** 100
    a = np.array([[tiny, tiny * 1.5, -tiny], [big, big, 1.0], [math.nan, 1.0, 2.0],
                  [0.0, -0.0, 3.0], [-0.0, -0.0, 0.0], [1.0, 1.0, 0.0], [-0.0, 1.0, 1.0]])
    rights = [np.array([[tiny * 3, tiny], [tiny, tiny * 2], [tiny * 2, -tiny]]),
              np.array([[big, -big], [big * 1.5, big], [-1.0, 1.0]]),
              np.array([[2.0, -0.0], [-2.0, -1.0], [0.0, 1.0]])]
    for mode in MODES:
        for label, policy in _policies(fmt).items():
            bk = numerics.emulated(fmt, mode, policy)
            for row, right in ((r, m) for r in range(a.shape[0]) for m in rights):
                got = bk.matmul(a[row:row + 1], right)
                want = [[_dot(a[row], right[:, j], policy, mode) for j in range(2)]]
                assert _same(got, want), (mode, label, row)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "float8_e4m3fnuz"])
def test_products_and_sums_beyond_float32_range(name):
    # The narrow32 strategy computes in float32: products of bfloat16 values below 2**-150
    # underflow to a float32 zero (a zero of the product's sign, which is also the exact
    # product rounded to nearest); sums near bfloat16's max overflow float32 (the block is
    # computed again); products just below float32's normal range are float32 subnormals.
    fmt = formats.get(name)
    lo, hi = (2.0 ** -100, 1.5 * 2.0 ** 126) if name == "bfloat16" else \
        (fmt.min_subnormal, fmt.max_finite * 0.75)
    rows = formats.round_to(np.array([[lo, -lo, lo * 3, 1.0], [hi, hi, -hi, 1.0],
                                      [2.0 ** -75, 2.0 ** -74, 1.0, 0.0]]), fmt)
    right = formats.round_to(np.array([[lo, -lo], [lo, lo], [-lo, 2.0], [0.0, 1.0]]), fmt)
    big = formats.round_to(np.array([[1.0, 1.0], [1.0, 1.5], [0.5, -1.0], [1.0, 1.0]]), fmt)
    for mode in MODES:
        for label, policy in _policies(fmt).items():
            bk = numerics.emulated(fmt, mode, policy)
            for r in range(rows.shape[0]):
                for m in (right, big):
                    got = bk.matmul(rows[r:r + 1], m)
                    want = [[_dot(rows[r], m[:, j], policy, mode) for j in range(2)]]
                    assert _same(got, want), (mode, label, r)


def test_saturation_and_fnuz_zeros_in_float8():
    # e4m3fn: overflow is NaN (no inf); e4m3fnuz: no -0, a -0 product becomes +0; e5m4-sat:
    # overflow gives max_finite.
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "e5m4-sat"):
        fmt = formats.get(name)
        top = fmt.max_finite
        a = formats.round_to(np.array([[top, top, 1.0], [-0.0 if fmt.has_negative_zero else 0.0,
                                                           1.0, -1.0]]), fmt)
        b = formats.round_to(np.array([[2.0], [1.0], [-0.0 if fmt.has_negative_zero else 0.0]]),
                             fmt)
        for mode in MODES:
            policy = preset("strict", fmt)
            got = numerics.emulated(fmt, mode, policy).matmul(a, b)
            want = [[_dot(a[i], b[:, 0], policy, mode)] for i in range(2)]
            assert _same(got, want), (name, mode)


def test_broadcast_dot_products_like_a_convolution():
    # Backend.dot over broadcast operands (conv's gather_dot: batch, output channels,
    # windows): each output is its own dot product, whichever axes share operands.
    fmt = formats.get("bfloat16")
    rng = np.random.default_rng(3)
    p = _values(fmt, (2, 1, 1, 5, 11), rng)           # (N, G, 1, windows, C*K)
    w = _values(fmt, (1, 1, 3, 1, 11), rng)           # (1, G, C_out, 1, C*K)
    for mode in ("nearest_even", "downward"):
        for label in ("strict", "fp32_accumulate", "fp32_accumulate_fma"):
            policy = preset(label, fmt)
            got = numerics.emulated(fmt, mode, policy).dot(p, w)
            pb, wb = np.broadcast_arrays(p, w)
            want = np.empty(pb.shape[:-1])
            for idx in np.ndindex(*want.shape):
                want[idx] = _dot(pb[idx], wb[idx], policy, mode)
            assert _same(got, want), (mode, label)


def test_batched_matmul_with_broadcast_batches():
    # Batch axes where both operands vary, where one is broadcast, and a matrix-vector
    # product (a single output column: the kernels then run along the rows).
    fmt = formats.get("binary16")
    rng = np.random.default_rng(9)
    a, b = _values(fmt, (2, 3, 9), rng), _values(fmt, (2, 9, 4), rng, False)
    c, v = _values(fmt, (1, 9, 4), rng, False), _values(fmt, (9,), rng, False)
    for mode in ("nearest_even", "upward"):
        for label in ("strict", "fp32_accumulate_fma"):
            policy = preset(label, fmt)
            bk = numerics.emulated(fmt, mode, policy)
            for left, right in ((a, b), (a, c), (a, v)):
                got = bk.matmul(left, right)
                r = right if right.ndim > 1 else right[:, None]
                rb = np.broadcast_to(r, left.shape[:-2] + r.shape[-2:])
                want = np.empty(left.shape[:-1] + rb.shape[-1:])
                for idx in np.ndindex(*want.shape):
                    want[idx] = _dot(left[idx[:-1]], rb[idx[:-2] + (slice(None), idx[-1])],
                                     policy, mode)
                assert _same(got, want if right.ndim > 1 else want[..., 0]), (mode, label)


# ----- sums and products (folds) -----------------------------------------------------------------
@pytest.mark.parametrize("order", ["sequential", "pairwise", "blocked:4", "split:3"])
def test_sums_and_products_follow_the_order_for_every_length(order):
    fmt = formats.get("bfloat16")
    rng = np.random.default_rng(11)
    for n in list(range(1, 18)) + [31, 32, 33]:
        x = _values(fmt, (3, n), rng, specials=n > 8)
        x[1, n // 2:2 * (n // 2)] = -x[1, :n // 2]             # exact cancellation
        for mode in ("nearest_even", "toward_zero", "downward", "odd"):
            for acc in ("bfloat16", "binary32"):
                bk = numerics.emulated(fmt, mode, Policy(fmt, accumulate=acc, order=order))
                for op, reduce in (("add", bk.sum), ("multiply", bk.prod)):
                    if op == "multiply" and n > 6:
                        continue                      # long products only overflow
                    step = _step(op, formats.get(acc), mode)
                    want = [_round(_fold([_round(v, acc, mode) for v in row], step, order),
                                   fmt, mode) for row in x]
                    assert _same(reduce(x, axis=-1), want), (n, mode, acc, op)


def test_split_k_folds_in_the_kernels():
    # split:S (ceil(n/S) terms per chunk) through products.fold itself, whichever path the
    # backend dispatches it to.
    fmt = formats.get("bfloat16")
    rng = np.random.default_rng(13)
    for n in (1, 5, 7, 12, 40):
        x = _values(fmt, (4, n), rng, specials=n > 8)
        for mode in ("nearest_even", "upward"):
            for op in ("add", "multiply"):
                terms = x[:, :5] if op == "multiply" else x
                want = [_fold(list(row), _step(op, fmt, mode), "split:3") for row in terms]
                got = products.fold(terms, op, fmt, mode, "split:3",
                                    products.strategy(fmt, mode, False))
                assert _same(got, want), (n, mode, op)


def test_sum_over_leading_axes_in_every_mode():
    fmt = formats.get("binary16")
    rng = np.random.default_rng(5)
    x = _values(fmt, (4, 3, 6), rng)
    for mode in MODES:
        bk = numerics.emulated(fmt, mode, "fp32_accumulate")
        step = _step("add", formats.get("binary32"), mode)
        rows = np.transpose(x, (1, 0, 2)).reshape(3, -1)    # Backend._reduce: kept axis first
        want = [_round(_fold(list(r), step, "sequential"), fmt, mode) for r in rows]
        assert _same(bk.sum(x, axis=(0, 2)), want), mode


# ----- where the compiled path runs, and where the generic one does ----------------------------
def test_narrow_formats_take_float32_arithmetic():
    # bfloat16, binary16 and float8 under round-to-nearest-even without fma: narrow32;
    # other modes, fma, wider formats and formats beyond binary32's range: not.
    assert products.strategy("bfloat16", "nearest_even", False) == "narrow32"
    assert products.strategy("binary16", "nearest_even", False) == "narrow32"
    assert products.strategy("float8_e4m3fn", "nearest_even", False) == "narrow32"
    assert products.strategy("bfloat16", "upward", False) == "odd"
    assert products.strategy("bfloat16", "nearest_even", True) == "odd"
    assert products.strategy("e6m25", "nearest_even", False) == "odd"
    assert products.strategy("e9m7", "nearest_even", False) == "odd"


def test_fast_path_is_taken_for_bfloat16_matmul_under_fp32_accumulate(monkeypatch):
    def generic(*args, **kwargs):
        raise AssertionError("the generic path ran")

    monkeypatch.setattr(Backend, "_sequential", staticmethod(generic))
    monkeypatch.setattr(EmulatedBackend, "_apply", generic)
    fmt = formats.get("bfloat16")
    rng = np.random.default_rng(2)
    a, b = _values(fmt, (4, 40), rng, False), _values(fmt, (40, 3), rng, False)
    bk = numerics.emulated(fmt, "nearest_even", "fp32_accumulate")
    assert products.strategy("binary32", "nearest_even", False) == "native32"
    policy = preset("fp32_accumulate", fmt)
    want = [[_dot(a[i], b[:, j], policy, "nearest_even") for j in range(3)] for i in range(4)]
    assert _same(bk.matmul(a, b), want)


def test_primitive_call_counts_match_the_generic_path():
    # EmulatedBackend.calls numbers the primitive calls (stochastic rounding's seeds): the
    # compiled path advances it as the primitives it replaces would have.
    fmt = formats.get("bfloat16")
    rng = np.random.default_rng(4)
    a, b = _values(fmt, (2, 3, 45), rng, False), _values(fmt, (45, 4), rng, False)
    for label in ("strict", "fp32_accumulate", "fp32_accumulate_fma", "pairwise", "blocked32"):
        fast, generic = numerics.emulated(fmt, policy=label), RecordingBackend(fmt, policy=label)
        for bk in (fast, generic):
            bk.matmul(a, b), bk.sum(a, axis=-1), bk.prod(a[..., :4], axis=(0, 2)), bk.dot(a, a)
        assert fast.calls == generic.calls, label
        assert (fast._acc is None) == (generic._acc is None)
        assert fast._acc is None or fast._acc.calls == generic._acc.calls, label


def test_generic_path_where_no_strategy_applies():
    # Stochastic rounding, formats wider than binary64, binary64's directed modes and fma:
    # no strategy.  A subclass watching primitive calls still sees every add; flag
    # tracking still collects the accumulator's overflow.
    assert products.strategy("bfloat16", "stochastic", False) is None
    assert products.strategy("binary128", "nearest_even", False) is None
    assert products.strategy("binary64", "upward", False) is None
    assert products.strategy("binary64", "nearest_even", True) is None
    assert products.strategy("bfloat16", "upward", True) == "odd"
    rec = RecordingBackend("bfloat16", "nearest_even", "strict")
    rec.sum(np.ones((2, 5)), axis=-1)
    assert rec.trace.count("add") == 4
    bk = numerics.emulated("bfloat16", "nearest_even", "strict").track_flags()
    top = formats.get("bfloat16").max_finite
    assert np.isinf(bk.sum(np.array([top, top]))) and bk.raised() & formats.OVERFLOW
    wide = numerics.emulated("binary128", "nearest_even")
    assert float(wide.sum(wide.asarray([1.0, 2.0 ** -100]))) == 1.0


def test_two_level_accumulation_runs_compiled_in_its_own_order(monkeypatch):
    # Policy.hardware (two-level promotion) is Backend._contract's own accumulation, not a
    # fold in the policy's order: numerics.products computes it (runs, then a fold of the
    # run sums), and the generic loop must not run.
    def generic(*args, **kwargs):
        raise AssertionError("the generic path ran")

    monkeypatch.setattr(Backend, "_hardware_contract", generic)
    fmt = formats.get("bfloat16")
    rng = np.random.default_rng(8)
    a, b = _values(fmt, (2, 9), rng, False), _values(fmt, (3, 9), rng, False).T
    policy = Policy(fmt, accumulate="binary32", inner="e8m13", promote=4)
    acc, inner = formats.get("binary32"), formats.get("e8m13")
    got = numerics.emulated(fmt, "toward_zero", policy).matmul(a, b)
    for i, j in np.ndindex(2, 3):
        # Runs of 4 products summed in e8m13, each run rounded into binary32 and added there.
        x = [_round(v, inner, "toward_zero") for v in a[i]]
        y = [_round(v, inner, "toward_zero") for v in b[:, j]]
        runs = []
        for s0 in range(0, 9, 4):
            terms = [_round(_exact("multiply", u, v), inner, "toward_zero")
                     for u, v in zip(x[s0:s0 + 4], y[s0:s0 + 4])]
            runs.append(_round(_fold(terms, _step("add", inner, "toward_zero"), "sequential"),
                               acc, "toward_zero"))
        want = _round(_fold(runs, _step("add", acc, "toward_zero"), "sequential"), fmt,
                      "toward_zero")
        assert _same(got[i, j], want), (i, j)


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^products.fold: op must be add or multiply "
                                         r"\(got 'maximum'\)$"):
        products.fold(np.ones((2, 3)), "maximum", "bfloat16", "nearest_even", "sequential",
                      "odd")
    with pytest.raises(ValueError, match="rounding mode must be one of"):
        products.strategy("bfloat16", "nearest", False)

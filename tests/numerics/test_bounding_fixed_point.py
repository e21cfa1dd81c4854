"""numerics.bounding under the fixed_point policies (numerics.policy.Policy.fixed_point): the
per-sample enclosures of matmul, linear and dot hold, and a worse accumulation leaves them.

Oracles independent of the module: the exact value as a sum of exact rationals; the model's
value written out with rationals (conftest.fixed_point_dot: blocks of products with the
running sum, aligned to the largest exponent, truncated toward zero, summed exactly, rounded
into binary32, then into storage: Fasi, Higham, Mikaitis, Pranesh 2021; the DeepSeek-V3
report, 2024) and numerics.emulated's value.  On every element with a bound: both computed
values lie in C, the exact value in E.  Deliberately worse implementations (three fraction
bits fewer; the strict policy's storage-format running sums) land outside the bound.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.engine import evaluate, runner
from conftest import fixed_point_dot

POLICIES = ["fixed_point:14", "fixed_point:10:32", "fixed_point:23"]
FORMATS = ["bfloat16", "float8_e4m3fn"]
KINDS = ["random", "cancelling", "wide"]
M, K, N = 3, 64, 4            # two blocks of 32 products per dot product


def _fr(v) -> Fraction:
    return Fraction(float(v))


def _rnd(v: Fraction, fmt, mode) -> Fraction | None:
    """v rounded once into fmt; None where the format gives inf or NaN."""
    return formats.round_exact(v, fmt, mode).to_fraction()


def _policy(name):
    head, *args = name.split(":")
    return int(args[0]), int(args[1]) if len(args) == 2 else 32


def _operands(kind, fmt, bits, rng):
    """x (M, K), y (K, N), bias (N,) of ``kind``: normal values; cancelling (per block of 32,
    16 * 16 first and 16 * -16 last, between them products in [2**(9 - bits),
    2**(11 - bits)): 2 to 8 quanta of the block's alignment, below the quantum of bits - 3);
    or a wide range of magnitudes of both signs with zeros."""
    if kind == "random":
        x, y, b = rng.normal(size=(M, K)), rng.normal(size=(K, N)), rng.normal(size=N)
    elif kind == "wide":
        spread = 12 if fmt == "bfloat16" else 3
        x, y, b = (rng.choice([-1.0, 1.0], s) * 2.0 ** rng.uniform(-spread, spread, s)
                   for s in ((M, K), (K, N), (N,)))
        x[rng.random((M, K)) < 0.1] = 0.0
    else:
        lo = (9 - bits) // 2
        x = 2.0 ** lo * rng.uniform(1, 2, (M, K))
        y = 2.0 ** (9 - bits - lo) * rng.uniform(1, 2, (K, N))
        x[:, 0::32] = x[:, 31::32] = 16.0
        y[0::32], y[31::32] = 16.0, -16.0
        b = np.zeros(N)
    return tuple(formats.round_to(v, fmt) for v in (x, y, b))


def _evaluate(op, bk, x, y, b):
    """The op on the bounding or emulated backend ``bk``: matmul x @ y, linear x @ y + b
    (through the operators' rules), dot of the rows of x with the columns of y."""
    if op == "matmul":
        return routes.op("matmul", x_shape=(M, K), y_shape=(K, N)).rule(bk).forward([x, y])[0]
    if op == "linear":
        o = routes.op("linear", batch=(M,), in_features=K, out_features=N)
        return o.rule(bk).forward([y.T.copy(), b, x])[0]
    return bk.dot(x[:, None, :], y.T[None, :, :])


def _check(bk, y, computed, exact, model=None):
    """(available, failures): every element with a finite bound has the computed values in
    C and the exact one in E."""
    clo, chi, elo, ehi = bk.split(y)
    ok = np.isfinite(bk.error_bound(y))
    failures = []
    for i in zip(*np.nonzero(ok)):
        if not clo[i] <= computed[i] <= chi[i]:
            failures.append(("computed outside C", i, clo[i], computed[i], chi[i]))
        if model is not None and model[i] is not None and \
                not _fr(clo[i]) <= model[i] <= _fr(chi[i]):
            failures.append(("model outside C", i, clo[i], model[i], chi[i]))
        if not _fr(elo[i]) <= exact[i] <= _fr(ehi[i]):
            failures.append(("exact outside E", i, elo[i], exact[i], ehi[i]))
    return int(ok.sum()), failures


def _exact(op, x, y, b):
    out = np.empty((M, N), dtype=object)
    for r in range(M):
        for c in range(N):
            out[r, c] = sum(_fr(u) * _fr(v) for u, v in zip(x[r], y[:, c])) + \
                (_fr(b[c]) if op == "linear" else 0)
    return out


def _model(op, x, y, b, fmt, policy, mode):
    bits, block = _policy(policy)
    out = np.empty((M, N), dtype=object)
    for r in range(M):
        for c in range(N):
            s = fixed_point_dot(x[r], y[:, c], bits, block, mode=mode)
            s = None if s is None else _rnd(s, fmt, mode)
            if s is not None and op == "linear":
                s = _rnd(s + _fr(b[c]), fmt, mode)
            out[r, c] = s
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("op", ["matmul", "linear", "dot"])
def test_enclosures_hold_the_model_the_emulated_and_the_exact_value(op, fmt, policy, kind):
    x, y, b = _operands(kind, fmt, _policy(policy)[0], np.random.default_rng([K, len(kind)]))
    bk = numerics.bounding(fmt, "nearest_even", policy)
    got = _evaluate(op, bk, x, y, b)
    computed = _evaluate(op, numerics.emulated(fmt, "nearest_even", policy), x, y, b)
    available, failures = _check(bk, got, computed, _exact(op, x, y, b),
                                 _model(op, x, y, b, fmt, policy, "nearest_even"))
    assert not failures, failures[:3]
    assert available >= (M * N if fmt == "bfloat16" or kind != "wide" else M * N // 2)


@pytest.mark.parametrize("mode", ["toward_zero", "upward", "stochastic"])
@pytest.mark.parametrize("policy", ["fixed_point:14", "fixed_point:6:8"])
def test_a_second_matmul_stays_enclosed_in_every_mode(policy, mode):
    # (x @ y) @ w in directed modes, and under stochastic rounding, where the first product's
    # enclosure is an interval (either neighbour) and so are the second matmul's operands.
    rng = np.random.default_rng(11)
    x, y, w = (formats.round_to(rng.normal(size=s), "bfloat16")
               for s in ((M, K), (K, K), (K, N)))
    bk = numerics.bounding("bfloat16", mode, policy)
    first = bk.matmul(x, y)
    assert (first["clo"] < first["chi"]).any() == (mode == "stochastic")
    got = bk.matmul(first, w)
    clo, chi, elo, ehi = bk.split(got)
    assert np.isfinite(bk.error_bound(got)).all()
    for seed in range(4):
        em = numerics.emulated("bfloat16", mode, policy, seed=seed)
        computed = em.matmul(em.matmul(x, y), w)
        assert ((clo <= computed) & (computed <= chi)).all(), (seed, clo, computed, chi)
    exact_first = [[sum(_fr(a) * _fr(v) for a, v in zip(x[r], y[:, j])) for j in range(K)]
                   for r in range(M)]
    for r in range(M):
        for c in range(N):
            exact = sum(u * _fr(v) for u, v in zip(exact_first[r], w[:, c]))
            assert _fr(elo[r, c]) <= exact <= _fr(ehi[r, c]), (r, c)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_point_of_interval_operands_lands_in_the_enclosure(policy):
    # Operand enclosures that straddle zero and span binades, so that the block's exponent
    # is uncertain (the quantum between qmin and Q of numerics.bounding._aligned_block):
    # the model on points drawn inside them, endpoints included, stays in C.
    bits, block = _policy(policy)
    rng = np.random.default_rng(bits)
    fmt = "bfloat16"
    shape = (6, K)
    a, b = (formats.round_to(rng.normal(size=shape) * 2.0 ** rng.integers(-6, 6, shape), fmt)
            for _ in range(2))
    width = np.abs(rng.normal(size=shape)) * 2.0 ** rng.integers(-8, 4, shape)
    lo = formats.round_to(a - width, fmt, "downward")
    hi = formats.round_to(a + width, fmt, "upward")
    pack = numerics.BoundingBackend.pack
    bk = numerics.bounding(fmt, "nearest_even", policy)
    got = bk.dot(pack(lo, hi, lo, hi), pack(b, b, b, b))
    clo, chi, _, _ = bk.split(got)
    assert np.isfinite(clo).all() and np.isfinite(chi).all()
    for trial in range(6):
        pick = rng.integers(0, 3, shape)
        mid = formats.round_to(rng.uniform(lo, hi), fmt)
        mid = np.clip(mid, lo, hi)
        x = np.where(pick == 0, lo, np.where(pick == 1, hi, mid))
        for r in range(shape[0]):
            s = _rnd(fixed_point_dot(x[r], b[r], bits, block), fmt, "nearest_even")
            assert _fr(clo[r]) <= s <= _fr(chi[r]), (trial, r, clo[r], s, chi[r])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_uncertain_block_exponent_bounds_each_end_with_the_right_quantum(sign):
    # Largest term in [1 - 2**-9, 1]: the block's exponent is 0 (q = 2**-6, the seven terms
    # 1.5 * 2**-7 truncate to 0) or -1 (q = 2**-7: each keeps 2**-7, the largest 1 - 2**-7).
    # The enclosure needs the coarse quantum at one end and the fine one at the other: 1 and
    # 1 + 6 * 2**-7 are both computable.
    pol = numerics.Policy("bfloat16", accumulate="binary32", fixed_point=6, block=8)
    bk = numerics.bounding("bfloat16", "nearest_even", pol)
    lo = sign * np.array([1 - 2.0 ** -9] + [1.5 * 2.0 ** -7] * 7)
    hi = sign * np.array([1.0] + [1.5 * 2.0 ** -7] * 7)
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    pack = numerics.BoundingBackend.pack
    clo, chi, _, _ = bk.split(bk.dot(pack(lo, hi, lo, hi), pack(*[np.ones(8)] * 4)))
    for big in (1 - 2.0 ** -9, 1.0):
        x = sign * np.array([big] + [1.5 * 2.0 ** -7] * 7)
        s = _rnd(fixed_point_dot(x, np.ones(8), 6, 8), "bfloat16", "nearest_even")
        assert _fr(clo) <= s <= _fr(chi), (big, clo, s, chi)
    assert {float(sign * v) for v in (1.0, 1 + 6 * 2.0 ** -7)} == \
        {float(_rnd(fixed_point_dot(sign * np.array([b] + [1.5 * 2.0 ** -7] * 7), np.ones(8),
                                    6, 8), "binary32", "nearest_even"))
         for b in (1.0, 1 - 2.0 ** -9)}


@pytest.mark.parametrize("scale,n", [(1.0, K), (1.0, 1), (2.0 ** -540, K)],
                         ids=["normal", "one-product", "underflowing"])
def test_exact_enclosure_holds_for_full_binary64_operands(scale, n):
    # E operands of 53 significant bits (their products are not binary64 values) and
    # products below 2**-1074: E must widen them; C (the values rounded into bfloat16) holds
    # the model.
    rng = np.random.default_rng(7)
    x, y = (rng.normal(size=(4, K)) * scale for _ in range(2))
    x[:, n:] = 0.0
    bk = numerics.bounding("bfloat16", "nearest_even", "fixed_point:14")
    got = bk.dot(bk.asarray(x), bk.asarray(y))
    clo, chi, elo, ehi = bk.split(got)
    cx, cy = formats.round_to(x, "bfloat16"), formats.round_to(y, "bfloat16")
    for r in range(4):
        exact = sum(_fr(u) * _fr(v) for u, v in zip(x[r], y[r]))
        assert _fr(elo[r]) <= exact <= _fr(ehi[r]) and elo[r] < ehi[r], r
        s = _rnd(fixed_point_dot(cx[r], cy[r], 14, 32), "bfloat16", "nearest_even")
        assert _fr(clo[r]) <= s <= _fr(chi[r]), r


def _violations(bk, got, computed, exact):
    """Elements whose |computed - exact| exceeds the bound (exact rationals)."""
    bound = bk.error_bound(got)
    return [i for i in zip(*np.nonzero(np.isfinite(bound)))
            if abs(_fr(computed[i]) - exact[i]) > _fr(bound[i])]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_truncating_three_bits_fewer_violates_the_bound(op, fmt, policy):
    bits, block = _policy(policy)
    x, y, b = _operands("cancelling", fmt, bits, np.random.default_rng(3))
    bk = numerics.bounding(fmt, "nearest_even", policy)
    got = _evaluate(op, bk, x, y, b)
    fewer = numerics.Policy(fmt, accumulate="binary32", fixed_point=bits - 3, block=block)
    degraded = _evaluate(op, numerics.emulated(fmt, "nearest_even", fewer), x, y, b)
    right = _evaluate(op, numerics.emulated(fmt, "nearest_even", policy), x, y, b)
    exact = _exact(op, x, y, b)
    assert not _violations(bk, got, right, exact)
    assert _violations(bk, got, degraded, exact)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("op", ["matmul", "linear", "dot"])
def test_storage_running_sums_where_the_model_says_fixed_point_violate_the_bound(op, fmt):
    x, y, b = _operands("cancelling", fmt, 14, np.random.default_rng(4))
    bk = numerics.bounding(fmt, "nearest_even", "fixed_point:14")
    got = _evaluate(op, bk, x, y, b)
    strict = _evaluate(op, numerics.emulated(fmt, "nearest_even", "strict"), x, y, b)
    assert _violations(bk, got, strict, _exact(op, x, y, b))


def test_coverage_rows_under_fixed_point_carry_the_interval_bound():
    sel = runner.Selection(ops=("matmul", "linear"), formats=("bfloat16",),
                           policies=("fixed_point:14",), draws=2)
    rows = [r for t in runner.plan(sel) for r in evaluate.evaluate(t)[0]]
    assert rows and all(r["status"] == "ok" for r in rows)
    assert all(r["interval_bound"] is not None for r in rows), \
        [(r["op"], r["route"], r["port"]) for r in rows if r["interval_bound"] is None]
    assert all(r["violations"] == 0 for r in rows)
    assert max(r["interval_bound_ratio"] for r in rows) <= 1.0


def test_non_finite_products_and_overflow_leave_no_claim():
    bk = numerics.bounding("bfloat16", "nearest_even", "fixed_point:14")
    got = bk.dot(np.array([[np.inf, 1.0], [3e38, 3e38]]), np.array([[1.0, 1.0], [10.0, 10.0]]))
    assert np.isinf(bk.error_bound(got)).all()
    e4 = numerics.bounding("float8_e4m3fn", "nearest_even", "fixed_point:14")
    assert np.isinf(e4.error_bound(e4.dot(np.full(4, 448.0), np.full(4, 448.0))))

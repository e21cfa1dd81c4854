"""How accelerators accumulate (numerics.policy: promote, fixed_point, acc:FORMAT, split_k,
tree): the emulated backend against each policy's order written out here with exact
rationals; the a priori bounds of routes.apriori hold on every sample of a run and are
violated by an implementation that accumulates less precisely than declared."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics.policy import preset
from roundoff_coverage.engine import evaluate, runner
from conftest import fixed_point_dot


def _rnd(v: Fraction, fmt, mode="nearest_even") -> Fraction:
    r = formats.round_exact(v, fmt, mode)
    f = r.to_fraction()
    assert f is not None, (v, fmt)
    return f


def _same(got, want: Fraction, fmt, mode) -> bool:
    """The computed float64 value against ``want`` rounded into fmt (NaN where the format
    gives NaN, e.g. float8_e4m3fn's overflow)."""
    r = formats.round_exact(want, fmt, mode)
    f = r.to_fraction()
    if f is None:
        return float(got) == r.to_float() or (np.isnan(got) and np.isnan(r.to_float()))
    return np.isfinite(got) and _f(got) == f


def _f(x) -> Fraction:
    return Fraction(float(x))


def oracle_promote(x, y, k, inner, acc="binary32", mode="nearest_even"):
    """Runs of k products, each rounded into ``inner`` and added there in order; each run's
    sum added into ``acc``."""
    total = None
    for i in range(0, len(x), k):
        run = None
        for a, b in zip(x[i:i + k], y[i:i + k]):
            p = _rnd(_f(a) * _f(b), inner, mode)
            run = p if run is None else _rnd(run + p, inner, mode)
        run = _rnd(run, acc, mode)
        total = run if total is None else _rnd(total + run, acc, mode)
    return total


def oracle_sequential(x, y, acc, mode="nearest_even", chunk=None):
    """Products rounded into ``acc``, summed in order (in chunks of ``chunk``, then the chunk
    sums in order)."""
    chunk = chunk or len(x)
    sums = []
    for i in range(0, len(x), chunk):
        s = None
        for a, b in zip(x[i:i + chunk], y[i:i + chunk]):
            p = _rnd(_f(a) * _f(b), acc, mode)
            s = p if s is None else _rnd(s + p, acc, mode)
        sums.append(s)
    t = sums[0]
    for v in sums[1:]:
        t = _rnd(t + v, acc, mode)
    return t


def _draw(rng, fmt, n, spread=6):
    """n values of ``fmt`` of both signs over 2**spread binades (and a few zeros)."""
    v = rng.choice([-1, 1], n) * 2.0 ** rng.uniform(-spread, spread, n)
    v[rng.integers(0, n, max(1, n // 16))] = 0.0
    return formats.round_to(v, fmt)


CASES = [("bfloat16", 40), ("float8_e4m3fn", 70), ("bfloat16", 5)]


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "upward"])
@pytest.mark.parametrize("fmt,n", CASES)
@pytest.mark.parametrize("bits,block", [(14, 32), (6, 8), (3, 4)])
def test_fixed_point_matches_its_rational_oracle(fmt, n, bits, block, mode):
    rng = np.random.default_rng([n, bits, block])
    x, y = _draw(rng, fmt, n), _draw(rng, fmt, n)
    pol = numerics.Policy(fmt, accumulate="binary32", fixed_point=bits, block=block)
    got = numerics.emulated(fmt, mode, pol).dot(x, y)
    assert _same(got, fixed_point_dot(x, y, bits, block, "binary32", mode), fmt, mode)


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero"])
@pytest.mark.parametrize("fmt,n", CASES)
@pytest.mark.parametrize("k,inner", [(8, "e8m13"), (3, "e5m10"), (128, "e8m13")])
def test_promote_matches_its_rational_oracle(fmt, n, k, inner, mode):
    if fmt == "bfloat16" and inner == "e5m10":
        pytest.skip("e5m10 does not hold bfloat16's range")
    rng = np.random.default_rng([n, k])
    x, y = _draw(rng, fmt, n, spread=3), _draw(rng, fmt, n, spread=3)
    pol = preset(f"promote:{k}:{inner}", fmt)
    got = numerics.emulated(fmt, mode, pol).dot(x, y)
    assert _same(got, oracle_promote(x, y, k, inner, "binary32", mode), fmt, mode)


@pytest.mark.parametrize("name,acc,chunks", [("acc:e8m13", "e8m13", None),
                                             ("split_k:3", "binary32", 3),
                                             ("split_k:1", "binary32", 1)])
def test_narrow_accumulator_and_split_k_match_their_oracles(name, acc, chunks):
    rng = np.random.default_rng(5)
    fmt, n = "bfloat16", 50
    x, y = _draw(rng, fmt, n), _draw(rng, fmt, n)
    got = numerics.emulated(fmt, "nearest_even", preset(name, fmt)).dot(x, y)
    chunk = -(-n // chunks) if chunks else None
    assert _same(got, oracle_sequential(x, y, acc, chunk=chunk), fmt, "nearest_even")


def test_fixed_point_truncation_loses_what_binary32_keeps():
    # 1 + 2**-20: binary32 keeps the small product; 14 bits of alignment drop it (the
    # effect the DeepSeek-V3 report measures on FP8 tensor cores).
    x = np.array([1.0, 2.0 ** -10])
    y = np.array([1.0, 2.0 ** -10])
    keep = numerics.emulated("binary32", "nearest_even", preset("fp32_accumulate", "binary32"))
    drop = numerics.emulated("bfloat16", "nearest_even", preset("fixed_point:14", "bfloat16"))
    assert keep.dot(x, y) == 1 + 2.0 ** -20
    assert numerics.emulated("binary32", "nearest_even",
                             numerics.Policy("binary32", fixed_point=14)).dot(x, y) == 1.0
    assert drop.dot(x, y) == 1.0


def test_non_finite_and_zero_blocks_follow_ieee():
    pol = preset("fixed_point:10", "bfloat16")
    bk = numerics.emulated("bfloat16", "nearest_even", pol)
    assert np.isnan(bk.dot(np.array([np.inf, 1.0]), np.array([0.0, 1.0])))
    assert bk.dot(np.array([np.inf, 1.0]), np.array([1.0, 1.0])) == np.inf
    assert bk.dot(np.zeros(40), np.ones(40)) == 0.0


POLICIES = ["fixed_point:14", "fixed_point:6:8", "promote:16", "acc:e8m13", "split_k:4",
            "tree"]


@pytest.mark.parametrize("policy", POLICIES)
def test_bounds_hold_on_every_sample_of_a_run(policy):
    sel = runner.Selection(ops=("matmul", "linear"), formats=("bfloat16", "float8_e4m3fn"),
                           routes=("forward",), policies=(policy,), draws=2)
    rows = [r for t in runner.plan(sel) for r in evaluate.evaluate(t)[0]]
    checked = [r for r in rows if r["bound"] is not None]
    assert len(checked) >= len(rows) // 2, [r["reason"] for r in rows]
    assert all(r["status"] == "ok" and r["violations"] == 0 for r in checked), \
        [(r["op"], r["instance"], r["violations"]) for r in checked if r["violations"]]


@pytest.mark.parametrize("declared,actual", [("fixed_point:14", "fixed_point:3"),
                                             ("promote:16", "promote:16:e4m3"),
                                             ("tree", "acc:e8m3")])
def test_an_implementation_that_accumulates_worse_violates_the_bound(monkeypatch, declared,
                                                                     actual):
    real = numerics.emulated

    def degraded(fmt, mode="nearest_even", policy=None, seed=0):
        return real(fmt, mode, preset(actual, fmt), seed)
    sel = runner.Selection(ops=("matmul",), formats=("bfloat16",), routes=("forward",),
                           policies=(declared,), draws=2)
    tasks = [t for t in runner.plan(sel) if t.instance in ("k256", "k1024")]
    monkeypatch.setattr(numerics, "emulated", degraded)
    rows = [r for t in tasks for r in evaluate.evaluate(t)[0]]
    assert sum(r["violations"] or 0 for r in rows) > 0


@pytest.mark.parametrize("bad,message", [
    ("fixed_point:x", "'x' is not an integer"),
    ("fixed_point:0", "fixed_point (fraction bits) must be a positive integer"),
    ("fixed_point:60", "at most 40 bits"),
    ("promote:0", "promote (products per run) must be a positive integer"),
    ("acc:nope", "unknown format 'nope'"),
    ("split_k:-1", "reduction order must be"),
    ("promotion:4", "unknown policy 'promotion:4'")])
def test_bad_policy_names_say_what_is_wrong(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        preset(bad, "bfloat16")


def test_fixed_point_needs_exact_products():
    bk = numerics.emulated("binary64", "nearest_even",
                           numerics.Policy("binary64", fixed_point=14))
    with pytest.raises(ValueError, match="products exact in binary64"):
        bk.dot(np.ones(3), np.ones(3))

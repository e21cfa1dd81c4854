"""A priori roundoff bounds (routes/apriori.py) hold, and catch implementations that break them.

The exact values are each entry's mpmath oracle at 300 bits (independent of the rule and of
its order of operations); the computed values are numerics.emulated's under the format,
mode and policy the bound is stated for.  The violation tests use deliberately degraded
implementations: a sum accumulated in the storage format where the policy says binary32,
an exp rounded to three bits fewer than the format has.
"""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.numerics.policy import preset
from roundoff_coverage.engine import evaluate, runner
from roundoff_coverage.routes import apriori
from conftest import CTX, degrade_exp, to_mp
FORMATS = ("bfloat16", "binary16", "float8_e4m3fn")
MODES = ("nearest_even", "toward_zero", "upward")
POLICIES = ("strict", "fp32_accumulate", "fp32_accumulate_fma", "pairwise", "blocked32")
# Instances beyond the examples: sums and means long enough for the gamma terms to matter.
EXTRA = {"reduce": [{"shape": (3, 256), "axes": (1,)}],
         "mean": [{"shape": (3, 256), "axes": (1,)}],
         "matmul": [{"x_shape": (2, 64), "y_shape": (64, 2)}]}


def _instances(name):
    out = [dict(a) for a in routes.declaration(name).examples.values()] + EXTRA.get(name, [])
    return [routes.op(name, **a) for a in out]


@pytest.mark.parametrize("name", sorted(apriori.FORMULAS))
def test_apriori_bound_holds(name):
    rng = np.random.default_rng(11)
    checked = 0
    for o in _instances(name):
        for fmt in FORMATS:
            for mode in MODES:
                for pol in POLICIES:
                    policy = preset(pol, fmt)
                    rule = o.rule(numerics.emulated(fmt, mode, policy))
                    for kind in evaluate.sample_kinds(o):
                        xs = o.samples(rng, fmt, kind)
                        b = apriori.bound(o, xs, fmt, mode, policy)
                        if b is None:
                            continue
                        (got,) = rule.forward(xs)
                        (exact,) = o.decl.oracle(CTX, o.attrs, *[
                            to_mp(x) if p.scalar else x for x, p in zip(xs, o.inputs)])
                        for g, e, bb in zip(np.ravel(got), np.ravel(exact), np.ravel(b)):
                            if not np.isfinite(bb):
                                continue          # beyond the model (overflow, inf, NaN)
                            assert abs(CTX.mpf(float(g)) - e) <= bb, \
                                (o, fmt, mode, pol, kind, float(g), e, bb)
                            checked += 1
    assert checked > 100


def test_a_sum_accumulated_in_storage_violates_the_binary32_accumulation_bound():
    o = routes.op("reduce", shape=(8, 4096), axes=(1,))
    fmt = "bfloat16"
    xs = o.samples(np.random.default_rng(3), fmt, "ordinary")
    b = apriori.bound(o, xs, fmt, "nearest_even", preset("fp32_accumulate", fmt))
    (got,) = o.rule(numerics.emulated(fmt, "nearest_even", preset("strict", fmt))).forward(xs)
    (exact,) = o.decl.oracle(CTX, o.attrs, to_mp(xs[0]))
    over = [abs(CTX.mpf(float(g)) - e) > bb for g, e, bb in zip(got, exact, b)]
    assert any(over)


def test_the_run_counts_violations_of_a_degraded_exp(monkeypatch):
    """exp rounded to three bits fewer than bfloat16 has: the 0.5-ulp certificate of exp is
    violated on some samples, and the run counts them; the real exp has none."""
    sel = runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward",), draws=4)
    real = [r for t in runner.plan(sel) for r in evaluate.evaluate(t)[0]
            if r["instance"] == "default"]
    assert real[0]["violations"] == 0 and real[0]["bound"] == 0.5
    degrade_exp(monkeypatch)
    bad = [r for t in runner.plan(sel) for r in evaluate.evaluate(t)[0]
           if r["instance"] == "default"]
    assert bad[0]["violations"] > 0 and bad[0]["bound_ratio"] > 1


def test_the_run_counts_violations_of_storage_accumulation(monkeypatch):
    """The run's bound follows the declared policy (fp32_accumulate); an implementation that
    accumulates in bfloat16 anyway violates it on the 4096-term sums."""
    sel = runner.Selection(ops=("reduce",), formats=("bfloat16",), routes=("forward",),
                           policies=("fp32_accumulate",), draws=1)
    tasks = [t for t in runner.plan(sel) if t.instance == "sum-n4096"]
    (row,) = evaluate.evaluate(tasks[0])[0]
    assert row["violations"] == 0 and row["bound"] is not None
    real = numerics.emulated
    monkeypatch.setattr(numerics, "emulated", lambda fmt, mode, policy, seed=0:
                        real(fmt, mode, preset("strict", fmt), seed))
    (row,) = evaluate.evaluate(tasks[0])[0]
    assert row["violations"] > 0


@pytest.mark.parametrize("name", ["exp", "sqrt", "tanh", "reciprocal", "sigmoid"])
def test_bounds_hold_on_exhaustive_binary16(name):
    sel = runner.Selection(ops=(name,), formats=("binary16",), routes=("forward",), draws=1,
                           exhaustive=True)
    rows = [r for t in runner.plan(sel) if t.exhaustive for r in evaluate.evaluate(t)[0]]
    assert rows and all(r["samples"] >= formats.get("binary16").finite_count for r in rows)
    for r in rows:
        assert r["violations"] in (0, None), r

"""A model row's tensor measures (engine/tensor_measures.py: norm_rel, norm_rel_max, bits,
sqnr_db, cosine, scale_ulp, cancelled, cancelled_error) and its ulp statistics over the
elements that do not cancel, against an independent recomputation: exact values written
with Fractions and mpmath at 300 bits (never read from the implementation), norms in numpy
float64; on every row kind (forward values, tangents, cotangents d<output>, gradient
contributions, the whole model's outputs and input gradients, local rows), a ReLU whose
exact output has zeros, an exact-zero gradient, and the README's transformer block."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from fractions import Fraction as F

import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.engine import model as M
from roundoff_coverage.engine import results
from roundoff_coverage.engine.samples import in_format, sample_inputs, tangent_directions
from roundoff_coverage.engine.sites import sites, value_at
from roundoff_coverage.routes.graph import GraphRule
from roundoff_coverage.routes.ports import value

from conftest import round_bf16, softmax_shift_graph

BF16 = formats.get("bfloat16")
P = BF16.precision                                      # 8
CONFIG = M.Config("bfloat16", "nearest_even", "strict")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rn(q: F) -> F:
    """A Fraction rounded to nearest even into bfloat16 (formats.round_exact)."""
    return F(formats.round_exact(q, BF16, "nearest_even").to_float())


def _frac(v) -> F:
    """An mpmath number as an exact Fraction."""
    sign, man, exp, _ = v._mpf_
    return F(-int(man) if sign else int(man)) * F(2) ** int(exp)


def _tanh(q: F) -> F:
    """tanh of a Fraction at 300 bits, as a Fraction (its error, 2**-300 relative, is far
    below anything measured here)."""
    with mpmath.workprec(300):
        return _frac(mpmath.tanh(mpmath.mpf(q.numerator) / q.denominator))


def _oracle(computed, exact) -> dict:
    """The measures of engine/tensor_measures.py recomputed from their definitions: exact
    Fractions rounded to binary64 once, norms in numpy float64."""
    c = np.asarray(computed, dtype=np.float64).reshape(-1)
    ex = [F(e) for e in np.asarray(exact, dtype=object).reshape(-1)]
    y = np.array([float(e) for e in ex])
    d = np.array([float(F(float(ci)) - e) for ci, e in zip(c, ex)])
    scale = max(abs(e) for e in ex)
    threshold = scale / 2 ** P
    cancelled = np.array([abs(e) < threshold for e in ex])
    rel = float(np.linalg.norm(d) / np.linalg.norm(y))
    e_top = math.floor(math.log2(float(scale)))
    kept_ulps = [abs(float((F(float(ci)) - e) / F(2) ** (math.floor(math.log2(abs(float(e))))
                                                        - P + 1)))
                 for ci, e, k in zip(c, ex, cancelled) if not k]
    return {"norm_rel": rel, "norm_rel_max": float(np.max(np.abs(d)) / float(scale)),
            "bits": -math.log2(rel) if rel else math.inf,
            "sqnr_db": 10 * math.log10(float(np.sum(y * y)) / float(np.sum(d * d)))
            if rel else math.inf,
            "cosine": float(np.dot(c, y) / (np.linalg.norm(c) * np.linalg.norm(y))),
            "scale_ulp": float(np.max(np.abs(d))) / 2.0 ** (e_top - P + 1),
            "cancelled": int(cancelled.sum()),
            "cancelled_error": float(np.max(np.abs(d[cancelled]))) if cancelled.any() else None,
            "max_ulp": max(kept_ulps) if kept_ulps else None,
            "samples": len(kept_ulps)}


def _check(row, want, what):
    for k, v in want.items():
        got = row[k]
        if v is None or isinstance(v, int) or (isinstance(v, float) and math.isinf(v)):
            assert got == v, (what, k, got, v)
        else:
            assert got == pytest.approx(v, rel=1e-9, abs=1e-300), (what, k, got, v)


def _whole(site) -> str:
    """The node label of a whole-model site in the rows (engine/rows.py: node)."""
    return f"{'input' if site.where == 'cotangents' else 'output'}:{site.port}"


def _row(rows, node, route, port, attribution="propagated"):
    return next(r for r in rows if r["node"] == node and r["route"] == route
                and r["port"] == port and r["attribution"] == attribution)


# ----- every row kind on a matmul + add + tanh chain ------------------------------------------

def _chain():
    """z = tanh(W @ X + B): W (3, 4), X (4, 2), B (3, 2)."""
    g = routes.Graph(w=value((3, 4)), x=value((4, 2)), b=value((3, 2)))
    h = g.apply(routes.op("matmul", x_shape=(3, 4), y_shape=(4, 2)), g.input("w"),
                g.input("x"), name="matmul")
    s = g.apply(routes.op("add", shape=(3, 2)), h, g.input("b"), name="add")
    g.output(g.apply(routes.op("tanh", shape=(3, 2)), s, name="tanh"))
    rng = np.random.default_rng(7)
    g.example_inputs = [rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 2)),
                        rng.uniform(-0.5, 0.5, (3, 2))]
    return g


def _fr(a):
    return np.vectorize(lambda v: F(float(v)), otypes=[object])(np.asarray(a))


def test_the_measures_of_every_row_kind_match_an_independent_recomputation():
    g = _chain()
    samples = sample_inputs(g, 2, 0)
    rows, _, _ = M.measure(g, CONFIG, samples, 0)
    gf = in_format(g, BF16)
    emu = numerics.emulated(BF16, CONFIG.mode, CONFIG.policy, seed=0)
    rule = GraphRule(gf, emu)
    computed, exact = {}, {}
    every = sites(gf, ("forward", "tangent", "gradient"))
    for s, sample in enumerate(samples):
        xs = [formats.round_to(a, BF16) for a in sample]
        cots, tans = tangent_directions(gf, BF16, xs, 0, s)
        tr = rule.trace([emu.asarray(a) for a in xs], cots, tans)
        for site in every:
            c = value_at(tr, site)
            if c is not None:
                computed.setdefault(site, []).append(np.asarray(c, dtype=np.float64))
        # The exact sweeps, by hand: forward, tangent (forward mode), gradient (reverse).
        w, x, b = (_fr(a) for a in xs)
        tw, tx, tb = (_fr(t) for t in tans)
        dz = _fr(cots[0])
        h = w.dot(x)
        pre = h + b
        z = np.vectorize(_tanh, otypes=[object])(pre)
        dpre = 1 - z * z                                  # tanh' = 1 - tanh^2
        th = tw.dot(x) + w.dot(tx)
        tpre = th + tb
        tz = dpre * tpre
        ds = dz * dpre                                    # d(add output) = d(matmul output)
        want = {("forward", "matmul"): h, ("forward", "add"): pre, ("forward", "tanh"): z,
                ("tangent", "matmul"): th, ("tangent", "add"): tpre, ("tangent", "tanh"): tz,
                ("gradient", "tanh", "dy"): dz, ("gradient", "tanh", "x"): ds,
                ("gradient", "add", "dout"): ds, ("gradient", "add", "x"): ds,
                ("gradient", "add", "y"): ds, ("gradient", "matmul", "dout"): ds,
                ("gradient", "matmul", "x"): ds.dot(x.T), ("gradient", "matmul", "y"):
                w.T.dot(ds), ("forward", "output:out0"): z, ("tangent", "output:out0"): tz,
                ("gradient", "input:w"): ds.dot(x.T), ("gradient", "input:x"): w.T.dot(ds),
                ("gradient", "input:b"): ds}
        for key, v in want.items():
            exact.setdefault(key, []).append(v)
    checked = set()
    for site in every:
        node = gf.node_names[site.node] if site.node >= 0 else None
        key = (site.route, node, site.port) if site.route == "gradient" and node else \
            (site.route, node or _whole(site))
        if key not in exact:
            continue
        label = node or _whole(site)
        row = _row(rows, label, site.route, site.port)
        want = _oracle(np.concatenate([np.ravel(c) for c in computed[site]]),
                       np.concatenate([np.ravel(e) for e in exact[key]]))
        _check(row, want, key)
        checked.add((site.route, site.where, site.node >= 0))
    assert checked == {("forward", "values", True), ("tangent", "tangents", True),
                       ("gradient", "cotangents", True), ("gradient", "contributions", True),
                       ("forward", "values", False), ("tangent", "tangents", False),
                       ("gradient", "cotangents", False)}


def test_a_local_row_measures_the_node_alone_against_the_exact_node():
    # tanh alone: the exact pre-activation rounded into bfloat16, tanh rounded once, against
    # the exact tanh of that rounded value.
    g = _chain()
    samples = sample_inputs(g, 1, 0)
    rows, _, _ = M.measure(g, CONFIG, samples, 0, ("forward",))
    w, x, b = (_fr(formats.round_to(a, BF16)) for a in samples[0])
    reads = np.vectorize(_rn, otypes=[object])(w.dot(x) + b)
    exact = np.vectorize(_tanh, otypes=[object])(reads)
    computed = np.array([float(_rn(e)) for e in exact.reshape(-1)])
    _check(_row(rows, "tanh", "forward", "y", "local"), _oracle(computed, exact), "local")


# ----- cancellation: a ReLU whose exact output has zeros ----------------------------------------

def _relu_graph(n):
    g = routes.Graph(x=value((n,)), a=value((n,)), b=value((n,)))
    p = g.apply(routes.op("mul", shape=(n,)), g.input("x"), g.input("a"), name="mul")
    h = g.apply(routes.op("add", shape=(n,)), p, g.input("b"), name="add")
    g.output(g.apply(routes.op("relu", shape=(n,)), h, name="relu"))
    return g


def test_cancelled_elements_are_counted_and_left_out_of_the_ulp_statistics():
    # Elements 0-5: x * a + b near 1; element 6: b = -RN(x * a), so the exact sum is the
    # product's rounding error (2**-14 here) and the computed one 0: 128 ulp at its own
    # magnitude, but far below 2**-8 of the tensor's scale; element 7: negative, relu 0.
    x = np.array([1.0, 1.25, 1.5, 1.75, 1.125, 1.375, 1 + 2 ** -7, 1.0])
    a = np.array([1.0, 1.0, 0.75, 0.5, 1.0, 0.625, 1 + 2 ** -7, 1.0])
    b = np.array([0.0625, -0.25, 0.125, 0.0, 0.5, -0.125, 0.0, -2.0])
    b[6] = -float(_rn(F(x[6]) * F(a[6])))
    assert float(F(x[6]) * F(a[6]) + F(b[6])) == 2.0 ** -14
    g = _relu_graph(8)
    rows, _, _ = M.measure(g, CONFIG, [[x, a, b]], 0, ("forward",))
    ex_h = [F(p) * F(q) + F(r) for p, q, r in zip(x, a, b)]
    comp_h = [_rn(_rn(F(p) * F(q)) + F(r)) for p, q, r in zip(x, a, b)]
    add = _row(rows, "add", "forward", "out")
    want = _oracle(np.array([float(c) for c in comp_h]), np.array(ex_h, dtype=object))
    assert want["cancelled"] == 1 and want["max_ulp"] <= 0.5 and want["cancelled_error"] == \
        2.0 ** -14
    _check(add, want, "add")
    assert "1 of 8 elements cancel to below 2^-8" in add["reason"]
    relu = _row(rows, "relu", "forward", "y")
    ex_r = [max(h, F(0)) for h in ex_h]
    want = _oracle(np.array([float(max(c, F(0))) for c in comp_h]), np.array(ex_r, dtype=object))
    assert want["cancelled"] == 2 and math.isfinite(want["max_ulp"])
    _check(relu, want, "relu")
    assert relu["samples"] == 6 and relu["buckets"] and sum(relu["buckets"]) == 6
    # relu alone on exact reads rounded: exact, zeros included.
    local = _row(rows, "relu", "forward", "y", "local")
    assert local["max_ulp"] == 0 and local["norm_rel"] == 0 and local["bits"] == math.inf \
        and local["cosine"] == 1.0 and local["cancelled"] == 2


# ----- an exact-zero gradient ------------------------------------------------------------------

def test_an_exact_zero_gradient_gets_finite_meaningful_numbers():
    # d/db of sum(softmax(x + b)) = 0 exactly (softmax ignores a shift of a row): every
    # element of input:b's gradient cancels, its error is the computed residue itself, and
    # no relative measure or ulp statistic is made of it.
    n = 8
    g = softmax_shift_graph(n)
    rows, summary, _ = M.measure(g, M.Config("bfloat16", "nearest_even", "strict"),
                                 sample_inputs(g, 2, 0), 0, ("forward", "gradient"))
    r = _row(rows, "input:b", "gradient", "b")
    assert r["status"] == "ok" and r["cancelled"] == 2 * 2 * n and r["samples"] == 0
    assert r["max_ulp"] is None and r["worst"] is None
    assert r["cancelled_error"] is not None and math.isfinite(r["cancelled_error"])
    if r["cancelled_error"] > 0:           # a residue: no relative error is defined
        assert all(r[k] is None for k in ("norm_rel", "bits", "sqnr_db", "cosine",
                                          "scale_ulp"))
    else:
        assert r["norm_rel"] == 0 and r["bits"] == math.inf
    # The row passes the results file's checks, and the summary's numbers are finite.
    results.check({"rows": [results.clean(x) for x in rows]}, "-", strict=False)
    assert not [f for x in rows for f in results.field_problems(results.clean(x))]
    for entry in summary["largest_local"]["gradient"] + summary["keep_binary32"]:
        for k, v in entry.items():
            if k.startswith(("norm_rel", "max_ulp", "mean_ulp", "scale_ulp")) and v is not None:
                assert math.isfinite(v) and v < 1e3, (entry, k)


# ----- the README's transformer block ----------------------------------------------------------

@pytest.mark.slow
def test_the_block_ranks_real_errors_not_the_key_bias_zero_gradient(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "block.json"
    done = subprocess.run(
        [sys.executable, "-m", "roundoff_coverage", "model",
         os.path.join(REPO, "benchmarks", "bench_model.py") + ":block", "--formats",
         "bfloat16", "--policies", "fp32_accumulate", "--routes", "forward,gradient",
         "--samples", "1", "--jobs", "1", "--quiet", "--attribution", "none", "--out",
         str(out)],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    doc = results.read(str(out))
    bias = next(r for r in doc["rows"] if r["node"] == "input:attn.in_proj_bias")
    # The key third of in_proj_bias (64 of 192 elements) has an exact gradient of 0: it is
    # cancelled, and the rest measures as an ordinary tensor.
    assert bias["cancelled"] >= 64 and bias["samples"] + bias["cancelled"] == 192
    assert bias["max_ulp"] < 1e4 and 0 < bias["norm_rel"] < 0.1 and bias["bits"] > 3
    (summary,) = doc["model"]["summary"].values()
    grads = [r for r in doc["rows"] if r["route"] == "gradient" and r["status"] == "ok"]
    assert all(results.number(r["max_ulp"]) < 1e6 for r in grads if r["max_ulp"] is not None)
    keep = [e for e in summary["keep_binary32"] if e["route"] == "gradient"]
    top = keep[0]
    assert top["tensor_before"] != "input:attn.in_proj_bias"
    assert top["norm_rel_after"] < top["norm_rel_before"] < 0.1
    for e in summary["largest_local"]["gradient"]:
        assert e["norm_rel"] < 1 and e["max_ulp"] < 1e6, e


def test_the_same_infinity_in_both_runs_is_exact_and_left_out_of_the_norms():
    # y = x * a where x > 0, else -inf (an attention mask's fill): the masked elements are
    # -inf in both runs; the norms are over the others, by hand with exact rationals.
    n = 8
    g = routes.Graph(x=value((n,)), a=value((n,)))
    mask = g.apply(routes.op("gt", shape=(n,)), g.input("x"), g.constant(np.zeros(n)))
    prod = g.apply(routes.op("mul", shape=(n,)), g.input("x"), g.input("a"), name="prod")
    g.output(g.apply(routes.op("select", shape=(n,)), mask, prod,
                     g.constant(np.full(n, -np.inf)), name="fill"))
    rng = np.random.default_rng(11)
    x = formats.round_to(rng.uniform(0.5, 2.0, n) * np.array([1, -1] * (n // 2)), BF16)
    a = formats.round_to(rng.uniform(0.5, 2.0, n), BF16)
    rows, _, _ = M.measure(g, CONFIG, [[x, a]], 0, ("forward",), attribution="none")
    row = _row(rows, "fill", "forward", "out")
    exact = [F(float(p)) * F(float(q)) for p, q in zip(x, a) if p > 0]
    err = [round_bf16(e) - e for e in exact]
    want = math.sqrt(float(sum(e * e for e in err))) / math.sqrt(float(sum(e * e for e in exact)))
    assert row["status"] == "ok" and row["norm_rel"] == pytest.approx(want, rel=1e-12)
    assert math.isfinite(row["sqnr_db"]) and row["cosine"] is not None
    assert f"{n // 2} of {n} elements are the same infinity in both runs" in row["reason"]


def test_one_pass_stand_ins_give_the_ulps_of_the_exact_values():
    # measure_port reads a model row's exact values through their binary64 stand-ins
    # (engine/model.py: one pass per site).  Against errors written by hand in ulps of
    # bfloat16 (p = 8; exact values beyond 2**129 count as 2**129, nonzero ones below
    # 2**-197 as 2**-197: numerics.metrics.clamp_exact), and against the path that reads
    # the exact mpf values themselves.
    from roundoff_coverage.engine.measuring import measure_port
    from roundoff_coverage.engine.tensor_measures import stand_ins
    bf = formats.get("bfloat16")
    ctx = mpmath.MPContext()
    ctx.prec = 300
    exact = np.array([ctx.mpf(1) + ctx.ldexp(1, -60),        # 1 + 2**-60 -> 2**-60 ulp of 1
                      ctx.ldexp(3, 200),                      # beyond range: counts as 2**129
                      -ctx.ldexp(1, -300),                     # tiny: counts as -2**-197
                      ctx.ldexp(1, -1100),                     # no binary64 stand-in but 0
                      ctx.mpf(0), 2.0, 0.5], dtype=object)
    comp = np.array([1.0, math.inf, -0.0, 0.0, -0.0, 2.0, 0.5 + 2.0 ** -8])
    ulps = {}
    for stand in (None, stand_ins(exact)):
        row = {}
        got = measure_port(row, comp.copy(), exact, bf, None, stand=stand)
        ulps[stand is None] = got
    assert np.array_equal(ulps[True], ulps[False], equal_nan=True)
    # ulp(1) = 2**-7; inf is the overflow's rounding to nearest (metrics' convention: 0
    # ulp); 2**-197 and 2**-300 lie far below bfloat16's least subnormal 2**-133, where the
    # ulp is 2**-133; 0.5 + 2**-8 is 1 ulp of 0.5 (2**-8) away.
    want = [-2.0 ** -53, 0.0, 2.0 ** -64, -(2.0 ** -64), 0.0, 0.0, 1.0]
    assert [float(g) for g in ulps[False]] == want

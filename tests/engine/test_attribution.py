"""Attribution that adds up (engine/attribution.py): each node's first-order share of each
model output's error against shares written by hand with exact rationals, the report naming
a node whose implementation was made k ulps worse, and the closure of the shares on a small
MLP in bfloat16."""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest

from roundoff_coverage import formats, routes
from roundoff_coverage.engine import attribution as A
from roundoff_coverage.engine import model as M
from roundoff_coverage.engine import rows as row_fields
from roundoff_coverage.engine.samples import tangent_directions
from roundoff_coverage.routes import graph as graph_module
from roundoff_coverage.routes.ports import value

from conftest import chain_graph, round_bf16

BF16 = formats.get("bfloat16")
CONFIG = M.Config("bfloat16", "nearest_even", "strict")


def _norm(vs) -> float:
    return math.sqrt(float(sum(v * v for v in vs)))


def _share(rows, node, output="output:out0"):
    return next(r for r in rows if r["attribution"] == "share" and r["node"] == node
                and r["output"] == output)


def _whole(rows):
    return next(r for r in rows if r["node"] == "output:out0" and r["route"] == "forward"
                and r["attribution"] == "propagated")


def _product_then_square(seed, n=8):
    """The graph h = x * a (node "first"), y = h * h ("square"), and three samples of
    bfloat16 values in [0.5, 2)."""
    g = routes.Graph(x=value((n,)), a=value((n,)))
    h = g.apply(routes.op("mul", shape=(n,)), g.input("x"), g.input("a"), name="first")
    g.output(g.apply(routes.op("mul", shape=(n,)), h, h, name="square"))
    rng = np.random.default_rng(seed)
    return g, [[formats.round_to(rng.uniform(0.5, 2.0, n), BF16) for _ in range(2)]
               for _ in range(3)]


def test_shares_of_a_product_then_a_square_match_exact_rationals():
    # h = x * a, y = h * h.  In the emulated run the square reads h_hat = RN(x a): its local
    # error is RN(h_hat^2) - h_hat^2 and its share of y's is that (nothing after it); the
    # product's local error d = RN(x a) - x a reaches y through dy/dh = 2 h at the exact h.
    g, xs = _product_then_square(5)
    rows, summary, _ = M.measure(g, CONFIG, xs, 0, ("forward",), attribution="share")
    first, square, measured, ys = [], [], [], []
    for x, a in xs:
        for p, q in zip(x, a):
            h, hh = F(float(p)) * F(float(q)), round_bf16(F(float(p)) * F(float(q)))
            first.append(2 * h * (hh - h))
            square.append(round_bf16(hh * hh) - hh * hh)
            measured.append(round_bf16(hh * hh) - h * h)
            ys.append(h * h)
    ny = _norm(ys)
    assert _share(rows, "first")["norm_rel"] == pytest.approx(_norm(first) / ny, rel=1e-9)
    assert _share(rows, "square")["norm_rel"] == pytest.approx(_norm(square) / ny, rel=1e-9)
    whole = _whole(rows)
    predicted = [p + q for p, q in zip(first, square)]
    assert whole["closure"] == pytest.approx(_norm(predicted) / _norm(measured), rel=1e-9)
    # What first order leaves out is (RN(x a) - x a)^2 per element: u^2 against u.
    misfit = _norm([p - m for p, m in zip(predicted, measured)]) / _norm(measured)
    assert whole["closure_misfit"] == pytest.approx(misfit, rel=1e-6) and misfit < 2 ** -7
    ranked = [e["node"] for e in summary["largest_share"]["output:out0"]]
    want = ["first", "square"] if _norm(first) > _norm(square) else ["square", "first"]
    assert ranked == want


def test_gradient_shares_of_a_product_then_a_square_match_exact_rationals():
    # h = x * a, y = h * h, cotangent c of y.  The emulated reverse sweep: the square's
    # pullback sends RN(c h_hat) twice (their sum 2 RN(c h_hat) is exact), the product's
    # sends dx_hat = RN(2 RN(c h_hat) a).  Node "first" owns its forward error d = h_hat - h,
    # which reaches dx = 2 c h a as 2 c a d, and its pullback's RN(g a) - g a (g = 2 RN(c
    # h_hat)); node "square" owns its pullback's errors, 2 a (RN(c h_hat) - c h_hat) at x.
    # The chain is linear in each error: the shares add up to the measured error exactly.
    g, xs = _product_then_square(7)
    rows, summary, _ = M.measure(g, CONFIG, xs, 0, ("forward", "gradient"))
    first, square, measured, dxs = [], [], [], []
    for s, (x, a) in enumerate(xs):
        c = tangent_directions(g, BF16, (x, a), 0, s)[0][0]
        for p, q, w in zip(x, a, c):
            p, q, w = F(float(p)), F(float(q)), F(float(w))
            hh = round_bf16(p * q)
            half = round_bf16(w * hh)
            dx_hat = round_bf16(2 * half * q)
            first.append(2 * w * q * (hh - p * q) + dx_hat - 2 * half * q)
            square.append(2 * q * (half - w * hh))
            measured.append(dx_hat - 2 * w * p * q * q)
            dxs.append(2 * w * p * q * q)
    assert sum(map(abs, measured)) > 0
    ndx = _norm(dxs)
    assert _share(rows, "first", "input:x")["norm_rel"] == pytest.approx(
        _norm(first) / ndx, rel=1e-9)
    assert _share(rows, "square", "input:x")["norm_rel"] == pytest.approx(
        _norm(square) / ndx, rel=1e-9)
    assert all(f + q == m for f, q, m in zip(first, square, measured))
    whole = next(r for r in rows if r["node"] == "input:x" and r["attribution"] == "propagated")
    assert whole["closure"] == pytest.approx(1.0, abs=1e-9)
    assert whole["closure_misfit"] < 1e-9


def test_a_linear_chain_closes_exactly_and_old_rows_keep_their_keys():
    # y = (x a + b) c is linear in each node's output: first order is exact, the shares add
    # up to the measured error element by element.
    g = chain_graph()
    rng = np.random.default_rng(3)
    xs = [list(formats.round_to(rng.uniform(0.5, 2.0, (4, 6)), BF16)) for _ in range(3)]
    rows, _, _ = M.measure(g, CONFIG, xs, 0, ("forward",))
    whole = _whole(rows)
    assert whole["closure"] == pytest.approx(1.0, abs=1e-12)
    assert whole["closure_misfit"] < 1e-12
    assert whole["closure_by_sample"] == pytest.approx([1.0] * 3, abs=1e-12)
    assert {r["node"] for r in rows if r["attribution"] == "share"} == {"mul", "add", "scale"}
    # none: no share rows, no closure; a share row's key names its output.
    plain, _, _ = M.measure(g, CONFIG, xs, 0, ("forward",), attribution="none")
    assert not [r for r in plain if r["attribution"] == "share"]
    assert _whole(plain)["closure"] is None
    assert len({row_fields.key(r) for r in rows}) == len(rows)


# ----- fault injection ---------------------------------------------------------------------------

def _fault_graph(n=16):
    """Six elementwise nodes on positive values (relative condition numbers near 1)."""
    g = routes.Graph(x=value((n,)), a=value((n,)), b=value((n,)), c=value((n,)))
    h = g.apply(routes.op("mul", shape=(n,)), g.input("x"), g.input("a"), name="m0")
    h = g.apply(routes.op("add", shape=(n,)), h, g.input("b"), name="a0")
    h = g.apply(routes.op("mul", shape=(n,)), h, g.input("c"), name="m1")
    h = g.apply(routes.op("sqrt", shape=(n,)), h, name="r0")
    h = g.apply(routes.op("mul", shape=(n,)), h, g.input("a"), name="m2")
    g.output(g.apply(routes.op("add", shape=(n,)), h, g.input("b"), name="a1"))
    return g


def _worse_by(target, k, fmt):
    """invoke_maps whose outputs of node op ``target`` under a format backend (not the
    reference) are moved up by k ulps of the format: a broken implementation."""
    real = graph_module.invoke_maps

    def invoke(op, args, xp, flags=None, read=True, keep=None):
        outs, pull, push = real(op, args, xp, flags, read, keep)
        if op is not target or xp.name.startswith("reference"):
            return outs, pull, push
        moved = tuple(formats.round_to(np.asarray(y, dtype=np.float64) +
                                       k * formats.ulp(np.asarray(y, dtype=np.float64), fmt),
                                       fmt) for y in outs)
        return moved, pull, push
    return invoke


def _named_first(monkeypatch, broken, stream, routes, route, target) -> int:
    """Of 50 trials, each breaking a random node of the fault graph by k = 1..64 ulps
    (``broken(op, k, fmt)``: an invoke_maps, which the graph's sweeps call, and through
    invoke_prepared its nodes alone), how many name that node first both by local error
    (``route``) and by its share of ``target``'s error."""
    g = _fault_graph()
    names = g.node_names
    hits = 0
    for trial in range(50):
        rng = np.random.default_rng([trial, stream])
        node, k = int(rng.integers(len(g.nodes))), int(rng.integers(1, 65))
        xs = [[formats.round_to(rng.uniform(0.5, 2.0, 16), BF16) for _ in range(4)]]
        maps = broken(g.nodes[node].op, k, BF16)
        with monkeypatch.context() as m:
            m.setattr(graph_module, "invoke_maps", maps)
            m.setattr(graph_module, "invoke_prepared",
                      lambda op, args, xp, flags=None, maps=maps: maps(op, args, xp, flags)[:2])
            rows, summary, _ = M.measure(g, CONFIG, xs, trial, routes)
        by_local = summary["largest_local"][route][0]["node"]
        by_share = summary["largest_share"][target][0]["node"]
        hits += by_local == names[node] and by_share == names[node]
    return hits


def test_a_node_made_k_ulps_worse_is_named_first_by_local_error_and_by_share(monkeypatch):
    assert _named_first(monkeypatch, _worse_by, 35, ("forward",), "forward",
                        "output:out0") >= 49


def _pullback_worse_by(target, k, fmt):
    """invoke_maps whose pullback of node op ``target`` under a format backend moves its
    contributions up by k ulps of the format: a broken gradient implementation."""
    real = graph_module.invoke_maps

    def invoke(op, args, xp, flags=None, read=True, keep=None):
        outs, pull, push = real(op, args, xp, flags, read, keep)
        if op is not target or xp.name.startswith("reference") or pull is None:
            return outs, pull, push

        def moved(cotangents):
            return tuple(None if c is None else formats.round_to(
                np.asarray(c, dtype=np.float64) +
                k * formats.ulp(np.asarray(c, dtype=np.float64), fmt), fmt)
                for c in pull(cotangents))
        return outs, moved, push
    return invoke


def test_a_pullback_made_k_ulps_worse_is_named_first_by_local_error_and_by_share(monkeypatch):
    # The gradient of x passes through every node's pullback (x -> m0 -> ... -> a1).
    assert _named_first(monkeypatch, _pullback_worse_by, 36, ("forward", "gradient"),
                        "gradient", "input:x") >= 49


# ----- closure on an MLP -------------------------------------------------------------------------

def mlp(batch=8, widths=(8, 16, 16, 4)):
    """linear, tanh, linear, tanh, linear."""
    ports = {"x": value((batch, widths[0]))}
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        ports[f"w{i}"], ports[f"b{i}"] = value((b, a)), value((b,))
    g = routes.Graph(**ports)
    h = g.input("x")
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        h = g.apply(routes.op("linear", batch=(batch,), in_features=a, out_features=b),
                    g.input(f"w{i}"), g.input(f"b{i}"), h, name=f"fc{i}")
        if i < len(widths) - 2:
            h = g.apply(routes.op("tanh", shape=(batch, b)), h, name=f"act{i}")
    return g.output(h)


def mlp_samples(g, n, seed):
    """Inputs N(0, 1), weights N(0, 1/fan_in), biases N(0, 1/fan_in)."""
    rng = np.random.default_rng(seed)
    return [[formats.round_to(rng.standard_normal(p.shape) *
                              (1.0 if name == "x" else p.shape[-1] ** -0.5), BF16)
             for name, p in zip(g.input_names, g.inputs)] for _ in range(n)]


def test_the_shares_of_an_mlp_close_on_nine_samples_of_ten_in_bfloat16():
    g = mlp()
    rows, _, _ = M.measure(g, CONFIG, mlp_samples(g, 20, 0), 0, ("forward",))
    whole = _whole(rows)
    within = [abs(c - 1) <= A.CLOSURE_TOLERANCE for c in whole["closure_by_sample"]]
    assert sum(within) >= 0.9 * len(within)
    assert abs(whole["closure"] - 1) <= 0.1 and whole["closure_misfit"] < 0.1
    assert "not linear in its rounding" not in (whole["reason"] or "")


def test_the_shares_of_the_mlp_gradients_close_in_bfloat16():
    # Every parameter's gradient: the forward nodes' errors carried through the reverse
    # sweep (second order of the model), the pullbacks' errors and the summations'.
    g = mlp()
    rows, summary, _ = M.measure(g, CONFIG, mlp_samples(g, 10, 1), 0,
                                 ("forward", "gradient"))
    grads = [r for r in rows if r["route"] == "gradient" and r["node_index"] is None
             and r["attribution"] == "propagated"]
    assert {r["node"] for r in grads} == {f"input:{n}" for n in g.input_names}
    for r in grads:
        within = [abs(c - 1) <= A.CLOSURE_TOLERANCE for c in r["closure_by_sample"]]
        assert sum(within) >= 9, r["node"]
        assert r["closure_misfit"] < 0.1, r["node"]
    assert set(summary["largest_share"]) == {"output:out0"} | {r["node"] for r in grads}

"""The graph IR and its tape on a small network built from registered operators:

    h = relu(x * w1 + b1);  z = h * w2;  m = max(z, clamp(x, lo, hi));  outputs (m, exp(m))

(an MLP with diagonal weights: matmul arrives with the product family).  x feeds three nodes,
so its gradient accumulates three contributions.  The graph's gradient and tangent are checked
against 256-bit central differences of the whole graph, and the backward sweep against the
forward sweep through the adjoint identity."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats, numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import ports as P
from conftest import CTX, SCRATCH, central_difference, mp, pairing, scratch_operator

S = (3,)


def network(with_exp: bool = True) -> routes.Graph:
    g = routes.Graph(x=P.value(S), w1=P.value(S), b1=P.value(S), w2=P.value(S),
                     lo=P.frozen(), hi=P.frozen())
    x = g.input("x")
    h = g.apply(routes.op("relu", shape=S),
                g.apply(routes.op("add", shape=S),
                        g.apply(routes.op("mul", shape=S), x, g.input("w1")), g.input("b1")))
    z = g.apply(routes.op("mul", shape=S), h, g.input("w2"))
    c = g.apply(routes.op("clamp", shape=S), x, g.input("lo"), g.input("hi"))
    m = g.apply(routes.op("max", shape=S), z, c)
    if not with_exp:
        return g.output(m)
    return g.output(m, g.apply(routes.op("exp", shape=S), m))


# Away from every kink: relu arguments 0.65, -1.26, 0.86; max picks z, z, clamp; clamp inside,
# below, inside.
INPUTS = [np.array([0.3, -1.7, 0.9]), np.array([1.5, 0.8, -0.6]), np.array([0.2, 0.1, 1.4]),
          np.array([2.0, -1.0, 0.5]), np.array(-1.0), np.array(1.0)]
TANGENTS = [np.array([0.5, -0.25, 1.0]), np.array([-1.0, 0.5, 0.25]),
            np.array([0.125, 1.0, -0.5]), np.array([0.75, -0.5, 1.0]), None, None]
COTANGENTS = [np.array([1.0, -0.5, 0.25]), np.array([0.5, 2.0, -1.0])]


def test_forward_values_are_the_composition():
    out = network().run(INPUTS, numerics.native("float64"))
    x, w1, b1, w2 = INPUTS[:4]
    m = np.maximum(np.maximum(x * w1 + b1, 0) * w2, np.clip(x, -1, 1))
    assert np.array_equal(out[0], m) and np.array_equal(out[1], np.exp(m))


def test_tangent_sweep_matches_central_difference():
    xp = numerics.reference(256)
    rule = network().rule(xp)
    cd = central_difference(rule, xp, INPUTS, TANGENTS)
    for tangent, want in zip(rule.jvp(INPUTS, TANGENTS), cd):
        for a, b in zip(np.ravel(tangent), want):
            assert abs(mp(a) - b) <= CTX.ldexp(1, -100) * (1 + abs(b))


def test_gradient_sweep_matches_central_difference():
    # <c, dG(x)[t]> from a central difference against <t, grad> from the reverse sweep.
    xp = numerics.reference(256)
    rule = network().rule(xp)
    grads = rule.backward(INPUTS, COTANGENTS)
    assert grads[4] is None and grads[5] is None            # frozen: no gradient
    cd = central_difference(rule, xp, INPUTS, TANGENTS)
    lhs, _ = pairing(COTANGENTS, cd)
    assert abs(lhs - pairing(TANGENTS, grads)[0]) <= CTX.ldexp(1, -100) * (1 + abs(lhs))


def test_backward_sweep_is_adjoint_of_tangent_sweep_exactly():
    rule = network(with_exp=False).rule(numerics.exact())     # exp has no rational value
    lhs, _ = pairing(rule.jvp(INPUTS, TANGENTS), COTANGENTS[:1])
    assert lhs == pairing(TANGENTS, rule.backward(INPUTS, COTANGENTS[:1]))[0]


def test_gradient_of_x_accumulates_its_three_uses():
    rule = network().rule(numerics.native("float64"))
    gx = rule.backward(INPUTS, [np.ones(3), np.zeros(3)])[0]
    # element 0: max takes z = relu(.) * w2 -> w1 * w2 = 3; element 1: relu is off and clamp
    # loses -> 0; element 2: max takes clamp(x) -> 1.
    assert np.array_equal(gx, [3.0, 0.0, 1.0])


def test_prepare_gives_none_where_no_gradient_is_needed():
    rule = network().rule(numerics.native("float64"))
    dense = rule.backward(INPUTS, COTANGENTS)
    outs, pullback = rule.prepare(INPUTS, (False, True, False, False, False, False))
    assert np.array_equal(outs[1], rule.forward(INPUTS)[1])
    grads = pullback(COTANGENTS)
    assert [g is None for g in grads] == [True, False, True, True, True, True]
    assert np.array_equal(grads[1], dense[1])


def test_an_unused_input_gets_a_zero_gradient_and_an_input_may_be_an_output():
    g = routes.Graph(x=P.value(S), unused=P.value(S))
    g.output(g.apply(routes.op("exp", shape=S), g.input("x")), g.input("x"))
    grads = g.rule(numerics.native("float64")).backward(
        [np.zeros(3), np.ones(3)], [np.ones(3), np.full(3, 2.0)])
    assert np.array_equal(grads[0], [3.0, 3.0, 3.0]) and np.array_equal(grads[1], np.zeros(3))


def test_build_errors_name_the_node_and_argument():
    g = routes.Graph(x=P.value(S), k=P.index((3,), S))
    with pytest.raises(routes.RouteError, match=r"^graph node 0 \(relu\): argument x expects "
                                                r"value\[2\] but input 0 is value\[3\]$"):
        g.apply(routes.op("relu", shape=(2,)), g.input("x"))
    with pytest.raises(routes.RouteError, match=r"^graph node 0 \(relu\): argument x expects "
                                                r"value\[3\] but input 1 is index<3>\[3\]$"):
        g.apply(routes.op("relu", shape=S), g.input("k"))
    with pytest.raises(routes.RouteError, match=r"expects 2 arguments \(x, y\) \(got 1\)"):
        g.apply(routes.op("add", shape=S), g.input("x"))
    with pytest.raises(routes.RouteError, match="must name a graph input or an earlier node"):
        g.apply(routes.op("relu", shape=S), routes.Ref(0, 0))
    with pytest.raises(routes.RouteError, match="no input 'y'"):
        g.input("y")


def test_run_errors_name_the_node():
    g = network()
    bad = INPUTS[:4] + [np.array(1.0), np.array(-1.0)]
    with pytest.raises(routes.RouteError, match=r"^graph node 4 \(clamp\): clamp: lo must not "
                                                r"exceed hi \(got lo 1 > hi -1\)$"):
        g.run(bad, numerics.native("float64"))
    with pytest.raises(routes.RouteError, match=r"^graph: input x expects value\[3\] "
                                                r"\(got shape \[2\]\)$"):
        g.run([np.zeros(2)] + INPUTS[1:], numerics.native("float64"))


def test_graph_has_no_rule_where_a_node_lacks_its_capability():
    with scratch_operator():
        g = routes.Graph(x=P.value((2, 3)), i=P.index((3,), (2,)))
        g.output(g.apply(routes.op(SCRATCH, mode="erf"), g.input("x"), g.input("i")))
        assert g.rule(numerics.native("float64")) is None
        assert g.rule(numerics.reference(64)) is not None


def test_two_arguments_naming_one_value_both_contribute():
    # d(x * x)/dx = 2x: the pullback's two contributions to x accumulate (the alias rule).
    g = routes.Graph(x=P.value(S))
    g.output(g.apply(routes.op("mul", shape=S), g.input("x"), g.input("x")))
    rule = g.rule(numerics.exact())
    x = np.array([3.0, -0.5, 0.0])
    assert rule.backward([x], [np.ones(3)])[0].tolist() == [6, -1, 0]
    assert rule.jvp([x], [np.ones(3)])[0].tolist() == [6, -1, 0]


def test_a_constant_is_read_but_never_an_input_nor_a_gradient_target():
    """y = relu(x * c) + c with a frozen constant c: forward, the gradient of x only, and
    the tangent, against the values worked out by hand (exact in binary64)."""
    x_port = P.value((3,))
    g = routes.Graph(x=x_port)
    c = g.constant(np.array([2.0, -0.5, 4.0]), name="c")
    h = g.apply(routes.op("mul", shape=(3,)), g.input("x"), c, name="h")
    r = g.apply(routes.op("relu", shape=(3,)), h)
    y = g.apply(routes.op("add", shape=(3,)), r, c)
    g.output(y)
    assert g.node_names[0] == "h" and g.constant_names == ["c"]
    rule = g.rule(numerics.emulated("binary64"))
    x = np.array([1.5, 3.0, -1.0])
    (out,) = rule.forward((x,))
    assert out.tolist() == [5.0, -0.5, 4.0]           # relu(3, -1.5, -4) + c
    (gx,) = rule.backward((x,), (np.array([1.0, 1.0, 1.0]),))
    assert gx.tolist() == [2.0, 0.0, 0.0]             # c where x * c > 0
    (tan,) = rule.jvp((x,), (np.array([1.0, 1.0, 1.0]),))
    assert tan.tolist() == [2.0, 0.0, 0.0]
    with pytest.raises(routes.RouteError, match="needs an index or word port"):
        g.constant(np.array([1, 2]))


def test_the_forward_mode_sweep_passes_a_comparison_that_has_no_tangent():
    # y = x * a where x > 0, else x: the comparison's Boolean output carries no tangent and
    # has no forward-mode rule; the sweep evaluates it and goes on.  By hand: dy = a dx +
    # x da where x > 0, else dx.
    n = 4
    g = routes.Graph(x=P.value((n,)), a=P.value((n,)))
    mask = g.apply(routes.op("gt", shape=(n,)), g.input("x"), g.constant(np.zeros(n)))
    prod = g.apply(routes.op("mul", shape=(n,)), g.input("x"), g.input("a"))
    g.output(g.apply(routes.op("select", shape=(n,)), mask, prod, g.input("x")))
    x, a = np.array([-1.0, 2.0, 0.5, -3.0]), np.array([3.0, 5.0, -2.0, 7.0])
    dx, da = np.array([1.0, 1.0, 2.0, 0.5]), np.array([0.25, 1.0, 1.0, 1.0])
    for backend in (numerics.reference(80), numerics.emulated(formats.get("binary64"))):
        ys, ts = g.rule(backend).linearize([x, a], [dx, da])
        assert [float(v) for v in np.asarray(ys[0]).reshape(-1)] == [-1.0, 10.0, -1.0, -3.0]
        assert [float(v) for v in np.asarray(ts[0]).reshape(-1)] == [1.0, 7.0, -3.5, 0.5]


def test_routes_of_one_sweep_match_central_differences():
    # GraphRule.routes: one forward sweep for the three routes; the tangents come from each
    # node's pushforward at the sweep's values, the gradients from its tape.
    xp = numerics.reference(256)
    rule = network().rule(xp)
    got = rule.routes(INPUTS, ["forward", "tangent", "gradient"], TANGENTS, COTANGENTS)
    cd = central_difference(rule, xp, INPUTS, TANGENTS)
    for tangent, want in zip(got["tangent"], cd):
        for a, b in zip(np.ravel(tangent), want):
            assert abs(mp(a) - b) <= CTX.ldexp(1, -100) * (1 + abs(b))
    lhs, _ = pairing(COTANGENTS, cd)
    assert abs(lhs - pairing(TANGENTS, got["gradient"])[0]) <= CTX.ldexp(1, -100) * (1 + abs(lhs))
    x, w1, b1, w2 = INPUTS[:4]
    m = np.maximum(np.maximum(x * w1 + b1, 0) * w2, np.clip(x, -1, 1))
    assert np.allclose([float(v) for v in got["forward"][0]], m, rtol=1e-15, atol=0)
    bad = rule.routes(INPUTS, ["sideways"], TANGENTS, COTANGENTS)["sideways"]
    assert isinstance(bad, routes.RouteError) and "unknown route 'sideways'" in str(bad)


def test_an_operator_instance_is_its_one_node_graph():
    # exp at x: value e^x, tangent e^x t, gradient e^x c, against mpmath at 256 bits.
    g = routes.one_node(routes.op("exp", shape=S))
    assert g.input_names == ("x",) and len(g.nodes) == 1
    x, t, c = np.array([0.5, -2.0, 3.25]), np.array([1.0, -0.5, 2.0]), np.array([0.25, 4.0, -1.0])
    got = g.rule(numerics.reference(256)).routes([x], ["forward", "tangent", "gradient"],
                                                 [t], [c])
    with CTX.workprec(256):
        for k in range(3):
            e = CTX.exp(CTX.mpf(float(x[k])))
            for route, want in (("forward", e), ("tangent", e * float(t[k])),
                                ("gradient", e * float(c[k]))):
                assert abs(mp(got[route][0][k]) - want) <= CTX.ldexp(1, -240) * abs(want)
    # An operator's own message, not wrapped in the graph's node label; routes, as
    # Rule.routes, leaves the value-domain check to the caller (min(max(x, 1), -1) = -1).
    clamp = routes.one_node(routes.op("clamp", shape=S))
    bad = [x, np.array(1.0), np.array(-1.0)]
    with pytest.raises(routes.RouteError, match=r"^clamp: lo must not exceed hi"):
        clamp.run(bad, numerics.native("float64"))
    got = clamp.rule(numerics.native("float64")).routes(bad, ["forward"])["forward"][0]
    assert got.tolist() == np.minimum(np.maximum(x, 1.0), -1.0).tolist()


class _CountingReads:
    """A float64 backend that counts its reads (``asarray``)."""

    def __init__(self):
        self.base, self.reads = numerics.native("float64"), 0

    def __getattr__(self, name):
        return getattr(self.base, name)

    def asarray(self, x):
        self.reads += 1
        return self.base.asarray(x)


def test_a_sweep_reads_each_input_and_cotangent_once():
    # A stochastically rounding backend draws bits at every read: the nodes take the graph's
    # values as they are (7 nodes, 6 inputs, of which 4 scalar reads plus 2 frozen, and 2
    # cotangents seeded).
    xp = _CountingReads()
    rule = routes.graph.GraphRule(network(), xp)
    rule.forward(INPUTS)
    assert xp.reads == 6
    xp.reads = 0
    rule.routes(INPUTS, ["forward", "gradient"], TANGENTS, COTANGENTS)
    assert xp.reads == 6 + 2


class _Held:
    """A trace's store (GraphRule.trace): keeps a read-only copy of each array it is given
    and answers with it, then writes NaN over the array it was given where it can (a sweep
    that went on reading an array it stored would compute with NaN: the caller's inputs
    too, which the forward-mode sweep reads again); records what each step said it had
    read."""

    def __init__(self):
        self.held, self.read = {}, []

    def put(self, arrays):
        out = []
        for a in arrays:
            if isinstance(a, np.ndarray) and id(a) not in self.held:
                a = a.copy()
                a.flags.writeable = False
                self.held[id(a)] = a
            out.append(a)
        for a in arrays:
            if isinstance(a, np.ndarray) and a.flags.writeable and id(a) not in self.held:
                if a.dtype.names:
                    a["hi"], a["lo"] = np.nan, np.nan
                elif a.dtype.kind == "f":
                    a[...] = np.nan
        return out

    def done(self, arrays):
        self.read.extend(id(a) for a in arrays if a is not None)


def _parts(tr):
    return [(kind, key, np.asarray(v)) for kind in ("values", "cotangents", "contributions",
                                                    "tangents")
            for key, v in getattr(tr, kind).items()]


@pytest.mark.parametrize("backend", ["bfloat16", "double_double"])
def test_a_stored_trace_holds_the_stored_arrays_and_the_same_numbers(backend):
    # Every array of the trace is one the store returned, with the bits of a trace made
    # without a store, though the store wrote NaN over what it was given: the pullbacks
    # read the stored copies of their arguments, results and intermediates.
    xp = numerics.emulated(backend) if backend == "bfloat16" else numerics.double_double()
    rule = routes.graph.GraphRule(network(), xp)
    xs = [xp.asarray(np.copy(x)) for x in INPUTS[:4]] + [np.copy(x) for x in INPUTS[4:]]
    want = [(k, key, np.copy(a)) for k, key, a in _parts(rule.trace(xs, COTANGENTS, TANGENTS))]
    store = _Held()
    stored = rule.trace(xs, COTANGENTS, TANGENTS, store=store)
    got = _parts(stored)
    assert [(k, key) for k, key, _ in got] == [(k, key) for k, key, _ in want]
    assert all(a.dtype == b.dtype and a.tobytes() == b.tobytes()
               for (_, _, a), (_, _, b) in zip(got, want))
    arrays = [v for kind in ("values", "cotangents", "contributions", "tangents")
              for v in getattr(stored, kind).values() if isinstance(v, np.ndarray)]
    assert arrays and all(store.held.get(id(a)) is a for a in arrays)
    # each node's step said which stored arrays it read: the arguments of the 7 nodes
    assert {id(stored.values[r]) for n in network().nodes for r in n.args} <= set(store.read)


def test_a_stored_reverse_sweep_matches_central_differences():
    xp = numerics.reference(256)
    rule = routes.graph.GraphRule(network(), xp)
    tr = rule.trace([x.copy() if isinstance(x, np.ndarray) else x for x in INPUTS],
                    COTANGENTS, store=_Held())             # (the store poisons its inputs)
    grads = [tr.cotangents.get(routes.graph.Ref(-1, i)) for i in range(4)] + [None, None]
    grads = [np.zeros(S) if g is None else g for g in grads[:4]] + [None, None]
    lhs, _ = pairing(COTANGENTS, central_difference(rule, xp, INPUTS, TANGENTS))
    assert abs(lhs - pairing(TANGENTS, grads)[0]) <= CTX.ldexp(1, -100) * (1 + abs(lhs))

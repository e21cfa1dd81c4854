"""Where the operator table follows the spec's words on decoding, the tape and forward mode:
decode decides the proof attributes but not Op.check; the rule's contribution order and
alias rule, read by the graph's reverse sweep; scatter's and decodeIndex's forward mode "at
some attributes".  Each test quotes the sentence it implements.  Expected values are exact
derivatives (rationals) or hand-rounded bfloat16 sums (binary64 arithmetic, then
formats.round_to), never the code under test."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import ports as P
from roundoff_coverage.routes.rules import Rule

F64 = numerics.native("float64")


def refused(fn, *args) -> str:
    with pytest.raises(routes.RouteError) as info:
        fn(*args)
    return str(info.value)


# ----- decode does not run Op.check -----------------------------------------------------------
@pytest.mark.parametrize("name,attrs", [
    ("pool", {"kernel": (0,)}),
    ("pool", {"stride": (0,)}),
    ("pool", {"stride": (1, 1)}),
    ("pool", {"padding": (2,)}),
    ("smoothMaxPool", {"kernel": (0,)}),
])
def test_a_decoded_pooling_with_an_ill_formed_window_is_an_operator_value(name, attrs):
    """Spec: "Op.decode doesn't run Op.check: a decoded pooling with an ill-formed window is
    an operator value, which a recorder rejects before reading its input."  invoke and the
    graph refuse it at their attribute stage with Op.check's message, before any input is
    read (here the inputs are not even arrays)."""
    o = routes.op(name, **attrs)
    message = o.problem()
    assert message and message.startswith(f"{name}: ")
    assert refused(o.check) == message
    back = routes.decode(routes.encode(o))
    assert back == o and back.problem() == message
    assert refused(routes.invoke, back, ["not", "read"], F64) == message
    assert refused(routes.invoke_prepared, back, [object()], F64, [True]) == message
    g = routes.Graph(x=P.value((1, 2, 5)), beta=P.frozen())
    args = [g.input("x")] + ([g.input("beta")] if name == "smoothMaxPool" else [])
    assert refused(g.apply, back, *args) == message
    assert g.nodes == []


def test_the_spec_pooling_example_decodes_and_is_refused_with_its_message():
    """Spec: a max pool with a zero kernel extent gives Op.check's error "max_pool requires
    kernel_size > 0 on every pooled axis"; here the check's message (the house spelling)
    is exactly op().check()'s, and the decoded value's ports, which need a window, are
    refused with it too rather than a Python error."""
    o = routes.op("pool", shape=(1, 4), kernel=(0,), stride=(1,), padding=(0,),
                  dilation=(1,))
    back = routes.decode(routes.encode(o))
    assert refused(back.check) == "pool: kernel must be > 0 on every pooled axis (got [0])"
    zero_stride = routes.decode(routes.encode(routes.op("pool", stride=(0,))))
    assert refused(lambda: zero_stride.outputs) == \
        "pool: stride must be > 0 on every pooled axis (got [0])"


def test_decode_still_decides_the_proof_attributes():
    """Spec: "Op.decode checks every attribute and decides every proof attribute, so a
    record whose axis is outside the rank names no operator."  A pooling's pooled axes are
    axes of its shape: four kernel entries on a rank-3 shape name no operator."""
    o = routes.op("pool", kernel=(2, 2, 2, 2), stride=(1,) * 4, padding=(0,) * 4,
                  dilation=(1,) * 4)
    with pytest.raises(routes.DecodeError) as info:
        routes.decode(routes.encode(o))
    assert str(info.value) == ("decode: pool: kernel has 4 entries, more than the 3 spatial "
                               "axes of shape [1, 2, 5]")
    assert str(info.value) == f"decode: {o.problem()}"


# ----- the rule's contribution order and alias rule -------------------------------------------
def _aliased(name, backend, x, g):
    """The tape's gradient at x of name(x, x) (both inputs name one graph input)."""
    graph = routes.Graph(x=P.value((len(x),)))
    xr = graph.input("x")
    graph.output(graph.apply(routes.op(name, shape=(len(x),)), xr, xr))
    _, pullback = graph.rule(backend).prepare([x], [True])
    return pullback([g])[0]


X = [Fraction(3, 7), Fraction(-5, 2), Fraction(1, 3)]
G = [Fraction(5, 11), Fraction(2), Fraction(-7, 9)]


@pytest.mark.parametrize("name,derivative", [
    ("mul", lambda x, g: 2 * x * g),          # d/dx x*x = 2x
    ("sub", lambda x, g: Fraction(0)),        # x - x = 0
    ("div", lambda x, g: Fraction(0)),        # x / x = 1
])
def test_two_inputs_that_name_one_node_sum_their_contributions_exactly(name, derivative):
    """Spec: a rule holds "the order in which a recorder emits the contributions, an alias
    rule for two inputs that name one node".  Through the tape over the rationals, f(x, x)
    receives both contributions: the exact derivative of x*x, x - x and x / x."""
    xp = numerics.exact()
    got = _aliased(name, xp, np.array(X, dtype=object), np.array(G, dtype=object))
    assert [Fraction(v) for v in np.ravel(got)] == [derivative(x, g) for x, g in zip(X, G)]


@pytest.mark.parametrize("fmt", ["bfloat16", "binary16", "float8_e4m3fn"])
def test_aliased_inputs_in_a_rounding_format(fmt):
    """The same through the tape under numerics.emulated: the two contributions of mul(x, x)
    are g x twice, so their sum 2 fl(g x) is exact; sub's are g and -g (0); div's are
    fl(g / x) and -fl(fl(g * 1) / x), equal and opposite (0).  Two terms commute in IEEE
    arithmetic: the order shows with three (next test)."""
    xp = numerics.emulated(fmt)
    x = formats.round_to(np.array([0.75, -1.25, 3.0]), fmt)
    g = formats.round_to(np.array([0.5, 1.5, -0.625]), fmt)
    gx = formats.round_to(g * x, fmt)
    for name, want in (("mul", 2 * gx), ("sub", np.zeros(3)), ("div", np.zeros(3))):
        got = np.asarray(xp.to_float64(_aliased(name, xp, x, g)), dtype=np.float64)
        assert np.array_equal(got, want), (name, got, want)


def test_the_reverse_sweep_adds_contributions_in_the_stated_order():
    """The order, stated in routes/rules.py: nodes from the last recorded to the first, each
    node's contributions in input order (Rule.order), each added to what the value holds
    with one rounded addition, the held sum on the left (Rule.alias).  y = x * x + x at
    x = 1 + 2**-7, g = 1 in bfloat16 (8 bits): add's contribution 1 first, then mul's
    x and x: (1 + x) + x = 2 + 2**-7 -> 2 (tie, even), then 3 + 2**-7 -> 3.  The other
    order (x + x) + 1 = 3 + 2**-6 is exact, as is the derivative 2x + 1."""
    graph = routes.Graph(x=P.value(()))
    x = graph.input("x")
    sq = graph.apply(routes.op("mul", shape=()), x, x)
    graph.output(graph.apply(routes.op("add", shape=()), sq, x))
    xv = 1 + 2.0 ** -7
    bf16 = numerics.emulated("bfloat16")
    _, pullback = graph.rule(bf16).prepare([np.array(xv)], [True])
    got = float(bf16.to_float64(pullback([np.array(1.0)])[0]))

    def rnd(v):
        return float(formats.round_to(np.array(v), "bfloat16"))
    stated = rnd(rnd(1 + xv) + xv)
    other = rnd(rnd(xv + xv) + 1)
    assert (got, stated, other) == (3.0, 3.0, 3 + 2.0 ** -6)
    exact = graph.rule(numerics.exact()).prepare([np.array(Fraction(xv))], [True])[1]
    assert Fraction(exact([np.array(Fraction(1))])[0][()]) == 2 * Fraction(xv) + 1


def test_the_reverse_sweep_reads_the_rules_order_and_alias_rule(monkeypatch):
    """The graph's reverse sweep takes the order and the alias rule from the rule: with the
    order reversed, mul(x, y)'s contribution to y is emitted before x's."""
    calls = []

    def alias(self, held, incoming):
        calls.append((self.op.name, float(np.ravel(incoming)[0])))
        return incoming if held is None else self.xp.add(held, incoming)
    monkeypatch.setattr(Rule, "alias", alias)
    graph = routes.Graph(x=P.value((1,)), y=P.value((1,)))
    graph.output(graph.apply(routes.op("mul", shape=(1,)), graph.input("x"), graph.input("y")))
    pull = graph.rule(F64).prepare([np.array([2.0]), np.array([3.0])], [True, True])[1]
    assert [float(v[0]) for v in pull([np.array([1.0])])] == [3.0, 2.0]
    assert calls == [("mul", 3.0), ("mul", 2.0)]            # x's (g y), then y's (x g)
    calls.clear()
    monkeypatch.setattr(Rule, "order", property(lambda self: (1, 0)))
    pull([np.array([1.0])])
    assert calls == [("mul", 2.0), ("mul", 3.0)]


# ----- forward mode at some attributes ---------------------------------------------------------
def test_scatter_has_a_forward_mode_at_some_attributes():
    """Spec, Gradient column of scatter: "no certificate; forward mode at some attributes"
    ("A cell says whether its property holds at every attribute, at some or at none").
    replace, sum and prod have one (and so do word and Boolean elements, with no tangent);
    max and min of scalars do not: where sources tie there is no linear tangent map."""
    have = {mode: routes.op("scatter", mode=mode).has_jvp for mode in
            ("replace", "sum", "prod", "max", "min")}
    assert have == {"replace": True, "sum": True, "prod": True, "max": False, "min": False}
    assert routes.op("scatter", mode="max", element="int8").has_jvp
    assert routes.op("scatter", element="bool").has_jvp
    o = routes.op("scatter", mode="max", index_shape=(2,))
    rule = o.rule(F64)
    xs = [np.array([1.0, 0.0, 2.0]), np.array([0, 0]), np.array([1.0, 0.5])]
    assert not rule.has_jvp
    message = refused(rule.jvp, xs, [None, None, None])
    assert message.startswith("scatter: no forward mode at these attributes: mode max is not "
                              "differentiable where sources tie")
    assert o.decl.jvp is None                # every reader of the declaration sees it
    direct = routes.declaration("scatter").jvp
    assert refused(direct, F64, o.attrs, xs, None, None).startswith("scatter: no forward")
    g = routes.Graph(x=P.value((3,)), i=o.inputs[1], u=P.value((2,)))
    g.output(g.apply(o, g.input("x"), g.input("i"), g.input("u")))
    assert refused(g.rule(F64).jvp, xs, [None, None, None]).startswith(
        "graph node 0 (scatter): scatter: no forward mode")
    gx, _, gu = rule.backward(xs, [np.array([1.0, 1.0, 1.0])])     # the pullback stays
    assert gx.tolist() == [0.5, 1.0, 1.0] and gu.tolist() == [0.5, 0.0]


def test_scatter_sum_forward_mode_is_the_operator_on_the_tangents():
    """Where scatter has a forward mode by linearity (sum), its tangent is scatter itself
    applied to the tangents (over the rationals: an oracle that can disagree)."""
    o = routes.op("scatter", mode="sum", index_shape=(3,))
    rule = o.rule(numerics.exact())
    idx = np.array([2, 0, 2])
    xs = [np.array([Fraction(1, 3), Fraction(2), Fraction(-1)], dtype=object), idx,
          np.array([Fraction(5), Fraction(1, 7), Fraction(3, 2)], dtype=object)]
    tx = np.array([Fraction(1, 2), Fraction(-3), Fraction(4)], dtype=object)
    tu = np.array([Fraction(2, 9), Fraction(1), Fraction(-5, 3)], dtype=object)
    want = tx.copy()
    for j, target in enumerate(idx):
        want[target] += tu[j]
    got = rule.jvp(xs, [tx, None, tu])[0]
    assert [Fraction(v) for v in got] == list(want)


def test_decode_index_has_a_forward_mode_wherever_it_has_a_rule():
    """Spec, decodeIndex: Rule "every scalar; no rule at some attributes", Gradient "no value
    input; forward mode at some attributes": the forward mode exists where the rule does
    (not at a zero bound, which admits no index)."""
    assert routes.op("decodeIndex", bounds=(0,)).rule(F64) is None
    for attrs in routes.declaration("decodeIndex").examples.values():
        o = routes.op("decodeIndex", **attrs)
        assert o.rule(F64) is not None and o.has_jvp, attrs


def test_a_decoded_reduce_with_repeated_axes_is_refused_by_invoke_not_by_decode():
    """Spec: "Op.check checks the attributes that the types do not, such as the window of a
    pooling ... and distinct axes for reduce and mean" and "Op.decode doesn't run Op.check":
    a record of reduce or mean with a repeated axis decodes; invoke refuses it with the
    check's message before reading its input; an axis beyond the rank is a proof attribute,
    which decode itself refuses."""
    for name, message in (("reduce", "reduce: axes must be distinct (got [1, 1])"),
                          ("mean", "mean: axes must be distinct (got [1, 1])")):
        good = routes.op(name, shape=(2, 3), axes=(1,))
        record = json.loads(json.dumps(routes.encode(good)))
        for field in record["fields"]:
            if field[1] == [1]:
                field[1] = [1, 1]
        o = routes.decode(record)
        assert o.problem() == message
        with pytest.raises(routes.RouteError, match=re.escape(message)):
            routes.invoke(o, [np.ones((2, 3))], numerics.reference(60))
        for field in record["fields"]:
            if field[1] == [1, 1]:
                field[1] = [2]
        with pytest.raises(routes.DecodeError, match="axes must be < rank 2"):
            routes.decode(record)

"""invoke's staged checks (attributes, each input against its port, the rule's existence,
validate, then prepare), the attribute types, ports, and capabilities: every failure is one
RouteError line naming the operator and the argument.  ``scratch_operator`` (tests/conftest.py,
with the ``scratch`` fixture) declares a temporary operator with an axis checked against the
rank, an index port and a mode that needs the Erf capability (the six worked examples have
none of these)."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import attributes as A
from roundoff_coverage.routes import ports as P
from roundoff_coverage.routes.registry import define, withdraw
from conftest import SCRATCH

F64 = numerics.native("float64")


def err(fn, *args, **kwargs) -> str:
    with pytest.raises(routes.RouteError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# ----- operators and attributes ---------------------------------------------------------------
def test_unknown_operator_names_close_matches():
    assert err(routes.op, "maxx").startswith("unknown operator 'maxx' (close matches: max")


def test_unknown_attribute_is_named():
    assert err(routes.op, "relu", axis=1) == "relu: unknown attribute 'axis' (attributes: shape)"


@pytest.mark.parametrize("attrs,text", [
    ({"shape": (-1,)}, "relu: shape must be a list of non-negative integers (got (-1,))"),
    ({"shape": "3"}, "relu: shape must be a list of non-negative integers (got '3')"),
    ({"shape": (2.0,)}, "relu: shape must be a list of non-negative integers (got (2.0,))"),
    ({"shape": (True,)}, "relu: shape must be a list of non-negative integers (got (True,))"),
])
def test_attribute_types_are_refused_with_the_expected_type(attrs, text):
    assert err(routes.op, "relu", **attrs) == text


def test_enum_attribute_lists_its_choices():
    assert err(routes.op, "add", element="int7").startswith(
        "add: element must be one of scalar, bool, int8")


def test_nat_and_bool_attributes(scratch):
    assert err(routes.op, SCRATCH, axis=-1) == \
        f"{SCRATCH}: axis must be an integer >= 0 (got -1)"
    assert err(routes.op, SCRATCH, axis=True).startswith(f"{SCRATCH}: axis must be an integer")
    flag = A.flag("descending")
    assert flag.coerce(np.True_, "sort") is True
    assert err(flag.coerce, 1, "sort") == "sort: descending must be true or false (got 1)"


def test_attributes_are_canonical_and_ports_follow_them():
    o = routes.op("clamp", shape=[np.int64(2), 3])
    assert o.attrs.shape == (2, 3) and o.attrs["shape"] == (2, 3)
    assert [str(p) for p in o.inputs] == ["value[2,3]", "frozen[]", "frozen[]"]
    assert o.input_names == ("x", "lo", "hi") and str(o.outputs[0]) == "value[2,3]"
    assert routes.op("add", element="int8").inputs == (P.integer(True, 8, (3,)),) * 2
    assert routes.op("max", element="bool").outputs == (P.boolean((3,)),)


def test_check_names_operator_and_argument(scratch):
    o = routes.op(SCRATCH, shape=(2, 3), axis=5)
    assert o.problem() == f"{SCRATCH}: axis must be < rank 2 (got 5)"
    assert err(o.check) == f"{SCRATCH}: axis must be < rank 2 (got 5)"
    routes.op(SCRATCH, shape=(2, 3), axis=1).check()


# ----- ports ---------------------------------------------------------------------------------
@pytest.mark.parametrize("port,array,why", [
    (P.value((3,)), np.zeros(2), "got shape [2]"),
    (P.value((3,)), np.zeros(3, bool), "got a bool array"),
    (P.index((3,), (2,)), np.array([0, 3]), "got index 3 outside [0, 3)"),
    (P.index((3, 2), (1,)), np.array([[2, 2]]), "got index 2 outside [0, 2)"),
    (P.index((3,), (2,)), np.array([0.0, 1.0]), "got a float64 array, not integers"),
    (P.boolean((2,)), np.zeros(2), "got a float64 array, not Booleans"),
    (P.integer(True, 8, (2,)), np.array([127, 128]), "got word 128 outside [-128, 127]"),
    (P.integer(False, 4, (1,)), np.array([-1]), "got word -1 outside [0, 15]"),
])
def test_port_mismatch_says_why(port, array, why):
    assert port.mismatch(array) == why


def test_ports_accept_what_they_hold():
    assert P.index((3, 2), (4,)).array_shape == (4, 2)
    assert P.index((3, 2), (1,)).mismatch(np.array([[2, 1]])) is None
    assert P.integer(False, 64, (1,)).mismatch(np.array([2**64 - 1], np.uint64)) is None
    assert P.frozen().mismatch(np.array(1.5)) is None
    assert P.value((2,)).mismatch(numerics.reference(64).asarray([1.0, 2.0])) is None
    assert str(P.index((3,), (2,))) == "index<3>[2]" and str(P.integer(False, 16, ())) == \
        "uint16[]"
    assert P.value((2,)).differentiable and not P.frozen((2,)).differentiable


def test_malformed_ports_are_refused():
    with pytest.raises(ValueError, match="kind must be one of"):
        P.Port("tensor", (2,))
    with pytest.raises(ValueError, match="bounds belong to index ports"):
        P.Port("value", (2,), bounds=(2,))
    with pytest.raises(ValueError, match="width must be in"):
        P.integer(True, 65)


# ----- invoke's stages ------------------------------------------------------------------------
def test_invoke_returns_the_rules_forward_values():
    o = routes.op("clamp", shape=(3,))
    xs = [np.array([-2.0, 0.5, 2.0]), np.array(-1.0), np.array(1.0)]
    out = routes.invoke(o, xs, F64)
    assert len(out) == 1 and np.array_equal(out[0], [-1.0, 0.5, 1.0])
    assert np.array_equal(out[0], o.rule(F64).forward(xs)[0])


def test_stage_one_attributes_come_first(scratch):
    o = routes.op(SCRATCH, shape=(2, 3), axis=2)
    assert err(routes.invoke, o, [np.zeros(5)], F64) == f"{SCRATCH}: axis must be < rank 2 (got 2)"


def test_stage_two_arity_and_ports():
    relu = routes.op("relu", shape=(3,))
    assert err(routes.invoke, relu, [np.zeros(3), np.zeros(3)], F64) == \
        "relu: expects 1 input (x) (got 2)"
    assert err(routes.invoke, relu, [np.zeros(2)], F64) == \
        "relu: input x expects value[3] (got shape [2])"
    add = routes.op("add", element="int8")
    assert err(routes.invoke, add, [np.array([1, 2, 300]), np.zeros(3, np.int8)], F64) == \
        "add: input x expects int8[3] (got word 300 outside [-128, 127])"
    assert err(routes.invoke, routes.op("max", element="bool"), [np.zeros(3)] * 2, F64) == \
        "max: input x expects bool[3] (got a float64 array, not Booleans)"


def test_stage_two_index_ports(scratch):
    o = routes.op(SCRATCH, shape=(2, 3), axis=1)
    assert err(routes.invoke, o, [np.zeros((2, 3)), np.array([0, 3])], F64) == \
        f"{SCRATCH}: input i expects index<3>[2] (got index 3 outside [0, 3))"
    out = routes.invoke(o, [np.ones((2, 3)), np.array([0, 2])], F64)
    assert np.array_equal(out[0], np.ones((2, 3)))


def test_stage_three_rule_needs_the_capability(scratch):
    o = routes.op(SCRATCH, mode="erf")
    assert o.need == "Erf" and routes.op(SCRATCH).need is None
    assert o.rule(F64) is None and o.rule(numerics.reference(64)) is not None
    assert routes.op(SCRATCH).rule(F64) is not None
    assert err(routes.invoke, o, [np.zeros((2, 3)), np.array([0, 1])], F64) == \
        (f"{SCRATCH}: no rule under native(float64): it needs capability Erf, which the "
         f"backend does not supply")


def test_stage_four_validate_before_any_value_is_returned():
    o = routes.op("clamp", shape=(3,))
    assert err(routes.invoke, o, [np.zeros(3), np.array(1.0), np.array(-1.0)], F64) == \
        "clamp: lo must not exceed hi (got lo 1 > hi -1)"
    # The port check comes before validate: a wrong shape wins over bad bounds.
    assert err(routes.invoke, o, [np.zeros(2), np.array(1.0), np.array(-1.0)], F64) == \
        "clamp: input x expects value[3] (got shape [2])"


def test_needs_grad_is_refused_on_a_frozen_port():
    o = routes.op("clamp", shape=(2,))
    xs = [np.zeros(2), np.array(-1.0), np.array(1.0)]
    assert err(routes.invoke_prepared, o, xs, F64, (True, True, False)) == \
        "clamp: input lo is a frozen port, which receives no gradient (needs_grad must be " \
        "false there)"
    assert err(routes.invoke_prepared, o, xs, F64, (True,)) == \
        "clamp: needs_grad has 1 flags for 3 inputs"
    out, pullback = routes.invoke_prepared(o, xs, F64, (True, False, False))
    assert np.array_equal(pullback([np.ones(2)])[0], [1.0, 1.0])


def test_rule_refuses_a_wrong_number_of_arguments():
    rule = routes.op("mul", shape=(2,)).rule(F64)
    assert err(rule.forward, [np.zeros(2)]) == "mul: expects 2 inputs (x, y) (got 1)"
    assert err(rule.jvp, [np.zeros(2)] * 2, [None]) == "mul: expects 2 tangents (got 1)"


@pytest.mark.parametrize("backend", [F64, numerics.reference(64), numerics.exact(),
                                     numerics.emulated("bfloat16")],
                         ids=["native", "reference", "exact", "emulated"])
def test_rule_maps_refuse_a_wrong_shape_with_invokes_message(backend):
    o = routes.op("mul", shape=(2, 3))
    rule = o.rule(backend)
    xs = [np.ones((2, 3)), np.ones(3)]              # y would broadcast: refused, not broadcast
    want = "mul: input y expects value[2,3] (got shape [3])"
    assert err(routes.invoke, o, xs, backend) == want
    assert err(rule.forward, xs) == want
    assert err(rule.backward, xs, [np.ones((2, 3))]) == want
    assert err(rule.jvp, xs, [None, None]) == want
    assert err(rule.validate, xs) == want
    assert err(rule.prepare, xs, (True, True)) == want
    assert err(rule.forward, [np.ones((2, 3)), np.ones((3, 2))]) == \
        "mul: input y expects value[2,3] (got shape [3, 2])"
    # A rank-0 port refuses an array, and a scalar (Python number) fits it.
    clamp = routes.op("clamp", shape=(2,)).rule(backend)
    assert err(clamp.forward, [np.zeros(2), np.zeros(1), 1.0]) == \
        "clamp: input lo expects frozen[] (got shape [1])"
    assert len(clamp.forward([np.zeros(2), -1.0, 1.0])[0]) == 2


def test_word_elements_have_no_gradient_and_wrap_around():
    o = routes.op("mul", shape=(3,), element="uint8")
    rule = o.rule(F64)
    x, y = np.array([16, 255, 3], np.uint8), np.array([16, 255, 5], np.uint8)
    assert np.array_equal(rule.forward([x, y])[0], [0, 1, 15])
    assert rule.backward([x, y], [None]) == (None, None)
    assert rule.jvp([x, y], [None, None]) == (None,)
    big = routes.op("add", shape=(2,), element="int64").rule(F64)
    top = np.array([2**63 - 1, -2**63], np.int64)
    assert big.forward([top, np.array([1, -1], np.int64)])[0].tolist() == [-2**63, 2**63 - 1]


def test_operators_compare_and_hash_through_their_records():
    a, b = routes.op("relu", shape=(3,)), routes.op("relu", shape=[3])
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert routes.op("relu", shape=(4,)) != a and routes.op("exp", shape=(3,)) != a
    assert repr(routes.op("add", element="bool")) == "op('add', shape=(3,), element='bool')"
    assert a.replace(shape=(2, 2)).inputs == (P.value((2, 2)),)


def test_samples_of_an_undeclared_kind_are_refused(scratch):
    assert err(routes.op(SCRATCH).samples, np.random.default_rng(0)) == \
        f"{SCRATCH}: no 'ordinary' samples declared"


def test_prepare_evaluates_forward_once_and_the_pullback_reuses_it():
    from roundoff_coverage.routes.rules import saving
    calls = []

    def forward(xp, a, x):
        calls.append(1)
        e = xp.exp(x)
        return saving(xp.multiply(e, e), e=e)          # y = e**2x, keeps e = exp(x)

    define("scratchSquaredExp", "transcendental", attributes=(A.shape(),),
           ports=lambda a: ({"x": P.value(a.shape)}, {"y": P.value(a.shape)}),
           forward=forward,
           # dy/dx = 2 e**2x = 2 * y: read the output, and e from the saved intermediates.
           backward=lambda xp, a, xs, ys, gs, needs: (
               xp.multiply(gs[0], xp.add(ys[0], xp.multiply(ys.saved["e"], ys.saved["e"]))),),
           notes=("scratch",))
    try:
        rule = routes.op("scratchSquaredExp", shape=(2,)).rule(F64)
        x = np.array([0.0, 1.0])
        ys, pullback = rule.prepare([x], [True])
        (g,) = pullback([np.ones(2)])
        assert len(calls) == 1
        assert np.array_equal(ys[0], np.exp(x) * np.exp(x))
        assert np.array_equal(g, 2 * ys[0])
        assert not rule.has_jvp
        assert err(rule.jvp, [x], [np.ones(2)]) == \
            "scratchSquaredExp: no forward-mode rule is registered"
    finally:
        withdraw("scratchSquaredExp")


def test_define_refuses_attribute_names_the_mapping_shadows():
    with pytest.raises(ValueError, match="'keys' would be shadowed"):
        define("scratchKeys", "elementwise", attributes=(A.nat("keys", 1),),
               ports=lambda a: ({}, {}), forward=lambda xp, a: ())
    with pytest.raises(routes.RouteError):
        routes.op("scratchKeys")                   # nothing was registered


def test_no_rule_at_some_attributes():
    define("scratchNoRule", "elementwise", attributes=(A.flag("exact", False),),
           ports=lambda a: ({"x": P.value()}, {"y": P.value()}),
           forward=lambda xp, a, x: x, no_rule=lambda a: a.exact)
    try:
        assert routes.op("scratchNoRule").rule(F64) is not None
        assert routes.op("scratchNoRule", exact=True).rule(F64) is None
    finally:
        withdraw("scratchNoRule")


def test_rule_routes_give_what_forward_jvp_and_backward_give_from_one_forward_pass():
    # Rule.routes, the coverage run's seam: the three maps at once, in exact rationals
    # (x * y: tangent x ty + y tx, gradients (g y, g x)), a failing route as data.
    o = routes.op("mul", shape=(2,))
    rule = o.rule(numerics.exact())
    x, y = np.array([3.0, -0.5]), np.array([0.25, 8.0])
    tx, ty, g = np.array([1.0, 2.0]), np.array([-1.0, 0.5]), np.array([4.0, -2.0])
    seen = []
    got = rule.routes((x, y), ("forward", "tangent", "gradient", "sideways"), (tx, ty), (g,),
                      before=seen.append)
    assert seen == ["forward", "tangent", "gradient", "sideways"]
    assert [float(v) for v in got["forward"][0]] == [0.75, -4.0]
    assert [float(v) for v in got["tangent"][0]] == [3.0 * -1.0 + 0.25 * 1.0,
                                                      -0.5 * 0.5 + 8.0 * 2.0]
    assert [[float(v) for v in a] for a in got["gradient"]] == [[1.0, -16.0], [12.0, 1.0]]
    assert isinstance(got["sideways"], routes.RouteError)
    assert [float(v) for v in rule.forward((x, y))[0]] == [0.75, -4.0]
    with pytest.raises(routes.RouteError, match="expects"):
        rule.routes((x,), ("forward",))

"""Certificates point at checks that exist: every test id named as evidence is collected by
pytest (a parametrized function named without brackets counts when some case of it is)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import certs
from roundoff_coverage.routes.vocabulary import spec_gradient_kinds, spec_row

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def collected() -> set:
    files = sorted({e.split("::")[0] for name in routes.names()
                    for c in routes.certificates(name) for e in c.evidence})
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:cacheprovider", *files], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return {line.strip() for line in run.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize("name", routes.names())
def test_every_certificate_points_at_a_collected_test(name, collected):
    for cert in routes.certificates(name):
        assert cert.op == name and cert.kind in certs.KINDS and cert.statement
        for test in cert.evidence:
            assert test in collected or any(c.startswith(test + "[") for c in collected), test


def test_roundoff_certificates_carry_their_bound():
    for name in routes.names():
        for cert in routes.certificates(name):
            if cert.kind == "roundoff" and cert.bound.get("formula") == "routes.apriori":
                assert name in routes.apriori.FORMULAS and cert.bound["formats"] == "any"
            elif cert.kind == "roundoff" and cert.bound.get("formula") == "numerics.bounding":
                attrs = next(iter(routes.declaration(name).examples.values()))
                assert routes.op(name, **attrs).rule(numerics.bounding("bfloat16")) is not None
            elif cert.kind == "roundoff":
                assert cert.bound["ulps"] >= 0 and cert.bound["formats"]


def test_certificates_of_an_unknown_operator_name_close_matches():
    with pytest.raises(routes.RouteError, match="unknown operator 'relux' .close matches: relu"):
        routes.certificates("relux")


@pytest.mark.parametrize("name", routes.names())
def test_gradient_certificate_kinds_are_the_specs(name):
    """derivative and algebraic certificates exactly where the spec's Gradient column registers
    them (the registry-wide tests check jvp and the adjoint identity for every operator, but a
    certificate is a claim the spec makes)."""
    gradient = {"derivative", "algebraic"}
    have = {c.kind for c in routes.certificates(name)} & gradient
    assert have == spec_gradient_kinds(name) & gradient


def test_counts_cover_every_kind():
    counts = certs.counts()
    assert set(counts) == set(certs.KINDS)
    assert counts["derivative"] == sum("derivative" in spec_gradient_kinds(n)
                                       for n in routes.names())
    # The spec: "... and 7 enclosure certificates are registered" (routes.bounds.ENCLOSURES).
    assert counts["enclosure"] == 7


def test_unknown_certificate_kinds_are_refused():
    with pytest.raises(ValueError, match="not a standard kind"):
        certs.register("relu-test", ["theorem"])
    with pytest.raises(ValueError, match="unknown kind"):
        certs.register("relu-test", [certs.Spec("proof", (), "")])
    certs.withdraw("relu-test")
    assert any(str(c).startswith("derivative (gradient): ") for c in routes.certificates("relu"))


@pytest.mark.parametrize("name", routes.names())
def test_gradient_certificates_concern_routes_the_rule_has_and_the_specs_inputs(name):
    """Spec: "Gradient: the kinds of the certificates registered for the pullback at each
    value input (TorchLean.Op.certificates), and whether the rule has a forward mode
    (Op.Rule.jvp?), with the kinds of the certificates registered for it."  Registration
    reads the route of a derivative, algebraic or convention certificate from that column
    (certs._routes), so the routes are checked against the rule instead: a tangent
    certificate needs a forward mode at some example, a gradient one a pullback (a declared
    backward).  The kinds and input positions are the declaration's own (linear's
    inputs=(2,)) and are compared with the column's, as is every convention it lists
    (detach's, of the tangent)."""
    decl = routes.declaration(name)
    ops = [routes.op(name, **attrs) for attrs in decl.examples.values()]
    gradient = {"derivative", "algebraic"}
    for c in routes.certificates(name):
        if c.kind in gradient | {"convention"} and c.route == "tangent":
            assert any(o.has_jvp for o in ops), (name, str(c))
        if c.kind in gradient | {"prepared"}:
            assert decl.backward is not None, (name, str(c))
    spec = certs.spec_certificates(name)
    have = {(c.kind, c.route, c.inputs) for c in routes.certificates(name)}
    assert {(k, i) for k, _, i in have if k in gradient} == \
        {(k, i) for k, _, i in spec if k in gradient}
    assert {t for t in spec if t[0] == "convention"} <= have


def test_the_spec_column_is_read_per_route_and_input():
    assert certs.spec_certificates("div") == {("derivative", "gradient", None),
                                              ("algebraic", "tangent", None)}
    assert certs.spec_certificates("exp") == {("derivative", "gradient", None),
                                              ("algebraic", "gradient", None)}
    assert certs.spec_certificates("linear") == {("algebraic", "gradient", (2,))}
    assert certs.spec_certificates("detach") == {("convention", "tangent", None)}
    assert certs.spec_certificates("scatter") == set() == certs.spec_certificates("eq")
    assert certs.spec_certificates("relux") is None
    assert spec_row("sqrt")[4] == "derivative; forward mode (algebraic)"
    assert {c.route for c in routes.certificates("sqrt") if c.kind == "algebraic"} == {"tangent"}


def test_every_certificate_names_a_route_and_roundoff_concerns_the_forward_map():
    for name in routes.names():
        for c in routes.certificates(name):
            assert c.route in certs.ROUTES, (name, c)
            if c.kind in ("roundoff", "enclosure"):
                assert c.route == "forward", (name, c)
            if c.kind == "prepared":
                assert c.route == "gradient", (name, c)


def test_a_convention_names_its_route_or_takes_the_operators():
    """A convention of the forward values says so (scatter's fold order); without a route,
    one with a value input concerns the gradient (relu's subgradient) and one without the
    forward map (the comparisons on NaN)."""
    by = {(n, c.evidence[0].rsplit("::", 1)[1]): c.route for n in ("scatter", "relu", "eq")
          for c in routes.certificates(n) if c.kind == "convention"}
    assert by[("scatter", "test_scatter_folds_repeated_targets_in_row_major_order")] == "forward"
    assert by[("scatter", "test_scatter_max_shares_the_gradient_among_ties")] == "gradient"
    assert by[("relu", "test_relu_subgradient_at_zero_is_zero")] == "gradient"
    assert by[("eq", "test_comparisons_follow_ieee_on_nan_zeros_and_infinities")] == "forward"


def test_registration_refuses_input_positions_the_operator_does_not_have():
    """Spec: "On registration, the attribute checks ... when the operator's input list
    reduces to a literal list, that every listed position is an input."  relu has one input:
    inputs=(9,) is refused, and so is a gradient certificate at a port without a gradient
    (clamp's frozen bound lo, input 1); the operator is not registered."""
    from roundoff_coverage.routes import registry
    base = routes.declaration("relu")
    for name, decl, spec, text in [
            ("reluCertTest", base, certs.Spec("algebraic", ("t",), "s", (9,)),
             "reluCertTest: algebraic certificate names input 9, which reluCertTest does not "
             "have (it has 1 inputs)"),
            ("reluCertTest", base, certs.convention("t", "s", inputs=(-1,)),
             "names input -1"),
            ("clampCertTest", routes.declaration("clamp"),
             certs.convention("t", "s", inputs=(1,), route="gradient"),
             "clampCertTest: convention certificate of the gradient names input 1, which is "
             "not a value input")]:
        with pytest.raises(ValueError, match=re.escape(text)):
            registry.define(name, decl.family, attributes=decl.attributes, ports=decl.ports,
                            forward=decl.forward, certificates=[spec])
        with pytest.raises(routes.RouteError):
            routes.declaration(name)
    ok = registry.define("reluCertTest", "activation", attributes=base.attributes,
                         ports=base.ports, forward=base.forward,
                         certificates=[certs.Spec("algebraic", ("t",), "s", (0,))])
    try:
        (c, *_) = routes.certificates("reluCertTest")
        assert (c.kind, c.route, c.inputs) == ("algebraic", "gradient", (0,)) and ok
        assert str(c).startswith("algebraic (gradient) (inputs [0]): s [t]")
    finally:
        registry.withdraw("reluCertTest")

"""Certificates point at checks that exist: every test id named as evidence is collected by
pytest (a parametrized function named without brackets counts when some case of it is)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.routes import certs
from roundoff_coverage.routes.vocabulary import spec_gradient_kinds

ROOT = pathlib.Path(__file__).resolve().parents[1]


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
    assert counts["enclosure"] == 0


def test_unknown_certificate_kinds_are_refused():
    with pytest.raises(ValueError, match="not a standard kind"):
        certs.register("relu-test", ["theorem"])
    with pytest.raises(ValueError, match="unknown kind"):
        certs.register("relu-test", [certs.Spec("proof", (), "")])
    certs.withdraw("relu-test")
    assert any(str(c).startswith("derivative: ") for c in routes.certificates("relu"))

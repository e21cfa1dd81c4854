"""``roundoff-coverage ops``: the operator table, one operator, its certificates; unknown
names exit 2 with one error line and close matches."""

from __future__ import annotations

import pytest

from roundoff_coverage import routes
from conftest import ERROR, run_cli as run


def table(out):
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0].split()
    return header, {line.split()[0]: dict(zip(header, line.split())) for line in lines[1:-1]}


def test_ops_lists_every_registered_operator(capsys):
    status, out, err = run(capsys, "ops")
    assert status == 0 and err == ""
    header, rows = table(out)
    assert header == ["name", "family", "needs", "inputs", "outputs", "cuda",
                      "certificates", "bounds"]
    assert list(rows) == list(routes.names())
    assert rows["clamp"]["inputs"] == "x:value[3],lo:frozen[],hi:frozen[]"
    assert rows["clamp"] == {**rows["clamp"], "family": "extrema", "needs": "-",
                             "outputs": "y:value[3]", "cuda": "yes"}
    assert rows["exp"]["certificates"] == "algebraic,derivative,prepared,roundoff"
    # The Bounds column computed from routes.bounds's arms, in the spec's cells.
    assert rows["add"]["bounds"] == "checker,IBP,CROWN;enclosure"
    assert rows["softmax"]["bounds"] == "IBP;enclosure"
    assert rows["argmax"]["bounds"] == "none"
    assert f"{len(rows)} of the spec's 154 operators are registered" in out


def test_ops_name_shows_attributes_ports_and_notes(capsys):
    status, out, _ = run(capsys, "ops", "max")
    assert status == 0
    assert out.startswith("max: family extrema; rule needs -; cuda yes; bounds IBP")
    assert "  element: enum, default 'scalar'" in out
    assert "  inputs:  x:value[3],y:value[3]" in out
    assert "each operand takes half" in out


def test_ops_certs_lists_kinds_statements_and_evidence(capsys):
    status, out, _ = run(capsys, "ops", "--certs", "relu")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == f"relu: {len(routes.certificates('relu'))} certificates"
    assert "  derivative (gradient): the tangent map is the derivative" in out
    assert ("    evidence: tests/routes/test_routes_registry.py::"
            "test_backward_is_adjoint_of_jvp[relu-gradient]") in lines
    assert "  convention (gradient): relu'(0) = 0" in out


@pytest.mark.parametrize("argv,fragment", [
    (("ops", "--certs", "expp"), "unknown operator 'expp' (close matches: exp"),
    (("ops", "relux"), "unknown operator 'relux' (close matches: relu"),
    (("ops", "--certs", "zzzz"), "unknown operator 'zzzz'"),
])
def test_unknown_names_exit_2_with_one_line(capsys, argv, fragment):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR) and fragment in lines[0]

"""Every kernel meets its contract in numba's CUDA simulator on every case the kernel table
declares (``Kernel.tests``, kernels.base.Instance): one test per case, all cases run in one
simulator run (tests/kernel_harness.py), each checked against its kernel's contract --
bit for bit with numerics.emulated where it claims agreement, within the claimed ulps of the
exact reference where it claims a bound, the one-line error where the instance is refused.
"""

from __future__ import annotations

import pytest

from roundoff_coverage import kernels
from kernel_harness import check, table_specs

SPECS = table_specs()


@pytest.fixture(scope="module")
def by_id(simulated):
    """({case id: case}, {case id: result})."""
    cases, results = simulated
    return {c["id"]: c for c in cases}, results


@pytest.mark.parametrize("case_id", [s["id"] for s in SPECS])
def test_kernel_meets_its_contract(by_id, case_id):
    """The case's route, format and mode on its inputs: what the kernel's contract claims."""
    cases, results = by_id
    check(cases[case_id], results[case_id])


def test_every_kernel_and_route_has_cases_and_most_are_compared_bit_for_bit():
    """The cases reach every kernel on every route, and nearly all of them claim bitwise (or
    screened) agreement: binary64 with a transcendental primitive and the directed modes of
    rounding kernels claim none, and the check then has only an ulp bound, if any."""
    seen = {(s["op"].name, s["route"]) for s in SPECS}
    for name in kernels.names():
        for route in kernels.of_op(name).routes:
            assert (name, route) in seen, (name, route)
    compared = {}
    for s in SPECS:
        claim = kernels.of_op(s["op"]).claim(s["route"], s["fmt"], s["mode"])
        ok = claim.agreement != "none" and s["instance"].emulated and not s["instance"].refuses
        compared[s["op"].name] = compared.get(s["op"].name, 0) + ok
    assert all(n > 0 for n in compared.values()), compared
    assert sum(compared.values()) >= 0.8 * len(SPECS), (sum(compared.values()), len(SPECS))

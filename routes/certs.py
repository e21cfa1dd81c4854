"""Certificates: evidence registered per operator and kind, each pointing at the check that
backs it (spec: "Operator Certificates"; here a test id or a measured bound instead of a Lean
theorem).  Kinds:

- ``algebraic``: the pullback is the adjoint of the tangent map (no claim that the map is a
  derivative);
- ``derivative``: the tangent map is the derivative and the pullback its adjoint, on the
  sampled domain;
- ``convention``: a rule fixed by a convention (a subgradient at a kink, a tie split);
- ``prepared``: the prepared pullback returns the dense one at active inputs, None elsewhere;
- ``roundoff``: a floating-point error bound of a route, measured against the reference: a
  fixed number of ulps (``roundoff``) or a formula of the inputs (``apriori``,
  routes/apriori.py);
- ``enclosure``: an interval transfer encloses the real forward value.

A declaration lists specs: the strings ``"algebraic"``, ``"derivative"``, ``"prepared"``
(backed by the registry-wide tests), ``convention(test, statement)`` and
``roundoff(ulps, ...)``.  Registration resolves them; ``certificates(name)`` lists them,
as ``#op_certs`` does.  Like the spec's attribute, registration does not check that the
evidence says what the kind says: tests/test_routes_certs.py checks that every test id named
exists.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("algebraic", "derivative", "convention", "prepared", "roundoff", "enclosure")
REGISTRY_TESTS = "tests/test_routes_registry.py"
ROUNDOFF_TESTS = "tests/test_routes_roundoff.py"

# The standard kinds and the registry-wide tests that back them ({id}: the operator's name).
STANDARD = {
    "derivative": (f"{REGISTRY_TESTS}::test_jvp_matches_central_difference[{{id}}-tangent]",
                   "the tangent map is the derivative: jvp equals a 256-bit central "
                   "difference at ordinary samples (away from kinks)"),
    "algebraic": (f"{REGISTRY_TESTS}::test_backward_is_adjoint_of_jvp[{{id}}-gradient]",
                  "the pullback is the adjoint of the tangent map: <J t, c> = <t, J^T c> at "
                  "200 bits, and exactly under numerics.exact() where the rule is rational"),
    "prepared": (f"{REGISTRY_TESTS}::test_prepare_matches_backward[{{id}}-prepared]",
                 "the prepared pullback equals the dense one at inputs whose flag is on and "
                 "gives None at the others"),
}


@dataclass(frozen=True)
class Certificate:
    """One registered certificate: the operator, the kind, the evidence (test ids), what it
    states, the input positions it concerns (None: all, the others held fixed) and, for
    roundoff, the bound {"ulps", "formats", "modes"}."""

    op: str
    kind: str
    evidence: tuple
    statement: str
    inputs: tuple | None = None
    bound: dict | None = None

    def __str__(self):
        where = f" (inputs {list(self.inputs)})" if self.inputs is not None else ""
        return f"{self.kind}{where}: {self.statement} [{'; '.join(self.evidence)}]"


@dataclass(frozen=True)
class Spec:
    """An unresolved certificate in a declaration (see ``convention``, ``roundoff``)."""

    kind: str
    evidence: tuple
    statement: str
    inputs: tuple | None = None
    bound: dict | None = None


def convention(test: str, statement: str, inputs=None) -> Spec:
    """A convention certificate backed by ``test`` (a test id)."""
    return Spec("convention", (test,), statement, None if inputs is None else tuple(inputs))


def roundoff(ulps: float, formats=("bfloat16", "binary16", "float8_e4m3fn"),
             modes=("nearest_even",), statement: str | None = None) -> Spec:
    """A roundoff certificate: forward values within ``ulps`` ulps of the exact value in each
    of ``formats`` and ``modes`` under numerics.emulated (strict policy), measured by
    tests/test_routes_roundoff.py on every sample kind."""
    text = statement or f"forward values within {ulps} ulp of the exact value"
    evidence = tuple(f"{ROUNDOFF_TESTS}::test_forward_within_certified_bound[{{id}}-forward-"
                     f"{f}-{m}]" for f in formats for m in modes)
    return Spec("roundoff", evidence, text,
                bound={"ulps": ulps, "formats": tuple(formats), "modes": tuple(modes)})


APRIORI_TESTS = "tests/test_routes_apriori.py"


def apriori(statement: str) -> Spec:
    """A roundoff certificate by formula: routes.apriori's bound of the operator, for every
    format, mode and policy it applies to, checked on samples by tests/test_routes_apriori.py
    and on every sample of the coverage run."""
    return Spec("roundoff", (f"{APRIORI_TESTS}::test_apriori_bound_holds[{{id}}]",), statement,
                bound={"formula": "routes.apriori", "formats": "any", "modes": "any"})


BOUNDING_TESTS = "tests/test_numerics_bounding.py"


def enclosure_bound(name: str, need) -> Certificate:
    """The rigorous per-sample roundoff bound every operator gets from numerics.bounding when
    its rule runs there (``need`` not among the capabilities the enclosures lack)."""
    return Certificate(name, "roundoff",
                       (f"{BOUNDING_TESTS}::test_forward_enclosures_hold_and_are_mostly_"
                        f"available",),
                       "rigorous per-sample bound: the rule evaluated on enclosures of the "
                       "exact value and of every value the model can compute "
                       "(numerics.bounding), checked on every sample of the coverage run",
                       None, {"formula": "numerics.bounding", "formats": "any",
                              "modes": "any"})


_CERTS: dict[str, tuple] = {}


def register(name: str, specs) -> tuple:
    """Resolve and register the certificates of operator ``name``."""
    out = []
    for spec in specs:
        if isinstance(spec, str):
            if spec not in STANDARD:
                raise ValueError(f"certificates: {name}: {spec!r} is not a standard kind "
                                 f"({', '.join(STANDARD)}); use convention() or roundoff()")
            test, statement = STANDARD[spec]
            spec = Spec(spec, (test,), statement)
        if spec.kind not in KINDS:
            raise ValueError(f"certificates: {name}: unknown kind {spec.kind!r}")
        out.append(Certificate(name, spec.kind, tuple(e.replace("{id}", name)
                                                      for e in spec.evidence),
                               spec.statement, spec.inputs, spec.bound))
    _CERTS[name] = tuple(out)
    return _CERTS[name]


def withdraw(name: str) -> None:
    """Forget the certificates of ``name`` (registry.withdraw)."""
    _CERTS.pop(name, None)


def certificates(name: str) -> tuple:
    """The certificates registered for operator ``name`` (empty when none)."""
    from .registry import declaration
    declaration(name)                     # RouteError with close matches for unknown names
    return _CERTS.get(name, ())


def counts() -> dict:
    """How many certificates of each kind the table registers."""
    total = {kind: 0 for kind in KINDS}
    for certs in _CERTS.values():
        for c in certs:
            total[c.kind] += 1
    return total

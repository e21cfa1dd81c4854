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

A certificate concerns one route (``Certificate.route``): ``gradient`` (the pullback),
``tangent`` (the forward mode) or ``forward`` (a roundoff bound of the forward map, or a
convention of the forward values), and some input positions (``inputs``; None: every
input).  The spec's Gradient column keeps the pullback's kinds apart from the forward
mode's ("derivative; forward mode (algebraic)": a derivative certificate for the pullback
and an algebraic one for the forward mode); registration reads that column
(``spec_certificates``) for the route of a derivative, algebraic or convention certificate
that does not name its own.  Otherwise: prepared concerns the gradient, roundoff the forward
map, derivative and algebraic the gradient, and a convention the gradient where the
operator has a value input and the forward map where it has none.

A declaration lists specs: the strings ``"algebraic"``, ``"derivative"``, ``"prepared"``
(backed by the registry-wide tests), ``convention(test, statement)`` and
``roundoff(ulps, ...)``.  Registration resolves them; ``registry.certificates(name)`` lists them,
as ``#op_certs`` does.  ``registry.extend_certificates(name, specs)`` adds certificates to a
registered operator: routes.bounds registers the ``enclosure(statement)`` certificates of its
IBP arms so.  Like
the spec's attribute, registration refuses an input position the operator does not have
(``inputs=(9,)`` on relu) and, for a gradient or tangent certificate, a position that is
not a value input; it does not check that the evidence says what the kind says:
tests/routes/test_routes_certs.py checks that every test id named exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .vocabulary import spec_row

KINDS = ("algebraic", "derivative", "convention", "prepared", "roundoff", "enclosure")
REGISTRY_TESTS = "tests/routes/test_routes_registry.py"
ROUNDOFF_TESTS = "tests/routes/test_routes_roundoff.py"
# What a certificate is about: the pullback, the forward mode, or the forward map.
ROUTES = ("gradient", "tangent", "forward")
# The route of a kind when neither the certificate nor the spec's column names one
# (convention: gradient with a value input, forward without; see ``_route``).
DEFAULT_ROUTE = {"derivative": "gradient", "algebraic": "gradient", "prepared": "gradient",
                 "roundoff": "forward", "enclosure": "forward"}

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
    states, the input positions it concerns (None: all, the others held fixed), for
    roundoff the bound {"ulps", "formats", "modes"}, and the route it concerns (ROUTES:
    ``gradient`` the pullback, ``tangent`` the forward mode, ``forward`` the forward map)."""

    op: str
    kind: str
    evidence: tuple
    statement: str
    inputs: tuple | None = None
    bound: dict | None = None
    route: str = "forward"

    def __post_init__(self):
        if self.route not in ROUTES:
            raise ValueError(f"certificates: {self.op}: route must be one of "
                             f"{', '.join(ROUTES)} (got {self.route!r})")

    @property
    def where(self) -> str:
        """`` (inputs [2])`` for a certificate about some inputs only, else ``""``."""
        return f" (inputs {list(self.inputs)})" if self.inputs is not None else ""

    def __str__(self):
        return (f"{self.kind} ({self.route}){self.where}: {self.statement} "
                f"[{'; '.join(self.evidence)}]")


@dataclass(frozen=True)
class Spec:
    """An unresolved certificate in a declaration (see ``convention``, ``roundoff``)."""

    kind: str
    evidence: tuple
    statement: str
    inputs: tuple | None = None
    bound: dict | None = None
    route: str | None = None          # None: from the spec's column or the kind's default


def convention(test: str, statement: str, inputs=None, route: str | None = None) -> Spec:
    """A convention certificate backed by ``test`` (a test id); ``route`` the route it
    concerns (``forward`` for a convention of the forward values, such as the order of a
    fold; default: the spec's column, else the gradient where the operator has a value
    input and the forward map where it has none)."""
    return Spec("convention", (test,), statement, None if inputs is None else tuple(inputs),
                route=route)


def roundoff(ulps: float, formats=("bfloat16", "binary16", "float8_e4m3fn"),
             modes=("nearest_even",), statement: str | None = None) -> Spec:
    """A roundoff certificate: forward values within ``ulps`` ulps of the exact value in each
    of ``formats`` and ``modes`` under numerics.emulated (strict policy), measured by
    tests/routes/test_routes_roundoff.py on every sample kind."""
    text = statement or f"forward values within {ulps} ulp of the exact value"
    evidence = tuple(f"{ROUNDOFF_TESTS}::test_forward_within_certified_bound[{{id}}-forward-"
                     f"{f}-{m}]" for f in formats for m in modes)
    return Spec("roundoff", evidence, text,
                bound={"ulps": ulps, "formats": tuple(formats), "modes": tuple(modes)},
                route="forward")


APRIORI_TESTS = "tests/routes/test_routes_apriori.py"


def apriori(statement: str) -> Spec:
    """A roundoff certificate by formula: routes.apriori's bound of the operator, for every
    format, mode and policy it applies to, checked on samples by tests/routes/test_routes_apriori.py
    and on every sample of the coverage run."""
    return Spec("roundoff", (f"{APRIORI_TESTS}::test_apriori_bound_holds[{{id}}]",), statement,
                bound={"formula": "routes.apriori", "formats": "any", "modes": "any"},
                route="forward")


BOUNDS_TESTS = "tests/routes/test_routes_ibp.py"


def enclosure(statement: str) -> Spec:
    """An enclosure certificate (spec: "the interval transfer of the graph numerical
    certificate encloses the operator's real forward value"): the operator's IBP arm
    (routes.bounds) encloses its real forward value at every input of the input boxes,
    checked by tests/routes/test_routes_ibp.py against numerics.reference at corners and random
    points of random boxes."""
    return Spec("enclosure", (f"{BOUNDS_TESTS}::test_enclosure_certificate_holds[{{id}}]",),
                statement, route="forward")


BOUNDING_TESTS = "tests/numerics/test_numerics_bounding.py"


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
                              "modes": "any"}, "forward")


_CERTS: dict[str, tuple] = {}


def spec_certificates(name: str) -> frozenset | None:
    """The (kind, route, inputs) of the certificates the spec's Gradient column registers for
    ``name`` (routes.vocabulary), or None when ``name`` is not in the spec.  Before "forward
    mode": the pullback's kinds, per input where the column says "input 2: algebraic"
    (``inputs`` None: every value input); in the parentheses after "forward mode": the
    forward mode's ("derivative; forward mode (algebraic)")."""
    row = spec_row(name)
    if row is None:
        return None
    column = row[4]
    mode = re.search(r"forward mode(?: \(([^)]*)\))?", column)
    pullback = column[:mode.start()] if mode else column
    out = set()
    for segment in filter(None, (p.strip() for p in pullback.split(";"))):
        inputs = None
        if ":" in segment:
            head, segment = segment.split(":", 1)
            inputs = tuple(int(d) for d in re.findall(r"\d+", head))
        out |= {(k.strip(), "gradient", inputs) for k in segment.split(",")
                if k.strip() in KINDS}
    if mode and mode.group(1):
        out |= {(k.strip(), "tangent", None) for k in mode.group(1).split(",")
                if k.strip() in KINDS}
    return frozenset(out)


def _routes(name: str, spec: Spec, ports) -> tuple:
    """The routes a spec concerns: its own, else those the spec's column gives its kind
    (one certificate each), else the kind's default."""
    if spec.route is not None:
        return (spec.route,)
    listed = sorted({route for kind, route, _ in spec_certificates(name) or ()
                     if kind == spec.kind}, key=ROUTES.index)
    if listed:
        return tuple(listed)
    if spec.kind == "convention":
        values = ports is None or any(p.differentiable for ins in ports for p in ins)
        return ("gradient",) if values else ("forward",)
    return (DEFAULT_ROUTE[spec.kind],)


def _check_inputs(name: str, spec: Spec, route: str, ports) -> None:
    """Refuse positions the operator does not have (at none of its example attributes) and,
    for a gradient or tangent certificate, positions that are never a value input."""
    if spec.inputs is None or ports is None:
        return
    for i in spec.inputs:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0 or \
                all(i >= len(ins) for ins in ports):
            count = sorted({len(ins) for ins in ports})
            raise ValueError(f"certificates: {name}: {spec.kind} certificate names input "
                             f"{i!r}, which {name} does not have (it has "
                             f"{' or '.join(map(str, count))} inputs)")
        if route in ("gradient", "tangent") and \
                not any(i < len(ins) and ins[i].differentiable for ins in ports):
            raise ValueError(f"certificates: {name}: {spec.kind} certificate of the {route} "
                             f"names input {i}, which is not a value input")


def register(name: str, specs, ports=None) -> tuple:
    """Resolve and register the certificates of operator ``name``.  ``ports``: the input
    ports at each example of the operator (registry.define passes them), against which the
    input positions are checked; None skips that check."""
    _CERTS[name] = _resolve(name, specs, ports)
    return _CERTS[name]


def extend(name: str, specs) -> tuple:
    """Register more certificates (specs, or resolved Certificates) of operator ``name``,
    after those of its declaration; one already registered is not added again.  Returns all
    of ``name``'s certificates.  registry.extend_certificates is the checked entry (it
    refuses an unknown name); the registry itself adds numerics.bounding's certificate so."""
    have = _CERTS.get(name, ())
    _CERTS[name] = have + tuple(c for c in _resolve(name, specs, None) if c not in have)
    return _CERTS[name]


def _resolve(name: str, specs, ports) -> tuple:
    """The certificates ``specs`` (standard kinds or Spec values) of ``name`` resolved."""
    out = []
    for spec in specs:
        if isinstance(spec, Certificate):
            out.append(spec)
            continue
        if isinstance(spec, str):
            if spec not in STANDARD:
                raise ValueError(f"certificates: {name}: {spec!r} is not a standard kind "
                                 f"({', '.join(STANDARD)}); use convention() or roundoff()")
            test, statement = STANDARD[spec]
            spec = Spec(spec, (test,), statement)
        if spec.kind not in KINDS:
            raise ValueError(f"certificates: {name}: unknown kind {spec.kind!r}")
        if spec.inputs is not None:
            spec = Spec(spec.kind, spec.evidence, spec.statement, tuple(spec.inputs),
                        spec.bound, spec.route)
        for route in _routes(name, spec, ports):
            if route not in ROUTES:
                raise ValueError(f"certificates: {name}: route must be one of "
                                 f"{', '.join(ROUTES)} (got {route!r})")
            _check_inputs(name, spec, route, ports)
            out.append(Certificate(name, spec.kind, tuple(e.replace("{id}", name)
                                                          for e in spec.evidence),
                                   spec.statement, spec.inputs, spec.bound, route))
    return tuple(out)


def withdraw(name: str) -> None:
    """Forget the certificates of ``name`` (registry.withdraw)."""
    _CERTS.pop(name, None)


def registered(name: str) -> tuple:
    """The certificates registered for ``name`` (empty when none; registry.certificates is
    the entry that refuses an unknown operator name)."""
    return _CERTS.get(name, ())


def counts() -> dict:
    """How many certificates of each kind the table registers."""
    total = {kind: 0 for kind in KINDS}
    for certs in _CERTS.values():
        for c in certs:
            total[c.kind] += 1
    return total

"""The operator table: one ``Decl`` per operator, registered once by ``define``; ``Op`` is an
operator instance (a declaration and its attributes).

Public: ``define`` (used by routes/families), ``names()``, ``op(name, **attributes)``,
``declaration(name)``, ``certificates(name)`` (routes.certs), ``Op`` (``check``, ``rule``,
``inputs``/``outputs`` ports computed from the attributes, ``samples``, ``record``; equality
and hashing through the record).

Function signatures a declaration supplies (``xp`` the backend, ``a`` the attributes,
``xs`` the inputs in port order, ``ys`` the forward outputs, one tuple entry per port):

- ``ports(a) -> ({input name: Port}, {output name: Port})``
- ``forward(xp, a, *xs) -> y | (y1, y2, ...) | saving((ys...), name=intermediate)``
- ``backward(xp, a, xs, ys, gs, needs) -> (gradient or None per input)``: ``gs`` holds one
  cotangent per output (zeros filled in), ``needs`` one flag per input (False at non-value
  ports); an input whose flag is off may get None (the machinery drops it anyway)
- ``jvp(xp, a, xs, ys, ts) -> tangent | (tangent or None per output)``: ``ts`` one tangent
  per input (None at non-value ports)
- ``check(a) -> message | None`` and ``validate(xp, a, *xs) -> message | None``: the message
  names the argument; the machinery prefixes ``"<name>: "``.  ``check`` is the spec's
  Op.check, the attribute stage of invoke, the graph and the tape
- ``proofs(a) -> message | None``: the conditions the spec's types decide (its proof
  attributes: the pooled axes are axes of the shape...), which ``decode`` refuses; decode
  does not run ``check`` (spec: "Op.decode doesn't run Op.check: a decoded pooling with an
  ill-formed window is an operator value").  A declaration without ``proofs`` has not
  separated the two: its whole ``check`` counts as proofs (decode refuses what it refuses)
- ``needs``: a capability (numerics.CAPABILITIES), None, or ``needs(a) -> capability | None``
- ``no_rule(a) -> reason | None``: attributes at which the operator has no rule at any scalar
  (spec: "the attributes at which the operator has no rule", e.g. an integer true division)
- operators without value inputs have a forward mode only when they declare a ``jvp``
  (``rules.zero_tangents`` for the spec's "no value input; forward mode")
- ``no_jvp(a) -> reason | None``: attributes at which the declared ``jvp`` is no forward
  mode (the spec's "forward mode at some attributes"); there ``op.decl`` is the declaration
  without its ``jvp`` and ``Op.has_jvp`` is False
- ``samples``: {kind: sampler(rng, fmt, op) -> inputs} for kinds ``ordinary`` (finite, away
  from kinks: the points where derivatives are tested), ``edges`` (near domain edges,
  overflow and underflow thresholds, ties) and ``special`` (zeros, infinities, NaN)
- ``oracle(ctx, a, *xs) -> outputs``: the forward map computed independently with the mpmath
  context ``ctx`` on object arrays (tests compare it with the rule under numerics.reference)
- ``float64``: an independent binary64 implementation ``Float64(forward, backward)`` (tests
  compare it with the rule under numerics.native("float64"))
- ``products``: for a product (matmul, linear, conv, attention...), {operand: contraction
  axis}: the inputs that enter its products as factors (a bias added after the product is
  not one, nor attention's softmax probabilities, formed inside the operator), each with
  the axis its dot products sum over, counted from the end (-1 the last axis): an int, or
  ``axis(a, rank) -> int`` where it depends on the attributes or the port's rank.
  ``Op.product_operands`` resolves it at an instance

Data for the registry-wide tests, in the entry: ``notes`` (conventions at kinks, ties, NaN),
``examples`` ({label: attributes}; '' is the defaults), ``bad_attributes`` ((attributes,
message fragment), ...: every ``check`` message), ``bad_inputs`` ((attributes, inputs,
message fragment), ...: every ``validate`` message), ``known_failures`` (KnownFailure: strict
xfails) and ``certificates`` (routes.certs).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

from roundoff_coverage.numerics.bounding import BoundingBackend

from . import certs, samples
from .attributes import Attr
from .errors import RouteError
from .ports import Port
from .rules import Rule
from .vocabulary import VOCABULARY

FAMILIES = ("elementwise", "transcendental", "rounding", "extrema", "activation", "logic",
            "integer", "scan_order", "indexing", "movement", "reduction", "product",
            "conv_pool", "normalization", "softmax_attention", "loss", "random", "spectral",
            "graph")
SAMPLE_KINDS = ("ordinary", "edges", "special", "magnitudes")
# Kinds derived from ``ordinary`` for every operator with value inputs that does not declare
# them (routes.samples).
DERIVED_KINDS = ("magnitudes",)
# Attrs is a Mapping: ``a.keys`` would read the method, not an attribute called "keys"; and
# ``op(name, **attributes)`` takes the operator's name first.
RESERVED_ATTRIBUTES = {"keys", "values", "items", "get", "replace", "name"}
# The wire record's format version (``Op.record``; routes.codec reads records).
VERSION = 1


@dataclass(frozen=True)
class Float64:
    """An independent binary64 implementation: ``forward(a, *xs) -> y | tuple`` and
    ``backward(a, xs, gs) -> gradient per input`` (or None where conventions differ), numpy
    on float64 arrays.  Tests compare it with the rule under numerics.native("float64");
    ``ulps`` is the agreement required (0: bit for bit)."""

    forward: Callable
    backward: Callable | None = None
    ulps: float = 0.0


@dataclass(frozen=True)
class KnownFailure:
    """A test known to fail for this operator: ``route`` is the test id's suffix after the
    operator's id (``forward-float64``), ``reason`` why, ``example`` the scope (an example's
    test id such as ``add-int8``; None: every example); turned into a strict xfail."""

    route: str
    reason: str
    example: str | None = None


@dataclass(frozen=True, eq=False)
class Decl:
    """Everything about one operator (see the module docstring for the signatures)."""

    name: str
    family: str
    attributes: tuple
    ports: Callable
    forward: Callable
    backward: Callable | None = None
    jvp: Callable | None = None
    needs: object = None
    no_rule: Callable | None = None
    no_jvp: Callable | None = None
    check: Callable | None = None
    proofs: Callable | None = None
    validate: Callable | None = None
    samples: Mapping = field(default_factory=dict)
    oracle: Callable | None = None
    float64: Float64 | None = None
    notes: tuple = ()
    examples: Mapping = field(default_factory=lambda: {"": {}})
    bad_attributes: tuple = ()
    bad_inputs: tuple = ()
    known_failures: tuple = ()
    products: Mapping = field(default_factory=dict)

    def need(self, attrs) -> str | None:
        """The capability the rule reads at ``attrs`` (None: every scalar)."""
        return self.needs(attrs) if callable(self.needs) else self.needs


_TABLE: dict[str, Decl] = {}


def define(name: str, family: str, *, attributes=(), ports, forward, certificates=(),
           **pieces) -> Decl:
    """Register operator ``name`` of ``family`` once; the keywords are Decl's fields and
    ``certificates`` its evidence ("derivative", "algebraic", "prepared", certs.convention,
    certs.roundoff).  Returns the declaration."""
    if name in _TABLE:
        raise ValueError(f"define: operator {name!r} is already registered")
    if family not in FAMILIES:
        raise ValueError(f"define: {name}: unknown family {family!r}")
    attributes = tuple(attributes)
    if not all(isinstance(at, Attr) for at in attributes):
        raise ValueError(f"define: {name}: attributes must be Attr values")
    if len({at.name for at in attributes}) != len(attributes):
        raise ValueError(f"define: {name}: attribute names must be distinct")
    shadowed = {at.name for at in attributes} & RESERVED_ATTRIBUTES
    if shadowed:
        raise ValueError(f"define: {name}: attribute name {sorted(shadowed)[0]!r} would be "
                         f"shadowed by a method of the attributes mapping (a.{sorted(shadowed)[0]})")
    unknown = set(pieces.get("samples", {})) - set(SAMPLE_KINDS)
    if unknown:
        raise ValueError(f"define: {name}: sample kinds must be among {SAMPLE_KINDS}")
    notes = pieces.pop("notes", ())
    pieces["notes"] = (notes,) if isinstance(notes, str) else tuple(notes)
    decl = Decl(name, family, attributes, ports, forward, **pieces)
    _TABLE[name] = decl
    stray = {p for attrs in decl.examples.values()
             for p in decl.products if p not in op(name, **dict(attrs)).input_names}
    if stray:
        _TABLE.pop(name)
        raise ValueError(f"define: {name}: products names {sorted(stray)[0]!r}, which is not "
                         f"an input")
    try:
        certs.register(name, certificates, _example_inputs(decl))
    except ValueError:
        _TABLE.pop(name)
        raise
    _add_enclosure_bound(name)
    return decl


def _example_inputs(decl) -> list:
    """The input ports at each example of ``decl`` (certificate positions are checked against
    them)."""
    return [op(decl.name, **dict(attrs)).inputs for attrs in decl.examples.values()]


def names() -> tuple[str, ...]:
    """Every registered operator name in the spec's order (shared/spec/operators.tsv, family
    by family); operators outside the spec (scratch ones in tests) last."""
    order = {row[1]: i for i, row in enumerate(VOCABULARY)}
    return tuple(sorted(_TABLE, key=lambda n: order.get(n, len(order))))


def declaration(name: str) -> Decl:
    """The declaration of ``name``; RouteError with close matches when there is none."""
    try:
        return _TABLE[name]
    except (KeyError, TypeError):
        raise RouteError(f"unknown operator {name!r}{close_matches(name)}") from None


def close_matches(name) -> str:
    """`` (close matches: a, b)`` for a misspelt operator name, or ``""``."""
    found = difflib.get_close_matches(str(name), list(_TABLE), n=4, cutoff=0.6)
    return f" (close matches: {', '.join(found)})" if found else ""


class Attrs(Mapping):
    """An operator's attributes in declaration order, read as ``a.shape`` or ``a["shape"]``."""

    __slots__ = ("_items",)

    def __init__(self, items: dict):
        object.__setattr__(self, "_items", dict(items))

    def __getattr__(self, key):
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key, value):
        raise AttributeError("attributes are immutable")

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return ", ".join(f"{k}={v!r}" for k, v in self._items.items())


def op(name: str, **attributes) -> "Op":
    """The operator ``name`` at ``attributes`` (defaults for the others), each converted to
    its canonical type.  Type errors raise RouteError; constraints between attributes are
    ``Op.check``'s."""
    decl = declaration(name)
    known = {at.name: at for at in decl.attributes}
    extra = [k for k in attributes if k not in known]
    if extra:
        have = ", ".join(known) or "none"
        raise RouteError(f"{name}: unknown attribute {extra[0]!r} (attributes: {have})")
    return Op(decl, Attrs({k: at.coerce(attributes.get(k, at.default), name)
                           for k, at in known.items()}))


class Op:
    """An operator instance: a declaration and its canonical attributes.  Operators compare
    and hash through their wire records, so ``op("relu", shape=(3,)) != op("relu",
    shape=(4,))``."""

    def __init__(self, decl: Decl, attrs: Attrs):
        self.decl, self.attrs = decl, attrs
        self._ports = None
        if decl.jvp is not None and decl.no_jvp is not None and decl.no_jvp(attrs):
            # The declaration as it applies here: no forward mode at these attributes, for
            # every reader of ``op.decl.jvp`` (the rule, the coverage runs, the tests).
            self.decl = _without_jvp(decl)

    name = property(lambda self: self.decl.name)
    family = property(lambda self: self.decl.family)

    def _port_dicts(self):
        if self._ports is None:
            try:
                ins, outs = self.decl.ports(self.attrs)
            except RouteError:
                raise
            except Exception:
                # A decoded operator that fails its check (a pooling with a zero stride) is
                # an operator value without meaningful ports: the check says why.
                problem = self.problem()
                if problem:
                    raise RouteError(problem) from None
                raise
            self._ports = (dict(ins), dict(outs))
        return self._ports

    @property
    def inputs(self) -> tuple[Port, ...]:
        """The input ports, computed from the attributes."""
        return tuple(self._port_dicts()[0].values())

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self._port_dicts()[0])

    @property
    def outputs(self) -> tuple[Port, ...]:
        return tuple(self._port_dicts()[1].values())

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self._port_dicts()[1])

    @property
    def product_operands(self) -> dict[str, int]:
        """{operand: its contraction axis} in port order for a product (the declaration's
        ``products``), {} for any other operator.  An axis is counted from the end and lies
        within the port's rank; a declared axis outside it (a rank-0 or rank-1 port) reads
        as -1, the last axis."""
        found = {}
        for name, port in self._port_dicts()[0].items():
            if name in self.decl.products:
                axis, rank = self.decl.products[name], len(port.shape)
                axis = axis(self.attrs, rank) if callable(axis) else axis
                found[name] = axis if -rank <= axis < 0 else -1
        return found

    @property
    def need(self) -> str | None:
        """The capability this instance's rule reads (None: every scalar has it)."""
        return self.decl.need(self.attrs)

    def problem(self) -> str | None:
        """The attribute check's message (prefixed with the name), or None when it passes:
        the proof attributes, then Op.check."""
        message = self.decl.proofs(self.attrs) if self.decl.proofs else None
        if not message and self.decl.check:
            message = self.decl.check(self.attrs)
        return f"{self.name}: {message}" if message else None

    def proof_problem(self) -> str | None:
        """What ``decode`` refuses: the proof attributes' message (the whole check where the
        declaration has no ``proofs``), prefixed with the name, or None."""
        if self.decl.proofs is None:
            return self.problem()
        message = self.decl.proofs(self.attrs)
        return f"{self.name}: {message}" if message else None

    def check(self) -> None:
        """Check the attributes the types do not settle; RouteError with the reason."""
        message = self.problem()
        if message:
            raise RouteError(message)

    @property
    def has_jvp(self) -> bool:
        """Whether the rule has a forward mode at these attributes (a declared ``jvp``, and
        ``no_jvp`` gives no reason here: then ``decl.jvp`` is None)."""
        return self.no_jvp_reason() is None

    def no_jvp_reason(self) -> str | None:
        """Why there is no forward mode at these attributes, or None when there is one."""
        reason = self.decl.no_jvp(self.attrs) if self.decl.no_jvp else None
        if reason:
            return f"no forward mode at these attributes: {reason}"
        return "no forward-mode rule is registered" if self.decl.jvp is None else None

    def no_rule_reason(self) -> str | None:
        """Why the operator has no rule at these attributes at any scalar (``no_rule``), or
        None when it has one wherever the scalar has the capability it needs."""
        return self.decl.no_rule(self.attrs) if self.decl.no_rule is not None else None

    def rule(self, backend):
        """The rule under ``backend``, or None when the operator has no rule at these
        attributes (``no_rule``) or the backend lacks the capability it needs there (never a
        substitute)."""
        if self.no_rule_reason():
            return None
        need = self.need
        if need is not None and need not in backend.capabilities:
            return None
        return Rule(self, backend)

    def samples(self, rng, fmt=None, kind: str = "ordinary") -> tuple:
        """Sample inputs of ``kind`` (SAMPLE_KINDS, or a DERIVED_KINDS where the operator has
        value inputs and ordinary samples) at this instance's ports: float64 arrays
        holding values of ``fmt`` (binary64 when None) at scalar ports, numpy integers or
        Booleans at the others.  RouteError when the operator declares no such sampler."""
        if kind in DERIVED_KINDS and kind not in self.decl.samples \
                and "ordinary" in self.decl.samples \
                and any(p.differentiable for p in self.inputs):
            xs = samples.magnitudes(rng, fmt, self, self.decl.samples["ordinary"](rng, fmt, self))
        elif self.decl.samples.get(kind) is None:
            raise RouteError(f"{self.name}: no {kind!r} samples declared")
        else:
            xs = tuple(self.decl.samples[kind](rng, fmt, self))
        for name, port, x in zip(self.input_names, self.inputs, xs):
            bad = port.mismatch(x)
            if bad:
                raise RuntimeError(f"{self.name}: sampler {kind} gave input {name} that "
                                   f"does not fit {port}: {bad}")
        return xs

    def replace(self, **changes) -> "Op":
        """This operator with some attributes changed."""
        return op(self.name, **{**self.attrs, **changes})

    def record(self) -> dict:
        """The wire record (routes.encode): version, tag, typed fields in order."""
        return {"version": VERSION, "tag": self.name,
                "fields": [at.to_field(self.attrs[at.name]) for at in self.decl.attributes]}

    def _key(self):
        rec = self.record()
        def frozen(v):
            return tuple(frozen(x) for x in v) if isinstance(v, list) else v
        return rec["tag"], tuple((w, frozen(v)) for w, v in rec["fields"])

    def __eq__(self, other):
        return isinstance(other, Op) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        args = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        return f"op({self.name!r}{args})"


_WITHOUT_JVP: dict = {}


def _without_jvp(decl: Decl) -> Decl:
    """``decl`` with ``jvp`` None (one copy per declaration): what ``Op.decl`` is at the
    attributes where ``no_jvp`` gives a reason."""
    if decl not in _WITHOUT_JVP:
        _WITHOUT_JVP[decl] = dataclasses.replace(decl, jvp=None)
    return _WITHOUT_JVP[decl]


def _add_enclosure_bound(name):
    """Append the numerics.bounding certificate when the declaration's rule runs there: its
    capability need (at every example, for needs that depend on the attributes) is one the
    bounding backend supplies."""
    decl = _TABLE[name]
    needs = {op(name, **dict(attrs)).need for attrs in decl.examples.values()} \
        if callable(decl.needs) else {decl.needs}
    if all(n is None or n in BoundingBackend.capabilities for n in needs):
        certs.extend(name, (certs.enclosure_bound(name, decl.needs),))


def certificates(name: str) -> tuple:
    """The certificates registered for operator ``name`` (routes.certs; empty when none)."""
    declaration(name)                     # RouteError with close matches for unknown names
    return certs.registered(name)


def extend_certificates(name: str, specs) -> tuple:
    """Register more certificates (routes.certs specs) of the registered operator ``name``
    after those of its declaration (routes.bounds adds the enclosure certificates of its IBP
    arms this way); one already registered is not added again.  Returns all of them."""
    declaration(name)                     # RouteError with close matches for unknown names
    return certs.extend(name, specs)


def withdraw(name: str) -> None:
    """Remove operator ``name`` and its certificates (for tests that declare a scratch
    operator; the table itself never withdraws an operator)."""
    decl = _TABLE.pop(name, None)
    _WITHOUT_JVP.pop(decl, None)
    certs.withdraw(name)

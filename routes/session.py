"""The eager session (spec: "Session.apply records an operator whose first output is a value
port on the session's tape ... and returns a reference to that output"):
``Session(backend)`` runs registered operators one call at a time and records them.

    s = Session(numerics.reference(200))
    x = s.input("x", x_array)                       # a graph input (value port)
    w, b = s.input("w", w_array), s.input("b", b_array)
    h = s.relu(s.linear(w, b, x))                    # attributes inferred from the shapes
    p = s.softmax(h, axis=-1)                       # a negative axis counts from the end
    s.output(p)
    g = s.graph()                                   # the routes.Graph a capture would give

Each call builds the operator (``routes.op(name, **attributes)``), evaluates it at once on
the backend with invoke's staged checks (``invoke_prepared``: attributes, ports, rule,
validate) and appends the node to the tape; it returns a ``Value`` (the node's Ref, the
backend's result ``.value``, its port and ``.shape``), a tuple of Values for several outputs.
(The spec's Session.apply takes operators whose first output is a value port and returns
that output; this session takes every registered operator, comparisons and index outputs
included, and returns every output.)

Arguments: Values of this session; plain numbers and arrays become graph constants at the
operator's port (a number at a scalar port of any shape is filled to that shape, float64;
arrays must have the port's shape: integer arrays at index or word ports, Booleans at
Boolean ports).  A Value of another session is refused.

Attributes left out (``routes.op``'s defaults otherwise), inferred from the arguments' shapes:

- ``shape`` (the operand's shape): the shape of the argument whose port, at the operator's
  default attributes, has the default ``shape``; else that of the first argument with a
  shape (a Value or an array);
- ``<input>_shape`` (matmul's ``x_shape``, ``y_shape``): the shape of argument ``<input>``;
- linear's ``batch``, ``in_features``, ``out_features`` from its weight and x, and the
  attention operators' ``batch``, ``queries``, ``key_count``, ``dim``, ``value_dim`` from
  q, k, v (or scores, v);
- a negative ``axis`` (or entry of ``axes``) counts from the end of ``shape``.

Everything else is given by keyword (``s.reshape(x, to=(6,))``,
``s.pool(x, mode="max", kernel=(2,), ...)``).

Tape order is graph order: inputs in the order of ``input``, constants and nodes in the
order they were made.  ``s.graph()`` replays the tape into a new ``routes.Graph`` (every node
checked again), with ``example_inputs`` the arrays given to ``input`` and ``source``
``{"frontend": "session"}``; run under the session's backend (``GraphRule``) on those inputs
it gives bit for bit the values the session returned (for a deterministic backend: stochastic
rounding draws anew), and ``graph.rule(backend).backward`` its gradients.

Every refusal is one RouteError line naming the operator and the argument (``session: ...``
for the session's own checks, invoke's messages for the operator's); an unknown operator
name read as an attribute (``s.relux``) is an AttributeError listing close matches.
"""

from __future__ import annotations

import difflib

import numpy as np

from . import ports as P
from .errors import RouteError
from .graph import CONSTANT, INPUT, Graph, Ref
from .invoke import invoke_prepared
from .registry import Op, declaration, names
from .registry import op as make_op


class Value:
    """One value of a session: an input, a constant or a node's output.  ``ref`` names it in
    the session's graph, ``port`` is its port, ``value`` what the backend computed (for an
    input or a constant: the array as the backend reads it, ``asarray`` at scalar ports)."""

    __slots__ = ("session", "ref", "port", "value")

    def __init__(self, session, ref: Ref, port, value):
        self.session, self.ref, self.port, self.value = session, ref, port, value

    @property
    def shape(self) -> tuple:
        return self.port.shape

    def numpy(self) -> np.ndarray:
        """The value as numpy: the backend's ``to_float64`` at scalar ports (each number
        rounded once to binary64), the array itself at index, Boolean and word ports."""
        if self.port.scalar:
            return self.session.backend.to_float64(self.value)
        return np.asarray(self.value)

    def __repr__(self):
        return f"<session value {self.session._label(self.ref)}: {self.port}>"


class Session:
    """A tape of registered operators evaluated eagerly under ``backend`` (module
    docstring).  ``s.<operator>(*args, **attributes)`` is ``s.apply("<operator>", ...)``."""

    def __init__(self, backend):
        if not hasattr(backend, "asarray") or not hasattr(backend, "capabilities"):
            raise RouteError(f"session: backend must be a numerics backend such as "
                             f"numerics.reference(200) (got {type(backend).__name__})")
        self.backend = backend
        self._inputs: list = []            # (name, port, example array)
        self._constants: list = []         # (array, port, name)
        self._nodes: list = []             # (op, arg refs, name, module)
        self._outputs: tuple = ()

    # ----- the tape's sources -----------------------------------------------------------------
    def input(self, name: str, array, port=None) -> Value:
        """Declare graph input ``name`` with example ``array`` (a value port of its shape, a
        Boolean port for Booleans, unless ``port`` is given: an index, word or frozen
        port); its Value."""
        if not isinstance(name, str) or not name:
            raise RouteError(f"session: an input name must be a non-empty string (got "
                             f"{name!r})")
        if any(name == n for n, _, _ in self._inputs):
            raise RouteError(f"session: input {name!r} is already declared (input names are "
                             f"distinct)")
        a = np.asarray(array)
        if port is None:
            if a.dtype.kind not in "fiub":
                raise RouteError(f"session: input {name}: a {a.dtype} array needs a port "
                                 f"(port=routes.ports.index(bounds, shape), ...)")
            port = P.boolean(a.shape) if a.dtype.kind == "b" else P.value(a.shape)
        if not isinstance(port, P.Port):
            raise RouteError(f"session: input {name}: port must be a routes.Port (got "
                             f"{type(port).__name__})")
        return self._held(INPUT, self._inputs, (name, port, a), f"input {name}", port, a)

    def constant(self, array, port=None, name: str = "") -> Value:
        """A graph constant holding ``array`` (a frozen port for floats, Boolean for Booleans;
        ``port`` for index or word arrays); its Value."""
        a = np.asarray(array)
        label = name or f"constant {len(self._constants)}"
        if port is None:
            if a.dtype.kind in "iu":
                a = a.astype(np.float64)          # a number, not an index: exact below 2**53
            if a.dtype.kind not in "fb":
                raise RouteError(f"session: {label}: a {a.dtype} array needs a port")
            port = P.boolean(a.shape) if a.dtype.kind == "b" else P.frozen(a.shape)
        return self._held(CONSTANT, self._constants, (a, port, name), label, port, a)

    def _held(self, kind, entries, entry, what, port, a) -> Value:
        """``entry`` appended to ``entries`` (the inputs or the constants) once the array
        ``a`` fits ``port``; the Value of the graph's ``kind`` reference to it."""
        bad = port.mismatch(a)
        if bad:
            raise RouteError(f"session: {what} expects {port} ({bad})")
        entries.append(entry)
        value = self.backend.asarray(a) if port.scalar else a
        return Value(self, Ref(kind, len(entries) - 1), port, value)

    # ----- operators --------------------------------------------------------------------------
    def apply(self, operator, *args, name: str = "", module: str = "", **attributes):
        """Apply registered operator ``operator`` (a name, or an Op with its attributes) to
        ``args``: evaluated now under the backend (staged checks), recorded on the tape.
        The output's Value, or a tuple of Values when the operator has several."""
        if isinstance(operator, Op):
            if attributes:
                raise RouteError(f"session: {operator.name}: attributes are given by the Op "
                                 f"already (got {', '.join(sorted(attributes))} too)")
            o, inferred = operator, ()
        elif isinstance(operator, str):
            o, inferred = self._build(operator, args, attributes)
        else:
            raise RouteError(f"session: the operator must be a registered name or a "
                             f"routes.Op (got {type(operator).__name__})")
        o.check()
        if len(args) != len(o.inputs):
            plural = "argument" if len(o.inputs) == 1 else "arguments"
            raise RouteError(f"session: {o.name}: expects {len(o.inputs)} {plural} "
                             f"({', '.join(o.input_names)}) (got {len(args)})")
        values = [self._argument(o, i, v, inferred) for i, v in enumerate(args)]
        outs, _ = invoke_prepared(o, [v.value for v in values], self.backend)
        self._nodes.append((o, tuple(v.ref for v in values), str(name), str(module)))
        k = len(self._nodes) - 1
        results = tuple(Value(self, Ref(k, j), p, y) for j, (y, p) in
                        enumerate(zip(outs, o.outputs)))
        return results[0] if len(results) == 1 else results

    def __getattr__(self, key):
        if key.startswith("_"):
            raise AttributeError(key)
        if key not in names():
            found = difflib.get_close_matches(key, list(names()), n=3, cutoff=0.6)
            hint = f" (close matches: {', '.join(found)})" if found else ""
            raise AttributeError(f"session: no registered operator {key!r}{hint}")

        def call(*args, **attributes):
            return self.apply(key, *args, **attributes)
        call.__name__ = key
        return call

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(names()))

    def output(self, *values) -> "Session":
        """Mark ``values`` (Values of this session) as the graph's outputs, in order."""
        if not values:
            raise RouteError("session: output needs at least one value")
        for i, v in enumerate(values):
            self._own(v, f"output {i}")
        self._outputs = tuple(v.ref for v in values)
        return self

    def graph(self) -> Graph:
        """The tape as a new routes.Graph: the inputs, constants and nodes in tape order,
        the outputs given to ``output``; ``example_inputs`` and ``source`` set."""
        if not self._outputs:
            raise RouteError("session: no outputs marked (call s.output(value, ...) before "
                             "s.graph())")
        g = Graph(**{n: p for n, p, _ in self._inputs})
        for a, port, name in self._constants:
            g.constant(a, port, name=name)
        for o, refs, name, module in self._nodes:
            g.apply(o, *refs, name=name, module=module)
        g.output(*self._outputs)
        g.example_inputs = tuple(a for _, _, a in self._inputs)
        g.source = {"frontend": "session"}
        return g

    # ----- helpers ----------------------------------------------------------------------------
    def _label(self, ref: Ref) -> str:
        if ref.node == INPUT:
            return f"input {self._inputs[ref.index][0]!r}"
        if ref.node == CONSTANT:
            return self._constants[ref.index][2] or f"constant {ref.index}"
        return f"node {ref.node} ({self._nodes[ref.node][0].name}) output {ref.index}"

    def _own(self, v, where):
        if not isinstance(v, Value):
            raise RouteError(f"session: {where} must be a session value (got "
                             f"{type(v).__name__})")
        if v.session is not self:
            raise RouteError(f"session: {where} is a value of another session (pass values "
                             f"of this session, or numbers and arrays)")

    def _argument(self, o, i, v, inferred=()) -> Value:
        """Argument ``i`` of ``o`` as a Value of this session at its port (numbers and
        arrays made graph constants); ``inferred`` names the attributes read from the
        arguments' shapes (a mismatch suggests giving them)."""
        arg, want = o.input_names[i], o.inputs[i]
        if isinstance(v, Value):
            self._own(v, f"{o.name}: argument {arg}")
            have = v.port
            fits = have.shape == want.shape if have.scalar and want.scalar else have == want
            if not fits:
                it = "it" if len(inferred) == 1 else "them"
                hint = f" (inferred {', '.join(inferred)} from the arguments: give {it} by " \
                       f"keyword)" if inferred else ""
                raise RouteError(f"session: {o.name}: argument {arg} expects {want} but "
                                 f"{self._label(v.ref)} is {have}{hint}")
            return v
        if isinstance(v, (Ref, Session)) or v is None:
            raise RouteError(f"session: {o.name}: argument {arg} must be a session value, a "
                             f"number or an array (got {type(v).__name__})")
        a = np.asarray(v)
        if want.scalar:
            if a.dtype.kind not in "fiub":
                raise RouteError(f"session: {o.name}: argument {arg} expects {want} (got a "
                                 f"{a.dtype} array)")
            a = a.astype(np.float64)
            if a.ndim == 0 and want.shape:
                a = np.full(want.shape, a[()])
            port = P.frozen(want.shape)
        else:
            port = want
        bad = port.mismatch(a)
        if bad:
            raise RouteError(f"session: {o.name}: argument {arg} expects {want} ({bad})")
        return self.constant(a, port, name=f"{o.name}.{arg}")

    def _build(self, name, args, attributes) -> tuple:
        """(``routes.op(name, **attributes)`` with the attributes the module docstring
        lists inferred from the arguments' shapes, the names of those inferred)."""
        decl = declaration(name)
        known = {at.name: at for at in decl.attributes}
        extra = [k for k in attributes if k not in known]
        if extra:
            raise RouteError(f"session: {name}: unknown attribute {extra[0]!r} (attributes: "
                             f"{', '.join(known) or 'none'})")
        shapes = [_shape_of(v) for v in args]
        given = dict(attributes)
        try:
            inferred = _INFER[name](shapes) if name in _INFER else {}
        except (IndexError, TypeError):           # too few arguments, or numbers: none
            inferred = {}
        for key, val in inferred.items():
            given.setdefault(key, val)
        try:
            plain = make_op(name, **{k: v for k, v in given.items() if not _negative(v)})
            in_names = plain.input_names
        except RouteError:                        # ports at the given attributes need more
            plain = make_op(name)
            in_names = plain.input_names
        for key, at in known.items():
            if key in given or at.wire != "shape":
                continue
            src = key[:-len("_shape")] if key.endswith("_shape") else None
            if src in in_names and in_names.index(src) < len(shapes) \
                    and shapes[in_names.index(src)] is not None:
                given[key] = shapes[in_names.index(src)]
            elif key == "shape":
                found = _shape_argument(plain, shapes, at.default)
                if found is not None:
                    given[key] = found
        rank = len(given.get("shape", known["shape"].default if "shape" in known else ()))
        for key in ("axis", "axes"):
            if key in given and key in known and known[key].wire in ("nat", "nats"):
                given[key] = _from_end(given[key], rank)
        return make_op(name, **given), tuple(k for k in given if k not in attributes)


def _shape_of(v):
    """The shape an argument offers for inference (None for numbers)."""
    if isinstance(v, Value):
        return v.shape
    if isinstance(v, np.ndarray) and v.ndim:
        return v.shape
    return None


def _negative(v) -> bool:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return v < 0
    if isinstance(v, (list, tuple)):
        return any(_negative(x) for x in v)
    return False


def _from_end(v, rank):
    """A PyTorch-style axis (negative counts from the end) as a natural, or the list."""
    if isinstance(v, (list, tuple)):
        return tuple(_from_end(x, rank) for x in v)
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v < 0:
        return int(v) + rank
    return v


def _shape_argument(plain, shapes, default):
    """The shape of the argument whose port has the default ``shape`` (at the operator's
    default attributes), else that of the first argument with a shape."""
    for port, s in zip(plain.inputs, shapes):
        if s is not None and port.shape == tuple(default):
            return s
    return next((s for s in shapes if s is not None), None)


def _linear(shapes):
    w, _, x = shapes[:3]
    if len(w) != 2 or not x:
        return {}
    return {"batch": x[:-1], "in_features": w[1], "out_features": w[0]}


def _attention(shapes):
    q, k, v = shapes[:3]
    if min(len(q), len(k), len(v)) < 2:
        return {}
    return {"batch": q[:-2], "queries": q[-2], "key_count": k[-2], "dim": q[-1],
            "value_dim": v[-1]}


def _from_scores(shapes):
    s, v = shapes[:2]
    if min(len(s), len(v)) < 2:
        return {}
    return {"batch": s[:-2], "queries": s[-2], "key_count": s[-1], "value_dim": v[-1]}


_INFER = {"linear": _linear, "attention": _attention, "attentionFromScores": _from_scores}

"""Graph IR: a straight-line list of registered operators, evaluated forward with the same
checks as ``invoke``, with a tape for the reverse sweep and a forward-mode sweep (spec:
``TorchLean.IR.Graph.run`` and the CPU tape).

    g = Graph(x=value((3,)), w1=value((3,)), w2=value((3,)))
    h = g.apply(op("mul", shape=(3,)), g.input("x"), g.input("w1"))
    r = g.apply(op("relu", shape=(3,)), h)
    g.output(g.apply(op("mul", shape=(3,)), r, g.input("w2")))
    rule = g.rule(backend)            # a route: forward, backward, jvp, prepare, validate

A node's argument is a ``Ref`` to a graph input, a graph constant or an earlier node's
output; a scalar source (value, frozen, detached) fits any scalar port of the same shape,
other kinds must match exactly.

Constants: ``g.constant(array)`` stores an array in the graph (a buffer such as a running
mean, a folded creation, a number such as an epsilon) and returns its Ref; the graph holds
it at a frozen port (``port=`` for index, Boolean or word arrays), so it is never an input
of ``forward``/``backward``/``jvp``, receives no gradient and carries no tangent.  Under a
backend a scalar constant is read with ``xp.asarray`` once per sweep, as an input is.

Names: ``g.apply(op, *refs, name=..., module=...)`` labels a node (a frontend keeps its
source's node names and module paths); ``node_names`` and ``node_modules`` list them, node
by node (``node<k>`` and ``""`` where none was given).  ``example_inputs`` is None, or the
example arrays a frontend captured, one per input in order.  ``source`` is a dict of JSON
data on what built the graph (``{}`` by hand; from_torch: frontend, module, class, torch
version).  ``g.save(path)`` writes the graph as a JSON artifact (routes.artifact) and
``routes.load_graph(path)`` reads it back (routes.artifact_load).

Gradients flow only into value ports: a frozen or detached port reads its source without
sending it a contribution.

The reverse sweep visits the nodes from the last to the first and reads each node's rule
for the order of its contributions (``Rule.order``: input order) and for how one joins what
a value already holds (``Rule.alias``: one backend addition, the held sum on the left).
So mul(x, x) sends x the contribution of input 0, then adds that of input 1; a value read
by several nodes receives the latest node's contribution first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import artifact
from .errors import RouteError
from .invoke import checked_rule, invoke_maps, invoke_prepared, rule_for
from .ports import Port, boolean, frozen
from .rules import Outputs, each_route


INPUT, CONSTANT = -1, -2         # Ref.node of a graph input, of a graph constant


@dataclass(frozen=True)
class Ref:
    """A value in a graph: output ``index`` of node ``node``, graph input ``index`` when
    ``node`` is -1 (INPUT), graph constant ``index`` when it is -2 (CONSTANT)."""

    node: int
    index: int

    def __str__(self):
        if self.node == INPUT:
            return f"input {self.index}"
        if self.node == CONSTANT:
            return f"constant {self.index}"
        return f"node {self.node} output {self.index}"

    def record(self) -> list:
        """The graph artifact's REF (routes.artifact): ``["input", i]``, ``["constant", i]``
        or ``["node", k, j]``."""
        if self.node == INPUT:
            return ["input", self.index]
        if self.node == CONSTANT:
            return ["constant", self.index]
        return ["node", self.node, self.index]


@dataclass(frozen=True)
class Node:
    """One operator applied to earlier values; ``name`` and ``module`` label it (empty when
    not given)."""

    op: object
    args: tuple
    name: str = ""
    module: str = ""


def _fits(source: Port, target: Port) -> bool:
    if source.scalar and target.scalar:
        return source.shape == target.shape
    return source == target


class Graph:
    """A straight-line program of registered operators over named input ports."""

    name = "graph"

    def __init__(self, **inputs: Port):
        self.input_names = tuple(inputs)
        self.inputs = tuple(inputs.values())
        self.nodes: list[Node] = []
        self._outputs: tuple = ()
        self._output_names: tuple | None = None   # None: out0, out1, ...
        self.constants: list = []              # arrays, by Ref(CONSTANT, k)
        self.constant_ports: list[Port] = []
        self.constant_names: list[str] = []
        self.example_inputs = None
        self.source: dict = {}                  # JSON data: what built the graph
        self.operator = None                    # the operator a one_node graph is

    @property
    def node_names(self) -> tuple:
        """Each node's name (``node<k>`` where none was given)."""
        return tuple(n.name or f"node{k}" for k, n in enumerate(self.nodes))

    @property
    def node_modules(self) -> tuple:
        """Each node's module path (``""`` where none was given)."""
        return tuple(n.module for n in self.nodes)

    # ----- building ---------------------------------------------------------------------------
    def input(self, name: str) -> Ref:
        """The reference to graph input ``name``."""
        if name not in self.input_names:
            raise RouteError(f"graph: no input {name!r} (inputs: {', '.join(self.input_names)})")
        return Ref(-1, self.input_names.index(name))

    def constant(self, array, port: Port | None = None, name: str = "") -> Ref:
        """Store ``array`` (numpy) as a constant of the graph and return its Ref.  Its port
        is ``port``, by default frozen (a float array) or Boolean (a bool array); integer
        arrays need an index or word ``port``.  RouteError when the array does not fit."""
        a = np.asarray(array)
        if port is None:
            if a.dtype.kind not in "fb":
                raise RouteError(f"graph: constant {name or len(self.constants)}: a "
                                 f"{a.dtype} array needs an index or word port")
            port = boolean(a.shape) if a.dtype.kind == "b" else frozen(a.shape)
        bad = port.mismatch(a)
        if bad:
            raise RouteError(f"graph: constant {name or len(self.constants)} expects {port} "
                             f"({bad})")
        self.constants.append(a)
        self.constant_ports.append(port)
        self.constant_names.append(name)
        return Ref(CONSTANT, len(self.constants) - 1)

    def port(self, ref: Ref) -> Port:
        """The port of the value ``ref`` names."""
        if ref.node == INPUT:
            return self.inputs[ref.index]
        if ref.node == CONSTANT:
            return self.constant_ports[ref.index]
        return self.nodes[ref.node].op.outputs[ref.index]

    def _names(self, ref, k) -> bool:
        """Whether ``ref`` names a graph input, a constant or a node before node ``k``."""
        if not isinstance(ref, Ref):
            return False
        if ref.node in (INPUT, CONSTANT):
            held = self.inputs if ref.node == INPUT else self.constants
            return 0 <= ref.index < len(held)
        return 0 <= ref.node < k and 0 <= ref.index < len(self.nodes[ref.node].op.outputs)

    def apply(self, op, *args: Ref, name: str = "", module: str = ""):
        """Append ``op`` applied to ``args`` (the node labelled ``name``, in ``module``); its
        output Ref (a tuple of Refs when it has several).  The attributes and each
        argument's port are checked here already."""
        k = len(self.nodes)
        op.check()
        if len(args) != len(op.inputs):
            raise RouteError(f"graph node {k} ({op.name}): expects {len(op.inputs)} arguments "
                             f"({', '.join(op.input_names)}) (got {len(args)})")
        for arg, want, ref in zip(op.input_names, op.inputs, args):
            if not self._names(ref, k):
                raise RouteError(f"graph node {k} ({op.name}): argument {arg} must name a "
                                 f"graph input or an earlier node, or a constant (got {ref!r})")
            if not _fits(self.port(ref), want):
                raise RouteError(f"graph node {k} ({op.name}): argument {arg} expects {want} "
                                 f"but {ref} is {self.port(ref)}")
        self.nodes.append(Node(op, tuple(args), name, module))
        refs = tuple(Ref(k, j) for j in range(len(op.outputs)))
        return refs[0] if len(refs) == 1 else refs

    def output(self, *refs: Ref, names=None) -> "Graph":
        """Set the graph's outputs (``names``: one distinct non-empty name each, by default
        ``out0``, ``out1``...); returns the graph."""
        for ref in refs:
            if not self._names(ref, len(self.nodes)):
                raise RouteError(f"graph: an output must name a graph input, a constant or "
                                 f"a node (got {ref!r})")
        if names is not None:
            names = tuple(names)
            if len(names) != len(refs) or len(set(names)) != len(names) or \
                    not all(isinstance(n, str) and n for n in names):
                raise RouteError(f"graph: output names must be {len(refs)} distinct non-empty "
                                 f"strings (got {list(names)})")
            if names == tuple(f"out{i}" for i in range(len(refs))):
                names = None
        self._outputs = tuple(refs)
        self._output_names = names
        return self

    @property
    def output_refs(self) -> tuple:
        """The Refs the graph outputs, in order."""
        return self._outputs

    @property
    def outputs(self) -> tuple:
        return tuple(self.port(r) for r in self._outputs)

    @property
    def output_names(self) -> tuple:
        """Each output's name: those given to ``output`` (a frontend names them by the
        model's fields: ``logits``, ``out1.0``), else ``out0``, ``out1``..."""
        if self._output_names is not None:
            return self._output_names
        return tuple(f"out{i}" for i in range(len(self._outputs)))

    def save(self, path) -> str:
        """Write the graph to ``path`` as a JSON artifact (routes.artifact.save); its sha256
        (routes.graph_hash)."""
        return artifact.save(self, path)

    def rule(self, backend):
        """The graph as a route under ``backend``; None when some node has no rule there."""
        if any(node.op.rule(backend) is None for node in self.nodes):
            return None
        return GraphRule(self, backend)

    def run(self, inputs, backend) -> tuple:
        """The graph's outputs, every node invoked with the staged checks."""
        return GraphRule(self, backend).forward(inputs)


def one_node(op) -> Graph:
    """The operator instance ``op`` as a graph of one node: the operator's inputs are the
    graph's (under their port names), its outputs the graph's; its errors are the
    operator's own messages (no node label).  The engine evaluates an
    operator's routes as this graph's (GraphRule.routes): one interpreter for operators
    and models."""
    g = Graph(**dict(zip(op.input_names, op.inputs)))
    g.operator = op
    refs = g.apply(op, *(Ref(INPUT, i) for i in range(len(op.inputs))))
    return g.output(*(refs if isinstance(refs, tuple) else (refs,)), names=op.output_names)


@dataclass
class Trace:
    """Every value of a graph's sweeps (GraphRule.trace): ``values`` {Ref: value} (inputs,
    constants, node outputs), ``cotangents`` {Ref: the accumulated cotangent} of the values
    the reverse sweep reached, ``contributions`` {(node, argument index): the node's pullback
    output for that argument}, ``tangents`` {Ref: tangent} of the forward-mode sweep."""

    values: dict
    cotangents: dict = field(default_factory=dict)
    contributions: dict = field(default_factory=dict)
    tangents: dict = field(default_factory=dict)


@dataclass
class Tape:
    """A forward sweep kept for later reverse sweeps (GraphRule.taped): ``values`` {Ref:
    value}, ``active`` {Ref: whether a gradient reaches it}, ``entries`` per node (gradient
    flags of its arguments, its pullback, its rule)."""

    values: dict
    active: dict
    entries: list


class GraphRule:
    """A graph under one backend, with the interface of routes.Rule."""

    has_jvp = True

    def __init__(self, graph: Graph, xp):
        self.graph, self.xp = graph, xp

    @property
    def order(self) -> tuple:
        """The graph's inputs in the order its contributions are emitted (input order)."""
        return tuple(range(len(self.graph.inputs)))

    def alias(self, held, incoming):
        """Like Rule.alias: one backend addition, the held sum on the left."""
        return incoming if held is None else self.xp.add(held, incoming)

    def _inputs(self, inputs) -> tuple:
        inputs = tuple(inputs)
        g = self.graph
        if len(inputs) != len(g.inputs):
            raise RouteError(f"graph: expects {len(g.inputs)} inputs "
                             f"({', '.join(g.input_names)}) (got {len(inputs)})")
        out = []
        for name, port, x in zip(g.input_names, g.inputs, inputs):
            bad = port.mismatch(x)
            if bad:
                raise RouteError(f"graph: input {name} expects {port} ({bad})")
            out.append(self.xp.asarray(x) if port.scalar else x)
        return tuple(out)

    def _constants(self) -> dict:
        """The graph's constants as the backend reads them (scalar ports via asarray)."""
        g = self.graph
        return {Ref(CONSTANT, i): self.xp.asarray(c) if p.scalar else c
                for i, (c, p) in enumerate(zip(g.constants, g.constant_ports))}

    def _node_error(self, k, exc):
        if self.graph.operator is not None:
            return exc              # an operator instance (``one_node``): its own message
        return RouteError(f"graph node {k} ({self.graph.nodes[k].op.name}): {exc}")

    def _sweep(self, inputs, needs_grad, override=None, post=None, pre=None, checks=True,
               store=None):
        """Forward sweep recording the tape: values, needs-grad flags and pullbacks.
        ``override``: {node index: backend} nodes evaluated under another backend, their
        outputs read back into this one (``asarray``: rounded once into its format);
        ``post``, ``pre``, ``store``: as in ``trace``; ``checks`` False: no staged checks
        (``routes``)."""
        g = self.graph
        vals = {Ref(-1, i): x for i, x in enumerate(self._inputs(inputs))}
        active = {Ref(-1, i): bool(f) and p.differentiable
                  for i, (f, p) in enumerate(zip(needs_grad, g.inputs))}
        consts = self._constants()
        vals.update(consts)
        active.update((r, False) for r in consts)
        if store is not None:
            vals = dict(zip(vals, store.put(list(vals.values()))))
        tape = []
        for k, node in enumerate(g.nodes):
            flags = tuple(active[r] and p.differentiable for r, p in zip(node.args, node.op.inputs))
            args = [vals[r] for r in node.args]
            outs, entry = self._evaluate(k, args, flags, (override or {}).get(k, self.xp),
                                         pre, post, checks, store)
            if store is not None:
                store.done(args)
            for j, (y, p) in enumerate(zip(outs, node.op.outputs)):
                vals[Ref(k, j)] = y
                active[Ref(k, j)] = any(flags) and p.differentiable
            tape.append(entry)
        return vals, active, tape

    def _evaluate(self, k, args, flags, xp, pre=None, post=None, checks=True,
                  store=None) -> tuple:
        """(outputs, tape entry: (flags, pullback, rule, pushforward)) of node ``k`` on
        ``args`` under backend ``xp``, as ``_sweep`` evaluates it; ``store`` as in
        ``trace``: the outputs stored, and what the pullback holds (its read arguments,
        the outputs and intermediates), its pages given back after each call."""
        node = self.graph.nodes[k]
        if pre is not None:
            args = list(_posted(pre, "argument", k, args))
        held = []
        keep = None if store is None else _keeper(store, held)
        try:
            # The values are this backend's numbers already: read once, where made.
            outs, pull, push = invoke_maps(node.op, args, xp, flags, xp is not self.xp,
                                           keep) if checks else \
                rule_for(node.op, xp).maps(args, flags, xp is not self.xp, keep)
            rule = rule_for(node.op, self.xp)      # the order and alias of this sweep
        except RouteError as exc:
            raise self._node_error(k, exc) from None
        if xp is not self.xp:
            outs, pull, push = self._read_back(node.op.outputs, outs), \
                self._pull_back(node.op.inputs, pull), \
                self._pull_back(node.op.outputs, push)
        if pre is not None:
            pull = _pre_pull(pre, k, pull)
        if post is not None:
            outs = _posted(post, "value", k, outs)
            pull = _posted_pull(post, k, pull)
        if store is not None:
            outs = tuple(store.put(list(outs)))          # as posted (held once already)
            pull = _releasing(store, pull, held)
        # push: the node's pushforward at these values (GraphRule.routes; without the
        # hooks, which routes never passes).
        return outs, (flags, pull, rule, push)

    def forward(self, inputs) -> tuple:
        vals, _, _ = self._sweep(inputs, (False,) * len(self.graph.inputs))
        return tuple(vals[r] for r in self.graph._outputs)

    def validate(self, inputs) -> None:
        """Every node's checks along a forward sweep."""
        self.forward(inputs)

    def prepare(self, inputs, needs_grad):
        """(outputs, pullback): the tape's forward sweep, and its reverse sweep."""
        g = self.graph
        needs = tuple(bool(f) and p.differentiable for f, p in zip(needs_grad, g.inputs))
        vals, active, tape = self._sweep(inputs, needs)

        def pullback(cotangents):
            return self._gradients(vals, active, tape, cotangents, needs)
        return tuple(vals[r] for r in g._outputs), pullback

    def routes(self, inputs, wanted, tangents=None, cotangents=None, before=None) -> dict:
        """Rule.routes of the graph: one forward sweep, then for each route of ``wanted``
        the outputs (``forward``), the output tangents from ``tangents`` (``tangent``: each
        node's pushforward at the sweep's values) or the gradients of the value inputs from
        ``cotangents`` (``gradient``: the reverse sweep); an exception of the forward sweep
        propagates, a route's own is its result.  ``before(route)`` as in Rule.routes.  An
        operator instance's routes are its one-node graph's (``one_node``).  As Rule.routes,
        no staged checks: the inputs are the caller's to check (``invoke``; the coverage
        run's samplers draw inside each operator's domain, and a bound propagation's
        enclosures cannot be held to a value-domain check)."""
        g = self.graph
        needs = tuple(p.differentiable for p in g.inputs)
        vals, active, tape = self._sweep(inputs, needs, checks=False)
        name = "graph" if g.operator is None else g.operator.name
        return each_route(name, wanted, before, {
            "forward": lambda: tuple(vals[r] for r in g._outputs),
            "tangent": lambda: self._pushed(vals, tape, tangents),
            "gradient": lambda: self._gradients(vals, active, tape, cotangents, needs)})

    def _gradients(self, vals, active, tape, cotangents, needs) -> tuple:
        """The gradient of each input whose flag in ``needs`` is on (zeros where no
        cotangent reaches it), None at the others: the reverse sweep of a taped sweep."""
        cots = self._reverse(active, tape, cotangents)
        return tuple((cots[Ref(-1, i)] if Ref(-1, i) in cots else
                      self.xp.zeros_like(vals[Ref(-1, i)])) if need else None
                     for i, need in enumerate(needs))

    def _pushed(self, vals, tape, tangents) -> tuple:
        """The output tangents from ``tangents`` (one per input; None: zero) at a taped
        sweep's values: the input tangents read once, each node's pushforward in order
        (nothing is evaluated forward again), zeros at value outputs no tangent reaches."""
        g, xp = self.graph, self.xp
        tangents = tuple(tangents)
        if len(tangents) != len(g.inputs):
            raise RouteError(f"graph: expects {len(g.inputs)} tangents (got {len(tangents)})")
        tans = {Ref(-1, i): xp.asarray(t) for i, (t, p) in enumerate(zip(tangents, g.inputs))
                if t is not None and p.differentiable}
        for k, node in enumerate(g.nodes):
            if not any(p.differentiable for p in node.op.outputs):
                continue        # a comparison, an index: no tangent
            ts = [tans.get(r) if p.differentiable else None
                  for r, p in zip(node.args, node.op.inputs)]
            try:
                touts = tape[k][3](ts)
            except RouteError as exc:
                raise self._node_error(k, exc) from None
            for j, t in enumerate(touts):
                if t is not None:
                    tans[Ref(k, j)] = t
        return tuple((tans[r] if r in tans else xp.zeros_like(vals[r])) if p.differentiable
                     else None for r, p in zip(g._outputs, g.outputs))

    def _reverse(self, active, tape, cotangents, contributions=None, store=None,
                 drop=False) -> dict:
        """The reverse sweep: {Ref: accumulated cotangent}; ``contributions``, when a dict,
        receives {(node, argument index): the node's pullback output for that argument};
        ``store`` as in ``trace``; ``drop``: each node's output cotangents let go once its
        pullback has read them (those of the inputs and constants are returned)."""
        g, xp = self.graph, self.xp
        cots = {}
        for ref, c, p in zip(g._outputs, tuple(cotangents), g.outputs):
            if c is not None and p.differentiable and active[ref]:
                cots[ref] = self.alias(cots.get(ref), xp.asarray(c))
        cots = self._pull_through(tape, cots, len(g.nodes) - 1, contributions, store, drop)
        if store is not None:           # the cotangents of the inputs and constants
            cots = dict(zip(cots, store.put(list(cots.values()))))
        return cots

    def _pull_through(self, tape, cots, last, contributions=None, store=None,
                      drop=False) -> dict:
        """``cots`` ({Ref: cotangent}) carried back through nodes ``last``, ..., 0 of
        ``tape``: each node's pullback, its contributions joined by the rule's alias;
        ``store`` as in ``trace``: a node's output cotangents once its consumers have all
        added theirs, and its contributions, are stored as they are made; ``drop``: a
        node's output cotangents let go once its pullback has read them."""
        g = self.graph
        for k in range(last, -1, -1):
            flags, pull, rule, _ = tape[k]
            refs = [Ref(k, j) for j in range(len(g.nodes[k].op.outputs))]
            outs = [cots.pop(r, None) if drop else cots.get(r) for r in refs]
            if not any(flags) or all(c is None for c in outs):
                continue
            if store is not None:
                outs = store.put(outs)
                if not drop:
                    cots.update((r, c) for r, c in zip(refs, outs) if c is not None)
            grads, args = pull(outs), g.nodes[k].args
            if store is not None:
                grads = store.put(list(grads))
            for i in rule.order:                 # the rule's order and alias rule
                if flags[i]:
                    if contributions is not None:
                        contributions[(k, i)] = grads[i]
                    held = cots.get(args[i])
                    cots[args[i]] = rule.alias(held, grads[i])
                    if store is not None and held is not None:
                        store.done([held])
            if store is not None:
                store.done(outs + list(grads))
        return cots

    def taped(self, inputs, needs=None, store=None) -> "Tape":
        """The forward sweep with every value input carrying a gradient (or those of
        ``needs``, one flag per input), kept for the sweeps that start inside the graph
        (``reverse_from``, ``perturbed``, ``rerun``); ``store`` as in ``trace``."""
        if needs is None:
            needs = tuple(p.differentiable for p in self.graph.inputs)
        return Tape(*self._sweep(inputs, needs, store=store))

    def rerun(self, tape, override, cotangents=None, every=True, store=None) -> "Trace":
        """What ``trace(inputs, cotangents, None, override)`` gives, from ``tape`` (``taped``
        on those inputs) where every backend's results depend on their operands alone (no
        stochastic rounding, whose draws follow the call sequence): the nodes of
        ``override`` ({node index: backend}) and every node that reads a value they changed
        are evaluated again, the others keep the tape's values and pullbacks; then the
        reverse sweep from ``cotangents`` (one per output) when given.  ``every`` False:
        the reverse sweep keeps only the cotangents of the graph's inputs and constants
        (no contributions; a node's output cotangents are let go once its pullback has read
        them), so that it holds the cotangents still to be used, not the graph's.
        ``store`` as in ``trace``: the values evaluated again stored as they are made."""
        g = self.graph
        vals, entries, changed = dict(tape.values), list(tape.entries), set()
        for k, node in enumerate(g.nodes):
            if k not in override and not any(r in changed for r in node.args):
                continue
            args = [vals[r] for r in node.args]
            outs, entries[k] = self._evaluate(k, args, entries[k][0],
                                              override.get(k, self.xp), store=store)
            if store is not None:
                store.done(args)
            for j, y in enumerate(outs):
                vals[Ref(k, j)] = y
                changed.add(Ref(k, j))
        out = Trace(values=vals)
        if cotangents is not None:
            out.cotangents = self._reverse(tape.active, entries, cotangents,
                                           out.contributions if every else None,
                                           store if every else None, drop=not every)
        return out

    def reverse(self, tape, cotangents) -> dict:
        """{Ref: cotangent} of the reverse sweep of ``tape`` (``taped``) from ``cotangents``
        (one per output or None)."""
        return self._reverse(tape.active, tape.entries, cotangents)

    def reverse_from(self, tape, k, seeds) -> dict:
        """{Ref: cotangent} of the reverse sweep through nodes k, k-1, ..., 0 of ``tape``
        (``taped``) from ``seeds`` ({Ref: cotangent} of node k's outputs and of values made
        before node k; one seed per Ref): what a cotangent entering the graph's reverse
        sweep at node k becomes, the pullbacks taken at the tape's values."""
        cots = {r: c for r, c in seeds.items() if tape.active.get(r)}
        return self._pull_through(tape.entries, cots, k)

    def perturbed(self, tape, k, moved, cotangents) -> dict:
        """{Ref: cotangent} of the reverse sweep from ``cotangents`` (one per output) when
        node k's outputs are ``moved`` ({Ref: value}): the nodes after k that read a moved
        value are evaluated again (and their pullbacks prepared again) on the moved
        values, the others keep the tape's."""
        g = self.graph
        vals, entries, changed = dict(tape.values), list(tape.entries), set(moved)
        vals.update(moved)
        for i in range(k + 1, len(g.nodes)):
            node = g.nodes[i]
            if not any(r in changed for r in node.args):
                continue
            outs, entries[i] = self._evaluate(i, [vals[r] for r in node.args], entries[i][0],
                                              self.xp)
            for j, y in enumerate(outs):
                vals[Ref(i, j)] = y
                changed.add(Ref(i, j))
        return self._reverse(tape.active, entries, cotangents)

    def _read_back(self, ports, values) -> tuple:
        """Values of another backend read into this one (scalar ports through asarray)."""
        return tuple(self.xp.asarray(v) if v is not None and p.scalar else v
                     for v, p in zip(values, ports))

    def _pull_back(self, ports, pull):
        """A pullback of another backend whose results are read into this one."""
        return lambda cotangents: self._read_back(ports, pull(cotangents))

    def trace(self, inputs, cotangents=None, tangents=None, override=None,
              post=None, pre=None, store=None) -> "Trace":
        """Every value of the sweeps, for measuring a graph node by node: the forward sweep
        (with the reverse sweep from ``cotangents``, one per output or None, when given) and
        the forward-mode sweep from ``tangents`` (one per input or None) when given.
        ``override``: {node index: backend}, as in ``_sweep`` (the forward-mode sweep too).

        ``post(kind, node, index, value) -> value``, when given, replaces what each node
        produces before anything reads or records it: ``"value"`` its output ``index`` (in
        the forward sweep and again in the forward-mode sweep), ``"contribution"`` its
        pullback's output for argument ``index`` (None outputs are not passed),
        ``"tangent"`` its output tangent ``index`` -- a storage format between the nodes (a
        scaled format's quantizer).  Without it every value is the
        backend's own.

        ``pre(kind, node, index, value) -> value``, when given, replaces what each node
        reads, for that node alone: ``"argument"`` its argument ``index`` (in both forward
        sweeps; what its pullback keeps), ``"argument_tangent"`` the tangent of argument
        ``index``, ``"cotangent"`` the cotangent of its output ``index`` as its pullback
        receives it -- a quantization in front of one operator (a scaled-format recipe
        quantizing the operands of products).

        ``store``, when given, holds the sweeps' arrays elsewhere (a file, say), so that
        memory holds about one node's work rather than the graph's: ``store.put(arrays)``
        returns arrays of the same bits to keep in their place -- each value, contribution
        and tangent as it is made, each cotangent once complete, and what each node's
        pullback keeps (its arguments as read, its outputs and intermediates) --, and
        ``store.done(arrays)`` is told of the stored arrays a node's step has read (its
        pages may go)."""
        g = self.graph
        needs = tuple(p.differentiable for p in g.inputs) if cotangents is not None else \
            (False,) * len(g.inputs)
        if store is not None:
            # The stored inputs in their place (the forward-mode sweep reads them again):
            # a model's parameters are most of its inputs.
            inputs = store.put(list(inputs))
        vals, active, tape = self._sweep(inputs, needs, override, post, pre, store=store)
        out = Trace(values=vals)
        if cotangents is not None:
            out.cotangents = self._reverse(active, tape, cotangents, out.contributions, store)
        del tape
        if tangents is not None:
            out.tangents = self._tangents(inputs, tangents, override, post, pre, store)[2]
        return out

    def alone(self, reads, override=None, post=None, pre=None, fallback=None,
              only=None) -> "Trace":
        """Every node alone, each on the reads it is given instead of what the nodes before
        it computed: ``reads`` holds per node (arguments, gradient flags, the cotangents of
        its outputs or None, the tangents of its arguments or None).  A Trace of the node
        outputs, their pullbacks' contributions and output tangents (the keys of
        ``trace``); a node that fails on its reads (a check a rounded value breaks) is
        left out, and so are the tangents of a node whose linearization fails.
        ``override``, ``post`` and ``pre`` as in ``trace``; an overriding backend's results
        are read back into this one's numbers.  ``fallback``: a GraphRule of the same graph
        that evaluates, whole, each node that fails here in any step (a backend that
        cannot hold a value; its results are that rule's numbers, and what fails there too
        is left out as above); ``only``: the node indices to evaluate (all by default)."""
        xp, out, redo = self.xp, Trace(values={}), []
        reference = xp.name.startswith("reference")
        for k, node in enumerate(self.graph.nodes):
            if only is not None and k not in only:
                continue                    # its reads may be None
            args, flags, cts, ts = reads[k]
            op = node.op
            b = (override or {}).get(k, xp)
            if reference:
                args = [xp.asarray(a) if p.scalar else a for a, p in zip(args, op.inputs)]
            if pre is not None:
                args = list(_posted(pre, "argument", k, args))
                cts = None if cts is None else list(_posted(pre, "cotangent", k, cts))
                ts = None if ts is None else list(_posted(pre, "argument_tangent", k, ts))
            if fallback is None:
                got = self._alone_node(k, op, args, flags, cts, ts, b, post, strict=False)
            else:
                try:
                    got = self._alone_node(k, op, args, flags, cts, ts, b, post, strict=True)
                except Exception:                               # noqa: BLE001
                    redo.append(k)
                    continue
            if got is None:
                continue
            for kind, part in got.items():
                getattr(out, kind).update(part)
        if redo:
            again = fallback.alone(reads, override, post, pre, only=set(redo))
            for kind in ("values", "contributions", "tangents"):
                getattr(out, kind).update(getattr(again, kind))
        return out

    def _alone_node(self, k, op, args, flags, cts, ts, b, post, strict) -> dict | None:
        """{"values": .., "contributions": .., "tangents": ..} of node ``k`` alone (alone),
        None where the node fails on its reads; ``strict``: every failure raises instead
        (a failing pullback always does)."""
        xp = self.xp

        def back(vs, ports):
            return vs if b is xp else [xp.asarray(v) if v is not None and p.scalar
                                       else v for v, p in zip(vs, ports)]
        got = {"values": {}, "contributions": {}, "tangents": {}}
        try:
            ys, pull = invoke_prepared(op, args, b, flags)
        except Exception:                                       # noqa: BLE001
            if strict:
                raise
            return None
        for j, y in enumerate(back(ys, op.outputs)):
            got["values"][Ref(k, j)] = y if post is None or y is None else \
                post("value", k, j, y)
        if cts is not None and any(c is not None for c in cts):
            for i, gi in enumerate(back(pull(cts), op.inputs)):
                if flags[i] and gi is not None:
                    got["contributions"][(k, i)] = gi if post is None else \
                        post("contribution", k, i, gi)
        if ts is not None:
            try:
                _, touts = checked_rule(op, args, b).linearize(args, ts)
            except Exception:                                   # noqa: BLE001
                if strict:
                    raise
                return got
            for j, t in enumerate(back(touts, op.outputs)):
                if t is not None:
                    got["tangents"][Ref(k, j)] = t if post is None else \
                        post("tangent", k, j, t)
        return got

    def sweep_from(self, values, k, tangents) -> dict:
        """{Ref: tangent} of the forward-mode sweep at ``values`` (a trace's values) that
        starts at node ``k`` with ``tangents`` ({Ref: tangent} of k's outputs): only the nodes
        after k that read a tangent are linearized (a node's first-order effect on what
        follows it)."""
        g, xp = self.graph, self.xp
        tans = dict(tangents)
        for i in range(k + 1, len(g.nodes)):
            node = g.nodes[i]
            ts = [tans.get(r) if p.differentiable else None
                  for r, p in zip(node.args, node.op.inputs)]
            if all(t is None for t in ts) or not any(p.differentiable
                                                      for p in node.op.outputs):
                continue
            args = [values[r] for r in node.args]
            ts = [xp.zeros_like(a) if t is None and p.differentiable else t
                  for a, t, p in zip(args, ts, node.op.inputs)]
            _, touts = checked_rule(node.op, args, xp).linearize(args, ts)
            for j, t in enumerate(touts):
                if t is not None:
                    tans[Ref(i, j)] = t
        return tans

    def backward(self, inputs, cotangents) -> tuple:
        """The gradient at every value input (None elsewhere)."""
        _, pullback = self.prepare(inputs, tuple(p.differentiable for p in self.graph.inputs))
        return pullback(cotangents)

    def linearize(self, inputs, tangents) -> tuple[tuple, tuple]:
        """(outputs, output tangents): the forward-mode sweep."""
        g, xp = self.graph, self.xp
        vals, _, tans = self._tangents(inputs, tangents)
        outs = tuple(vals[r] for r in g._outputs)
        return outs, tuple((tans[r] if r in tans else xp.zeros_like(vals[r]))
                           if p.differentiable else None for r, p in zip(g._outputs, g.outputs))

    def _tangents(self, inputs, tangents, override=None, post=None, pre=None, store=None):
        """The forward-mode sweep: (values, None, {Ref: tangent}); ``post``, ``pre`` and
        ``store`` as in ``trace`` (the values and tangents stored as they are made)."""
        g, xp = self.graph, self.xp
        xs = self._inputs(inputs)
        vals = {Ref(-1, i): x for i, x in enumerate(xs)}
        vals.update(self._constants())
        tans = {Ref(-1, i): xp.asarray(t) for i, (t, p) in enumerate(zip(tangents, g.inputs))
                if t is not None and p.differentiable}
        if store is not None:
            vals = dict(zip(vals, store.put(list(vals.values()))))
            tans = dict(zip(tans, store.put(list(tans.values()))))
        for k, node in enumerate(g.nodes):
            args = [vals[r] for r in node.args]
            ts = [tans.get(r) if p.differentiable else None for r, p in zip(node.args,
                                                                          node.op.inputs)]
            if pre is not None:
                args = list(_posted(pre, "argument", k, args))
                ts = list(_posted(pre, "argument_tangent", k, ts))
            bk = (override or {}).get(k, xp)
            try:
                # Read once, where made (as in _sweep); another backend reads them.
                outs, _, push = invoke_maps(node.op, args, bk, None, bk is not xp)
                # a comparison, an index: no tangent, and no forward-mode rule
                touts = push(ts) if any(p.differentiable for p in node.op.outputs) else \
                    (None,) * len(outs)
            except RouteError as exc:
                raise self._node_error(k, exc) from None
            if bk is not xp:
                outs = self._read_back(node.op.outputs, outs)
                touts = self._read_back(node.op.outputs, touts)
            if post is not None:
                outs, touts = _posted(post, "value", k, outs), _posted(post, "tangent", k, touts)
            if store is not None:
                outs, touts = store.put(list(outs)), store.put(list(touts))
                store.done(args + ts)
            for j, (y, t) in enumerate(zip(outs, touts)):
                vals[Ref(k, j)] = y
                if t is not None:
                    tans[Ref(k, j)] = t
        return vals, None, tans

    def jvp(self, inputs, tangents) -> tuple:
        return self.linearize(inputs, tangents)[1]


def _posted(post, kind, k, values) -> tuple:
    """``values`` of node ``k`` through GraphRule.trace's ``post`` (None stays None)."""
    return tuple(None if v is None else post(kind, k, j, v) for j, v in enumerate(values))


def _posted_pull(post, k, pull):
    """Node ``k``'s pullback whose outputs go through ``post`` as contributions."""
    return lambda cotangents: _posted(post, "contribution", k, pull(cotangents))


def _keeper(store, held):
    """Rule.maps's ``keep`` for a stored sweep: what the maps hold (the read arguments, the
    outputs and their intermediates) through ``store.put``, the stored arrays appended to
    ``held``."""
    def keep(xs, ys):
        saved = getattr(ys, "saved", {})
        put = store.put([*xs, *ys, *saved.values()])
        held.extend(put)
        out = Outputs(put[len(xs):len(xs) + len(ys)])
        out.saved = dict(zip(saved, put[len(xs) + len(ys):]))
        return tuple(put[:len(xs)]), out
    return keep


def _releasing(store, pull, held):
    """A pullback that tells ``store`` it has read ``held`` (trace's ``store``) after each
    call."""
    def released(cotangents):
        grads = pull(cotangents)
        store.done(held)
        return grads
    return released


def _pre_pull(pre, k, pull):
    """Node ``k``'s pullback receiving its output cotangents through ``pre``."""
    return lambda cotangents: pull(_posted(pre, "cotangent", k, tuple(cotangents)))

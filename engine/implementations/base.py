"""What an implementation under measurement is: ``Implementation``, the one base class of
every implementation of engine/implementations/ (the registry there finds them).

An implementation evaluates operators in the coverage run (``run --implementations``) and,
where it can, runs whole graphs in the model run (``model --implementations``).

Operators: ``cls(task, o, fmt)`` makes the object that evaluates one task (it may keep state
between its steps: the CUDA kernels' contract verdict needs the model's outputs).  Its
methods, in the order engine/evaluate.py calls them:

- ``problems(routes) -> {route: (status, reason, need)}``: the routes it cannot measure here
  (no rule at these attributes, a mode numpy does not have, no kernel...), reported as
  status rows;
- ``select(draws) -> draws``: the draws it evaluates (all but in the CUDA simulator);
- ``evaluate(draws, routes) -> {route: per-draw outputs, or the exception}``;
- ``numbers``: the backend whose numbers its outputs are (read into float64 by it);
- ``model_task(route) -> Task | None``: the task of the emulated model whose bounds
  (certificates, routes.apriori, numerics.bounding) apply to this route's samples, None
  where no bound applies;
- ``annotate(route, rows)``: fields of its own (flags, device, contract) on a route's rows.

Before any task runs, ``unavailable()`` says why the implementation cannot run on this
machine at all (the run stops with that one line), and ``policy_labels(policies)`` which
policy labels its tasks take.

Graphs (``graphs = True``): ``graph_problem(target, config)`` says why it cannot run the
model for a configuration (one ``no_rule`` row), ``graph_traces(...)`` gives per sample a
routes.graph.Trace of what it computed; ``node_values`` whether those traces hold every
node's value (else only the model's outputs and input gradients are measured);
``graph_policy`` the rows' policy label.
"""

from __future__ import annotations

import functools

from roundoff_coverage.routes import one_node


class Implementation:
    """Base of the implementations (module docstring); ``task``, ``o`` (the operator),
    ``fmt`` (the BinaryFormat)."""

    name = "?"
    # Where the name sorts in lists and messages: the project's own in the order the README
    # introduces them, any other (the default) after them, by name.
    order = 100
    # The model run: whether it runs graphs, whether its traces hold node values, the
    # policy label of its rows.
    graphs = False
    node_values = False
    graph_policy = None
    # Whether it measures tasks of a scaled format (engine/task.py quantizes their inputs and
    # outputs around the operator; kernels of their own take no scaled inputs).
    scaled_inputs = False

    @classmethod
    def unavailable(cls) -> str | None:
        """Why no task of it can run on this machine (the run refuses to start), else None;
        what it cannot measure for one task is a status row instead (``problems``)."""
        return None

    @classmethod
    def policy_labels(cls, policies) -> tuple:
        """The policy labels of its tasks for the policies asked for (presets of
        numerics.policy, resolved into each task's ``accumulation``)."""
        return tuple(policies)

    @classmethod
    def graph_problem(cls, target, config) -> str | None:
        """Why it cannot run the model of ``target`` under ``config`` (a model_run Config),
        or None."""
        return f"{cls.name} runs operators only, not graphs"

    @classmethod
    def graph_traces(cls, target, graph, config, xs, cots, want_grad) -> list:
        """Per sample (``xs``: the graph's inputs; ``cots``: the outputs' cotangents), a
        routes.graph.Trace of what it computed: node values (where ``node_values``), the
        model's outputs, and with ``want_grad`` the gradients of its inputs."""
        raise NotImplementedError(f"{cls.name} runs no graphs")

    def __init__(self, task, o, fmt):
        self.task, self.o, self.fmt = task, o, fmt
        self.numbers = None

    def problems(self, pending) -> dict:
        return {}

    def select(self, d):
        return d

    def evaluate(self, d, wanted) -> dict:
        raise NotImplementedError

    def model_task(self, route):
        return None

    def annotate(self, route, rows) -> None:
        pass

    @functools.cached_property
    def rule(self):
        """The operator's rule under ``numbers`` (``subject_rule``), built once (None where
        it has none)."""
        return subject_rule(self.o, self.numbers)

    def rule_of(self, d):
        """The rule for draws ``d``: ``rule`` itself, unless the draws are of a longer
        instance (batched elementwise draws, engine/samples.py)."""
        return self.rule if d.op is self.o else subject_rule(d.op, self.numbers)

    def no_rule(self, pending) -> dict:
        """no_rule for every route when ``o`` has no rule under ``numbers``: the reason the
        declaration gives at these attributes, else the missing capability."""
        if self.rule is not None:
            return {}
        reason = (self.o.decl.no_rule(self.o.attrs) if self.o.decl.no_rule else None) or \
            f"{self.numbers.name} lacks capability {self.o.need}"
        return dict.fromkeys(pending, ("no_rule", reason, self.o.need))


# ----- an operator's routes on draws -----------------------------------------------------------

def subject_rule(op, xp):
    """The rule the engine evaluates an operator instance by: its one-node graph
    (routes.graph.one_node) under backend ``xp``, so that an operator and a model run
    through one interpreter (routes.graph.GraphRule); None where ``op`` has no rule
    under ``xp``."""
    return one_node(op).rule(xp)


def run_routes(rule, d, wanted, flags=None) -> dict:
    """{route: [per-draw outputs] or Exception}: forward values, output tangents, input
    gradients (each a tuple per port) of every draw of ``d`` (engine/samples.Draws) under
    ``rule`` (``subject_rule``): GraphRule.routes, one forward sweep per draw for the three
    routes.

    ``flags``, a dict, receives {route: IEEE flags raised} when the backend keeps sticky
    flags (``track_flags``): the OR over every draw of the flags of the route's whole
    evaluation -- the forward pass's for every route, plus the pullback's or the tangent
    map's own (IEEE 754-2019 7.1 status flags, cleared before each draw)."""
    out = {r: [] for r in wanted}
    xp = rule.xp
    sticky = flags is not None and hasattr(xp, "track_flags")
    if sticky:
        xp.track_flags()
        flags.update(dict.fromkeys(wanted, 0))
    for xs, ts, cs in zip(d.inputs, d.tangents, d.cotangents):
        todo = [r for r in wanted if not isinstance(out[r], Exception)]
        seen = _Flags(xp, flags) if sticky else None
        try:
            got = rule.routes(xs, todo, ts, cs, before=seen.before if sticky else None)
        except Exception as exc:                          # noqa: BLE001 (the forward pass)
            return {r: exc for r in wanted}
        finally:
            if sticky:
                seen.done()
        for r in todo:
            if isinstance(got[r], Exception):
                out[r] = got[r]
            else:
                out[r].append(got[r])
    return out


class _Flags:
    """Per route of one draw, the sticky flags of the forward pass and of the route's own
    evaluation (Rule.routes calls ``before`` between them)."""

    def __init__(self, xp, flags):
        self.xp, self.flags, self.base, self.route = xp, flags, None, None

    def _collect(self):
        if self.base is None:
            self.base = self.xp.raised()                     # the forward pass's
        elif self.route is not None:
            self.flags[self.route] |= self.base | self.xp.raised()

    def before(self, route):
        self._collect()
        self.xp.clear_flags()
        self.route = route

    def done(self):
        self._collect()
        self.xp.clear_flags()

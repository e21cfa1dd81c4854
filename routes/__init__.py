"""routes: the operator table (ports, operators, rules, checks, invoke, graph IR and tape,
wire codec, certificates, sample inputs).

Public names (shared/ARCHITECTURE.md):

- ``names()``: the registered operators; ``op(name, **attributes) -> Op`` (ports computed
  from the attributes); ``op.check()``; ``op.rule(backend) -> Rule | None`` (None when the
  backend lacks the capability the operator needs);
- ``Rule.forward(inputs)``, ``Rule.backward(inputs, cotangents)``, ``Rule.jvp(inputs,
  tangents)``, ``Rule.validate(inputs)``, ``Rule.prepare(inputs, needs_grad)``,
  ``Rule.routes(inputs, wanted, tangents, cotangents)`` (the three routes from one forward
  evaluation);
- ``invoke(op, inputs, backend)`` (staged checks; ``RouteError`` on failure);
- ``Graph`` (straight-line IR, tape, forward-mode sweep; usable as a route, ``routes``
  included); ``one_node(op) -> Graph``: an operator instance as a graph of one node (the
  engine evaluates operators so: one interpreter for operators and models);
- ``encode(op) -> dict``, ``decode(record) -> Op``;
- ``graph.save(path)``, ``load_graph(path) -> Graph``, ``graph_hash(path or graph)``
  (routes.artifact, routes.artifact_load: a graph as a JSON artifact, its sha256);
- ``certificates(name)``; ``ports`` (``value``, ``frozen``, ...);
- ``from_torch(model, args) -> Graph`` (routes.frontends.torch; torch is imported when it
  runs, never by importing routes), ``CaptureError``; ``unsupported_torch(model, args)``:
  every refusal of that capture at once, (aten operator, node, source line, reason) each;
- ``from_jax(fn, args) -> Graph`` (routes.frontends.jax: a jaxpr's primitives onto the
  operator table; jax is imported when it runs, never by importing routes);
- ``Session(backend)`` (routes.session): operators called eagerly (``s.matmul(x, w)``) on
  session values, recorded on a tape; ``s.graph()`` the Graph a capture would give;
- bound propagation (routes.bounds): ``ibp(op_or_graph, lows, highs) -> (lows, highs)``
  (interval boxes of every output, outward rounded), ``crown(op_or_graph, lows, highs)``
  (CROWN's backward sweep, never looser than IBP), ``check_bound(op, lows, highs,
  claimed_lows, claimed_highs)`` (a claimed output box against the operator's real values;
  RouteError with a one-line reason) and ``bound_problem(...)`` (that reason, or None);
  ``domain_bound(op, lows, highs, fmt, ...)``: a route's roundoff over an input box
  (routes.bounds.domain).
"""

from . import apriori, families  # noqa: F401  (families registers every operator)
from . import ports
from .artifact_load import graph_hash, load_graph
from .bounds import bound_problem, check_bound, crown, domain_bound, ibp
from .certs import Certificate
from .codec import attributes_text, decode, encode
from .errors import DecodeError, RouteError
from .frontends.capture import CaptureError
from .frontends.jax import from_jax
from .frontends.torch import from_torch, unsupported as unsupported_torch
from .graph import Graph, Ref, one_node
from .invoke import invoke, invoke_prepared
from .ports import Port
from .registry import VERSION, Op, certificates, declaration, names, op
from .rules import Rule
from .session import Session

__all__ = ["CaptureError", "Certificate", "DecodeError", "Graph", "Op", "Port", "Ref",
           "RouteError", "Rule", "Session", "VERSION", "attributes_text", "bound_problem",
           "certificates", "check_bound", "crown", "declaration", "decode", "domain_bound",
           "encode", "from_jax", "from_torch", "graph_hash", "ibp", "invoke",
           "invoke_prepared", "load_graph", "names", "one_node", "op", "ports",
           "unsupported_torch"]

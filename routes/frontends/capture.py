"""The capture context both frontends share: what their translation tables call while a
model becomes a Graph (routes.frontends.torch's ``_Capture`` for aten nodes,
routes.frontends.jax's ``_Import`` for jaxpr equations).

``Capture`` holds the graph being built and gives the entries:
- ``apply(name, *values, **attributes)``: append registered operator ``name`` on graph
  values, constants or numbers (each frontend's ``_ref`` turns a constant into a graph
  constant at the operator's port);
- ``shape(v)``, ``element(v)``, ``port(ref)``, ``is_ref(v)``: what an operand holds;
- ``refuse(reason)``: an entry's refusal (``Refusal``), which the frontend wraps into a
  one-line ``CaptureError`` naming the node or equation and its source line;
- ``name_nodes(first, main, label, module)``: the labels of the graph nodes one aten node
  or jaxpr equation became.

A frontend supplies what differs: its constants (a torch tensor, a numpy array) through
``_held_shape`` and ``_held_element``, and ``_ref``.  ``Missing`` is a result without a
translation, refused where it is read."""

from __future__ import annotations

import abc
import dataclasses

from ..errors import RouteError
from ..graph import Ref
from ..registry import op as make_op


class CaptureError(RouteError):
    """A model, function or operator a frontend refuses; the message is one line naming the
    aten operator or jax primitive, the node and its source line."""


class Refusal(Exception):
    """An entry's refusal (wrapped into a CaptureError naming the node or equation)."""


@dataclasses.dataclass(frozen=True)
class Missing:
    """A result without a translation (a saved statistic, pooling indices, integer
    arithmetic): refused where read."""

    reason: str


def ref_element(graph, ref, refuse) -> str:
    """The element sort (``scalar``, ``bool`` or a word type) of graph value ``ref`` that a
    movement primitive moves; ``refuse(reason)`` for any other port kind (a frontend's
    one-line refusal)."""
    port = graph.port(ref)
    if port.scalar:
        return "scalar"
    if port.kind == "bool":
        return "bool"
    if port.kind == "integer":
        return ("int" if port.signed else "uint") + str(port.width)
    refuse(f"moving a {port.kind} tensor is not translated")


class Capture(abc.ABC):
    """The context a frontend's table entries receive (module docstring); ``graph`` is the
    Graph being built."""

    graph = None

    def refuse(self, reason):
        raise Refusal(reason)

    def port(self, ref):
        return self.graph.port(ref)

    def is_ref(self, v) -> bool:
        return isinstance(v, Ref)

    def shape(self, v) -> tuple:
        """The shape of an operand: a graph value's port shape, a constant's (the
        frontend's ``_held_shape``), () for a number."""
        if isinstance(v, Ref):
            return self.graph.port(v).shape
        return self._held_shape(v)

    def element(self, v) -> str:
        """The element sort of a moved value (``scalar``, ``bool`` or a word type)."""
        if isinstance(v, Ref):
            return ref_element(self.graph, v, self.refuse)
        return self._held_element(v)

    def apply(self, name, *values, **attributes) -> Ref:
        """Append registered operator ``name`` at ``attributes`` on ``values`` (Refs, or
        what the frontend's ``_ref`` turns into graph values at the operator's ports)."""
        o = make_op(name, **attributes)
        refs = [self._ref(v, port) for v, port in zip(values, o.inputs)]
        return self.graph.apply(o, *refs)

    def name_nodes(self, first, main, label, module):
        """Name the graph nodes from index ``first`` on (those one aten node or equation
        became): ``label`` for node ``main``, ``<label>.<i>`` for the others in order; all
        in ``module``."""
        nodes, helpers = self.graph.nodes, 0
        for k in range(first, len(nodes)):
            if k == main:
                name = label
            else:
                name, helpers = f"{label}.{helpers}", helpers + 1
            nodes[k] = dataclasses.replace(nodes[k], name=name, module=module)

    # ----- what a frontend supplies -------------------------------------------------------------
    @abc.abstractmethod
    def _held_shape(self, v) -> tuple:
        """The shape of a non-graph operand (a constant; () for a number)."""

    @abc.abstractmethod
    def _held_element(self, v) -> str:
        """The element sort of a constant operand."""

    @abc.abstractmethod
    def _ref(self, v, port) -> Ref:
        """``v`` as a graph value at ``port``."""

"""``Rule``: an operator's rule under one backend: forward, backward (dense pullback), jvp,
validate and prepare (spec: "The Rule Of An Operator", "Prepared Nodes And Runtime Flags").

Conventions (one tuple entry per port, in port order):

- inputs: arrays a backend reads with ``asarray`` at scalar ports (value, frozen, detached:
  float64 or integer arrays, or the backend's own numbers), numpy integers or Booleans at
  index, integer and bool ports.  Scalar inputs are read through ``xp.asarray`` (exact for
  reference and exact; one rounding into the format for emulated; numpy's astype for
  native), the others pass unchanged.
- outputs: a tuple, one array per output port.
- tangents: one per input, None at non-value ports (None at a value port means zero);
  tangents out: one per output, None at non-value outputs.
- cotangents: one per output, None at non-value outputs (None at a value output: zero);
  gradients: one per input, None at non-value inputs (and, from a prepared pullback, at
  inputs whose flag is off).

Every map checks the number of inputs and each input's shape against its port (RouteError,
the message ``routes.invoke`` gives); the element kinds, index bounds and integer words are
``routes.invoke``'s checks: the rule trusts them.

A rule also holds, for a recorder (spec: "the order in which a recorder emits the
contributions, an alias rule for two inputs that name one node"): ``order``, the input
positions in the order the tape emits their contributions (input order: x before y), and
``alias(held, incoming)``, how a contribution joins what its node already holds (two
inputs that name one node, or one node read by several): one backend addition, the held
sum on the left.  The graph's reverse sweep reads both, so under a rounding backend the
gradient of ``add(mul(x, x), x)`` at x is ((g + g x) + g x): the later node's contribution
first, then mul's contributions to x and y in input order.
"""

from __future__ import annotations

import numpy as np

from .errors import RouteError


class Outputs(tuple):
    """Forward outputs plus ``saved`` intermediates that backward and jvp may read (the
    softmax weights of attention, a normalizer): see ``saving``."""

    saved: dict = {}


def saving(outputs, **saved) -> Outputs:
    """Forward outputs (an array or a tuple) with named intermediates kept for the pullback
    and the tangent map, so prepare computes them once."""
    out = Outputs(outputs if isinstance(outputs, tuple) else (outputs,))
    out.saved = saved
    return out


class Rule:
    """The rule of ``op`` under backend ``xp`` (from ``op.rule(backend)``)."""

    def __init__(self, op, xp):
        self.op, self.xp = op, xp
        self._ins, self._outs = op.inputs, op.outputs
        self._shapes = tuple(p.array_shape for p in self._ins)

    @property
    def has_jvp(self) -> bool:
        """Whether the rule has a forward mode at its operator's attributes (an operator with
        no value input has one when it declares ``zero_tangents``; ``Op.has_jvp``)."""
        return self.op.has_jvp

    @property
    def order(self) -> tuple:
        """The input positions in the order a recorder emits their contributions: input
        order (the spec's order_perm is the identity for every rule here)."""
        return tuple(range(len(self._ins)))

    def alias(self, held, incoming):
        """The alias rule: a contribution ``incoming`` to a node that already holds ``held``
        (two inputs naming one node, or several readers of it) is added to it, one rounding
        of the backend with the held sum on the left; None holds nothing."""
        return incoming if held is None else self.xp.add(held, incoming)

    def _value_inputs(self):
        return [i for i, p in enumerate(self._ins) if p.differentiable]

    # ----- reading arguments ----------------------------------------------------------------
    def _fit(self, inputs) -> tuple:
        """``inputs`` as a tuple after checking their number and shapes against the ports
        (invoke's messages; no pass over the data: kinds, index bounds and integer words
        are invoke's checks)."""
        inputs = tuple(inputs)
        if len(inputs) != len(self._ins):
            raise RouteError(f"{self.op.name}: expects {len(self._ins)} inputs "
                             f"({', '.join(self.op.input_names)}) (got {len(inputs)})")
        for i, (want, x) in enumerate(zip(self._shapes, inputs)):
            if (x.shape if type(x) is np.ndarray else np.shape(x)) != want:
                raise RouteError(f"{self.op.name}: input {self.op.input_names[i]} expects "
                                 f"{self._ins[i]} (got shape {list(np.shape(x))})")
        return inputs

    def _read(self, inputs) -> tuple:
        return tuple(self.xp.asarray(x) if p.scalar else np.asarray(x)
                     for x, p in zip(self._fit(inputs), self._ins))

    def _linear(self, vs, ports, like, what, read=True) -> tuple:
        """Tangents or cotangents: backend numbers at value ports (zeros for None; read with
        ``asarray`` unless ``read`` is False: they are the backend's already), None
        elsewhere."""
        vs = tuple(vs)
        if len(vs) != len(ports):
            raise RouteError(f"{self.op.name}: expects {len(ports)} {what} (got {len(vs)})")
        return tuple((self.xp.zeros_like(ref) if v is None else
                      self.xp.asarray(v) if read else v)
                     if p.differentiable else None for v, p, ref in zip(vs, ports, like))

    def _forward(self, xs) -> Outputs:
        ys = self.op.decl.forward(self.xp, self.op.attrs, *xs)
        if not isinstance(ys, Outputs):
            ys = saving(ys)
        if len(ys) != len(self._outs):
            raise RuntimeError(f"{self.op.name}: forward returned {len(ys)} outputs, the "
                               f"ports say {len(self._outs)}")
        return ys

    # ----- the rule's maps ------------------------------------------------------------------
    def forward(self, inputs) -> tuple:
        """The values of the output ports."""
        return tuple(self._forward(self._read(inputs)))

    def validate(self, inputs, read=True) -> None:
        """The value-domain check (after the number and shapes of the inputs); RouteError
        naming the operator and the argument.  ``read`` False: the inputs are this
        backend's numbers already (``maps``)."""
        check = self.op.decl.validate
        if not check:
            self._fit(inputs)                  # the number and shapes still
            return
        message = check(self.xp, self.op.attrs,
                        *(self._read(inputs) if read else self._fit(inputs)))
        if message:
            raise RouteError(f"{self.op.name}: {message}")

    def backward(self, inputs, cotangents) -> tuple:
        """The dense pullback: a gradient for every value input, None elsewhere."""
        _, pull, _ = self.maps(inputs, tuple(p.differentiable for p in self._ins))
        return pull(cotangents)

    def _pull(self, xs, ys, cotangents, needs, read=True) -> tuple:
        if not any(needs):
            return (None,) * len(xs)
        gs = self._linear(cotangents, self._outs, ys, "cotangents", read)
        grads = tuple(self.op.decl.backward(self.xp, self.op.attrs, xs, ys, gs, needs))
        if len(grads) != len(xs):
            raise RuntimeError(f"{self.op.name}: backward returned {len(grads)} gradients "
                               f"for {len(xs)} inputs")
        return tuple(g if need else None for g, need in zip(grads, needs))

    def jvp(self, inputs, tangents) -> tuple:
        """The tangents of the outputs (None at non-value outputs)."""
        return self.linearize(inputs, tangents)[1]

    def linearize(self, inputs, tangents) -> tuple[tuple, tuple]:
        """(outputs, output tangents) from one forward evaluation."""
        ys, _, push = self.maps(inputs, (False,) * len(self._ins))
        return ys, push(tangents)

    def routes(self, inputs, wanted, tangents=None, cotangents=None, before=None) -> dict:
        """{route: result, or the exception the route raised} for each of ``wanted`` from
        one forward evaluation: ``forward`` the outputs, ``tangent`` the output tangents
        (``tangents``, one per input), ``gradient`` the dense gradients (``cotangents``, one
        per output) -- what forward, jvp and backward would give, without their three
        forward passes.  An exception of the forward pass propagates (it is every route's).
        ``before``, if given, is called with each route's name before its own evaluation
        and after the forward pass (a backend's sticky IEEE flags are cleared there, say)."""
        ys, pull, push = self.maps(inputs, tuple(p.differentiable for p in self._ins))
        return each_route(self.op.name, wanted, before, {
            "forward": lambda: ys, "tangent": lambda: push(tangents),
            "gradient": lambda: pull(cotangents)})

    def _push(self, xs, ys, tangents, read=True) -> tuple:
        """The output tangents at read inputs ``xs`` with forward values ``ys``."""
        ts = self._linear(tangents, self._ins, xs, "tangents", read)
        reason = self.op.no_jvp_reason()
        if reason:
            raise RouteError(f"{self.op.name}: {reason}")
        if not self._value_inputs():              # nothing varies: zero tangents
            return tuple(self.xp.zeros_like(y) if p.differentiable else None
                         for y, p in zip(ys, self._outs))
        out = self.op.decl.jvp(self.xp, self.op.attrs, xs, ys, ts)
        out = out if isinstance(out, tuple) else (out,)
        if len(out) != len(ys):
            raise RuntimeError(f"{self.op.name}: jvp returned {len(out)} tangents for "
                               f"{len(ys)} outputs")
        return tuple((self.xp.zeros_like(y) if t is None else t) if p.differentiable else None
                     for t, y, p in zip(out, ys, self._outs))

    def prepare(self, inputs, needs_grad):
        """(outputs, pullback) from one forward evaluation.  ``needs_grad``: one flag per
        input (a flag at a non-value port is ignored).  ``pullback(cotangents)`` returns the
        dense gradient at each input whose flag is on and None at the others, reusing the
        forward values and intermediates."""
        return self.maps(inputs, needs_grad)[:2]

    def maps(self, inputs, needs_grad, read=True, keep=None):
        """(outputs, pullback, pushforward) from one forward evaluation: ``pullback`` as
        ``prepare``'s, ``pushforward(tangents)`` the output tangents (as ``jvp``'s), both
        at the forward values and intermediates.  ``read`` False: the inputs, and the
        cotangents and tangents the maps are given, are this backend's numbers already (a
        graph's values), so nothing is read twice -- a stochastic rounding backend draws
        bits for each value once.  ``keep(xs, ys) -> (xs, ys)``, when given, returns the
        read inputs and the outputs with their intermediates (``saving``) as the maps are to
        hold them: copies of the same bits kept elsewhere (a graph's stored sweep)."""
        xs = self._read(inputs) if read else \
            tuple(x if p.scalar else np.asarray(x) for x, p in zip(self._fit(inputs), self._ins))
        flags = tuple(needs_grad)
        if len(flags) != len(xs):
            raise RouteError(f"{self.op.name}: needs_grad has {len(flags)} flags for "
                             f"{len(xs)} inputs")
        needs = tuple(bool(f) and p.differentiable for f, p in zip(flags, self._ins))
        ys = self._forward(xs)
        if keep is not None:
            xs, ys = keep(xs, ys)

        def pullback(cotangents):
            return self._pull(xs, ys, cotangents, needs, read)

        def pushforward(tangents):
            return self._push(xs, ys, tangents, read)
        return tuple(ys), pullback, pushforward


def each_route(name, wanted, before, maps) -> dict:
    """{route: result, or the exception the route raised} of each of ``wanted``, computed
    by ``maps`` {route: a function of no arguments} after the forward pass (``routes``
    of a Rule and of a GraphRule); ``before(route)``, if given, is called first."""
    out = {}
    for route in wanted:
        if before is not None:
            before(route)
        try:
            if route not in maps:
                raise RouteError(f"{name}: unknown route {route!r} (forward, tangent or "
                                 f"gradient)")
            out[route] = maps[route]()
        except Exception as exc:                          # noqa: BLE001 (the route's)
            out[route] = exc
    return out


def zero_tangents(xp, a, xs, ys, ts) -> tuple:
    """The forward mode of an operator with no value input (spec: "no value input; forward
    mode"): a zero tangent at each output (``linearize`` reads None at a value output as
    zeros of the output's shape)."""
    return tuple(None for _ in ys)


def shown(xp, v) -> str:
    """Backend numbers in a message: a short decimal (``%.6g``) of each value's nearest
    binary64 (formatting only, never arithmetic)."""
    vals = np.asarray(xp.to_float64(v), dtype=np.float64).reshape(-1)
    text = ", ".join("%.6g" % f for f in vals[:4]) + (", ..." if vals.size > 4 else "")
    return text if np.ndim(v) == 0 else f"[{text}]"

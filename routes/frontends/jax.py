"""The JAX import (spec: "Import Coverage"): ``from_jax(fn, args) -> Graph``.

The function is traced to its closed jaxpr (``jax.make_jaxpr(fn)(*args, **kwargs)``, under
jax's configuration as it stands: without ``jax_enable_x64`` float64 arguments trace as
float32) and each equation becomes registered operators (routes.frontends.jaxpr holds the
table from primitive to operators):

- graph inputs: the leaves of ``(args, kwargs)`` in jax's flattening order, named by their
  pytree paths below the function's parameter names (``params.w1``, ``layers.0.b``, ``x``);
  a floating leaf is a value port, a Boolean leaf a Boolean port, an integer leaf an index
  port whose bound is read from its use (the extent of the axis a gather indexes; the
  function is translated twice, the first time to find the bounds), or a word port where
  nothing reads it as indices;
- ``graph.example_inputs``: the arguments in that order (float64 for floating leaves, read
  at the dtype jax traced them with, then widened exactly; int64 at index ports);
- graph outputs: the function's outputs, flattened;
- constants (the jaxpr's consts and literals) are graph constants, frozen (floats widened
  exactly to float64); an equation whose operands are all constants is computed by jax
  (folded), except the refused kinds below; shapes and axes are attributes;
- calls are inlined: ``pjit``, ``closed_call``, ``checkpoint`` and ``custom_jvp_call`` /
  ``custom_vjp_call`` (their custom derivative rules are not used: gradients come from the
  table; a ``custom_jvp_call`` whose body is ``max(x, 0)``, jax.nn.relu, is ``relu``);
- ``graph.node_names``: the primitive's name (``<name>_<k>`` from its second use on) for
  the node that computes it (the last one that is not a reshape, permute or broadcast),
  ``<name>.<i>`` for the other nodes of the equation (broadcasts, reshapes, permutes);
  ``graph.node_modules``: the equation's name stack (``jax.named_scope``, flax modules),
  ``/`` written ``.``;
- ``graph.source``: ``{"frontend": "jax", "module": ..., "function": ..., "jax": ...}``.

Integers are indices only: an integer input, an argmax, the indices of a sort or top_k are
index values, which may change integer dtype, gain or lose unit axes and feed a gather or
scatter; the normalization jnp emits before a gather (``select_n(lt(i, 0), i, add(i,
n))``) reads an index port, whose entries lie in [0, bound) by the port's check, so the
test is false and the index itself is selected.  Other integer arithmetic is refused where
its result is read.

Refused with one line (``CaptureError``, a RouteError) naming the primitive and its source
line (``from_jax: cond (model.py:12): control flow (cond, while, scan) is not
translated``): control flow, complex values, random-key primitives, host callbacks,
collectives, a non-default dot or convolution precision, an accuracy request on a
transcendental, float conversions that round, and every primitive without a translation.

jax is the optional extra ``[jax]``, imported when ``from_jax`` runs.
"""

from __future__ import annotations

import inspect
import os

import numpy as np

from .. import ports as P
from .. import words as W
from ..errors import RouteError
from ..graph import Graph, Ref
from .capture import Capture, CaptureError, Missing, Refusal
from .jaxpr import RELU, TABLE, Const, Int

_CALLS = ("pjit", "jit", "closed_call", "core_call", "checkpoint", "remat", "custom_jvp_call",
          "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin_call")


_HELPERS = ("reshape", "permute", "broadcast")
# Refused whatever the operands (before folding: a random draw on a constant key is refused).
_CONTROL = ("cond", "while", "scan", "switch")
_RANDOM = ("random_seed", "random_bits", "random_split", "random_fold_in", "random_wrap",
           "random_unwrap", "random_clone", "threefry2x32", "rng_bit_generator", "rng_uniform")
_CALLBACKS = ("pure_callback", "io_callback", "debug_callback", "debug_print",
              "host_callback")
_COLLECTIVES = ("psum", "pmax", "pmin", "pmean", "ppermute", "pbroadcast", "all_gather",
                "all_to_all", "axis_index", "reduce_scatter", "psum_scatter", "pgather",
                "psum_invariant", "shard_map", "xla_pmap")
_TRANSCENDENTAL = ("exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos",
                   "tan", "sqrt", "rsqrt", "cbrt")


def _refusal(name, params) -> str | None:
    """The reason a primitive is refused whatever its operands (None when it is not)."""
    if name in _CONTROL:
        return "control flow (cond, while, scan) is not translated"
    if name in _RANDOM or name.startswith("random_"):
        return "random-key primitives are not translated"
    if name in _CALLBACKS:
        return "host callbacks are not translated"
    if name in _COLLECTIVES:
        return "collectives are not translated"
    if name in _TRANSCENDENTAL and params.get("accuracy") is not None:
        return (f"an accuracy request on a transcendental (accuracy="
                f"{type(params['accuracy']).__name__}) is not translated")
    return None


def _relu_body(jaxpr) -> bool:
    """Whether a custom_jvp_call's body is max(x, 0) (jax.nn.relu), through one-equation
    calls."""
    while len(jaxpr.eqns) == 1 and "jaxpr" in jaxpr.eqns[0].params:
        inner = jaxpr.eqns[0].params["jaxpr"]
        jaxpr = getattr(inner, "jaxpr", inner)
    if len(jaxpr.eqns) != 1 or jaxpr.eqns[0].primitive.name != "max" or len(jaxpr.invars) != 1:
        return False
    eqn = jaxpr.eqns[0]
    lits = [v for v in eqn.invars if type(v).__name__ == "Literal"]
    return (len(lits) == 1 and np.all(np.asarray(lits[0].val) == 0) and
            jaxpr.invars[0] in eqn.invars and list(jaxpr.outvars) == list(eqn.outvars))


def from_jax(fn, args, kwargs=None) -> Graph:
    """The Graph of registered operators computing ``fn(*args, **kwargs)`` (module
    docstring): inputs the leaves of the arguments named by their paths, ``example_inputs``
    set.  CaptureError (one line) for what is not translated."""
    import jax                          # jax is an optional extra
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    kwargs = dict(kwargs or {})
    try:
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
    except Exception as exc:                  # jax raises many kinds; one line for all
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CaptureError(f"from_jax: jax could not trace the function: {first}") from None
    flat = jax.tree_util.tree_flatten_with_path((args, kwargs))[0]
    if len(flat) != len(closed.jaxpr.invars):
        raise CaptureError(f"from_jax: the jaxpr has {len(closed.jaxpr.invars)} inputs but "
                           f"the arguments flatten to {len(flat)} leaves")
    names = _input_names(fn, [path for path, _ in flat])
    leaves = [leaf for _, leaf in flat]
    found = {}
    if any(_dtype(v.aval) is not None and _dtype(v.aval).kind in "iu"
           for v in closed.jaxpr.invars):           # a first pass finds the index bounds
        found = _Import(closed, names, leaves, {}, discover=True).run().found
    imp = _Import(closed, names, leaves, found, discover=False)
    graph = imp.run().graph
    graph.source = {"frontend": "jax", "module": str(getattr(fn, "__module__", "") or ""),
                    "function": str(getattr(fn, "__qualname__", type(fn).__name__)),
                    "jax": str(jax.__version__)}
    return graph


def _key(k) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _input_names(fn, paths) -> list:
    """Each leaf's name: the parameter it is passed to, then its path (``params.w1``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    names, seen = [], set()
    for path in paths:
        which, top, rest = path[0], path[1], path[2:]
        if _key(which) == "1":                          # a keyword argument
            head = _key(top)
        else:
            i = int(_key(top))
            head = positional[i].name if i < len(positional) else \
                f"{star}.{i - len(positional)}" if star else f"arg{i}"
        name = ".".join([head] + [_key(k) for k in rest])
        base, k = name, 1
        while name in seen:
            name, k = f"{base}_{k}", k + 1
        seen.add(name)
        names.append(name)
    return names


def _source(eqn) -> str:
    """``file.py:line`` of the innermost frame outside jax that made the equation."""
    try:
        from jax._src import source_info_util       # jax is an optional extra
        frame = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:                           # noqa: BLE001 (a private API of jax)
        frame = None
    if frame is None:
        return "no source line"
    return f"{os.path.basename(frame.file_name)}:{frame.start_line}"


def _scope(eqn) -> str:
    try:
        stack = str(eqn.source_info.name_stack)
    except Exception:                           # noqa: BLE001
        return ""
    return stack.replace("/", ".")


def _join(outer, inner) -> str:
    return ".".join(s for s in (outer, inner) if s)


def _unread(v) -> bool:
    """Whether ``v`` is a result refused where read (Missing, a pending window sum)."""
    return getattr(v, "reason", None) is not None


def _dtype(aval):
    try:
        return np.dtype(aval.dtype)
    except TypeError:                           # a key<impl> dtype of jax.random
        return None


class _Import(Capture):
    """One translation of a closed jaxpr: the graph being built, the values of its
    variables; ``discover`` (the first pass) records each integer input's index bound in
    ``found``."""

    def __init__(self, closed, names, leaves, bounds, discover):
        self.closed, self.names, self.leaves = closed, names, leaves
        self.bounds, self.discover = dict(bounds), discover
        self.found = {}                        # integer input -> index bound
        self.graph = None
        self.eqn = None                        # the equation being translated
        self.label = ""
        self.counts = {}
        self.calls = []                        # the call equations being inlined

    # ----- the function's inputs and outputs ----------------------------------------------------
    def run(self) -> "_Import":
        jaxpr = self.closed.jaxpr
        ports, examples, values = {}, [], []
        for name, leaf, var in zip(self.names, self.leaves, jaxpr.invars):
            port, example, value = self._input(name, leaf, var.aval)
            ports[name] = port
            examples.append(example)
            values.append(value)
        self.graph = Graph(**ports)
        self.graph.example_inputs = tuple(examples)
        env = {}
        for var, value in zip(jaxpr.invars, values):
            env[var] = value(self.graph) if callable(value) else value
        for k, (var, c) in enumerate(zip(jaxpr.constvars, self.closed.consts)):
            env[var] = Const(np.asarray(c), f"const{k}")
        self._walk(jaxpr, env, "")
        refs = [self._output_ref(i, self._read(env, v)) for i, v in enumerate(jaxpr.outvars)]
        self.graph.output(*refs)
        return self

    def _input(self, name, leaf, aval):
        """(port, example array, value or a function of the graph giving it)."""
        dt, shape = _dtype(aval), tuple(aval.shape)
        if dt is None:
            raise CaptureError(f"from_jax: input {name} is a random key ({aval}); random-key "
                               f"primitives are not translated")
        if dt.kind == "c":
            raise CaptureError(f"from_jax: input {name} is complex ({aval}); complex values "
                               f"are not translated")
        array = np.asarray(leaf).astype(dt).reshape(shape)
        if dt.kind == "f" or dt.name == "bfloat16" or "float" in dt.name:
            return P.value(shape), array.astype(np.float64), lambda g: g.input(name)
        if dt.kind == "b":
            return P.boolean(shape), array.astype(bool), lambda g: g.input(name)
        if dt.kind in "iu":
            bound = self.bounds.get(name)
            if bound is not None:
                port, example = P.index((bound,), shape), array.astype(np.int64)
            else:
                port = W.element_port(dt.name, shape)
                example = array.astype(W.dtype(port))
            return port, example, lambda g: Int(g.input(name), shape, dt, name, example)
        raise CaptureError(f"from_jax: input {name} has dtype {dt}, which is not translated")

    def _output_ref(self, i, value) -> Ref:
        if _unread(value):
            raise CaptureError(f"from_jax: output {i}: {value.reason}")
        if isinstance(value, Int):
            return value.ref
        if isinstance(value, Const):
            value.name = value.name or f"out{i}"
            return self._materialize(value, self._const_port(value))
        return value

    def _const_port(self, const):
        a = const.array
        if a.dtype.kind in "iu":
            return W.element_port(a.dtype.name, a.shape)
        return None

    # ----- equations -----------------------------------------------------------------------------
    def _read(self, env, atom):
        if type(atom).__name__ == "Literal":
            dt = _dtype(atom.aval)
            return Const(np.asarray(atom.val, dtype=dt), "")
        return env[atom]

    def _walk(self, jaxpr, env, scope):
        for eqn in jaxpr.eqns:
            outs = self._equation(eqn, env, scope)
            for var, value in zip(eqn.outvars, outs):
                if type(var).__name__ != "DropVar":
                    env[var] = value

    def where(self, eqn=None) -> str:
        """``primitive (file.py:line)``; the line of the innermost enclosing call where the
        equation has none (the body of a jitted library function)."""
        eqn = eqn or self.eqn
        line = _source(eqn)
        for call in reversed(self.calls):
            if line != "no source line":
                break
            line = _source(call)
        return f"{eqn.primitive.name} ({line})"

    def _equation(self, eqn, env, scope) -> list:
        name = eqn.primitive.name
        self.eqn = eqn
        reason = _refusal(name, eqn.params)
        if reason:
            raise CaptureError(f"from_jax: {self.where()}: {reason}")
        for v in list(eqn.invars) + list(eqn.outvars):
            dt = _dtype(v.aval) if hasattr(v, "aval") else np.dtype(float)
            if dt is None:
                raise CaptureError(f"from_jax: {self.where()}: random keys ({v.aval}) are not "
                                   f"translated (random-key primitives)")
            if dt.kind == "c":
                raise CaptureError(f"from_jax: {self.where()}: complex values ({v.aval}) are "
                                   f"not translated")
        values = [self._read(env, v) for v in eqn.invars]
        module = _join(scope, _scope(eqn))
        if name in _CALLS:
            return self._inline(eqn, values, module)
        if all(isinstance(v, Const) for v in values):
            return self._fold(eqn, values)
        entry = TABLE.get(name)
        if entry is None:
            raise CaptureError(f"from_jax: {self.where()}: no translation onto the operator "
                               f"table")
        missing = next((v for v in values if _unread(v)), None)
        if missing is not None and not getattr(entry, "lazy", False):
            raise CaptureError(f"from_jax: {self.where()} reads a result that is not "
                               f"translated: {missing.reason}")
        ints = any(isinstance(v, Int) for v in values) or any(
            _dtype(v.aval).kind in "iu" for v in eqn.outvars)
        if ints and not getattr(entry, "integers", False):
            lost = Missing(f"{self.where()} computes on integers, which is not translated "
                           f"(integers are indices only)")
            return [lost] * len(eqn.outvars)
        return self._translate(eqn, entry, values, module)

    def _translate(self, eqn, entry, values, module, name=None) -> list:
        name = name or eqn.primitive.name
        k = self.counts.get(name, 0)
        self.counts[name] = k + 1
        self.label = name if k == 0 else f"{name}_{k}"
        first = len(self.graph.nodes)
        try:
            result = entry(self, *values)
        except (Refusal, RouteError) as exc:
            reason = str(exc).replace("\n", " ")
            if reason.startswith("from_jax: "):
                raise CaptureError(reason) from None
            raise CaptureError(f"from_jax: {self.where()}: {reason}") from None
        outs = list(result) if isinstance(result, (tuple, list)) else [result]
        self._label(first, outs, module)
        return outs

    def _label(self, first, outs, module):
        """Name the graph nodes added for the equation: its label for the last one that is
        not a reshape, permute or broadcast (else the one computing its first result),
        ``<label>.<i>`` for the others."""
        last = outs[0].ref if isinstance(outs[0], Int) else outs[0]
        main = last.node if isinstance(last, Ref) and last.node >= first else None
        named = [k for k in range(first, len(self.graph.nodes))
                 if self.graph.nodes[k].op.name not in _HELPERS]
        self.name_nodes(first, named[-1] if named else main, self.label, module)

    def _inline(self, eqn, values, module) -> list:
        """A call's body translated in place (custom rules ignored); relu recognized."""
        params = eqn.params
        body = next((params[k] for k in ("jaxpr", "call_jaxpr", "fun_jaxpr") if k in params),
                    None)
        if body is None:
            raise CaptureError(f"from_jax: {self.where()}: the called jaxpr is not found")
        inner = getattr(body, "jaxpr", body)
        consts = list(getattr(body, "consts", ()))
        if eqn.primitive.name == "custom_jvp_call" and _relu_body(inner) and \
                isinstance(values[0], Ref):
            return self._translate(eqn, RELU, values[:1], module, "relu")
        if len(inner.invars) != len(values):
            raise CaptureError(f"from_jax: {self.where()}: the call passes {len(values)} "
                               f"operands to a body of {len(inner.invars)} inputs")
        env = {var: Const(np.asarray(c), f"{self.label or 'const'}.{k}")
               for k, (var, c) in enumerate(zip(inner.constvars, consts))}
        env.update(zip(inner.invars, values))
        self.calls.append(eqn)
        self._walk(inner, env, module)
        self.calls.pop()
        return [self._read(env, v) for v in inner.outvars]

    def _fold(self, eqn, values) -> list:
        """The equation computed by jax on its constant operands."""
        try:
            out = eqn.primitive.bind(*[v.array for v in values], **eqn.params)
        except Exception as exc:                  # noqa: BLE001 (jax raises many kinds)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CaptureError(f"from_jax: {self.where()}: could not be computed on its "
                               f"constant operands: {first}") from None
        outs = list(out) if eqn.primitive.multiple_results else [out]
        return [Const(np.asarray(o).astype(_dtype(v.aval)), "")
                for o, v in zip(outs, eqn.outvars)]

    # ----- what entries use (routes.frontends.jaxpr) -------------------------------------------
    @property
    def params(self) -> dict:
        return self.eqn.params

    @property
    def out_shape(self) -> tuple:
        return tuple(int(n) for n in self.eqn.outvars[0].aval.shape)

    def out_shapes(self) -> list:
        return [tuple(int(n) for n in v.aval.shape) for v in self.eqn.outvars]

    @property
    def out_dtype(self):
        return _dtype(self.eqn.outvars[0].aval)

    def in_dtype(self, i):
        return _dtype(self.eqn.invars[i].aval)

    def missing(self, reason) -> Missing:
        return Missing(f"{self.where()}: {reason}")

    def _held_shape(self, v) -> tuple:
        if isinstance(v, Const):
            return tuple(v.array.shape)
        return tuple(v.shape) if isinstance(v, Int) else ()

    def _held_element(self, v) -> str:
        if isinstance(v, Const) and v.array.dtype == bool:
            return "bool"
        if isinstance(v, Int) or (isinstance(v, Const) and v.array.dtype.kind in "iu"):
            self.refuse("moving integers is not translated (integers are indices only)")
        return "scalar"

    def like(self, v, shape):
        """``v`` at ``shape``: jax broadcasts a rank-0 operand of an elementwise primitive;
        a broadcast node for a graph value, a constant for a Const."""
        shape = tuple(shape)
        if isinstance(v, Ref):
            s = self.graph.port(v).shape
            if s == shape:
                return v
            return self.apply("broadcast", v, shape=s, to=shape, element=self.element(v))
        if isinstance(v, Const):
            if v.array.shape == shape:
                return v
            return Const(np.broadcast_to(v.array, shape), v.name)
        self.refuse(f"cannot broadcast {type(v).__name__} to {list(shape)}")

    def _ref(self, v, port) -> Ref:
        if isinstance(v, Ref):
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = Const(np.full(port.shape, float(v)), f"{self.label}.number")
        if isinstance(v, Const):
            return self._materialize(v, None if port.scalar else port)
        if isinstance(v, Int):
            self.refuse("integers are read only as indices here")
        raise Refusal(f"cannot pass {type(v).__name__} to a {port} port")

    def _materialize(self, const, port) -> Ref:
        """The graph constant holding ``const`` (once per port): float64 at a frozen port
        (floats widened exactly), Booleans at a Boolean port, integers at an index or word
        port."""
        if port not in const.refs:
            a = np.array(const.array)
            name = const.name or f"{self.label}.const"
            if port is None:
                if a.dtype.kind in "iu":
                    raise Refusal(f"constant {name} holds integers where a number is read")
                a = a if a.dtype == bool else a.astype(np.float64)
            elif port.kind == "index":
                a = a.astype(np.int64)
            elif port.kind == "integer":
                a = a.astype(W.dtype(port))
            const.refs[port] = self.graph.constant(a.copy(), port, name=name)
        return const.refs[port]

    def index_ref(self, v, bounds, shape) -> Ref:
        """Indices ``v`` (an Int of port shape ``shape``, or a Const reshaped to it) as a
        graph value at an index port of ``bounds``."""
        bounds, shape = tuple(int(b) for b in bounds), tuple(shape)
        port = P.index(bounds, shape)
        if isinstance(v, Const):
            a = np.asarray(v.array).reshape(port.array_shape)
            return self._materialize(Const(self._in_range(a, bounds, v.name), v.name), port)
        if not isinstance(v, Int):
            self.refuse(f"indices expected (got {type(v).__name__})")
        held = self.graph.port(v.ref)
        if held.kind == "index":
            if held.bounds != bounds:
                self.refuse(f"indices below {list(bounds)} expected, got {held}")
            return v.ref
        if v.input and self.discover:
            if len(bounds) != 1:
                self.refuse(f"integer input {v.input} read as index tuples is not translated")
            if self.found.setdefault(v.input, bounds[0]) != bounds[0]:
                self.refuse(f"integer input {v.input} is read as indices with several bounds "
                            f"({self.found[v.input]} and {bounds[0]})")
            a = self._in_range(np.asarray(v.example).reshape(shape), bounds, v.input)
            return self.graph.constant(a.astype(np.int64), port, name=v.input)
        self.refuse(f"integer input {v.input or v.ref} is not read as indices")

    def _in_range(self, a, bounds, name):
        comps = a.reshape(-1, len(bounds)) if len(bounds) > 1 else a.reshape(-1, 1)
        for j, b in enumerate(bounds):
            bad = (comps[:, j] < 0) | (comps[:, j] >= b)
            if bad.any():
                self.refuse(f"{name or 'the indices'} hold {int(comps[:, j][bad][0])}, outside "
                            f"[0, {b}) (out-of-range indices, which jax clips or fills, are "
                            f"not translated)")
        return a

    def indices_of(self, ref, dtype) -> Int:
        """The Int of an index graph value (argmax, sort, top_k)."""
        return Int(ref, self.graph.port(ref).shape, dtype)

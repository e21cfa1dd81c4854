"""The PyTorch capture (spec: "Import Coverage"): ``from_torch(model, args) -> Graph``.

The model goes through ``torch.export.export`` and ``run_decompositions`` with the default
table less the aten operators routes.frontends.aten translates (so ``linear``,
``layer_norm``, ``scaled_dot_product_attention``, ``cross_entropy_loss``... stay whole and
map onto one registered operator each; everything else is decomposed to the core aten set
first).  Then each node of the exported program becomes registered operators:

- graph inputs: the model's tensor arguments (named as torch.export names them: the
  parameter names of ``forward``), then its parameters, named by their ``state_dict`` keys,
  then one mask per dropout that draws one (below); tied parameters (one tensor under
  several names) are one input, named by the first; a floating tensor is a value port, an
  integer tensor an index port when a use reads it as indices (an embedding's row count,
  cross entropy's class count bound it; uses are followed through shape-only movement;
  other uses read the indices converted), an int64 word port when it enters integer
  arithmetic or its example holds values outside its bound (a loss's ignored labels),
  else a frozen port holding its integers as numbers (a mask compared, cast or
  multiplied), a Boolean tensor a Boolean port; the no-op checks torch.export
  inserts (``_assert_tensor_metadata``...: aten_tensors.NOOPS) are skipped;
- graph outputs: the model's outputs, then the running statistics a batch norm in training
  mode updates (below); named by the model's fields (``logits``, ``last_hidden_state``,
  ``cache.layers.0.keys``; ``out0``, ``out1.0`` for tuples: torch_export), the
  updates by their buffers (``bn.running_mean``); output objects torch's pytree does not
  know (a transformers cache) are registered as pytree nodes first (torch_export);
- ``graph.source``: ``{"frontend": "torch", "module": ..., "class": ..., "torch": ...}``, the
  model's class (its module and qualified name) and torch's version; ``"updates"``: the
  buffers the trailing outputs update, in order, when there are any;
- ``graph.example_inputs``: the example arrays in that order (float64 numpy for floating
  tensors, exactly widened; int64 for integer ones; the dropout masks' draws);
- buffers (running statistics...) and lifted tensor constants are graph constants
  (``Graph.constant``, frozen), named by their keys, and so are input-independent nodes
  (``full``, ``arange``, ``zeros`` and any node whose operands are all constants), which
  torch computes (folded); random operators are never folded;
- numbers (an epsilon, a scale) are frozen scalar constants; shapes are attributes;
- ``graph.node_names`` / ``graph.node_modules``: the aten node's name for the operator that
  computes it (``<name>.<i>`` for the helper nodes before it: broadcasts, reshapes) and the
  module path from ``nn_module_stack`` (``layers.0.attn``; ``""`` at the root).

Training mode:

- batch norm (``_native_batch_norm_legit_functional``): the batch statistics normalize
  (``batchNorm``), and the new running statistics are computed by registered operators as
  PyTorch does (batch_norm_cpu_update_stats): ``momentum * mean + (1 - momentum) *
  running_mean`` and the same with the unbiased batch variance ``sum((x - mean)^2) / (n -
  1)``; they are graph outputs after the model's, named in ``source["updates"]``.  The
  module's ``num_batches_tracked`` counter (read only with momentum=None) is left out;
  momentum=None (a cumulative average) is refused;
- dropout (``native_dropout``, ``dropout`` with train and p > 0) takes its mask as an input
  (spec: "dropout takes its mask as an input"): a frozen input ``dropout_mask.<node>`` of the
  operand's shape, 1 where an entry is kept and 0 where it is dropped, after the
  parameters, masks in node order; the registered ``dropout`` scales kept entries by
  1 / (1 - p).  Its example is a Bernoulli(1 - p) draw, ``rng.random(shape) >= p`` with
  ``rng = numpy.random.default_rng(dropout_seed)`` (``from_torch(..., dropout_seed=0)``),
  the masks drawn in node order: a typical mask, not torch's (torch.export draws none), so
  an oracle applies the same mask by hand.

What is not translated is refused with one line (``CaptureError``, a RouteError) naming the
aten operator, the node and its source line: ``from_torch: aten.lgamma.default (node
lgamma, model.py:12) has no translation onto the operator table``.  So are programs that
update an input or a buffer in place (other than a batch norm's running statistics) and
models torch.export cannot capture (data-dependent control flow), with torch's first line.
Refused translations (routes.frontends.aten lists the rest): attention dropout
(``dropout_p > 0``), a batch norm with momentum=None in training
mode, a batch norm without running statistics in eval mode.

torch is the optional extra ``[torch]``, imported when ``from_torch`` runs.
"""

from __future__ import annotations

import operator

import numpy as np

from .. import ports as P
from ..errors import RouteError
from ..graph import Graph, Ref
from .aten import BOUNDS, MASKS, TABLE
from .aten_integers import integral, numbers
from .aten_tensors import NOOPS
from .capture import Capture, CaptureError, Missing, Refusal, ref_element
from .torch_constants import Const, Constants
from .torch_export import (ExportError, exported as _export, integer_uses, module_path,
                           output_names, source_line)


# (listing refusals) the value of a refused node, and of every node computed from it.
_UNKNOWN = object()


class _Args(dict):
    """An aten node's arguments bound by name (``a.self``, ``a.dim``)."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def from_torch(model, args, kwargs=None, *, dropout_seed: int = 0) -> Graph:
    """The Graph of registered operators computing ``model(*args, **kwargs)`` (module
    docstring): inputs the tensor arguments, the parameters, then the dropout masks of a
    model in training mode (examples drawn with ``dropout_seed``); ``example_inputs`` set.
    CaptureError (one line) for what is not translated."""
    import torch                        # torch is an optional extra
    from torch.utils import _pytree as pytree
    args = tuple(args)
    kwargs = dict(kwargs or {})
    _refuse_cumulative_batch_norm(torch, model)
    ep = exported(model, args, kwargs)
    leaves = pytree.tree_leaves((args, kwargs))
    capture = _Capture(torch, ep, dropout_seed)
    graph = capture.run(leaves)
    graph.source = {"frontend": "torch", "module": type(model).__module__,
                    "class": type(model).__qualname__, "torch": str(torch.__version__)}
    if capture.updated:
        graph.source["updates"] = list(capture.updated)
    return graph


def unsupported(model, args, kwargs=None) -> list:
    """Every refusal of capturing ``model(*args, **kwargs)``, at once: (aten operator, node,
    source line, reason) for each node the capture cannot translate (an operator without a
    translation, a translation's refusal, a read of an untranslated result) and each input
    it cannot read (operator ``input``); a node computed from a refused one is listed only
    when its operator has no translation at all.  Empty when the model captures.
    CaptureError (one line) when torch.export cannot capture the model."""
    import torch                        # torch is an optional extra
    from torch.utils import _pytree as pytree
    args, kwargs = tuple(args), dict(kwargs or {})
    _refuse_cumulative_batch_norm(torch, model)
    capture = _Capture(torch, exported(model, args, kwargs))
    capture.refusals = []
    capture.run(pytree.tree_leaves((args, kwargs)))
    return list(capture.refusals)


def exported(model, args, kwargs=None):
    """``torch.export`` of ``model(*args, **kwargs)`` decomposed to the aten operators the
    table translates (routes.frontends.torch_export): the program from_torch reads, and the
    one a node-by-node torch run interprets, so that its node names are the graph's.
    CaptureError (one line) when export fails."""
    try:
        return _export(model, args, kwargs)
    except ExportError as exc:
        raise CaptureError(f"from_torch: torch.export could not capture the model: "
                           f"{exc}") from None


def _refuse_cumulative_batch_norm(torch, model):
    """A batch norm in training mode with momentum=None reads its counter as a Python
    number (torch.export cannot capture it): refused by name first."""
    if not isinstance(model, torch.nn.Module):
        return
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and \
                m.track_running_stats and m.momentum is None:
            raise CaptureError(f"from_torch: batch norm {name or type(m).__name__} in "
                               f"training mode has momentum=None (a cumulative average), "
                               f"which is not translated; give it a momentum or capture in "
                               f"eval mode")


class _Capture(Constants, Capture):
    """One capture: the exported program, the graph being built, the values of its nodes."""

    def __init__(self, torch, ep, dropout_seed=0):
        self.torch, self.ep = torch, ep
        self.env = {}                          # fx node -> Ref | Const | Missing | tuple
        self.graph = None
        self.node = None                       # the fx node being translated
        self.dropout_seed = dropout_seed
        self.updates = []                      # (output node name, buffer) updated by the graph
        self.updated = ()                      # the buffers of the outputs after the model's
        self.dtypes = {}                       # Ref -> the torch dtype of the tensor it holds
        self.booleans = {}                     # words Ref -> the Booleans it holds as 1, 0
        self.refusals = None                   # a list: refusals listed, not raised

    # ----- the program's inputs and outputs -----------------------------------------------------
    def run(self, leaves) -> Graph:
        t, ep = self.torch, self.ep
        sig = ep.graph_signature
        self.updates = self._running_statistics(sig)
        kinds = t.export.graph_signature.InputKind
        nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        user = [s for s in sig.input_specs if s.kind == kinds.USER_INPUT]
        if len(user) != len(leaves):
            raise CaptureError(f"from_torch: the program has {len(user)} user inputs but the "
                               f"arguments flatten to {len(leaves)} leaves")
        ports, examples, refs, tied = {}, [], {}, {}
        for spec, leaf in zip(user, leaves):
            if not isinstance(spec.arg, t.export.graph_signature.TensorArgument):
                continue                       # a number torch.export specialized
            node = nodes[spec.arg.name]
            ports[spec.arg.name] = self._input_port(node, leaf)
            examples.append(_array(leaf))
            refs[node] = spec.arg.name
        for spec in sig.input_specs:
            node = nodes.get(getattr(spec.arg, "name", None))
            if spec.kind == kinds.PARAMETER:
                if spec.target in ports:
                    raise CaptureError(f"from_torch: parameter {spec.target} has the name of "
                                       f"an argument")
                tensor = ep.state_dict[spec.target]
                # Tied parameters (GPT-2's lm_head.weight is transformer.wte.weight) are one
                # tensor under several names: one graph input, named by the first, which
                # receives the sum of every use's gradient, as torch's one tensor does.
                key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
                       tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
                if key in tied:
                    refs[node] = tied[key]
                    continue
                tied[key] = spec.target
                ports[spec.target] = P.value(tuple(tensor.shape))
                examples.append(_array(tensor))
                refs[node] = spec.target
            elif spec.kind in (kinds.BUFFER, kinds.CONSTANT_TENSOR):
                tensor = ep.state_dict[spec.target] if spec.target in ep.state_dict \
                    else ep.constants[spec.target]
                self.env[node] = Const(tensor.detach(), spec.target)
            elif spec.kind != kinds.USER_INPUT:
                raise CaptureError(f"from_torch: input {spec.arg.name} of kind "
                                   f"{spec.kind.name} is not translated")
        self._dropout_masks(ports, examples)
        self.graph = Graph(**ports)
        self.graph.example_inputs = tuple(examples)
        for node, name in refs.items():
            self.env[node] = ref = self.graph.input(name)
            self.dtypes[ref] = node.meta["val"].dtype
        for node in ep.graph.nodes:
            if node.op == "call_function":
                self._translate(node)
            elif node.op == "output" and self.refusals is None:
                self._outputs(node)
        return self.graph

    def _running_statistics(self, sig) -> list:
        """The buffer updates the graph returns: (output node, buffer) for the running mean
        and variance a training-mode batch norm computes (getitem 3 and 4 of
        _native_batch_norm_legit_functional), in the program's order.  The module's
        num_batches_tracked counter (integer, read only with momentum=None) is left out;
        any other in-place update of a buffer or an input is refused."""
        nodes = {n.name: n for n in self.ep.graph.nodes}
        statistic = {n.name for n in self.ep.graph.nodes if n.target is operator.getitem
                     and n.args[1] in (3, 4) and str(n.args[0].target) ==
                     "aten._native_batch_norm_legit_functional.default"}
        kept, refused = [], None
        for out, target in sig.buffers_to_mutate.items():
            if out in statistic:
                kept.append((out, target))
        owners = {t.rpartition(".")[0] for _, t in kept}
        for out, target in {**sig.buffers_to_mutate, **sig.user_inputs_to_mutate}.items():
            if (out, target) in kept:
                continue
            owner, _, leaf = target.rpartition(".")
            if leaf == "num_batches_tracked" and owner in owners and \
                    target in sig.buffers_to_mutate.values():
                continue
            refused = refused or (out, target)
        if refused:
            out, target = refused
            node = nodes.get(out)
            where = f"node {out}, {source_line(self.torch, node)}" if node is not None \
                else f"node {out}"
            raise CaptureError(f"from_torch: the program updates {target} in place ({where}); "
                               f"in-place updates of inputs and buffers are not captured "
                               f"(except the running statistics of a batch norm)")
        return kept

    def _dropout_masks(self, ports, examples):
        """A frozen input ``dropout_mask.<node>`` (1 keeps, 0 drops) for each dropout that
        draws a mask, after the parameters; its example a Bernoulli(1 - p) draw of numpy's
        default_rng(dropout_seed), masks drawn in node order."""
        rng = np.random.default_rng(self.dropout_seed)
        for node in self.ep.graph.nodes:
            probability = MASKS.get(str(node.target))
            p = probability(node) if probability is not None else None
            if p is None:
                continue
            name = f"dropout_mask.{node.name}"
            if name in ports:
                raise CaptureError(f"from_torch: input {name} is already taken (a parameter "
                                   f"or an argument of that name)")
            shape = tuple(int(n) for n in node.args[0].meta["val"].shape)
            ports[name] = P.frozen(shape)
            examples.append((rng.random(shape) >= p).astype(np.float64))

    def dropout_mask(self) -> Ref:
        """The mask input of the dropout node being translated."""
        return self.graph.input(f"dropout_mask.{self.node.name}")

    def _input_port(self, node, leaf):
        """The port of a user input: value (floating), Boolean, index (an integer tensor
        read as indices with one bound -- an embedding's ids, a cross entropy's classes,
        through shape-only movement -- and, if at all, as numbers or in integer arithmetic
        through conversions of the indices), integer words (int64: a tensor in integer
        arithmetic -- positions counted, labels padded -- or an index tensor whose example
        holds values outside its bound, as a loss's ignored labels -100) or frozen (an
        integer tensor read only as numbers: a mask compared, cast or multiplied; its
        values held exactly in binary64)."""
        shape = tuple(leaf.shape)
        if leaf.is_floating_point():
            return P.value(shape)
        if leaf.dtype == self.torch.bool:
            return P.boolean(shape)
        bounds, arithmetic = set(), False
        for user, via in integer_uses(node):
            bound = BOUNDS[str(user.target)](user, via) if str(user.target) in BOUNDS else None
            if bound is not None:
                bounds.add(bound)
            else:
                arithmetic |= integral(getattr(user.meta.get("val"), "dtype", None))
        if len(bounds) > 1:
            self._refuse_input(f"integer input {node.name} is read as indices with several "
                               f"bounds {sorted(bounds)}; only one reading is translated")
            return P.frozen(shape)
        if leaf.numel() and int(leaf.abs().max()) > 2 ** 53:
            self._refuse_input(f"integer input {node.name} holds integers beyond 2**53, "
                               f"which binary64 does not hold exactly")
            return P.frozen(shape)
        if bounds:
            bound = bounds.pop()
            if not leaf.numel() or (int(leaf.min()) >= 0 and int(leaf.max()) < bound):
                return P.index((bound,), shape)
            return P.integer(True, 64, shape)
        return P.integer(True, 64, shape) if arithmetic else P.frozen(shape)

    def _refuse_input(self, reason):
        """An input's refusal: raised, or kept when the capture lists every refusal."""
        if self.refusals is None:
            raise CaptureError(f"from_torch: {reason}")
        self.refusals.append(("input", "-", "-", reason))

    def _outputs(self, node):
        """The model's outputs, then the running statistics it updates (``updated`` names
        their buffers, in that order)."""
        kinds = self.torch.export.graph_signature.OutputKind
        specs = self.ep.graph_signature.output_specs
        user, updates = [], dict(self.updates)
        for i, (v, spec) in enumerate(zip(node.args[0], specs)):
            if spec.kind == kinds.USER_OUTPUT:
                user.append((i, v))
        refs = [self._output_ref(i, v) for i, v in user]
        labels = output_names(self.ep)
        if labels is None or len(labels) != len(refs):
            labels = [f"out{i}" for i in range(len(refs))]
        names = {getattr(v, "name", None): (i, v) for i, v in enumerate(node.args[0])}
        refs += [self._output_ref(*names[out]) for out in updates]
        self.updated = tuple(updates.values())
        # The buffers' updates are named by their buffers (``bn.running_mean``) unless a
        # model output has that name.
        labels += [b if b not in labels else f"update.{b}" for b in self.updated]
        self.graph.output(*refs, names=labels)

    def _output_ref(self, i, v) -> Ref:
        value = self.env.get(v) if hasattr(v, "op") else v
        if isinstance(value, Missing):
            raise CaptureError(f"from_torch: output {i} ({v}): {value.reason}")
        if isinstance(value, Const):
            value = self._materialize(value, None)
        if not isinstance(value, Ref):
            raise CaptureError(f"from_torch: output {i} ({v}) is not a tensor the graph "
                               f"computes (got {type(value).__name__})")
        return value

    # ----- one node ------------------------------------------------------------------------------
    def _where(self, node) -> str:
        return f"{node.target} (node {node.name}, {source_line(self.torch, node)})"

    def _translate(self, node):
        self.node = node
        if node.target is operator.getitem:
            held = self.env[node.args[0]]
            self.env[node] = held if held is _UNKNOWN else held[node.args[1]]
            return
        name = str(node.target)
        if name in NOOPS:                      # checks torch.export inserts: no value
            self.env[node] = None
            return
        if not hasattr(node.target, "_schema"):
            return self._refused(node, "has no translation onto the operator table")
        args = self._bind(node)
        leaves = self.torch.utils._pytree.tree_leaves(dict(args))
        if any(v is _UNKNOWN for v in leaves):
            # (listing refusals) an operand a refused node computes: this node is listed only
            # when it has no translation at all.
            if name not in TABLE:
                self._refused(node, "has no translation onto the operator table")
            self.env[node] = _UNKNOWN
            return
        missing = next((v for v in leaves if isinstance(v, Missing)), None)
        if missing is not None:
            return self._refused(node, f"reads a result that is not translated: "
                                       f"{missing.reason}", ":")
        if not any(isinstance(v, Ref) for v in leaves):
            self.env[node] = self._fold(node)
            return
        entry = TABLE.get(name)
        if entry is None:
            return self._refused(node, "has no translation onto the operator table")
        first = len(self.graph.nodes)
        try:
            result = entry(self, args)
        except (Refusal, RouteError) as exc:
            del self.graph.nodes[first:]       # (listing refusals) what the entry began
            return self._refused(node, str(exc).replace("\n", " "), ":")
        self.env[node] = result
        self._label(node, first, result)
        val = node.meta["val"]
        results = result if isinstance(result, tuple) else (result,)
        metas = val if isinstance(val, (tuple, list)) else (val,) * len(results)
        for ref, meta in zip(results, metas):           # (values, indices): each its dtype
            if isinstance(ref, Ref):
                self.dtypes.setdefault(ref, getattr(meta, "dtype", None))

    def _refused(self, node, reason, sep=""):
        """The node's one-line refusal: raised, or listed (``refusals``) with its value
        unknown to the nodes after it."""
        text = f"{self._where(node)}{sep} {reason}"
        if self.refusals is None:
            raise CaptureError(f"from_torch: {text}")
        self.refusals.append((str(node.target), node.name, source_line(self.torch, node),
                              reason))
        self.env[node] = _UNKNOWN

    def _label(self, node, first, result):
        """Name the graph nodes added for ``node``: its own name for the one computing its
        (first) result, ``<name>.<i>`` for the others."""
        last = result[0] if isinstance(result, tuple) else result
        main = last.node if isinstance(last, Ref) and last.node >= first else None
        self.name_nodes(first, main, node.name, module_path(node))

    def _bind(self, node) -> _Args:
        """The node's arguments by schema name, defaults filled in, fx nodes replaced by
        their values."""
        schema = node.target._schema
        positional = [a for a in schema.arguments if not a.kwarg_only]
        bound = {a.name: v for a, v in zip(positional, node.args)}
        bound.update(node.kwargs)
        for a in schema.arguments:
            if a.name not in bound:
                bound[a.name] = a.default_value if a.has_default_value() else None
        return _Args({k: self._value(v) for k, v in bound.items()})

    def _value(self, v):
        if hasattr(v, "op") and hasattr(v, "users"):      # an fx node
            return self.env[v]
        if isinstance(v, (list, tuple)):
            return type(v)(self._value(x) for x in v)
        return v

    def _fold(self, node):
        """The node computed by torch on its constant operands (never a random one), in
        float64: floating operands are widened exactly and binary32 is read as binary64
        (a ``dtype=float32`` argument, ``.float()``), so arithmetic on buffers and tables (a
        frozen batch norm's ``weight * (running_var + eps).rsqrt()``, ALiBi slopes over
        sqrt(head_dim), rotary and sinusoidal tables) is the math on the model's data to
        binary64's accuracy, as the graph's values are (a conversion between binary32 and
        binary64 of a graph value is the identity there); a conversion to a narrower float
        the program writes (``.half()``, ``.to(torch.bfloat16)``) still rounds."""
        if self.torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            raise CaptureError(f"from_torch: {self._where(node)} draws random numbers; it is "
                               f"not folded into a constant")
        args = tuple(_unwrap(self._value(v)) for v in node.args)
        kwargs = {k: _unwrap(self._value(v)) for k, v in node.kwargs.items()}
        with self.torch.no_grad():
            try:
                out = node.target(*self._wide(args), **self._wide(kwargs))
            except Exception:                     # noqa: BLE001 (an operator that needs
                out = None                        # its program dtypes: computed so below)
            if out is None or not _shaped_as(out, node.meta.get("val")):
                # A node reading its operand's bytes (a view as another dtype), or one that
                # takes only the program's dtypes, computes at those.
                out = node.target(*args, **kwargs)
        if isinstance(out, (tuple, list)):
            return tuple(Const(o, f"{node.name}.{i}") for i, o in enumerate(out))
        if not isinstance(out, self.torch.Tensor):
            raise CaptureError(f"from_torch: {self._where(node)} gives a {type(out).__name__}, "
                               f"not a tensor")
        return Const(out, node.name)

    def _wide(self, v):
        """A folded node's operand with its floating tensors widened exactly to float64 and
        the dtype float32 read as float64 (_fold)."""
        t = self.torch
        if isinstance(v, t.Tensor):
            return v.to(t.float64) if v.is_floating_point() and v.dtype != t.float64 else v
        if v is t.float32:
            return t.float64
        if isinstance(v, (list, tuple)):
            return type(v)(self._wide(x) for x in v)
        if isinstance(v, dict):
            return {k: self._wide(x) for k, x in v.items()}
        return v

    # ----- what entries use (routes.frontends.aten) --------------------------------------------
    def _meta(self):
        val = self.node.meta["val"]
        return val[0] if isinstance(val, (tuple, list)) else val

    @property
    def out_shape(self) -> tuple:
        return tuple(int(n) for n in self._meta().shape)

    @property
    def out_dtype(self):
        return self._meta().dtype

    def missing(self, reason) -> Missing:
        return Missing(reason)

    def scalar_result(self):
        """Refuse a node whose result is not the model's scalar (integer or Boolean
        arithmetic)."""
        if not self.out_dtype.is_floating_point:
            self.refuse(f"arithmetic on {self.out_dtype} tensors is not translated")

    def _held_shape(self, v) -> tuple:
        return tuple(v.tensor.shape) if isinstance(v, Const) else ()

    def is_scalar(self, v) -> bool:
        """Whether ``v`` holds the model's scalar (a floating tensor)."""
        if isinstance(v, Ref):
            return self.graph.port(v).scalar
        if isinstance(v, Const):
            return v.tensor.is_floating_point()
        return isinstance(v, float)

    def _held_element(self, v) -> str:
        return "bool" if isinstance(v, Const) and v.tensor.dtype == self.torch.bool \
            else "scalar"

    def same_dtype(self, v) -> bool:
        """Whether the node's result has the dtype of its operand ``v``."""
        arg = self.node.args[0]
        dtype = arg.meta["val"].dtype if hasattr(arg, "meta") else None
        if isinstance(v, Const):
            dtype = v.tensor.dtype
        return dtype == self.out_dtype

    def dtype(self, v):
        """The torch dtype of an argument (a Ref, a Const; Python numbers as torch promotes
        them: bool, int64, float64); None when not known."""
        t = self.torch
        if isinstance(v, Ref):
            return self.dtypes.get(v)
        if isinstance(v, Const):
            return v.tensor.dtype
        if isinstance(v, bool):
            return t.bool
        return t.int64 if isinstance(v, int) else t.float64 if isinstance(v, float) else None

    def kind(self, v) -> str:
        """What an argument holds: ``scalar`` (numbers: value, frozen, detached, a floating
        or integer Const, a Python number), ``bool`` or ``index``."""
        if isinstance(v, Ref):
            port = self.graph.port(v)
            return "scalar" if port.scalar else port.kind
        if isinstance(v, Const):
            return "bool" if v.tensor.dtype == self.torch.bool else "scalar"
        return "bool" if isinstance(v, bool) else "scalar"

    def by_positions(self, x) -> Ref:
        """The node, an operator that only copies entries of its first operand ``x``
        (as_strided, nearest upsampling, index_select by constant indices, roll, repeat,
        pixel shuffle), as ``gather`` of x: torch runs the node on the table of x's flat
        positions (float64, exact below 2**53, laid out with x's strides and storage offset,
        which as_strided reads) and each entry of the result names the entry it copies.  Its
        gradient sums the copies of an entry, as these operators' backward passes do."""
        t, node = self.torch, self.node
        val = node.args[0].meta["val"]
        shape, stride, offset = tuple(val.shape), tuple(val.stride()), val.storage_offset()
        count = int(np.prod(shape, dtype=np.int64))
        if count >= 2 ** 53 or any(isinstance(v, Ref) and v != x for v in
                                   t.utils._pytree.tree_leaves(dict(self._bind(node)))):
            self.refuse("only copies of one computed operand by constant positions are "
                        "translated")
        span = offset + 1 + sum((n - 1) * st for n, st in zip(shape, stride) if n) if count \
            else offset
        storage = t.full((max(span, 1),), -1.0, dtype=t.float64)
        table = storage.as_strided(shape, stride, offset)
        table.copy_(t.arange(count, dtype=t.float64).reshape(shape))
        rest = [_unwrap(self._value(v)) for v in node.args[1:]]
        kwargs = {k: _unwrap(self._value(v)) for k, v in node.kwargs.items()}
        with t.no_grad():
            picked = node.target(table, *rest, **kwargs)
        if bool((picked < 0).any()):
            self.refuse("it reads memory outside its operand")
        positions = picked.to(t.int64)
        if tuple(positions.shape) == shape and \
                bool((positions.reshape(-1) == t.arange(count)).all()):
            return x
        flat = self.move("reshape", x, shape=shape, to=(count,)) if len(shape) != 1 else x
        index = self._materialize(Const(positions, f"{node.name}.positions"),
                                  P.index((count,), tuple(positions.shape)))
        return self.move("gather", flat, index, shape=(count,), axes=(0,), batch=0,
                         index_shape=tuple(positions.shape))

    def move(self, name, x, *more, **attributes):
        """Movement operator ``name`` on ``x`` (then ``more`` operands): its element sort read
        from ``x``; index values moved as int64 words between encodeIndex and decodeIndex,
        which is exact."""
        if isinstance(x, Ref) and self.graph.port(x).kind == "index":
            port = self.graph.port(x)
            if len(port.bounds) != 1:
                self.refuse(f"moving {port} is not translated")
            words = self.apply("encodeIndex", x, shape=port.shape, bounds=port.bounds,
                               element="int64")
            y = self.apply(name, words, *more, element="int64", **attributes)
            return self.apply("decodeIndex", y, shape=self.graph.port(y).shape,
                              bounds=port.bounds, element="int64")
        return self.apply(name, x, *more, element=self.element(x), **attributes)

    def like(self, v, shape):
        """``v`` broadcast to ``shape`` (PyTorch's rule: leading axes added, extent-1 axes
        copied): a broadcast node for a graph value, a constant for a number or a Const."""
        shape = tuple(shape)
        if isinstance(v, Ref):
            if self.graph.port(v).shape == shape:
                return v
            return self.move("broadcast", v, shape=self.graph.port(v).shape, to=shape)
        if isinstance(v, Const):
            if tuple(v.tensor.shape) == shape:
                return v
            return Const(v.tensor.expand(shape), v.name)
        dtype = self.torch.bool if isinstance(v, bool) else self.torch.float64
        return Const(self.torch.full(shape, v, dtype=dtype), f"{self.node.name}.full")

    def greater(self, v, number, shape):
        """Booleans ``v > number`` of ``shape``: folded for a Const, a ``gt`` node (IEEE:
        false at NaN) for a graph value."""
        if isinstance(v, Const):
            return Const(v.tensor > number, f"{v.name}.kept")
        return self.apply("gt", v, self.like(float(number), shape), shape=shape)

    def indices(self, v, bound) -> Ref:
        """``v`` read as indices below ``bound``: an index graph value, or a constant."""
        if isinstance(v, Const):
            return self._materialize(v, P.index((bound,), tuple(v.tensor.shape)))
        port = self.graph.port(v)
        if port.kind == "integer":             # words the model computed (aten_integers)
            return self.apply("decodeIndex", v, shape=port.shape, bounds=(bound,),
                              element=ref_element(self.graph, v, self.refuse))
        if port.kind != "index" or port.bounds != (bound,):
            self.refuse(f"indices below {bound} expected, got {port}")
        return v

    def _ref(self, v, port) -> Ref:
        if isinstance(v, Ref):
            held = self.graph.port(v)
            if port.scalar and held.kind == "integer":      # integers promoted to numbers
                return numbers(self, v)
            if port.scalar and held.kind == "index" and len(held.bounds) == 1:
                return self.apply("cast", v, shape=held.shape, source="index",
                                  bounds=held.bounds)
            if port.scalar and held.kind == "bool":         # torch promotes: True 1, False 0
                return self.apply("cast", v, shape=held.shape)
            return v
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = Const(self.torch.full(port.shape, v, dtype=self.torch.float64),
                      f"{self.node.name}.number")
        if isinstance(v, Const):
            if port.scalar and v.tensor.dtype == self.torch.bool:
                return self.apply("cast", self._materialize(v, None), shape=self.shape(v))
            return self._materialize(v, port if not port.scalar else None)
        raise Refusal(f"cannot pass {type(v).__name__} {v!r} to a {port} port")

    def _materialize(self, const, port) -> Ref:
        """The graph constant holding ``const`` (once per port): float64 at a frozen port
        (floating tensors widened exactly; integers as PyTorch promotes them, exact below
        2**53), int64 at an index port, Booleans at a Boolean port."""
        key = None if port is None else port
        if key not in const.refs:
            tensor = const.tensor.detach().contiguous()
            if port is None and tensor.dtype != self.torch.bool:
                if not tensor.is_floating_point() and tensor.numel() and \
                        int(tensor.abs().max()) > 2 ** 53:
                    raise Refusal(f"constant {const.name} holds integers beyond 2**53, "
                                   f"which binary64 does not hold exactly")
                array = tensor.to(self.torch.float64).numpy().copy()
            else:
                array = tensor.numpy().copy()
                if port is not None and port.kind in ("index", "integer"):
                    array = array.astype(np.int64)
            const.refs[key] = self.graph.constant(array, port, name=const.name)
        return const.refs[key]


def _shaped_as(out, val) -> bool:
    """Whether a folded result has the shapes the program records (``val``: its fake
    tensors; True when it records none)."""
    if val is None:
        return True
    if isinstance(out, (tuple, list)) and isinstance(val, (tuple, list)):
        return len(out) == len(val) and all(_shaped_as(o, v) for o, v in zip(out, val))
    shape = getattr(val, "shape", None)
    return shape is None or tuple(getattr(out, "shape", ())) == tuple(shape)


def _unwrap(v):
    """A value with its Consts replaced by their tensors (to call an aten operator)."""
    if isinstance(v, Const):
        return v.tensor
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x) for x in v)
    return v


def _array(tensor) -> np.ndarray:
    """A tensor as numpy: float64 for floating tensors (exact widening), bool for Booleans,
    int64 for integer tensors."""
    import torch                        # torch is an optional extra
    tensor = tensor.detach().cpu()
    if tensor.is_floating_point():
        return tensor.to(torch.float64).numpy().copy()
    if tensor.dtype == torch.bool:
        return tensor.numpy().copy()
    return tensor.numpy().astype(np.int64)

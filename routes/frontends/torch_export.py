"""The export step of the PyTorch capture: ``exported(model, args, kwargs)`` (torch.export,
then run_decompositions with the default table less the aten operators routes.frontends.aten
translates) and ``output_names(ep)``, the names of the program's outputs by the model's
fields; and what the capture reads off the program's nodes: ``source_line`` (the user's
``file.py:line``), ``module_path`` (``layers.0.attn``), ``integer_uses`` (what reads an
integer input, through shape-only movement).

Output objects: a model may return an object that torch's pytree does not know (the cache of
a transformers model, ``DynamicCache``, inside its ``ModelOutput``); torch.export then refuses
the model.  When it does, the model is run once on the example arguments (no gradient) and
every class in its output that holds tensors in its attributes and is not a pytree node is
registered as one: its children are the attributes that hold tensors (keyed by attribute
name), the other attributes travel in the node's context; unflattening builds the object
without calling its ``__init__``.  The registration stays (torch has no supported way to
undo one), so a later capture of the same kind of model exports at once.

Output names (``output_names``): the pytree key path of each output leaf, keys joined by
``.``: a mapping key (``ModelOutput`` fields, dict keys) by itself, an attribute by its name,
a sequence position by its number; a path that is empty or starts with a position is
prefixed ``out`` (a single tensor is ``out0``, a tuple ``out0``, ``out1``, a nested tuple
``out1.0``), so ``logits``, ``past_key_values.layers.0.keys``, ``last_hidden_state``.
"""

from __future__ import annotations

import os
import re
import traceback
import warnings

from .aten import TABLE
from .aten_tensors import NOOPS


class ExportError(Exception):
    """torch.export could not capture the model (one line: torch's first line)."""


def exported(model, args, kwargs=None):
    """``torch.export`` of ``model(*args, **kwargs)`` decomposed to the aten operators the
    table translates (the default decompositions but those of TABLE's operators): the
    program from_torch reads, and the one a node-by-node torch run interprets, so that its
    node names are the graph's.  ExportError (one line) when export fails."""
    import torch                        # torch is an optional extra
    args, kwargs = tuple(args), dict(kwargs or {})
    with warnings.catch_warnings():
        # torch 2.13's export deep-copies its pytree specs through a deprecated LeafSpec
        # check of its own: a FutureWarning about torch's code, not the user's.
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)",
                                category=FutureWarning)
        try:
            ep = torch.export.export(model, args, kwargs)
        except Exception as exc:              # torch raises many kinds; one line for all
            if not _register_outputs(torch, model, args, kwargs):
                raise ExportError(_first_line(exc)) from None
            try:
                ep = torch.export.export(model, args, kwargs)
            except Exception as again:        # noqa: BLE001
                raise ExportError(_first_line(again)) from None
        table = torch.export.default_decompositions()
        for overload in list(table):
            if str(overload) in TABLE:
                del table[overload]
        return ep.run_decompositions(table)


def _first_line(exc) -> str:
    """torch's first line; for a guard on a value the inputs decide (a branch on
    ``bool(tensor)``, ``.item()``, a data-dependent shape), where the model's code took it."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if "data-dependent" not in first:
        return first
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not re.search(r"[/\\]torch[/\\](_|fx|export|utils|overrides|nn[/\\]modules"
                               r"[/\\]module\.py)", f.filename)]
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} " \
        f"({(frames[-1].line or '').strip()[:80]})" if frames else ""
    return (f"{first.rstrip('.')}: the model branches on a value of its inputs{where}, which "
            f"an export cannot follow; give the flags that decide it (nn.Transformer's "
            f"tgt_is_causal, say) or capture a model without the branch")


def _register_outputs(torch, model, args, kwargs) -> bool:
    """Register as pytree nodes the classes of the model's output that hold tensors and are
    not pytree nodes (module docstring); whether any was registered."""
    from torch.utils import _pytree as pytree
    try:
        with torch.no_grad():
            out = model(*args, **kwargs)
    except Exception:                         # noqa: BLE001 (the export error is the news)
        return False
    found = []
    _unknown_classes(torch, pytree, out, found, set())
    for cls in found:
        pytree.register_pytree_node(cls, _attributes_flatten, _attributes_unflatten,
                                    flatten_with_keys_fn=_attributes_flatten_with_keys)
    return bool(found)


def _holds_tensor(torch, pytree, v, seen) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if id(v) in seen:
        return False
    seen = seen | {id(v)}
    if isinstance(v, (list, tuple)):
        return any(_holds_tensor(torch, pytree, x, seen) for x in v)
    if isinstance(v, dict):
        return any(_holds_tensor(torch, pytree, x, seen) for x in v.values())
    if type(v) in pytree.SUPPORTED_NODES:
        children, _ = pytree.tree_flatten(v)
        return any(isinstance(x, torch.Tensor) for x in children)
    attrs = getattr(v, "__dict__", None)
    return attrs is not None and any(_holds_tensor(torch, pytree, x, seen)
                                     for x in attrs.values())


def _unknown_classes(torch, pytree, v, found, seen):
    """Append to ``found`` the classes under ``v`` that hold tensors in their attributes and
    are not pytree nodes (depth first, each once)."""
    if isinstance(v, torch.Tensor) or id(v) in seen:
        return
    seen.add(id(v))
    if type(v) in pytree.SUPPORTED_NODES:
        children, _ = pytree.tree_flatten(v, is_leaf=lambda x: x is not v and
                                          type(x) not in pytree.SUPPORTED_NODES)
        for x in children:
            _unknown_classes(torch, pytree, x, found, seen)
        return
    attrs = getattr(v, "__dict__", None)
    if attrs is None or not _holds_tensor(torch, pytree, v, set()):
        return
    if type(v) not in found:
        found.append(type(v))
    for x in attrs.values():
        _unknown_classes(torch, pytree, x, found, seen)


def _split(obj):
    """(names of the attributes holding tensors, their values, the other attributes as a
    tuple of pairs)."""
    import torch
    from torch.utils import _pytree as pytree
    names, values, rest = [], [], []
    for k, v in vars(obj).items():
        if _holds_tensor(torch, pytree, v, set()):
            names.append(k)
            values.append(v)
        else:
            rest.append((k, v))
    return tuple(names), values, tuple(rest)


def _attributes_flatten(obj):
    names, values, rest = _split(obj)
    return values, (type(obj), names, rest)


def _attributes_flatten_with_keys(obj):
    from torch.utils._pytree import GetAttrKey
    names, values, rest = _split(obj)
    return [(GetAttrKey(n), v) for n, v in zip(names, values)], (type(obj), names, rest)


def _attributes_unflatten(values, context):
    cls, names, rest = context
    obj = cls.__new__(cls)
    obj.__dict__.update(dict(rest))
    obj.__dict__.update(dict(zip(names, values)))
    return obj


def output_names(ep) -> list:
    """The name of each user output of ``ep`` (module docstring), in order; None where the
    program's output structure is not known."""
    spec = getattr(getattr(ep, "call_spec", None), "out_spec", None)
    if spec is None:
        return None
    names = []
    for parts in _paths(spec, ()):
        name = ".".join(parts)
        if not parts or parts[0].isdigit():
            name = "out" + (name or "0")
        names.append(name)
    return names


def _paths(spec, prefix):
    """The key path of each leaf under TreeSpec ``spec``, read from the spec alone (no
    output object is rebuilt): the keys of a mapping (dict, ModelOutput: a context listing
    one key per child), a named tuple's fields, the attribute names of a node registered
    here, positions otherwise."""
    if spec.is_leaf():
        yield prefix
        return
    children = spec.children()
    ctx, n = spec.context, len(children)
    keys = [str(i) for i in range(n)]
    if getattr(ctx, "__len__", None) and len(ctx) == 3 and ctx[0] is spec.type and \
            isinstance(ctx[1], tuple) and len(ctx[1]) == n:
        keys = list(ctx[1])                               # _attributes_flatten
    elif isinstance(ctx, (list, tuple)) and len(ctx) == n and \
            all(isinstance(k, (str, int)) for k in ctx) and spec.type not in (list, tuple):
        keys = [str(k) for k in ctx]                      # dict keys, ModelOutput fields
    elif hasattr(spec.type, "_fields") and len(spec.type._fields) == n:
        keys = list(spec.type._fields)                    # a named tuple
    for key, child in zip(keys, children):
        yield from _paths(child, prefix + (key,))


# Shape-only nodes an integer input's uses are followed through: they move its entries
# without reading them as numbers.
_THROUGH = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
            "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
            "aten.squeeze.default", "aten.flatten.using_ints", "aten.expand.default",
            "aten.slice.Tensor", "aten.select.int", "aten.clone.default",
            "aten.contiguous.default", "aten.alias.default", "aten.permute.default",
            "aten.transpose.int", "aten.t.default"}


def integer_uses(node) -> list:
    """(user, the node it reads) for each node reading ``node``'s entries, followed through
    shape-only movement (_THROUGH) and conversions to integer types; the no-op checks
    (NOOPS) are no use."""
    out, todo, seen = [], [node], set()
    dtype = node.meta["val"].dtype
    while todo:
        n = todo.pop()
        for u in n.users:
            target = str(u.target)
            if target in NOOPS or u in seen:
                continue
            seen.add(u)
            val = u.meta.get("val")
            kept = getattr(val, "dtype", None) == dtype or (
                getattr(val, "dtype", None) is not None and not val.dtype.is_floating_point
                and str(val.dtype) != "torch.bool")
            if target in _THROUGH or (target in ("aten._to_copy.default", "aten.to.dtype")
                                      and kept):
                todo.append(u)
            else:
                out.append((u, n))
    return out


def source_line(torch, node) -> str:
    """``file.py:line`` of the innermost frame outside torch in the node's stack trace."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    if not frames:
        return "no source line"
    inside = os.path.dirname(torch.__file__)
    outside = [f for f in frames if not f[0].startswith(inside)]
    path, line = (outside or frames)[-1]
    return f"{os.path.basename(path)}:{line}"


def module_path(node) -> str:
    """The innermost module path of the node (``layers.0.attn``; ``""`` at the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    path = re.sub(r"^L\['self'\]\.?", "", path)
    return re.sub(r"\[(\d+)\]", r".\1", path).replace("._modules['", ".").replace("']", "")

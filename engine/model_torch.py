"""PyTorch running the captured model itself, next to the emulated run (``model
--implementations torch,torch_compile``): the same samples, cotangents and exact values.

- ``torch`` (eager): the factory's model converted to the format's dtype (bfloat16,
  float16, float32, float64), its parameters and arguments set to the sample's values (the
  same format values the emulated run reads), exported and decomposed exactly as
  routes.from_torch captures it, then run node by node by an ``fx.Interpreter`` (the aten
  kernels eager mode calls), recording every node's value and, from autograd, the
  cotangent its output receives: a graph node whose name is the FX node's (the node of the
  translation that gives the aten result) is measured against its exact values.  The whole model's outputs and the gradients of its arguments and
  parameters come from the module itself with autograd, the cotangents those of the
  emulated run.
- ``torch_compile``: ``torch.compile`` of the model (inductor; on CPU it needs a C
  compiler: without one its row is ``no_rule`` saying so): the whole model's outputs and
  gradients only, since compiled kernels fuse nodes and keep no intermediate values.

Rows: implementation ``torch`` / ``torch_compile``, policy ``torch`` (torch's own orders and
accumulation), attribution ``propagated``, device ``cpu``.  What torch cannot run gives one
``no_rule`` row per implementation with the reason: a target that is an artifact (the
model's code is needed), a format without a torch dtype, a mode other than nearest_even,
torch missing.
"""

from __future__ import annotations

import copy

import numpy as np

from roundoff_coverage.routes.graph import INPUT, Ref, Trace

IMPLEMENTATIONS = ("torch", "torch_compile")
DTYPES = {"bfloat16": "bfloat16", "binary16": "float16", "binary32": "float32",
          "binary64": "float64"}
POLICY = "torch"


def problem(impl, target, config) -> str | None:
    """Why ``impl`` cannot run the model for ``config``, or None."""
    if target is None or ":" not in target or target.endswith(".json"):
        return "the target is a graph artifact: torch runs the model's own code (give " \
               "file.py:factory)"
    if config.format not in DTYPES:
        return f"torch has no dtype for {config.format} (it has {', '.join(DTYPES)})"
    if config.mode != "nearest_even":
        return f"torch rounds to nearest even only (not {config.mode})"
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install 'roundoff-coverage[torch]')"
    if impl == "torch_compile":
        import os
        import shutil
        cxx = os.environ.get("CXX", "g++")
        if shutil.which(cxx) is None:
            return (f"torch.compile on the CPU needs a C++ compiler (Inductor writes C++): "
                    f"{cxx} not found (install g++ or set CXX)")
    return None


def traces(impl, target, graph, config, xs, cots, want_grad) -> list:
    """Per sample, a routes.graph.Trace of what torch computed: node values (eager only),
    the whole model's outputs, and the gradients of its inputs (``cotangents`` at input
    Refs) when ``want_grad``."""
    import torch

    from .targets import importable
    model, args = importable(target)()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"the factory's model is a {type(model).__name__}, not a torch "
                         f"nn.Module: torch cannot run it")
    args = args if isinstance(args, tuple) else (args,)
    dtype = getattr(torch, DTYPES[config.format])
    n_args = len(args)
    out = []
    for x, c in zip(xs, cots):
        m = copy.deepcopy(model).to(dtype)
        params = dict(m.named_parameters())
        targs = [_tensor(torch, v, dtype) for v in x[:n_args]]
        with torch.no_grad():
            for name, v in zip(graph.input_names[n_args:], x[n_args:]):
                if name in params:
                    params[name].copy_(_tensor(torch, v, dtype))
        tr = Trace(values={})
        if impl == "torch":
            _node_values(torch, m, targs, graph, tr, c if want_grad else None)
        run = torch.compile(m) if impl == "torch_compile" else m
        if want_grad:
            for t in targs:
                if t.is_floating_point():
                    t.requires_grad_(True)
        outs = run(*targs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        for ref, o in zip(graph.output_refs, outs):
            tr.values[ref] = _array(o)
        if want_grad:
            pairs = [(o, torch.as_tensor(np.asarray(ct), dtype=o.dtype))
                     for o, ct in zip(outs, c) if ct is not None and o.requires_grad]
            torch.autograd.backward([o for o, _ in pairs], [ct for _, ct in pairs])
            for i, name in enumerate(graph.input_names):
                held = targs[i] if i < n_args else params.get(name)
                if held is not None and held.grad is not None:
                    tr.cotangents[Ref(INPUT, i)] = _array(held.grad)
        out.append(tr)
    return out


def _tensor(torch, v, dtype):
    a = np.asarray(v)
    return torch.tensor(a, dtype=dtype) if a.dtype.kind == "f" else torch.tensor(a)


def _array(t) -> np.ndarray:
    """A tensor's values as numpy (floating ones widened exactly to float64)."""
    t = t.detach().cpu()
    return (t.double() if t.is_floating_point() else t).numpy()


def _node_values(torch, model, targs, graph, tr, cots=None) -> None:
    """Every graph node's value as eager torch computes it, and with ``cots`` (output
    cotangents) the cotangent its output receives from autograd: the model exported and
    decomposed as routes.from_torch does, run by an fx Interpreter keeping each node's
    tensor (``retain_grad``); nodes matched by name and shape."""
    from roundoff_coverage.routes.frontends.torch import exported
    ep = exported(model, targs)
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            first = value[0] if isinstance(value, (tuple, list)) and value else value
            if isinstance(first, torch.Tensor):
                seen[n.name] = first
                if first.requires_grad:
                    first.retain_grad()
            return value

    leaves = [t.detach().requires_grad_(cots is not None and t.is_floating_point())
              for t in targs]
    with torch.set_grad_enabled(cots is not None):
        outs = Recorder(ep.module()).run(*leaves)
    if cots is not None:
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        pairs = [(o, torch.as_tensor(np.asarray(ct), dtype=o.dtype))
                 for o, ct in zip(outs, cots) if ct is not None and o.requires_grad]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [ct for _, ct in pairs])
    for k, (name, node) in enumerate(zip(graph.node_names, graph.nodes)):
        v = seen.get(name)
        port = node.op.outputs[0]
        if v is not None and v.is_floating_point() and port.kind == "value" and \
                tuple(v.shape) == tuple(port.shape):
            tr.values[Ref(k, 0)] = _array(v)
            if v.grad is not None:
                tr.cotangents[Ref(k, 0)] = _array(v.grad)

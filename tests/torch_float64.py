"""torch's own float64 run as the oracle of a capture (tests of routes.from_torch): the
captured graph run in binary64 against torch's float64 forward and backward of the same
model, every output and every gradient, as normwise relative differences."""

from __future__ import annotations

import copy

import numpy as np
import torch

from roundoff_coverage import numerics, routes

TOL = 1e-10
# A gradient that is zero mathematically (an attention key bias: softmax ignores a shift
# along the keys) is rounding noise in both runs: each tensor's difference is measured
# against max(its largest entry, FLOOR x the model's largest gradient entry).
FLOOR = 1e-3


class _Float64Throughout(torch.overrides.TorchFunctionMode):
    """torch's float64 run of a model whose code converts to binary32 on purpose (Llama's
    RMSNorm and rotary tables, a softmax with dtype=float32): every conversion to float32
    (``.float()``, a ``dtype=torch.float32`` argument) stays in float64, as the capture
    reads binary32 as binary64 both in the graph's values and in the constants it folds
    (routes.frontends.torch: _fold)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.float:
            func = torch.Tensor.double
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        kwargs = {k: torch.float64 if v is torch.float32 else v for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _torch_float64(model, args, cotangents, kwargs=None):
    """(outputs, {input or parameter name: gradient}) of torch's float64 run: the model
    widened exactly (``.double()``), the floating arguments requiring gradients."""
    m = copy.deepcopy(model).double()
    flat, spec = torch.utils._pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    flat = [a.detach().double().requires_grad_(True)
            if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in flat]
    with _Float64Throughout():
        args, kwargs = torch.utils._pytree.tree_unflatten(flat, spec)
        out = m(*args, **kwargs)
    leaves = torch.utils._pytree.tree_leaves(out)
    params = dict(m.named_parameters(remove_duplicate=False))
    tensors = [a for a in flat if isinstance(a, torch.Tensor)]   # the graph's inputs
    held = {**params, **{f"arg{i}": a for i, a in enumerate(tensors) if a.requires_grad}}
    pairs = [(y, torch.from_numpy(c)) for y, c in zip(leaves, cotangents) if c is not None]
    grads = torch.autograd.grad([y for y, _ in pairs], list(held.values()),
                                [c for _, c in pairs], allow_unused=True)
    return leaves, dict(zip(held, grads))


def _relative(ours, theirs, floor=1e-300) -> float:
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.zeros(ours.shape) if theirs is None else theirs.detach().numpy()
    assert ours.shape == theirs.shape
    if ours.size == 0:
        return 0.0
    diff, scale = float(np.max(np.abs(ours - theirs))), max(float(np.max(np.abs(theirs))), floor)
    if diff == 0.0:
        return 0.0                      # both zero (a gradient that is zero everywhere) too
    # NaN anywhere, or a difference where torch's is zero: never within a tolerance.
    return diff / scale if diff == diff and scale > 0.0 else float("inf")


def worst_difference(model, args, kwargs=None) -> tuple:
    """(graph, {output or input name: normwise relative difference}) of the capture run in
    binary64 against torch's float64 run: forward outputs and every gradient."""
    g = routes.from_torch(model, args, kwargs)
    rng = np.random.default_rng(7)
    cots = [rng.standard_normal(p.shape) if p.kind == "value" else None for p in g.outputs]
    leaves, grads = _torch_float64(model, args, cots, kwargs)

    rule = g.rule(numerics.emulated("binary64"))
    assert rule is not None
    ys, pullback = rule.prepare(g.example_inputs, [p.differentiable for p in g.inputs])
    got = pullback(cots)

    assert len(ys) == len(leaves)
    worst = {f"output {n}": _relative(y, t) for n, y, t in zip(g.output_names, ys, leaves)}
    scale = FLOOR * max(float(t.abs().max()) for t in grads.values() if t is not None)
    for i, (name, port, ours) in enumerate(zip(g.input_names, g.inputs, got)):
        if not port.differentiable:
            continue
        theirs = grads[f"arg{i}"] if f"arg{i}" in grads and name not in grads \
            else grads[name]
        worst[name] = _relative(ours, theirs, scale)
    return g, worst

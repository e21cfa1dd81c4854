"""A recipe policy in a model run (``scaled_recipe``, ``fp8_recipe``: numerics.policy.RECIPES;
engine/model.py's docstring, "Recipes"): the products' operands quantized into the scaled
format, the products computed in binary32, every stored tensor in the recipe's storage
format (bfloat16).

The graph runs as an element-format model run of the storage format under the recipe's
policy (binary32 accumulation); each product node (routes' Op.product_operands: matmul,
linear, conv, contract, attention...) instead reads its operands through the quantizer -- its
value arguments with the forward scheme along their contraction axis (quantize.scale_axis), their
tangents likewise, the cotangents its pullback receives with the gradient scheme along
their last axis -- and computes in binary32 (GraphRule.trace's ``pre`` and ``override``);
its outputs, tangents and gradient contributions are stored back into the storage format
(rounded once, as a GEMM's epilogue converts its FP32 accumulator).  The exact run and the
local errors' exact values read the unquantized stored values, so a product's errors hold
the quantization of its operands."""

from __future__ import annotations

import zlib

import numpy as np

from roundoff_coverage import formats, numerics

from .quantize import BlockCounts, axis_text, quantize_port, scale_axis
from .measuring import recipe_unit
from .samples import ModelError
from .model_scaled import refuse
from .task import FP8_ELEMENTS, quantized_port, with_element


class RecipeRun:
    """A recipe (numerics.policy.Recipe) on a scaled format in a model run: ``storage`` the
    format of every stored tensor, ``fwd`` and ``grad`` the schemes of forward operands (and
    tangents) and of the cotangents the backward products read, ``compute`` the backend of
    the products, ``counts`` what every quantization did: {(run, sample, node, label):
    (axis text, BlockCounts)}, labels ``x``, ``tangent x``, ``cotangent y``.  ModelError for
    a scheme the recipe cannot take."""

    def __init__(self, scheme, config, seed):
        recipe = numerics.policy.recipe(config.policy)
        name = scheme.label
        refuse(scheme)
        if recipe.forward is not None and \
                getattr(scheme.element, "name", None) not in FP8_ELEMENTS:
            raise ModelError(f"policy {config.policy} ({recipe.doc}) needs a scheme with FP8 "
                             f"elements; {name} has {scheme.element.label} elements")
        self.label, self.seed = config.format, seed
        self.fwd = scheme if recipe.forward is None else with_element(scheme, recipe.forward)
        self.grad = scheme if recipe.gradient is None else \
            with_element(scheme, recipe.gradient)
        self.storage = formats.get(recipe.storage)
        c32 = formats.get(recipe.accumulate)
        self.compute = numerics.emulated(c32, config.mode,
                                         numerics.policy.preset(config.policy, c32), seed=seed)
        self.counts = {}

    def hooks(self, g, run, s, keep=(), wide=None, record=True) -> tuple:
        """The storage hooks (engine/storage.py) of sample ``s``: the products (but the kept
        nodes) compute in binary32 on quantized operands (``products``, ``pre``); the kept
        nodes compute in ``wide``."""
        override = dict.fromkeys(keep, wide) if keep else {}
        override.update(self.products(g, keep))
        return override, self.pre(g, run, s, keep, record), None

    def products(self, g, keep=()) -> dict:
        """GraphRule.trace's ``override``: {product node: the binary32 backend}, but the
        nodes in ``keep``."""
        return {k: self.compute for k, n in enumerate(g.nodes)
                if n.op.product_operands and k not in keep}

    def _operand(self, op, i) -> bool:
        return op.input_names[i] in op.product_operands and \
            quantized_port(op.inputs[i])

    def pre(self, g, run, s, keep=(), record=True):
        """GraphRule.trace's ``pre`` for sample ``s`` (the module docstring); counts kept
        under ``run`` when ``record``."""
        def pre(kind, k, i, v):
            op = g.nodes[k].op
            if not op.product_operands or k in keep:
                return v
            if kind == "cotangent":
                if not op.outputs[i].scalar:
                    return v
                scheme, axis, label = self.grad, -1, f"cotangent {op.output_names[i]}"
            elif self._operand(op, i):
                name = op.input_names[i]
                scheme, axis = self.fwd, scale_axis(op, name, op.inputs[i])
                label = name if kind == "argument" else f"tangent {name}"
            else:
                return v
            seed = zlib.crc32(repr((self.seed, self.label, run, s, k, label)).encode())
            deq, _, counts = quantize_port(np.asarray(v, dtype=np.float64), scheme, axis,
                                           seed)
            key = (run, s, k, label)
            # The forward-mode sweep reads the arguments again (the same quantization):
            # counted once.
            if record and not (kind == "argument" and key in self.counts):
                self.counts.setdefault(key, (axis_text(scheme, axis), BlockCounts()))[1].add(
                    counts)
            return formats.round_to(deq, self.compute.fmt)
        return pre

    def annotate(self, g, row, site, attribution, samples) -> None:
        """A product node's row: the scheme its operands took (the gradient scheme for the
        cotangent of a gradient row), and per quantized operand its axis and what the
        quantization did over the samples of the run that made the row."""
        if site.node < 0 or site.where == "cotangents" or \
                not g.nodes[site.node].op.product_operands:
            return                     # a node's output cotangent: its consumers' sum
        run = "emulated" if attribution == "propagated" else "local"

        def wanted(label):
            if label.startswith("cotangent "):
                return site.route == "gradient"
            return site.route == "tangent" or not label.startswith("tangent ")
        labels = {}
        for (r, s, k, label), (axis, c) in self.counts.items():
            if r == run and k == site.node and s in samples and wanted(label):
                labels.setdefault(label, (axis, BlockCounts()))[1].add(c)
        scheme = self.grad if site.route == "gradient" else self.fwd
        row.update(scheme=scheme.label,
                   error_unit=recipe_unit(self.storage, self.fwd, self.grad, site.route),
                   scaled_inputs={label: {"axis": axis} | c.fields()
                                  for label, (axis, c) in sorted(labels.items())},
                   scale_axis=", ".join(f"{label}:{axis}"
                                        for label, (axis, _) in sorted(labels.items())))

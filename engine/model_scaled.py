"""Scaled formats in a model run (engine/model.py's docstring, "Scaled formats"): the
quantizations at the graph's inputs and between its nodes, their block counts, and the
errors in ulps of the element format at the exact value's block scale."""

from __future__ import annotations

import zlib

import numpy as np

from roundoff_coverage import formats, numerics
from roundoff_coverage.numerics.metrics import clamp_exact
from roundoff_coverage.routes.graph import CONSTANT, INPUT, Ref

from .quantize import BlockCounts, axis_text, element_scales, quantize_port, scale_axis
from .measuring import measure_scaled_port, scaled_errors
from .samples import ModelError, is_float_port, tangent_directions
from .sites import B64, EXACT_SUM_PREC, PROPAGATED, node_reads, rounder_of
from .task import compute_format, quantized_port


def refuse(scheme) -> None:
    """ModelError for a scheme no model run takes: delayed scaling, dequantized values
    beyond binary64."""
    if scheme.amax == "delayed":
        raise ModelError(f"scaled format {scheme.label}: delayed scaling reads an amax history "
                         f"a model run does not keep (use {scheme.name}, current scaling)")
    if not scheme.products_fit_binary64:
        raise ModelError(f"scaled format {scheme.label}: its dequantized values do not all "
                         f"fit binary64")


class Scaled:
    """A scaled format in a model run (the module docstring): ``fwd`` and ``grad`` the
    schemes of forward values (and tangents) and of gradients (both the scheme: a recipe
    policy is engine/model_recipe.py's), ``compute`` binary32 (task.compute_format), and
    ``counts`` the BlockCounts of every quantization: {(run, sample, kind, node or input,
    index): BlockCounts}, run ``inputs`` (kinds ``input``, ``constant``; constants under
    sample None), ``emulated`` or ``local`` (kinds ``value``, ``contribution``,
    ``tangent``).  ModelError for a scheme a model run cannot take."""

    def __init__(self, scheme, config, seed):
        refuse(scheme)
        self.label, self.seed = config.format, seed
        self.fwd = self.grad = scheme
        self.compute = compute_format(config.policy)
        self.counts, self.axes, self.consumers = {}, {}, {}

    def scheme(self, route):
        return self.grad if route == "gradient" else self.fwd

    def _quantize(self, x, scheme, axis, key):
        """(``x`` quantized into ``scheme`` along ``axis``, dequantized and rounded to
        binary32; its BlockCounts); stochastic element rounding seeded by the run's seed,
        the format and ``key``."""
        seed = zlib.crc32(repr((self.seed, self.label) + tuple(key)).encode())
        deq, _, c = quantize_port(np.asarray(x, dtype=np.float64), scheme, axis, seed)
        return formats.round_to(deq, self.compute), c

    def _exact(self, v, scheme):
        """An exact value (mpmath) quantized into ``scheme`` along its last axis (the exact
        quantizer), dequantized and rounded to binary32."""
        a = clamp_exact(np.asarray(v, dtype=object), B64)
        _, q, _ = quantize_port(a, scheme, -1, 0, exact=True)
        deq = np.asarray(q.dequantize(), dtype=np.float64).reshape(np.shape(a))
        return formats.round_to(deq, self.compute)

    # ----- the inputs -------------------------------------------------------------------
    def _axis(self, g, ref, port):
        """The block axis of a graph input or constant: its natural axis in the first
        product that reads it (quantize.scale_axis), else the last axis (None at rank 0)."""
        for m, a in self.consumers.get(ref, ()):
            node = g.nodes[m]
            if node.op.product_operands:
                return scale_axis(node.op, node.op.input_names[a], node.op.inputs[a])
        return -1 if len(port.shape) else None

    def prepare(self, graph, samples, tangents=True):
        """(the graph with its constants, the samples' inputs, and per sample (cotangents,
        tangents) as the module docstring has them; ``tangents`` False: no tangents, as
        samples.prepared)."""
        import copy
        g = copy.copy(graph)
        for m, node in enumerate(graph.nodes):
            for a, r in enumerate(node.args):
                self.consumers.setdefault(r, []).append((m, a))
        c32 = self.compute

        def stored(x, port, ref, key):
            if not is_float_port(port) and not quantized_port(port):
                return x
            x = formats.round_to(np.asarray(x, dtype=np.float64), c32)
            if not quantized_port(port):
                return x
            self.axes[ref] = self._axis(graph, ref, port)
            q, counts = self._quantize(x, self.fwd, self.axes[ref], key)
            self.counts[key] = counts
            return q
        g.constants = [stored(c, p, Ref(CONSTANT, i), ("inputs", None, "constant", i, 0))
                       for i, (c, p) in enumerate(zip(graph.constants,
                                                      graph.constant_ports))]
        xs = [[stored(x, p, Ref(INPUT, i), ("inputs", s, "input", i, 0))
               for i, (x, p) in enumerate(zip(sample, g.inputs))]
              for s, sample in enumerate(samples)]
        dirs = []
        for s, x in enumerate(xs):
            cots, tans = tangent_directions(g, c32, x, self.seed, s, tangents)
            cots = [None if c is None else self._quantize(c, self.grad, -1,
                                                          ("cotangent", s, j))[0]
                    for j, c in enumerate(cots)]
            tans = [None if t is None else self._quantize(t, self.fwd,
                                                          self.axes.get(Ref(INPUT, i), -1),
                                                          ("tangent", s, i))[0]
                    for i, t in enumerate(tans)]
            dirs.append((cots, tans))
        return g, xs, dirs

    def input_fields(self, g) -> dict:
        """{input or constant name: {axis, blocks, clipped, zero_blocks, nan_blocks,
        scale_exponents}} of the quantized inputs (over the samples) and constants."""
        out = {}
        for ref, axis in self.axes.items():
            total = BlockCounts()
            kind = "input" if ref.node == INPUT else "constant"
            for (run, _, k, i, _), c in self.counts.items():
                if run == "inputs" and k == kind and i == ref.index:
                    total.add(c)
            name = g.input_names[ref.index] if ref.node == INPUT else \
                (g.constant_names[ref.index] or f"constant{ref.index}")
            out[name] = {"axis": axis_text(self.fwd, axis)} | total.fields()
        return out

    # ----- the runs ---------------------------------------------------------------------
    def hooks(self, g, run, s, keep=(), wide=None, record=True) -> tuple:
        """The storage hooks (engine/storage.py) of sample ``s``: every node computes in
        binary32 (the run's backend, kept nodes too) and stores through ``hook``."""
        return None, None, self.hook(g, run, s, keep, record)

    def hook(self, g, run, s, keep=(), record=True):
        """GraphRule.trace's ``post`` for sample ``s``: node outputs and output tangents
        quantized with the forward scheme, contributions with the gradient scheme, along the
        last axis (counted under ``run`` when ``record``); the nodes in ``keep`` and
        non-scalar ports (indices, Booleans) unchanged."""
        def post(kind, k, j, v):
            op = g.nodes[k].op
            port = (op.inputs if kind == "contribution" else op.outputs)[j]
            if k in keep or not port.scalar:
                return v
            key = (run, s, kind, k, j)
            q, counts = self._quantize(v, self.grad if kind == "contribution" else self.fwd,
                                       -1, key)
            if record:
                self.counts[key] = counts
            return q
        return post

    def reads(self, g, tr, cots, want_grad, want_tan, only=None) -> list:
        """What each node reads in the exact trace ``tr`` as the emulated run stores it
        (sites.node_reads; the module docstring): ``cots`` the outputs' cotangents;
        ``only``: the nodes to read for (None for the others; all by default)."""
        rnd, memo = rounder_of(self.compute), {}

        def stored(r, v, kind):
            if v is None or r.node < 0 or not g.port(r).scalar:
                return rnd(v)                # graph inputs and constants: already stored
            if (kind, r) not in memo:
                memo[(kind, r)] = self._exact(v, self.fwd)
            return memo[(kind, r)]
        return node_reads(g, tr, want_grad, want_tan, stored,
                          lambda ref: self._cotangent(g, tr, ref, cots), only)

    def _cotangent(self, g, tr, ref, cots):
        """The cotangent of ``ref`` as the reverse sweep holds it, from exact values: each
        consumer's contribution quantized with the gradient scheme, plus the cotangent of
        each graph output that is ``ref``, summed exactly and rounded once to binary32."""
        if ref not in tr.cotangents:
            return None
        parts = [self._exact(tr.contributions[key], self.grad)
                 for key in self.consumers.get(ref, ()) if key in tr.contributions]
        parts += [np.asarray(c, dtype=np.float64) for c, r, p in
                  zip(cots, g.output_refs, g.outputs)
                  if r == ref and c is not None and p.differentiable]
        if len(parts) == 1:
            return parts[0]
        ref_ = numerics.reference(EXACT_SUM_PREC)
        total = ref_.asarray(parts[0])
        for part in parts[1:]:
            total = ref_.add(total, ref_.asarray(part))
        return ref_.cast(total, self.compute)

    # ----- the rows ---------------------------------------------------------------------
    def measure(self, g, row, site, attribution, comp, exact, exacts, samples, keep=None):
        """Fill a row of ``site`` from its computed values ``comp`` and exact values
        ``exact`` (flat, over the samples), ``exacts`` the exact tensors of those
        ``samples``: ulps at the exact values' block scales (measure_scaled_port), the
        scheme, the axes and the block counts.  ``keep``: a mask of the elements measured
        (the blocks are those of every element).  Returns the ulp errors (of ``keep``)."""
        scheme = self.scheme(site.route)
        scales = np.concatenate([
            element_scales(quantize_port(clamp_exact(np.asarray(e, dtype=object), B64),
                                         scheme, -1, 0, exact=True)[1]).reshape(-1)
            for e in exacts])
        if keep is not None:
            comp, exact, scales = comp[keep], exact[keep], scales[keep]
        ulp = measure_scaled_port(row, comp, exact, scales, scheme, self.compute)
        row.update(scheme=scheme.label, scale_axis=self._axes_text(g, site))
        total = None
        run = "emulated" if attribution == PROPAGATED else "local"
        for s in samples:
            for key in self._keys(g, site):
                c = self.counts.get((run, s) + key)
                if c is not None:
                    total = total or BlockCounts()
                    total.add(c)
        if total is not None:
            row.update(total.fields())
        return ulp

    def _keys(self, g, site) -> list:
        """The (kind, node, index) of the quantizations that made a site's values."""
        if site.where == "contributions":
            return [("contribution",) + site.ref]
        if site.where == "cotangents":
            return [("contribution", m, a) for m, a in self.consumers.get(site.ref, ())]
        if site.ref.node < 0:
            return []
        return [("value" if site.where == "values" else "tangent",
                 site.ref.node, site.ref.index)]

    def _axes_text(self, g, site) -> str:
        """``x:-1, weight:-1; y:-1``: the block axes of a node's quantized arguments, then
        of the measured port."""
        own = f"{site.port}:{axis_text(self.scheme(site.route), -1)}"
        if site.node < 0:
            return own
        node = g.nodes[site.node]
        parts = [f"{name}:{axis_text(self.fwd, -1 if r.node >= 0 else self.axes[r])}"
                 for name, r in zip(node.op.input_names, node.args)
                 if (r.node >= 0 and g.port(r).scalar) or r in self.axes]
        return f"{', '.join(parts)}; {own}" if parts else own

    def ulps64(self, comp, exact64, shape, route):
        """|errors| of ``comp`` against binary64 exact values (flat, of ``shape``) in ulps at
        their block scales (the summary's figure)."""
        scheme = self.scheme(route)
        _, q, _ = quantize_port(exact64.reshape(shape), scheme, -1, 0)
        return scaled_errors(comp, exact64, element_scales(q).reshape(-1),
                             scheme.element_grid, scheme.emax_elem)[0]

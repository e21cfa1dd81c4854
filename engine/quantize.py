"""Scaled formats on the measured tensors: the natural axis a port is blocked along
(``scale_axis``), one tensor quantized with what happened to its blocks (``quantize_port``,
``BlockCounts``, ``element_scales``), and a coverage task's draws quantized
(``quantize_draws``).

Scaled formats (a task with a ``scheme`` whose ``task.scaling`` is not None): the draws are
made in the task's format (the compute format; a recipe's storage format), one tensor per
draw (never batched: a block or a tensor scale must not span two draws), then
``quantize_draws`` replaces every quantized input (task.quantized_port; under a recipe the
operands of the product only, routes' Op.product_operands), tangent and cotangent by its
dequantized value in the scheme (formats.quantize, then ``dequantize``: exact products), the
blocks running along the port's natural axis (``scale_axis``).  A model run's scaled and
recipe storage (engine/model_scaled.py, engine/model_recipe.py) quantize its tensors with
``quantize_port`` too.
"""

from __future__ import annotations

import zlib

import numpy as np

from roundoff_coverage import formats

from .samples import Draws
from .task import Task, compute_task, quantized_port, route_scheme, scaling

# The natural axis of an input port, along which a scaled format's blocks run: the axis a
# product contracts (its declaration's ``products``, routes' Op.product_operands), so that
# each block scale multiplies out of one partial dot product (the layout of MX GEMMs: A's
# blocks along its rows, B's along its columns, OCP MX v1.0 sec. 6.3; TransformerEngine
# quantizes both GEMM operands along the reduction dimension), and the last axis otherwise.
# Two-dimensional blocks (fp8_e4m3_block128x128) tile the last two axes of every port; a
# per-tensor scheme has no axis.  Outputs, tangents of outputs and cotangents: the last axis.
def scale_axis(o, name: str, port) -> int | None:
    """The natural axis of input ``name`` of ``o`` (its contraction axis where it is an
    operand of a product, else -1), counted from the end and within the port's rank; None
    for a rank-0 port."""
    if len(port.shape) == 0:
        return None
    return o.product_operands.get(name, -1)


def _blocking(a, scheme, axis):
    """(the array as quantize takes it, its block axes): a rank-0 tensor as one element of
    rank 1, a rank-1 tensor as one row of rank 2 for two-dimensional blocks; 1-D blocks
    along ``axis``, 2-D ones over the last two axes, None for a per-tensor scheme."""
    if scheme.block is None:
        return a.reshape(-1) if a.ndim == 0 else a, None
    if len(scheme.block) == 2:
        v = a.reshape((1,) * (2 - a.ndim) + a.shape) if a.ndim < 2 else a
        return v, (v.ndim - 2, v.ndim - 1)
    v = a.reshape(1) if a.ndim == 0 else a
    return v, ((axis if axis is not None else -1) % v.ndim,)


def axis_text(scheme, axis) -> str:
    """How a port was blocked, for the rows: ``-1`` (an axis from the end), ``-2,-1`` (the
    last two axes: 2-D blocks) or ``tensor`` (a per-tensor scheme)."""
    if scheme.block is None:
        return "tensor"
    if len(scheme.block) == 2:
        return "-2,-1"
    return str(-1 if axis is None else axis)


class BlockCounts:
    """What quantizing tensors did to their blocks: ``blocks``; ``clipped`` elements (|x| /
    scale beyond the element range: saturated to the element max, or overflowed under
    ``nosat``); ``zero_blocks`` (a nonzero block all of whose elements became zero);
    ``nan_blocks`` (a NaN scale: an Inf or NaN in the block, or a scale past the scale
    format); ``exponents`` {floor(log2 D): blocks} of the finite scales D = block scale (x
    tensor scale): the spread of the scales."""

    def __init__(self):
        self.blocks = self.clipped = self.zero_blocks = self.nan_blocks = 0
        self.exponents = {}

    def add(self, other: "BlockCounts") -> None:
        self.blocks += other.blocks
        self.clipped += other.clipped
        self.zero_blocks += other.zero_blocks
        self.nan_blocks += other.nan_blocks
        for k, n in other.exponents.items():
            self.exponents[k] = self.exponents.get(k, 0) + n

    def histogram(self) -> list:
        """[[exponent, blocks], ...] by increasing exponent (the rows' scale_exponents)."""
        return [[int(k), int(n)] for k, n in sorted(self.exponents.items())]

    def fields(self) -> dict:
        return {"blocks": self.blocks, "clipped": self.clipped,
                "zero_blocks": self.zero_blocks, "nan_blocks": self.nan_blocks,
                "scale_exponents": self.histogram()}


def element_scales(q) -> np.ndarray:
    """The scale D of every element of a Quantized ``q`` (block scale x tensor scale),
    float64, the elements' shape; NaN in NaN blocks.  D is exact: a product of a block
    scale and a binary32 tensor scale fits binary64 (products_fit_binary64)."""
    s = np.asarray(q.scales, dtype=np.float64)
    shape = q.elements.shape
    if q.axis is None:
        full = np.broadcast_to(s.reshape(()) if s.size == 1 else s, shape)
    else:
        full = s
        for ax, k in zip(q.axis, q.scheme.block):
            full = np.repeat(full, k, axis=ax).take(np.arange(shape[ax]), axis=ax)
    if q.tensor_scale is not None:
        full = full * q.tensor_scale
    return np.array(full, dtype=np.float64)


def _block_ids(q) -> np.ndarray:
    """The block number of every element of ``q`` (the elements' shape)."""
    ids = np.arange(np.asarray(q.scales).size, dtype=np.float64).reshape(np.shape(q.scales))
    if q.axis is None:
        return np.zeros(q.elements.shape, dtype=np.int64)
    for ax, k in zip(q.axis, q.scheme.block):
        ids = np.repeat(ids, k, axis=ax).take(np.arange(q.elements.shape[ax]), axis=ax)
    return ids.astype(np.int64)


def counts_of(x, q, deq) -> BlockCounts:
    """BlockCounts of one quantization: ``x`` the tensor quantized (float64, q's shape),
    ``q`` the Quantized, ``deq`` its dequantized values."""
    c = BlockCounts()
    scheme = q.scheme
    scales = np.asarray(q.scales, dtype=np.float64).reshape(-1)
    c.blocks = int(scales.size)
    d = scales * (1.0 if q.tensor_scale is None else q.tensor_scale)
    good = np.isfinite(d) & (d > 0)
    c.nan_blocks = int((~good).sum())
    if good.any():
        ks, ns = np.unique(np.frexp(d[good])[1] - 1, return_counts=True)
        c.exponents = {int(k): int(n) for k, n in zip(ks, ns)}
    x, deq = x.reshape(-1), np.asarray(deq, dtype=np.float64).reshape(-1)
    e = np.asarray(q.elements, dtype=np.float64).reshape(-1)
    top = float(scheme.element_max_exact)
    low = float(getattr(scheme.element, "min_value_exact", -scheme.element_max_exact))
    ids = _block_ids(q).reshape(-1)
    fine = good[ids] & np.isfinite(x)
    # Beyond the element range: saturated at the max (|x| > |max * D|), or overflowed into
    # an element that is not finite (nosat).
    c.clipped = int((fine & (((e == top) & (x > deq)) | ((e == low) & (x < deq))
                             | ~np.isfinite(e))).sum())
    nonzero = np.bincount(ids, weights=(x != 0) & ~np.isnan(x), minlength=c.blocks) > 0
    kept = np.bincount(ids, weights=deq != 0, minlength=c.blocks) > 0
    c.zero_blocks = int((nonzero & ~kept & good).sum())
    return c


def quantize_port(x, scheme, axis, seed: int, exact: bool = False):
    """(dequantized values of ``x``'s shape, the Quantized, BlockCounts) of the tensor
    ``x`` quantized into ``scheme`` along ``axis`` (scale_axis; _blocking); float64 values
    through the compiled path, or with ``exact`` the exact one (mpmath values: an exact
    result's own block scales)."""
    a = np.asarray(x, dtype=object if exact else np.float64)
    view, axes = _blocking(a, scheme, axis)
    q = formats.quantize(view, scheme, axis=axes if axes is not None else -1, seed=seed,
                         path="exact" if exact else "auto")
    if exact:
        return None, q, None
    deq = np.asarray(q.dequantize(), dtype=np.float64)
    return deq.reshape(a.shape), q, counts_of(view, q, deq)


def quantize_seed(task, *parts) -> int:
    """Stochastic rounding's seed for one quantized tensor: from the run's seed, the
    operator, attributes and format (not the mode, policy or implementation, as the draws)."""
    return zlib.crc32(repr((task.seed, task.op, task.attrs, task.format) + parts).encode())


class Quantized:
    """What ``quantize_draws`` did: per route, the BlockCounts of every quantized input
    (``inputs[route]``: {label: (axis text, BlockCounts)}, labels ``x``, ``tangent x``,
    ``cotangent y``)."""

    def __init__(self):
        self.inputs = {}

    def record(self, route, label, axis, counts):
        have = self.inputs.setdefault(route, {})
        if label in have:
            have[label][1].add(counts)
        else:
            total = BlockCounts()
            total.add(counts)
            have[label] = (axis, total)

    def fields(self, route) -> dict:
        """The rows' ``scaled_inputs`` of ``route``: {label: {axis, blocks, clipped,
        zero_blocks, nan_blocks, scale_exponents}}."""
        return {label: {"axis": axis} | counts.fields()
                for label, (axis, counts) in self.inputs.get(route, {}).items()}

    def axes(self, route) -> str:
        """The block axes of the route's quantized inputs: ``x:-1, y:-2``."""
        return ", ".join(f"{label}:{axis}" for label, (axis, _) in
                         self.inputs.get(route, {}).items())


def quantize_draws(task: Task, d: Draws, routes_wanted) -> tuple:
    """(the draws with every quantized input, tangent and cotangent replaced by its
    dequantized value in the route's scheme (task.route_scheme) read into the compute
    format, a ``Quantized``).  Inputs and tangents take the forward scheme, cotangents the
    gradient route's.

    Read into the compute format: the dequantized value element * scale (* tensor scale)
    rounded once to nearest even into binary32 (task.compute_format: binary64 under the
    policy compute:binary64), as a kernel that dequantizes into FP32 reads it.  Exact for
    the MX schemes (a 4-bit element times a power of two is a binary32 number); within
    2**-24 relative for binary32 scales (FP8 per-tensor and blockwise, NVFP4's tensor
    scale), whose products can carry up to 30 significant bits (exact in binary64).  Under
    ``storage`` scaling the rule and the reference both read these values, so the error of
    a route is its own and the output quantization's; under a recipe (``operands``) only
    the rule reads them and the reference reads the draws as they were, so the error holds
    the quantization of the operands (engine/evaluate.py)."""
    o = d.op
    operands = o.product_operands if scaling(task) == "operands" else None
    compute = compute_task(task).fmt if operands else task.fmt

    def quantized(x, scheme, axis, *seed):
        deq, _, counts = quantize_port(x, scheme, axis, quantize_seed(task, *seed))
        return formats.round_to(deq, compute), counts
    fwd, grad = route_scheme(task, "forward"), route_scheme(task, "gradient")
    out = d.subset(range(len(d.inputs)))
    got = Quantized()
    ins = [(i, n, p, scale_axis(o, n, p)) for i, (n, p) in
           enumerate(zip(o.input_names, o.inputs))
           if quantized_port(p) and (operands is None or n in operands)]
    outs = [(i, n, p) for i, (n, p) in enumerate(zip(o.output_names, o.outputs))
            if p.differentiable]
    for k in range(len(out.inputs)):
        xs, ts, cs = list(out.inputs[k]), list(out.tangents[k]), list(out.cotangents[k])
        for i, name, port, axis in ins:
            xs[i], counts = quantized(xs[i], fwd, axis, "x", name, k)
            for r in routes_wanted:
                got.record(r, name, axis_text(fwd, axis), counts)
            if "tangent" in routes_wanted and ts[i] is not None:
                ts[i], counts = quantized(ts[i], fwd, axis, "t", name, k)
                got.record("tangent", f"tangent {name}", axis_text(fwd, axis), counts)
        if "gradient" in routes_wanted:
            for i, name, port in outs:
                if cs[i] is not None:
                    cs[i], counts = quantized(cs[i], grad, -1, "c", name, k)
                    got.record("gradient", f"cotangent {name}", axis_text(grad, -1), counts)
        out.inputs[k], out.tangents[k], out.cotangents[k] = tuple(xs), tuple(ts), tuple(cs)
    return out, got

"""The sample inputs of a task and its routes evaluated on them.

``draw(task, o, fmt) -> Draws``: the declaration's samplers, one RNG per sample kind seeded
from (seed, operator, attributes, format, kind) -- not from the mode, policy or
implementation, so those compare on the same points -- ``draws`` draws per kind, already
rounded into the format at scalar ports (routes/samples.py).  Elementwise instances draw once
per kind at ``draws`` times their size (same distribution, one evaluation).  Exhaustive
tasks (the first example of an operator; runner.plan) feed every finite value of the format
to the one value input instead.  Tangents and cotangents: standard normal values rounded
once (nearest even) into the format, from RNGs of their own.

``run_routes(rule, draws, wanted)``: every draw's forward values, output tangents and input
gradients under a rule (Rule.routes), with the IEEE flags each route raised.

Scaled formats (a task with a ``scheme`` whose ``task.scaling`` is not None): the draws are
made in the task's format (the compute format; a recipe's storage format), one tensor per
draw (never batched: a block or a tensor scale must not span two draws), then
``quantize_draws`` replaces every quantized input (task.quantized_port; under a recipe the
operands of the product only, routes' Op.product_operands), tangent and cotangent by its
dequantized value in the scheme (formats.quantize, then ``dequantize``: exact products), the
blocks running along the port's natural axis (``scale_axis``); ``quantize_port`` quantizes one
tensor and counts what happened to its blocks (``BlockCounts``).
"""

from __future__ import annotations

import zlib

import numpy as np

from roundoff_coverage import formats, routes

from .task import (Task, batchable, compute_task, exhaustible, quantized_port, rng_for,
                   route_scheme, scaling)

class Draws:
    """The sample inputs of a task: ``inputs`` (one tuple per draw), ``kinds`` (the sample
    kind of each draw), ``tangents``/``cotangents`` per draw, ``elementwise`` (one element of
    an input at position i goes with element i of the outputs)."""

    def __init__(self, o, inputs, kinds, elementwise, fmt, task):
        self.op, self.inputs, self.kinds, self.elementwise = o, inputs, kinds, elementwise
        trng, crng = (rng_for(task.seed, task.op, task.attrs, task.format, r)
                      for r in ("tangent", "gradient"))
        self.tangents = [_linear(trng, o.inputs, fmt) for _ in inputs]
        self.cotangents = [_linear(crng, o.outputs, fmt) for _ in inputs]


def _subset(self, keep):
    """The same draws restricted to the indices ``keep`` (the reference's precision loop)."""
    sub = object.__new__(Draws)
    sub.op, sub.elementwise = self.op, self.elementwise
    sub.inputs = [self.inputs[k] for k in keep]
    sub.kinds = [self.kinds[k] for k in keep]
    sub.tangents = [self.tangents[k] for k in keep]
    sub.cotangents = [self.cotangents[k] for k in keep]
    return sub


Draws.subset = _subset


def _linear(rng, ports, fmt):
    """Standard normal values rounded once into ``fmt`` at value ports, None elsewhere."""
    out = []
    for p in ports:
        if not p.differentiable:
            out.append(None)
            continue
        x = rng.standard_normal(p.shape)
        out.append(np.asarray(formats.round_to(x, fmt) if fmt.fits_binary64 else x))
    return tuple(out)


def draw(task: Task, o, fmt) -> Draws:
    """The task's sample inputs (see the module docstring)."""
    if task.exhaustive and exhaustible(o, fmt):
        values = formats.values(fmt)
        big = o.replace(shape=(values.size,))
        base = big.samples(rng_for(task.seed, task.op, task.attrs, task.format, "ordinary"),
                           fmt.name, "ordinary")
        xs = tuple(values if p.differentiable else x for x, p in zip(base, big.inputs))
        return Draws(big, [xs], ["exhaustive"], True, fmt, task)
    kinds = [k for k in sample_kinds(o) if not task.kinds or k in task.kinds] or ["ordinary"]
    size = int(np.prod(o.attrs["shape"], dtype=np.int64)) if "shape" in o.attrs else 0
    if batchable(o) and size > 0 and task.draws > 1 and scaling(task) is None:
        big = o.replace(shape=(size * task.draws,))
        inputs = [big.samples(rng_for(task.seed, task.op, task.attrs, task.format, k),
                              _fmt_name(fmt), k) for k in kinds]
        return Draws(big, inputs, kinds, True, fmt, task)
    inputs, labels = [], []
    for k in kinds:
        rng = rng_for(task.seed, task.op, task.attrs, task.format, k)
        for _ in range(task.draws):
            inputs.append(o.samples(rng, _fmt_name(fmt), k))
            labels.append(k)
    return Draws(o, inputs, labels, batchable(o), fmt, task)


def sample_kinds(o) -> list:
    """The sample kinds a task of ``o`` draws: the declared ones, then the derived
    ``magnitudes`` (log-uniform across the format's range) where ``o`` has value inputs."""
    reg = routes.registry
    derived = "ordinary" in o.decl.samples and any(p.differentiable for p in o.inputs)
    return [k for k in reg.SAMPLE_KINDS
            if k in o.decl.samples or (derived and k in reg.DERIVED_KINDS)]


def _fmt_name(fmt):
    return fmt if fmt.name not in formats.CATALOG else fmt.name


# ----- evaluating routes -----------------------------------------------------------------------

def run_routes(rule, d: Draws, wanted, flags=None) -> dict:
    """{route: [per-draw outputs] or Exception}: forward values, output tangents, input
    gradients (each a tuple per port) of every draw under ``rule``: Rule.routes, one forward
    evaluation per draw for the three routes.

    ``flags``, a dict, receives {route: IEEE flags raised} when the backend keeps sticky
    flags (``track_flags``): the OR over every draw of the flags of the route's whole
    evaluation -- the forward pass's for every route, plus the pullback's or the tangent
    map's own (IEEE 754-2019 7.1 status flags, cleared before each draw)."""
    out = {r: [] for r in wanted}
    xp = rule.xp
    sticky = flags is not None and hasattr(xp, "track_flags")
    if sticky:
        xp.track_flags()
        flags.update(dict.fromkeys(wanted, 0))
    for xs, ts, cs in zip(d.inputs, d.tangents, d.cotangents):
        todo = [r for r in wanted if not isinstance(out[r], Exception)]
        seen = _Flags(xp, flags) if sticky else None
        try:
            got = rule.routes(xs, todo, ts, cs, before=seen.before if sticky else None)
        except Exception as exc:                          # noqa: BLE001 (the forward pass)
            return {r: exc for r in wanted}
        finally:
            if sticky:
                seen.done()
        for r in todo:
            if isinstance(got[r], Exception):
                out[r] = got[r]
            else:
                out[r].append(got[r])
    return out


class _Flags:
    """Per route of one draw, the sticky flags of the forward pass and of the route's own
    evaluation (Rule.routes calls ``before`` between them)."""

    def __init__(self, xp, flags):
        self.xp, self.flags, self.base, self.route = xp, flags, None, None

    def _collect(self):
        if self.base is None:
            self.base = self.xp.raised()                     # the forward pass's
        elif self.route is not None:
            self.flags[self.route] |= self.base | self.xp.raised()

    def before(self, route):
        self._collect()
        self.xp.clear_flags()
        self.route = route

    def done(self):
        self._collect()
        self.xp.clear_flags()


# ----- scaled formats: quantizing the draws ----------------------------------------------------

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

"""A task of the coverage run: what is measured and the frame of its rows.

``Task`` is one operator instance under one format, mode, policy and implementation with
the routes asked for; ``route_ports`` the ports a route measures; ``base_row`` and
``status_rows`` the rows before (or instead of) measurement; ``batchable`` and
``exhaustible`` which sampling an operator gets (engine/samples.py).

A task whose format is a scaled format (``mxfp8_e4m3``, ``nvfp4``...) carries it as
``scheme``; ``scaling`` says how its tensors take it.  Under an ordinary policy the task
computes in ``COMPUTE_FORMAT`` (its ``fmt``) and the scheme is the storage format of the
tensors at the operator's ports (engine/quantize.py quantizes the inputs, engine/evaluate.py
the outputs).  Under a recipe policy (numerics.policy.RECIPES) the task's ``fmt`` is the
recipe's storage format (bfloat16): a product (an operator whose declaration names its
operands, routes' ``Op.product_operands``) quantizes its operands, computes
in the recipe's accumulation format (``compute_task``) and stores its outputs in ``fmt``; any other operator is
an element task of ``fmt``.  ``route_scheme`` says which scheme a route's values take (a
recipe may put gradients in another), and ``scaled_problem`` why a task cannot be measured
that way.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field

import numpy as np

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.numerics import tensor_cores

from . import implementations
from .rows import empty as empty_row

ROUTES = ("forward", "tangent", "gradient")
# Families whose operators act element by element on ports of one shape (draws batch).
BATCH_FAMILIES = ("elementwise", "transcendental", "rounding", "extrema", "activation", "logic")
# Families whose one-value-input operators are enumerated exhaustively in small formats.
EXHAUSTIVE_FAMILIES = ("elementwise", "transcendental", "rounding", "activation")
EXHAUSTIVE_MAX_BITS = 16
# The format a scaled task computes in: the rule runs in binary32 on the dequantized inputs
# (as MX, NVFP4 and FP8 GEMMs accumulate in FP32), with the policy's order and FMA; the
# policy compute:FORMAT chooses another (compute_format).
COMPUTE_FORMAT = "binary32"
FP8_ELEMENTS = ("float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class Task:
    """One operator instance under one format, mode, policy and implementation; ``routes``
    the route kinds to measure; ``draws`` sampler draws per sample kind.

    ``format`` and ``policy`` are the rows' labels; ``fmt`` (the BinaryFormat) and
    ``accumulation`` (the numerics Policy; None where the implementation follows its
    library's own order, as native numpy does) are resolved from them once, where the task
    is made (planning), and travel with it to the workers.  For a scaled format, ``scheme``
    (the ScaledFormat; given by the planner for a user-defined one) and ``fmt`` the compute
    format, COMPUTE_FORMAT."""

    op: str
    instance: str
    attrs: tuple                  # ((name, value), ...) in declaration order
    format: str
    mode: str
    policy: str
    implementation: str
    routes: tuple
    draws: int
    seed: int
    exhaustive: bool = False
    kinds: tuple = ()             # sample kinds drawn (empty: every kind, evaluate.sample_kinds)
    fmt: formats.BinaryFormat = field(default=None, compare=False, repr=False)
    accumulation: numerics.Policy | None = field(default=None, compare=False, repr=False)
    scheme: formats.ScaledFormat | None = field(default=None, compare=False, repr=False)
    # Add the domain bound of the forward rows over the ordinary draws' box (evaluate.py);
    # not part of the key: it adds fields, it changes no measured number.
    domain_bounds: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self):
        if self.fmt is None:
            fmt = formats.get(self.format) if self.scheme is None else self.scheme
            if isinstance(fmt, formats.ScaledFormat):
                object.__setattr__(self, "scheme", fmt)
                recipe = numerics.policy.recipe(self.policy)
                fmt = formats.get(recipe.storage) if recipe else compute_format(self.policy)
            object.__setattr__(self, "fmt", fmt)
        if self.accumulation is None and numerics.policy.is_name(self.policy):
            object.__setattr__(self, "accumulation",
                               numerics.policy.preset(self.policy, self.fmt))

    @property
    def key(self) -> str:
        """The task's identity in checkpoints (the routes are part of the run's fingerprint)."""
        return "|".join((self.op, attrs_text(self.attrs), self.format, self.mode, self.policy,
                         self.implementation, "exhaustive" if self.exhaustive else "sampled"))

    def build(self):
        return routes.op(self.op, **dict(self.attrs))


def attrs_text(attrs) -> str:
    """Attributes ((name, value) pairs) as one text, the wire codec's (routes.attributes_text:
    ``axes=[1],shape=[2,3]``)."""
    return routes.attributes_text({k: jsonable(v) for k, v in attrs})


def jsonable(v):
    """An attribute value as JSON data (tuples become lists)."""
    if isinstance(v, tuple):
        return [jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def rng_for(seed: int, *parts) -> np.random.Generator:
    """A generator seeded from ``seed`` and a CRC-32 of ``parts``: the same stream in any
    process, whatever order tasks run in."""
    return np.random.default_rng([seed, zlib.crc32(repr(parts).encode())])

# ----- which evaluation a task gets ------------------------------------------------------------

def batchable(o) -> bool:
    """Whether draws of ``o`` can be made as one draw of a longer vector: an elementwise
    family, a ``shape`` attribute, every port of that shape or rank 0."""
    if o.family not in BATCH_FAMILIES or "shape" not in o.attrs:
        return False
    shape = tuple(o.attrs["shape"])
    ports = o.inputs + o.outputs
    return all(p.shape in (shape, ()) for p in ports) and any(p.shape == shape for p in ports)


def exhaustible(o, fmt) -> bool:
    """Whether ``--exhaustive`` enumerates ``o`` in ``fmt``: one value input, an elementwise
    family, a ``shape`` attribute, a format of at most 16 bits."""
    values = [p for p in o.inputs if p.differentiable]
    return (o.family in EXHAUSTIVE_FAMILIES and len(values) == 1 and "shape" in o.attrs
            and batchable(o) and formats.get(fmt).bits <= EXHAUSTIVE_MAX_BITS)


# ----- scaled formats -------------------------------------------------------------------------

def scaling(task) -> str | None:
    """How a task's tensors take its scaled format: ``storage`` (no recipe policy: the
    scheme is the storage format at every port, the rule computes in compute_format),
    ``operands`` (a recipe policy on a product, is_product: its operands quantized, the rule
    computing in the recipe's accumulation format, its outputs stored in the recipe's
    storage format, the task's ``fmt``), None (an element format, or a recipe on any other operator: the recipe
    leaves it in its storage format, an element task of ``fmt``)."""
    if task.scheme is None:
        return None
    if numerics.policy.recipe(task.policy) is None:
        return "storage"
    return "operands" if is_product(task.op) else None


def is_product(name: str) -> bool:
    """Whether operator ``name`` is a product: its declaration names the operands a recipe
    policy (numerics.policy.RECIPES) quantizes (routes' ``products``; a bias, added after
    the product as a GEMM's epilogue adds it, is none, nor attention's probabilities)."""
    return bool(routes.declaration(name).products)


def compute_format(policy: str) -> formats.BinaryFormat:
    """The format a scaled format's values are read into and computed in under ``policy``:
    FORMAT under ``compute:FORMAT`` (binary64 reads every dequantized value exactly), else
    COMPUTE_FORMAT."""
    return formats.get(numerics.policy.compute_format(policy) or COMPUTE_FORMAT)


def compute_task(task) -> Task:
    """The task whose implementation computes an ``operands`` task's routes: the same task
    in the recipe's accumulation format (binary32) under the recipe's policy."""
    fmt = formats.get(numerics.policy.recipe(task.policy).accumulate)
    return dataclasses.replace(task, fmt=fmt,
                               accumulation=numerics.policy.preset(task.policy, fmt))


def route_scheme(task, route) -> formats.ScaledFormat:
    """The scaled format of a route's quantized values: the task's scheme, or under a
    recipe policy (numerics.policy.RECIPES) with a forward and a gradient element, the scheme
    with the forward element for the forward and tangent routes and the gradient element for
    the gradient route (its cotangents; under ``storage`` scaling its outputs too).  Its
    inputs keep the forward element: the backward products of FP8 training multiply E5M2
    gradients by the E4M3 operands."""
    recipe = numerics.policy.recipe(task.policy)
    if recipe is None or recipe.forward is None:
        return task.scheme
    return with_element(task.scheme, recipe.gradient if route == "gradient" else
                        recipe.forward)


def with_element(scheme, element: str) -> formats.ScaledFormat:
    """``scheme`` with elements of the format ``element``: the catalog scheme of that name
    where one has the same blocks and scales (mxfp8_e4m3 -> mxfp8_e5m2, fp8_e4m3_tensor ->
    fp8_e5m2_tensor), with the same options; else the scheme renamed ``NAME+ELEMENT``."""
    elem = formats.get(element)
    if scheme.element == elem:
        return scheme
    old, new = scheme.element.name.removeprefix("float8_"), elem.name.removeprefix("float8_")
    twin = formats.SCALED.get(scheme.name.replace(old.rstrip("fn"), new.rstrip("fn")))
    changed = dataclasses.replace(scheme, element=elem)
    if twin is not None and twin.name != scheme.name:
        options = {k: getattr(scheme, k) for k in _OPTIONS}
        if dataclasses.replace(twin, **options) == changed:
            return dataclasses.replace(changed, name=twin.name, source=twin.source,
                                       base=twin.base)
    return dataclasses.replace(changed, name=f"{scheme.name}+{elem.name}")


# The options of a scaled format (formats/scaled.py: what a name's ``:OPTION`` sets).
_OPTIONS = ("rule", "pow2", "amax", "margin", "rounding", "saturate_elements")


def scaled_problem(task, o) -> tuple | None:
    """(status, reason, need) when ``task`` cannot be measured as its scaled format or
    recipe asks, else None: a recipe policy on an element format, or with FP8 elements on a
    scheme without them; an implementation that takes no scaled inputs, delayed scaling (no
    amax history), a scheme whose dequantized values do not fit binary64, an operator with
    nothing to quantize (every input an index, a Boolean or an integer word)."""
    policy = task.accumulation
    if getattr(policy, "tensor_core", None) is not None and is_product(task.op) and \
            task.scheme is None:
        try:                                 # the GPU's matrix unit takes the format?
            tensor_cores.input_format(tensor_cores.tensor_core(policy.tensor_core), task.fmt)
        except ValueError as exc:
            return "no_rule", str(exc), "tensor-core input format"
    recipe = numerics.policy.recipe(task.policy)
    if task.scheme is None:
        if recipe is None:
            return None
        return ("no_rule", f"policy {task.policy} ({recipe.doc}) quantizes into a scaled "
                           f"format; {task.format} is an element format (give --formats "
                           f"mxfp8_e4m3, fp8_e4m3_tensor...)", "scaled format")
    name = task.scheme.label
    if recipe is not None and recipe.forward is not None and \
            getattr(task.scheme.element, "name", None) not in FP8_ELEMENTS:
        return ("no_rule", f"policy {task.policy} ({recipe.doc}) needs a scheme with FP8 "
                           f"elements; {name} has {task.scheme.element.label} elements",
                "FP8 scheme")
    if scaling(task) is None:
        return None                   # a recipe leaves this operator in its storage format
    # The implementations that measure scaled tasks (the others' kernels take no scaled
    # inputs): those whose ``scaled_inputs`` is set.
    scaled = implementations.names(scaled_inputs=True)
    if task.implementation not in scaled:
        return ("no_rule", f"scaled format {name}: the {task.implementation} implementation "
                           f"takes no scaled inputs (measured: {', '.join(scaled)})",
                "scaled inputs")
    if task.scheme.amax == "delayed":
        return ("no_rule", f"scaled format {name}: delayed scaling reads an amax history the "
                           f"coverage run does not have (it draws each tensor once: use "
                           f"{task.scheme.name}, current scaling)", "amax history")
    if not task.scheme.products_fit_binary64:
        return ("no_rule", f"scaled format {name}: its dequantized values do not all fit "
                           f"binary64, which the compute format reads", "binary64 values")
    if not any(quantized_port(p) for p in o.inputs):
        kinds = ", ".join(f"{n} {p}" for n, p in zip(o.input_names, o.inputs)) or "none"
        return ("no_rule", f"scaled format {name}: {o.name} has no input holding the model's "
                           f"scalar to quantize (inputs: {kinds})", "scalar input")
    return None


def quantized_port(port) -> bool:
    """Whether a scaled task quantizes an input at ``port``: value ports of any rank, and
    frozen or detached ports of rank >= 1 (an operand read without its gradient, argmax's
    x); rank-0 frozen ports are numeric attributes (epsilon, a slope, a clamp bound) and
    keep their compute-format value; indices, Booleans and integer words are not scalars."""
    return port.kind == "value" or (port.scalar and len(port.shape) > 0)


def one_line(exc, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ----- ports of a route ------------------------------------------------------------------------

def route_ports(o, route):
    """[(index, name, port)] a route measures: every output (forward), the value outputs
    (tangent), the value inputs (gradient)."""
    if route == "forward":
        return list(zip(range(len(o.outputs)), o.output_names, o.outputs))
    if route == "tangent":
        return [(i, n, p) for i, (n, p) in enumerate(zip(o.output_names, o.outputs))
                if p.differentiable]
    return [(i, n, p) for i, (n, p) in enumerate(zip(o.input_names, o.inputs))
            if p.differentiable]


def status_rows(task, o, route, status, reason, need=None):
    """Rows of ``route`` with ``status`` and ``reason`` and no metrics: one per measured port,
    or one per port of the route's side where nothing is measured."""
    ports = route_ports(o, route) if o is not None else []
    if status == "not_differentiable" or not ports:
        names = ([n for n in (o.output_names if route != "gradient" else o.input_names)]
                 if o is not None else [])
        ports = [(None, n, None) for n in names] or [(None, "-", None)]
    return [base_row(task, route, name, status, reason, need) for _, name, _ in ports]


def base_row(task, route, port, status, reason=None, need=None) -> dict:
    """A row with every field (engine/rows.py), the metrics empty (``exhaustive`` false:
    nothing enumerated; ``_rows`` marks the rows whose draws were every finite value of the
    format)."""
    return empty_row(op=task.op, instance=task.instance,
                     attrs={k: jsonable(v) for k, v in task.attrs}, route=route, port=port,
                     format=task.format, mode=task.mode, policy=task.policy,
                     implementation=task.implementation, status=status, reason=reason,
                     need=need)

"""One row of a results file: every field declared once, with its kind, unit and meaning.

The coverage run (engine/evaluate.py), ``measure``, the results file and its DataFrame
(engine/results.py), the gate and the HTML report read the field lists from here: a new
field is one ``Field`` below.  ``empty(**values)`` is a row with every field, at its
default unless given; ``key(row)`` the route key that identifies a row (the gate and the
report refuse two rows of one key); ``sort_key(row)`` the order rows are written in.
``worst_index(errors)`` picks the element every run kind's ``worst`` reproduces, and
``decimal_text`` writes its values.

Kinds: ``key`` (text, part of the key), ``text``, ``bool``, ``count`` (a non-negative
integer), ``ulp`` (a non-negative number of ulps or inf), ``signed`` (signed ulps),
``ratio`` (a non-negative ratio), ``rel`` (a non-negative relative error), ``bits`` (a
positive precision), ``error_bits`` (bits of error: a number in [0, the format's width]),
``nested`` (JSON data: an object or a list), ``agreement`` (bits or decibels of agreement:
a real number, inf where computed = exact, -inf where the error is not finite), ``cosine``
(a cosine similarity in [-1, 1]), ``abs`` (a non-negative absolute error, in the values'
own units).

Bits of error (Herbie's measure, numerics.metrics.error_bits): log2(1 + |ord(computed) -
ord(RN(exact))|), where ord numbers the format's values consecutively (both zeros are 0,
+-inf one past +-max_finite) and RN(exact) is the exact value rounded to nearest-even into
the format; capped at the format's width.  0 bits: the correctly rounded result; 1 bit: its
neighbour; the width: every bit wrong.  So an error of 1e44 ulp reads as about 30 of
binary32's 32 bits, and errors compare across formats.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from mpmath import libmp

KEY, TEXT, BOOL, COUNT, ULP, SIGNED, RATIO, REL, BITS, ERROR_BITS, NESTED = (
    "key", "text", "bool", "count", "ulp", "signed", "ratio", "rel", "bits", "error_bits",
    "nested")
AGREEMENT, COSINE, ABS = "agreement", "cosine", "abs"

# ``buckets``: counts of samples by |error| as hardware vendors' accuracy reports give them:
# exactly 0, (0, 0.5], (0.5, 1], (1, 2], (2, 4], (4, 16], (16, 256], above 256 ulp, then
# the samples whose error is not a number (``unmeasured``); they add up to ``samples``.
BUCKET_EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, 16.0, 256.0)
BUCKET_LABELS = ("0", "<= 0.5", "<= 1", "<= 2", "<= 4", "<= 16", "<= 256", "> 256",
                 "unmeasurable")
# ``by_kind``: {sample kind: these statistics over the draws of that kind}, with the units
# and meanings of the row fields of the same names.  The kinds are routes.registry's
# (ordinary, edges, special, magnitudes), or ``exhaustive`` for enumerated inputs.
KIND_STATS = ("samples", "max_ulp", "p99_ulp", "mean_ulp", "max_bits", "mean_bits",
              "unmeasured", "exceptional", "buckets")
# ``by_input``: at most this many points per row.
POINTS_MAX = 1024


@dataclass(frozen=True)
class Field:
    """A row field: ``name``, ``kind`` (module docstring), ``unit`` of its numbers (``ulp``,
    ``bits`` or empty), ``doc`` and the ``default`` of an empty row (a factory for
    containers)."""

    name: str
    kind: str
    unit: str = ""
    doc: str = ""
    default: object = None

    def empty(self):
        return self.default() if callable(self.default) else self.default


FIELDS = (
    Field("op", KEY, doc="the operator (spec spelling), or the measured target"),
    Field("instance", TEXT, doc="the label of the operator's instance (attributes)"),
    Field("attrs", KEY, doc="the instance's attributes (JSON object)", default=dict),
    Field("route", KEY, doc="forward, tangent or gradient"),
    Field("port", KEY, doc="the output (forward, tangent) or input (gradient) port"),
    Field("format", KEY, doc="the format's catalog name or compact spec"),
    Field("mode", KEY, doc="the rounding mode"),
    Field("policy", KEY, doc="the accumulation policy preset"),
    Field("implementation", KEY, doc="emulated, native, cuda, or the measured target"),
    Field("device", TEXT, doc="cpu, cuda:<name> or simulator", default="cpu"),
    Field("status", TEXT, doc="ok, convention, no_rule, not_differentiable or error"),
    Field("reason", TEXT, doc="why the status is not ok (one line)"),
    Field("need", TEXT, doc="the missing capability of a no_rule row"),
    Field("exhaustive", BOOL, doc="whether the draws were every finite value of the format",
          default=False),
    Field("samples", COUNT, doc="elements measured (a model row: in ulps; its "
          "cancelled elements apart)", default=0),
    Field("max_ulp", ULP, "ulp", "the largest |error|"),
    Field("p99_ulp", ULP, "ulp", "the 99th percentile of |error|"),
    Field("mean_ulp", ULP, "ulp", "the mean |error|"),
    # measure: the signed extremum on the side of the largest |error| is that error,
    # resolved exactly; the other is the screen's, within 2**(p-40) ulp (engine/measure.py).
    Field("min_signed_ulp", SIGNED, "ulp", "the smallest signed error"),
    Field("max_signed_ulp", SIGNED, "ulp", "the largest signed error"),
    Field("max_bits", ERROR_BITS, "bits", "the largest bits of error (module docstring)"),
    Field("mean_bits", ERROR_BITS, "bits", "the mean bits of error"),
    Field("max_rel", REL, doc="the largest relative error"),
    Field("bound", ULP, "ulp", "the a priori (certificate) bound, largest over the samples"),
    Field("bound_ratio", RATIO, doc="the largest measured / a priori bound"),
    Field("violations", COUNT, doc="samples above a bound"),
    Field("unbounded", COUNT, doc="samples the a priori bound does not cover"),
    Field("interval_bound", ULP, "ulp", "the rigorous per-sample bound, largest"),
    Field("interval_bound_ratio", RATIO, doc="the largest measured / rigorous bound"),
    Field("interval_unbounded", COUNT, doc="samples the rigorous bound does not cover"),
    # roundoff-coverage bound (engine/bound.py, routes.bounds.domain): a bound over a box.
    Field("domain_bound", ULP, "ulp", "the bound over every input in the box "
          "(routes.bounds.domain: max |computed - exact| / ulp at the least |exact| of each "
          "piece), largest over the port's elements; inf where none holds"),
    Field("box", NESTED, doc="the input box of domain_bound: [low, high] of every value "
          "input, shrunk to the format's values"),
    Field("exceptional", NESTED, doc="counts of exceptional outcomes by class", default=dict),
    Field("flags", NESTED, doc="the IEEE flags the route raised (emulated)"),
    Field("unmeasured", COUNT, doc="samples whose error is not a number", default=0),
    Field("mismatches", COUNT, doc="elements that differ at non-value ports"),
    Field("histogram", NESTED, doc="counts of |error| by binade (numerics.metrics)"),
    Field("by_magnitude", NESTED, doc="the largest |error| by binade of the exact value"),
    Field("buckets", NESTED, doc="counts of samples by |error| in ulp (BUCKET_LABELS)"),
    Field("by_kind", NESTED, doc="the statistics of each sample kind (KIND_STATS)"),
    Field("inside", NESTED, doc="exceptional outcomes that are not even a faithful rounding "
          "of the exact value (|error| >= 1 ulp or NaN: an overflow, underflow or NaN inside "
          "the route), by what (overflow, underflow, nan): samples, their kinds and, for a "
          "unary elementwise operator, the range of |input| where they happened"),
    Field("by_input", NESTED, doc="a unary elementwise operator's error at each sample "
          "against its input: input name, kinds, [[input, ulp error, kind index], ...] "
          "(at most POINTS_MAX points: beyond, the largest error of each run of inputs)"),
    Field("ref_prec", BITS, "bits", "the reference's working precision"),
    Field("worst", NESTED, doc="the worst input: bit patterns, computed and exact values"),
    Field("incorrectly_rounded", COUNT, doc="results not correctly rounded (measure)"),
    Field("resolved_exactly", COUNT, doc="inputs resolved exactly (measure)"),
    Field("contract", NESTED, doc="a CUDA kernel's contract and verdict"),
    # Model runs (engine/model.py): which graph node a row measures, and how.
    Field("node", TEXT, doc="a model run's graph node (its name), or output:<name> / "
          "input:<name> for the whole model's outputs and input gradients"),
    Field("module", TEXT, doc="the node's module path in the model"),
    Field("node_index", COUNT, doc="the node's position in the graph's execution order"),
    Field("attribution", TEXT, doc="local (the error the node adds: the node alone on the "
          "exact inputs rounded into the format), propagated (the full emulated run) or "
          "share (the node's first-order share of one whole-model output's error: its local "
          "error carried there by the exact forward-mode map, engine/attribution.py)"),
    # Attribution that adds up (engine/attribution.py): share rows name the output whose
    # error they explain; propagated rows of whole-model outputs carry the closure.
    Field("output", TEXT, doc="a share row's whole-model output (output:<name>): its "
          "norm_rel is ||share||_2 / ||y_output||_2 over the samples"),
    Field("closure", RATIO, doc="a whole-model output's ||sum of the nodes' first-order "
          "shares||_2 / ||measured propagated error||_2 over the samples (1: first order "
          "explains the error's size)"),
    Field("closure_misfit", RATIO, doc="||sum of the shares - measured error||_2 / "
          "||measured error||_2 over the samples (0: first order predicts the error element "
          "by element)"),
    Field("closure_by_sample", NESTED, doc="closure per sample (null where the measured "
          "error is 0)"),
    # A model row's tensor measures (engine/tensor_measures.py: definitions, the convention
    # for an exact tensor of zeros, accuracy): the row's tensor is every element of every
    # sample; y exact, y_hat computed, d = y_hat - y, s = max |y|, p the format's precision.
    # Null in coverage rows.  A scaled format's rows get the normwise five only.
    Field("norm_rel", REL, doc="normwise relative error ||d||_2 / ||y||_2 (null where the "
          "exact tensor is 0 and the computed one is not)"),
    Field("norm_rel_max", REL, doc="max-norm relative error max |d| / max |y|"),
    Field("bits", AGREEMENT, "bits", "bits of agreement -log2(norm_rel): inf where computed "
          "= exact"),
    Field("sqnr_db", AGREEMENT, "dB", "signal to quantization noise ratio "
          "10 log10(||y||^2 / ||d||^2): inf where computed = exact"),
    Field("cosine", COSINE, doc="cosine similarity of the computed and exact tensors"),
    Field("scale_ulp", ULP, "ulp", "max |d| in ulps of the format at the tensor's scale "
          "max |y|"),
    Field("cancelled", COUNT, doc="elements whose |exact| < 2**-p * max |y| (exact zeros "
          "included): left out of the ulp statistics and of samples"),
    Field("cancelled_error", ABS, doc="the largest |d| of the cancelled elements"),
    # measure --scheme (engine/quantizers.py): a quantizer against a scaled format's
    # definition; its max_ulp is in ulps of the element format at the block's scale.
    Field("elements_differ", COUNT, doc="elements unlike the definition's, in blocks whose "
          "defined scale is not NaN (a quantizer)"),
    Field("scales_differ", COUNT, doc="block and tensor scales unlike the definition's "
          "(a quantizer)"),
    Field("values_differ", COUNT, doc="dequantized values unlike the definition's "
          "(a quantizer)"),
    Field("quantizer", NESTED, doc="a quantizer's counts by input case, largest absolute "
          "difference and first differing blocks with their contents"),
    # The coverage run under a scaled format (engine/quantize.py quantizes the inputs,
    # engine/measuring.py the outputs): the row's ulp fields count ulps of the element
    # format at the exact value's block scale (``error_unit``); no bits of error.
    Field("scheme", TEXT, doc="the scaled format the port's values were quantized into (a "
          "scaled task: its format), or for a recipe's product the scheme of the route's "
          "quantized operands (forward, tangent) or cotangents (gradient)"),
    Field("scale_axis", TEXT, doc="the block axis of each quantized input and of the "
          "measured port (name:axis, counted from the end; -2,-1: 2-D blocks over the last "
          "two axes; tensor: one scale per tensor)"),
    Field("error_unit", TEXT, doc="what the ulp fields count where it is not an ulp of the "
          "format at the exact value: for a scaled format, ulps of the element format at "
          "the exact value's block scale; for a recipe's product, ulps of the storage "
          "format (bfloat16) at the exact value"),
    Field("blocks", COUNT, doc="blocks of the measured port quantized, over the draws "
          "(a scaled format)"),
    Field("clipped", COUNT, doc="elements of the measured port whose |value| / scale "
          "exceeded the element range: clamped to the element max (or overflowed under "
          "nosat)"),
    Field("zero_blocks", COUNT, doc="blocks of the measured port with a nonzero value "
          "whose elements all became zero"),
    Field("nan_blocks", COUNT, doc="blocks of the measured port with a NaN scale (an Inf "
          "or NaN in the block, or a scale beyond the scale format)"),
    Field("scale_exponents", NESTED, doc="the spread of the measured port's block scales "
          "D (x the tensor scale): [[floor(log2 D), blocks], ...] by exponent"),
    Field("scaled_inputs", NESTED, doc="what quantizing the route's inputs did, per input "
          "(x, tangent x, cotangent y): axis, blocks, clipped, zero_blocks, nan_blocks, "
          "scale_exponents"),
)

BY_NAME = {f.name: f for f in FIELDS}
# The fields only a scaled task's rows fill (null elsewhere).
SCALED_FIELDS = ("scheme", "scale_axis", "error_unit", "blocks", "clipped", "zero_blocks",
                 "nan_blocks", "scale_exponents", "scaled_inputs")
ROW_FIELDS = tuple(f.name for f in FIELDS)
KEY_FIELDS = tuple(f.name for f in FIELDS if f.kind == KEY)
NONNEGATIVE_FIELDS = tuple(f.name for f in FIELDS
                           if f.kind in (ULP, RATIO, REL, ERROR_BITS, ABS))
SIGNED_FIELDS = tuple(f.name for f in FIELDS if f.kind == SIGNED)
AGREEMENT_FIELDS = tuple(f.name for f in FIELDS if f.kind == AGREEMENT)
COSINE_FIELDS = tuple(f.name for f in FIELDS if f.kind == COSINE)
FLOAT_FIELDS = tuple(f.name for f in FIELDS
                     if f.kind in (ULP, SIGNED, RATIO, REL, ERROR_BITS, AGREEMENT, COSINE, ABS))
COUNT_FIELDS = tuple(f.name for f in FIELDS if f.kind == COUNT)
NESTED_FIELDS = ("attrs",) + tuple(f.name for f in FIELDS if f.kind == NESTED)
# ``convention``: measured, where the implementation's convention differs from the rule's
# on these samples (the gradient of torch's max at a NaN...): the row's reason says how, and
# its metrics are against the exact value of the implementation's own convention there.
STATUSES = ("ok", "convention", "no_rule", "not_differentiable", "error")
# The statuses of measured rows (their metrics are numbers to compare and report).
MEASURED = ("ok", "convention")
ROUTE_ORDER = {"forward": 0, "tangent": 1, "gradient": 2}


def empty(**values) -> dict:
    """A row with every field: ``values``, the defaults elsewhere.  KeyError for a name
    that is not a field (a typo must not become a column)."""
    for name in values:
        if name not in BY_NAME:
            raise KeyError(f"{name!r} is not a row field (engine/rows.py)")
    return {f.name: values[f.name] if f.name in values else f.empty() for f in FIELDS}


def key(row) -> tuple:
    """A row's route key: the KEY_FIELDS, attributes as canonical JSON text; a model run's
    row (one with a ``node``) adds its node and attribution, and a share row its output."""
    base = (row["op"], json.dumps(row["attrs"], sort_keys=True, separators=(",", ":")),
            row["route"], str(row["port"]), row["format"], row["mode"], row["policy"],
            row["implementation"])
    node = row.get("node")
    if node is None:
        return base
    # A share row names the output whose error it explains: one row per (node, output).
    output = row.get("output")
    return base + (str(node), str(row.get("attribution"))) + \
        (() if output is None else (str(output),))


def sort_key(row) -> tuple:
    """The order rows are written in: the key's, with the routes in their order (forward,
    tangent, gradient) and the attributes' JSON spaced as the file has always sorted it;
    a model run's rows in the graph's execution order (the whole model's rows first)."""
    k = key(row)
    return (k[0], json.dumps(row["attrs"], sort_keys=True), ROUTE_ORDER.get(k[2], 9)) + k[2:] \
        if row.get("node") is None else \
        ("", -1 if row.get("node_index") is None else row["node_index"],
         ROUTE_ORDER.get(k[2], 9)) + k[8:] + k[3:8] + k[:2]


# ----- the worst element ---------------------------------------------------------------------------

def worst_index(errors) -> int | None:
    """The index of the largest |error| in a flat array (the first of equals), or None when
    no error is measurable (empty, or every error NaN): the element a row's ``worst``
    reproduces, whatever the run kind."""
    a = np.abs(np.asarray(errors, dtype=np.float64))
    if not a.size or np.isnan(a).all():
        return None
    return int(np.nanargmax(a))


def decimal_text(v) -> str:
    """A number as a decimal string: repr for binary64, 20 significant digits for mpmath."""
    m = getattr(v, "_mpf_", None)
    if m is not None:
        return libmp.to_str(m, 20)
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)

"""The operator vocabulary: the spec's table.

``VOCABULARY`` is the spec's table (shared/spec/operators.tsv, copied here so the installed
package needs no spec files): one ``Row`` per operator (family, operator, rule needs, CUDA
entry, gradient certificates, bound propagations, the TSV's columns).  It fixes the
operators' order (``routes.names()``), and certs.spec_certificates reads its Gradient column
for the routes of the certificates it registers (that is how the table was built to match
the spec).  The same table computed from the code is routes/vocabulary_computed.py's.
"""

from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    """One operator's row, in the columns of shared/spec/operators.tsv."""

    family: str
    operator: str
    rule_needs: str
    cuda_entry: str
    gradient_certificates: str
    bound_propagations: str


COLUMNS = Row._fields

# (family, operator, rule needs, CUDA entry, gradient certificates, bound propagations)
_SPEC = (
    ("elementwise", "add", "every scalar", "yes",
     "derivative; forward mode", "checker, IBP, CROWN; enclosure"),
    ("elementwise", "sub", "every scalar", "yes",
     "derivative; forward mode", "checker, IBP, CROWN; enclosure"),
    ("elementwise", "mul", "every scalar", "yes",
     "derivative; forward mode", "checker, IBP, CROWN; enclosure"),
    ("elementwise", "div", "Rounding at some attributes", "at some attributes",
     "derivative; forward mode (algebraic)", "IBP"),
    ("elementwise", "neg", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("elementwise", "abs", "every scalar", "yes",
     "derivative; forward mode (algebraic)", "IBP; enclosure"),
    ("elementwise", "sqrt", "every scalar", "yes",
     "derivative; forward mode (algebraic)", "IBP; enclosure"),
    ("elementwise", "rsqrt", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("elementwise", "cbrt", "Cbrt", "no", "no certificate; forward mode", "none"),
    ("elementwise", "reciprocal", "every scalar", "yes",
     "derivative; forward mode (algebraic)", "IBP"),
    ("elementwise", "square", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("elementwise", "pow", "every scalar", "no", "no certificate; forward mode", "none"),
    ("elementwise", "scale", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("elementwise", "fmod", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("elementwise", "remainder", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("elementwise", "hypot", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("elementwise", "copysign", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("elementwise", "nextafter", "NextAfter", "no", "no value input; forward mode", "none"),
    ("elementwise", "lerp", "every scalar", "no", "no certificate; forward mode", "none"),
    ("elementwise", "addcmul", "every scalar", "no", "no certificate; forward mode", "none"),
    ("elementwise", "addcdiv", "every scalar", "no", "no certificate; forward mode", "none"),
    ("elementwise", "nanToNum", "every scalar", "no", "derivative; forward mode", "none"),
    ("elementwise", "fullLike", "every scalar", "no", "no certificate; forward mode", "none"),
    ("elementwise", "safeDiv", "every scalar", "no", "derivative; forward mode", "none"),
    ("elementwise", "safeInv", "every scalar", "no", "derivative; forward mode", "none"),
    ("elementwise", "safeLog", "every scalar", "yes", "derivative; forward mode", "checker, IBP"),
    ("elementwise", "smoothAbs", "every scalar", "no", "derivative; forward mode", "none"),
    ("transcendental", "exp", "every scalar", "yes", "algebraic, derivative; forward mode", "IBP"),
    ("transcendental", "exp2", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "expm1", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "log", "every scalar", "yes", "derivative; forward mode (algebraic)", "IBP"),
    ("transcendental", "log2", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "log10", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "log1p", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "sin", "every scalar", "yes", "derivative; forward mode", "checker, IBP"),
    ("transcendental", "cos", "every scalar", "yes", "derivative; forward mode", "checker, IBP"),
    ("transcendental", "tan", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "asin", "InverseTrig", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "acos", "InverseTrig", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "atan", "InverseTrig", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "atan2", "InverseTrig", "no", "no certificate; forward mode", "IBP"),
    ("transcendental", "sinh", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "cosh", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "asinh", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("transcendental", "acosh", "every scalar", "no", "derivative; forward mode", "none"),
    ("transcendental", "atanh", "every scalar", "no", "derivative; forward mode", "none"),
    ("transcendental", "erf", "Erf", "no", "derivative; forward mode", "IBP"),
    ("rounding", "floor", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("rounding", "ceil", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("rounding", "round", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("rounding", "trunc", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("rounding", "frac", "Rounding", "no", "no certificate; forward mode", "IBP"),
    ("rounding", "sign", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("extrema", "max", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("extrema", "min", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("extrema", "fmax", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("extrema", "fmin", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("extrema", "clamp", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("activation", "relu", "every scalar", "yes",
     "algebraic, derivative; forward mode", "checker, IBP; enclosure"),
    ("activation", "sigmoid", "every scalar", "yes",
     "algebraic, derivative; forward mode", "checker, IBP"),
    ("activation", "tanh", "every scalar", "yes",
     "algebraic, derivative; forward mode", "checker, IBP"),
    ("activation", "softplus", "every scalar", "yes", "derivative; forward mode", "checker, IBP"),
    ("activation", "silu", "every scalar", "yes", "derivative; forward mode", "checker, IBP"),
    ("activation", "gelu", "Erf at some attributes", "at some attributes",
     "derivative; forward mode", "IBP"),
    ("activation", "elu", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("activation", "leakyReLU", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("logic", "eq", "every scalar", "no", "no value input", "none"),
    ("logic", "ne", "every scalar", "no", "no value input", "none"),
    ("logic", "lt", "every scalar", "no", "no value input", "none"),
    ("logic", "le", "every scalar", "no", "no value input", "none"),
    ("logic", "gt", "every scalar", "no", "no value input", "none"),
    ("logic", "ge", "every scalar", "no", "no value input", "none"),
    ("logic", "isNaN", "every scalar", "no", "no value input", "none"),
    ("logic", "isInf", "every scalar", "no", "no value input", "none"),
    ("logic", "isFinite", "every scalar", "no", "no value input", "none"),
    ("logic", "logicalNot", "every scalar", "no", "no value input", "none"),
    ("logic", "logicalAnd", "every scalar", "no", "no value input", "none"),
    ("logic", "logicalOr", "every scalar", "no", "no value input", "none"),
    ("logic", "logicalXor", "every scalar", "no", "no value input", "none"),
    ("logic", "select", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("logic", "cast", "every scalar", "no", "no value input; forward mode", "none"),
    ("integer", "bitwiseAnd", "every scalar", "no", "no value input", "none"),
    ("integer", "bitwiseOr", "every scalar", "no", "no value input", "none"),
    ("integer", "bitwiseXor", "every scalar", "no", "no value input", "none"),
    ("integer", "bitwiseNot", "every scalar", "no", "no value input", "none"),
    ("integer", "bitwiseLeftShift", "every scalar", "no", "no value input", "none"),
    ("integer", "shiftRightArithmetic", "every scalar", "no", "no value input", "none"),
    ("integer", "shiftRightLogical", "every scalar", "no", "no value input", "none"),
    ("integer", "populationCount", "every scalar", "no", "no value input", "none"),
    ("integer", "countLeadingZeros", "every scalar", "no", "no value input", "none"),
    ("integer", "mulhi", "every scalar", "no", "no value input", "none"),
    ("integer", "bitcast", "Bits at some attributes", "no",
     "no value input; forward mode at some attributes", "none"),
    ("integer", "encodeIndex", "every scalar", "no", "no value input", "none"),
    ("integer", "decodeIndex", "every scalar; no rule at some attributes", "no",
     "no value input; forward mode at some attributes", "none"),
    ("scan_order", "cumsum", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("scan_order", "cumprod", "every scalar", "no", "no certificate; forward mode", "none"),
    ("scan_order", "cummax", "every scalar", "no", "no certificate; forward mode", "none"),
    ("scan_order", "cummin", "every scalar", "no", "no certificate; forward mode", "none"),
    ("scan_order", "sort", "every scalar", "no", "no certificate; forward mode", "none"),
    ("scan_order", "topk", "every scalar", "no", "no certificate; forward mode", "none"),
    ("scan_order", "argmax", "every scalar", "no", "no value input", "none"),
    ("scan_order", "argmin", "every scalar", "no", "no value input", "none"),
    ("indexing", "gather", "every scalar", "yes", "no certificate; forward mode", "IBP"),
    ("indexing", "scatter", "every scalar", "at some attributes",
     "no certificate; forward mode at some attributes", "none"),
    ("indexing", "indices", "every scalar", "no", "no value input", "none"),
    ("indexing", "indexAt", "every scalar", "yes", "no certificate; forward mode", "IBP"),
    ("indexing", "slice", "every scalar", "at some attributes",
     "no certificate; forward mode", "IBP, CROWN"),
    ("indexing", "embedding", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("movement", "reshape", "every scalar", "yes", "no certificate; forward mode", "IBP, CROWN"),
    ("movement", "permute", "every scalar", "yes", "no certificate; forward mode", "IBP, CROWN"),
    ("movement", "broadcast", "every scalar", "at some attributes",
     "no certificate; forward mode", "IBP"),
    ("movement", "flip", "every scalar", "no", "no certificate; forward mode", "IBP"),
    ("movement", "pad", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("movement", "cat", "every scalar", "at some attributes",
     "no certificate; forward mode", "checker, IBP, CROWN"),
    ("reduction", "reduce", "every scalar", "at some attributes",
     "algebraic; forward mode", "IBP, CROWN"),
    ("reduction", "mean", "every scalar", "at some attributes",
     "no certificate; forward mode", "IBP"),
    ("reduction", "contract", "every scalar", "no", "derivative; forward mode", "IBP"),
    ("product", "matmul", "every scalar", "yes",
     "no certificate; forward mode", "checker, IBP, CROWN"),
    ("product", "scaledMatmul", "every scalar", "yes",
     "no certificate; forward mode", "checker, IBP, CROWN"),
    ("product", "linear", "every scalar", "at some attributes",
     "inputs 0 and 1: no certificate; input 2: algebraic; forward mode", "checker, IBP, CROWN"),
    ("conv_pool", "conv", "every scalar", "at some attributes",
     "no certificate; forward mode", "checker, IBP, CROWN"),
    ("conv_pool", "convTranspose", "every scalar", "at some attributes",
     "no certificate; forward mode", "none"),
    ("conv_pool", "pool", "every scalar", "at some attributes",
     "no certificate; forward mode", "IBP"),
    ("conv_pool", "smoothMaxPool", "every scalar", "at some attributes",
     "no certificate; forward mode", "none"),
    ("normalization", "layerNorm", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("normalization", "batchNorm", "every scalar", "yes", "derivative; forward mode", "none"),
    ("normalization", "batchNormRunning", "every scalar", "yes", "derivative; forward mode", "IBP"),
    ("softmax_attention", "softmax", "every scalar", "yes",
     "algebraic, derivative; forward mode", "IBP; enclosure"),
    ("softmax_attention", "logSoftmax", "every scalar", "yes",
     "algebraic, derivative; forward mode", "IBP"),
    ("softmax_attention", "maskedSoftmax", "every scalar", "no",
     "no certificate; forward mode", "IBP"),
    ("softmax_attention", "attention", "every scalar", "no",
     "no certificate; forward mode", "none"),
    ("softmax_attention", "attentionFromScores", "every scalar", "yes",
     "no certificate; forward mode", "none"),
    ("softmax_attention", "multiheadAttention", "every scalar", "yes",
     "no certificate; forward mode", "none"),
    ("loss", "mseLoss", "every scalar", "yes", "no certificate; forward mode", "IBP"),
    ("loss", "maeLoss", "every scalar", "no", "no certificate; forward mode", "none"),
    ("loss", "huberLoss", "every scalar", "yes", "no certificate; forward mode", "none"),
    ("loss", "hingeLoss", "every scalar", "no", "no certificate; forward mode", "none"),
    ("loss", "poissonLoss", "every scalar", "no", "no certificate; forward mode", "none"),
    ("loss", "logCoshLoss", "every scalar", "no", "no certificate; forward mode", "none"),
    ("loss", "binaryCrossEntropy", "every scalar", "no", "no certificate; forward mode", "none"),
    ("loss", "cosineLoss", "every scalar", "no", "no certificate; forward mode", "none"),
    ("loss", "crossEntropy", "every scalar", "yes", "no certificate; forward mode", "none"),
    ("loss", "crossEntropyProbabilities", "every scalar", "no",
     "no certificate; forward mode", "none"),
    ("loss", "distill", "every scalar", "yes", "no certificate; forward mode", "none"),
    ("random", "dropout", "every scalar", "yes", "no certificate; forward mode", "none"),
    ("random", "topKMask", "every scalar", "at some attributes",
     "no value input; forward mode", "none"),
    ("random", "bernoulliMask", "every scalar", "yes", "no value input; forward mode", "IBP"),
    ("random", "randUniform", "every scalar", "yes", "no value input; forward mode", "IBP"),
    ("random", "randn", "every scalar", "no", "no value input; forward mode", "none"),
    ("spectral", "rfft", "every scalar", "at some attributes",
     "no certificate; forward mode", "none"),
    ("spectral", "irfft", "every scalar", "at some attributes",
     "no certificate; forward mode", "none"),
    ("spectral", "selectiveScan", "every scalar", "at some attributes",
     "no certificate; forward mode", "none"),
    ("graph", "detach", "every scalar", "yes",
     "no value input; forward mode (convention)", "checker, IBP, CROWN"),
    ("graph", "custom", "from its node's program (Op.customRule)", "no", "no certificate", "none"),
)

VOCABULARY = tuple(Row(*row) for row in _SPEC)
BY_NAME = {row.operator: row for row in VOCABULARY}


def spec_row(name: str) -> Row | None:
    """The spec's row of ``name`` (family, operator, rule needs, CUDA entry, gradient
    certificates, bound propagations), or None."""
    return BY_NAME.get(name)


def spec_gradient_kinds(name: str) -> set:
    """The certificate kinds the spec's Gradient column registers for ``name``'s pullback and
    forward mode (``derivative``, ``algebraic``, ``convention``)."""
    row = BY_NAME.get(name)
    return set() if row is None else {k for k in ("derivative", "algebraic", "convention")
                                      if k in row[4]}

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

# The cells most rows share, named once so that each row shows what sets it apart.
_ANY = "every scalar"
_SOME = "at some attributes"
_DERIVATIVE = "derivative; forward mode"
_NO_CERTIFICATE = "no certificate; forward mode"
_NO_VALUE = "no value input"

# (family, operators, rule needs, CUDA entry, gradient certificates, bound propagations):
# operators that follow each other in the spec's order and agree on every other column share
# one line, their names separated by spaces.
_SPEC = (
    ("elementwise", "add sub mul", _ANY, "yes", _DERIVATIVE, "checker, IBP, CROWN; enclosure"),
    ("elementwise", "div", "Rounding at some attributes", _SOME,
     "derivative; forward mode (algebraic)", "IBP"),
    ("elementwise", "neg", _ANY, "yes", _DERIVATIVE, "IBP"),
    ("elementwise", "abs sqrt", _ANY, "yes",
     "derivative; forward mode (algebraic)", "IBP; enclosure"),
    ("elementwise", "rsqrt", _ANY, "no", _DERIVATIVE, "IBP"),
    ("elementwise", "cbrt", "Cbrt", "no", _NO_CERTIFICATE, "none"),
    ("elementwise", "reciprocal", _ANY, "yes", "derivative; forward mode (algebraic)", "IBP"),
    ("elementwise", "square", _ANY, "no", _DERIVATIVE, "IBP"),
    ("elementwise", "pow", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("elementwise", "scale", _ANY, "yes", _DERIVATIVE, "IBP"),
    ("elementwise", "fmod remainder", "Rounding", "no", _NO_CERTIFICATE, "IBP"),
    ("elementwise", "hypot copysign", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("elementwise", "nextafter", "NextAfter", "no", "no value input; forward mode", "none"),
    ("elementwise", "lerp addcmul addcdiv", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("elementwise", "nanToNum", _ANY, "no", _DERIVATIVE, "none"),
    ("elementwise", "fullLike", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("elementwise", "safeDiv safeInv", _ANY, "no", _DERIVATIVE, "none"),
    ("elementwise", "safeLog", _ANY, "yes", _DERIVATIVE, "checker, IBP"),
    ("elementwise", "smoothAbs", _ANY, "no", _DERIVATIVE, "none"),
    ("transcendental", "exp", _ANY, "yes", "algebraic, derivative; forward mode", "IBP"),
    ("transcendental", "exp2 expm1", _ANY, "no", _DERIVATIVE, "IBP"),
    ("transcendental", "log", _ANY, "yes", "derivative; forward mode (algebraic)", "IBP"),
    ("transcendental", "log2 log10 log1p", _ANY, "no", _DERIVATIVE, "IBP"),
    ("transcendental", "sin cos", _ANY, "yes", _DERIVATIVE, "checker, IBP"),
    ("transcendental", "tan", _ANY, "no", _DERIVATIVE, "IBP"),
    ("transcendental", "asin acos atan", "InverseTrig", "no", _DERIVATIVE, "IBP"),
    ("transcendental", "atan2", "InverseTrig", "no", _NO_CERTIFICATE, "IBP"),
    ("transcendental", "sinh cosh asinh", _ANY, "no", _DERIVATIVE, "IBP"),
    ("transcendental", "acosh atanh", _ANY, "no", _DERIVATIVE, "none"),
    ("transcendental", "erf", "Erf", "no", _DERIVATIVE, "IBP"),
    ("rounding", "floor ceil round trunc frac", "Rounding", "no", _NO_CERTIFICATE, "IBP"),
    ("rounding", "sign", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("extrema", "max min", _ANY, "yes", _DERIVATIVE, "IBP"),
    ("extrema", "fmax fmin", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("extrema", "clamp", _ANY, "yes", _DERIVATIVE, "IBP"),
    ("activation", "relu", _ANY, "yes",
     "algebraic, derivative; forward mode", "checker, IBP; enclosure"),
    ("activation", "sigmoid tanh", _ANY, "yes",
     "algebraic, derivative; forward mode", "checker, IBP"),
    ("activation", "softplus silu", _ANY, "yes", _DERIVATIVE, "checker, IBP"),
    ("activation", "gelu", "Erf at some attributes", _SOME, _DERIVATIVE, "IBP"),
    ("activation", "elu leakyReLU", _ANY, "no", _DERIVATIVE, "IBP"),
    ("logic", "eq ne lt le gt ge isNaN isInf isFinite"
              " logicalNot logicalAnd logicalOr logicalXor", _ANY, "no", _NO_VALUE, "none"),
    ("logic", "select", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("logic", "cast", _ANY, "no", "no value input; forward mode", "none"),
    ("integer", "bitwiseAnd bitwiseOr bitwiseXor bitwiseNot bitwiseLeftShift"
                " shiftRightArithmetic shiftRightLogical populationCount countLeadingZeros"
                " mulhi", _ANY, "no", _NO_VALUE, "none"),
    ("integer", "bitcast", "Bits at some attributes", "no",
     "no value input; forward mode at some attributes", "none"),
    ("integer", "encodeIndex", _ANY, "no", _NO_VALUE, "none"),
    ("integer", "decodeIndex", "every scalar; no rule at some attributes", "no",
     "no value input; forward mode at some attributes", "none"),
    ("scan_order", "cumsum", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("scan_order", "cumprod cummax cummin sort topk", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("scan_order", "argmax argmin", _ANY, "no", _NO_VALUE, "none"),
    ("indexing", "gather", _ANY, "yes", _NO_CERTIFICATE, "IBP"),
    ("indexing", "scatter", _ANY, _SOME,
     "no certificate; forward mode at some attributes", "none"),
    ("indexing", "indices", _ANY, "no", _NO_VALUE, "none"),
    ("indexing", "indexAt", _ANY, "yes", _NO_CERTIFICATE, "IBP"),
    ("indexing", "slice", _ANY, _SOME, _NO_CERTIFICATE, "IBP, CROWN"),
    ("indexing", "embedding", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("movement", "reshape permute", _ANY, "yes", _NO_CERTIFICATE, "IBP, CROWN"),
    ("movement", "broadcast", _ANY, _SOME, _NO_CERTIFICATE, "IBP"),
    ("movement", "flip", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("movement", "pad", _ANY, "no", _DERIVATIVE, "IBP"),
    ("movement", "cat", _ANY, _SOME, _NO_CERTIFICATE, "checker, IBP, CROWN"),
    ("reduction", "reduce", _ANY, _SOME, "algebraic; forward mode", "IBP, CROWN"),
    ("reduction", "mean", _ANY, _SOME, _NO_CERTIFICATE, "IBP"),
    ("reduction", "contract", _ANY, "no", _DERIVATIVE, "IBP"),
    ("product", "matmul scaledMatmul", _ANY, "yes", _NO_CERTIFICATE, "checker, IBP, CROWN"),
    ("product", "linear", _ANY, _SOME,
     "inputs 0 and 1: no certificate; input 2: algebraic; forward mode", "checker, IBP, CROWN"),
    ("conv_pool", "conv", _ANY, _SOME, _NO_CERTIFICATE, "checker, IBP, CROWN"),
    ("conv_pool", "convTranspose", _ANY, _SOME, _NO_CERTIFICATE, "none"),
    ("conv_pool", "pool", _ANY, _SOME, _NO_CERTIFICATE, "IBP"),
    ("conv_pool", "smoothMaxPool", _ANY, _SOME, _NO_CERTIFICATE, "none"),
    ("normalization", "layerNorm", _ANY, "yes", _DERIVATIVE, "IBP"),
    ("normalization", "batchNorm", _ANY, "yes", _DERIVATIVE, "none"),
    ("normalization", "batchNormRunning", _ANY, "yes", _DERIVATIVE, "IBP"),
    ("softmax_attention", "softmax", _ANY, "yes",
     "algebraic, derivative; forward mode", "IBP; enclosure"),
    ("softmax_attention", "logSoftmax", _ANY, "yes", "algebraic, derivative; forward mode", "IBP"),
    ("softmax_attention", "maskedSoftmax", _ANY, "no", _NO_CERTIFICATE, "IBP"),
    ("softmax_attention", "attention", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("softmax_attention", "attentionFromScores multiheadAttention", _ANY, "yes",
     _NO_CERTIFICATE, "none"),
    ("loss", "mseLoss", _ANY, "yes", _NO_CERTIFICATE, "IBP"),
    ("loss", "maeLoss", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("loss", "huberLoss", _ANY, "yes", _NO_CERTIFICATE, "none"),
    ("loss", "hingeLoss poissonLoss logCoshLoss binaryCrossEntropy cosineLoss", _ANY, "no",
     _NO_CERTIFICATE, "none"),
    ("loss", "crossEntropy", _ANY, "yes", _NO_CERTIFICATE, "none"),
    ("loss", "crossEntropyProbabilities", _ANY, "no", _NO_CERTIFICATE, "none"),
    ("loss", "distill", _ANY, "yes", _NO_CERTIFICATE, "none"),
    ("random", "dropout", _ANY, "yes", _NO_CERTIFICATE, "none"),
    ("random", "topKMask", _ANY, _SOME, "no value input; forward mode", "none"),
    ("random", "bernoulliMask randUniform", _ANY, "yes", "no value input; forward mode", "IBP"),
    ("random", "randn", _ANY, "no", "no value input; forward mode", "none"),
    ("spectral", "rfft irfft selectiveScan", _ANY, _SOME, _NO_CERTIFICATE, "none"),
    ("graph", "detach", _ANY, "yes",
     "no value input; forward mode (convention)", "checker, IBP, CROWN"),
    ("graph", "custom", "from its node's program (Op.customRule)", "no", "no certificate", "none"),

)

VOCABULARY = tuple(Row(family, operator, *columns)
                   for family, operators, *columns in _SPEC for operator in operators.split())
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

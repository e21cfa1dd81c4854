"""The operator vocabulary, twice: the spec's table and the table computed from the code.

``VOCABULARY`` is the spec's table (shared/spec/operators.tsv, copied here so the installed
package needs no spec files): one ``Row`` per operator (family, operator, rule needs, CUDA
entry, gradient certificates, bound propagations, the TSV's columns).  It fixes the
operators' order (``routes.names()``), and certs.spec_certificates reads its Gradient column
for the routes of the certificates it registers (that is how the table was built to match
the spec).

``computed(has_entry)`` is what the code actually has, every cell read from the
declarations (needs, no_rule, the ports, the forward mode), the registered certificates and
the bound-propagation arms (``ARMS``), in the spec's phrasing ("every scalar", "Rounding at
some attributes", "no value input; forward mode", ...).  The CUDA column comes from the
kernel table, which routes may not import: the caller passes ``has_entry(op) -> bool``
(kernels.table.vocabulary() passes the kernel table's).  tests/test_vocabulary_computed.py
compares the computed table with the spec's and holds the intended differences as data.

A cell says whether its property holds at every attribute, at some or at none (the spec's
"A cell says whether its property holds at every attribute, at some or at none"), read at
``attribute_points(name)``: the defaults, the examples and their one-attribute variations,
with the element at the model's scalar.
"""

from __future__ import annotations

from typing import Callable, NamedTuple


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


# ----- the table computed from the code ---------------------------------------------------------

# The bound propagations in the spec's order (the certificate checker, interval propagation,
# CROWN's backward sweep).  ARMS[propagation](name) says whether it has an arm for operator
# ``name``: routes.bounds's tables (CHECKER, IBP_ARMS, CROWN_ARMS), read when asked (bounds
# imports the registry, which imports this module).
PROPAGATIONS = ("checker", "IBP", "CROWN")


def _arms_of(propagation: str) -> Callable[[str], bool]:
    def has_arm(name: str) -> bool:
        from .bounds import has_arm as bounds_has_arm
        return bounds_has_arm(propagation, name)
    return has_arm


ARMS: dict[str, Callable[[str], bool]] = {p: _arms_of(p) for p in PROPAGATIONS}

# The certificate kinds the Gradient column names: what the pullback's or the forward mode's
# map is (certs.KINDS).  prepared (the prepared pullback equals the dense one), roundoff and
# enclosure (forward values) say nothing about that map; `roundoff-coverage ops --certs`
# lists them.
GRADIENT_KINDS = ("algebraic", "convention", "derivative")


def attribute_points(name: str) -> tuple:
    """The instances of operator ``name`` whose facts make its computed cells: the default
    attributes and every declared example, each also with one attribute moved to each of its
    enumerable values (every choice, both flags, a bounded number's bounds, a 0 in one entry
    of a shape or list), the element at the model's scalar where the operator has that choice
    (the spec: "with its element argument at the model's scalar where it has one"); only
    instances whose attributes pass the check, each once, in that order."""
    from .errors import RouteError
    from .registry import declaration, op
    decl = declaration(name)
    defaults = {at.name: at.default for at in decl.attributes}
    pinned = {at.name: "scalar" for at in decl.attributes
              if at.name == "element" and "scalar" in at.choices}
    out = {}
    for example in ({}, *decl.examples.values()):
        base = {**defaults, **dict(example)}
        for attrs in [base] + [{**base, at.name: v} for at in decl.attributes
                               for v in _variants(at, base[at.name])]:
            try:
                o = op(name, **{**attrs, **pinned})
                if o.problem() is None:
                    o.inputs                                   # the ports exist here
                    out.setdefault(o, None)
            except RouteError:
                continue
    return tuple(out)


def _variants(at, value) -> tuple:
    """The enumerable values of attribute ``at`` around ``value`` (attribute_points)."""
    if at.wire == "enum":
        return at.choices
    if at.wire == "bool":
        return (False, True)
    if at.wire in ("nat", "int"):
        lo = 0 if at.wire == "nat" and at.lo is None else at.lo
        return tuple(v for v in (lo, at.hi) if v is not None)
    if at.wire in ("shape", "nats"):
        return tuple(value[:i] + (0,) + value[i + 1:] for i in range(len(value)))
    return ()


def _extent(flags) -> str:
    """``every``, ``some`` or ``none``: at how many of the points a property holds."""
    flags = list(flags)
    return "none" if not any(flags) else "every" if all(flags) else "some"


def rule_cell(points) -> str:
    """The Rule column at ``points`` (one operator's instances): the capability the rule reads
    (Op.need; "every scalar": none), "at some attributes" where it reads it at some points
    only, then "; no rule at some attributes" where ``no_rule`` gives a reason at some."""
    ruled = [o for o in points if o.no_rule_reason() is None]
    if not ruled:
        return "no rule"
    needs = [o.need for o in ruled]
    caps = sorted({n for n in needs if n is not None})
    cell = ", ".join(c if all(n == c for n in needs) else f"{c} at some attributes"
                     for c in caps) or "every scalar"
    return cell + ("; no rule at some attributes" if len(ruled) < len(points) else "")


def gradient_cell(points, certs) -> str:
    """The Gradient column at ``points`` with the operator's certificates ``certs``: the
    GRADIENT_KINDS of the pullback's certificates at each value input ("no certificate";
    "inputs 0 and 1: ...; input 2: ..." where they differ; "no value input" without one),
    then "forward mode" where the rule has one (a rule, and Op.has_jvp there), with the
    kinds of the forward mode's certificates in parentheses, "at some attributes" where it
    has one at some points only."""
    values = sorted({i for o in points for i, p in enumerate(o.inputs) if p.differentiable})
    parts = []
    if not values:
        parts.append("no value input")
    else:
        groups: dict = {}
        for i in values:
            kinds = tuple(sorted({c.kind for c in certs if c.route == "gradient"
                                  and c.kind in GRADIENT_KINDS
                                  and (c.inputs is None or i in c.inputs)}))
            groups.setdefault(kinds, []).append(i)
        words = {k: ", ".join(k) or "no certificate" for k in groups}
        parts += [words[k] for k in groups] if len(groups) == 1 else \
            [f"{_positions(ins)}: {words[k]}" for k, ins in groups.items()]
    # No rule, no forward mode: decodeIndex has one "at some attributes", where it has a rule.
    extent = _extent(o.no_rule_reason() is None and o.has_jvp for o in points)
    if extent != "none":
        tangent = sorted({c.kind for c in certs if c.route == "tangent"
                          and c.kind in GRADIENT_KINDS})
        parts.append("forward mode" + (f" ({', '.join(tangent)})" if tangent else "")
                     + (" at some attributes" if extent == "some" else ""))
    return "; ".join(parts)


def _positions(inputs) -> str:
    """``input 2``, ``inputs 0 and 1``, ``inputs 0, 1 and 3``."""
    if len(inputs) == 1:
        return f"input {inputs[0]}"
    return f"inputs {', '.join(map(str, inputs[:-1]))} and {inputs[-1]}"


def bounds_cell(name: str, certs) -> str:
    """The Bounds column: the PROPAGATIONS with an arm for ``name`` (ARMS), "; enclosure"
    where an enclosure certificate is registered; "none" without either."""
    arms = ", ".join(p for p in PROPAGATIONS if p in ARMS and ARMS[p](name))
    enclosure = "enclosure" if any(c.kind == "enclosure" for c in certs) else ""
    return "; ".join(filter(None, (arms, enclosure))) or "none"


def cuda_cell(points, has_entry: Callable) -> str:
    """The CUDA column: ``yes`` where ``has_entry(op)`` holds at every point, ``at some
    attributes`` at some, ``no`` at none."""
    return {"every": "yes", "some": "at some attributes", "none": "no"}[
        _extent(has_entry(o) for o in points)]


def computed_row(name: str, has_entry: Callable) -> Row:
    """The row of operator ``name`` computed from the code; ``has_entry(op) -> bool`` says
    whether the kernel table has an entry for an instance (kernels.table.vocabulary)."""
    from .certs import certificates
    from .registry import declaration
    decl = declaration(name)
    points = attribute_points(name)
    certs = certificates(name)
    return Row(decl.family, name, rule_cell(points), cuda_cell(points, has_entry),
               gradient_cell(points, certs), bounds_cell(name, certs))


def computed(has_entry: Callable) -> tuple:
    """Every registered operator's row computed from the code (``computed_row``), in the
    order of ``routes.names()``."""
    from .registry import names
    return tuple(computed_row(name, has_entry) for name in names())

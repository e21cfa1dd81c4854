"""The torch table: registered operator -> the PyTorch call that computes it (issue 23, "Who
is right: PyTorch's own kernels measured against exact values"), kept beside the CUDA kernel
table (kernels/table.py).  torch is the optional extra ``[torch]``; this module never imports
it: every call receives the torch module as its first argument.

``TABLE`` maps an operator name to a ``Call`` (kernels/torch_table.py holds both; the entries
are kernels/torch_calls_elementwise.py's and kernels/torch_calls_structured.py's):

- ``fn(t, a, *xs) -> tensor | tuple``: the torch call with the attribute mapping, ``t`` the
  torch module, ``a`` the operator's attributes, ``xs`` the inputs in port order as tensors
  (value, frozen and detached ports in the format's dtype, index ports int64, Boolean ports
  bool, word ports their integer dtype); it returns the outputs in port order.  Frozen
  scalars that torch takes as Python numbers (an epsilon, a slope) are read with ``.item()``:
  a format value, exact as a Python float.
- ``composite``: True where torch has no single function for the operator and the call is
  the documented torch idiom built from a few torch calls (``x.masked_fill(~mask, -inf)``
  then softmax, ``matmul(x, y) * scale``); False for one torch function (movement of the
  operands aside).
- ``refuses(a) -> reason | None``: attributes at which torch has no counterpart.
- ``no_jvp``: why forward-mode AD (torch.func.jvp) does not run the call, or None.
- ``rejects(a, xs) -> reason | None``: the inputs (numpy) torch refuses where the rule has
  a value (binary_cross_entropy's targets outside [0, 1]): such draws are left out, and the
  rows say how many and why.
- ``conventions``: ``Convention`` entries, where torch's convention differs from the rule's
  (the rows of the routes concerned get the status ``convention``).

``NO_COUNTERPART`` maps every other registered operator to the reason torch has none.
``of_op(op) -> Call | None`` is the entry of an operator instance (None: no counterpart at
these attributes).

A ``Convention`` says, per draw, where torch's convention differs and what the exact value
of torch's own convention is there: ``exact(t, a, xs, vs) -> None | tuple`` receives the
inputs (numpy), the route's tangents or cotangents (None for the forward route) and returns
None where the draw does not meet the difference, else one entry per port of the route's
side (inputs for gradients, outputs otherwise): None (the rule's exact value holds at every
element), ``DIFFERS`` (torch's convention differs there, its exact value is not computed:
the row is still measured against the rule's), or an object array of the port's shape
holding, per element, the exact value of torch's convention (a Fraction, or a float for inf
and NaN; an mpmath number at 256 bits where a logarithm enters) or None (the rule's).  The
exact values are computed with rationals from format values, never from torch's results;
where the convention is a choice torch makes (the index a max pool keeps), the choice is
read from torch and the value computed exactly.
"""

from __future__ import annotations

# Table order: the elementwise entries register first, then the structured ones.
from . import torch_calls_elementwise, torch_calls_structured  # noqa: F401  (they register)
from .torch_table import TABLE, Call

# ----- operators without a counterpart ------------------------------------------------------------

NO_COUNTERPART = {
    "cbrt": "torch has no cube root (x.pow(1/3) is NaN below 0 and 1/3 is not a third)",
    "safeDiv": "no torch function: the guarded division is the caller's composition",
    "safeInv": "no torch function: the guarded reciprocal is the caller's composition",
    "safeLog": "no torch function: the guarded logarithm is the caller's composition",
    "smoothAbs": "no torch function: sqrt(x^2 + eps) is the caller's composition",
    "populationCount": "torch has no population count of integer words",
    "countLeadingZeros": "torch has no count of leading zeros",
    "mulhi": "torch has no high half of a word product",
    "smoothMaxPool": "torch has no log-sum-exp pooling",
    "hingeLoss": "torch has no binary hinge loss (hinge_embedding_loss is another function: x "
                 "for y = 1, max(0, margin - x) for y = -1)",
    "logCoshLoss": "torch has no log-cosh loss",
    "topKMask": "no torch function; its content is the tie order, which torch.topk leaves to "
                "the kernel",
    "bernoulliMask": "torch's generators draw other numbers than the counter-based SplitMix64 "
                     "draws: nothing to compare",
    "randUniform": "torch's generators draw other numbers than the counter-based SplitMix64 "
                   "draws: nothing to compare",
    "randn": "torch's generators draw other numbers than the counter-based Box-Muller draws: "
             "nothing to compare",
    "selectiveScan": "Mamba's selective scan is not part of torch (mamba_ssm's kernel)",
    "custom": "a custom node runs its own program",
}

# Operators whose calls take the format's dtype as the keyword ``d`` (conversions).
CONVERSIONS = ("cast", "bitcast", "encodeIndex", "decodeIndex")


def names() -> tuple:
    """The operators with a torch counterpart, in table order."""
    return tuple(TABLE)


def of_op(op) -> Call | None:
    """The torch entry of ``op`` (a routes Op, or an operator name), or None where torch has
    no counterpart (no entry, or ``refuses`` gives a reason at these attributes)."""
    if isinstance(op, str):
        return TABLE.get(op)
    c = TABLE.get(op.name)
    if c is None or (c.refuses is not None and c.refuses(op.attrs)):
        return None
    return c


def missing(op) -> str | None:
    """Why torch has no counterpart of the operator instance ``op``, or None."""
    c = TABLE.get(op.name)
    if c is None:
        return NO_COUNTERPART.get(op.name, f"no torch counterpart of {op.name} in the table")
    return c.refuses(op.attrs) if c.refuses is not None else None

"""The vocabulary computed from the code against the spec's table.

kernels.table.vocabulary() computes every cell from the code (routes.vocabulary_computed: the
declarations' needs, no_rule, ports and forward mode, the registered certificates, the bound
arms; the CUDA column from the kernel table).  Here it meets shared/spec/operators.tsv: every
cell is the spec's except the intended differences listed below as data, each with its
reason, and every listed difference must still be one (a stale entry fails).  The spec's
file sits beside the repository (../shared, as in CI); without it those tests skip.
"""

from __future__ import annotations

import csv
import pathlib
from dataclasses import dataclass

import pytest

from roundoff_coverage import routes
from roundoff_coverage.kernels.table import vocabulary
from roundoff_coverage.routes import ports as P
from roundoff_coverage.routes import vocabulary as V
from roundoff_coverage.routes import vocabulary_computed as VC
from roundoff_coverage.routes.attributes import choice, flag, shape
from roundoff_coverage.routes.certs import convention
from roundoff_coverage.routes.registry import define, withdraw

SPEC_TSV = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "spec" / "operators.tsv"
RULE, CUDA, GRADIENT, BOUNDS = ("rule_needs", "cuda_entry", "gradient_certificates",
                                "bound_propagations")


@dataclass(frozen=True)
class Difference:
    """A cell where the code intentionally differs from the spec: the operator, the column
    (routes.vocabulary.COLUMNS), the spec's value, the code's value, and why."""

    op: str
    column: str
    spec: str
    code: str
    reason: str


# ----- the intended differences -----------------------------------------------------------------
_CONVENTION = ("the code pins the pullback's convention (a kink, tie, guard, NaN or summation "
               "order; STYLE rule 7) with a convention certificate backed by a test; the spec "
               "registers no certificate for it")
# (operator, the spec's Gradient cell, the code's)
_CONVENTIONS = (
    ('abs', 'derivative; forward mode (algebraic)',
     'convention, derivative; forward mode (algebraic)'),
    ('sqrt', 'derivative; forward mode (algebraic)',
     'convention, derivative; forward mode (algebraic)'),
    ('pow', 'no certificate; forward mode',
     'convention; forward mode'),
    ('hypot', 'no certificate; forward mode',
     'convention; forward mode'),
    ('copysign', 'no certificate; forward mode',
     'convention; forward mode'),
    ('safeDiv', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('safeInv', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('safeLog', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('max', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('min', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('fmax', 'no certificate; forward mode',
     'convention; forward mode'),
    ('fmin', 'no certificate; forward mode',
     'convention; forward mode'),
    ('clamp', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('relu', 'algebraic, derivative; forward mode',
     'algebraic, convention, derivative; forward mode'),
    ('select', 'no certificate; forward mode',
     'convention; forward mode'),
    ('cumprod', 'no certificate; forward mode',
     'convention; forward mode'),
    ('cummax', 'no certificate; forward mode',
     'convention; forward mode'),
    ('cummin', 'no certificate; forward mode',
     'convention; forward mode'),
    ('sort', 'no certificate; forward mode',
     'convention; forward mode'),
    ('topk', 'no certificate; forward mode',
     'convention; forward mode'),
    ('gather', 'no certificate; forward mode',
     'convention; forward mode'),
    ('scatter', 'no certificate; forward mode at some attributes',
     'convention; forward mode at some attributes'),
    ('indexAt', 'no certificate; forward mode',
     'convention; forward mode'),
    ('slice', 'no certificate; forward mode',
     'convention; forward mode'),
    ('embedding', 'no certificate; forward mode',
     'convention; forward mode'),
    ('reshape', 'no certificate; forward mode',
     'convention; forward mode'),
    ('permute', 'no certificate; forward mode',
     'convention; forward mode'),
    ('broadcast', 'no certificate; forward mode',
     'convention; forward mode'),
    ('flip', 'no certificate; forward mode',
     'convention; forward mode'),
    ('pad', 'derivative; forward mode',
     'convention, derivative; forward mode'),
    ('cat', 'no certificate; forward mode',
     'convention; forward mode'),
    ('reduce', 'algebraic; forward mode',
     'algebraic, convention; forward mode'),
    ('pool', 'no certificate; forward mode',
     'convention; forward mode'),
    ('maskedSoftmax', 'no certificate; forward mode',
     'convention; forward mode'),
    ('maeLoss', 'no certificate; forward mode',
     'convention; forward mode'),
    ('huberLoss', 'no certificate; forward mode',
     'convention; forward mode'),
    ('hingeLoss', 'no certificate; forward mode',
     'convention; forward mode'),
    ('binaryCrossEntropy', 'no certificate; forward mode',
     'convention; forward mode'),
    ('dropout', 'no certificate; forward mode',
     'convention; forward mode'),
)

_EVERY_ATTRIBUTE = ("the kernel serves every attribute of the operator at the model's scalar "
                    "(kernels: Kernel.accepts); the spec's LibTorch table has entries at some "
                    "attributes only")
_KERNELS_AT_EVERY_ATTRIBUTE = ("gelu", "slice", "broadcast", "cat", "reduce", "mean", "linear",
                               "conv", "convTranspose", "pool", "smoothMaxPool", "topKMask",
                               "rfft", "irfft", "selectiveScan")

DIFFERENCES = tuple(
    [Difference(op, GRADIENT, spec, code, _CONVENTION) for op, spec, code in _CONVENTIONS]
    + [Difference(op, CUDA, "at some attributes", "yes", _EVERY_ATTRIBUTE)
       for op in _KERNELS_AT_EVERY_ATTRIBUTE]
    + [
        Difference("bitcast", GRADIENT, "no value input; forward mode at some attributes",
                   "no value input; forward mode",
                   "the code declares bitcast's zero tangent (rules.zero_tangents) at every "
                   "attribute, word to word included; the spec's rule has a forward mode at "
                   "some attributes only"),
        Difference("custom", RULE, "from its node's program (Op.customRule)", "every scalar",
                   "the registry's plain custom entry runs routes.custom.ZEROS, which reads no "
                   "capability; a node's own program is bound by routes.custom.bind"),
        Difference("custom", GRADIENT, "no certificate", "convention",
                   "the code registers the custom pullback (the caller's policy, returned as "
                   "given) as a convention certificate; the spec registers none"),
    ])


@dataclass(frozen=True)
class ColumnRule:
    """Intended differences generated by a rule: in ``column``, the code's cell is ``code``
    for every operator whose spec cell is not ``code``, for ``reason``."""

    column: str
    code: str
    reason: str

    def differences(self, spec_rows) -> tuple:
        return tuple(Difference(r.operator, self.column, getattr(r, self.column), self.code,
                                self.reason)
                     for r in spec_rows if getattr(r, self.column) != self.code)


# No rule at present: the Bounds column follows routes.bounds's arms and the registered
# enclosure certificates cell for cell (the bounds issue emptied it).
RULES: tuple = ()


def intended(spec_rows) -> dict:
    """{(operator, column): Difference}: the listed differences and those the rules give."""
    out = {}
    for d in DIFFERENCES + tuple(d for rule in RULES for d in rule.differences(spec_rows)):
        assert (d.op, d.column) not in out, f"{d.op} {d.column} is listed twice"
        out[d.op, d.column] = d
    return out


# ----- the spec's file --------------------------------------------------------------------------
def read_spec() -> tuple:
    """shared/spec/operators.tsv as routes.vocabulary.Row values."""
    with SPEC_TSV.open(newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    assert tuple(rows[0]) == V.COLUMNS, rows[0]
    return tuple(V.Row(*r) for r in rows[1:])


@pytest.fixture(scope="module")
def spec():
    if not SPEC_TSV.exists():
        pytest.skip(f"the spec's table {SPEC_TSV} is absent (a clone without ../shared)")
    return read_spec()


@pytest.fixture(scope="module")
def computed():
    return {r.operator: r for r in vocabulary()}


def test_the_embedded_spec_table_is_the_spec_file(spec):
    """routes.vocabulary.VOCABULARY (the spec's table inside the package) is the TSV."""
    assert V.VOCABULARY == spec


def test_computed_table_equals_the_spec_but_for_the_intended_differences(spec, computed):
    """Every cell of every operator computed from the code is the spec's, except the listed
    intended differences."""
    assert tuple(computed) == tuple(r.operator for r in spec)
    allowed = intended(spec)
    unexpected = [f"{r.operator} {c}: spec {getattr(r, c)!r}, code "
                  f"{getattr(computed[r.operator], c)!r}"
                  for r in spec for c in V.COLUMNS
                  if getattr(r, c) != getattr(computed[r.operator], c)
                  and (r.operator, c) not in allowed]
    assert not unexpected, "\n".join(unexpected)


def test_every_intended_difference_is_still_one(spec, computed):
    """A listed difference names the spec's cell and the code's as they are, and they
    differ: a fixed difference or a changed spec makes its entry stale."""
    by_name = {r.operator: r for r in spec}
    stale = []
    for d in intended(spec).values():
        have = (getattr(by_name[d.op], d.column), getattr(computed[d.op], d.column)) \
            if d.op in by_name and d.op in computed else None
        if have != (d.spec, d.code) or d.spec == d.code:
            stale.append(f"{d.op} {d.column}: listed spec {d.spec!r} code {d.code!r}, "
                         f"now {have!r}")
    assert not stale, "\n".join(stale)


# ----- the cells follow the code's facts ------------------------------------------------------
def test_cells_of_a_scratch_operator_follow_its_declaration():
    """A scratch operator whose facts vary with its attributes: Erf needed at mode erf only,
    no rule at exact, no forward mode at mode kinked, a convention certificate at input 1
    only (input 0 none, input 2 frozen); its kernel predicate holds at mode plain only."""
    define("scratchVocabulary", "elementwise",
           attributes=(shape(), choice("mode", ("plain", "erf", "kinked")),
                       flag("exact", False)),
           ports=lambda a: ({"x": P.value(a.shape), "y": P.value(a.shape), "c": P.frozen()},
                            {"z": P.value(a.shape)}),
           forward=lambda xp, a, x, y, c: xp.add(x, y),
           jvp=lambda xp, a, xs, ys, ts: xp.add(ts[0], ts[1]),
           needs=lambda a: "Erf" if a.mode == "erf" else None,
           no_rule=lambda a: "exact" if a.exact else None,
           no_jvp=lambda a: "a kink" if a.mode == "kinked" else None,
           certificates=(convention(f"{__name__}::scratch", "a tie", inputs=(1,)),),
           notes=("scratch",))
    try:
        row = VC.computed_row("scratchVocabulary", lambda o: o.attrs.mode == "plain")
        assert row == V.Row("elementwise", "scratchVocabulary",
                            "Erf at some attributes; no rule at some attributes",
                            "at some attributes",
                            "input 0: no certificate; input 1: convention; "
                            "forward mode at some attributes", "none")
        assert VC.cuda_cell(VC.attribute_points("scratchVocabulary"), lambda o: True) == "yes"
        assert VC.cuda_cell(VC.attribute_points("scratchVocabulary"), lambda o: False) == "no"
    finally:
        withdraw("scratchVocabulary")


def test_points_pin_the_element_at_the_model_scalar():
    """add has word and Boolean elements (no gradient, no kernel there), but its cells are
    read with the element at the model's scalar: every point has element scalar."""
    points = VC.attribute_points("add")
    assert points[0] == routes.op("add")
    assert {o.attrs.element for o in points} == {"scalar"}
    assert {o.attrs.shape for o in points} >= {(3,), (2, 3), (0,)}


def test_bounds_cell_lists_the_registered_arms_in_the_spec_order(monkeypatch):
    """An arm registered in ARMS shows in the Bounds cell, in the order checker, IBP, CROWN,
    then "; enclosure" where an enclosure certificate is registered (relu's); an operator
    without either keeps "none"."""
    monkeypatch.setitem(VC.ARMS, "checker", lambda name: False)
    monkeypatch.setitem(VC.ARMS, "CROWN", lambda name: name == "relu")
    monkeypatch.setitem(VC.ARMS, "IBP", lambda name: name in ("relu", "exp"))
    assert VC.computed_row("relu", lambda o: True).bound_propagations == \
        "IBP, CROWN; enclosure"
    assert VC.computed_row("exp", lambda o: True).bound_propagations == "IBP"
    assert VC.computed_row("tan", lambda o: True).bound_propagations == "none"


def _none(o) -> bool:
    return False


def test_forward_mode_follows_the_rule():
    """decodeIndex: no rule at a zero bound, so a forward mode at some attributes only;
    scatter: no forward mode at modes max and min (no_jvp)."""
    assert "no rule at some attributes" in VC.computed_row("decodeIndex", _none).rule_needs
    assert VC.computed_row("decodeIndex", _none).gradient_certificates == \
        "no value input; forward mode at some attributes"
    assert VC.computed_row("scatter", _none).gradient_certificates.endswith(
        "forward mode at some attributes")
    assert VC.computed_row("linear", _none).gradient_certificates == \
        "inputs 0 and 1: no certificate; input 2: algebraic; forward mode"

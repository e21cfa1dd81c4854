"""Every run kind's selection speaks the one selection protocol (engine/plan.py), and the
results file records what the protocol gives: the canonical command, the description and
the words for the reference, each from the selection that ran."""

from __future__ import annotations

import dataclasses

import pytest

from roundoff_coverage.engine import bound, measure, model_run, plan, quantizers, reference, \
    results, runner

SELECTIONS = {
    "coverage": (runner.Selection(ops=("exp",), formats=("bfloat16",)), True),
    "model": (model_run.ModelSelection(target="m.py:f", artifact="m.graph.json",
                                       artifact_hash="0" * 64, formats=("bfloat16",),
                                       modes=("nearest_even",), policies=("strict",)), True),
    "bound": (bound.BoundSelection(ops=("exp",)), True),
    "measure": (measure.Measurement(target="numpy.exp", format="bfloat16", reference="exp",
                                    arity=1, samples=8), True),
    "quantizer": (quantizers.QuantizerMeasurement(
        target="q.py:f", scheme="mxfp8_e4m3", dtype="float32", shape=(4, 32), axis=-1,
        returns="auto", samples=1, seed=0, elements=128, tensors=1), False),
}


@pytest.mark.parametrize("kind", sorted(SELECTIONS))
def test_each_selection_speaks_the_protocol(kind):
    sel, resumable = SELECTIONS[kind]
    assert isinstance(sel, plan.Selection)
    assert isinstance(sel, plan.Resumable) == resumable
    doc = results.document([], sel)
    assert doc["meta"]["command"] == sel.command()
    assert doc["meta"]["reference"] == sel.reference_text
    assert doc["meta"]["selection"] == results.clean(sel.describe())


def test_the_protocol_refuses_a_selection_without_a_command():
    @dataclasses.dataclass
    class Partial:
        seed: int = 0
        reference_text: str = "x"

        def describe(self) -> dict:
            return {}

    assert not isinstance(Partial(), plan.Selection)


def test_the_reference_words_name_the_policy_constants():
    # The words the results file carries and the numbers the runs use come from one module.
    assert runner.Selection.reference_text == reference.COVERAGE
    assert f"+ {reference.EXTRA} bits" in reference.COVERAGE
    assert f"at most {reference.MAX_PREC} bits" in reference.COVERAGE
    assert f"{reference.MAX_PREC} bits" in reference.BOUND
    assert "twice and four times" in reference.MODEL and reference.MODEL_DOUBLINGS == 2
    assert f"({reference.DD_BITS} bits" in reference.MODEL and \
        f"at most {reference.DD_PREC} bits" in reference.MODEL

"""Every operator the PyTorch capture translates aten operators into has a torch call
(kernels/torch_calls.py, ``TABLE``) or a stated reason why not (``NO_COUNTERPART``, kept
next to the table): the torch implementation then measures every node a capture makes.

Two views: the source of the translations (routes/frontends/aten*.py, and the capture
context's ``broadcast`` and ``gt`` nodes in routes/frontends/torch.py, torch_constants.py
and torch_export.py), scanned for the
operator names it applies; and the nodes of the captured test models (tests/torch_models.py)
at the attributes the capture gave them, where an entry that ``refuses`` those attributes
counts as none.  The entries themselves are checked against exact values in float64 by
tests/engine/test_torch_impl.py."""

from __future__ import annotations

import ast
import inspect

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (pip install roundoff-coverage[torch]): the "
                    "capture's tests need it")

from roundoff_coverage import routes  # noqa: E402
from roundoff_coverage.kernels import torch_calls as TC  # noqa: E402
from roundoff_coverage.routes.frontends import (aten, aten_integers, aten_lookup,  # noqa: E402
                                                aten_resample, aten_tensors,
                                                torch as capture, torch_constants)
from roundoff_coverage.routes.frontends import torch_export  # noqa: E402
from torch_models import in_float64, models, training_models  # noqa: E402


def _translated() -> set:
    """The registered operators named in the aten modules (cx.apply's first argument, the unary
    table, the binary and softmax translators' arguments) and applied by the capture
    context.  A string that names an operator elsewhere (pool's mode="max") only asks more."""
    names = set(routes.names())
    found = {n.value for table in (aten, aten_tensors, aten_integers, aten_lookup, aten_resample)
             for n in ast.walk(ast.parse(inspect.getsource(table)))
             if isinstance(n, ast.Constant) and n.value in names}
    for n in (n for module in (capture, torch_export, torch_constants)
              for n in ast.walk(ast.parse(inspect.getsource(module)))):
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "apply" and \
                n.args and isinstance(n.args[0], ast.Constant):
            found.add(n.args[0].value)
    return found


def _captured() -> dict:
    """{operator: the first captured node's Op} over the test models (eval models in
    float64, the training ones as built)."""
    seen = {}
    pairs = [in_float64(*m) for m in models().values()] + list(training_models().values())
    for model, args in pairs:
        for node in routes.from_torch(model, args).nodes:
            seen.setdefault((node.op.name, TC.missing(node.op)), node.op)
    return seen


def test_every_translated_operator_has_a_torch_call_or_a_reason():
    translated = _translated()
    assert {"linear", "conv", "attention", "broadcast", "gt"} <= translated
    neither = translated - set(TC.TABLE) - set(TC.NO_COUNTERPART)
    assert not neither, f"no torch call and no reason: {sorted(neither)}"


def test_every_captured_node_has_a_torch_call_at_its_attributes():
    captured = _captured()
    # The scan above sees every operator the captures make.
    assert {name for name, _ in captured} <= _translated()
    refused = {repr(o): why for (name, why), o in captured.items()
               if why is not None and name not in TC.NO_COUNTERPART}
    assert not refused, refused

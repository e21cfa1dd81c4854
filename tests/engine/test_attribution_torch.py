"""Closure of the attribution (engine/attribution.py) on the transformer block and the CNN of
the tests (tests/torch_models.py) in bfloat16: the block closes its output and every gradient;
the CNN its output, and its gradients once the branches that a rounding can flip (relu's
kink, which element a max pool picks) are replaced by smooth operators (tanh, average pool);
where they do not close the row says why."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from roundoff_coverage import routes  # noqa: E402
from roundoff_coverage.engine import attribution as A  # noqa: E402
from roundoff_coverage.engine import model as M  # noqa: E402
from roundoff_coverage.engine.samples import sample_inputs  # noqa: E402

import torch_models  # noqa: E402

CONFIG = M.Config("bfloat16", "nearest_even", "strict")


class Smooth(torch.nn.Module):
    """The CNN with tanh for relu and an average pool for the max pool."""

    def __init__(self, cnn):
        super().__init__()
        self.cnn, self.pool = cnn, torch.nn.AvgPool2d(2)

    def forward(self, x):
        c = self.cnn
        return c.fc(torch.flatten(self.pool(torch.tanh(c.bn(c.conv(x)))), 1))


def _wholes(model, args, samples=20):
    g = routes.from_torch(model.eval(), args)
    rows, _, _ = M.measure(g, CONFIG, sample_inputs(g, samples, 0, None), 0,
                           ("forward", "gradient"), attribution="share")
    return {r["node"]: r for r in rows
            if r["attribution"] == "propagated" and r["node_index"] is None}


def _within(row) -> int:
    return sum(abs(c - 1) <= A.CLOSURE_TOLERANCE for c in _measured(row))


def _measured(row) -> list:
    """The samples whose measured error is not 0 (an exact gradient, fc.bias's of a scalar
    cotangent summed exactly, has no ratio)."""
    return [c for c in row["closure_by_sample"] if c is not None]


def test_the_cnn_closes_forward_and_without_its_branches_its_gradients_too():
    cnn, args = torch_models.models()["cnn"]
    rows = _wholes(cnn, args)
    assert _within(rows["output:out0"]) >= 18
    flipped = [r for r in rows.values() if r["route"] == "gradient" and r["closure"] is not
               None and abs(r["closure"] - 1) > A.CLOSURE_TOLERANCE]
    assert flipped, "the relu and max pool of the CNN flip branches on some sample"
    assert all("flips a branch" in r["reason"] for r in flipped)
    smooth = _wholes(Smooth(cnn), args)
    for name, row in smooth.items():
        if row["closure"] is not None:
            assert _within(row) >= 0.9 * len(_measured(row)), name
            assert row["closure_misfit"] < 0.1, name


def test_the_transformer_block_closes_forward_and_every_parameter_gradient():
    # A pre-norm block (layer norms, multi-head attention with its softmax, GELU MLP,
    # residuals) of the tests, d 8, 2 heads, 3 tokens: smooth, so first order explains it.
    torch.manual_seed(0)
    block = torch_models.Block().eval()
    rows = _wholes(block, (torch.randn(2, 3, 8),), samples=4)
    grads = [r for r in rows.values() if r["route"] == "gradient"]
    assert len(grads) == 1 + len(list(block.parameters()))
    for name, row in rows.items():
        assert _within(row) == len(_measured(row)) == 4, name
        assert row["closure_misfit"] < 0.02, name

"""The keep-in-binary32 experiments' shortcut (routes/graph.py GraphRule.rerun, engine/model.py
_keep): evaluating again only the kept nodes and those reading what they changed gives, bit
for bit, what a whole emulated run with those nodes kept gives -- every value, cotangent and
gradient contribution -- on captured models, single nodes and groups of nodes."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.engine.samples import is_float_port, prepared, sample_inputs
from roundoff_coverage.routes.graph import GraphRule

torch = pytest.importorskip("torch")
import torch_models  # noqa: E402

BF16 = formats.get("bfloat16")


def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True) and \
        np.array_equal(np.signbit(a), np.signbit(b))


@pytest.mark.parametrize("key", ["mlp", "cnn", "transformer"])
def test_a_rerun_from_the_tape_is_the_whole_run_with_the_nodes_kept(key):
    g = routes.from_torch(*torch_models.models()[key])
    g, xs, dirs = prepared(g, BF16, sample_inputs(g, 1, 0), 0)
    emu = numerics.emulated(BF16, "nearest_even", "fp32_accumulate")
    wide = numerics.emulated("binary32", "nearest_even", "fp32_accumulate")
    rule = GraphRule(g, emu)
    inputs = [emu.asarray(a) if is_float_port(p) else a for a, p in zip(xs[0], g.inputs)]
    cots = dirs[0][0]
    tape = rule.taped(inputs, tuple(p.differentiable for p in g.inputs))
    n = len(g.nodes)
    groups = [(0,), (n // 2,), (n - 1,), tuple(range(n // 3, n // 2)), (1, n - 2)]
    for ks in groups:
        override = dict.fromkeys(ks, wide)
        whole = rule.trace(inputs, cots, None, override)
        fast = rule.rerun(tape, override, cots)
        for part in ("values", "cotangents", "contributions"):
            a, b = getattr(whole, part), getattr(fast, part)
            assert a.keys() == b.keys(), (ks, part)
            for r in a:
                if a[r] is not None or b[r] is not None:
                    assert _same(a[r], b[r]), (ks, part, r)
        # every=False (the keep experiments): the inputs' gradients alone, the same bits
        lean = rule.rerun(tape, override, cots, every=False)
        assert not lean.contributions and lean.cotangents.keys() == \
            {r for r in whole.cotangents if r.node < 0}
        assert all(_same(lean.cotangents[r], whole.cotangents[r]) for r in lean.cotangents)
    # Keeping nodes changes values (the comparisons above can fail).
    base = rule.trace(inputs, cots, None, None)
    kept = rule.rerun(tape, dict.fromkeys(range(n), wide), cots)
    assert any(not _same(base.values[r], kept.values[r]) for r in base.values
               if isinstance(base.values[r], np.ndarray) and base.values[r].dtype.kind == "f")

"""The model run's exact sweeps (engine/model.py exact_traces, engine/reference.py): the
first evaluation in double-double agrees with mpmath at 400 bits on real captured models,
and the exact values, precisions and rows a run reports are those of an mpmath-only first
evaluation; what double-double cannot hold is evaluated by mpmath."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.engine import model as M
from roundoff_coverage.engine import reference
from roundoff_coverage.engine.samples import is_float_port, prepared, sample_inputs
from roundoff_coverage.engine.sites import ROUTES, sites, value_at
from roundoff_coverage.numerics.double_double import OutOfRange
from roundoff_coverage.routes.graph import GraphRule

torch = pytest.importorskip("torch")
import torch_models  # noqa: E402

BF16 = formats.get("bfloat16")
MP = mpmath.MPContext()
MP.prec = 400


def _model(key):
    g = routes.from_torch(*torch_models.models()[key])
    g, xs, dirs = prepared(g, BF16, sample_inputs(g, 1, 0), 0)
    return g, xs, dirs


def _trace(g, bk, x, dirs):
    return GraphRule(g, bk).trace([bk.asarray(a) if is_float_port(p) else a
                                   for a, p in zip(x, g.inputs)], dirs[0], dirs[1])


@pytest.mark.parametrize("key", ["mlp", "cnn", "transformer", "transformer-by-hand"])
def test_a_double_double_sweep_is_within_2_to_the_minus_90_of_mpmath(key):
    g, xs, dirs = _model(key)
    fast = _trace(g, reference.first(reference.start(BF16)), xs[0], dirs[0])
    ref = numerics.reference(400)
    slow = _trace(g, ref, xs[0], dirs[0])
    pairs = []
    for site in sites(g, ROUTES):
        a, b = value_at(fast, site), value_at(slow, site)
        if isinstance(a, np.ndarray) and a.dtype.names is not None:
            pairs.append((site.route, a, np.asarray(b, dtype=object).reshape(-1)))
    # Errors relative to the largest value of the route: a tensor that cancels to near 0
    # (a gradient softmax ignores) keeps the absolute error of the terms it came from.
    scale = {}
    for route, _, exact in pairs:
        scale[route] = max([scale.get(route, 0)] + [abs(MP.mpf(v)) for v in exact])
    for route, a, exact in pairs:
        for h, lo, e in zip(a["hi"].reshape(-1).tolist(), a["lo"].reshape(-1).tolist(),
                            exact.tolist()):
            assert abs(MP.mpf(h) + MP.mpf(lo) - MP.mpf(e)) <= scale[route] * MP.mpf(2) ** -90
    checked = len(pairs)
    assert checked >= len(g.nodes)


@pytest.mark.parametrize("key", ["transformer", "transformer-causal", "cnn"])
def test_the_exact_values_and_precisions_are_mpmaths(key, monkeypatch):
    g, xs, dirs = _model(key)
    used = []
    first = reference.first
    monkeypatch.setattr(reference, "first", lambda p: used.append(p) or first(p))
    fast, fast_precs, fast_moving = M.exact_traces(g, BF16, xs, dirs, True, True)
    monkeypatch.setattr(reference, "first", lambda p: None)
    slow, slow_precs, slow_moving = M.exact_traces(g, BF16, xs, dirs, True, True)
    assert used == [reference.start(BF16)]
    assert fast_precs == slow_precs and fast_moving == slow_moving
    for site in sites(g, ROUTES):
        a, b = value_at(fast[0], site), value_at(slow[0], site)
        assert type(a) is type(b)
        if a is not None:
            assert np.array_equal(np.asarray(a, dtype=object), np.asarray(b, dtype=object))


def test_a_sweep_double_double_cannot_hold_is_mpmaths():
    # exp(800) = 2**1154.2: finite for mpmath, beyond double-double (and binary64).
    g = routes.Graph(x=routes.ports.value((3,)))
    g.output(g.apply(routes.op("exp", shape=(3,)), g.input("x"), name="exp"))
    xs = [[np.array([1.0, 400.0, 800.0])]]
    g, xs, dirs = prepared(g, formats.get("binary32"), xs, 0)
    with pytest.raises(OutOfRange):
        _trace(g, numerics.double_double(), xs[0], dirs[0])
    traces, precs, _ = M.exact_traces(g, formats.get("binary32"), xs, dirs, True, False)
    y = np.asarray(value_at(traces[0], sites(g, ("forward",))[0]), dtype=object)
    assert abs(MP.mpf(y[2]) - MP.exp(800)) <= MP.exp(800) * MP.mpf(2) ** -170
    assert precs == [2 * reference.start(formats.get("binary32"))]

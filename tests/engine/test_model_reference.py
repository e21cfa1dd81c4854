"""The model run's exact sweeps (engine/model.py exact_traces, engine/reference.py): the
double-double sweeps agree with mpmath at 400 bits on real captured models (the one rounded
to the start precision errs as mpmath at that precision does), the values a run settles on
are within 2**-90 of those of mpmath's sweeps alone, with the same sites still moving; what
double-double cannot hold is evaluated by mpmath.  Every node alone on its rounded reads
(the local errors' exact values) in double-double agrees with mpmath at 400 bits, a node
double-double cannot evaluate is mpmath's; the compact copies the rows and the rounded reads
take are the exact values' nearest binary64 numbers and rests (exact rationals)."""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.engine import model as M
from roundoff_coverage.engine import reference
from roundoff_coverage.engine.samples import is_float_port, prepared, sample_inputs
from roundoff_coverage.engine.sites import ROUTES, compact_of, sites, value_at
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
    fast = _trace(g, reference.sweep(BF16, reference.DD_BITS), xs[0], dirs[0])
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


def _mpmath_only(monkeypatch):
    """The model run's exact sweeps in mpmath alone, doubling from the start precision (the
    code before the double-double sweeps)."""
    monkeypatch.setattr(reference, "sweep", lambda fmt, prec: None)
    monkeypatch.setattr(reference, "ladder", lambda fmt: [reference.start(fmt) << k for k in
                                                          (1, 2)])


@pytest.mark.parametrize("key", ["transformer", "transformer-causal", "cnn"])
def test_the_settled_values_are_within_2_to_the_minus_90_of_mpmaths(key, monkeypatch):
    # The ladder's double-double sweeps (72 bits, then 106) against mpmath alone (72, 144,
    # 288): the same sites still moving, and every reported value within 2**-90 of the
    # route's scale of mpmath's; the transformers settle at the double-double sweep, the
    # CNN (whose first comparison moves) at mpmath's 144 bits, as without it.
    g, xs, dirs = _model(key)
    used = []
    sweep = reference.sweep
    monkeypatch.setattr(reference, "sweep", lambda f, p: used.append(p) or sweep(f, p))
    fast, fast_precs, fast_moving, _ = M.exact_traces(g, BF16, xs, dirs, True, True)
    assert used[:2] == [reference.start(BF16), reference.DD_BITS]
    _mpmath_only(monkeypatch)
    slow, slow_precs, slow_moving, _ = M.exact_traces(g, BF16, xs, dirs, True, True)
    assert fast_moving == slow_moving
    assert fast_precs == ([288] if key == "cnn" else [reference.DD_BITS])
    assert slow_precs == ([288] if key == "cnn" else [144])
    scale = {}
    for site in sites(g, ROUTES):
        b = value_at(slow[0], site)
        if b is not None and np.asarray(b).dtype.kind not in "biu":
            scale[site.route] = max([scale.get(site.route, MP.mpf(0))] + [
                abs(MP.mpf(v)) for v in np.asarray(b, dtype=object).reshape(-1).tolist()
                if MP.isfinite(v)])
    for site in sites(g, ROUTES):
        a, b = value_at(fast[0], site), value_at(slow[0], site)
        assert (a is None) == (b is None)
        if a is None or np.asarray(b).dtype.kind in "biu":
            continue
        for u, v in zip(np.asarray(a, dtype=object).reshape(-1).tolist(),
                        np.asarray(b, dtype=object).reshape(-1).tolist()):
            if not MP.isfinite(v):
                assert MP.mpf(u) == MP.mpf(v) or (MP.isnan(u) and MP.isnan(v))
            else:
                assert abs(MP.mpf(u) - MP.mpf(v)) <= scale[site.route] * MP.mpf(2) ** -90


def test_the_rounded_double_double_sweep_errs_as_mpmath_at_its_precision():
    # double_double(72): every result rounded to 72 bits, so a sweep errs by about 2**-72
    # per operation (mpmath at 72 bits does too); full double-double by about 2**-100.
    g, xs, dirs = _model("transformer")
    exact = _trace(g, numerics.reference(400), xs[0], dirs[0])
    worst = {}
    for name, bk in (("72", numerics.double_double(72)), ("mp72", numerics.reference(72)),
                     ("dd", numerics.double_double())):
        tr = _trace(g, bk, xs[0], dirs[0])
        for site in sites(g, ("forward",)):
            a, b = value_at(tr, site), value_at(exact, site)
            if a is None or np.asarray(b).dtype.kind in "biu":
                continue
            a = _values(a)
            b = np.asarray(b, dtype=object).reshape(-1).tolist()
            top = max([MP.mpf(0)] + [abs(MP.mpf(v)) for v in b])
            for u, v in zip(a, b):
                worst[name] = max(worst.get(name, MP.mpf(0)), abs(MP.mpf(u) - MP.mpf(v)) / top)
    assert MP.mpf(2) ** -80 < worst["72"] <= MP.mpf(2) ** -60
    assert worst["mp72"] / 2 ** 8 <= worst["72"] <= worst["mp72"] * 2 ** 8
    assert worst["dd"] <= MP.mpf(2) ** -90


def _values(a) -> list:
    """An exact sweep's array as exact values (double-double pairs summed)."""
    arr = np.asarray(a)
    if arr.dtype.names is not None:
        return [MP.mpf(h) + MP.mpf(lo) for h, lo in zip(arr["hi"].reshape(-1).tolist(),
                                                         arr["lo"].reshape(-1).tolist())]
    return np.asarray(a, dtype=object).reshape(-1).tolist()


def test_a_sweep_double_double_cannot_hold_is_mpmaths():
    # exp(800) = 2**1154.2: finite for mpmath, beyond double-double (and binary64).
    g = routes.Graph(x=routes.ports.value((3,)))
    g.output(g.apply(routes.op("exp", shape=(3,)), g.input("x"), name="exp"))
    xs = [[np.array([1.0, 400.0, 800.0])]]
    g, xs, dirs = prepared(g, formats.get("binary32"), xs, 0)
    with pytest.raises(OutOfRange):
        _trace(g, numerics.double_double(), xs[0], dirs[0])
    traces, precs, _, _ = M.exact_traces(g, formats.get("binary32"), xs, dirs, True, False)
    y = np.asarray(value_at(traces[0], sites(g, ("forward",))[0]), dtype=object)
    assert abs(MP.mpf(y[2]) - MP.exp(800)) <= MP.exp(800) * MP.mpf(2) ** -100
    assert precs == [reference.DD_BITS]          # mpmath at 88, then at 106 bits


def _exact(v) -> Fraction:
    """An mpf or float as an exact rational."""
    m = getattr(v, "_mpf_", None)
    if m is None:
        return Fraction(float(v))
    sign, man, exp, _ = m
    return (-1) ** sign * Fraction(man) * Fraction(2) ** exp


@pytest.mark.parametrize("key", ["transformer", "cnn"])
def test_the_compact_copies_are_the_nearest_binary64_and_the_rest(key):
    # Python's float(Fraction) rounds a rational correctly to nearest (ties to even).
    g, xs, dirs = _model(key)
    traces, _, _, pieces = M.exact_traces(g, BF16, xs, dirs, True, True)
    seen = 0
    for site in sites(g, ROUTES):
        a = value_at(traces[0], site)
        c = compact_of(pieces[0], a)
        if c is None:
            continue
        for v, h, lo in zip(np.asarray(a, dtype=object).reshape(-1).tolist(),
                            c.hi.reshape(-1).tolist(), c.lo.reshape(-1).tolist()):
            x = _exact(v)
            assert h == float(x) and lo == float(x - Fraction(h))
            seen += 1
    assert seen > 1000


@pytest.mark.parametrize("key", ["transformer", "transformer-causal", "cnn"])
def test_nodes_alone_in_double_double_are_within_2_to_the_minus_90_of_mpmath(key,
                                                                           monkeypatch):
    g, xs, dirs = _model(key)
    traces, precs, _, pieces = M.exact_traces(g, BF16, xs, dirs, True, True)
    # Double-double where the graph settled at its second sweep (the CNN's needs a third:
    # mpmath at 288 bits there); checked here on every model.
    assert (reference.alone(BF16, max(precs)) is None) == (max(precs) > 144)
    monkeypatch.setattr(reference, "alone", lambda fmt, prec: numerics.double_double())
    reads = [M._rounded(g, BF16, tr, True, True, p) for tr, p in zip(traces, pieces)]
    # The reads rounded from the compact copies (round to odd at 53 bits, then to
    # bfloat16) are those rounded from the exact mpf values, bit for bit.
    assert all(_same_reads(a, b) for a, b in zip(
        reads, [M._rounded(g, BF16, tr, True, True) for tr in traces]))
    fast, copies = M._local_exact(g, reads, BF16, max(precs))
    slow = GraphRule(g, numerics.reference(400)).alone(reads[0])
    checked = 0
    for kind in ("values", "contributions", "tangents"):
        got, want = getattr(fast[0], kind), getattr(slow, kind)
        assert set(got) == set(want)
        for key_, b in want.items():
            if b is None or np.asarray(b).dtype.kind in "biu":
                continue
            a = np.asarray(got[key_], dtype=object).reshape(-1)
            b = np.asarray(b, dtype=object).reshape(-1)
            scale = max([MP.mpf(0)] + [abs(MP.mpf(v)) for v in b if MP.isfinite(v)])
            for u, v in zip(a.tolist(), b.tolist()):
                if not MP.isfinite(v):                  # a causal mask's -inf
                    assert MP.mpf(u) == MP.mpf(v) or (MP.isnan(u) and MP.isnan(v))
                    continue
                assert abs(MP.mpf(u) - MP.mpf(v)) <= scale * MP.mpf(2) ** -90
            c = compact_of(copies[0], got[key_])
            if c is not None:
                assert [float(_exact(v)) for v in a.tolist()] == c.hi.reshape(-1).tolist()
            checked += 1
    assert checked >= len(g.nodes)


def _same_reads(a, b) -> bool:
    """Two _rounded results equal bit for bit (signed zeros and NaN included)."""
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_reads(x, y) for x, y in zip(a, b))
    if a is None or isinstance(a, bool):
        return a is b or a == b
    x, y = np.asarray(a), np.asarray(b)
    if x.dtype.kind != "f":
        return np.array_equal(x, y)
    return x.shape == y.shape and np.array_equal(x.view(np.int64) if x.dtype == np.float64
                                                 else x, y.view(np.int64)
                                                 if y.dtype == np.float64 else y)


def test_a_node_double_double_cannot_hold_is_mpmaths():
    # exp(800) = 2**1154.2: the node alone on that read is mpmath's (GraphRule.alone's
    # fallback), the other node double-double's.
    g = routes.Graph(x=routes.ports.value((3,)))
    y = g.apply(routes.op("exp", shape=(3,)), g.input("x"), name="exp")
    g.output(g.apply(routes.op("neg", shape=(3,)), y, name="neg"))
    reads = [([np.array([1.0, 400.0, 800.0])], (False,), None, None),
             ([np.array([1.0, 2.0, 3.0])], (False,), None, None)]
    with pytest.raises(OutOfRange):
        numerics.double_double().exp(np.array([800.0]))
    traces, copies = M._local_exact(g, [reads], BF16, 2 * reference.start(BF16))
    e = np.asarray(traces[0].values[routes.graph.Ref(0, 0)], dtype=object)
    assert abs(MP.mpf(e[2]) - MP.exp(800)) <= MP.exp(800) * MP.mpf(2) ** -140
    assert compact_of(copies[0], traces[0].values[routes.graph.Ref(0, 0)]) is None
    n = np.asarray(traces[0].values[routes.graph.Ref(1, 0)], dtype=object)
    assert [float(v) for v in n.tolist()] == [-1.0, -2.0, -3.0]
    assert compact_of(copies[0], traces[0].values[routes.graph.Ref(1, 0)]) is not None
    # Without a fallback, the node double-double cannot evaluate is left out.
    alone = GraphRule(g, numerics.double_double()).alone(reads)
    assert routes.graph.Ref(0, 0) not in alone.values and routes.graph.Ref(1, 0) in alone.values

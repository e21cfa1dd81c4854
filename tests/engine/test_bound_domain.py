"""Roundoff over a domain (routes.bounds.domain, routes.bounds.tracking) and
``roundoff-coverage bound``: the bound holds at every point of the box, subdivision only
tightens it, degraded implementations exceed it.

Oracles are independent of the bound: computed values from numerics.emulated, exact values
from the rule under numerics.reference at 200 bits (mpmath), or exact rationals for sums
(Fractions of the binary64 inputs), errors in ulps by numerics.metrics.  Points: the
corners of the box and points drawn uniformly in it, rounded into the format; for unary
operators every format value of the box.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.numerics import metrics
from roundoff_coverage.engine import bound as B
from roundoff_coverage.engine import results
from roundoff_coverage.routes.bounds import domain_bound
from roundoff_coverage.routes.bounds.tracking import TrackingBackend
from conftest import ERROR, degrade_exp, run_cli

REFERENCE = numerics.reference(200)
# The exact values at 200 bits are within 2**-190 relative of the real ones: far below this
# slack in ulps (relative and absolute) of the measured error.
SLACK = 2.0 ** -40

# (operator, attributes, box, routes, elementwise): small instances.
CASES = [
    ("exp", {}, (-4.0, 4.0), ("forward", "tangent", "gradient"), True),
    ("sigmoid", {}, (-4.0, 4.0), ("forward", "tangent", "gradient"), True),
    ("softmax", {}, (-4.0, 4.0), ("forward", "tangent", "gradient"), False),
    ("matmul", {"x_shape": (2, 3), "y_shape": (3, 2)}, (0.5, 2.0), ("forward", "gradient"),
     False),
    ("reduce", {"shape": (2, 3), "op": "sum", "axes": (1,)}, (0.5, 2.0),
     ("forward", "tangent"), False),
]
FORMATS = ("bfloat16", "binary16")


def _params():
    return [pytest.param(name, attrs, box, route, ew, fmt,
                         id=f"{name}-{route}-{fmt}")
            for name, attrs, box, rts, ew in CASES for route in rts for fmt in FORMATS]


def _fixed(o, fmt, seed=0):
    """Tangents and cotangents: standard normal values rounded into the format."""
    rng = np.random.default_rng(seed)
    ts = tuple(formats.round_to(rng.standard_normal(p.shape), fmt) if p.differentiable
               else None for p in o.inputs)
    cs = tuple(formats.round_to(rng.standard_normal(p.shape), fmt) if p.differentiable
               else None for p in o.outputs)
    return ts, cs


def _points(o, box, fmt, n, rng):
    """Inputs of o: every corner of the box for up to 6 entries (random corners beyond),
    then n uniform points rounded into the format (inside the box: its ends are format
    values)."""
    lo, hi = box
    shapes = [p.shape for p in o.inputs]
    size = sum(int(np.prod(s, dtype=np.int64)) for s in shapes)
    if size <= 6:
        corners = [np.array([(c >> i) & 1 for i in range(size)]) for c in range(2 ** size)]
    else:
        corners = [np.zeros(size, int), np.ones(size, int)] + \
            [rng.integers(0, 2, size) for _ in range(30)]
    flat = [np.where(c == 1, hi, lo).astype(np.float64) for c in corners]
    flat += [np.clip(formats.round_to(rng.uniform(lo, hi, size), fmt), lo, hi)
             for _ in range(n)]
    out = []
    for v in flat:
        xs, at = [], 0
        for s in shapes:
            k = int(np.prod(s, dtype=np.int64))
            xs.append(v[at:at + k].reshape(s))
            at += k
        out.append(tuple(xs))
    return out


def _measured(o, route, xs, ts, cs, fmt, emulated=None):
    """|ulp error| per measured port (flattened) of the emulated route at inputs xs."""
    em = o.rule(emulated or numerics.emulated(fmt))
    got = em.routes(xs, [route], ts, cs)[route]
    exact = o.rule(REFERENCE).routes(xs, [route], ts, cs)[route]
    return got, exact


def _check_holds(o, route, bound, points, ts, cs, fmt, emulated=None):
    """(points measured, largest |error| / bound, points above the bound)."""
    f = formats.get(fmt)
    worst, over = 0.0, 0
    for xs in points:
        got, exact = _measured(o, route, xs, ts, cs, fmt, emulated)
        for name, u in zip(bound.ports, bound.ulps):
            i = (o.output_names if route != "gradient" else o.input_names).index(name)
            err = np.abs(metrics.ulp_error(np.asarray(got[i], dtype=np.float64),
                                           np.asarray(exact[i], dtype=object), f))
            b = np.asarray(u, dtype=np.float64)
            assert not np.isnan(err).any()
            over += int((err > b * (1 + SLACK) + SLACK).any())
            ok = np.isfinite(b) & (b > 0)
            if ok.any():
                worst = max(worst, float((err[ok] / b[ok]).max()))
    return len(points), worst, over


@pytest.mark.parametrize("name,attrs,box,route,ew,fmt", _params())
def test_domain_bound_holds_at_corners_and_random_points(name, attrs, box, route, ew, fmt):
    o = routes.op(name, **attrs)
    ts, cs = _fixed(o, fmt)
    lows = [np.full(p.shape, box[0]) for p in o.inputs]
    highs = [np.full(p.shape, box[1]) for p in o.inputs]
    b = domain_bound(o, lows, highs, fmt, route=route, budget=16, tangents=ts,
                     cotangents=cs, elementwise=ew)
    assert b.pieces <= 16 and all(np.shape(u) == p.shape for u, p in zip(
        b.ulps, [dict(zip(o.output_names + o.input_names, o.outputs + o.inputs))[n]
                 for n in b.ports]))
    n, worst, over = _check_holds(o, route, b, _points(o, box, fmt, 40, np.random.default_rng(1)),
                                  ts, cs, fmt)
    assert over == 0, (name, route, fmt, worst)


@pytest.mark.parametrize("name,box", [("exp", (-4.0, 4.0)), ("sigmoid", (-4.0, 4.0)),
                                      ("tanh", (0.25, 4.0)), ("log", (0.5, 4.0)),
                                      ("sqrt", (0.0, 4.0)), ("erf", (-2.0, 2.0))])
def test_domain_bound_is_at_least_the_exhaustive_maximum(name, box):
    """Every bfloat16 value of the box, exactly measured: bound >= exhaustive max, and the
    bound is not far above it (ratio bound / max recorded in the README's table)."""
    fmt = formats.get("bfloat16")
    o = routes.op(name)
    b = domain_bound(o, [np.full(3, box[0])], [np.full(3, box[1])], fmt, budget=256,
                     elementwise=True)
    v = formats.values(fmt)
    v = v[(v >= box[0]) & (v <= box[1])]
    big = o.replace(shape=(v.size,))
    (got,) = big.rule(numerics.emulated(fmt)).forward([v])
    (exact,) = big.rule(numerics.reference(100)).forward([v])
    err = np.abs(metrics.ulp_error(got, exact, fmt))
    assert err.max() <= b.worst() * (1 + SLACK) + SLACK
    assert b.worst() <= 2.5 * max(err.max(), 0.5)


@pytest.mark.parametrize("name,box,ew,route,strict", [
    ("sigmoid", (-4.0, 4.0), True, "forward", True),
    ("tanh", (-4.0, 4.0), True, "forward", True),
    ("exp", (-4.0, 4.0), True, "gradient", True),
    # softmax's bound is the worst-case sum of each step's rounding (relative errors): the
    # same on any piece whose values keep their binades, so pieces do not tighten it.
    ("softmax", (-2.0, 2.0), False, "forward", False),
])
def test_subdivision_never_loosens_the_bound(name, box, ew, route, strict):
    o = routes.op(name)
    ts, cs = _fixed(o, "bfloat16")
    lows, highs = [np.full(3, box[0])], [np.full(3, box[1])]
    one, many = (domain_bound(o, lows, highs, "bfloat16", route=route, budget=k,
                              tangents=ts, cotangents=cs, elementwise=ew)
                 for k in (1, 64))
    assert all((m <= u).all() for m, u in zip(many.ulps, one.ulps))
    assert many.worst() < one.worst() or not strict


def test_pieces_split_at_zero_and_along_binades_reach_the_small_values():
    """tanh over [-4, 4]: its values near 0 span every binade down to the subnormals, where
    a bound in ulps of the least |exact| of a piece is huge; pieces split at 0 and near
    geometric middles bring it to a few ulps."""
    o = routes.op("tanh")
    b = domain_bound(o, [np.full(3, -4.0)], [np.full(3, 4.0)], "bfloat16", budget=256,
                     elementwise=True)
    assert b.worst() <= 2.0


def test_a_point_box_gives_the_error_itself():
    """On a box of one point the enclosures are the computed and the exact value: the
    bound is the measured error, to binary64 rounding."""
    o = routes.op("softmax")
    fmt = formats.get("bfloat16")
    x = np.array([1.09375, -1.84375, -3.671875])
    b = domain_bound(o, [x], [x], fmt)
    (c,) = o.rule(numerics.emulated(fmt)).forward([x])
    (e,) = o.rule(REFERENCE).forward([x])
    err = np.abs(metrics.ulp_error(c, e, fmt))
    # Equal but for the 2**-39 relative margin of numpy's trusted libm (numerics.bounding).
    assert np.allclose(b.ulps[0], err, rtol=1e-7, atol=1e-9) and err.max() > 2
    assert (b.ulps[0] >= err).all()


# ----- degraded implementations exceed the bound ----------------------------------------------

def test_an_exp_with_three_bits_fewer_exceeds_the_bound(monkeypatch):
    fmt = formats.get("bfloat16")
    coarse = formats.BinaryFormat(8, 4)             # bfloat16 has 7 fraction bits
    o = routes.op("exp")
    b = domain_bound(o, [np.full(3, -4.0)], [np.full(3, 4.0)], fmt, budget=8,
                     elementwise=True)
    real = numerics.emulated(fmt)
    exp = real.exp
    bad = numerics.emulated(fmt)
    bad.exp = lambda x: bad.asarray(formats.round_to(exp(x), coarse))
    points = _points(o, (-4.0, 4.0), fmt, 60, np.random.default_rng(2))
    assert _check_holds(o, "forward", b, points, None, None, fmt)[2] == 0
    assert _check_holds(o, "forward", b, points, None, None, fmt, bad)[2] > 5


def test_a_sum_accumulated_in_bfloat16_exceeds_the_binary32_accumulation_bound():
    """reduce (sum of 64) under fp32_accumulate: bounded by about an ulp over the whole box;
    an implementation that keeps its running sums in bfloat16 exceeds it (exact sums as
    rationals of the binary64 inputs)."""
    fmt = formats.get("bfloat16")
    o = routes.op("reduce", shape=(1, 64), op="sum", axes=(1,))
    policy = numerics.preset("fp32_accumulate", fmt)
    b = domain_bound(o, [np.full((1, 64), 0.5)], [np.full((1, 64), 2.0)], fmt, policy=policy)
    assert b.worst() <= 2.0
    rng = np.random.default_rng(3)
    right = numerics.emulated(fmt, policy=policy)
    wrong = numerics.emulated(fmt, policy="strict")
    over = {"right": 0, "wrong": 0}
    for _ in range(40):
        x = formats.round_to(rng.uniform(0.5, 2.0, (1, 64)), fmt)
        exact = sum(Fraction(float(v)) for v in x.reshape(-1))
        for key, bk in (("right", right), ("wrong", wrong)):
            (y,) = o.rule(bk).forward([x])
            err = abs(Fraction(float(y[0])) - exact) / Fraction(float(
                metrics_ulp(exact, fmt)))
            over[key] += err > Fraction(float(b.ulps[0][0]))
    assert over["right"] == 0 and over["wrong"] > 10


def metrics_ulp(x, fmt):
    """numerics.metrics' ulp of a positive rational below the format's top binade."""
    return formats.ulp(np.array([float(x)]), fmt)[0] if float(x) != 0 else 2.0 ** fmt.qmin


def test_the_tracking_backend_keeps_the_error_of_x_times_x_a_square():
    """x * x of one array is a square (never negative), so a variance of a box is bounded
    where the product of two independent points would reach below 0."""
    bk = TrackingBackend("bfloat16")
    x = TrackingBackend.box(np.array([-1.0]), np.array([1.0]))
    e, c, d, r = TrackingBackend.parts(bk.multiply(x, x))
    assert e[0][0] == 0.0 and c[0][0] == 0.0
    e2, _, _, _ = TrackingBackend.parts(bk.multiply(x, TrackingBackend.box(
        np.array([-1.0]), np.array([1.0]))))
    assert e2[0][0] < 0


# ----- the run and the command line -------------------------------------------------------------

def test_the_run_counts_violations_of_a_degraded_exp(monkeypatch):
    sel = B.BoundSelection(ops=("exp",), box=(-4.0, 4.0), routes=("forward",), budget=8,
                           samples=30)
    (task,) = B.plan(sel)
    (good,) = B.evaluate(task, sel.box, sel.budget)
    assert good.row["status"] == "ok" and good.violations == 0
    assert good.row["max_ulp"] <= good.row["domain_bound"] <= 1.0 + 1e-6
    degrade_exp(monkeypatch)
    (bad,) = B.evaluate(task, sel.box, sel.budget)
    assert bad.violations > 0 and bad.row["violations"] == bad.violations
    assert bad.row["max_ulp"] > bad.row["domain_bound"]


def test_bound_prints_rows_and_writes_a_results_file(capsys, tmp_path):
    out = tmp_path / "b.json"
    status, text, err = run_cli(capsys, "bound", "--ops", "softmax,exp", "--box=-4,4",
                                "--format", "bfloat16", "--samples", "20", "--budget", "8",
                                "--routes", "forward,gradient", "--out", str(out), "--quiet")
    assert status == 0 and err == ""
    lines = text.splitlines()
    assert lines[0].split()[:12] == ["op", "instance", "route", "port", "format", "mode",
                                     "policy", "bound_ulp", "sampled_max_ulp", "max/bound",
                                     "samples", "pieces"]
    doc = results.check(results.read(str(out)), str(out))
    rows = doc["rows"]
    assert len(rows) == 4 and {r["op"] for r in rows} == {"softmax", "exp"}
    for r in rows:
        assert r["box"] == [-4.0, 4.0] and r["status"] == "ok" and r["violations"] == 0
        assert results.number(r["domain_bound"]) >= r["max_ulp"]
    fwd = next(r for r in rows if r["op"] == "exp" and r["route"] == "forward")
    assert fwd["domain_bound"] <= 1.0 + 1e-6 and fwd["samples"] == 3 * 22
    assert doc["meta"]["selection"]["box"] == [-4.0, 4.0]
    assert "domain_bound" in results.load(str(out)).columns
    assert run_cli(capsys, "gate", "--baseline", str(out), str(out))[0] == 0
    assert run_cli(capsys, "report", str(out), "--out", str(tmp_path / "html"))[0] == 0


def test_bound_exits_1_and_says_so_on_a_violation(capsys, tmp_path, monkeypatch):
    degrade_exp(monkeypatch)
    status, _, err = run_cli(capsys, "bound", "--ops", "exp", "--box=-4,4", "--samples", "30",
                             "--budget", "8", "--routes", "forward",
                             "--out", str(tmp_path / "b.json"))
    assert status == 1 and "VIOLATION: exp forward y bfloat16" in err


@pytest.mark.parametrize("argv,fragment", [
    (("--ops", "exp", "--box=4,-4"), "--box '4,-4': LO 4.0 exceeds HI -4.0"),
    (("--ops", "exp", "--box=a,b"), "--box 'a,b': LO and HI must be numbers"),
    (("--ops", "exp", "--box=1"), "--box '1': give LO,HI"),
    (("--ops", "exp", "--box=nan,1"), "must be finite"),
    (("--ops", "expp", "--box=-1,1"), "unknown operator 'expp' (close matches: exp"),
    (("--ops", "argmax", "--box=-1,1"), "--ops: argmax has no IBP arm"),
    (("--ops", "exp", "--box=1e300,1e301"), "holds no finite value of bfloat16"),
    (("--ops", "exp", "--box=-1,1", "--format", "nvfp4"), "element formats that fit"),
    (("--ops", "exp", "--box=-1,1", "--budget", "0"), "--budget must be from 1"),
    (("--ops", "exp", "--box=-1,1", "--routes", "sideways"), "unknown route 'sideways'"),
    (("--ops", "exp", "--box=-1,1", "--policies", "fp8_recipe"), "bound takes element formats"),
    (("--ops", "exp", "--box=-1,1", "--jobs", "0"), "--jobs must be >= 1"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, fragment, tmp_path):
    status, out, err = run_cli(capsys, "bound", *argv, "--out", str(tmp_path / "b.json"))
    lines = err.splitlines()
    assert status == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith(ERROR) and fragment in lines[0], lines[0]
    if "IBP arm" in fragment:
        assert "operators with one: add, sub, mul" in lines[0]


def test_an_interrupted_bound_run_resumes_where_it_stopped(capsys, tmp_path, monkeypatch):
    # Ctrl-C during the second task: exit 130, the first task's rows kept in the checkpoint
    # and the command to resume named; --resume computes only the rest, and the rows equal
    # those of a run that was never interrupted.
    argv = ("bound", "--ops", "exp,mul,sigmoid", "--box=-2,2", "--samples", "10", "--budget",
            "4", "--routes", "forward", "--jobs", "1", "--quiet")
    status, _, _ = run_cli(capsys, *argv, "--out", str(tmp_path / "whole.json"))
    assert status == 0
    whole = results.read(str(tmp_path / "whole.json"))["rows"]
    real, calls, stop = B.evaluate, [], [True]

    def stopping(task, box, budget):
        calls.append(task.op)
        if stop[0] and len(calls) == 2:
            raise KeyboardInterrupt
        return real(task, box, budget)
    monkeypatch.setattr(B, "evaluate", stopping)
    out = tmp_path / "b.json"
    status, _, err = run_cli(capsys, *argv, "--out", str(out))
    assert status == 130 and "1 of 3 tasks kept" in err and "rerun with --resume" in err
    assert not out.exists() and (tmp_path / "b.json.partial.jsonl").exists()
    calls.clear()
    stop[0] = False
    status, _, _ = run_cli(capsys, *argv, "--out", str(out), "--resume")
    assert status == 0 and calls == ["mul", "sigmoid"]
    assert results.read(str(out))["rows"] == whole
    assert not (tmp_path / "b.json.partial.jsonl").exists()
    # a checkpoint of another bound run is refused in one line
    calls.clear()
    stop[0] = True
    assert run_cli(capsys, *argv, "--out", str(out))[0] == 130      # interrupted again
    status, _, err = run_cli(capsys, *argv[:3], "--box=-3,3", *argv[4:], "--out", str(out),
                             "--resume")
    assert status == 2 and len(err.splitlines()) == 1 and "checkpoint" in err


def test_run_domain_bounds_cover_the_ordinary_draws(tmp_path):
    # run --domain-bounds: every emulated forward row gets the bound over the box of its
    # ordinary draws; those draws lie in the box, so their measured maximum (by_kind) can
    # never exceed it.  Without the flag the rows have no domain_bound.
    from roundoff_coverage.engine import runner
    path = tmp_path / "db.json"
    sel = runner.Selection(ops=("exp", "sigmoid", "softmax", "matmul", "reduce"),
                           formats=("bfloat16", "binary16"), routes=("forward",), draws=3,
                           domain_bounds=True)
    runner.run(sel, str(path), jobs=1, progress=False)
    doc = json.loads(path.read_text())
    assert doc["meta"]["selection"]["domain_bounds"] is True
    bounded = [r for r in doc["rows"] if r["status"] == "ok" and r["domain_bound"] is not None]
    assert len(bounded) >= 20
    for r in bounded:
        measured = r["by_kind"]["ordinary"]["max_ulp"]
        assert measured <= r["domain_bound"] * (1 + 1e-9) + 1e-12, (r["op"], r["instance"])
        lo, hi = r["box"]
        assert lo <= hi
    plain = tmp_path / "plain.json"
    runner.run(runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward",),
                                draws=1), str(plain), jobs=1, progress=False)
    assert all(r["domain_bound"] is None for r in json.loads(plain.read_text())["rows"])

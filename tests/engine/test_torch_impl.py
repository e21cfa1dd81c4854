"""PyTorch's own kernels as implementations (engine/implementations/torch.py,
kernels/torch_calls.py).

Oracles, independent of the code under test:
- every operator of the torch table, at each example, in float64: torch's result against the
  rule evaluated under numerics.reference(200) on the same inputs (an independent framework
  meeting the mpmath reference; numerics.native("binary64") where the reference lacks the
  capability), forward and gradient, through the implementation's own evaluation path --
  where the table declares a convention, against the exact value of torch's convention;
- known answers of torch's bfloat16 CPU kernels computed here with rationals (Fraction),
  which show the float32 accumulation inside them: sum, softmax, layer norm.

Tolerance of the float64 comparison: |torch - exact| <= 2**-30 (|exact| + s), s the largest
|exact| of the port in the draw (normwise: torch's float64 kernels reorder sums and take other
formulas, so cancellation costs relative accuracy in small entries, never 2**-30 of the
port's scale).
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (pip install roundoff-coverage[torch]): the torch "
                    "implementation's tests need it")

from roundoff_coverage import numerics, routes  # noqa: E402
from roundoff_coverage.kernels import torch_calls as TC  # noqa: E402
from roundoff_coverage.engine import evaluate as E  # noqa: E402
from roundoff_coverage.engine import rows as R  # noqa: E402
from roundoff_coverage.engine.implementations import torch as torch_impl  # noqa: E402
from roundoff_coverage.engine.implementations.base import run_routes  # noqa: E402
from roundoff_coverage.engine.samples import draw  # noqa: E402
from conftest import EXAMPLES, round_bits, run_cli  # noqa: E402

RTOL = 2.0 ** -30
TABLE_EXAMPLES = [(n, label, attrs) for n, label, attrs in EXAMPLES if n in TC.TABLE]


def _task(name, attrs, fmt="binary64", impl="torch", draws=1, kinds=("ordinary",), label=""):
    o = routes.op(name, **attrs)
    return E.Task(name, label or "default", tuple(o.attrs.items()), fmt, "nearest_even",
                  "torch", impl, E.ROUTES, draws, 0, kinds=kinds), o


def _floats(a):
    return np.asarray(a, dtype=object).astype(np.float64)


# ----- the table ---------------------------------------------------------------------------------

def test_every_registered_operator_has_a_torch_call_or_a_reason():
    names = set(routes.names())
    assert set(TC.TABLE) | set(TC.NO_COUNTERPART) == names
    assert not set(TC.TABLE) & set(TC.NO_COUNTERPART)
    assert all(len(why) > 20 for why in TC.NO_COUNTERPART.values())


def test_every_table_operator_runs_at_some_example_in_float64():
    measurable = set()
    for name, label, attrs in TABLE_EXAMPLES:
        task, o = _task(name, attrs)
        impl = torch_impl.Torch(task, o, task.fmt)
        if not impl.problems(["forward"]):
            measurable.add(name)
    assert measurable == set(TC.TABLE)


@pytest.mark.parametrize("name,label,attrs", TABLE_EXAMPLES,
                         ids=[f"{n}-{label}" if label else n for n, label, _ in TABLE_EXAMPLES])
def test_torch_float64_meets_the_exact_rule(name, label, attrs):
    """torch in float64 = the rule's exact value (normwise 2**-30), forward and gradient, or
    torch's convention's exact value where the table declares one."""
    task, o = _task(name, attrs)
    impl = torch_impl.Torch(task, o, task.fmt)
    routes_ = [r for r in ("forward", "gradient")
               if r == "forward" or (any(p.differentiable for p in o.inputs)
                                     and o.decl.backward is not None)]
    problems = impl.problems(routes_)
    routes_ = [r for r in routes_ if r not in problems]
    if not routes_:
        pytest.skip(f"torch does not run it: {next(iter(problems.values()))[1]}")
    rule = o.rule(numerics.reference(200)) or o.rule(numerics.native("binary64"))
    assert rule is not None
    d = impl.select(draw(task, o, task.fmt))
    got = impl.evaluate(d, routes_)
    exact = run_routes(rule, d, routes_)
    for r in routes_:
        assert not isinstance(got[r], Exception), got[r]
        assert not isinstance(exact[r], Exception), exact[r]
        for k, xs in enumerate(d.inputs):
            vs = d.cotangents[k] if r == "gradient" else None
            conv = [c.exact(torch, d.op.attrs, xs, vs) for c in impl.call.conventions
                    if c.route == r]
            for i, name_, port in E.route_ports(d.op, r):
                want, have = exact[r][k][i], got[r][k][i]
                if not port.scalar:
                    assert np.array_equal(np.asarray(have), np.asarray(want)), (r, name_)
                    continue
                want = _floats(want).copy()
                for c in conv:                    # torch's convention where it differs
                    rep = None if c is None else c[i]
                    if rep is None:
                        continue
                    if isinstance(rep, str):
                        pytest.skip("torch's convention has no exact value here")
                    for n, v in enumerate(np.asarray(rep, dtype=object).reshape(-1)):
                        if v is not None:
                            want.reshape(-1)[n] = float(v)
                have = np.asarray(have, dtype=np.float64)
                fin = np.isfinite(want)
                assert np.array_equal(np.isnan(have), np.isnan(want)), (r, name_, have, want)
                assert np.array_equal(have[np.isinf(want)], want[np.isinf(want)]), (r, name_)
                scale = float(np.abs(want[fin]).max()) if fin.any() else 0.0
                err = np.abs(have[fin] - want[fin])
                assert (err <= RTOL * (np.abs(want[fin]) + scale)).all(), \
                    (r, name_, have, want)


# ----- known answers of torch's bfloat16 kernels (exact arithmetic) ----------------------------

def bf16(q):
    return round_bits(q, 8)


def f32(q):
    return round_bits(q, 24)


def _call(name, attrs, *arrays):
    o = routes.op(name, **attrs)
    ts = [torch.tensor(a, dtype=torch.bfloat16) if np.asarray(a).dtype.kind == "f"
          else torch.tensor(a) for a in arrays]
    out = TC.TABLE[name].fn(torch, o.attrs, *ts)
    return [Fraction(float(v)) for v in out.double().reshape(-1)]


def test_torch_bfloat16_sum_accumulates_in_float32():
    """1 + four 2**-8: bfloat16 steps lose each 2**-8 (a tie to even), float32 keeps them."""
    xs = [Fraction(1)] + [Fraction(1, 256)] * 4
    sequential = Fraction(0)
    for v in xs:
        sequential = bf16(sequential + v)
    wide = Fraction(0)
    for v in xs:
        wide = f32(wide + v)
    assert (sequential, bf16(wide)) == (1, Fraction(65, 64))
    assert _call("reduce", {"shape": (5,), "op": "sum", "axes": (0,)},
                 np.array([float(v) for v in xs])) == [Fraction(65, 64)]


def test_torch_bfloat16_softmax_sums_in_float32():
    """softmax of 257 zeros: the bfloat16 sum of 257 ones stops at 256 (256 + 1 ties to
    even), so bfloat16 steps give 2**-8; torch sums in float32 and rounds 1/257 once."""
    n = 257
    total = Fraction(0)
    for _ in range(n):
        total = bf16(total + 1)
    stepwise = bf16(Fraction(1) / total)
    wide = bf16(f32(Fraction(1) / f32(n)))
    assert stepwise == Fraction(1, 256) and wide == Fraction(1, 256) - Fraction(1, 2 ** 16)
    got = _call("softmax", {"shape": (n,), "axis": 0}, np.zeros(n))
    assert got == [wide] * n


def test_torch_bfloat16_layer_norm_keeps_float32_statistics():
    """x = [256, 258]: in bfloat16 the sum 514 rounds to 512 (mean 256, y = [0, sqrt 2]);
    torch's float32 statistics give mean 257, variance 1, y = [-1, 1] exactly."""
    x = [Fraction(256), Fraction(258)]
    s = bf16(x[0] + x[1])
    mean = bf16(s / 2)
    assert mean == 256                                    # the bfloat16-stepwise mean
    mean32 = f32(f32(x[0] + x[1]) / 2)
    var32 = f32(f32((x[0] - mean32) ** 2 + (x[1] - mean32) ** 2) / 2)
    assert (mean32, var32) == (257, 1)
    got = _call("layerNorm", {"shape": (2,)}, np.array([256.0, 258.0]), np.ones(2),
                np.zeros(2), np.array(0.0))
    assert got == [Fraction(-1), Fraction(1)]


# ----- rows: conventions, the command line, the absent extra, torch.compile ----------------------

def _evaluate_on(monkeypatch, name, attrs, inputs, fmt="bfloat16"):
    """The rows of a torch task evaluated on the given draws (one tuple of inputs each)."""
    from roundoff_coverage.engine.samples import Draws
    task, o = _task(name, attrs, fmt=fmt, draws=len(inputs), kinds=())
    d = Draws(o, [tuple(np.asarray(x) for x in xs) for xs in inputs], ["edges"] * len(inputs),
              False, task.fmt, task)
    monkeypatch.setattr(E, "draw", lambda *_: d)
    rows, _ = E.evaluate(task)
    return {(r["route"], r["port"]): r for r in rows}


def test_max_at_a_nan_and_at_signed_zeros_gives_convention_rows(monkeypatch):
    """torch's maximum gives both operands the whole cotangent at a NaN and splits a -0/+0
    tie in half (the rule: half each at a NaN, everything to +0): convention rows, exact
    against torch's own convention; the third entry is an ordinary one."""
    rows = _evaluate_on(monkeypatch, "max", {}, [([np.nan, -0.0, 2.0], [1.0, 0.0, 1.0])])
    for port in ("x", "y"):
        r = rows[("gradient", port)]
        assert r["status"] == "convention" and "NaN operand" in r["reason"]
        assert r["max_ulp"] == 0 and r["samples"] == 3 and r["device"] == "cpu"
    assert rows[("forward", "out")]["status"] == "ok"


def test_fmax_at_a_tie_gives_the_first_operand_everything(monkeypatch):
    rows = _evaluate_on(monkeypatch, "fmax", {}, [([1.5, -0.0, 3.0], [1.5, 0.0, 2.0])])
    for port in ("x", "y"):
        r = rows[("gradient", port)]
        assert r["status"] == "convention" and "tie" in r["reason"] and r["max_ulp"] == 0


def test_a_max_pooling_tie_gives_the_window_to_one_entry(monkeypatch):
    """Windows of 2 with equal maxima: torch's kernel keeps one entry per window (the rule
    splits the cotangent); measured against that convention, torch is exact."""
    x = np.array([[[1.0, 1.0, 0.0, 2.0, 3.0], [4.0, 4.0, -1.0, -1.0, 5.0]]])
    rows = _evaluate_on(monkeypatch, "pool", {}, [(x,)])
    r = rows[("gradient", "x")]
    assert r["status"] == "convention" and "tie" in r["reason"] and r["max_ulp"] == 0
    assert rows[("forward", "y")]["status"] == "ok" and rows[("forward", "y")]["max_ulp"] == 0


def test_convention_is_a_status_of_measured_rows():
    assert "convention" in R.STATUSES and "convention" in R.MEASURED
    from roundoff_coverage.engine import results
    row = R.empty(op="max", route="gradient", port="x", format="bfloat16", mode="nearest_even",
                  policy="torch", implementation="torch", status="convention")
    assert results.field_problems(row) == []


def test_run_with_torch_and_emulated_writes_torch_rows_on_the_cpu(capsys, tmp_path):
    out = tmp_path / "r.json"
    status, _, err = run_cli(capsys, "run", "--ops", "relu,softmax", "--formats", "bfloat16",
                             "--implementations", "torch,emulated", "--samples", "1",
                             "--routes", "forward,gradient", "--jobs", "1", "--out", out,
                             "--quiet")
    assert status == 0, err
    doc = json.loads(out.read_text())
    torch_rows = [r for r in doc["rows"] if r["implementation"] == "torch"]
    # relu's special samples hold a NaN, where torch passes the gradient (a convention).
    assert torch_rows and {r["status"] for r in torch_rows} <= set(R.MEASURED)
    assert {r["device"] for r in torch_rows} == {"cpu"}
    assert {r["policy"] for r in torch_rows} == {"torch"}
    assert {r["implementation"] for r in doc["rows"]} == {"torch", "emulated"}
    assert doc["meta"]["versions"]["torch"] in (torch.__version__,
                                                torch.__version__.split("+")[0])
    assert all(r["max_ulp"] is not None and r["samples"] > 0 for r in torch_rows)
    relu = [r for r in torch_rows if r["op"] == "relu"]
    assert relu and all(r["max_ulp"] == 0 for r in relu)          # relu is exact


def test_without_torch_every_route_is_a_no_rule_row(monkeypatch):
    monkeypatch.setattr(torch_impl, "torch_module", lambda: None)
    task, o = _task("relu", {})
    rows, _ = E.evaluate(task)
    assert {r["status"] for r in rows} == {"no_rule"}
    assert {r["reason"] for r in rows} == {torch_impl.INSTALL}


def test_float8_formats_serve_conversions_only():
    task, o = _task("relu", {}, fmt="float8_e4m3fn")
    rows, _ = E.evaluate(task)
    assert {r["status"] for r in rows} == {"no_rule"}
    assert "conversions only" in rows[0]["reason"]
    task, o = _task("cast", {"source": "index", "bounds": (3, 300)}, fmt="float8_e4m3fn",
                    draws=2, kinds=())
    rows, _ = E.evaluate(task)
    fwd = next(r for r in rows if r["route"] == "forward")
    # Index components of up to 300 converted into float8_e4m3fn: correctly rounded.
    assert fwd["status"] == "ok" and fwd["max_ulp"] <= 0.5 and fwd["samples"] > 0


def test_torch_compile_without_a_compiler_is_a_no_rule_row(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    task, o = _task("relu", {}, impl="torch_compile")
    rows, _ = E.evaluate(task)
    assert {r["status"] for r in rows} == {"no_rule"}
    assert any("C++ compiler" in r["reason"] for r in rows)


def test_torch_compile_measures_relu_forward_and_gradient():
    task, o = _task("relu", {}, fmt="bfloat16", impl="torch_compile", draws=1,
                    kinds=("ordinary",))
    rows, _ = E.evaluate(task)
    by_route = {r["route"]: r for r in rows}
    assert by_route["tangent"]["status"] == "no_rule"
    for r in ("forward", "gradient"):
        assert by_route[r]["status"] == "ok", by_route[r]["reason"]
        assert by_route[r]["max_ulp"] == 0                   # relu is exact

"""The precision advisor (engine/advise.py, engine/cost.py, ``roundoff-coverage advise``):
a model whose answer is known by construction, errors against torch's own float64 run,
the budget grammar, the cost model's counts against hand counts, and the command's exits."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from roundoff_coverage import formats, routes
from roundoff_coverage.engine import advise, cost
from roundoff_coverage.engine.samples import sample_inputs
from roundoff_coverage.reports.cli import main

torch = pytest.importorskip("torch")
import torch_models  # noqa: E402  (needs torch)

HERE = os.path.dirname(os.path.abspath(__file__))
FACTORY = os.path.join(HERE, "..", "torch_models.py") + ":advised"
B32, BF16 = formats.get("binary32"), formats.get("bfloat16")


@pytest.fixture(scope="module")
def graph():
    return routes.from_torch(*torch_models.advised())


def _by_node(graph, low):
    """Every node of the modules ``low`` in bfloat16, the rest binary32."""
    return {k: BF16 for k, m in enumerate(graph.node_modules) if (m or advise.TOP_LEVEL) in low}


def test_the_constructed_modules_break_what_they_were_built_to_break(graph):
    """The premise of the next test, measured: in bfloat16 alone, ``shift`` misses an
    output budget of 1e-2 by far, ``peaked`` keeps the output within it but misses a
    gradient budget of 5e-2 on its weight, and every other unit meets both."""
    errors = advise.Errors(graph, sample_inputs(graph, 2, 0), 0, "nearest_even",
                           "fp32_accumulate", True, None)
    shift = errors(_by_node(graph, {"shift"}))
    peaked = errors(_by_node(graph, {"peaked"}))
    rest = errors(_by_node(graph, {"inp", "out", advise.TOP_LEVEL}))
    assert shift["output:out0"] > 0.1
    assert peaked["output:out0"] < 1e-2 < 5e-2 < peaked["input:peaked.weight"]
    assert rest["output:out0"] < 1e-2
    assert max(v for t, v in rest.items() if t.startswith("input:")) < 5e-2


def test_the_advisor_keeps_exactly_the_modules_the_budget_needs(graph):
    budget = advise.parse_budget("out:1e-2,grad:5e-2")
    found = advise.advise(graph, budget, advise.check_candidates(["binary32", "bfloat16"]),
                          samples=sample_inputs(graph, 2, 0), held_back=2)
    assert advise.keep_list(found, "binary32") == ["shift", "peaked"]
    assert found.met and found.met_held_back
    assert found.costs["all_lowest"] < found.costs["assignment"] < found.costs["all_highest"]
    # both hand rules leave shift in bfloat16 and miss the budget
    assert [r["met"] for r in found.rules] == [False, False]


def test_node_units_keep_only_nodes_of_the_designed_modules(graph):
    """--unit node: every node its own unit; what stays in binary32 lies in shift and
    peaked (their cancelling add and subtract, the saturated softmax), inp's and out's
    linear layers go to bfloat16."""
    found = advise.advise(graph, advise.parse_budget("out:1e-2,grad:5e-2"),
                          advise.check_candidates(["binary32", "bfloat16"]), "node",
                          samples=sample_inputs(graph, 2, 0), held_back=2)
    assert found.met and found.met_held_back
    kept = advise.keep_list(found, "binary32")
    modules = {graph.node_names[k]: graph.node_modules[k] for k in range(len(graph.nodes))}
    assert kept and {modules[n] for n in kept} <= {"shift", "peaked"}
    assert "softmax" in kept
    assert all(found.assignment[n] == "bfloat16" for n, m in modules.items()
               if m in ("inp", "out"))


def test_a_mixed_assignment_measures_what_torch_computes_in_bfloat16(graph):
    """The independent oracle: the assignment run by torch itself (inp, the sum and out in
    bfloat16, shift and peaked in float32) against torch's float64 run; the advisor's error
    of the output on the same input agrees to 10%.  A linear layer is the registry's: the
    product (bfloat16 @, which accumulates in float32 as the fp32_accumulate policy does, in
    its own order) rounded, then the bias added and rounded."""
    model, (x,) = torch_models.advised()
    torch_rel = _torch_error(model, x)
    with torch.no_grad():
        exact = model.double()(x.double())
    errors = advise.Errors(graph, sample_inputs(graph, 1, 0), 0, "nearest_even",
                           "fp32_accumulate", False, None)
    ours = errors(_by_node(graph, {"inp", "out", advise.TOP_LEVEL}))["output:out0"]
    assert ours == pytest.approx(torch_rel, rel=0.1)
    # every unit in binary32: the model as it is, against torch float32 vs float64
    with torch.no_grad():
        f32 = torch_models.advised()[0](x).double()
    assert errors({})["output:out0"] == pytest.approx(
        float(torch.linalg.norm(f32 - exact) / torch.linalg.norm(exact)), rel=0.1)


def _torch_error(model, x) -> float:
    """The normwise relative error of the advised model's output with inp, the sum and out
    in bfloat16 (shift and peaked in float32), computed by torch, against torch's float64."""
    bf = torch.bfloat16

    def linear(v, m):
        return (v.to(bf) @ m.weight.to(bf).T) + m.bias.to(bf)

    with torch.no_grad():
        h = linear(x, model.inp).float()
        got = linear(model.shift(h).to(bf) + model.peaked(h).to(bf), model.out).double()
        exact = model.double()(x.double())
    return float(torch.linalg.norm(got - exact) / torch.linalg.norm(exact))


def test_a_budget_no_assignment_meets_is_reported_with_the_best_reachable(graph):
    found = advise.advise(graph, advise.parse_budget("out:1e-12"),
                          advise.check_candidates(["bfloat16", "binary32"]),
                          samples=sample_inputs(graph, 1, 0), held_back=1)
    assert not found.met and not found.met_held_back
    assert "cannot be met" in found.reason and "output:out0" in found.reason
    assert set(found.assignment.values()) == {"binary32"}


def test_norm_rel_leaves_out_what_both_runs_agree_is_not_a_number():
    inf, nan = float("inf"), float("nan")
    e = np.array([3.0, 4.0, -inf, nan, 0.0])
    c = np.array([3.0, 4.0 + 5e-3 * 5, -inf, nan, 0.0])
    assert advise.norm_rel(c, e) == pytest.approx(5e-3 * 5 / 5.0, rel=1e-12)
    assert advise.norm_rel(np.array([inf]), np.array([1.0])) == inf
    assert advise.norm_rel(np.array([1.0]), np.array([-inf])) == inf
    assert advise.norm_rel(np.zeros(3), np.zeros(3)) == 0.0
    assert advise.norm_rel(np.array([0.0, 1e-30]), np.zeros(2)) == inf


# ----- the budget and the candidates -------------------------------------------------------------

def test_budget_grammar():
    got = advise.parse_budget("out:1e-2, grad[fc.weight]:0.1,grad:40dB")
    assert [(x.kind, x.name) for x in got] == [("out", None), ("grad", "fc.weight"),
                                               ("grad", None)]
    assert got[0].rel == 1e-2 and got[1].rel == 0.1
    assert got[2].rel == pytest.approx(1e-2, rel=1e-15)      # 40 dB SQNR: 10**(-40/20)
    limits = advise._limits(got, ["output:y", "input:fc.weight", "input:x"])
    assert limits == {"output:y": 1e-2, "input:fc.weight": 0.1, "input:x": got[2].rel}
    for bad in ("", "out", "out:0", "out:-1", "out:nan", "weights:1e-2", "out:abc", "out:-1e6dB",
                "out:1e-2,out:1e-3", "grad[]:1"):
        with pytest.raises(advise.AdviseError):
            advise.parse_budget(bad)


def test_candidates_are_element_formats_at_most_binary32():
    got = advise.check_candidates(["binary32", "binary16", "bfloat16", "float8_e4m3fn"])
    assert [f.label for f in got] == ["float8_e4m3fn", "bfloat16", "binary16", "binary32"]
    # a --formats-file format is named by its spec (an answer file reads without it)
    user = {"half12": formats.BinaryFormat(5, 6, name="half12")}
    assert [f.label for f in advise.check_candidates(["binary32", "half12"], user)] == \
        ["e5m6", "binary32"]
    for bad in (["binary64", "bfloat16"], ["mxfp8_e4m3", "binary32"], ["bfloat16"],
                ["bfloat16", "bfloat16"]):
        with pytest.raises(advise.AdviseError):
            advise.check_candidates(bad)


# ----- the cost model ----------------------------------------------------------------------------

def test_multiply_adds_are_counted_by_hand():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 3, 3, padding=1, groups=1)
            self.fc = torch.nn.Linear(75, 4)

        def forward(self, x, a, b):
            return self.fc(self.conv(x).flatten(1)), a @ b

    torch.manual_seed(0)
    g = routes.from_torch(Net(), (torch.randn(1, 2, 5, 5), torch.randn(2, 3, 4),
                                  torch.randn(2, 4, 5)))
    got = {n.op.name: cost.multiply_adds(n.op) for n in g.nodes if n.op.product_operands}
    # conv: 3 x 5 x 5 outputs, each 2 channels x 3 x 3 taps; linear: 4 outputs of 75;
    # batched matmul: 2 x 3 x 5 outputs of 4 products each
    assert got == {"conv": 75 * 18, "linear": 4 * 75, "matmul": 30 * 4}
    fc = next(n.op for n in g.nodes if n.op.name == "linear")
    elements = 75 + 4 * 75 + 4 + 4                     # x, weight, bias read; y written
    assert cost.node_seconds(fc, 16) == pytest.approx(
        elements * 2 / cost.BANDWIDTH + 2 * 300 / 989.5e12)
    assert cost.node_seconds(fc, 32, backward=True) == pytest.approx(
        3 * (elements * 4 / cost.BANDWIDTH + 2 * 300 / 67e12))


# ----- the command -------------------------------------------------------------------------------

def test_advise_command_writes_the_answer(tmp_path, capsys):
    out = tmp_path / "advice.json"
    status = main(["advise", FACTORY, "--budget", "out:1e-2,grad:5e-2", "--samples", "1",
                   "--held-back", "1", "--out", str(out), "--html", str(tmp_path / "page"),
                   "--quiet"])
    assert status == 0
    doc = json.loads(out.read_text())
    assert doc["keep"] == ["shift", "peaked"] and doc["met"] is True
    assert doc["assignment"]["inp"] == "bfloat16" and doc["keep_format"] == "binary32"
    assert set(doc["cost"]) >= {"assignment", "all_highest", "all_lowest"}
    assert doc["confirmed"]["input:peaked.weight"]["budget"] == 5e-2
    assert math.isfinite(doc["confirmed"]["output:out0"]["held_back"])
    page = (tmp_path / "page" / "advice.html").read_text()
    assert "[&#x27;shift&#x27;, &#x27;peaked&#x27;]" in page and "<svg" in page
    assert "could not be drawn" not in page
    # the page is a pure function of the answer: a damaged answer still draws
    from roundoff_coverage.reports.html import build_advice
    built = build_advice({"front": [{"source": "chosen"}], "units": [{}]}, tmp_path / "bad")
    assert "Precision advice" in open(built.index).read()
    # ``report`` draws an answer file too
    assert main(["report", str(out), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    assert (tmp_path / "again" / "advice.html").read_text() == page


@pytest.mark.parametrize("argv, says", [
    (["--budget", "out=1e-2"], "is not KIND:VALUE"),
    (["--budget", "out:1e-2", "--candidates", "binary32,bfloat17"], "bfloat17"),
    (["--budget", "out:1e-2", "--candidates", "binary32,nvfp4"], "scaled format"),
    (["--budget", "grad[nope]:1e-2"], "no differentiable input 'nope'"),
    (["--budget", "out:1e-2", "--samples", "0"], "--samples must be >= 1"),
])
def test_advise_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, says):
    status = main(["advise", FACTORY, *argv, "--out", str(tmp_path / "a.json"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and says in err and len(err.splitlines()) == 1


def test_advise_unmeetable_budget_exits_1(tmp_path, capsys):
    out = tmp_path / "a.json"
    status = main(["advise", FACTORY, "--budget", "out:1e-12", "--samples", "1",
                   "--held-back", "1", "--out", str(out)])
    text = capsys.readouterr().out
    assert status == 1 and "cannot be met" in text
    doc = json.loads(out.read_text())
    assert doc["met"] is False and np.isfinite(doc["confirmed"]["output:out0"]["samples"])


def test_model_measures_the_advised_assignment(tmp_path):
    """``model --assignment`` runs the model under advise's answer: its whole-model output
    row is torch's own mixed bfloat16 error (the oracle above) on the example inputs."""
    answer = tmp_path / "advice.json"
    answer.write_text(json.dumps({"unit": "module", "assignment": {
        "inp": "bfloat16", "shift": "binary32", "peaked": "binary32",
        advise.TOP_LEVEL: "bfloat16", "out": "bfloat16"}}))
    out = tmp_path / "model.json"
    assert main(["model", FACTORY, "--assignment", str(answer), "--samples", "1",
                 "--routes", "forward", "--out", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    row = next(r for r in doc["rows"] if r["node"] == "output:out0"
               and r["attribution"] == "propagated")
    assert row["format"] == "assigned"
    model, (x,) = torch_models.advised()
    assert row["norm_rel"] == pytest.approx(_torch_error(model, x), rel=0.1)
    # the shift module computes in binary32: its own (local) error is binary32's
    local = {r["node"]: r["norm_rel"] for r in doc["rows"]
             if r["attribution"] == "local" and r["route"] == "forward"}
    assert local["add"] < 2 ** -23 and local["linear"] > 2 ** -12


@pytest.mark.parametrize("content, says", [
    ("{", "not JSON"),
    ('{"rows": []}', "no 'assignment' table"),
    ('{"unit": "module", "assignment": {"nope": "bfloat16"}}', "no module 'nope'"),
    ('{"unit": "module", "assignment": {"inp": "bfloat16"}}', "no format for the module"),
])
def test_model_assignment_bad_file_is_one_line_and_exit_2(tmp_path, capsys, content, says):
    answer = tmp_path / "advice.json"
    answer.write_text(content)
    status = main(["model", FACTORY, "--assignment", str(answer), "--out",
                   str(tmp_path / "m.json"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and says in err and len(err.splitlines()) == 1


def test_model_assignment_refuses_formats_beside_it(tmp_path, capsys):
    status = main(["model", FACTORY, "--assignment", str(tmp_path / "a.json"), "--formats",
                   "bfloat16", "--out", str(tmp_path / "m.json"), "--quiet"])
    assert status == 2 and "leave out --formats" in capsys.readouterr().err


# ----- recipes as candidates ---------------------------------------------------------------------

def _mxfp8(a):
    """OCP MX (v1.0, section 6.3) by hand on the last axis, blocks of 32: the shared scale
    2**(floor(log2(amax)) - 8) (8: E4M3's largest exponent), each element divided by it and
    rounded to nearest even into E4M3 by ml_dtypes, clamped to +-448 first; dequantized."""
    import ml_dtypes
    blocks = a.reshape(a.shape[:-1] + (-1, 32))
    amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    scale = np.where(amax > 0, 2.0 ** (np.floor(np.log2(np.where(amax > 0, amax, 1))) - 8), 1)
    elements = np.clip(blocks / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return (elements.astype(np.float64) * scale).reshape(a.shape)


def test_a_recipe_unit_measures_what_mxfp8_by_hand_computes():
    """A linear layer under scaled_recipe@mxfp8_e4m3: its operands quantized to MXFP8 along
    the contraction axis (the oracle: the OCP rule written out with ml_dtypes' E4M3
    rounding), the product in float64 (exact here) rounded to binary32, the bias (rounded to
    bfloat16) added in binary32, the result stored in bfloat16; the advisor's output error
    against exact values agrees with the oracle's to 1%."""
    import ml_dtypes
    torch.manual_seed(1)
    fc = torch.nn.Linear(64, 8)
    x = torch.randn(6, 64)
    g = routes.from_torch(fc, (x,))
    xs = sample_inputs(g, 1, 0)
    errors = advise.Errors(g, xs, 0, "nearest_even", "fp32_accumulate", False, None)
    recipe = advise.check_candidates(["binary32", "scaled_recipe@mxfp8_e4m3"])[0]
    ours = errors({0: recipe})["output:out0"]
    w, b = fc.weight.detach().double().numpy(), fc.bias.detach().double().numpy()
    xv = x.double().numpy()
    product = (_mxfp8(xv) @ _mxfp8(w).T).astype(np.float32)
    bias = b.astype(ml_dtypes.bfloat16).astype(np.float32)
    got = (product + bias).astype(ml_dtypes.bfloat16).astype(np.float64)
    exact = xv @ w.T + b
    oracle = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    assert 1e-3 < oracle and ours == pytest.approx(oracle, rel=0.01)


def test_recipes_are_offered_only_to_units_with_products(graph):
    found = advise.advise(graph, advise.parse_budget("out:5e-2,grad:8e-2"),
                          advise.check_candidates(["binary32", "bfloat16",
                                                   "scaled_recipe@mxfp8_e4m3"]),
                          samples=sample_inputs(graph, 1, 0), held_back=1)
    assert found.met
    assert found.assignment[advise.TOP_LEVEL] in ("bfloat16", "binary32")
    assert set(found.assignment.values()) <= {"binary32", "bfloat16",
                                              "scaled_recipe@mxfp8_e4m3"}
    for bad in (["binary32", "nope@mxfp8_e4m3"], ["binary32", "scaled_recipe@bfloat16"],
                ["binary32", "fp8_recipe@mxfp4_e2m1"]):
        with pytest.raises(advise.AdviseError):
            advise.check_candidates(bad)

"""The model run (engine/model.py, engine/model_run.py, ``roundoff-coverage model``):
per-node local and propagated errors against exact rationals on hand-built graphs, the
certified 0.5 ulp of correctly rounded single-primitive nodes, keeping a node in binary32,
and the command on a captured torch model (rows, report, gate, refusals)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from fractions import Fraction as F

import numpy as np
import pytest

from roundoff_coverage import formats, routes
from roundoff_coverage.engine import keep
from roundoff_coverage.engine import model as M
from roundoff_coverage.engine import spill
from roundoff_coverage.engine.samples import sample_inputs
from roundoff_coverage.routes.ports import value

from conftest import (bf16_ulps, chain_graph, one_error, round_bf16, run_cli, softmax_shift_graph,
                      wait_for_checkpoint)

BF16 = formats.get("bfloat16")


def _row(rows, node, route, port, attribution):
    return next(r for r in rows if r["node"] == node and r["route"] == route
                and r["port"] == port and r["attribution"] == attribution)


def _spill_everything(monkeypatch) -> list:
    """Every model run spills its traces (engine/spill.py: any share of the memory, arrays
    of any size); the list receives each Spill's bytes written as it spills."""
    monkeypatch.setattr(spill, "SPILL_SHARE", 1 << 62)
    monkeypatch.setattr(spill, "SPILL_MIN", 1)
    written, put = [], spill.Spill.put

    def counted(self, arrays):
        out = put(self, arrays)
        written.append(self.written)
        return out
    monkeypatch.setattr(spill.Spill, "put", counted)
    return written


@pytest.mark.parametrize("chunk", [None, 1, "spilled"],
                         ids=["one-run", "node-by-node", "spilled"])
def test_local_and_propagated_errors_of_a_chain_match_exact_rationals(chunk, monkeypatch):
    written = _spill_everything(monkeypatch) if chunk == "spilled" else None
    if chunk == 1:                        # the local errors measured one node at a time
        monkeypatch.setattr(M, "LOCAL_ELEMENTS", chunk)
    g = chain_graph()
    rng = np.random.default_rng(3)
    xs = [list(formats.round_to(rng.uniform(0.5, 2.0, (4, 6)), BF16)) for _ in range(1)]
    xs = [[xs[0][i] for i in range(4)]]
    rows, _, _ = M.measure(g, M.Config("bfloat16", "nearest_even", "strict"), xs, 0,
                           ("forward",))
    x, a, b, c = ([F(float(v)) for v in arr] for arr in xs[0])
    exact_h = [p * q + r for p, q, r in zip(x, a, b)]
    emul_h = [round_bf16(round_bf16(p * q) + r) for p, q, r in zip(x, a, b)]
    exact_y = [h * s for h, s in zip(exact_h, c)]
    # add, local: the exact product rounded into bfloat16, plus b, rounded once, against
    # the exact sum of those same rounded values.
    want = max(bf16_ulps(round_bf16(round_bf16(p * q) + r), round_bf16(p * q) + r)
               for p, q, r in zip(x, a, b))
    assert _row(rows, "add", "forward", "out", "local")["max_ulp"] == pytest.approx(want, 1e-9)
    # scale, propagated: the whole emulated chain against the exact chain; local: exact h
    # rounded, times c, rounded, against RN(h) * c.
    prop = max(bf16_ulps(round_bf16(h * s), e) for h, s, e in zip(emul_h, c, exact_y))
    loc = max(bf16_ulps(round_bf16(round_bf16(h) * s), round_bf16(h) * s)
              for h, s in zip(exact_h, c))
    assert _row(rows, "scale", "forward", "out", "propagated")["max_ulp"] == \
        pytest.approx(prop, 1e-9)
    assert _row(rows, "scale", "forward", "out", "local")["max_ulp"] == pytest.approx(loc, 1e-9)
    whole = _row(rows, "output:out0", "forward", "out0", "propagated")
    assert whole["max_ulp"] == pytest.approx(prop, 1e-9) and whole["node_index"] is None
    if written is not None:     # the sweeps stored node by node as they were made
        assert len(written) > 2 * len(g.nodes) and min(written) > 0


def test_the_local_errors_are_measured_in_runs_of_nodes_within_the_element_limit():
    # chain_graph: mul, add and scale read two arrays of 6 and make one: 18 elements each;
    # 2 samples and 2 routes weigh each 4x (72): two fit 144, three fit 54 at 1x.
    g = chain_graph()
    sizes = [sum(math.prod(p.shape) for p in n.op.inputs + n.op.outputs) for n in g.nodes]
    assert sizes == [18, 18, 18]
    assert M._chunks(g, 2, ("forward", "gradient"), limit=144) == [{0, 1}, {2}]
    assert M._chunks(g, 2, ("forward", "gradient"), limit=10) == [{0}, {1}, {2}]
    assert M._chunks(g, 1, ("forward",), limit=54) == [{0, 1, 2}]


def test_local_errors_of_correctly_rounded_nodes_are_within_half_an_ulp():
    # exp, add, mul, sqrt are correctly rounded primitives: their certificate is 0.5 ulp,
    # whatever the error that reaches them (propagated errors grow past it).
    n = 32
    g = routes.Graph(x=value((n,)), y=value((n,)))
    e = g.apply(routes.op("exp", shape=(n,)), g.input("x"), name="exp")
    s = g.apply(routes.op("mul", shape=(n,)), e, g.input("y"), name="mul")
    t = g.apply(routes.op("add", shape=(n,)), s, e, name="add")
    g.output(g.apply(routes.op("sqrt", shape=(n,)), t, name="sqrt"))
    g.example_inputs = [np.linspace(-2, 2, n), np.linspace(0.5, 3, n)]
    rows, _, _ = M.measure(g, M.Config("binary16", "nearest_even", "strict"),
                           sample_inputs(g, 3, 0), 0)
    local = [r for r in rows if r["attribution"] == "local" and r["route"] == "forward"]
    assert {r["node"] for r in local} == {"exp", "mul", "add", "sqrt"}
    for r in local:
        assert r["status"] == "ok" and r["samples"] == 3 * n
        assert r["max_ulp"] <= 0.5, r["node"]
    assert max(r["max_ulp"] for r in rows if r["attribution"] == "propagated") > 0.5


@pytest.mark.parametrize("spilled", [False, True], ids=["in-memory", "spilled"])
def test_keeping_a_bfloat16_sum_in_binary32_removes_its_error(spilled, monkeypatch):
    if spilled:
        _spill_everything(monkeypatch)
    # A 2048-term sum accumulated in bfloat16 (strict) stagnates: once the partial sum
    # passes 256, adding a term near 1 moves it by half an ulp at most, so it loses many
    # ulps; the same node in binary32, rounded once into bfloat16, is within an ulp.
    g = routes.Graph(x=value((2, 2048)))
    g.output(g.apply(routes.op("reduce", shape=(2, 2048), axes=(1,)), g.input("x"),
                     name="total", module="head"))
    g.example_inputs = [np.random.default_rng(1).uniform(0.5, 1.5, (2, 2048))]
    _, summary, _ = M.measure(g, M.Config("bfloat16", "nearest_even", "strict"),
                              sample_inputs(g, 2, 0), 0, ("forward",))
    keep = next(e for e in summary["keep_binary32"] if e["keep"] == "total")
    assert keep["max_ulp_before"] > 8 and keep["max_ulp_after"] <= 1.0
    assert summary["largest_local"]["forward"][0]["node"] == "total"


def test_the_keep_entries_ulps_before_are_the_outputs_ulp_errors_by_mpmath():
    # One exp node in binary16 (correctly rounded): the whole model's output is exp(x), x
    # its input in binary16, rounded to 11 bits; its |error| in ulps of binary16 at the exact value (rounded to
    # binary64), over both samples, by mpmath -- the max and the mean the keep entries give
    # before any node is kept.
    import mpmath
    n = 300
    g = routes.Graph(x=value((n,)))
    g.output(g.apply(routes.op("exp", shape=(n,)), g.input("x"), name="exp"))
    g.example_inputs = [np.linspace(-3, 3, n)]
    xs = sample_inputs(g, 2, 0)
    _, summary, _ = M.measure(g, M.Config("binary16", "nearest_even", "strict"), xs, 0,
                              ("forward",))
    ulps = []
    with mpmath.workprec(200):
        for (x,) in xs:
            # The model reads its inputs rounded to binary16 (numpy's conversion rounds
            # to nearest, ties to even).
            for v in np.asarray(x, dtype=np.float64).astype(np.float16):
                exact = mpmath.exp(mpmath.mpf(float(v)))
                e = float(exact)
                with mpmath.workprec(11):               # binary16's 11 bits, ties to even
                    c = float(+exact)
                ulp = 2.0 ** (math.floor(math.log2(e)) - 10)
                ulps.append(abs(c - e) / ulp)
    entry = next(e for e in summary["keep_binary32"] if e["keep"] == "exp")
    assert entry["max_ulp_before"] == pytest.approx(max(ulps), rel=1e-12)
    assert entry["mean_ulp_before"] == pytest.approx(sum(ulps) / len(ulps), rel=1e-12)
    assert max(ulps) <= 0.5


def test_a_large_graph_tries_the_nodes_adding_the_most_error_in_binary32():
    # 60 exact multiplications by 1 around the same stagnating bfloat16 sum: more nodes
    # than the summary runs whole keep experiments for (keep.KEEP_ALL), so it tries the
    # keep.KEEP_NODES nodes with the largest local errors -- the sum first, the only node with
    # an error -- and says so; keeping the sum in binary32 leaves the output within an ulp.
    n = 1024
    g = routes.Graph(x=value((n,)), ones=value((n,)))
    h = g.input("x")
    for i in range(60):
        if i == 30:
            h = g.apply(routes.op("reduce", shape=(n,), axes=(0,)), h, name="total")
            h = g.apply(routes.op("broadcast", shape=(), to=(n,)), h, name="spread")
        h = g.apply(routes.op("mul", shape=(n,)), h, g.input("ones"), name=f"times{i}")
    g.output(h)
    g.example_inputs = [np.random.default_rng(1).uniform(0.5, 1.5, n), np.ones(n)]
    _, summary, _ = M.measure(g, M.Config("bfloat16", "nearest_even", "strict"),
                              sample_inputs(g, 1, 0), 0, ("forward",))
    tried = summary["keep_binary32"]
    assert len(tried) == keep.KEEP_NODES < len(g.nodes)
    assert "nodes with the largest local errors" in summary["keep_note"]
    assert summary["largest_local"]["forward"][0]["node"] == "total"
    assert tried[0]["keep"] == "total" and tried[0]["max_ulp_before"] > 8 and \
        tried[0]["max_ulp_after"] <= 1.0


def test_a_long_configuration_reports_its_phases_with_etas(monkeypatch):
    # Phases on a clock that moves 10 s per call: silent for its first 15 s, then a line
    # per phase start and, within a phase, the ETA from the share done (3/4 left after 1/4
    # in 20 s: 60 s); the model run's phases name the sweeps node by node.
    import io
    from roundoff_coverage.engine import orchestrate
    clock = iter(range(0, 10 ** 6, 10))
    monkeypatch.setattr(orchestrate.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    log = orchestrate.Phases("cfg", stream=out, every=15.0, delay=15.0)   # born at 0
    log("early")                                                           # t 10: silent
    log("sweep", 0.0, 4.0, "node 1/4")                                     # t 20: a line
    log("sweep", 1.0, 4.0, "node 2/4")                                     # t 30: too soon
    log("sweep", 1.0, 4.0, "node 2/4")                                     # t 40: a line
    assert out.getvalue().splitlines() == [
        "roundoff-coverage: cfg: sweep, node 1/4",
        "roundoff-coverage: cfg: sweep, node 2/4, 20 s, ETA 01:00"]
    monkeypatch.undo()
    out = io.StringIO()
    g = chain_graph()
    g.example_inputs = [np.full(6, 1.5)] * 4
    M.measure(g, M.Config("bfloat16", "nearest_even", "strict"), sample_inputs(g, 1, 0), 0,
              ("forward", "gradient"), log=orchestrate.Phases("cfg", out, every=0, delay=0))
    text = out.getvalue()
    for phase in ("exact run at 72 bits, sample 1/1, forward sweep, node 1/3",
                  "exact run at 72 bits, sample 1/1, reverse sweep, node 3/3",
                  "exact run at 106 bits", "emulated run",
                  "exact nodes alone (local errors), sample 1/1, node 3/3",
                  "errors of every node", "keep in binary32, 1/"):
        assert f"roundoff-coverage: cfg: {phase}" in text, (phase, text)


@pytest.mark.parametrize("spilled", [False, True], ids=["in-memory", "spilled"])
def test_an_exact_zero_gradient_is_measured_as_zero(spilled, monkeypatch):
    # d/db of sum(softmax(x + b)) = 0 exactly (softmax ignores a constant shift): the
    # reference's cancellation residue shrinks with precision and is clamped, so the
    # emulated gradient's error is measured against 0.  Spilled: the exact zeros are a
    # binary64 array, not the compact copy of double-double values.
    if spilled:
        _spill_everything(monkeypatch)
    g = softmax_shift_graph()
    rows, _, _ = M.measure(g, M.Config("bfloat16", "nearest_even", "fp32_accumulate"),
                           sample_inputs(g, 1, 0), 0, ("forward", "gradient"))
    r = _row(rows, "input:b", "gradient", "b", "propagated")
    assert r["status"] == "ok"
    exact = F(r["worst"]["exact"]) if r["worst"] else F(0)
    assert abs(exact) < F(2) ** -150


# ----- the command on a captured model -------------------------------------------------------
FACTORY = textwrap.dedent("""
    import torch
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)

        def forward(self, x):
            return torch.softmax(self.l2(torch.relu(self.l1(x))), dim=-1)

    def make():
        torch.manual_seed(0)
        return Net(), (torch.randn(5, 4),)

    def broken():
        raise RuntimeError("no model today")
""")


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "roundoff_coverage", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("model")
    (d / "net.py").write_text(FACTORY)
    done = _cli("model", "net.py:make", "--out", "r.json", "--samples", "2", "--jobs", "1",
                "--html", "html", cwd=d)
    assert done.returncode == 0, done.stderr
    return d, done


def test_model_command_writes_rows_per_node_and_the_artifact(captured):
    d, done = captured
    doc = json.loads((d / "r.json").read_text())
    assert doc["schema"] == "roundoff-coverage/1"
    assert doc["model"]["artifact"].endswith("r.json.graph.json")
    assert doc["model"]["sha256"] == routes.graph_hash(str(d / "r.json.graph.json"))
    g = routes.load_graph(str(d / "r.json.graph.json"))
    nodes = {r["node"] for r in doc["rows"] if r["node_index"] is not None}
    assert nodes == set(g.node_names) - {n for n, node in zip(g.node_names, g.nodes)
                                         if not any(p.kind == "value"
                                                    for p in node.op.outputs)}
    # A small graph is attributed by default (--attribution auto): each node's share of
    # each output's forward error and of each input gradient's error, named by the output
    # or input it reaches.
    assert {r["attribution"] for r in doc["rows"]} == {"local", "propagated", "share"}
    whole = {r["node"] for r in doc["rows"] if r["node_index"] is None}
    assert {r["output"] for r in doc["rows"] if r["attribution"] == "share"} == whole
    assert {r["module"] for r in doc["rows"]} >= {"l1", "l2"}
    grads = {r["node"] for r in doc["rows"] if r["route"] == "gradient"
             and r["node_index"] is None}
    assert grads == {"input:x", "input:l1.weight", "input:l1.bias", "input:l2.weight",
                     "input:l2.bias"}
    assert all(r["status"] == "ok" for r in doc["rows"]), \
        [(r["node"], r["reason"]) for r in doc["rows"] if r["status"] != "ok"]
    assert "nodes adding the most error" in done.stdout
    page = (d / "html" / "model.html").read_text()
    assert "linear_1" in page and "module l2" in page and "Reproduce" in page


def test_the_artifact_reproduces_the_results(captured):
    d, _ = captured
    done = _cli("model", "r.json.graph.json", "--out", "again.json", "--samples", "2",
                "--jobs", "1", "--quiet", cwd=d)
    assert done.returncode == 0, done.stderr
    first, again = (json.loads((d / f).read_text())["rows"] for f in ("r.json", "again.json"))
    assert first == again


def test_the_gate_reads_model_results(captured, tmp_path):
    d, _ = captured
    same = _cli("gate", "--baseline", str(d / "r.json"), str(d / "r.json"))
    assert same.returncode == 0, same.stdout + same.stderr
    doc = json.loads((d / "r.json").read_text())
    for r in doc["rows"]:                      # a baseline that was 4x better everywhere
        if r["node"] == "linear_1" and isinstance(r["max_ulp"], float):
            for k in ("max_ulp", "p99_ulp", "mean_ulp"):
                r[k] /= 4
    (tmp_path / "better.json").write_text(json.dumps(doc))
    worse = _cli("gate", "--baseline", str(tmp_path / "better.json"), str(d / "r.json"))
    assert worse.returncode == 1 and "linear_1" in worse.stdout


def test_inputs_from_a_file_give_the_samples(captured, tmp_path):
    d, _ = captured
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(0).standard_normal((3, 5, 4)))
    done = _cli("model", str(d / "r.json.graph.json"), "--inputs", str(tmp_path / "in.npz"),
                "--routes", "forward", "--out", str(tmp_path / "o.json"), "--quiet")
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "o.json").read_text())["rows"]
    assert _row(rows, "linear", "forward", "y", "local")["samples"] == 3 * 5 * 8


@pytest.mark.parametrize("args, says", [
    (["nosuch.json"], "no such artifact"),
    (["net.py:nothere"], "has no callable nothere"),
    (["net.py:broken"], "the factory raised RuntimeError: no model today"),
    (["net.py:make", "--formats", "binary128"], "fit binary64"),
    (["net.py:make", "--formats", "bfloat61"], "unknown format"),
    (["net.py:make", "--samples", "0"], "--samples must be >= 1"),
    (["net.py:make", "--routes", "sideways"], "unknown route"),
    (["net.py:make", "--policies", "fixed_point:x"], "--policies"),
    (["r.json.graph.json", "--inputs", "missing.npz"], "--inputs"),
])
def test_bad_input_is_one_line_and_exit_2(captured, args, says, capsys, monkeypatch):
    d, _ = captured
    monkeypatch.chdir(d)
    status, _, err = run_cli(capsys, "model", *args, "--out", "bad.json")
    assert status == 2
    one_error(err, says)


def test_torch_runs_the_model_beside_the_emulated_run(captured, tmp_path):
    # One sample: the example input and parameters rounded into bfloat16.  The oracle for
    # torch's rows is torch's own float64 run of the model on those same values (another
    # framework's float64 result: its error, ~1e-16 relative, is 1e-13 ulp of bfloat16).
    torch = pytest.importorskip("torch")
    d, _ = captured
    done = _cli("model", "net.py:make", "--out", str(tmp_path / "t.json"), "--samples", "1",
                "--routes", "forward,gradient", "--implementations", "torch,torch_compile",
                "--quiet", cwd=d)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    eager = [r for r in rows if r["implementation"] == "torch"]
    assert {r["node"] for r in eager} >= {"linear", "relu", "linear_1", "softmax",
                                          "output:out0", "input:l1.weight"}
    # every node's output cotangent from autograd, beside the emulated one
    assert {r["node"] for r in eager if r["port"] == "dy"} >= {"linear", "relu", "linear_1"}
    assert {r["node"] for r in rows if r["port"] == "dy" and r["implementation"] ==
            "emulated"} >= {"linear", "relu", "linear_1", "softmax"}
    assert all(r["policy"] == "torch" and r["status"] == "ok" for r in eager)
    compiled = [r for r in rows if r["implementation"] == "torch_compile"]
    assert compiled and all(r["node_index"] is None for r in compiled)
    sys.path.insert(0, str(d))
    try:
        import net
    finally:
        sys.path.remove(str(d))
    model, (x,) = net.make()
    bf = model.to(torch.bfloat16)
    got = bf(x.to(torch.bfloat16)).double()
    ref = model.double()(x.to(torch.bfloat16).double()).detach()
    e = np.abs(ref.numpy())
    ulp = np.exp2(np.floor(np.log2(np.maximum(e, 2.0 ** -126))) - 7)
    want = float(np.max(np.abs(got.detach().numpy() - ref.numpy()) / ulp))
    r = next(x for x in rows if x["node"] == "output:out0" and x["implementation"] == "torch"
             and x["route"] == "forward")
    assert r["max_ulp"] == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_torch_reads_integer_inputs_in_their_own_dtype(tmp_path):
    """Token ids and class targets go back to torch as int64 (an embedding and a cross
    entropy refuse floats): torch's rows are measured, and its loss in bfloat16 is torch's
    own bfloat16 run of the model against torch's float64 run on the same rounded values."""
    torch = pytest.importorskip("torch")
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "lang.json"
    done = _cli("model", os.path.join(tests, "torch_models.py") + ":language", "--out",
                str(out), "--samples", "1", "--routes", "forward", "--implementations",
                "torch", "--attribution", "none", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    eager = [r for r in rows if r["implementation"] == "torch"]
    assert eager and all(r["status"] == "ok" for r in eager)
    r = next(x for x in eager if x["node"] == "output:out0")
    sys.path.insert(0, tests)
    try:
        import torch_models
    finally:
        sys.path.remove(tests)
    model, (ids, target) = torch_models.language()
    assert ids.dtype == torch.int64 and target.dtype == torch.int64
    with torch.no_grad():
        ref = model.to(torch.bfloat16).double()(ids, target)   # parameters rounded once
        got = model.to(torch.bfloat16)(ids, target).double()
    want = abs(float(got - ref)) / 2.0 ** (math.floor(math.log2(abs(float(ref)))) - 7)
    assert r["max_ulp"] == pytest.approx(want, rel=1e-6, abs=1e-9)


# ----- an interrupted run keeps its work -------------------------------------------------------
SLOW = ["--formats", "bfloat16,binary16,float8_e4m3fn", "--samples", "20", "--jobs", "1",
        "--quiet", "--out", "m.json"]


def _softmax_chain(n=64):
    """y = softmax(exp(x) * a + b): enough work per configuration (about 3 s since the
    double-double sweeps; 1.5 s at n = 32 once let a loaded machine finish the run before
    the test's signal left) that a signal sent when the first configuration is
    checkpointed lands while the second one runs."""
    g = routes.Graph(x=value((4, n)), a=value((4, n)), b=value((4, n)))
    h = g.apply(routes.op("exp", shape=(4, n)), g.input("x"), name="exp")
    h = g.apply(routes.op("mul", shape=(4, n)), h, g.input("a"), name="mul")
    h = g.apply(routes.op("add", shape=(4, n)), h, g.input("b"), name="add")
    g.output(g.apply(routes.op("softmax", shape=(4, n), axis=1), h, name="softmax"))
    rng = np.random.default_rng(5)
    g.example_inputs = [rng.standard_normal((4, n)) for _ in range(3)]
    return g


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(artifact bytes, the results file of an uninterrupted run of SLOW)."""
    d = tmp_path_factory.mktemp("whole")
    _softmax_chain().save(str(d / "g.json"))
    done = _cli("model", "g.json", *SLOW, cwd=d)
    assert done.returncode == 0, done.stderr
    return (d / "g.json").read_bytes(), (d / "m.json").read_bytes()


def _default_sigint():
    # A shell that starts pytest in the background makes its children ignore SIGINT, and a
    # Python started so never raises KeyboardInterrupt: give the child Ctrl-C's default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_an_interrupted_model_run_keeps_its_checkpoint_and_resumes_to_the_same_bytes(
        uninterrupted, tmp_path, sig):
    artifact, whole = uninterrupted
    (tmp_path / "g.json").write_bytes(artifact)
    ckpt = tmp_path / "m.json.partial.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "roundoff_coverage", "model", "g.json",
                             *SLOW], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    wait_for_checkpoint(proc, ckpt, 300, 0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert ckpt.exists(), (proc.returncode, err)          # the work done so far is kept
    kept = [json.loads(line)["task"] for line in ckpt.read_text().splitlines()[1:]
            if line.strip()]
    assert 1 <= len(kept) < 3 and not (tmp_path / "m.json").exists()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        missing = [k for k in ("bfloat16|nearest_even|fp32_accumulate",
                               "binary16|nearest_even|fp32_accumulate",
                               "float8_e4m3fn|nearest_even|fp32_accumulate") if k not in kept]
        assert proc.returncode == 130
        assert err == (f"roundoff-coverage: interrupted: m.json not written; {len(missing)} of 3 "
                       f"configurations missing ({', '.join(k.replace('|', ' ') for k in missing)}"
                       f"), the other {len(kept)} kept in m.json.partial.jsonl; resume with: "
                       f"roundoff-coverage model g.json --formats bfloat16,binary16,"
                       f"float8_e4m3fn --samples 20 --out m.json --resume\n")
    again = _cli("model", "g.json", *SLOW, "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "m.json").read_bytes() == whole
    assert not ckpt.exists()


# ----- NaN is never an error of 0 ulp ----------------------------------------------------------

def _nan_graph():
    """root = sqrt((x + c) - x) with c = -2**-20, and log(x), at x = [1, -1]: in bfloat16
    x + c rounds back to x, so the computed root is sqrt(0) = 0 where the exact one is
    sqrt(-2**-20), NaN; log(-1) is NaN in both runs, log(1) = 0 in both."""
    g = routes.Graph(x=value((2,)), c=value((2,)))
    h = g.apply(routes.op("add", shape=(2,)), g.input("x"), g.input("c"), name="shift")
    d = g.apply(routes.op("sub", shape=(2,)), h, g.input("x"), name="back")
    g.apply(routes.op("sqrt", shape=(2,)), d, name="root")
    g.output(g.apply(routes.op("log", shape=(2,)), g.input("x"), name="log"))
    g.example_inputs = [np.array([1.0, -1.0]), np.full(2, -2.0 ** -20)]
    return g


def test_nan_rows_say_so_and_an_exact_nan_beside_a_number_is_an_error(tmp_path):
    _nan_graph().save(str(tmp_path / "nan.json"))
    done = _cli("model", "nan.json", "--formats", "bfloat16", "--samples", "1", "--routes",
                "forward", "--jobs", "1", "--quiet", "--out", "r.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    for attribution in ("propagated", "local"):
        r = _row(rows, "log", "forward", "y", attribution)
        # log(-1): NaN in both runs, unmeasured; log(1) = 0 exactly: the one measured error,
        # an exact 0 (engine/tensor_measures.py: cancelled, apart from the ulp statistics),
        # computed exactly: error 0.
        assert (r["status"], r["samples"], r["unmeasured"], r["cancelled"]) == \
            ("ok", 1, 1, 1)
        assert r["exceptional"] == {"nan_in_both": 1} and r["max_ulp"] is None
        assert r["norm_rel"] == 0.0 and r["cancelled_error"] == 0.0
        assert r["buckets"][-1] == 1 and sum(r["buckets"]) == 1
        assert "NaN in both" in r["reason"]
    root = _row(rows, "root", "forward", "y", "propagated")
    assert root["status"] == "error" and root["max_ulp"] is None
    assert "the exact value is NaN at 2 of 2 elements" in root["reason"]
    local = _row(rows, "root", "forward", "y", "local")        # sqrt(-2**-20) in both
    assert local["status"] == "error" and local["exceptional"] == {"nan_in_both": 2}


CUBE = textwrap.dedent("""
    import torch

    class Cube(torch.nn.Module):
        def forward(self, x):
            return x ** 3.0                        # GPT-2's gelu_new has x ** 3.0

    def make():
        return Cube(), (torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0], dtype=torch.float64),)
""")


def test_the_tangent_of_a_cube_at_negative_inputs_is_measured_not_nan(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "cube.py").write_text(CUBE)
    done = _cli("model", "cube.py:make", "--formats", "binary64", "--samples", "1",
                "--routes", "tangent", "--jobs", "1", "--quiet", "--out", "r.json",
                cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    whole = _row(rows, "output:out0", "tangent", "out0", "propagated")
    assert whole["status"] == "ok" and whole["unmeasured"] == 0 and not whole["exceptional"]
    # 3 x^2 t exists at every input (torch's forward mode gives it): a few roundings off;
    # at x = 0 it is an exact 0, counted apart (engine/tensor_measures.py: cancelled).
    assert whole["samples"] == 4 and whole["cancelled"] == 1 and whole["max_ulp"] < 2
    assert whole["cancelled_error"] == 0.0


# ----- --inputs: sizes checked before anything is read -------------------------------------------

def _npz_declaring(path, shape, descr="<f8"):
    """A compressed .npz whose one .npy member ``x`` is a header declaring ``shape`` and no
    data: a few hundred bytes claiming as much as the shape says."""
    import io
    import zipfile
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": descr, "fortran_order": False,
                                                "shape": shape})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", head.getvalue())


def test_bad_inputs_files_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chain_graph().save("g.json")
    (tmp_path / "empty.npz").write_bytes(b"")
    _npz_declaring(tmp_path / "huge.npz", (1 << 40,))                  # 8 TiB of float64
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "plain.npy", np.ones(6))
    assert (tmp_path / "huge.npz").stat().st_size < 1000

    def refused(name):
        status, _, err = run_cli(capsys, "model", "g.json", "--inputs", name, "--out", "o.json",
                                 "--quiet", "--jobs", "1")
        assert status == 2
        return one_error(err)
    assert refused("empty.npz").endswith("--inputs empty.npz: not a .npz file of arrays "
                                         "(np.savez) (File is not a zip file)")
    assert refused("plain.npy").endswith("(File is not a zip file)")
    assert refused("objects.npz").endswith("(an array of Python objects (pickled) is never "
                                           "loaded)")
    line = refused("huge.npz")
    assert "--inputs huge.npz: its arrays declare 8 TiB (x: float64 [1099511627776]), more " \
           "than the" in line and line.endswith("give fewer or smaller samples")
    assert not (tmp_path / "o.json").exists()


# ----- the model page ---------------------------------------------------------------------------

def test_every_link_of_the_model_page_stays_in_the_report_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    g = chain_graph()
    g.example_inputs = [np.linspace(0.5, 2, 6)] * 4
    g.save("g.json")
    status, _, err = run_cli(capsys, "model", "g.json", "--routes", "forward", "--samples", "1",
                             "--jobs", "1", "--quiet", "--out", "r.json")
    assert (status, err) == (0, "")
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["model"]["summary"] = ["not a summary"]           # the page cannot be drawn from it
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    for results, folder in (("r.json", "good"), ("bad.json", "bad")):
        status, _, err = run_cli(capsys, "report", results, "--out", folder)
        assert (status, err) == (0, "")
        page = (tmp_path / folder / "model.html").read_text()
        links = re.findall(r'(?:href|src)="([^"#][^"]*)"', page)
        inside = [h for h in links if not h.startswith("data:")]
        assert "index.html" in inside
        root = (tmp_path / folder).resolve()
        for h in inside:
            target = (root / h.split("#")[0]).resolve()
            assert target.is_relative_to(root) and target.exists(), (folder, h)
    assert "could not be drawn" in (tmp_path / "bad" / "model.html").read_text()


def test_attribution_none_writes_no_shares_and_a_bad_choice_is_one_line(captured, capsys,
                                                                        monkeypatch):
    d, _ = captured
    monkeypatch.chdir(d)
    status, out, _ = run_cli(capsys, "model", "r.json.graph.json", "--out", "none.json",
                             "--samples", "1", "--jobs", "1", "--routes", "forward",
                             "--attribution", "none")
    assert status == 0
    rows = json.loads((d / "none.json").read_text())["rows"]
    assert {r["attribution"] for r in rows} == {"local", "propagated"}
    assert all(r["closure"] is None for r in rows) and "shares of the error" not in out
    status, _, err = run_cli(capsys, "model", "r.json.graph.json", "--attribution", "some")
    assert status == 2
    one_error(err, "--attribution", "some")


def test_a_factory_that_imports_torchvision_runs_in_a_fresh_process(tmp_path):
    # torchvision's PyPI wheels are built for a CUDA torch: beside the CPU build its
    # compiled ops do not load and a bare `import torchvision` (or timm, which imports it)
    # raises.  The command declares the two schemas torchvision's import needs before it
    # imports the factory (engine.targets.prepare_torchvision), in a process where nothing
    # imported torchvision before: the model runs and torchvision's own layers work.
    pytest.importorskip("torch")
    import importlib.util
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    (tmp_path / "tv.py").write_text(
        "import torch\n"
        "import torchvision\n"
        "from torchvision.ops import MLP\n\n"
        "def factory():\n"
        "    torch.manual_seed(0)\n"
        "    return MLP(4, [6, 3]).eval(), (torch.randn(2, 4),)\n")
    got = _cli("model", "tv.py:factory", "--formats", "bfloat16", "--routes", "forward",
               "--samples", "1", "--quiet", "--out", "r.json", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert rows and all(r["status"] == "ok" for r in rows)

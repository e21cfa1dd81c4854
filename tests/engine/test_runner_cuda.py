"""The coverage run's ``--implementations cuda`` (engine/implementations/cuda.py) in numba's
CUDA simulator: rows say which device ran them, what has no kernel is a status row, the
contract verdict follows the kernel's bits, and asking for CUDA where nothing can run is a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = "add,exp,reduce,softmax,tan"


def _env(sim: bool):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if sim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def _cli(args, sim=True, timeout=900):
    return subprocess.run([sys.executable, "-m", "roundoff_coverage", *args], capture_output=True,
                          text=True, cwd=ROOT, env=_env(sim), timeout=timeout)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda") / "c.json"
    proc = _cli(["run", "--ops", OPS, "--formats", "bfloat16,binary32",
                 "--implementations", "emulated,cuda", "--quiet", "--jobs", "2",
                 "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["rows"]


def _pick(rows, **kw):
    return [r for r in rows if all(r[k] == v for k, v in kw.items())]


def test_cuda_rows_name_the_simulator_and_the_contract_holds(rows):
    cuda = _pick(rows, implementation="cuda", status="ok")
    assert {r["op"] for r in cuda} == {"add", "exp", "reduce", "softmax"}
    for r in cuda:
        assert r["device"] == "simulator", r
        c = r["contract"]
        assert c["held"] is True and c["differing"] == 0, r
        assert c["order"] == "fixed" and c["fma"] is False and c["ftz"] is False
        if c["max_ulp"] is not None:
            assert r["max_ulp"] <= c["max_ulp"]
    for r in _pick(rows, implementation="emulated"):
        assert r["device"] == "cpu" and r["contract"] is None


def test_bitwise_kernels_measure_what_the_model_measures(rows):
    """Where the contract says bitwise, the kernel's rows carry the model's errors on the
    same points (the simulator cuts non-elementwise draws, so compare elementwise ones)."""
    for r in _pick(rows, implementation="cuda", status="ok", op="add"):
        (e,) = _pick(rows, implementation="emulated", op="add", instance=r["instance"],
                     route=r["route"], port=r["port"], format=r["format"])
        assert r["contract"]["agreement"] == "bitwise"
        assert (r["samples"], r["max_ulp"], r["histogram"]) == \
            (e["samples"], e["max_ulp"], e["histogram"])


def test_what_has_no_kernel_is_a_status_row(rows):
    tan = _pick(rows, implementation="cuda", op="tan")
    assert tan and all(r["status"] == "no_rule" and "no CUDA kernel" in r["reason"]
                       for r in tan)
    tangents = _pick(rows, implementation="cuda", route="tangent", op="add",
                     instance="default")
    assert tangents and all(r["status"] == "no_rule" and "no tangent route" in r["reason"]
                            for r in tangents)
    # An integer add has no kernel (element scalar only), and no value input either.
    for r in _pick(rows, implementation="cuda", op="add", instance="int8"):
        assert r["status"] in ("no_rule", "not_differentiable"), r


def test_a_kernel_that_rounds_differently_breaks_its_contract():
    """A degraded device addition (the sum rounded toward zero into the format): the rows
    say the contract did not hold and count the differing elements."""
    code = textwrap.dedent("""
        import json
        from roundoff_coverage.kernels import primitives as P
        import numpy as np
        from roundoff_coverage import formats
        from roundoff_coverage.engine import evaluate, runner
        real = P._emulated
        def degraded(f, simulated, dev):
            ops = real(f, simulated, dev)
            add = f["add"]
            rp_tz = np.array(list(P.rounding_params(formats.get("bfloat16"), "toward_zero")))
            import numba.cuda
            b2f, f2b = f["b2f"], f["f2b"]
            def tz(a, b, rp):
                return np.float64(formats.round_to(np.float64(add(a, b)), "bfloat16",
                                                   "toward_zero"))
            ops["add"] = tz
            return ops
        P._emulated = degraded
        sel = runner.Selection(ops=("add",), formats=("bfloat16",), routes=("forward",),
                               implementations=("cuda",))
        (task,) = [t for t in runner.plan(sel) if t.instance == "default"]
        rows, _ = evaluate.evaluate(task)
        print(json.dumps(rows[0]["contract"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env=_env(True), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    c = json.loads(proc.stdout.strip().splitlines()[-1])
    assert c["held"] is False and c["differing"] > 0


def test_cuda_without_gpu_or_simulator_is_a_one_line_error(tmp_path):
    proc = _cli(["run", "--ops", "add", "--implementations", "cuda", "--out",
                 str(tmp_path / "c.json")], sim=False, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--implementations cuda" in lines[0] \
        and "NUMBA_ENABLE_CUDASIM=1" in lines[0], proc.stderr
    assert not (tmp_path / "c.json").exists()


def test_the_summary_says_simulator_rows_are_not_gpu_accuracy(rows):
    from roundoff_coverage.reports import summary
    text = summary.text(rows)
    n = len(_pick(rows, implementation="cuda", status="ok"))
    assert f"cuda kernels: {n} rows measured on simulator; 0 contracts did not hold" in text
    assert "not GPU accuracy" in text
    broken = [dict(r, contract=dict(r["contract"], held=False)) if r["op"] == "exp" else r
              for r in _pick(rows, implementation="cuda", status="ok")]
    assert "contracts did not hold: exp " in summary.text(broken)

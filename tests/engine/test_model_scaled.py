"""Model runs under scaled formats (engine/model.py, class Scaled): a hand-built graph's
propagated and local errors, forward and gradient, against an oracle written with exact
rationals from the scheme definitions (tests/engine/test_run_scaled.py's: round to nearest even,
the MX floor rule, NVFP4's two-level scales, binary32 sequential matmul, the error unit);
block counts on inputs built to clip; the recipe's schemes; the command on a captured
torch model."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction as F

import numpy as np
import pytest

from roundoff_coverage.engine import model as M
from roundoff_coverage.engine.samples import ModelError
from roundoff_coverage.routes.ports import value
from roundoff_coverage import routes

from conftest import one_error, run_cli
from test_model_run import FACTORY
from test_run_scaled import (BFLOAT16, BINARY32, E5M2, floor_log2, matmul32, quantize_rows, rn,
                             transpose, unit_errors)


def rn_array(a):
    """float64 values rounded to nearest even into bfloat16 (through the oracle)."""
    return np.array([[float(rn(F(float(e)), BFLOAT16)) for e in r] for r in a])


def _r32(m):
    """A matrix of Fractions rounded to nearest even into binary32 (the compute format)."""
    return [[rn(v, BINARY32) for v in r] for r in m]


def _q(m, scheme):
    """Quantized along the last axis, dequantized and read into binary32."""
    return _r32(quantize_rows(m, scheme))


def _elementwise(f, a, b):
    return [[f(u, v) for u, v in zip(r, s)] for r, s in zip(a, b)]


def _worst(comp, exact, scheme) -> float:
    return max(abs(float(e)) for r in unit_errors(comp, exact, scheme) for e in r)


def _row(rows, node, route, port, attribution):
    return next(r for r in rows if r["node"] == node and r["route"] == route
                and r["port"] == port and r["attribution"] == attribution)


def _graph():
    """total = sum((x @ w + b) * v): a product, an add, a weighting, a loss."""
    g = routes.Graph(x=value((2, 32)), w=value((32, 24)), b=value((2, 24)),
                     v=value((2, 24)))
    z = g.apply(routes.op("matmul", x_shape=(2, 32), y_shape=(32, 24)), g.input("x"),
                g.input("w"), name="mm")
    h = g.apply(routes.op("add", shape=(2, 24)), z, g.input("b"), name="add")
    p = g.apply(routes.op("mul", shape=(2, 24)), h, g.input("v"), name="weigh")
    g.output(g.apply(routes.op("reduce", shape=(2, 24), axes=(0, 1)), p, name="total"))
    return g


@pytest.mark.parametrize("scheme", ["mxfp8_e4m3", "nvfp4"])
def test_node_errors_agree_with_an_exact_oracle(scheme):
    """The inputs (binary32 values) quantized along their natural axes -- x by rows, w by
    columns (the matmul contracts them), b and v by rows -- read into binary32; binary32
    compute with every node output and every pullback output quantized along its last
    axis; the exact run on the same quantized inputs.  Forward: mm and add, propagated and
    local; gradient: mm's contribution to w, propagated and local (the cotangent it reads:
    add's exact contribution quantized)."""
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32).astype(np.float64)
              for s in ((2, 32), (32, 24), (2, 24), (2, 24))]
    rows, summary, _ = M.measure(_graph(), M.Config(scheme, "nearest_even", "strict"),
                                 [arrays], 0, ("forward", "gradient"))
    x, w, b, v = ([[F(float(e)) for e in r] for r in a] for a in arrays)
    xq, wq = _q(x, scheme), transpose(_q(transpose(w), scheme))
    bq, vq = _q(b, scheme), _q(v, scheme)
    add32 = lambda a, c: _elementwise(lambda s, t: rn(s + t, BINARY32), a, c)   # noqa: E731
    exact_z = [[sum(p * q for p, q in zip(r, c)) for c in transpose(wq)] for r in xq]
    z = _q(matmul32(xq, wq), scheme)
    exact_h = _elementwise(lambda s, t: s + t, exact_z, bq)
    h = _q(add32(z, bq), scheme)
    zr = _q(exact_z, scheme)                     # add alone reads the exact z, quantized
    checks = [("mm", "forward", "z", "propagated", z, exact_z),
              ("mm", "forward", "z", "local", z, exact_z),
              ("add", "forward", "out", "propagated", h, exact_h),
              ("add", "forward", "out", "local", _q(add32(zr, bq), scheme),
               _elementwise(lambda s, t: s + t, zr, bq))]
    # The loss's cotangent 1 quantized (a one-element block), broadcast by reduce and
    # quantized, times v and quantized, through add and quantized, then x^T times it.
    c0 = _q([[F(1)]], scheme)[0][0]
    c1 = _q([[c0] * 24] * 2, scheme)
    c2 = _q(_q(_elementwise(lambda s, t: rn(s * t, BINARY32), c1, vq), scheme), scheme)
    exact_c = [[c0 * t for t in r] for r in vq]
    xt = transpose(xq)
    exact_dw = [[sum(p * q for p, q in zip(r, c)) for c in transpose(exact_c)] for r in xt]
    read = _q(exact_c, scheme)                   # mm alone: add's exact contribution, stored
    checks += [("mm", "gradient", "y", "propagated", _q(matmul32(xt, c2), scheme), exact_dw),
               ("mm", "gradient", "y", "local", _q(matmul32(xt, read), scheme),
                [[sum(p * q for p, q in zip(r, c)) for c in transpose(read)] for r in xt])]
    for node, route, port, attribution, comp, exact in checks:
        r = _row(rows, node, route, port, attribution)
        assert r["status"] == "ok" and r["scheme"] == scheme, (node, route, attribution)
        assert r["error_unit"].startswith("ulp of float"), r["error_unit"]
        assert r["max_ulp"] == pytest.approx(_worst(comp, exact, scheme), abs=1e-9), \
            (node, route, attribution)
    mm = _row(rows, "mm", "forward", "z", "propagated")
    assert mm["scale_axis"] == "x:-1, y:-2; z:-1"
    assert mm["blocks"] == (2 if scheme == "mxfp8_e4m3" else 4)     # 2 rows of 24
    # Propagation adds error: add's propagated error holds mm's quantization.
    assert _row(rows, "add", "forward", "out", "propagated")["max_ulp"] > \
        _row(rows, "add", "forward", "out", "local")["max_ulp"]
    assert summary["scaled_inputs"]["w"]["axis"] == "-2"
    assert summary["scaled_inputs"]["w"]["blocks"] == (24 if scheme == "mxfp8_e4m3" else 48)
    assert "unquantized" in summary["keep_note"] and summary["keep_binary32"]


def _clipping_graph():
    g = routes.Graph(x=value((1, 32)), y=value((1, 32)))
    g.output(g.apply(routes.op("mul", shape=(1, 32)), g.input("x"), g.input("y"),
                     name="scale"))
    return g


def test_block_counts_of_an_input_and_an_output_built_to_clip():
    """MX floor rule, amax in [1, 2): X = 2**-8, elements beyond 448 clamp.  x's 500/256,
    480/256 and -1.9 clip (3; 1.75 is 448 itself); y = 1.125 (288) does not.  The product
    of the stored x (+-1.75) and y, +-1.96875 = 504 X, clips in each of its 4 elements."""
    x = np.array([[500 / 256, 1.0, 480 / 256, -1.9, 1.75] + [0.0] * 27])
    y = np.full((1, 32), 1.125)
    rows, summary, _ = M.measure(_clipping_graph(),
                                 M.Config("mxfp8_e4m3", "nearest_even", "strict"),
                                 [[x, y]], 0, ("forward",))
    counts = summary["scaled_inputs"]
    assert (counts["x"]["clipped"], counts["x"]["blocks"], counts["y"]["clipped"]) == (3, 1, 0)
    for attribution in ("propagated", "local"):
        r = _row(rows, "scale", "forward", "out", attribution)
        assert (r["blocks"], r["clipped"], r["zero_blocks"], r["nan_blocks"]) == (1, 4, 0, 0)
        assert r["scale_exponents"] == [[-8, 1]]
        # 504 X stored as 448 X against the exact 504 X (whose block scale is X too): 56 X
        # in ulps of 32 X (E4M3's spacing in [256, 512)).
        assert r["max_ulp"] == pytest.approx(1.75, abs=1e-12)


def _bf16_errors(comp, exact):
    """|comp - exact| in ulps of bfloat16 at the exact values, the largest over the elements
    that do not cancel: |exact| >= 2**-p of the tensor's largest |exact| (a model row's ulp
    statistics leave the others out: engine/tensor_measures.py)."""
    p, emin, _ = BFLOAT16
    scale = max(abs(e) for er in exact for e in er)
    return max(float(abs(c - e) / F(2) ** (max(floor_log2(abs(e)), emin) - p + 1))
               for cr, er in zip(comp, exact) for c, e in zip(cr, er)
               if abs(e) >= scale / F(2) ** p)


@pytest.mark.parametrize("scheme, policy", [("mxfp8_e4m3", "fp8_recipe"),
                                            ("fp8_e4m3_tensor", "fp8_recipe"),
                                            ("nvfp4", "scaled_recipe")])
def test_a_recipe_quantizes_the_products_operands_only(scheme, policy):
    """_graph under a recipe, against an oracle from the definitions: every tensor stored in
    bfloat16; the matmul reads x quantized by rows and w by columns (E4M3 under
    fp8_recipe), computes in binary32 (products rounded, summed in order) and stores in
    bfloat16; add stays a bfloat16 add.  Its gradient with respect to w reads the
    cotangent (v: the loss is sum(h * v)) quantized by rows -- E5M2 under fp8_recipe -- and
    x as quantized for the forward product.  Errors in bfloat16 ulps against the exact run
    on the unquantized bfloat16 inputs, propagated and local."""
    rng = np.random.default_rng(7)
    arrays = [rn_array(rng.standard_normal(s)) for s in ((2, 32), (32, 24), (2, 24), (2, 24))]
    rows, summary, _ = M.measure(_graph(), M.Config(scheme, "nearest_even", policy),
                                 [arrays], 0, ("forward", "gradient"))
    x, w, b, v = ([[F(float(e)) for e in r] for r in a] for a in arrays)
    fp8 = policy == "fp8_recipe"
    xq, wq = _q(x, scheme), transpose(_q(transpose(w), scheme))
    z = [[rn(e, BFLOAT16) for e in r] for r in matmul32(xq, wq)]
    exact_z = [[sum(p * q for p, q in zip(r, c)) for c in transpose(w)] for r in x]
    for attribution in ("propagated", "local"):
        r = _row(rows, "mm", "forward", "z", attribution)
        assert r["max_ulp"] == pytest.approx(_bf16_errors(z, exact_z), rel=1e-9)
        assert r["scheme"] == scheme and r["error_unit"].startswith("ulp of bfloat16")
        assert set(r["scaled_inputs"]) == {"x", "y"}
    add = _elementwise(lambda s, t: rn(s + t, BFLOAT16), z, b)
    exact_add = _elementwise(lambda s, t: s + t, exact_z, b)
    r = _row(rows, "add", "forward", "out", "propagated")
    assert r["max_ulp"] == pytest.approx(_bf16_errors(add, exact_add), rel=1e-9)
    assert r["scheme"] is None                         # not a product: bfloat16 only
    assert _row(rows, "add", "forward", "out", "local")["max_ulp"] <= 0.5
    # d total / d w = x^T @ v, the cotangent v quantized by rows (it reaches mm exactly:
    # 1 * v and add's identity pullback are exact in bfloat16).
    vq = [[rn(e, BINARY32) for e in r] for r in
          quantize_rows(v, scheme, E5M2 if fp8 else None)]
    dw = [[rn(e, BFLOAT16) for e in r] for r in matmul32(transpose(xq), vq)]
    exact_dw = [[sum(p * q for p, q in zip(r, c)) for c in transpose(v)] for r in transpose(x)]
    r = _row(rows, "mm", "gradient", "y", "propagated")
    assert r["max_ulp"] == pytest.approx(_bf16_errors(dw, exact_dw), rel=1e-9)
    assert r["scheme"] == (scheme.replace("e4m3", "e5m2") if fp8 else scheme)
    assert r["error_unit"].endswith(f"(operands quantized into {scheme}, cotangents into "
                                    f"{r['scheme']})" if fp8 else
                                    f"(operands quantized into {scheme})")
    assert set(r["scaled_inputs"]) == {"x", "y", "cotangent z"}
    # Keeping mm out of the recipe (binary32 on unquantized operands) must shrink the
    # model's gradient errors.
    keep = {(e["keep"], e["route"]): e for e in summary["keep_binary32"]}
    mm = keep[("mm", "gradient")]
    assert mm["max_ulp_after"] < mm["max_ulp_before"]


def test_a_formats_file_scheme_travels_with_the_model_run(capsys, tmp_path):
    """A --formats-file scheme defined as the catalog's mxfp8_e4m3 measures as it does (its
    definition travels to the workers: rows equal but for the format label), under an
    ordinary policy and under fp8_recipe (its E5M2 twin named after it)."""
    g = _graph()
    rng = np.random.default_rng(3)
    g.example_inputs = [rng.standard_normal(p.shape) for p in g.inputs]
    g.save(tmp_path / "g.json")
    (tmp_path / "my.toml").write_text('[scaled.mine]\nbase = "mxfp8_e4m3"\n')
    docs = {}
    for fmt, extra in (("mine", ["--formats-file", tmp_path / "my.toml"]),
                       ("mxfp8_e4m3", [])):
        out = tmp_path / f"{fmt}.json"
        status, _, err = run_cli(capsys, "model", tmp_path / "g.json", "--formats", fmt,
                                 *extra, "--policies", "strict,fp8_recipe", "--samples", "1",
                                 "--routes", "forward,gradient", "--jobs", "1", "--quiet",
                                 "--out", out)
        assert status == 0, err
        docs[fmt] = json.loads(out.read_text())["rows"]
    key = ("node", "route", "port", "attribution", "policy")
    mine = {tuple(r[k] for k in key): r for r in docs["mine"]}
    cat = {tuple(r[k] for k in key): r for r in docs["mxfp8_e4m3"]}
    assert mine.keys() == cat.keys() and len(mine) > 20
    for k, r in cat.items():
        assert mine[k]["max_ulp"] == r["max_ulp"] and mine[k]["status"] == r["status"] == "ok"
    assert {r["scheme"] for r in docs["mine"] if r["route"] == "gradient"
            and r["policy"] == "fp8_recipe" and r["node"] == "mm"
            and r["port"] in ("x", "y")} == {"mine+float8_e5m2"}


def test_recipes_refuse_what_they_cannot_take():
    with pytest.raises(ModelError, match="needs a scheme with FP8 elements"):
        M.check(M.Config("nvfp4", "nearest_even", "fp8_recipe"))
    with pytest.raises(ModelError, match="bfloat16 is an element format"):
        M.check(M.Config("bfloat16", "nearest_even", "scaled_recipe"))
    with pytest.raises(ModelError, match="delayed scaling"):
        M.check(M.Config("fp8_e4m3_tensor:delayed", "nearest_even", "fp8_recipe"))


@pytest.mark.parametrize("args, says", [
    (["--formats", "nvfp4", "--policies", "fp8_recipe"], "needs a scheme with FP8 elements"),
    (["--formats", "bfloat16", "--policies", "fp8_recipe"], "bfloat16 is an element format"),
    (["--formats", "fp8_e4m3_tensor:delayed"], "delayed scaling"),
    (["--formats", "mxfp8_e4m3:bogus"], "unknown option 'bogus'"),
])
def test_a_scaled_format_the_model_run_cannot_take_is_one_line_exit_2(capsys, tmp_path,
                                                                       args, says):
    status, _, err = run_cli(capsys, "model", "nosuch.json", *args,
                             "--out", str(tmp_path / "x.json"))
    assert status == 2
    one_error(err, says)


def test_the_command_measures_a_captured_model_under_mxfp8(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(FACTORY)
    done = subprocess.run([sys.executable, "-m", "roundoff_coverage", "model", "net.py:make",
                           "--formats", "mxfp8_e4m3", "--routes", "forward,gradient",
                           "--samples", "1", "--jobs", "1", "--out", "r.json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    rows = doc["rows"]
    assert rows and all(r["status"] == "ok" and r["format"] == "mxfp8_e4m3" for r in rows), \
        [(r["node"], r["reason"]) for r in rows if r["status"] != "ok"]
    assert all(r["scheme"] == "mxfp8_e4m3" and "float8_e4m3fn" in r["error_unit"]
               for r in rows)
    nodes = [r for r in rows if r["node_index"] is not None]
    assert {r["attribution"] for r in nodes} == {"local", "propagated"}
    # every quantization that made a value is counted; the cotangent of the model's
    # output (port dy of the last node) is the direction itself, quantized as an input
    assert all(r["blocks"] >= 1 and r["clipped"] is not None for r in nodes
               if not (r["port"].startswith("d") and r["node"] == nodes[-1]["node"]))
    first = _row(rows, "linear", "forward", "y", "propagated")
    assert first["scale_axis"].endswith("; y:-1") and "x:-1" in first["scale_axis"]
    [summary] = doc["model"]["summary"].values()
    assert set(summary["scaled_inputs"]) == {"x", "l1.weight", "l1.bias", "l2.weight",
                                             "l2.bias"}

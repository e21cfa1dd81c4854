"""The coverage run under scaled formats (issue 22): inputs quantized along each port's
natural axis, binary32 compute, outputs quantized along their last axis, errors in ulps of
the element format at the exact value's block scale.

The oracle is written here from the definitions (formats/scaled.py cites them) with exact
rationals and does not call the code under test: round to nearest even into a binary
format, the MX floor rule with E8M0 scales, NVFP4's binary32 tensor scale and E4M3 block
scales, FP8 current per-tensor scaling, binary32 sequential matmul, and the error unit.  It
quantizes the run's own raw draws (engine.samples.draw, before quantization) and must find
the dequantized inputs the run stored in its reproducer, then the run's max error.
"""

from __future__ import annotations

import copy
import json
import struct
from fractions import Fraction

import numpy as np
import pytest

from roundoff_coverage import formats, routes
from roundoff_coverage.reports import gate, load
from roundoff_coverage.engine import quantize as quantizing, results, runner, samples
from roundoff_coverage.engine.evaluate import evaluate
from conftest import one_error, run_cli

SCHEMES = ("mxfp8_e4m3", "nvfp4", "fp8_e4m3_tensor")
OPS = ("matmul", "add", "softmax", "reduce")


def _run(tmp, name, **selection):
    out = tmp / f"{name}.json"
    sel = runner.Selection(**selection)
    runner.run(sel, out, jobs=1, progress=False, execute=evaluate)
    return out, json.loads(out.read_text())


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """(path, document) of a run of OPS under SCHEMES, one draw per sample kind."""
    return _run(tmp_path_factory.mktemp("scaled"), "scaled", ops=OPS, formats=SCHEMES,
                draws=1)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("recipe"), "recipe", ops=("matmul", "softmax"),
                formats=("fp8_e4m3_tensor", "mxfp8_e4m3", "nvfp4", "bfloat16"),
                policies=("fp8_recipe", "scaled_recipe", "fp32_accumulate"),
                routes=("forward", "gradient"), draws=1)


def _rows(doc, **key):
    return [r for r in doc["rows"] if all(r[k] == v for k, v in key.items())]


# ----- the oracle: definitions with exact rationals -----------------------------------------------

# Binary formats as (precision p, emin, max finite): values m * 2**(e - p + 1), e >= emin.
BINARY32 = (24, -126, (2 - Fraction(1, 2**23)) * 2**127)
E4M3 = (4, -6, Fraction(448))          # float8_e4m3fn: 1.75 * 2**8
E5M2 = (3, -14, Fraction(57344))       # float8_e5m2: 1.75 * 2**15
E2M1 = (2, 0, Fraction(6))             # float4_e2m1fn: 1.5 * 2**2
BFLOAT16 = (8, -126, (2 - Fraction(1, 2**7)) * 2**127)
BINARY64 = (53, -1022, (2 - Fraction(1, 2**52)) * 2**1023)


def floor_log2(v: Fraction) -> int:
    e = v.numerator.bit_length() - v.denominator.bit_length()
    return e if Fraction(2) ** e <= v else e - 1


def rn(v: Fraction, fmt, saturate=False):
    """v rounded to nearest, ties to even, into ``fmt``; past the max: +-inf, or +-max
    with ``saturate``."""
    p, emin, top = fmt
    if v == 0:
        return Fraction(0)
    e = max(floor_log2(abs(v)), emin)
    quantum = Fraction(2) ** (e - p + 1)
    n, r = divmod(v / quantum, 1)
    n = int(n) + (1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and int(n) % 2) else 0)
    out = n * quantum
    if abs(out) > top:
        return (top if out > 0 else -top) if saturate else (float("inf") if out > 0
                                                               else float("-inf"))
    return out


def scales(blocks, scheme):
    """The scale D (x tensor scale) of each block (a list of lists of Fractions)."""
    if scheme == "mxfp8_e4m3":
        # OCP MX v1.0: X = 2**(floor(log2 amax) - emax_elem), emax_elem = 8 for E4M3; an
        # all-zero block gets the least E8M0 scale 2**-127.
        out = []
        for b in blocks:
            amax = max(abs(v) for v in b)
            out.append(Fraction(2) ** max(-127, floor_log2(amax) - 8) if amax else
                       Fraction(2) ** -127)
        return out
    amax = max(abs(v) for b in blocks for v in b)
    if scheme == "fp8_e4m3_tensor":
        # Current scaling: d = amax / 448 rounded to nearest binary32.
        return [rn(amax / 448, BINARY32)] * len(blocks)
    # NVFP4: s_global = amax / (448 * 6) in binary32; s_block = (amax_b / 6) / s_global
    # rounded into E4M3, at least its least subnormal 2**-9, at most 448.
    sg = rn(amax / (448 * 6), BINARY32)
    return [min(max(rn(max(abs(v) for v in b) / 6 / sg, E4M3), Fraction(1, 512)), 448) * sg
            for b in blocks]


def quantize(blocks, scheme, elem=None):
    """The dequantized blocks: elements rounded into the element format, saturating.
    ``elem`` (E5M2): an FP8 scheme with that element instead (its emax in the MX rule and
    its max in the per-tensor scale)."""
    if elem is None:
        elem = E2M1 if scheme == "nvfp4" else E4M3
    if elem == E5M2:
        return _quantize_e5m2(blocks, scheme)
    return [[rn(v / d, elem, saturate=True) * d for v in b]
            for b, d in zip(blocks, scales(blocks, scheme))]


def _quantize_e5m2(blocks, scheme):
    """E5M2 elements: MX X = 2**(floor(log2 amax) - 15); per tensor d = amax / 57344."""
    if scheme == "mxfp8_e4m3":
        d = [Fraction(2) ** max(-127, floor_log2(max(abs(v) for v in b)) - 15)
             if any(b) else Fraction(2) ** -127 for b in blocks]
    else:
        amax = max(abs(v) for b in blocks for v in b)
        d = [rn(amax / 57344, BINARY32)] * len(blocks)
    return [[rn(v / di, E5M2, saturate=True) * di for v in b] for b, di in zip(blocks, d)]


def block_rows(m, k):
    """The rows of a matrix (lists) cut in blocks of k: [(i, [columns]), ...]."""
    return [(i, list(range(j, min(j + k, len(row))))) for i, row in enumerate(m)
            for j in range(0, len(row), k)]


def quantize_rows(m, scheme, elem=None):
    """A matrix quantized with its blocks along the last axis (whole tensor for FP8)."""
    k = 16 if scheme == "nvfp4" else 32
    cuts = block_rows(m, k) if scheme != "fp8_e4m3_tensor" else \
        [(i, list(range(len(row)))) for i, row in enumerate(m)]
    blocks = [[m[i][j] for j in cols] for i, cols in cuts]
    out = [row[:] for row in m]
    for (i, cols), q in zip(cuts, quantize(blocks, scheme, elem)):
        for j, v in zip(cols, q):
            out[i][j] = v
    return out


def transpose(m):
    return [list(c) for c in zip(*m)]


def matmul32(x, y, fmt=BINARY32):
    """Strict binary32 (``fmt``) matmul: each product rounded, then summed in order, each
    sum rounded."""
    out = []
    for row in x:
        z = []
        for col in transpose(y):
            s = Fraction(0)
            for a, b in zip(row, col):
                s = rn(s + rn(a * b, fmt), fmt)
            z.append(s)
        out.append(z)
    return out


def unit_errors(comp, exact, scheme):
    """(computed - exact) / (D * 2**(max(min(floor(log2|exact / D|), emax), emin) - p + 1))
    elementwise, D the scale of the exact value's block: ulps of the element format at the
    exact value's block scale."""
    p, emin, top = E2M1 if scheme == "nvfp4" else E4M3
    emax = floor_log2(top)
    k = 16 if scheme == "nvfp4" else 32
    cuts = block_rows(exact, k) if scheme != "fp8_e4m3_tensor" else \
        [(i, list(range(len(row)))) for i, row in enumerate(exact)]
    d = scales([[exact[i][j] for j in cols] for i, cols in cuts], scheme)
    out = [[None] * len(row) for row in exact]
    for (i, cols), di in zip(cuts, d):
        for j in cols:
            v = abs(exact[i][j]) / di
            e = max(min(floor_log2(v), emax), emin) if v else emin
            out[i][j] = (comp[i][j] - exact[i][j]) / (di * Fraction(2) ** (e - p + 1))
    return out


def decode(pattern) -> Fraction:
    return Fraction(struct.unpack(">d", struct.pack(">Q", int(pattern, 16)))[0])


# ----- the run against the oracle -----------------------------------------------------------------

@pytest.mark.parametrize("scheme", SCHEMES)
def test_matmul_forward_errors_agree_with_an_exact_oracle(scaled, scheme):
    """matmul k16 (2 x 16 times 16 x 2, one ordinary draw): the oracle quantizes the raw
    draw with x's blocks along its rows and y's along its columns, reads the values into
    binary32 and finds the inputs the run stored; binary32 products and sums, the output
    quantized along its rows, the error at the exact value's block scale: every element's,
    hence the row's max and its worst."""
    _, doc = scaled
    [row] = _rows(doc, op="matmul", instance="k16", route="forward", format=scheme)
    assert row["status"] == "ok" and row["samples"] == 4
    assert row["scheme"] == scheme and row["error_unit"].startswith("ulp of float")
    axes = {"fp8_e4m3_tensor": "x:tensor, y:tensor; z:tensor"}.get(scheme, "x:-1, y:-2; z:-1")
    assert row["scale_axis"] == axes
    task = next(t for t in runner.plan(runner.Selection(ops=("matmul",), formats=(scheme,),
                                                        draws=1)) if t.instance == "k16")
    raw = samples.draw(task, task.build(), task.fmt).inputs[0]
    x = [[Fraction(float(v)) for v in r] for r in raw[0]]
    y = [[Fraction(float(v)) for v in r] for r in raw[1]]
    # The dequantized values read into the compute format: rounded once into binary32.
    xq = [[rn(v, BINARY32) for v in r] for r in quantize_rows(x, scheme)]
    yq = [[rn(v, BINARY32) for v in r] for r in transpose(quantize_rows(transpose(y), scheme))]
    stored = row["worst"]["inputs"]
    assert [[decode(v) for v in r] for r in stored["x"]] == xq
    assert [[decode(v) for v in r] for r in stored["y"]] == yq
    exact = [[sum(a * b for a, b in zip(r, c)) for c in transpose(yq)] for r in xq]
    comp = quantize_rows(matmul32(xq, yq), scheme)
    err = [float(e) for r in unit_errors(comp, exact, scheme) for e in r]
    assert row["max_ulp"] == pytest.approx(max(abs(e) for e in err), abs=1e-9)
    assert row["worst"]["ulp"] == pytest.approx(err[row["worst"]["element"]], abs=1e-9)
    assert row["max_bits"] is None              # no ordinals across block scales


def test_the_compute_format_is_a_policy_option(tmp_path):
    """compute:binary64 reads NVFP4's dequantized values (an E2M1 element times an E4M3
    block scale times a binary32 tensor scale: up to 30 significant bits) exactly, where
    binary32 rounds them: the stored inputs are the oracle's exact dequantized values, and
    the row's error is that of a binary64 matmul on them."""
    _, doc = _run(tmp_path, "compute64", ops=("matmul",), formats=("nvfp4",),
                  policies=("compute:binary64",), routes=("forward",), draws=1)
    [row] = _rows(doc, op="matmul", instance="k16", route="forward")
    assert row["status"] == "ok" and row["policy"] == "compute:binary64"
    task = next(t for t in runner.plan(runner.Selection(
        ops=("matmul",), formats=("nvfp4",), policies=("compute:binary64",), draws=1))
        if t.instance == "k16")
    assert task.fmt.name == "binary64"
    d = samples.draw(task, task.build(), task.fmt)

    def quantized(k):
        x, y = ([[Fraction(float(v)) for v in r] for r in a] for a in d.inputs[k])
        return quantize_rows(x, "nvfp4"), transpose(quantize_rows(transpose(y), "nvfp4"))
    xq, yq = quantized(row["worst"]["draw"])
    stored = row["worst"]["inputs"]
    assert [[decode(v) for v in r] for r in stored["x"]] == xq
    assert [[decode(v) for v in r] for r in stored["y"]] == yq
    xq, yq = quantized(d.kinds.index("ordinary"))
    assert any(rn(v, BINARY32) != v for r in xq + yq for v in r)   # binary32 would round
    exact = [[sum(a * b for a, b in zip(r, c)) for c in transpose(yq)] for r in xq]
    comp = quantize_rows(matmul32(xq, yq, BINARY64), "nvfp4")
    err = [float(e) for r in unit_errors(comp, exact, "nvfp4") for e in r]
    assert row["by_kind"]["ordinary"]["max_ulp"] == pytest.approx(max(abs(e) for e in err),
                                                                  abs=1e-9)


def test_scaled_rows_carry_their_fields_and_the_element_rows_do_not(scaled):
    """Every measured row says its scheme, unit, axes and block counts; index and
    integer-word instances are no_rule with the reason."""
    _, doc = scaled
    measured = [r for r in doc["rows"] if r["status"] == "ok"]
    assert {r["op"] for r in measured} == set(OPS)
    assert {r["format"] for r in measured} == set(SCHEMES)
    for r in measured:
        assert r["scheme"] == r["format"] and r["blocks"] >= 1
        assert r["zero_blocks"] + r["nan_blocks"] <= r["blocks"]
        assert sum(n for _, n in r["scale_exponents"]) + r["nan_blocks"] == r["blocks"]
        assert r["scaled_inputs"] and r["scale_axis"]
    grad = _rows(doc, op="matmul", instance="k16", route="gradient", port="y",
                 format="mxfp8_e4m3")[0]
    assert set(grad["scaled_inputs"]) == {"x", "y", "cotangent z"}
    assert grad["scaled_inputs"]["y"]["axis"] == "-2"
    words = _rows(doc, op="add", instance="int8", route="forward")
    assert words and all(r["status"] == "no_rule" and "no input holding the model's scalar"
                         in r["reason"] for r in words)
    # Every ordinary-domain error of a correctly rounding route under the rceil-free rules
    # stays within the clipping: at most 2 ulp (the floor rule's (512 - 448) / 32).
    assert all(r["by_kind"]["ordinary"]["max_ulp"] <= 2.5 for r in measured
               if "ordinary" in (r["by_kind"] or {}) and r["op"] in ("add", "matmul"))


def test_the_results_file_round_trips_and_gates(scaled, tmp_path, capsys):
    """The file validates, loads as a DataFrame with the scaled columns, gates against
    itself (PASS) and fails against a copy whose scaled row got worse."""
    path, doc = scaled
    results.check(results.read(path), path, strict=True)
    df = load(path)
    ok = df[(df.status == "ok") & (df.format == "nvfp4")]
    assert len(ok) and ok.clipped.notna().all() and (ok.error_unit.str.contains("float4")).all()
    assert not gate.compare(gate.read(path), gate.read(path)).failed
    status, out, _ = run_cli(capsys, "gate", "--baseline", path, path)
    assert status == 0 and "PASS" in out
    worse = copy.deepcopy(doc)
    row = next(r for r in worse["rows"] if r["status"] == "ok" and r["format"] == "mxfp8_e4m3")
    row["max_ulp"] = row["max_ulp"] + 1.0
    bad = tmp_path / "worse.json"
    bad.write_text(json.dumps(worse))
    status, out, _ = run_cli(capsys, "gate", "--baseline", path, bad)
    assert status == 1 and "FAIL" in out and "mxfp8_e4m3" in out
    row["scale_exponents"] = [[0, row["blocks"] + 1]]           # more blocks than there are
    with pytest.raises(results.ResultsError, match="scale_exponents count more blocks"):
        results.check(worse, bad, strict=True)


# ----- block counts -------------------------------------------------------------------------------

def test_clipping_counts_elements_past_the_element_max():
    """MX floor rule: amax in [1, 2) gives X = 2**-8, so V / X lies in [256, 512) and the
    elements beyond 448 are clamped: 500/256, 480/256 and -1.9 (486.4) clip; 1.75 (448)
    and 1 do not.  rceil scales by amax / 448 rounded up: nothing clips."""
    x = np.array([[500 / 256, 1.0, 480 / 256, -1.9, 1.75] + [0.0] * 27])
    deq, q, counts = quantizing.quantize_port(x, formats.get("mxfp8_e4m3"), -1, 0)
    assert counts.clipped == 3 and counts.blocks == 1 and counts.histogram() == [[-8, 1]]
    assert deq[0, 0] == 448 / 256 and deq[0, 3] == -448 / 256
    _, _, counts = quantizing.quantize_port(x, formats.get("mxfp8_e4m3:rceil"), -1, 0)
    assert counts.clipped == 0


def test_zero_and_nan_blocks_are_counted():
    """NVFP4: a block of 1e-6 next to one of 1000 gets the least E4M3 scale 2**-9 times
    s_global = 1000 / 2688, under which 1e-6 is below half of E2M1's least value 0.5: the
    block becomes zero.  MX: a block holding an Inf has a NaN scale."""
    x = np.array([[1000.0] * 16 + [1e-6] * 16])
    _, _, counts = quantizing.quantize_port(x, formats.get("nvfp4"), -1, 0)
    assert (counts.blocks, counts.zero_blocks, counts.nan_blocks) == (2, 1, 0)
    x = np.array([[np.inf] + [1.0] * 31, [2.0] * 32])
    _, _, counts = quantizing.quantize_port(x, formats.get("mxfp8_e4m3"), -1, 0)
    assert (counts.blocks, counts.zero_blocks, counts.nan_blocks) == (2, 0, 1)
    assert counts.histogram() == [[-7, 1]]              # 2 = 256 * 2**-7


def test_natural_axes_of_products():
    """The contraction axis: matmul's y by columns, conv's channels, attention's v by keys;
    the last axis elsewhere."""
    def axes(name, **attrs):
        o = routes.op(name, **attrs)
        return {n: quantizing.scale_axis(o, n, p) for n, p in zip(o.input_names, o.inputs)}
    assert axes("matmul", x_shape=(2, 3), y_shape=(3, 2)) == {"x": -1, "y": -2}
    assert axes("conv", shape=(1, 3, 4), out_channels=5, kernel=(2,), stride=(1,),
                padding=(0,), dilation=(1,), groups=1) == {"x": -2, "weight": -2, "bias": -1}
    assert axes("attention", batch=(), queries=2, key_count=3, dim=2,
                value_dim=2) == {"q": -1, "k": -1, "v": -2, "scale": None}
    assert axes("contract", x_shape=(2, 3), y_shape=(3, 2), x_axes=(1,),
                y_axes=(0,)) == {"x": -1, "y": -2}


# ----- the recipe ---------------------------------------------------------------------------------

def _recipe_oracle(scheme, policy, route):
    """The ordinary draw of matmul k16 (2 x 16 times 16 x 2) under a recipe, from the
    definitions: the operands (x along its rows, y along its columns; under the gradient
    route the cotangent along its rows) quantized into the scheme -- E4M3 forward and E5M2
    for the cotangent under fp8_recipe -- and read into binary32; the product in binary32
    (each product rounded, then summed in order); the result rounded into bfloat16; its
    error in ulps of bfloat16 at the exact value of the same product of the unquantized
    bfloat16 draws.  (The gradient of x: dz @ y^T, y quantized as in the forward product.)"""
    task = next(t for t in runner.plan(runner.Selection(
        ops=("matmul",), formats=(scheme,), policies=(policy,), routes=(route,), draws=1))
        if t.instance == "k16")
    d = samples.draw(task, task.build(), task.fmt)
    k = d.kinds.index("ordinary")
    x, y = ([[Fraction(float(v)) for v in r] for r in a] for a in d.inputs[k])
    assert all(rn(v, BFLOAT16) == v for r in x + y for v in r)     # drawn in the storage
    fp8 = policy == "fp8_recipe"
    xq = [[rn(v, BINARY32) for v in r] for r in quantize_rows(x, scheme)]
    yq = [[rn(v, BINARY32) for v in r] for r in transpose(quantize_rows(transpose(y), scheme))]
    if route == "forward":
        comp, exact = matmul32(xq, yq), [[sum(a * b for a, b in zip(r, c)) for c in
                                          transpose(y)] for r in x]
    else:
        dz = [[Fraction(float(v)) for v in r] for r in d.cotangents[k][0]]
        dzq = [[rn(v, BINARY32) for v in r]
               for r in quantize_rows(dz, scheme, E5M2 if fp8 else None)]
        comp, exact = matmul32(dzq, transpose(yq)), [[sum(a * b for a, b in zip(r, c))
                                                      for c in y] for r in dz]
    errs = []
    for cr, er in zip(comp, exact):
        for c, e in zip(cr, er):
            ulp = Fraction(2) ** (max(floor_log2(abs(e)), BFLOAT16[1]) - BFLOAT16[0] + 1)
            errs.append(abs(rn(c, BFLOAT16) - e) / ulp)
    return float(max(errs))


@pytest.mark.parametrize("scheme,policy", [("fp8_e4m3_tensor", "fp8_recipe"),
                                           ("mxfp8_e4m3", "fp8_recipe"),
                                           ("nvfp4", "scaled_recipe")])
@pytest.mark.parametrize("route", ["forward", "gradient"])
def test_a_recipe_quantizes_the_operands_and_stores_in_bfloat16(recipe, scheme, policy,
                                                                 route):
    """The recipe's matmul rows against the oracle (_recipe_oracle): the operands'
    quantization is part of the measured error, the outputs are bfloat16, measured in its
    ulps against the exact product of the bfloat16 draws."""
    _, doc = recipe
    port = "z" if route == "forward" else "x"
    [row] = _rows(doc, op="matmul", instance="k16", route=route, port=port, format=scheme,
                  policy=policy)
    assert row["status"] == "ok", row["reason"]
    assert row["by_kind"]["ordinary"]["max_ulp"] == pytest.approx(
        _recipe_oracle(scheme, policy, route), rel=1e-9)
    # Far more than a bfloat16 matmul's few ulps: the operands lost 4 of their 8 bits.
    assert row["by_kind"]["ordinary"]["max_ulp"] > 2
    want = {"forward": scheme, "gradient": scheme if policy == "scaled_recipe" else
            scheme.replace("e4m3", "e5m2")}[route]
    assert row["scheme"] == want and row["error_unit"].startswith("ulp of bfloat16")
    assert f"operands quantized into {scheme}" in row["error_unit"]
    assert ("cotangents into" in row["error_unit"]) == (want != scheme)
    labels = {"forward": {"x", "y"}, "gradient": {"x", "y", "cotangent z"}}[route]
    assert set(row["scaled_inputs"]) == labels


def test_the_gate_fails_a_recipe_row_whose_operands_clip_more(recipe, tmp_path, capsys):
    path, doc = recipe
    worse = copy.deepcopy(doc)
    row = next(r for r in worse["rows"] if r["status"] == "ok" and r["op"] == "matmul"
               and r["policy"] == "fp8_recipe")
    row["scaled_inputs"]["x"]["clipped"] += 1
    bad = tmp_path / "worse.json"
    bad.write_text(json.dumps(worse))
    status, out, _ = run_cli(capsys, "gate", "--baseline", path, bad)
    assert status == 1 and "x: clipped elements" in out


def test_a_recipe_leaves_other_operators_in_bfloat16(recipe):
    """softmax is not a product: under a recipe it is an element task of bfloat16 with
    binary32 accumulation (its errors a few bfloat16 ulps,
    as the fp32_accumulate policy's on bfloat16, not the 2**-3-relative steps of an
    FP8 element); an element format or, under fp8_recipe, a scheme without FP8 elements is
    no_rule."""
    _, doc = recipe
    for scheme in ("mxfp8_e4m3", "nvfp4"):
        rows = _rows(doc, op="softmax", format=scheme, policy="scaled_recipe",
                     route="forward")
        assert rows and all(r["status"] == "ok" and r["scheme"] is None and
                            r["error_unit"] is None for r in rows)
        assert all(0 < r["by_kind"]["ordinary"]["max_ulp"] <= 4 for r in rows)
    for fmt, policy, why in (("nvfp4", "fp8_recipe", "needs a scheme with FP8 elements"),
                             ("bfloat16", "fp8_recipe", "is an element format"),
                             ("bfloat16", "scaled_recipe", "is an element format")):
        rows = _rows(doc, op="matmul", format=fmt, policy=policy)
        assert rows and all(r["status"] == "no_rule" and why in r["reason"] for r in rows)


# ----- the command line ---------------------------------------------------------------------------

def test_a_bad_scheme_option_is_one_line_exit_2(capsys, tmp_path):
    status, _, err = run_cli(capsys, "run", "--ops", "add", "--formats", "mxfp8_e4m3:bogus",
                             "--out", tmp_path / "x.json", "--quiet")
    assert status == 2
    one_error(err, "mxfp8_e4m3:bogus", "unknown option 'bogus'")


def test_the_command_line_runs_a_scheme_with_options(capsys, tmp_path):
    out = tmp_path / "r.json"
    status, _, err = run_cli(capsys, "run", "--ops", "reduce", "--formats",
                             "mxfp8_e4m3:rceil", "--routes", "forward", "--samples", "1",
                             "--jobs", "1", "--quiet", "--out", out)
    assert status == 0, err
    doc = json.loads(out.read_text())
    ok = [r for r in doc["rows"] if r["status"] == "ok"]
    assert ok and {r["format"] for r in ok} == {"mxfp8_e4m3:rceil"}
    assert all(r["clipped"] == 0 for r in ok)      # rceil never saturates an element

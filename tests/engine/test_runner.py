"""The coverage run (engine/runner.py, engine/evaluate.py, the ``run`` command).

Oracles are independent of the runner: mpmath at 300 bits for the exact values of a
reproducer, the format's own enumeration (formats.CATALOG constants) for exhaustive counts,
and the definitions of the statuses.  Selections are tiny so the file runs in seconds.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import routes
from roundoff_coverage.engine import evaluate, runner
from roundoff_coverage.engine.measuring import buckets
from roundoff_coverage.reports.cli import main
from roundoff_coverage.routes.ports import value
from roundoff_coverage.routes.registry import define, withdraw
from conftest import CTX, one_error

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMALL = runner.Selection(ops=("neg", "exp", "eq", "softmax"),
                         formats=("bfloat16", "float8_e4m3fn"), draws=2)


def _run(sel, path, **kw):
    kw.setdefault("jobs", 1)
    return runner.run(sel, str(path), progress=False, **kw)


def _rows(sel, **match):
    """Rows of an in-process evaluation of every task of ``sel`` matching ``match``."""
    out = []
    for t in runner.plan(sel):
        out += [r for r in evaluate.evaluate(t)[0]
                if all(r[k] == v for k, v in match.items())]
    return out


# ----- determinism, checkpoint, resume -----------------------------------------------------------

def test_jobs_1_and_2_write_byte_identical_files(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _run(SMALL, a, jobs=1)
    out = _run(SMALL, b, jobs=2)
    assert a.read_bytes() == b.read_bytes()
    assert out.ran == out.total == len(runner.plan(SMALL))
    assert not os.path.exists(runner.checkpoint_path(b))       # removed after the final write


def test_resume_skips_finished_tasks_and_gives_the_same_file(tmp_path):
    full, part = tmp_path / "full.json", tmp_path / "part.json"
    _run(SMALL, full)
    tasks = runner.plan(SMALL)
    finished = tasks[: len(tasks) // 2]
    # An interrupted run: the checkpoint holds the first half, the last line torn by a kill.
    with open(runner.checkpoint_path(part), "w") as fh:
        fh.write(json.dumps({"checkpoint": "roundoff-coverage/1",
                             "fingerprint": SMALL.fingerprint(), "command": ""}) + "\n")
        for t in finished:
            fh.write(json.dumps({"task": t.key, "rows": evaluate.evaluate(t)[0]}) + "\n")
        fh.write('{"task": "torn')
    executed = []

    def record(task):
        executed.append(task.key)
        return evaluate.evaluate(task)

    out = _run(SMALL, part, resume=True, execute=record)
    assert set(executed) == {t.key for t in tasks[len(finished):]}
    assert out.resumed == len(finished)
    assert part.read_bytes() == full.read_bytes()


def test_resume_refuses_a_checkpoint_of_another_selection(tmp_path, capsys):
    out = tmp_path / "r.json"
    with open(runner.checkpoint_path(out), "w") as fh:
        fh.write(json.dumps({"checkpoint": "roundoff-coverage/1", "fingerprint": "x",
                             "command": "roundoff-coverage run --ops exp"}) + "\n")
    status = main(["run", "--ops", "neg", "--formats", "bfloat16", "--out", str(out),
                   "--resume", "--jobs", "1", "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.splitlines()) == 1 and "different selection" in err


def test_killed_run_keeps_finished_tasks_and_resume_runs_only_the_rest(tmp_path):
    out = tmp_path / "k.json"
    ckpt = pathlib.Path(runner.checkpoint_path(out))
    args = ["--ops", "softmax,logSoftmax,layerNorm,attention,crossEntropy,exp",
            "--formats", "bfloat16,binary16,binary32", "--samples", "3", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "roundoff_coverage", "run", *args, "--jobs", "1",
                             "--quiet"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and ckpt.read_text().count('"task"') >= 3:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    sel = runner.Selection(ops=("exp", "softmax", "logSoftmax", "attention", "layerNorm",
                                "crossEntropy"), formats=("bfloat16", "binary16", "binary32"),
                           draws=3)
    kept = runner.read_checkpoint(ckpt, sel.fingerprint())
    assert len(kept) >= 3 and not out.exists()
    executed = []

    def record(task):
        executed.append(task.key)
        return evaluate.evaluate(task)

    result = _run(sel, out, resume=True, execute=record)
    assert not set(executed) & set(kept)
    assert len(executed) + len(kept) == result.total
    doc = json.loads(out.read_text())
    assert {(r["op"], r["format"]) for r in doc["rows"]} == \
        {(t.op, t.format) for t in runner.plan(sel)}


# ----- statuses --------------------------------------------------------------------------------

def test_erf_under_native_is_no_rule_naming_the_capability():
    sel = runner.Selection(ops=("erf",), formats=("binary32",), implementations=("native",),
                           draws=1)
    rows = _rows(sel)
    assert rows and {r["status"] for r in rows} == {"no_rule"}
    assert {r["need"] for r in rows} == {"Erf"}
    assert all("Erf" in r["reason"] for r in rows)


def test_comparison_tangent_is_not_differentiable():
    rows = _rows(runner.Selection(ops=("eq",), formats=("bfloat16",), draws=1),
                 instance="default")
    by_route = {r["route"]: r for r in rows}
    assert by_route["tangent"]["status"] == "not_differentiable"
    assert by_route["gradient"]["status"] == "not_differentiable"
    assert by_route["forward"]["status"] == "ok" and by_route["forward"]["mismatches"] == 0


def test_words_compare_exactly_even_beyond_binary64():
    # uint64 and int64 words near 2**63 do not survive a float64 conversion.
    sel = runner.Selection(ops=("bitwiseAnd", "add"), formats=("bfloat16",),
                           routes=("forward",), draws=2)
    rows = [r for r in _rows(sel) if r["instance"] in ("uint64", "int64")]
    assert len(rows) == 3 and all(r["status"] == "ok" and r["mismatches"] == 0 for r in rows)


@pytest.fixture
def broken_op():
    def forward(xp, a, x):
        raise ArithmeticError("scratch operator always fails\nsecond line")
    define("scratchBroken", "elementwise", ports=lambda a: ({"x": value((3,))},
                                                          {"y": value((3,))}),
           forward=forward, backward=lambda xp, a, xs, ys, gs, needs: (gs[0],),
           samples={"ordinary": lambda rng, fmt, op: (np.zeros(3),)})
    yield "scratchBroken"
    withdraw("scratchBroken")


def test_a_failing_route_is_an_error_row_and_the_run_goes_on(tmp_path, broken_op):
    sel = runner.Selection(ops=(broken_op, "neg"), formats=("bfloat16",), draws=1)
    _run(sel, tmp_path / "e.json")
    rows = json.loads((tmp_path / "e.json").read_text())["rows"]
    bad = [r for r in rows if r["op"] == broken_op]
    assert {r["status"] for r in bad if r["route"] != "tangent"} == {"error"}
    assert all("scratch operator always fails second line" in r["reason"] for r in bad
               if r["status"] == "error")
    assert {r["status"] for r in rows if r["op"] == "neg"
            and r["attrs"].get("element", "scalar") == "scalar"} == {"ok"}


# ----- measured errors against independent oracles ------------------------------------------------

def _ulp_mpmath(computed: float, exact, fmt) -> float:
    """(computed - exact) / ulp(exact) in ``fmt``, with mpmath at 300 bits."""
    x = CTX.mpf(exact)
    e = int(CTX.floor(CTX.log(abs(x), 2)))
    q = max(e - fmt.precision + 1, fmt.qmin)
    return float((CTX.mpf(computed) - x) / CTX.ldexp(1, q))


def test_exp_in_bfloat16_is_rounded_once_and_its_worst_case_reproduces():
    fmt = formats.get("bfloat16")
    rows = _rows(runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward",),
                                  draws=8), instance="default")
    (row,) = rows
    # Kinds ordinary, edges, special and the derived magnitudes; 8 draws of 3 elements each.
    assert row["status"] == "ok" and row["samples"] == 4 * 8 * 3
    assert 0 < row["max_ulp"] <= 0.5                       # one rounding of the exact value
    assert row["bound"] == 0.5 and row["violations"] == 0 and row["bound_ratio"] <= 1
    w = row["worst"]
    x = float(formats.decode(np.array([int(w["inputs"]["x"], 16)], dtype=np.uint64), fmt)[0])
    exact = CTX.exp(CTX.mpf(x))
    assert abs(_ulp_mpmath(float(w["computed"]), exact, fmt) - w["ulp"]) < 1e-6
    assert abs(abs(w["ulp"]) - row["max_ulp"]) == 0


def test_exact_operators_measure_zero_and_compound_ones_do_not():
    sel = runner.Selection(ops=("neg", "abs", "softmax", "smoothAbs"), formats=("bfloat16",),
                           routes=("forward",), draws=4)
    rows = {r["op"]: r for r in _rows(sel, instance="default")}
    assert rows["neg"]["max_ulp"] == 0 and rows["abs"]["max_ulp"] == 0
    assert rows["softmax"]["max_ulp"] > 0.5               # exp, sum, divide: several roundings
    assert rows["smoothAbs"]["max_ulp"] > 0


@pytest.mark.parametrize("fmt", ["bfloat16", "binary16"])
def test_exhaustive_mode_covers_every_finite_value(fmt):
    sel = runner.Selection(ops=("neg",), formats=(fmt,), routes=("forward",), draws=2,
                           exhaustive=True)
    (row,) = _rows(sel, instance="default")
    f = formats.get(fmt)
    # Every pattern but those with an all-ones exponent field: 2**16 - 2 * 2**w_f.
    assert row["samples"] == f.finite_count == 2**16 - 2 * 2**f.man_bits
    assert row["exhaustive"] and row["max_ulp"] == 0


def _flags_of(op, fmt, xs, route="forward", **attrs):
    """The sticky IEEE flags of one route of ``op`` on one draw ``xs`` (float64 arrays),
    under the emulated backend (evaluate.run_routes, as the run measures them)."""
    task = evaluate.Task(op, "t", (), fmt, "nearest_even", "strict", "emulated", (route,), 1,
                         0)
    o = routes.op(op, shape=np.shape(xs[0]), **attrs)
    f = formats.get(fmt)
    d = evaluate.Draws(o, [tuple(np.asarray(x, dtype=np.float64) for x in xs)], ["t"], True,
                       f, task)
    raised = {}
    got = evaluate.run_routes(o.rule(numerics.emulated(f)), d, [route], raised)
    assert not isinstance(got[route], Exception), got[route]
    return set(formats.flag_names(raised[route]))


def test_rows_carry_the_ieee_flags_their_route_raised():
    # Oracles by hand, in bfloat16 (p = 8, emax = 127, max = (2 - 2**-7) * 2**127):
    # 1 + 1 = 2 and 2 - 1 = 1 are exact: no flag at all;
    assert _flags_of("add", "bfloat16", ([1.0, 2.0], [1.0, -1.0])) == set()
    # 1 + 2**-9 lies strictly between 1 and 1 + 2**-7: inexact only;
    assert _flags_of("add", "bfloat16", ([1.0], [2.0 ** -9])) == {"inexact"}
    # max + max = (4 - 2**-6) * 2**127 is beyond max + ulp/2: overflow and inexact;
    big = float(formats.get("bfloat16").max_finite)
    assert _flags_of("add", "bfloat16", ([big], [big])) == {"overflow", "inexact"}
    # 2**-126 * 2**-10 = 2**-136 is below half the least subnormal 2**-133: it rounds to
    # zero, tiny and inexact, so underflow and inexact;
    assert _flags_of("mul", "bfloat16", ([2.0 ** -126], [2.0 ** -10])) == \
        {"underflow", "inexact"}
    # x / 0 for finite x != 0 divides by zero (exact infinity, no inexact); 0 / 0 is invalid.
    assert _flags_of("div", "bfloat16", ([1.0], [0.0])) == {"divide_by_zero"}
    assert _flags_of("div", "bfloat16", ([0.0], [0.0])) == {"invalid"}
    # A route's flags include its forward pass's: the gradient of add at (max, max).
    assert "overflow" in _flags_of("add", "bfloat16", ([big], [big]), route="gradient")


def test_run_rows_record_flags_under_emulated_and_none_under_native():
    sel = runner.Selection(ops=("exp",), formats=("bfloat16",), routes=("forward",), draws=2,
                           implementations=("emulated", "native"))
    rows = {r["implementation"]: r for r in _rows(sel, instance="default")}
    # exp's special samples hold the format's largest value: exp(max) overflows.
    assert {"inexact", "overflow"} <= set(rows["emulated"]["flags"])
    assert rows["native"]["flags"] is None


def test_magnitudes_are_log_uniform_over_the_whole_range_and_keep_the_domain():
    fmt = formats.get("binary16")
    o = routes.op("log", shape=(4000,))
    (x,) = o.samples(np.random.default_rng(7), "binary16", "magnitudes")
    assert np.all(x > 0)                                   # log's ordinary domain is x > 0
    assert np.array_equal(formats.round_to(x, fmt), x)     # values of the format
    e = np.log2(x)
    lo, hi = np.log2(float(fmt.min_subnormal)), np.log2(float(fmt.max_finite))
    assert e.min() >= lo and e.max() <= hi
    # Uniform exponents: each quarter of [lo, hi] holds a quarter of the draws (binomial
    # standard deviation sqrt(4000 * 3/16) ~ 27, so +-200 is over 7 deviations).
    counts = np.histogram(e, bins=4, range=(lo, hi))[0]
    assert np.all(np.abs(counts - 1000) < 200), counts
    assert (x < float(fmt.min_normal)).sum() > 0           # subnormals drawn


def test_large_inputs_of_a_worst_case_regenerate_from_the_seed(tmp_path):
    from fractions import Fraction

    from roundoff_coverage import reports
    sel = runner.Selection(ops=("reduce",), formats=("bfloat16",), routes=("forward",), draws=1)
    _run(sel, tmp_path / "r.json")
    df = reports.load(tmp_path / "r.json")
    row = df[df.instance == "sum-n4096"].iloc[0]
    assert "reports.reproduce" in row["worst"]["inputs"]["x"]
    r = reports.reproduce(tmp_path / "r.json", row)
    x = r["inputs"]["x"]
    assert x.shape == (4, 4096)
    # The exact sum of the worst output's row, in rationals, is the recorded exact value,
    # and the emulated route on the regenerated inputs gives the recorded computed value.
    e = int(row["worst"]["element"])
    exact = sum(Fraction(float(v)) for v in x[e])
    assert abs(float(exact) - float(row["worst"]["exact"])) <= 1e-12 * abs(float(exact))
    (y,) = r["op"].rule(numerics.emulated("bfloat16")).forward((x,))
    assert float(np.asarray(y).reshape(-1)[e]) == float(row["worst"]["computed"])


def test_user_formats_run_under_their_compact_spec(tmp_path, capsys):
    spec = tmp_path / "formats.toml"
    spec.write_text("[formats.myf8]\nexp_bits = 4\nman_bits = 3\nbias = 9\nsaturate = true\n")
    out = tmp_path / "r.json"
    status = main(["run", "--formats-file", str(spec), "--formats", "myf8", "--ops", "neg",
                   "--routes", "forward", "--samples", "1", "--jobs", "1", "--quiet",
                   "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    rows = json.loads(out.read_text())["rows"]
    assert {r["format"] for r in rows} == {"e4m3b9-sat"}
    # neg of format values is exact; its integer instances (int8, uint64) have no ulps.
    floats = [r for r in rows if r["attrs"].get("element", "scalar") == "scalar"]
    assert len(floats) == 2 and all(r["status"] == "ok" and r["max_ulp"] == 0 for r in floats)
    assert all(r["status"] == "ok" and r["max_ulp"] is None and r["mismatches"] == 0
               for r in rows if r not in floats)


# ----- the command line ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv,fragments", [
    (["--ops", "sofmax"], ["sofmax", "softmax"]),
    (["--formats", "bfloat61"], ["bfloat61", "bfloat16"]),
    (["--families", "transcendentl"], ["transcendental"]),
    (["--routes", "backward"], ["backward"]),
    (["--policies", "fast"], ["fast"]),
    (["--implementations", "cuda"], ["cuda"]),
    (["--samples", "0"], ["--samples"]),
], ids=["op", "format", "family", "route", "policy", "implementation", "samples"])
def test_bad_names_exit_2_with_one_line(capsys, tmp_path, argv, fragments):
    status = main(["run", *argv, "--out", str(tmp_path / "r.json"), "--quiet"])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    one_error(err, *fragments)


@pytest.mark.parametrize("content,fragment", [
    ("ops = [\n", "not valid TOML"),
    ("opps = ['exp']\n", "unknown key 'opps'"),
    ("samples = 'many'\n", "samples must be an integer"),
], ids=["syntax", "unknown-key", "bad-type"])
def test_bad_config_exits_2(capsys, tmp_path, content, fragment):
    cfg = tmp_path / "run.toml"
    cfg.write_text(content)
    status = main(["run", "--config", str(cfg), "--out", str(tmp_path / "r.json"), "--quiet"])
    assert status == 2
    one_error(capsys.readouterr().err, fragment)


def test_unwritable_output_exits_2(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    status = main(["run", "--ops", "neg", "--out", str(blocker / "r.json"), "--quiet"])
    assert status == 2
    one_error(capsys.readouterr().err, "cannot write")


def test_config_run_writes_json_csv_and_prints_the_summary(capsys, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("[run]\nops = ['neg', 'exp']\nformats = ['bfloat16']\nsamples = 1\n"
                   "jobs = 1\n")
    out, csv = tmp_path / "r.json", tmp_path / "r.csv"
    status = main(["run", "--config", str(cfg), "--out", str(out), "--csv", str(csv)])
    text = capsys.readouterr().out
    assert status == 0 and out.exists() and csv.exists()
    assert "coverage (share of rows ok) per family and format" in text
    assert "worst routes" in text and "time per phase" in text
    doc = json.loads(out.read_text())
    assert doc["meta"]["selection"]["ops"] == ["neg", "exp"]
    # Two instances of exp and four of neg (two float, int8, uint64), three routes each; the
    # integer instances' tangent and gradient have no value input.
    assert len(doc["rows"]) == (2 + 4) * 3
    assert {r["status"] for r in doc["rows"] if r["attrs"].get("element", "scalar")
            == "scalar"} == {"ok"}
    assert {(r["route"], r["status"]) for r in doc["rows"] if r["attrs"].get("element", "scalar")
            != "scalar"} == {("forward", "ok"), ("tangent", "not_differentiable"),
                             ("gradient", "not_differentiable")}


@pytest.mark.parametrize("block", [None, 2], ids=["one-block", "blocks-of-2"])
def test_errors_by_magnitude_bin_by_the_exact_values_binade(block, monkeypatch):
    # bfloat16 (p = 8): ulp(x) = 2**(floor(log2 x) - 7).  Computed values one ulp above
    # 1.5 and 3.0 (binades 0 and 1), half an ulp below 0.75 (binade -1); an exact zero and a
    # NaN are left out; 2**-200 lies below the subnormals (binade qmin - 1 = -134).  Long
    # errors are counted a block at a time (the same counts and maxima).
    if block:
        monkeypatch.setattr(numerics.metrics, "MEASURE_BLOCK", block)
    fmt = formats.get("bfloat16")
    exact = np.array([1.5, 3.0, 0.75, 0.0, np.nan, 2.0 ** -200, 1.25])
    comp = np.array([1.5 + 2**-7, 3.0 + 2**-6, 0.75 - 2**-9, 0.0, np.nan, 0.0, 1.25])
    ulp = numerics.metrics.ulp_error(comp, exact, fmt)
    got = evaluate.by_magnitude(ulp, exact, fmt)
    assert got == [[-134, 1, float(2.0 ** -200 / 2.0 ** -133)], [-1, 1, 0.5], [0, 2, 1.0],
                   [1, 1, 1.0]]
    # buckets: exactly 0 three (0, 1.25, and NaN computed where NaN is exact), (0, 0.5] two
    # (0.75 half an ulp off, 2**-200 as 0: 2**-67 ulp), (0.5, 1] two (1.5 and 3.0), then
    # nothing up to "above 256", one error that is NaN added
    assert buckets(np.append(ulp, np.nan)) == [3, 2, 2, 0, 0, 0, 0, 0, 1]

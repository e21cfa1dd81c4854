"""The gate on precision regressions (reports/gate.py, ``roundoff-coverage gate`` and
``run --gate``).

Two kinds of evidence.  Hand-written results documents whose rows differ in one field, so
the expected verdict follows from the rule itself.  And the real coverage run, in process:
the routes of a reduction, exp and a directed mode measured against mpmath references, once
with the real emulated backend and once with a deliberately degraded one (binary32
accumulation silently done in the storage format, exp computed in a format 3 bits coarser,
toward_zero silently done as nearest); the real runs must pass the gate against each other
and the degraded runs must fail it with exactly the affected routes listed.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import pytest

from roundoff_coverage import formats
from roundoff_coverage import numerics
from roundoff_coverage import reports
from roundoff_coverage.reports import gate
from roundoff_coverage.engine import evaluate, results, runner
from conftest import ERROR, run_cli


def row(**fields) -> dict:
    """A measured row (every field the run writes, plus a ``flags`` field the gate must
    ignore), overridden by ``fields``."""
    base = {"op": "exp", "instance": "default", "attrs": {"shape": [3]}, "route": "forward",
            "port": "y", "format": "bfloat16", "mode": "nearest_even", "policy": "strict",
            "implementation": "emulated", "device": "cpu", "status": "ok", "reason": None,
            "need": None, "exhaustive": False, "samples": 12, "max_ulp": 0.5, "p99_ulp": 0.48,
            "mean_ulp": 0.2, "min_signed_ulp": -0.5, "max_signed_ulp": 0.49, "max_rel": 0.004,
            "bound": 0.5, "bound_ratio": 1.0, "violations": 0, "exceptional": {},
            "unmeasured": 0, "mismatches": None, "histogram": [0] * 31, "ref_prec": 72,
            "worst": None, "flags": ["inexact"]}
    base.update(fields)
    if isinstance(base["max_ulp"], (int, float)):       # p99 and mean never exceed the max
        for name in ("p99_ulp", "mean_ulp"):
            if name not in fields:
                base[name] = min(base[name], base["max_ulp"])
    return base


def doc(rows, seed=0, samples=2, exhaustive=False) -> dict:
    return {"schema": results.SCHEMA,
            "meta": {"seed": seed, "command": f"roundoff-coverage run --samples {samples} "
                                              f"--seed {seed}",
                     "selection": {"samples": samples, "exhaustive": exhaustive}},
            "rows": rows}


def write(path, document) -> str:
    results.write(str(path), document)
    return str(path)


def gate_files(capsys, tmp_path, base_rows, cur_rows, *options, base=None, cur=None):
    """(status, stdout, stderr) of ``gate`` on two documents."""
    b = write(tmp_path / "base.json", base or doc(base_rows))
    c = write(tmp_path / "cur.json", cur or doc(cur_rows))
    return run_cli(capsys, "gate", "--baseline", b, c, *options)


def labels(junit_path) -> tuple[set, set]:
    """(failing test case names, every test case name) of a JUnit report."""
    root = ET.parse(junit_path).getroot()
    cases = root.iter("testcase")
    every, failing = set(), set()
    for case in cases:
        every.add(case.get("name"))
        if case.find("failure") is not None:
            failing.add(case.get("name"))
    return failing, every


# ----- the rule, on hand-written documents --------------------------------------------------

def test_identical_files_pass(capsys, tmp_path):
    rows = [row(), row(format="binary16"), row(route="gradient", port="x")]
    status, out, err = gate_files(capsys, tmp_path, rows, copy.deepcopy(rows))
    assert (status, err) == (0, "")
    assert "gate: PASS: 0 regressions, 0 improvements, 3 routes compared" in out


def test_growth_beyond_tolerance_fails_and_within_it_passes(capsys, tmp_path):
    status, out, _ = gate_files(capsys, tmp_path, [row(max_ulp=0.5)], [row(max_ulp=0.52)])
    assert status == 1
    assert "REGRESSIONS (1)" in out and "max_ulp 0.5 -> 0.52 ulp" in out
    status, out, _ = gate_files(capsys, tmp_path, [row(max_ulp=0.5)], [row(max_ulp=0.509)])
    assert status == 0, out


def test_tolerances_file_by_format_and_family(capsys, tmp_path):
    tol = tmp_path / "tol.toml"
    # exp is in the transcendental family; the largest matching entry applies.
    tol.write_text("default = 0.01\n[formats]\nbf16 = 0.05\n[families]\n"
                   "transcendental = 0.2\n")
    base = [row(max_ulp=0.5), row(format="binary16", max_ulp=0.5),
            row(op="add", format="binary16", max_ulp=0.5)]
    cur = [row(max_ulp=0.65), row(format="binary16", max_ulp=0.68),
           row(op="add", format="binary16", max_ulp=0.52)]
    status, out, _ = gate_files(capsys, tmp_path, base, cur, "--tolerances", tol,
                                "--junit", tmp_path / "j.xml")
    failing, _ = labels(tmp_path / "j.xml")
    # bfloat16 exp: +0.15 <= 0.2 passes; binary16 exp: +0.18 passes; add: +0.02 > 0.01 fails.
    assert status == 1
    assert failing == {"add[shape=[3]]-forward-y-binary16-nearest_even-strict-emulated"}


@pytest.mark.parametrize("text, words", [
    ("[families]\nreductions = 0.1\n", "unknown family 'reductions' (close matches: reduction)"),
    ("default = -1\n", "default must be a finite number of ulps >= 0"),
    ("[formats]\nbfloat17 = 0.1\n", "[formats]"),
    ("tolerance = 0.1\n", "unknown key 'tolerance'"),
    ("default = \n", "is not valid TOML"),
])
def test_bad_tolerances_file_is_a_usage_error(capsys, tmp_path, text, words):
    tol = tmp_path / "tol.toml"
    tol.write_text(text)
    status, out, err = gate_files(capsys, tmp_path, [row()], [row()], "--tolerances", tol)
    assert status == 2 and out == ""
    assert err.startswith(ERROR) and err.count("\n") == 1 and words in err


def test_p99_metric_ignores_a_grown_maximum(capsys, tmp_path):
    base, cur = [row(max_ulp=0.5, p99_ulp=0.4)], [row(max_ulp=3.0, p99_ulp=0.4)]
    assert gate_files(capsys, tmp_path, base, cur)[0] == 1
    assert gate_files(capsys, tmp_path, base, cur, "--metric", "p99")[0] == 0
    status, out, _ = gate_files(capsys, tmp_path, base, [row(max_ulp=0.5, p99_ulp=0.45)],
                                "--metric", "p99")
    assert status == 1 and "p99_ulp 0.4 -> 0.45 ulp" in out


@pytest.mark.parametrize("before, after, words", [
    ({"violations": 0}, {"violations": 2}, "bound violations 0 -> 2"),
    ({"violations": None, "bound": None}, {"violations": 1}, "bound violations 0 -> 1"),
    ({"exceptional": {"overflow_to_inf": 2}},
     {"exceptional": {"overflow_to_inf": 2, "nan_from_finite": 1}},
     "new exceptional outcome nan_from_finite (1)"),
    ({"mismatches": 0, "max_ulp": None}, {"mismatches": 3, "max_ulp": None},
     "mismatches 0 -> 3"),
    ({}, {"status": "error", "reason": "divide: boom"}, "status ok -> error: divide: boom"),
    ({}, {"status": "no_rule", "reason": "lacks capability exp"}, "status ok -> no_rule"),
    ({}, {"max_ulp": "inf"}, "max_ulp 0.5 -> inf ulp"),
    ({}, {"max_ulp": None}, "max_ulp no longer measurable"),
    ({"implementation": "cuda", "contract": {"held": True, "agreement": "bitwise",
                                             "differing": 0}},
     {"implementation": "cuda", "contract": {"held": False, "agreement": "bitwise",
                                             "differing": 3}},
     "kernel contract broken (bitwise agreement: 3 elements differ from the model)"),
])
def test_each_kind_of_regression_fails(capsys, tmp_path, before, after, words):
    status, out, err = gate_files(capsys, tmp_path, [row(**before)], [row(**after)])
    assert (status, err) == (1, "")
    assert words in out and "gate: FAIL: 1 regression" in out


def scaled_row(**fields) -> dict:
    """A scaled format's row (engine/quantize.py BlockCounts: 8 blocks, 2 elements clipped)."""
    return row(**{"format": "mxfp8_e4m3", "scheme": "mxfp8_e4m3", "error_unit": "ulp of "
                  "float8_e4m3fn at the exact value's block scale", "scale_axis": "x:-1; y:-1",
                  "blocks": 8, "clipped": 2, "zero_blocks": 0, "nan_blocks": 0,
                  "scale_exponents": [[-8, 8]], "bound": None, "bound_ratio": None,
                  "violations": None, **fields})


@pytest.mark.parametrize("after, words, back", [
    ({"clipped": 3}, "clipped elements 2 -> 3", "clipped elements 3 -> 2"),
    ({"nan_blocks": 1, "scale_exponents": [[-8, 7]]}, "NaN blocks 0 -> 1", "NaN blocks 1 -> 0"),
])
def test_more_clipping_or_nan_blocks_on_a_scaled_row_fails(capsys, tmp_path, after, words,
                                                           back):
    """The same ulps, but a value more clipped or a block more with a NaN scale: the format
    no longer holds what it held; the reverse is an improvement, and a row without counts
    (an element format's, null) is not compared on them."""
    status, out, err = gate_files(capsys, tmp_path, [scaled_row()], [scaled_row(**after)])
    assert (status, err) == (1, "")
    assert words in out and "gate: FAIL: 1 regression" in out
    status, out, _ = gate_files(capsys, tmp_path, [scaled_row(**after)], [scaled_row()])
    assert status == 0 and "improvements (1)" in out and back in out
    status, out, _ = gate_files(capsys, tmp_path, [row()], [row(clipped=5, nan_blocks=2)])
    assert status == 0 and "REGRESSIONS" not in out


def test_a_route_missing_now_fails(capsys, tmp_path):
    status, out, _ = gate_files(capsys, tmp_path, [row(), row(route="gradient", port="x")],
                                [row()])
    assert status == 1 and "missing: measured in the baseline" in out
    # A route the baseline could not measure either may go: nothing was lost.
    status, _, _ = gate_files(capsys, tmp_path,
                              [row(), row(route="tangent", status="not_differentiable")],
                              [row()])
    assert status == 0


def test_directed_mode_errors_on_the_forbidden_side_fail(capsys, tmp_path):
    # toward_zero on positive results: every error is <= 0.  Round-to-nearest results have
    # a smaller |error| but errors above exact.
    before = {"mode": "toward_zero", "max_ulp": 0.95, "min_signed_ulp": -0.95,
              "max_signed_ulp": 0.0}
    after = {"mode": "toward_zero", "max_ulp": 0.5, "min_signed_ulp": -0.5,
             "max_signed_ulp": 0.5}
    status, out, _ = gate_files(capsys, tmp_path, [row(**before)], [row(**after)])
    assert status == 1 and "toward_zero: errors above exact reach 0.5 ulp" in out
    # The same change under round-to-nearest is an improvement of |error|.
    near = [{**before, "mode": "nearest_even"}, {**after, "mode": "nearest_even"}]
    status, out, _ = gate_files(capsys, tmp_path, [row(**near[0])], [row(**near[1])])
    assert status == 0 and "improvements (1)" in out


def test_improvements_are_listed_and_pass(capsys, tmp_path):
    base = [row(max_ulp=2.0), row(format="binary16", status="no_rule", max_ulp=None)]
    cur = [row(max_ulp=0.5), row(format="binary16"), row(format="float8_e4m3fn")]
    status, out, _ = gate_files(capsys, tmp_path, base, cur)
    assert status == 0
    assert "improvements (3)" in out and "REGRESSIONS" not in out
    assert "max_ulp 2 -> 0.5 ulp" in out and "now measured (was no_rule)" in out
    assert "newly measured" in out
    assert out.rstrip().splitlines()[-1].startswith("gate: PASS: 0 regressions, 3 improvements")


def test_regressions_are_listed_before_improvements(capsys, tmp_path):
    base = [row(max_ulp=2.0), row(format="binary16")]
    cur = [row(max_ulp=0.5), row(format="binary16", max_ulp=1.5)]
    status, out, _ = gate_files(capsys, tmp_path, base, cur)
    assert status == 1
    assert out.index("REGRESSIONS (1)") < out.index("improvements (1)") < out.index("gate: FAIL")


@pytest.mark.parametrize("settings, words", [
    ({"seed": 1}, "seed 0 in the baseline, 1 now"),
    ({"samples": 3}, "samples 2 in the baseline, 3 now"),
    ({"exhaustive": True}, "exhaustive false in the baseline, true now"),
])
def test_different_settings_fail_unless_allowed(capsys, tmp_path, settings, words):
    rows = [row()]
    status, out, _ = gate_files(capsys, tmp_path, rows, rows, cur=doc(rows, **settings))
    assert status == 1 and words in out and "--allow-different-settings" in out
    status, out, _ = gate_files(capsys, tmp_path, rows, rows, "--allow-different-settings",
                                cur=doc(rows, **settings))
    assert status == 0 and "settings differ (allowed)" in out


def _corrupt_cases():
    good = results.dumps(doc([row()]))
    no_seed = doc([row()])
    del no_seed["meta"]["seed"]
    no_op = doc([row()])
    del no_op["rows"][0]["op"]
    return {
        "truncated": (good[: len(good) // 2], "is not valid JSON"),
        "empty": ("", "is not valid JSON"),
        "not JSON": ("op,route,max_ulp\nexp,forward,0.5\n", "is not valid JSON"),
        "binary": (b"\x89PNG\r\n\x1a\n\xff\xfe", "is not valid JSON"),
        "foreign schema": (json.dumps({"schema": "other/2", "rows": []}),
                           "is not a roundoff-coverage/1 results file"),
        "rows not a list": (json.dumps({"schema": results.SCHEMA, "meta": {}, "rows": {}}),
                            "is not a roundoff-coverage/1 results file"),
        "JSON list": ("[1, 2]", "is not a roundoff-coverage/1 results file"),
        "no seed": (results.dumps(no_seed), "lacks the seed or the sample count"),
        "row without op": (results.dumps(no_op), "row 0 lacks op"),
        "duplicate key": (results.dumps(doc([row(), row(max_ulp=0.25)])),
                          "rows 0 and 1 are both exp[shape=[3]]-forward-y-bfloat16"),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_cases()))
@pytest.mark.parametrize("side", ["baseline", "current"])
def test_a_defective_file_is_exit_2_with_one_line(capsys, tmp_path, case, side):
    content, words = _corrupt_cases()[case]
    bad = tmp_path / "bad.json"
    (bad.write_bytes if isinstance(content, bytes) else bad.write_text)(content)
    good = write(tmp_path / "good.json", doc([row()]))
    base, cur = (bad, good) if side == "baseline" else (good, bad)
    status, out, err = run_cli(capsys, "gate", "--baseline", base, cur)
    assert (status, out) == (2, "")                     # never a pass, never a report
    assert err.startswith(ERROR) and err.count("\n") == 1 and words in err
    assert ("baseline" if side == "baseline" else "current results") in err


def test_a_missing_file_is_exit_2(capsys, tmp_path):
    good = write(tmp_path / "good.json", doc([row()]))
    status, out, err = run_cli(capsys, "gate", "--baseline", tmp_path / "none.json", good)
    assert (status, out) == (2, "") and "No such file or directory" in err


# ----- reports and --update ------------------------------------------------------------------

def test_markdown_and_junit_reports_are_well_formed(capsys, tmp_path):
    # Attribute text with Markdown and XML metacharacters must not break either format.
    odd = {"shape": [3], "note": "a|b<c&"}
    base = [row(attrs=odd), row(format="binary16", max_ulp=2.0),
            row(route="tangent", status="not_differentiable")]
    cur = [row(attrs=odd, max_ulp=0.75, exceptional={"nan_from_finite": 1}),
           row(format="binary16", max_ulp=1.0), row(route="tangent",
                                                     status="not_differentiable")]
    md, xml_path = tmp_path / "gate.md", tmp_path / "gate.xml"
    status, out, _ = gate_files(capsys, tmp_path, base, cur, "--markdown", md,
                                "--junit", xml_path)
    assert status == 1
    text = md.read_text()
    assert text.startswith("## roundoff-coverage gate: FAIL\n")
    tables = [line for line in text.splitlines() if line.startswith("|")]
    header = tables[0]
    # Every table line has as many unescaped cell separators as the header.
    assert len(tables) == 6
    assert all(line.replace("\\|", "").count("|") == header.count("|") for line in tables)
    assert "### Regressions (1)" in text and "### Improvements (1)" in text
    assert "note=\"a\\|b<c&\"" in text
    root = ET.parse(xml_path).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == 3 == int(suite.get("tests"))
    assert int(suite.get("failures")) == 1 and int(suite.get("skipped")) == 1
    failing, every = labels(xml_path)
    assert failing == {'exp[note="a|b<c&",shape=[3]]-forward-y-bfloat16-nearest_even-strict-'
                       'emulated'}
    failure = next(c for c in cases if c.find("failure") is not None).find("failure")
    assert "max_ulp 0.5 -> 0.75 ulp" in failure.get("message")
    assert "new exceptional outcome nan_from_finite (1)" in failure.get("message")


def test_settings_mismatch_is_a_junit_failure(capsys, tmp_path):
    xml_path = tmp_path / "gate.xml"
    status, _, _ = gate_files(capsys, tmp_path, [row()], [row()], "--junit", xml_path,
                              cur=doc([row()], seed=7))
    assert status == 1
    failing, _ = labels(xml_path)
    assert failing == {"settings"}


def test_update_writes_a_stable_baseline(capsys, tmp_path):
    # Rows out of order, keys in odd order, a non-finite value: the baseline is canonical.
    rows = [row(format="float8_e4m3fn", max_ulp="inf", exceptional={"overflow_to_inf": 1}),
            row(format="binary16", max_ulp=0.25), row(max_ulp=0.125)]
    current = tmp_path / "cur.json"
    current.write_text(json.dumps(doc(rows), indent=3))
    base = tmp_path / "base.json"
    write(base, doc([row(max_ulp=0.1)]))
    status, out, _ = run_cli(capsys, "gate", "--baseline", base, current, "--update")
    assert status == 0                                    # a regression, but accepted
    assert "REGRESSIONS (1)" in out and f"wrote the current results to {base}" in out
    first = base.read_bytes()
    frame = reports.load(base)
    assert list(frame["format"]) == ["bfloat16", "binary16", "float8_e4m3fn"]
    assert list(frame["max_ulp"])[:2] == [0.125, 0.25] and frame["max_ulp"][2] == float("inf")
    # Rewriting the baseline gives the same bytes; the file gates itself clean.
    status, _, _ = run_cli(capsys, "gate", "--baseline", base, base, "--update")
    assert status == 0 and base.read_bytes() == first
    assert run_cli(capsys, "gate", "--baseline", base, current)[0] == 0


def test_update_creates_a_missing_baseline_but_never_overwrites_a_corrupt_one(capsys, tmp_path):
    current = write(tmp_path / "cur.json", doc([row()]))
    base = tmp_path / "sub" / "base.json"
    base.parent.mkdir()
    status, out, _ = run_cli(capsys, "gate", "--baseline", base, current, "--update")
    assert status == 0 and "no baseline at" in out
    assert base.read_text() == results.dumps(doc([row()]))
    base.write_text('{"schema": "roundoff-cov')
    status, _, err = run_cli(capsys, "gate", "--baseline", base, current, "--update")
    assert status == 2 and "not valid JSON" in err
    assert base.read_text() == '{"schema": "roundoff-cov'


# ----- the project's own baseline ------------------------------------------------------------

def test_committed_baseline_is_canonical_and_matches_its_config():
    """tests/baselines/quick.json is what ``run --config tests/baselines/quick.toml`` writes:
    the selection of the TOML file, in the canonical baseline form (sorted, stable)."""
    import pathlib
    import tomllib
    folder = pathlib.Path(__file__).parents[1] / "baselines"
    with open(folder / "quick.toml", "rb") as fh:
        cfg = tomllib.load(fh)
    assert cfg["out"] == "tests/baselines/quick.json"
    baseline = gate.read(folder / "quick.json", "baseline")
    sel = runner.Selection(ops=cfg["ops"], formats=cfg["formats"], modes=cfg["modes"],
                           policies=cfg["policies"], implementations=cfg["implementations"],
                           draws=cfg["samples"], seed=cfg["seed"])
    assert baseline["meta"]["command"] == sel.command()
    assert (folder / "quick.json").read_text() == \
        results.dumps(gate.baseline_document(baseline))
    assert {r["status"] for r in baseline["rows"]} == {"ok"}


# ----- run --gate ------------------------------------------------------------------------------

def test_run_gate_runs_then_gates(capsys, tmp_path):
    common = ["run", "--ops", "exp", "--formats", "bfloat16", "--routes", "forward",
              "--samples", "1", "--jobs", "1", "--quiet"]
    base = tmp_path / "base.json"
    assert run_cli(capsys, *common, "--out", base)[0] == 0
    status, out, _ = run_cli(capsys, *common, "--out", tmp_path / "cur.json", "--gate", base)
    assert status == 0 and "gate: PASS: 0 regressions" in out
    # The baseline, with every error pretended smaller: the same run now regresses.
    smaller = results.read(base)
    for r in smaller["rows"]:
        if isinstance(r.get("max_ulp"), float) and r["max_ulp"] > 0.1:
            r["max_ulp"] /= 2
    write(base, smaller)
    status, out, _ = run_cli(capsys, *common, "--out", tmp_path / "cur.json", "--gate", base)
    assert status == 1 and "REGRESSIONS" in out


def test_run_gate_refuses_a_bad_baseline_before_running(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    out_path = tmp_path / "cur.json"
    status, out, err = run_cli(capsys, "run", "--ops", "exp", "--formats", "bfloat16",
                               "--out", out_path, "--gate", bad)
    assert status == 2 and "not valid JSON" in err and not out_path.exists()
    good = write(tmp_path / "good.json", doc([row()]))
    status, _, err = run_cli(capsys, "run", "--ops", "exp", "--out", good, "--gate", good)
    assert status == 2 and "would overwrite its own baseline" in err


# ----- the real run against degraded implementations --------------------------------------

def _tasks(ops, fmts, modes=("nearest_even",), policies=("strict",), routes=("forward",),
           instances=None):
    sel = runner.Selection(ops=ops, formats=fmts, modes=modes, policies=policies,
                           routes=routes, draws=2, seed=0)
    tasks = [t for t in runner.plan(sel) if instances is None or t.instance in instances]
    return sel, tasks


def _measure(sel, tasks) -> dict:
    """The results document of ``tasks`` as the coverage run writes it (one process)."""
    rows = [r for t in tasks for r in evaluate.evaluate(t)[0]]
    return results.document(rows, sel)


SCENARIOS = {
    # A reduction whose policy accumulates in binary32, next to the strict one.
    "accumulate": dict(ops=("reduce",), fmts=("bfloat16",), policies=("strict",
                                                                         "fp32_accumulate"),
                       instances=("sum-n16", "sum-n256")),
    # exp in two formats, next to add (which uses no exp).
    "exp": dict(ops=("exp", "add"), fmts=("bfloat16", "binary16"), routes=("forward",
                                                                          "gradient"),
                instances=("default", "2x3")),
    # A directed mode next to round-to-nearest.
    "mode": dict(ops=("exp", "softmax"), fmts=("bfloat16",), modes=("nearest_even",
                                                                   "toward_zero")),
}


@pytest.fixture(scope="module")
def real_runs():
    """{scenario: results document} of the real implementation (measured once)."""
    return {name: _measure(*_tasks(**spec)) for name, spec in SCENARIOS.items()}


def _degrade(monkeypatch, scenario) -> list:
    """Patch the numerics backend for ``scenario``; a list that counts the patched calls
    (a patch never used would make the test vacuous)."""
    used = []
    real_emulated = numerics.emulated
    if scenario == "accumulate":
        def emulated(fmt, mode="nearest_even", policy=None, seed=0):
            if policy is not None and policy.accumulate != policy.storage:
                used.append(policy.name)            # binary32 asked for, storage delivered
                policy = numerics.Policy(policy.storage, order=policy.order, fma=policy.fma,
                                         name=policy.name)
            return real_emulated(fmt, mode, policy, seed)
        monkeypatch.setattr(numerics, "emulated", emulated)
    elif scenario == "exp":
        def emulated(fmt, mode="nearest_even", policy=None, seed=0):
            backend = real_emulated(fmt, mode, policy, seed)
            f = formats.get(fmt)
            # exp evaluated correctly rounded in a format with 3 fewer fraction bits (same
            # exponent range), so every result is a value of fmt ~8x too coarse.
            coarse = real_emulated(formats.BinaryFormat(f.exp_bits, f.man_bits - 3), mode)

            def exp(x, **kw):
                used.append("exp")
                return coarse.exp(x, **kw)
            backend.exp = exp
            return backend
        monkeypatch.setattr(numerics, "emulated", emulated)
    else:
        def emulated(fmt, mode="nearest_even", policy=None, seed=0):
            if mode == "toward_zero":
                used.append(mode)
                mode = "nearest_even"
            return real_emulated(fmt, mode, policy, seed)
        monkeypatch.setattr(numerics, "emulated", emulated)
    return used


def _gate_junit(capsys, tmp_path, baseline, current):
    b = write(tmp_path / "base.json", baseline)
    c = write(tmp_path / "cur.json", current)
    status, out, err = run_cli(capsys, "gate", "--baseline", b, c, "--junit",
                               tmp_path / "gate.xml")
    assert err == ""
    failing, every = labels(tmp_path / "gate.xml")
    return status, out, failing, every


def _labels_where(document, **fields) -> set:
    return {gate.label(gate.key(r)) for r in document["rows"]
            if all(r[k] in v if isinstance(v, tuple) else r[k] == v
                   for k, v in fields.items())}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_real_implementation_passes_its_own_gate(capsys, tmp_path, real_runs, scenario):
    again = _measure(*_tasks(**SCENARIOS[scenario]))         # a fresh, independent run
    status, out, failing, every = _gate_junit(capsys, tmp_path, real_runs[scenario], again)
    assert (status, failing) == (0, set()), out
    assert every == _labels_where(again)


def _degraded_fails(capsys, tmp_path, real_runs, monkeypatch, scenario):
    """Measure ``scenario`` again with the backend degraded (_degrade), gate it against the
    real run and check that the gate fails; (the gate's output, failing labels)."""
    used = _degrade(monkeypatch, scenario)
    degraded = _measure(*_tasks(**SCENARIOS[scenario]))
    assert used
    status, out, failing, _ = _gate_junit(capsys, tmp_path, real_runs[scenario], degraded)
    assert status == 1, out
    return out, failing


def test_storage_format_accumulation_fails_the_gate(capsys, tmp_path, real_runs,
                                                    monkeypatch):
    _, failing = _degraded_fails(capsys, tmp_path, real_runs, monkeypatch, "accumulate")
    # bfloat16 sums of 256 terms carry 8 bits: in binary32 the sum is within about 0.5 ulp
    # of exact after its one final rounding; accumulated in bfloat16 it drifts by many ulps.
    n256 = _labels_where(real_runs["accumulate"], instance="sum-n256",
                         policy="fp32_accumulate", route="forward")
    assert n256 and n256 <= failing
    # The strict policy accumulates in the storage format anyway: untouched, so unlisted.
    assert not failing & _labels_where(real_runs["accumulate"], policy="strict")


def test_exp_in_a_coarser_format_fails_the_gate(capsys, tmp_path, real_runs, monkeypatch):
    _, failing = _degraded_fails(capsys, tmp_path, real_runs, monkeypatch, "exp")
    forward = _labels_where(real_runs["exp"], op="exp", route="forward")
    assert len(forward) == 4 and forward <= failing         # 2 instances x 2 formats
    assert not failing & _labels_where(real_runs["exp"], op="add")


def test_a_dropped_rounding_mode_fails_the_gate(capsys, tmp_path, real_runs, monkeypatch):
    out, failing = _degraded_fails(capsys, tmp_path, real_runs, monkeypatch, "mode")
    # exp > 0: toward_zero puts every result at or below exact; nearest puts some above.
    exp_tz = _labels_where(real_runs["mode"], op="exp", mode="toward_zero")
    assert exp_tz and exp_tz <= failing
    assert "toward_zero: errors above exact reach" in out
    assert not failing & _labels_where(real_runs["mode"], mode="nearest_even")

"""Bad targets and bad input never crash, hang or exhaust memory: every user error is one
line and exit 2, an interrupt 130, a bug one ``internal error`` line and 1.

Expected messages are written out in full; expected numbers come from outside the code
under test: the bfloat16 encoding (2**16 patterns, of which the 2 * 2**7 with the top
exponent are inf or NaN), distributed's documented address forms, and a fuzz over the
command line's options whose only oracle is the exit-status contract itself.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roundoff_coverage.engine import evaluate, executors, measure, results, runner
from roundoff_coverage.engine.plan import Outcome
from roundoff_coverage.reports.cli import common as cli_common, formats as cli_formats
from roundoff_coverage.reports.cli import ops as cli_ops, run as cli_run
from roundoff_coverage.reports.cli import main
from conftest import ERROR, one_error, run_cli as run, wait_for_checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ["--ops", "exp", "--formats", "bfloat16", "--samples", "1", "--jobs", "1", "--quiet"]
BFLOAT16_FINITE = 2**16 - 2 * 2**7


def results_row(**fields) -> dict:
    """A measured row of exp in bfloat16, overridden by ``fields``."""
    row = {"op": "exp", "instance": "default", "attrs": {"shape": [3]}, "route": "forward",
           "port": "y", "format": "bfloat16", "mode": "nearest_even", "policy": "strict",
           "implementation": "emulated", "device": "cpu", "status": "ok", "reason": None,
           "need": None, "exhaustive": False, "samples": 12, "max_ulp": 0.5,
           "p99_ulp": 0.48, "mean_ulp": 0.2, "min_signed_ulp": -0.5, "max_signed_ulp": 0.49,
           "max_rel": 0.004, "bound": 0.5, "bound_ratio": 1.0, "violations": 0,
           "exceptional": {}, "unmeasured": 0, "mismatches": None, "histogram": [0] * 31,
           "ref_prec": 72, "worst": None}
    row.update(fields)
    return row


def results_doc(rows) -> dict:
    return {"schema": results.SCHEMA,
            "meta": {"seed": 0, "command": "roundoff-coverage run --samples 2 --seed 0",
                     "selection": {"samples": 2, "exhaustive": False}},
            "rows": rows}


def write_doc(path, rows) -> str:
    """``rows`` as a results file at ``path``, written as raw JSON (no cleaning)."""
    pathlib.Path(path).write_text(json.dumps(results_doc(rows)))
    return str(path)


LABEL = "exp[shape=[3]]-forward-y-bfloat16-nearest_even-strict-emulated"


# ----- 6: numeric options out of range ----------------------------------------------------------

SEED_RANGE = "must be from 0 to 9223372036854775807"


@pytest.mark.parametrize("seed", ["-5", str(2**63)])
def test_run_refuses_a_seed_out_of_range(capsys, tmp_path, seed):
    out = tmp_path / "r.json"
    status, stdout, err = run(capsys, "run", *TINY, "--seed", seed, "--out", out)
    assert (status, stdout) == (2, "") and not out.exists()
    assert one_error(err) == (f"{ERROR}--seed {SEED_RANGE} (got {seed}): at most 2**63 - 1, "
                              f"which every reader of the results file holds exactly")


def test_measure_refuses_a_negative_seed(capsys, tmp_path):
    status, _, err = run(capsys, "measure", "numpy.exp", "--format", "bfloat16", "--samples",
                         "8", "--seed", "-5", "--quiet", "--out", tmp_path / "m.json")
    assert status == 2
    assert one_error(err).startswith(f"{ERROR}--seed {SEED_RANGE} (got -5)")


def test_config_seed_is_checked_like_the_option(capsys, tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("seed = -5\n")
    status, _, err = run(capsys, "run", *TINY, "--config", cfg, "--out", tmp_path / "r.json")
    assert status == 2 and f"--seed {SEED_RANGE} (got -5)" in one_error(err)


def test_the_largest_seed_runs_and_is_recorded(capsys, tmp_path):
    out = tmp_path / "r.json"
    status, _, err = run(capsys, "run", *TINY, "--seed", 2**63 - 1, "--out", out)
    assert (status, err) == (0, "")
    doc = json.loads(out.read_text())
    assert doc["meta"]["seed"] == 2**63 - 1
    assert {r["status"] for r in doc["rows"]} == {"ok"}


def test_a_dask_local_cluster_of_too_many_workers_is_refused(capsys, tmp_path):
    pytest.importorskip("distributed")
    cores = os.cpu_count() or 1
    status, _, err = run(capsys, "run", *TINY, "--executor", "dask", "--jobs", 10**6,
                         "--out", tmp_path / "r.json")
    assert status == 2
    assert one_error(err) == (f"{ERROR}--jobs must be from 1 to {4 * cores} (got 1000000): a "
                              f"Dask LocalCluster of 4 worker processes per core of this "
                              f"machine's {cores}; more only cost memory")


# ----- 7: a scheduler address that cannot be parsed ----------------------------------------------

FORMS = ("give tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT, wss://HOST:PORT, "
         "ucx://HOST:PORT, inproc://ADDRESS or HOST:PORT (tcp)")


@pytest.mark.parametrize("address,why", [
    ("notaurl", "missing port number in address 'notaurl'"),
    ("tcp://host", "missing port number in address 'host'"),
    ("foo://host:8786", "unknown protocol 'foo'"),
    ("tcp://:8786", "no host"),
    ("host:0", "port 0 is not in 1..65535"),
    ("tcp://host:99999", "port 99999 is not in 1..65535"),
    ("", "not an address"),
    ("tcp://h\x00st:8786", "host 'h\\x00st' is not a host name or an IP address"),
    ("tcp://[::1:8786", "invalid address '[::1:8786'; maybe: ipv6 needs brackets like [::1]"),
])
def test_an_unparsable_scheduler_is_refused_at_once(capsys, tmp_path, address, why):
    pytest.importorskip("distributed")
    t0 = time.monotonic()
    status, _, err = run(capsys, "run", *TINY, "--scheduler", address,
                         "--out", tmp_path / "r.json")
    assert status == 2 and time.monotonic() - t0 < 15
    assert one_error(err) == f"{ERROR}--scheduler {address!r}: {why}; {FORMS}"


@pytest.mark.parametrize("address", ["tcp://10.0.0.1:8786", "10.0.0.1:8786", "tls://h:1",
                                     "tcp://[::1]:8786", "ucx://h:13337", "inproc://h/1/2",
                                     "ws://h:80"])
def test_the_address_forms_dask_accepts_pass_the_check(address):
    pytest.importorskip("distributed")
    cli_common.check_scheduler(address)                  # no connection is attempted


def test_scheduler_notaurl_returns_within_seconds_without_a_traceback(tmp_path):
    pytest.importorskip("distributed")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "roundoff_coverage", "measure", "numpy.exp",
                           "--format", "bfloat16", "--samples", "8", "--scheduler", "notaurl",
                           "--out", str(tmp_path / "m.json")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and time.monotonic() - t0 < 15
    assert "Traceback" not in proc.stderr
    assert one_error(proc.stderr) == (f"{ERROR}--scheduler 'notaurl': missing port number in "
                                      f"address 'notaurl'; {FORMS}")


# ----- 8: empty lists ---------------------------------------------------------------------------

LISTS = [("--ops", "operator"), ("--families", "family"), ("--formats", "format"),
         ("--modes", "rounding mode"), ("--routes", "route"), ("--policies", "policy"),
         ("--implementations", "implementation")]


@pytest.mark.parametrize("value", ["", ",", " , "])
@pytest.mark.parametrize("option,what", LISTS, ids=[o for o, _ in LISTS])
def test_an_empty_list_option_is_an_error(capsys, tmp_path, option, what, value):
    out = tmp_path / "r.json"
    status, stdout, err = run(capsys, "run", *TINY, option, value, "--out", out)
    assert (status, stdout) == (2, "") and not out.exists()
    assert one_error(err) == (f"{ERROR}{option}: empty list of {what}s (give one or more "
                              f"names, comma-separated; leave the option out for the default)")


@pytest.mark.parametrize("value", ["[]", "''", "','", "['']"])
@pytest.mark.parametrize("key", cli_run.RUN_LISTS)
def test_an_empty_list_in_the_config_file_is_an_error(capsys, tmp_path, key, value):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"{key} = {value}\n")
    status, _, err = run(capsys, "run", "--config", cfg, "--quiet", "--out", tmp_path / "r.json")
    assert status == 2
    assert one_error(err) == (f"{ERROR}config file {cfg}: {key} is an empty list (give one or "
                              f"more names; leave the key out for the default)")


@pytest.mark.parametrize("option", ["--out", "--csv", "--gate", "--html", "--config"])
def test_an_empty_path_is_an_error(capsys, tmp_path, option):
    status, _, err = run(capsys, "run", *TINY, option, "", "--out" if option != "--out"
                         else "--csv", tmp_path / "r.json")
    assert status == 2
    assert one_error(err) == (f"{ERROR}argument {option}: empty path (give a file or folder "
                              f"name) (see 'roundoff-coverage run --help')")


@pytest.mark.parametrize("argv,option", [
    (["formats", "--formats-file", "a\0b"], "--formats-file"),
    (["report", "a\0b", "--out", "r"], "RESULTS"),
    (["gate", "x.json", "--baseline", "a\0b"], "--baseline"),
    (["measure", "numpy.exp", "--out", "a\0b"], "--out"),
])
def test_a_path_with_a_nul_character_is_an_error(capsys, argv, option):
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert one_error(err) == (f"{ERROR}argument {option}: 'a\\x00b' is not a path (it holds "
                              f"a NUL character) (see 'roundoff-coverage {argv[0]} --help')")


@pytest.mark.parametrize("target", ["", "numpy.exp\0", "libm\0:expf"])
def test_a_target_that_cannot_be_named_is_an_error(capsys, tmp_path, target):
    status, _, err = run(capsys, "measure", target, "--out", tmp_path / "m.json")
    assert status == 2
    assert one_error(err) == (f"{ERROR}TARGET {target!r} is not a target: give numpy.NAME, "
                              f"LIBRARY:FUNCTION, package.module:function or torch.NAME")


# ----- 9: only what was enumerated is marked exhaustive ------------------------------------------

def test_exhaustive_marks_only_the_enumerated_format(capsys, tmp_path):
    out = tmp_path / "r.json"
    status, _, err = run(capsys, "run", "--ops", "exp", "--formats", "binary32,bfloat16",
                         "--samples", "1", "--jobs", "1", "--quiet", "--exhaustive",
                         "--out", out)
    assert (status, err) == (0, "")
    first = runner.instances("exp")[0][0]                 # the instance --exhaustive covers
    rows = [r for r in json.loads(out.read_text())["rows"] if r["instance"] == first]
    marked = {(r["format"], r["route"]): (r["exhaustive"], r["samples"]) for r in rows}
    for route in ("forward", "tangent", "gradient"):
        assert marked["bfloat16", route] == (True, BFLOAT16_FINITE)
        flag, samples = marked["binary32", route]
        assert flag is False and 0 < samples < 100          # a few draws, not 2**32 values


def test_exhaustive_without_an_enumerable_format_warns_and_claims_nothing(capsys, tmp_path):
    out = tmp_path / "r.json"
    status, _, err = run(capsys, "run", "--ops", "exp", "--formats", "binary32", "--samples",
                         "1", "--jobs", "1", "--quiet", "--exhaustive", "--out", out)
    assert status == 0
    assert err == ("roundoff-coverage: warning: --exhaustive enumerates nothing here (no "
                   "format of at most 16 bits); every row is sampled and says exhaustive: "
                   "false\n")
    assert not any(r["exhaustive"] for r in json.loads(out.read_text())["rows"])


def test_status_rows_of_an_exhaustive_task_claim_nothing():
    sel = runner.Selection(ops=("exp",), formats=("bfloat16",), implementations=("native",),
                           modes=("upward",), draws=1, exhaustive=True)
    task = next(t for t in runner.plan(sel) if t.exhaustive)
    rows, _ = evaluate.evaluate(task)
    assert {r["status"] for r in rows} == {"no_rule"}
    assert not any(r["exhaustive"] for r in rows)


# ----- 10: impossible numbers make a results file defective ---------------------------------------

IMPOSSIBLE = [
    ({"max_ulp": -5.0}, "max_ulp must be a number >= 0, inf or null (got -5.0)"),
    ({"max_ulp": "nan"}, "max_ulp must be a number >= 0, inf or null (got 'nan')"),
    ({"max_ulp": "-inf"}, "max_ulp must be a number >= 0, inf or null (got '-inf')"),
    ({"max_ulp": "abc"}, "max_ulp must be a number >= 0, inf or null (got 'abc')"),
    ({"p99_ulp": -0.1}, "p99_ulp must be a number >= 0, inf or null (got -0.1)"),
    ({"mean_ulp": True}, "mean_ulp must be a number >= 0, inf or null (got True)"),
    ({"max_rel": -1e-3}, "max_rel must be a number >= 0, inf or null (got -0.001)"),
    ({"bound_ratio": -1}, "bound_ratio must be a number >= 0, inf or null (got -1)"),
    ({"p99_ulp": 3.0}, "p99_ulp 3.0 exceeds max_ulp 0.5: it must be <= max_ulp"),
    ({"p99_ulp": "inf"}, "p99_ulp 'inf' exceeds max_ulp 0.5: it must be <= max_ulp"),
    ({"min_signed_ulp": 0.4, "max_signed_ulp": 0.1},
     "min_signed_ulp 0.4 exceeds max_signed_ulp 0.1: it must be <= max_signed_ulp"),
    ({"max_signed_ulp": "nan"}, "max_signed_ulp must be a number, inf, -inf or null (got 'nan')"),
    ({"samples": -1}, "samples must be a non-negative integer or null (got -1)"),
    ({"samples": 1.5}, "samples must be a non-negative integer or null (got 1.5)"),
    ({"violations": -2}, "violations must be a non-negative integer or null (got -2)"),
    ({"unmeasured": "3"}, "unmeasured must be a non-negative integer or null (got '3')"),
    ({"mismatches": False}, "mismatches must be a non-negative integer or null (got False)"),
    ({"ref_prec": 0}, "ref_prec must be a positive number of bits or null (got 0)"),
    ({"exceptional": {"overflow_to_inf": -1}},
     "exceptional must map outcome classes to non-negative integer counts (got "
     "{'overflow_to_inf': -1})"),
    ({"histogram": [1, -1]},
     "histogram must be a list of non-negative integer counts (got [1, -1])"),
    ({"exhaustive": "yes"}, "exhaustive must be true or false (got 'yes')"),
    ({"status": "okay"}, "status must be one of ok, convention, no_rule, not_differentiable, "
                         "error (got 'okay')"),
]


@pytest.mark.parametrize("fields,why", IMPOSSIBLE, ids=[next(iter(f)) + "-" + str(i)
                                                         for i, (f, _) in enumerate(IMPOSSIBLE)])
def test_an_impossible_value_makes_the_file_defective_for_the_gate(capsys, tmp_path, fields,
                                                                   why):
    good = write_doc(tmp_path / "good.json", [results_row()])
    bad = write_doc(tmp_path / "bad.json", [results_row(**fields)])
    status, out, err = run(capsys, "gate", "--baseline", good, bad)
    assert (status, out) == (2, "")
    assert one_error(err) == f"{ERROR}current results {bad}: row 0 ({LABEL}): {why}"


def test_a_negative_max_ulp_is_never_an_improvement(capsys, tmp_path):
    good = write_doc(tmp_path / "good.json", [results_row()])
    bad = write_doc(tmp_path / "bad.json", [results_row(max_ulp=-5.0, p99_ulp=0.0,
                                                        mean_ulp=0.0)])
    status, out, err = run(capsys, "gate", "--baseline", bad, good)
    assert (status, out) == (2, "")
    assert one_error(err) == (f"{ERROR}baseline {bad}: row 0 ({LABEL}): max_ulp must be a "
                              f"number >= 0, inf or null (got -5.0)")


@pytest.mark.parametrize("meta", [{"seed": -1, "selection": {"samples": 2}},
                                  {"seed": True, "selection": {"samples": 2}},
                                  {"seed": 0, "selection": {"samples": -2}}])
def test_a_negative_seed_or_sample_count_in_meta_is_defective(capsys, tmp_path, meta):
    doc = results_doc([results_row()])
    doc["meta"] = meta
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    good = write_doc(tmp_path / "good.json", [results_row()])
    status, _, err = run(capsys, "gate", "--baseline", good, bad)
    assert status == 2
    assert one_error(err) == (f"{ERROR}current results {bad}: its meta lacks the seed or the "
                              f"sample count (meta.seed, meta.selection.samples: non-negative "
                              f"integers)")


def test_measured_p99_above_the_maximum_within_a_histogram_step_is_accepted(capsys, tmp_path):
    # measure reads p99 off a 1/1024-ulp histogram (0.5 ulp exactly: the step [0.5, 0.5 +
    # 2**-10)) and off binades above 4 ulps (5 ulp: the binade [4, 8)).
    rows = [results_row(max_ulp=0.5, p99_ulp=0.5 + 2**-10),
            results_row(format="binary16", max_ulp=5.0, p99_ulp=8.0)]
    path = write_doc(tmp_path / "m.json", rows)
    status, out, err = run(capsys, "gate", "--baseline", path, path)
    assert status == 0 and err == "" and "gate: PASS" in out


# ----- 11: the report refuses what the gate refuses ----------------------------------------------

def test_report_refuses_two_rows_of_one_key(capsys, tmp_path):
    path = write_doc(tmp_path / "dup.json", [results_row(), results_row(max_ulp=0.25,
                                                                         p99_ulp=0.25)])
    status, out, err = run(capsys, "report", path, "--out", tmp_path / "r")
    assert (status, out) == (2, "") and not (tmp_path / "r").exists()
    assert one_error(err) == f"{ERROR}results file {path}: rows 0 and 1 are both {LABEL}"
    status, _, err = run(capsys, "gate", "--baseline", path, path)
    assert status == 2
    assert one_error(err) == f"{ERROR}current results {path}: rows 0 and 1 are both {LABEL}"


def test_report_draws_an_impossible_row_as_an_error_row(capsys, tmp_path):
    path = write_doc(tmp_path / "neg.json", [results_row(max_ulp=-5.0, p99_ulp=0.0,
                                                         mean_ulp=0.0)])
    status, _, err = run(capsys, "report", path, "--out", tmp_path / "r", "--quiet")
    assert (status, err) == (0, "")
    page = (tmp_path / "r" / "ops" / "exp.html").read_text()
    assert "malformed row 0: max_ulp must be a number &gt;= 0, inf or null (got -5.0)" in page


# ----- 12: a checkpoint with binary junk --------------------------------------------------------

SEL = runner.Selection(ops=("neg", "exp"), formats=("bfloat16",), draws=1)
SEL_ARGS = ["--ops", "neg,exp", "--formats", "bfloat16", "--samples", "1", "--jobs", "1",
            "--quiet"]


def _interrupted_checkpoint(path, after=1) -> pathlib.Path:
    """The checkpoint of a run of SEL interrupted after ``after`` tasks."""
    done = []

    def execute(task):
        if len(done) == after:
            raise KeyboardInterrupt
        done.append(task.key)
        return evaluate.evaluate(task)

    outcome = runner.run(SEL, str(path), jobs=1, progress=False, execute=execute)
    assert outcome.interrupted
    return pathlib.Path(runner.checkpoint_path(path))


def test_binary_junk_lines_are_skipped_and_their_units_run_again(capsys, tmp_path):
    fresh = tmp_path / "fresh.json"
    assert main(["run", *SEL_ARGS, "--out", str(fresh)]) == 0
    out = tmp_path / "r.json"
    ckpt = _interrupted_checkpoint(out)
    kept = runner.read_checkpoint(ckpt, SEL.fingerprint())
    with open(ckpt, "ab") as fh:
        fh.write(b'{"task": "x", "rows": [\xf5\xff\x00\n\xc3\x28 binary junk')
    assert runner.read_checkpoint(ckpt, SEL.fingerprint()) == kept and len(kept) == 1
    status, _, err = run(capsys, "run", *SEL_ARGS, "--out", out, "--resume")
    assert (status, err) == (0, "")
    assert out.read_bytes() == fresh.read_bytes()


def test_a_damaged_unit_line_in_the_middle_is_skipped(tmp_path):
    ckpt = _interrupted_checkpoint(tmp_path / "r.json", after=2)
    lines = ckpt.read_bytes().split(b"\n")
    damaged = b"\n".join([lines[0], b"\xf5\xf5" + lines[1][2:], *lines[2:]])
    ckpt.write_bytes(damaged)
    kept = runner.read_checkpoint(ckpt, SEL.fingerprint())
    assert list(kept) == [json.loads(lines[2])["task"]]


@pytest.mark.parametrize("head", [b"\xf5\xff\x00junk", b"[1, 2]", b'{"checkpoint": ',
                                  b"[" * 100000])
def test_a_damaged_head_line_names_the_file_and_what_to_do(capsys, tmp_path, head):
    out = tmp_path / "r.json"
    ckpt = pathlib.Path(runner.checkpoint_path(out))
    ckpt.write_bytes(head + b"\n" + b'{"task": "a", "rows": []}\n')
    status, _, err = run(capsys, "run", *SEL_ARGS, "--out", out, "--resume")
    assert status == 2
    assert one_error(err) == (f"{ERROR}checkpoint {ckpt} is damaged (its first line is not a "
                              f"checkpoint head); remove it or run without --resume")


def test_measure_names_a_damaged_checkpoint_too(capsys, tmp_path):
    out = tmp_path / "m.json"
    ckpt = pathlib.Path(runner.checkpoint_path(out))
    ckpt.write_bytes(b"\xf5\xf5\n")
    status, _, err = run(capsys, "measure", "numpy.exp", "--format", "bfloat16", "--samples",
                         "8", "--jobs", "1", "--quiet", "--out", out, "--resume")
    assert status == 2
    assert one_error(err) == (f"{ERROR}checkpoint {ckpt} is damaged (its first line is not a "
                              f"checkpoint head); remove it or run without --resume")


# ----- 13: an interrupted measurement says how much it kept --------------------------------------

def test_interrupted_measure_prints_the_chunks_kept(capsys, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        return Outcome(ran=2, total=12, resumed=1, interrupted=True)

    monkeypatch.setattr(measure, "measure", interrupted)
    out = tmp_path / "m.json"
    status, _, err = run(capsys, "measure", "numpy.exp", "--samples", "8", "--quiet",
                         "--out", out)
    assert status == 130
    assert err == (f"roundoff-coverage: interrupted: 3 of 12 chunks kept in "
                   f"{runner.checkpoint_path(out)}; rerun with --resume\n")


@pytest.mark.slow
def test_ctrl_c_during_measure_keeps_the_finished_chunks(tmp_path):
    out = tmp_path / "m.json"
    ckpt = pathlib.Path(runner.checkpoint_path(out))
    # Far more chunks than can finish between seeing the first one kept and the signal
    # arriving (6 could, on a fast day: the run then ended whole, its checkpoint removed);
    # the run is interrupted early, so they cost nothing.
    chunks = 60
    proc = subprocess.Popen([sys.executable, "-m", "roundoff_coverage", "measure", "numpy.exp",
                             "--format", "binary32", "--samples", str(chunks * measure.CHUNK),
                             "--jobs", "1", "--quiet", "--out", str(out)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    wait_for_checkpoint(proc, ckpt, 120, 0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    kept = ckpt.read_bytes().count(b'"task"')
    assert proc.returncode == 130 and 1 <= kept < chunks
    assert err == (f"roundoff-coverage: interrupted: {kept} of {chunks} chunks kept in "
                   f"{ckpt}; rerun with --resume\n")


# ----- the last resort in main ------------------------------------------------------------------

def test_an_unexpected_exception_is_one_internal_error_line(capsys, monkeypatch):
    def broken(args):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(cli_formats, "cmd_formats", broken)
    monkeypatch.delenv("ROUNDOFF_COVERAGE_TRACEBACK", raising=False)
    status, out, err = run(capsys, "formats")
    assert (status, out) == (1, "")
    assert err == ("roundoff-coverage: internal error: RuntimeError: boom second line (a bug: "
                   "please report it; ROUNDOFF_COVERAGE_TRACEBACK=1 shows the traceback)\n")
    monkeypatch.setenv("ROUNDOFF_COVERAGE_TRACEBACK", "1")
    status, _, err = run(capsys, "formats")
    assert status == 1 and err.startswith("Traceback (most recent call last):")
    assert err.endswith("ROUNDOFF_COVERAGE_TRACEBACK=1 shows the traceback)\n")


def test_ctrl_c_outside_a_run_is_one_line_and_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_ops, "cmd_ops", interrupted)
    assert run(capsys, "ops") == (130, "", "roundoff-coverage: interrupted\n")


def test_a_closed_stdout_ends_quietly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "roundoff_coverage", "ops"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                                   # the reader went away (| head)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1 and err == b""


# ----- the fuzz ---------------------------------------------------------------------------------

class CaseTimeout(BaseException):
    """A fuzz case ran past its time limit (BaseException: main must not swallow it)."""


CASE_LIMIT_S = 60

# Paths a value may name, made afresh in each case's folder (see _files).
PATHS = ["results.json", "defective.json", "duplicate.json", "empty.json", "notjson.txt",
         "binary.bin", "folder", "missing.json", "new/dir/out.json", "config.toml",
         "badconfig.toml", "formats.toml", "tolerances.toml", "report", ""]
JUNK = ["", ",", " ", "-5", "0", "-1", "1e3", "nope", "10000000000000000000000000", "\x00",
        "é", "--", "-x"]


def _files(folder: pathlib.Path) -> None:
    good = results_doc([results_row(), results_row(route="gradient", port="x", max_ulp=0.25,
                                                   p99_ulp=0.2, mean_ulp=0.1)])
    (folder / "results.json").write_text(json.dumps(good))
    (folder / "defective.json").write_text(json.dumps(results_doc([results_row(max_ulp=-5.0)])))
    (folder / "duplicate.json").write_text(json.dumps(results_doc([results_row()] * 2)))
    (folder / "empty.json").write_text("")
    # A damaged checkpoint where a drawn --resume of the default outputs finds it.
    (folder / "m.json.partial.jsonl").write_bytes(b"\xf5\xf5 junk\n")
    (folder / "out.json.partial.jsonl").write_bytes(b'{"checkpoint": "roundoff-coverage/1", '
                                                    b'"fingerprint": "x"}\n\xf5\n')
    (folder / "notjson.txt").write_text("op,route\nexp,forward\n")
    (folder / "binary.bin").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    (folder / "folder").mkdir()
    (folder / "config.toml").write_text("modes = ['nearest_even']\nroutes = 'forward'\n")
    (folder / "badconfig.toml").write_text("formats = []\nopps = 1\n[[\n")
    (folder / "formats.toml").write_text("[formats.tiny]\nexp_bits = 3\nman_bits = 2\n")
    (folder / "tolerances.toml").write_text("default = 0.5\n[formats]\nbfloat16 = 1\n")


def _option(name, values):
    return st.tuples(st.just(name), st.sampled_from(values))


def _flag(name):
    return st.just((name,))


PATH_VALUES = st.sampled_from(PATHS + JUNK)
RESULTS_PATHS = st.one_of(st.just("results.json"), PATH_VALUES)

RUN_OPTIONS = st.one_of(
    _option("--ops", ["exp", "neg", "exp,neg", "", ",", "sofmax", "exp,,neg"]),
    _option("--families", ["", ",", "nope"]),
    _option("--formats", ["bfloat16", "float8_e4m3fn", "", ",", "nope", "binary128", "tiny"]),
    _option("--modes", ["nearest_even", "upward", "", ",", "bogus"]),
    _option("--routes", ["forward", "gradient", "", ",", "backward"]),
    _option("--policies", ["strict", "", "fast"]),
    _option("--implementations", ["emulated", "native", "", "cuda", "x"]),
    _option("--samples", ["1", "2", "0", "-3", "x", "", "10000000000000000000000"]),
    _option("--seed", ["0", "7", "-5", str(2**63 - 1), str(2**63), "x", ""]),
    _option("--jobs", ["1", "0", "-2", "x", ""]),
    _option("--executor", ["local", "", "nope"]),
    _option("--scheduler", ["notaurl", "", "tcp://h", "foo://h:1", "h:0", "tcp://h\0:1"]),
    st.tuples(st.sampled_from(["--out", "--csv", "--config", "--gate", "--html",
                               "--formats-file"]), PATH_VALUES),
    _flag("--exhaustive"), _flag("--resume"),
    st.tuples(st.sampled_from(["--nope", "-z", "extra"])),
)
MEASURE_OPTIONS = st.one_of(
    _option("--format", ["bfloat16", "float8_e4m3fn", "", "nope", "binary128", "tiny"]),
    _option("--samples", ["1", "8", "0", "-1", "x", "", "100000000000000000000000"]),
    _option("--reference", ["exp", "", "nosuch", "log"]),
    _option("--arity", ["1", "2", "3", "x"]),
    _option("--seed", ["0", "3", "-5", str(2**63), "x"]),
    _option("--jobs", ["1", "0", "-1", "x"]),
    _option("--executor", ["local", "", "nope"]),
    _option("--scheduler", ["notaurl", "", "tcp://h", "h:0"]),
    st.tuples(st.sampled_from(["--out", "--formats-file"]), PATH_VALUES),
    _flag("--exhaustive"), _flag("--resume"),
    st.tuples(st.sampled_from(["--nope", "extra"])),
)
GATE_OPTIONS = st.one_of(
    st.tuples(st.sampled_from(["--baseline", "--tolerances", "--markdown", "--junit"]),
              PATH_VALUES),
    _option("--metric", ["max", "p99", "", "nope"]),
    _flag("--update"), _flag("--allow-different-settings"),
    st.tuples(st.sampled_from(["--nope", "extra"])),
)
REPORT_OPTIONS = st.one_of(
    st.tuples(st.sampled_from(["--out", "--baseline"]), PATH_VALUES),
    _flag("--quiet"), st.tuples(st.sampled_from(["--nope", "extra"])),
)
FORMATS_OPTIONS = st.one_of(
    st.tuples(st.just("--formats-file"), PATH_VALUES),
    st.tuples(st.sampled_from(["--nope", "-h"])),
)
NAMES = ["bfloat16", "e5m10", "e4m3fn", "tiny", "exp_bits=5,man_bits=2,encoding=fnuz",
         "exp_bits=100000,man_bits=1", "e2m100000", "nope", "", ",", "e0m0", "binary256"]


@st.composite
def command_lines(draw):
    """The argv of one fuzz case: a subcommand, its required arguments (sometimes left out),
    then 0-5 options drawn from valid and invalid values (paths relative to the case's
    folder)."""
    command = draw(st.sampled_from(["run", "run", "measure", "gate", "report", "formats"]))
    if command == "run":
        # Cheap defaults first: a drawn option of the same name comes later and wins.
        argv = ["run", "--ops", "exp", "--formats", "float8_e4m3fn", "--samples", "1",
                "--jobs", "1", "--quiet", "--out", "out.json"]
        options = RUN_OPTIONS
    elif command == "measure":
        target = draw(st.sampled_from(["numpy.exp", "numpy.exp", "numpy.nothing", "",
                                       "libnosuchlib:f", "json:dumps", "numpy.add",
                                       "lib\0:f", ":", "math:exp"]))
        argv = ["measure", target, "--format", "bfloat16", "--samples", "4", "--jobs", "1",
                "--quiet", "--out", "m.json"]
        options = MEASURE_OPTIONS
    elif command == "gate":
        argv = ["gate", draw(RESULTS_PATHS)] + (["--baseline", "results.json"]
                                                if draw(st.booleans()) else [])
        options = GATE_OPTIONS
    elif command == "report":
        argv = ["report", draw(RESULTS_PATHS)] + (["--out", "report"] if draw(st.booleans())
                                                  else [])
        options = REPORT_OPTIONS
    else:
        argv = ["formats"] + ([draw(st.sampled_from(NAMES))] if draw(st.booleans()) else [])
        options = FORMATS_OPTIONS
    for option in draw(st.lists(options, max_size=5)):
        argv += list(option)
    if command == "measure" and "--exhaustive" in argv:
        del argv[4:6]                                      # no --samples 4: argparse refuses
        argv += ["--format", "float8_e4m3fn"]              # 256 inputs, not 65536
    return argv


def _alarm(signum, frame):
    raise CaseTimeout()


def _inline_local(real):
    """executors.local with isolate=False and one job: the measurement's chunks in this
    process (a worker pool takes seconds to start; the exit-status contract is the same)."""
    def local(fn, units, jobs, **kwargs):
        if "isolate" in kwargs:
            kwargs["isolate"] = False
        return real(fn, units, 1, **kwargs)
    return local


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(argv=command_lines())
def test_fuzz_every_outcome_is_an_exit_status_and_at_most_one_error_line(argv):
    old_cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="rc-fuzz-") as folder, \
            mock.patch.object(executors, "local", _inline_local(executors.local)):
        _files(pathlib.Path(folder))
        os.chdir(folder)
        out, err = io.StringIO(), io.StringIO()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_LIMIT_S)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(argv)
        except CaseTimeout:
            pytest.fail(f"{argv} ran past {CASE_LIMIT_S} s")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            os.chdir(old_cwd)
    text = err.getvalue()
    assert status in (0, 1, 2, 130), (argv, status, text)
    assert "Traceback" not in text and "internal error" not in text, (argv, text)
    lines = text.splitlines()
    assert all(line.startswith("roundoff-coverage: ") for line in lines), (argv, text)
    errors = [line for line in lines if line.startswith(ERROR)]
    assert len(errors) == (1 if status == 2 else 0), (argv, status, text)
    if status == 2:
        assert lines[-1] == errors[0], (argv, text)


# ----- special files: written as a stream, never replaced -----------------------------------------

# (--quiet: no progress lines on stderr, which the tests below read for errors)
BOUND = ["bound", "--ops", "exp", "--box=-1,1", "--samples", "8", "--budget", "4", "--quiet"]


def test_bound_writes_to_dev_null_through_a_link_and_leaves_it_a_device(capsys, tmp_path):
    # A link to /dev/null, not /dev/null itself: were the file replaced, only the link goes.
    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    status, out, err = run(capsys, *BOUND, "--out", link)
    assert (status, err) == (0, "") and out.endswith(f"3 rows: {link}\n")
    assert link.is_symlink() and os.readlink(link) == os.devnull
    assert stat.S_ISCHR(os.stat(link).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]      # nothing beside it


def test_bound_streams_its_results_into_a_fifo(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    status, _, err = run(capsys, *BOUND, "--out", fifo)
    reader.join(60)
    assert (status, err) == (0, "")
    assert json.loads(got[0])["schema"] == "roundoff-coverage/1"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


@pytest.mark.parametrize("option, what, why", [
    ("--out", "output file", "the run keeps its checkpoint (and by default the graph "
                             "artifact) beside its results file"),
    ("--artifact", "artifact file", "every configuration of the run reads the graph back "
                                    "from it"),
])
def test_model_refuses_a_special_file_it_cannot_stream(capsys, tmp_path, option, what, why):
    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    status, _, err = run(capsys, "model", "net.py:make", option, link)
    assert status == 2
    assert one_error(err) == (f"{ERROR}{what} {link} is a character device, not a regular "
                              f"file: {why}; give a file path")
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_run_refuses_a_fifo_as_its_results_file(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    status, _, err = run(capsys, "run", *TINY, "--out", fifo)
    assert status == 2
    assert one_error(err) == (f"{ERROR}output file {fifo} is a FIFO, not a regular file: the "
                              f"run keeps its checkpoint beside its results file; give a "
                              f"file path")


def test_model_refuses_an_artifact_that_is_the_results_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, "model", "net.py:make", "--out", "m.json", "--artifact",
                         "./sub/../m.json")
    assert status == 2
    assert one_error(err) == (f"{ERROR}--artifact ./sub/../m.json is the results file (--out "
                              f"m.json): the results would overwrite the graph; give the "
                              f"artifact another path (default: m.json.graph.json)")
    (tmp_path / "g.json").write_text("{}")
    status, _, err = run(capsys, "model", "g.json", "--out", "g.json")
    assert status == 2
    assert one_error(err) == (f"{ERROR}--out g.json is the graph artifact being measured: the "
                              f"results would overwrite it; give the results another path")
    assert (tmp_path / "g.json").read_text() == "{}"

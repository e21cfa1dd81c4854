"""The coverage run and ``measure`` on a Dask cluster (engine/executors.py).

The oracle is the local executor: the same selection and seed run in this process must give
the same bytes whatever the cluster does -- two workers finishing in any order, a worker
killed in mid-unit, a client interrupted and resumed (by either executor), a unit failing.
Faults are injected with ``execute`` closures (runner.run's test hook), which cloudpickle
ships by value to the workers; they talk back to the test through files in tmp_path.
One LocalCluster of 2 worker processes serves the module; selections are tiny.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import signal
import sys
import threading
import time

import pytest

from roundoff_coverage.engine import evaluate, executors, measure, runner
from roundoff_coverage.engine.tally import Tally
from roundoff_coverage.reports.cli import main
from conftest import one_error

# neg's 4 instances (default, 2x3, int8, uint64) and exp's 2: 6 tasks; the fault tests use
# 12.
SEL = runner.Selection(ops=("neg", "exp"), formats=("bfloat16",), draws=1)
WIDE = runner.Selection(ops=("neg", "exp", "abs"), formats=("bfloat16", "float8_e4m3fn"),
                        draws=1)
RUN_ARGS = ["run", "--ops", "neg,exp", "--formats", "bfloat16", "--samples", "1"]


@pytest.fixture(scope="module")
def cluster():
    import distributed
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=logging.CRITICAL) as c:
        yield c


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """{selection: bytes of its results file from a local run in this process}."""
    folder = tmp_path_factory.mktemp("local")
    out = {}
    for name, sel in (("small", SEL), ("wide", WIDE)):
        path = folder / f"{name}.json"
        runner.run(sel, str(path), jobs=1, progress=False)
        out[sel] = path.read_bytes()
    return out


def _dask(sel, path, cluster, **kw):
    return runner.run(sel, str(path), progress=False, executor="dask",
                      scheduler=cluster.scheduler_address, **kw)


def _lines(path):
    return path.read_text().splitlines() if path.exists() else []


# ----- determinism ------------------------------------------------------------------------------

def test_dask_run_writes_the_bytes_of_a_local_run(cluster, local, tmp_path):
    out = tmp_path / "d.json"
    o = _dask(WIDE, out, cluster)
    assert out.read_bytes() == local[WIDE]
    assert o.ran == o.total == len(runner.plan(WIDE)) and not o.interrupted
    assert not os.path.exists(runner.checkpoint_path(out))
    assert o.phases["evaluation"] > 0 and o.peak_kib > 0        # workers' phases come back


def test_cli_dask_without_address_starts_a_local_cluster_with_the_same_summary(
        local, tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*RUN_ARGS, "--jobs", "1", "--out", str(a)]) == 0
    out_local = capsys.readouterr().out
    assert main([*RUN_ARGS, "--executor", "dask", "--jobs", "2", "--out", str(b)]) == 0
    captured = capsys.readouterr()
    assert b.read_bytes() == a.read_bytes() == local[SEL]

    # The summary's measured lines are the same; only times and memory differ.
    def stable(text, path):
        return [ln for ln in text.replace(str(path), "OUT").splitlines()
                if not ln.startswith(("time per phase", "wall time", "peak memory"))]
    assert stable(captured.out, b) == stable(out_local, a)
    # Progress went to stderr as in a local run; a dashboard line only where one is served.
    assert "6/6 tasks" in captured.err
    dash = [ln for ln in captured.err.splitlines() if "Dask dashboard" in ln]
    assert len(dash) <= 1 and all(ln.startswith("roundoff-coverage: Dask dashboard: http")
                                  for ln in dash)


def test_measure_on_dask_writes_the_bytes_of_a_local_measurement(cluster, tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    common = ["measure", "numpy.exp", "--format", "bfloat16", "--exhaustive", "--quiet"]
    assert main([*common, "--jobs", "1", "--out", str(a)]) == 0
    assert main([*common, "--scheduler", cluster.scheduler_address, "--out", str(b)]) == 0
    assert b.read_bytes() == a.read_bytes()
    row = json.loads(b.read_text())["rows"][0]
    assert row["status"] == "ok" and row["samples"] == 1 << 16


def test_model_on_dask_writes_the_bytes_of_a_local_run(cluster, tmp_path, monkeypatch):
    # Two configurations of the tests' chain graph, forward and gradient, two samples: the
    # cluster's two workers give the file a local run in one process writes (each run in
    # its own folder under the same relative names: the file records --out as given).
    from conftest import chain_graph
    import numpy as np
    g = chain_graph()
    g.example_inputs = [np.linspace(0.5, 2.0, 6)] * 4
    common = ["model", "g.json", "--formats", "bfloat16,binary16", "--routes",
              "forward,gradient", "--quiet", "--artifact", "g.json", "--out", "m.json"]
    files, sent = [], []
    to_cluster = executors.dask

    def counted(fn, units, **kw):                 # the units the command sends the cluster
        units = list(units)
        sent.extend(key for key, _ in units)
        return to_cluster(fn, units, **kw)
    monkeypatch.setattr(executors, "dask", counted)
    for where, how in (("local", ["--jobs", "1"]),
                       ("dask", ["--scheduler", cluster.scheduler_address])):
        (tmp_path / where).mkdir()
        g.save(str(tmp_path / where / "g.json"))
        monkeypatch.chdir(tmp_path / where)
        assert main([*common, *how]) == 0
        files.append((tmp_path / where / "m.json").read_bytes())
    assert files[1] == files[0]
    assert sorted(sent) == ["bfloat16|nearest_even|fp32_accumulate",
                            "binary16|nearest_even|fp32_accumulate"]
    rows = json.loads(files[1])["rows"]
    assert {r["format"] for r in rows} == {"bfloat16", "binary16"}
    assert all(r["status"] == "ok" for r in rows)


# ----- faults -----------------------------------------------------------------------------------

def _killable(victim, marker, log):
    """An execute hook: logs every attempt; the first attempt at ``victim`` writes its
    worker's pid to ``marker`` and hangs until the test kills that worker."""
    def execute(task):
        with open(log, "a") as fh:
            fh.write(task.key + "\n")
        if task.key == victim and not os.path.exists(marker):
            with open(marker + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            time.sleep(120)
        return evaluate.evaluate(task)
    return execute


def test_a_worker_killed_mid_unit_loses_nothing_and_the_file_is_identical(
        cluster, local, tmp_path):
    import distributed
    with distributed.Client(cluster, set_as_default=False) as client:
        pids = set(client.run(os.getpid).values())
    tasks = runner.plan(WIDE)
    victim = tasks[len(tasks) // 2].key
    marker, log = tmp_path / "victim.pid", tmp_path / "attempts.log"
    killed = []

    def kill_when_hanging():
        deadline = time.time() + 60
        while time.time() < deadline and not marker.exists():
            time.sleep(0.02)
        if marker.exists():
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_when_hanging, daemon=True)
    killer.start()
    out = tmp_path / "k.json"
    o = _dask(WIDE, out, cluster, execute=_killable(victim, str(marker), str(log)))
    killer.join()
    assert killed and killed[0] in pids                  # a worker of the cluster died
    attempts = _lines(log)
    assert attempts.count(victim) == 2                   # its unit was rerun elsewhere
    assert {t.key for t in tasks} <= set(attempts)
    assert o.ran == len(tasks) and out.read_bytes() == local[WIDE]


def _failing(victim, log):
    def execute(task):
        if task.key == victim:
            with open(log, "a") as fh:
                fh.write("attempt\n")
            raise RuntimeError(f"injected failure in {task.op}")
        return evaluate.evaluate(task)
    return execute


def test_a_unit_failing_twice_becomes_error_rows_and_the_run_completes(
        cluster, local, tmp_path):
    task = runner.plan(SEL)[1]
    log, out = tmp_path / "attempts.log", tmp_path / "e.json"
    o = _dask(SEL, out, cluster, execute=_failing(task.key, str(log)))
    assert len(_lines(log)) == 2                          # the first try and one retry
    assert o.ran == o.total and not o.interrupted
    rows = json.loads(out.read_text())["rows"]
    mine = [r for r in rows if (r["op"], r["instance"]) == (task.op, task.instance)]
    assert [r["route"] for r in mine] == list(task.routes)
    for r in mine:
        assert r["status"] == "error" and r["port"] == "-"
        assert r["reason"] == f"on the Dask cluster: RuntimeError: injected failure in {task.op}"
    others = [r for r in json.loads(local[SEL])["rows"]
              if (r["op"], r["instance"]) != (task.op, task.instance)]
    assert [r for r in rows if r not in mine] == others


@pytest.mark.parametrize("resume_with", ["dask", "local"])
def test_an_interrupted_client_resumes_to_the_same_file(cluster, local, tmp_path,
                                                        monkeypatch, resume_with):
    real = runner.Progress.update
    calls = []

    def interrupt_at_third(self, n=1, work=1.0):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, n, work)
    monkeypatch.setattr(runner.Progress, "update", interrupt_at_third)
    out = tmp_path / "r.json"
    o = _dask(WIDE, out, cluster)
    assert o.interrupted and not out.exists()
    kept = runner.read_checkpoint(runner.checkpoint_path(out), WIDE.fingerprint())
    assert len(kept) == 3
    monkeypatch.setattr(runner.Progress, "update", real)
    if resume_with == "dask":
        o = _dask(WIDE, out, cluster, resume=True)
    else:
        o = runner.run(WIDE, str(out), jobs=1, progress=False, resume=True)
    assert (o.resumed, o.ran) == (3, o.total - 3)
    assert out.read_bytes() == local[WIDE]


def test_a_measure_chunk_failing_twice_makes_the_row_an_error(cluster, tmp_path, monkeypatch):
    real = measure._work
    log = str(tmp_path / "attempts.log")

    def first_chunk_fails(m, j):
        if j == 0:
            with open(log, "a") as fh:
                fh.write("attempt\n")
            raise MemoryError("injected")
        return real(m, j)
    # measure submits the module's _work by name lookup: the closure travels by value.
    monkeypatch.setattr(measure, "_work", first_chunk_fails)
    samples = measure.CHUNK + 5                           # chunk 1 holds 5 inputs: cheap
    o = measure.measure("numpy.exp", "bfloat16", samples=samples, out=str(tmp_path / "m.json"),
                        executor="dask", scheduler=cluster.scheduler_address)
    assert len(_lines(tmp_path / "attempts.log")) == 2
    r = o.row
    assert r["status"] == "error" and r["samples"] == 5
    assert r["reason"] == (f"1 of 2 chunks failed: 0 (inputs 0..{measure.CHUNK - 1}); first "
                           f"error: on the Dask cluster: MemoryError: injected")
    # The statistics are chunk 1's, computed here independently of the cluster.
    t = measure.target("numpy.exp", "bfloat16")
    m = measure.Measurement(t.spec, "bfloat16", t.reference, 1, samples, 0)
    tally = Tally()
    tally.add(1, measure.run_chunk(m, t, 1))
    alone = measure.row(m, t, tally)
    assert {k: v for k, v in r.items() if k not in ("status", "reason")} == \
        {k: v for k, v in alone.items() if k not in ("status", "reason")}


# ----- user errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [RUN_ARGS, ["measure", "numpy.exp", "--format",
                                                "bfloat16", "--exhaustive"]])
def test_missing_dask_is_one_line_naming_the_pip_command(command, tmp_path, capsys,
                                                         monkeypatch):
    real_import = builtins.__import__

    def no_dask(name, *args, **kw):
        if name.split(".")[0] in ("dask", "distributed"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kw)
    monkeypatch.delitem(sys.modules, "distributed", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_dask)
    out = tmp_path / "x.json"
    assert main([*command, "--executor", "dask", "--out", str(out)]) == 2
    one_error(capsys.readouterr().err, "pip install 'roundoff-coverage[dask]'")
    assert not out.exists() and not os.path.exists(runner.checkpoint_path(out))


@pytest.mark.parametrize("extra,words", [
    (["--executor", "local", "--scheduler", "tcp://127.0.0.1:8786"], ["no scheduler"]),
    (["--executor", "spark"], ["unknown executor 'spark'"]),
    (["--scheduler", "tcp://127.0.0.1:9"], ["cannot reach the Dask scheduler",
                                            "tcp://127.0.0.1:9"]),
])
def test_bad_executor_options_exit_2_with_one_line(extra, words, tmp_path, capsys,
                                                   monkeypatch):
    monkeypatch.setattr(executors, "CONNECT_TIMEOUT", 1)
    assert main([*RUN_ARGS, *extra, "--out", str(tmp_path / "x.json")]) == 2
    one_error(capsys.readouterr().err, *words)


@pytest.mark.parametrize("content,words", [
    ('executor = "local"\nscheduler = "tcp://127.0.0.1:8786"\n', ["no scheduler"]),
    ("executor = 2\n", ["executor must be a name or an address"]),
])
def test_bad_executor_settings_of_a_config_file_exit_2(content, words, tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(content)
    assert main([*RUN_ARGS, "--config", str(config), "--out", str(tmp_path / "x.json")]) == 2
    one_error(capsys.readouterr().err, *words)


def test_a_python_callable_cannot_be_measured_on_dask():
    with pytest.raises(measure.MeasureError, match="runs in this process only"):
        measure.measure(lambda x: x, "bfloat16", samples=10, executor="dask")

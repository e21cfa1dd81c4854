"""A worker that dies ends the run within seconds, with one line naming the unit it was
computing, the finished units kept in the checkpoint, exit 2: in ``run`` and in ``measure``,
for a worker killed from outside (the OOM killer's SIGKILL) and for a target that crashes
its process."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

CLI = [sys.executable, "-m", "roundoff_coverage"]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def _workers(pid: int) -> list[int]:
    """The pool workers of the run ``pid``: children of its forkserver process."""
    found = []
    for child in _children(pid):
        try:
            cmd = pathlib.Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkserver" in cmd:
            found += _children(child)
    return found


def _lines(path) -> int:
    try:
        return len([x for x in pathlib.Path(path).read_text().split("\n") if x.strip()])
    except FileNotFoundError:
        return 0


def _kill_a_worker_after(proc, ckpt, lines: int, limit: float = 240) -> int:
    """Wait until the checkpoint holds ``lines`` lines, then SIGKILL one pool worker of
    ``proc``; the number of checkpoint lines at that moment."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        workers = _workers(proc.pid)
        if workers and _lines(ckpt) >= lines:
            kept = _lines(ckpt)
            os.kill(workers[0], signal.SIGKILL)
            return kept
        time.sleep(0.05)
    raise AssertionError("no worker to kill in time")


def _ends_with_one_line(proc, limit=30):
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=limit)
    assert time.monotonic() - t0 < limit
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow
def test_run_with_a_killed_worker_ends_within_seconds_naming_the_task(tmp_path):
    out = tmp_path / "r.json"
    ckpt = tmp_path / "r.json.partial.jsonl"
    proc = subprocess.Popen(CLI + ["run", "--ops", "exp,log,sin,cos,tanh,sigmoid,silu,erf",
                                   "--formats", "bfloat16,binary16,binary32", "--samples",
                                   "300", "--jobs", "2", "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        kept = _kill_a_worker_after(proc, ckpt, 2)           # the head and a finished task
        line = _ends_with_one_line(proc)
    finally:
        proc.kill()
    assert re.fullmatch(r"roundoff-coverage: error: a worker process was killed by SIGKILL "
                        r"\(out of memory\?\) while computing task \w+\|.+; the units "
                        r"finished before are kept in the checkpoint: rerun with --resume",
                        line), line
    assert not out.exists()
    # The finished tasks are in the checkpoint, one JSON line each, after its head.
    recs = [json.loads(x) for x in ckpt.read_text().split("\n") if x.strip()]
    assert recs[0]["checkpoint"] and len(recs) >= kept >= 2
    assert all(r["rows"] for r in recs[1:])


@pytest.mark.slow
def test_measure_with_a_killed_worker_ends_within_seconds_naming_the_chunk(tmp_path):
    out = tmp_path / "m.json"
    ckpt = tmp_path / "m.json.partial.jsonl"
    proc = subprocess.Popen(CLI + ["measure", "numpy.exp", "--format", "binary16",
                                   "--samples", str(40 * (1 << 22)), "--jobs", "2",
                                   "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _kill_a_worker_after(proc, ckpt, 2)
        line = _ends_with_one_line(proc)
    finally:
        proc.kill()
    m = re.fullmatch(r"roundoff-coverage: error: a worker process was killed by SIGKILL "
                     r"\(out of memory\?\) while computing chunk (\d+) \(inputs (\d+)\.\.(\d+)"
                     r"\); the units finished before are kept in the checkpoint: rerun with "
                     r"--resume", line)
    assert m, line
    j, lo, hi = map(int, m.groups())
    assert (lo, hi) == (j << 22, ((j + 1) << 22) - 1)
    assert _lines(ckpt) >= 2 and not out.exists()


CRASH = textwrap.dedent("""
    import os, signal
    import numpy as np

    def crash(x):
        # Every chunk but the first one kills its process, as a bad C function would.
        if x.size < 1000:
            os.kill(os.getpid(), signal.SIGSEGV)
        return np.exp(x)
""")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_target_that_crashes_its_process_ends_the_measurement_with_one_line(tmp_path, jobs):
    (tmp_path / "crashing.py").write_text(CRASH)
    out = tmp_path / "m.json"
    samples = (1 << 22) + 10                    # chunk 0 is measured, chunk 1 (10 inputs) dies
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.Popen(CLI + ["measure", "crashing:crash", "--reference", "exp",
                                   "--format", "bfloat16", "--samples", str(samples),
                                   "--jobs", jobs, "--quiet", "--out", str(out)], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _ends_with_one_line(proc, limit=120)
    finally:
        proc.kill()
    assert line == (f"roundoff-coverage: error: a worker process was killed by SIGSEGV while "
                    f"computing chunk 1 (inputs {1 << 22}..{(1 << 22) + 9}); the units "
                    f"finished before are kept in the checkpoint: rerun with --resume")
    # This process survived to say so; chunk 0 is in the checkpoint (with jobs 2 it may
    # still have been in flight when chunk 1's worker died).
    recs = [json.loads(x) for x in (tmp_path / "m.json.partial.jsonl").read_text()
            .split("\n") if x.strip()]
    assert recs[0]["checkpoint"] and all(r["task"] == "0" for r in recs[1:])
    if jobs == "1":
        assert len(recs) == 2


@pytest.mark.slow
def test_a_target_that_kills_every_dask_worker_ends_the_measurement_with_one_line(tmp_path):
    # Dask reruns a unit whose worker died (distributed.scheduler.allowed-failures); one
    # that kills every worker it lands on ends the run as on the local executor.
    pytest.importorskip("distributed")
    (tmp_path / "crashing.py").write_text(CRASH.replace("x.size < 1000", "True"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.Popen(CLI + ["measure", "crashing:crash", "--reference", "exp",
                                   "--format", "bfloat16", "--samples", "100", "--jobs", "2",
                                   "--executor", "dask", "--quiet", "--out",
                                   str(tmp_path / "m.json")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _ends_with_one_line(proc, limit=180)
    finally:
        proc.kill()
    assert line == ("roundoff-coverage: error: every Dask worker that ran chunk 0 (inputs "
                    "0..99) died in it (KilledWorker); the units finished before are kept in "
                    "the checkpoint: rerun with --resume")
    assert not (tmp_path / "m.json").exists()


def test_a_pool_broken_before_any_result_says_so_is_a_worker_death(monkeypatch):
    # A worker dies just after the last results came in: the pool's next submit raises
    # BrokenProcessPool before any future does.  That is the death of a worker too (one
    # line, the units finished before kept), not an internal error.
    from concurrent.futures.process import BrokenProcessPool

    from roundoff_coverage.engine import executors

    class Breaking(executors.ProcessPoolExecutor):
        calls = 0

        def submit(self, *args, **kwargs):
            Breaking.calls += 1
            if Breaking.calls > 4:                   # the first two per worker went out
                raise BrokenProcessPool("a child process terminated abruptly")
            return super().submit(*args, **kwargs)
    monkeypatch.setattr(executors, "ProcessPoolExecutor", Breaking)
    got = []
    with pytest.raises(executors.WorkerDied) as info:
        for key, value in executors.local(abs, [(k, (-k,)) for k in range(8)], 2,
                                          name=lambda k: f"unit {k}"):
            got.append((key, value))
    message = str(info.value)
    assert "\n" not in message and message.startswith("a worker process") and \
        message.endswith("rerun with --resume"), message
    assert got and all(value == key for key, value in got)      # what finished is kept

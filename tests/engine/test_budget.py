"""A request that cannot fit the machine is refused before any work, with one line saying
what it needs and what fits (engine/budget.py)."""

from __future__ import annotations

import re

import pytest

from roundoff_coverage.engine import budget, spill, runner
from roundoff_coverage.reports.cli import main
from conftest import one_error

HUGE = "99999999999999999999"


def test_a_run_too_large_for_memory_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "--samples", HUGE, "--out", str(out), "--jobs", "2"]) == 2
    line = one_error(capsys.readouterr().err)
    m = re.search(r"--samples (\d+): the largest task \((\w+) .+\) needs about .+ per worker.+"
                  r"at most about --samples (\d+) fits", line)
    assert m and m.group(1) == HUGE, line
    assert not out.exists() and not (tmp_path / "r.json.partial.jsonl").exists()
    # What it says fits does fit, by the same plan, and ten times as much does not.
    fits = int(m.group(3))
    sel = runner.Selection(draws=fits)
    tasks = runner.plan(sel)
    big = max(tasks, key=runner.footprint)
    assert big.op == m.group(2)
    budget.check_run(("", runner.footprint(big), big.draws), 2)
    sel10 = runner.Selection(draws=10 * fits + 10)
    big10 = max(runner.plan(sel10), key=runner.footprint)
    with pytest.raises(budget.BudgetError):
        budget.check_run(("", runner.footprint(big10), big10.draws), 2)


def test_a_measurement_too_large_is_refused_naming_memory_and_disk(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["measure", "numpy.exp", "--samples", HUGE, "--out", str(out)]) == 2
    line = one_error(capsys.readouterr().err)
    assert re.fullmatch(rf"roundoff-coverage: error: {HUGE} samples \(\d+ chunks of 4194304 "
                        r"inputs\) needs about [\d.e+]+ [KMGTPE]iB of memory \([\d.]+ [KMGT]iB "
                        r"available\) and its checkpoint about [\d.e+]+ [KMGTPE]iB of disk "
                        r"\([\d.]+ [KMGT]iB free\): at most about [\d.e+]+ samples fit this "
                        r"machine with \d+ worker\(s\)", line), line
    assert not (tmp_path / "m.json.partial.jsonl").exists()


def test_the_plan_follows_the_memory_there_is(monkeypatch):
    monkeypatch.setattr(budget, "available_memory", lambda: 8 << 30)
    budget.check_run(("t", 1000, 10), 2)
    with pytest.raises(budget.BudgetError, match=r"8 GiB is available"):
        budget.check_run(("t", 4 << 20, 10), 2)          # 2 x (4 Mi x 2 KiB) = 16 GiB
    budget.check_measure(100 << 22, 1 << 22, 2)
    with pytest.raises(budget.BudgetError, match="of memory"):
        budget.check_measure((1 << 60), 1 << 22, 2)


def test_sizes_read_in_binary_units():
    assert budget.size_text(512) == "512 B"
    assert budget.size_text(1536) == "1.5 KiB"
    assert budget.size_text(3 << 30) == "3 GiB"


def test_a_model_run_is_estimated_by_route_and_worker(monkeypatch):
    # 8 GiB available; 4 Mi elements a sample at 256 bytes each (forward + gradient) is
    # 1 GiB a sample on top of the worker's 400 MiB: 7 samples (7.39 GiB) fit, 8 (8.39 GiB)
    # do not; the line's count is of 95% of 8 GiB: 0.95 * 8 GiB - 400 MiB =
    # 7,741,007,462 bytes, 7.2 samples.
    monkeypatch.setattr(budget, "available_memory", lambda: 8 << 30)
    # (runs whose traces fit all the memory keep them there: spill.SPILL_SHARE 1)
    monkeypatch.setattr(spill, "SPILL_SHARE", 1)
    fg = ("forward", "gradient")
    budget.check_model(4 << 20, 7, "x", fg)
    with pytest.raises(budget.BudgetError) as info:
        budget.check_model(4 << 20, 8, "input x [2048, 2048]", fg)
    assert re.search(r"hold 4194304 elements a sample \(largest: input x \[2048, 2048\]\), "
                     r"and a model run of forward\+gradient holds about 256 bytes per "
                     r"element.+8 samples need about 8\.39 GiB on 1 worker, more than the "
                     r"8 GiB available; at most 7 samples fit", str(info.value)), info.value
    # forward alone is half as much: 15 samples fit; two workers each hold a configuration
    # (2 x (400 MiB + 4 GiB) > 8 GiB; 0.95 * 4 GiB - 400 MiB is 3.4 samples).
    budget.check_model(4 << 20, 15, "x", ("forward",))
    with pytest.raises(budget.BudgetError, match="on 2 workers.+at most 3 samples fit"):
        budget.check_model(4 << 20, 4, "x", fg, workers=2)
    # Work on a remote cluster: only the binary64 bound, which never refuses what fits.
    budget.check_model(4 << 20, 4, "x", fg, workers=0)
    with pytest.raises(budget.BudgetError, match="in binary64 alone"):
        budget.check_model(1 << 30, 9, "x", fg, workers=0)


def test_a_model_too_large_is_refused_before_its_artifact_is_written(tmp_path, capsys,
                                                                    monkeypatch):
    pytest.importorskip("torch")
    factory = tmp_path / "big.py"
    factory.write_text("def make():\n    import torch\n    torch.manual_seed(0)\n"
                       "    return torch.nn.Linear(2048, 2048), (torch.ones(1, 2048),)\n")
    monkeypatch.setattr(budget, "available_memory", lambda: 1 << 30)
    out = tmp_path / "m.json"
    assert main(["model", f"{factory}:make", "--formats", "bfloat16", "--routes",
                 "forward,gradient", "--samples", "1", "--jobs", "1", "--quiet", "--out",
                 str(out)]) == 2
    line = one_error(capsys.readouterr().err, "1 sample needs about", "1 GiB available",
                     "not one sample fits")
    assert "largest: input weight [2048, 2048]" in line, line
    assert not out.exists() and not (tmp_path / "m.json.graph.json").exists()


def test_a_run_that_stores_its_sweeps_is_estimated_by_its_largest_value_and_its_disk(
        monkeypatch):
    # 8 GiB available, spill.SPILL_SHARE 4: two exact traces of 4 Mi elements with
    # gradients (value, cotangent, contribution) in double-double are 384 MiB a sample, so
    # 5 samples (1.875 GiB) are kept in memory and 6 (2.25 GiB) stored as made.  Stored,
    # a sample holds 4 Mi x 32 + 1 Mi x 128 bytes (its largest value 1 Mi elements) = 256
    # MiB over a base of 400: 30 samples (7.89 GiB) fit, 31 (8.14 GiB) do not, and the
    # line's count is of 95% of 8 GiB: (7782.4 - 400) / 256 = 28.8.
    monkeypatch.setattr(budget, "available_memory", lambda: 8 << 30)
    monkeypatch.setattr(budget, "free_disk", lambda path: 1 << 50)
    monkeypatch.setattr(spill, "SPILL_SHARE", 4)
    monkeypatch.setattr(budget, "STREAM_BASE", 400 << 20)
    monkeypatch.setattr(budget, "STREAM_BYTES_PER_ELEMENT", 32)
    monkeypatch.setattr(budget, "STREAM_NODE_BYTES", 128)
    monkeypatch.setattr(budget, "SPILL_BYTES_PER_ELEMENT", 75)
    monkeypatch.setattr(budget, "SPILL_NODE_BYTES", 100)
    fg = ("forward", "gradient")
    assert not budget.stores(4 << 20, 5, fg, 8 << 30)
    assert budget.stores(4 << 20, 6, fg, 8 << 30)
    budget.check_model(4 << 20, 30, "x", fg, largest_elements=1 << 20)
    with pytest.raises(budget.BudgetError) as info:
        budget.check_model(4 << 20, 31, "input x [1024, 1024]", fg, largest_elements=1 << 20)
    assert re.search(r"4194304 elements a sample \(largest: input x \[1024, 1024\]\), more "
                     r"than fit in memory: the run stores its sweeps in a file as it makes "
                     r"them \(in .+, TMPDIR\) and holds about 400 MiB, 32 bytes per element "
                     r"and 128 per element of the largest: 31 samples need about 8.14 GiB on 1 "
                     r"worker, more than the 8 GiB available; at most 28 samples fit",
                     str(info.value)), info.value
    # Its file: 75 bytes an element and 100 an element of the largest, 400 MiB a sample
    # (4 Mi x 75 + 1 Mi x 100 bytes); with 10 GiB free, 25
    # samples fit (0.95 * 10 GiB / 400 MiB = 24.3 is the line's count), 26 do not.
    monkeypatch.setattr(budget, "free_disk", lambda path: 10 << 30)
    budget.check_model(4 << 20, 25, "x", fg, largest_elements=1 << 20)
    with pytest.raises(budget.BudgetError, match=r"26 samples need about 10.2 GiB of disk "
                       r"there on 1 worker, and 10 GiB is free; at most 24 samples fit "
                       r"\(set TMPDIR to a folder with more room"):
        budget.check_model(4 << 20, 26, "x", fg, largest_elements=1 << 20)

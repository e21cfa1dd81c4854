"""engine.tally: a measurement's chunk summaries merge in any order to the same row, and
to the row of the same inputs measured as one chunk; its memory does not grow with the
number of chunks; a percentile never exceeds the maximum."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap

import mpmath
import numpy as np
import pytest

from roundoff_coverage.engine import measure
from roundoff_coverage.engine.tally import Tally, compact


def _row(m, t, parts, order):
    tally = Tally()
    for j in order:
        # Through the checkpoint's form: compacted, written as JSON and read back.
        tally.add(j, json.loads(json.dumps(compact(parts[j]))))
    return measure.row(m, t, tally)


def test_chunks_merge_in_any_order_and_as_one_chunk(monkeypatch):
    # Every bfloat16 input of numpy's exp: 16 chunks of 4096 inputs, then one of 65536.
    t = measure.target("numpy.exp", "bfloat16")
    monkeypatch.setattr(measure, "CHUNK", 4096)
    m = measure.Measurement(t.spec, "bfloat16", t.reference, 1, None, 0)
    assert m.chunks() == 16
    parts = {j: measure.run_chunk(m, t, j) for j in range(16)}
    rows = [_row(m, t, parts, order) for order in
            (range(16), reversed(range(16)), random.Random(5).sample(range(16), 16))]
    assert rows[0] == rows[1] == rows[2]
    monkeypatch.setattr(measure, "CHUNK", 1 << 16)
    whole = _row(m, t, {0: measure.run_chunk(m, t, 0)}, [0])
    a = rows[0]
    for k in ("samples", "max_ulp", "p99_ulp", "min_signed_ulp", "max_signed_ulp",
              "exceptional", "unmeasured", "histogram", "worst", "incorrectly_rounded"):
        assert a[k] == whole[k], k
    # The mean: the chunks' sums added exactly, against one running binary64 sum.
    assert a["mean_ulp"] == pytest.approx(whole["mean_ulp"], rel=1e-12)


def test_a_nan_returning_target_has_p99_at_most_its_max():
    # NaN for every input: measured only where the exact value is NaN too (error 0), so
    # the maximum is 0 and the 99th percentile cannot exceed it.
    def nan(x):
        return np.full_like(x, np.nan)
    o = measure.measure(nan, "bfloat16", samples=20000, reference="exp")
    r = o.row
    assert r["max_ulp"] == 0 and r["p99_ulp"] == 0
    # Every input whose exp is a number is an exceptional outcome: overflow_to_nan where
    # exp(x) rounds beyond bfloat16's range, x >= log((2 - 2**-8) * 2**127) (the midpoint
    # above the largest finite value, 3.39e38), nan_from_finite below.
    xs = measure.inputs(measure.Measurement(r["op"], "bfloat16", "exp", 1, 20000, 0), 0)[0]
    threshold = float(mpmath.log((2 - mpmath.mpf(2) ** -8) * mpmath.mpf(2) ** 127))
    numbers = ~np.isnan(xs)
    assert r["exceptional"] == {"overflow_to_nan": int((xs >= threshold).sum()),
                                "nan_from_finite": int((numbers & (xs < threshold)).sum())}
    assert r["unmeasured"] == int(numbers.sum())


def test_p99_is_capped_by_the_maximum():
    tally = Tally()
    summ = {"n": 10, "measured": 10, "nan": 0, "not_cr": 0, "resolved": 0, "sum_abs": 0.0,
            "counts": [0] * len(measure.metrics.CLASSES), "hist": [10] + [0] * (
                len(measure.metrics.HIST_EDGES) - 1), "fine": [10] + [0] * 4096,
            "min": 0.0, "max": 0.0, "max_rel": 0.0, "dropped": None, "worst": None,
            "lower": -math.inf, "cands": []}
    tally.add(0, summ)
    assert tally.p99() == 1 / 1024 and tally.p99(0.0) == 0.0


# The process's own peak resident size (VmHWM, KiB): getrusage's ru_maxrss would carry the
# mark of the pytest worker that started it across its exec.
MEMORY = textwrap.dedent("""
    import sys
    import numpy as np
    from roundoff_coverage.engine import measure
    measure.CHUNK = 1 << 12                    # many small chunks
    def exp(x):
        return np.exp(x)
    def peak():
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    peaks = []
    for chunks in (50, int(sys.argv[1])):
        o = measure.measure(exp, "bfloat16", samples=measure.CHUNK * chunks,
                            reference="exp", out=sys.argv[2])
        assert o.row["samples"] == measure.CHUNK * chunks
        peaks.append(peak())
    print(peaks[0], peaks[1])
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_peak_memory_does_not_grow_with_the_number_of_chunks(tmp_path):
    # 5,000 chunks: kept as summaries (150 KB each), they would take 750 MB, against the
    # 64 MiB allowed.
    proc = subprocess.run([sys.executable, "-c", MEMORY, "5000", str(tmp_path / "m.json")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    few, many = map(int, proc.stdout.split())
    assert many - few < 64 * 1024, (few, many)              # KiB

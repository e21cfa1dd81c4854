"""A model run's memory is bounded by its largest node, not by its graph (issue "Models at
scale"): where the traces go to the spill file as they are made (engine/spill.py, as on a
machine whose memory they exceed), the peak resident size of a run of a chain of ten
nodes stays near that of one of its nodes alone; measured in fresh processes by the
kernel's peak resident size of the process (VmHWM, what getrusage reports less the mark
a process inherits from before its exec: a pytest worker's own size), reset after a
warm-up run (numba's compilations)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# One configuration (bfloat16, forward and gradients, one sample, no attribution) of a
# chain of ``nodes`` elementwise nodes (tanh, exp, tanh, ...) on 2**17 elements; the spill
# policy's room set to nothing, so that every array of a MiB or more is stored as it is
# made; the local errors one node at a time (LOCAL_ELEMENTS: what one node reads and
# makes).  Prints the growth of the peak resident size over the run, in KiB.
RUN = textwrap.dedent("""
    import sys
    import numpy as np
    from roundoff_coverage import routes
    from roundoff_coverage.engine import model, spill
    from roundoff_coverage.engine.samples import sample_inputs
    from roundoff_coverage.routes import ports

    def status(key):
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))

    def run(nodes, n):
        g = routes.Graph(x=ports.value((n,)))
        h = g.input("x")
        for k in range(nodes):
            h = g.apply(routes.op("exp" if k % 2 else "tanh", shape=(n,)), h, name=f"n{k}")
        g.output(h)
        g.example_inputs = [np.random.default_rng(0).uniform(-2, 2, n)]
        xs = sample_inputs(g, 1, 0)
        return model.measure(g, model.Config("bfloat16", "nearest_even", "strict"), xs, 0,
                             ("forward", "gradient"), attribution="none")[0]

    spill.SPILL_SHARE = 1 << 62
    run(2, 64)                                   # the compilations and imports
    nodes, n = int(sys.argv[1]), 1 << 17
    model.LOCAL_ELEMENTS = 2 * n
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")                        # the peak resident size starts again
    except OSError:
        sys.exit("no reset of the peak resident size here")
    before = status("VmRSS")
    rows = run(nodes, n)
    assert sum(r["status"] == "ok" for r in rows) >= 4 * nodes, rows
    print(status("VmHWM") - before)
""")


def _growth(nodes: int) -> int:
    proc = subprocess.run([sys.executable, "-c", RUN, str(nodes)], capture_output=True,
                          text=True, timeout=600)
    if "no reset of the peak resident size" in proc.stderr:
        pytest.skip("this kernel lets no process reset its peak resident size")
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_a_chain_of_ten_nodes_peaks_near_one_node_alone():
    # Measured at 2**17 elements: one node 42 MiB, ten nodes 41 MiB; with the traces held
    # in memory (the spill's room left at its default) ten nodes took 105 MiB.  (At 2**18,
    # twice the time: 84, 87, twenty nodes 88, and 211 MiB in memory.)
    one, ten = _growth(1), _growth(10)
    assert one > 20 << 10, one                    # the node's own work is measured at all
    assert ten < 1.5 * one, (one, ten)

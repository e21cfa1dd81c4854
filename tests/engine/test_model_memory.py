"""A model run's memory is bounded by its largest node, not by its graph (issue "Models at
scale"): where the traces go to the spill file as they are made (engine/spill.py, as on a
machine whose memory they exceed), the peak resident size of a run of a chain of ten
nodes stays near that of one of its nodes alone; measured with getrusage in fresh
processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# One configuration (bfloat16, forward and gradients, one sample, no attribution) of a
# chain of ``nodes`` elementwise nodes (tanh, exp, tanh, ...) on 2**18 elements; the spill
# policy's room set to nothing, so that every array of a MiB or more is stored as it is
# made; the local errors one node at a time (LOCAL_ELEMENTS: what one node reads and
# makes).  Prints the growth of the peak resident size over the run, in KiB.
RUN = textwrap.dedent("""
    import resource, sys
    import numpy as np
    from roundoff_coverage import routes
    from roundoff_coverage.engine import model, spill
    from roundoff_coverage.engine.samples import sample_inputs
    from roundoff_coverage.routes import ports

    nodes, n = int(sys.argv[1]), 1 << 18
    spill.SPILL_SHARE = 1 << 62
    model.LOCAL_ELEMENTS = 2 * n
    g = routes.Graph(x=ports.value((n,)))
    h = g.input("x")
    for k in range(nodes):
        h = g.apply(routes.op("exp" if k % 2 else "tanh", shape=(n,)), h, name=f"n{k}")
    g.output(h)
    g.example_inputs = [np.random.default_rng(0).uniform(-2, 2, n)]
    xs = sample_inputs(g, 1, 0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows, _, _ = model.measure(g, model.Config("bfloat16", "nearest_even", "strict"), xs, 0,
                               ("forward", "gradient"), attribution="none")
    assert sum(r["status"] == "ok" for r in rows) >= 4 * nodes, rows
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
""")


def _growth(nodes: int) -> int:
    proc = subprocess.run([sys.executable, "-c", RUN, str(nodes)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


@pytest.mark.slow
def test_a_chain_of_ten_nodes_peaks_near_one_node_alone():
    # Measured: one node 87 MiB, ten nodes 93 MiB; with the traces held in memory (the
    # spill's room left at its default) ten nodes took 211 MiB, 2.4 times one node.
    one, ten = _growth(1), _growth(10)
    assert one > 40 << 10, one                    # the node's own work is measured at all
    assert ten < 1.5 * one, (one, ten)

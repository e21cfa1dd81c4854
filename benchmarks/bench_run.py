"""Time the default coverage run and its phases, against native numpy on the same tasks.

    python benchmarks/bench_run.py [--jobs N] [--ops LIST] [--formats LIST] [--samples N]

Runs ``roundoff-coverage run``'s default selection (all operators; routes forward, tangent,
gradient; formats bfloat16, binary16, float8_e4m3fn, float8_e5m2, binary32; nearest_even;
policy strict; implementation emulated) through ``engine.runner.run`` into a temporary
folder, and prints the wall time, the peak memory of the parent and one worker, and the
seconds per phase (sampling, evaluation, reference, measurement; summed over workers).

The named alternative: the same tasks evaluated under ``native`` (numpy, ml_dtypes for
bfloat16 and float8) in one process, evaluation phase only.  The ratio says how many times
the whole measured run costs what numpy alone spends computing the same routes on the same
inputs (the inputs do not depend on the implementation: evaluate.py seeds them from the
operator, attributes and format only).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

from roundoff_coverage import routes
from roundoff_coverage.engine import evaluate, implementations, runner


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ops", help="comma-separated operators (default: all)")
    ap.add_argument("--formats", help="comma-separated formats (default: the run's five)")
    ap.add_argument("--samples", type=int, default=runner.DEFAULT_DRAWS)
    ap.add_argument("--skip-native", action="store_true", help="only the default run")
    args = ap.parse_args(argv)
    sel = runner.Selection(ops=tuple(args.ops.split(",")) if args.ops else routes.names(),
                           formats=tuple(args.formats.split(",")) if args.formats
                           else runner.DEFAULT_FORMATS, draws=args.samples)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = runner.run(sel, os.path.join(tmp, "coverage.json"), jobs=args.jobs,
                         progress=False)
        wall = time.perf_counter() - t0
    core = sum(out.phases.values())
    print(f"default run: {out.total} tasks, {len(out.rows)} rows, {args.jobs} jobs, "
          f"wall {wall:.1f} s, {core:.1f} s of task time")
    for phase, seconds in out.phases.items():
        print(f"  {phase:<12} {seconds:8.1f} s  {100 * seconds / core:5.1f}%")
    kib_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak resident memory: parent {kib_self / 2**20:.2f} GiB, largest worker "
          f"{out.peak_kib / 2**20:.2f} GiB")
    if args.skip_native:
        return 0
    import numba
    numba.set_num_threads(1)
    native = runner.Selection(ops=sel.ops, formats=sel.formats, draws=sel.draws,
                              implementations=("native",))
    evaluation, tasks = 0.0, 0
    for task in runner.plan(native):
        seconds = _native_evaluation(task)
        if seconds is not None:
            evaluation += seconds
            tasks += 1
    print(f"native numpy, same tasks and inputs: evaluation {evaluation:.1f} s over {tasks} "
          f"tasks with a native rule (one process)")
    if evaluation > 0:
        print(f"ratio: default run task time / native evaluation = {core / evaluation:.0f}x; "
              f"emulated evaluation / native evaluation = "
              f"{out.phases['evaluation'] / evaluation:.1f}x")
    return 0


def _native_evaluation(task):
    """Seconds numpy spends on the routes of ``task`` (inputs drawn as the run draws them);
    None where numpy has no rule or dtype."""
    from roundoff_coverage import formats
    o = task.build()
    fmt = formats.get(task.format)
    wanted = [r for r in task.routes if evaluate.route_ports(o, r)
              and any(p.differentiable for p in o.inputs) or r == "forward"]
    impl = implementations.of(task, o, fmt)
    if impl.problems(wanted):
        return None
    d = impl.select(evaluate.draw(task, o, fmt))
    t0 = time.perf_counter()
    impl.evaluate(d, wanted)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())

"""``roundoff-coverage gate --baseline BASELINE CURRENT``: the precision gate, and the
gate that ``run --gate`` applies to its fresh results."""

from __future__ import annotations

from ..gate import GateError, gate, read
from .common import EXIT_FAILED, EXIT_OK, UsageError, path_arg


def add(sub, shared):
    p = sub.add_parser("gate", help="compare results with a baseline; exit 1 on a precision "
                       "regression",
                       description="Compare the results file CURRENT with the results file "
                                   "BASELINE route by route (operator, attributes, route, "
                                   "port, format, mode, policy, implementation).  Exit 1 when "
                                   "an error metric grew beyond the tolerance, a bound "
                                   "violation or exceptional outcome is new, a measured route "
                                   "is missing, failed or lost its rule, or the files were "
                                   "made with different seeds or sample counts; exit 2 for a "
                                   "file that is not a results file.  Improvements are listed "
                                   "and pass.")
    p.add_argument("current", metavar="CURRENT", type=path_arg, help="the new results file")
    p.add_argument("--baseline", metavar="BASELINE", type=path_arg, required=True,
                   help="the baseline results file")
    p.add_argument("--metric", choices=("max", "p99"), default="max",
                   help="error metric compared: max_ulp (default) or p99_ulp")
    p.add_argument("--tolerances", metavar="TOML", type=path_arg,
                   help="allowed growth in ulps: default = X, [formats] NAME = X, [families] "
                        "NAME = X (a route gets the largest matching entry; default 0.01)")
    p.add_argument("--markdown", metavar="FILE", type=path_arg,
                   help="also write a Markdown report (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--junit", metavar="FILE", type=path_arg,
                   help="also write a JUnit XML report (one test case per route)")
    p.add_argument("--update", action="store_true",
                   help="write CURRENT as the new BASELINE (sorted, stable formatting) after "
                        "reporting; exit 0")
    p.add_argument("--allow-different-settings", action="store_true",
                   help="compare files made with different seeds, sample counts or "
                        "exhaustive settings instead of failing")
    p.set_defaults(handler=cmd_gate)


def cmd_gate(args) -> int:
    """``gate --baseline BASELINE CURRENT``: exit 0 pass (or --update), 1 regression, 2 a
    file or option the gate cannot use."""
    try:
        cmp, report = gate(args.baseline, args.current, args.metric, args.tolerances,
                           args.allow_different_settings, args.markdown, args.junit,
                           args.update)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    print(report)
    return EXIT_OK if args.update or cmp is None or not cmp.failed else EXIT_FAILED


def check_gate_baseline(baseline, out) -> None:
    """Before ``run --gate``: the baseline is a readable results file and not the file the
    run is about to overwrite (so a bad path fails in a second, not after the run)."""
    import os

    if os.path.realpath(baseline) == os.path.realpath(out):
        raise UsageError(f"--gate {baseline}: the run would overwrite its own baseline; give "
                         f"--out another path")
    try:
        read(baseline, "baseline")
    except GateError as exc:
        raise UsageError(str(exc)) from None


def gate_after_run(baseline, out) -> int:
    """``run --gate``: the gate of the fresh results ``out`` against ``baseline``."""
    try:
        cmp, report = gate(baseline, out)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    print(report)
    return EXIT_FAILED if cmp.failed else EXIT_OK

"""``roundoff-coverage measure TARGET``: measure a function this project did not write
(reports/measure.py) and write its results file."""

from __future__ import annotations

import sys

from roundoff_coverage import formats

from .common import (EXIT_INTERRUPTED, EXIT_OK, PROG, SEED_MAX, SEED_WHY, UsageError,
                     add_executor, check_jobs, executor_options, in_range, path_arg,
                     user_formats, writable)


def add(sub, shared):
    p = sub.add_parser("measure", parents=[shared],
                       help="measure a function this project did not write (numpy, libm, "
                            "numba, torch) against correctly rounded exact values",
                       description="Feed TARGET the values of a format -- all of them with "
                                   "--exhaustive, else random bit patterns -- and compare its "
                                   "outputs with the correctly rounded exact value of the "
                                   "reference function: the largest ulp error with its input, "
                                   "the count of results that are not correctly rounded, the "
                                   "distribution and the exceptional outcomes.  Writes a "
                                   "results file (the coverage run's schema).")
    p.add_argument("target", metavar="TARGET",
                   help="numpy.NAME (a ufunc), LIBRARY:FUNCTION (libm:expf, ./libf.so:f), "
                        "package.module:function (Python or numba), torch.NAME")
    p.add_argument("--format", default="binary32", metavar="FORMAT",
                   help="the inputs' and outputs' format (default binary32)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--exhaustive", action="store_true",
                     help="every bit pattern (formats of at most 16 bits, and unary binary32)")
    how.add_argument("--samples", type=int, metavar="N",
                     help="N random bit patterns per argument (default 1000000)")
    p.add_argument("--reference", metavar="NAME",
                   help="the exact function (default: from the target's name)")
    p.add_argument("--arity", type=int, choices=(1, 2), help="arguments of a C function")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the samples")
    p.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: all cores)")
    add_executor(p)
    p.add_argument("--out", metavar="PATH", type=path_arg,
                   help="results file (default results/measure.json)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted measurement from its checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    p.set_defaults(handler=cmd_measure)


def cmd_measure(args) -> int:
    """``measure``: exit 0 when measured, 130 when interrupted (checkpoint kept)."""
    from .. import measure, orchestrate
    if "\0" in args.target or not args.target.strip():
        raise UsageError(f"TARGET {args.target!r} is not a target: give numpy.NAME, "
                         f"LIBRARY:FUNCTION, package.module:function or torch.NAME")
    fmt = formats.get(args.format, known=user_formats(args))
    in_range("--seed", args.seed, 0, SEED_MAX, SEED_WHY)
    samples = None if args.exhaustive else (1_000_000 if args.samples is None else args.samples)
    out = writable(args.out or "results/measure.json", "output file")
    executor, scheduler = executor_options(args)
    check_jobs(args.jobs, executor, scheduler)
    try:
        outcome = measure.measure(args.target, fmt, samples=samples, seed=args.seed,
                                  reference=args.reference, arity=args.arity, out=out,
                                  jobs=args.jobs, resume=args.resume, progress=not args.quiet,
                                  executor=executor, scheduler=scheduler)
    except measure.MeasureError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:              # a checkpoint of another measurement; Dask
        raise UsageError(str(exc)) from None
    if outcome.interrupted:
        print(f"{PROG}: interrupted: {outcome.resumed + outcome.ran} of {outcome.chunks} "
              f"chunks kept in {orchestrate.checkpoint_path(out)}; rerun with --resume",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.quiet:
        print(measure.text(outcome))
        print(f"results: {out}")
    return EXIT_OK

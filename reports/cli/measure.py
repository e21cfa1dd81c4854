"""``roundoff-coverage measure TARGET``: measure a function this project did not write
(engine/measure.py) and write its results file; with ``--scheme``, a quantizer against a
scaled format's definition (engine/quantizers.py).

One subcommand for both: what is measured is a function someone else wrote, the target is
named the same way, and the results file is the same schema; the options that only make
sense for one kind are refused, in one line, for the other."""

from __future__ import annotations

from roundoff_coverage import formats

from ...engine import measure, quantizers
from .common import (EXIT_OK, SEED_MAX, SEED_WHY, UsageError, add_units, check_jobs,
                     executor_options, in_range, interrupted, path_arg, text_table,
                     user_formats, writable)

# engine/quantizers.py's RETURNS and TIMEOUT, written here so that building the parser does
# not import the measuring machinery (numba); a test holds them equal.
RETURNS = ("auto", "pair", "dequantized")
TIMEOUT = 120.0


def add(sub, shared):
    p = sub.add_parser("measure", parents=[shared],
                       help="measure a function this project did not write (numpy, libm, "
                            "numba, torch) against correctly rounded exact values, or a "
                            "quantizer against a scaled format's definition (--scheme)",
                       description="Feed TARGET the values of a format -- all of them with "
                                   "--exhaustive, else random bit patterns -- and compare its "
                                   "outputs with the correctly rounded exact value of the "
                                   "reference function: the largest ulp error with its input, "
                                   "the count of results that are not correctly rounded, the "
                                   "distribution and the exceptional outcomes.  Writes a "
                                   "results file (the coverage run's schema).  With --scheme "
                                   "SCHEME, TARGET is a quantizer (a Python function from a "
                                   "float32 array to (elements, scales), (elements, scales, "
                                   "tensor_scale) or the dequantized values) compared with the "
                                   "scheme's exact definition on random and adversarial tensors "
                                   "(a huge value per block, zero blocks, Inf/NaN, values at the "
                                   "element max, rounding ties, subnormals, a partial last "
                                   "block): the scales, elements and dequantized values that "
                                   "differ, the worst difference in ulps of the element format "
                                   "at the block's scale, and the first differing blocks; "
                                   "a named quantizer runs in a worker process of its own, "
                                   "killed past --timeout.  The options under 'a quantizer' "
                                   "apply with --scheme only; --exhaustive, --reference, "
                                   "--arity, --jobs, --executor, --scheduler and --resume "
                                   "without it only.")
    p.add_argument("target", metavar="TARGET",
                   help="numpy.NAME (a ufunc), LIBRARY:FUNCTION (libm:expf, ./libf.so:f), "
                        "package.module:function or file.py:function (Python or numba), "
                        "torch.NAME; with --scheme, a quantizer: package.module:function or "
                        "file.py:function")
    p.add_argument("--format", default="binary32", metavar="FORMAT",
                   help="the inputs' and outputs' format (default binary32); with --scheme, "
                        "the input arrays' dtype: binary32 or binary64")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--exhaustive", action="store_true",
                     help="every bit pattern (formats of at most 16 bits, and unary binary32)")
    how.add_argument("--samples", type=int, metavar="N",
                     help="N random bit patterns per argument (default 1000000); with "
                          "--scheme, N random tensors of each kind, normal and log-uniform "
                          "(default 4)")
    p.add_argument("--reference", metavar="NAME",
                   help="the exact function (default: from the target's name)")
    p.add_argument("--arity", type=int, choices=(1, 2), help="arguments of a C function")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the samples")
    p.add_argument("--out", metavar="PATH", type=path_arg,
                   help="results file (default results/measure.json)")
    add_units(p, resume="continue an interrupted measurement from its checkpoint")
    _add_quantizer(p.add_argument_group("a quantizer (--scheme)"))
    p.set_defaults(handler=cmd_measure)


def _add_quantizer(q):
    """The options of a quantizer measurement."""
    q.add_argument("--scheme", metavar="SCHEME",
                   help="measure TARGET as a quantizer into this scaled format (mxfp8_e4m3, "
                        "nvfp4, fp8_e4m3_block128, mxfp8_e4m3:rceil...; roundoff-coverage "
                        "formats lists them)")
    q.add_argument("--returns", choices=RETURNS, default="auto",
                   help="what TARGET returns: pair (elements, scales[, tensor_scale]), "
                        "dequantized (one array), or auto: a tuple is a pair (default)")
    q.add_argument("--shape", metavar="N,N", help="the input tensors' shape (default: a few "
                                                 "blocks per row, the last one partial)")
    q.add_argument("--axis", metavar="N", default="-1",
                   help="the block axis (default -1; N,N for 2-D blocks)")
    q.add_argument("--history", metavar="X,X",
                   help="the amax history of a delayed scheme (fp8_e4m3_tensor:delayed)")
    q.add_argument("--timeout", type=float, default=TIMEOUT, metavar="S",
                   help=f"seconds a call of TARGET may take before it is killed (default "
                        f"{TIMEOUT:g})")


def cmd_measure(args) -> int:
    """``measure``: exit 0 when measured, 130 when interrupted (checkpoint kept)."""
    if args.scheme is not None:
        return cmd_quantizer(args)
    given = [o for o, v in (("--returns", args.returns != "auto"), ("--shape", args.shape),
                            ("--axis", args.axis != "-1"), ("--history", args.history),
                            ("--timeout", args.timeout != TIMEOUT)) if v]
    if given:
        raise UsageError(f"{given[0]} is an option of a quantizer measurement: give --scheme")
    if "\0" in args.target or not args.target.strip():
        raise UsageError(f"TARGET {args.target!r} is not a target: give numpy.NAME, "
                         f"LIBRARY:FUNCTION, package.module:function or torch.NAME")
    fmt = formats.get(args.format, known=user_formats(args))
    in_range("--seed", args.seed, 0, SEED_MAX, SEED_WHY)
    samples = None if args.exhaustive else (1_000_000 if args.samples is None else args.samples)
    out = writable(args.out or "results/measure.json", "output file",
                   "the measurement keeps its checkpoint beside its results file")
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
        return interrupted(outcome, out, "chunks")
    if not args.quiet:
        print(measure.text(outcome))
        print(f"results: {out}")
    return EXIT_OK


# ----- a quantizer (--scheme) --------------------------------------------------------------

# measure's options that a quantizer measurement has no use for: (option, attribute).
_FUNCTION_ONLY = (("--exhaustive", "exhaustive"), ("--reference", "reference"),
                  ("--arity", "arity"), ("--jobs", "jobs"), ("--executor", "executor"),
                  ("--scheduler", "scheduler"), ("--resume", "resume"))
_DTYPES = {"binary32": "float32", "binary64": "float64"}


def cmd_quantizer(args) -> int:
    """``measure --scheme``: exit 0 when measured, whatever differs (the counts are the
    result); 2 for a bad request or a target that raises, hangs, dies or returns something
    unreadable."""
    for option, attr in _FUNCTION_ONLY:
        if getattr(args, attr) not in (None, False):
            raise UsageError(f"{option} is not an option of a quantizer measurement "
                             f"(--scheme)")
    scheme = formats.get(args.scheme, known=user_formats(args))
    fmt = formats.get(args.format)
    dtype = next((d for n, d in _DTYPES.items() if formats.CATALOG[n] == fmt), None)
    if dtype is None:
        raise UsageError(f"--format {args.format}: a quantizer's inputs are binary32 or "
                         f"binary64 arrays")
    in_range("--seed", args.seed, 0, SEED_MAX, SEED_WHY)
    shape = _numbers("--shape", args.shape, int) if args.shape else None
    axis = _numbers("--axis", args.axis, int)
    history = _numbers("--history", args.history, float) if args.history else None
    out = writable(args.out or "results/measure.json", "output file")
    try:
        outcome = quantizers.measure_quantizer(
            args.target, scheme, shape=shape, samples=4 if args.samples is None else
            args.samples, seed=args.seed, axis=axis[0] if len(axis) == 1 else axis,
            dtype=dtype, returns=args.returns, history=history, timeout=args.timeout,
            out=out)
    except quantizers.MeasureError as exc:
        raise UsageError(str(exc)) from None
    if not args.quiet:
        print(quantizer_text(outcome.row, outcome.wall))
        print(f"results: {out}")
    return EXIT_OK


def _numbers(option, text, kind) -> tuple:
    try:
        return tuple(kind(t) for t in text.split(","))
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise UsageError(f"{option} must be comma-separated {what} (got {text!r})") from None


def quantizer_text(row: dict, wall: float) -> str:
    """The terminal summary of a quantizer's results row: counts by case, the first
    differing blocks, the worst difference."""
    d = row["quantizer"]
    pair = d["returns"] == "pair"

    def count(c, key):
        return str(c[key]) if pair or key == "values_differ" else "-"

    lines = [f"{row['op']} against {row['format']} ({d['dtype']} inputs, returns "
             f"{d['returns']}): {sum(c['tensors'] for c in d['cases'].values())} tensors, "
             f"{row['samples']} elements, {wall:.1f} s"]
    table = [[name, str(c["tensors"]), str(c["elements"]), count(c, "scales_differ"),
              count(c, "elements_differ"), count(c, "values_differ"),
              "%.4g" % float(c["max_ulp"]), "%.4g" % float(c["max_abs"])]
             for name, c in d["cases"].items()]
    table.append(["all", str(sum(int(r[1]) for r in table)), str(row["samples"]),
                  str(row["scales_differ"]) if pair else "-",
                  str(row["elements_differ"]) if pair else "-", str(row["values_differ"]),
                  "%.4g" % float(row["max_ulp"]), "%.4g" % float(d["max_abs"])])
    lines.append(text_table(["case", "tensors", "elements", "scales differ",
                             "elements differ", "values differ", "max ulp", "max abs"],
                            table, numeric=range(1, 8)))
    if pair:
        lines.append(f"elements that differ where the scales agree: "
                     f"{d['elements_differ_same_scale']}; signs of zero that differ: "
                     f"{d['zero_signs_differ']}")
    if d["nonfinite_differ"]:
        lines.append(f"values that are not finite where the definition's are, or the "
                     f"reverse: {d['nonfinite_differ']}")
    if d["first"]:
        lines.append("first differing blocks (ulp: of the element format at the block's "
                     "scale):")
        lines += [f"  {_case_text(r)}" for r in d["first"]]
    if row["worst"] is not None:
        lines.append(f"worst: {_case_text(row['worst'])}")
    return "\n".join(lines)


def _case_text(r: dict) -> str:
    want, got = r["want"], r["got"]
    if "element" in got:
        shown = (f"want {want['element']!r} * {want['scale']!r}, got {got['element']!r} * "
                 f"{got['scale']!r}")
    else:
        shown = f"want {want['value']!r}, got {got['value']!r}"
    index = ", ".join(map(str, r["index"]))
    return (f"{r['case']} #{r['tensor']} block {r['block']} ({', '.join(r['differs'])}): "
            f"x[{index}] = {r['x']!r}: {shown} ({r['ulp']} ulp)")

"""``roundoff-coverage run``: the coverage run (engine/runner.py) from the command line
or a ``--config`` TOML file, then optionally its HTML report and its gate."""

from __future__ import annotations

import sys

from roundoff_coverage import formats, routes
from roundoff_coverage.numerics import policy
from roundoff_coverage.routes.registry import FAMILIES

from ...engine import evaluate, implementations, runner
from .. import summary, tomlfile
from .common import (EXIT_OK, PROG, UsageError, add_modes_routes, add_seed_out, add_units,
                     check_jobs, empty_list, executor_options, interrupted, modes_of,
                     name_list, path_arg, routes_of, seed_of, user_formats, writable)
from .gate import check_gate_baseline, gate_after_run
from .report import check_report_dir, write_report

RUN_LISTS = ("ops", "families", "formats", "modes", "routes", "policies", "implementations")
RUN_KEYS = RUN_LISTS + ("samples", "seed", "exhaustive", "jobs", "out", "csv", "gate",
                        "executor", "scheduler", "whole_range", "domain_bounds")


def add(sub, shared):
    p = sub.add_parser("run", parents=[shared], help="the coverage run: every route of every "
                       "operator under every format, measured against exact values",
                       description="Measure the forward, tangent and gradient routes of the "
                                   "selected operators under each format, mode, policy and "
                                   "implementation against the mpmath reference; write the "
                                   "results file (JSON, roundoff-coverage/1) and print a "
                                   "summary.  Lists are comma-separated.")
    p.add_argument("--ops", metavar="LIST", help="operators (default: all)")
    p.add_argument("--families", metavar="LIST", help="operator families (added to --ops)")
    p.add_argument("--formats", metavar="LIST",
                   help="formats (default: bfloat16,binary16,float8_e4m3fn,float8_e5m2,binary32); "
                        "scaled formats (mxfp8_e4m3, nvfp4, fp8_e4m3_tensor...) are storage "
                        "formats: inputs and outputs quantized, binary32 compute")
    add_modes_routes(p)
    p.add_argument("--policies", metavar="LIST", help="accumulation policy presets (default: "
                   "strict); recipes on a scaled format: scaled_recipe (the products' operands "
                   "quantized, binary32 accumulation, bfloat16 storage), fp8_recipe (the same "
                   "with E4M3 forward and E5M2 gradient operands)")
    p.add_argument("--implementations", metavar="LIST",
                   help="emulated, native, cuda (the operators' CUDA kernels on a GPU, "
                        "or in numba's simulator under NUMBA_ENABLE_CUDASIM=1), torch and/or "
                        "torch_compile (PyTorch's kernels, eager and compiled; the [torch] "
                        "extra); default: emulated")
    p.add_argument("--samples", metavar="N", type=int,
                   help="sampler draws per sample kind and task (default: 3)")
    p.add_argument("--exhaustive", action="store_true", default=None,
                   help="every finite input for elementwise unary operators in formats of at "
                        "most 16 bits")
    p.add_argument("--domain-bounds", action="store_true", default=None,
                   help="add to each emulated forward row the bound of its roundoff over the "
                        "box of its ordinary draws (routes.bounds.domain; the row's domain_bound "
                        "and box)")
    add_units(p)
    add_seed_out(p, "results/coverage.json")
    p.add_argument("--csv", metavar="PATH", type=path_arg, help="also write the rows as CSV")
    p.add_argument("--config", metavar="TOML", type=path_arg,
                   help="a TOML file with any of these options (keys: "
                        + ", ".join(RUN_KEYS) + "); the command line wins")
    p.add_argument("--whole-range", action="store_true", default=None,
                   help="the summary ranks the worst routes by their errors over the whole "
                        "range (every draw: edges, special values, magnitudes too) and says "
                        "what overflowed or underflowed inside; by default it ranks them on "
                        "the ordinary domain (draws of sample kind ordinary)")
    p.add_argument("--gate", metavar="BASELINE", type=path_arg,
                   help="then gate the new results against the baseline results file "
                        "BASELINE (as 'gate --baseline BASELINE OUT' does, default "
                        "settings); exit 1 on a precision regression")
    p.add_argument("--html", metavar="DIR", type=path_arg,
                   help="then write the HTML report of the new results into DIR (as "
                        "'report OUT --out DIR' does)")
    p.set_defaults(handler=cmd_run)


def read_config(path) -> dict:
    """The options of a --config TOML file (top level, or a [run] table)."""
    data = tomlfile.read(path, "config file")
    if isinstance(data.get("run"), dict) and len(data) == 1:
        data = data["run"]
    import difflib
    for key, value in data.items():
        if key not in RUN_KEYS:
            close = difflib.get_close_matches(key, RUN_KEYS, n=3)
            hint = f" (close matches: {', '.join(close)})" if close else ""
            raise UsageError(f"config file {path}: unknown key {key!r}{hint}")
        if key in RUN_LISTS:
            if isinstance(value, str):
                value = [v for v in value.split(",")]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UsageError(f"config file {path}: {key} must be a list of names")
            if not any(v.strip() for v in value):
                raise UsageError(f"config file {path}: {key} is an empty list (give one or "
                                 f"more names; leave the key out for the default)")
            data[key] = ",".join(value)
        elif key in ("samples", "seed", "jobs"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"config file {path}: {key} must be an integer")
        elif key in ("exhaustive", "whole_range", "domain_bounds") and \
                not isinstance(value, bool):
            raise UsageError(f"config file {path}: {key} must be true or false")
        elif key in ("out", "csv", "gate") and (not isinstance(value, str)
                                                or not value.strip()):
            raise UsageError(f"config file {path}: {key} must be a path (got {value!r})")
        elif key in ("executor", "scheduler") and not isinstance(value, str):
            raise UsageError(f"config file {path}: {key} must be a name or an address")
    return data


def _selection(args, user):
    """The runner.Selection of the parsed options (config values filled in)."""

    ops = name_list(args.ops, "operator", routes.names(), (), "--ops") \
        if args.ops is not None else ()
    fams = name_list(args.families, "family", FAMILIES, (), "--families") \
        if args.families is not None else ()
    chosen = set(ops) | {n for n in routes.names() if routes.declaration(n).family in fams}
    ops = tuple(n for n in routes.names() if n in chosen) if (ops or fams) else routes.names()
    if not ops:
        raise UsageError(f"no registered operator in families {', '.join(fams)}")
    fmts, schemes = [], {}
    listed = runner.DEFAULT_FORMATS if args.formats is None else args.formats.split(",")
    for name in listed:
        if name.strip():
            fmt = formats.get(name.strip(), known=user)
            if isinstance(fmt, formats.ScaledFormat):
                # A scaled format runs as a storage format (engine/task.py) under its label
                # (options that differ from its base's: mxfp8_e4m3:rceil); a user-defined
                # one travels with the tasks.
                if fmt.label not in fmts:
                    fmts.append(fmt.label)
                if fmt.name in user or fmt.name not in formats.SCALED:
                    schemes[fmt.label] = fmt
                continue
            if not fmt.fits_binary64:
                raise UsageError(f"format {fmt.label}: the coverage run measures formats that "
                                 f"fit binary64")
            # A user format (--formats-file) runs under its compact spec, which names it
            # completely: worker processes and readers of the results need no file.
            label = fmt.name if fmt.name in formats.CATALOG else \
                fmt.spec if name.strip() in user else name.strip()
            if label not in fmts:
                fmts.append(label)
    if not fmts:
        raise UsageError(empty_list("--formats", "format"))
    samples = runner.DEFAULT_DRAWS if args.samples is None else args.samples
    if samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})")
    seed = seed_of(args)
    return runner.Selection(
        ops=ops, formats=tuple(fmts),
        modes=modes_of(args), routes=routes_of(args, evaluate.ROUTES),
        policies=policy_names(args.policies),
        implementations=name_list(args.implementations, "implementation",
                                  implementations.names(), ("emulated",),
                                  "--implementations"),
        draws=samples, seed=seed,
        exhaustive=bool(args.exhaustive), schemes=tuple(schemes.items()),
        domain_bounds=bool(args.domain_bounds))


def cmd_run(args) -> int:
    """``run``: the coverage run; exit 0 when every task ran (error rows are data), 130
    when interrupted (the checkpoint is kept for --resume); with --gate, 1 when the gate
    finds a regression against the baseline."""
    if args.config:
        for key, value in read_config(args.config).items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
    sel = _selection(args, user_formats(args))
    out = writable(args.out or "results/coverage.json", "output file",
                   "the run keeps its checkpoint beside its results file")
    csv = writable(args.csv, "CSV file") if args.csv else None
    if args.gate:
        check_gate_baseline(args.gate, out)
    if args.html:
        check_report_dir(args.html)
    executor, scheduler = executor_options(args)
    check_jobs(args.jobs, executor, scheduler)
    _available(sel.implementations)
    if sel.exhaustive:
        _warn_unenumerated(sel)
    try:
        outcome = runner.run(sel, out, jobs=args.jobs, resume=args.resume, csv=csv,
                             progress=not args.quiet, executor=executor, scheduler=scheduler)
    except ValueError as exc:              # a checkpoint of another run; Dask cannot run
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None
    if outcome.interrupted:
        return interrupted(outcome, out)
    if not args.quiet:
        print(summary.text(outcome.rows, outcome.phases, outcome.wall,
                           "whole" if args.whole_range else "ordinary"))
        note = f" ({outcome.resumed} resumed from the checkpoint)" if outcome.resumed else ""
        print(f"peak memory of a worker: {outcome.peak_kib / 2**20:.2f} GiB")
        print(f"{outcome.total} tasks, {len(outcome.rows)} rows{note}: {out}"
              + (f", {csv}" if csv else ""))
    if args.html:
        write_report(out, args.html, None, args.quiet)
    if args.gate:
        return gate_after_run(args.gate, out)
    return EXIT_OK


def _warn_unenumerated(sel) -> None:
    """A warning on stderr when ``--exhaustive`` enumerates nothing of the selection: no
    elementwise unary operator in a format of at most EXHAUSTIVE_MAX_BITS bits (the rows then
    say ``exhaustive: false``: their inputs were sampled)."""

    known = dict(sel.schemes)
    fmts = [f for f in (known.get(n) or formats.get(n) for n in sel.formats)
            if not isinstance(f, formats.ScaledFormat)]      # scaled: sampled, never enumerated
    small = [f for f in fmts if f.bits <= evaluate.EXHAUSTIVE_MAX_BITS]
    for name in sel.ops if small else ():
        decl = routes.declaration(name)
        if decl.family not in evaluate.EXHAUSTIVE_FAMILIES or not decl.examples:
            continue
        try:
            o = routes.op(name, **dict(next(iter(decl.examples.values()))))
        except Exception:                                      # noqa: BLE001 (no instance)
            continue
        if any(evaluate.exhaustible(o, f) for f in small):
            return
    why = (f"no format of at most {evaluate.EXHAUSTIVE_MAX_BITS} bits" if not small else
           "no elementwise operator with one value input")
    print(f"{PROG}: warning: --exhaustive enumerates nothing here ({why}); every row is "
          f"sampled and says exhaustive: false", file=sys.stderr)


def _available(names) -> None:
    """UsageError naming the first implementation asked for that cannot run on this machine
    at all (``cuda`` without a GPU or numba's CUDA simulator): the run stops before any work
    instead of writing rows that all say so."""
    for name in names:
        why = implementations.named(name).unavailable()
        if why is not None:
            raise UsageError(f"--implementations {name}: {why}")


class _PolicyNames:
    """The policy names preset() takes: the presets and the parametrized ones (numerics.policy:
    fixed_point:14, promote:128...); listed for close matches as the presets and templates."""

    def __contains__(self, name):
        return policy.is_name(name)

    def __iter__(self):
        return iter(policy.PRESETS + policy.PARAMETRIZED)


def policy_names(text):
    """--policies: the names checked; a parametrized name with a bad parameter says why."""
    names = name_list(text, "policy", _PolicyNames(), ("strict",), "--policies") \
        if text is None or all(":" not in n for n in text.split(",")) else \
        tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    for n in names:
        try:
            policy.preset(n, "bfloat16")
        except ValueError as exc:
            raise UsageError(f"--policies: {exc}") from None
    if not names:
        raise UsageError("--policies: give at least one policy")
    return names

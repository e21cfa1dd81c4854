"""The ``roundoff-coverage`` command line: one parser, one subcommand function each.

``main(argv) -> int`` returns the exit status of shared/ARCHITECTURE.md: 0 success, 1 a gate
or check failed, 2 bad usage or bad input, 130 interrupted.  User errors (``UsageError``,
``FormatError``, argparse's own) are turned into one line ``roundoff-coverage: error:
<reason>`` on stderr in exactly one place, ``main``; a subcommand only raises them.

A subcommand is a ``_add_<name>(subparsers, common)`` function that declares its arguments
and sets ``handler``; ``_SUBCOMMANDS`` lists them.  ``common`` is the parent parser of the
options every subcommand that names formats shares (``--formats-file``).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from fractions import Fraction

from roundoff_coverage import formats
from roundoff_coverage.formats import FormatError

PROG = "roundoff-coverage"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """A user error: bad arguments or bad input.  Its message is one line; exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError instead of printing usage and exiting,
    so ``main`` reports it like every other user error (subparsers inherit the class)."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit status.

    Every way out is one of the statuses above, never a traceback: a user error is one line
    and 2; Ctrl-C is one line and 130; output cut off by its reader (``| head``) ends
    quietly with 1 (the status the command would have had is unknown, so never a pass);
    anything else is a bug, reported in one line with 1 (the traceback too under
    ROUNDOFF_COVERAGE_TRACEBACK=1)."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        status = args.handler(args)
        sys.stdout.flush()                             # a closed pipe shows here, not at exit
        return status
    except (UsageError, FormatError) as exc:
        message = " ".join(str(exc).split())           # one line, whatever the source
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:                          # --help exits 0 from inside argparse
        return EXIT_OK if exc.code in (None, 0) else EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_FAILED
    except Exception as exc:                           # noqa: BLE001 (the last resort)
        return _internal_error(exc)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe is quiet."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):      # not a real file (a test's capture)
        pass


def _internal_error(exc) -> int:
    """One line for an exception no code path expected (a bug), the traceback before it
    only when ROUNDOFF_COVERAGE_TRACEBACK is set; exit status 1."""
    import os
    import traceback
    if os.environ.get("ROUNDOFF_COVERAGE_TRACEBACK", "") not in ("", "0"):
        traceback.print_exc()
    message = " ".join(str(exc).split())[:500]
    print(f"{PROG}: internal error: {type(exc).__name__}: {message} (a bug: please report it; "
          f"ROUNDOFF_COVERAGE_TRACEBACK=1 shows the traceback)", file=sys.stderr)
    return EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand of ``_SUBCOMMANDS`` under one parser."""
    parser = _Parser(prog=PROG, description="Roundoff and numerics analysis workbench.")
    common = _Parser(add_help=False)
    common.add_argument("--formats-file", metavar="PATH", type=_path,
                        help="TOML file of user formats ([formats.NAME] tables with exp_bits, "
                             "man_bits and optionally bias, encoding, saturate, "
                             "flush_subnormals)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=_Parser)
    for add in _SUBCOMMANDS:
        add(sub, common)
    return parser


def _path(text) -> str:
    """An argument that names a file or folder: not empty, no NUL character (the system
    refuses it); argparse reports the error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty path (give a file or folder name)")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a path (it holds a NUL character)")
    return text


def _user_formats(args) -> dict:
    """The formats of ``--formats-file`` (empty without it), by name."""
    path = getattr(args, "formats_file", None)
    if not path:
        return {}
    return formats.load_formats_file(path)


# ----- formats ---------------------------------------------------------------------------------

def _add_formats(sub, common):
    p = sub.add_parser("formats", parents=[common], help="list the formats, or show one",
                       description="Without NAME: every catalog format (and user format) as a "
                                   "table.  With NAME: one format's constants, their exact "
                                   "values and derivations, and its encoding.")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="catalog name, alias, compact spec (e5m10, e4m3fn, e4m3b11fnuz-sat) or "
                        "keywords (exp_bits=5,man_bits=2,encoding=fnuz)")
    p.set_defaults(handler=cmd_formats)


_LIST_COLUMNS = ("name", "spec", "bits", "exp_bits", "man_bits", "bias", "encoding", "precision",
                 "emin", "emax", "max_finite", "min_normal", "min_subnormal", "unit_roundoff",
                 "finite_count")


# Exact constants grow like 2**(2**(exp_bits-1)) (binary256, exp_bits 19, already spans
# 2**262143) and Python refuses str() of integers past 4300 digits: show formats up to these.
_MAX_EXP_BITS, _MAX_MAN_BITS = 22, 4096


def cmd_formats(args) -> int:
    """``formats [NAME]``: the table of every format, or one format in detail; exit 0."""
    user = _user_formats(args)
    for fmt in user.values():
        _check_displayable(fmt)
    if args.name is None:
        rows = [_list_row(fmt) for fmt in formats.CATALOG.values()]
        columns = _LIST_COLUMNS
        if user:                                       # mark each row's origin
            rows = [r + ["catalog"] for r in rows]
            rows += [_list_row(fmt) + ["user"] for fmt in user.values()]
            columns += ("source",)
        text = {"name", "spec", "encoding", "source"}
        print(_table(columns, rows, numeric={i for i, h in enumerate(columns) if h not in text}))
        if user:
            print(f"\nuser formats from {args.formats_file}: {', '.join(user)}")
        return EXIT_OK
    fmt = _check_displayable(formats.get(args.name, known=user))
    print("\n".join(_detail(fmt, _source(fmt, user, args.formats_file))))
    return EXIT_OK


def _check_displayable(fmt):
    """``fmt`` itself when its exact constants are small enough to print; else UsageError."""
    if fmt.exp_bits > _MAX_EXP_BITS or fmt.man_bits > _MAX_MAN_BITS:
        raise UsageError(f"format {fmt.label}: too wide to show exactly (exp_bits "
                         f"{fmt.exp_bits}, man_bits {fmt.man_bits}; at most {_MAX_EXP_BITS} "
                         f"and {_MAX_MAN_BITS})")
    return fmt


def _list_row(fmt) -> list[str]:
    """The cells of ``fmt`` under _LIST_COLUMNS."""
    c = {key: value for key, (value, _) in fmt.constants().items()}
    return [fmt.label, fmt.spec, str(fmt.bits), str(fmt.exp_bits), str(fmt.man_bits),
            str(fmt.bias), fmt.encoding,
            *(_number(c[k]) for k in ("precision", "emin", "emax", "max_finite", "min_normal",
                                      "min_subnormal", "unit_roundoff", "finite_count"))]


def _source(fmt, user, path) -> str:
    """Where ``fmt`` comes from: the user's file, the catalog (with aliases) or a spec."""
    if fmt.name in user and user[fmt.name] is fmt:
        return f"user format from {path}"
    if fmt.name in formats.CATALOG:
        aliases = sorted(a for a, n in formats.ALIASES.items() if n == fmt.name)
        return "catalog" + (f" (aliases: {', '.join(aliases)})" if aliases else "")
    return "spec, not in the catalog"


def _detail(fmt, source) -> list[str]:
    """Lines describing one format: header, constants table, encoding notes."""
    opts = "".join((", saturate" if fmt.saturate else "",
                    ", flush_subnormals" if fmt.flush_subnormals else ""))
    lines = [f"{fmt.label}: spec {fmt.spec}, {fmt.bits} bits (exp_bits {fmt.exp_bits}, "
             f"man_bits {fmt.man_bits}, bias {_number(fmt.bias)}, encoding {fmt.encoding}{opts}); "
             f"{source}", ""]
    rows = []
    for key, (value, derivation) in fmt.constants().items():
        short, exact = _number(value), _exact(value)
        rows.append([key, short, "" if exact == short else exact, derivation])
    lines.append(_table(("constant", "value", "exact", "derivation"), rows, numeric={1}))
    lines += ["", "encoding:"]
    notes = {"has_inf": fmt.has_inf, "has_nan": fmt.has_nan,
             "has_negative_zero": fmt.has_negative_zero, "saturate": fmt.saturate,
             "flush_subnormals": fmt.flush_subnormals, "fits_binary64": fmt.fits_binary64}
    width = max(map(len, notes))
    lines += [f"  {key:<{width}}  {'yes' if value else 'no'}" for key, value in notes.items()]
    return lines


# ----- ops -------------------------------------------------------------------------------------

def _add_ops(sub, common):
    p = sub.add_parser("ops", help="list the operator table, or show one operator",
                       description="Without NAME: every registered operator with its family, "
                                   "the capability its rule needs, its ports at the default "
                                   "attributes, the spec's CUDA entry and its certificate "
                                   "kinds.  With NAME: that operator in detail.  With --certs "
                                   "NAME: its certificates and the checks that back them.")
    p.add_argument("name", nargs="?", metavar="NAME", help="an operator name (spec spelling)")
    p.add_argument("--certs", metavar="NAME", help="list the certificates of operator NAME")
    p.set_defaults(handler=cmd_ops)


def _operator(name):
    """The declaration of ``name``; UsageError (with close matches) for an unknown one."""
    from roundoff_coverage import routes
    try:
        return routes.declaration(name)
    except routes.RouteError as exc:
        raise UsageError(str(exc)) from None


def cmd_ops(args) -> int:
    """``ops [NAME] [--certs NAME]``: the operator table, one operator, or its certificates."""
    from roundoff_coverage import routes
    from roundoff_coverage.routes.vocabulary import VOCABULARY, spec_row
    if args.certs is not None:
        decl = _operator(args.certs)
        certs = routes.certificates(decl.name)
        print(f"{decl.name}: " + ("no certificates" if not certs else f"{len(certs)} "
                                  f"certificate{'s' if len(certs) > 1 else ''}"))
        for c in certs:
            # The route a certificate concerns: gradient (the pullback), tangent (the forward
            # mode) or forward (the forward map), then the inputs it concerns.
            print(f"  {c.kind} ({c.route}){c.where}: {c.statement}")
            for test in c.evidence:
                print(f"    evidence: {test}")
        return EXIT_OK
    if args.name is not None:
        print("\n".join(_op_detail(_operator(args.name), spec_row)))
        return EXIT_OK
    rows = []
    for name in routes.names():
        o = routes.op(name)
        kinds = sorted({c.kind for c in routes.certificates(name)})
        row = spec_row(name)
        rows.append([name, o.family, _need(o), _ports(o.input_names, o.inputs),
                     _ports(o.output_names, o.outputs), row[3] if row else "-",
                     ",".join(kinds) or "none"])
    print(_table(("name", "family", "needs", "inputs", "outputs", "cuda(spec)", "certificates"),
                 rows))
    print(f"\n{len(rows)} of the spec's {len(VOCABULARY)} operators are registered; ports at "
          f"the default attributes; cuda(spec) is the spec's CUDA table (kernels come with the "
          f"kernels layer)")
    return EXIT_OK


def _need(o) -> str:
    need = o.need
    dependent = callable(o.decl.needs)
    return (need or "-") + (" (at these attributes)" if dependent else "")


def _ports(names, ports) -> str:
    return ",".join(f"{n}:{p}" for n, p in zip(names, ports)) or "-"


def _op_detail(decl, spec_row) -> list[str]:
    """Lines describing one operator at its default attributes."""
    from roundoff_coverage import routes
    o = routes.op(decl.name)
    row = spec_row(decl.name)
    lines = [f"{decl.name}: family {decl.family}; rule needs {_need(o)}; cuda(spec) "
             f"{row[3] if row else '-'}", "attributes:"]
    lines += [f"  {at.name}: {at.wire}, default {at.to_field(at.default)[1]!r}"
              + (f" ({at.doc})" if at.doc else "") for at in decl.attributes] or ["  none"]
    lines += ["ports at the default attributes:",
              f"  inputs:  {_ports(o.input_names, o.inputs)}",
              f"  outputs: {_ports(o.output_names, o.outputs)}", "notes:"]
    lines += [f"  - {note}" for note in decl.notes] or ["  none"]
    kinds = [c.kind for c in routes.certificates(decl.name)]
    lines.append("certificates: " + (", ".join(kinds) if kinds else "none")
                 + f" (roundoff-coverage ops --certs {decl.name})")
    return lines


# ----- text helpers ----------------------------------------------------------------------------

def _table(headers, rows, numeric=()) -> str:
    """Rows of strings aligned under ``headers``; the columns whose indices are in
    ``numeric`` are right-aligned, the others left-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in rows])


def _number(value) -> str:
    """A constant in a few characters: integers in full up to 10**12; other values with 6
    significant digits (``%.6g``), as a power of two or in exact decimal when binary64 cannot
    hold them (binary128 and binary256 reach far outside its range)."""
    if isinstance(value, int) and abs(value) < 10**12:
        return str(value)
    value = Fraction(value)
    f = float(value) if abs(value) < 2**1024 else math.inf
    if f != 0 and abs(f) >= 2.0**-1022 and math.isfinite(f):
        return "%.6g" % f
    k = _power_of_two(abs(value))
    if k is not None:
        return f"{'-' if value < 0 else ''}2**{k}"
    return _scientific(value)


def _power_of_two(v: Fraction) -> int | None:
    """k when v == 2**k, else None."""
    n, d = v.numerator, v.denominator
    if n & (n - 1) == 0 and d & (d - 1) == 0 and n > 0:
        return n.bit_length() - d.bit_length()
    return None


def _scientific(v: Fraction, digits: int = 6) -> str:
    """v in decimal scientific notation with ``digits`` significant digits (ties away from
    zero), from integer arithmetic: no binary64 intermediate, so no overflow or underflow."""
    if v == 0:
        return "0"
    sign, n, d = ("-" if v < 0 else ""), abs(v.numerator), v.denominator

    def at_least(k):                   # v >= 10**k
        return n >= d * 10**k if k >= 0 else n * 10**-k >= d

    # e10 = floor(log10 v): start from the bit lengths, then correct by exact comparisons.
    e10 = math.floor((n.bit_length() - d.bit_length()) * math.log10(2))
    while not at_least(e10):
        e10 -= 1
    while at_least(e10 + 1):
        e10 += 1
    k = digits - 1 - e10                                 # v * 10**k has `digits` digits
    num, den = (n * 10**k, d) if k >= 0 else (n, d * 10**-k)
    m = (2 * num + den) // (2 * den)
    if m == 10**digits:                                  # 9.999995 rounded up to 10.0000
        m, e10 = m // 10, e10 + 1
    text = str(m).rstrip("0") or "0"
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{sign}{mantissa}e{e10:+03d}"


def _exact(value) -> str:
    """The exact value: integers in full; a power of two as 2**k; otherwise 2**e * s with the
    significand s in [1, 2) as a short decimal (448 = 2**8 * 1.75), or (2 - 2**-j) * 2**e, or
    m * 2**k with m odd (every format constant is a dyadic rational)."""
    if isinstance(value, int):
        return str(value) if abs(value) < 10**80 else ""
    v = Fraction(value)
    if v == 0:
        return "0"
    sign, v = ("-" if v < 0 else ""), abs(v)
    if _power_of_two(Fraction(v.denominator)) is None:  # not dyadic: no format holds it
        return f"{sign}{v.numerator}/{v.denominator}"
    k = _power_of_two(v)
    if k is not None:
        return f"{sign}2**{k}"
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1
    s = v / Fraction(2) ** e                             # in (1, 2), a dyadic rational
    places = s.denominator.bit_length() - 1              # s = n / 2**places
    if places <= 4:
        decimal = str(s.numerator * 5**places)           # s * 10**places, >= 10**places
        return f"{sign}2**{e} * {decimal[:-places]}.{decimal[-places:]}"
    j = _power_of_two(2 - s)
    if j is not None:
        return f"{sign}(2 - 2**{j}) * 2**{e}"
    m, q = v.numerator, -(v.denominator.bit_length() - 1)
    while m % 2 == 0:
        m, q = m // 2, q + 1
    return f"{sign}{m} * 2**{q}"


# ----- run -------------------------------------------------------------------------------------

_RUN_LISTS = ("ops", "families", "formats", "modes", "routes", "policies", "implementations")
# Seeds: numpy's SeedSequence takes any non-negative integer; the results file keeps the seed
# as a JSON integer, which readers with 64-bit integers hold exactly up to 2**63 - 1.
SEED_MAX = 2**63 - 1
_SEED_WHY = ": at most 2**63 - 1, which every reader of the results file holds exactly"
# A Dask LocalCluster starts every one of its --jobs workers, whatever the work: the work is
# CPU-bound, so more than a few per core only adds memory (a worker holds numpy, numba and
# mpmath: hundreds of MiB).  The local executor starts no more workers than units, and
# reports/budget.py refuses a plan that cannot fit this machine's memory.
JOBS_PER_CORE = 4
_RUN_KEYS = _RUN_LISTS + ("samples", "seed", "exhaustive", "jobs", "out", "csv", "gate",
                         "executor", "scheduler")


def _add_run(sub, common):
    p = sub.add_parser("run", parents=[common], help="the coverage run: every route of every "
                       "operator under every format, measured against exact values",
                       description="Measure the forward, tangent and gradient routes of the "
                                   "selected operators under each format, mode, policy and "
                                   "implementation against the mpmath reference; write the "
                                   "results file (JSON, roundoff-coverage/1) and print a "
                                   "summary.  Lists are comma-separated.")
    p.add_argument("--ops", metavar="LIST", help="operators (default: all)")
    p.add_argument("--families", metavar="LIST", help="operator families (added to --ops)")
    p.add_argument("--formats", metavar="LIST",
                   help="formats (default: bfloat16,binary16,float8_e4m3fn,float8_e5m2,binary32)")
    p.add_argument("--modes", metavar="LIST", help="rounding modes (default: nearest_even)")
    p.add_argument("--routes", metavar="LIST",
                   help="route kinds among forward,tangent,gradient (default: all three)")
    p.add_argument("--policies", metavar="LIST", help="accumulation policy presets (default: "
                   "strict)")
    p.add_argument("--implementations", metavar="LIST",
                   help="emulated, native and/or cuda (the operators' CUDA kernels on a GPU, "
                        "or in numba's simulator under NUMBA_ENABLE_CUDASIM=1; default: "
                        "emulated)")
    p.add_argument("--samples", metavar="N", type=int,
                   help="sampler draws per sample kind and task (default: 3)")
    p.add_argument("--seed", metavar="N", type=int, help="seed of every random stream (default 0)")
    p.add_argument("--exhaustive", action="store_true", default=None,
                   help="every finite input for elementwise unary operators in formats of at "
                        "most 16 bits")
    p.add_argument("--jobs", metavar="N", type=int, help="worker processes (default: all cores)")
    _add_executor(p)
    p.add_argument("--out", metavar="PATH", type=_path,
                   help="results file (default results/coverage.json)")
    p.add_argument("--csv", metavar="PATH", type=_path, help="also write the rows as CSV")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from <out>.partial.jsonl")
    p.add_argument("--config", metavar="TOML", type=_path,
                   help="a TOML file with any of these options (keys: "
                        + ", ".join(_RUN_KEYS) + "); the command line wins")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    p.add_argument("--gate", metavar="BASELINE", type=_path,
                   help="then gate the new results against the baseline results file "
                        "BASELINE (as 'gate --baseline BASELINE OUT' does, default "
                        "settings); exit 1 on a precision regression")
    p.add_argument("--html", metavar="DIR", type=_path,
                   help="then write the HTML report of the new results into DIR (as "
                        "'report OUT --out DIR' does)")
    p.set_defaults(handler=cmd_run)


def _run_config(path) -> dict:
    """The options of a --config TOML file (top level, or a [run] table)."""
    import tomllib
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {path} is not valid TOML ({exc})") from None
    if isinstance(data.get("run"), dict) and len(data) == 1:
        data = data["run"]
    import difflib
    for key, value in data.items():
        if key not in _RUN_KEYS:
            close = difflib.get_close_matches(key, _RUN_KEYS, n=3)
            hint = f" (close matches: {', '.join(close)})" if close else ""
            raise UsageError(f"config file {path}: unknown key {key!r}{hint}")
        if key in _RUN_LISTS:
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
        elif key == "exhaustive" and not isinstance(value, bool):
            raise UsageError(f"config file {path}: exhaustive must be true or false")
        elif key in ("out", "csv", "gate") and (not isinstance(value, str)
                                                or not value.strip()):
            raise UsageError(f"config file {path}: {key} must be a path (got {value!r})")
        elif key in ("executor", "scheduler") and not isinstance(value, str):
            raise UsageError(f"config file {path}: {key} must be a name or an address")
    return data


def _empty(option, what) -> str:
    return (f"{option}: empty list of {what}s (give one or more names, comma-separated; "
            f"leave the option out for the default)")


def _names(text, what, known, default, option):
    """A comma-separated list checked against ``known`` (UsageError with close matches; an
    empty list is an error too)."""
    if text is None:
        return tuple(default)
    import difflib
    out = []
    for name in (n.strip() for n in text.split(",")):
        if not name:
            continue
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=4, cutoff=0.6)
            hint = f" (close matches: {', '.join(close)})" if close else ""
            raise UsageError(f"unknown {what} {name!r}{hint}")
        if name not in out:
            out.append(name)
    if not out:
        raise UsageError(_empty(option, what))
    return tuple(out)


def _in_range(option, value, lo, hi, why="") -> int:
    """``value`` when lo <= value <= hi, else UsageError naming ``option`` and the range."""
    if not lo <= value <= hi:
        raise UsageError(f"{option} must be from {lo} to {hi} (got {value}){why}")
    return value


def _check_jobs(jobs, executor, scheduler) -> None:
    """--jobs is at least 1 and, for a Dask LocalCluster, at most JOBS_PER_CORE per core."""
    import os
    if jobs is None:
        return
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1 (got {jobs})")
    from . import executors
    if executor == executors.DASK and scheduler is None:
        cores = os.cpu_count() or 1
        _in_range("--jobs", jobs, 1, JOBS_PER_CORE * cores,
                  f": a Dask LocalCluster of {JOBS_PER_CORE} worker processes per core of "
                  f"this machine's {cores}; more only cost memory")


def _selection(args, user):
    """The runner.Selection of the parsed options (config values filled in)."""
    from roundoff_coverage import numerics
    from roundoff_coverage import routes
    from roundoff_coverage.routes.registry import FAMILIES

    from . import evaluate, runner
    ops = _names(args.ops, "operator", routes.names(), (), "--ops") \
        if args.ops is not None else ()
    fams = _names(args.families, "family", FAMILIES, (), "--families") \
        if args.families is not None else ()
    chosen = set(ops) | {n for n in routes.names() if routes.declaration(n).family in fams}
    ops = tuple(n for n in routes.names() if n in chosen) if (ops or fams) else routes.names()
    if not ops:
        raise UsageError(f"no registered operator in families {', '.join(fams)}")
    fmts = []
    listed = runner.DEFAULT_FORMATS if args.formats is None else args.formats.split(",")
    for name in listed:
        if name.strip():
            fmt = formats.get(name.strip(), known=user)
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
        raise UsageError(_empty("--formats", "format"))
    samples = runner.DEFAULT_DRAWS if args.samples is None else args.samples
    if samples < 1:
        raise UsageError(f"--samples must be >= 1 (got {samples})")
    seed = _in_range("--seed", 0 if args.seed is None else args.seed, 0, SEED_MAX, _SEED_WHY)
    return runner.Selection(
        ops=ops, formats=tuple(fmts),
        modes=_names(args.modes, "rounding mode", formats.MODES, ("nearest_even",), "--modes"),
        routes=_names(args.routes, "route", evaluate.ROUTES, evaluate.ROUTES, "--routes"),
        policies=_names(args.policies, "policy", numerics.PRESETS, ("strict",), "--policies"),
        implementations=_names(args.implementations, "implementation",
                               runner.IMPLEMENTATIONS, ("emulated",), "--implementations"),
        draws=samples, seed=seed,
        exhaustive=bool(args.exhaustive))


def _writable(path, what) -> str:
    """``path`` when its folder exists or can be made and a file can be written there."""
    import os
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{what} {path} is a directory")
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".roundoff-coverage-probe-{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as exc:
        raise UsageError(f"cannot write {what} {path}: {exc.strerror or exc}") from None
    return path


def cmd_run(args) -> int:
    """``run``: the coverage run; exit 0 when every task ran (error rows are data), 130
    when interrupted (the checkpoint is kept for --resume); with --gate, 1 when the gate
    finds a regression against the baseline."""
    if args.config:
        for key, value in _run_config(args.config).items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
    from . import runner, summary
    sel = _selection(args, _user_formats(args))
    out = _writable(args.out or "results/coverage.json", "output file")
    csv = _writable(args.csv, "CSV file") if args.csv else None
    if args.gate:
        _check_gate_baseline(args.gate, out)
    if args.html:
        _check_report_dir(args.html)
    executor, scheduler = _executor(args)
    _check_jobs(args.jobs, executor, scheduler)
    if "cuda" in sel.implementations:
        _cuda_device()
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
        print(f"{PROG}: interrupted: {outcome.resumed + outcome.ran} of {outcome.total} tasks "
              f"kept in {runner.checkpoint_path(out)}; rerun with --resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.quiet:
        print(summary.text(outcome.rows, outcome.phases, outcome.wall))
        note = f" ({outcome.resumed} resumed from the checkpoint)" if outcome.resumed else ""
        print(f"peak memory of a worker: {outcome.peak_kib / 2**20:.2f} GiB")
        print(f"{outcome.total} tasks, {len(outcome.rows)} rows{note}: {out}"
              + (f", {csv}" if csv else ""))
    if args.html:
        _report(out, args.html, None, args.quiet)
    if args.gate:
        return _gate(args.gate, out)
    return EXIT_OK


def _warn_unenumerated(sel) -> None:
    """A warning on stderr when ``--exhaustive`` enumerates nothing of the selection: no
    elementwise unary operator in a format of at most EXHAUSTIVE_MAX_BITS bits (the rows then
    say ``exhaustive: false``: their inputs were sampled)."""
    from roundoff_coverage import routes

    from . import evaluate
    fmts = [formats.get(f) for f in sel.formats]
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


def _cuda_device() -> str:
    """The device ``--implementations cuda`` runs on (a GPU, or numba's CUDA simulator under
    NUMBA_ENABLE_CUDASIM=1), or UsageError when neither can run: asked for CUDA, the run stops
    before any work instead of writing rows that all say so."""
    from roundoff_coverage import kernels
    try:
        return kernels.device()
    except kernels.KernelError as exc:
        raise UsageError(f"--implementations cuda: {exc}") from None


def _add_executor(p):
    """The --executor and --scheduler options of ``run`` and ``measure``."""
    p.add_argument("--executor", metavar="NAME",
                   help="where the work units run: local (this machine's worker processes, "
                        "the default) or dask (a Dask cluster; pip install "
                        "'roundoff-coverage[dask]')")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the Dask scheduler to send the units to (tcp://HOST:PORT; implies "
                        "--executor dask); with --executor dask and no address, a "
                        "LocalCluster of --jobs worker processes on this machine")


def _executor(args) -> tuple:
    """(executor, scheduler address or None) of the options.  Dask is imported here, so a
    missing extra fails before any work, not after the planning."""
    from . import executors
    executor = args.executor if args.executor is not None else \
        executors.DASK if args.scheduler is not None else executors.LOCAL
    if executor not in executors.EXECUTORS:
        raise UsageError(f"unknown executor {executor!r} (choose from "
                         f"{', '.join(executors.EXECUTORS)})")
    if executor == executors.LOCAL and args.scheduler is not None:
        raise UsageError(f"--scheduler {args.scheduler}: the local executor has no scheduler; "
                         f"use --executor dask")
    if executor == executors.DASK:
        try:
            executors.require()
        except executors.ExecutorError as exc:
            raise UsageError(str(exc)) from None
        if args.scheduler is not None:
            _check_scheduler(args.scheduler)
    return executor, args.scheduler


_SCHEDULER_FORMS = ("tcp://HOST:PORT, tls://HOST:PORT, ws://HOST:PORT, wss://HOST:PORT, "
                    "ucx://HOST:PORT, inproc://ADDRESS or HOST:PORT (tcp)")


def _check_scheduler(address) -> None:
    """UsageError, at once and without connecting, for a --scheduler address Dask cannot
    parse: distributed's own parsers (``parse_address``, ``parse_host_port``) on a scheme it
    knows, a host and a port in 1..65535 (inproc: any location)."""
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    def bad(why):
        return UsageError(f"--scheduler {address!r}: {why}; give {_SCHEDULER_FORMS}")

    if not isinstance(address, str) or not address.strip() or address != address.strip():
        raise bad("not an address")
    try:
        scheme, location = parse_address(address, strict=False)
    except (ValueError, TypeError) as exc:
        raise bad(" ".join(str(exc).split())) from None
    known = set(backends) | {"tcp", "tls", "ws", "wss", "ucx", "inproc"}
    if scheme not in known:
        raise bad(f"unknown protocol {scheme!r}")
    if scheme == "inproc":
        if not location:
            raise bad("no location after inproc://")
        return
    try:
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise bad(" ".join(str(exc).split())) from None
    if not host:
        raise bad("no host")
    # A host name, an IPv4 address or an IPv6 one (brackets taken off, maybe with a zone).
    if not re.fullmatch(r"[A-Za-z0-9._:%-]+", host):
        raise bad(f"host {host!r} is not a host name or an IP address")
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise bad(f"port {port} is not in 1..65535")


# ----- gate ------------------------------------------------------------------------------------

def _add_gate(sub, common):
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
    p.add_argument("current", metavar="CURRENT", type=_path, help="the new results file")
    p.add_argument("--baseline", metavar="BASELINE", type=_path, required=True,
                   help="the baseline results file")
    p.add_argument("--metric", choices=("max", "p99"), default="max",
                   help="error metric compared: max_ulp (default) or p99_ulp")
    p.add_argument("--tolerances", metavar="TOML", type=_path,
                   help="allowed growth in ulps: default = X, [formats] NAME = X, [families] "
                        "NAME = X (a route gets the largest matching entry; default 0.01)")
    p.add_argument("--markdown", metavar="FILE", type=_path,
                   help="also write a Markdown report (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--junit", metavar="FILE", type=_path,
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
    from .gate import GateError, gate
    try:
        cmp, report = gate(args.baseline, args.current, args.metric, args.tolerances,
                           args.allow_different_settings, args.markdown, args.junit,
                           args.update)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    print(report)
    return EXIT_OK if args.update or cmp is None or not cmp.failed else EXIT_FAILED


def _check_gate_baseline(baseline, out) -> None:
    """Before ``run --gate``: the baseline is a readable results file and not the file the
    run is about to overwrite (so a bad path fails in a second, not after the run)."""
    import os

    from .gate import GateError, read
    if os.path.realpath(baseline) == os.path.realpath(out):
        raise UsageError(f"--gate {baseline}: the run would overwrite its own baseline; give "
                         f"--out another path")
    try:
        read(baseline, "baseline")
    except GateError as exc:
        raise UsageError(str(exc)) from None


def _gate(baseline, out) -> int:
    """``run --gate``: the gate of the fresh results ``out`` against ``baseline``."""
    from .gate import GateError, gate
    try:
        cmp, report = gate(baseline, out)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    print(report)
    return EXIT_FAILED if cmp.failed else EXIT_OK


# ----- report ----------------------------------------------------------------------------------

def _add_report(sub, common):
    p = sub.add_parser("report", help="write the static HTML report of a results file",
                       description="Write a static HTML report of the results file RESULTS "
                                   "into DIR (index.html, one page per operator, assets/): "
                                   "what was run, coverage, a heat map of max ulp errors, a "
                                   "sortable table of every row, histograms, errors by "
                                   "magnitude, bounds and worst-case reproducers.  It opens "
                                   "from disk, with no server and no network.")
    p.add_argument("results", metavar="RESULTS", type=_path,
                   help="a results file (roundoff-coverage/1)")
    p.add_argument("--out", metavar="DIR", type=_path, required=True,
                   help="the report folder (created)")
    p.add_argument("--baseline", metavar="BASELINE", type=_path,
                   help="also compare with the baseline results file BASELINE "
                        "(compare.html: what got better and worse, as the gate judges it)")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(handler=cmd_report)


def cmd_report(args) -> int:
    """``report RESULTS --out DIR [--baseline BASELINE]``: exit 0, or 2 for a file that is
    not a readable results file or a folder that cannot be written (the files are read
    before the folder is made)."""
    _report(args.results, args.out, args.baseline, args.quiet)
    return EXIT_OK


def _check_report_dir(path) -> None:
    """Before a run or a report: the report folder can be made and written."""
    from .html import HtmlError, prepare
    try:
        prepare(path)
    except HtmlError as exc:
        raise UsageError(str(exc)) from None


def _report(results_path, out_dir, baseline, quiet) -> None:
    from .html import HtmlError, build
    try:
        built = build(results_path, out_dir, baseline)
    except HtmlError as exc:
        raise UsageError(str(exc)) from None
    if not quiet:
        print(f"report: {built.index} ({built.files} files, {built.seconds:.1f} s)")


# ----- measure ---------------------------------------------------------------------------------

def _add_measure(sub, common):
    p = sub.add_parser("measure", parents=[common],
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
    _add_executor(p)
    p.add_argument("--out", metavar="PATH", type=_path,
                   help="results file (default results/measure.json)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted measurement from its checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    p.set_defaults(handler=cmd_measure)


def cmd_measure(args) -> int:
    """``measure``: exit 0 when measured, 130 when interrupted (checkpoint kept)."""
    from . import measure, runner
    if "\0" in args.target or not args.target.strip():
        raise UsageError(f"TARGET {args.target!r} is not a target: give numpy.NAME, "
                         f"LIBRARY:FUNCTION, package.module:function or torch.NAME")
    fmt = formats.get(args.format, known=_user_formats(args))
    _in_range("--seed", args.seed, 0, SEED_MAX, _SEED_WHY)
    samples = None if args.exhaustive else (1_000_000 if args.samples is None else args.samples)
    out = _writable(args.out or "results/measure.json", "output file")
    executor, scheduler = _executor(args)
    _check_jobs(args.jobs, executor, scheduler)
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
              f"chunks kept in {runner.checkpoint_path(out)}; rerun with --resume",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if not args.quiet:
        print(measure.text(outcome))
        print(f"results: {out}")
    return EXIT_OK


_SUBCOMMANDS = (_add_formats, _add_ops, _add_run, _add_gate, _add_report, _add_measure)

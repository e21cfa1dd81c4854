"""The ``roundoff-coverage`` command line: one parser, one subcommand function each.

``main(argv) -> int`` returns the exit status of shared/ARCHITECTURE.md: 0 success, 1 a gate
or check failed, 2 bad usage or bad input.  User errors (``UsageError``, ``FormatError``,
argparse's own) are turned into one line ``roundoff-coverage: error: <reason>`` on stderr in
exactly one place, ``main``; a subcommand only raises them.

A subcommand is a ``_add_<name>(subparsers, common)`` function that declares its arguments
and sets ``handler``; ``_SUBCOMMANDS`` lists them.  ``common`` is the parent parser of the
options every subcommand that names formats shares (``--formats-file``).
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction

import formats
from formats import FormatError

PROG = "roundoff-coverage"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A user error: bad arguments or bad input.  Its message is one line; exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError instead of printing usage and exiting,
    so ``main`` reports it like every other user error (subparsers inherit the class)."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def main(argv=None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.handler(args)
    except (UsageError, FormatError) as exc:
        message = " ".join(str(exc).split())           # one line, whatever the source
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:                          # --help exits 0 from inside argparse
        return EXIT_OK if exc.code in (None, 0) else EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand of ``_SUBCOMMANDS`` under one parser."""
    parser = _Parser(prog=PROG, description="Roundoff and numerics analysis workbench.")
    common = _Parser(add_help=False)
    common.add_argument("--formats-file", metavar="PATH",
                        help="TOML file of user formats ([formats.NAME] tables with exp_bits, "
                             "man_bits and optionally bias, encoding, saturate, "
                             "flush_subnormals)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=_Parser)
    for add in _SUBCOMMANDS:
        add(sub, common)
    return parser


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
    import routes
    try:
        return routes.declaration(name)
    except routes.RouteError as exc:
        raise UsageError(str(exc)) from None


def cmd_ops(args) -> int:
    """``ops [NAME] [--certs NAME]``: the operator table, one operator, or its certificates."""
    import routes
    from routes.vocabulary import VOCABULARY, spec_row
    if args.certs is not None:
        decl = _operator(args.certs)
        certs = routes.certificates(decl.name)
        print(f"{decl.name}: " + ("no certificates" if not certs else f"{len(certs)} "
                                  f"certificate{'s' if len(certs) > 1 else ''}"))
        for c in certs:
            where = f" (inputs {list(c.inputs)})" if c.inputs is not None else ""
            print(f"  {c.kind}{where}: {c.statement}")
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
    import routes
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


_SUBCOMMANDS = (_add_formats, _add_ops)

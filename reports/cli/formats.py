"""``roundoff-coverage formats [NAME]``: the table of every format (catalog and user
formats, element and scaled), or one format's constants with their exact values and
derivations; for a scaled format (``mxfp8_e4m3``, ``nvfp4:rceil``...) its element format,
block, scale format and rule, largest element, scale range and the definition's source."""

from __future__ import annotations

import math
from fractions import Fraction

from roundoff_coverage import formats

from .common import EXIT_OK, UsageError, text_table, user_formats


def add(sub, shared):
    p = sub.add_parser("formats", parents=[shared], help="list the formats, or show one",
                       description="Without NAME: every catalog format (and user format) as a "
                                   "table, then the scaled formats.  With NAME: one format's "
                                   "constants, their exact values and derivations, and its "
                                   "encoding; or one scaled format explained.")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="catalog name, alias, compact spec (e5m10, e4m3fn, e4m3b11fnuz-sat), "
                        "keywords (exp_bits=5,man_bits=2,encoding=fnuz) or a scaled format "
                        "with options (mxfp8_e4m3, nvfp4:rceil)")
    p.set_defaults(handler=cmd_formats)


_LIST_COLUMNS = ("name", "spec", "bits", "exp_bits", "man_bits", "bias", "encoding", "precision",
                 "emin", "emax", "max_finite", "min_normal", "min_subnormal", "unit_roundoff",
                 "finite_count")


# Exact constants grow like 2**(2**(exp_bits-1)) (binary256, exp_bits 19, already spans
# 2**262143) and Python refuses str() of integers past 4300 digits: show formats up to these.
_MAX_EXP_BITS, _MAX_MAN_BITS = 22, 4096


def cmd_formats(args) -> int:
    """``formats [NAME]``: the table of every format, or one format in detail; exit 0."""
    user = user_formats(args)
    elements = {n: f for n, f in user.items() if not isinstance(f, formats.ScaledFormat)}
    scaled = {n: f for n, f in user.items() if isinstance(f, formats.ScaledFormat)}
    for fmt in elements.values():
        _check_displayable(fmt)
    if args.name is None:
        rows = [_list_row(fmt) for fmt in formats.CATALOG.values()]
        columns = _LIST_COLUMNS
        if elements:                                   # mark each row's origin
            rows = [r + ["catalog"] for r in rows]
            rows += [_list_row(fmt) + ["user"] for fmt in elements.values()]
            columns += ("source",)
        text = {"name", "spec", "encoding", "source"}
        print(text_table(columns, rows,
                         numeric={i for i, h in enumerate(columns) if h not in text}))
        print("\n".join(["", "scaled formats (formats.quantize; options such as :rceil "
                                "follow the name):", _scaled_table(scaled)]))
        if user:
            print(f"\nuser formats from {args.formats_file}: {', '.join(user)}")
        return EXIT_OK
    fmt = formats.get(args.name, known=user)
    if isinstance(fmt, formats.ScaledFormat):
        print("\n".join(_scaled_detail(fmt, _scaled_source(fmt, scaled, args.formats_file))))
        return EXIT_OK
    fmt = _check_displayable(fmt)
    print("\n".join(_detail(fmt, _source(fmt, user, args.formats_file))))
    return EXIT_OK


_SCALED_COLUMNS = ("name", "element", "block", "scale", "rule", "element_max",
                   "bits_per_element")


def _scaled_table(user: dict) -> str:
    """The scaled formats of the catalog (and ``user``'s) as a table."""
    def row(fmt):
        scale = "e8m0" if fmt.is_e8m0 else fmt.scale.label + ("-pow2" if fmt.pow2 else "")
        if fmt.tensor_scale is not None:
            scale += f"*{fmt.tensor_scale.label}"
        bpe = fmt.bits_per_element
        block = "tensor" if fmt.block is None else "x".join(map(str, fmt.block))
        return [fmt.label, fmt.element.label, block, scale, fmt.rule,
                _number(fmt.element_max_exact), "-" if bpe is None else "%.6g" % bpe]

    rows = [row(fmt) for fmt in formats.SCALED.values()]
    columns = _SCALED_COLUMNS
    if user:
        rows = [r + ["catalog"] for r in rows] + [row(f) + ["user"] for f in user.values()]
        columns += ("source",)
    return text_table(columns, rows, numeric={5, 6})


def _scaled_source(fmt, user, path) -> str:
    """Where the scaled ``fmt`` comes from: the user's file or the catalog."""
    base = fmt.label.split(":", 1)[0]
    if base in user:
        return f"user format from {path}"
    return "catalog"


def _scaled_detail(fmt, origin) -> list[str]:
    """Lines explaining one scaled format: header, facts table, the definition's source."""
    lines = [f"{fmt.label}: scaled format, {fmt.summary()}; {origin}", ""]
    rows = []
    facts = fmt.constants()
    source = facts.pop("source")[0]
    for key, (value, note) in facts.items():
        if isinstance(value, str):
            rows.append([key, value, "", note])
            continue
        short, exact = _number(value), _exact(value)
        rows.append([key, short, "" if exact == short else exact, note])
    lines.append(text_table(("fact", "value", "exact", "how"), rows, numeric=set()))
    return lines + ["", f"definition: {source}"]


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
    lines.append(text_table(("constant", "value", "exact", "derivation"), rows, numeric={1}))
    lines += ["", "encoding:"]
    notes = {"has_inf": fmt.has_inf, "has_nan": fmt.has_nan,
             "has_negative_zero": fmt.has_negative_zero, "saturate": fmt.saturate,
             "flush_subnormals": fmt.flush_subnormals, "fits_binary64": fmt.fits_binary64}
    width = max(map(len, notes))
    lines += [f"  {key:<{width}}  {'yes' if value else 'no'}" for key, value in notes.items()]
    return lines


# ----- numbers in a few characters -------------------------------------------------------------

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

"""What a binary floating-point format is, every constant derived from its fields, the named
formats (``CATALOG``) and the compact spec (``e4m3fn``) that names one.

A format has a sign bit, ``exp_bits`` exponent bits and ``man_bits`` fraction bits.  A finite
nonzero value is ``M * 2**q`` with an integer significand ``0 < M < 2**p`` (p = man_bits + 1)
and a quantum exponent ``q >= qmin``; normal values have ``M >= 2**(p-1)``.

Encodings (which bit patterns are special):

- ``ieee``:   top exponent code is inf (fraction 0) or NaN (fraction != 0);
- ``fn``:     no inf; only the all-ones pattern S.1..1.1..1 is NaN (float8_e4m3fn);
- ``fnuz``:   no inf, no negative zero; the negative-zero pattern 1.0..0.0..0 is NaN;
- ``finite``: every pattern is a finite number: no inf, no NaN (float6/float4 of OCP MX).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

ENCODINGS = ("ieee", "fn", "fnuz", "finite")
MAX_EXP_BITS, MAX_MAN_BITS = 24, 4096


class FormatError(ValueError):
    """A format spec that names no format or describes an inconsistent one."""


@dataclass(frozen=True)
class BinaryFormat:
    """A binary format from its fields; every other constant is derived in ``__post_init__``.

    ``bias`` defaults to the IEEE bias 2**(exp_bits-1) - 1.  ``saturate``: finite overflow and
    infinite inputs give +-max_finite instead of inf/NaN.  ``flush_subnormals``: a result that
    would be subnormal becomes a zero of the same sign.  ``name`` is a label only: two formats
    with equal fields are equal whatever they are called.
    """

    exp_bits: int
    man_bits: int
    bias: int | None = None
    encoding: str = "ieee"
    saturate: bool = False
    flush_subnormals: bool = False
    name: str | None = field(default=None, compare=False)

    # Derived (init=False): set once in __post_init__.
    precision: int = field(init=False, compare=False)
    emin: int = field(init=False, compare=False)
    emax: int = field(init=False, compare=False)
    qmin: int = field(init=False, compare=False)
    top_significand: int = field(init=False, compare=False)
    bits: int = field(init=False, compare=False)

    def __post_init__(self):
        for key in ("exp_bits", "man_bits"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise FormatError(f"format: {key} must be an integer (got {value!r})")
        # Upper limits keep every derived constant computable (binary256 has 19 and 236; MPFR
        # exponents stop near 2**30).
        if not 1 <= self.exp_bits <= MAX_EXP_BITS:
            raise FormatError(f"format: exp_bits must be in [1, {MAX_EXP_BITS}] "
                              f"(got {self.exp_bits})")
        if not 0 <= self.man_bits <= MAX_MAN_BITS:
            raise FormatError(f"format: man_bits must be in [0, {MAX_MAN_BITS}] "
                              f"(got {self.man_bits})")
        if self.encoding not in ENCODINGS:
            raise FormatError(f"format: encoding must be one of {', '.join(ENCODINGS)} "
                              f"(got {self.encoding!r})")
        if self.encoding == "ieee" and self.man_bits == 0:
            raise FormatError("format: an ieee encoding needs man_bits >= 1 to hold a NaN "
                              "(got man_bits=0; use encoding=finite)")
        bias = (1 << (self.exp_bits - 1)) - 1 if self.bias is None else self.bias
        if isinstance(bias, bool) or not isinstance(bias, int) or abs(bias) >= 1 << 26:
            raise FormatError(f"format: bias must be an integer of magnitude below 2**26 "
                              f"(got {bias!r})")
        object.__setattr__(self, "bias", bias)

        p = self.man_bits + 1
        top_code = (1 << self.exp_bits) - 1          # all-ones exponent field
        full = (1 << p) - 1                          # significand 1.11..1 as an integer
        if self.encoding == "ieee":
            # The all-ones exponent code is reserved for inf and NaN.
            top_code, top_m = top_code - 1, full
        elif self.encoding == "fn":
            # The all-ones code is finite except its all-ones fraction (NaN): the top
            # binade loses its last value, e.g. e4m3fn max = 1.110b * 2**8 = 448.  With no
            # fraction bits the whole top code is NaN and the binade below is the top.
            if self.man_bits == 0:
                top_code, top_m = top_code - 1, full
            else:
                top_m = full - 1
        else:
            # fnuz and finite: every code with a nonzero magnitude is finite.
            top_m = full
        emin = 1 - bias                               # exponent field 1 is the first normal
        emax = top_code - bias
        if emax < emin:
            raise FormatError(
                f"format: e{self.exp_bits}m{self.man_bits} {self.encoding} has no normal "
                f"binade (emax={emax} < emin={emin}); use more exponent bits")
        object.__setattr__(self, "precision", p)
        object.__setattr__(self, "emin", emin)
        object.__setattr__(self, "emax", emax)
        # The subnormal quantum: the ulp of the lowest binade, 2**(emin - man_bits).
        object.__setattr__(self, "qmin", emin - self.man_bits)
        object.__setattr__(self, "top_significand", top_m)
        object.__setattr__(self, "bits", 1 + self.exp_bits + self.man_bits)

    # ----- encoding properties -------------------------------------------------------------
    @property
    def has_inf(self) -> bool:
        return self.encoding == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.encoding != "finite"

    @property
    def has_negative_zero(self) -> bool:
        return self.encoding != "fnuz"

    # ----- derived constants (exact, as Fractions) -------------------------------------------
    @property
    def max_finite_exact(self) -> Fraction:
        """Largest finite value: top significand at the top binade, M_top * 2**(emax - p + 1)."""
        return Fraction(self.top_significand) * Fraction(2) ** (self.emax - self.precision + 1)

    @property
    def min_normal_exact(self) -> Fraction:
        """2**emin: exponent field 1, fraction 0."""
        return Fraction(2) ** self.emin

    @property
    def min_subnormal_exact(self) -> Fraction:
        """2**(emin - man_bits): exponent field 0, fraction 0..01."""
        return Fraction(2) ** self.qmin

    @property
    def unit_roundoff_exact(self) -> Fraction:
        """u = 2**-p: the relative error bound of round-to-nearest in the normal range."""
        return Fraction(1, 1 << self.precision)

    @property
    def eta_exact(self) -> Fraction:
        """eta = 2**(emin - man_bits - 1): half the subnormal spacing, the absolute error bound
        of round-to-nearest below the normal range (standard model with gradual underflow)."""
        return Fraction(2) ** (self.qmin - 1)

    @property
    def max_finite(self) -> float:
        return _as_float(self.max_finite_exact)

    @property
    def min_normal(self) -> float:
        return _as_float(self.min_normal_exact)

    @property
    def min_subnormal(self) -> float:
        return _as_float(self.min_subnormal_exact)

    @property
    def unit_roundoff(self) -> float:
        return _as_float(self.unit_roundoff_exact)

    @property
    def eta(self) -> float:
        return _as_float(self.eta_exact)

    @property
    def finite_count(self) -> int:
        """Number of bit patterns that encode finite values (both zeros counted where they
        exist)."""
        total = 1 << self.bits
        if self.encoding == "ieee":
            return total - 2 * (1 << self.man_bits)     # both signs of the top exponent code
        if self.encoding == "fn":
            return total - 2                              # S.1..1.1..1 for each sign
        if self.encoding == "fnuz":
            return total - 1                              # the single NaN pattern
        return total

    @property
    def fits_binary64(self) -> bool:
        """Every value of the format is a binary64 value (so float64 arrays can hold them)."""
        return self.precision <= 53 and self.qmin >= -1074 and self.max_finite_exact <= _F64_MAX

    def holds(self, other) -> bool:
        """Every value of ``other`` (finite values, signed zeros, infinities, NaN) is a value
        of this format, so rounding into it is the identity: its special values where other
        has them, at least other's precision, its smallest quantum and its largest value, and
        no flushing of other's smallest values."""
        specials = ((self.has_inf and not self.saturate) or not other.has_inf) and \
            (self.has_nan or not other.has_nan) and \
            (self.has_negative_zero or not other.has_negative_zero)
        smallest = other.min_normal_exact if other.flush_subnormals else \
            Fraction(2) ** other.qmin
        flushed = self.flush_subnormals and smallest < self.min_normal_exact
        return specials and not flushed and self.spans(other)

    def spans(self, other) -> bool:
        """Every finite magnitude ``other`` can write fits this format's fields: at least
        its precision, its smallest quantum and its largest value (``holds`` adds the
        special values and flushing)."""
        return (self.precision >= other.precision and self.qmin <= other.qmin
                and self.max_finite_exact >= other.max_finite_exact)

    @property
    def contains_binary64(self) -> bool:
        """Every finite binary64 value is a value of this format (binary128, binary256...)."""
        return self.precision >= 53 and self.qmin <= -1074 and self.max_finite_exact >= _F64_MAX

    @property
    def spec(self) -> str:
        """The compact spec that ``formats.get`` parses back into an equal format.  The bias
        is written when the spec without it would mean another bias (``e5m2fnuz`` is
        float8_e5m2fnuz, bias 16, so bias 15 is ``e5m2b15fnuz``)."""
        enc = "" if self.encoding == "ieee" else self.encoding
        s = f"e{self.exp_bits}m{self.man_bits}{enc}"
        if from_compact(s) != BinaryFormat(self.exp_bits, self.man_bits, self.bias, self.encoding):
            s = f"e{self.exp_bits}m{self.man_bits}b{self.bias}{enc}"
        if self.saturate:
            s += "-sat"
        if self.flush_subnormals:
            s += "-ftz"
        return s

    @property
    def label(self) -> str:
        return self.name or self.spec

    def __repr__(self) -> str:
        extra = "".join((", saturate=True" if self.saturate else "",
                         ", flush_subnormals=True" if self.flush_subnormals else ""))
        return (f"BinaryFormat({self.label}: exp_bits={self.exp_bits}, man_bits={self.man_bits}, "
                f"bias={self.bias}, encoding={self.encoding!r}{extra})")

    def constants(self) -> dict:
        """Every derived constant with the formula that gives it (for the CLI and docs)."""
        p, wf = self.precision, self.man_bits
        return {
            "bits": (self.bits, "1 + exp_bits + man_bits"),
            "bias": (self.bias, "2**(exp_bits-1) - 1 unless given"),
            "precision": (p, "p = man_bits + 1"),
            "emin": (self.emin, "1 - bias"),
            "emax": (self.emax, _EMAX_DERIVATION[self.encoding]),
            "max_finite": (self.max_finite_exact,
                           f"(2**{p} - {(1 << p) - self.top_significand}) * 2**(emax - {p - 1})"),
            "min_normal": (self.min_normal_exact, "2**emin"),
            "min_subnormal": (self.min_subnormal_exact, f"2**(emin - {wf})"),
            "unit_roundoff": (self.unit_roundoff_exact, "u = 2**-p"),
            "eta": (self.eta_exact, f"2**(emin - {wf} - 1), half the subnormal spacing"),
            "finite_count": (self.finite_count, _COUNT_DERIVATION[self.encoding]),
        }


_EMAX_DERIVATION = {
    "ieee": "2**exp_bits - 2 - bias (top code is inf/NaN)",
    "fn": "2**exp_bits - 1 - bias (top code finite but for S.1..1.1..1; "
          "2**exp_bits - 2 - bias when man_bits = 0: the whole top code is NaN)",
    "fnuz": "2**exp_bits - 1 - bias (NaN is the negative-zero pattern)",
    "finite": "2**exp_bits - 1 - bias (no special codes)",
}
_COUNT_DERIVATION = {
    "ieee": "2**bits - 2 * 2**man_bits",
    "fn": "2**bits - 2",
    "fnuz": "2**bits - 1",
    "finite": "2**bits",
}

_F64_MAX = Fraction((1 << 53) - 1) * Fraction(2) ** 971


def _as_float(value: Fraction) -> float:
    """A derived constant as a float64; inf when it lies beyond binary64's range."""
    try:
        return float(value)
    except OverflowError:
        return float("inf")


# ----- the named formats, and the compact spec that ``spec`` writes and ``from_compact`` reads --
# Names follow ml_dtypes where a name exists (bfloat16, float8_e4m3fn, ...) and IEEE 754 for
# the interchange formats (binary16 ...).  Note ml_dtypes' "fn" means two things: float8_e4m3fn
# keeps one NaN pattern (encoding ``fn``) while float6/float4 "fn" have no NaN at all (encoding
# ``finite``); the catalog records which.  They sit beside the class because a compact spec
# names a catalog format (``e4m3fnuz`` is float8_e4m3fnuz, bias 8), so ``spec`` reads them.

def _fmt(name, e, m, bias=None, encoding="ieee"):
    return name, BinaryFormat(e, m, bias, encoding, name=name)


CATALOG: dict[str, BinaryFormat] = dict([
    _fmt("binary16", 5, 10),                   # max (2 - 2**-10) * 2**15 = 65504
    _fmt("bfloat16", 8, 7),                    # binary32's exponent, 8-bit significand
    _fmt("tf32", 8, 10),                       # 19 bits: tensor-core multiplier input
    _fmt("binary32", 8, 23),
    _fmt("binary64", 11, 52),
    _fmt("binary128", 15, 112),
    _fmt("binary256", 19, 236),
    _fmt("float8_e5m2", 5, 2),                 # IEEE-like, has inf; max 1.75 * 2**15 = 57344
    _fmt("float8_e4m3", 4, 3),                 # IEEE-like e4m3 (ml_dtypes); max 1.875 * 2**7 = 240
    _fmt("float8_e3m4", 3, 4),                 # IEEE-like e3m4 (ml_dtypes); max 1.9375 * 2**3 = 15.5
    # e4m3fn: top exponent code finite but for mantissa 111 (NaN): max 1.75 * 2**8 = 448.
    _fmt("float8_e4m3fn", 4, 3, 7, "fn"),
    # fnuz: bias one above IEEE, NaN = 0x80: e4m3 max 1.875 * 2**7 = 240, e5m2 1.75 * 2**15 = 57344.
    _fmt("float8_e4m3fnuz", 4, 3, 8, "fnuz"),
    _fmt("float8_e5m2fnuz", 5, 2, 16, "fnuz"),
    _fmt("float8_e4m3b11fnuz", 4, 3, 11, "fnuz"),   # bias 11: max 1.875 * 2**4 = 30
    # OCP MX: no inf, no NaN.  e2m3: max 1.875 * 2**2 = 7.5; e3m2: 1.75 * 2**4 = 28;
    # e2m1: values 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    _fmt("float6_e2m3fn", 2, 3, 1, "finite"),
    _fmt("float6_e3m2fn", 3, 2, 3, "finite"),
    _fmt("float4_e2m1fn", 2, 1, 1, "finite"),
])

_COMPACT = re.compile(r"^e(\d+)m(\d+)(?:b(-?\d+))?(fnuz|fn|finite)?((?:-sat|-ftz)*)$")


def from_compact(key: str) -> BinaryFormat | None:
    """The format of a compact spec in lower case (``e5m10``, ``e4m3fn``, ``e4m3b11fnuz``,
    suffixes ``-sat`` and ``-ftz``), None when ``key`` is no compact spec.  A spec that is a
    catalog name without its ``floatN_`` prefix is that catalog format (``e2m1fn`` is
    float4_e2m1fn); otherwise the suffix is the encoding."""
    m = _COMPACT.match(key)
    if m is None:
        return None
    e, w, bias, enc, opts = m.groups()
    e, w = int(e), int(w)
    if bias is None and not opts:
        named = f"float{1 + e + w}_{key}"
        if named in CATALOG:
            return CATALOG[named]
    fmt = BinaryFormat(e, w, None if bias is None else int(bias),
                       {None: "ieee"}.get(enc, enc),
                       saturate="-sat" in opts, flush_subnormals="-ftz" in opts)
    return named_if_catalog(fmt)


def named_if_catalog(fmt: BinaryFormat) -> BinaryFormat:
    """A spec equal to a catalog format gets that format's name (e5m10 is binary16)."""
    if fmt.saturate or fmt.flush_subnormals:
        return fmt
    for named in CATALOG.values():
        if named == fmt:
            return named
    return fmt

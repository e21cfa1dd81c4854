"""Scaled (block-scaled) formats: what a scheme is, its catalog, names with options, TOML.

A scaled format stores a tensor as short *elements* and, per block of elements, one *scale*
(and, in two-level schemes, one tensor scale): the represented value is
``element * scale (* tensor_scale)``.  ``formats.quantize`` (formats/quantizer.py)
computes them; this module only says what each scheme is.

Definitions, each with its source:

- **OCP Microscaling (MX)**, "OCP Microscaling Formats (MX) Specification v1.0" (Open
  Compute Project, 2023), with its conversion as Algorithm 1 of Rouhani et al.,
  "Microscaling Data Formats for Deep Learning" (arXiv:2310.10537): blocks of k = 32
  elements along one axis; scale E8M0 (8 exponent bits, no sign, no mantissa, bias 127:
  values 2**-127 .. 2**127, code 0xFF is NaN, no zero, no inf); elements E4M3 (max 448)
  or E5M2 (57344) for MXFP8, E3M2 (28) or E2M3 (7.5) for MXFP6, E2M1 (6) for MXFP4, and
  INT8 for MXINT8 (8-bit two's complement with an implicit scale 2**-6: values k/64,
  k in [-128, 127], so -2 is a value, as gfloat reads it too; emax_elem = 0).  The
  conversion: shared_exp = floor(log2(max_i |V_i|)) - emax_elem, X = 2**shared_exp,
  P_i = quantize_to_element_format(V_i / X) "clamping normal numbers" to the element max.
  A block holding an Inf or NaN has a NaN scale.
- **E8M0 range** (Algorithm 1 does not say): Microsoft's reference implementation of
  the spec (microxcaling, ``_quantize_mx``) sets shared_exp > 127 to NaN
  and clamps shared_exp < -127 to -127; we do the same: a scale above 2**127 is NaN (only
  float64 or exact inputs can get there: binary32 inputs stay below 2**128), one below
  2**-127 is 2**-127, and an all-zero block gets the least scale 2**-127.
- **Scale rules** (a named option, ``mxfp8_e4m3:rceil``), with a = amax / tensor_scale:
  ``floor``  X = 2**(floor(log2 a) - emax_elem)      (the MX spec);
  ``ceil``   X = 2**(ceil(log2 a) - emax_elem);
  ``rceil``  X = a / max_elem rounded up into the scale format (cuBLAS and
             TransformerEngine's MXFP8 quantization: no element saturates);
  ``even``   X = a / max_elem rounded to nearest, ties to even, into the scale format.
  With a zero significand width (E8M0, or ``pow2``) "even" ties go up: a tie between 2**k
  and 2**(k+1) sits at 1.5 * 2**k, and on the grid of 2**k the neighbour 2 * 2**k is the
  one with the even last digit (formats' rounding does exactly this for precision 1).
  A result below the least positive scale is the least positive scale; above the largest,
  NaN (or the largest, for schemes whose ``scale_saturate`` is set).
- **NVFP4**, NVIDIA ("NVFP4" in the TransformerEngine low-precision training docs and the
  Blackwell NVFP4 blog post, 2025): E2M1 elements in blocks of 16 along one axis, block
  scale E4M3 (positive), one binary32 tensor scale; s_global = amax_tensor / (448 * 6)
  rounded to nearest-even binary32, s_block = (amax_block / 6) / s_global rounded into E4M3
  (rule ``even``; each a single rounding of the exact real), x = x_e2m1 * s_block *
  s_global.  Our conventions: amax_tensor = 0, or an s_global that rounds to 0, gives the
  least positive binary32 2**-149 (the "least scale" of MX); a block scale above 448 (only
  through s_global's rounding) saturates to 448; an Inf/NaN anywhere makes s_global NaN.
  In general s_global = amax_tensor / (scale_max * element_max), scale_max the largest
  block scale the rule can give: 448 under ``even`` and ``rceil``, 256 = 2**8 under a
  power-of-two rule (``floor``, ``ceil``, ``pow2``), so the largest block's scale fits.
- **FP8 per-tensor scaling**, Micikevicius et al., "FP8 Formats for Deep Learning"
  (arXiv:2209.05433) and TransformerEngine's Float8CurrentScaling / DelayedScaling recipes:
  E4M3 or E5M2 with one binary32 scale.  They write the multiplier scale = max_elem / amax
  (/ 2**margin); we store its reciprocal, the decode scale d = amax * 2**margin / max_elem
  rounded into binary32 (rule ``even``; TransformerEngine rounds the multiplier and then its
  reciprocal, which can differ from d by an ulp).  ``current``: amax of this tensor;
  ``delayed``: amax = max of a supplied history (``quantize(..., history=...)``).
  ``pow2``: scales restricted to powers of two; ``pow2`` without a rule means ``rceil``
  (the multiplier rounded *down* to a power of two, as TransformerEngine and DeepSeek-V3).
- **FP8 blockwise**, DeepSeek-V3 Technical Report (arXiv:2412.19437, section 3.3) and
  TransformerEngine's Float8BlockScaling: 1 x 128 blocks (activations, gradients) and
  128 x 128 blocks (weights), binary32 scales (optionally ``pow2``).
- **Elements**: rounded once from the exact quotient V / (scale * tensor_scale), mode
  ``nearest_even`` (default) or ``stochastic`` (formats' seeded stochastic rounding, see
  formats/quantizer.py for the draws); overflow saturates to +-max (``sat``, the default and
  the MX spec's clamp) or follows the element format's own rule (``nosat``: NaN for E4M3,
  inf for E5M2; elements without inf/NaN always saturate).  Subnormal inputs are read
  exactly, never flushed (the microxcaling reference can flush binary32 subnormals: an
  option there, off by default).

Names: ``BASE[:OPTION]...`` with options ``floor``, ``ceil``, ``rceil``, ``even`` (scale
rule), ``pow2``, ``current``, ``delayed``, ``margin=N``, ``nearest_even``, ``stochastic``,
``sat``, ``nosat``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction

from .format import CATALOG, BinaryFormat, FormatError

RULES = ("floor", "ceil", "rceil", "even")
ROUNDINGS = ("nearest_even", "stochastic")
AMAX_SOURCES = ("current", "delayed")

# E8M0 as the grid of its values: with no fraction bits and bias 128, the normals of this
# sign-magnitude format are 2**(f - 128) for fields f = 1..255, i.e. 2**-127 .. 2**127, the
# E8M0 values; the E8M0 code of 2**k is k + 127 and 0xFF is NaN (the grid's zero and
# negative values are never used).  Rounding onto it is formats' rounding at precision 1.
E8M0 = BinaryFormat(8, 0, 128, "finite", name="e8m0")
E8M0_NAN = 0xFF

SOURCES = {
    "mx": "OCP Microscaling Formats (MX) Specification v1.0; conversion: Algorithm 1 of "
          "Rouhani et al., arXiv:2310.10537",
    "nvfp4": "NVIDIA NVFP4 (TransformerEngine NVFP4 recipe; Blackwell NVFP4, 2025)",
    "tensor": "FP8 per-tensor scaling: Micikevicius et al., arXiv:2209.05433; "
              "TransformerEngine Float8CurrentScaling / DelayedScaling",
    "block": "FP8 blockwise scaling: DeepSeek-V3 report, arXiv:2412.19437 section 3.3; "
             "TransformerEngine Float8BlockScaling",
    "user": "user-defined",
}


class NotAnElementFormat(FormatError, AttributeError):
    """A scaled format used where an element format (a BinaryFormat) is needed.  Both a
    FormatError (one line and exit 2 on the command line) and an AttributeError (so
    ``hasattr`` and ``getattr(x, name, default)`` stay truthful)."""


@dataclass(frozen=True)
class IntElement:
    """Two's-complement integer elements with an implicit scale: values k * 2**-frac_bits,
    k in [-2**(bits-1), 2**(bits-1) - 1] (MXINT8: bits 8, frac_bits 6, values k/64)."""

    bits: int = 8
    frac_bits: int = 6
    name: str = field(default="int8", compare=False)

    @property
    def label(self) -> str:
        return self.name

    @property
    def max_finite_exact(self) -> Fraction:
        return Fraction((1 << (self.bits - 1)) - 1, 1 << self.frac_bits)

    @property
    def min_value_exact(self) -> Fraction:
        return Fraction(-(1 << (self.bits - 1)), 1 << self.frac_bits)

    @property
    def max_finite(self) -> float:
        return float(self.max_finite_exact)

    @property
    def emax(self) -> int:
        """Exponent of the largest value: 127/64 lies in [1, 2), so 0 for MXINT8."""
        return self.bits - 2 - self.frac_bits

    @property
    def precision(self) -> int:
        return self.bits - 1

    @property
    def qmin(self) -> int:
        return -self.frac_bits

    @property
    def grid(self) -> BinaryFormat:
        """The format rounded onto before clamping to [min_value, max_finite]: man_bits =
        bits - 2 and emin = emax keep the quantum 2**-frac_bits up to 2**(emax+1) (one more
        exponent bit reaches -2 and what rounds past the max); e.g. e2m6, bias 1, for INT8."""
        return BinaryFormat(2, self.bits - 2, 1 - self.emax, "finite")


def _element_summary(element) -> str:
    if isinstance(element, IntElement):
        return f"{element.label} (two's complement, scale 2**-{element.frac_bits})"
    return element.label


@dataclass(frozen=True)
class ScaledFormat:
    """A block-scaled format: ``element`` format, ``block`` shape (None: the whole tensor is
    one block), ``scale`` format (E8M0 or any BinaryFormat; positive values used), scale
    ``rule``, optional second-level ``tensor_scale`` format, and the options (module doc).
    ``name`` and ``source`` are labels only (not compared)."""

    element: BinaryFormat | IntElement
    block: tuple | None
    scale: BinaryFormat
    rule: str = "floor"
    tensor_scale: BinaryFormat | None = None
    rounding: str = "nearest_even"
    saturate_elements: bool = True
    pow2: bool = False
    amax: str = "current"
    margin: int = 0
    scale_saturate: bool = False
    name: str = field(default="scaled", compare=False)
    source: str = field(default=SOURCES["user"], compare=False)
    base: tuple = field(default=(), compare=False)      # option defaults of the named base

    def __post_init__(self):
        where = f"scaled format {self.name!r}"
        if not isinstance(self.element, (BinaryFormat, IntElement)):
            raise FormatError(f"{where}: element must be a format (got {self.element!r})")
        if isinstance(self.element, BinaryFormat) and (
                not self.element.fits_binary64 or self.element.precision > 51
                or self.element.qmin < -1072):
            raise FormatError(f"{where}: element format {self.element.label} is too wide "
                              f"(at most 51 significant bits, values within binary64)")
        if self.block is not None:
            block = tuple(self.block)
            if not 1 <= len(block) <= 2 or any(isinstance(k, bool) or not isinstance(k, int)
                                               or k < 1 for k in block):
                raise FormatError(f"{where}: block must be one or two positive integers "
                                  f"(got {self.block!r})")
            object.__setattr__(self, "block", block)
        for key, fmt in (("scale", self.scale), ("tensor_scale", self.tensor_scale)):
            if fmt is None and key == "tensor_scale":
                continue
            if not isinstance(fmt, BinaryFormat) or fmt.bits > 64 or not fmt.fits_binary64:
                raise FormatError(f"{where}: {key} must be a format whose values fit "
                                  f"binary64 (got {fmt!r})")
        if self.rule not in RULES:
            raise FormatError(f"{where}: rule must be one of {', '.join(RULES)} "
                              f"(got {self.rule!r})")
        if self.rounding not in ROUNDINGS:
            raise FormatError(f"{where}: rounding must be one of {', '.join(ROUNDINGS)} "
                              f"(got {self.rounding!r})")
        if self.amax not in AMAX_SOURCES:
            raise FormatError(f"{where}: amax must be current or delayed (got {self.amax!r})")
        if self.amax == "delayed" and self.block is not None:
            raise FormatError(f"{where}: delayed scaling (an amax history) needs a "
                              f"per-tensor scheme (block = the whole tensor)")
        if isinstance(self.margin, bool) or not isinstance(self.margin, int) \
                or not 0 <= self.margin <= 64:
            raise FormatError(f"{where}: margin must be an integer in [0, 64] "
                              f"(got {self.margin!r})")
        if self.pow2 and self.scale.man_bits == 0:
            raise FormatError(f"{where}: pow2: {self.scale.label} scales are powers of two "
                              f"already")
        if not self.saturate_elements and not (isinstance(self.element, BinaryFormat)
                                               and self.element.has_nan):
            raise FormatError(f"{where}: nosat: {self.element.label} elements have no inf "
                              f"or NaN, so overflow always saturates")
        if not self.scale_saturate and not (self.scale == E8M0 or self.scale.has_nan
                                            or self.scale.has_inf):
            raise FormatError(f"{where}: scale format {self.scale.label} has no NaN for an "
                              f"overflowing scale: set scale_saturate")

    # ----- what the scheme is -------------------------------------------------------------
    @property
    def label(self) -> str:
        """The name with every option that differs from the base's defaults
        (``mxfp8_e4m3:rceil``); ``formats.get`` reads it back into an equal scheme."""
        defaults = dict(self.base)
        current = self._options()
        extra = [_option_text(k, v) for k, v in current.items() if defaults.get(k) != v]
        return ":".join([self.name] + extra)

    def _options(self) -> dict:
        return {"rule": self.rule, "pow2": self.pow2, "amax": self.amax,
                "margin": self.margin, "rounding": self.rounding,
                "saturate_elements": self.saturate_elements}

    @property
    def element_max_exact(self) -> Fraction:
        return self.element.max_finite_exact

    @property
    def emax_elem(self) -> int:
        """Exponent of the element format's largest normal value (the MX spec's emax_elem)."""
        return self.element.emax

    @property
    def is_e8m0(self) -> bool:
        return self.scale == E8M0

    @property
    def powers_of_two(self) -> bool:
        """Every scale is a power of two (E8M0, pow2, or a floor/ceil rule)."""
        return self.is_e8m0 or self.pow2 or self.rule in ("floor", "ceil")

    @property
    def scale_grid(self) -> BinaryFormat:
        """The format the rceil/even rules round a / max_elem onto: the scale format; its
        powers of two (a zero-fraction format with the same least value 2**qmin) under
        ``pow2``."""
        s = self.scale
        if self.pow2:
            return BinaryFormat(s.exp_bits + 1, 0, 1 - s.qmin, "finite")
        return s

    @property
    def scale_kmin(self) -> int:
        """The least positive scale is 2**scale_kmin (2**-127 for E8M0, 2**-9 for E4M3)."""
        return self.scale.qmin

    @property
    def scale_max_exact(self) -> Fraction:
        """The largest scale: the scale format's max, or its largest power of two when
        every scale is a power of two."""
        if self.powers_of_two:
            return Fraction(2) ** self.scale.emax
        return self.scale.max_finite_exact

    @property
    def scale_min_exact(self) -> Fraction:
        return Fraction(2) ** self.scale_kmin

    @property
    def element_grid(self) -> BinaryFormat:
        """The format elements are rounded onto: the element format, saturating unless
        ``nosat``; for integer elements their grid (then clamped)."""
        if isinstance(self.element, IntElement):
            return self.element.grid
        if self.saturate_elements and not self.element.saturate:
            return dataclasses.replace(self.element, saturate=True)
        return self.element

    @property
    def bits_per_element(self) -> float | None:
        """Storage per element, scales amortized (None for a per-tensor scheme)."""
        if self.block is None:
            return None
        n = 1
        for k in self.block:
            n *= k
        return self.element.bits + self.scale_bits / n

    @property
    def scale_bits(self) -> int:
        return 8 if self.is_e8m0 else self.scale.bits

    @property
    def products_fit_binary64(self) -> bool:
        """element * scale * tensor_scale is exact in binary64 for every value: the
        significands fit 53 bits and the exponents stay within binary64's range."""
        p = self.element.precision + (1 if self.powers_of_two else self.scale.precision)
        q = self.element.qmin + self.scale_kmin
        top = self.element_max_exact * self.scale_max_exact
        if self.tensor_scale is not None:
            p += self.tensor_scale.precision
            q += self.tensor_scale.qmin
            top *= self.tensor_scale.max_finite_exact
        return p <= 53 and q >= -1074 and top < Fraction(2) ** 1024

    @property
    def block_text(self) -> str:
        return "the whole tensor" if self.block is None else " x ".join(map(str, self.block))

    def summary(self) -> str:
        """One line: element, block, scale and rule."""
        scale = "E8M0" if self.is_e8m0 else self.scale.label + (" powers of two"
                                                                if self.pow2 else "")
        if self.block is None:
            text = (f"{_element_summary(self.element)} elements, one {scale} scale per "
                    f"tensor ({self.rule}, {self.amax} amax)")
        else:
            text = (f"{_element_summary(self.element)} elements in blocks of "
                    f"{self.block_text}, {scale} scales ({self.rule})")
        if self.tensor_scale is not None:
            text += f", a {self.tensor_scale.label} tensor scale"
        return text

    def __repr__(self) -> str:
        return f"ScaledFormat({self.label}: {self.summary()})"

    def __getattr__(self, attr):
        # Only reached for names the instance lacks: an element format's attribute asked of
        # a scaled format is a caller that does not handle scaled formats yet.
        if attr in _ELEMENT_ONLY:
            raise NotAnElementFormat(
                f"{self.label} is a scaled format ({self.summary()}), not an element format "
                f"(it has no .{attr}): scaled formats are not yet supported here; use "
                f"formats.quantize, or the element format {self.element.label}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def constants(self) -> dict:
        """The scheme's facts with how each follows (for the CLI)."""
        elem = self.element
        c = {
            "element": (_element_summary(elem), "the format of each stored element"),
            "element_max": (self.element_max_exact, "largest element value"),
            "emax_elem": (self.emax_elem, "exponent of the largest element (MX's emax_elem)"),
            "block": (self.block_text, "elements sharing one scale"
                      + ("" if self.block is None else " (along the quantized axes)")),
            "scale_format": ("E8M0 (bias 127, 0xFF NaN)" if self.is_e8m0 else
                             self.scale.label + (" (powers of two)" if self.pow2 else ""),
                             "format of each block scale (positive values)"),
            "scale_rule": (self.rule, _RULE_TEXT[self.rule]),
            "scale_min": (self.scale_min_exact, "least positive scale: zero blocks get it"),
            "scale_max": (self.scale_max_exact, "largest scale: beyond it the scale is "
                          + ("saturated" if self.scale_saturate else "NaN")),
        }
        if self.tensor_scale is not None:
            c["tensor_scale"] = (self.tensor_scale.label, "amax_tensor / (scale_max * "
                                 "element_max), rounded to nearest even")
        if self.block is None:
            c["amax"] = (self.amax + (f", margin 2**{self.margin}" if self.margin else ""),
                         "current: this tensor; delayed: max of the history given")
        elif self.margin:
            c["margin"] = (self.margin, "a = amax * 2**margin before the rule")
        c["rounding"] = (self.rounding, "element rounding of the exact quotient")
        c["overflow"] = ("saturate" if self.saturate_elements else "format's own",
                         "elements beyond the max")
        if self.bits_per_element is not None:
            c["bits_per_element"] = ("%.6g" % self.bits_per_element,
                                     "element bits + scale bits / block size")
        c["source"] = (self.source, "the definition")
        return c


_RULE_TEXT = {
    "floor": "2**(floor(log2 a) - emax_elem), a = block amax (the MX spec)",
    "ceil": "2**(ceil(log2 a) - emax_elem)",
    "rceil": "a / element_max rounded up into the scale format",
    "even": "a / element_max rounded to nearest even into the scale format",
}

_ELEMENT_ONLY = frozenset(
    {n for n in dir(BinaryFormat) if not n.startswith("_")}
    | {"exp_bits", "man_bits", "bias", "encoding", "saturate", "flush_subnormals",
       "precision", "emin", "emax", "qmin", "top_significand", "bits"}
) - {"name", "label", "constants"}


def _option_text(key, value) -> str:
    if key == "pow2":
        return "pow2" if value else "nopow2"
    if key == "margin":
        return f"margin={value}"
    if key == "saturate_elements":
        return "sat" if value else "nosat"
    return str(value)


# ----- the catalog ------------------------------------------------------------------------------

def _catalog():
    e8 = E8M0
    b32 = CATALOG["binary32"]

    def entry(name, element, block, scale, rule, source, **kw):
        fmt = ScaledFormat(element, block, scale, rule, name=name, source=SOURCES[source],
                           **kw)
        return name, dataclasses.replace(fmt, base=tuple(fmt._options().items()))

    return dict([
        entry("mxfp8_e4m3", CATALOG["float8_e4m3fn"], (32,), e8, "floor", "mx"),
        entry("mxfp8_e5m2", CATALOG["float8_e5m2"], (32,), e8, "floor", "mx"),
        entry("mxfp6_e3m2", CATALOG["float6_e3m2fn"], (32,), e8, "floor", "mx"),
        entry("mxfp6_e2m3", CATALOG["float6_e2m3fn"], (32,), e8, "floor", "mx"),
        entry("mxfp4_e2m1", CATALOG["float4_e2m1fn"], (32,), e8, "floor", "mx"),
        entry("mxint8", IntElement(8, 6), (32,), e8, "floor", "mx"),
        entry("nvfp4", CATALOG["float4_e2m1fn"], (16,), CATALOG["float8_e4m3fn"], "even",
              "nvfp4", tensor_scale=b32, scale_saturate=True),
        entry("fp8_e4m3_tensor", CATALOG["float8_e4m3fn"], None, b32, "even", "tensor"),
        entry("fp8_e5m2_tensor", CATALOG["float8_e5m2"], None, b32, "even", "tensor"),
        entry("fp8_e4m3_block128", CATALOG["float8_e4m3fn"], (128,), b32, "even", "block"),
        entry("fp8_e4m3_block128x128", CATALOG["float8_e4m3fn"], (128, 128), b32, "even",
              "block"),
    ])


SCALED: dict[str, ScaledFormat] = _catalog()

_FLAGS = {"pow2": ("pow2", True), "nopow2": ("pow2", False), "sat": ("saturate_elements", True),
          "nosat": ("saturate_elements", False)}
_OPTION_HELP = ("options: floor, ceil, rceil, even, pow2, current, delayed, margin=N, "
                "nearest_even, stochastic, sat, nosat")


def is_scaled_name(text: str, known: dict | None = None) -> bool:
    """Whether ``text`` names a scaled format (catalog or ``known``), options or not."""
    base = text.split(":", 1)[0].strip()
    if known and isinstance(known.get(base), ScaledFormat):
        return True
    return base.lower() in SCALED


def parse(text: str, known: dict | None = None) -> ScaledFormat:
    """The scheme ``BASE[:OPTION]...`` (module doc); FormatError naming a bad option."""
    parts = [p.strip() for p in text.split(":")]
    base_name = parts[0]
    fmt = known[base_name] if known and isinstance(known.get(base_name), ScaledFormat) \
        else SCALED[base_name.lower()]
    changes, rule_given = {}, False
    for opt in parts[1:]:
        low = opt.lower()
        if low in RULES:
            changes["rule"], rule_given = low, True
        elif low in ROUNDINGS:
            changes["rounding"] = low
        elif low in AMAX_SOURCES:
            changes["amax"] = low
        elif low in _FLAGS:
            key, value = _FLAGS[low]
            changes[key] = value
        elif low.startswith("margin="):
            try:
                changes["margin"] = int(low.split("=", 1)[1])
            except ValueError:
                raise FormatError(f"scaled format {text!r}: margin must be an integer "
                                  f"(got {opt!r})") from None
        else:
            raise FormatError(f"scaled format {text!r}: unknown option {opt!r}; "
                              f"{_OPTION_HELP}")
    if changes.get("pow2") and not rule_given and not fmt.pow2:
        changes["rule"] = "rceil"   # the multiplier max/amax rounded down to a power of two
    try:
        return dataclasses.replace(fmt, **changes)
    except FormatError as exc:
        raise FormatError(f"scaled format {text!r}: {_reason(exc)}") from None


# ----- user-defined, from the formats TOML file ---------------------------------------------------

_TOML_KEYS = {"base", "element", "block", "scale", "rule", "tensor_scale", "rounding",
              "saturate", "pow2", "amax", "margin", "scale_saturate"}


def from_mapping(fields: dict, name: str, known: dict, path, get) -> ScaledFormat:
    """A scheme from its ``[scaled.NAME]`` table (see ``catalog.user_formats``): a ``base``
    scheme with keys overriding it, or every key from scratch (element, block, scale).
    ``get`` (``catalog.get``, which reads scaled names too, so it sits above this module)
    reads the element and scale format names."""
    where = f"formats file {path}: [scaled.{name}]"
    unknown = fields.keys() - _TOML_KEYS
    if unknown:
        raise FormatError(f"{where}: unknown key {sorted(unknown)[0]!r}; keys are "
                          f"{', '.join(sorted(_TOML_KEYS))}")
    kw = {}
    try:
        if "base" in fields:
            base = fields["base"]
            if not isinstance(base, str) or not is_scaled_name(base):
                raise FormatError(f"base must name a catalog scaled format "
                                  f"({', '.join(SCALED)}; got {base!r})")
            start = parse(base)
        else:
            missing = {"element", "block", "scale"} - fields.keys()
            if missing:
                raise FormatError(f"missing {', '.join(sorted(missing))} (or give a base)")
            start = None
        for key, value in fields.items():
            if key == "base":
                continue
            if key in ("element", "scale", "tensor_scale"):
                kw[key] = _format_value(key, value, known, get)
            elif key == "block":
                kw[key] = _block_value(value)
            elif key in ("saturate", "pow2", "scale_saturate"):
                if not isinstance(value, bool):
                    raise FormatError(f"{key} must be true or false (got {value!r})")
                kw["saturate_elements" if key == "saturate" else key] = value
            else:
                kw[key] = value
        if start is None:
            fmt = ScaledFormat(name=name, **kw)
        else:
            fmt = dataclasses.replace(start, name=name, source=SOURCES["user"], **kw)
    except FormatError as exc:
        raise FormatError(f"{where}: {_reason(exc)}") from None
    return dataclasses.replace(fmt, base=tuple(fmt._options().items()))


def _reason(exc) -> str:
    """A FormatError's message without its leading "scaled format 'NAME': "."""
    text = str(exc)
    if text.startswith("scaled format "):
        return text.split("': ", 1)[-1]
    return text


def _format_value(key, value, known, get):
    if not isinstance(value, str):
        raise FormatError(f"{key} must be a format name (got {value!r})")
    if key == "element" and value.lower() in ("int8", "mxint8"):
        return IntElement(8, 6)
    if key == "scale" and value.lower() == "e8m0":
        return E8M0
    fmt = get(value, known={k: v for k, v in known.items() if isinstance(v, BinaryFormat)})
    if not isinstance(fmt, BinaryFormat):
        raise FormatError(f"{key} must be an element format, not the scaled {value!r}")
    return fmt


def _block_value(value):
    if value == "tensor":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list) and value:
        return tuple(value)
    raise FormatError(f"block must be a positive integer, a list of one or two, or "
                      f"\"tensor\" (got {value!r})")

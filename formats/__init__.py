"""formats: what a binary floating-point format is, and rounding reals into it.

Public names (shared/ARCHITECTURE.md): ``BinaryFormat``, ``CATALOG``, ``get``, ``round_to``
(fast on float64 arrays; other real input rounded once too), ``round_exact`` (any real, any
width), ``encode``, ``decode``, ``next_up``, ``next_down``, ``ulp``, ``ordinal``,
``from_ordinal``, ``values``, the rounding ``MODES`` and the IEEE flag bits.

Scaled (block-scaled) formats: ``ScaledFormat`` (``get`` returns one for ``mxfp8_e4m3``,
``nvfp4``...), their catalog ``SCALED``, and ``quantize`` with its result ``Quantized``
(formats/scaled.py, formats/quantizer.py).
"""

from .catalog import ALIASES, get, load_formats_file, user_formats
from .codec import decode, encode, from_ordinal, next_down, next_up, ordinal, ulp, values
from .exact import Rounded, read_real, round_exact
from .fast import round_encode, round_to
from .format import CATALOG, ENCODINGS, BinaryFormat, FormatError
from .quantizer import Quantized, quantize
from .scaled import E8M0, SCALED, IntElement, NotAnElementFormat, ScaledFormat
from .modes import (DIVIDE_BY_ZERO, FLAG_NAMES, IEEE_MODES, INEXACT, INVALID, MODES, OVERFLOW,
                    UNDERFLOW, flag_names, mode_code)

__all__ = [
    "ALIASES", "CATALOG", "get", "load_formats_file", "decode", "encode", "from_ordinal",
    "next_down", "next_up", "ordinal", "ulp", "values", "Rounded", "read_real", "round_exact",
    "round_to", "round_encode", "ENCODINGS", "BinaryFormat", "FormatError", "DIVIDE_BY_ZERO", "FLAG_NAMES",
    "IEEE_MODES", "INEXACT", "INVALID", "MODES", "OVERFLOW", "UNDERFLOW", "flag_names",
    "mode_code", "user_formats", "E8M0", "SCALED", "IntElement", "NotAnElementFormat",
    "ScaledFormat", "Quantized", "quantize",
]

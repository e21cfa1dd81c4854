"""formats: what a binary floating-point format is, and rounding reals into it.

Public names (shared/ARCHITECTURE.md): ``BinaryFormat``, ``CATALOG``, ``get``, ``round_to``
(fast on float64 arrays; other real input rounded once too), ``round_exact`` (any real, any
width), ``encode``, ``decode``, ``next_up``, ``next_down``, ``ulp``, ``ordinal``,
``from_ordinal``, ``values``, the rounding ``MODES`` and the IEEE flag bits.
"""

from .catalog import ALIASES, CATALOG, get, load_formats_file, user_formats
from .codec import decode, encode, from_ordinal, next_down, next_up, ordinal, ulp, values
from .exact import Rounded, read_real, round_exact
from .fast import round_encode, round_to
from .format import ENCODINGS, BinaryFormat, FormatError
from .modes import (DIVIDE_BY_ZERO, FLAG_NAMES, IEEE_MODES, INEXACT, INVALID, MODES, OVERFLOW,
                    UNDERFLOW, flag_names, mode_code)

__all__ = [
    "ALIASES", "CATALOG", "get", "load_formats_file", "decode", "encode", "from_ordinal",
    "next_down", "next_up", "ordinal", "ulp", "values", "Rounded", "read_real", "round_exact",
    "round_to", "round_encode", "ENCODINGS", "BinaryFormat", "FormatError", "DIVIDE_BY_ZERO", "FLAG_NAMES",
    "IEEE_MODES", "INEXACT", "INVALID", "MODES", "OVERFLOW", "UNDERFLOW", "flag_names",
    "mode_code", "user_formats",
]

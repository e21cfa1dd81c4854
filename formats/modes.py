"""Rounding modes and IEEE exception flags: names, integer codes, and their checks."""

from __future__ import annotations

# Mode codes are the integers the compiled rounding routine branches on.
MODES = ("nearest_even", "nearest_away", "toward_zero", "upward", "downward", "odd", "stochastic")
NEAREST_EVEN, NEAREST_AWAY, TOWARD_ZERO, UPWARD, DOWNWARD, ODD, STOCHASTIC = range(7)
# The five modes of IEEE 754-2019 (4.3), the ones MPFR and hardware provide.
IEEE_MODES = MODES[:5]

# Flag bits, as in shared/ARCHITECTURE.md.  Underflow means tiny after rounding and inexact.
INEXACT, UNDERFLOW, OVERFLOW, DIVIDE_BY_ZERO, INVALID = 1, 2, 4, 8, 16
FLAG_NAMES = {INEXACT: "inexact", UNDERFLOW: "underflow", OVERFLOW: "overflow",
              DIVIDE_BY_ZERO: "divide_by_zero", INVALID: "invalid"}


def mode_code(mode: str) -> int:
    """The integer code of a mode name; a one-line error listing the modes otherwise."""
    try:
        return MODES.index(mode)
    except ValueError:
        raise ValueError(f"rounding mode must be one of {', '.join(MODES)} (got {mode!r})") from None


def flag_names(flags: int) -> list[str]:
    """The names of the flags set in ``flags``, lowest bit first."""
    return [name for bit, name in FLAG_NAMES.items() if flags & bit]

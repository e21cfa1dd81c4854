"""numerics: arithmetic backends that route rules run on (reference, exact, emulated,
native), accumulation policies, error metrics and standard-model bounds."""

from .backend import CAPABILITIES, Backend, CapabilityError
from .emulated import EmulatedBackend, emulated
from .native import NativeBackend, native
from .policy import PRESETS, Policy, preset

__all__ = ["CAPABILITIES", "Backend", "CapabilityError", "EmulatedBackend", "emulated", "NativeBackend",
           "native",
           "PRESETS", "Policy", "preset"]

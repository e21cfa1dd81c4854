"""numerics: arithmetic backends that route rules run on (reference, double-double, exact,
emulated, native), accumulation policies, error metrics and standard-model bounds."""

from .backend import CAPABILITIES, Backend, CapabilityError
from .bounding import BoundingBackend, bounding
from .double_double import DoubleDoubleBackend, double_double
from .emulated import EmulatedBackend, emulated
from .exact import ExactBackend, ExactnessError, exact
from .native import NativeBackend, native
from .policy import PRESETS, Policy, preset
from .reference import ReferenceBackend, reference
from .resolve import Resolution, Settled, resolve, settle
from .tensor_cores import Datapath, TensorCore, tensor_core

__all__ = ["CAPABILITIES", "Backend", "CapabilityError", "DoubleDoubleBackend", "double_double",
           "EmulatedBackend", "emulated",
           "ExactBackend", "ExactnessError", "exact", "NativeBackend", "native", "PRESETS",
           "Policy", "preset", "ReferenceBackend", "reference", "resolve", "Resolution",
           "settle", "Settled", "Datapath", "TensorCore", "tensor_core"]

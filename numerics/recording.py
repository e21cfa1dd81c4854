"""A backend that records which primitives a rule calls: numerics.emulated, with every
elementwise primitive's name noted as it is applied (reductions, dot products and matmul
included: the base class builds them from the primitives).  What a rule computes is the
emulated backend's; ``seen`` is the set of primitive names, ``trace`` their sequence.

The CUDA kernels reproduce their rules primitive by primitive, so the trace of a rule is
the kernel's list of primitives: its contract (kernels/contract.py) is computed from it.
"""

from __future__ import annotations

from .emulated import EmulatedBackend


class RecordingBackend(EmulatedBackend):
    """numerics.emulated under ``fmt``, ``mode`` and ``policy``, recording primitive names."""

    def __init__(self, fmt, mode="nearest_even", policy=None, seed=0):
        super().__init__(fmt, mode, policy, seed)
        self.trace = []

    @property
    def seen(self) -> frozenset:
        return frozenset(self.trace)

    def _apply(self, name, *arrays, with_flags=False):
        self.trace.append(name)
        return super()._apply(name, *arrays, with_flags=with_flags)


def recording(fmt, mode="nearest_even", policy=None, seed=0) -> RecordingBackend:
    return RecordingBackend(fmt, mode, policy, seed)

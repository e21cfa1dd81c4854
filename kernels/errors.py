"""KernelError: why a kernel cannot run here (one line, no traceback for the user)."""

from __future__ import annotations


class KernelError(RuntimeError):
    """A kernel request that cannot be served: no device, an operator or attributes without
    a kernel, a format or mode outside the kernels' range.  The message is one line."""

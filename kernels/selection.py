"""Device selection: a real CUDA GPU, the numba CUDA simulator, or a one-line refusal.

numba decides once, when ``numba.cuda`` is first imported, whether it is the real target or
the simulator (``NUMBA_ENABLE_CUDASIM=1`` read into ``numba.config.ENABLE_CUDASIM`` when
numba is imported).  So the variable must be in the environment before numba is imported:
set after the fact it would be ignored, and this module says so instead of silently running
on the wrong target.  The simulator runs kernels as Python threads over numpy scalars
(about 1,000-4,000 elements per second): a correctness check on tiny inputs, never a
measurement of GPU accuracy.
"""

from __future__ import annotations

import os

from numba import cuda
from numba.core import config

from .errors import KernelError

SIMULATOR = "simulator"

_HOW = ("set NUMBA_ENABLE_CUDASIM=1 in the environment before Python starts to run the "
        "kernels in numba's CUDA simulator (tiny inputs only)")


def simulated() -> bool:
    """Whether numba runs CUDA kernels in its simulator in this process; KernelError when the
    environment asks for the simulator but numba was imported without it."""
    wanted = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    if config.ENABLE_CUDASIM:
        return True
    if wanted:
        raise KernelError("kernels: NUMBA_ENABLE_CUDASIM=1 was set after numba was imported, "
                          "so numba uses the real CUDA target; set it before Python starts")
    return False


def device() -> str:
    """``"cuda:<name>"`` on a real GPU, ``"simulator"`` under NUMBA_ENABLE_CUDASIM=1, else
    KernelError with a one-line message saying neither can run and how to enable the
    simulator."""
    if simulated():
        return SIMULATOR
    try:
        available = cuda.is_available()
    except Exception:                                     # noqa: BLE001 (a broken driver)
        available = False
    if not available:
        raise KernelError(f"kernels: no CUDA GPU is available and the CUDA simulator is off; "
                          f"{_HOW}")
    name = cuda.get_current_device().name
    if isinstance(name, bytes):
        name = name.decode()
    return f"cuda:{name}"

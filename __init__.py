"""roundoff_coverage: a roundoff and numerics analysis workbench.

The one import package of the distribution ``roundoff-coverage``; its subpackages are the
layers of shared/ARCHITECTURE.md, each imported on demand (numba compiles nothing until a
subpackage that needs it is used)::

    from roundoff_coverage import formats, numerics, routes, reports

``formats`` (binary formats, rounding, bits) <- ``numerics`` (backends, policies, metrics)
<- ``routes`` (the operator table) <- ``kernels`` (CUDA kernels under measurement) <-
``engine`` (the measurement engine: runs, samples, references, implementations, the results
file) <- ``reports`` (summaries, HTML reports, the gate, the command line).
"""

__version__ = "0.1.0"

__all__ = ["formats", "numerics", "routes", "kernels", "engine", "reports"]

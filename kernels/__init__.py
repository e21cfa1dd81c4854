"""kernels: numba CUDA kernels keyed by operator, their contracts, device selection, and
custom-operation programs compiled to CUDA.

Public names:

- ``of_op(op) -> Kernel | None`` (op a routes Op or an operator name), ``names()``;
- ``Kernel`` (name, kind, ``contract``, ``routes``, ``claim(route, fmt, mode)``, its test
  instances ``tests``: kernels.base.Instance) and
  ``Contract`` (reduction ``order``, ``fma``, ``ftz``, ``policy``, claimed maximum ulp error
  and agreement with numerics.emulated per route, format and mode: kernels.contract);
- ``device() -> "cuda:<name>" | "simulator"`` (KernelError, one line, where neither runs);
- ``run(op, inputs, fmt, mode="nearest_even", route="forward", cotangents=None)
  -> (outputs, device)``: callable from a worker process per task (plain arguments,
  kernels compiled once per process);
- ``run_program(program, inputs, shape, device="cpu", fmt, mode) -> Result`` (kernels.custom):
  a routes.custom program on the CPU evaluator or as a CUDA kernel generated from it;
- ``KernelError``.

Modules, one concept each: ``selection`` (the device), ``primitives`` (the device primitives of
the three precision flavours: binary64, binary32, emulated through formats.kernel's rounding
routine compiled with ``cuda.jit(device=True)``), ``contract``, ``base`` (Kernel, the launch
Context), ``table`` (the kernel table, collected from the kernel modules), ``launch`` (run),
the kernel modules -- ``elementwise`` (arithmetic, transcendental, extrema, activations),
``rows`` (reduce, mean, softmax, logSoftmax), ``products`` (matmul, scaledMatmul, linear),
``movement`` (gather, scatter, indexAt, slice, reshape, permute, broadcast, cat, detach),
``norms`` (layerNorm, batchNorm, batchNormRunning), ``attention`` (attentionFromScores,
multiheadAttention), ``losses`` (mseLoss, huberLoss, crossEntropy, distill), ``draws``
(dropout, topKMask, bernoulliMask, randUniform), ``conv`` (conv, convTranspose, pool,
smoothMaxPool), ``spectral`` (rfft, irfft, selectiveScan) -- then ``custom`` (programs) and
``gpu_check`` (the script that measures every kernel on a real GPU).

Every operator with a CUDA entry in the spec (shared/spec/operators.tsv) has a kernel with a
forward route (at the attributes ``Kernel.accepts``; attention at every attribute, empty
extents included, scatter in modes replace, max, min, integer elements nowhere), and a gradient route for every one
with a value input but scatter (topKMask, bernoulliMask and randUniform have none).
Formats: binary64 (nearest even), binary32, and every format of at most 25 bits
of precision whose products and quotients stay inside binary64's normal range (bfloat16,
binary16, tf32, the float8/6/4 formats...), in every deterministic rounding mode.

Not implemented: stochastic rounding on the device; implementation-defined (parallel,
blocked) reduction orders and FMA-contracted variants (every kernel reproduces the strict
policy: sequential order, no FMA); forward-mode (tangent) kernels, which the CUDA tape does
not have.  ``python -m roundoff_coverage.kernels.gpu_check`` has not yet run on a GPU.
"""

from . import custom
from .base import Kernel
from .contract import Claim, Contract
from .selection import device
from .errors import KernelError
from .launch import run
from .table import names, of_op

run_program = custom.run

__all__ = ["Claim", "Contract", "Kernel", "KernelError", "device", "names", "of_op", "run",
           "run_program"]

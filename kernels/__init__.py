"""kernels: numba CUDA kernels keyed by operator, their contracts, device selection.

Public names:

- ``of_op(op) -> Kernel | None`` (op a routes Op or an operator name), ``names()``;
- ``Kernel`` (name, kind, ``contract``, ``routes``, ``claim(route, fmt, mode)``) and
  ``Contract`` (reduction ``order``, ``fma``, ``ftz``, ``policy``, claimed maximum ulp error
  and agreement with numerics.emulated per route, format and mode: kernels.contract);
- ``device() -> "cuda:<name>" | "simulator"`` (KernelError, one line, where neither runs);
- ``run(op, inputs, fmt, mode="nearest_even", route="forward", cotangents=None)
  -> (outputs, device)``: callable from a worker process per task (plain arguments,
  kernels compiled once per process);
- ``KernelError``.

Modules, one concept each: ``selection`` (the device), ``primitives`` (the device primitives of
the three precision flavours: binary64, binary32, emulated through formats.kernel's rounding
routine compiled with ``cuda.jit(device=True)``), ``contract``, ``elementwise``, ``rows``
(reduce, softmax), ``products`` (matmul), ``table`` (the kernel table), ``launch`` (run),
``gpu_check`` (the script that measures every kernel on a real GPU).

What exists (issue 8, phase 1): forward kernels of add, sub, mul (scalar element), div
(rounding_mode none), neg, abs, sqrt, reciprocal, scale, safeLog, exp, log, sin, cos, tanh,
max, min, clamp, relu, sigmoid, silu, reduce (sum, prod, max, min over any axes), softmax,
logSoftmax, matmul and scaledMatmul; gradient kernels of every elementwise one but safeLog.
Formats: binary64 (nearest even), binary32, and every format of at most 25 bits of precision
whose products and quotients stay inside binary64's normal range (bfloat16, binary16, tf32,
the float8/6/4 formats...), in every deterministic rounding mode.

Still missing from issue 8:
- kernels of the other operators with a CUDA entry (shared/spec/operators.tsv):
  gelu, softplus, gather, scatter, indexAt, slice, reshape, permute, broadcast, cat, mean,
  linear, conv, convTranspose, pool, smoothMaxPool, layerNorm, batchNorm, batchNormRunning,
  attentionFromScores, multiheadAttention, mseLoss, huberLoss, crossEntropy, distill,
  dropout, topKMask, bernoulliMask, randUniform, rfft, irfft, selectiveScan, detach; and the
  gradient routes of matmul, linear, softmax, layerNorm, crossEntropy;
- stochastic rounding on the device; implementation-defined (parallel, blocked) reduction
  orders and FMA-contracted variants;
- the coverage run's ``--implementations cuda`` (reports/ calls ``run`` per task and records
  ``device`` in every row);
- custom-operation programs on the GPU (spec/custom-operations.txt: a CUDA kernel generated
  from a program, checked bit for bit against the CPU evaluator);
- a measurement on a real GPU: ``python -m kernels.gpu_check`` has not run on one yet.
"""

from .contract import Claim, Contract
from .selection import device
from .errors import KernelError
from .launch import run
from .table import Kernel, names, of_op

__all__ = ["Claim", "Contract", "Kernel", "KernelError", "device", "names", "of_op", "run"]

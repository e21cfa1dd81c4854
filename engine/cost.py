"""What running a graph's nodes in a format costs: a stated roofline model (issue 39, the
precision advisor weighs error against it).

A node's cost is the time an H100 SXM would take at its peak rates, the memory traffic and
the products added (never overlapped: a conservative sum):

    seconds = bytes / BANDWIDTH + 2 * multiply_adds / FLOPS[width]

- bytes: the node's float arguments read and its value outputs written, every element at
  the storage width of the node's format (binary32 4 bytes, bfloat16 2, an 8-bit format 1,
  a 4-bit one 0.5);
- multiply-adds of a product (routes' Op.product_operands): the output's elements times the
  contraction length (module ``multiply_adds``); other nodes add none;
- FLOPS by width: NVIDIA's H100 SXM5 datasheet, dense (the datasheet's tensor-core figures
  are with 2:4 sparsity, twice the dense ones): FP32 on the CUDA cores 67 TFLOPS (keeping a
  node in binary32 means binary32 arithmetic, not TF32), 16-bit tensor cores 989.5, 8-bit
  989.5 x 2 = 1979; narrower elements are counted at the 8-bit rate (Hopper has no FP4
  path); memory 3.35 TB/s.
- gradients (``backward=True``): a backward pass reads and writes about twice what the
  forward does and computes twice its products (the input and the weight gradients), so the
  forward cost is multiplied by 3.

The figures rank assignments; they are not a prediction of a kernel's time (fusion, launch
overheads and the format conversions themselves are not modelled).
"""

from __future__ import annotations

import math

BANDWIDTH = 3.35e12                     # bytes per second, H100 SXM5 HBM3
FLOPS = ((17, 67e12), (9, 989.5e12), (0, 1979e12))   # (least storage bits, FLOPS), widest first
BACKWARD_FACTOR = 3


def flops(bits: int) -> float:
    """Peak dense FLOPS of the model's device for products of ``bits``-wide elements."""
    return next(rate for least, rate in FLOPS if bits >= least)


def multiply_adds(op) -> int:
    """Multiply-adds of one product node ``op`` (0 for any other): output elements times
    the contraction length -- the first product operand's contraction axis (matmul, linear,
    contract), the weight's elements per output channel (conv), the keys per query twice
    (attention: scores and the weighted sum of values)."""
    operands = op.product_operands
    if not operands:
        return 0
    shapes = dict(zip(op.input_names, (tuple(p.shape) for p in op.inputs)))
    out = sum(math.prod(p.shape) for p in op.outputs if p.kind == "value")
    name = op.name
    if name in ("conv", "convTranspose"):
        w = shapes["weight"]
        per = math.prod(w) // max(1, w[0])
        # a transposed convolution scatters each input element to per outputs
        return (math.prod(shapes["x"]) if name == "convTranspose" else out) * per
    if name in ("attention", "multiheadAttention"):
        keys = shapes["k"][-2] if len(shapes["k"]) >= 2 else 1
        return 2 * math.prod(shapes["q"]) * keys
    first, axis = next(iter(operands.items()))
    shape = shapes[first]
    return out * (shape[axis] if shape else 1)


def node_seconds(op, bits: int, backward: bool = False) -> float:
    """The model's time for node ``op`` computing in a format of ``bits`` storage bits."""
    elements = sum(math.prod(p.shape) for p in op.inputs if p.kind in ("value", "frozen"))
    elements += sum(math.prod(p.shape) for p in op.outputs if p.kind == "value")
    t = elements * bits / 8 / BANDWIDTH + 2 * multiply_adds(op) / flops(bits)
    return t * (BACKWARD_FACTOR if backward else 1)

"""Accumulation policies: where values are stored, computed and accumulated, in what order
reductions run, and whether products are fused.

In low precision the order *is* the numerics: a sequential sum of n terms has the error
bound gamma_(n-1) sum|x_i|, a pairwise one gamma_ceil(log2 n) sum|x_i| (Higham 2002, 4.2),
and a blocked one (blocks of K summed sequentially, then the block sums sequentially)
gamma_(K - 1 + ceil(n/K) - 1) sum|x_i| (Blanchard, Higham, Mary 2020).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roundoff_coverage import formats

from .tensor_cores import tensor_core

ORDERS = ("sequential", "pairwise", "blocked:K", "split:S")
_BLOCKED = re.compile(r"^(blocked|split):(\d+)$")


@dataclass(frozen=True)
class Policy:
    """storage: format of stored values (inputs, outputs of every primitive).
    compute: format elementwise primitives round into before storing (None: storage).
    accumulate: format of the running sums of reductions, dot and matmul (None: storage);
    a reduction's result is rounded once more into storage.
    order: ``sequential``, ``pairwise``, ``blocked:K`` or ``split:S`` (split-k: the n terms
    in S contiguous chunks of ceil(n/S), each summed sequentially, then the chunk sums).
    fma: products in dot/matmul are fused with the accumulation (one rounding per term).

    How accelerators accumulate dot products and matmul (sequential order only):
    inner, promote: two-level accumulation -- runs of ``promote`` products accumulated in
    the narrow format ``inner``, each run then added into the ``accumulate`` format
    (CUTLASS's two-level accumulation for FP8 on Hopper; DeepGEMM promotes every 128
    along k: DeepSeek-V3 technical report, 2024, sec. 3.3.2).
    fixed_point, block: each block of ``block`` products, together with the running sum,
    aligned to the largest exponent among them, every term truncated (toward zero) to
    ``fixed_point`` fraction bits below it, the truncated terms summed exactly and rounded
    once into ``accumulate`` (the DeepSeek-V3 report measures FP8 tensor cores keeping about
    14 bits this way; the alignment-and-truncation model of NVIDIA tensor cores: Fasi,
    Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021).
    tensor_core: a GPU's matrix unit (numerics.tensor_cores.PRESETS) computes the products,
    bit for bit as that GPU's block FMAs do (``tc:NAME``); its binary32 results are stored
    in the storage format.
    """

    storage: formats.BinaryFormat
    compute: formats.BinaryFormat | None = None
    accumulate: formats.BinaryFormat | None = None
    order: str = "sequential"
    fma: bool = False
    name: str | None = None
    inner: formats.BinaryFormat | None = None
    promote: int | None = None
    fixed_point: int | None = None
    block: int = 32
    tensor_core: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "storage", formats.get(self.storage))
        for key in ("compute", "accumulate"):
            value = getattr(self, key)
            object.__setattr__(self, key, formats.get(value) if value is not None
                               else self.storage)
        block_size(self.order, 1)      # validates
        if self.fma and self.order == "pairwise":
            raise ValueError("policy: fma fuses a product into a running sum; the pairwise "
                             "order has none (use sequential or blocked:K)")
        if (self.inner is None) != (self.promote is None):
            raise ValueError("policy: two-level accumulation needs both inner (the narrow "
                             "format) and promote (products per run)")
        if self.inner is not None:
            object.__setattr__(self, "inner", formats.get(self.inner))
            _positive(self.promote, "promote (products per run)")
        if self.fixed_point is not None:
            _positive(self.fixed_point, "fixed_point (fraction bits)")
            _positive(self.block, "block (products per alignment)")
            if self.fixed_point > 40 or self.block > 4096:
                raise ValueError(f"policy: fixed_point keeps at most 40 bits over blocks of "
                                 f"at most 4096 products, so that a block's sum is exact in "
                                 f"binary64 (got {self.fixed_point} bits, {self.block})")
            if self.inner is not None or self.fma:
                raise ValueError("policy: fixed_point alignment is its own accumulation: "
                                 "not with fma or two-level (inner, promote)")
        if self.tensor_core is not None:
            tensor_core(self.tensor_core)       # validates the name
            if self.inner is not None or self.fixed_point is not None or self.fma:
                raise ValueError("policy: a tensor core's block FMAs are their own "
                                 "accumulation: not with fma, promote or fixed_point")
        if self.hardware and self.order != "sequential":
            raise ValueError(f"policy: hardware accumulation (promote, fixed_point, tc) runs in "
                             f"sequential order (got {self.order})")

    @property
    def hardware(self) -> bool:
        """Whether products accumulate as an accelerator does (promote, fixed_point or a
        tensor core)."""
        return self.inner is not None or self.fixed_point is not None or \
            self.tensor_core is not None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.storage.label]
        if self.accumulate != self.storage:
            parts.append(f"acc={self.accumulate.label}")
        if self.compute != self.storage:
            parts.append(f"compute={self.compute.label}")
        parts.append(self.order)
        if self.fma:
            parts.append("fma")
        return ",".join(parts)


def block_size(order: str, n: int) -> int | None:
    """K of ``blocked:K``, ceil(n/S) of ``split:S`` for n terms; None for sequential and
    pairwise; ValueError for anything else."""
    if order in ("sequential", "pairwise"):
        return None
    m = _BLOCKED.match(order)
    if not m or int(m.group(2)) < 1:
        raise ValueError(f"reduction order must be sequential, pairwise, blocked:K or split:S "
                         f"with K, S >= 1 (got {order!r})")
    k = int(m.group(2))
    return k if m.group(1) == "blocked" else max(1, -(-int(n) // k))


def _positive(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"policy: {what} must be a positive integer (got {v!r})")


PRESETS = ("strict", "fp32_accumulate", "fp32_accumulate_fma", "pairwise", "blocked32",
           "scaled_recipe", "fp8_recipe")
# Policies with parameters, NAME:ARG[:ARG]: how accelerators accumulate (see Policy).
PARAMETRIZED = ("tc:GPU", "fixed_point:B[:K]", "promote:K[:FORMAT]", "acc:FORMAT", "split_k:S", "tree",
                "compute:FORMAT")


def preset(name: str, storage) -> Policy:
    """A named policy for a storage format.

    strict: everything in the storage format, sequential order, no FMA.
    fp32_accumulate: low-precision storage, binary32 accumulation (tensor cores).
    fp32_accumulate_fma: the same with fused multiply-adds (an FMA chain).
    pairwise / blocked32: storage-format accumulation in pairwise / blocks-of-32 order.
    tc:GPU: the products of matmul, linear, convolutions and attention as that GPU's tensor
    cores compute them (numerics.tensor_cores: v100, a100, a2, a30, ada, l40s, h100, h200,
    b200), operands in the storage format (binary32 operands read as tf32), results in
    binary32; everything else accumulates in binary32.
    fixed_point:B[:K]: blocks of K (32) products aligned and truncated to B bits, summed
    exactly, rounded into binary32 (Policy.fixed_point).
    promote:K[:FORMAT]: runs of K products in FORMAT (e8m13, "fp22"), each added into a
    binary32 accumulator (Policy.promote).
    acc:FORMAT: accumulation in FORMAT (a narrow accumulator: acc:e8m13).
    compute:FORMAT: every primitive computes and accumulates in FORMAT, its results stored
    in the storage format (``compute_format``: a scaled format's compute format).
    split_k:S: binary32 accumulation in S contiguous chunks, then their sums (split-k).
    tree: binary32 accumulation in pairwise order (a reduction tree).
    scaled_recipe, fp8_recipe: the recipes (``Recipe``): binary32 accumulation, as
    fp32_accumulate; what they quantize, and where, is ``recipe``'s to say.
    """
    storage = formats.get(storage)
    if name == "strict":
        return Policy(storage, name="strict")
    if name == "fp32_accumulate":
        return Policy(storage, accumulate="binary32", name="fp32_accumulate")
    if name == "fp32_accumulate_fma":
        return Policy(storage, accumulate="binary32", fma=True, name="fp32_accumulate_fma")
    if name == "pairwise":
        return Policy(storage, order="pairwise", name="pairwise")
    if name == "blocked32":
        return Policy(storage, order="blocked:32", name="blocked32")
    if name == "tree":
        return Policy(storage, accumulate="binary32", order="pairwise", name="tree")
    if name in RECIPES:
        return Policy(storage, accumulate=RECIPES[name].accumulate, name=name)
    head, _, rest = name.partition(":")
    args = rest.split(":") if rest else []
    try:
        if head == "tc" and len(args) == 1:
            return Policy(storage, accumulate="binary32", tensor_core=args[0].lower(),
                          name=name)
        if head == "fixed_point" and 1 <= len(args) <= 2:
            return Policy(storage, accumulate="binary32", fixed_point=_int(args[0]),
                          block=_int(args[1]) if len(args) == 2 else 32, name=name)
        if head == "promote" and 1 <= len(args) <= 2:
            return Policy(storage, accumulate="binary32", promote=_int(args[0]),
                          inner=args[1] if len(args) == 2 else "e8m13", name=name)
        if head == "acc" and len(args) == 1:
            return Policy(storage, accumulate=args[0], name=name)
        if head == "compute" and len(args) == 1:
            return Policy(storage, compute=args[0], accumulate=args[0], name=name)
        if head == "split_k" and len(args) == 1:
            return Policy(storage, accumulate="binary32", order=f"split:{_int(args[0])}",
                          name=name)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"policy {name!r}: {str(exc).splitlines()[0]}") from None
    raise ValueError(f"unknown policy {name!r}; presets are {', '.join(PRESETS)}, and "
                     f"{', '.join(PARAMETRIZED)}")


def compute_format(name: str) -> str | None:
    """FORMAT of a ``compute:FORMAT`` policy name, None for every other policy."""
    head, _, rest = str(name).partition(":")
    return rest if head == "compute" and rest and ":" not in rest else None


def _int(text):
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


@dataclass(frozen=True)
class Recipe:
    """A scaled-format recipe for the products, as low-precision training and inference
    apply one: the operands of each product (matmul, linear, conv, contract, attention)
    quantized into the scaled format the task names, the
    product accumulated in ``accumulate``, its outputs -- and every tensor outside the
    products -- stored in ``storage``.  ``forward`` and ``gradient``: the element formats of
    the forward operands (and tangents) and of the gradient operands (the cotangents the
    backward products read), each quantized with the blocking and scale rule of the scaled
    format the task names; None keeps that format's own element.  ``preset`` gives the policy
    of the storage format (accumulation in ``accumulate``)."""

    name: str
    forward: str | None
    gradient: str | None
    doc: str
    storage: str = "bfloat16"
    accumulate: str = "binary32"


# Both store in bfloat16 and accumulate in binary32, as FP8 and MX training does
# (Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433, sec. 3: the GEMM
# inputs in FP8, its outputs in higher precision; TransformerEngine casts only the inputs of
# its GEMMs (Linear, LayerNormLinear, attention) and writes their outputs in bfloat16;
# Rouhani et al., "Microscaling Data Formats for Deep Learning", arXiv:2310.10537: MX for
# the operands of the matrix multiplications, the vector operations in bfloat16 or FP32).
# fp8_recipe: E4M3 forward operands (more precision: 4 significant bits, max 448), E5M2
# gradient operands (more range: max 57344, down to 2**-16): TransformerEngine's
# Format.HYBRID; with fp8_e4m3_tensor its Float8CurrentScaling, with mxfp8_e4m3 its
# MXFP8BlockScaling.
RECIPES = {
    "scaled_recipe": Recipe("scaled_recipe", None, None,
                            "products' operands in the scaled format, binary32 "
                            "accumulation, bfloat16 storage"),
    "fp8_recipe": Recipe("fp8_recipe", "float8_e4m3fn", "float8_e5m2",
                         "products' operands in E4M3 forward and E5M2 for gradients, "
                         "binary32 accumulation, bfloat16 storage"),
}


def recipe(name: str) -> Recipe | None:
    """The recipe a policy name stands for (RECIPES), or None for other policies."""
    return RECIPES.get(name)


def is_name(name: str) -> bool:
    """Whether ``name`` names a policy preset() makes (for any storage format)."""
    try:
        preset(name, "bfloat16")
    except ValueError:
        return False
    return True


def for_backend(policy, fmt, who: str) -> Policy:
    """A backend's policy: None (strict), a preset name, or a Policy whose storage format is
    ``fmt``; ValueError naming the backend ``who`` otherwise."""
    if policy is None:
        policy = preset("strict", fmt)
    elif isinstance(policy, str):
        policy = preset(policy, fmt)
    if not isinstance(policy, Policy) or policy.storage != fmt:
        raise ValueError(f"{who}: the policy's storage format must be {fmt.label} "
                         f"(got {getattr(policy, 'label', policy)!r})")
    return policy

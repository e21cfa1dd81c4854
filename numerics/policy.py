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

ORDERS = ("sequential", "pairwise", "blocked:K")
_BLOCKED = re.compile(r"^blocked:(\d+)$")


@dataclass(frozen=True)
class Policy:
    """storage: format of stored values (inputs, outputs of every primitive).
    compute: format elementwise primitives round into before storing (None: storage).
    accumulate: format of the running sums of reductions, dot and matmul (None: storage);
    a reduction's result is rounded once more into storage.
    order: ``sequential``, ``pairwise`` or ``blocked:K``.
    fma: products in dot/matmul are fused with the accumulation (one rounding per term)."""

    storage: formats.BinaryFormat
    compute: formats.BinaryFormat | None = None
    accumulate: formats.BinaryFormat | None = None
    order: str = "sequential"
    fma: bool = False
    name: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "storage", formats.get(self.storage))
        for key in ("compute", "accumulate"):
            value = getattr(self, key)
            object.__setattr__(self, key, formats.get(value) if value is not None
                               else self.storage)
        block_size(self.order)      # validates
        if self.fma and self.order == "pairwise":
            raise ValueError("policy: fma fuses a product into a running sum; the pairwise "
                             "order has none (use sequential or blocked:K)")

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


def block_size(order: str) -> int | None:
    """K of ``blocked:K``; None for sequential and pairwise; ValueError for anything else."""
    if order in ("sequential", "pairwise"):
        return None
    m = _BLOCKED.match(order)
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"reduction order must be sequential, pairwise or blocked:K with K >= 1 "
                         f"(got {order!r})")
    return int(m.group(1))


PRESETS = ("strict", "fp32_accumulate", "fp32_accumulate_fma", "pairwise", "blocked32")


def preset(name: str, storage) -> Policy:
    """A named policy for a storage format.

    strict: everything in the storage format, sequential order, no FMA.
    fp32_accumulate: low-precision storage, binary32 accumulation (tensor cores).
    fp32_accumulate_fma: the same with fused multiply-adds.
    pairwise / blocked32: storage-format accumulation in pairwise / blocks-of-32 order.
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
    raise ValueError(f"unknown policy {name!r}; presets are {', '.join(PRESETS)}")


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

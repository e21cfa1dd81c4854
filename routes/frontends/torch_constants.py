"""The constants the PyTorch capture makes (routes.frontends.torch): ``Const``, a tensor the
capture holds (a buffer, a folded node, a created table), and ``Constants``, the capture's
methods that build them with torch for the aten table's entries -- zeros and ones, empty
pieces, tables of positions (torch's own indexing of a table of flat positions), linear
interpolation weights, int64 words and flat offsets, padding and causal masks, fills.
Each Const is named after the node being translated (``self.node.name``)."""

from __future__ import annotations

import numpy as np


class Const:
    """A tensor the capture holds as a constant (a buffer, a folded node); ``name`` labels
    its graph constant."""

    def __init__(self, tensor, name=""):
        self.tensor, self.name = tensor, name
        self.refs = {}                         # port -> Ref, once materialized


class Constants:
    """Constant makers of the capture (a mixin of its _Capture: ``self.torch``,
    ``self.node``, ``self.out_shape``, ``self.out_dtype`` and ``self.refuse`` are the
    capture's)."""

    def zeros(self, shape) -> Const:
        return Const(self.torch.zeros(shape, dtype=self.torch.float64), f"{self.node.name}.zeros")

    def ones(self, shape) -> Const:
        return Const(self.torch.ones(shape, dtype=self.torch.float64), f"{self.node.name}.ones")

    def empty(self, shape, dtype) -> Const:
        """A constant with no entries (a piece of extent 0)."""
        return Const(self.torch.empty(tuple(shape), dtype=dtype or self.torch.float64),
                     f"{self.node.name}.empty")

    def positions(self, shape, indices):
        """The flat positions ``arange(prod(shape)).reshape(shape)[indices]`` selects, by
        torch's own indexing (None keeps an axis whole), as a Const."""
        t = self.torch
        table = t.arange(int(np.prod(shape, dtype=np.int64)), dtype=t.int64).reshape(shape)
        with t.no_grad():
            picked = t.ops.aten.index.Tensor(table, [None if i is None else i.tensor
                                                     for i in indices])
        return Const(picked, f"{self.node.name}.positions")

    def interpolation(self, n, m, align_corners, scale) -> Const:
        """The (m, n) weights of PyTorch's linear interpolation of n entries to m (its
        upsample_linear1d, which every linear mode shares per axis, run in float64 on the
        identity: source positions, clamping and ``align_corners`` as PyTorch computes
        them; ``scale`` the user's scale factor, which PyTorch reads when given)."""
        t = self.torch
        eye = t.eye(n, dtype=t.float64).reshape(n, 1, n)
        with t.no_grad():
            y = t.ops.aten.upsample_linear1d.vec(eye, None if scale else [m], align_corners,
                                                 [scale] if scale else None)
        if y.shape[-1] != m:
            self.refuse(f"interpolation of {n} entries by {scale} gives {y.shape[-1]}, "
                        f"not the {m} the program records")
        return Const(y[:, 0, :].T.contiguous(), f"{self.node.name}.weights")

    def integers(self, v, shape=None) -> Const:
        """An int64 constant: a Python integer or Boolean, or an integer or Boolean Const
        (broadcast to ``shape`` when given)."""
        t = self.torch
        if isinstance(v, Const):
            if v.tensor.is_floating_point():
                self.refuse(f"constant {v.name} holds numbers where integers are read")
            tensor, name = v.tensor.to(t.int64), v.name
        elif isinstance(v, (bool, int)):
            tensor, name = t.tensor(int(v), dtype=t.int64), f"{self.node.name}.integer"
        else:
            self.refuse(f"{v!r} read as an integer is not translated")
        return Const(tensor if shape is None else tensor.expand(tuple(shape)), name)

    def offsets(self, shape, strides, skip) -> Const:
        """int64 words of ``shape``: sum over the axes but ``skip`` of coordinate x stride
        (the flat offset of an entry, its coordinate along ``skip`` left out)."""
        t = self.torch
        out = t.zeros(tuple(shape), dtype=t.int64)
        for d, n in enumerate(shape):
            if d != skip:
                view = [1] * len(shape)
                view[d] = n
                out = out + t.arange(n, dtype=t.int64).reshape(view) * int(strides[d])
        return Const(out, f"{self.node.name}.offsets")

    def inside_mask(self, shape, before, after) -> Const:
        """Booleans of the padded shape: True on the entries of the operand (shape)."""
        out = tuple(n + b + e for n, b, e in zip(shape, before, after))
        mask = self.torch.zeros(out, dtype=self.torch.bool)
        mask[tuple(slice(b, b + n) for b, n in zip(before, shape))] = True
        return Const(mask, f"{self.node.name}.inside")

    def padding_rows(self, num, dim, row) -> Const:
        """Booleans (num, dim): True on row ``row`` (an embedding's padding row)."""
        rows = self.torch.zeros(num, dim, dtype=self.torch.bool)
        rows[row] = True
        return Const(rows, f"{self.node.name}.padding")

    def full(self, value) -> Const:
        """A constant of the node's shape and dtype filled with ``value``."""
        return Const(self.torch.full(self.out_shape, value, dtype=self.out_dtype),
                     self.node.name)

    def causal(self, queries, keys) -> Const:
        """The causal mask (queries, keys): True where key <= query (PyTorch's is_causal,
        the lower triangle)."""
        ones = self.torch.ones(queries, keys, dtype=self.torch.bool)
        return Const(ones.tril(), f"{self.node.name}.causal")

    def bag_matrix(self, starts, ends, n) -> Const:
        """(bags, n) float64: 1 where entry j lies in bag b (starts[b] <= j < ends[b])."""
        t = self.torch
        member = t.zeros(len(starts), n, dtype=t.float64)
        for b, (lo, hi) in enumerate(zip(starts, ends)):
            member[b, lo:hi] = 1.0
        return Const(member, f"{self.node.name}.bags")

    def bag_sizes(self, starts, ends) -> Const:
        """(bags, 1) float64: each bag's size, 1 for an empty bag (its sum is 0)."""
        t = self.torch
        sizes = [[float(max(hi - lo, 1))] for lo, hi in zip(starts, ends)]
        return Const(t.tensor(sizes, dtype=t.float64), f"{self.node.name}.sizes")

"""torch.nn layers and functions beyond the zoo's models, captured by routes.from_torch and
run in binary64 against torch's own float64 run (the oracle: values and every gradient,
normwise relative difference <= 1e-10; tests/torch_float64.py): activations translated
onto elu / leakyReLU / sign, layer norm over several axes, adaptive max pooling, ceil-mode
pooling whose last window runs past the padded input, linear
interpolation, vector norms (a zero vector's gradient is zero, as torch's), tensor clamp
bounds, slice_scatter (circular padding), KL divergence (isnan), class-index losses with
weights, ignore_index and label smoothing, Booleans promoted in arithmetic, constants folded
from buffers and shapes, topk and sort, extrema (amax, max(dim) at ties), products,
variances, atan2 and rounding, and integer arithmetic against torch's own integers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from roundoff_coverage import numerics, routes  # noqa: E402
from torch_float64 import TOL, worst_difference  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class _Function(nn.Module):
    """A module computing ``f(*args)`` (with a weight so that gradients reach a parameter)."""

    def __init__(self, f, n=6):
        super().__init__()
        self.f = f
        self.weight = nn.Parameter(1.0 + 0.1 * _randn(n, seed=9))

    def forward(self, *args):
        return self.f(args[0] * self.weight, *args[1:])


def _zero_row(x):
    x = x.clone()
    x[1] = 0.0
    return x


class _Bags(nn.Module):
    """EmbeddingBag over 1-D ids cut by fixed offsets (an empty bag among them)."""

    def __init__(self, mode, include_last_offset):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=include_last_offset)
        self.register_buffer("offsets", torch.tensor([0, 2, 2, 5, 7][:5 if include_last_offset
                                                                  else 4]))

    def forward(self, ids, weights=None):
        return self.bag(ids, self.offsets, per_sample_weights=weights)


class _FrozenScale(nn.Module):
    """Arithmetic on a buffer and on a table built from shapes (a frozen batch norm's
    scale, ALiBi-like slopes): constants the capture folds, in float64."""

    def __init__(self):
        super().__init__()
        self.register_buffer("var", torch.rand(6, generator=torch.Generator().manual_seed(3))
                             + 0.5)
        self.weight = nn.Parameter(1.0 + 0.1 * _randn(6, seed=8))

    def forward(self, x):
        slopes = torch.arange(1, 7, dtype=x.dtype) / 8.0 ** 0.5
        return x * self.weight * (self.var + 1e-5).rsqrt() + x * slopes.sqrt()


class _Router(nn.Module):
    """A mixture of experts' router: the top 2 of a softmax, renormalized, and the experts'
    positions read as numbers (torch's int64 indices)."""

    def __init__(self, largest=True):
        super().__init__()
        self.gate = nn.Linear(6, 5)
        self.largest = largest

    def forward(self, x):
        w, i = torch.topk(self.gate(x).softmax(-1), 2, dim=-1, largest=self.largest)
        return w / w.sum(-1, keepdim=True), i * w.sum()


GEN = torch.Generator().manual_seed(11)
BAG_IDS = torch.tensor([[1, 3, 5], [3, 3, 9], [0, 2, 3]])
V = _randn(4, 6)
TARGETS = torch.tensor([0, 1, 2, 5])
IGNORED = torch.tensor([0, -100, 2, 5])
WEIGHTS = torch.tensor([0.5, 1.0, 2.0, 0.25, 1.5, 3.0])
IMAGE = _randn(2, 3, 6, 5, seed=1)
LAYERS = {
    "elu": (nn.ELU(0.7), V), "selu": (nn.SELU(), V), "celu": (nn.CELU(0.5), V),
    "leaky-relu": (nn.LeakyReLU(0.2), V), "rrelu-eval": (nn.RReLU(0.1, 0.3), V),
    "softshrink": (nn.Softshrink(0.3), V),
    "layer-norm-2-axes": (nn.LayerNorm([6, 5]), IMAGE),
    "lp-pool": (nn.LPPool2d(2, 2), IMAGE),
    "adaptive-max-even": (nn.AdaptiveMaxPool2d((3, 5)), IMAGE),
    "adaptive-max-uneven": (nn.AdaptiveMaxPool2d((4, 3)), IMAGE),
    "adaptive-max-1d": (nn.AdaptiveMaxPool1d(4), _randn(2, 3, 7)),
    # ceil mode whose last window runs past the padded input (PyTorch allows it while a
    # window starts inside): ResNet-D's average-pool shortcut on a 1x1 map, and odd maps
    "avg-ceil-1x1": (nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),
                     _randn(2, 3, 1, 1, seed=2)),
    "avg-ceil-pad-counted": (nn.AvgPool2d(3, 2, padding=1, ceil_mode=True), _randn(1, 2, 4, 3)),
    "avg-ceil-odd": (nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False),
                     _randn(1, 2, 5, 3, seed=3)),
    "max-ceil-1x1": (nn.MaxPool2d(2, 2, ceil_mode=True), _randn(2, 3, 1, 1, seed=4)),
    "max-ceil-odd-1d": (nn.MaxPool1d(3, 2, ceil_mode=True), _randn(2, 3, 6, seed=5)),
    "bilinear-scale": (nn.Upsample(scale_factor=2, mode="bilinear"), IMAGE),
    "bilinear-corners": (nn.Upsample(size=(7, 9), mode="bilinear", align_corners=True), IMAGE),
    "bilinear-shrink": (nn.Upsample(size=(4, 3), mode="bilinear"), IMAGE),
    "bilinear-fraction": (nn.Upsample(scale_factor=1.7, mode="bilinear"), IMAGE),
    "linear-1d": (nn.Upsample(scale_factor=3, mode="linear"), _randn(2, 3, 5)),
    "trilinear": (nn.Upsample(size=(3, 4, 5), mode="trilinear"), _randn(1, 2, 2, 3, 4)),
    "cosine-similarity": (_Function(F.cosine_similarity), (V, V.flip(0))),
    "pairwise-distance": (_Function(F.pairwise_distance), (V, V.flip(0))),
    "triplet-loss": (_Function(F.triplet_margin_loss), (V, V.flip(0), V.flip(1))),
    "norm-zero-row": (_Function(lambda x: torch.linalg.vector_norm(x, dim=-1)), _zero_row(V)),
    "norm-1": (_Function(lambda x: torch.linalg.vector_norm(x, 1, dim=0)), V),
    "norm-inf": (_Function(lambda x: torch.linalg.vector_norm(x, float("inf"))), V),
    "norm-3": (_Function(lambda x: torch.linalg.vector_norm(x, 3, dim=1, keepdim=True)), V),
    "normalize": (_Function(F.normalize), _zero_row(V)),
    "cumsum": (_Function(lambda x: torch.cumsum(x, 1)), V),
    "argmax-flat": (_Function(lambda x: torch.gather(x.reshape(-1), 0,
                                                     torch.argmax(x).reshape(1)) * x), V),
    "clamp-tensor": (_Function(lambda x, lo: torch.clamp(x, lo, lo + 1.0)), (V, V.flip(1))),
    "kl-divergence": (_Function(lambda x, t: F.kl_div(F.log_softmax(x, -1), t,
                                                      reduction="batchmean")),
                      (V, F.softmax(V.flip(0), -1))),
    "circular-padding": (nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"), IMAGE),
    # Class-index losses: weights, ignore_index (-100 in the targets: an integer word input;
    # or a class), label smoothing, every reduction, an image's per-pixel targets.
    "nll": (_Function(lambda x, t: F.nll_loss(F.log_softmax(x, -1), t)), (V, TARGETS)),
    "nll-ignored": (_Function(lambda x, t: F.nll_loss(F.log_softmax(x, -1), t)),
                    (V, IGNORED)),
    "ce-smoothing": (_Function(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)),
                     (V, TARGETS)),
    "ce-weights": (_Function(lambda x, t: F.cross_entropy(x, t, weight=WEIGHTS.to(x.dtype))),
                   (V, IGNORED)),
    "ce-everything": (_Function(lambda x, t: F.cross_entropy(
        x, t, weight=WEIGHTS.to(x.dtype), ignore_index=2, label_smoothing=0.2)), (V, TARGETS)),
    "ce-smoothing-sum": (_Function(lambda x, t: F.cross_entropy(
        x, t, weight=WEIGHTS.to(x.dtype), label_smoothing=0.3, reduction="sum")), (V, IGNORED)),
    "ce-none": (_Function(lambda x, t: F.cross_entropy(x, t, reduction="none",
                                                       label_smoothing=0.1)), (V, IGNORED)),
    # Embedding bags (ids as indices; bags from a 2-D input or fixed offsets).
    "bag-sum": (nn.EmbeddingBag(10, 4, mode="sum"), BAG_IDS),
    "bag-mean": (nn.EmbeddingBag(10, 4, mode="mean"), BAG_IDS),
    "bag-max": (nn.EmbeddingBag(10, 4, mode="max"), BAG_IDS),
    "bag-mean-padding": (nn.EmbeddingBag(10, 4, mode="mean", padding_idx=3), BAG_IDS),
    "bag-weighted": (_Bags("sum", include_last_offset=False),
                     (torch.tensor([1, 2, 3, 4, 5, 6, 7]), torch.rand(7, generator=GEN))),
    "bag-offsets-mean": (_Bags("mean", include_last_offset=True),
                         (torch.tensor([1, 2, 3, 4, 5, 6, 7]),)),
    # Booleans in arithmetic (torch promotes True to 1), folded constants, ordering.
    "bool-promoted": (_Function(lambda x: x * (x > 0) + x * torch.ones(6, dtype=torch.bool)),
                      V),
    "folded-in-float64": (_FrozenScale(), V),
    "topk-router": (_Router(), V),
    "topk-smallest": (_Router(largest=False), V),
    "sort-descending": (_Function(lambda x: torch.sort(x, dim=0, descending=True).values), V),
    "sort-stable": (_Function(lambda x: torch.sort(x, stable=True).values * x), V),
    # Extrema, products, variances; max(dim) at ties (a row of ReLU zeros) gives torch's
    # one index the whole gradient.
    "std-var-mean": (_Function(lambda x: x * (x.std(-1, keepdim=True) + torch.var_mean(x, 0)[0]
                                              * torch.var_mean(x, 0)[1] + x.var(correction=0))),
                     V),
    "logsumexp-amax": (_Function(lambda x: torch.logsumexp(x, -1, keepdim=True) +
                                 x.amin((0, 1)) + x.max() * x.amax(0)), V),
    "max-dim-ties": (_Function(lambda x: (x - 100).relu().max(-1, keepdim=True).values +
                               x.min(0).values * x.max(1, keepdim=True).indices), V),
    "prod-cumprod": (_Function(lambda x: x.prod(-1).sum() + torch.cumprod(x, 1)), V),
    "atan2-trig": (_Function(lambda x: torch.atan2(x, x.flip(0)) + torch.atan(x) +
                             torch.asinh(x) * torch.cosh(x) + torch.log2(x.abs() + 1) +
                             torch.exp2(x) + torch.acos(x.tanh()) + torch.atanh(x.tanh() / 2)),
                   V),
    "diagonal": (_Function(lambda x: torch.diagonal(x @ x.T) + torch.diagonal(x, 1)[:4] *
                           x.T.diag()), V),
    "rounding": (_Function(lambda x: torch.floor(3 * x) * x + torch.round(3 * x) +
                           torch.frac(3 * x) + (3 * x).trunc() * x.ceil()), V),
    "ce-pixels": (_Function(lambda x, t: F.cross_entropy(x, t), n=3),
                  (_randn(2, 6, 3, 3, seed=4), torch.tensor([[[0, 5, -100]] * 3, [[1, 2, 3]] * 3]))),
}


@pytest.mark.parametrize("key", list(LAYERS))
def test_layer_matches_torch_float64_values_and_gradients(key):
    torch.manual_seed(0)
    layer, args = LAYERS[key]
    args = args if isinstance(args, tuple) else (args,)
    g, worst = worst_difference(layer.eval(), args)
    assert max(worst.values()) <= TOL, worst


def test_a_zero_vector_has_a_zero_norm_gradient_not_nan():
    """torch's linalg_vector_norm backward gives 0 at a zero vector; the capture's
    select(s > 0, sqrt(select(s > 0, s, 1)), 0) does too (plain sqrt would give NaN)."""
    x = _zero_row(V).double()
    g = routes.from_torch(_Function(lambda v: torch.linalg.vector_norm(v, dim=-1)).double(),
                          (x,))
    rule = g.rule(numerics.emulated("binary64"))
    ys, pullback = rule.prepare(g.example_inputs, [p.differentiable for p in g.inputs])
    grads = pullback([np.ones(4)])
    (x_grad,) = [d for name, d in zip(g.input_names, grads) if name != "weight"]
    assert np.all(np.isfinite(x_grad)) and not x_grad[1].any() and x_grad[0].any()


class _Wrapping(nn.Module):
    """int32 arithmetic that overflows (PyTorch wraps it), a cumulative sum, a sum, a
    comparison, a floor division, a gather by computed positions and argmax / argmin with
    ties (the first position wins), from integer ids."""

    def forward(self, ids):
        big = ids.int() * 1_000_000_007 + 12345
        counted = torch.cumsum((ids != 3).int(), dim=1) * ids
        picked = torch.gather(ids * 10, 1, (counted // 2 + ids) % ids.shape[1])
        return (big, counted, counted.sum(-1), picked, ids.argmax(1), ids.argmin(),
                (ids * 3).argmax(0, keepdim=True))


def test_integer_arithmetic_is_torchs_bit_for_bit():
    """Words against torch's own integer results (an independent oracle): int32 products
    that wrap, a cumulative count, a sum, a gather by computed positions."""
    ids = torch.tensor([[1, 3, 4, 0, 3], [2, 2, 3, 1, 4]])
    g = routes.from_torch(_Wrapping(), (ids,))
    ys, _ = g.rule(numerics.emulated("binary64")).prepare(g.example_inputs, [False])
    for ours, theirs in zip(ys, _Wrapping()(ids)):
        np.testing.assert_array_equal(np.asarray(ours, dtype=np.int64), theirs.numpy())


class _Picking(nn.Module):
    """Advanced indexing by index tensors the model computes: the last non-zero id's row
    (transformers' sequence classification: an integer argmax, then
    ``h[arange(n), last]``), a computed index after a slice, negative indices, a float
    argmax and argmin read back by gather."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * _randn(4, 6, seed=5))

    def forward(self, x, ids):
        h = torch.tanh(x * self.weight)
        last = (ids * (ids != 0)).argmax(-1)
        return (h[torch.arange(2), last], h[:, ids[0] % 6], h[ids[1] - 4],
                torch.gather(h, 1, h.argmax(1, keepdim=True)),
                torch.gather(h, 0, h.argmin(0).unsqueeze(0)))


def test_computed_indices_match_torch_float64():
    ids = torch.tensor([[1, 3, 4, 0, 0], [2, 2, 3, 1, 0]])
    g, worst = worst_difference(_Picking(), (V, ids))
    assert max(worst.values()) <= TOL, worst

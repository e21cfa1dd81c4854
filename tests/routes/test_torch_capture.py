"""routes.from_torch (issue 28): models captured through torch.export, run in binary64 on
the graph of registered operators, and compared with PyTorch's own float64 forward values
and gradients (torch.autograd.grad: an independent implementation as the oracle), among them
masked attention (a causal transformer block, mask arguments), transposed convolutions, and
training mode (batch norm with its running-statistics updates, dropout with its mask as an
input); the capture's structure (inputs, constants, names, modules); its one-line
refusals."""

from __future__ import annotations

import copy
import inspect
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from roundoff_coverage import numerics, routes  # noqa: E402
from torch_models import in_float64, models, training_models  # noqa: E402

TOL = 1e-12          # normwise relative difference, per output and per gradient
# A gradient that is zero mathematically (an attention key bias: softmax ignores a shift
# along the keys) is rounding noise in both implementations, so each tensor's difference is
# measured against max(its largest entry, FLOOR x the model's largest gradient entry).
FLOOR = 1e-3


MODELS = models()


@pytest.fixture(scope="module")
def captured():
    out = {}
    for key, (model, args) in MODELS.items():
        model, args = in_float64(model, args)
        out[key] = (model, args, routes.from_torch(model, args))
    return out


def _relative(ours, theirs, floor=1e-300) -> float:
    """max |ours - theirs| / max(max |theirs|, floor) (normwise)."""
    ours = np.asarray(ours, dtype=np.float64)
    theirs = theirs.detach().numpy()
    assert ours.shape == theirs.shape
    return float(np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), floor))


@pytest.mark.parametrize("key", list(MODELS))
def test_binary64_values_and_gradients_match_torch_float64(key, captured):
    model, args, g = captured[key]
    rng = np.random.default_rng(1)
    params = list(model.parameters())
    floats = [a.clone().requires_grad_(True) for a in args if a.is_floating_point()]
    it = iter(floats)
    call = [next(it) if a.is_floating_point() else a for a in args]
    out = model(*call)
    cot = rng.standard_normal(tuple(out.shape))
    want = torch.autograd.grad(out, floats + params, torch.from_numpy(cot))

    rule = g.rule(numerics.emulated("binary64"))
    assert rule is not None
    ys, pullback = rule.prepare(g.example_inputs, [p.differentiable for p in g.inputs])
    got = [x for x, p in zip(pullback([cot]), g.inputs) if p.differentiable]

    worst = {"forward": _relative(ys[0], out)}
    names = [n for n, p in zip(g.input_names, g.inputs) if p.differentiable]
    scale = FLOOR * max(float(w.abs().max()) for w in want)
    for name, ours, theirs in zip(names, got, want, strict=True):
        worst[name] = _relative(ours, theirs, scale)
    print(f"{key}: max normwise relative difference {max(worst.values()):.2e} "
          f"({max(worst, key=worst.get)})")
    assert max(worst.values()) <= TOL, worst


@pytest.mark.parametrize("key", ["mlp", "cnn", "transformer-by-hand", "conv-transpose"])
def test_binary64_tangents_match_torch_forward_mode(key, captured):
    # (nn.MultiheadAttention's eval fast path has no forward mode in torch: left out.)
    model, args, g = captured[key]
    rng = np.random.default_rng(2)
    tangents = [rng.standard_normal(x.shape) for x in g.example_inputs]
    _, ours = g.rule(numerics.emulated("binary64")).linearize(g.example_inputs, tangents)
    names = [n for n, _ in model.named_parameters()]

    def f(x, *params):
        return torch.func.functional_call(model, dict(zip(names, params)), (x,))
    _, theirs = torch.func.jvp(f, tuple(torch.from_numpy(x) for x in g.example_inputs),
                               tuple(torch.from_numpy(t) for t in tangents))
    assert _relative(ours[0], theirs) <= TOL


def test_inputs_are_the_arguments_then_the_parameters(captured):
    model, args, g = captured["cnn"]
    keys = [k for k, _ in model.named_parameters()]
    assert g.input_names == ("x",) + tuple(keys)
    assert [x.dtype for x in g.example_inputs] == [np.float64] * len(g.inputs)
    np.testing.assert_array_equal(g.example_inputs[0], args[0].numpy())
    np.testing.assert_array_equal(g.example_inputs[1], model.conv.weight.detach().numpy())
    assert all(p.kind == "value" for p in g.inputs)


def test_buffers_and_numbers_are_frozen_constants(captured):
    model, _, g = captured["cnn"]
    consts = dict(zip(g.constant_names, g.constants))
    np.testing.assert_array_equal(consts["bn.running_var"], model.bn.running_var.numpy())
    assert "bn.num_batches_tracked" not in consts           # never read in eval mode
    assert all(p.kind == "frozen" for p in g.constant_ports)
    bn = next(n for n in g.nodes if n.op.name == "batchNormRunning")
    eps = bn.args[-1]
    assert eps.node == -2 and g.constants[eps.index] == 1e-5


def test_integer_arguments_are_index_ports_bounded_by_their_use(captured):
    _, _, g = captured["embedding-cross-entropy"]
    ports = dict(zip(g.input_names, g.inputs))
    assert str(ports["ids"]) == "index<10>[3,4]" and str(ports["target"]) == "index<5>[3]"
    assert g.example_inputs[0].dtype == np.int64
    # torch.arange(4) was folded into a constant read as positions below 6.
    assert any(str(p) == "index<6>[4]" for p in g.constant_ports)
    # The positions' embedding (4, 4) is broadcast to the tokens' (3, 4, 4) before the add.
    assert [n.op.name for n in g.nodes] == ["embedding", "embedding", "broadcast", "add",
                                            "linear", "mean", "crossEntropy"]


def test_nodes_keep_names_and_module_paths(captured):
    _, _, g = captured["transformer"]
    named = dict(zip(g.node_names, zip(g.node_modules, (n.op.name for n in g.nodes))))
    assert named["scaled_dot_product_attention"] == ("layers.0.attn", "attention")
    assert named["layer_norm_2"][0] == "layers.1.ln1"
    assert any(m == "layers.1.mlp.1" and op == "gelu" for m, op in named.values())
    assert len(set(g.node_names)) == len(g.nodes)


def test_broadcasting_becomes_broadcast_nodes(captured):
    _, _, g = captured["mlp"]
    ops = [n.op.name for n in g.nodes]
    assert ops.count("broadcast") == 1                       # the gain, (8,) -> (5, 8)
    k = ops.index("broadcast")
    assert g.node_names[k].startswith("mul.") and g.nodes[k].op.attrs.to == (5, 8)


def test_the_by_hand_attention_uses_matmul_and_softmax(captured):
    _, _, g = captured["transformer-by-hand"]
    ops = {n.op.name for n in g.nodes}
    assert {"matmul", "softmax", "permute", "reshape", "div"} <= ops
    assert "attention" not in ops


def _gradients(g, cotangents):
    """The binary64 outputs and value-input gradients of ``g`` at its example inputs."""
    rule = g.rule(numerics.emulated("binary64"))
    ys, pullback = rule.prepare(g.example_inputs, [p.differentiable for p in g.inputs])
    grads = [x for x, p in zip(pullback(cotangents), g.inputs) if p.differentiable]
    return ys, grads


def _worst_gradient(got, want) -> float:
    scale = FLOOR * max(float(w.abs().max()) for w in want)
    return max(_relative(ours, theirs, scale) for ours, theirs in zip(got, want, strict=True))


def test_training_batch_norm_uses_batch_statistics_and_returns_running_updates():
    model, args = training_models()["batch-norm"]
    oracle = copy.deepcopy(model)                 # torch's forward updates its buffers
    g = routes.from_torch(model, args)
    names = ["bn.running_mean", "bn.running_var", "bn1.running_mean", "bn1.running_var"]
    assert g.source["updates"] == names and len(g.outputs) == 1 + len(names)
    assert [n.op.name for n in g.nodes].count("batchNorm") == 2
    assert "bn.num_batches_tracked" not in g.constant_names

    x = args[0].clone().requires_grad_(True)
    out = oracle(x)
    cot = np.random.default_rng(3).standard_normal(tuple(out.shape))
    want = torch.autograd.grad(out, [x] + list(oracle.parameters()), torch.from_numpy(cot))
    ys, got = _gradients(g, [cot] + [None] * len(names))
    assert _relative(ys[0], out) <= TOL
    assert _worst_gradient(got, want) <= TOL
    after = dict(oracle.named_buffers())
    for y, name in zip(ys[1:], names):
        assert not torch.equal(after[name], dict(model.named_buffers())[name])   # updated
        assert _relative(y, after[name]) <= TOL, name


def test_training_dropout_reads_its_mask_as_an_input_after_the_parameters():
    model, args = training_models()["dropout"]
    g = routes.from_torch(model, args)
    masks = ("dropout_mask.native_dropout", "dropout_mask.native_dropout_1")
    assert g.input_names == ("x",) + tuple(k for k, _ in model.named_parameters()) + masks
    assert [str(p) for p in g.inputs[-2:]] == ["frozen[5,6]", "frozen[5,3]"]
    # The example masks: Bernoulli(1 - p) keeps from numpy's default_rng(dropout_seed).
    rng = np.random.default_rng(0)
    m1, m2 = g.example_inputs[-2:]
    np.testing.assert_array_equal(m1, rng.random((5, 6)) >= 0.25)
    np.testing.assert_array_equal(m2, rng.random((5, 3)) >= 0.5)
    assert 0 < m1.mean() < 1 and 0 < m2.mean() < 1
    other = routes.from_torch(model, args, dropout_seed=1).example_inputs
    assert not np.array_equal(other[-1], m2)

    oracle = copy.deepcopy(model)                 # dropout's output replaced: the same masks
    for module, mask in ((oracle.d1, m1), (oracle.d2, m2)):
        module.register_forward_hook(
            lambda mod, ins, out, m=torch.from_numpy(mask): ins[0] * m / (1 - mod.p))
    x = args[0].clone().requires_grad_(True)
    out = oracle(x)
    cot = np.random.default_rng(5).standard_normal(tuple(out.shape))
    want = torch.autograd.grad(out, [x] + list(oracle.parameters()), torch.from_numpy(cot))
    ys, got = _gradients(g, [cot])
    assert _relative(ys[0], out) <= TOL
    assert _worst_gradient(got, want) <= TOL


class MaskedAttention(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_with_a_mask_argument_matches_torch(kind):
    # Query 1 attends to no key: PyTorch's _safe_softmax gives 0 there, and so does the graph.
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    keep = torch.tensor([[True, False, True], [False, False, False], [True, True, False]])
    if kind == "bool":
        mask = keep
    else:
        bias = torch.randn(3, 3, generator=gen, dtype=torch.float64)
        mask = bias.masked_fill(~keep, -torch.inf)
    g = routes.from_torch(MaskedAttention(), (q, k, v, mask))
    assert "maskedSoftmax" in [n.op.name for n in g.nodes]
    floats = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = MaskedAttention()(*floats, mask)
    cot = np.random.default_rng(6).standard_normal(tuple(out.shape))
    want = torch.autograd.grad(out, floats, torch.from_numpy(cot))
    ys, got = _gradients(g, [cot])
    assert not out[:, 1].abs().max() and not np.abs(ys[0][:, 1]).max()
    assert _relative(ys[0], out) <= TOL
    assert _worst_gradient(got[:3], want) <= TOL


def test_masked_attention_and_transposed_convolution_use_their_operators(captured):
    _, _, g = captured["transformer-causal"]
    ops = [n.op.name for n in g.nodes]
    assert ops.count("maskedSoftmax") == 3 and "attention" not in ops
    assert str(dict(zip(g.input_names, g.inputs))["padding"]) == "bool[2,3]"
    _, _, g = captured["conv-transpose"]
    up, mix = (n.op for n in g.nodes if n.op.name == "convTranspose")
    assert (up.attrs.stride, up.attrs.padding, up.attrs.output_padding) == ((2, 2), (1, 1),
                                                                          (1, 1))
    assert (mix.attrs.groups, mix.attrs.dilation, mix.attrs.out_channels) == (2, (2,), 2)


# ----- refusals ---------------------------------------------------------------------------------
def _line(fn, text) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


class Lgamma(nn.Module):
    def forward(self, x):
        return torch.lgamma(x) + 1


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


class AttentionDropout(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)


def _refusal(model, *args) -> str:
    with pytest.raises(routes.CaptureError) as info:
        routes.from_torch(model, args)
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, routes.RouteError)
    return message


def test_an_operator_without_translation_is_refused_with_node_and_line():
    line = _line(Lgamma.forward, "torch.lgamma")
    assert _refusal(Lgamma(), torch.randn(3)) == (
        f"from_torch: aten.lgamma.default (node lgamma, test_torch_capture.py:{line}) has no "
        f"translation onto the operator table")


def test_an_unsupported_attribute_is_refused_with_the_reason():
    line = _line(AttentionDropout.forward, "dropout_p")
    assert _refusal(AttentionDropout(), torch.randn(1, 3, 4)) == (
        f"from_torch: aten.scaled_dot_product_attention.default (node "
        f"scaled_dot_product_attention, test_torch_capture.py:{line}): attention dropout "
        f"(dropout_p=0.5) draws a random mask")


def test_data_dependent_control_flow_is_refused_where_the_model_branches():
    line = DataDependent.forward.__code__.co_firstlineno + 1
    text = _refusal(DataDependent(), torch.randn(3))
    assert text.startswith("from_torch: torch.export could not capture the model: Could not "
                           "guard on data-dependent expression"), text
    assert text.endswith(f": the model branches on a value of its inputs at "
                         f"test_torch_capture.py:{line} (if x.sum() > 0:), which an export "
                         f"cannot follow; give the flags that decide it (nn.Transformer's "
                         f"tgt_is_causal, say) or capture a model without the branch"), text


def test_in_place_updates_of_buffers_and_cumulative_batch_norm_are_refused():
    line = _line(Counter.forward, "add_")
    assert _refusal(Counter(), torch.randn(3)) == (
        f"from_torch: the program updates count in place (node add, "
        f"test_torch_capture.py:{line}); in-place updates of inputs and buffers are not "
        f"captured (except the running statistics of a batch norm)")
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3, momentum=None)).train()
    assert _refusal(model, torch.randn(4, 3)) == (
        "from_torch: batch norm 1 in training mode has momentum=None (a cumulative "
        "average), which is not translated; give it a momentum or capture in eval mode")


def test_importing_routes_does_not_import_torch():
    code = ("import sys, roundoff_coverage.routes as r; assert callable(r.from_torch); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


class AdaptivePool(nn.Module):
    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, x):
        pool = {3: F.adaptive_avg_pool1d, 4: F.adaptive_avg_pool2d,
                5: F.adaptive_avg_pool3d}[x.dim()]
        return pool(torch.tanh(x), self.out) * 2.0


@pytest.mark.parametrize("shape, out", [
    ((2, 3, 4, 6), (2, 2)),            # windows of one size: one average pool
    ((1, 2, 7, 5), (3, 3)),            # 7 -> 3: windows [0, 3), [2, 5), [4, 7) overlap
    ((1, 2, 7), 3),                    # 1-d, through the 2-d kernel
    ((1, 1, 4, 5, 6), (2, 3, 4)),      # 3-d, mixed
    ((1, 2, 3, 2), (5, 3)),            # more outputs than inputs: windows repeat
])
def test_adaptive_average_pooling_matches_torch(shape, out):
    """torch's adaptive average pooling windows (even ones as one pool, uneven ones cell by
    cell) against torch's float64 values and gradients."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    model = AdaptivePool(out)
    g = routes.from_torch(model, (x,))
    pools = [n for n in g.nodes if n.op.name == "pool"]
    assert len(pools) == 1 if shape == (2, 3, 4, 6) else len(pools) > 1
    xg = x.clone().requires_grad_(True)
    y = model(xg)
    cot = np.random.default_rng(4).standard_normal(tuple(y.shape))
    want = torch.autograd.grad(y, [xg], torch.from_numpy(cot))
    ys, got = _gradients(g, [cot])
    assert _relative(ys[0], y) <= TOL
    assert _worst_gradient(got, want) <= TOL

"""routes.Session: operators called eagerly on session values and recorded on a tape.  A
small MLP (linear, gelu, linear, softmax, cross entropy) built in a session at 200 bits is
compared with PyTorch's float64 forward values and autograd gradients (an independent
implementation); the session's graph is compared with routes.from_torch's capture of the
same model (the same operators, the same binary64 outputs); the graph replays the session
bit for bit under bfloat16; numbers become constants; refusals are one line."""

from __future__ import annotations

import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes

TOL = 1e-12             # normwise relative difference from torch float64


def _mlp_data(seed=0):
    """x (4, 3), targets (4,) below 3, then the parameters by their torch names."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((4, 3)), "target": np.array([0, 2, 1, 2]),
            "l1.weight": rng.standard_normal((5, 3)), "l1.bias": rng.standard_normal(5),
            "l2.weight": rng.standard_normal((3, 5)), "l2.bias": rng.standard_normal(3)}


def _mlp_session(backend, data, act="gelu"):
    """The MLP in a session: (session, probabilities, loss)."""
    s = routes.Session(backend)
    x = s.input("x", data["x"])
    t = s.input("target", data["target"], port=routes.ports.index((3,), (4,)))
    w1, b1, w2, b2 = (s.input(k, data[k]) for k in ("l1.weight", "l1.bias", "l2.weight",
                                                   "l2.bias"))
    h = s.apply(act, s.linear(w1, b1, x, name="l1"), name="act")
    z = s.linear(w2, b2, h, name="l2")
    p = s.softmax(z, axis=-1)
    loss = s.apply("crossEntropy", z, t)
    s.output(p, loss)
    return s, p, loss


def _torch_mlp(torch, data, act="gelu"):
    nn, F = torch.nn, torch.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(3, 5), nn.Linear(5, 3)

        def forward(self, x, target):
            z = self.l2(getattr(F, act)(self.l1(x)))
            return torch.softmax(z, dim=-1), F.cross_entropy(z, target)

    model = MLP().double()
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(torch.from_numpy(data[k]))
    return model


def _rel(ours, theirs) -> float:
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    assert ours.shape == theirs.shape
    return float(np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), 1e-300))


def test_mlp_at_200_bits_matches_torch_float64_values_and_gradients():
    torch = pytest.importorskip("torch")
    data = _mlp_data()
    s, p, loss = _mlp_session(numerics.reference(200), data)
    g = s.graph()
    cot = np.random.default_rng(1).standard_normal((4, 3))
    grads = g.rule(numerics.reference(200)).backward(g.example_inputs, [cot, 1.0])

    model = _torch_mlp(torch, data)
    x = torch.from_numpy(data["x"]).requires_grad_(True)
    tp, tl = model(x, torch.from_numpy(data["target"]))
    params = [x] + list(model.parameters())
    want = torch.autograd.grad((tp, tl), params, (torch.from_numpy(cot),
                                                  torch.tensor(1.0, dtype=torch.float64)))
    assert _rel(p.numpy(), tp.detach().numpy()) <= TOL
    assert _rel(loss.numpy(), tl.detach().numpy()) <= TOL
    got = [gr for gr, port in zip(grads, g.inputs) if port.differentiable]
    assert len(got) == len(want) == 5
    for name, ours, theirs in zip(["x", "l1.weight", "l1.bias", "l2.weight", "l2.bias"], got,
                                  want):
        assert _rel(ours, theirs.numpy()) <= TOL, name


def test_session_graph_is_the_graph_from_torch_captures():
    torch = pytest.importorskip("torch")
    data = _mlp_data(2)
    # (relu: native binary64 has no erf for gelu.)
    model = _torch_mlp(torch, data, "relu")
    captured = routes.from_torch(model, (torch.from_numpy(data["x"]),
                                         torch.from_numpy(data["target"])))
    s, p, loss = _mlp_session(numerics.native(np.float64), data, "relu")
    ours = s.graph()
    assert [n.op for n in ours.nodes] == [n.op for n in captured.nodes]   # names, attributes
    assert ours.input_names == captured.input_names and ours.inputs == captured.inputs
    backend = numerics.native(np.float64)
    want = captured.run(captured.example_inputs, backend)
    got = ours.run(ours.example_inputs, backend)
    for a, b, v in zip(got, want, (p, loss)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(v.value, np.asarray(b))


def test_graph_replays_the_session_bit_for_bit_under_bfloat16():
    data = _mlp_data(3)
    bf16 = numerics.emulated("bfloat16")
    s, p, loss = _mlp_session(bf16, data)
    g = s.graph()
    assert g.source == {"frontend": "session"}
    assert g.input_names == tuple(data) and g.node_names[:3] == ("l1", "act", "l2")
    for given, example in zip(data.values(), g.example_inputs):
        np.testing.assert_array_equal(given, example)
    rule = g.rule(numerics.emulated("bfloat16"))
    ys = rule.forward(g.example_inputs)
    np.testing.assert_array_equal(ys[0], p.value)
    np.testing.assert_array_equal(ys[1], loss.value)
    # The bfloat16 gradients: values of the format, near the 200-bit ones (bfloat16 keeps
    # 8 bits: a few percent of normwise difference through two layers).
    cot = np.random.default_rng(4).standard_normal((4, 3))
    low = rule.backward(g.example_inputs, [cot, 1.0])
    ref = s.graph().rule(numerics.reference(200)).backward(g.example_inputs, [cot, 1.0])
    for a, b, port in zip(low, ref, g.inputs):
        if not port.differentiable:
            assert a is None
            continue
        a = np.asarray(a)
        np.testing.assert_array_equal(formats.round_to(a, formats.get("bfloat16")), a)
        assert _rel(a, np.asarray(b, dtype=np.float64)) <= 0.05


def test_numbers_and_arrays_become_frozen_constants():
    s = routes.Session(numerics.native(np.float64))
    xs = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    x = s.input("x", xs)
    y = s.scale(x, 3)                               # an int number at a frozen scalar port
    z = s.add(y, 1.5)                               # a number filled to the port's shape
    m = s.maskedSoftmax(z, np.array([[True, False, True], [True, True, False]]), axis=-1)
    s.output(m)
    np.testing.assert_array_equal(z.value, xs * 3 + 1.5)
    e = np.exp(np.array([4.5, 10.5]) - 10.5)
    np.testing.assert_allclose(m.numpy()[0], [e[0] / e.sum(), 0, e[1] / e.sum()], rtol=1e-15)
    g = s.graph()
    assert [str(p) for p in g.constant_ports] == ["frozen[]", "frozen[2,3]", "bool[2,3]"]
    assert g.constant_names == ["scale.factor", "add.y", "maskedSoftmax.mask"]
    assert g.constants[0] == 3.0 and g.nodes[2].op.attrs.axis == 1


def test_several_outputs_come_back_as_a_tuple():
    s = routes.Session(numerics.native(np.float64))
    x = s.input("x", np.array([3.0, -1.0, 2.0]))
    values, indices = s.sort(x)
    np.testing.assert_array_equal(values.value, [-1.0, 2.0, 3.0])
    np.testing.assert_array_equal(indices.value, [1, 2, 0])
    assert str(indices.port) == "index<3>[3]"


def _one_line(fn, *args, **kwargs) -> str:
    with pytest.raises(routes.RouteError) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_refusals_are_one_line():
    s = routes.Session(numerics.native(np.float64))
    x = s.input("x", np.zeros((2, 3)))
    w = s.input("w", np.zeros((4, 3)))
    assert _one_line(s.apply, "relux", x) == \
        "unknown operator 'relux' (close matches: relu, elu, gelu)"
    with pytest.raises(AttributeError, match=r"no registered operator 'matmull' \(close "
                                             r"matches: matmul"):
        s.matmull(x, w)
    assert _one_line(s.add, x, w) == (
        "session: add: argument y expects value[2,3] but input 'w' is value[4,3] (inferred "
        "shape from the arguments: give it by keyword)")
    assert _one_line(s.matmul, x, w) == (
        "matmul: inner extents must agree (x_shape ends in 3, y_shape has 4 rows)")
    other = routes.Session(numerics.native(np.float64))
    assert _one_line(other.relu, x) == (
        "session: relu: argument x is a value of another session (pass values of this "
        "session, or numbers and arrays)")
    assert _one_line(s.relu, x, x) == "session: relu: expects 1 argument (x) (got 2)"
    assert _one_line(s.input, "x", np.zeros(2)) == \
        "session: input 'x' is already declared (input names are distinct)"
    assert _one_line(s.graph) == \
        "session: no outputs marked (call s.output(value, ...) before s.graph())"
    # invoke's validate stage runs at the call:
    assert _one_line(s.dropout, s.constant(np.array([1.0, 2.0])), np.array([1.0, 0.0]), 1.0) \
        == "dropout: p must lie in [0, 1) (got 1)"

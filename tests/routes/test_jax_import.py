"""The JAX import (routes.from_jax, routes/frontends/jax.py and jaxpr.py): functions written
in jax.numpy become graphs of registered operators whose float64 forward and gradients
agree with jax's own float64 results (the oracle: jax.vjp under jax_enable_x64, never the
graph itself), whose artifacts round-trip, and whose refusals are one line naming the
primitive and its source line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
lax = jax.lax

from roundoff_coverage import numerics, routes  # noqa: E402

RTOL = 1e-12


@pytest.fixture(autouse=True, scope="module")
def x64():
    """jax's float64 (the oracle's precision) for this module only."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def _close(got, want, what):
    """Agreement to RTOL relative to the largest magnitude of the oracle's array."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, what
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def _agrees_with_jax(fn, args, seed=0):
    """Import ``fn``; its float64 forward and its gradients at random cotangents equal
    jax's (jax.vjp) at every output and every float input.  Returns the graph."""
    graph = routes.from_jax(fn, args)
    rule = graph.rule(numerics.native(np.float64))
    xs = graph.example_inputs
    outs, vjp = jax.vjp(fn, *args)
    leaves, tree = jax.tree_util.tree_flatten(outs)
    got = rule.forward(xs)
    assert len(got) == len(leaves)
    for i, (g, w) in enumerate(zip(got, leaves)):
        _close(g, w, f"output {i}")
    rng = np.random.default_rng(seed)
    cots = [rng.standard_normal(np.shape(w)) for w in leaves]
    want = jax.tree_util.tree_leaves(
        vjp(jax.tree_util.tree_unflatten(tree, [jnp.asarray(c) for c in cots])))
    grads = rule.backward(xs, cots)
    floating = [(n, g, w) for n, g, w, p in zip(graph.input_names, grads, want, graph.inputs)
                if p.kind == "value"]
    assert floating
    for name, g, w in floating:
        _close(g, w, f"gradient of {name}")
    return graph


def _round_trips(graph, tmp_path):
    path = tmp_path / "g.json"
    graph.save(path)
    back = routes.load_graph(path)
    assert routes.graph_hash(back) == routes.graph_hash(graph) == routes.graph_hash(path)
    assert back.input_names == graph.input_names
    assert back.node_names == graph.node_names and back.node_modules == graph.node_modules
    for a, b in zip(back.example_inputs, graph.example_inputs):
        np.testing.assert_array_equal(a, b)


# ----- the test functions ---------------------------------------------------------------------
def mlp(params, x):
    with jax.named_scope("hidden"):
        h = jax.nn.gelu(jnp.tanh(x @ params["w1"] + params["b1"]))
    with jax.named_scope("out"):
        y = jax.nn.relu(h @ params["w2"] + params["b2"])
    return jnp.mean(y ** 2)


def _mlp_args(rng):
    params = {"w1": rng.standard_normal((3, 6)), "b1": rng.standard_normal(6),
              "w2": rng.standard_normal((6, 2)), "b2": rng.standard_normal(2)}
    return params, rng.standard_normal((5, 3))


def _layer_norm(x, g, b, eps=1e-5):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.var(x, -1, keepdims=True)
    return (x - m) / jnp.sqrt(v + eps) * g + b


def block(p, x):
    """A pre-norm transformer block: causal multi-head attention and a GELU MLP."""
    t, d = x.shape
    heads = 2
    h = _layer_norm(x, p["ln1"]["g"], p["ln1"]["b"])

    def split(w):
        return (h @ w).reshape(t, heads, d // heads).transpose(1, 0, 2)
    q, k, v = split(p["wq"]), split(p["wk"]), split(p["wv"])
    s = jnp.einsum("hqd,hkd->hqk", q, k) / jnp.sqrt(d // heads)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    o = jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)
    x = x + o.transpose(1, 0, 2).reshape(t, d) @ p["wo"]
    h = _layer_norm(x, p["ln2"]["g"], p["ln2"]["b"])
    return x + jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"]


def _block_args(rng, d=4):
    def norm():
        return {"g": 1 + 0.1 * rng.standard_normal(d), "b": 0.1 * rng.standard_normal(d)}
    p = {"ln1": norm(), "ln2": norm(), "b1": rng.standard_normal(2 * d),
         "w1": rng.standard_normal((d, 2 * d)), "w2": rng.standard_normal((2 * d, d))}
    for name in ("wq", "wk", "wv", "wo"):
        p[name] = rng.standard_normal((d, d)) / 2
    return p, rng.standard_normal((3, d))


def convnet(p, x):
    """NHWC convolution, relu, 2x2 max pooling, a stride-2 NCHW convolution with
    asymmetric padding, 2x2 average pooling (flax's avg_pool form)."""
    y = lax.conv_general_dilated(x, p["k1"], (1, 1), "SAME",
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y + p["b1"])
    y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = lax.conv_general_dilated(y.transpose(0, 3, 1, 2), p["k2"], (2, 2), ((1, 1), (0, 1)))
    y = lax.reduce_window(jax.nn.relu(y), 0.0, lax.add, (1, 1, 2, 2), (1, 1, 1, 1),
                          "VALID") / 4.0
    return jnp.mean(y ** 2)


def _conv_args(rng):
    p = {"k1": rng.standard_normal((3, 3, 2, 3)), "b1": rng.standard_normal(3),
         "k2": rng.standard_normal((4, 3, 2, 2))}
    return p, rng.standard_normal((2, 8, 8, 2))


def lm_loss(emb, ids, labels):
    """Embedding lookup (jnp.take), logits against the embedding, cross entropy from
    log_softmax and take_along_axis."""
    h = jnp.take(emb, ids, axis=0) + emb[ids] * 0.5
    logp = jax.nn.log_softmax(h @ emb.T, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def _lm_args(rng):
    return rng.standard_normal((7, 3)), np.array([1, 6, 0, 3]), np.array([2, 0, 6, 5])


MODELS = {"mlp": (mlp, _mlp_args), "block": (block, _block_args),
          "convnet": (convnet, _conv_args), "lm_loss": (lm_loss, _lm_args)}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_float64_forward_and_gradients_agree_with_jax(name, tmp_path):
    fn, make = MODELS[name]
    graph = _agrees_with_jax(fn, make(np.random.default_rng(1)))
    assert graph.source["frontend"] == "jax" and graph.source["function"] == fn.__name__
    _round_trips(graph, tmp_path)


def test_inputs_are_the_argument_leaves_named_by_their_paths():
    params, x = _mlp_args(np.random.default_rng(2))
    graph = routes.from_jax(mlp, (params, x))
    assert graph.input_names == ("params.b1", "params.b2", "params.w1", "params.w2", "x")
    assert all(p.kind == "value" for p in graph.inputs)
    np.testing.assert_array_equal(graph.example_inputs[2], params["w1"])
    ops = [n.op.name for n in graph.nodes]
    assert "relu" in ops and ops.count("matmul") == 2        # jax.nn.relu recognized
    names = dict(zip(graph.node_names, graph.node_modules))
    assert names["dot_general"] == "hidden" and names["dot_general_1"] == "out"
    assert names["relu"] == "out"


def test_integer_inputs_become_index_ports_bounded_by_their_use():
    graph = routes.from_jax(lm_loss, _lm_args(np.random.default_rng(3)))
    ports = dict(zip(graph.input_names, graph.inputs))
    assert ports["ids"].kind == "index" and ports["ids"].bounds == (7,)
    assert ports["labels"].kind == "index" and ports["labels"].bounds == (7,)
    assert graph.example_inputs[1].dtype == np.int64
    assert "embedding" in [n.op.name for n in graph.nodes]


def test_out_of_range_example_indices_are_refused_in_one_line():
    emb, ids, labels = _lm_args(np.random.default_rng(3))
    with pytest.raises(routes.CaptureError) as info:
        routes.from_jax(lm_loss, (emb, np.array([1, 9, 0, 3]), labels))
    assert "outside [0, 7)" in str(info.value) and "\n" not in str(info.value)


@jax.custom_vjp
def _odd_sin(x):
    return jnp.sin(x)


_odd_sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (100.0 * g,))

ASSORTED = {
    "sort": lambda x: jnp.sort(x, axis=1) * 2.0,
    "argsort-gather": lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
    "cumsum": lambda x: jnp.cumsum(x, axis=1) + lax.cumsum(x, axis=0, reverse=True),
    "argmax-take": lambda x: jnp.take(x, jnp.argmax(x[:, 0]), axis=0),
    "scatter-add": lambda x: x.at[jnp.array([0, 2])].add(3.0 * x[:2]),
    "cat-pad-slice": lambda x: jnp.concatenate([x, jnp.pad(x, ((1, 0), (0, 0)))[1:]],
                                               axis=1)[:, 1:7:2],
    "split-stack": lambda x: jnp.stack(jnp.split(x, 2, axis=1)).sum(0),
    "where-clip": lambda x: jnp.where(x > 0, x, 0.1 * x) + jnp.clip(x, -0.5, 0.5),
    "top-k": lambda x: lax.top_k(x, 2)[0],
    "extrema": lambda x: jnp.max(x, axis=0) - jnp.min(x, axis=1).sum() + jnp.prod(x[0]),
    "powers": lambda x: jnp.abs(x) ** 1.5 + x ** 3 + 1.0 / x + jnp.exp2(x) + jax.nn.sigmoid(x),
    "vector-dots": lambda x: x @ x[0] + jnp.dot(x[0], x[1]),
    "logsumexp": lambda x: jax.nn.logsumexp(x, axis=1) + jax.nn.softplus(x).sum(0)[:3],
    "flip": lambda x: jnp.flip(x, 1) + x[::-1],
}


@pytest.mark.parametrize("name", sorted(ASSORTED))
def test_assorted_primitives_agree_with_jax(name):
    x = np.random.default_rng(4).standard_normal((3, 4))
    _agrees_with_jax(ASSORTED[name], (x,))


def test_custom_rules_are_not_used_gradients_come_from_the_table():
    x = np.random.default_rng(5).standard_normal(4)
    graph = routes.from_jax(_odd_sin, (x,))
    assert [n.op.name for n in graph.nodes] == ["sin"]
    grad = graph.rule(numerics.native(np.float64)).backward(graph.example_inputs,
                                                              [np.ones(4)])[0]
    _close(grad, jax.grad(lambda v: jnp.sin(v).sum())(x), "d sin")


# ----- refusals ----------------------------------------------------------------------------------
REFUSED = {
    "cond": (lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x), "cond"),
    "while": (lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, 2 * c[1]),
                                       (0, x))[1], "while"),
    "scan": (lambda x: lax.scan(lambda c, r: (c + r, c), jnp.zeros(3), x)[0], "scan"),
    "complex": (lambda x: (x * 1j).real, "convert_element_type"),
    "random": (lambda x: x * jax.random.normal(jax.random.key(0), x.shape), "random_seed"),
    "pure_callback": (lambda x: jax.pure_callback(
        np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x), "pure_callback"),
    "precision": (lambda x: jnp.dot(x, x.T, precision=lax.Precision.HIGHEST), "dot_general"),
    "rounding-cast": (lambda x: x.astype(jnp.float32), "convert_element_type"),
    "accuracy": (lambda x: lax.exp(x, accuracy=lax.Tolerance(atol=1e-3)), "exp"),
}
REASONS = {"cond": "control flow", "while": "control flow", "scan": "control flow",
           "complex": "complex", "random": "random-key", "pure_callback": "host callbacks",
           "precision": "precision", "rounding-cast": "rounds", "accuracy": "accuracy"}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_refusals_are_one_line_naming_the_primitive_and_its_line(kind):
    fn, primitive = REFUSED[kind]
    with pytest.raises(routes.CaptureError) as info:
        routes.from_jax(fn, (np.ones((2, 3)),))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"from_jax: {primitive} (test_jax_import.py:"), message
    assert REASONS[kind] in message, message


# ----- the command line --------------------------------------------------------------------------
FACTORY = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    import numpy as np

    def mlp(params, x):
        with jax.named_scope("hidden"):
            h = jnp.tanh(x @ params["w1"] + params["b1"])
        with jax.named_scope("out"):
            return jax.nn.softmax(h @ params["w2"] + params["b2"], axis=-1)

    def make():
        rng = np.random.default_rng(0)
        params = {"w1": rng.standard_normal((4, 8)), "b1": np.zeros(8),
                  "w2": rng.standard_normal((8, 3)), "b2": np.zeros(3)}
        return mlp, (params, rng.standard_normal((5, 4)))
""")


def test_model_command_measures_a_jax_function(tmp_path):
    (tmp_path / "tests_jax_factory.py").write_text(FACTORY)
    done = subprocess.run([sys.executable, "-m", "roundoff_coverage", "model",
                           "tests_jax_factory.py:make", "--out", "r.json", "--samples", "1",
                           "--jobs", "1", "--quiet"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    graph = routes.load_graph(tmp_path / "r.json.graph.json")
    assert graph.source["frontend"] == "jax"
    nodes = {r["node"] for r in doc["rows"] if r["node_index"] is not None}
    assert {"dot_general", "dot_general_1", "tanh", "exp"} <= nodes, \
        [(r["node"], r["status"], r["reason"]) for r in doc["rows"]][:3]
    assert {r["module"] for r in doc["rows"]} >= {"hidden", "out"}
    grads = {r["node"] for r in doc["rows"] if r["route"] == "gradient"
             and r["node_index"] is None}
    assert grads == {"input:params.w1", "input:params.b1", "input:params.w2",
                     "input:params.b2", "input:x"}
    assert all(r["status"] == "ok" for r in doc["rows"])


def test_importing_routes_does_not_import_jax():
    code = ("import sys; import roundoff_coverage.routes as r; "
            "print('jax' in sys.modules, hasattr(r, 'from_jax'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr

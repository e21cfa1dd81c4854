"""The real-model zoo (issue 37): architectures users bring, each built by its own library
from a tiny config with seeded weights (tests/zoo_models.py), captured as they are by
routes.from_torch, then the graph run in binary64 and compared with torch's own float64 run
of the same model (an independent implementation as the oracle): every output and every
parameter gradient, normwise relative difference <= 1e-10.  Also: outputs named by the
model's fields, integer inputs read as indices or as numbers, ``model --list-unsupported``
listing every refusal at once, and one ``model`` run of GPT-2 in bfloat16 end to end."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from roundoff_coverage import reports, routes  # noqa: E402
from conftest import one_error, run_cli  # noqa: E402
from torch_float64 import TOL, worst_difference  # noqa: E402
from zoo_models import ZOO, libraries, needs  # noqa: E402

def _built(key):
    lib = needs(key)
    if lib is not None and libraries()[lib] is None:
        pytest.skip(f"{lib} is not installed")
    return ZOO[key]()


@pytest.mark.parametrize("key", list(ZOO))
def test_captured_model_matches_torch_float64_values_and_gradients(key):
    g, worst = worst_difference(*_built(key))
    print(f"{key}: {len(g.nodes)} nodes, max normwise relative difference "
          f"{max(worst.values()):.2e} ({max(worst, key=worst.get)})")
    assert max(worst.values()) <= TOL, worst


class _GroupedAttention(torch.nn.Module):
    """Grouped-query attention as torch's own SDPA computes it (enable_gqa): 4 query heads
    over 2 key and value heads, causal or not."""

    def __init__(self, causal):
        super().__init__()
        self.q, self.kv = torch.nn.Linear(8, 4 * 4), torch.nn.Linear(8, 2 * 2 * 4)
        self.causal = causal

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 4, 4).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, 2, 4).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                                                is_causal=self.causal)


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_matches_torch_float64(causal):
    torch.manual_seed(0)
    model, x = _GroupedAttention(causal).eval(), torch.randn(2, 5, 8)
    g, worst = worst_difference(model, (x,))
    assert sum(n.op.name == "broadcast" for n in g.nodes) >= 2      # keys and values
    assert max(worst.values()) <= TOL, worst


def test_outputs_are_named_by_the_models_fields_and_kept_by_the_artifact(tmp_path):
    model, args = _built("gpt2")
    g = routes.from_torch(model, args)
    assert g.output_names == ("logits", "cache.layers.0.keys", "cache.layers.0.values",
                              "cache.layers.1.keys", "cache.layers.1.values")
    g.save(tmp_path / "g.json")
    assert routes.load_graph(tmp_path / "g.json").output_names == g.output_names
    lstm, x = _built("lstm")
    assert routes.from_torch(lstm, x).output_names == ("out0", "out1.0", "out1.1")


def test_tied_parameters_are_one_input():
    model, args = _built("gpt2")
    assert model.lm_head.weight is model.transformer.wte.weight
    names = routes.from_torch(model, args).input_names
    assert "transformer.wte.weight" in names and "lm_head.weight" not in names


def test_integer_inputs_are_indices_or_numbers_by_their_use():
    model, (ids, mask, types) = _built("bert")
    g = routes.from_torch(model, (ids, mask, types))
    ports = dict(zip(g.input_names, g.inputs))
    # ids and token types index the embeddings (bounded by their rows); the padding mask is
    # read as numbers (compared), kept exactly.
    assert str(ports["input_ids"]) == "index<40>[2,6]"
    assert str(ports["token_type_ids"]) == "index<2>[2,6]"
    assert ports["attention_mask"].kind == "frozen"
    np.testing.assert_array_equal(g.example_inputs[1], mask.numpy())


class _MovedIds(torch.nn.Module):
    """Token ids cast, sliced and flattened before the embedding reads them."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(300, 4)

    def forward(self, ids):
        return self.embed(ids.to(torch.int32)[:, 1:].reshape(-1)) * 2


def test_ids_moved_before_the_embedding_stay_indices():
    torch.manual_seed(0)
    model, ids = _MovedIds(), torch.randint(0, 300, (2, 5))
    g, worst = worst_difference(model, (ids,))
    assert str(g.inputs[0]) == "index<300>[2,5]"
    # moved as int64 words between encodeIndex and decodeIndex
    assert [n.op.name for n in g.nodes][:3] == ["encodeIndex", "slice", "decodeIndex"]
    assert max(worst.values()) <= TOL, worst


def test_model_samples_keep_ids_and_masks_as_given():
    from roundoff_coverage.engine.samples import ModelError, sample_inputs
    model, args = _built("bert")
    g = routes.from_torch(model, args)
    samples = sample_inputs(g, 3, seed=5)
    for xs in samples:
        for name, x, example in zip(g.input_names[:3], xs, g.example_inputs):
            np.testing.assert_array_equal(x, example, err_msg=name)
    # the parameters are drawn around the example (the samples differ)
    assert not np.array_equal(samples[1][3], g.example_inputs[3])
    # ids given with --inputs must lie below the vocabulary: one line naming the input
    bad = np.array(g.example_inputs[0])
    bad[0, 0] = g.inputs[0].bounds[0]
    with pytest.raises(ModelError, match="--inputs: input_ids: got index 40 outside"):
        sample_inputs(g, 1, seed=5, given={"input_ids": bad})


def test_list_unsupported_names_every_operator_at_once(tmp_path, capsys, monkeypatch):
    # Three aten operators the table does not translate (lgamma, i0, digamma), the later
    # two computed from the first, each on its own line of the factory's file.
    (tmp_path / "gaps.py").write_text(textwrap.dedent("""
        import torch
        class Gaps(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
            def forward(self, x):
                h = torch.lgamma(self.lin(x).exp())
                h = torch.special.i0(h)
                return torch.digamma(h) + h
        def make():
            torch.manual_seed(0)
            return Gaps(), (torch.randn(2, 4),)
        def whole():
            torch.manual_seed(0)
            return torch.nn.Linear(4, 2), (torch.randn(2, 4),)
    """))
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli(capsys, "model", "gaps.py:make", "--list-unsupported")
    assert status == 1, err
    lines = out.splitlines()
    ops = [line.split("\t")[0] for line in lines[:-1]]
    assert ops == ["aten.lgamma.default", "aten.i0.default", "aten.digamma.default"]
    assert [line.split("\t")[2] for line in lines[:-1]] == ["gaps.py:8", "gaps.py:9",
                                                             "gaps.py:10"]
    assert lines[-1].startswith("3 nodes of 3 aten operators do not map")
    status, out, _ = run_cli(capsys, "model", "gaps.py:whole", "--list-unsupported")
    assert status == 0 and out.strip().endswith("the model captures")
    # Without the flag the capture stops at the first, in one line, exit 2.
    status, _, err = run_cli(capsys, "model", "gaps.py:make", "--out", "r.json")
    assert status == 2
    one_error(err, "aten.lgamma.default", "node lgamma", "gaps.py:8")


def test_a_factory_may_give_keyword_arguments(tmp_path, capsys, monkeypatch):
    """(model, args, kwargs): the keyword arguments reach the model (a loss with labels
    given by name; -100 marks an ignored label); a third item that is not a dict is a
    one-line error, exit 2."""
    (tmp_path / "kw.py").write_text(textwrap.dedent("""
        import torch
        class Classifier(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 3)
            def forward(self, x, labels=None):
                return torch.nn.functional.cross_entropy(self.lin(x), labels)
        def make():
            torch.manual_seed(0)
            return Classifier(), (torch.randn(3, 4),), {"labels": torch.tensor([0, -100, 2])}
        def bad():
            return Classifier(), (torch.randn(3, 4),), [1]
    """))
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli(capsys, "model", "kw.py:make", "--formats", "bfloat16",
                               "--routes", "forward", "--out", "r.json", "--quiet")
    assert status == 0, err
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    loss = [r for r in rows if r["node"] == "output:out0" and r["route"] == "forward"]
    assert loss and loss[0]["status"] == "ok" and loss[0]["norm_rel"] < 2 ** -6
    status, _, err = run_cli(capsys, "model", "kw.py:bad", "--out", "s.json")
    assert status == 2
    one_error(err, "(model, example_args, example_kwargs as a dict)")


def _zoo_factory(key, tmp_path, monkeypatch):
    """``factory.py:make`` in tmp_path (the working folder) giving zoo model ``key``."""
    (tmp_path / "factory.py").write_text(textwrap.dedent(f"""
        from zoo_models import ZOO
        def make():
            return ZOO["{key}"]()
    """))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("key", list(ZOO))
def test_every_zoo_model_runs_in_bfloat16_with_a_page(key, tmp_path, capsys, monkeypatch):
    """``roundoff-coverage model`` on each zoo model as a user runs it (its factory, forward
    values in bfloat16, one sample, the HTML report): exit 0, every row measured, a model
    page naming every output of the model."""
    _built(key)                                     # skips without the model's library
    _zoo_factory(key, tmp_path, monkeypatch)
    status, out, err = run_cli(capsys, "model", "factory.py:make", "--routes", "forward",
                               "--formats", "bfloat16", "--samples", "1", "--jobs", "1",
                               "--attribution", "none", "--quiet", "--out", "r.json",
                               "--html", "html")
    assert status == 0, err
    rows = reports.load(tmp_path / "r.json")
    assert len(rows) > 0 and set(rows["status"]) == {"ok"}, set(rows["status"])
    page = (tmp_path / "html" / "model.html").read_text()
    outputs = {n for n in rows["node"] if n.startswith("output:")}
    assert outputs and all(n in page for n in outputs), outputs


@pytest.mark.parametrize("key", ["bert"])
def test_model_command_runs_a_transformers_model_in_bfloat16(key, tmp_path, capsys,
                                                            monkeypatch):
    _built(key)                                     # skips without transformers
    _zoo_factory(key, tmp_path, monkeypatch)
    status, out, err = run_cli(capsys, "model", "factory.py:make", "--routes", "forward",
                               "--formats", "bfloat16", "--samples", "1", "--jobs", "1",
                               "--implementations", "torch", "--attribution", "none",
                               "--quiet", "--out", "r.json")
    assert status == 0, err
    rows = reports.load(tmp_path / "r.json")
    assert len(rows) > 0 and set(rows["status"]) == {"ok"}, set(rows["status"])
    first = {"gpt2": "output:logits", "bert": "output:last_hidden_state"}[key]
    # the model's own code run by torch in bfloat16 (its ids and mask in their dtypes)
    assert {"emulated", "torch"} <= set(rows[rows["node"] == first]["implementation"])
    meta = json.loads((tmp_path / "r.json").read_text())["meta"]
    assert meta["selection"]["formats"] == ["bfloat16"]

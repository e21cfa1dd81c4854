"""Graph artifacts (issue 28): ``graph.save`` / ``routes.load_graph`` / ``routes.graph_hash``.

Save then load is the identity: the loaded graph has the same inputs, constants (bit for
bit), nodes (decode(encode) of each operator), names, modules, outputs, example inputs and
source, and its binary64 forward values and gradients are bit-identical to the original's,
on a graph built by hand (no torch) and on every captured model of test_torch_capture.py.
The JSON is stable (save, load, save: the same bytes); float words agree with the format
encoder (formats.encode, an independent implementation); each refusal is one line."""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import pickle

import ml_dtypes
import numpy as np
import pytest

from roundoff_coverage import formats, numerics, routes
from roundoff_coverage.routes import artifact, artifact_load
from roundoff_coverage.routes import ports as P
from conftest import one_error, run_cli

try:
    import torch_models                # the captured test models (needs torch)
except ImportError:                    # torch is the optional extra [torch]
    torch_models = None
MODEL_KEYS = list(torch_models.models()) if torch_models else []
SPECIALS = np.array([2.0, -0.0, 5e-324])          # a signed zero and the least subnormal


def hand_built() -> routes.Graph:
    """y = select(mask, sort(x * c).values, clamp(x, lo, hi)), e = embedding(w, ids), and
    sort's indices: every constant kind (float64, float32, Boolean, index, a scalar), a
    two-output node, an index output, example inputs of float and integer arrays."""
    g = routes.Graph(x=P.value((3,)), w=P.value((5, 3)), ids=P.index((5,), (3,)), lo=P.frozen())
    c = g.constant(SPECIALS, name="c")
    c32 = g.constant(np.array([0.1, -3.5, 7.0], dtype=np.float32), name="c32")
    mask = g.constant(np.array([True, False, True]), name="mask")
    pos = g.constant(np.array([4, 0, 2]), P.index((5,), (3,)))
    hi = g.constant(np.array(0.5), name="hi")
    x = g.input("x")
    h = g.apply(routes.op("mul", shape=(3,)), g.apply(routes.op("mul", shape=(3,)), x, c,
                                                      name="h", module="layer.0"), c32)
    values, order = g.apply(routes.op("sort", shape=(3,)), h, name="sort", module="layer.1")
    clamped = g.apply(routes.op("clamp", shape=(3,)), x, g.input("lo"), hi)
    y = g.apply(routes.op("select", shape=(3,)), mask, values, clamped, name="y")
    e = g.apply(routes.op("embedding", num=5, dim=3, shape=(3,)), g.input("w"), g.input("ids"))
    e2 = g.apply(routes.op("embedding", num=5, dim=3, shape=(3,)), g.input("w"), pos)
    g.output(y, g.apply(routes.op("add", shape=(3, 3)), e, e2), order)
    g.example_inputs = (np.array([1.5, -0.25, 3.0]), np.arange(15.0).reshape(5, 3) / 7,
                        np.array([1, 4, 1]), np.array(-1.0))
    return g


def _sweep(g: routes.Graph) -> list:
    """The binary64 forward values and the gradient at every value input, as arrays."""
    rule = g.rule(numerics.emulated("binary64"))
    ys, pullback = rule.prepare(g.example_inputs, [p.differentiable for p in g.inputs])
    rng = np.random.default_rng(3)
    cots = [rng.standard_normal(p.shape) if p.differentiable else None for p in g.outputs]
    grads = [x for x in pullback(cots) if x is not None]
    return [np.asarray(v) for v in list(ys) + grads]


def _bits(a) -> bytes:
    """An array's dtype, shape and bytes: equal exactly when the arrays are bit-identical."""
    a = np.ascontiguousarray(a)
    return str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()


def _round_trip(g, tmp_path):
    """(loaded graph, bytes saved from g, bytes saved from the loaded graph)."""
    first, second = tmp_path / "g.json", tmp_path / "again.json"
    g.save(first)
    loaded = routes.load_graph(first)
    loaded.save(second)
    return loaded, first.read_bytes(), second.read_bytes()


def _assert_same_graph(g, h):
    assert h.input_names == g.input_names and h.inputs == g.inputs
    assert h.constant_ports == g.constant_ports and h.constant_names == g.constant_names
    assert [_bits(c) for c in h.constants] == [_bits(c) for c in g.constants]
    assert h.nodes == g.nodes                       # ops (decode(encode)), args, names, modules
    assert h.output_refs == g.output_refs and h.source == g.source
    assert [_bits(x) for x in h.example_inputs] == [_bits(x) for x in g.example_inputs]


# ----- round trips -------------------------------------------------------------------------------
def test_hand_built_graph_round_trips_bit_identically_and_stably(tmp_path):
    g = hand_built()
    h, saved, resaved = _round_trip(g, tmp_path)
    _assert_same_graph(g, h)
    assert saved == resaved and saved.endswith(b"\n")
    assert [_bits(v) for v in _sweep(h)] == [_bits(v) for v in _sweep(g)]
    assert h.source == {} and h.node_names[0] == "h" and h.node_modules[2] == "layer.1"


@pytest.mark.parametrize("key", MODEL_KEYS)
def test_captured_model_round_trips_bit_identically_and_stably(key, tmp_path):
    import torch
    model, args = torch_models.in_float64(*torch_models.models()[key])
    g = routes.from_torch(model, args)
    h, saved, resaved = _round_trip(g, tmp_path)
    _assert_same_graph(g, h)
    assert saved == resaved
    assert [_bits(v) for v in _sweep(h)] == [_bits(v) for v in _sweep(g)]
    assert h.source == {"frontend": "torch", "module": "torch_models",
                        "class": type(model).__qualname__, "torch": str(torch.__version__)}


def test_document_has_the_schema_and_each_node_as_its_wire_record(tmp_path):
    g = hand_built()
    g.save(tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    assert set(doc) == set(artifact.KEYS) and doc["schema"] == "roundoff-coverage-graph/2"
    assert [n["op"] for n in doc["nodes"]] == [routes.encode(n.op) for n in g.nodes]
    assert doc["nodes"][2] == {"op": routes.encode(g.nodes[2].op), "args": [["node", 1, 0]],
                               "name": "sort", "module": "layer.1"}
    assert doc["outputs"] == [["node", 4, 0], ["node", 7, 0], ["node", 2, 1]]
    assert doc["inputs"][2] == {"name": "ids", "port": {"kind": "index", "shape": [3],
                                                        "bounds": [5]}}
    assert doc["constants"][3]["array"] == {"dtype": "int64", "shape": [3], "values": [4, 0, 2]}
    assert doc["constants"][4]["array"] == {"format": "binary64", "shape": [],
                                            "hex": "3fe0000000000000"}     # 0.5


@pytest.mark.parametrize("fmt,dtype", [("binary64", np.float64), ("binary32", np.float32),
                                       ("binary16", np.float16),
                                       ("bfloat16", ml_dtypes.bfloat16),
                                       ("float8_e4m3fn", ml_dtypes.float8_e4m3fn)])
def test_float_words_are_the_format_encoding_and_decode_to_the_same_array(fmt, dtype):
    values = np.array([[1.5, -0.0], [-3.25, np.inf if fmt != "float8_e4m3fn" else 448.0]])
    a = values.astype(dtype)
    rec = artifact.array_record(a, "test")
    assert rec["format"] == fmt and rec["shape"] == [2, 2]
    want = formats.encode(a.astype(np.float64), fmt).reshape(-1)
    digits = formats.get(fmt).bits // 4
    assert [int(rec["hex"][i:i + digits], 16) for i in range(0, len(rec["hex"]), digits)] == \
        [int(b) for b in want]
    back = artifact_load.read_array(json.loads(json.dumps(rec)), "test")
    assert back.dtype == a.dtype and _bits(back) == _bits(a)


def test_a_nan_payload_and_sign_come_back_bit_for_bit():
    a = np.array([0xFFF0000000000123, 0x7FF8000000000001], dtype=np.uint64).view(np.float64)
    rec = artifact.array_record(a, "test")
    assert rec["hex"] == "fff0000000000123" "7ff8000000000001"
    assert _bits(artifact_load.read_array(rec, "test")) == _bits(a)


def test_graph_hash_is_the_sha256_of_the_canonical_document(tmp_path):
    g = hand_built()
    path = tmp_path / "g.json"
    g.save(path)
    digest = hashlib.sha256(path.read_bytes().rstrip(b"\n")).hexdigest()
    assert routes.graph_hash(g) == routes.graph_hash(path) == digest
    indented = tmp_path / "indented.json"
    indented.write_text(json.dumps(json.loads(path.read_text()), indent=2))
    assert routes.graph_hash(indented) == digest               # formatting does not count
    g.constants[0] = np.nextafter(SPECIALS, np.inf)            # one ulp up: another artifact
    assert routes.graph_hash(g) != digest


def test_the_file_is_json_of_the_whole_document_written_an_array_at_a_time(tmp_path):
    # save splices each array's words into the canonical text of the rest (pieces); the
    # file is json's own canonical text of the whole document, its hash save's.
    g = hand_built()
    digest = g.save(tmp_path / "g.json")
    text = artifact.canonical(artifact.to_document(g))
    assert (tmp_path / "g.json").read_text() == text + "\n"
    assert digest == hashlib.sha256(text.encode("ascii")).hexdigest() == routes.graph_hash(g)


def test_graph_hash_of_any_json_document_is_the_sha256_of_its_canonical_text(tmp_path):
    # An array record whose hex is not a string (a malformed artifact, which load_graph
    # refuses) is hashed as json writes it.
    doc = artifact.to_document(hand_built())
    doc["constants"][0]["array"]["hex"] = [1, 2]
    (tmp_path / "odd.json").write_text(json.dumps(doc))
    assert routes.graph_hash(tmp_path / "odd.json") == \
        hashlib.sha256(artifact.canonical(doc).encode("ascii")).hexdigest()


def test_a_version_1_document_with_word_lists_still_loads(tmp_path):
    g = hand_built()
    doc = artifact.to_document(g)
    doc["schema"] = "roundoff-coverage-graph/1"
    for rec in [c["array"] for c in doc["constants"]] + list(doc["example_inputs"] or []):
        if "hex" in rec:
            digits = formats.get(rec["format"]).bits // 4
            text = rec.pop("hex")
            rec["words"] = [text[i:i + digits] for i in range(0, len(text), digits)]
    (tmp_path / "v1.json").write_text(json.dumps(doc))
    h = routes.load_graph(tmp_path / "v1.json")
    _assert_same_graph(g, h)
    assert [_bits(c) for c in h.constants] == [_bits(c) for c in g.constants]


def test_saving_an_array_without_a_named_format_is_refused_in_one_line(tmp_path):
    g = routes.Graph(x=P.value((1,)))
    g.constant(np.array([1.0 + 0j]).astype(object), P.frozen((1,)), name="m")
    with pytest.raises(ValueError) as info:
        g.save(tmp_path / "g.json")
    assert str(info.value) == ("graph.save: constant 0 'm': a object array has no named "
                               "format (float64, float32, float16, ml_dtypes floats, integers "
                               "and Booleans are written)")


# ----- refusals ----------------------------------------------------------------------------------
def _set(path, value):
    """A mutation of the document: the entry at ``path`` (keys and indices) set to ``value``,
    or deleted when ``value`` is DELETE."""
    def mutate(doc):
        *head, last = path
        for k in head:
            doc = doc[k]
        if value is DELETE:
            del doc[last]
        else:
            doc[last] = value
    return mutate


DELETE = object()
REFUSALS = {
    "unknown-schema": (_set(["schema"], "other-graph/1"),
                       "unknown schema 'other-graph/1' (this reader reads "
                       "roundoff-coverage-graph/2)"),
    "newer-version": (_set(["schema"], "roundoff-coverage-graph/3"),
                      "schema roundoff-coverage-graph/3 is newer than this "
                      "reader's roundoff-coverage-graph/2"),
    "missing-key": (_set(["outputs"], DELETE), "the document misses key 'outputs'"),
    "unknown-key": (_set(["extra"], 1),
                    "the document has unknown key 'extra' (keys: schema, source, "
                    "inputs, constants, nodes, outputs, example_inputs, output_names)"),
    "malformed-node": (_set(["nodes", 1, "args"], DELETE),
                       "node 1: the record misses key 'args'"),
    "unknown-operator": (_set(["nodes", 0, "op", "tag"], "mull"),
                         "node 0 'h': decode: unknown operator tag 'mull' (close "
                         "matches: mul, mulhi, matmul)"),
    "malformed-reference": (_set(["nodes", 1, "args", 0], ["node", 0]),
                            "node 1 (mul): argument 0 must be [\"input\", i], "
                            "[\"constant\", i] or [\"node\", k, j] (got ['node', 0])"),
    "later-node": (_set(["nodes", 1, "args", 0], ["node", 3, 0]),
                   "node 1 (mul): argument 0 refers to node 3, not one of the "
                   "nodes before it (0 to 0)"),
    "missing-output": (_set(["nodes", 3, "args", 1], ["node", 2, 2]),
                       "node 3 (clamp): argument 1 refers to output 2 of node 2, "
                       "which has 2"),
    "port-mismatch": (_set(["nodes", 0, "args", 0], ["input", 2]),
                      "node 0 'h' (mul): argument x expects value[3] but input 2 "
                      "is index<5>[3]"),
    "unknown-constant": (_set(["nodes", 0, "args", 1], ["constant", 9]),
                         "node 0 'h' (mul): argument 1 refers to constant 9, but "
                         "the graph has 5 constants"),
    "output-reference": (_set(["outputs", 0], ["node", 9, 0]),
                         "output 0 refers to node 9, not one of the graph's nodes "
                         "(0 to 7)"),
    "bad-word": (_set(["constants", 0, "array", "hex"], "3ff0000000000000-0" + "0" * 30),
                 "constant 0 'c' array: hex holds lower-case hex digits only (got '-' in "
                 "element 1)"),
    "hex-length": (_set(["constants", 0, "array", "hex"], "3ff0"),
                   "constant 0 'c' array: 4 hex digits, not a whole number of binary64 "
                   "words (16 digits each)"),
    "unknown-format": (_set(["constants", 0, "array", "format"], "binary128"),
                       "constant 0 'c' array: format must be a catalog format "
                       "with an array type of its width (binary64, binary32, binary16, "
                       "bfloat16, float8_e4m3fn...) (got 'binary128')"),
    "element-count": (_set(["constants", 0, "array", "shape"], [2]),
                      "constant 0 'c' array: 3 elements for shape [2] "
                      "(2 expected)"),
    "constant-port": (_set(["constants", 2, "port"], {"kind": "index", "shape": [3],
                                                      "bounds": [2]}),
                      "constant 2 'mask': expects index<2>[3] (got a bool array, "
                      "not integers)"),
    "bad-port": (_set(["inputs", 0, "port", "kind"], "complex"),
                 "input 0 'x' port: kind must be one of value, frozen, detached, "
                 "index, bool, integer (got 'complex')"),
    "duplicate-input": (_set(["inputs", 1, "name"], "x"),
                        "input 1: duplicate name 'x'"),
    "example-out-of-bounds": (_set(["example_inputs", 2, "values", 0], 7),
                              "example input 2 'ids': expects index<5>[3] (got "
                              "index 7 outside [0, 5))"),
    "example-count": (_set(["example_inputs", 3], DELETE),
                      "example_inputs: 3 arrays for 4 inputs"),
}


@pytest.mark.parametrize("key", list(REFUSALS))
def test_a_malformed_document_is_refused_in_one_line_naming_the_place(key, tmp_path):
    mutate, message = REFUSALS[key]
    doc = artifact.to_document(hand_built())
    doc = json.loads(json.dumps(doc))              # JSON data, as a file holds it
    mutate(doc)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(routes.RouteError) as info:
        routes.load_graph(path)
    assert str(info.value) == f"{path}: {message}" and "\n" not in message


def test_a_file_that_is_not_json_is_refused_in_one_line(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"schema": ')
    with pytest.raises(routes.RouteError) as info:
        routes.load_graph(path)
    assert str(info.value) == (f"{path}: not JSON (Expecting value at line 1 "
                               f"column 12)")


# ----- one reader: hostile files, one line "FILE: PLACE: what is wrong" ---------------------------

def _document() -> dict:
    return json.loads(json.dumps(artifact.to_document(hand_built())))


def test_a_huge_integer_and_a_nan_literal_name_the_file_and_the_place(tmp_path):
    text = json.dumps(_document())                  # node 0's first argument: ["input", 0]
    path = tmp_path / "g.json"
    path.write_text(text.replace('["input", 0]', '["input", ' + "9" * 5000 + "]", 1))
    with pytest.raises(routes.RouteError) as info:
        routes.load_graph(path)
    assert str(info.value) == (f"{path}: nodes[0].args[0][1]: an integer of 5000 digits (a "
                               f"graph artifact's have at most 40)")
    doc = _document()
    path.write_text(json.dumps(doc).replace('"source": {}', '"source": {"eps": NaN}'))
    with pytest.raises(routes.RouteError) as info:
        routes.load_graph(path)
    assert str(info.value) == (f"{path}: source.eps: NaN is not a JSON number (a graph "
                               f"artifact writes floats as bit words)")


def test_a_byte_order_mark_is_read_by_the_api_and_the_command_alike(tmp_path, capsys,
                                                                    monkeypatch):
    g = hand_built()
    g.save(tmp_path / "plain.json")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + (tmp_path / "plain.json").read_bytes())
    loaded = routes.load_graph(tmp_path / "bom.json")
    assert artifact.canonical(artifact.to_document(loaded)) + "\n" == \
        (tmp_path / "plain.json").read_text()
    assert routes.graph_hash(str(tmp_path / "bom.json")) == routes.graph_hash(g)
    monkeypatch.chdir(tmp_path)
    status, _, err = run_cli(capsys, "model", "bom.json", "--routes", "forward", "--samples",
                             "1", "--jobs", "1", "--quiet", "--out", "r.json")
    assert (status, err) == (0, "")


def test_the_command_refuses_a_bad_artifact_in_one_line_naming_file_and_place(tmp_path,
                                                                            capsys,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = _document()
    doc["nodes"][1]["args"][0] = ["node", 3, 0]
    (tmp_path / "g.json").write_text(json.dumps(doc))
    (tmp_path / "latin.json").write_bytes(b'{"schema": "\xe9"}')
    status, _, err = run_cli(capsys, "model", "g.json", "--out", "r.json")
    assert status == 2
    assert one_error(err) == ("roundoff-coverage: error: g.json: node 1 (mul): argument 0 "
                              "refers to node 3, not one of the nodes before it (0 to 0)")
    status, _, err = run_cli(capsys, "model", "latin.json", "--out", "r.json")
    assert status == 2
    assert one_error(err) == ("roundoff-coverage: error: latin.json: not UTF-8 text (byte "
                              "0xe9 at offset 12): a graph artifact is JSON (graph.save)")


class _Payload:
    """Unpickled, it would run ``touch <marker>``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_the_loader_never_imports_unpickles_or_evaluates_what_a_file_names(tmp_path,
                                                                          monkeypatch):
    marker = tmp_path / "PWNED"
    payload = pickle.dumps(_Payload(marker))
    imported = []
    real_import = builtins.__import__

    def watch(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", watch)
    for guard in ("loads", "load"):
        monkeypatch.setattr(pickle, guard, lambda *a, **k: pytest.fail("unpickled"))
    doc = _document()
    cases = {}
    doc["nodes"][0]["op"]["tag"] = "os.system"
    cases["tag"] = json.dumps(doc)
    doc = _document()
    doc["source"] = {"module": "os", "class": "system", "pickle": payload.decode("latin-1"),
                     "eval": f"__import__('os').system('touch {marker}')"}
    doc["nodes"][0]["op"]["tag"] = "__import__('os').system('touch x')"
    cases["source"] = json.dumps(doc)
    messages = {}
    for key, text in cases.items():
        (tmp_path / f"{key}.json").write_text(text)
        with pytest.raises(routes.RouteError) as info:
            routes.load_graph(tmp_path / f"{key}.json")
        messages[key] = str(info.value)
    (tmp_path / "pickle.json").write_bytes(payload)
    with pytest.raises(routes.RouteError) as info:
        routes.load_graph(tmp_path / "pickle.json")
    messages["pickle"] = str(info.value)
    assert messages["tag"] == (f"{tmp_path / 'tag.json'}: node 0 'h': decode: unknown "
                               f"operator tag 'os.system'")
    assert messages["source"].startswith(f"{tmp_path / 'source.json'}: node 0 'h': decode: "
                                         f"unknown operator tag \"__import__(")
    assert messages["pickle"].startswith(f"{tmp_path / 'pickle.json'}: not ")
    assert all("\n" not in m for m in messages.values())
    assert not marker.exists() and not {"os", "posix", "subprocess"} & set(imported)

"""Graph artifacts: ``graph.save(path)`` writes a Graph as one JSON document (this module);
``load_graph(path)`` reads it back and ``graph_hash(path or graph)`` names it
(routes/artifact_load.py, above routes.graph, whose Graph it builds).

The document (schema ``roundoff-coverage-graph/1``) is an object with exactly these keys:

- ``schema``: ``"roundoff-coverage-graph/1"`` (name / version);
- ``source``: what built the graph (``graph.source``: ``{}`` for a graph built by hand;
  from_torch writes frontend, module, class and torch version);
- ``inputs``: ``[{"name": "x", "port": PORT}, ...]`` in order;
- ``constants``: ``[{"name": "c", "port": PORT, "array": ARRAY}, ...]`` (Ref index order);
- ``nodes``: ``[{"op": RECORD, "args": [REF, ...], "name": "", "module": ""}, ...]`` where
  RECORD is the operator's wire record (``routes.encode``);
- ``outputs``: ``[REF, ...]``;
- ``example_inputs``: ``null`` or ``[ARRAY, ...]``, one per input;
- ``output_names`` (only when the outputs are named otherwise than ``out0``, ``out1``...:
  from_torch names them by the model's fields): ``["logits", ...]``, one per output.

PORT is ``{"kind": "index", "shape": [3], "bounds": [10]}`` (``bounds`` for index ports,
``signed`` and ``width`` for integer ports, as routes.ports.Port holds them).  REF is
``["input", i]``, ``["constant", i]`` or ``["node", k, j]`` (output j of node k < the
reading node).  ARRAY is ``{"format": "binary64", "shape": [2], "hex": "3ff8...c000..."}``
for floating arrays: each element's bit pattern in the named format of its dtype (float64
is binary64, float32 binary32, float16 binary16, an ml_dtypes float its catalog name), as
lower-case hex of the format's width, the elements' words joined in C order into one string
(so every value -- signed zeros, subnormals, NaN payloads -- comes back bit for bit, and a
language model's hundred million weights are one string, not a hundred million);
``{"dtype": "int64", "shape": [...], "values": [...]}`` for integer and
``{"dtype": "bool", ...}`` for Boolean arrays.  Version 1 wrote the floating words as a list
(``"words": ["3ff8...", ...]``); the reader takes both.

Written canonically (keys sorted, no spaces, ASCII, one final newline), so a graph saved,
loaded and saved again gives the same bytes, and ``graph_hash`` (sha256 of that canonical
text) names what a results file measured.  The document records the operators, not the
revision of this package that evaluates them (routes.codec).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets

import numpy as np

from roundoff_coverage import formats

from .codec import encode
from .ports import Port

SCHEMA, VERSION = "roundoff-coverage-graph", 2
SCHEMA_ID = f"{SCHEMA}/{VERSION}"
KEYS = ("schema", "source", "inputs", "constants", "nodes", "outputs", "example_inputs")
OPTIONAL_KEYS = ("output_names",)

# numpy's IEEE dtypes by their IEEE names; ml_dtypes floats keep theirs (the catalog's).
IEEE = {"float16": "binary16", "float32": "binary32", "float64": "binary64"}


# ----- writing ----------------------------------------------------------------------------------
def port_record(port: Port) -> dict:
    """A port as JSON data: kind and shape, plus bounds (index) or signed and width
    (integer)."""
    rec = {"kind": port.kind, "shape": list(port.shape)}
    if port.bounds is not None:
        rec["bounds"] = list(port.bounds)
    if port.kind == "integer":
        rec["signed"], rec["width"] = port.signed, port.width
    return rec


def format_of(dtype):
    """The catalog format whose words are ``dtype``'s bit patterns, or None."""
    name = IEEE.get(dtype.name, dtype.name)
    if name not in formats.CATALOG or formats.CATALOG[name].bits != 8 * dtype.itemsize:
        return None
    return formats.CATALOG[name]


def array_record(array, where: str, lazy: bool = False) -> dict:
    """An array as JSON data (module docstring: ARRAY); ValueError for a dtype without a
    named format (object arrays, float4 in a byte, complex).  ``lazy``: a floating array's
    ``hex`` is a function making it (``pieces`` calls it when it writes the record)."""
    a = np.asarray(array)
    shape, flat = list(a.shape), np.ascontiguousarray(a.reshape(-1))   # C order
    if a.dtype.kind == "b":
        return {"dtype": "bool", "shape": shape, "values": [bool(v) for v in flat]}
    if a.dtype.kind in "iu":
        return {"dtype": a.dtype.name, "shape": shape, "values": [int(v) for v in flat]}
    fmt = format_of(a.dtype)
    if fmt is None:
        raise ValueError(f"graph.save: {where}: a {a.dtype} array has no named format (float64, "
                         f"float32, float16, ml_dtypes floats, integers and Booleans are "
                         f"written)")
    return {"format": fmt.name, "shape": shape,
            "hex": (lambda: _hex(flat, fmt)) if lazy else _hex(flat, fmt)}


def _hex(flat, fmt) -> str:
    """The words of a flat array of ``fmt``'s dtype joined: each its bit pattern as
    fmt.bits // 4 lower-case hex digits."""
    digits = fmt.bits // 4
    bits = flat.view(np.dtype(f"u{flat.dtype.itemsize}"))
    if digits != 2 * flat.dtype.itemsize:
        return "".join(format(int(b), f"0{digits}x") for b in bits)
    # Every word at once: the bits big-endian, as hex.
    return bits.astype(np.dtype(f">u{flat.dtype.itemsize}")).tobytes().hex()


def to_document(graph, lazy: bool = False) -> dict:
    """The graph as the JSON document of the module docstring (``lazy``: array_record's)."""
    names = graph.constant_names
    examples = graph.example_inputs
    document = {
        "schema": SCHEMA_ID,
        "source": dict(getattr(graph, "source", None) or {}),
        "inputs": [{"name": n, "port": port_record(p)}
                   for n, p in zip(graph.input_names, graph.inputs)],
        "constants": [{"name": n, "port": port_record(p),
                       "array": array_record(c, f"constant {i} {n!r}", lazy)}
                      for i, (c, p, n) in enumerate(zip(graph.constants,
                                                        graph.constant_ports, names))],
        "nodes": [{"op": encode(node.op), "args": [r.record() for r in node.args],
                   "name": node.name, "module": node.module} for node in graph.nodes],
        "outputs": [r.record() for r in graph.output_refs],
        "example_inputs": None if examples is None else
        [array_record(x, f"example input {i}", lazy) for i, x in enumerate(examples)],
    }
    defaults = tuple(f"out{i}" for i in range(len(graph.output_refs)))
    if tuple(graph.output_names) != defaults:
        document["output_names"] = list(graph.output_names)
    return document


def canonical(document) -> str:
    """The canonical JSON text of ``document``: keys sorted, no spaces, ASCII."""
    try:
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"graph.save: the document is not JSON data ({exc})") from None


def pieces(document):
    """The canonical text of ``document`` (canonical) in pieces, each floating array's
    ``hex`` on its own (made then where the document holds a function for it: to_document's
    ``lazy``), so that neither the whole text nor every array's words are held at once (a
    language model's weights are gigabytes of text).  Arrays lie in the constants' records
    and the example inputs only."""
    nonce, held = secrets.token_hex(8), []

    def hold(rec):
        if isinstance(rec, dict) and (isinstance(rec.get("hex"), str) or
                                      callable(rec.get("hex"))):
            held.append(rec["hex"])
            return {**rec, "hex": f"@{nonce}:{len(held) - 1}@"}
        return rec
    doc = dict(document)
    if isinstance(doc.get("constants"), list):
        doc["constants"] = [{**c, "array": hold(c["array"])} if isinstance(c, dict) and
                            "array" in c else c for c in doc["constants"]]
    if isinstance(doc.get("example_inputs"), list):
        doc["example_inputs"] = [hold(x) for x in doc["example_inputs"]]
    text, at = canonical(doc), 0
    for m in re.finditer(f"@{nonce}:(\\d+)@", text):
        yield text[at:m.start()]
        words = held[int(m.group(1))]
        yield words() if callable(words) else words
        at = m.end()
    yield text[at:]


def digest(document) -> str:
    """The sha256 (hex) of the canonical text of ``document`` (pieces)."""
    h = hashlib.sha256()
    for piece in pieces(document):
        h.update(piece.encode("ascii"))
    return h.hexdigest()


def save(graph, path) -> str:
    """Write ``graph`` to ``path`` as its canonical JSON document and a newline, one array at
    a time (pieces); the sha256 of the document (routes.graph_hash)."""
    h = hashlib.sha256()
    with open(path, "w", encoding="ascii") as f:
        for piece in pieces(to_document(graph, lazy=True)):
            f.write(piece)
            h.update(piece.encode("ascii"))
        f.write("\n")
    return h.hexdigest()

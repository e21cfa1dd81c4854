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
reading node).  ARRAY is ``{"format": "binary64", "shape": [2], "words": ["3ff8...", ...]}``
for floating arrays: each element's bit pattern in the named format of its dtype (float64
is binary64, float32 binary32, float16 binary16, an ml_dtypes float its catalog name), as
lower-case hex of the format's width, so every value (signed zeros, subnormals, NaN
payloads) comes back bit for bit; ``{"dtype": "int64", "shape": [...], "values": [...]}``
for integer and ``{"dtype": "bool", ...}`` for Boolean arrays.

Written canonically (keys sorted, no spaces, ASCII, one final newline), so a graph saved,
loaded and saved again gives the same bytes, and ``graph_hash`` (sha256 of that canonical
text) names what a results file measured.  The document records the operators, not the
revision of this package that evaluates them (routes.codec).
"""

from __future__ import annotations

import json

import numpy as np

from roundoff_coverage import formats

from .codec import encode
from .ports import Port

SCHEMA, VERSION = "roundoff-coverage-graph", 1
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


def array_record(array, where: str) -> dict:
    """An array as JSON data (module docstring: ARRAY); ValueError for a dtype without a
    named format (object arrays, float4 in a byte, complex)."""
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
    digits = fmt.bits // 4
    bits = flat.view(np.dtype(f"u{a.dtype.itemsize}"))
    if digits != 2 * a.dtype.itemsize:
        return {"format": fmt.name, "shape": shape,
                "words": [format(int(b), f"0{digits}x") for b in bits]}
    # Every word at once: the bits big-endian, as hex, cut every ``digits`` characters.
    text = bits.astype(np.dtype(f">u{a.dtype.itemsize}")).tobytes().hex()
    return {"format": fmt.name, "shape": shape,
            "words": [text[i:i + digits] for i in range(0, len(text), digits)]}


def to_document(graph) -> dict:
    """The graph as the JSON document of the module docstring."""
    names = graph.constant_names
    examples = graph.example_inputs
    document = {
        "schema": SCHEMA_ID,
        "source": dict(getattr(graph, "source", None) or {}),
        "inputs": [{"name": n, "port": port_record(p)}
                   for n, p in zip(graph.input_names, graph.inputs)],
        "constants": [{"name": n, "port": port_record(p),
                       "array": array_record(c, f"constant {i} {n!r}")}
                      for i, (c, p, n) in enumerate(zip(graph.constants,
                                                        graph.constant_ports, names))],
        "nodes": [{"op": encode(node.op), "args": [r.record() for r in node.args],
                   "name": node.name, "module": node.module} for node in graph.nodes],
        "outputs": [r.record() for r in graph.output_refs],
        "example_inputs": None if examples is None else
        [array_record(x, f"example input {i}") for i, x in enumerate(examples)],
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


def save(graph, path) -> None:
    """Write ``graph`` to ``path`` as its canonical JSON document and a newline."""
    text = canonical(to_document(graph)) + "\n"
    with open(path, "w", encoding="ascii") as f:
        f.write(text)

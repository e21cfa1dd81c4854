"""Reading graph artifacts back (the document: routes/artifact.py): ``load_graph(path)``
decodes every node and re-applies it (``Graph.apply`` checks the attributes and each
argument's port); every refusal is one RouteError line naming the place: ``load_graph: node
3 'relu_1' (relu): argument x expects value[3] but input 0 is index<5>[2]``.
``graph_hash(path or graph)``: the sha256 of the canonical text, which names what a results
file measured.
"""

from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np

from roundoff_coverage import formats

from .artifact import (IEEE, KEYS, OPTIONAL_KEYS, SCHEMA, SCHEMA_ID, VERSION, digest,
                       format_of, to_document)
from .codec import decode
from .errors import RouteError
from .graph import CONSTANT, INPUT, Graph, Ref
from .ports import KINDS, Port

_DTYPES = {v: k for k, v in IEEE.items()}


class _Bad(Exception):
    """A malformed part of the document (wrapped into RouteError with its place)."""


def graph_hash(source) -> str:
    """The sha256 (hex) of the canonical JSON of a Graph, or of the document at a path (read
    and re-written canonically, so indentation does not change it)."""
    if isinstance(source, Graph):
        return digest(to_document(source, lazy=True))
    document = _read(source)
    try:
        _schema(document)
    except RouteError as exc:
        raise RouteError(f"{source}: {str(exc).removeprefix('load_graph: ')}") from None
    return digest(document)


# ----- reading: the parts -----------------------------------------------------------------------
def _object(v, where, required, optional=()) -> dict:
    if not isinstance(v, dict):
        raise _Bad(f"{where} must be an object (got {type(v).__name__})")
    missing = [k for k in required if k not in v]
    if missing:
        raise _Bad(f"{where} misses key {missing[0]!r}")
    extra = sorted(k for k in v if k not in required and k not in optional)
    if extra:
        raise _Bad(f"{where} has unknown key {extra[0]!r} (keys: "
                   f"{', '.join(tuple(required) + tuple(optional))})")
    return v


def _list(v, where) -> list:
    if not isinstance(v, list):
        raise _Bad(f"{where} must be a list (got {type(v).__name__})")
    return v


def _int(v, where, lo=0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise _Bad(f"{where} must be an integer >= {lo} (got {v!r})")
    return v


def _str(v, where) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{where} must be a string (got {v!r})")
    return v


def _shape(v, where) -> tuple:
    return tuple(_int(n, f"{where} entry {i}") for i, n in enumerate(_list(v, where)))


def read_port(rec, where: str) -> Port:
    """The Port a port record names (_Bad on a malformed one)."""
    kind = _object(rec, f"{where} port", ("kind", "shape"),
                   ("bounds", "signed", "width")).get("kind")
    if kind not in KINDS:
        raise _Bad(f"{where} port: kind must be one of {', '.join(KINDS)} (got {kind!r})")
    bounds = rec.get("bounds")
    if bounds is not None:
        bounds = _shape(bounds, f"{where} port bounds")
    signed = rec.get("signed")
    if signed is not None and not isinstance(signed, bool):
        raise _Bad(f"{where} port: signed must be true or false (got {signed!r})")
    width = rec.get("width")
    if width is not None:
        width = _int(width, f"{where} port width", 1)
    try:
        return Port(kind, _shape(rec["shape"], f"{where} port shape"), bounds, signed, width)
    except ValueError as exc:
        raise _Bad(f"{where} {exc}") from None


def read_array(rec, where: str) -> np.ndarray:
    """The array an array record names (_Bad on a malformed one)."""
    if isinstance(rec, dict) and "format" in rec:
        if "words" not in rec:                      # version 2: the words joined
            _object(rec, where, ("format", "shape", "hex"))
            return _joined(rec["format"], rec["hex"], _shape(rec["shape"], f"{where} shape"),
                           where)
        _object(rec, where, ("format", "shape", "words"))
        shape, items = _shape(rec["shape"], f"{where} shape"), _list(rec["words"], where)
    else:
        _object(rec, where, ("dtype", "shape", "values"))
        shape, items = _shape(rec["shape"], f"{where} shape"), _list(rec["values"], where)
    if len(items) != int(np.prod(shape, dtype=np.int64)):
        raise _Bad(f"{where}: {len(items)} elements for shape {list(shape)} "
                   f"({int(np.prod(shape, dtype=np.int64))} expected)")
    if "format" in rec:
        return _words(rec["format"], items, where).reshape(shape)
    dtype = rec["dtype"]
    if dtype == "bool":
        if not all(isinstance(v, bool) for v in items):
            raise _Bad(f"{where}: a bool array holds true and false only")
        return np.array(items, dtype=bool).reshape(shape)
    if not isinstance(dtype, str) or not re.fullmatch(r"u?int(8|16|32|64)", dtype):
        raise _Bad(f"{where}: dtype must be bool or a numpy integer type (got {dtype!r})")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise _Bad(f"{where}: an {dtype} array holds integers only")
    info = np.iinfo(dtype)
    out = [v for v in items if not info.min <= v <= info.max]
    if out:
        raise _Bad(f"{where}: {out[0]} does not fit {dtype}")
    return np.array(items, dtype=dtype).reshape(shape)


_HEX = re.compile("[0-9a-f]*")


def _format(name, where) -> tuple:
    """(the catalog format ``name``, its array dtype), _Bad for a name without both."""
    fmt = formats.CATALOG.get(name) if isinstance(name, str) else None
    dtype = None
    if fmt is not None:
        dtype = np.dtype(_DTYPES.get(name) or getattr(ml_dtypes, name, "O"))
    if dtype is None or format_of(dtype) is not fmt:
        raise _Bad(f"{where}: format must be a catalog format with an array type of its width "
                   f"(binary64, binary32, binary16, bfloat16, float8_e4m3fn...) (got {name!r})")
    return fmt, dtype


def _joined(name, text, shape, where) -> np.ndarray:
    """A version 2 floating array: ``text`` the words of format ``name`` joined."""
    fmt, dtype = _format(name, where)
    digits, count = fmt.bits // 4, int(np.prod(shape, dtype=np.int64))
    if not isinstance(text, str):
        raise _Bad(f"{where}: hex must be a string of {digits} lower-case hex digits per "
                   f"element (got {type(text).__name__})")
    if len(text) % digits:
        raise _Bad(f"{where}: {len(text)} hex digits, not a whole number of {name} words "
                   f"({digits} digits each)")
    if len(text) != count * digits:
        raise _Bad(f"{where}: {len(text) // digits} elements for shape {list(shape)} "
                   f"({count} expected)")
    if not _HEX.fullmatch(text):
        at = next(i for i, ch in enumerate(text) if ch not in "0123456789abcdef")
        raise _Bad(f"{where}: hex holds lower-case hex digits only (got {text[at]!r} in "
                   f"element {at // digits})")
    return _decoded(text, digits, dtype).reshape(shape)


def _decoded(text, digits, dtype) -> np.ndarray:
    """Words of ``digits`` lower-case hex digits each, joined in ``text`` (checked), as a
    flat array of ``dtype``: all at once where a word fills the dtype's bytes."""
    if digits == 2 * dtype.itemsize:
        unsigned = np.dtype(f">u{dtype.itemsize}")
        return np.frombuffer(bytes.fromhex(text), dtype=unsigned).astype(
            unsigned.newbyteorder("=")).view(dtype)
    return np.array([int(text[i:i + digits], 16) for i in range(0, len(text), digits)],
                    dtype=np.dtype(f"u{dtype.itemsize}")).view(dtype)


def _words(name, words, where) -> np.ndarray:
    """Bit patterns of the catalog format ``name`` as an array of its dtype."""
    fmt, dtype = _format(name, where)
    digits = fmt.bits // 4
    # The words joined and read at once when each is a string of ``digits`` lower-case hex
    # digits (most arrays: millions of words); otherwise the first bad one is named.
    if all(type(w) is str for w in words) and set(map(len, words)) <= {digits}:
        joined = "".join(words)
        if _HEX.fullmatch(joined):
            return _decoded(joined, digits, dtype)
    pattern = re.compile(f"[0-9a-f]{{{digits}}}")
    bad = next((w for w in words if not isinstance(w, str) or not pattern.fullmatch(w)), None)
    raise _Bad(f"{where}: a {name} word is {digits} lower-case hex digits (got {bad!r})")


def _ref(rec, graph: Graph, before: int, where: str, scope: str = "the nodes before it") -> Ref:
    """The Ref a REF record names; only nodes below ``before`` (``scope`` in words) count."""
    rec = _list(rec, where)
    kind = rec[0] if rec else None
    if kind not in ("input", "constant", "node") or len(rec) != (3 if kind == "node" else 2):
        raise _Bad(f"{where} must be [\"input\", i], [\"constant\", i] or [\"node\", k, j] "
                   f"(got {rec!r})")
    if kind == "node":
        k, j = _int(rec[1], f"{where} node"), _int(rec[2], f"{where} output")
        if k >= before:
            held = f"0 to {before - 1}" if before else "none"
            raise _Bad(f"{where} refers to node {k}, not one of {scope} ({held})")
        outs = len(graph.nodes[k].op.outputs)
        if j >= outs:
            raise _Bad(f"{where} refers to output {j} of node {k}, which has {outs}")
        return Ref(k, j)
    i = _int(rec[1], f"{where} index")
    held = graph.inputs if kind == "input" else graph.constants
    if i >= len(held):
        raise _Bad(f"{where} refers to {kind} {i}, but the graph has {len(held)} {kind}s")
    return Ref(INPUT if kind == "input" else CONSTANT, i)


def _node(graph: Graph, k: int, rec) -> None:
    """Decode node ``k`` and apply it to ``graph`` (RouteError naming the node)."""
    where, op = f"node {k}", None
    try:
        rec = _object(rec, "the record", ("op", "args", "name", "module"))
        name, module = _str(rec["name"], "name"), _str(rec["module"], "module")
        where = f"node {k} {name!r}" if name else where
        op = decode(rec["op"])
        where = f"{where} ({op.name})"
        args = [_ref(r, graph, k, f"argument {i}")
                for i, r in enumerate(_list(rec["args"], "args"))]
        graph.apply(op, *args, name=name, module=module)
    except (_Bad, RouteError) as exc:
        message = str(exc)
        prefix = f"graph node {k} ({op.name}): " if op is not None else None
        if prefix and message.startswith(prefix):
            message = message[len(prefix):]              # Graph.apply's own node prefix
        raise RouteError(f"load_graph: {where}: {message}") from None


def _schema(document) -> None:
    """Refuse a document that is not an object of this schema and version."""
    if not isinstance(document, dict):
        raise RouteError(f"load_graph: the document must be a JSON object (got "
                         f"{type(document).__name__})")
    schema = document.get("schema")
    name, _, version = schema.partition("/") if isinstance(schema, str) else (None, "", "")
    if name != SCHEMA or not version.isdigit() or int(version) < 1:
        raise RouteError(f"load_graph: unknown schema {schema!r} (this reader reads "
                         f"{SCHEMA_ID})")
    if int(version) > VERSION:
        raise RouteError(f"load_graph: schema {schema} is newer than this reader's "
                         f"{SCHEMA_ID}")


def _wrap(fn, *args):
    """``fn(*args)``, a malformed part refused as a RouteError."""
    try:
        return fn(*args)
    except _Bad as exc:
        raise RouteError(f"load_graph: {exc}") from None


def from_document(document) -> Graph:
    """The Graph a document (module docstring) describes; RouteError (one line naming the
    place) for anything malformed, a reference to a later node or a port mismatch."""
    _schema(document)
    _wrap(_object, document, "the document", KEYS, OPTIONAL_KEYS)
    source = document["source"]
    if not isinstance(source, dict):
        raise RouteError(f"load_graph: source must be an object (got {type(source).__name__})")
    inputs = {}
    for i, rec in enumerate(_wrap(_list, document["inputs"], "inputs")):
        rec = _wrap(_object, rec, f"input {i}", ("name", "port"))
        name = _wrap(_str, rec["name"], f"input {i} name")
        if name in inputs:
            raise RouteError(f"load_graph: input {i}: duplicate name {name!r}")
        inputs[name] = _wrap(read_port, rec["port"], f"input {i} {name!r}")
    graph = Graph(**inputs)
    graph.source = dict(source)
    for i, rec in enumerate(_wrap(_list, document["constants"], "constants")):
        _constant(graph, i, rec)
    for k, rec in enumerate(_wrap(_list, document["nodes"], "nodes")):
        _node(graph, k, rec)
    outs = _wrap(_list, document["outputs"], "outputs")
    names = document.get("output_names")
    if names is not None:
        names = [_wrap(_str, n, f"output name {i}") for i, n in
                 enumerate(_wrap(_list, names, "output_names"))]
    graph.output(*(_wrap(_ref, r, graph, len(graph.nodes), f"output {i}", "the graph's nodes")
                   for i, r in enumerate(outs)), names=names)
    graph.example_inputs = _examples(graph, document["example_inputs"])
    return graph


def _constant(graph: Graph, i: int, rec) -> None:
    rec = _wrap(_object, rec, f"constant {i}", ("name", "port", "array"))
    name = _wrap(_str, rec["name"], f"constant {i} name")
    where = f"constant {i} {name!r}" if name else f"constant {i}"
    port = _wrap(read_port, rec["port"], where)
    array = _wrap(read_array, rec["array"], f"{where} array")
    bad = port.mismatch(array)
    if bad:
        raise RouteError(f"load_graph: {where}: expects {port} ({bad})")
    graph.constant(array, port, name=name)


def _examples(graph: Graph, recs):
    if recs is None:
        return None
    recs = _wrap(_list, recs, "example_inputs")
    if len(recs) != len(graph.inputs):
        raise RouteError(f"load_graph: example_inputs: {len(recs)} arrays for "
                         f"{len(graph.inputs)} inputs")
    out = []
    for i, (name, port, rec) in enumerate(zip(graph.input_names, graph.inputs, recs)):
        where = f"example input {i} {name!r}"
        array = _wrap(read_array, rec, where)
        bad = port.mismatch(array)
        if bad:
            raise RouteError(f"load_graph: {where}: expects {port} ({bad})")
        out.append(array)
    return tuple(out)


# No count, index, bound or integer word of a document has more digits (uint64: 20).
MAX_DIGITS = 40


class _Literal:
    """What the parser holds in place of a number no document has (an integer of more than
    MAX_DIGITS digits, NaN, Infinity): refused with its place once the document is read."""

    def __init__(self, what):
        self.what = what


def _parse_int(text):
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:            # int() of 5000 digits raises Python's own ValueError
        return _Literal(f"an integer of {digits} digits (a graph artifact's have at most "
                        f"{MAX_DIGITS})")
    return int(text)


def _parse_constant(text):
    return _Literal(f"{text} is not a JSON number (a graph artifact writes floats as bit "
                    f"words)")


def _literal_at(document):
    """(place, what) of the first _Literal in ``document`` (``nodes[0].args[1]``), or None;
    iterative: a document nests as deep as the parser allowed."""
    stack = [("", document)]
    while stack:
        place, v = stack.pop()
        if isinstance(v, _Literal):
            return place or "the document", v.what
        if isinstance(v, dict):
            stack += [(f"{place}.{k}" if place else str(k), x) for k, x in reversed(v.items())]
        elif isinstance(v, list):
            stack += [(f"{place}[{i}]", x) for i, x in reversed(list(enumerate(v)))]
    return None


def _read(path):
    """The JSON document at ``path``: UTF-8 (a byte-order mark allowed: editors on Windows
    write one), nothing but JSON data -- never a module name imported, a pickle or text
    evaluated.  RouteError ``FILE: what is wrong`` (with the place where there is one)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise RouteError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RouteError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                         f"{exc.start}): a graph artifact is JSON (graph.save)") from None
    made = []                          # the _Literals the parser made, if any

    def parse_int(text):
        v = _parse_int(text)
        if isinstance(v, _Literal):
            made.append(v)
        return v

    def parse_constant(text):
        made.append(_parse_constant(text))
        return made[-1]
    try:
        document = json.loads(text, parse_int=parse_int, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        raise RouteError(f"{path}: not JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno})") from None
    except RecursionError:
        raise RouteError(f"{path}: nested too deeply for a graph artifact") from None
    bad = _literal_at(document) if made else None      # (a walk of every entry)
    if bad is not None:
        raise RouteError(f"{path}: {bad[0]}: {bad[1]}")
    return document


def load_graph(path) -> Graph:
    """The Graph saved at ``path`` (``graph.save``), every node decoded and its ports
    checked; RouteError, one line ``FILE: PLACE: what is wrong``, when it is refused."""
    document = _read(path)
    try:
        return from_document(document)
    except RouteError as exc:
        message = str(exc)
        raise RouteError(f"{path}: {message.removeprefix('load_graph: ')}") from None

"""The wire codec (spec: "The Wire Codec"): ``encode(op)`` writes an operator as a JSON-able
record, ``decode(record)`` reads one back or refuses it with a reason.

A record is ``{"version": 1, "tag": "softmax", "fields": [["shape", [2, 3]], ["nat", 1]]}``:
the format version, the operator's name as its tag, and its attributes in declaration order,
one typed field each (attributes.WIRE_TYPES).  Floats never appear: numeric scalars travel as
frozen inputs.  ``decode`` checks every field and decides the proof attributes (the
declaration's ``proofs``), so a record whose axis is outside the rank names no operator; it
does not run the operator's check (``Op.check``): "a decoded pooling with an ill-formed
window is an operator value, which a recorder rejects before reading its input" (invoke and
the graph refuse it at their attribute stage, with the check's message).
``decode(encode(op)) == op``.

A record names the operator and its attributes, not what it computes: reproducing a result
also needs the revision of this package that evaluated it.
"""

from __future__ import annotations

import json

from .errors import DecodeError, RouteError
from .registry import VERSION, Attrs, Op, close_matches, declaration

_KEYS = ("version", "tag", "fields")


def attributes_text(attrs) -> str:
    """An operator's attributes as one text, ``axis=1,shape=[2,3]``: each attribute's name and
    the JSON of the value the wire codec writes for it (``attrs``: an Op, or the attributes
    as JSON data -- a results row's ``attrs``), in the order given."""
    if isinstance(attrs, Op):
        names = [at.name for at in attrs.decl.attributes]
        attrs = {n: f[1] for n, f in zip(names, attrs.record()["fields"])}
    return ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in attrs.items())


def encode(op: Op) -> dict:
    """The wire record of ``op``."""
    return op.record()


def decode(record) -> Op:
    """The operator a record names; DecodeError ("decode: <reason>") when it names none."""
    if not isinstance(record, dict):
        raise DecodeError(f"decode: a record must be an object with keys {', '.join(_KEYS)} "
                          f"(got {type(record).__name__})")
    missing = [k for k in _KEYS if k not in record]
    if missing:
        raise DecodeError(f"decode: the record misses key {missing[0]!r}")
    extra = sorted(k for k in record if k not in _KEYS)
    if extra:
        raise DecodeError(f"decode: unknown key {extra[0]!r} in the record (keys: "
                          f"{', '.join(_KEYS)})")
    version, tag, fields = record["version"], record["tag"], record["fields"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise DecodeError(f"decode: version must be a positive integer (got {version!r})")
    if version > VERSION:
        raise DecodeError(f"decode: record format version {version} is newer than this "
                          f"reader's {VERSION}")
    if not isinstance(tag, str):
        raise DecodeError(f"decode: tag must be a string (got {tag!r})")
    try:
        decl = declaration(tag)
    except RouteError:
        raise DecodeError(f"decode: unknown operator tag {tag!r}{close_matches(tag)}") from None
    if not isinstance(fields, list):
        raise DecodeError(f"decode: {tag}: fields must be a list (got {fields!r})")
    attrs = decl.attributes
    names = ", ".join(at.name for at in attrs) or "none"
    if len(fields) < len(attrs):
        raise DecodeError(f"decode: {tag}: the record misses field {len(fields)} "
                          f"({attrs[len(fields)].name}); {tag} takes {len(attrs)} ({names})")
    if len(fields) > len(attrs):
        raise DecodeError(f"decode: {tag}: the record has {len(fields)} fields; {tag} takes "
                          f"{len(attrs)} ({names})")
    try:
        op = Op(decl, Attrs({at.name: at.from_field(f, tag) for at, f in zip(attrs, fields)}))
    except RouteError as exc:
        raise DecodeError(f"decode: {exc}") from None
    problem = op.proof_problem()
    if problem:
        raise DecodeError(f"decode: {problem}")
    return op

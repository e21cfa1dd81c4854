"""The wire codec's records and refusals: every malformed record is refused with a reason
(DecodeError, one line starting 'decode: '); decode(encode(op)) == op over attribute ranges
is tests/routes/test_routes_registry.py::test_decode_inverts_encode."""

from __future__ import annotations

import json

import pytest

from roundoff_coverage import routes
from conftest import SCRATCH


def refused(record) -> str:
    with pytest.raises(routes.DecodeError) as info:
        routes.decode(record)
    message = str(info.value)
    assert message.startswith("decode: ") and "\n" not in message
    return message


def test_record_layout_is_version_tag_and_typed_fields_in_order(scratch):
    rec = routes.encode(routes.op(SCRATCH, shape=(2, 3), axis=1, mode="erf"))
    assert rec == {"version": routes.VERSION, "tag": SCRATCH,
                   "fields": [["shape", [2, 3]], ["nat", 1], ["enum", "erf"]]}
    assert routes.encode(routes.op("add", shape=(), element="uint8")) == \
        {"version": 1, "tag": "add", "fields": [["shape", []], ["enum", "uint8"]]}
    assert json.loads(json.dumps(rec)) == rec


def test_decode_checks_attributes_like_the_spec_softmax_example(scratch):
    def wire(axis):
        return {"version": routes.VERSION, "tag": SCRATCH,
                "fields": [["shape", [2, 3]], ["nat", axis], ["enum", "plain"]]}
    assert routes.decode(wire(1)) == routes.op(SCRATCH, shape=(2, 3), axis=1)
    assert refused(wire(2)) == f"decode: {SCRATCH}: axis must be < rank 2 (got 2)"


def good():
    return {"version": 1, "tag": "clamp", "fields": [["shape", [2]]]}


@pytest.mark.parametrize("change,text", [
    (lambda r: r.update(tag="clammp"), "decode: unknown operator tag 'clammp' (close matches: "
                                       "clamp)"),
    (lambda r: r.update(tag=3), "decode: tag must be a string (got 3)"),
    (lambda r: r.update(version=2), "decode: record format version 2 is newer than this "
                                    "reader's 1"),
    (lambda r: r.update(version=0), "decode: version must be a positive integer (got 0)"),
    (lambda r: r.update(version=True), "decode: version must be a positive integer (got True)"),
    (lambda r: r.pop("fields"), "decode: the record misses key 'fields'"),
    (lambda r: r.update(attrs=[]), "decode: unknown key 'attrs' in the record"),
    (lambda r: r.update(fields={"shape": [2]}), "decode: clamp: fields must be a list"),
    (lambda r: r.update(fields=[]), "decode: clamp: the record misses field 0 (shape); clamp "
                                    "takes 1 (shape)"),
    (lambda r: r["fields"].append(["nat", 1]), "decode: clamp: the record has 2 fields; clamp "
                                               "takes 1 (shape)"),
    (lambda r: r.update(fields=[["nat", 2]]), "decode: clamp: field shape must have type "
                                              "shape (got 'nat')"),
    (lambda r: r.update(fields=[["shape", 2]]), "decode: clamp: field shape must hold a list "
                                                "(got 2)"),
    (lambda r: r.update(fields=[["shape", [2.5]]]), "decode: clamp: shape must be a list of "
                                                    "non-negative integers (got [2.5])"),
    (lambda r: r.update(fields=[["shape", [True]]]), "decode: clamp: shape must be a list of "
                                                     "non-negative integers (got [True])"),
    (lambda r: r.update(fields=[["shape", [-1]]]), "decode: clamp: shape must be a list of "
                                                   "non-negative integers (got [-1])"),
    (lambda r: r.update(fields=[["shape"]]), "decode: clamp: field shape must be a [type, "
                                             "value] pair"),
])
def test_malformed_records_are_refused_with_a_reason(change, text):
    record = good()
    change(record)
    assert refused(record).startswith(text)


def test_field_types_are_not_confused(scratch):
    base = {"version": 1, "tag": SCRATCH, "fields": [["shape", [2, 3]], ["nat", 1],
                                                      ["enum", "plain"]]}
    for i, field, text in [(1, ["nat", True], "axis must be an integer >= 0 (got True)"),
                           (1, ["nat", "1"], "axis must be an integer >= 0 (got '1')"),
                           (1, ["int", 1], "field axis must have type nat (got 'int')"),
                           (2, ["enum", "fast"], "mode must be one of plain, erf (got 'fast')"),
                           (2, ["bool", True], "field mode must have type enum")]:
        record = json.loads(json.dumps(base))
        record["fields"][i] = field
        assert text in refused(record)


def test_a_record_that_is_not_an_object_is_refused():
    assert refused([1, "clamp"]) == ("decode: a record must be an object with keys version, "
                                     "tag, fields (got list)")


def test_round_trip_keeps_equality_and_ports():
    for o in (routes.op("max", shape=(2, 3), element="int16"), routes.op("clamp", shape=()),
              routes.op("exp", shape=(0, 4))):
        back = routes.decode(json.loads(json.dumps(routes.encode(o))))
        assert back == o and back.inputs == o.inputs and back is not o


def test_one_text_of_an_operators_attributes_from_the_codec():
    # The text of the JSON values the wire codec writes, in declaration order: an Op's and
    # a results row's (its attrs as JSON data) agree.
    o = routes.op("reduce", shape=(2, 3), op="max", axes=(1,), keepdim=True)
    text = routes.attributes_text(o)
    assert text == 'shape=[2,3],op="max",axes=[1],keepdim=true'
    row_attrs = json.loads(json.dumps({"shape": [2, 3], "op": "max", "axes": [1],
                                       "keepdim": True}))
    assert routes.attributes_text(row_attrs) == text
    rec = routes.encode(o)
    assert [f[1] for f in rec["fields"]] == [[2, 3], "max", [1], True]

"""The AVRO format of the schema registry: parsing (with references), Confluent's stored
canonical form and its normalised form, Avro's schema-resolution rules as Confluent reports
them, payloads decoded with bounds; and confluent-kafka's AvroSerializer and
AvroDeserializer against a real broker's registry."""

from __future__ import annotations

import json
import time

import pytest
from brokkr.plugins.schema_registry.formats import FORMATS, InvalidPayload, InvalidSchema
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO = FORMATS["AVRO"]


def parse(schema, references: dict | None = None):
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return AVRO.parse(text, {name: json.dumps(ref) for name, ref in (references or {}).items()})


def record(fields: list, name: str = "R", **extra) -> dict:
    return {"type": "record", "name": name, "fields": fields, **extra}


def field(name: str, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def zigzag(n: int) -> bytes:
    """Avro's long encoding."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def string(text: str) -> bytes:
    raw = text.encode()
    return zigzag(len(raw)) + raw


# -- parse, canonical and normalised forms ---------------------------------------------

ORDER = {
    "namespace": "com.acme",
    "fields": [
        {"type": "long", "name": "id", "order": "DESCENDING"},
        field("item", record([field("sku", "string")], name="Item")),
        {"default": None, "aliases": ["extra"], "doc": "maybe", "name": "spare", "type": ["null", "Item"]},
        field("meta", {"type": "record", "name": "Meta", "namespace": "", "fields": [
            field("note", {"type": "string", "avro.java.string": "String"})]}),
        field("meta2", "Meta"),  # a type of no namespace, named from inside com.acme
        field("amount", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
        field("status", {"type": "enum", "name": "Status", "namespace": "org.other",
                         "symbols": ["NEW", "DONE"], "default": "NEW"}),
        field("tags", {"type": "map", "values": {"type": "array", "items": "org.other.Status"}}),
    ],
    "type": "record",
    "x-owner": "sales",
    "name": "Order",
    "aliases": ["OldOrder", "org.legacy.Order"],
    "doc": "An order",
}  # fmt: skip

# What Avro Java's Schema.toString(refs, false) writes, so what Confluent stores.
ORDER_CANONICAL = (
    '{"type":"record","name":"Order","namespace":"com.acme","doc":"An order","fields":['
    '{"name":"id","type":"long","order":"descending"},'
    '{"name":"item","type":{"type":"record","name":"Item","fields":[{"name":"sku","type":"string"}]}},'
    '{"name":"spare","type":["null","Item"],"doc":"maybe","default":null,"aliases":["extra"]},'
    '{"name":"meta","type":{"type":"record","name":"Meta","namespace":"","fields":'
    '[{"name":"note","type":{"type":"string","avro.java.string":"String"}}]}},'
    '{"name":"meta2","type":"Meta"},'
    '{"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},'
    '{"name":"status","type":{"type":"enum","name":"Status","namespace":"org.other",'
    '"symbols":["NEW","DONE"],"default":"NEW"}},'
    '{"name":"tags","type":{"type":"map","values":{"type":"array","items":"org.other.Status"}}}'
    '],"x-owner":"sales","aliases":["OldOrder","org.legacy.Order"]}'
)


def test_the_canonical_form_is_avro_javas_json_of_the_parsed_schema():
    parsed = parse(ORDER)
    assert parsed.schema_type == "AVRO"
    assert parsed.canonical() == ORDER_CANONICAL
    assert parse(ORDER_CANONICAL).canonical() == ORDER_CANONICAL
    assert parse(json.dumps(ORDER, indent=4)).canonical() == ORDER_CANONICAL  # whitespace
    assert parsed.name == "com.acme.Order"
    assert parse('"string"').canonical() == '"string"' and parse('"string"').name is None
    # An invalid logical type is ignored, as Avro Java ignores it: a property like any other.
    bad_decimal = '{"type":"bytes","logicalType":"decimal","precision":-1}'
    assert parse(bad_decimal).canonical() == bad_decimal


def test_normalisation_sorts_properties_and_aliases_and_drops_empty_docs():
    one = record([field("a", {"type": "int", "b": 1, "a": 2}, aliases=["y", "x"], z=1, c=2)],
                 aliases=["Q", "P"], doc="", zeta=1, alpha=2)  # fmt: skip
    two = record([field("a", {"type": "int", "a": 2, "b": 1}, aliases=["x", "y"], c=2, z=1)],
                 alpha=2, zeta=1, aliases=["P", "Q"])  # fmt: skip
    assert parse(one).canonical() != parse(two).canonical()
    assert (
        parse(one).normalized()
        == parse(two).normalized()
        == (
            '{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"int","a":2,"b":1},'
            '"aliases":["x","y"],"c":2,"z":1}],"alpha":2,"zeta":1,"aliases":["P","Q"]}'
        )
    )
    normalized = parse(one).normalized()
    assert parse(normalized).normalized() == normalized  # a fixed point
    decimal = {"type": "bytes", "scale": 2, "x": 1, "precision": 9, "logicalType": "decimal"}
    assert parse(decimal).normalized() == ('{"type":"bytes","logicalType":"decimal","precision":9,"scale":2,"x":1}')


def test_references_make_their_named_types_known_by_name():
    money = {"type": "fixed", "name": "Money", "namespace": "com.acme", "size": 8}
    line = record([field("cost", "com.acme.Money")], name="com.acme.Line")
    order = record([field("lines", {"type": "array", "items": "Line"}), field("total", "Money")],
                   name="Order", namespace="com.acme")  # fmt: skip
    # Line uses Money: handed over in either order, both resolve.
    for refs in ({"money": money, "line": line}, {"line": line, "money": money}):
        parsed = parse(order, refs)
        assert parsed.canonical() == (
            '{"type":"record","name":"Order","namespace":"com.acme","fields":['
            '{"name":"lines","type":{"type":"array","items":"Line"}},{"name":"total","type":"Money"}]}'
        )
    with pytest.raises(InvalidSchema, match='Undefined name: "com.acme.Line"'):
        parse(order)
    with pytest.raises(InvalidSchema, match="Can't redefine: com.acme.Money"):
        parse(record([field("m", money)], name="Other"), {"money": money})
    # The payload of a schema with references decodes through them.
    parse(order, {"money": money, "line": line}).validate(memoryview(zigzag(1) + b"\x01" * 8 + b"\x00" + b"\x02" * 8))


@pytest.mark.parametrize(
    "schema, message",
    [
        ("{", "not JSON"),
        ('{"type": "int", "x": NaN}', "NaN is not valid JSON"),
        ("[" * 200 + "]" * 200, "nested deeper than 128 levels"),
        ('"Nope"', 'Undefined name: "Nope"'),
        ('{"type": {"type": "int"}}', "No type"),
        ('{"type": "recrod", "name": "R", "fields": []}', 'A schema "type" MUST be'),
        ('{"type": "record", "name": "R"}', "Record has no fields"),
        ('{"type": "record", "fields": []}', "No name in schema"),
        ('{"type": "record", "name": "1R", "fields": []}', "Illegal name: '1R'"),
        ('{"type": "record", "name": "R", "namespace": "a.-b", "fields": []}', "Illegal namespace part"),
        ('{"type": "record", "name": "int", "fields": []}', "may not be named after primitives"),
        ('{"type": "record", "name": "R", "fields": [{"name": "a-b", "type": "int"}]}', "Illegal field name"),
        ('{"type": "record", "name": "R", "fields": [{"name": "a"}]}', "No field type"),
        ('{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"a","type":"int"}]}',
         "Duplicate field a in record R"),
        ('{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}',
         "Default value <x> must match schema type: int"),
        ('{"type":"record","name":"R","fields":[{"name":"a","type":"int","order":"up"}]}', "Invalid field order"),
        ('["null", ["int", "string"]]', "Nested union"),
        ('["int", "int"]', "Duplicate in union:int"),
        ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "Duplicate enum symbol: A"),
        ('{"type": "enum", "name": "E", "symbols": ["A-"]}', "Illegal enum symbol"),
        ('{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}', "The Enum Default: B"),
        ('{"type": "fixed", "name": "F", "size": -1}', "Invalid or no size"),
        ('{"type": "array"}', "Array has no items type"),
        ('{"type": "map"}', "Map has no values type"),
        ('{"type":"record","name":"R","aliases":"S","fields":[]}', "aliases not an array"),
    ],
)  # fmt: skip
def test_invalid_schemas_are_refused_with_the_reason(schema, message):
    with pytest.raises(InvalidSchema) as refused:
        parse(schema)
    assert message in str(refused.value)


# -- compatibility: Avro's schema resolution, as Confluent reports it -------------------

INT = record([field("a", "int")])


def errors(reader, writer) -> list[str]:
    return AVRO.compatibility_errors(parse(json.dumps(reader)), parse(json.dumps(writer)))


def kinds(reader, writer) -> list[str]:
    return [message.split("'")[1] for message in errors(reader, writer)]


@pytest.mark.parametrize(
    "reader, writer, found",
    [
        # fields: a reader field the writer lacks needs a default; extra writer fields are skipped
        (record([field("a", "int"), field("b", "string")]), INT, ["READER_FIELD_MISSING_DEFAULT_VALUE"]),
        (INT, record([field("a", "int"), field("b", "string")]), []),
        (record([field("a", "int"), field("b", "string", default="")]), INT, []),
        (record([field("b", "int", aliases=["a"])]), INT, []),  # a reader field alias
        # promotions: int -> long -> float -> double, string <-> bytes; never the other way
        (record([field("a", "long")]), INT, []),
        (record([field("a", "float")]), record([field("a", "long")]), []),
        (record([field("a", "double")]), record([field("a", "float")]), []),
        (INT, record([field("a", "long")]), ["TYPE_MISMATCH"]),
        (record([field("a", "float")]), record([field("a", "double")]), ["TYPE_MISMATCH"]),
        ("bytes", "string", []),
        ("string", "bytes", []),
        (record([field("a", "string")]), INT, ["TYPE_MISMATCH"]),
        ("int", INT, ["TYPE_MISMATCH"]),
        # names: the short names, or a reader alias naming the writer
        (record([field("a", "int")], name="S"), INT, ["NAME_MISMATCH"]),
        (record([field("a", "int")], name="S", aliases=["R"]), INT, []),
        (record([field("a", "int")], name="ns.R"), INT, []),  # namespaces do not matter
        # enums: every writer symbol, unless the reader has a default
        ({"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "enum", "name": "E", "symbols": ["A", "B"]},
         ["MISSING_ENUM_SYMBOLS"]),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, {"type": "enum", "name": "E", "symbols": ["A"]}, []),
        ({"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
         {"type": "enum", "name": "E", "symbols": ["A", "B"]}, []),
        # unions: every writer branch must be readable
        (["null", "int"], ["null", "int", "string"], ["MISSING_UNION_BRANCH"]),
        (["null", "int", "string"], ["null", "int"], []),
        (["null", "long"], "int", []),
        (["null", "string"], "int", ["MISSING_UNION_BRANCH"]),
        ("long", ["int", "long"], []),
        ("int", ["null", "int"], ["TYPE_MISMATCH"]),
        # fixed sizes, arrays' items, maps' values
        ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, ["FIXED_SIZE_MISMATCH"]),
        ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, []),
        ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, ["TYPE_MISMATCH"]),
        ({"type": "map", "values": "int"}, {"type": "map", "values": "string"}, ["TYPE_MISMATCH"]),
        ({"type": "map", "values": "int"}, {"type": "array", "items": "int"}, ["TYPE_MISMATCH"]),
    ],
)  # fmt: skip
def test_schema_resolution_rules(reader, writer, found):
    assert kinds(reader, writer) == found


def test_incompatibilities_are_reported_in_confluents_form_at_their_paths():
    nested = record([field("inner", record([field("x", "int")], name="In"))])
    assert errors(record([field("inner", record([field("x", "int"), field("y", "int")], name="In"))]), nested) == [
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'y' at path "
        "'/fields/0/type/fields/1' in the reader schema has no default value and is missing in the "
        "writer schema', additionalInfo:'y'}"
    ]
    assert errors(record([field("inner", record([field("x", "string")], name="In"))]), nested) == [
        "{errorType:'TYPE_MISMATCH', description:'The type (path '/fields/0/type/fields/0/type') of a "
        "field in the reader schema does not match with the writer schema', additionalInfo:'reader "
        "type: STRING not compatible with writer type: INT'}"
    ]
    assert errors(record([], name="S"), INT) == [
        "{errorType:'NAME_MISMATCH', description:'The name of the schema has changed (path '/name')', "
        "additionalInfo:'expected: R'}"
    ]
    enum = {"type": "enum", "name": "E", "symbols": ["C"]}
    assert errors(enum, {**enum, "symbols": ["C", "B", "A"]}) == [
        "{errorType:'MISSING_ENUM_SYMBOLS', description:'The reader schema is missing enum symbols "
        "'[A, B]' at path '/symbols' in the writer schema', additionalInfo:'[A, B]'}"
    ]
    assert errors(["null", "int"], ["null", "string"]) == [
        "{errorType:'MISSING_UNION_BRANCH', description:'The reader schema is missing a type inside a "
        "union field at path '/1' in the writer schema', additionalInfo:'reader union lacking writer "
        "type: STRING'}"
    ]
    fixed = {"type": "fixed", "name": "F", "size": 4}
    assert errors(fixed, {**fixed, "size": 2}) == [
        "{errorType:'FIXED_SIZE_MISMATCH', description:'The size of FIXED type field at path '/size' "
        "in the reader schema does not match with the writer schema', additionalInfo:'expected: 2, "
        "found: 4'}"
    ]


def test_recursive_schemas_are_checked_without_looping():
    linked = record([field("v", "int"), field("next", ["null", "R"])])
    assert errors(linked, linked) == []
    longer = record([field("v", "long"), field("next", ["null", "R"])])
    assert errors(longer, linked) == []
    assert kinds(linked, longer) == ["TYPE_MISMATCH"]


def test_a_compatibility_check_is_bounded():
    # Unions of 500 records: comparing them takes 125,000 pairs of types, more than allowed.
    union = [record([field("f", "int")], name=f"R{n}") for n in range(500)]
    started = time.monotonic()
    assert errors(union, union) == [
        "Unexpected exception during compatibility check: more than 100000 pairs of types to compare"
    ]
    assert time.monotonic() - started < 5
    assert errors(union[:100], union[:100]) == []


# -- payloads ---------------------------------------------------------------------------

USER = record([field("name", "string"), field("age", "int"), field("tag", ["null", "string"]),
               field("kind", {"type": "enum", "name": "K", "symbols": ["A", "B"]})])  # fmt: skip
ADA = string("ada") + zigzag(36) + zigzag(1) + string("x") + zigzag(1)


@pytest.mark.parametrize(
    "payload, reason",
    [
        (ADA[:-1], "the payload ends early"),
        (ADA[:5], "the payload ends early"),
        (ADA + b"\x00", "1 bytes left over"),
        (string("ada") + zigzag(36) + zigzag(2), "a union branch or enum symbol out of range"),  # union branch 2 of 2
        (
            string("ada") + zigzag(36) + zigzag(0) + zigzag(5),
            "a union branch or enum symbol out of range",
        ),  # enum symbol 5 of 2
        (zigzag(2) + b"\xff\xfe" + zigzag(36) + zigzag(0) + zigzag(0), "a string that is not UTF-8"),
        (zigzag(1 << 40) + b"ada", "the payload ends early"),  # a string longer than the payload
        (zigzag(-5), "the payload ends early"),
        (b"", "the payload ends early"),
    ],
)
def test_payloads_that_do_not_decode_are_refused(payload, reason):
    parsed = parse(USER)
    parsed.validate(memoryview(ADA))
    with pytest.raises(InvalidPayload, match=reason):
        parsed.validate(memoryview(payload))


def test_logical_types_are_not_converted():
    # A timestamp no datetime can hold is still a long (Confluent's readers do not convert).
    parse({"type": "long", "logicalType": "timestamp-millis"}).validate(memoryview(zigzag(2**62)))
    parse({"type": "int", "logicalType": "date"}).validate(memoryview(zigzag(2**31 - 1)))


def test_payloads_that_would_nest_or_repeat_without_bound_are_refused_quickly():
    linked = parse(record([field("next", ["null", "R"])]))
    linked.validate(memoryview(zigzag(1) * 60 + zigzag(0)))  # 60 levels deep
    started = time.monotonic()
    with pytest.raises(InvalidPayload, match="nests deeper than 64 levels"):
        # 100,000 levels in 100 kB: fastavro's own recursion would overflow the C stack.
        linked.validate(memoryview(zigzag(1) * 100_000 + zigzag(0)))
    nulls = parse({"type": "array", "items": "null"})
    nulls.validate(memoryview(zigzag(1000) + zigzag(0)))
    with pytest.raises(InvalidPayload, match="announce more items than a payload of 10 bytes can hold"):
        nulls.validate(memoryview(zigzag(1 << 60) + zigzag(0)))  # 2**60 nulls in 10 bytes
    empty = parse({"type": "array", "items": record([])})
    with pytest.raises(InvalidPayload, match="announce more items"):
        empty.validate(memoryview(zigzag(-(1 << 40)) + zigzag(0) + zigzag(0)))
    assert time.monotonic() - started < 1


# -- confluent-kafka's serializers against the broker's registry --------------------------


def test_avro_serializers_register_read_back_and_evolve(client):
    ctx = SerializationContext("orders", MessageField.VALUE)
    v1 = record([field("id", "long")], name="Order", namespace="com.acme")
    v2 = record([field("id", "long"), field("note", "string", default="")], name="Order", namespace="com.acme")
    first = AvroSerializer(client, json.dumps(v1))({"id": 7}, ctx)
    registered = client.get_latest_version("orders-value")
    assert (registered.version, first[:5]) == (1, b"\x00" + registered.schema_id.to_bytes(4, "big"))
    # The registry returns the canonical form, which the broker's own decoder accepts.
    assert registered.schema.schema_str == parse(v1).canonical()
    parse(registered.schema.schema_str).validate(memoryview(first)[5:])

    second = AvroSerializer(client, json.dumps(v2))({"id": 8, "note": "rush"}, ctx)
    assert client.get_versions("orders-value") == [1, 2]
    reader = AvroDeserializer(client, json.dumps(v2))  # the new schema reads the old record
    assert reader(first, ctx) == {"id": 7, "note": ""}
    assert AvroDeserializer(client)(second, ctx) == {"id": 8, "note": "rush"}

    breaking = record([field("id", "string")], name="Order", namespace="com.acme")
    with pytest.raises(SchemaRegistryError) as refused:
        AvroSerializer(client, json.dumps(breaking))({"id": "x"}, ctx)
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert "TYPE_MISMATCH" in refused.value.error_message
    assert client.get_versions("orders-value") == [1, 2]

    # normalize.schemas: schemas differing only in their properties' order are one schema.
    tagged = {**v1, "x-b": 1, "x-a": 2}
    conf = {"normalize.schemas": True}
    AvroSerializer(client, json.dumps(tagged), conf=conf)({"id": 1}, SerializationContext("tagged", MessageField.VALUE))
    reordered = {**v1, "x-a": 2, "x-b": 1}
    AvroSerializer(client, json.dumps(reordered), conf=conf)(
        {"id": 1}, SerializationContext("tagged", MessageField.VALUE)
    )
    assert client.get_versions("tagged-value") == [1]
    assert client.get_latest_version("tagged-value").schema.schema_str == parse(reordered).normalized()


def test_avro_serializers_with_a_referenced_schema(client):
    ctx = SerializationContext("lines", MessageField.VALUE)
    money = {"type": "fixed", "name": "Money", "namespace": "com.acme", "size": 2}
    client.register_schema("money", Schema(json.dumps(money), "AVRO"))
    line = Schema(
        json.dumps(record([field("cost", "Money")], name="Line", namespace="com.acme")),
        "AVRO",
        [SchemaReference("com.acme.Money", "money", 1)],
    )
    data = AvroSerializer(client, line)({"cost": b"\x01\x02"}, ctx)
    assert AvroDeserializer(client)(data, ctx) == {"cost": b"\x01\x02"}
    stored = client.get_latest_version("lines-value").schema
    assert json.loads(stored.schema_str)["fields"] == [{"name": "cost", "type": "Money"}]

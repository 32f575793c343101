"""The JSON (JSON Schema) format of the schema registry: parsing by draft and with
references, Confluent's canonical and normalised forms, Confluent's JSON Schema
compatibility rules, payloads validated with bounds; and confluent-kafka's JSONSerializer
and JSONDeserializer against a real broker's registry."""

from __future__ import annotations

import json
import time

import pytest
from brokkr.plugins.schema_registry.formats import FORMATS, InvalidPayload, InvalidSchema
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

JSON = FORMATS["JSON"]
DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT6 = "http://json-schema.org/draft-06/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"
DRAFT2020 = "https://json-schema.org/draft/2020-12/schema"


def parse(schema, references: dict | None = None):
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return JSON.parse(text, {name: json.dumps(ref) for name, ref in (references or {}).items()})


def valid(parsed, value) -> bool:
    try:
        parsed.validate(memoryview(json.dumps(value).encode()))
    except InvalidPayload:
        return False
    return True


def obj(properties: dict, **extra) -> dict:
    return {"type": "object", "properties": properties, **extra}


STRING, INTEGER, NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}


# -- parse, canonical and normalised forms ---------------------------------------------


def test_the_canonical_form_is_compact_json_in_its_order_and_normalising_sorts_keys():
    text = '{ "type": "object",\n  "title": "Café",\n  "properties": { "b": {"type": "string"}, "a": {} } }'
    parsed = parse(text)
    assert parsed.schema_type == "JSON" and parsed.name == "Café"
    assert parsed.canonical() == '{"type":"object","title":"Café","properties":{"b":{"type":"string"},"a":{}}}'
    assert parsed.normalized() == '{"properties":{"a":{},"b":{"type":"string"}},"title":"Café","type":"object"}'
    reordered = parse('{"properties": {"a": {}, "b": {"type": "string"}}, "type": "object", "title": "Café"}')
    assert reordered.canonical() != parsed.canonical() and reordered.normalized() == parsed.normalized()
    assert parse("true").canonical() == "true"


def test_each_draft_validates_as_its_schema_says():
    draft4 = parse({"$schema": DRAFT4, "type": "number", "maximum": 10, "exclusiveMaximum": True})
    assert valid(draft4, 9) and not valid(draft4, 10)
    draft6 = parse({"$schema": DRAFT6, "type": "number", "exclusiveMaximum": 10})
    assert valid(draft6, 9) and not valid(draft6, 10)
    with pytest.raises(InvalidSchema, match="True is not of type 'number'"):
        parse({"type": "number", "exclusiveMaximum": True})  # draft 7 by default
    draft2019 = parse({"$schema": DRAFT2019, "dependentRequired": {"a": ["b"]}})
    assert valid(draft2019, {"a": 1, "b": 2}) and not valid(draft2019, {"a": 1})
    assert valid(parse({"dependentRequired": {"a": ["b"]}}), {"a": 1})  # not a draft 7 keyword
    draft2020 = parse({"$schema": DRAFT2020, "prefixItems": [INTEGER], "items": False})
    assert valid(draft2020, [1]) and not valid(draft2020, [1, 2]) and not valid(draft2020, ["x"])
    with pytest.raises(InvalidSchema, match="unsupported \\$schema 'http://example.com/mine'"):
        parse({"$schema": "http://example.com/mine"})


def test_references_resolve_by_their_names():
    customer = obj({"name": STRING}, required=["name"])
    defs = {"definitions": {"pos": {"type": "integer", "minimum": 0}}}
    order = obj({"customer": {"$ref": "customer.json"}, "qty": {"$ref": "defs.json#/definitions/pos"}})
    parsed = parse(order, {"customer.json": customer, "defs.json": defs})
    assert valid(parsed, {"customer": {"name": "ada"}, "qty": 1})
    assert not valid(parsed, {"customer": {}, "qty": 1})
    assert not valid(parsed, {"customer": {"name": "ada"}, "qty": -1})
    # A reference name is also found relative to the schema's $id.
    based = {"$id": "https://example.com/schemas/order.json", **obj({"customer": {"$ref": "customer.json"}})}
    assert not valid(parse(based, {"customer.json": customer}), {"customer": {}})
    with pytest.raises(InvalidSchema, match="'customer.json' does not resolve"):
        parse(order, {"defs.json": defs})


@pytest.mark.parametrize(
    "schema, message",
    [
        ("{", "not JSON"),
        ("[1]", "a schema is an object or a boolean"),
        ('{"maximum": NaN}', "NaN is not valid JSON"),
        ("[" * 200 + "]" * 200, "nested deeper than 128 levels"),
        ('{"type": "strnig"}', "'strnig' is not valid under any of the given schemas"),
        ('{"type": "string", "pattern": "("}', "'(' is not a 'regex'"),
        ('{"$ref": "#/definitions/missing"}', "does not resolve"),
        (
            '{"$ref": "#/definitions/a", "definitions": {"a": {"properties": {"x": {"$ref": "nowhere.json"}}}}}',
            "$ref 'nowhere.json' does not resolve",
        ),
    ],
)
def test_invalid_schemas_are_refused_with_the_reason(schema, message):
    with pytest.raises(InvalidSchema) as refused:
        parse(schema)
    assert message in str(refused.value)


# -- compatibility: Confluent's JSON Schema diff ------------------------------------------


def errors(reader, writer) -> list[str]:
    return JSON.compatibility_errors(parse(json.dumps(reader)), parse(json.dumps(writer)))


def kinds(reader, writer) -> list[str]:
    return [message.split('"')[1] for message in errors(reader, writer)]


OPEN = obj({"a": STRING})
CLOSED = obj({"a": STRING}, additionalProperties=False)
PARTIAL = obj({"a": STRING}, additionalProperties=STRING)
ARRAY_OF = {"type": "array", "items": STRING}
TUPLE = {"type": "array", "items": [STRING], "additionalItems": False}
ANY_OF = {"anyOf": [STRING, INTEGER]}
LINKED = obj({"v": INTEGER, "next": {"$ref": "#"}})


@pytest.mark.parametrize(
    "reader, writer, found",
    [
        # properties and content models: open (anything else allowed), closed, partially open
        (obj({"a": STRING, "b": INTEGER}), OPEN, ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
        (OPEN, obj({"a": STRING, "b": INTEGER}), []),
        (obj({"a": STRING, "b": {}}), OPEN, []),  # an added property that allows anything
        (obj({"a": STRING, "b": INTEGER}, required=["b"]), OPEN, ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
        (obj({"a": STRING, "b": INTEGER}, additionalProperties=False), CLOSED, []),
        (CLOSED, obj({"a": STRING, "b": INTEGER}, additionalProperties=False), ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
        (CLOSED, obj({"a": STRING, "b": False}, additionalProperties=False), []),
        (obj({"a": STRING, "b": INTEGER}, required=["b"], additionalProperties=False), CLOSED,
         ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]),
        (obj({"a": STRING, "b": {**INTEGER, "default": 0}}, required=["b"], additionalProperties=False), CLOSED, []),
        (obj({"a": STRING, "b": STRING}, additionalProperties=STRING), PARTIAL, []),
        (obj({"a": STRING, "b": INTEGER}, additionalProperties=STRING), PARTIAL,
         ["TYPE_CHANGED", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]),
        (PARTIAL, obj({"a": STRING, "b": INTEGER}, additionalProperties=STRING),
         ["TYPE_CHANGED", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"]),
        (obj({"a": STRING, "x_b": STRING}, patternProperties={"^x_": STRING}),
         obj({"a": STRING}, patternProperties={"^x_": STRING}), []),
        # required
        (obj({"a": STRING}, required=["a"]), OPEN, ["REQUIRED_ATTRIBUTE_ADDED"]),
        (OPEN, obj({"a": STRING}, required=["a"]), []),
        (obj({"a": {**STRING, "default": ""}}, required=["a"]), OPEN, []),
        # types
        (obj({"a": INTEGER}), OPEN, ["TYPE_CHANGED"]),
        (NUMBER, INTEGER, []),
        (INTEGER, NUMBER, ["TYPE_NARROWED"]),
        ({"type": ["string", "null"]}, STRING, []),
        (STRING, {"type": ["string", "null"]}, ["TYPE_CHANGED"]),
        (STRING, False, []),
        (False, STRING, ["TYPE_CHANGED"]),
        ({}, STRING, []),
        # enums and consts
        ({"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}, []),
        ({"enum": ["a"]}, {"enum": ["a", "b"]}, ["ENUM_ARRAY_NARROWED"]),
        ({"enum": ["a", "c"]}, {"enum": ["a", "b"]}, ["ENUM_ARRAY_CHANGED"]),
        ({"const": 2}, {"const": 1}, ["ENUM_ARRAY_CHANGED"]),
        # strings
        ({**STRING, "maxLength": 10}, {**STRING, "maxLength": 5}, []),
        ({**STRING, "maxLength": 5}, {**STRING, "maxLength": 10}, ["MAX_LENGTH_DECREASED"]),
        ({**STRING, "maxLength": 5}, STRING, ["MAX_LENGTH_ADDED"]),
        (STRING, {**STRING, "maxLength": 5}, []),
        ({**STRING, "minLength": 2}, {**STRING, "minLength": 1}, ["MIN_LENGTH_INCREASED"]),
        ({**STRING, "pattern": "^a"}, STRING, ["PATTERN_ADDED"]),
        ({**STRING, "pattern": "^b"}, {**STRING, "pattern": "^a"}, ["PATTERN_CHANGED"]),
        (STRING, {**STRING, "pattern": "^a"}, []),
        # numbers
        ({**NUMBER, "maximum": 5}, {**NUMBER, "maximum": 10}, ["MAXIMUM_DECREASED"]),
        ({**NUMBER, "maximum": 10}, {**NUMBER, "maximum": 5}, []),
        ({**NUMBER, "minimum": 1}, {**NUMBER, "minimum": 0}, ["MINIMUM_INCREASED"]),
        ({**NUMBER, "exclusiveMinimum": 0}, NUMBER, ["EXCLUSIVE_MINIMUM_ADDED"]),
        ({**NUMBER, "multipleOf": 4}, {**NUMBER, "multipleOf": 2}, ["MULTIPLE_OF_EXPANDED"]),
        ({**NUMBER, "multipleOf": 2}, {**NUMBER, "multipleOf": 4}, []),
        ({**NUMBER, "multipleOf": 3}, {**NUMBER, "multipleOf": 2}, ["MULTIPLE_OF_CHANGED"]),
        # objects' other keywords
        (obj({"a": STRING}, additionalProperties=False), OPEN, ["ADDITIONAL_PROPERTIES_REMOVED"]),
        (OPEN, obj({"a": STRING}, additionalProperties=False), []),
        (PARTIAL, OPEN, ["ADDITIONAL_PROPERTIES_NARROWED"]),
        (OPEN, PARTIAL, []),
        (obj({}, dependencies={"a": ["b"]}), obj({}), ["DEPENDENCY_ARRAY_ADDED"]),
        (obj({}, dependencies={"a": ["b", "c"]}), obj({}, dependencies={"a": ["b"]}), ["DEPENDENCY_ARRAY_EXTENDED"]),
        (obj({}, dependencies={"a": ["b"]}), obj({}, dependencies={"a": ["b", "c"]}), []),
        (obj({}, maxProperties=2), obj({}, maxProperties=3), ["MAX_PROPERTIES_DECREASED"]),
        (obj({}, minProperties=2), obj({}), ["MIN_PROPERTIES_ADDED"]),
        # arrays
        ({"type": "array", "items": INTEGER}, ARRAY_OF, ["TYPE_CHANGED"]),
        ({**ARRAY_OF, "maxItems": 2}, {**ARRAY_OF, "maxItems": 3}, ["MAX_ITEMS_DECREASED"]),
        ({**ARRAY_OF, "minItems": 2}, ARRAY_OF, ["MIN_ITEMS_ADDED"]),
        ({**ARRAY_OF, "uniqueItems": True}, ARRAY_OF, ["UNIQUE_ITEMS_ADDED"]),
        (ARRAY_OF, {**ARRAY_OF, "uniqueItems": True}, []),
        ({**TUPLE, "items": [STRING, INTEGER]}, TUPLE, []),
        (TUPLE, {**TUPLE, "items": [STRING, INTEGER]}, ["ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
        ({"type": "array", "items": [STRING, INTEGER]}, {"type": "array", "items": [STRING]},
         ["ITEM_ADDED_TO_OPEN_CONTENT_MODEL"]),
        ({"$schema": DRAFT2020, "prefixItems": [STRING, INTEGER], "items": False},
         {"$schema": DRAFT2020, "prefixItems": [STRING], "items": False}, []),
        # combined schemas
        (ANY_OF, STRING, []),
        (STRING, ANY_OF, ["TYPE_CHANGED"]),
        ({"anyOf": [STRING, INTEGER, {"type": "null"}]}, ANY_OF, []),
        (ANY_OF, {"anyOf": [STRING, INTEGER, {"type": "null"}]}, ["SUM_TYPE_NARROWED"]),
        ({"oneOf": [STRING, {"type": "boolean"}]}, {"oneOf": [STRING, INTEGER]}, ["COMBINED_TYPE_SUBSCHEMAS_CHANGED"]),
        ({"anyOf": [STRING, INTEGER]}, {"allOf": [STRING, INTEGER]}, []),
        ({"allOf": [STRING, INTEGER]}, {"anyOf": [STRING, INTEGER]}, ["COMBINED_TYPE_CHANGED"]),
        ({"not": {"type": ["string", "integer"]}}, {"not": STRING}, ["NOT_TYPE_EXTENDED"]),
        ({"not": STRING}, {"not": {"type": ["string", "integer"]}}, []),
        # references and recursion
        (obj({"a": {"$ref": "#/definitions/s"}}, definitions={"s": STRING}), OPEN, []),
        (obj({"a": {"$ref": "#/definitions/s"}}, definitions={"s": INTEGER}), OPEN, ["TYPE_CHANGED"]),
        (LINKED, LINKED, []),
        (obj({"v": NUMBER, "next": {"$ref": "#"}}), LINKED, []),
        (LINKED, obj({"v": NUMBER, "next": {"$ref": "#"}}), ["TYPE_NARROWED", "TYPE_NARROWED"]),  # here and one level down
        # Kafka Connect's decimals: two types both marked bytes are one
        ({"type": "string", "connect.type": "bytes"}, {"type": "number", "connect.type": "bytes"}, []),
        ({"type": "string"}, {"type": "number", "connect.type": "bytes"}, ["TYPE_CHANGED"]),
        # annotations never matter
        ({**STRING, "title": "t", "description": "d", "default": "x"}, STRING, []),
    ],
)  # fmt: skip
def test_confluents_compatibility_rules(reader, writer, found):
    assert kinds(reader, writer) == found


def test_incompatibilities_are_reported_in_confluents_form_at_their_paths():
    assert errors(obj({"a": obj({"b": INTEGER})}), obj({"a": obj({"b": STRING})})) == [
        '{errorType:"TYPE_CHANGED", description:"A type at path \'#/properties/a/properties/b\' is '
        "different between the reader schema and the writer schema'}"
    ]
    assert errors(obj({"a": STRING}, required=["a"]), OPEN) == [
        '{errorType:"REQUIRED_ATTRIBUTE_ADDED", description:"The keyword at path \'#/required/a\' in '
        "the reader schema is not present in the writer schema'}"
    ]
    assert errors({**STRING, "maxLength": 1}, {**STRING, "maxLength": 2}) == [
        '{errorType:"MAX_LENGTH_DECREASED", description:"The value at path \'#/maxLength\' in the '
        "reader schema is less than its value in the writer schema'}"
    ]
    assert errors(CLOSED, obj({"a": STRING, "b": STRING}, additionalProperties=False)) == [
        '{errorType:"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", description:"The reader has a closed '
        "content model and is missing a property or item present at path '#/properties/b' in the "
        "writer schema'}"
    ]


def test_a_compatibility_check_is_bounded():
    wide = {"anyOf": [{"const": n} for n in range(1000)]}  # a million pairs of alternatives
    started = time.monotonic()
    assert errors(wide, {**wide, "title": "t"}) == [
        "Unexpected exception during compatibility check: more than 100000 pairs of subschemas"
    ]
    assert time.monotonic() - started < 5
    assert errors({"anyOf": [{"const": n} for n in range(100)]}, {"const": 7}) == []


# -- payloads ---------------------------------------------------------------------------


def test_payloads_are_json_documents_the_schema_accepts():
    parsed = parse(obj({"a": INTEGER, "ip": {"type": "string", "format": "ipv4"}}, required=["a"]))
    parsed.validate(memoryview(b'{"a": 1, "ip": "10.0.0.1"}'))
    for payload, reason in [
        (b'{"a": "x"}', "does not match the JSON schema at $.a: 'x' is not of type 'integer'"),
        (b"{}", "'a' is a required property"),
        (b'{"a": 1, "ip": "10.0.0.300"}', "is not a 'ipv4'"),  # formats are checked
        (b'{"a": 1', "not a JSON document"),
        (b'{"a": NaN}', "NaN is not valid JSON"),
        (b"\xff", "not a JSON document"),
        (b"[" * 100 + b"]" * 100, "nested deeper than 64 levels"),
    ]:
        with pytest.raises(InvalidPayload) as refused:
            parsed.validate(memoryview(payload))
        assert reason in str(refused.value)


def test_payloads_cannot_make_patterns_or_unique_items_slow():
    schema = obj(
        {"s": {"type": "string", "pattern": "^(a+)+$"}, "u": {"type": "array", "uniqueItems": True}},
        patternProperties={"^x(y+)+$": {}},
        additionalProperties=False,
    )
    parsed = parse(schema)
    started = time.monotonic()
    for payload, reason in [
        # A backtracking regex takes 2**28 steps (about 20 s) on each of these; RE2 no time.
        ({"s": "a" * 28 + "b"}, "does not match '^(a+)+$'"),
        ({"x" + "y" * 28 + "z": 1}, "Additional properties are not allowed"),
        ({"s": "a" * 100_000 + "b"}, "at $.s: the value fails its 'pattern' keyword"),  # a long value, named
        ({"u": [{"i": i} for i in range(50_000)] + [{"i": 7}]}, "the array has non-unique elements"),
        ({"u": [1, 1.0]}, "the array has non-unique elements"),
    ]:
        with pytest.raises(InvalidPayload) as refused:
            parsed.validate(memoryview(json.dumps(payload).encode()))
        assert reason in str(refused.value)
    assert time.monotonic() - started < 2
    assert valid(parsed, {"s": "aaa", "xyy": 1, "u": [1, True, "1", None, 0, [1], {"a": 1}]})
    assert valid(parse({"type": "string", "pattern": "^(?=a)a$"}), "a")  # lookarounds: Python's re


# -- confluent-kafka's serializers against the broker's registry --------------------------


def test_json_serializers_register_read_back_and_evolve(client):
    ctx = SerializationContext("people", MessageField.VALUE)
    v1 = obj({"name": STRING}, required=["name"], additionalProperties=False, title="Person")
    v2 = obj({"name": STRING, "age": INTEGER}, required=["name"], additionalProperties=False, title="Person")
    first = JSONSerializer(json.dumps(v1, indent=2), client)({"name": "ada"}, ctx)
    registered = client.get_latest_version("people-value")
    assert (registered.version, first[:5]) == (1, b"\x00" + registered.schema_id.to_bytes(4, "big"))
    assert registered.schema.schema_str == json.dumps(v1, separators=(",", ":"))  # Confluent's canonical form
    parse(registered.schema.schema_str).validate(memoryview(first)[5:])
    assert JSONDeserializer(None, schema_registry_client=client)(first, ctx) == {"name": "ada"}

    second = JSONSerializer(json.dumps(v2), client)({"name": "bob", "age": 3}, ctx)  # closed: adding is compatible
    assert client.get_versions("people-value") == [1, 2]
    assert JSONDeserializer(json.dumps(v2))(second, ctx) == {"name": "bob", "age": 3}
    assert JSONDeserializer(json.dumps(v2))(first, ctx) == {"name": "ada"}

    breaking = obj({"name": INTEGER}, required=["name"], additionalProperties=False, title="Person")
    with pytest.raises(SchemaRegistryError) as refused:
        JSONSerializer(json.dumps(breaking), client)({"name": 1}, ctx)
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert "TYPE_CHANGED" in refused.value.error_message
    assert client.get_versions("people-value") == [1, 2]


def test_json_serializers_with_a_referenced_schema(client):
    ctx = SerializationContext("orders", MessageField.VALUE)
    client.register_schema("customer", Schema(json.dumps(obj({"name": STRING}, required=["name"])), "JSON"))
    order = Schema(
        json.dumps(obj({"customer": {"$ref": "customer.json"}})),
        "JSON",
        [SchemaReference("customer.json", "customer", 1)],
    )
    data = JSONSerializer(order, client)({"customer": {"name": "ada"}}, ctx)
    assert JSONDeserializer(None, schema_registry_client=client)(data, ctx) == {"customer": {"name": "ada"}}
    with pytest.raises(SchemaRegistryError) as refused:  # the registry resolves the reference too
        client.register_schema("bad", Schema(json.dumps(obj({"c": {"$ref": "nowhere.json"}})), "JSON"))
    assert (refused.value.http_status_code, refused.value.error_code) == (422, 42201)

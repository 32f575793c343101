"""Typed rows for lake tables (plugins/sinks/spark/typed.py), without Spark: a real broker
serving its schema registry on an ephemeral 127.0.0.1 port; schemas registered and values
serialized by confluent-kafka's own serializers; ``ValueTyper`` decodes them into rows that
an Arrow table of ``arrow_schema(id)`` takes. Also schema evolution (``evolve``), every
dead-letter reason, pickling, a registry that cannot be reached, and that the module does
not import PySpark."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import pickle
import re
import socket
import struct
import subprocess
import sys
import uuid

import fastavro
import pyarrow as pa
import pytest
from brokkr.core.broker import BrokerThread
from brokkr.core.cli import main
from brokkr.plugins.schema_registry import registry_of
from brokkr.plugins.sinks.spark import typed
from brokkr.plugins.sinks.spark.typed import DLQ_SCHEMA, IncompatibleSchema, RegistryUnavailable, ValueTyper, evolve
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from sasl_wire import sasl_config

UTC = datetime.UTC
TS = pa.timestamp("us", tz="UTC")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """(url, SchemaRegistryClient) of one broker serving the registry, for the module."""
    broker = BrokerThread(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path_factory.mktemp("brokkr-data")),
            "brokkr.schema.registry.listeners": "http://127.0.0.1:0",
        }
    ).start()
    url = registry_of(broker.broker).server.urls[0]
    client = SchemaRegistryClient({"url": url})
    yield url, client
    client.close()
    broker.stop()


def ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def schema_id(value: bytes) -> int:
    return int.from_bytes(value[1:5], "big")


def table_of(typer: ValueTyper, values: list[bytes]) -> tuple[pa.Table, list[dict]]:
    """The values' rows (none dead-lettered) as a table of their schema, checked: every
    column the schema says is not null holds no null, at any depth."""
    decoded = [typer.decode(value) for value in values]
    assert [reason for _, _, reason in decoded] == [None] * len(values)
    ids = {sid for _, sid, _ in decoded}
    assert len(ids) == 1
    schema = typer.arrow_schema(ids.pop())
    rows = [row for row, _, _ in decoded]
    table = pa.Table.from_pylist(rows, schema=schema)
    table.validate(full=True)
    for column, field in zip(table.columns, schema):
        _no_nulls_where_forbidden(column.combine_chunks(), field)
    assert table.to_pylist() == [as_read(row, pa.struct(list(schema))) for row in rows]  # nothing lost or changed
    return table, rows


def as_read(value, type_: pa.DataType):
    """A row's value as Arrow gives it back (a map as its (key, value) pairs)."""
    if value is None:
        return None
    if pa.types.is_struct(type_):
        return {f.name: as_read(value[f.name], f.type) for f in type_}
    if pa.types.is_map(type_):
        return [(k, as_read(v, type_.item_type)) for k, v in value.items()]
    if pa.types.is_list(type_):
        return [as_read(item, type_.value_type) for item in value]
    return value


def _no_nulls_where_forbidden(array: pa.Array, field: pa.Field) -> None:
    if not field.nullable:
        assert array.null_count == 0, f"{field.name} is not nullable but holds nulls"
    if pa.types.is_struct(field.type):
        for i, child in enumerate(field.type):
            _no_nulls_where_forbidden(array.field(i).filter(array.is_valid()), child)
    elif pa.types.is_list(field.type):
        _no_nulls_where_forbidden(array.flatten(), field.type.value_field)
    elif pa.types.is_map(field.type):
        _no_nulls_where_forbidden(array.items, field.type.item_field)


# -- Avro -----------------------------------------------------------------------------------------

POINT = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}]}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "name", "type": "string"},
        {"name": "paid", "type": "boolean"},
        {"name": "weight", "type": "float"},
        {"name": "price", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "SENT"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "where", "type": POINT},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "choice", "type": ["null", "int", "string", "Point"], "default": None},
        {"name": "nothing", "type": "null"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}


def order(n: int, **changes) -> dict:
    record = {
        "id": 10_000_000_000 + n,
        "qty": n,
        "name": f"order {n}",
        "paid": n % 2 == 0,
        "weight": 1.5,
        "price": 9.99,
        "blob": b"\x00\xff",
        "state": "SENT",
        "digest": b"abcd",
        "tags": ["a", "b"],
        "counts": {"x": 1, "y": 2},
        "where": {"x": 1, "y": -1},
        "note": None,
        "choice": None,
        "nothing": None,
        "day": datetime.date(2026, 11, 27),
        "at_ms": datetime.datetime(2026, 11, 27, 18, 0, 0, 123000, tzinfo=UTC),
        "at_us": datetime.datetime(2026, 11, 27, 18, 0, 0, 123456, tzinfo=UTC),
        "local": datetime.datetime(2026, 11, 27, 18, 0, 0, 5),
        "amount": decimal.Decimal("1234.56"),
        "ref": uuid.UUID(int=n),
    }
    record.update(changes)
    return record


def avro_values(client) -> list[bytes]:
    serialize = AvroSerializer(client, json.dumps(ORDER))
    records = [
        order(1),
        order(2, note="fragile", choice=7),
        order(3, choice="seven"),
        order(4, choice={"x": 3, "y": 4}, tags=[], counts={}),
    ]
    return [serialize(record, ctx("orders")) for record in records]


def test_avro_values_become_typed_rows(registry):
    url, client = registry
    values = avro_values(client)
    typer = ValueTyper(url, "orders", "value_schema_id_prefix")
    table, rows = table_of(typer, values)

    schema = table.schema
    assert schema.names == [f["name"] for f in ORDER["fields"] if f["name"] != "nothing"]  # a null holds nothing
    expected_types = {
        "id": pa.int64(), "qty": pa.int32(), "name": pa.string(), "paid": pa.bool_(), "weight": pa.float32(),
        "price": pa.float64(), "blob": pa.binary(), "state": pa.string(), "digest": pa.binary(),
        "note": pa.string(), "day": pa.date32(), "at_ms": TS, "at_us": TS, "local": pa.timestamp("us"),
        "amount": pa.decimal128(9, 2), "ref": pa.string(),
    }  # fmt: skip
    assert {name: schema.field(name).type for name in expected_types} == expected_types
    assert schema.field("tags").type.value_type == pa.string()
    assert schema.field("counts").type.key_type == pa.string() and schema.field("counts").type.item_type == pa.int64()
    assert schema.field("where").type == pa.struct([pa.field("x", pa.int32(), False), pa.field("y", pa.int32(), False)])
    # a union of several types: one nullable member per non-null branch, as Spark's from_avro names them
    assert [(f.name, f.type, f.nullable) for f in schema.field("choice").type] == [
        ("member0", pa.int32(), True),
        ("member1", pa.string(), True),
        ("member2", schema.field("where").type, True),
    ]
    assert [f.name for f in schema if f.nullable] == ["note", "choice"]

    assert rows[0]["id"] == 10_000_000_001 and rows[0]["state"] == "SENT" and rows[0]["digest"] == b"abcd"
    assert rows[0]["note"] is None and rows[0]["choice"] is None
    assert rows[1]["note"] == "fragile"
    assert [row["choice"] for row in rows[1:]] == [
        {"member0": 7, "member1": None, "member2": None},
        {"member0": None, "member1": "seven", "member2": None},
        {"member0": None, "member1": None, "member2": {"x": 3, "y": 4}},
    ]
    assert rows[0]["counts"] == {"x": 1, "y": 2} and table.column("counts").to_pylist()[0] == [("x", 1), ("y", 2)]
    assert rows[0]["at_ms"] == datetime.datetime(2026, 11, 27, 18, 0, 0, 123000, tzinfo=UTC)
    assert rows[0]["local"] == datetime.datetime(2026, 11, 27, 18, 0, 0, 5)
    assert rows[0]["amount"] == decimal.Decimal("1234.56") and rows[0]["ref"] == str(uuid.UUID(int=1))
    assert {sid for _, sid, _ in map(typer.decode, values)} == {schema_id(values[0])}


def test_a_value_that_is_not_a_record_is_one_column(registry):
    url, client = registry
    typer = ValueTyper(url, "counts", "value_schema_id_prefix")
    serialize = AvroSerializer(client, json.dumps(["null", "long"]))
    table, rows = table_of(typer, [serialize(5, ctx("counts"))])  # (a null value is a tombstone: not framed)
    assert table.schema == pa.schema([pa.field("value", pa.int64())])
    assert rows == [{"value": 5}]
    serialize = AvroSerializer(client, json.dumps(["long", "string"]), conf={"auto.register.schemas": True})
    table, rows = table_of(typer, [serialize(5, ctx("other")), serialize("five", ctx("other"))])
    member = pa.struct([pa.field("member0", pa.int64()), pa.field("member1", pa.string())])
    assert table.schema == pa.schema([pa.field("value", member, False)])
    assert rows == [{"value": {"member0": 5, "member1": None}}, {"value": {"member0": None, "member1": "five"}}]


# -- JSON Schema ---------------------------------------------------------------------------------

LINE_ITEM = {
    "type": "object",
    "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
    "required": ["sku", "qty"],
}
INVOICE = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Invoice",
    "type": "object",
    "definitions": {"item": LINE_ITEM},
    "properties": {
        "number": {"type": "integer"},
        "total": {"type": "number"},
        "paid": {"type": "boolean"},
        "customer": {"type": "string", "maxLength": 64},
        "status": {"type": "string", "enum": ["open", "closed"]},
        "issued": {"type": "string", "format": "date-time"},
        "due": {"type": "string", "format": "date"},
        "memo": {"type": ["string", "null"]},
        "items": {"type": "array", "items": {"$ref": "#/definitions/item"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "extra": {},
    },
    "required": ["number", "total", "items", "issued"],
}


def json_values(client) -> list[bytes]:
    serialize = JSONSerializer(json.dumps(INVOICE), client)
    documents = [
        {
            "number": 1,
            "total": 10,
            "paid": True,
            "customer": "ada",
            "status": "open",
            "issued": "2026-11-27T18:00:00.5+01:00",
            "due": "2026-12-01",
            "memo": None,
            "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1, "colour": "red"}],
            "labels": {"k": "v"},
            "extra": {"free": [1, 2]},
            "not in the schema": "dropped",
        },
        {"number": 2, "total": 2.5, "items": [], "issued": "2026-11-27T17:00:00Z"},
    ]
    return [serialize(document, ctx("invoices")) for document in documents]


def test_json_values_become_typed_rows(registry):
    url, client = registry
    typer = ValueTyper(url, "invoices", "value_schema_id_prefix")
    table, rows = table_of(typer, json_values(client))

    schema = table.schema
    assert schema.names == list(INVOICE["properties"])  # additional properties are no columns
    item = pa.struct([pa.field("sku", pa.string(), False), pa.field("qty", pa.int64(), False)])
    assert [(f.name, f.type, f.nullable) for f in schema] == [
        ("number", pa.int64(), False),
        ("total", pa.float64(), False),
        ("paid", pa.bool_(), True),
        ("customer", pa.string(), True),
        ("status", pa.string(), True),
        ("issued", TS, False),
        ("due", pa.date32(), True),
        ("memo", pa.string(), True),
        ("items", pa.list_(pa.field("element", item, False)), False),
        ("labels", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), False)), True),
        ("extra", pa.string(), True),  # no type: its JSON text
    ]
    assert rows[0]["issued"] == datetime.datetime(2026, 11, 27, 17, 0, 0, 500000, tzinfo=UTC)
    assert rows[0]["due"] == datetime.date(2026, 12, 1) and rows[0]["total"] == 10.0
    assert rows[0]["items"] == [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}]
    assert rows[0]["extra"] == '{"free":[1,2]}' and rows[0]["status"] == "open"
    assert rows[1] == {
        "number": 2, "total": 2.5, "paid": None, "customer": None, "status": None,
        "issued": datetime.datetime(2026, 11, 27, 17, 0, tzinfo=UTC), "due": None, "memo": None,
        "items": [], "labels": None, "extra": None,
    }  # fmt: skip


# -- Protobuf ------------------------------------------------------------------------------------


def protobuf_classes() -> dict[str, type]:
    """ex.Point in shapes.proto; ex.Order and ex.Other in order.proto, which imports it and
    google/protobuf/timestamp.proto: built at run time, as a _pb2 module would."""
    F = descriptor_pb2.FieldDescriptorProto
    shapes = descriptor_pb2.FileDescriptorProto(name="shapes.proto", package="ex", syntax="proto3")
    point = shapes.message_type.add(name="Point")
    point.field.add(name="x", number=1, type=F.TYPE_SINT32, label=F.LABEL_OPTIONAL)
    point.field.add(name="y", number=2, type=F.TYPE_SINT32, label=F.LABEL_OPTIONAL)

    file = descriptor_pb2.FileDescriptorProto(name="order.proto", package="ex", syntax="proto3")
    file.dependency.extend(["shapes.proto", "google/protobuf/timestamp.proto"])
    file.enum_type.add(name="Status").value.extend(
        [descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(["NEW", "SENT"])]
    )
    m = file.message_type.add(name="Order")
    scalars = [
        ("id", F.TYPE_INT64), ("qty", F.TYPE_INT32), ("small", F.TYPE_UINT32), ("big", F.TYPE_UINT64),
        ("weight", F.TYPE_FLOAT), ("price", F.TYPE_DOUBLE), ("paid", F.TYPE_BOOL), ("name", F.TYPE_STRING),
        ("blob", F.TYPE_BYTES),
    ]  # fmt: skip
    for number, (name, kind) in enumerate(scalars, 1):
        m.field.add(name=name, number=number, type=kind, label=F.LABEL_OPTIONAL)
    m.field.add(name="status", number=10, type=F.TYPE_ENUM, type_name=".ex.Status", label=F.LABEL_OPTIONAL)
    m.field.add(name="scores", number=11, type=F.TYPE_INT32, label=F.LABEL_REPEATED)
    m.field.add(name="where", number=12, type=F.TYPE_MESSAGE, type_name=".ex.Point", label=F.LABEL_OPTIONAL)
    m.field.add(name="path", number=13, type=F.TYPE_MESSAGE, type_name=".ex.Point", label=F.LABEL_REPEATED)
    m.field.add(name="at", number=14, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                label=F.LABEL_OPTIONAL)  # fmt: skip
    entry = m.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="counts", number=15, type=F.TYPE_MESSAGE, type_name=".ex.Order.CountsEntry",
                label=F.LABEL_REPEATED)  # fmt: skip
    m.oneof_decl.add(name="contact")
    m.field.add(name="email", number=16, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    m.field.add(name="phone", number=17, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=0)
    m.oneof_decl.add(name="_note")  # proto3 optional: a synthetic oneof
    m.field.add(name="note", number=18, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL, oneof_index=1,
                proto3_optional=True)  # fmt: skip
    other = file.message_type.add(name="Other")
    other.field.add(name="z", number=1, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(shapes)
    pool.Add(file)
    return {
        n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ex.{n}")) for n in ("Order", "Other", "Point")
    }


AT = datetime.datetime.fromtimestamp(1_800_000_000, UTC).replace(microsecond=123456)


def protobuf_values(client) -> list[bytes]:
    classes = protobuf_classes()
    Order, point, at = classes["Order"], classes["Point"], AT
    serialize = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    messages = [
        Order(id=1, qty=2, small=4_000_000_000, big=2**64 - 1, weight=0.5, price=2.25, paid=True, name="n",
              blob=b"\x01", status=1, scores=[3, 4], where=point(x=-1, y=2), path=[point(x=1)], at=at,
              counts={"a": 1}, email="a@b", note=""),
        Order(id=2, phone="123"),
    ]  # fmt: skip
    return [serialize(message, ctx("po")) for message in messages]


def test_protobuf_values_become_typed_rows(registry):
    url, client = registry
    typer = ValueTyper(url, "po", "value_schema_id_prefix")
    table, rows = table_of(typer, protobuf_values(client))

    point_type = pa.struct([pa.field("x", pa.int32(), False), pa.field("y", pa.int32(), False)])
    assert [(f.name, f.type, f.nullable) for f in table.schema] == [
        ("id", pa.int64(), False),
        ("qty", pa.int32(), False),
        ("small", pa.int64(), False),
        ("big", pa.decimal128(20, 0), False),
        ("weight", pa.float32(), False),
        ("price", pa.float64(), False),
        ("paid", pa.bool_(), False),
        ("name", pa.string(), False),
        ("blob", pa.binary(), False),
        ("status", pa.string(), False),
        ("scores", pa.list_(pa.field("element", pa.int32(), False)), False),
        ("where", point_type, True),
        ("path", pa.list_(pa.field("element", point_type, False)), False),
        ("at", TS, True),
        ("counts", pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.int64(), False)), False),
        ("note", pa.string(), True),
        ("email", pa.string(), True),
        ("phone", pa.string(), True),
    ]  # fmt: skip (the registry's rendering puts a oneof after the other fields)
    assert rows[0]["big"] == decimal.Decimal(2**64 - 1) and rows[0]["small"] == 4_000_000_000
    assert rows[0]["status"] == "SENT" and rows[0]["where"] == {"x": -1, "y": 2}
    assert rows[0]["path"] == [{"x": 1, "y": 0}] and rows[0]["counts"] == {"a": 1}
    assert rows[0]["at"] == AT
    assert (rows[0]["email"], rows[0]["phone"], rows[0]["note"]) == ("a@b", None, "")
    assert rows[1] == {
        "id": 2, "qty": 0, "small": 0, "big": 0, "weight": 0.0, "price": 0.0, "paid": False, "name": "",
        "blob": b"", "status": "NEW", "scores": [], "where": None, "path": [], "at": None, "counts": {},
        "email": None, "phone": "123", "note": None,
    }  # fmt: skip
    # the reference (shapes.proto) was registered under its own subject and resolved from it
    assert "shapes.proto" in client.get_subjects()


# -- value_schema_latest -------------------------------------------------------------------------

SENSOR_V1 = {"type": "record", "name": "Reading", "fields": [{"name": "temp", "type": "float"}]}
SENSOR_V2 = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "temp", "type": "double"}, {"name": "unit", "type": ["null", "string"], "default": None}],
}


def bare(schema: dict, record: dict) -> bytes:
    """A datum as Redpanda's value_schema_latest expects it: Avro's binary, no framing."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_latest_mode_decodes_bare_values_with_the_subjects_latest_schema(registry):
    url, client = registry
    v1 = client.register_schema("sensor-value", Schema(json.dumps(SENSOR_V1), "AVRO"))
    typer = ValueTyper(url, "sensor", "value_schema_latest")
    assert typer.decode(bare(SENSOR_V1, {"temp": 21.5})) == ({"temp": 21.5}, v1, None)
    # a framed value is not this mode's: the framing is read as the datum, and is too long
    framed = b"\x00" + v1.to_bytes(4, "big") + bare(SENSOR_V1, {"temp": 1.0})
    assert typer.decode(framed)[2] == (
        f"the value does not decode against schema id {v1}: not a datum of the AVRO schema: 5 bytes left over after it"
    )

    v2 = client.register_schema("sensor-value", Schema(json.dumps(SENSOR_V2), "AVRO"))
    newer = bare(SENSOR_V2, {"temp": 22.25, "unit": "C"})
    assert typer.decode(newer)[1] == v1  # the latest is looked up again only after LATEST_TTL_S
    fresh = pickle.loads(pickle.dumps(typer))
    assert fresh.decode(newer) == ({"temp": 22.25, "unit": "C"}, v2, None)

    merged = evolve(typer.arrow_schema(v1), fresh.arrow_schema(v2))
    assert merged == pa.schema([pa.field("temp", pa.float64(), False), pa.field("unit", pa.string(), True)])

    other = ValueTyper(url, "sensor", "value_schema_latest", subject="no-such-subject")
    assert other.decode(newer) == (None, None, "the subject no-such-subject has no schema")


GAUGES = """
syntax = "proto3";
package metrics;
message Header { string host = 1; }
message Gauge { Header header = 1; double value = 2; }
"""


def test_latest_mode_protobuf_values_are_bare_messages_of_the_first_or_the_named_message(registry):
    """As Redpanda: no framing and no message indexes; the schema's first message unless
    protobuf_name names another."""
    url, client = registry
    latest = client.register_schema("gauges-value", Schema(GAUGES, "PROTOBUF"))
    first = ValueTyper(url, "gauges", "value_schema_latest")
    named = ValueTyper(url, "gauges", "value_schema_latest", protobuf_name="metrics.Gauge")
    header = b"\x0a\x01h"  # field 1 (host), 1 byte
    gauge = b"\x0a\x03" + header + b"\x11" + struct.pack("<d", 2.5)  # header, then field 2 (value), a double
    assert first.decode(header) == ({"host": "h"}, latest, None)
    assert first.arrow_schema(latest) == pa.schema([pa.field("host", pa.string(), False)])
    assert named.decode(gauge) == ({"header": {"host": "h"}, "value": 2.5}, latest, None)
    assert ValueTyper(url, "gauges", "value_schema_latest", protobuf_name="metrics.Nope").decode(header) == (
        None,
        latest,
        f"schema id {latest} cannot be a table's: the schema has no message 'metrics.Nope'",
    )


@pytest.mark.parametrize("values", [avro_values, json_values, protobuf_values])
def test_iceberg_and_delta_tables_take_the_rows(registry, tmp_path, values):
    """The columns are types both table formats have: pyiceberg creates an Iceberg table of
    the schema and appends the rows, deltalake writes a Delta table; both read back equal."""
    from deltalake import DeltaTable, write_deltalake
    from pyiceberg.catalog.sql import SqlCatalog

    url, client = registry
    table, _ = table_of(ValueTyper(url, "lake", "value_schema_id_prefix"), values(client))
    catalog = SqlCatalog("brokkr", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/iceberg")
    catalog.create_namespace("brokkr")
    iceberg = catalog.create_table("brokkr.lake", schema=table.schema)
    iceberg.append(table)
    assert iceberg.scan().to_arrow().to_pylist() == table.to_pylist()
    write_deltalake(str(tmp_path / "delta"), table)
    delta = DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
    assert delta.to_pylist() == table.to_pylist()


# -- evolution -------------------------------------------------------------------------------------


def test_evolution_widens_appends_and_merges_nested_structs():
    inner_v1 = pa.struct([pa.field("a", pa.int32(), False)])
    inner_v2 = pa.struct([pa.field("a", pa.int64(), False), pa.field("b", pa.string(), False)])
    table = pa.schema(
        [
            pa.field("id", pa.int32(), False),
            pa.field("gone", pa.string(), False),
            pa.field("nested", inner_v1, False),
            pa.field("xs", pa.list_(pa.field("element", pa.float32(), False)), True),
            pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", inner_v1, False))),
            pa.field("amount", pa.decimal128(9, 2), False),
            pa.field("wide", pa.int64(), False),
        ]
    )
    new = pa.schema(
        [
            pa.field("added", pa.string(), False),
            pa.field("id", pa.int64(), False),
            pa.field("nested", inner_v2, False),
            pa.field("xs", pa.list_(pa.field("element", pa.float64(), True)), False),
            pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", inner_v2, False))),
            pa.field("amount", pa.decimal128(12, 2), False),
            pa.field("wide", pa.int32(), False),
        ]
    )
    merged_inner = pa.struct([pa.field("a", pa.int64(), False), pa.field("b", pa.string(), True)])
    assert evolve(table, new) == pa.schema(
        [
            pa.field("id", pa.int64(), False),
            pa.field("gone", pa.string(), True),  # a column the new rows lack: they hold null there
            pa.field("nested", merged_inner, False),
            pa.field("xs", pa.list_(pa.field("element", pa.float64(), True)), True),
            pa.field("m", pa.map_(pa.field("key", pa.string(), False), pa.field("value", merged_inner, False))),
            pa.field("amount", pa.decimal128(12, 2), False),
            pa.field("wide", pa.int64(), False),  # the table's wider type stays
            pa.field("added", pa.string(), True),  # appended, nullable: earlier rows have none
        ]
    )
    assert evolve(table, table) == table


@pytest.mark.parametrize(
    "old, new, message",
    [
        (pa.string(), pa.int64(), "x: a column of string cannot become int64"),
        (pa.int64(), pa.float64(), "x: a column of int64 cannot become double"),
        (pa.struct([pa.field("a", pa.string())]), pa.struct([pa.field("a", pa.int32())]),
         "x.a: a column of string cannot become int32"),
        (pa.list_(pa.int32()), pa.struct([pa.field("a", pa.int32())]), "x: a column of list<item: int32> cannot"),
        (pa.map_(pa.string(), pa.int32()), pa.map_(pa.int32(), pa.int32()), "x: map keys of string cannot become int32"),
        (pa.decimal128(9, 2), pa.decimal128(9, 3), "x: a column of decimal128(9, 2) cannot become decimal128(9, 3)"),
        (TS, pa.timestamp("us"), "x: a column of timestamp[us, tz=UTC] cannot become timestamp[us]"),
    ],
)  # fmt: skip
def test_evolution_refuses_what_iceberg_and_delta_cannot_evolve(old, new, message):
    with pytest.raises(IncompatibleSchema, match="^" + re.escape(message)):
        evolve(pa.schema([pa.field("x", old)]), pa.schema([pa.field("x", new)]))


# -- dead letters -----------------------------------------------------------------------------------

RECURSIVE = {
    "type": "record",
    "name": "Node",
    "fields": [{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}],
}


def test_every_dead_letter_reason(registry):
    url, client = registry
    serialize = AvroSerializer(client, json.dumps(POINT))
    good = serialize({"x": 1, "y": 2}, ctx("dl"))
    sid = schema_id(good)
    typer = ValueTyper(url, "dl", "value_schema_id_prefix")
    assert typer.decode(good) == ({"x": 1, "y": 2}, sid, None)

    assert typer.decode(None) == (None, None, "the value is null")
    assert typer.decode(b"\x00\x00\x01") == (
        None,
        None,
        "the value is 3 bytes, too short for the magic byte and a schema id",
    )
    assert typer.decode(b"plain text") == (
        None,
        None,
        "the value does not start with the magic byte 0 (it starts with 112)",
    )
    assert typer.decode(b"\x00\x7f\xff\xff\xf0\x02") == (None, 0x7FFFFFF0, "schema id 2147483632 is not registered")
    assert typer.decode(good[:-1]) == (
        None, sid, f"the value does not decode against schema id {sid}: not a datum of the AVRO schema: "
        "the payload ends early",
    )  # fmt: skip
    assert typer.decode(good + b"\x00") == (
        None, sid, f"the value does not decode against schema id {sid}: not a datum of the AVRO schema: "
        "1 bytes left over after it",
    )  # fmt: skip

    recursive = AvroSerializer(client, json.dumps(RECURSIVE))({"value": 1, "next": None}, ctx("dl-recursive"))
    rid = schema_id(recursive)
    reason = f"schema id {rid} cannot be a table's: Node.next: the record Node contains itself (recursive types cannot be columns)"
    assert typer.decode(recursive) == (None, rid, reason)
    with pytest.raises(IncompatibleSchema, match="contains itself"):
        typer.arrow_schema(rid)

    json_value = JSONSerializer(json.dumps(INVOICE), client)(
        {"number": 1, "total": 1, "items": [], "issued": "2026-11-27T18:00:00Z"}, ctx("dl-json")
    )
    jid = schema_id(json_value)
    bad_json = json_value[:5] + b'{"number": "one", "total": 1, "items": [], "issued": "2026-11-27T18:00:00Z"}'
    assert typer.decode(bad_json) == (
        None, jid, f"the value does not decode against schema id {jid}: does not match the JSON schema at $.number: "
        "'one' is not of type 'integer'",
    )  # fmt: skip
    naive = json_value[:5] + b'{"number": 1, "total": 1, "items": [], "issued": "2026-11-27T18:00:00"}'
    assert typer.decode(naive)[2].endswith("the date-time '2026-11-27T18:00:00' has no time zone offset")
    huge = (
        json_value[:5] + b'{"number": 9223372036854775808, "total": 1, "items": [], "issued": "2026-11-27T18:00:00Z"}'
    )
    assert typer.decode(huge)[2].endswith("the integer 9223372036854775808 does not fit a 64-bit column")

    classes = protobuf_classes()
    pid_value = ProtobufSerializer(classes["Order"], client, {"use.deprecated.format": False})(
        classes["Order"](id=1), ctx("dl-proto")
    )
    pid = schema_id(pid_value)
    other = pid_value[:5] + b"\x02\x02" + classes["Other"](z=1).SerializeToString()  # message indexes [1]: ex.Other
    assert typer.decode(other) == (
        None, pid, f"the value does not decode against schema id {pid}: "
        "its message indexes [1] name ex.Other, not the table's message ex.Order",
    )  # fmt: skip
    garbage = pid_value[:5] + b"\x00" + b"\x0a\x05"  # field 1 as a length of 5 bytes that are not there
    assert typer.decode(garbage)[2].startswith(
        f"the value does not decode against schema id {pid}: payload does not decode as ex.Order: "
    )
    named = ValueTyper(url, "dl", "value_schema_id_prefix", protobuf_name="ex.Other")
    assert named.decode(other) == ({"z": 1}, pid, None)

    dlq = pa.Table.from_pylist(
        [{"key": b"k", "value": b"plain text", "reason": typer.decode(b"plain text")[2]}], DLQ_SCHEMA
    )
    assert dlq.column("reason").null_count == 0


RECURSIVE_JSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
}
RECURSIVE_PROTO = 'syntax = "proto3"; package tree; message Node { int32 v = 1; repeated Node kids = 2; }'


@pytest.mark.parametrize(
    "subject, schema, reason",
    [
        ("avro", Schema(json.dumps(RECURSIVE), "AVRO"), "Node.next: the record Node contains itself"),
        ("json", Schema(json.dumps(RECURSIVE_JSON), "JSON"), "$.children[*]: the schema contains itself"),
        ("proto", Schema(RECURSIVE_PROTO, "PROTOBUF"), "tree.Node.kids: the message tree.Node contains itself"),
        (
            "nulls",
            Schema(json.dumps({"type": "record", "name": "N", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}), "AVRO"),
            "N.a: an array of items that hold no data",
        ),
    ],
)  # fmt: skip
def test_schemas_a_table_cannot_take_are_refused_with_why(registry, subject, schema, reason):
    """Recursive types (Avro, JSON Schema's $ref, Protobuf) and arrays of nothing: every
    record of such a schema is dead-lettered with the reason, and arrow_schema raises it."""
    url, client = registry
    sid = client.register_schema(f"refused-{subject}", schema)
    typer = ValueTyper(url, "refused", "value_schema_id_prefix")
    row, got_id, why = typer.decode(b"\x00" + sid.to_bytes(4, "big") + b"\x00")
    assert (row, got_id) == (None, sid)
    assert why.startswith(f"schema id {sid} cannot be a table's: {reason}")
    with pytest.raises(IncompatibleSchema, match=re.escape(reason)):
        typer.arrow_schema(sid)


def test_work_and_memory_are_bounded(registry, monkeypatch):
    """The schema cache keeps MAX_CACHED ids; a schema nesting deeper than MAX_DEPTH is refused."""
    url, client = registry
    monkeypatch.setattr(typed, "MAX_CACHED", 2)
    typer = ValueTyper(url, "bounded", "value_schema_id_prefix")
    ids = []
    for i in range(3):
        record = {"type": "record", "name": f"R{i}", "fields": [{"name": "a", "type": "int"}]}
        value = AvroSerializer(client, json.dumps(record))({"a": i}, ctx(f"bounded{i}"))
        ids.append(schema_id(value))
        assert typer.decode(value) == ({"a": i}, ids[-1], None)
    assert list(typer._known) == ids[1:]

    deep: dict = {"type": "int"}
    for _ in range(typed.MAX_DEPTH + 2):
        deep = {"type": "array", "items": deep}
    value = AvroSerializer(client, json.dumps(deep))([], ctx("deep"))
    assert typer.decode(value)[2].endswith(f"nests deeper than {typed.MAX_DEPTH} levels")


# -- the typer itself --------------------------------------------------------------------------------


def test_pickling_keeps_the_settings_and_drops_the_cache(registry):
    url, client = registry
    value = AvroSerializer(client, json.dumps(POINT))({"x": 5, "y": 6}, ctx("pickled"))
    typer = ValueTyper(url, "pickled", "value_schema_id_prefix", protobuf_name="ex.Order")
    assert typer.decode(value)[2] is None
    data = pickle.dumps(typer)
    assert len(data) < 1000  # settings only: no schema, decoder or lock
    copy = pickle.loads(data)
    assert (copy.registry_url, copy.topic, copy.mode, copy.subject, copy.protobuf_name) == (
        url, "pickled", "value_schema_id_prefix", "pickled-value", "ex.Order",
    )  # fmt: skip
    assert not copy._known
    assert copy.decode(value) == typer.decode(value) == ({"x": 5, "y": 6}, schema_id(value), None)
    with pytest.raises(ValueError, match="mode 'key_value' is not one of value_schema_id_prefix, value_schema_latest"):
        ValueTyper(url, "t", "key_value")


def test_a_registry_that_cannot_be_reached_raises_rather_than_dead_letters():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the with ends: nothing listens there
    typer = ValueTyper(f"http://127.0.0.1:{port}", "t", "value_schema_id_prefix")
    with pytest.raises(RegistryUnavailable, match="cannot be reached"):
        typer.decode(b"\x00\x00\x00\x00\x01payload")


def test_a_url_that_is_no_registry_raises_rather_than_dead_letters(registry):
    """A 404 that is not the registry's "not found" (a wrong path) is no dead letter either."""
    url, client = registry
    value = AvroSerializer(client, json.dumps(POINT))({"x": 1, "y": 1}, ctx("wrong-path"))
    typer = ValueTyper(url + "/not-the-registry", "t", "value_schema_id_prefix")
    with pytest.raises(RegistryUnavailable, match="answered 404"):
        typer.decode(value)


def test_basic_credentials_in_the_url(tmp_path):
    """The registry of a broker with SCRAM users asks for HTTP basic credentials: those of
    the URL (percent-encoded) are sent; wrong ones raise rather than dead-letter."""
    data = str(tmp_path / "data")
    assert main(["scram", "add", "alice", "--password", "p@ss:word", f"--override=log.dirs={data}"]) == 0
    config = sasl_config(**{"log.dirs": data, "brokkr.schema.registry.listeners": "http://127.0.0.1:0"})
    with BrokerThread(config) as broker:
        url = registry_of(broker.broker).server.urls[0]
        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:p@ss:word"})
        value = AvroSerializer(client, json.dumps(POINT))({"x": 1, "y": 2}, ctx("secured"))
        secured = url.replace("http://", "http://alice:p%40ss%3Aword@")
        assert ValueTyper(secured, "secured", "value_schema_id_prefix").decode(value) == (
            {"x": 1, "y": 2},
            schema_id(value),
            None,
        )
        wrong = url.replace("http://", "http://alice:nope@")
        with pytest.raises(RegistryUnavailable, match="answered 401"):
            ValueTyper(wrong, "secured", "value_schema_id_prefix").decode(value)
        with pytest.raises(RegistryUnavailable, match="answered 401"):
            ValueTyper(url, "secured", "value_schema_id_prefix").decode(value)


def test_importing_the_module_does_not_import_pyspark():
    code = "import sys, brokkr.plugins.sinks.spark.typed; print('pyspark' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"

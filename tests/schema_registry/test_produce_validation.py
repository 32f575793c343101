"""Schema validation on produce (plugins/schema_registry/validation.py), against a real
broker serving the registry: values (and keys) framed by confluent-kafka's serializers
with registered ids are stored; unframed ones, unknown ids, ids of another subject and, at
``payload`` level, payloads that do not decode refuse the whole batch with INVALID_RECORD
and KIP-467 record errors (read from raw Produce v9 responses); tombstones pass; each
subject name strategy."""

from __future__ import annotations

import json
import struct
import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.records import HEADER_SIZE, build_batch
from brokkr.core.testing import RawClient
from brokkr.plugins.codecs.gzip import GzipCodec
from brokkr.plugins.schema_registry import registry_of
from brokkr.plugins.schema_registry.validation import PLUGIN_NAME
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from wire import PRODUCE, produce_body

VALUE_CHECK = "confluent.value.schema.validation"
KEY_CHECK = "confluent.key.schema.validation"
VALUE_STRATEGY = "confluent.value.subject.name.strategy"
LEVEL = "brokkr.schema.validation.level"
USER = {
    "type": "record",
    "name": "User",
    "namespace": "ex",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
OTHER = {"type": "record", "name": "Other", "namespace": "ex", "fields": [{"name": "x", "type": "long"}]}
ADA = {"name": "ada", "age": 36}
UNFRAMED = "The value does not start with the magic byte 0 (it starts with 112)"  # b"p"


def framed(client, topic: str, record: dict, schema: dict = USER, strategy=None, field=MessageField.VALUE) -> bytes:
    """``record`` as confluent-kafka's AvroSerializer frames it (registering ``schema``)."""
    conf = {"subject.name.strategy": strategy} if strategy is not None else {}
    return AvroSerializer(client, json.dumps(schema), conf=conf)(record, SerializationContext(topic, field))


def schema_id(value: bytes) -> int:
    return struct.unpack(">I", value[1:5])[0]


def create(broker, name: str, **configs) -> str:
    settings = {k: str(v).lower() if isinstance(v, bool) else v for k, v in configs.items()}
    broker.call(broker.broker.create_topic, name, 1, settings)
    return name


def produce(broker, topic: str, records: list, compress: bool = False):
    """One raw Produce v9 of one batch of (key, value) records: its partition response."""
    now = time.time_ns() // 1_000_000
    batch = build_batch(records, timestamp=now)
    if compress:
        batch = build_batch(
            records, timestamp=now, attributes=1, compressed_payload=GzipCodec().compress(batch[HEADER_SIZE:])
        )
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(PRODUCE, 9, produce_body(topic, batch)).responses[0].partition_responses[0]


def errors(response) -> list[tuple[int, str]]:
    return [(e.batch_index, e.batch_index_error_message) for e in response.record_errors]


def log_end(broker, topic: str) -> int:
    return broker.broker.topics[topic].partitions[0].log.log_end_offset


def test_framed_values_are_stored_and_tombstones_pass(registry, client):
    broker, _ = registry
    topic = create(broker, "users", **{VALUE_CHECK: True})
    serializer = AvroSerializer(client, json.dumps(USER))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 50})
    failed = []
    for i in range(3):
        value = serializer({"name": f"u{i}", "age": i}, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value, b"k%d" % i, on_delivery=lambda err, msg: err and failed.append(err))
    producer.produce(topic, None, b"k0", on_delivery=lambda err, msg: err and failed.append(err))  # a tombstone
    assert producer.flush(30) == 0
    assert failed == []
    assert log_end(broker, topic) == 4


@pytest.mark.parametrize("compress", [False, True], ids=["uncompressed", "gzip"])
def test_a_batch_with_bad_values_is_refused_whole_with_record_errors(registry, client, compress):
    broker, _ = registry
    topic = create(broker, "t", **{VALUE_CHECK: True})
    good = framed(client, topic, ADA)
    other = framed(client, "u", {"x": 1}, OTHER)  # registered under u-value only
    unknown = b"\x00" + struct.pack(">I", 999) + good[5:]
    records = [(b"k", good), (b"k", b"plain"), (b"k", unknown), (b"k", other), (b"k", b"\x00\x00"), (b"k", None)]
    response = produce(broker, topic, records, compress)
    assert response.error_code == ErrorCode.INVALID_RECORD
    assert errors(response) == [
        (1, UNFRAMED),
        (2, "The value has schema id 999, which is not registered"),
        (3, f"The value has schema id {schema_id(other)}, which is not registered under subject t-value"),
        (4, "The value is 2 bytes, too short for the magic byte and a schema id"),
    ]
    assert response.error_message.startswith("One or more records have been rejected due to 4 record errors")
    assert log_end(broker, topic) == 0  # nothing of the batch
    assert produce(broker, topic, [(b"k", good), (b"k", None)], compress).error_code == ErrorCode.NONE
    assert log_end(broker, topic) == 2


def test_a_large_batch_is_walked_to_its_last_record(registry, client):
    broker, _ = registry
    topic = create(broker, "t", **{VALUE_CHECK: True})
    good = framed(client, topic, ADA)
    records = [(b"k", good)] * 30_000  # more than one slice of the walk
    assert produce(broker, topic, records + [(b"k", b"plain")]).record_errors[0].batch_index == 30_000
    assert produce(broker, topic, records).error_code == ErrorCode.NONE
    assert log_end(broker, topic) == 30_000


def test_keys_are_checked_under_their_own_subject_and_null_keys_pass(registry, client):
    broker, _ = registry
    topic = create(broker, "t", **{KEY_CHECK: True})  # values unchecked
    key = framed(client, topic, ADA, field=MessageField.KEY)  # registered under t-key
    other = framed(client, topic, {"x": 1}, OTHER)  # registered under t-value only
    assert produce(broker, topic, [(key, b"plain"), (None, b"plain")]).error_code == ErrorCode.NONE
    response = produce(broker, topic, [(key, b"plain"), (b"plain", b"plain"), (other, other)])
    assert errors(response) == [
        (1, "The key does not start with the magic byte 0 (it starts with 112)"),
        (2, f"The key has schema id {schema_id(other)}, which is not registered under subject t-key"),
    ]
    assert log_end(broker, topic) == 2


STRATEGIES = [
    ("TopicNameStrategy", topic_subject_name_strategy, "t-value", record_subject_name_strategy),
    ("RecordNameStrategy", record_subject_name_strategy, "ex.Other", topic_subject_name_strategy),
    (
        "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",  # Confluent's class name
        topic_record_subject_name_strategy,
        "t-ex.Other",
        record_subject_name_strategy,
    ),
]


@pytest.mark.parametrize(
    "setting, strategy, other_subject, elsewhere", STRATEGIES, ids=[s[0][-23:] for s in STRATEGIES]
)
def test_each_subject_name_strategy(registry, client, setting, strategy, other_subject, elsewhere):
    broker, _ = registry
    topic = create(broker, "t", **{VALUE_CHECK: True, VALUE_STRATEGY: setting})
    assert produce(broker, topic, [(b"k", framed(client, topic, ADA, strategy=strategy))]).error_code == ErrorCode.NONE
    misplaced = framed(client, topic, {"x": 1}, OTHER, strategy=elsewhere)  # under the subject of another strategy
    response = produce(broker, topic, [(b"k", misplaced)])
    message = f"The value has schema id {schema_id(misplaced)}, which is not registered under subject {other_subject}"
    assert errors(response) == [(0, message)]
    assert log_end(broker, topic) == 1


@pytest.fixture
def payload_level(brokkr_broker_factory):
    """(broker, client): a broker checking payloads, and a SchemaRegistryClient of its registry."""
    broker = brokkr_broker_factory({"brokkr.schema.registry.listeners": "http://127.0.0.1:0", LEVEL: "payload"})
    client = SchemaRegistryClient({"url": registry_of(broker.broker).server.urls[0]})
    yield broker, client
    client.close()


def test_payloads_that_do_not_decode_are_refused_at_payload_level(payload_level):
    broker, client = payload_level
    topic = create(broker, "t", **{VALUE_CHECK: True})
    good = framed(client, topic, ADA)
    truncated, garbage = good[:-1], good[:5] + b"\x01"  # an int past the end; a string of length -1
    response = produce(broker, topic, [(b"k", good), (b"k", truncated), (b"k", garbage), (b"k", None)])
    assert [i for i, _ in errors(response)] == [1, 2]
    for _, message in errors(response):
        assert message.startswith(f"The value does not decode against schema id {schema_id(good)}: ")
    assert produce(broker, topic, [(b"k", good), (b"k", None)]).error_code == ErrorCode.NONE
    assert log_end(broker, topic) == 2


def test_json_values_under_their_title(payload_level):
    broker, client = payload_level
    topic = create(broker, "t", **{VALUE_CHECK: True, VALUE_STRATEGY: "RecordNameStrategy"})
    schema = {
        "title": "Person",
        "type": "object",
        "properties": {"age": {"type": "integer"}},
        "required": ["age"],
    }
    conf = {"subject.name.strategy": record_subject_name_strategy}
    good = JSONSerializer(json.dumps(schema), client, conf=conf)({"age": 3}, SerializationContext(topic, "value"))
    assert client.get_subjects() == ["Person"]
    wrong = good[:5] + b'{"age": "three"}'
    response = produce(broker, topic, [(b"k", good), (b"k", wrong)])
    assert [i for i, _ in errors(response)] == [1]
    assert errors(response)[0][1].startswith(f"The value does not decode against schema id {schema_id(good)}: ")
    assert produce(broker, topic, [(b"k", good)]).error_code == ErrorCode.NONE


def protobuf_classes() -> tuple[type, type]:
    """Messages ex.Point and ex.Line (a Point) of one file, built at run time."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="shapes.proto", package="ex", syntax="proto3")
    point = file.message_type.add(name="Point")
    point.field.add(name="x", number=1, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    line = file.message_type.add(name="Line")
    line.field.add(name="a", number=1, type=field.TYPE_MESSAGE, type_name=".ex.Point", label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ex.{n}")) for n in ("Point", "Line"))


def test_protobuf_values_under_the_name_of_the_message_they_hold(payload_level):
    """RecordNameStrategy: the subject of a Protobuf record is its message's full name, as
    its message indexes say (here the file's second message)."""
    broker, client = payload_level
    point_class, line_class = protobuf_classes()
    topic = create(broker, "t", **{VALUE_CHECK: True, VALUE_STRATEGY: "RecordNameStrategy"})
    conf = {"subject.name.strategy": record_subject_name_strategy, "use.deprecated.format": False}
    line = ProtobufSerializer(line_class, client, conf)(
        line_class(a=point_class(x=1)), SerializationContext(topic, "value")
    )
    assert client.get_subjects() == ["ex.Line"]
    assert produce(broker, topic, [(b"k", line)]).error_code == ErrorCode.NONE
    point = line[:5] + b"\x00" + point_class(x=1).SerializeToString()  # message indexes [0]: ex.Point
    garbage = line[:5] + b"\x02\x02" + b"\x0a\x05"  # indexes [1], then a field longer than the payload
    response = produce(broker, topic, [(b"k", line), (b"k", point), (b"k", garbage)])
    assert errors(response)[0] == (
        1,
        f"The value has schema id {schema_id(line)}, which is not registered under subject ex.Point",
    )
    assert [i for i, _ in errors(response)] == [1, 2]
    assert errors(response)[1][1].startswith(f"The value does not decode against schema id {schema_id(line)}: ")
    assert log_end(broker, topic) == 1


def test_at_id_level_only_the_id_is_checked(registry, client):
    broker, _ = registry
    topic = create(broker, "t", **{VALUE_CHECK: True})
    garbage = framed(client, topic, ADA)[:5] + b"\x01"  # Confluent Server's check: the id, not the payload
    assert produce(broker, topic, [(b"k", garbage)]).error_code == ErrorCode.NONE


def test_validation_joins_the_produce_path_with_the_first_topic_that_turns_it_on(registry, client):
    broker, _ = registry
    topic = create(broker, "t")
    assert broker.broker.pm.get_plugin(PLUGIN_NAME) is None  # no cost for a broker without validating topics
    assert produce(broker, topic, [(b"k", b"plain")]).error_code == ErrorCode.NONE
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry(VALUE_CHECK, "true", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)
    assert broker.broker.pm.get_plugin(PLUGIN_NAME) is not None
    assert errors(produce(broker, topic, [(b"k", b"plain")])) == [(0, UNFRAMED)]
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(timeout=15)
    assert (configs[VALUE_CHECK].value, configs[VALUE_CHECK].is_default) == ("true", False)
    assert (configs[VALUE_STRATEGY].value, configs[VALUE_STRATEGY].is_default) == ("TopicNameStrategy", True)
    refused = admin.create_topics([NewTopic("bad", 1, 1, config={VALUE_STRATEGY: "SomeStrategy"})])["bad"]
    with pytest.raises(Exception, match="invalid value 'SomeStrategy' for configuration confluent.value.subject"):
        refused.result(timeout=15)


def test_validation_is_on_again_after_a_restart(brokkr_broker_factory, tmp_path):
    settings = {"brokkr.schema.registry.listeners": "http://127.0.0.1:0", "log.dirs": str(tmp_path / "d")}
    broker = brokkr_broker_factory(settings)
    topic = create(broker, "t", **{VALUE_CHECK: True})
    client = SchemaRegistryClient({"url": registry_of(broker.broker).server.urls[0]})
    good = framed(client, topic, ADA)
    broker.stop()
    again = brokkr_broker_factory(settings)  # the topic is loaded before any setting is altered
    assert errors(produce(again, topic, [(b"k", good), (b"k", b"plain")])) == [(1, UNFRAMED)]
    assert produce(again, topic, [(b"k", good)]).error_code == ErrorCode.NONE

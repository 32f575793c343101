"""Which topics become lake tables: the brokers' own (``_schemas``, ``__consumer_offsets``,
...) only when asked. A real broker with its schema registry writes the log dir; Spark
(local[2]) and pyiceberg backfill it."""

from __future__ import annotations

import pytest
from brokkr.plugins.schema_registry import registry_of
from brokkr.plugins.sinks.spark import mirror
from brokkr.plugins.sinks.spark.tables import TableSettings

from tests.spark.test_mirror import _produce

pytest.importorskip("pyspark")
pytest.importorskip("pyiceberg")
confluent_kafka = pytest.importorskip("confluent_kafka")


def test_internal_topics_make_no_table_unless_asked(brokkr_broker_factory, tmp_path, spark):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    logs = tmp_path / "logs"
    broker = brokkr_broker_factory(
        {"log.dirs": str(logs), "num.partitions": "2", "brokkr.schema.registry.listeners": "http://127.0.0.1:0"}
    )
    client = SchemaRegistryClient({"url": registry_of(broker.broker).server.urls[0]})
    client.register_schema("orders-value", Schema('{"type": "string"}', "AVRO"))
    client.close()
    sent: dict = {}
    _produce(broker.bootstrap_servers, "orders", 0, 5, sent)
    broker.stop()
    assert (logs / "_schemas-0").is_dir()

    m = mirror.TableMirror(spark, TableSettings(format="iceberg", lake=str(tmp_path / "lake")))
    done = {r.topic for r in mirror.backfill(m, logs)}
    assert done == {"orders"} and m.tables.topics() == ["orders"]
    asked = {r.topic for r in mirror.backfill(m, logs, ["_schemas"])}
    assert asked == {"_schemas"} and m.tables.topics() == ["_schemas", "orders"]
    assert m.tables.mirrored_offset("_schemas", 0) >= 1


@pytest.mark.parametrize("asked", [False, True])
def test_the_sink_hands_its_mirror_an_internal_topic_only_when_asked(brokkr_broker_factory, tmp_path, asked):
    """The broker's sink lists the registry's ``_schemas`` in its mirror's work only when
    ``brokkr.sink.topics`` names it; the users' topics as always."""
    import json

    from brokkr.plugins.sinks.spark.sink import sink_of
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    broker = brokkr_broker_factory(
        {
            "log.dirs": str(tmp_path / "logs"),
            "brokkr.schema.registry.listeners": "http://127.0.0.1:0",
            "brokkr.sink.lake": str(tmp_path / "lake"),
            "brokkr.sink.format": "iceberg",
            **({"brokkr.sink.topics": "_schemas,orders"} if asked else {}),
        }
    )
    sink = sink_of(broker.broker)
    broker.call(sink.stop)  # no mirror process: only what it would be told matters here
    client = SchemaRegistryClient({"url": registry_of(broker.broker).server.urls[0]})
    client.register_schema("orders-value", Schema('{"type": "string"}', "AVRO"))
    client.close()
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("orders", value=b"x")
    assert producer.flush(10) == 0
    broker.call(lambda: sink._refresh(sink._work_document()))
    topics = {p["topic"] for p in json.loads(sink.work_file.read_text())["partitions"]}
    assert topics == ({"_schemas", "orders"} if asked else {"orders"})

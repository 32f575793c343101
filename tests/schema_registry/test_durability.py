"""The registry's schemas live in ``_schemas``: ``brokkr serve`` keeps every schema, soft
delete, setting and id across a restart and a SIGKILL."""

from __future__ import annotations

import json
import signal

import httpx
from brokkr.core.testing import free_port
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from tests.serve import Served


def serve(tmp_path, port: int) -> Served:
    return Served(
        "--override=listeners=PLAINTEXT://127.0.0.1:0",
        f"--override=log.dirs={tmp_path / 'd'}",
        f"--override=brokkr.schema.registry.listeners=http://127.0.0.1:{port}",
        cwd=tmp_path,
    )


def record(name: str, *fields: str) -> Schema:
    return Schema(
        json.dumps(
            {"type": "record", "name": name, "fields": [{"name": f, "type": "int", "default": 0} for f in fields]}
        )
    )


def snapshot(url: str) -> dict:
    """Everything the registry answers about its subjects, ids and settings."""
    subjects = httpx.get(url + "/subjects", params={"deleted": "true"}).json()
    return {
        "subjects": subjects,
        "versions": {s: httpx.get(f"{url}/subjects/{s}/versions", params={"deleted": "true"}).json() for s in subjects},
        "live": httpx.get(url + "/subjects").json(),
        "ids": {i: httpx.get(f"{url}/schemas/ids/{i}").json() for i in (1, 2, 3)},
        "config": httpx.get(url + "/config/a").json(),
        "mode": httpx.get(url + "/mode/b").json(),
    }


def test_schemas_survive_a_restart_and_a_sigkill(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    broker = serve(tmp_path, port)
    try:
        client = SchemaRegistryClient({"url": url})
        assert client.register_schema("a", record("A", "x")) == 1
        assert client.register_schema("a", record("A", "x", "y")) == 2
        assert client.register_schema("b", record("B", "z")) == 3
        client.delete_version("a", 1)
        client.set_compatibility("a", "FULL")
        client.update_mode("b", "READONLY")
        before = snapshot(url)
        assert before["versions"] == {"a": [1, 2], "b": [1]} and before["config"] == {"compatibilityLevel": "FULL"}
        broker.proc.send_signal(signal.SIGTERM)
        assert broker.proc.wait(20) == 0
        broker = serve(tmp_path, port)
        assert snapshot(url) == before
        broker.kill()  # SIGKILL: nothing flushed or closed
        broker = serve(tmp_path, port)
        assert snapshot(url) == before
        client = SchemaRegistryClient({"url": url})
        assert client.register_schema("c", record("C", "w")) == 4  # ids go on after the largest kept
    finally:
        broker.kill()


def test_schemas_is_written_in_confluents_record_format(registry):
    from confluent_kafka import Consumer, TopicPartition

    broker, url = registry
    client = SchemaRegistryClient({"url": url})
    client.register_schema("a", record("A", "x"))
    client.register_schema("a", record("A", "x", "y"))
    client.delete_version("a", 1)
    client.delete_version("a", 1, permanent=True)
    client.set_compatibility("a", "NONE")
    client.update_global_mode("READONLY")
    client.update_global_mode("READWRITE")
    client.delete_subject("a")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("_schemas", 0, 0)])
    records = []
    while len(records) < 8:
        message = consumer.poll(10)
        assert message is not None and not message.error()
        value = message.value()
        records.append((json.loads(message.key()), json.loads(value) if value is not None else None))
    consumer.close()
    text1, text2 = record("A", "x").schema_str, record("A", "x", "y").schema_str
    schema = {"keytype": "SCHEMA", "subject": "a", "magic": 1}
    assert [
        (k, v and {**v, "schema": json.loads(v["schema"])} if k["keytype"] == "SCHEMA" else v) for k, v in records
    ] == [
        (
            {**schema, "version": 1},
            {"subject": "a", "version": 1, "id": 1, "schema": json.loads(text1), "deleted": False},
        ),
        (
            {**schema, "version": 2},
            {"subject": "a", "version": 2, "id": 2, "schema": json.loads(text2), "deleted": False},
        ),
        (
            {**schema, "version": 1},
            {"subject": "a", "version": 1, "id": 1, "schema": json.loads(text1), "deleted": True},
        ),
        ({**schema, "version": 1}, None),  # the permanent delete's tombstone
        ({"keytype": "CONFIG", "subject": "a", "magic": 0}, {"subject": "a", "compatibilityLevel": "NONE"}),
        ({"keytype": "MODE", "subject": None, "magic": 0}, {"mode": "READONLY"}),
        ({"keytype": "MODE", "subject": None, "magic": 0}, {"mode": "READWRITE"}),
        ({"keytype": "DELETE_SUBJECT", "subject": "a", "magic": 0}, {"subject": "a", "version": 2}),
    ]

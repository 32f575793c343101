"""With the broker's SCRAM users and ACL authorizer on, the registry asks for HTTP basic
credentials, checks them against the SCRAM credentials, and authorizes each request
through the broker's authorizer as operations on the ``_schemas`` topic."""

from __future__ import annotations

import json

import httpx
from brokkr.core.authorization import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from brokkr.core.cli import main
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from sasl_wire import sasl_config

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def grant(broker, principal: str, *operations: AclOperation) -> None:
    store = broker.broker.hook.brokkr_acl_store(broker=broker.broker)
    bindings = [
        AclBinding(ResourceType.TOPIC, "_schemas", PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for op in operations
    ]
    broker.call(store.create_acls, bindings)


def test_basic_credentials_of_scram_users_and_acls_on_schemas(tmp_path, registry_factory, capsys):
    data = str(tmp_path / "data")
    assert main(["scram", "add", "alice", "--password", "alice-secret", f"--override=log.dirs={data}"]) == 0
    assert (
        main(
            [
                "scram",
                "add",
                "bob",
                "--password",
                "bob-secret",
                "--mechanism",
                "SCRAM-SHA-512",
                f"--override=log.dirs={data}",
            ]
        )
        == 0
    )
    capsys.readouterr()
    broker, url = registry_factory(sasl_config(**{"log.dirs": data, "authorizer.class.name": "acl"}))

    anonymous = httpx.get(url + "/subjects")
    assert anonymous.status_code == 401 and anonymous.json() == {"error_code": 401, "message": "Unauthorized"}
    assert anonymous.headers["WWW-Authenticate"].startswith("Basic ")
    assert httpx.get(url + "/subjects", auth=("alice", "wrong")).status_code == 401
    assert httpx.get(url + "/subjects", auth=("mallory", "alice-secret")).status_code == 401

    denied = httpx.get(url + "/subjects", auth=("alice", "alice-secret"))  # authenticated, no ACL
    assert denied.status_code == 403
    assert denied.json() == {"error_code": 40301, "message": "User is denied operation Read on Topic: _schemas"}

    grant(broker, "User:alice", AclOperation.READ)
    assert httpx.get(url + "/subjects", auth=("alice", "alice-secret")).json() == []
    alice = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
    try:
        alice.register_schema("s", Schema(SCHEMA))
        raise AssertionError("registered without WRITE")
    except SchemaRegistryError as exc:
        assert (exc.http_status_code, exc.error_code) == (403, 40301)

    grant(broker, "User:alice", AclOperation.WRITE)
    assert alice.register_schema("s", Schema(SCHEMA)) == 1
    assert httpx.delete(url + "/subjects/s", auth=("alice", "alice-secret")).status_code == 403  # DELETE
    assert httpx.put(url + "/config", json={"compatibility": "NONE"}, auth=("alice", "alice-secret")).status_code == 403

    grant(broker, "User:bob", AclOperation.READ, AclOperation.DELETE, AclOperation.ALTER_CONFIGS)
    bob = ("bob", "bob-secret")  # a SCRAM-SHA-512 credential
    assert httpx.get(url + "/subjects/s/versions", auth=bob).json() == [1]
    assert httpx.put(url + "/config", json={"compatibility": "NONE"}, auth=bob).json() == {"compatibility": "NONE"}
    assert httpx.delete(url + "/subjects/s", auth=bob).json() == [1]
    assert httpx.post(url + "/subjects/t/versions", json={"schema": SCHEMA}, auth=bob).status_code == 403

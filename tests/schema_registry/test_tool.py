"""``brokkr schemas`` (core/schema_tool.py) as a user runs it: a subprocess against the
registry of a real broker (list, register from a file, test compatibility, delete, get and
set levels, basic auth), with Confluent's error codes shown and an unreachable URL named."""

from __future__ import annotations

import json
import subprocess
import sys

from brokkr.core.testing import free_port
from brokkr.plugins.schema_registry import registry_of
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion


def schemas(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "schemas", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def avro_file(path, *fields) -> str:
    path.write_text(json.dumps({"type": "record", "name": "R", "fields": list(fields)}))
    return str(path)


def register_two_versions(url: str, tmp_path) -> None:
    v1 = avro_file(tmp_path / "v1.avsc", {"name": "a", "type": "int"})
    v2 = avro_file(tmp_path / "v2.avsc", {"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""})
    assert (
        schemas(url, "register", "s-value", "--schema-file", v1).stdout == "Successfully registered schema with ID: 1\n"
    )
    assert schemas(url, "register", "s-value", "--schema-file", v2).stdout.endswith("ID: 2\n")


def test_register_list_and_test_compatibility(registry, tmp_path):
    _, url = registry
    register_two_versions(url, tmp_path)
    assert schemas(url, "list").stdout == "s-value\t1,2\n"
    breaking = avro_file(tmp_path / "breaking.avsc", {"name": "a", "type": "boolean"})
    refused = schemas(url, "compatibility", "s-value", "--schema-file", breaking)
    assert refused.returncode == 1
    assert refused.stdout.startswith("Incompatible\n  ")  # and Confluent's messages, one a line
    compatible = schemas(url, "compatibility", "s-value", "--schema-file", str(tmp_path / "v1.avsc"))
    assert (compatible.stdout, refused.stderr) == ("Compatible\n", "")


def test_levels_and_deletes(registry, tmp_path):
    _, url = registry
    register_two_versions(url, tmp_path)
    assert schemas(url, "config", "s-value", "--set", "NONE").stdout == "NONE\n"
    assert (schemas(url, "config", "s-value").stdout, schemas(url, "config").stdout) == ("NONE\n", "BACKWARD\n")
    assert (
        schemas(url, "delete", "s-value", "--version", "1").stdout == "Deleted (soft) version(s) 1 of subject s-value\n"
    )
    assert (schemas(url, "list").stdout, schemas(url, "list", "--deleted").stdout) == ("s-value\t2\n", "s-value\t1,2\n")
    gone = schemas(url, "delete", "s-value", "--permanent")  # soft-deletes the subject first, as Confluent needs
    assert (gone.returncode, gone.stderr) == (0, "")
    assert (schemas(url, "list").stdout, schemas(url, "list", "--deleted").stdout) == ("", "")


def test_protobuf_with_a_reference(registry, tmp_path):
    _, url = registry
    (tmp_path / "point.proto").write_text('syntax = "proto3";\npackage ex;\nmessage Point { int32 x = 1; }\n')
    (tmp_path / "line.proto").write_text(
        'syntax = "proto3";\npackage ex;\nimport "point.proto";\nmessage Line { Point a = 1; Point b = 2; }\n'
    )
    point = schemas(url, "register", "point", "--type", "PROTOBUF", "--schema-file", str(tmp_path / "point.proto"))
    assert point.stdout.endswith("ID: 1\n")
    line = ["register", "line", "--type", "PROTOBUF", "--schema-file", str(tmp_path / "line.proto")]
    assert schemas(url, *line, "--reference", "point.proto=point:1").stdout.endswith("ID: 2\n")
    missing = schemas(url, *line)  # the import cannot be resolved without its reference
    assert (missing.returncode, missing.stderr[:13]) == (1, "Error: 42201 ")


def test_registry_errors_are_shown_with_their_codes_and_an_unreachable_url_named(registry, tmp_path):
    _, url = registry
    unknown = schemas(url, "delete", "nope")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr.startswith("Error: 40401 ")
    invalid = schemas(url, "register", "s", "--schema-file", avro_file(tmp_path / "bad.avsc", {"name": "a"}))
    assert (invalid.returncode, invalid.stderr[:13]) == (1, "Error: 42201 ")
    nowhere = f"http://127.0.0.1:{free_port()}"
    unreachable = schemas(nowhere, "list")
    assert unreachable.returncode == 2
    assert unreachable.stderr.startswith(f"brokkr: cannot reach the schema registry at {nowhere}: ")


def test_basic_auth_from_the_command_line_or_a_command_config(brokkr_broker_factory, tmp_path):
    broker = brokkr_broker_factory(
        {
            "brokkr.schema.registry.listeners": "http://127.0.0.1:0",
            "brokkr.schema.registry.authentication.method": "BASIC",
        }
    )
    url = registry_of(broker.broker).server.urls[0]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    alice = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"secret")
    admin.alter_user_scram_credentials([alice])["alice"].result(timeout=15)
    denied = schemas(url, "list")
    assert (denied.returncode, denied.stderr[:11]) == (1, "Error: 401 ")  # Confluent's code for no credentials
    assert schemas(url, "--user", "alice", "--password", "secret", "config").stdout == "BACKWARD\n"
    (tmp_path / "client.properties").write_text(
        "basic.auth.credentials.source=USER_INFO\nbasic.auth.user.info=alice:secret\n"
    )
    with_file = schemas(url, "--command-config", str(tmp_path / "client.properties"), "config")
    assert (with_file.returncode, with_file.stdout) == (0, "BACKWARD\n")

"""The schema registry served by a real broker, driven by confluent-kafka's
``SchemaRegistryClient`` unchanged (and raw HTTP where the client has no call): ids,
lookups, evolution under each compatibility level, references, deletes, modes, config,
Confluent's error codes and content type."""

from __future__ import annotations

import json

import httpx
import pytest
from confluent_kafka.schema_registry import Metadata, MetadataProperties, Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def avro(fields: list, name: str = "R") -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": fields}), "AVRO")


def field(name: str, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def error_of(call, *args, **kwargs) -> tuple[int, int]:
    with pytest.raises(SchemaRegistryError) as info:
        call(*args, **kwargs)
    return info.value.http_status_code, info.value.error_code


def http_error(url: str) -> tuple[int, int]:
    """(status, error_code) of a GET, past the client's caches."""
    answer = httpx.get(url)
    return answer.status_code, answer.json()["error_code"]


def test_one_id_per_schema_across_subjects_and_lookups(client, registry):
    one = avro([field("a", "int")])
    # The same schema, written differently: AVRO is kept in its canonical form.
    same = Schema(json.dumps({"fields": [{"type": "int", "name": "a"}], "name": "R", "type": "record"}), "AVRO")
    two = avro([field("a", "int"), field("b", "string", default="")])
    assert client.register_schema("s-value", one) == 1
    assert client.register_schema("other-value", same) == 1
    assert client.register_schema("s-value", two) == 2
    assert client.register_schema("s-value", one) == 1  # already version 1: nothing new
    assert client.get_versions("s-value") == [1, 2]
    assert client.get_subjects() == ["other-value", "s-value"]
    found = client.lookup_schema("s-value", same)
    assert (found.schema_id, found.version, found.subject) == (1, 1, "s-value")
    assert json.loads(client.get_schema(2).schema_str) == json.loads(two.schema_str)
    assert sorted(client.get_subjects_by_schema_id(1)) == ["other-value", "s-value"]
    assert {(v.subject, v.version) for v in client.get_schema_versions(1)} == {("s-value", 1), ("other-value", 1)}
    latest = client.get_latest_version("s-value")
    assert (latest.schema_id, latest.version) == (2, 2)
    assert "AVRO" in client.get_schema_types()
    answer = httpx.get(registry[1] + "/subjects/s-value/versions/1")
    assert answer.headers["content-type"] == CONTENT_TYPE
    assert answer.json() == {"subject": "s-value", "version": 1, "id": 1, "schema": client.get_schema(1).schema_str}
    raw = httpx.get(registry[1] + "/subjects/s-value/versions/latest/schema")  # the schema itself, unquoted
    assert json.loads(raw.text) == json.loads(two.schema_str)
    assert httpx.get(registry[1] + "/schemas/ids/2", params={"fetchMaxId": "true"}).json()["maxId"] == 2


def test_avro_serializer_and_deserializer_round_trip(client):
    avro_module = pytest.importorskip("confluent_kafka.schema_registry.avro")
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = json.dumps({"type": "record", "name": "User", "fields": [field("name", "string"), field("age", "int")]})
    serializer = avro_module.AvroSerializer(client, schema)
    deserializer = avro_module.AvroDeserializer(client)
    ctx = SerializationContext("users", MessageField.VALUE)
    data = serializer({"name": "ada", "age": 36}, ctx)
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == client.get_latest_version("users-value").schema_id
    assert deserializer(data, ctx) == {"name": "ada", "age": 36}


V1 = [field("f", "int", default=0)]
V2: list = []  # f removed: both directions read it (the old reader has a default)
V3 = [field("f", "string", default="")]  # compatible with V2 both ways, with V1 neither way
BREAKING = [field("f", "boolean")]


@pytest.mark.parametrize(
    "level, v3_accepted, breaking_accepted",
    [
        ("NONE", True, True),
        ("BACKWARD", True, False),
        ("FORWARD", True, False),
        ("FULL", True, False),
        ("BACKWARD_TRANSITIVE", False, False),
        ("FORWARD_TRANSITIVE", False, False),
        ("FULL_TRANSITIVE", False, False),
    ],
)
def test_evolution_under_each_compatibility_level(client, level, v3_accepted, breaking_accepted):
    assert client.set_compatibility("e", level)["compatibility"] == level
    assert client.get_compatibility("e") == level
    client.register_schema("e", avro(V1))
    client.register_schema("e", avro(V2))
    assert client.test_compatibility("e", avro(V3)) is True  # against the latest only
    assert client.test_compatibility_all_versions("e", avro(V3)) is v3_accepted
    if v3_accepted:
        assert client.register_schema("e", avro(V3)) == 3
    else:
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema("e", avro(V3))
        assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
        assert f"compatibility: '{level}'" in refused.value.error_message
    if breaking_accepted:
        client.register_schema("e", avro(BREAKING))
    else:
        assert error_of(client.register_schema, "e", avro(BREAKING)) == (409, 409)
        assert client.get_versions("e") == ([1, 2, 3] if v3_accepted else [1, 2])


def test_the_default_level_is_backward_and_compatibility_answers_verbosely(client, registry):
    assert client.get_compatibility() == "BACKWARD"
    client.register_schema("b", avro([field("a", "int")]))
    new = avro([field("a", "int"), field("b", "string")])  # a new field without a default
    answer = httpx.post(
        registry[1] + "/compatibility/subjects/b/versions/latest?verbose=true",
        json={"schema": new.schema_str},
    ).json()
    assert answer["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in answer["messages"])
    assert error_of(client.register_schema, "b", new) == (409, 409)


def test_confluents_error_codes(client, registry):
    client.register_schema("s", avro([field("a", "int")]))
    assert error_of(client.get_versions, "nope") == (404, 40401)
    assert error_of(client.get_version, "s", 5) == (404, 40402)
    assert error_of(client.get_schema, 999) == (404, 40403)
    assert error_of(client.lookup_schema, "s", avro([field("z", "int")])) == (404, 40403)
    assert error_of(client.lookup_schema, "nope", avro([field("a", "int")])) == (404, 40401)
    assert error_of(client.register_schema, "s", Schema('{"type": "record", "name": "R"}', "AVRO")) == (422, 42201)
    assert error_of(client.register_schema, "s", Schema("{not json", "AVRO")) == (422, 42201)
    assert error_of(client.register_schema, "s", Schema('"int"', "XML")) == (422, 42201)
    assert error_of(client.get_version, "s", 0) == (422, 42202)
    assert error_of(client.set_compatibility, "s", "SIDEWAYS") == (422, 42203)
    assert error_of(client.get_config, "s") == (404, 40408)
    bad_version = httpx.get(registry[1] + "/subjects/s/versions/one")
    assert bad_version.status_code == 422 and bad_version.json() == {
        "error_code": 42202,
        "message": "The specified version 'one' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    }
    assert httpx.get(registry[1] + "/nowhere").json() == {"error_code": 404, "message": "HTTP 404 Not Found"}


def test_references_resolve_and_protect_what_they_reference(client):
    address = json.dumps({"type": "record", "name": "Address", "fields": [field("city", "string")]})
    assert client.register_schema("address", Schema(address, "AVRO")) == 1
    person = Schema(
        json.dumps({"type": "record", "name": "Person", "fields": [field("home", "Address")]}),
        "AVRO",
        [SchemaReference("Address", "address", 1)],
    )
    person_id = client.register_schema("person", person)
    got = client.get_version("person", 1)
    assert [(r.name, r.subject, r.version) for r in got.schema.references] == [("Address", "address", 1)]
    assert client.get_referenced_by("address", 1) == [person_id]
    dangling = Schema(person.schema_str, "AVRO", [SchemaReference("Address", "address", 7)])
    assert error_of(client.register_schema, "person2", dangling) == (422, 42201)
    assert error_of(client.delete_version, "address", 1) == (422, 42206)
    assert error_of(client.delete_subject, "address") == (422, 42206)


def test_soft_and_permanent_deletes(client, registry):
    one, two = avro([field("a", "int")]), avro([field("a", "int"), field("b", "int", default=0)])
    client.register_schema("d", one)
    client.register_schema("d", two)
    assert error_of(client.delete_version, "d", 1, permanent=True) == (404, 40407)
    assert client.delete_version("d", 1) == 1
    assert error_of(client.delete_version, "d", 1) == (404, 40406)
    assert client.get_versions("d") == [2]
    assert client.get_versions("d", deleted=True) == [1, 2]
    assert client.get_schema(1).schema_str  # a soft-deleted version's id still decodes
    assert error_of(client.get_version, "d", 1) == (404, 40402)
    assert client.get_version("d", 1, deleted=True).schema_id == 1  # (the client caches it from here)
    assert client.delete_version("d", 1, permanent=True) == 1
    assert client.get_versions("d", deleted=True) == [2]
    assert http_error(registry[1] + "/schemas/ids/1") == (404, 40403)  # no version has id 1 any more
    assert client.delete_subject("d") == [2]
    assert error_of(client.delete_subject, "d") == (404, 40404)
    assert client.get_subjects() == [] and client.get_subjects(deleted=True) == ["d"]
    # Registering a soft-deleted schema again gives a new version with the same id.
    assert client.register_schema("d", two) == 2
    assert client.get_versions("d") == [3]
    client.delete_subject("d")
    assert client.delete_subject("d", permanent=True) == [2, 3]
    assert error_of(client.get_versions, "d", deleted=True) == (404, 40401)
    assert http_error(registry[1] + "/schemas/ids/2") == (404, 40403)
    assert client.register_schema("d", avro([field("c", "long")])) == 3  # ids are never reused here


def test_modes_readonly_and_import(client, registry):
    url = registry[1]
    client.register_schema("m", avro([field("a", "int")]))
    assert client.get_global_mode() == "READWRITE"
    assert client.update_mode("m", "READONLY") == "READONLY"
    assert client.get_mode("m") == "READONLY"
    assert error_of(client.register_schema, "m", avro([field("a", "int"), field("b", "int", default=1)])) == (
        422,
        42205,
    )
    assert error_of(client.delete_subject, "m") == (422, 42205)
    assert client.delete_mode("m") == "READONLY"
    assert error_of(client.update_mode, "m", "SIDEWAYS") == (422, 42204)
    assert error_of(client.update_global_mode, "IMPORT") == (422, 42205)  # schemas exist: needs force
    assert client.update_global_mode("IMPORT", force=True) == "IMPORT"
    # IMPORT keeps the id and version given, and checks no compatibility.
    body = {
        "schema": json.dumps({"type": "record", "name": "X", "fields": [field("x", "string")]}),
        "id": 42,
        "version": 7,
    }
    assert httpx.post(url + "/subjects/imported/versions", json=body).json()["id"] == 42
    assert client.get_version("imported", 7).schema_id == 42
    assert error_of(client.register_schema, "n", avro([field("q", "int")])) == (422, 42205)  # not READWRITE
    other = {"schema": json.dumps({"type": "record", "name": "Y", "fields": []}), "id": 42, "version": 1}
    clash = httpx.post(url + "/subjects/imported2/versions", json=other)
    assert clash.status_code == 422 and clash.json()["error_code"] == 42205
    client.update_global_mode("READWRITE")
    assert client.register_schema("n", avro([field("q", "int")])) == 43  # after the largest id


def test_global_and_subject_config(client, registry):
    url = registry[1]
    assert httpx.get(url + "/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert httpx.put(url + "/config", json={"compatibility": "full"}).json() == {"compatibility": "FULL"}
    assert client.get_compatibility() == "FULL"
    assert error_of(client.get_config, "c") == (404, 40408)
    assert httpx.get(url + "/config/c?defaultToGlobal=true").json() == {"compatibilityLevel": "FULL"}
    client.set_compatibility("c", "NONE")
    assert client.get_compatibility("c") == "NONE"
    assert httpx.delete(url + "/config/c").json() == {"compatibilityLevel": "NONE"}
    assert error_of(client.delete_config, "c") == (404, 40401)
    assert httpx.delete(url + "/config").json() == {"compatibilityLevel": "FULL"}
    assert client.get_compatibility() == "BACKWARD"


def test_metadata_is_kept_and_part_of_a_schemas_identity(client):
    props = Metadata(tags=None, properties=MetadataProperties({"owner": "ada"}), sensitive=None)
    plain = avro([field("a", "int")])
    with_metadata = Schema(plain.schema_str, "AVRO", metadata=props)
    assert client.register_schema("md", with_metadata) == 1
    got = client.get_latest_version("md")
    assert got.schema.metadata.properties.properties == {"owner": "ada"}
    assert client.get_latest_with_metadata("md", {"owner": "ada"}).version == 1
    # Without metadata the latest version's is taken over: the same schema, no new version.
    assert client.register_schema("md", plain) == 1
    assert client.register_schema("md2", plain) == 2  # another subject, no metadata: another schema


def test_bodies_are_bounded_and_subjects_may_hold_any_character(registry_factory):
    _, url = registry_factory({"brokkr.schema.registry.request.max.bytes": 4096})
    big = {"schema": json.dumps({"type": "record", "name": "R", "doc": "x" * 5000, "fields": []})}
    answer = httpx.post(url + "/subjects/big/versions", json=big)
    assert answer.status_code == 413 and answer.json()["error_code"] == 413
    small = {"schema": json.dumps({"type": "record", "name": "R", "fields": []})}
    assert httpx.post(url + "/subjects/a%2Fb%20c/versions", json=small).json()["id"] == 1
    assert httpx.get(url + "/subjects").json() == ["a/b c"]


def test_an_https_listener_takes_the_brokers_tls_settings(registry_factory, tmp_path):
    tls_certs = pytest.importorskip("tls_certs")
    tls = tls_certs.make_tls(tmp_path)
    _, url = registry_factory(
        {"brokkr.schema.registry.listeners": "https://127.0.0.1:0", "ssl.keystore.location": str(tls.server_pem)}
    )
    assert url.startswith("https://")
    client = SchemaRegistryClient({"url": url, "ssl.ca.location": str(tls.ca_pem)})
    assert client.register_schema("tls", avro([field("a", "int")])) == 1
    with pytest.raises(httpx.ConnectError):  # the broker's certificate, which only the test CA signed
        httpx.get(url + "/subjects")

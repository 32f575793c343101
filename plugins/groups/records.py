"""The records of ``__consumer_offsets``, in Kafka's own format.

A record's key is an int16 version followed by the key struct; the key version names the
record type (0 and 1: OffsetCommitKey, 2: GroupMetadataKey, 3-8: the ConsumerGroup*
records of KIP-848, 10-15: the ShareGroup* records of KIP-932). Its value is an int16
version followed by the matching value struct, or null: a tombstone, which deletes the key
once the log is compacted. The codecs are compiled from Kafka's JSON definitions
(``coordinator_records/``) by :mod:`brokkr.core.protocol.schema`, so what Kafka wrote
decodes and re-encodes byte for byte.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any, NamedTuple

from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.primitives import Reader, Writer
from brokkr.core.protocol.schema import MessageSpec, compile_message

#: Key version -> record type (the JSON names without Key/Value).
RECORD_TYPES: dict[int, str] = {
    0: "OffsetCommit",
    1: "OffsetCommit",
    2: "GroupMetadata",
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
}
#: Record type -> the key version that names it (2 and up).
KEY_VERSIONS: dict[str, int] = {kind: v for v, kind in RECORD_TYPES.items() if v >= 2}


@functools.cache
def record_spec(name: str) -> MessageSpec:
    """The compiled definition ``coordinator_records/<name>.json`` (once per process)."""
    return compile_message(resources.files(__package__).joinpath("coordinator_records", f"{name}.json").read_text())


class CoordinatorRecord(NamedTuple):
    """One decoded record: its type, key (version, struct) and value (version, struct;
    both None for a tombstone)."""

    type: str
    key_version: int
    key: Any
    value_version: int | None
    value: Any | None


def decode_record(key: bytes | memoryview, value: bytes | memoryview | None) -> CoordinatorRecord:
    """Decode one record's key and value (CorruptRequest for bytes that do not parse)."""
    if key is None:
        raise CorruptRequest("a __consumer_offsets record without a key")
    r = Reader(key)
    key_version = r.int16()
    kind = RECORD_TYPES.get(key_version)
    if kind is None:
        raise CorruptRequest(f"unknown __consumer_offsets key version {key_version}")
    spec = record_spec(kind + "Key")
    key_struct = _decode(spec, _key_schema_version(spec, key_version), r)
    if value is None:
        return CoordinatorRecord(kind, key_version, key_struct, None, None)
    r = Reader(value)
    value_version = r.int16()
    spec = record_spec(kind + "Value")
    if not spec.valid[0] <= value_version <= spec.valid[1]:
        raise CorruptRequest(f"unknown {spec.name} version {value_version}")
    return CoordinatorRecord(kind, key_version, key_struct, value_version, _decode(spec, value_version, r))


def _decode(spec: MessageSpec, version: int, r: Reader) -> Any:
    msg = spec.decode(version, r)
    if r.remaining:
        raise CorruptRequest(f"{r.remaining} unexpected trailing bytes after {spec.name} v{version}")
    return msg


def _key_schema_version(spec: MessageSpec, key_version: int) -> int:
    """The version a key struct is read and written with: the key version itself for the
    older records (``validVersions`` names it), 0 for those whose JSON has an ``apiKey``
    (the ShareGroup* records: the key version is that apiKey, the schema's version 0)."""
    return 0 if spec.api_key is not None else key_version


def encode_key(key_version: int, key: Any) -> bytes:
    w = Writer()
    w.int16(key_version)
    spec = record_spec(RECORD_TYPES[key_version] + "Key")
    return bytes(spec.encode(_key_schema_version(spec, key_version), key, w).buf)


def encode_value(kind: str, value_version: int, value: Any) -> bytes:
    w = Writer()
    w.int16(value_version)
    return bytes(record_spec(kind + "Value").encode(value_version, value, w).buf)

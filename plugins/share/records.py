"""The records of ``__share_group_state``, in Kafka's format (ShareCoordinatorShard's).

A share partition's state is a ShareSnapshot (key version 0: the whole state) followed by
ShareUpdate records (key version 1: the state batches that changed, merged over the
snapshot), both keyed by (group id, topic id, partition); a null value deletes the state.
A record's key and value are an int16 version followed by the struct, compiled from
Kafka's JSON (``plugins/groups/coordinator_records/Share{Snapshot,Update}{Key,Value}.json``).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any, NamedTuple

from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.primitives import Reader, Writer
from brokkr.plugins.groups.records import record_spec

SNAPSHOT, UPDATE = 0, 1
_TYPES = {SNAPSHOT: "ShareSnapshot", UPDATE: "ShareUpdate"}

#: Delivery states as state batches carry them (Kafka's RecordState ids).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4


class StateBatch(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


def state_batch(b: Any) -> StateBatch:
    """A decoded StateBatch struct (of a record or a message) as a :class:`StateBatch`."""
    return StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)


class ShareRecord(NamedTuple):
    """One decoded record: its type (SNAPSHOT, UPDATE), key and value (None: a tombstone)."""

    type: int
    group_id: str
    topic_id: uuid.UUID
    partition: int
    value: Any | None


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The share partition's key, which picks its ``__share_group_state`` partition
    (Kafka's SharePartitionKey.asCoordinatorKey)."""
    return f"{group_id}:{kafka_uuid(topic_id)}:{partition}"


def encode_key(kind: int, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    spec = record_spec(_TYPES[kind] + "Key")
    w = Writer()
    w.int16(kind)
    return bytes(spec.encode(0, spec.cls(group_id=group_id, topic_id=topic_id, partition=partition), w).buf)


def encode_value(kind: int, **fields: Any) -> bytes:
    spec = record_spec(_TYPES[kind] + "Value")
    batch = spec.struct("StateBatch")
    fields["state_batches"] = [batch(**b._asdict()) for b in fields["state_batches"]]
    w = Writer()
    w.int16(0)
    return bytes(spec.encode(0, spec.cls(**fields), w).buf)


def decode(key: bytes | memoryview | None, value: bytes | memoryview | None) -> ShareRecord:
    """Decode one record (CorruptRequest for bytes that do not parse)."""
    if key is None:
        raise CorruptRequest("a __share_group_state record without a key")
    r = Reader(key)
    kind = r.int16()
    if kind not in _TYPES:
        raise CorruptRequest(f"unknown __share_group_state key version {kind}")
    k = record_spec(_TYPES[kind] + "Key").decode(0, r)
    if value is None:
        return ShareRecord(kind, k.group_id, k.topic_id, k.partition, None)
    r = Reader(value)
    version = r.int16()
    spec = record_spec(_TYPES[kind] + "Value")
    if not spec.valid[0] <= version <= spec.valid[1]:
        raise CorruptRequest(f"unknown {spec.name} version {version}")
    return ShareRecord(kind, k.group_id, k.topic_id, k.partition, spec.decode(version, r))

"""The records of ``__transaction_state``, in Kafka's own format.

A record's key is an int16 version (0) followed by TransactionLogKey (the transactional
id); its value an int16 version (0, or 1: flexible, with tagged fields) followed by
TransactionLogValue, or null: a tombstone, written when an expired transactional id is
removed. The codecs are compiled from Kafka's JSON definitions (``coordinator_records/``)
by :mod:`brokkr.core.protocol.schema`, so what Kafka wrote decodes and re-encodes byte
for byte.
"""

from __future__ import annotations

import functools
import struct
from importlib import resources
from typing import Any, NamedTuple

from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.primitives import Reader, Writer
from brokkr.core.protocol.schema import MessageSpec, compile_message

KEY_VERSION = 0
#: TransactionLogValue version written: 0, as Kafka writes for clients without KIP-890 part 2.
VALUE_VERSION = 0


@functools.cache
def record_spec(name: str) -> MessageSpec:
    """The compiled definition ``coordinator_records/<name>.json`` (once per process)."""
    return compile_message(resources.files(__package__).joinpath("coordinator_records", f"{name}.json").read_text())


class TxnLogRecord(NamedTuple):
    """One decoded record: the transactional id, the value's version and struct (both None
    for a tombstone)."""

    transactional_id: str
    value_version: int | None
    value: Any | None


def _read(spec: MessageSpec, data: bytes | memoryview) -> tuple[int, Any]:
    r = Reader(data)
    version = r.int16()
    if not spec.valid[0] <= version <= spec.valid[1]:
        raise CorruptRequest(f"unknown {spec.name} version {version}")
    msg = spec.decode(version, r)
    if r.remaining:
        raise CorruptRequest(f"{r.remaining} unexpected trailing bytes after {spec.name} v{version}")
    return version, msg


def decode_record(key: bytes | memoryview | None, value: bytes | memoryview | None) -> TxnLogRecord:
    """Decode one record (CorruptRequest for bytes that do not parse)."""
    if key is None:
        raise CorruptRequest("a __transaction_state record without a key")
    _, key_struct = _read(record_spec("TransactionLogKey"), key)
    if value is None:
        return TxnLogRecord(key_struct.transactional_id, None, None)
    version, value_struct = _read(record_spec("TransactionLogValue"), value)
    return TxnLogRecord(key_struct.transactional_id, version, value_struct)


# Every state change writes a record: its key (version 0) and a value of version 0 (not
# flexible) are packed here, field by field as the generic encoder writes them
# (tests/test_transactions_recovery.py compares them).
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")  # version 0, producer id and epoch, timeout, status
_VALUE_TAIL = struct.Struct(">qq")  # last update and start timestamps


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(data)) + data


def encode_value(value: Any, version: int = VALUE_VERSION) -> bytes:
    if version == 0:
        return _encode_value_v0(value)
    w = Writer()
    w.int16(version)
    return bytes(record_spec("TransactionLogValue").encode(version, value, w).buf)


def _encode_value_v0(value: Any) -> bytes:
    out = [
        _VALUE_HEAD.pack(
            0, value.producer_id, value.producer_epoch, value.transaction_timeout_ms, value.transaction_status
        )
    ]
    partitions = value.transaction_partitions
    out.append(_I32.pack(-1 if partitions is None else len(partitions)))
    for p in partitions or ():
        topic = p.topic.encode()
        ids = p.partition_ids
        out += (_I16.pack(len(topic)), topic, struct.pack(f">i{len(ids)}i", len(ids), *ids))
    out.append(_VALUE_TAIL.pack(value.transaction_last_update_timestamp_ms, value.transaction_start_timestamp_ms))
    return b"".join(out)


def value_struct(**fields: Any) -> Any:
    return record_spec("TransactionLogValue").cls(**fields)


def partitions_struct(topic: str, partition_ids: list[int]) -> Any:
    return record_spec("TransactionLogValue").struct("PartitionsSchema")(topic=topic, partition_ids=partition_ids)

"""__consumer_offsets records in Kafka's format: what a Kafka broker wrote decodes and
re-encodes byte for byte; offsets and tombstones round-trip; bad bytes are refused."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.records import read_all_records
from brokkr.plugins.groups.offsets import OffsetAndMetadata, offset_key, offset_value
from brokkr.plugins.groups.records import decode_record, encode_key, encode_value, record_spec

FIXTURES = Path(__file__).parent / "fixtures" / "kafka-logs"


@pytest.mark.parametrize("partition, count, group", [(29, 45, "schema-registry"), (37, 44, "compose-connect-group")])
def test_kafka_written_group_records_reencode_byte_for_byte(partition, count, group):
    log = FIXTURES / f"__consumer_offsets-{partition}" / "00000000000000000000.log"
    records = read_all_records(log.read_bytes())
    assert len(records) == count
    decoded = [decode_record(r.key, r.value) for r in records]
    for record, d in zip(records, decoded, strict=True):
        assert encode_key(d.key_version, d.key) == record.key
        assert record.value is None or encode_value(d.type, d.value_version, d.value) == record.value
    assert {d.type for d in decoded} == {"GroupMetadata"} and {d.key.group for d in decoded} == {group}
    last = decoded[-1].value
    assert last is None or last.protocol_type in ("sr", "connect")


@pytest.mark.parametrize("value_version", [1, 3, 4])
def test_an_offset_commit_round_trips_and_a_tombstone_has_no_value(value_version):
    key_cls, value_cls = record_spec("OffsetCommitKey").cls, record_spec("OffsetCommitValue").cls
    key = encode_key(1, key_cls(group="g", topic="t", partition=3))
    value = encode_value(
        "OffsetCommit", value_version, value_cls(offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000)
    )
    record = decode_record(key, value)
    assert (record.type, record.key.group, record.key.topic, record.key.partition) == ("OffsetCommit", "g", "t", 3)
    assert (record.value_version, record.value.offset, record.value.metadata) == (value_version, 42, "m")
    assert value[:2] == value_version.to_bytes(2, "big") and key[:2] == b"\x00\x01"
    tombstone = decode_record(key, None)
    assert tombstone.value is None and tombstone.key.partition == 3


@pytest.mark.parametrize(
    "key, value",
    [
        (b"\x00\x63\x00\x01g", None),  # key version 99: no such record type
        (b"\x00\x02\x00\x05gr", None),  # a group id longer than the key
        (b"\x00\x02\x00\x01g\x00", None),  # trailing bytes
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x01", b"\x00\x09" + bytes(20)),  # value version 9
    ],
)
def test_bad_record_bytes_are_refused(key, value):
    with pytest.raises(CorruptRequest):
        decode_record(key, value)


def test_offset_commit_records_are_written_as_the_generic_encoder_writes_them():
    """Every commit's records are packed by hand (plugins/groups/offsets.py): the same bytes
    as the codec compiled from Kafka's JSON, with and without an expiry."""
    key_cls, value_cls = record_spec("OffsetCommitKey").cls, record_spec("OffsetCommitValue").cls
    rng = random.Random(3)
    for _ in range(200):
        group, topic, partition = rng.choice(["", "g", "grüppe"]), rng.choice(["t", "tópic"]), rng.randint(0, 1 << 30)
        assert offset_key(group, topic, partition) == encode_key(
            1, key_cls(group=group, topic=topic, partition=partition)
        )
        o = OffsetAndMetadata(
            rng.choice([-1, 0, 1 << 60]),
            rng.choice([-1, 5]),
            rng.choice(["", "métadata"]),
            rng.randint(0, 1 << 42),
            rng.choice([None, rng.randint(0, 1 << 42)]),
        )
        version = 3 if o.expire_timestamp is None else 1
        fields = dict(offset=o.offset, metadata=o.metadata, commit_timestamp=o.commit_timestamp)
        if version == 3:
            fields["leader_epoch"] = o.leader_epoch
        else:
            fields["expire_timestamp"] = o.expire_timestamp
        assert offset_value(o) == encode_value("OffsetCommit", version, value_cls(**fields))

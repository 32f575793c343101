"""OffsetCommit's request decoder and response encoder, written out for versions 2-9.

A consumer commits after every poll (librdkafka's and the Java client's auto-commit, or
each ``commit()``), so OffsetCommit comes right after Produce and Fetch in how often a
broker answers it, and the generic codec (:mod:`brokkr.core.protocol.schema`: a closure
per field, a dict per struct) was a fifth of a commit's cost. These two functions do what
the generic codec does for OffsetCommit 2-9, field by field in Kafka's order, with the
same bounds checks (a :class:`Reader`), the same objects and the same errors;
tests/test_offset_commit_codec.py compares them with the generic codec over every version.
Other versions are left to the generic codec (``decode_request`` and ``encode_response``
answer None and False).
"""

from __future__ import annotations

import struct

from ..errors import CorruptRequest
from .primitives import Reader, Writer
from .schema import load_message

KEY = 8
MIN_VERSION, MAX_VERSION = 2, 9
FLEXIBLE_VERSION = 8

_REQ = load_message("OffsetCommitRequest")
_Request = _REQ.cls
_Topic = _REQ.struct("OffsetCommitRequestTopic")
_Partition = _REQ.struct("OffsetCommitRequestPartition")

_I32 = struct.Struct(">i")
_OFFSET = struct.Struct(">iqi")  # partition index, committed offset, committed leader epoch
_PARTITION = struct.Struct(">ih")  # index, error code
_PARTITION_FLEXIBLE = struct.Struct(">ihB")  # and no tagged fields


def _string(r: Reader, flexible: bool, name: str) -> str:
    s = r.string(flexible)
    if s is None:
        raise CorruptRequest(f"non-nullable field {name} was serialized as null")
    return s


def _count(r: Reader, flexible: bool, name: str) -> int:
    n = r.count(flexible)
    if n < 0:
        raise CorruptRequest(f"non-nullable field {name} was serialized as null")
    return n


def decode_request(version: int, r: Reader):
    """An OffsetCommitRequest of ``version`` from ``r``, as the generic decoder builds it;
    None (``r`` untouched) for a version outside 2-9."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        return None
    flexible = version >= FLEXIBLE_VERSION
    if flexible:
        common = _decode_common(r)
        if common is not None:
            return common
    request = {
        "group_id": _string(r, flexible, "GroupId"),
        "generation_id_or_member_epoch": r.int32(),
        "member_id": _string(r, flexible, "MemberId"),
    }
    if version >= 7:
        request["group_instance_id"] = r.string(flexible)
    if version <= 4:
        request["retention_time_ms"] = r.int64()
    topics = []
    for _ in range(_count(r, flexible, "Topics")):
        name = _string(r, flexible, "Name")
        partitions = []
        for _ in range(_count(r, flexible, "Partitions")):
            index = r.int32()
            offset = r.int64()
            epoch = r.int32() if version >= 6 else -1
            partitions.append(
                _Partition(
                    partition_index=index,
                    committed_offset=offset,
                    committed_leader_epoch=epoch,
                    committed_metadata=r.string(flexible),
                )
            )
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
        topics.append(_Topic(name=name, partitions=partitions))
    if flexible:
        r.skip_tagged_fields()
    return _Request(topics=topics, **request)


def _decode_common(r: Reader):
    """A flexible request (v8-9) as clients send it, read without a method call per field:
    one-byte string lengths and counts, no tagged fields. None (``r`` untouched) for
    anything else, which the field-by-field decoder then reads or refuses."""
    buf, pos, end = r.buf, r.pos, r.end
    try:
        n = buf[pos]  # the group id: a compact string, length + 1
        if not 0 < n < 0x80:
            return None
        group_id = str(buf[pos + 1 : pos + n], "utf-8")
        pos += n
        generation = _I32.unpack_from(buf, pos)[0]
        pos += 4
        n = buf[pos]  # the member id
        if not 0 < n < 0x80:
            return None
        member_id = str(buf[pos + 1 : pos + n], "utf-8")
        pos += n
        n = buf[pos]  # the group instance id, nullable
        if n >= 0x80:
            return None
        instance_id = str(buf[pos + 1 : pos + n], "utf-8") if n else None
        pos += max(n, 1)
        n_topics = buf[pos]
        pos += 1
        if not 0 < n_topics < 0x80:
            return None
        topics = []
        for _ in range(n_topics - 1):
            n = buf[pos]
            if not 0 < n < 0x80:
                return None
            name = str(buf[pos + 1 : pos + n], "utf-8")
            n_partitions = buf[pos + n]
            pos += n + 1
            if not 0 < n_partitions < 0x80:
                return None
            partitions = []
            for _ in range(n_partitions - 1):
                index, offset, epoch = _OFFSET.unpack_from(buf, pos)
                n = buf[pos + _OFFSET.size]
                pos += _OFFSET.size
                if n >= 0x80 or buf[pos + max(n, 1)]:
                    return None  # a long metadata, or tagged fields after it
                metadata = str(buf[pos + 1 : pos + n], "utf-8") if n else None
                pos += max(n, 1) + 1
                partitions.append(
                    _Partition(
                        partition_index=index,
                        committed_offset=offset,
                        committed_leader_epoch=epoch,
                        committed_metadata=metadata,
                    )
                )
            if buf[pos]:
                return None
            pos += 1
            topics.append(_Topic(name=name, partitions=partitions))
        if buf[pos]:
            return None
        pos += 1
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    if pos > end:
        return None
    r.pos = pos
    return _Request(
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=topics,
    )


def encode_response(version: int, response, w: Writer) -> bool:
    """Write an OffsetCommitResponse of ``version`` to ``w`` as the generic encoder would;
    False (nothing written) for a version outside 2-9."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        return False
    flexible = version >= FLEXIBLE_VERSION
    buf = w.buf
    if version >= 3:
        buf += _I32.pack(response.throttle_time_ms)
    w.length(len(response.topics), flexible)
    for t in response.topics:
        w.string(t.name, flexible)
        w.length(len(t.partitions), flexible)
        if flexible:
            for p in t.partitions:
                buf += _PARTITION_FLEXIBLE.pack(p.partition_index, p.error_code, 0)
            buf.append(0)
        else:
            for p in t.partitions:
                buf += _PARTITION.pack(p.partition_index, p.error_code)
    if flexible:
        buf.append(0)
    return True

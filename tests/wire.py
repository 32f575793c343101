"""Request bodies for raw-socket tests, built with brokkr's own codecs."""

from __future__ import annotations

import time

import zstandard
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import build_batch, encode_batch, encode_record

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, INIT_PRODUCER_ID = 0, 1, 2, 3, 18, 19, 22
OFFSET_FOR_LEADER_EPOCH, DELETE_TOPICS, CREATE_PARTITIONS = 23, 20, 37


def produce_body(
    topic: str, records: bytes | None, acks: int = 1, partition: int = 0, timeout_ms: int = 5000, topic_id=None
):
    spec = request_spec(PRODUCE)
    pd = spec.struct("PartitionProduceData")(index=partition, records=records)
    td = spec.struct("TopicProduceData")(name=topic, partition_data=[pd])
    if topic_id is not None:
        td.topic_id = topic_id
    return spec.cls(acks=acks, timeout_ms=timeout_ms, topic_data=[td])


def fetch_body(
    topic: str,
    offset: int = 0,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 52428800,
    partition_max_bytes: int = 1048576,
    topic_id=None,
):
    spec = request_spec(FETCH)
    fp = spec.struct("FetchPartition")(
        partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes
    )
    ft = spec.struct("FetchTopic")(topic=topic, partitions=[fp])
    if topic_id is not None:
        ft.topic_id = topic_id
    return spec.cls(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes, topics=[ft])


def metadata_body(*topics: str, auto_create: bool = True):
    spec = request_spec(METADATA)
    return spec.cls(
        topics=[spec.struct("MetadataRequestTopic")(name=t) for t in topics], allow_auto_topic_creation=auto_create
    )


def list_offsets_body(topic: str, timestamp: int, partition: int = 0):
    spec = request_spec(LIST_OFFSETS)
    p = spec.struct("ListOffsetsPartition")(partition_index=partition, timestamp=timestamp)
    return spec.cls(replica_id=-1, topics=[spec.struct("ListOffsetsTopic")(name=topic, partitions=[p])])


def init_producer_id_body(
    transactional_id: str | None = None, producer_id: int = -1, producer_epoch: int = -1, timeout_ms: int = 60000
):
    return request_spec(INIT_PRODUCER_ID).cls(
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
    )


def batch(n: int = 1, timestamp: int = 1_700_000_000_000, value: bytes = b"value") -> bytes:
    return build_batch([(b"key-%d" % i, value) for i in range(n)], timestamp=timestamp)


def records_section(*offset_deltas: int) -> bytes:
    """An uncompressed records section of a record per offset delta (keys ``k0``, ``k1``,
    ..., values ``v0``, ``v1``, ...), the deltas in order or not."""
    return b"".join(encode_record(delta, 0, b"k%d" % i, b"v%d" % i) for i, delta in enumerate(offset_deltas))


#: The smallest record: length 6, attributes, timestamp and offset deltas 0, null key and value.
EMPTY_RECORD = bytes([12, 0, 0, 0, 1, 1, 0])
ZSTD = 4


def compressed_batch(compressed: bytes, record_count: int, codec: int) -> bytes:
    """A batch of already compressed records (no producer id), timestamped now."""
    now = int(time.time() * 1000)
    return encode_batch(
        compressed,
        record_count=record_count,
        attributes=codec,
        base_timestamp=now,
        max_timestamp=now,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
    )


def empty_records_batch(count: int, declared: int | None = None) -> bytes:
    """A zstd batch of ``count`` empty records (every offset delta 0, so it is rebuilt),
    claiming ``declared`` records if given: a few hundred bytes for a million records."""
    return compressed_batch(zstandard.ZstdCompressor().compress(EMPTY_RECORD * count), declared or count, ZSTD)


def offset_for_leader_epoch_body(topic: str, leader_epoch: int, current_leader_epoch: int = -1, partition: int = 0):
    spec = request_spec(OFFSET_FOR_LEADER_EPOCH)
    p = spec.struct("OffsetForLeaderPartition")(
        partition=partition, current_leader_epoch=current_leader_epoch, leader_epoch=leader_epoch
    )
    return spec.cls(replica_id=-1, topics=[spec.struct("OffsetForLeaderTopic")(topic=topic, partitions=[p])])


SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79


def acks(first: int, last: int, *types: int):
    """One ShareFetch/ShareAcknowledge AcknowledgementBatch (types: one, or one per offset)."""
    return request_spec(SHARE_FETCH).struct("AcknowledgementBatch")(
        first_offset=first, last_offset=last, acknowledge_types=list(types)
    )


def share_fetch_body(
    group: str,
    member: str,
    epoch: int,
    topic_id,
    partition: int = 0,
    ack_batches: list | None = None,
    max_records: int = 500,
    max_wait_ms: int = 0,
    acquire_mode: int = 0,
    fetch: bool = True,
):
    """A ShareFetch of one partition (with acknowledgements of it); ``fetch=False`` names no partition."""
    spec = request_spec(SHARE_FETCH)
    p = spec.struct("FetchPartition")(partition_index=partition, acknowledgement_batches=ack_batches or [])
    topics = [spec.struct("FetchTopic")(topic_id=topic_id, partitions=[p])] if fetch or ack_batches else []
    return spec.cls(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=max_records,
        batch_size=max_records,
        share_acquire_mode=acquire_mode,
        topics=topics,
        forgotten_topics_data=[],
    )


def share_acknowledge_body(group: str, member: str, epoch: int, topic_id, ack_batches: list, partition: int = 0):
    spec = request_spec(SHARE_ACKNOWLEDGE)
    p = spec.struct("AcknowledgePartition")(partition_index=partition, acknowledgement_batches=ack_batches)
    return spec.cls(
        group_id=group,
        member_id=member,
        share_session_epoch=epoch,
        topics=[spec.struct("AcknowledgeTopic")(topic_id=topic_id, partitions=[p])],
    )

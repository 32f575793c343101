"""The storage contract: what a storage backend is to the rest of the broker.

A storage plugin's ``brokkr_open_storage`` returns one :class:`Storage` per broker (Kafka's
``LogManager``); it keeps the topic catalog and opens one :class:`PartitionLog` per
partition (Kafka's ``UnifiedLog``). The core assigns offsets (patching each batch header)
before it calls :meth:`PartitionLog.append`, so a log stores bytes it is given and answers
reads; it never parses requests. :mod:`brokkr.core.storage_contract` is the test suite
every backend must pass, shipped so third-party backends can run it too.
"""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from .errors import BrokkrError, ErrorCode
from .protocol.records import HEADER_SIZE, BatchHeader, Record, decode_records

if TYPE_CHECKING:
    from .config import TopicConfig
    from .validation import Codec


#: How long opening logs may hold the event loop in one turn: a topic created or grown
#: (:meth:`~brokkr.core.broker.Broker.create_topic_in_turns`), a cluster broker's new
#: replicas (:meth:`~brokkr.core.replication.ReplicaManager.apply`). Other requests are
#: served between turns.
OPEN_TURN_S = 0.002


class OffsetOutOfRange(BrokkrError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


@attrs.frozen
class SegmentInfo:
    """One segment: its offset range [base_offset, next_offset), size and largest timestamp.

    ``path`` names the segment's file for backends that have one (sinks read it)."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int = -1
    path: str | None = None


@attrs.define  # not frozen: a frozen class's __init__ costs three times as much, once a partition
class AppendInfo:
    """What one append stored (one per partition batch); not changed after.

    ``duplicate`` marks a producer's retry of a batch already in the log
    (:mod:`brokkr.core.producer_state`): nothing was stored, and the offsets and max
    timestamp are those of the original batch.

    ``flushed`` is set by a log that fsyncs this append off the event loop because the
    topic asks it to (``flush.messages`` reached): a ``concurrent.futures.Future`` done
    once the records are on disk (failed if the fsync failed). The broker moves the high
    watermark and answers the produce only then, as Kafka flushes before it answers."""

    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    size: int
    rolled: SegmentInfo | None = None
    duplicate: bool = False
    flushed: Future | None = None


@attrs.frozen
class TimestampOffset:
    offset: int
    timestamp: int


@attrs.frozen
class StoredTopic:
    """A topic as the catalog keeps it: ``configs`` are its overrides, as strings."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = attrs.field(factory=dict)


def batch_records(buf: bytes | memoryview, header: BatchHeader, codecs: dict[int, Codec]) -> list[Record]:
    """The records of one stored batch (decompressed): for backends answering timestamp
    lookups, never for the produce or fetch path."""
    payload = memoryview(buf)[header.position + HEADER_SIZE : header.end]
    if header.codec:
        payload = codecs[header.codec].decompress(payload)
    return decode_records(header, payload)


@runtime_checkable
class PartitionLog(Protocol):
    """One partition's log. All offsets are absolute."""

    @property
    def log_start_offset(self) -> int:
        """The first offset still held."""

    @property
    def log_end_offset(self) -> int:
        """One past the last offset appended."""

    def append(
        self,
        records: bytearray | memoryview,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        record_count: int,
    ) -> AppendInfo:
        """Store ``records`` (whole batches, offsets already assigned, first at
        ``log_end_offset``): a bytearray, or a memoryview of the request buffer they
        arrived in (no copy was made). The buffer is reused once the request is answered:
        a log that keeps records in memory keeps a copy (``bytes(records)``). Return what was stored, with
        ``rolled`` set if the append closed a segment."""

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        """Whole batches from the one containing ``offset``, stopping before
        ``max_offset`` (the high watermark) and within ``max_bytes``; with ``min_one``
        the first batch is returned even when larger than ``max_bytes`` (KIP-74).
        A read may stop at a segment's end. Raise :class:`OffsetOutOfRange` outside
        [log_start_offset, log_end_offset]."""

    # Optional: ``read_region(offset, max_bytes, max_offset, min_one) -> FileRegion |
    # bytes | None`` chooses the same batches as ``read`` (same arguments, same
    # OffsetOutOfRange) but answers where they lie in a file
    # (:class:`brokkr.core.file_region.FileRegion`, with a descriptor of its own) instead
    # of their bytes, or None when ``read`` would return b"". It may answer the bytes
    # themselves for a few (``file_region.MIN_BYTES``). Fetch sends regions with
    # sendfile; storages without files leave it out.

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after the log start with a timestamp >= ``timestamp``,
        or None."""

    def max_timestamp(self) -> TimestampOffset | None:
        """The record with the largest timestamp (the earliest such), or None if empty."""

    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first; the last one is the active segment."""

    def delete_before(self, offset: int) -> None:
        """Advance the log start offset to ``offset`` (DeleteRecords, retention), dropping
        every segment that lies wholly below it. Never moves backwards; the caller keeps
        ``offset`` at or below the high watermark. At the log end offset every record goes,
        the active segment's too: the log starts a new, empty segment there (Kafka's roll
        in ``deleteSegments``), which retention relies on to empty a partition whose only
        segment is too old."""

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset``, which must fall on a batch
        boundary; the log end offset becomes ``offset``. Producer snapshots above it go too."""

    def write_producer_snapshot(self, offset: int, data: bytes) -> None:
        """Keep ``data``, the partition's producer state as of ``offset`` (the log end
        offset when the core writes it; Kafka's ``.snapshot`` bytes, encoded and decoded by
        :mod:`brokkr.core.producer_state`). Written atomically, replacing one at the same
        offset; a log keeps at least the two newest, so that one is left after a
        truncation below the newest."""

    def latest_producer_snapshot(self) -> tuple[int, bytes] | None:
        """The newest producer snapshot at or below the log end offset, as ``(offset,
        data)``, or None."""

    def close(self) -> None:
        """Flush and release resources; data stays."""

    def delete(self) -> None:
        """Remove the partition's data, producer snapshots included (its topic was deleted)."""


@runtime_checkable
class Storage(Protocol):
    """A broker's storage: the topic catalog plus one log per partition."""

    #: Whether logs and the catalog survive a restart.
    durable: bool
    # Optional: a storage that keeps partitions in files lists its directories as ``dirs``
    # (DescribeLogDirs reports each, empty or not; segment paths say which holds what).

    def load_topics(self) -> list[StoredTopic]:
        """The topics kept from earlier runs, once their logs are recovered."""

    def save_topics(self, topics: list[StoredTopic]) -> None:
        """Persist the catalog; called before a new topic's logs are opened (a listed topic
        whose logs are missing gets them from :meth:`open_log` at the next start), after a
        deletion, and after every change of a topic's settings or partition count."""

    def open_log(self, topic: StoredTopic, partition: int, config: TopicConfig) -> PartitionLog:
        """Open (creating if needed) the log of one partition."""

    def read_state(self, name: str) -> str | None:
        """A small broker-level metadata document written by :meth:`write_state` (e.g.
        ``producer-ids``, the next block of producer ids), or None if there is none."""

    def write_state(self, name: str, text: str) -> None:
        """Keep the document ``name`` (lowercase letters and dashes) durably, if the
        storage is durable, and atomically: after a crash :meth:`read_state` returns the
        old text or the new one, never a mix."""

    def checkpoint(self) -> Future | None:
        """Persist what makes the next start fast (recovery points, log start offsets).
        Called every ``log.flush.offset.checkpoint.interval.ms`` on the event loop: a
        storage that writes the files off the loop returns a future of that work, which
        the broker awaits before its next maintenance task."""

    def close(self) -> None:
        """Called once after every log is closed: the final checkpoint; the next start is
        a clean one."""

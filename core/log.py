"""The storage contract: what a partition log is to the rest of the broker.

A storage plugin's ``brokkr_open_log`` returns an object satisfying
:class:`PartitionLog`. The core assigns offsets (patching each batch header) before it
calls :meth:`PartitionLog.append`, so a log stores bytes it is given and answers reads;
it never parses requests. ``brokkr.core.testing.LogContract`` (shipped with the package)
is the test suite every backend must pass.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

from .errors import BrokkrError, ErrorCode


class OffsetOutOfRange(BrokkrError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


@attrs.frozen
class AppendInfo:
    """What one append stored (one per partition batch)."""

    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    size: int
    rolled: SegmentInfo | None = None


@attrs.frozen
class SegmentInfo:
    """A closed segment: its offset range and size."""

    base_offset: int
    next_offset: int
    size: int
    path: str | None = None


@attrs.frozen
class TimestampOffset:
    offset: int
    timestamp: int


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
        self, records: bytearray, first_offset: int, last_offset: int, max_timestamp: int, record_count: int
    ) -> AppendInfo:
        """Store ``records`` (whole batches, offsets already assigned, first at
        ``log_end_offset``). The log owns ``records`` from here on: the core never touches
        it again, so it may be kept without copying. Return what was stored, with
        ``rolled`` set if the append closed a segment."""

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        """Whole batches from the one containing ``offset``, stopping before
        ``max_offset`` (the high watermark) and within ``max_bytes``; with ``min_one``
        the first batch is returned even when larger than ``max_bytes`` (KIP-74).
        Raise :class:`OffsetOutOfRange` outside [log_start_offset, log_end_offset]."""

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record with a timestamp >= ``timestamp``, or None."""

    def max_timestamp(self) -> TimestampOffset | None:
        """The record with the largest timestamp (the earliest such), or None if empty."""

    def close(self) -> None:
        """Release resources; data stays."""

    def delete(self) -> None:
        """Remove the partition's data (its topic was deleted)."""

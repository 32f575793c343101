"""One segment: a ``.log`` file of record batches and its two indexes (Kafka's LogSegment).

Batches are stored exactly as they arrive (offsets and leader epoch already assigned),
and served to fetches as file bytes. Per appended batch, as Kafka's ``LogSegment.append``:
the segment's largest timestamp (and the offset carrying it) is updated; once more than
``index.interval.bytes`` have been written since the last index entry, the batch gets an
offset index entry and the time index gets the largest timestamp so far (only if it
grew).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from brokkr.core import file_region
from brokkr.core.errors import CorruptRequest
from brokkr.core.file_region import FileRegion
from brokkr.core.log import TimestampOffset, batch_records
from brokkr.core.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    iter_batches_untrusted,
)
from crc32c import crc32c

from .files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_file
from .index import INT32_MAX, CorruptIndex, OffsetIndex, TimeIndex
from .txn_index import TransactionIndex

log = logging.getLogger("brokkr.storage")

_START = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
_LAST_DELTA_AT = 23
_MAX_TIMESTAMP_AT = 35
#: base offset, batch length, last offset delta and max timestamp, in one read
_INDEXED = struct.Struct(">qi11xi8xq")
SCAN_CHUNK = 1 << 20  # recovery and timestamp scans read this much at a time
# A header walk (offset lookups, fetch regions) reads this much from a batch's start: the
# headers of many small batches at once, or one large batch's header for a small read.
HEADER_CHUNK = 4 << 10


def scan_batches(
    fd: int, start: int, end: int, chunk: int = SCAN_CHUNK
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """(file position, header, buffer) for each whole batch of the file ``fd`` in
    [``start``, ``end``), read ``chunk`` bytes at a time (more for a larger batch); header
    positions are within the buffer. Stops at a partial batch (a torn tail, or a file
    shorter than ``end``); raises CorruptRequest at a batch whose size or magic is impossible."""
    pos = start
    want = chunk
    while end - pos >= LOG_OVERHEAD:
        buf = memoryview(os.pread(fd, min(want, end - pos), pos))
        consumed = 0
        for h in iter_batches_untrusted(buf):
            yield pos + h.position, h, buf
            consumed = h.end
        if consumed:
            pos += consumed
            want = chunk
            continue
        if len(buf) < LOG_OVERHEAD:
            return  # the file is shorter than ``end``
        need = LOG_OVERHEAD + _START.unpack_from(buf, 0)[1]  # the first batch did not fit
        if need <= len(buf) or need > end - pos:
            return  # a torn batch at the end
        want = need


def walk_headers(fd: int, start: int, end: int, chunk: int = HEADER_CHUNK) -> Iterator[tuple[int, int, int, int]]:
    """(file position, base offset, size, last offset) of each whole batch of the file
    ``fd`` in [``start``, ``end``), reading headers only: a batch larger than ``chunk``
    costs one read of ``chunk`` bytes, not of its size, so a fetch of large batches finds
    their bounds without copying them. Stops at a partial batch; raises CorruptRequest at
    a size or magic that is impossible, as :func:`scan_batches` does."""
    pos = start
    buf = b""
    at = 0  # the file position of buf[0]
    while end - pos >= HEADER_SIZE:
        rel = pos - at
        if rel + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk, end - pos), pos)
            at, rel = pos, 0
            if len(buf) < HEADER_SIZE:
                return  # the file is shorter than ``end``
        base, length = _START.unpack_from(buf, rel)
        if length < HEADER_SIZE - LOG_OVERHEAD or buf[rel + MAGIC_OFFSET] != 2:
            raise CorruptRequest(f"record batch at {pos} has size {length} and magic {buf[rel + MAGIC_OFFSET]}")
        size = LOG_OVERHEAD + length
        if pos + size > end:
            return  # a torn batch at the end
        yield pos, base, size, base + _LAST_DELTA.unpack_from(buf, rel + _LAST_DELTA_AT)[0]
        pos += size


class LogSegment:
    def __init__(self, directory: Path, base_offset: int, index_interval: int, index_bytes: int, suffix: str = ""):
        """``suffix`` follows each file name (the log cleaner writes ``.cleaned`` segments)."""
        self.base_offset = base_offset
        self.path = segment_file(directory, base_offset, LOG_SUFFIX + suffix)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self.fd).st_size
        index_path = segment_file(directory, base_offset, INDEX_SUFFIX + suffix)
        time_index_path = segment_file(directory, base_offset, TIME_INDEX_SUFFIX + suffix)
        self.offset_index = OffsetIndex(index_path, base_offset, index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, index_bytes)
        self.txn_index = TransactionIndex(segment_file(directory, base_offset, TXN_INDEX_SUFFIX + suffix))
        self.index_interval = index_interval
        self.bytes_since_last_index_entry = 0
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.next_offset = base_offset
        self.created_ms = int(time.time() * 1000)
        #: The first batch's largest timestamp (Kafka's rollingBasedTimestamp), -1 if none.
        self.rolling_base_ms = -1
        self.active = False
        #: (leader epoch, base offset) where each run of one epoch begins, as the last
        #: :meth:`recover` found them: the log re-derives its epoch entries from these.
        #: None until recover() runs (at open: the segment's batches were re-validated).
        self.recovered_epochs: list[tuple[int, int]] | None = None

    # -- opening and closing --------------------------------------------------------------

    def load(self, recover: bool) -> int:
        """Read the segment's state from its files; rebuild the indexes when asked to
        (after an unclean shutdown), or when they are missing or fail their checks.
        Returns how many bytes of a torn or corrupt tail were truncated."""
        if not recover:
            try:
                self._load_indexes()
                return 0
            except (CorruptIndex, CorruptRequest, FileNotFoundError) as exc:
                if self.size:
                    log.warning("rebuilding the indexes of %s: %s", self.path, exc)
        return self.recover()

    def _load_indexes(self) -> None:
        self.offset_index.load_sealed()
        self.time_index.load_sealed()
        self.offset_index.sanity_check(self.size)
        last_indexed, position = self.offset_index.last()
        self.next_offset = last_indexed if self.offset_index.entries else self.base_offset
        end = position
        for at, h, _ in self._scan(position):
            self.next_offset = h.base_offset + h.last_offset_delta + 1
            end = at + h.size
        if end != self.size:
            raise CorruptIndex(f"{self.size - end} bytes follow the last whole batch")
        self.time_index.sanity_check(self.next_offset)
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last()
        if self.size:
            first = os.pread(self.fd, HEADER_SIZE, 0)
            self.rolling_base_ms = _MAX_TIMESTAMP.unpack_from(first, _MAX_TIMESTAMP_AT)[0]
        # Kafka counts bytes since the last entry from the position of that entry.
        self.bytes_since_last_index_entry = self.size - position if self.offset_index.entries else self.size

    def recover(self) -> int:
        """Re-validate every batch (size, magic, CRC-32C, offsets), truncate the log at the
        first that fails, and rebuild both indexes from what remains."""
        was_active = self.active
        for index in (self.offset_index, self.time_index):
            index.reset()
            index.open_active()
        self.bytes_since_last_index_entry = 0
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self.next_offset = self.base_offset
        self.recovered_epochs = epochs = []
        valid_end = 0
        limit = self.base_offset + INT32_MAX
        index_batch = self._index_batch
        try:
            for position, h, buf in self._scan(0):
                start, size = h.position, LOG_OVERHEAD + h.batch_length
                last = h.base_offset + h.last_offset_delta
                if (
                    crc32c(buf[start + ATTRIBUTES_OFFSET : start + size]) != h.crc
                    or h.base_offset < self.next_offset
                    or not h.base_offset <= last <= limit
                ):
                    log.warning("%s: invalid batch at position %d (offset %d)", self.path, position, h.base_offset)
                    break
                if valid_end == 0:
                    self.rolling_base_ms = h.max_timestamp
                index_batch(position, last, h.max_timestamp, size)
                if not epochs or epochs[-1][0] != h.leader_epoch:
                    epochs.append((h.leader_epoch, h.base_offset))
                self.next_offset = last + 1
                valid_end = position + size
        except CorruptRequest as exc:
            log.warning("%s: %s", self.path, exc)
        truncated = self.size - valid_end
        if truncated:
            log.warning("%s: truncating %d bytes of invalid data at position %d", self.path, truncated, valid_end)
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        if not was_active:
            self.seal()
        return truncated

    def make_active(self) -> None:
        """Map the indexes for appends (the segment became the log's last)."""
        self.offset_index.open_active()
        self.time_index.open_active()
        self.active = True

    def seal(self) -> None:
        """No more appends: record the largest timestamp in the time index (even when it
        is full) and trim both indexes, as Kafka does when a segment rolls or closes."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.offset_index.seal()
        self.time_index.seal()
        self.active = False

    def write_index(self) -> None:
        """Write the active indexes' pending entries to their files (before an fsync)."""
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def sync(self) -> None:
        """fsync the log and both indexes."""
        os.fsync(self.fd)
        self.offset_index.sync()
        self.time_index.sync()
        self.txn_index.sync()

    def close(self) -> None:
        if self.active:
            self.seal()
        os.close(self.fd)

    def paths(self) -> tuple[Path, ...]:
        """The segment's files (the ``.txnindex`` only once it has an entry)."""
        txn = (self.txn_index.path,) if self.txn_index.path.exists() else ()
        return self.path, self.offset_index.path, self.time_index.path, *txn

    def delete(self) -> list[Path]:
        """Close the segment and rename its files to ``.deleted`` (Kafka's
        ``changeFileSuffixes``), returning the new names: the caller unlinks them, off the
        event loop (unlinking a large file takes the filesystem a while). A crash before
        that leaves files the next open removes."""
        os.close(self.fd)
        for index in (self.offset_index, self.time_index):
            index.close()
        doomed = []
        for path in self.paths():
            if path.exists():
                doomed.append(path.with_name(path.name + ".deleted"))
                os.replace(path, doomed[-1])
        return doomed

    # -- appending ------------------------------------------------------------------------

    def should_roll(self, size: int, last_offset: int, max_timestamp: int, segment_bytes: int, segment_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll, for a non-empty segment. Its age, for
        segment.ms, is the incoming batch's timestamp minus the first batch's (the time
        since creation when either has none)."""
        filled = self.size
        if not filled:
            return False
        if (
            filled + size > segment_bytes
            or last_offset - self.base_offset > INT32_MAX
            or self.offset_index.is_full
            or self.time_index.is_full
        ):
            return True
        if self.rolling_base_ms >= 0 and max_timestamp >= 0:
            return max_timestamp - self.rolling_base_ms > segment_ms
        return int(time.time() * 1000) - self.created_ms > segment_ms

    def append(self, records: bytearray | memoryview | bytes) -> None:
        """Write whole batches at the end of the log and index them."""
        position = self.size
        end = len(records)
        try:
            written = os.write(self.fd, records)
            while written < end:  # a short write (a signal, a nearly full disk): the rest
                written += os.write(self.fd, memoryview(records)[written:])
        except OSError:
            os.ftruncate(self.fd, position)  # never leave half a batch behind
            raise
        self.size = position + end
        index_batch = self._index_batch
        p = 0
        while p < end:
            base, length, last_delta, max_ts = _INDEXED.unpack_from(records, p)
            if position == 0 and p == 0:
                self.rolling_base_ms = max_ts
            length += LOG_OVERHEAD
            index_batch(position + p, base + last_delta, max_ts, length)
            p += length
            self.next_offset = base + last_delta + 1

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        if self.bytes_since_last_index_entry > self.index_interval:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def moved(self, directory: Path) -> None:
        """Its directory was renamed to ``directory``: name its files there (the open
        descriptor follows the file)."""
        for holder in (self, self.offset_index, self.time_index, self.txn_index):
            holder.path = directory / holder.path.name

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a batch boundary) and rebuild the indexes."""
        position = self.translate(offset)
        if position is None:
            return
        if _START.unpack(os.pread(self.fd, LOG_OVERHEAD, position))[0] != offset:
            raise ValueError(f"offset {offset} is not a batch boundary of {self.path}")
        os.ftruncate(self.fd, position)
        self.size = position
        self.txn_index.truncate(offset)
        self.recover()

    # -- reading --------------------------------------------------------------------------

    def _scan(self, start: int, chunk: int = SCAN_CHUNK) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        return scan_batches(self.fd, start, self.size, chunk)

    def translate(self, offset: int) -> int | None:
        """File position of the batch holding ``offset``; None if the segment ends before it."""
        indexed, start = self.offset_index.lookup(offset)
        if start and not self._batch_at(start, indexed):
            log.warning(
                "%s: offset index entry for %d does not match the log; scanning from the start", self.path, offset
            )
            start = 0
        for position, _, _, last in walk_headers(self.fd, start, self.size):
            if last >= offset:
                return position
        return None

    def _batch_at(self, position: int, last_offset: int) -> bool:
        """Whether a batch ending at ``last_offset`` starts at ``position`` (as an offset
        index entry claims)."""
        head = os.pread(self.fd, HEADER_SIZE, position)
        return (
            len(head) == HEADER_SIZE
            and head[MAGIC_OFFSET] == 2
            and _START.unpack_from(head)[0] + _LAST_DELTA.unpack_from(head, _LAST_DELTA_AT)[0] == last_offset
        )

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes | None:
        """Whole batches from the one holding ``offset``, as stored; None when the segment
        ends before ``offset``."""
        position = self.translate(offset)
        return None if position is None else self._read_at(position, max_bytes, max_offset, min_one)

    def _read_at(self, position: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        data = os.pread(self.fd, min(max(max_bytes, 0), self.size - position), position)
        end = 0
        for h in iter_batches_untrusted(data):
            if h.base_offset >= max_offset:
                break
            end = h.end
        if end == 0 and min_one:  # KIP-74: the first batch even when larger than max_bytes
            base, length = _START.unpack(os.pread(self.fd, LOG_OVERHEAD, position))
            if base < max_offset:
                return os.pread(self.fd, LOG_OVERHEAD + length, position)
        return data[:end] if end < len(data) else data

    def read_region(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> FileRegion | bytes | None:
        """:meth:`read`'s batches as a region of this file with a descriptor of its own,
        found from their headers alone; or their bytes, when they are fewer than
        ``file_region.MIN_BYTES`` (read at once when the segment holds fewer past
        ``offset``, the usual tail read). None when the segment ends before ``offset``."""
        position = self.translate(offset)
        if position is None:
            return None
        if self.size - position < file_region.MIN_BYTES:
            return self._read_at(position, max_bytes, max_offset, min_one)
        limit = position + min(max(max_bytes, 0), self.size - position)
        end, next_offset = position, offset
        for at, base, size, last in walk_headers(self.fd, position, self.size):
            if base >= max_offset:
                break
            if at + size > limit:
                if end == position and min_one:  # KIP-74: the first batch even when larger than max_bytes
                    end, next_offset = at + size, last + 1
                break
            end, next_offset = at + size, last + 1
        length = end - position
        if length < file_region.MIN_BYTES:
            return os.pread(self.fd, length, position) if length else b""
        return FileRegion.of(self.fd, position, length, next_offset)

    def find_timestamp(self, timestamp: int, start_offset: int, codecs) -> TimestampOffset | None:
        """The first record at or after ``start_offset`` with a timestamp >= ``timestamp``
        (Kafka's LogSegment.findOffsetByTimestamp)."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for _, h, buf in self._scan(position):
            if h.max_timestamp >= timestamp and h.base_offset + h.last_offset_delta >= start_offset:
                for rec in batch_records(buf, h, codecs):
                    if rec.timestamp >= timestamp and rec.offset >= start_offset:
                        return TimestampOffset(rec.offset, rec.timestamp)
        return None

    def max_timestamp_record(self, codecs) -> TimestampOffset:
        """The earliest record carrying the segment's largest timestamp."""
        position = self.translate(self.offset_of_max_timestamp)
        for _, h, buf in self._scan(position or 0):
            if h.max_timestamp == self.max_timestamp:
                for rec in batch_records(buf, h, codecs):
                    if rec.timestamp == self.max_timestamp:
                        return TimestampOffset(rec.offset, rec.timestamp)
        return TimestampOffset(self.offset_of_max_timestamp, self.max_timestamp)

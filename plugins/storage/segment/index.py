"""Kafka's sparse segment indexes: ``.index`` (offset -> file position) and ``.timeindex``
(timestamp -> offset).

Entries are big-endian and relative to the segment's base offset::

    .index       relative offset int32, position int32             (8 bytes)
    .timeindex   timestamp int64, relative offset int32           (12 bytes)

Both are ordered by their key, so a lookup is a binary search for the last entry whose
key is at most the target. The active segment's indexes are preallocated to
``segment.index.bytes`` (rounded down to whole entries), as Kafka's are; their entries are
kept in memory and written to the file (one ``pwrite``) when the segment is sealed or
flushed; an unclean shutdown rebuilds the active segment's indexes anyway. Kafka writes
through a shared memory map instead; here that costs a page fault with a block allocation
on the first write to each page of the sparse file (2.3 ms each on the development VM,
against 5 us for a pwrite), paid by every index of every new partition and every 4 KiB of
entries. A sealed segment's index is trimmed to its entries and read
only when a lookup needs it.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from .files import fsync_path

INT32_MAX = 2**31 - 1


class CorruptIndex(ValueError):
    """An index file that cannot be trusted; the segment rebuilds it from its log."""


class _Index:
    entry: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_bytes // self.entry.size, 2)
        self.entries = 0
        self._active: bytearray | None = None  # the active index's entries
        self._written = 0  # how many of them the file holds
        self._data: bytes | None = None  # a sealed index, read lazily

    # -- opening --------------------------------------------------------------------------

    def load_sealed(self) -> None:
        """Use the file as it is (a sealed segment's, trimmed to its entries)."""
        size = self.path.stat().st_size
        if size % self.entry.size:
            raise CorruptIndex(f"{self.path}: size {size} is not a multiple of {self.entry.size}")
        self.entries = size // self.entry.size
        self._data = None

    def open_active(self) -> None:
        """Preallocate the file to its maximum size and keep its valid ``entries`` in
        memory for appends and lookups (no descriptor is held: a broker of thousands of
        partitions would need three per partition)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            valid = os.pread(fd, self.entries * self.entry.size, 0)
            os.ftruncate(fd, self.max_entries * self.entry.size)
        finally:
            os.close(fd)
        self._active = bytearray(valid)
        self.entries = self._written = len(valid) // self.entry.size

    def write_pending(self) -> None:
        """Write the entries appended since the last write to the file (one ``pwrite``)."""
        if self._active is None or self._written >= self.entries:
            return
        size = self.entry.size
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, self._active[self._written * size : self.entries * size], self._written * size)
        finally:
            os.close(fd)
        self._written = self.entries

    def seal(self) -> None:
        """Write the pending entries, trim the file to its entries and keep none in memory
        (segment rolled or log closed). They stay in the page cache until the fsync the log
        queues for the sealed segment."""
        if self._active is not None:
            self.write_pending()
            os.truncate(self.path, self.entries * self.entry.size)
            self._active = None
        self._data = None

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self.entries = self._written = 0
        self._data = None
        if self._active is not None:
            del self._active[:]
        else:
            self.path.write_bytes(b"")

    def truncate_entries(self, keep: int) -> None:
        self.entries = min(self.entries, keep)
        self._written = min(self._written, self.entries)
        if self._active is not None:
            del self._active[self.entries * self.entry.size :]
        else:
            os.truncate(self.path, self.entries * self.entry.size)
            self._data = None

    def sync(self) -> None:
        """Write the entries through to disk."""
        self.write_pending()
        fsync_path(self.path)

    def close(self) -> None:
        self.seal()

    # -- reading --------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _buffer(self):
        if self._active is not None:
            return self._active
        if self._data is None:
            self._data = self.path.read_bytes()[: self.entries * self.entry.size]
        return self._data

    def __getitem__(self, i: int) -> tuple[int, int]:
        return self.entry.unpack_from(self._buffer(), i * self.entry.size)

    def _floor(self, key: int) -> int:
        """Index of the last entry whose key is <= ``key``, or -1."""
        buf, size, unpack = self._buffer(), self.entry.size, self.entry.unpack_from
        lo, hi = 0, self.entries  # invariant: entries before lo have key <= target, from hi on > target
        while lo < hi:
            mid = (lo + hi) // 2
            if unpack(buf, mid * size)[0] <= key:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _append(self, *fields: int) -> None:
        assert self._active is not None, "append to a sealed index"
        self._active += self.entry.pack(*fields)
        self.entries += 1


class OffsetIndex(_Index):
    """Offset -> position of the batch holding it (or of an earlier batch)."""

    entry = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before ``offset``; the segment start
        when none is."""
        i = self._floor(offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        rel, position = self[i]
        return self.base_offset + rel, position

    def last(self) -> tuple[int, int]:
        if not self.entries:
            return self.base_offset, 0
        rel, position = self[self.entries - 1]
        return self.base_offset + rel, position

    def entries_below(self, offset: int) -> int:
        return self._floor(offset - 1 - self.base_offset) + 1

    def sanity_check(self, log_size: int) -> None:
        """Kafka's checks, plus the bounds of the first and last entries."""
        if not self.entries:
            return
        first_rel, first_pos = self[0]
        last_rel, last_pos = self[self.entries - 1]
        if first_rel < 0 or last_rel < first_rel or (self.entries > 1 and last_rel == first_rel):
            raise CorruptIndex(f"{self.path}: entries are not in offset order")
        if not 0 <= first_pos <= last_pos < max(log_size, 1):
            raise CorruptIndex(f"{self.path}: position {last_pos} is outside the log (size {log_size})")


class TimeIndex(_Index):
    """Timestamp -> offset: an entry only when a batch raised the segment's largest
    timestamp, so timestamps only increase."""

    entry = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        """Full one entry early: the last slot is kept for the entry a segment gets when
        it is sealed."""
        return self.entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if (self.is_full and not skip_full_check) or self.entries >= self.max_entries:
            return
        if self.entries and timestamp <= self[self.entries - 1][0]:
            return
        self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry at or before ``timestamp``; (-1, base)
        when none is."""
        i = self._floor(timestamp)
        if i < 0:
            return -1, self.base_offset
        ts, rel = self[i]
        return ts, self.base_offset + rel

    def last(self) -> tuple[int, int]:
        """(largest timestamp, its offset), or (-1, base offset) when empty."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self[self.entries - 1]
        return ts, self.base_offset + rel

    def entries_below(self, offset: int) -> int:
        """How many entries point below ``offset`` (entries are in offset order too)."""
        lo, hi = 0, self.entries
        while lo < hi:
            mid = (lo + hi) // 2
            if self.base_offset + self[mid][1] < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def sanity_check(self, next_offset: int) -> None:
        if not self.entries:
            return
        first_ts, first_rel = self[0]
        last_ts, last_rel = self[self.entries - 1]
        if last_ts < first_ts or first_rel < 0 or last_rel < first_rel:
            raise CorruptIndex(f"{self.path}: entries are not in timestamp order")
        if self.base_offset + last_rel >= max(next_offset, self.base_offset + 1):
            raise CorruptIndex(f"{self.path}: offset {self.base_offset + last_rel} is past the segment's end")

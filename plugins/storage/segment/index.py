"""Kafka's sparse segment indexes: ``.index`` (offset -> file position) and ``.timeindex``
(timestamp -> offset).

Entries are big-endian and relative to the segment's base offset::

    .index       relative offset int32, position int32             (8 bytes)
    .timeindex   timestamp int64, relative offset int32           (12 bytes)

Both are ordered by their key, so a lookup is a binary search for the last entry whose
key is at most the target. The active segment's indexes are preallocated to
``segment.index.bytes`` (rounded down to whole entries) and memory-mapped; a sealed
segment's index is trimmed to its entries and read only when a lookup needs it.
"""

from __future__ import annotations

import mmap
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
        self._mmap: mmap.mmap | None = None
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
        """Preallocate the file to its maximum size and map it for appends (keeping the
        ``entries`` already valid)."""
        self._close_map()
        with open(self.path, "a+b") as f:
            f.truncate(self.max_entries * self.entry.size)
            self._mmap = mmap.mmap(f.fileno(), 0)

    def seal(self) -> None:
        """Trim the file to its entries and unmap it (segment rolled or log closed). The
        entries written through the map stay in the page cache, dirty, until the fsync the
        log queues for the sealed segment (:meth:`sync` explains why no msync)."""
        if self._mmap is not None:
            self._close_map()
            os.truncate(self.path, self.entries * self.entry.size)
        self._data = None

    def reset(self) -> None:
        """Forget every entry (before a rebuild)."""
        self.entries = 0
        self._data = None
        if self._mmap is None:
            self.path.write_bytes(b"")

    def truncate_entries(self, keep: int) -> None:
        self.entries = min(self.entries, keep)
        if self._mmap is None:
            os.truncate(self.path, self.entries * self.entry.size)
            self._data = None

    def sync(self) -> None:
        """Write the entries through to disk: an fsync of the file, which on Linux also
        writes the pages dirtied through a shared map (Linux's msync(MS_SYNC) is itself an
        fsync of the file's range). No ``mmap.flush()``: CPython 3.11 holds the GIL through its
        msync, so it would stall the event loop even when called from the flusher thread."""
        fsync_path(self.path)

    def close(self) -> None:
        self.seal()

    def _close_map(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    # -- reading --------------------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _buffer(self):
        if self._mmap is not None:
            return self._mmap
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
        assert self._mmap is not None, "append to a sealed index"
        self.entry.pack_into(self._mmap, self.entries * self.entry.size, *fields)
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

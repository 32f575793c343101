"""A file region: whole record batches a fetch sends straight from a segment file.

A storage that keeps batches in files can answer a fetch with where the batches lie
(:meth:`brokkr.core.log.PartitionLog.read_region`) instead of their bytes; the response is
then written with ``sendfile`` (:mod:`brokkr.core.responses`), and the batches never
become Python objects, as Kafka's ``FileRecords`` go to the socket with ``transferTo``.

Between the read and the send the segment may be deleted (retention, DeleteRecords, a
compaction swap, a follower's truncation) and its own descriptor closed, and the number
reused by another file. A region therefore owns a duplicate of the descriptor: the bytes
come from the file that was read, whatever happens to the segment. The duplicate shares
the file's offset with the segment's descriptor; ``sendfile`` moves it, which is harmless
because the segment appends with ``O_APPEND`` and reads with ``pread``.

The length is fixed at read time (whole batches below the high watermark, the last stable
offset or the log end) and is never more: the frame's size prefix was computed from it. A
file that has meanwhile been truncated below it (a follower truncating in place) cannot
supply it; that raises :class:`ShortRegion`, and the connection is closed rather than a
short frame corrupting its stream.

A region is closed once its response is sent, or when it cannot be (the connection failed,
the fetch waited and read again, the handler failed). The descriptor is held by a
``FileIO``, so one that escapes every path is still closed when collected (with a
ResourceWarning saying so).
"""

from __future__ import annotations

import io
import os

#: A storage answers a read of fewer bytes with the bytes themselves: copying a few
#: kilobytes costs less than a descriptor of their own and a sendfile round.
MIN_BYTES = 64 << 10


class ShortRegion(ConnectionError):
    """The file no longer holds the bytes a region promised: the connection must close."""


class FileRegion:
    """``length`` bytes at ``position`` of an open file this region owns; ``next_offset`` is
    one past the last offset of its last batch (a read_committed fetch looks up aborted
    transactions up to it without reading the batches). ``len()`` is ``length``, so the
    fetch path counts bytes alike for regions and bytes."""

    __slots__ = ("file", "position", "length", "next_offset")

    def __init__(self, fd: int, position: int, length: int, next_offset: int):
        """Take ownership of ``fd`` (a duplicate the caller made for this region)."""
        self.file = io.FileIO(fd, "rb", closefd=True)
        self.position = position
        self.length = length
        self.next_offset = next_offset

    @classmethod
    def of(cls, fd: int, position: int, length: int, next_offset: int) -> FileRegion:
        """A region of the file open as ``fd``, with a descriptor of its own."""
        dup = os.dup(fd)
        try:
            return cls(dup, position, length, next_offset)
        except BaseException:
            os.close(dup)
            raise

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileRegion({self.file.name}, position={self.position}, length={self.length})"

    def read(self, skip: int = 0) -> bytes:
        """The region's bytes after the first ``skip`` (for transports that cannot
        ``sendfile``, e.g. TLS, and for callers that want bytes). Raises ShortRegion."""
        want = self.length - skip
        data = os.pread(self.file.fileno(), want, self.position + skip)
        if len(data) < want:
            raise ShortRegion(f"{self!r}: the file holds {len(data)} of {want} bytes")
        return data

    def close(self) -> None:
        self.file.close()

    @property
    def closed(self) -> bool:
        return self.file.closed

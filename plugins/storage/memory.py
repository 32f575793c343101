"""In-memory storage: each partition's appends held in Python lists, grouped in segments.

Selected with ``brokkr.storage=memory``. Nothing survives a restart; useful for tests,
for embedding, and as the smallest example of a storage plugin. Segments roll on
``segment.bytes`` and ``segment.ms`` as on disk, so ``brokkr_segment_rolled`` fires
exactly as it would with files.
"""

from __future__ import annotations

import bisect
import time

from brokkr.core.log import AppendInfo, OffsetOutOfRange, SegmentInfo, TimestampOffset
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.records import HEADER_SIZE, decode_records, iter_batches_untrusted


class _Segment:
    __slots__ = ("base_offset", "batches", "firsts", "lasts", "max_timestamps", "size", "created")

    def __init__(self, base_offset: int):
        self.base_offset = base_offset
        self.batches: list[bytes | bytearray] = []  # one entry per append: whole batches
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.max_timestamps: list[int] = []
        self.size = 0
        self.created = time.monotonic()


class MemoryLog:
    """One partition held in memory (satisfies :class:`brokkr.core.log.PartitionLog`)."""

    def __init__(self, config, codecs):
        self.config = config
        self.codecs = codecs
        self.segments = [_Segment(0)]
        self._start = 0
        self._end = 0

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    def append(self, records, first_offset, last_offset, max_timestamp, record_count) -> AppendInfo:
        rolled = None
        seg = self.segments[-1]
        too_big = seg.size + len(records) > self.config["segment.bytes"]
        too_old = (time.monotonic() - seg.created) * 1000 >= self.config["segment.ms"]
        if seg.batches and (too_big or too_old):
            rolled = SegmentInfo(seg.base_offset, self._end, seg.size)
            seg = _Segment(first_offset)
            self.segments.append(seg)
        # The core hands over ``records``; keep it as it is, one entry per append.
        seg.batches.append(records)
        seg.firsts.append(first_offset)
        seg.lasts.append(last_offset)
        seg.max_timestamps.append(max_timestamp)
        seg.size += len(records)
        self._end = last_offset + 1
        return AppendInfo(first_offset, last_offset, record_count, max_timestamp, len(records), rolled)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self._start}, {self._end}]")
        out: list[bytes] = []
        size = 0
        si = max(bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1, 0)
        for seg in self.segments[si:]:
            bi = bisect.bisect_left(seg.lasts, offset)
            for batch, first in zip(seg.batches[bi:], seg.firsts[bi:]):
                if first >= max_offset:
                    return b"".join(out)
                if size + len(batch) > max_bytes and not (min_one and not out):
                    return b"".join(out)
                out.append(batch)
                size += len(batch)
        return b"".join(out)

    def _batches(self):
        for seg in self.segments:
            yield from zip(seg.batches, seg.max_timestamps)

    def _records(self, entry: bytes):
        out = []
        for h in iter_batches_untrusted(entry):
            payload = memoryview(entry)[h.position + HEADER_SIZE : h.end]
            if h.codec:
                payload = self.codecs[h.codec].decompress(payload)
            out.extend(decode_records(h, payload))
        return out

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        for batch, max_ts in self._batches():
            if max_ts >= timestamp:
                for rec in self._records(batch):
                    if rec.timestamp >= timestamp and rec.offset >= self._start:
                        return TimestampOffset(rec.offset, rec.timestamp)
        return None

    def max_timestamp(self) -> TimestampOffset | None:
        best = None
        for batch, max_ts in self._batches():
            if best is None or max_ts > best[1]:
                best = (batch, max_ts)
        if best is None:
            return None
        records = self._records(best[0])
        rec = next((r for r in records if r.timestamp == best[1]), records[-1])
        return TimestampOffset(rec.offset, best[1])

    def close(self) -> None:
        pass

    def delete(self) -> None:
        self.segments = [_Segment(self._end)]
        self._start = self._end


@hookimpl(trylast=True)
def brokkr_open_log(config, broker) -> MemoryLog | None:
    if broker.config["brokkr.storage"] != "memory":
        return None
    return MemoryLog(config, broker.codecs)
